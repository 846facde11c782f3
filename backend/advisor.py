"""The step-count advisor over the run history: which draft step count pays, predicted from one run's
per-position acceptance and the cycle times of the runs measured so far (arithmetic in
``backend.agent.host.advice``; it states its cost model, extrapolation and interval).

``advise(runs, ...)`` takes ``History.runs()`` (read on a history thread by the TUI, directly by the CLI) and
returns an ``Advice``: the acceptance, the cost model, a row per step count (predicted accept length, cycle,
tok/s with interval, against the baseline, measured where a run at that step count exists), the best step
count, and what each target tok/s needs per position at that step count (``backend.breakeven``: the
finite-steps figure beside the unbounded limit).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from backend.agent.host.advice import Acceptance, CostModel, best, predict
from backend.breakeven import breakeven
from backend.errors import UsageError
from backend.history import RunSummary, Yardstick

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
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def run_steps(run: RunSummary) -> int | None:
    """The run's draft steps as the server resolved them, else as launched; None without speculation."""
    steps = _int(run.server_info.get("speculative_num_steps"))
    return steps if steps is not None else _int(_flag(run.argv, "--speculative-num-steps"))


def run_topk(run: RunSummary) -> int:
    topk = _int(run.server_info.get("speculative_eagle_topk"))
    return topk if topk is not None else _int(_flag(run.argv, "--speculative-eagle-topk")) or 1


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


def same_drafter(runs: Iterable[RunSummary], like: RunSummary) -> list[RunSummary]:
    """Speculative topk-1 runs of ``like``'s drafter with a known step count (the ones whose numbers compare)."""
    return [
        r
        for r in runs
        if r.drafter_path == like.drafter_path and r.speculative and run_topk(r) == 1 and run_steps(r) is not None
    ]


@dataclass(frozen=True)
class Advice:
    run: RunSummary
    acceptance: Acceptance
    cost: CostModel
    yardstick: Yardstick
    rows: list[dict[str, Any]]
    best: dict[str, Any] | None
    targets: dict[str, Any] | None  # breakeven() at the best step count

    def measured(self) -> dict[int, float]:
        return {r["steps"]: r["measured_tok_s"] for r in self.rows if r["measured_tok_s"] is not None}

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.id,
            "drafter": self.run.drafter,
            "drafter_path": self.run.drafter_path,
            "acceptance": self.acceptance.to_json(),
            "cost_model": self.cost.to_json(),
            "baseline": self.yardstick.to_json(),
            "rows": self.rows,
            "best": self.best,
            "targets": self.targets,
        }


def pick_run(runs: Sequence[RunSummary], run_id: str | None) -> RunSummary:
    """The run whose acceptance to read: ``run_id``, else, of the drafter of the newest run with a per-position
    histogram, the run that measured the most draft positions."""
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


def advise(
    runs: Sequence[RunSummary],
    yardstick: Yardstick,
    run_id: str | None = None,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    targets: Iterable[float] = (150.0, 200.0),
    reference_steps: int = DEFAULT_STEPS,
) -> Advice:
    """The advice for ``run_id`` (else see ``pick_run``) over ``runs`` (newest first)."""
    if max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {max_steps}.")
    run = pick_run(runs, run_id)
    histogram = histogram_of(run)
    assert histogram is not None
    acceptance = Acceptance(histogram)
    peers = same_drafter(runs, run)
    points = [(run_steps(r), c) for r in peers if (c := single_stream(r)[1])]
    cost = CostModel.from_points(points, (reference_steps, yardstick.cycle_ms))  # type: ignore[arg-type]
    by_steps: dict[int, list[float]] = {}
    for r in peers:
        if (tok_s := single_stream(r)[0]) is not None:
            by_steps.setdefault(run_steps(r), []).append(tok_s)  # type: ignore[arg-type]
    measured = {k: round(sum(v) / len(v), 2) for k, v in by_steps.items()}
    rows = predict(acceptance, cost, yardstick.baseline_tok_s, max_steps, measured)
    top = best(rows)
    needs = None
    if top is not None:
        needs = breakeven(top["cycle_ms"], yardstick.baseline_tok_s, targets, steps=top["steps"])
    return Advice(run, acceptance, cost, yardstick, rows, top, needs)


