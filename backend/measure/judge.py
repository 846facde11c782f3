"""The one judge: every verdict and comparison specdeck shows (Live, History, watch, bench, fleet bench, sweeps,
Tune, reports, training) is computed here, and screens draw what it returns.

Like with like. A figure is judged against the baseline measured at the same concurrency (per stream against
per stream; a bench against the baseline's bench, a log window against the baseline's log there). Where the
baseline was not measured at that concurrency, a per-stream figure is set against the single-stream baseline and
labelled so (``/stream``): a figure, never a verdict about that concurrency. "Ahead at every concurrency" is said
only over concurrencies where a baseline was measured; the others are named ("no baseline measured at 2, 4,
8 streams: bench the baseline there").

Intervals. beats / below / met / not met only where a 95% interval clears the line (``series.clears``); else
within noise; without an interval, not enough samples, with the count it needs. Before any of that, the practical
floor (``FLOOR``, the sweep's ``TOK_S_SE_FLOOR``: two benches of one configuration differ by 2%): a figure within
it of its line is level with it, however narrow its interval, never beats or below (``judged_word``). Two benches (a
curve's level against the baseline's there; a bench against the baseline's bench at its concurrency) by the interval
of their difference, both benches' requests in it (``rate_verdict``): ahead (beats) / below only where it clears,
within noise else, with that interval as a change in percent. Against a figure with no requests (the single-stream
baseline, a baseline bench recorded before per-request rates were kept) a bench's own requests' interval judges it,
the figure taken as exact and said so. The break-even is ``breakeven.live_breakeven`` (cycle × baseline / 1000) of
the figures judged, nowhere else.

Words. One way to write a change (``pct_text``: ``+12.6%``, ``0.0%``, never ``-0%`` or ``+0.0%``) and a figure
whose concurrency is not the reader's default (``at_text``: ``60.0 @8``).

The best of a sweep is the arithmetic's on the host (``backend.agent.host.shared.advice.best``: the fastest measured
point, the points its interval does not separate it from and how many more requests a point would); this module
says it in words (``best_sentence``).

Lengths. A bench is judged by its own requests (Student's t over them), a run with under 20 log seconds by its
bench's requests; what a bench or a sweep of a given length can judge is said before it starts (``bench_scope``,
``sweep_scope``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from backend.agent.host.shared.expect import BENCH_FLOOR, BenchNoise
from backend.agent.host.shared.measured_points import TOK_S_SE_FLOOR, Z, t975
from backend.history.summary import Level, Rate, RunSummary, Yardstick, finished_requests
from backend.measure.breakeven import live_breakeven
from backend.measure.series import BATCHES, Stats, clears, interval95, requests_interval

# --- words and figures -------------------------------------------------------------------------------------


def pct(value: float, base: float) -> float:
    """The change of ``value`` against ``base``, in percent."""
    return 100.0 * (value / base - 1.0)


def pct_text(change: float | None, digits: int = 1) -> str:
    """``+12.6%`` / ``-5.4%``; a change that rounds to nothing is ``0.0%`` (never ``-0%`` nor ``+0.0%``)."""
    if change is None:
        return "—"
    shown = round(change, digits)
    if shown == 0:
        return f"{0:.{digits}f}%"
    return f"{shown:+.{digits}f}%"


def at_text(value: float | None, streams: int | None, digits: int = 1) -> str:
    """``60.0 @8``: a figure with the concurrency it was measured at (one stream: the figure alone)."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}" + (f" @{streams}" if streams and streams > 1 else "")


# A difference too small to matter: two benches of one configuration differ by this much (the sweep's floor).
FLOOR = TOK_S_SE_FLOOR
LEVEL = "level with"


def floor_text() -> str:
    """``within 2%``: what ``level with`` means."""
    return f"within {100 * FLOOR:.0f}%"


def inside_floor(value: float, line: float) -> bool:
    """Whether ``value`` is within the practical floor of ``line``: a difference too small to matter."""
    return line > 0 and abs(value / line - 1.0) < FLOOR


def levels_text(levels: Iterable[int]) -> str:
    """``2, 4, 8``."""
    return ", ".join(str(n) for n in sorted(levels))


# --- which baseline judges a figure ------------------------------------------------------------------------


@dataclass(frozen=True)
class Versus:
    """A per-stream figure against the baseline that judges it: measured at the same concurrency (``streams``)
    or, where none was, the single-stream baseline (``streams`` None: a figure, not a verdict about that
    concurrency). ``own``: the figure is the baseline's own run, which is the baseline, never +0% against it."""

    value: float  # the figure judged, per stream
    baseline: float  # what it is judged against, per stream
    streams: int | None  # the concurrency both were measured at; None: against the single-stream baseline
    basis: str  # what was compared, in words
    own: bool = False

    @property
    def pct(self) -> float:
        return pct(self.value, self.baseline)

    def cell(self) -> str:
        """``= baseline``, ``+1.2% @2`` (same concurrency) or ``-4.0% /stream`` (against the single-stream)."""
        if self.own:
            return "= baseline"
        return pct_text(self.pct) + (f" @{self.streams}" if self.streams else " /stream")


