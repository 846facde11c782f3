"""The step-count advisor over the run history: which draft step count pays, predicted from the per-position
acceptance of a drafter's runs and the cycle times they measured (arithmetic in ``backend.agent.host.shared.advice``
with its measured points, cost and acceptance models; it states its cost model, extrapolation and interval).

``advise(runs, ...)`` takes ``History.runs()`` (read on a history thread by the TUI, directly by the CLI) and
returns an ``Advice``: the acceptance, the cost model, a row per step count (predicted accept length, cycle,
tok/s with a 95% interval and what it rests on, against the baseline, measured where a run at that step count
exists), the one best step count, whether a smart sweep would stop and what it would measure next, and what
each target tok/s needs per position at the best step count (``backend.measure.breakeven``). Only runs like the one
advised count: the same drafter, topk 1 and draft tokens = steps + 1, one stream; and when the run advised is a
sweep's point, only that sweep's points (measured in one window: their figures are the ones its done event
says). The rows' intervals cover what a bench of ``requests`` requests will print
(``backend.agent.host.shared.expect``: one request's spread measured on the drafter's benches), the model's own
kept as ``mean_*`` for the stop rule. ``apply`` writes a step count into a profile, saying what measured faster.

``predict_from_rates`` is the same arithmetic for per-position acceptance from elsewhere (a checkpoint's
measured accuracy): rates with their errors plus this host's measured runs → accept length and tok/s rows.
The adaptive config proposed from this advice is ``backend.tune.adaptive_proposal``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from backend.agent.host.shared import expect, units
from backend.agent.host.shared.acceptance import per_position
from backend.agent.host.shared.acceptance_model import Acceptance, lengths_acceptance
from backend.agent.host.shared.advice import assess
from backend.agent.host.shared.cost_model import CostModel
from backend.agent.host.shared.measured_points import RECORD_SE, Point, step_times_ms
from backend.errors import UsageError
from backend.history import RunSummary, Yardstick
from backend.measure import judge
from backend.measure.bench import DEFAULT_REQUESTS
from backend.measure.bench_records import BenchSweep
from backend.measure.breakeven import BreakEven, breakeven
from backend.settings.model import ProfileConfig

DEFAULT_MAX_STEPS = 7
DEFAULT_STEPS = 3  # the configured cycle is the operator's, measured at 3 draft steps


def _flag(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _int(value: object) -> int | None:
    try:
        number: int = int(value)  # type: ignore[call-overload]  # any value: int() says which it takes
    except (TypeError, ValueError):
        return None
    return number


def run_steps(run: RunSummary) -> int | None:
    """The run's draft steps as the server resolved them, else as launched; None without speculation."""
    steps = _int(run.server_info.get("speculative_num_steps"))
    return steps if steps is not None else _int(_flag(run.argv, "--speculative-num-steps"))


def run_topk(run: RunSummary) -> int:
    topk = _int(run.server_info.get("speculative_eagle_topk"))
    return topk if topk is not None else _int(_flag(run.argv, "--speculative-eagle-topk")) or 1


def run_draft_tokens(run: RunSummary) -> int | None:
    """Draft tokens per verify as resolved, else as launched; None when neither says (SGLang: steps + 1)."""
    tokens = _int(run.server_info.get("speculative_num_draft_tokens"))
    return tokens if tokens is not None else _int(_flag(run.argv, "--speculative-num-draft-tokens"))


def histogram_of(run: RunSummary) -> list[int] | None:
    acceptance = (run.bench or {}).get("acceptance") or {}
    histogram = acceptance.get("histogram")
    return histogram if isinstance(histogram, list) and sum(histogram) > 0 else None


def single_stream(run: RunSummary) -> tuple[float | None, float | None]:
    """(tok/s, cycle ms) of one stream: the run's newest bench at concurrency 1, else its decode means when it ran
    one stream (a cycle measured under load is a batch's, not the step count's)."""
    level = next((lv for lv in run.curve if lv.streams == 1), None)
    if level is not None:
        return level.tok_s, level.cycle_ms
    if run.streams in (None, 1):
        return run.tok_s, run.cycle_ms
    return None, None


