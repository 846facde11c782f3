"""SIMULATED SGLang: adaptive speculation (``--speculative-adaptive``) as 0.5.23 runs it, for the simulator.

The server-arg hooks (0.5.23 arg_groups/speculative_hook.py:261-264, 1374-1427): where adaptive cannot run the
server logs why and serves static steps; otherwise topk becomes 1, the steps the middle of the tiers' union
unless given (a given one outside it refuses to start), draft tokens steps + 1. The worker (speculative/
eagle_worker_v2.py) builds one runtime state per tier, routes each decode batch to its batch-size slot before
drafting and swaps tiers when the slot's tier differs, then feeds the verify's accepted drafts to the slot
(``backend.sglang_adaptive``: SGLang's own policy, checked against its code). Its log lines are SGLang's format
strings, quoted where they are written. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from backend.sglang.adaptive import ALGORITHMS, AdaptivePolicy, candidate_union, default_config

# The decode batch sizes SGLang captures CUDA graphs for, as its default list starts (research notes §1.5);
# a batch is padded up to the next one before it is routed to a slot.
GRAPH_BS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 160, 192, 224, 256]


class Refused(Exception):
    """SGLang's exception at startup: the message it raises, ``frames`` from _init_adaptive_speculative_params
    down to the raise (0.5.23's lines, as ``log.traceback_text`` takes them) and ``error``, the exception's name
    as a traceback's last line gives it."""

    def __init__(self, message: str, frames: List[str], error: str = "ValueError") -> None:
        super().__init__(message)
        self.frames = frames
        self.error = error


# 0.5.23's source lines (PyPI wheel sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64, no commit id in it).
_INIT = "srt/arg_groups/speculative_hook.py:%d _init_adaptive_speculative_params | %s"
_PARAMS = "srt/speculative/adaptive_spec_params.py:%d %s | %s"
_LOAD = "_load_adaptive_config"
_LOADING = [
    _INIT % (1398, "candidate_steps = resolve_candidate_steps_from_config("),
    _PARAMS % (146, "resolve_candidate_steps_from_config", "_, bs_entries = _load_adaptive_config(cfg_path)"),
]


def resolve(args: Dict[str, Any], algorithm: Optional[str], log: Any) -> None:
    """``_maybe_disable_adaptive`` then ``_init_adaptive_speculative_params`` on ``args`` (ServerArgs fields);
    raises ``Refused`` where SGLang raises."""
    reason = None
    if algorithm not in ALGORITHMS:
        reason = "speculative_algorithm=%s (only EAGLE/EAGLE3 are supported)" % algorithm
    elif args.get("speculative_eagle_topk") not in (None, 1):
        reason = "speculative_eagle_topk=%s (only topk=1 is supported)" % args["speculative_eagle_topk"]
    elif args.get("enable_dp_attention"):
        reason = "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    if reason is not None:
        log.warning("speculative_adaptive disabled: %s. Falling back to static speculative params." % reason)
        args["speculative_adaptive"] = False
        return
    config = load_config(args.get("speculative_adaptive_config"))
    union = candidate_union(config)
    if args.get("speculative_eagle_topk") is None:
        args["speculative_eagle_topk"] = 1
    steps = args.get("speculative_num_steps")
    if steps is None:
        steps = args["speculative_num_steps"] = union[len(union) // 2]
    elif steps not in union:
        raise Refused(
            "--speculative-num-steps=%s is not in the adaptive config candidate_steps %s. Pass one of those values."
            % (steps, union),
            [_INIT % (1417, "raise ValueError(")],
        )
    args["speculative_num_draft_tokens"] = steps + 1


def _name(exc: BaseException) -> str:
    """The exception's name as a traceback's last line gives it (``json.decoder.JSONDecodeError``)."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__, kind.__qualname__)


def load_config(path: Optional[str]) -> Dict[str, Any]:
    """``_load_adaptive_config``: the file (which replaces the default, never merges) or the shipped ladder; a
    refusal's frames as _init_adaptive_speculative_params reaches it."""
    if path is None:
        return default_config("0.5.23")
    # What open and json.load raise there (a missing file, a JSONDecodeError), SGLang lets through.
    try:
        f = open(path)
    except OSError as exc:
        raise Refused(str(exc), [*_LOADING, _PARAMS % (111, _LOAD, "with open(cfg_path) as f:")], _name(exc)) from None
    with f:
        try:
            config: Any = json.load(f)  # checked below as SGLang checks it
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise Refused(str(exc), [*_LOADING, _PARAMS % (112, _LOAD, "cfg = json.load(f)")], _name(exc)) from None
    slots = [k for k in config if str(k).isdigit()] if isinstance(config, dict) else []
    for key in slots:
        steps = config[key].get("candidate_steps") if isinstance(config[key], dict) else None
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise Refused(
                "BS %s: candidate_steps must be a list of non-negative ints, got %r" % (key, steps),
                [*_LOADING, _PARAMS % (127, _LOAD, "raise ValueError(")],
            )
    if not slots:
        raise Refused(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            'e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: %s' % list(config),
            [*_LOADING, _PARAMS % (134, _LOAD, "raise ValueError(")],
        )
    checked: Dict[str, Any] = config  # other keys SGLang ignores, as it does
    return checked


class Tiers(object):
    """The worker's side: the tier in force, routed per batch, switched with SGLang's log lines."""

    def __init__(self, args: Dict[str, Any], log: Any, ranks: str, graph_max_bs: int) -> None:
        self.config = load_config(args.get("speculative_adaptive_config"))
        self.steps = int(args["speculative_num_steps"])
        graphs = [b for b in GRAPH_BS if b <= graph_max_bs] if graph_max_bs else None
        self.policy = AdaptivePolicy(self.config, self.steps, graphs)
        self.tiers = self.policy.tiers
        self.log, self.ranks = log, ranks
        first = self.policy.slots[self.policy.keys[0]]
        # adaptive_spec_params.py:298-303
        log.info(
            "AdaptiveSpeculativeParams initialized: steps=%d, candidate_steps=%s" % (first.steps, first.candidates),
            ranks,
        )

    def built(self, seconds: float) -> None:
        """One line per tier built at startup, each taking ``seconds`` (eagle_worker_v2.py:1852-1857)."""
        for steps in self.tiers:
            line = "Built adaptive runtime state steps=%d: elapsed=%.2fs, mem=0.00GB" % (steps, seconds)
            self.log.info(line, self.ranks)

    def route(self, batch: int) -> int:
        """The tier a decode batch of ``batch`` drafts with; swaps (and says so) when it is not the one in force."""
        steps = self.policy.steps_for(batch)
        if steps != self.steps:
            # eagle_worker_v2.py:1866-1872
            self.log.info(
                "Switch adaptive runtime state: steps %d -> %d, draft_tokens %d -> %d"
                % (self.steps, steps, self.steps + 1, steps + 1),
                self.ranks,
            )
            self.steps = steps
        return steps

    def feed(self, batch: int, accepted: List[int]) -> None:
        """The verify's accepted drafts per request; a slot's decision is logged as SGLang logs it."""
        slot = self.policy.slot(batch)
        old = slot.steps
        new = slot.feed(accepted)
        if new is not None:
            # adaptive_spec_params.py:266-270
            self.log.info(
                "Adaptive spec params updated: steps %d -> %d (ema_accept_len=%.2f)" % (old, new, slot.ema),
                self.ranks,
            )