def measured_at(yardstick: Yardstick, streams: int | None, bench: bool = False) -> float | None:
    """The baseline's per-stream tok/s measured at ``streams``: a bench's against its bench there; a log figure
    against its log there, else its bench there. None where the baseline run never ran at that concurrency."""
    streams = streams or 1
    if bench:
        return yardstick.bench_by_streams.get(streams)
    return yardstick.by_streams.get(streams) or yardstick.bench_by_streams.get(streams)


def baseline_at(yardstick: Yardstick, streams: int | None, bench: bool = False) -> tuple[float, int | None]:
    """(per-stream baseline judging a figure at ``streams``, the concurrency it was measured at): measured
    there, else the single-stream figure (None)."""
    measured = measured_at(yardstick, streams, bench)
    if measured is None:
        return yardstick.baseline_tok_s, None
    return measured, streams or 1


def versus(
    yardstick: Yardstick, value: float, streams: int | None, *, bench: bool = False, run_id: str | None = None
) -> Versus:
    """``value`` (per stream, at ``streams``) against the baseline that judges it; ``run_id`` the run it was
    measured on (the baseline's own reads ``= baseline``)."""
    base, at = baseline_at(yardstick, streams, bench)
    own = run_id is not None and run_id == yardstick.baseline_run
    if at is not None:
        kind = "bench" if bench else "measured figure"
        return Versus(value, base, at, f"at {at} stream(s) vs the baseline's {kind} at {at}", own)
    where = "measured" if yardstick.measured else "configured"
    return Versus(value, base, None, f"per stream vs the single-stream baseline ({where})", own)


def run_level(run: RunSummary, yardstick: Yardstick) -> Level | None:
    """The concurrency a run is judged at: the baseline's own run at one stream (the figure the yardstick
    takes); another run at the level it spent most seconds at among those where the baseline was measured,
    else at its busiest level."""
    if not run.levels:
        return None
    if run.id == yardstick.baseline_run:
        return next((lv for lv in run.levels if lv.streams == 1), run.levels[0])
    like = [lv for lv in run.levels if measured_at(yardstick, lv.streams) is not None]
    return (like or list(run.levels))[0]


def run_versus(run: RunSummary, yardstick: Yardstick) -> Versus | None:
    """A run's log figure at the level it is judged at (``run_level``) against the baseline there; None
    without samples. The figure shown beside the change is ``Versus.value``, the one compared."""
    level = run_level(run, yardstick)
    if level is None:
        return None
    return versus(yardstick, level.tok_s, level.streams, run_id=run.id)


def run_figure(run: RunSummary, yardstick: Yardstick) -> str:
    """A run's per-stream tok/s cell: the figure its change was computed from, ``@N`` where the run saw
    several concurrencies or ran at more than one stream."""
    level = run_level(run, yardstick)
    if level is None:
        return "—"
    if len(run.levels) > 1 and level.streams == 1:
        return f"{level.tok_s:.1f} @1"
    return at_text(level.tok_s, level.streams)


def level_at(run: RunSummary, streams: int) -> Level | None:
    """What a run did at exactly ``streams`` running requests; None where it never ran there."""
    return next((lv for lv in run.levels if lv.streams == streams), None)


def run_figure_at(run: RunSummary, streams: int | None) -> tuple[float, str] | None:
    """(per-stream tok/s, its text) of a run drawn beside a figure at ``streams`` (Live's overlay): its figure
    at that level where it ran there, else at the level it spent most seconds at, with that level said
    (``90.0 @1``); never its mean over levels. None without samples."""
    if not run.levels:
        return None
    shown = streams or 1
    level = level_at(run, shown) or run.levels[0]
    at = "" if level.streams == shown and shown == 1 else f" @{level.streams}"
    return level.tok_s, f"{level.tok_s:.1f}{at}"


def run_accept_text(run: RunSummary) -> str:
    """A run's log accept length as a line beside another's: ``3.30``, ``3.30 all levels`` where it ran at more
    than one concurrency (its log keeps one accept length a run, not one a level)."""
    return f"{run.accept_len:.2f}" + (" all levels" if len(run.levels) > 1 else "") if run.accept_len else "—"