def adaptive_run(run: RunSummary) -> bool:
    """Launched with SGLang's adaptive step count: no one step count describes it (``tier_points`` do)."""
    return "--speculative-adaptive" in run.argv


def tier_points(run: RunSummary) -> list[Point]:
    """An adaptive run of one stream as a measured point per tier SGLang held (``RunSummary.tiers``: its log
    seconds in each, their per-stream tok/s and accept length); tier 0 drafts nothing and is no step count."""
    if run.streams not in (None, 1):
        return []
    points = []
    for tier in run.tiers:
        tok_s, accept = tier.get("tok_s"), tier.get("accept_len")
        if tier["steps"] < 1 or not tok_s or not accept:
            continue
        point = Point(tier["steps"], [], tok_s, 1000.0 * accept / tok_s, accept_len=accept)
        point.source = f"{run.id} at tier {tier['steps']} ({tier['seconds']:.0f} s of its log)"
        points.append(point)
    return points


def same_drafter(runs: Iterable[RunSummary], like: RunSummary) -> list[RunSummary]:
    """Speculative runs of ``like``'s drafter with a known step count at topk 1 and draft tokens = steps + 1
    (the chain the advisor models; a tree or a cut draft would not compare). Adaptive runs are not among them:
    their tiers are (``tier_points``)."""
    out = []
    for r in runs:
        if adaptive_run(r):
            continue
        steps = run_steps(r)
        if r.drafter_path != like.drafter_path or not r.speculative or steps is None or run_topk(r) != 1:
            continue
        if run_draft_tokens(r) not in (None, steps + 1):
            continue
        out.append(r)
    return out


def run_point(run: RunSummary) -> Point | None:
    """The run as a measured point of one stream: its bench's requests when that bench ran one stream, else
    its decode means (with the pooled histogram); the cycle from SGLang's step times when it recorded them."""
    steps = run_steps(run)
    if steps is None:
        return None
    bench = run.bench or {}
    if bench and bench.get("concurrency") in (None, 1) and bench.get("tok_s"):
        result = dict(bench.get("result") or {})
        result.update({k: bench.get(k) for k in ("tok_s", "cycle_ms", "accept_len", "acceptance")})
        point = Point.from_bench(steps, result)
    else:
        tok_s, cycle = single_stream(run)
        if tok_s is None:
            return None
        histogram = histogram_of(run)
        point = Point(steps, [histogram] if histogram else [], tok_s, cycle)
    point.source = run.id
    point.use_step_times(step_times_ms(run.server_info, 1))
    return point


@dataclass(frozen=True)
class AdviceRow:
    """One step count's prediction (``advice.predict``, its intervals covering a bench: ``expect.cover``):
    accept length and tok/s with their 95% intervals, the cycle, the change against the baseline, what it rests
    on (``extrapolated``, ``notes``), and what was measured there with its interval. ``wire`` keeps it as
    computed (``--json``)."""

    steps: int
    accept_len: float
    accept_len_low: float
    accept_len_high: float
    cycle_ms: float
    tok_s: float | None = None  # None: no cycle to divide by
    tok_s_low: float | None = None
    tok_s_high: float | None = None
    vs_baseline_pct: float | None = None
    extrapolated: bool = False
    notes: tuple[str, ...] = ()
    measured_tok_s: float | None = None
    measured_low: float | None = None
    measured_high: float | None = None
    model_accept_len: float | None = None  # the model's own accept length, before a bench's noise and the gap
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> AdviceRow:
        return cls(
            steps=int(wire["steps"]),
            accept_len=wire["accept_len"],
            accept_len_low=wire["accept_len_low"],
            accept_len_high=wire["accept_len_high"],
            cycle_ms=wire["cycle_ms"],
            tok_s=wire.get("tok_s"),
            tok_s_low=wire.get("tok_s_low"),
            tok_s_high=wire.get("tok_s_high"),
            vs_baseline_pct=wire.get("vs_baseline_pct"),
            extrapolated=bool(wire.get("extrapolated")),
            notes=tuple(wire.get("notes") or ()),
            measured_tok_s=wire.get("measured_tok_s"),
            measured_low=wire.get("measured_low"),
            measured_high=wire.get("measured_high"),
            model_accept_len=wire.get("model_accept_len"),
            wire=wire,
        )

    @property
    def figure(self) -> tuple[float | None, float | None, float | None]:
        """(tok/s, low, high): measured where a point was, else predicted."""
        if self.measured_tok_s is not None:
            return self.measured_tok_s, self.measured_low, self.measured_high
        return self.tok_s, self.tok_s_low, self.tok_s_high