def acceptance_lines(acceptance: dict | None, drafter: str | None, width: int = 16) -> list[str]:
    """A bench's acceptance as text: one bar per histogram bin, then the per-position curve; or why it is absent."""
    if not acceptance:
        return []
    histogram = acceptance.get("histogram")
    if not histogram:
        return [f"acceptance per position: {acceptance.get('reason') or 'not measured'}"]
    n, top = sum(histogram), max(histogram) or 1
    out = [f"acceptance: {drafter or 'drafter'}, {n} verifies"]
    out += [f"{k} {'█' * round(width * h / top):<{width}} {h / n:4.0%}" for k, h in enumerate(histogram)]
    rates = acceptance.get("per_position") or []
    out.append("a_i " + " → ".join("—" if a is None else f"{a:.2f}" for a in rates))
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def advice_lines(advice: Advice) -> list[str]:
    """The advice as text: acceptance, cost model, the table, the best step count and what targets need."""
    acc, cost, ys = advice.acceptance, advice.cost, advice.yardstick
    run = advice.run
    out = [
        f"run {run.id}: drafter {run.drafter or run.drafter_path or '?'}, {acc.steps} steps measured over "
        f"{sum(acc.histogram)} verifies",
        "per-position acceptance: "
        + "  ".join(
            f"a{i + 1} {a:.2f} [{lo:.2f}-{hi:.2f}]"
            for i, (a, lo, hi) in enumerate(zip(acc.rates, acc.low, acc.high, strict=True))
        ),
        f"beyond {acc.steps} steps: a_j = a_{acc.steps} x {acc.decay:.3f}^(j-{acc.steps}) "
        "(log-linear fit, capped at 1)",
        f"cost model ({cost.source}): c(k) = {cost.intercept:.1f} + {cost.per_step:.2f}·k ms; {cost.detail}",
        f"baseline: {ys.baseline_tok_s:g} tok/s ({ys.source})",
        "",
        f"{'steps':>5}  {'accept len':>18}  {'cycle ms':>8}  {'tok/s':>20}  {'vs base':>7}  {'measured':>8}",
    ]
    for r in advice.rows:
        mark = "*" if r["extrapolated"] else " "
        length = f"{r['accept_len']:.2f} [{r['accept_len_low']:.2f}-{r['accept_len_high']:.2f}]{mark}"
        tok = f"{r['tok_s']:.1f} [{r['tok_s_low']:.1f}-{r['tok_s_high']:.1f}]"
        measured = "-" if r["measured_tok_s"] is None else f"{r['measured_tok_s']:.1f}"
        out.append(
            f"{r['steps']:>5}  {length:>18}  {r['cycle_ms']:>8.1f}  {tok:>20}  {r['vs_baseline_pct']:>+6.0f}%  "
            f"{measured:>8}"
        )
    out.append("* extrapolated past the measured steps; intervals: 95% binomial per position")
    if advice.best is not None and advice.targets is not None:
        b, t = advice.best, advice.targets
        pct = b["vs_baseline_pct"]
        out += ["", f"best: {b['steps']} steps, {b['tok_s']:.1f} tok/s predicted ({pct:+.0f}% vs baseline)"]
        out.append(
            f"at {b['steps']} steps ({b['cycle_ms']:.1f} ms cycles, ceiling {t['max_tok_s']:.0f} tok/s), "
            f"break-even accept length {t['break_even_accept_len']:.2f}:"
        )
        for row in t["targets"]:
            need = (
                f"a = {_pct(row['p_steps'])} at every position"
                if row["reachable"]
                else f"out of reach at {b['steps']} steps (accept length at most {b['steps'] + 1})"
            )
            out.append(
                f"  {row['tok_s']:g} tok/s: accept length {row['accept_len']:.2f}, {need}; "
                f"unbounded-steps limit a = {_pct(row['p_limit'])}"
            )
    return out