def bench_figure(run: RunSummary) -> tuple[float | None, float | None, int]:
    """(per-stream tok/s, accept length, concurrency) of a run's bench as a table of runs compares them: its
    one-stream bench where it has one (drafters side by side at the same concurrency), else its newest bench,
    whose concurrency is then said (``at_text``)."""
    one = next((p for p in run.curve if p.streams == 1), None)
    if one is not None:
        return one.tok_s, one.accept_len, 1
    bench = run.bench or {}
    return bench.get("tok_s"), bench.get("accept_len"), int(bench.get("concurrency") or 1)


# --- intervals ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """An interval against a line: ``word`` is beats / below / within noise (speed; ahead / below of a bench
    curve against the baseline's), met / not met / within noise (break-even), level with (either, inside the
    practical floor), = baseline, not enough samples or waiting; ``low``/``high`` the 95% interval."""

    word: str
    low: float | None = None
    high: float | None = None
    count: int = 0  # samples seen (for not enough samples)
    needed: int = 0  # samples an interval needs

    @property
    def decided(self) -> bool:
        return self.word in ("beats", "ahead", "below", "met", "not met")


def speed_verdict(tok: Stats, baseline: float, own: bool = False) -> Verdict:
    """A window's per-stream tok/s against ``baseline``: beats or below only where the mean's 95% interval
    (batch means, ``Stats.sem``) clears it; the baseline's own run is the baseline."""
    if tok.mean is None:
        return Verdict("waiting")
    if own:
        return Verdict("= baseline")
    if tok.sem is None:
        return Verdict("not enough samples", count=tok.count, needed=2 * BATCHES)
    low, high = interval95(tok.mean, tok.sem, tok.sem_dof)
    return Verdict(judged_word(tok.mean, low, high, baseline, ("beats", "below")), low, high, tok.count)


def judged_word(
    value: float, low: float, high: float, line: float, words: tuple[str, str], within: str = "within noise"
) -> str:
    """The judge's word on ``value`` (95% interval [low, high]) against ``line``. Within the practical floor
    it is level with the line where the interval clears it (a real difference, too small to matter, however
    narrow the interval) or stays inside the floor; one that straddles the line and reaches past the floor is
    ``within`` (it may yet hide a difference that matters). Past the floor: ``words`` where the interval clears
    the line, else ``within``."""
    word = clear_word(low, high, line, words, within)
    if inside_floor(value, line) and (word != within or (inside_floor(low, line) and inside_floor(high, line))):
        return LEVEL
    return word


def clear_word(low: float, high: float, line: float, words: tuple[str, str], within: str = "within noise") -> str:
    """``words[0]`` where the interval [low, high] is wholly above ``line``, ``words[1]`` wholly below, else
    ``within``."""
    return {1: words[0], -1: words[1], 0: within}[clears(low, high, line)]


def interval_verdict(
    interval: tuple[float, float, float, int] | None, line: float, words: tuple[str, str], count: int = 0
) -> Verdict:
    """``words`` (above, below) where the interval clears ``line``, else within noise; not enough samples
    (``count`` of them) without an interval."""
    if interval is None:
        return Verdict("not enough samples", count=count, needed=2)
    middle, low, high, n = interval
    return Verdict(judged_word(middle, low, high, line, words), low, high, n)


# --- the break-even ----------------------------------------------------------------------------------------


def break_even(cycle_ms: float, baseline: float) -> float:
    """The accept length that matches ``baseline`` (per stream) with cycles of ``cycle_ms``."""
    return live_breakeven(cycle_ms, baseline)


def claim_word(accept_len: float, line: float) -> str:
    """A published accept length against this host's break-even: above / below, or level within the practical
    floor (a figure, no interval: a card's claim)."""
    if inside_floor(accept_len, line):
        return "level"
    return "above" if accept_len > line else "below"


def break_even_text(line: float, cycle_ms: float, measured: bool, what: str = "break-even") -> str:
    """``break-even 2.46 (configured cycle 30 ms)`` / ``break-even 2.70 (measured cycle 33.0 ms)``: every
    break-even shown says which cycle it comes from, so History's and Live's never read as two unexplained
    numbers for one quantity."""
    cycle = f"measured cycle {cycle_ms:.1f} ms" if measured else f"configured cycle {cycle_ms:g} ms"
    return f"{what} {line:.2f} ({cycle})"


def yardstick_text(yardstick: Yardstick) -> str:
    """History's head line (CLI and tab): ``baseline 82.0 tok/s (configured) · break-even accept length 2.46
    (configured cycle 30 ms)``."""
    y = yardstick
    line = break_even_text(y.break_even, y.cycle_ms, False, "break-even accept length")
    return f"baseline {y.baseline_tok_s:.1f} tok/s ({y.source}) · {line}"


