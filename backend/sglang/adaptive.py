"""SGLang's adaptive speculation (``--speculative-adaptive``) as its wheels ship it: the config file it reads,
the ladders it ships, and the policy that picks the step tier in force.

Read from the PyPI wheels 0.5.11-0.5.23 (research notes of issue 36, §1; citations are
``release:path:line`` of the wheel, e.g. ``0.5.23:sglang/srt/speculative/adaptive_spec_params.py:213``):

- The config (``--speculative-adaptive-config FILE``, a JSON object). From 0.5.13 each key made of digits is a
  batch-size slot (``{"1": {"candidate_steps": [1, 3, 7]}, "8": …}``) and every other key a default each slot
  inherits (``cfg={**cfg, **entry}``, ``:291-295``); a file without a digit key fails startup. 0.5.11-0.5.12 read
  one flat ladder (``{"candidate_steps": [1, 3, 7], "ema_alpha": 0.2, …}``). A given file replaces the shipped
  default, never merges with it (``:110-114``). Steps 0 (no drafting) is a tier from 0.5.14.
- The policy (``AdaptiveStepSlot``, ``:153-272``; ``AdaptiveSpeculativeParams``, ``:275-358``): each slot keeps
  an EMA of the accepted drafts per request (bonus excluded), counts the verifies routed to it, and after
  ``warmup_batches`` re-decides every ``update_interval`` verifies by a threshold walk: down while the EMA is at
  or below the next lower tier minus 0.5 (0.5 to reach tier 0) plus ``down_hysteresis``, else up while it is above
  the tier minus 0.5 plus ``up_hysteresis``; ``ceiling_coeff`` caps holds and downs; a slot at 0 probes the next
  tier up. A batch is routed by its size padded up to the next captured CUDA-graph batch size, to the largest slot
  key not above it. ``AdaptivePolicy`` below is that policy, checked verify by verify against the wheel's own
  classes on recorded traces (tests/fixtures/sglang/adaptive-0.5.23-trace.json, scripts/sglang_adaptive_trace.py).

The tier in force shows as ``/server_info``'s ``internal_states[0].speculative_num_steps`` (0.5.11+) and the
``sglang:spec_num_steps`` gauge (0.5.13+). Stdlib only, Python 3.8+: the simulator imports this on the host side.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from backend.sglang.versions import parse as parse_version

FIRST = (0, 5, 11)  # --speculative-adaptive appears (flag tables)
OVERLAP_FROM = (0, 5, 12)  # 0.5.11 runs adaptive only with the overlap scheduler off (PR #23336 lifts it)
LADDER_FROM = (0, 5, 13)  # digit batch-size keys (PR #24055); a flat config fails from here on
ZERO_STEPS_FROM = (0, 5, 14)  # tier 0 (no drafting) allowed
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")  # adaptive_unsupported_reason: NEXTN resolves to EAGLE (:61-99)

# The per-slot knobs SGLang reads, with its defaults (AdaptiveStepSlot.__init__, 0.5.23:…:166-185).
KNOB_DEFAULTS: dict[str, float] = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "down_hysteresis": -0.25,
    "up_hysteresis": 0.0,
    "ceiling_coeff": 0,
}
KEYS = ("candidate_steps", *KNOB_DEFAULTS)
_INT_KNOBS = ("update_interval", "warmup_batches")

# The ladders each release ships (DEFAULT_ADAPTIVE_CONFIG; notes §1.3 and §1.8).
_FLAT_DEFAULT = {"candidate_steps": [1, 3, 7]}  # 0.5.11 :98
_DEFAULTS: tuple[tuple[tuple[int, int, int], dict[str, Any]], ...] = (
    (
        (0, 5, 20),
        {
            "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
            "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
            "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
            "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
        },
    ),
    (
        ZERO_STEPS_FROM,
        {
            "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
            "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
            "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
            "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
        },
    ),
    (
        LADDER_FROM,
        {
            "1": {"candidate_steps": [1, 3, 7], "down_hysteresis": -0.25},
            "8": {"candidate_steps": [1, 3], "down_hysteresis": 0.0},
            "32": {"candidate_steps": [1]},
        },
    ),
)


def _numbers(version: str | None) -> tuple[int, int, int]:
    """A release's numbers; an unknown version reads as the newest behaviour."""
    return parse_version(version) or (99999, 0, 0)


