"""What a training checkpoint predicts on this host, before a restart.

- Accept length at the serving profile's K draft steps: L = 1 + Σ_{k≤K} Π_{i≤k} acc_i. SpecForge's
  ``simulated_acc_len`` is the same sum without the leading 1 (it leaves out SGLang's bonus token). Past the
  positions trained (``ttt_length``), acc decays geometrically as the advisor extrapolates.
- Its interval: L recomputed with every acc_i at the low (high) end of the interval the host gave it (the
  spread of the logs it rests on); the training-serving gap is not in it — the measured column says it.
- tok/s = 1000 · L / c(K), c the advisor's cycle-cost model fitted over the speculative runs measured on this
  host (any drafter: a cycle's cost is the target's verify and the draft passes, not the drafter's weights),
  else the configured cycle with an assumed per-step cost, said which; against the baseline (measured or
  configured, said which) and the break-even accept length c(K) · baseline.

A thin adapter over the advisor's arithmetic (``backend.agent.host.advice``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.advisor import DEFAULT_STEPS, run_steps, run_topk, single_stream
from backend.agent.host.advice import CostModel, chain, decay, extend
from backend.history import RunSummary, Yardstick


@dataclass(frozen=True)
class CostBasis:
    """The cycle-cost model and baseline predictions are judged with, and where each came from."""

    cost: CostModel
    baseline_tok_s: float
    baseline_source: str

    def break_even(self, steps: int) -> float:
        return self.cost(steps) * self.baseline_tok_s / 1000.0

    @property
    def assumed(self) -> bool:
        return self.cost.source != "fitted"

    def to_json(self) -> dict[str, Any]:
        cost = self.cost.to_json()
        return {"cost_model": cost, "baseline_tok_s": self.baseline_tok_s, "baseline": self.baseline_source}


def cost_basis(runs: Sequence[RunSummary], yardstick: Yardstick, reference_steps: int = DEFAULT_STEPS) -> CostBasis:
    """The advisor's cost model over every single-stream speculative topk-1 run measured on this host."""
    points = [
        (steps, cycle)
        for r in runs
        if r.speculative and run_topk(r) == 1 and (steps := run_steps(r)) is not None and (cycle := single_stream(r)[1])
    ]
    cost = CostModel.from_points(points, (reference_steps, yardstick.cycle_ms))
    return CostBasis(cost, yardstick.baseline_tok_s, yardstick.source)


def _rates(values: Sequence[float], steps: int) -> list[float]:
    return extend(list(values), decay(list(values), [1] * len(values)), steps) if values else []


def verdict(low: float, high: float, line: float) -> str:
    """beats / falls short / too close to call, only where the whole interval clears the line."""
    if low > line:
        return "beats"
    if high < line:
        return "falls short of"
    return "too close to call against"


def predict(accuracy: dict | None, steps: int, basis: CostBasis) -> dict[str, Any]:
    """The checkpoint's predicted accept length and tok/s at ``steps`` draft steps, each with its interval, and
    the verdicts against the baseline and the break-even (None figures when it carries no accuracy)."""
    empty = {
        k: None
        for k in (
            "predicted_accept_len",
            "predicted_accept_len_low",
            "predicted_accept_len_high",
            "predicted_tok_s",
            "predicted_tok_s_low",
            "predicted_tok_s_high",
            "versus_baseline",
            "versus_break_even",
        )
    }
    if not accuracy or not accuracy.get("acc"):
        return empty
    acc = _rates(accuracy["acc"], steps)
    low = _rates(accuracy.get("low") or accuracy["acc"], steps)
    high = _rates(accuracy.get("high") or accuracy["acc"], steps)
    length, length_low, length_high = chain(acc), chain(low), chain(high)
    cycle = basis.cost(steps)
    tok = [1000.0 * x / cycle for x in (length, length_low, length_high)]
    line = basis.break_even(steps)
    return {
        "predicted_accept_len": round(length, 3),
        "predicted_accept_len_low": round(length_low, 3),
        "predicted_accept_len_high": round(length_high, 3),
        "predicted_tok_s": round(tok[0], 1),
        "predicted_tok_s_low": round(tok[1], 1),
        "predicted_tok_s_high": round(tok[2], 1),
        "cycle_ms": round(cycle, 2),
        "break_even": round(line, 3),
        "versus_baseline": verdict(tok[1], tok[2], basis.baseline_tok_s),
        "versus_break_even": verdict(length_low, length_high, line),
    }


def measured(runs: Sequence[RunSummary], serve_path: str | None) -> dict[str, Any]:
    """What the runs that served this checkpoint's folder measured (newest first): tok/s per stream and
    accept length, or None figures when none did."""
    mine = [r for r in runs if serve_path and r.drafter_path == serve_path]
    for r in mine:
        tok_s, _ = single_stream(r)
        accept = (r.bench or {}).get("accept_len") or r.accept_len
        if tok_s is not None or accept is not None:
            return {"measured_tok_s": tok_s, "measured_accept_len": accept, "measured_run": r.id}
    return {"measured_tok_s": None, "measured_accept_len": None, "measured_run": None}