@dataclass(frozen=True)
class BreakEven:
    """An accept length against the break-even it had to reach (``line``, at ``streams``); ``requests``: the
    bench requests its interval came from (0: the run's log samples)."""

    accept_len: float
    line: float
    streams: int
    verdict: Verdict
    requests: int = 0

    @property
    def margin(self) -> float:
        return self.accept_len - self.line

    @property
    def word(self) -> str:
        """met / not met / within noise / level (within the practical floor) / too few samples."""
        return {"not enough samples": "too few samples", LEVEL: "level"}.get(self.verdict.word, self.verdict.word)

    def cell(self) -> str:
        """``met (+0.84 ±0.05)`` / ``not met (…)`` / ``within noise (…)`` / ``too few samples (+0.84)``; a run
        judged at N > 1 streams names its own line: ``met (+0.30 ±0.04 of 3.11 @4)``; one judged by its bench's
        requests says so: ``met (+0.84 ±0.21, 8 bench requests)``."""
        v = self.verdict
        spread = "" if v.low is None or v.high is None else f" ±{(v.high - v.low) / 2:.2f}"
        at = f" of {self.line:.2f} @{self.streams}" if self.streams > 1 else ""
        source = f", {self.requests} bench requests" if self.requests else ""
        return f"{self.word} ({self.margin:+.2f}{spread}{at}{source})"


def run_break_even_line(run: RunSummary, yardstick: Yardstick) -> float:
    """The accept length a run had to reach: the configured break-even for one stream; at more streams, its own
    cycle at that batch × the baseline per stream at that concurrency (the configured cycle and the
    single-stream baseline are one stream's figures)."""
    if (run.streams or 1) > 1 and run.cycle_ms is not None:
        return break_even(run.cycle_ms, baseline_at(yardstick, run.streams)[0])
    return yardstick.break_even


def run_live_break_even(run: RunSummary, yardstick: Yardstick) -> float | None:
    """The break-even for a run's own measured cycle and the baseline at its concurrency."""
    return None if run.cycle_ms is None else break_even(run.cycle_ms, baseline_at(yardstick, run.streams)[0])


def run_break_even(run: RunSummary, yardstick: Yardstick) -> BreakEven | None:
    """A speculative run's accept length against its break-even: met / not met where the accept length's 95%
    interval clears it, within noise where it straddles it. The interval is its log's (batch means over 20
    seconds of samples at least); a run with fewer, benched at the concurrency it is judged at, is judged by its
    bench's requests instead (a short bench or sweep point still gets its verdict); else not enough samples.
    None without speculation or samples."""
    if not run.speculative or run.accept_len is None:
        return None
    line = run_break_even_line(run, yardstick)
    streams = run.streams or 1
    interval = run.accept_interval()
    if interval is not None:
        word = judged_word(run.accept_len, *interval, line, ("met", "not met"))
        return BreakEven(run.accept_len, line, streams, Verdict(word, interval[0], interval[1], run.samples))
    bench = run.bench or {}
    requests = [r for r in (bench.get("result") or {}).get("per_request") or [] if "error" not in r]
    lengths = requests_interval((r.get("accept_len") for r in requests), bench.get("accept_len"))
    if lengths is not None and int(bench.get("concurrency") or 1) == streams:
        verdict = interval_verdict(lengths, line, ("met", "not met"), len(requests))
        return BreakEven(lengths[0], line, streams, verdict, lengths[3])
    return BreakEven(
        run.accept_len, line, streams, Verdict("not enough samples", count=run.samples, needed=2 * BATCHES)
    )


def break_even_met(run: RunSummary, yardstick: Yardstick) -> bool | None:
    """True / False only where the accept length's interval clears the break-even; else None."""
    judged = run_break_even(run, yardstick)
    return None if judged is None else {"met": True, "not met": False}.get(judged.verdict.word)


# --- across concurrency ------------------------------------------------------------------------------------


def difference_interval(value: Rate, line: Rate) -> tuple[float, float, float, int] | None:
    """``value``'s figure with the 95% interval of its difference from ``line``'s, both benches' noise in it:
    Student's t on both benches' requests times the difference's standard error (as sweep points are parted,
    ``separable``), in the shape of ``requests_interval`` (around ``value``, the fewer requests of the two) so
    that ``interval_verdict`` judges it against ``line.tok_s``. None where either bench has no interval."""
    se_value, se_line = value.se, line.se
    if se_value is None or se_line is None:
        return None
    half = t975(value.requests + line.requests - 2) * math.hypot(se_value, se_line)
    return value.tok_s, value.tok_s - half, value.tok_s + half, min(value.requests, line.requests)


def rate_verdict(value: Rate, line: Rate, words: tuple[str, str] = ("ahead", "below")) -> Verdict:
    """One bench's tok/s against another's (like with like: the same concurrency), by the interval of their
    difference (``difference_interval``) and the practical floor (``judged_word``); ``low``/``high`` the
    difference's 95% interval as a change against ``line`` in percent. Not enough samples where either bench
    has no interval (under two requests, or a record from before per-request rates were kept)."""
    verdict = interval_verdict(difference_interval(value, line), line.tok_s, words, min(value.requests, line.requests))
    return as_change(verdict, line.tok_s)


