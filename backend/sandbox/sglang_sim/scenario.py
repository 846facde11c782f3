"""The SIMULATED SGLang's timing and acceptance model from a JSON file (``specdeck sandbox up --scenario FILE``),
so the sandbox can disagree with the advisor: a scenario built from someone else's published sweep
(../shared/TUNING-TABLES.md) gives the simulator a per-step cost and an acceptance curve the advisor was not
tuned on.

The file::

    {"decode_ms": {"1": 7.07, "8": 9.5},      # a plain decode step per batch size (linear between, and beyond
                                             #   the last two sizes)
     "draft_step_ms": 0.45,                   # per draft step (k steps: k drafter passes)
     "verify_ms_per_draft_token": 0.55,       # per draft token through the target, per running request
     "verify_overhead_ms": 0.0,               # optional: what a verify pass costs beyond a plain step
     "drafters": {"ours": {"per_position": [0.78, 0.74, 0.74], "noise": 0.05},
                  "aq-medai": {"per_position": [0.86, 0.81, 0.74, 0.86], "noise": 0.05}}}

Prompts (issue 32; ``prompts.py``), all optional: ``"raw_factor"`` (what a prompt without the chat template keeps
of each rate), ``"loop_accept"`` (the accept length at 3 steps of a completion in a loop), ``"collapse": true``
(a full batch with a deep queue accepts nothing), and per drafter ``"domains": {"chat": 2.69, ...}`` (accept
lengths at 3 steps by domain, as drafter cards publish them).

A plain decode step at batch b costs ``decode_ms[b]``; a speculative cycle with k draft steps at batch b costs
``decode_ms[b] + verify_overhead_ms + k·draft_step_ms + k·b·verify_ms_per_draft_token`` (a DFLASH block of B: one
draft pass and B − 1 drafts verified, ``drafters.dflash`` naming any DFlash drafter). A drafter's conditional
acceptance at position i is ``per_position[i-1]`` (the last repeated past the list); each request draws its own
factor so that its a_1 has the standard deviation ``noise`` across requests. A drafter the file does not name
keeps the simulator's built-in curve. Without a scenario the simulator keeps the operator's model (82 tok/s,
24 + 3k ms cycles, accept length 2.0 and 3.3 at 3 steps).

Stdlib only, Python 3.8+ (the simulator imports it).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional, Tuple

ENV = "SPECDECK_SIM_SCENARIO"  # the path of the scenario the simulator reads
FILE_NAME = "sim-scenario.json"  # where `sandbox up --scenario` puts it, in the sandbox host's workdir
DRAFTERS = ("ours", "aq-medai", "dflash")  # the sandbox's drafters by their config names; dflash: any DFlash one
MAX_EASE = 3.0  # a request's factor is kept in (0, MAX_EASE]


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the key."""


