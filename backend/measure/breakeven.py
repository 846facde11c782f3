"""The arithmetic of speculative decoding against a baseline (FIELD-NOTES §1).

A verify cycle of C ms yields L tokens per stream (the accept length), so speculation beats a baseline of B
tok/s when L > C * B / 1000 (the break-even). A target of T tok/s needs L = T * C / 1000. With per-step
acceptance p, unbounded steps give L = 1 / (1 - p); K draft steps give L = (1 - p^(K+1)) / (1 - p), which
never exceeds K + 1. Both figures are reported, since the limit alone promises the unreachable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Real
from typing import Any

from backend.agent.host.shared.acceptance_model import chain as chain_accept_len  # one implementation, host-side too
from backend.errors import UsageError

_DIGITS = 6  # results are rounded for display; the inputs are rarely better than 3 figures


def cycle_ms(accept_len: float, tok_s: float, running_req: int = 1) -> float:
    """Verify-cycle time implied by a decode sample: 1000 * accept_len * streams / tok_s.

    SGLang's gen throughput sums all running streams, so with ``running_req`` streams each one advances
    ``accept_len`` tokens per cycle; for one stream this is the field notes' 1000 * L / tok_s.
    """
    return 1000.0 * accept_len * running_req / tok_s


def live_breakeven(cycle: float, baseline: float) -> float:
    """Accept length needed to match ``baseline`` tok/s with cycles of ``cycle`` ms."""
    return cycle * baseline / 1000.0


def accept_len_for(p: float, steps: int | None = None) -> float:
    """Accept length for per-step acceptance ``p``: (1 - p^(K+1)) / (1 - p) with K steps, else 1 / (1 - p)."""
    if steps is not None:
        _check_steps(steps)
    if steps is None:
        if not 0 <= p < 1:
            raise UsageError(f"acceptance must be at least 0 and below 1 without a step count, got {p}.")
        return 1.0 / (1.0 - p)
    if not 0 <= p <= 1:
        raise UsageError(f"acceptance must be between 0 and 1, got {p}.")
    return math.fsum(p**i for i in range(steps + 1))


def _within_ceiling(length: float, steps: int) -> bool:
    """L <= K + 1, forgiving the last bit of rounding (a target of exactly max_tok_s is reachable)."""
    return length <= (steps + 1) * (1 + 1e-12)


def decayed_rates(first: float, decay: float, steps: int) -> list[float]:
    """Per-position acceptance falling geometrically: a_i = first · decay^(i−1), capped at 1."""
    return [min(1.0, first * decay**i) for i in range(steps)]


def _solve(length: float, steps: int, length_at: Callable[[float], float]) -> float | None:
    """The x in [0, 1] with length_at(x) == length, for a length_at rising from 1 to steps + 1; None beyond
    the K + 1 ceiling."""
    if length <= 1:
        return 0.0
    if not _within_ceiling(length, steps):
        return None
    if length >= steps + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # the polynomial rises on [0, 1]; 60 halvings reach double precision
        mid = (lo + hi) / 2
        if length_at(mid) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def p_for_steps(length: float, steps: int) -> float | None:
    """The p in [0, 1] with accept_len_for(p, steps) == length; None beyond the K + 1 ceiling."""
    return _solve(length, steps, lambda p: accept_len_for(p, steps))


def first_rate_for(length: float, steps: int, decay: float) -> float | None:
    """The a_1 whose ``decayed_rates(a_1, decay, steps)`` chain has accept length ``length`` (decay ≤ 1)."""
    return _solve(length, steps, lambda a: chain_accept_len(decayed_rates(a, decay, steps)))


def _check_steps(steps: object) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UsageError(f"the step count must be a whole number of at least 1, got {steps!r}.")


def _positive(value: object, what: str, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{what} must be a positive number, got {value!r}; {hint}.")
    return float(value)


@dataclass(frozen=True)
class TargetNeed:
    """What a target tok/s demands: its accept length, the per-step acceptance the unbounded-steps limit needs
    (``p_limit``) and, with a step count, the one those steps need (``p_steps``; None out of reach) and whether
    the K + 1 ceiling allows it at all (``reachable``; None without a step count)."""

    tok_s: float
    accept_len: float
    p_limit: float
    p_steps: float | None = None
    reachable: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tok_s": self.tok_s,
            "accept_len": self.accept_len,
            "p_limit": self.p_limit,
            "p_steps": self.p_steps,
            "reachable": self.reachable,
        }


@dataclass(frozen=True)
class BreakEven:
    """The break-even accept length against ``baseline`` at ``cycle_ms`` cycles, the ceiling ``steps`` draft steps
    allow (``max_tok_s``; None without a step count), and what each target demands."""

    break_even_accept_len: float
    max_tok_s: float | None
    targets: tuple[TargetNeed, ...]
    cycle_ms: float
    baseline: float
    steps: int | None

    def to_json(self) -> dict[str, Any]:
        """As `specdeck breakeven --json` and the advisor's ``targets`` print it."""
        return {
            "break_even_accept_len": self.break_even_accept_len,
            "max_tok_s": self.max_tok_s,
            "targets": [t.to_json() for t in self.targets],
            "cycle_ms": self.cycle_ms,
            "baseline": self.baseline,
            "steps": self.steps,
        }


def breakeven(cycle_ms: float, baseline: float, targets: Iterable[float] = (), steps: int | None = None) -> BreakEven:
    """Break-even accept length, the step ceiling, and what each target tok/s demands; UsageError for
    non-positive inputs."""
    cycle = _positive(cycle_ms, "the cycle time", "pass the verify cycle in milliseconds, e.g. 30")
    base = _positive(baseline, "the baseline", "pass the baseline rate in tok/s, e.g. 82")
    if steps is not None:
        _check_steps(steps)
    rows = []
    for target in targets:
        tok_s = _positive(target, "a target", "pass targets in tok/s, e.g. 150")
        length = tok_s * cycle / 1000.0
        p_steps = None if steps is None else p_for_steps(length, steps)
        rows.append(
            TargetNeed(
                tok_s=tok_s,
                accept_len=round(length, _DIGITS),
                p_limit=round(max(0.0, 1.0 - 1.0 / length), _DIGITS),
                p_steps=None if p_steps is None else round(p_steps, _DIGITS),
                reachable=None if steps is None else _within_ceiling(length, steps),
            )
        )
    return BreakEven(
        break_even_accept_len=round(live_breakeven(cycle, base), _DIGITS),
        max_tok_s=None if steps is None else round((steps + 1) * 1000.0 / cycle, _DIGITS),
        targets=tuple(rows),
        cycle_ms=cycle,
        baseline=base,
        steps=steps,
    )