def as_change(verdict: Verdict, line: float) -> Verdict:
    """``verdict`` with its interval (tok/s) written as a change against ``line`` in percent."""
    if verdict.low is None or verdict.high is None:
        return verdict
    return replace(verdict, low=pct(verdict.low, line), high=pct(verdict.high, line))


@dataclass(frozen=True)
class Curve:
    """Speculation's bench curve against the baseline's, level by level (``rate_verdict``: ahead / below only
    where the interval of the difference clears, level within the floor, else within noise), where it falls
    below (over concurrencies where a baseline was measured), and the concurrencies it was benched at with no
    baseline there."""

    benched: tuple[int, ...]  # where speculation was benched
    judged: tuple[int, ...]  # of those, where the baseline was benched too
    verdicts: tuple[Verdict, ...] = ()  # one per judged concurrency; low/high: the change's interval, in percent

    @property
    def words(self) -> dict[int, str]:
        return {c: v.word for c, v in zip(self.judged, self.verdicts, strict=True)}

    @property
    def falls_at(self) -> int | None:
        """The lowest judged concurrency where it is slower per stream, past the floor and the noise."""
        return next((c for c, word in self.words.items() if word == "below"), None)

    @property
    def level(self) -> tuple[int, ...]:
        """Judged concurrencies where it is within the practical floor of the baseline."""
        return tuple(c for c, word in self.words.items() if word == LEVEL)

    @property
    def unjudged(self) -> tuple[int, ...]:
        return tuple(c for c in self.benched if c not in self.judged)

    def missing_text(self) -> str:
        """``no baseline measured at 2, 4, 8 streams: bench the baseline there`` ('' when none is missing)."""
        if not self.unjudged:
            return ""
        return f"no baseline measured at {levels_text(self.unjudged)} streams: bench the baseline there"

    def to_json(self) -> dict[str, Any]:
        """Each judged concurrency's word and the change's interval (percent), as ``--json`` prints them."""
        return {
            str(c): {"word": v.word, "change_low_pct": _round(v.low), "change_high_pct": _round(v.high),
                     "requests": v.count}
            for c, v in zip(self.judged, self.verdicts, strict=True)
        }  # fmt: skip

    def _clause(self, word: str, levels: list[int], base: str | None) -> str:
        """One word's levels: ``ahead at 1, 2``; the first clause names the baseline (``base``)."""
        at = levels_text(levels) + (" stream(s)" if base else "")
        if word == "within noise":
            by = {c: v for c, v in zip(self.judged, self.verdicts, strict=True)}
            at = ", ".join(f"{c} (95% {pct_text(by[c].low)} to {pct_text(by[c].high)})" for c in levels)
            return f"is within noise of {base} at {at}" if base else f"within noise at {at}"
        if word == LEVEL:
            return (
                f"is level with {base} ({floor_text()}) at {at}" if base else f"level with it ({floor_text()}) at {at}"
            )
        if word == "not enough samples":
            why = "a bench needs two requests with their rates on each side"
            return (
                f"has too few samples against {base} at {at} ({why})" if base else f"not enough samples at {at} ({why})"
            )
        return f"is {word} of {base} at {at}" if base and word == "ahead" else f"{word} at {at}"

    def sentence(self, who: str = "speculation", source: str = "") -> str:
        """Where ``who`` stands against the baseline (``source``: where its curve comes from) across the
        concurrencies benched, in one sentence: where it falls below first, then every other level's word,
        within noise with the interval of the change."""
        missing = self.missing_text()
        if not self.judged:
            return f"{who}: {missing}" if missing else f"{who}: no bench to judge"
        base = f"the baseline ({source})" if source else "the baseline"
        groups: dict[str, list[int]] = {}
        for c, word in self.words.items():
            if c != self.falls_at:
                groups.setdefault(word, []).append(c)
        if self.falls_at is not None:
            head = f"{who} falls below {base} at {self.falls_at} concurrent stream(s)"
            rest = [self._clause(word, levels, None) for word, levels in groups.items()]
        elif list(groups) == ["ahead"] and not self.unjudged:
            head, rest = f"{who} stays ahead of {base} at every concurrency measured ({levels_text(self.judged)})", []
        else:
            (first, levels), *others = groups.items()
            head = f"{who} {self._clause(first, levels, base)}"
            rest = [self._clause(word, levels, None) for word, levels in others]
        return ", ".join([head, *rest]) + (f"; {missing}" if missing else "")


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def curve_verdict(baseline: Mapping[int, Rate], curve: Mapping[int, Rate]) -> Curve:
    """``curve`` (per-stream bench tok/s by concurrency, with their intervals) against the baseline's, like
    with like, each level by ``rate_verdict``."""
    benched = tuple(sorted(curve))
    judged = tuple(c for c in benched if c in baseline)
    return Curve(benched, judged, tuple(rate_verdict(curve[c], baseline[c]) for c in judged))