@dataclass(frozen=True)
class Advice:
    run: RunSummary | None  # the run advised on; None for records from elsewhere (``advise_bench``)
    acceptance: Acceptance
    cost: CostModel
    yardstick: Yardstick
    rows: tuple[AdviceRow, ...]
    best: judge.BestPoint | None
    targets: BreakEven | None  # breakeven() at the best step count
    stop: dict[str, Any]  # can_stop, next, why (advice.stop_rule)
    source: str = ""  # where the points come from, when not the history (a bench_speculative.py file)
    noise: expect.BenchNoise | None = None  # the bench the rows' intervals cover (``expect.cover``)

    def measured(self) -> dict[int, float]:
        return {r.steps: r.measured_tok_s for r in self.rows if r.measured_tok_s is not None}

    def to_json(self) -> dict[str, Any]:
        run = self.run
        return {
            "run": run.id if run else None,
            "source": self.source or (run.id if run else None),
            "drafter": run.drafter if run else None,
            "drafter_path": run.drafter_path if run else None,
            "acceptance": self.acceptance.to_json(),
            "cost_model": self.cost.to_json(),
            "baseline": self.yardstick.to_json(),
            "rows": [r.wire for r in self.rows],
            "best": None if self.best is None else self.best.wire,
            "can_stop": self.stop["can_stop"],
            "next": self.stop["next"],
            "why": self.stop["why"],
            "targets": None if self.targets is None else self.targets.to_json(),
            "covers": None if self.noise is None else self.noise.to_json(),
        }


def pick_run(runs: Sequence[RunSummary], run_id: str | None) -> RunSummary:
    """The run whose drafter to advise on: ``run_id``, else, of the drafter of the newest run with a
    per-position histogram, the run that measured the most draft positions."""
    if run_id is not None:
        run = next((r for r in runs if r.id == run_id), None)
        if run is None:
            raise UsageError(f"no run {run_id} in the history")
        if histogram_of(run) is None:
            raise UsageError(
                f"run {run.id} has no per-position acceptance: bench it on SGLang 0.5.23 or later "
                "(`specdeck bench`), then `specdeck history --sync`"
            )
        return run
    newest = next((r for r in runs if histogram_of(r) is not None), None)  # runs come newest first
    if newest is not None:
        # The same drafter's run that measured the most positions (then the most verifies): the least extrapolated.
        peers = [r for r in runs if r.drafter_path == newest.drafter_path and histogram_of(r) is not None]
        return max(peers, key=lambda r: (len(histogram_of(r) or []), sum(histogram_of(r) or [])))
    raise UsageError(
        "no run in the history has a per-position acceptance yet: serve a speculative profile, run "
        "`specdeck bench` (SGLang 0.5.23 or later), then `specdeck history --sync`"
    )


def bench_lists(runs: Iterable[RunSummary]) -> list[list[dict[str, Any]]]:
    """The per-request lists of the runs' newest benches (what one request's spread is measured from)."""
    out = []
    for run in runs:
        per_request = ((run.bench or {}).get("result") or {}).get("per_request")
        if isinstance(per_request, list):
            out.append(per_request)
    return out


