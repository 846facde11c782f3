"""SIMULATED SGLang's timing and acceptance model: what a decode pass costs and what a drafter accepts.

Timing (the operator's measurements, FIELD-NOTES §1):
- Without speculation one stream decodes at ``BASELINE_TOK_S`` (82 tok/s): a decode pass is 1000/82 ms.
- With speculation a cycle (``pass_ms``, the one cost function) costs ``VERIFY_BASE_MS`` + ``VERIFY_TOKEN_MS``
  per draft token verified + ``DRAFT_STEP_MS`` per draft step: one stream's cycle is 24 + 3k ms for k steps
  at topk 1, 33 ms at the operator's 3 steps. It gives each running request 1 + accepted drafts tokens, at
  most steps + 1.
- Concurrency (``pass_ms``, the one place the cost model lives): each extra running request adds
  ``BATCH_MS_BASELINE`` to a decode pass, so aggregate baseline throughput grows sublinearly with the batch;
  a verify cycle pushes every request's draft tokens through the target, so each extra request adds
  ``VERIFY_MS_PER_TOKEN`` per draft token. Verify cost grows faster than a plain pass, so speculation's gain
  shrinks with load: the AQ drafter (3.3 at 3 steps) beats the baseline per stream up to 5 running requests
  and falls below it from 6 (``crossover_batch``). Without CUDA graphs (``--disable-cuda-graph``, or a batch
  over ``--cuda-graph-max-bs``) passes cost ``NO_CUDA_GRAPH_FACTOR``x.
- Startup takes a few seconds, multiplied by env ``SPECDECK_SIM_TIME_SCALE`` (``time_scale``; tests use ~0.1),
  and so is the idle self-check's 30 s (``idle.py``: an idle server's gauges go back to 0 running, 0 tok/s);
  decode timing is never scaled.

Acceptance is a chain with a conditional rate per position that falls as the drafter guesses further:
a_i = a_1 · decay^(i−1), drafts accepted in order until the first rejection, so k steps give
L(k) = 1 + Σ_{i≤k} Π_{j≤i} a_j. A drafter config.json's ``"specdeck_sim": {"accept": [a_1, ...]}`` or
``{"accept_p": p}`` (the same rate at every position) sets the rates; else an AQ-MedAI folder gets decay
``DECAY_AQ`` and L = 3.3 at 3 steps (≈ 100 tok/s; best at 4 steps, ≈ 103) and any other folder decay
``DECAY_OURS`` and L = 2.0 (≈ 60 tok/s, below baseline); a DFlash drafter (its config's class)
Kimi-K2.5-DFlash's published 3.7 at block 8, a DSpark one SGLang issue #36081's 5.30 at gamma 5. Each request
draws its own difficulty (its rates scaled by a factor around 1, ``REQUEST_SPREAD``; ``engine.Engine.submit``),
the sampling noise a bench sees between prompts. topk > 1 gives each position more candidates: its miss chance
becomes (1 − a)^√topk (invented, ``widened``). NGRAM accepts ``ACCEPT_P_NGRAM`` at every position.

``SPECDECK_SIM_SCENARIO`` names a scenario file (``scenario.py``, ``sandbox up --scenario``) that replaces this
timing model and the named drafters' acceptance, so the sandbox can disagree with the advisor. Stdlib only,
Python 3.8+.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from backend.measure.breakeven import decayed_rates, first_rate_for
from backend.sandbox.sglang_sim import scenario

BASELINE_TOK_S = 82.0
VERIFY_BASE_MS = 22.5
VERIFY_TOKEN_MS = 1.5  # per draft token verified, one stream
DRAFT_STEP_MS = 1.5
REQUEST_SPREAD = 0.05  # standard deviation of a request's acceptance factor
BATCH_MS_BASELINE = 0.5  # per extra running request in a decode pass
VERIFY_MS_PER_TOKEN = 0.8  # per extra running request's draft token in a verify cycle
NO_CUDA_GRAPH_FACTOR = 1.6
PREFILL_MS = 40.0
PREFILL_MS_PER_TOKEN = 0.02
ACCEPT_P_NGRAM = 0.3
# Adaptive tier 0 verifies only the bonus token (a plain pass of the target) and still runs the draft model's
# extend over it unless SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 (0.5.23 eagle_worker_v2.py:1680-1731,
# environ.py:1574-1577): a plain pass plus one draft step.
ZERO_TIER = "plain decode + one draft step"


def _first(length: float, steps: int, decay: float) -> float:
    first = first_rate_for(length, steps, decay)
    assert first is not None, "a chain reaches this accept length"
    return first


DECAY_OURS = 0.85
DECAY_AQ = 0.9
FIRST_OURS = _first(2.0, 3, DECAY_OURS)  # ≈ 0.585: the team's drafter, 2.0 at 3 steps → ≈ 60 tok/s
FIRST_AQ = _first(3.3, 3, DECAY_AQ)  # ≈ 0.931: AQ-MedAI's drafter, 3.3 at 3 steps → ≈ 100 tok/s
# A DFlash drafter (its config's class): z-lab/Kimi-K2.5-DFlash's published MT-Bench figure, accept length 3.7 at
# block 8 (FIELD-NOTES-2026, its card), seven drafts falling ~15% a position.
DECAY_DFLASH = 0.85
FIRST_DFLASH = _first(3.7, 7, DECAY_DFLASH)  # ≈ 0.937
# A DSpark drafter: 0.95 at every position, which gives the one real DSPARK decode line found (SGLang issue
# #36081, DeepSeek-V4-Flash on 0.5.18, static verify): accept len 5.30, accept rate 0.86 at gamma 5.
FIRST_DSPARK, DECAY_DSPARK = 0.95, 1.0


def pass_ms(batch: int, spec: Dict[str, Any], graph: bool = True) -> float:
    """What one decode pass of ``batch`` running requests costs in ms: a verify cycle (with the draft steps)
    when ``spec`` holds the speculative settings, else a plain decode pass."""
    extra = max(0, batch - 1)
    chosen = scenario.active()
    if chosen is not None:  # a scenario file's model (backend.sandbox.sglang_sim.scenario) instead of the operator's
        ms = chosen.pass_ms(batch, spec)
    elif spec and spec.get("draft_tokens") == 1:  # adaptive tier 0: no drafting (see ZERO_TIER)
        ms = 1000.0 / BASELINE_TOK_S + BATCH_MS_BASELINE * extra + DRAFT_STEP_MS
    elif spec:
        ms = VERIFY_BASE_MS + VERIFY_TOKEN_MS * spec["draft_tokens"] + DRAFT_STEP_MS * spec["draft_steps"]
        ms += VERIFY_MS_PER_TOKEN * extra * spec["draft_tokens"]
    else:
        ms = 1000.0 / BASELINE_TOK_S + BATCH_MS_BASELINE * extra
    return ms if graph else ms * NO_CUDA_GRAPH_FACTOR


def crossover_batch(spec: Dict[str, Any], accept_len: float, up_to: int = 1024) -> Optional[int]:
    """The smallest batch at which speculation with mean ``accept_len`` decodes slower per stream than the
    baseline under ``pass_ms``; None when it stays ahead up to ``up_to``."""
    for batch in range(1, up_to + 1):
        if accept_len / pass_ms(batch, spec) < 1.0 / pass_ms(batch, {}):
            return batch
    return None


def time_scale() -> float:
    """Startup-time multiplier from ``SPECDECK_SIM_TIME_SCALE`` (1.0: a few seconds)."""
    return float(os.environ.get("SPECDECK_SIM_TIME_SCALE", "1.0"))


def drafter_rates(path: str, config: Dict[str, Any], steps: int) -> List[float]:
    """A drafter folder's conditional acceptance at positions 1..steps: its ``specdeck_sim`` rates (the last
    one repeated past the list), else by the folder's name (see the module docstring)."""
    sim = config.get("specdeck_sim") or {}
    if "accept" in sim:
        given = [float(a) for a in sim["accept"]] or [0.0]
        return [given[min(i, len(given) - 1)] for i in range(steps)]
    if "accept_p" in sim:
        return [float(sim["accept_p"])] * steps
    chosen = scenario.active()
    key = scenario.drafter_key(path, config)
    named = chosen.rates(key, steps) if chosen is not None else None
    if named is not None:
        return named
    first, decay = {
        "aq-medai": (FIRST_AQ, DECAY_AQ),
        "dflash": (FIRST_DFLASH, DECAY_DFLASH),
        "dspark": (FIRST_DSPARK, DECAY_DSPARK),
    }.get(key, (FIRST_OURS, DECAY_OURS))
    return decayed_rates(first, decay, steps)


def widened(rates: List[float], topk: int) -> List[float]:
    """Rates with ``topk`` candidates per position: the miss chance (1 − a) shrinks to (1 − a)^√topk."""
    return [1.0 - (1.0 - a) ** (max(1, topk) ** 0.5) for a in rates]