def baseline_curve(yardstick: Yardstick, runs: Iterable[RunSummary] = ()) -> tuple[dict[int, Rate], str]:
    """(the baseline's per-stream bench tok/s by concurrency with their intervals, where it comes from): the
    marked baseline run's benches, else those of a run without speculation among ``runs``; empty when neither
    was benched."""
    if yardstick.bench_by_streams:
        rates = {c: yardstick.bench_rates.get(c) or Rate(v) for c, v in yardstick.bench_by_streams.items()}
        return rates, f"measured by run {yardstick.baseline_run}"
    for run in runs:
        if not run.speculative and run.curve:
            return {p.streams: p.rate for p in run.curve}, f"run {run.job_id}, no speculation"
    return {}, ""


def run_curve(run: RunSummary, yardstick: Yardstick, runs: Iterable[RunSummary] = ()) -> Curve | None:
    """A speculative run's bench curve against the baseline's (None without speculation or benches)."""
    if not run.speculative or not run.curve:
        return None
    return curve_verdict(baseline_curve(yardstick, runs)[0], {p.streams: p.rate for p in run.curve})


# --- the best of a sweep -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BestPoint:
    """The best step count (``advice.best`` on an advisor's rows or a sweep's points, built on the host): its
    figures, whether it was judged measured or predicted, and the step counts its interval does not separate it
    from, with the requests a point would need to separate them. ``wire`` keeps it as computed (``--json``)."""

    steps: int
    basis: str = "measured"  # measured, or predicted where nothing was measured
    compared: bool | None = None  # False: the one point measured, nothing compared with it
    not_separated_from: tuple[int, ...] = ()
    requests: int | None = None  # the requests its figure rests on
    requests_to_separate: int | None = None
    tok_s: float | None = None  # predicted (an advisor row's), or measured (a sweep point's)
    tok_s_low: float | None = None
    tok_s_high: float | None = None
    measured_tok_s: float | None = None  # an advisor row's measured figure with its interval
    measured_low: float | None = None
    measured_high: float | None = None
    cycle_ms: float | None = None
    run: str | None = None  # a sweep point's run, and the host that measured it (a fleet sweep's)
    host: str | None = None
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: Mapping[str, Any]) -> BestPoint:
        return cls(
            steps=int(wire["steps"]),
            basis=wire.get("basis") or "measured",
            compared=wire.get("compared"),
            not_separated_from=tuple(wire.get("not_separated_from") or ()),
            requests=wire.get("requests"),
            requests_to_separate=wire.get("requests_to_separate"),
            tok_s=wire.get("tok_s"),
            tok_s_low=wire.get("tok_s_low"),
            tok_s_high=wire.get("tok_s_high"),
            measured_tok_s=wire.get("measured_tok_s"),
            measured_low=wire.get("measured_low"),
            measured_high=wire.get("measured_high"),
            cycle_ms=wire.get("cycle_ms"),
            run=wire.get("run"),
            host=wire.get("host"),
            wire=dict(wire),
        )

    @property
    def figure(self) -> tuple[float | None, float | None, float | None]:
        """(tok/s, low, high) the best is judged by: measured where measured (an advisor row's ``measured_tok_s``,
        a sweep point's ``tok_s``), else predicted."""
        if self.basis == "predicted":
            return self.tok_s, self.tok_s_low, self.tok_s_high
        value = self.measured_tok_s if self.measured_tok_s is not None else self.tok_s
        return value, self.measured_low, self.measured_high

    @property
    def word(self) -> str:
        """What a best point may be called: "best" where it was compared with another point (measured or
        predicted), "only measured" where it is the one point measured, so nothing was compared with it."""
        return "only measured" if self.basis == "measured" and self.compared is False else "best"


def best_sentence(best: BestPoint | None, what: str = "steps") -> str:
    """``steps 4 measured fastest (101.0 tok/s [96.2-105.8]); not separated from 3 at 4 requests a point:
    ≈ 12 more each would``; ``best: none`` without one."""
    if best is None:
        return "none (nothing measured)"
    value, low, high = best.figure
    basis = best.basis
    interval = f" [{low:.1f}-{high:.1f}]" if low is not None and high is not None else ""
    figure = "" if value is None else f" ({value:.1f} tok/s{interval})"
    if best.word != "best":
        alone = f"{what} {best.steps} the only step count measured{figure}"
        return alone + ": no other to compare it with, a sweep would tell"
    head = f"{what} {best.steps} {basis} fastest{figure}"
    others = best.not_separated_from
    if not others:
        return head + ("; separated from every other point" if basis == "measured" and best.compared else "")
    names = ", ".join(str(s) for s in others)
    requests = best.requests
    at = f" at {requests} requests a point" if requests else ""
    more = best.requests_to_separate
    tail = f": ≈ {more} more each would" if more is not None else ""
    if more is None and basis == "measured":
        tail = ": closer than two benches can be told apart, whatever their length"
    return f"{head}; not separated from {names}{at}{tail}"