def _advice(
    run: RunSummary | None,
    points: list[Point],
    yardstick: Yardstick,
    max_steps: int,
    targets: Iterable[float],
    reference_steps: int,
    acceptance: Acceptance | None = None,
    source: str = "",
    noise: expect.BenchNoise | None = None,
    gap: expect.Gap | None = None,
    tiered: Sequence[tuple[list[int], Any, dict[int, float]]] = (),
) -> Advice:
    """The advice over ``points``; its rows' intervals cover what a bench (``noise``) will measure, while the
    stop rule judged the model's own (a point's true mean, not one bench's reading of it); ``gap``: the
    training-serving gap, for acceptance from a checkpoint's training accuracy."""
    if max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {max_steps}.")
    plain_ms = 1000.0 / yardstick.baseline_tok_s  # the plain decode step: no cycle is shorter
    done = assess(
        points,
        plain_ms,
        yardstick.baseline_tok_s,
        max_steps,
        fallback_cycle=(reference_steps, yardstick.cycle_ms),
        acceptance=acceptance,
        tiered=tiered,
    )
    noise = noise or expect.bench_noise([], DEFAULT_REQUESTS)
    rows = tuple(AdviceRow.from_json(expect.cover(r, noise, gap)) for r in done["rows"])
    top = None if done["best"] is None else judge.BestPoint.from_json(expect.cover(done["best"], noise, gap))
    needs = None
    if top is not None:
        assert top.cycle_ms is not None  # an advisor row's: every row has its cycle
        needs = breakeven(top.cycle_ms, yardstick.baseline_tok_s, targets, steps=top.steps)
    return Advice(run, done["acceptance"], done["cost"], yardstick, rows, top, needs, done["stop"], source, noise)


def advise(
    runs: Sequence[RunSummary],
    yardstick: Yardstick,
    run_id: str | None = None,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    targets: Iterable[float] = (150.0, 200.0),
    reference_steps: int = DEFAULT_STEPS,
    requests: int = DEFAULT_REQUESTS,
) -> Advice:
    """The advice for ``run_id``'s drafter (else see ``pick_run``) over ``runs`` (newest first); its intervals
    cover a bench of ``requests`` requests."""
    if max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {max_steps}.")
    run = pick_run(runs, run_id)
    peers = same_drafter(runs, run)
    # Like with like: a sweep's points were measured in one window, one against another (its done event's figures).
    measured = [r for r in peers if not run.sweep or r.sweep == run.sweep]
    points = [p for p in (run_point(r) for r in measured) if p is not None]
    # An adaptive run of the drafter teaches each tier it held, as a run at that step count would (its cycle and
    # tok/s), and its bench's requests every position a tier drafted (``tiered_histograms``).
    adaptive = [r for r in runs if adaptive_run(r) and r.drafter_path == run.drafter_path]
    points += [p for r in adaptive for p in tier_points(r)]
    tiered = [t for r in adaptive for t in tiered_histograms(r)]
    noise = expect.bench_noise(bench_lists(peers), requests)
    return _advice(run, points, yardstick, max_steps, targets, reference_steps, noise=noise, tiered=tiered)


def tiered_histograms(run: RunSummary) -> list[tuple[list[int], Any, dict[int, float]]]:
    """An adaptive run's bench histograms (per prompt where its requests say, else pooled) with the share of its
    passes at each tier (``RunSummary.tier_mix``): none where its log said no tier (no pass's tier known)."""
    mix = run.tier_mix()
    if not mix or histogram_of(run) is None:
        return []
    result = dict((run.bench or {}).get("result") or {})
    result["acceptance"] = (run.bench or {}).get("acceptance")
    point = Point.from_bench(max(mix), result)
    return [(h, (run.id, c), mix) for h, c in zip(point.histograms, point.clusters, strict=True)]


