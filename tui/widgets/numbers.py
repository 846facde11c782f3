"""The Live tab's numbers panel: current, mean, p50/p95 of the window, against the baseline and the break-even.

The baseline is the measured one (a History run marked as such) or the configured figure; the live
break-even is the window's cycle time × that baseline, so it follows the baseline the moment it changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from textual.markup import escape
from textual.widgets import Static

from backend.agent.host.shared import units
from backend.measure import judge
from backend.measure.series import SeriesView, Stats
from backend.settings.model import Reference

EMPTY = Stats(0, None, None, None, None, None, None)
STATS_POINTS = 20_000  # beyond this, a window's stats come from an even sample of its points


def baseline_number(tok_s: float, run_id: str | None) -> str:
    """The baseline as every tab writes it: tok/s to one decimal, measured or configured (82.0, never 82.014)."""
    return f"{tok_s:.1f}"


def baseline_label(tok_s: float, run_id: str | None, streams: int | None = None) -> str:
    """``baseline 82 tok/s (configured)``, ``baseline 81.6 tok/s (measured: <run>)``, or with ``streams`` the
    per-stream baseline measured at that concurrency: ``baseline at 4 streams 73.0 tok/s (measured: <run>)``."""
    at = f" at {streams} streams" if streams else ""
    return f"baseline{at} {baseline_number(tok_s, run_id)} tok/s ({f'measured: {run_id}' if run_id else 'configured'})"


def scaled(stats: Stats, factor: float) -> Stats:
    """``stats`` of a series multiplied by ``factor`` (≥ 0: the order, and so p50/p95, stay)."""

    def times(v: float | None) -> float | None:
        return None if v is None else v * factor

    s = stats
    return Stats(s.count, times(s.current), times(s.mean), times(s.p50), times(s.p95), times(s.min), times(s.max))


def window_stats(view: SeriesView, limit: int = STATS_POINTS) -> Stats:
    """``view.stats()``, from an even sample of at most ``limit`` points when the window holds more.

    Sorting a full day for p50/p95 costs ~15 ms a series under the GIL; a sample of 20,000 gives the same
    figures to the digits the panel shows. ``count`` and ``current`` stay exact.
    """
    n = len(view)
    if n <= limit:
        return view.stats()
    step = -(-n // limit)
    ys = view.ys[n - 1 :: -step]  # from the newest point back, so it is always in
    return replace(SeriesView(ys, ys).stats(), count=n, current=view.ys[-1])


@dataclass(frozen=True)
class LiveNumbers:
    """What the panel shows; the pane computes the stats off the frame and hands them over."""

    tok_s: Stats = EMPTY
    accept_len: Stats = EMPTY
    cycle_ms: Stats = EMPTY
    baseline: float = Reference.baseline_tok_s
    configured_breakeven: float = judge.break_even(Reference.cycle_ms, Reference.baseline_tok_s)
    window: str = "5 m"
    baseline_run: str | None = None  # the History run measuring ``baseline``; None for the configured figure
    total_tok_s: Stats = EMPTY  # all streams together (SGLang's gen throughput)
    streams: Stats = EMPTY  # running requests
    baseline_streams: int | None = None  # the concurrency ``baseline`` was measured at; None: single-stream figure
    own_baseline: bool = False  # the server shown is the baseline's own run: it is the baseline, not above it
    configured_cycle_ms: float = Reference.cycle_ms  # the cycle ``configured_breakeven`` comes from

    @property
    def breakeven(self) -> Stats:
        """The live break-even of the window, sample by sample (``judge.break_even`` is linear in the cycle)."""
        return scaled(self.cycle_ms, judge.break_even(1.0, self.baseline))


def _cell(value: float | None, fmt: str) -> str:
    return f"{'-' if value is None else format(value, fmt):>7}"


def _row(name: str, stats: Stats, fmt: str) -> str:
    cells = (_cell(v, fmt) for v in (stats.current, stats.mean, stats.p50, stats.p95))
    return f"{name:<11}" + " ".join(cells)


def _vs(value: float | None, numbers: LiveNumbers) -> str:
    if value is None:
        return f"{'-':>7}"
    if numbers.own_baseline:
        return f"{'=':>7}"
    change = judge.pct(value, numbers.baseline)
    style = "$text-success" if change >= 0 else "$text-error"
    if judge.inside_floor(value, numbers.baseline):
        style = "$text-muted"  # level with it: a change too small to matter, coloured as no verdict
    return f"[{style}]{judge.pct_text(change):>7}[/]"


VERDICT_STYLE = {"beats": "$text-success", "below": "$text-error"}


def verdict(numbers: LiveNumbers) -> str:
    """The judge's verdict on the window (``judge.speed_verdict``: beats or below only where the mean's 95%
    interval clears the baseline and the mean is past the practical floor) in one line with why (markup)."""
    said = judge.speed_verdict(numbers.tok_s, numbers.baseline, numbers.own_baseline)
    if said.word == "waiting":
        return "[$text-muted]waiting for decode samples[/]"
    if said.word == "= baseline":
        return "[$text-muted]= baseline (this is the baseline run)[/]"
    if said.word == "not enough samples":
        return f"[$text-muted]not enough samples to judge ({said.count}/{said.needed})[/]"
    if said.word == "within noise":
        assert said.low is not None and said.high is not None  # a within-noise verdict has its interval
        return f"[$text-muted]within noise of baseline (95% {units.tok_s_range(said.low, said.high)})[/]"
    if said.word == judge.LEVEL:
        assert said.low is not None and said.high is not None  # a level verdict has its interval
        interval = f"95% {units.tok_s_range(said.low, said.high)}"
        return f"[$text-muted]level with baseline ({judge.floor_text()}; {interval})[/]"
    head = f"[{VERDICT_STYLE[said.word]}]{said.word} baseline[/]"
    mean_accept, line = numbers.accept_len.mean, numbers.breakeven.mean
    if mean_accept is None or line is None:
        return head
    sign = ">" if mean_accept >= line else "<"
    return f"{head}: accept {mean_accept:.2f} {sign} break-even {line:.2f}"


def render_numbers(numbers: LiveNumbers) -> str:
    """The panel's text (Textual markup with theme variables)."""
    lines = [
        f"[b]{numbers.window:<11}{'current':>7} {'mean':>7} {'p50':>7} {'p95':>7}[/]",
        _row("tok/s/strm", numbers.tok_s, ".1f"),
        _row("tok/s all", numbers.total_tok_s, ".1f"),
        _row("streams", numbers.streams, ".0f"),
        _row("accept len", numbers.accept_len, ".2f"),
        _row("cycle ms", numbers.cycle_ms, ".1f"),
        f"{'vs ' + baseline_number(numbers.baseline, numbers.baseline_run):<11}"
        + _vs(numbers.tok_s.current, numbers)
        + " "
        + _vs(numbers.tok_s.mean, numbers),
        f"[$text-muted]{escape(baseline_label(numbers.baseline, numbers.baseline_run, numbers.baseline_streams))}[/]",
        judge.break_even_text(numbers.configured_breakeven, numbers.configured_cycle_ms, False),
        *(
            [judge.break_even_text(numbers.breakeven.mean, numbers.cycle_ms.mean, True)]  # the window's mean
            if numbers.breakeven.mean is not None and numbers.cycle_ms.mean is not None
            else []
        ),
        verdict(numbers),
        f"[$text-muted]log samples in {numbers.window}: {numbers.tok_s.count} of tok/s, "
        f"{numbers.accept_len.count} of accept length[/]",
    ]
    return "\n".join(lines)


class NumbersPanel(Static):
    """Renders a ``LiveNumbers``; ``numbers`` is what it shows now."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(render_numbers(LiveNumbers()), id=id)
        self.numbers = LiveNumbers()

    def show(self, numbers: LiveNumbers) -> None:
        if numbers != self.numbers:
            self.numbers = numbers
            self.update(render_numbers(numbers))