# --- a bench ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchJudgement:
    """A bench's result judged: its per-stream tok/s against the baseline's bench at its concurrency (by both
    benches' requests, ``rate_verdict``; by its own where the baseline is a figure with no requests), its accept
    length against the break-even of its own cycle (by its requests'). ``speed``'s low/high: the change's 95%
    interval in percent."""

    versus: Versus | None
    speed: Verdict
    break_even: float | None  # its own cycle × the baseline that judges it; None without speculation or cycle
    accept: Verdict
    replicas: int = 1  # a fleet bench's: the replicas its router spread the streams over
    concurrency: int = 1  # the streams the bench sent (through a router: over every replica)
    rate: Rate | None = None  # its per-stream tok/s with its requests' interval
    line: Rate | None = None  # the baseline's bench at its streams; judged by both benches' where it has an interval

    def speed_text(self) -> str:
        """``+4.0% vs 75.0, the baseline's bench at 4 stream(s); beats it, 95% +2.9% to +5.1% over its 8 requests
        and the baseline bench's 8`` (against a figure with no requests: taken as exact, said so); through a
        router, the streams each replica ran, or why there is no verdict."""
        v = self.versus
        if v is None:
            return self.unjudged()
        if v.own:
            return "= baseline (this is the baseline run)"
        where = f"the baseline's bench at {v.streams} stream(s)" if v.streams else "the single-stream baseline"
        if self.replicas > 1:
            each = self.concurrency // self.replicas
            where += f" ({self.concurrency} through the router over {self.replicas} replicas: {each} each if even)"
        return f"{pct_text(v.pct)} vs {v.baseline:.1f}, {where}" + _verdict_tail(self.speed, "it", over=self.over())

    def over(self) -> str:
        """The requests the speed verdict is over, and what it was judged against where that had none."""
        own = f"over its {self.rate.requests if self.rate else self.speed.count} requests"
        line = self.line
        if line is not None and line.interval is not None:
            return f"{own} and the baseline bench's {line.requests}"
        if self.versus is None or self.versus.streams is None:
            return f"{own}, the baseline's figure taken as exact"
        had = "no per-request rates" if line is None or not line.requests else f"{line.requests} request with a rate"
        return f"{own}, the baseline bench's figure taken as exact: it has {had}"

    def unjudged(self) -> str:
        """Why a router bench has no verdict: its streams do not split evenly over the replicas ('' otherwise)."""
        if self.replicas > 1 and self.concurrency % self.replicas:
            return (
                f"no verdict: {self.concurrency} streams do not split evenly over {self.replicas} replicas, so no "
                f"one server's baseline matches; bench a multiple of {self.replicas}"
            )
        return ""

    def accept_text(self) -> str:
        """``vs break-even 2.71 (met, 95% 3.10-3.60 over 4 requests)``; '' without speculation."""
        if self.break_even is None:
            return ""
        tail = _verdict_tail(self.accept, "", 2)
        return f"vs break-even {self.break_even:.2f}" + (f" ({tail.removeprefix('; ')})" if tail else "")


def _verdict_tail(verdict: Verdict, it: str, digits: int = 0, over: str = "") -> str:
    """``; beats it, 95% +2.9% to +5.1% over …`` (a change, ``digits`` 0), ``; met, 95% 3.10-3.60 over 4
    requests`` (a figure), ``; level with it, within 2%, 95% …`` (or why there is no verdict); '' before any."""
    if verdict.word == "not enough samples":
        return f"; not enough requests to judge: {verdict.count}/{verdict.needed}"
    if verdict.low is None or verdict.high is None:
        return ""
    word = f"{verdict.word} {it}".rstrip() if verdict.word in ("beats", "below") else verdict.word
    if verdict.word == LEVEL:
        word = f"{LEVEL} {it or 'it'}, {floor_text()}"
    span = (
        f"{verdict.low:.{digits}f}-{verdict.high:.{digits}f}"
        if digits
        else f"{pct_text(verdict.low)} to {pct_text(verdict.high)}"
    )
    return f"; {word}, 95% {span} {over or f'over {verdict.count} requests'}"