def advise_bench(
    sweep: BenchSweep,
    yardstick: Yardstick,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    targets: Iterable[float] = (150.0, 200.0),
) -> Advice:
    """The advice from bench_speculative.py records (``backend.measure.bench_records``): each chain record a measured
    point at the file's batch size (its step_time the cycle, its speed the tok/s per stream, its acc_length
    the accept length), the plain-decoding record the plain step and the baseline (else the configured one)."""
    lengths: dict[int, list[float]] = {}
    points = []
    for r in sweep.chains:
        lengths.setdefault(r.steps, []).append(r.acc_length)
        point = Point(r.steps, tok_s=r.speed, cycle_ms=1000.0 * r.step_time, accept_len=r.acc_length, spread=RECORD_SE)
        point.source = f"{sweep.path} line {r.line}"
        points.append(point)
    acceptance = lengths_acceptance({k: sum(v) / len(v) for k, v in lengths.items()}, RECORD_SE)
    if sweep.plain is not None:
        plain = sweep.plain
        where = f"{sweep.path} line {plain.line}"
        yardstick = Yardstick(plain.speed, yardstick.cycle_ms, where, {1: plain.speed})
    source = f"{sweep.path} at batch size {sweep.batch_size}: {len(sweep.chains)} chain records"
    if sweep.set_aside:
        source += f"; set aside (draft tokens ≠ steps + 1): lines {', '.join(str(r.line) for r in sweep.set_aside)}"
    return _advice(None, points, yardstick, max_steps, targets, DEFAULT_STEPS, acceptance, source)


def predict_from_rates(
    rates: Sequence[float],
    errors: Sequence[float],
    runs: Sequence[RunSummary],
    yardstick: Yardstick,
    like: RunSummary | None = None,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    targets: Iterable[float] = (150.0, 200.0),
    requests: int = DEFAULT_REQUESTS,
    gap: expect.Gap | None = None,
) -> Advice:
    """Accept length and tok/s per step count for per-position acceptance measured elsewhere (``rates`` a_1..a_K
    with standard errors ``errors``, e.g. a checkpoint's per-position accuracy), costed by this host's measured
    runs of ``like``'s drafter (else of every speculative chain run): the cost model fitted from them, or assumed
    (labelled) from one step count or the configured cycle. The Advice says what was assumed (``cost.source``,
    each row's ``notes``); ``run`` is ``like`` or the newest such run."""
    if len(rates) != len(errors) or not rates or any(not 0.0 <= a <= 1.0 for a in rates):
        raise UsageError("per-position acceptance needs one error per rate and every rate within [0, 1].")
    chain_runs = [r for r in runs if r.speculative and run_steps(r) is not None and run_topk(r) == 1]
    peers = same_drafter(runs, like) if like is not None else chain_runs
    if not peers:
        raise UsageError("no measured speculative run on this host to cost the prediction: bench one first.")
    acceptance = Acceptance.given(rates, errors, "per-position acceptance given with its errors")
    points = [p for p in (run_point(r) for r in peers) if p is not None]
    for p in points:  # their tok/s were measured with another drafter's acceptance: keep only their cycles
        p.tok_s = p.tok_s_se = None
    noise = expect.bench_noise(bench_lists(chain_runs), requests)
    return _advice(
        like or peers[0], points, yardstick, max_steps, targets, DEFAULT_STEPS, acceptance, noise=noise, gap=gap
    )


@dataclass(frozen=True)
class Applied:
    """A step count written into a profile (``apply``): the profile as it would be saved, and the measured points
    faster than the one applied (applying it then is the operator's call, asked for)."""

    profile: ProfileConfig
    before: ProfileConfig
    steps: int
    faster: tuple[tuple[int, float], ...] = ()  # (steps, measured tok/s) that measured faster than ``steps``
    applied_tok_s: float | None = None  # what ``steps`` measured (None: not measured)

    @property
    def changed(self) -> bool:
        return self.profile != self.before

    def text(self) -> str:
        """``eagle3-aq: steps 4, topk 1, draft tokens 5``."""
        p = self.profile
        return f"{p.name}: steps {p.steps}, topk {p.topk}, draft tokens {p.draft_tokens}"

    def warning(self) -> str:
        """Why applying it needs asking ('' when nothing measured faster)."""
        if not self.faster:
            return ""
        measured = "not measured" if self.applied_tok_s is None else f"measured {self.applied_tok_s:.1f} tok/s"
        others = ", ".join(f"steps {k} at {v:.1f}" for k, v in self.faster)
        return f"steps {self.steps} ({measured}) is slower than what was measured at {others}"


