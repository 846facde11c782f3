"""SIMULATED SGLang's server args as ServerArgs resolves them: ``--config FILE`` merged before the command line,
the model-dependent defaults ``__post_init__`` fills (speculative steps, topk, draft tokens by architecture,
max running requests, CUDA graph batch) with SGLang's warnings, and the tracebacks its checks raise in the
launcher process. A new speculative algorithm's defaults and checks go in ``resolve_args``. Stdlib only (PyYAML
for --config, as SGLang), Python 3.8+.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Any, Dict, List, NoReturn

from backend.sandbox.sglang_sim import dspark as sim_dspark
from backend.sandbox.sglang_sim import spec as sim_spec
from backend.sandbox.sglang_sim.folders import text_config
from backend.sandbox.sglang_sim.launcher import DISPATCH_0523, eagle_refusal, speculative_refusal
from backend.sandbox.sglang_sim.log import Log, SimExit

UNLIMITED_MAX_RUNNING = 1024


# SGLang's auto_choose_speculative_params: (steps, topk, draft tokens) by target architecture.
_SPEC_DEFAULTS_3_1_4 = {
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV2ForCausalLM",
    "GptOssForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
}
_MTP_ARCHS = {
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "Glm4MoeForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
}


# 0.5.23's speculative refusals: from handle_speculative_decoding's frame down to the raising function's own
# (``Refused.frames``); source lines as in launcher.py.
_HOOK = "srt/arg_groups/speculative_hook.py:"
_ADAPTIVE = [_HOOK + "264 handle_speculative_decoding | _init_adaptive_speculative_params(server_args)"]
_RAGGED = [DISPATCH_0523, "srt/speculative/spec_info.py:253 handle_server_args | read_ragged_verify_mode()"]
_DFLASH = [DISPATCH_0523, "srt/speculative/spec_info.py:256 handle_server_args | _handle_dflash(server_args)"]
_DSPARK = [DISPATCH_0523, "srt/speculative/spec_info.py:260 handle_server_args | _handle_dspark(server_args)"]


class ConfigRefused(ValueError):
    """ConfigArgumentMerger's ValueError; ``check``: which one (a key of launcher's ``_CONFIG_REFUSALS``)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check


def _refused(frames: List[str], why: object, error: str = "ValueError") -> NoReturn:
    """A speculative check's exception (``frames``: from the caller in handle_speculative_decoding down to the
    raise) as 0.5.23's launcher prints it before it exits 1."""
    sys.stderr.write(speculative_refusal(frames, "%s: %s" % (error, why)) + "\n")
    raise SimExit(1) from None


def _eagle_refused(current: bool, check: str) -> NoReturn:
    sys.stderr.write(eagle_refusal(current, check) + "\n")
    raise SimExit(1)


