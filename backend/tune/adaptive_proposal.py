"""The adaptive config proposed for a drafter (``--speculative-adaptive-config``, SGLang's own keys): a
batch-size slot per concurrency its runs measured, each slot's ladder topped by the step count fastest there, and
what each slot is expected to give, beside the one best fixed step count.

What a slot settles on is SGLang's own policy (``backend.sglang.adaptive``) fed the drafter's measured
per-position acceptance (``settled_tiers``); the tok/s at each (concurrency, steps) comes from the step-count
advice (``backend.tune.advisor``) at one stream and from the drafter's benches at more.
``backend.tune.adaptive_ab`` serves the proposal and benches it against the fixed step count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.history import RunSummary, Yardstick
from backend.measure import judge
from backend.tune.advisor import DEFAULT_MAX_STEPS, Advice, advise, run_steps, same_drafter


@dataclass(frozen=True)
class AdaptiveProposal:
    """The ``--speculative-adaptive-config`` proposed for a drafter, in SGLang's own keys, and what it is expected
    to give at each concurrency (per-stream tok/s, 95% interval), beside the one best fixed step count."""

    advice: Advice
    config: dict[str, Any]  # {"1": {"candidate_steps": [...]}, "8": {...}}: per batch-size slot
    steps: int  # the tier it starts on (the profile's steps): one of the candidates
    expected: list[dict[str, Any]]  # {"concurrency", "steps", "tok_s", "tok_s_low", "tok_s_high", "basis"}
    fixed: dict[str, Any]  # the best fixed step count: {"steps", "expected": [...]} at the same concurrencies
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "adaptive_config": self.config,
            "steps": self.steps,
            "expected": self.expected,
            "fixed": self.fixed,
            "notes": self.notes,
            "run": self.advice.run.id if self.advice.run else None,
            "drafter": self.advice.run.drafter if self.advice.run else None,
        }


# (concurrency, steps) -> (tok/s, its 95% low, high, "measured" | "predicted" | "scaled" | "baseline")
Grid = dict[tuple[int, int], tuple[float, float, float, str]]


def _tok_s_grid(advice: Advice, runs: Sequence[RunSummary], yardstick: Yardstick) -> tuple[Grid, list[str]]:
    """Per-stream tok/s with its 95% interval at each (concurrency, steps): one stream's from the advice rows;
    other concurrencies measured where a run of that step count benched there, else one stream's scaled by the
    cycle the drafter's benches measured at that concurrency against one stream (the batch's own cost)."""
    grid: Grid = {}
    for row in advice.rows:
        value, low, high = row.figure
        if value is not None:
            assert low is not None and high is not None  # a row's figure comes with its interval
            grid[(1, row.steps)] = (value, low, high, "measured" if row.measured_tok_s else "predicted")
    peers = same_drafter(runs, advice.run) if advice.run is not None else []
    ratios: dict[int, list[float]] = {}
    for run in peers:
        steps = run_steps(run)
        one = next((lv for lv in run.curve if lv.streams == 1), None)
        for level in run.curve:
            if level.streams > 1 and steps is not None:
                width = grid.get((1, steps))
                rel = ((width[2] - width[1]) / 2 / width[0]) if width and width[0] else 0.05
                grid[(level.streams, steps)] = (
                    level.tok_s,
                    level.tok_s * (1 - rel),
                    level.tok_s * (1 + rel),
                    "measured",
                )
                if one is not None and one.cycle_ms and level.cycle_ms:
                    ratios.setdefault(level.streams, []).append(level.cycle_ms / one.cycle_ms)
    notes = []
    for streams, seen in sorted(ratios.items()):
        ratio = sum(seen) / len(seen)
        for steps in range(1, max(k for _, k in grid) + 1):
            if (streams, steps) not in grid and (1, steps) in grid:
                value, low, high, _ = grid[(1, steps)]
                grid[(streams, steps)] = (value / ratio, low / ratio, high / ratio, "scaled")
        notes.append(f"at {streams} streams a cycle took {ratio:.2f}× one stream's (the drafter's benches)")
    for streams in {c for c, _ in grid}:
        base = judge.baseline_at(yardstick, streams, bench=True)[0]  # the drafter's benches against the baseline's
        grid[(streams, 0)] = (base, base, base, "baseline")
    return grid, notes


def settled_tiers(knobs: dict[str, Any], start: int, accepted: Any) -> list[int]:
    """The tiers SGLang's policy (``sglang_adaptive.Slot``) holds for a slot when each verify at tier k accepts
    ``accepted(k)`` drafts on average: fed verify by verify until it repeats; one tier, or the ones it cycles."""
    from backend.sglang.adaptive import Slot

    slot = Slot(start, knobs)
    seen: list[int] = []
    for _ in range(400):
        slot.feed([accepted(slot.steps)])
        seen.append(slot.steps)
    tail = seen[-100:]
    return sorted(set(tail))


def propose_adaptive(
    runs: Sequence[RunSummary],
    yardstick: Yardstick,
    run_id: str | None = None,
    *,
    version: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> AdaptiveProposal:
    """The adaptive config for ``run_id``'s drafter (else ``pick_run``'s): a batch-size slot per concurrency the
    drafter's runs measured (merged where the next asks the same), its ladder topped by the step count fastest
    there, with tier 1 under it to fall back to when acceptance drops; tier 0 alone (no drafting; SGLang 0.5.14+)
    where the baseline is ahead. What each slot settles on is SGLang's own policy fed the drafter's measured
    per-position acceptance (``settled_tiers``), and the expected tok/s is that tier's at that concurrency."""
    from backend.sglang.adaptive import ZERO_STEPS_FROM
    from backend.sglang.versions import parse as parse_version

    advice = advise(runs, yardstick, run_id, max_steps=max_steps)
    version = version or (advice.run.version if advice.run else None)
    grid, notes = _tok_s_grid(advice, runs, yardstick)
    zero = (parse_version(version) or (99999, 0, 0)) >= ZERO_STEPS_FROM
    concurrencies = sorted({c for c, _ in grid})

    def accepted(k: int) -> float:
        return 0.0 if k == 0 else max(0.0, advice.acceptance.accept_len(k) - 1.0)

    def best_at(c: int) -> int:
        """One stream: the advisor's best (the fastest measured, else predicted); more streams: the fastest step
        count measured there, else scaled."""
        if c == 1 and advice.best is not None:
            return advice.best.steps
        options = [k for k in range(1, max_steps + 1) if (c, k) in grid]
        measured = [k for k in options if grid[(c, k)][3] == "measured"] or options
        return max(measured, key=lambda k: (grid[(c, k)][0], -k))

    slots: dict[str, dict[str, Any]] = {}
    for c in concurrencies:
        top = best_at(c)
        # SGLang's policy follows acceptance, not speed: a slot drafts up to the fastest tier (1 under it for when
        # acceptance drops); where the baseline is ahead the slot holds tier 0 alone (no drafting, 0.5.14+).
        ladder = [0] if zero and grid[(c, 0)][0] > grid[(c, top)][0] else sorted({1, top})
        previous = next(reversed(slots.values()), None)
        if previous is None or previous["candidate_steps"] != ladder:
            slots[str(c)] = {"candidate_steps": ladder}
    start = max(slots["1"]["candidate_steps"]) if "1" in slots else 1
    config = dict(slots)
    expected, fixed_rows = [], []
    # The one fixed step count to beat: of those measured (else all), the fastest against the baseline over the
    # concurrencies.
    measured = [r.steps for r in advice.rows if r.measured_tok_s is not None] or range(1, max_steps + 1)
    fixed = max(measured, key=lambda k: sum(grid[(c, k)][0] / grid[(c, 0)][0] for c in concurrencies if (c, k) in grid))
    from backend.sglang.adaptive import AdaptivePolicy

    policy = AdaptivePolicy(config, start)
    for c in concurrencies:
        slot = policy.slot(c)
        knobs = {"candidate_steps": slot.candidates}
        tiers = settled_tiers(knobs, slot.steps, accepted)
        held = [k for k in tiers if (c, k) in grid]
        if not held:
            continue
        k = max(held, key=lambda t: grid[(c, t)][0]) if len(held) == 1 else held[0]
        value, low, high, basis = grid[(c, k)]
        if len(held) > 1:  # it cycles: expect the mean of the tiers, the interval spanning them
            value = sum(grid[(c, t)][0] for t in held) / len(held)
            low, high = min(grid[(c, t)][1] for t in held), max(grid[(c, t)][2] for t in held)
            basis = "cycling " + "/".join(map(str, held))
        expected.append(_row(c, value, low, high, basis, steps=held))
        if (c, fixed) in grid:
            f_value, f_low, f_high, f_basis = grid[(c, fixed)]
            fixed_rows.append(_row(c, f_value, f_low, f_high, f_basis))
    if not zero:
        notes.append(f"SGLang {version} has no tier 0 (0.5.14+): no slot stops drafting")
    if len(concurrencies) == 1:
        notes.append("one concurrency measured: bench the drafter at more streams for a ladder per batch size")
    return AdaptiveProposal(advice, config, start, expected, {"steps": fixed, "expected": fixed_rows}, notes)