def apply(profile: ProfileConfig, steps: int, advice: Advice | None = None) -> Applied:
    """``steps`` draft steps as the advisor models them (a chain: topk 1, draft tokens = steps + 1) written into
    ``profile``, and the measured points of ``advice`` faster than it past the practical floor
    (``Applied.warning``)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UsageError(f"the step count must be a whole number of at least 1, got {steps!r}.")
    if not profile.algorithm:
        raise UsageError(f"profile {profile.name} does not speculate: there are no draft steps to set.")
    measured = advice.measured() if advice is not None else {}
    own = measured.get(steps)
    # Faster past the judge's practical floor: a point within 2% of it is level, not a reason to ask.
    faster = tuple(
        sorted(
            (k, v)
            for k, v in measured.items()
            if k != steps and (own is None or (v > own and not judge.inside_floor(v, own)))
        )
    )
    updated = replace(profile, steps=steps, topk=1, draft_tokens=steps + 1)
    return Applied(updated, profile, steps, faster, own)


def bench_acceptance_lines(
    result: dict[str, Any], drafter: str | None, *, tiers: Mapping[int, float] | None = None
) -> list[str]:
    """``acceptance_lines`` of a bench's result (its histogram, per-position curve and DSPARK figures): what
    `specdeck bench` prints and the Live tab shows after a bench."""
    return acceptance_lines(result.get("acceptance"), drafter, tiers=tiers, dspark=result.get("dspark"))


def acceptance_lines(
    acceptance: dict[str, Any] | None,
    drafter: str | None,
    width: int = 16,
    *,
    tiers: Mapping[int, float] | None = None,
    dspark: dict[str, Any] | None = None,
) -> list[str]:
    """A bench's acceptance as text: one bar per histogram bin, then the per-position curve (any algorithm whose
    requests report a histogram); or why it is absent. ``tiers``: an adaptive server's share of passes per tier,
    the curve read with the positions past a pass's tier unobserved (``acceptance.per_position``); ``dspark``:
    the bench's DSPARK figures (``acceptance.dspark_summary``)."""
    if not acceptance:
        return []
    histogram = acceptance.get("histogram")
    if not histogram:
        return [f"acceptance per position: {acceptance.get('reason') or 'not measured'}"]
    n, top = sum(histogram), max(histogram) or 1
    out = [f"acceptance: {drafter or 'drafter'}, {n} verifies"]
    out += [f"{k} {'█' * round(width * h / top):<{width}} {h / n:4.0%}" for k, h in enumerate(histogram)]
    rates = acceptance.get("per_position") or []
    if tiers:
        rates = per_position(histogram, tiers)
    out.append("a_i " + " → ".join("—" if a is None else f"{a:.2f}" for a in rates))
    if tiers:
        total = sum(tiers.values()) or 1.0
        mix = " · ".join(f"{k} {v / total:.0%}" for k, v in sorted(tiers.items()))
        out.append(
            f"adaptive: passes per tier {mix}; positions past a pass's tier unobserved (SGLang PR #31750's rule)"
        )
    if dspark:
        line = f"DSPARK: verify window (cap len) {dspark['cap_len']:.2f} per pass"
        if dspark.get("block_accept_len") is not None:
            line += f", uncapped block accept len {dspark['block_accept_len']:.2f}"
        out.append(line + f" (totals over {dspark['requests']} requests)")
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def best_line(advice: Advice) -> str:
    """The one best step count as a sentence (``judge.best_sentence``): the fastest, measured or predicted, and
    the step counts its interval does not separate it from, with the requests that would."""
    return "best: " + judge.best_sentence(advice.best)