def _number(value: Any, key: str, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
        raise ScenarioError("%s must be a number of at least %g, got %r" % (key, low, value))
    return float(value)


class Scenario(object):
    """A timing and acceptance model; ``pass_ms`` and ``rates`` are what the simulator asks."""

    def __init__(self, doc: Dict[str, Any], where: str = "the scenario") -> None:
        if not isinstance(doc, dict):
            raise ScenarioError("%s must be a JSON object with decode_ms, draft_step_ms, verify_ms_per_draft_token "
                                "and drafters" % where)  # fmt: skip
        for key in ("decode_ms", "draft_step_ms", "verify_ms_per_draft_token", "drafters"):
            if key not in doc:
                raise ScenarioError("%s has no %r (it needs decode_ms, draft_step_ms, verify_ms_per_draft_token, "
                                    "drafters)" % (where, key))  # fmt: skip
        decode = doc["decode_ms"]
        if not isinstance(decode, dict) or not decode:
            raise ScenarioError('decode_ms must map batch sizes to ms, e.g. {"1": 7.07, "8": 9.5}')
        points: List[Tuple[int, float]] = []
        for size, ms in decode.items():
            try:
                batch = int(size)
            except (TypeError, ValueError):
                raise ScenarioError("decode_ms key %r is not a batch size" % (size,)) from None
            if batch < 1:
                raise ScenarioError("decode_ms key %r is not a batch size of at least 1" % (size,))
            points.append((batch, _number(ms, "decode_ms[%s]" % size, 1e-3)))
        self.decode = sorted(points)
        self.draft_step_ms = _number(doc["draft_step_ms"], "draft_step_ms")
        self.verify_ms_per_draft_token = _number(doc["verify_ms_per_draft_token"], "verify_ms_per_draft_token")
        self.verify_overhead_ms = _number(doc.get("verify_overhead_ms", 0.0), "verify_overhead_ms")
        drafters = doc["drafters"]
        if not isinstance(drafters, dict):
            raise ScenarioError("drafters must map drafter names (%s) to per_position and noise" % ", ".join(DRAFTERS))
        self.raw_factor = None if doc.get("raw_factor") is None else _number(doc["raw_factor"], "raw_factor")
        self.loop_accept = None if doc.get("loop_accept") is None else _number(doc["loop_accept"], "loop_accept", 1.0)
        self.collapse = bool(doc.get("collapse", False))
        self.domain_lengths: Dict[str, Dict[str, float]] = {}
        self.drafters: Dict[str, Tuple[List[float], float]] = {}
        for name, spec in drafters.items():
            if name not in DRAFTERS:
                raise ScenarioError("drafters.%s is not a sandbox drafter (%s)" % (name, ", ".join(DRAFTERS)))
            if not isinstance(spec, dict) or not isinstance(spec.get("per_position"), list) or not spec["per_position"]:
                raise ScenarioError("drafters.%s needs per_position: [a_1, a_2, ...]" % name)
            rates = []
            for i, a in enumerate(spec["per_position"]):
                key = "drafters.%s.per_position[%d]" % (name, i)
                if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
                    raise ScenarioError("%s is %r: an acceptance rate lies in [0, 1]" % (key, a))
                rates.append(float(a))
            self.drafters[name] = (rates, _number(spec.get("noise", 0.0), "drafters.%s.noise" % name))
            domains = spec.get("domains") or {}
            if not isinstance(domains, dict):
                raise ScenarioError('drafters.%s.domains maps domains to accept lengths: {"chat": 2.69}' % name)
            self.domain_lengths[name] = {
                d: _number(v, "drafters.%s.domains.%s" % (name, d), 1.0) for d, v in domains.items()
            }

    def decode_ms(self, batch: int) -> float:
        """The plain decode step at ``batch`` running requests: linear between the given sizes and beyond them."""
        pts = self.decode
        if len(pts) == 1:
            return pts[0][1]
        if batch <= pts[0][0]:
            (b0, m0), (b1, m1) = pts[0], pts[1]
        else:
            i = next((i for i in range(1, len(pts)) if pts[i][0] >= batch), len(pts) - 1)
            (b0, m0), (b1, m1) = pts[i - 1], pts[i]
        return max(1e-3, m0 + (m1 - m0) * (batch - b0) / float(b1 - b0))

    def pass_ms(self, batch: int, spec: Dict[str, Any]) -> float:
        """One decode pass of ``batch`` requests: a plain step, or a cycle of ``spec["steps"]`` draft steps."""
        ms = self.decode_ms(max(1, batch))
        if spec and spec.get("draft_tokens") == 1:  # adaptive tier 0: the bonus token and the draft's extend
            return ms + self.draft_step_ms
        if spec:
            k = int(spec.get("draft_steps", spec.get("steps", 0)))
            # the drafts verified: k for a chain (draft tokens k + 1), block - 1 for DFLASH's one draft pass
            drafts = float(spec["draft_tokens"]) - 1 if "draft_tokens" in spec else k  # DSPARK compact: a mean
            ms += (
                self.verify_overhead_ms
                + k * self.draft_step_ms
                + drafts * max(1, batch) * self.verify_ms_per_draft_token
            )
        return ms

    def rates(self, name: str, steps: int) -> Optional[List[float]]:
        """The drafter's conditional acceptance at positions 1..steps; None when the scenario does not name it."""
        if name not in self.drafters:
            return None
        given = self.drafters[name][0]
        return [given[min(i, len(given) - 1)] for i in range(steps)]

    def domains(self, name: str) -> Optional[Dict[str, float]]:
        """The drafter's accept length per domain at 3 steps, None when the scenario gives none."""
        return self.domain_lengths.get(name) or None

    def spread(self, name: str) -> Optional[float]:
        """The sd of a request's acceptance factor: ``noise`` (the sd of a_1 across requests) over a_1."""
        if name not in self.drafters:
            return None
        rates, noise = self.drafters[name]
        return noise / rates[0] if rates[0] > 0 else 0.0


def load(path: str) -> Scenario:
    """The scenario in ``path``; ScenarioError saying what is wrong."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise ScenarioError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise ScenarioError("%s is not JSON: %s" % (path, exc)) from None
    return Scenario(doc, path)


_active: Dict[str, Optional[Scenario]] = {}


def active() -> Optional[Scenario]:
    """The scenario named by ``SPECDECK_SIM_SCENARIO`` (read once per process); None for the built-in model."""
    path = os.environ.get(ENV)
    if not path:
        return None
    if path not in _active:
        _active[path] = load(path)
    return _active[path]


def drafter_key(path: str, config: Optional[Dict[str, Any]]) -> str:
    """The scenario's name for a drafter: ``dflash`` for a DFlash draft, ``dspark`` for a DSpark one (its config's
    class), else ``drafter_name``."""
    archs = " ".join(a for a in (config or {}).get("architectures") or [] if isinstance(a, str)).lower()
    for kind in ("dspark", "dflash"):
        if kind in archs:
            return kind
    return drafter_name(path)


def drafter_name(path: str) -> str:
    """Which sandbox drafter a folder is: AQ-MedAI's by its name, else the team's own."""
    lowered = os.path.normpath(path).lower()
    aq = "aq_medai" in lowered or "aq-medai" in lowered or os.path.basename(lowered).startswith("aq")
    return "aq-medai" if aq else "ours"
