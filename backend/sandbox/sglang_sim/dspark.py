"""SIMULATED SGLang: DSPARK (0.5.16 and later) as 0.5.23 serves it, for the simulator.

The server-arg hook (0.5.23 arg_groups/speculative_hook.py:666-883, ``_handle_dspark``), SGLang's words for each
check: a draft path (given, or the target's own when its config bundles ``dspark_*`` keys, or its ``dspark/``
folder), steps and topk forced to 1, gamma (the drafts per verify) from ``--speculative-dspark-block-size``,
else the drafter's config (``dflash_config`` merged with ``dspark_config``, or the prefixed ``dspark_block_size``),
else 7; the verify window ``speculative_num_draft_tokens`` = gamma + 1. An older release refuses the name itself
(0.5.6's argparse choices), as the flag table makes the parser do.

Ragged verify (env ``SGLANG_RAGGED_VERIFY_MODE``: ``static``, the default, ``cap-accept`` or ``compact``;
speculative/ragged_verify.py:13-28): in the ragged modes a confidence scheduler gives each request of a batch a
verify window of its own, the cap (``cap_lens`` = the layout's ``verify_lens``, dspark_worker_v2.py:1337-1339),
and a pass commits no more than the cap; ``cap-accept`` still verifies the whole block, so the uncapped block
accept length (committed + cap-trimmed, ``_block_accept_lens``) is exact there, ``compact`` verifies only the
caps (cheaper, the block accept length unknown). SIMULATED: SGLang's scheduler reads an SPS cost table and a
confidence calibration; here a request's cap is 1 + the leading drafts whose chance of being reached (the
product of its rates up to them) is at least ``CAP_REACH``, raised with each running request: an easy request
gets a longer window than a hard one, and a busy batch shorter windows than a lone request. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

DEFAULT_GAMMA = 7  # DEFAULT_DSPARK_GAMMA (speculative/dspark_components/dspark_config.py)
MODES = ("static", "cap-accept", "compact")
MODE_ENV = "SGLANG_RAGGED_VERIFY_MODE"
# SIMULATED: a draft is verified while its chance of being reached is at least CAP_REACH, more with each running
# request (a busier batch verifies less: the budget scheduler's point), at most CAP_REACH_MAX.
CAP_REACH, CAP_REACH_PER_REQUEST, CAP_REACH_MAX = 0.3, 0.05, 0.9
SUBFOLDER = "dspark"  # _DSPARK_DRAFT_SUBFOLDER (speculative_hook.py:622)
_BUNDLED = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id", "dspark_target_layer_ids")


class Refused(Exception):
    """SGLang's ValueError at startup: the message it raises, and ``frames``, the raising function's own (0.5.23's
    line, as ``log.traceback_text`` takes it)."""

    def __init__(self, message: str, frames: List[str]) -> None:
        super().__init__(message)
        self.frames = frames


def _refusal(line: int, message: str, source: str = "raise ValueError(") -> Refused:
    """``_handle_dspark``'s raise at ``line`` of 0.5.23's speculative_hook.py (PyPI wheel sglang-0.5.23-cp311-cp311-
    manylinux_2_34_x86_64, no commit id in it); ``source``: that line, as a traceback shows it."""
    return Refused(message, ["srt/arg_groups/speculative_hook.py:%d _handle_dspark | %s" % (line, source)])


def mode() -> str:
    """``read_ragged_verify_mode`` (ragged_verify.py:19-27): the env's mode, or SGLang's ValueError (0.5.23 reads it at
    startup for every speculative algorithm; the simulated DSPARK startup reads it again)."""
    value = os.environ.get(MODE_ENV, "static")
    if value not in MODES:
        raise Refused(
            "invalid SGLANG_RAGGED_VERIFY_MODE=%r; expected one of %s" % (value, ", ".join(repr(m) for m in MODES)),
            ["srt/speculative/ragged_verify.py:24 read_ragged_verify_mode | raise ValueError("],  # the same wheel
        )
    return value


def _config(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def gamma_of(config: Dict[str, Any]) -> Optional[int]:
    """The drafter config's gamma as ``parse_dspark_draft_config`` resolves it (dspark_config.py:206-296): the
    prefixed ``dspark_block_size`` of a bundled draft, else ``block_size`` of ``dflash_config`` merged with
    ``dspark_config`` ("Published DSpark drafts nest their fields under dflash_config"), else the top level."""
    prefixed = config.get("dspark_block_size")
    if isinstance(prefixed, int):
        return prefixed
    nested: Dict[str, Any] = {}
    for key in ("dflash_config", "dspark_config"):
        if isinstance(config.get(key), dict):
            nested.update(config[key])
    block = nested.get("block_size", config.get("block_size"))
    return block if isinstance(block, int) else None


def resolve(args: Dict[str, Any], target: Dict[str, Any], log: Any) -> None:
    """``_handle_dspark`` on ``args`` (ServerArgs fields); raises ``Refused`` where SGLang raises."""
    if not str(args.get("device") or "cuda").startswith(("cuda", "npu", "xpu")):
        raise _refusal(670, "DSpark speculative decoding only supports CUDA, NPU or XPU device.")
    if int(args.get("dp_size") or 1) > 1 and args.get("enable_dp_attention") and not args.get("enable_dp_lm_head"):
        message = "DSpark with dp attention requires --enable-dp-lm-head."
        raise _refusal(676, message, 'raise ValueError("%s")' % message)  # one line there: shown whole
    if int(args.get("pp_size") or 1) != 1 and args.get("disaggregation_mode") != "prefill":
        raise _refusal(
            715,
            "DSpark pipeline parallelism requires PD prefill; decode and non-disaggregated serving require "
            "pp_size == 1.",
        )
    if args["speculative_draft_model_path"] is None:
        model = args["model_path"]
        if any(key in target for key in _BUNDLED):
            args["speculative_draft_model_path"] = model
            args["speculative_draft_model_revision"] = args.get("revision")
            log.info(
                "DSpark draft weights are bundled in the target checkpoint; defaulting "
                "--speculative-draft-model-path to --model-path (%s)." % model
            )
        elif os.path.isfile(os.path.join(model, SUBFOLDER, "config.json")):
            folder = os.path.join(model, SUBFOLDER)
            args["speculative_draft_model_path"] = folder
            log.info(
                "DSpark draft found in the target checkpoint's %s/ subfolder; defaulting "
                "--speculative-draft-model-path to %s." % (SUBFOLDER, folder)
            )
        else:
            raise _refusal(752, "DSpark dense speculative decoding requires setting --speculative-draft-model-path.")
    for key in ("speculative_num_steps", "speculative_eagle_topk"):
        if args[key] is not None and int(args[key]) != 1:
            log.warning("DSpark only supports %s == 1; overriding %s=%s to 1." % (key, key, args[key]))
        args[key] = 1
    config = _config(args["speculative_draft_model_path"])
    gamma: Optional[int] = None
    given, tokens = args.get("speculative_dspark_block_size"), args["speculative_num_draft_tokens"]
    if given is not None:
        if int(given) <= 0:
            raise _refusal(809, "DSpark requires --speculative-dspark-block-size to be positive, got %s." % given)
        gamma = int(given)
    else:
        gamma = gamma_of(config) if config is not None else None
        if gamma is None and tokens is None:
            gamma = DEFAULT_GAMMA
            log.warning("DSpark gamma is not set; defaulting to %d." % gamma)
    if gamma is not None:
        window = gamma + 1
        if tokens is not None and int(tokens) != window:
            raise _refusal(
                830,
                "DSpark speculative_num_draft_tokens must equal gamma + 1 (= %d for gamma=%d), but got "
                "speculative_num_draft_tokens=%s." % (window, gamma, tokens),
            )
        args["speculative_num_draft_tokens"] = window
    if int(args["speculative_num_draft_tokens"]) < 2:
        raise _refusal(
            847,
            "DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), got %s."
            % args["speculative_num_draft_tokens"],
        )
    if args["max_running_requests"] is None:
        args["max_running_requests"] = 48
        log.warning(
            "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
            "setting --max-running-requests."
        )
    ragged = mode()
    if args.get("speculative_dspark_align_verify_tokens_to_graph_tier") and ragged != "compact":
        log.warning(
            "--speculative-dspark-align-verify-tokens-to-graph-tier only takes effect with "
            "SGLANG_RAGGED_VERIFY_MODE=compact (got %r); it will be a no-op." % ragged
        )
    if args.get("speculative_dspark_sps_table_path") and ragged == "static":
        log.warning(
            "--speculative-dspark-sps-table-path feeds the ragged-verify budget scheduler, which is off under "
            "SGLANG_RAGGED_VERIFY_MODE=static; it will be a no-op."
        )


class Ragged(object):
    """The verify of one DSPARK server: its mode, gamma and each request's cap (the module's docstring)."""

    def __init__(self, ragged: str, gamma: int) -> None:
        self.mode, self.gamma = ragged, gamma

    @property
    def capped(self) -> bool:
        return self.mode != "static"

    def cap(self, rates: List[float], ease: float, batch: int) -> int:
        """A request's verify window this pass in a batch of ``batch``, its bonus slot counted: 2 to gamma + 1
        (gamma + 1 when static)."""
        if not self.capped:
            return self.gamma + 1
        least = min(CAP_REACH_MAX, CAP_REACH + CAP_REACH_PER_REQUEST * max(0, batch - 1))
        reached, drafts = 1.0, 0
        for rate in rates[: self.gamma]:
            reached *= min(1.0, rate * ease)
            if reached < least:
                break
            drafts += 1
        return 1 + max(1, drafts)

    def verified(self, caps: List[int]) -> float:
        """Tokens a request's verify costs on average: the whole block, or (compact) only the caps."""
        if self.mode == "compact" and caps:
            return sum(caps) / float(len(caps))
        return float(self.gamma + 1)