def supported(version: str | None) -> bool:
    return _numbers(version) >= FIRST


def ladders(version: str | None) -> bool:
    """True where the config is per batch size (digit keys), False for 0.5.11-0.5.12's one flat ladder."""
    return _numbers(version) >= LADDER_FROM


def default_config(version: str | None = None) -> dict[str, Any]:
    """The config a release runs with when no file is given (a copy: callers may change it)."""
    numbers = _numbers(version)
    for since, config in _DEFAULTS:
        if numbers >= since:
            return {k: dict(v, candidate_steps=list(v["candidate_steps"])) for k, v in config.items()}
    return dict(_FLAT_DEFAULT, candidate_steps=list(_FLAT_DEFAULT["candidate_steps"]))


def slot_entries(config: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """``{batch size: the slot's knobs}`` as SGLang builds each slot: top-level knobs under the slot's own."""
    top = {k: v for k, v in config.items() if not str(k).isdigit()}
    return {int(k): {**top, **v} for k, v in config.items() if str(k).isdigit() and isinstance(v, dict)}


def candidate_union(config: dict[str, Any]) -> list[int]:
    """Every tier the server builds (``resolve_candidate_steps_from_config``): the union of the slots' steps."""
    if not ladders_in(config):
        return sorted(set(config.get("candidate_steps") or []))
    return sorted({s for entry in slot_entries(config).values() for s in entry.get("candidate_steps") or []})


def ladders_in(config: dict[str, Any]) -> bool:
    return any(str(k).isdigit() for k in config)


def initial_steps(config: dict[str, Any], steps: int | None) -> int:
    """The tier a server starts on: the profile's steps, else the middle of the union (``_init_adaptive_…``,
    0.5.23 speculative_hook.py:1392-1427)."""
    union = candidate_union(config)
    return steps if steps is not None else union[len(union) // 2]


def format_problem(config: object) -> str | None:
    """What is wrong with an adaptive config's shape (key names and value types), in one sentence; None if it is
    one SGLang reads. Release rules (flat vs per batch size, tier 0) are ``problem``'s."""
    if not isinstance(config, dict):
        return "must be a table of SGLang's adaptive keys"

    def knobs(where: str, table: dict[str, Any]) -> str | None:
        for key, value in table.items():
            if key not in KEYS:
                return f'{where}{key}: not a key SGLang reads (keys: {", ".join(KEYS)}, or a batch size like "8")'
            if key == "candidate_steps":
                if not isinstance(value, list) or not value or not all(_is_int(s) and s >= 0 for s in value):
                    return f"{where}candidate_steps must be a non-empty list of whole numbers 0 or more, got {value!r}"
            elif not _is_number(value) or (key in _INT_KNOBS and not (_is_int(value) and value >= 1)):
                kind = "a whole number 1 or more" if key in _INT_KNOBS else "a number"
                return f"{where}{key} must be {kind}, got {value!r}"
            elif key == "ema_alpha" and not 0 < value <= 1:
                return f"{where}ema_alpha must be in (0, 1], got {value!r}"
        return None

    top = {k: v for k, v in config.items() if not str(k).isdigit()}
    if (why := knobs("", top)) is not None:
        return why
    for key, entry in config.items():
        if not str(key).isdigit():
            continue
        if not isinstance(entry, dict):
            return f'batch size "{key}" must be a table like {{candidate_steps = [1, 3, 7]}}'
        if (why := knobs(f'"{key}".', entry)) is not None:
            return why
        if "candidate_steps" not in entry:
            return f'batch size "{key}" needs candidate_steps (SGLang refuses a slot without them)'
    if not ladders_in(config) and "candidate_steps" not in config:
        return 'needs candidate_steps, or batch-size tables like "1" = {candidate_steps = [1, 3, 7]}'
    return None


def problem(config: dict[str, Any], version: str | None, steps: int | None = None) -> str | None:
    """Why SGLang ``version`` would not run ``config`` as written (fail startup, or quietly run something
    else), in one sentence with SGLang's own words where it has them; None when it runs it."""
    if (why := format_problem(config)) is not None:
        return why
    numbers = _numbers(version)
    if ladders_in(config) and numbers < LADDER_FROM:
        return f"sglang {version} reads one flat ladder ({{candidate_steps = [1, 3, 7]}}): batch-size keys are 0.5.13's"
    if not ladders_in(config) and numbers >= LADDER_FROM:
        return (
            "SGLang 0.5.13 and later refuse a flat config: 'speculative_adaptive_config must contain at least one "
            'integer-string BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}\' (put the ladder under "1")'
        )
    union = candidate_union(config)
    if 0 in union and numbers < ZERO_STEPS_FROM:
        return f"sglang {version} has no tier 0 (no drafting): steps 0 in a ladder needs 0.5.14 or later"
    if steps is not None and numbers >= LADDER_FROM and steps not in union:
        # ValueError at startup (0.5.23 speculative_hook.py:1392-1427)
        return (
            f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps {union}: SGLang "
            "refuses to start; pick one of those values"
        )
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Slot:
    """One batch-size slot of the policy: its tiers, EMA, verify count and the tier in force."""

    def __init__(self, initial: int, knobs: dict[str, Any]) -> None:
        self.candidates: list[int] = sorted(set(knobs["candidate_steps"]))
        get = {**KNOB_DEFAULTS, **knobs}
        self.alpha = float(get["ema_alpha"])
        self.every = int(get["update_interval"])
        self.warmup = int(get["warmup_batches"])
        self.down = float(get["down_hysteresis"])
        self.up = float(get["up_hysteresis"])
        self.ceiling = float(get["ceiling_coeff"])
        self.steps = initial if initial in self.candidates else self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)  # a neutral start; -1 for a slot born at tier 0
        self.fed = 0

    def feed(self, correct_drafts: Sequence[int]) -> int | None:
        """One verify's accepted drafts per request (bonus excluded); returns the new tier on a switch."""
        if not correct_drafts:
            return None
        if self.steps > 0:  # at tier 0 nothing is drafted: the EMA holds its value
            self.ema = (1 - self.alpha) * self.ema + self.alpha * (sum(correct_drafts) / len(correct_drafts))
        self.fed += 1
        if self.fed <= self.warmup or (self.fed - self.warmup) % self.every:
            return None
        target = self._decide()
        if target == self.steps:
            return None
        self.steps = target
        return target

    def _decide(self) -> int:
        tiers, old = self.candidates, self.steps
        i = tiers.index(old)
        if old == 0:  # probe the next tier up, whatever the EMA says
            target = tiers[min(i + 1, len(tiers) - 1)]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            return target
        start = i
        while i > 0 and self.ema <= (0.5 if tiers[i - 1] == 0 else tiers[i - 1] - 0.5) + self.down:
            i -= 1
        if i == start:  # up only when it did not go down
            while i < len(tiers) - 1 and self.ema > tiers[i] - 0.5 + self.up:
                i += 1
        if self.ceiling > 0:  # caps a hold or a drop, never a rise
            cap = max(1, math.ceil(self.ema * self.ceiling))
            if cap < tiers[i] <= old:
                while i > 0 and tiers[i] > cap:
                    i -= 1
        return tiers[i]


class AdaptivePolicy:
    """SGLang 0.5.13+'s adaptive step policy for one scheduler: batch-size slots, routing, verify feedback.

    ``cuda_graph_bs``: the captured decode batch sizes (None with CUDA graphs off): a batch is padded up to the
    next one before it is routed, as SGLang does."""

    def __init__(self, config: dict[str, Any], steps: int | None = None, cuda_graph_bs: Sequence[int] | None = None):
        entries = slot_entries(config) if ladders_in(config) else {1: dict(config)}
        start = initial_steps(config, steps)
        self.keys = sorted(entries)
        self.slots = {k: Slot(start, entries[k]) for k in self.keys}
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None
        self.tiers = candidate_union(config)

    def slot(self, batch_size: int) -> Slot:
        padded = batch_size
        if self.cuda_graph_bs is not None:
            i = bisect.bisect_left(self.cuda_graph_bs, batch_size)
            padded = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch_size
        j = bisect.bisect_right(self.keys, padded) - 1
        return self.slots[self.keys[max(0, j)]]

    def steps_for(self, batch_size: int) -> int:
        """The tier a decode step of ``batch_size`` drafts with (decided before drafting)."""
        return self.slot(batch_size).steps

    def feed(self, batch_size: int, correct_drafts: Sequence[int]) -> int | None:
        """A verify's result, routed by its batch size; the slot's new tier on a switch, else None."""
        return self.slot(batch_size).feed(correct_drafts)