def advice_lines(advice: Advice) -> list[str]:
    """The advice as text: acceptance, cost model, the table, the best step count, the stop rule and what
    targets need."""
    acc, cost, ys = advice.acceptance, advice.cost, advice.yardstick
    run = advice.run
    head = (
        f"run {run.id}: drafter {run.drafter or run.drafter_path or '?'}, {acc.steps} positions measured over "
        f"{sum(acc.histogram)} verifies"
        if run is not None
        else f"{advice.source}; {acc.steps} positions from accept lengths"
    )
    out = [
        head,
        "per-position acceptance: "
        + "  ".join(
            f"a{i + 1} {a:.2f} [{lo:.2f}-{hi:.2f}]"
            for i, (a, lo, hi) in enumerate(zip(acc.rates, acc.low, acc.high, strict=True))
        ),
        f"beyond {acc.steps} steps: {acc.extrapolation()}",
        f"cost model ({cost.source}): c(k) = {cost.intercept:.2f} + {cost.per_step:.2f}·k ms; {cost.detail}",
        f"baseline: {units.tok_s(ys.baseline_tok_s)} tok/s ({ys.source}); no cycle below its plain decode step",
        "",
        f"{'steps':>5}  {'accept len':>18}  {'cycle ms':>8}  {'tok/s':>20}  {'vs base':>7}  {'measured':>20}",
    ]
    for r in advice.rows:
        mark = ("*" if r.extrapolated else "") + ("~" if "per-step cost assumed" in r.notes else "")
        length = f"{r.accept_len:.2f} [{r.accept_len_low:.2f}-{r.accept_len_high:.2f}]"
        tok = f"{r.tok_s:.1f} [{r.tok_s_low:.1f}-{r.tok_s_high:.1f}]"
        measured = (
            "-" if r.measured_tok_s is None else f"{r.measured_tok_s:.1f} [{r.measured_low:.1f}-{r.measured_high:.1f}]"
        )
        vs = judge.pct_text(r.vs_baseline_pct, 0)
        out.append(f"{r.steps:>5}  {length:>18}  {r.cycle_ms:>8.1f}  {tok:>20}  {vs:>7}  {measured:>20} {mark}")
    legend = ["* extrapolated past the measured positions"] if any(r.extrapolated for r in advice.rows) else []
    if cost.assumed:
        legend.append("~ per-step cost assumed (one step count measured)")
    covers = f"; they cover {advice.noise.text()}" if advice.noise is not None else ""
    out.append("; ".join([*legend, f"intervals 95%: {acc.to_json()['interval']}{covers}"]))
    out += ["", best_line(advice)]
    stop = advice.stop
    out.append(
        "a smart sweep would stop here"
        if stop["can_stop"]
        else f"a smart sweep would measure {stop['next']} steps next"
    )
    out[-1] += f" ({stop['why']})"
    if advice.best is not None and advice.targets is not None:
        b, t = advice.best, advice.targets
        assert t.max_tok_s is not None  # breakeven() at the best's step count
        out.append(
            f"at {b.steps} steps ({b.cycle_ms:.1f} ms cycles, ceiling {units.tok_s(t.max_tok_s)} tok/s), "
            f"break-even accept length {t.break_even_accept_len:.2f}:"
        )
        for row in t.targets:
            need = (
                f"a = {_pct(row.p_steps)} at every position"
                if row.reachable
                else f"out of reach at {b.steps} steps (accept length at most {b.steps + 1})"
            )
            out.append(
                f"  {units.tok_s(row.tok_s)} tok/s: accept length {row.accept_len:.2f}, {need}; "
                f"unbounded-steps limit a = {_pct(row.p_limit)}"
            )
    return out
