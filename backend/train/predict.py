"""What a training checkpoint predicts on this host, before a restart: the advisor's prediction
(``backend.tune.advisor.predict_from_rates``) fed with the checkpoint's per-position accuracy.

- Accept length at the serving profile's K draft steps: L = 1 + Σ_{k≤K} Π_{i≤k} acc_i. SpecForge's
  ``simulated_acc_len`` is the same sum without the leading 1 (it leaves out SGLang's bonus token). Past the
  positions trained, acc decays as the advisor extrapolates.
- Its interval covers what the bench after ``train serve`` will measure (``backend.agent.host.shared.expect``):
  each acc_i carries the spread of the logs it rests on (the host's ``accuracy_at``: the half-range taken as
  1.96 standard errors) and the advisor draws those with its cost model's error; to that come the bench's own
  sampling noise at its request count and the training-serving gap, calibrated from this host's served
  checkpoints (their prediction at serve time against their run's bench), the published prior before any.
- tok/s: the advisor's cycle-cost model over the speculative runs measured on this host (a cycle's cost is the
  target's verify and the draft passes, not the drafter's weights, so any drafter's runs count), labelled
  assumed where it is; with no run measured here at all, the configured cycle with the advisor's assumed
  per-step cost (``assess`` on no points), said so. Against the baseline (measured or configured, said which)
  and the break-even accept length c(K) · baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.agent.host.shared import expect, units
from backend.agent.host.shared.acceptance_model import Acceptance
from backend.agent.host.shared.advice import assess
from backend.agent.host.shared.cost_model import CostModel
from backend.errors import UsageError
from backend.history import RunSummary, Yardstick
from backend.measure import judge
from backend.measure.bench import DEFAULT_REQUESTS
from backend.tune.advisor import DEFAULT_STEPS, AdviceRow, bench_lists, predict_from_rates, single_stream

Z = 1.96
MIN_SE = 0.005  # one log has no spread: an accuracy is still not known to better than this


@dataclass(frozen=True)
class Basis:
    """What every checkpoint's prediction is judged with: the cost model and the baseline, and where each
    came from."""

    cost: CostModel
    baseline_tok_s: float
    baseline_source: str
    measured_runs: int
    noise: expect.BenchNoise | None = None  # the bench the intervals cover
    gap: expect.Gap | None = None  # the training-serving gap they include

    def covers(self) -> str:
        """What the intervals cover, in words."""
        parts = [p.text() for p in (self.noise, self.gap) if p is not None]
        return "intervals 95% for " + " and ".join(parts) if parts else "intervals 95% of the model alone"

    def break_even(self, steps: int) -> float:
        return judge.break_even(self.cost(steps), self.baseline_tok_s)

    @property
    def assumed(self) -> bool:
        return self.cost.assumed

    def to_json(self) -> dict[str, Any]:
        return {
            "cost_model": self.cost.to_json(),
            "baseline_tok_s": self.baseline_tok_s,
            "baseline": self.baseline_source,
            "measured_runs": self.measured_runs,
            "bench_noise": None if self.noise is None else self.noise.to_json(),
            "gap": None if self.gap is None else self.gap.to_json(),
        }


def _errors(accuracy: dict[str, Any]) -> list[float]:
    acc, low, high = accuracy["acc"], accuracy.get("low") or accuracy["acc"], accuracy.get("high") or accuracy["acc"]
    return [max(MIN_SE, (high[i] - low[i]) / 2.0 / Z) for i in range(len(acc))]


def gap_pairs(runs: Sequence[RunSummary], noise: expect.BenchNoise) -> list[tuple[float, float, float]]:
    """(predicted, measured accept length, the measurement's relative error) of each run that served a
    training checkpoint and benched it: the prediction the model made at serve time (before any gap moved it)."""
    out = []
    for r in runs:
        t = r.training or {}
        predicted = t.get("model_accept_len") or t.get("predicted_accept_len")
        bench = r.bench or {}
        measured = bench.get("accept_len")
        if predicted and measured:
            n = int(bench.get("requests") or (bench.get("result") or {}).get("requests") or 1)
            se = expect.BenchNoise(n, noise.accept_rel_sd, noise.tok_s_rel_sd, noise.source).accept_se()
            out.append((float(predicted), float(measured), se))
    return out


def advised(
    accuracy: dict[str, Any],
    steps: int,
    runs: Sequence[RunSummary],
    yardstick: Yardstick,
    requests: int = DEFAULT_REQUESTS,
) -> tuple[AdviceRow, Basis]:
    """The advisor's row at ``steps`` draft steps for this accuracy, its intervals covering a bench of
    ``requests`` requests and the training-serving gap, and the basis it was costed on."""
    rates = [min(1.0, max(0.0, a)) for a in accuracy["acc"]]
    errors = _errors(accuracy)
    noise = expect.bench_noise(bench_lists(runs), requests)
    gap = expect.calibrate(gap_pairs(runs, noise))
    try:
        advice = predict_from_rates(rates, errors, runs, yardstick, max_steps=steps, requests=requests, gap=gap)
        rows, cost, measured = advice.rows, advice.cost, len([r for r in runs if r.speculative])
    except UsageError:  # nothing measured on this host: the configured cycle, the per-step cost assumed
        acceptance = Acceptance.given(rates, errors, "a checkpoint's per-position accuracy")
        done = assess(
            [],
            1000.0 / yardstick.baseline_tok_s,
            yardstick.baseline_tok_s,
            steps,
            fallback_cycle=(DEFAULT_STEPS, yardstick.cycle_ms),
            acceptance=acceptance,
        )
        rows = tuple(AdviceRow.from_json(expect.cover(r, noise, gap)) for r in done["rows"])
        cost, measured = done["cost"], 0
    row = next(r for r in rows if r.steps == steps)
    return row, Basis(cost, yardstick.baseline_tok_s, yardstick.source, measured, noise, gap)


def verdict(value: float, low: float, high: float, line: float) -> str:
    """beats / falls short of / too close to call against / level with: the judge's (``judge.judged_word``),
    beats or falls short only where the whole interval clears the line and ``value`` is past the practical
    floor."""
    return judge.judged_word(value, low, high, line, ("beats", "falls short of"), "too close to call against")


EMPTY = {
    k: None
    for k in (
        "predicted_accept_len",
        "predicted_accept_len_low",
        "predicted_accept_len_high",
        "model_accept_len",
        "predicted_tok_s",
        "predicted_tok_s_low",
        "predicted_tok_s_high",
        "cycle_ms",
        "break_even",
        "versus_baseline",
        "versus_break_even",
    )
}


def predict(
    accuracy: dict[str, Any] | None, steps: int, runs: Sequence[RunSummary], yardstick: Yardstick
) -> tuple[dict[str, Any], Basis | None]:
    """The checkpoint's predicted accept length and tok/s at ``steps`` draft steps with their intervals and
    the verdicts against the baseline and the break-even (None figures when it carries no accuracy)."""
    if not accuracy or not accuracy.get("acc"):
        return dict(EMPTY), None
    row, basis = advised(accuracy, steps, runs, yardstick)
    line = basis.break_even(steps)
    assert row.model_accept_len is not None  # covered: the model's own length kept
    assert row.tok_s is not None and row.tok_s_low is not None and row.tok_s_high is not None  # a cycle to divide by
    return {
        "predicted_accept_len": round(row.accept_len, 3),
        "predicted_accept_len_low": round(row.accept_len_low, 3),
        "predicted_accept_len_high": round(row.accept_len_high, 3),
        "model_accept_len": round(row.model_accept_len, 3),
        "predicted_tok_s": row.tok_s,
        "predicted_tok_s_low": row.tok_s_low,
        "predicted_tok_s_high": row.tok_s_high,
        "cycle_ms": row.cycle_ms,
        "break_even": round(line, 3),
        "versus_baseline": verdict(row.tok_s, row.tok_s_low, row.tok_s_high, basis.baseline_tok_s),
        "versus_break_even": verdict(row.accept_len, row.accept_len_low, row.accept_len_high, line),
        "assumed": list(row.notes),
    }, basis


def measured(runs: Sequence[RunSummary], serve_path: str | None) -> dict[str, Any]:
    """What the newest run that served this checkpoint's folder measured: tok/s of one stream and accept
    length, or None figures when none did."""
    for r in runs:
        if not serve_path or r.drafter_path != serve_path:
            continue
        tok_s, _ = single_stream(r)
        accept = (r.bench or {}).get("accept_len") or r.accept_len
        if tok_s is not None or accept is not None:
            return {"measured_tok_s": tok_s, "measured_accept_len": accept, "measured_run": r.id}
    return {"measured_tok_s": None, "measured_accept_len": None, "measured_run": None}


def gap_line(run: RunSummary) -> str | None:
    """For a run that served a training checkpoint (``specdeck train serve``): what the checkpoint predicted
    before the restart against what the run measured; None for any other run."""
    t = run.training or {}
    if t.get("predicted_tok_s") is None:
        return None
    tok_s = single_stream(run)[0]
    measured = "not measured yet" if tok_s is None else f"measured {tok_s:.1f} tok/s"
    return (
        f"{run.id}: {t.get('training')} {t.get('checkpoint')} predicted {units.tok_s(t['predicted_tok_s'])} tok/s "
        f"({units.tok_s_range(t['predicted_tok_s_low'], t['predicted_tok_s_high'])}), accept "
        f"{t['predicted_accept_len']:.2f}; {measured}"
    )