def _row(c: int, value: float, low: float, high: float, basis: str, **more: Any) -> dict[str, Any]:
    rounded = {"tok_s": round(value, 2), "tok_s_low": round(low, 2), "tok_s_high": round(high, 2)}
    return {"concurrency": c, **more, **rounded, "basis": basis}


def adaptive_lines(proposal: AdaptiveProposal) -> list[str]:
    """The proposal as text: the config SGLang reads, then expected tok/s per concurrency against fixed steps."""
    import json

    fixed_head = f"fixed {proposal.fixed['steps']} steps"
    out = [
        f"adaptive config for {proposal.advice.run.drafter if proposal.advice.run else 'the drafter'} "
        f"(starts at {proposal.steps} steps): {json.dumps(proposal.config)}",
        f"{'streams':>7}  {'tiers':>7}  {'adaptive tok/s':>22}  {fixed_head:>22}",
    ]
    fixed = {r["concurrency"]: r for r in proposal.fixed["expected"]}
    for row in proposal.expected:
        f = fixed.get(row["concurrency"])
        mine = f"{row['tok_s']:.1f} [{row['tok_s_low']:.1f}-{row['tok_s_high']:.1f}]"
        theirs = "-" if f is None else f"{f['tok_s']:.1f} [{f['tok_s_low']:.1f}-{f['tok_s_high']:.1f}]"
        tiers = "/".join(map(str, row["steps"]))
        out.append(f"{row['concurrency']:>7}  {tiers:>7}  {mine:>22}  {theirs:>22}")
    out += [f"note: {n}" for n in proposal.notes]
    return out