def bench(result: Mapping[str, Any], yardstick: Yardstick, run_id: str | None = None) -> BenchJudgement:
    """A bench result (``loadgen.summarize``) judged like with like: against the baseline's bench at its
    concurrency, else per stream against the single-stream baseline. A bench through a fleet's router
    (``replicas`` > 1) is judged at the streams each replica runs (its concurrency over the replicas, the
    router spreading them evenly), and not at all where they do not split evenly."""
    requests = finished_requests(result)
    concurrency, replicas = int(result.get("concurrency") or 1), int(result.get("replicas") or 1)
    if concurrency % replicas:
        return BenchJudgement(None, Verdict("waiting"), None, Verdict("waiting"), replicas, concurrency)
    tok_s, streams = result.get("tok_s"), concurrency // replicas
    judged = None if not tok_s else versus(yardstick, float(tok_s), streams, bench=True, run_id=run_id)
    speed, rate, line = Verdict("waiting"), None, None
    if judged is not None:
        rate = Rate.of_bench(judged.value, result)
        line = yardstick.bench_rates.get(judged.streams) if judged.streams is not None else None
        if line is not None and line.interval is not None:  # like with like: both benches' requests
            speed = rate_verdict(rate, line, ("beats", "below"))
        else:
            speed = as_change(
                interval_verdict(rate.interval, judged.baseline, ("beats", "below"), len(requests)), judged.baseline
            )
    cycle, accept = result.get("cycle_ms"), result.get("accept_len")
    break_even_line = None
    verdict = Verdict("waiting")
    if result.get("speculative") and cycle and accept:
        break_even_line = break_even(float(cycle), baseline_at(yardstick, streams, bench=True)[0])
        lengths = requests_interval((r.get("accept_len") for r in requests), accept)
        verdict = interval_verdict(lengths, break_even_line, ("met", "not met"), len(requests))
    return BenchJudgement(judged, speed, break_even_line, verdict, replicas, concurrency, rate, line)


def run_json(run: RunSummary, yardstick: Yardstick) -> dict[str, Any]:
    """A run as `history --json` prints it: its figures and what the judge says of them."""
    out = run.to_json()
    judged = run_versus(run, yardstick)
    level = run_level(run, yardstick)
    out["judged_streams"] = None if level is None else level.streams
    out["judged_tok_s"] = None if level is None else round(level.tok_s, 4)
    out["vs_baseline_pct"] = None if judged is None or judged.own else round(judged.pct, 2)
    out["vs_baseline_streams"] = None if judged is None else judged.streams
    out["vs_baseline_basis"] = None if judged is None else ("the baseline's own run" if judged.own else judged.basis)
    out["break_even"] = round(run_break_even_line(run, yardstick), 4)
    be = run_break_even(run, yardstick)
    out["break_even_met"] = break_even_met(run, yardstick)
    out["break_even_verdict"] = None if be is None else be.word
    curve = run_curve(run, yardstick)
    out["falls_below_baseline_at"] = None if curve is None else curve.falls_at
    out["no_baseline_at"] = None if curve is None else list(curve.unjudged)
    out["curve_verdicts"] = None if curve is None else curve.to_json()
    live = run_live_break_even(run, yardstick)
    out["live_break_even"] = None if live is None else round(live, 4)
    return out


# --- what a bench or a sweep of a given length can judge ---------------------------------------------------


def separable(noise: BenchNoise) -> float:
    """How far apart (relative) two sweep points of ``noise.requests`` requests each must measure for their
    intervals to part: Student's t on both points' requests times the difference's standard error."""
    return t975(2 * (noise.requests - 1)) * math.sqrt(2) * noise.tok_s_se()


def sweep_scope(noise: BenchNoise) -> str:
    """What a sweep of this length can and cannot judge, said before it starts: ``at 8 requests a point it
    parts points more than 11% apart (…); none closer than 6% at any length``."""
    floor = Z * math.sqrt(2) * BENCH_FLOOR
    spread = f"±{100 * noise.tok_s_rel_sd:.0f}%"
    measured = noise.source.removeprefix("one request's spread ")
    why = f"assumed {spread}: none measured here yet" if measured.startswith("assumed") else f"{spread}, {measured}"
    return (
        f"at {noise.requests} requests a point the sweep parts points more than {100 * separable(noise):.0f}% apart "
        f"(one request's tok/s spread {why}); closer than {100 * floor:.0f}% none parts at any length (two "
        f"benches differ by {100 * BENCH_FLOOR:.0f}%)"
    )


def bench_scope(requests: int, concurrency: int) -> str:
    """What a bench of ``requests`` requests can judge, said before it starts: its verdicts against the baseline
    and the break-even come from its own requests (two at least)."""
    if requests < 2:
        return "1 request: a figure, no verdict (two requests at least give an interval)"
    return f"its {requests} requests judge it against the baseline and the break-even ({concurrency} at a time)"