def resolve_args(args: Dict[str, Any], target: Dict[str, Any], log: Log, current: bool = True) -> Dict[str, Any]:
    """Fill the model-dependent defaults ServerArgs.__post_init__ fills, with SGLang's warnings.

    Raises ``SimExit`` (after printing the traceback of the release: 0.5.23 where ``current``, else 0.5.6) where
    SGLang's checks raise in the main process.
    """
    model = args["model_path"]
    tcfg = text_config(target)
    arch = (target.get("architectures") or ["LlamaForCausalLM"])[0]
    args["tokenizer_path"] = args["tokenizer_path"] or model
    args["served_model_name"] = args["served_model_name"] or model
    args["device"] = args["device"] or "cuda"
    if args["random_seed"] is None:
        args["random_seed"] = random.randint(0, 1 << 30)
    if args["context_length"] is None:
        args["context_length"] = int(tcfg.get("max_position_embeddings", 131072))
    if args["mem_fraction_static"] is None:
        args["mem_fraction_static"] = 0.8
    if args["chunked_prefill_size"] is None:
        args["chunked_prefill_size"] = 8192
    algo = args["speculative_algorithm"]
    if args["speculative_draft_model_path"] is not None and args["speculative_draft_model_revision"] is None:
        args["speculative_draft_model_revision"] = "main"
    if algo == "NEXTN":
        algo = args["speculative_algorithm"] = "EAGLE"
    if args.get("speculative_adaptive"):  # before the algorithm's own hook, as 0.5.23's speculative_hook runs it
        try:
            sim_spec.resolve(args, algo, log)
        except sim_spec.Refused as exc:
            _refused(_ADAPTIVE + exc.frames, exc, exc.error)
    if algo is not None and current:
        try:  # 0.5.23's handle_server_args reads the ragged-verify mode for every algorithm, before its own hook
            sim_dspark.mode()
        except sim_dspark.Refused as exc:
            _refused(_RAGGED + exc.frames, exc)
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        if args["max_running_requests"] is None:
            args["max_running_requests"] = 48
            log.warning(
                "Max running requests is reset to 48 for speculative decoding. You can override this by "
                "explicitly setting --max-running-requests."
            )
        args["disable_overlap_schedule"] = True
        log.warning("Overlap scheduler is disabled because of using eagle3 or standalone speculative decoding.")
        if arch in _MTP_ARCHS:
            if args["speculative_draft_model_path"] is None:
                args["speculative_draft_model_path"] = model
                args["speculative_draft_model_revision"] = args["revision"]
            else:
                log.warning("DeepSeek MTP does not require setting speculative_draft_model_path.")
        if args["speculative_num_steps"] is None:
            if args["speculative_eagle_topk"] is not None or args["speculative_num_draft_tokens"] is not None:
                _eagle_refused(current, "steps-unset")
            auto = (3, 1, 4) if arch in _SPEC_DEFAULTS_3_1_4 or algo == "STANDALONE" else (5, 4, 8)
            (
                args["speculative_num_steps"],
                args["speculative_eagle_topk"],
                args["speculative_num_draft_tokens"],
            ) = auto
        if args["speculative_eagle_topk"] is None:
            _eagle_refused(current, "topk-unset")
        steps = args["speculative_num_steps"]
        if args["speculative_eagle_topk"] == 1 and args["speculative_num_draft_tokens"] != steps + 1:
            log.warning(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
            args["speculative_num_draft_tokens"] = steps + 1
    elif algo == "DFLASH":
        _dflash(args, log)
    elif algo == "DSPARK":
        try:
            sim_dspark.resolve(args, target, log)
        except sim_dspark.Refused as exc:
            _refused(_DSPARK + exc.frames, exc)
    elif algo == "NGRAM":
        if args["max_running_requests"] is None:
            args["max_running_requests"] = 48
        args["disable_overlap_schedule"] = True
        args["speculative_eagle_topk"] = args["speculative_ngram_max_bfs_breadth"]
        if args["speculative_num_draft_tokens"] is None:
            args["speculative_num_draft_tokens"] = args.get("speculative_ngram_max_match_window_size") or 12
    # 0.5.23 names it per phase (--cuda-graph-max-bs-decode); the decode graph is the one the simulator has.
    max_bs = args.get("cuda_graph_max_bs", args.get("cuda_graph_max_bs_decode"))
    args["cuda_graph_max_bs"] = (48 if algo else 256) if max_bs is None else max_bs
    return args


def merge_config(argv: List[str], parser: argparse.ArgumentParser) -> List[str]:
    """SGLang's ``--config FILE``: a YAML mapping of options read in the process (so what it holds, an API key,
    is in no command line) and put before the command line's own, which win (ConfigArgumentMerger)."""
    if "--config" not in argv:
        return argv
    if argv.count("--config") > 1:
        raise ConfigRefused("multiple", "Multiple config files specified! Only one allowed.")
    at = argv.index("--config")
    if at == len(argv) - 1:
        raise ConfigRefused("no-path", "No config file specified after --config flag!")
    path = argv[at + 1]
    if os.path.splitext(path)[1].lower() not in (".yaml", ".yml"):
        raise ConfigRefused("not-yaml", "Config file must be YAML format, got: %s" % os.path.splitext(path)[1])
    if not os.path.exists(path):
        raise ConfigRefused("not-found", "Config file not found: %s" % path)
    import yaml  # as SGLang: PyYAML, only where a config file is given

    with open(path) as f:
        config = yaml.safe_load(f) or {}
    if not isinstance(config, dict):
        raise ConfigRefused("not-a-dict", "Config file must contain a dictionary at root level")
    flags = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    merged: List[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if key.replace("-", "_") not in flags:
                merged += ["--%s" % key, str(value).lower()]
            elif value:
                merged.append("--%s" % key)
        else:
            for item in value if isinstance(value, list) else [value]:
                merged += ["--%s" % key, str(item)]
    return merged + argv[:at] + argv[at + 2 :]


def _dflash(args: Dict[str, Any], log: Log) -> None:
    """0.5.23's ``_handle_dflash`` (arg_groups/speculative_hook.py:287-446): a draft path, steps and topk forced
    to 1, the block (verify window) from --speculative-dflash-block-size, --speculative-num-draft-tokens, the
    drafter's config, else 16; SGLang's own words for each."""

    def refuse(line: int, message: str) -> NoReturn:  # ``line``: where _handle_dflash raises it
        _refused([*_DFLASH, _HOOK + "%d _handle_dflash | raise ValueError(" % line], message)

    if args["speculative_draft_model_path"] is None:
        refuse(325, "DFLASH speculative decoding requires setting --speculative-draft-model-path.")
    if args["max_running_requests"] is None:
        args["max_running_requests"] = 48
        log.warning(
            "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
            "setting --max-running-requests."
        )
    for key in ("speculative_num_steps", "speculative_eagle_topk"):
        if args[key] not in (None, 1):
            log.warning("DFLASH only supports %s == 1; overriding %s=%s to 1." % (key, key, args[key]))
        args[key] = 1
    block, tokens = args.get("speculative_dflash_block_size"), args["speculative_num_draft_tokens"]
    if block is not None and block <= 0:
        refuse(370, "DFLASH requires --speculative-dflash-block-size to be positive, got %s." % block)
    if block is not None and tokens is not None and block != tokens:
        refuse(
            377,
            "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. For "
            "DFLASH they must match. speculative_num_draft_tokens=%s, speculative_dflash_block_size=%s."
            % (tokens, block),
        )
    if block is None and tokens is None:
        block = _config_block(args["speculative_draft_model_path"])
        if block is None:
            block = 16
            log.warning("speculative_num_draft_tokens is not set; defaulting to %d for DFLASH." % block)
    args["speculative_num_draft_tokens"] = block or tokens
    window = args.get("speculative_draft_window_size")
    if window is not None and window < args["speculative_num_draft_tokens"]:
        refuse(
            430,
            "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
            "window_size=%s, block_size=%s." % (window, args["speculative_num_draft_tokens"]),
        )


def _config_block(path: str) -> Any:
    """The drafter config's block size as SGLang reads it (``dflash_config`` first, then the top level)."""
    import json

    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    inner = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    block = inner.get("block_size", config.get("block_size"))
    return block if isinstance(block, int) and block > 0 else None
