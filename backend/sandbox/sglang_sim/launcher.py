"""SIMULATED SGLang's launcher-process tracebacks, per release: the frames from ``launch_server.py`` down to the
line that raises, as ``log.traceback_text`` takes them.

0.5.6 checks its args in ``ServerArgs.__post_init__`` (inside ``prepare_server_args``); 0.5.23 in ``run_server``
(``resolve_once`` runs the resolution pipeline's hooks). Every line was read in the PyPI wheels
sglang-0.5.6-py3-none-any and sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64 (neither carries a commit id);
tests/fixtures/sglang/launcher-tracebacks.json holds the same frames as the tests' oracle, checked against the
wheels where they are at hand. Frames below SGLang (transformers, the stdlib) are not shown. Stdlib only, Python
3.8+.
"""

from __future__ import annotations

import os
from typing import List, Tuple

from backend.sandbox.sglang_sim.log import traceback_text

# --- 0.5.6 -------------------------------------------------------------------------------------------------------
_PREPARE_056 = "launch_server.py:24 <module> | server_args = prepare_server_args(sys.argv[1:])"
_POST_INIT_056 = [
    _PREPARE_056,
    "srt/server_args.py:4371 prepare_server_args | return ServerArgs.from_cli_args(raw_args)",
    "srt/server_args.py:3924 from_cli_args | return cls(**{attr: getattr(args, attr) for attr in attrs})",
]
_HF_056 = [
    "srt/server_args.py:620 __post_init__ | self._handle_model_specific_adjustments()",
    "srt/server_args.py:937 _handle_model_specific_adjustments | hf_config = self.get_hf_config()",
    "srt/server_args.py:3934 get_hf_config | hf_config = get_config(",
    "srt/utils/hf_transformers_utils.py:219 get_config | config = AutoConfig.from_pretrained(",
]
_SPEC_056 = "srt/server_args.py:645 __post_init__ | self._handle_speculative_decoding()"
_EAGLE_056 = {
    "steps-unset": (_SPEC_056, "srt/server_args.py:1723 _handle_speculative_decoding | assert ("),
    "topk-unset": (_SPEC_056, "srt/server_args.py:1753 _handle_speculative_decoding | self.speculative_eagle_topk > 1"),
}
_MERGE_056 = "srt/server_args.py:4365 prepare_server_args | argv = config_merger.merge_config_with_args(argv)"
_PARSER_056 = "srt/server_args_config_parser.py"
_CONFIG_056 = _PARSER_056 + ":%d %s | %s"
_EXTRACT_056 = _CONFIG_056 % (
    38,
    "merge_config_with_args",
    "config_file_path = self._extract_config_file_path(cli_args)",
)
_PARSE_056 = _CONFIG_056 % (42, "merge_config_with_args", "config_args = self._parse_yaml_config(config_file_path)")
_VALIDATE_056 = _CONFIG_056 % (87, "_parse_yaml_config", "self._validate_yaml_file(file_path)")

# --- 0.5.23 ------------------------------------------------------------------------------------------------------
_RESOLVE_0523 = [
    "launch_server.py:84 <module> | run_server(server_args)",
    "launch_server.py:29 run_server | server_args.resolve_once()",
    "srt/server_args.py:277 resolve_once | run_resolution_pipeline(self)",
]
SPECULATIVE_0523 = [
    *_RESOLVE_0523,
    "srt/arg_groups/pipeline.py:306 run_resolution_pipeline | run_hook(handle_speculative_decoding, server_args)",
    "srt/arg_groups/resolution_hooks.py:139 run_hook | step(server_args)",
]
_HOOK_0523 = "srt/arg_groups/speculative_hook.py:"
DISPATCH_0523 = _HOOK_0523 + "284 handle_speculative_decoding | algo.handle_server_args(server_args)"
_EAGLE_FAMILY_0523 = "srt/speculative/spec_info.py:264 handle_server_args | _handle_eagle_family(server_args)"
_EAGLE_0523 = {
    "steps-unset": (DISPATCH_0523, _EAGLE_FAMILY_0523, _HOOK_0523 + "1160 _handle_eagle_family | assert ("),
    "topk-unset": (
        DISPATCH_0523,
        _EAGLE_FAMILY_0523,
        _HOOK_0523 + "1274 _handle_eagle_family | cfg.speculative_eagle_topk > 1",
    ),
}
_MERGE_0523 = [
    "launch_server.py:81 <module> | server_args = prepare_server_args(sys.argv[1:])",
    "srt/server_args.py:689 prepare_server_args | argv = config_merger.merge_config_with_args(argv)",
]
_PARSER_0523 = "srt/utils/server_args_config_parser.py"
_CONFIG_0523 = _PARSER_0523 + ":%d %s | %s"
_EXTRACT_0523 = _CONFIG_0523 % (
    91,
    "merge_config_with_args",
    "config_file_path = self._extract_config_file_path(cli_args)",
)
_PARSE_0523 = _CONFIG_0523 % (95, "merge_config_with_args", "config_data = self._parse_yaml_config(config_file_path)")
_VALIDATE_0523 = _CONFIG_0523 % (137, "_parse_yaml_config", "self._validate_yaml_file(file_path)")


def _raise(path: str, line: int, func: str, what: str) -> str:
    return "%s:%d %s | raise ValueError(%s)" % (path, line, func, what)


# ConfigArgumentMerger's refusals (``args.ConfigRefused.check``): (0.5.6's frames, 0.5.23's) from
# merge_config_with_args down to the raise (each on one line, shown whole).
_MULTIPLE = "_extract_config_file_path", '"Multiple config files specified! Only one allowed."'
_NO_PATH = "_extract_config_file_path", '"No config file specified after --config flag!"'
_NOT_YAML = "_validate_yaml_file", 'f"Config file must be YAML format, got: {path.suffix}"'
_NOT_FOUND = "_validate_yaml_file", 'f"Config file not found: {file_path}"'
_NOT_A_DICT = "_parse_yaml_config", '"Config file must contain a dictionary at root level"'
_CONFIG_REFUSALS = {
    "multiple": (
        [_EXTRACT_056, _raise(_PARSER_056, 50, *_MULTIPLE)],
        [_EXTRACT_0523, _raise(_PARSER_0523, 113, *_MULTIPLE)],
    ),
    "no-path": (
        [_EXTRACT_056, _raise(_PARSER_056, 57, *_NO_PATH)],
        [_EXTRACT_0523, _raise(_PARSER_0523, 120, *_NO_PATH)],
    ),
    "not-yaml": (
        [_PARSE_056, _VALIDATE_056, _raise(_PARSER_056, 109, *_NOT_YAML)],
        [_PARSE_0523, _VALIDATE_0523, _raise(_PARSER_0523, 159, *_NOT_YAML)],
    ),
    "not-found": (
        [_PARSE_056, _VALIDATE_056, _raise(_PARSER_056, 112, *_NOT_FOUND)],
        [_PARSE_0523, _VALIDATE_0523, _raise(_PARSER_0523, 162, *_NOT_FOUND)],
    ),
    "not-a-dict": (
        [_PARSE_056, _raise(_PARSER_056, 101, *_NOT_A_DICT)],
        [_PARSE_0523, _raise(_PARSER_0523, 151, *_NOT_A_DICT)],
    ),
}


# The model's config, first read by apply_muse_spark_env_defaults through get_config, which on an OSError or
# ValueError tries the path as a Kev pointer adapter (load_pointer_adapter) and re-raises when it is not one.
# transformers' frames are 5.19.0's (the release the 0.5.23 wheel pins; its PyPI wheel read); huggingface_hub's
# and the stdlib's below them are not simulated (SGLang pins no huggingface_hub).
_TF = "../transformers/"  # log.traceback_text: beside sglang under dist-packages
_MODEL_0523 = [
    *_RESOLVE_0523,
    "srt/arg_groups/pipeline.py:122 run_resolution_pipeline | apply_muse_spark_env_defaults(server_args)",
    "srt/arg_groups/muse_spark_hook.py:43 apply_muse_spark_env_defaults | hf_config = get_config(",
    "srt/utils/common.py:4570 wrapper | result = func(*args, **kwargs)",
]
_GET_CONFIG = "srt/utils/hf_transformers/config.py:"
_PARSE = _GET_CONFIG + "379 get_config | config = parser.parse("
_LONGCAT = [
    _PARSE,
    _GET_CONFIG + "224 parse | config = _try_load_longcat_config(model, revision, **kwargs)",
    _GET_CONFIG + "162 _try_load_longcat_config | config_dict, _ = PretrainedConfig.get_config_dict(",
    _TF + "configuration_utils.py:792 get_config_dict | "
    "config_dict, kwargs = cls._get_config_dict(pretrained_model_name_or_path, **kwargs)",
]
_CACHED_FILES = _TF + "utils/hub.py:370 cached_file | "
_CACHED_FILES += "file = cached_files(path_or_repo_id=path_or_repo_id, filenames=[filename], **kwargs)"
_CACHED_FILE = [
    _TF + "configuration_utils.py:844 _get_config_dict | resolved_config_file = cached_file(",
    _CACHED_FILES,
]
_NOT_A_REPO_ID = _TF + 'utils/hub.py:595 cached_files | raise OSError(f"{e}") from e'
_NOT_ON_THE_HUB = _TF + "utils/hub.py:569 cached_files | raise OSError("
_DOWNLOAD = [_TF + "utils/hub.py:537 cached_files | hf_hub_download("]
_POINTER = [
    _GET_CONFIG + "387 get_config | meta = load_pointer_adapter(model, revision)",
    "srt/configs/model_config.py:353 load_pointer_adapter | meta = load_pointer_head(model_path, revision)",
    "srt/configs/model_config.py:328 load_pointer_head | path = cached_file(",
    _CACHED_FILES,
]
_UNRECOGNIZED = [
    _PARSE,
    _GET_CONFIG + "228 parse | config = AutoConfig.from_pretrained(",
    _TF + "models/auto/configuration_auto.py:442 from_pretrained | raise ValueError(",
]
_NOT_JSON = [
    _TF + "configuration_utils.py:884 _get_config_dict | config_dict = cls._dict_from_json_file(resolved_config_file)",
    _TF + "configuration_utils.py:991 _dict_from_json_file | config_dict = json.loads(text)",
]
_BAD_JSON = _TF + 'configuration_utils.py:886 _get_config_dict | raise OSError(f"It looks like the config file at '
_BAD_JSON += "'{resolved_config_file}' is not a valid JSON file.\")"
_CAUSE = "\n\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\n\nDuring handling of the above exception, another exception occurred:\n\n"
_PRIVATE = (
    "\nIf this is a private repository, make sure to pass a token having permission to this repo either by logging "
    "in with `hf auth login` or by passing `token=<your_token>`"
)


def model_config_refusal(current: bool, path: str, error: str) -> str:
    """The model's config.json could not be read (``error``: the line transformers 4.57 and huggingface_hub end
    0.5.6's traceback with, from ``folders.read_model_config``): 0.5.6's __post_init__ chain, or 0.5.23's chained
    tracebacks in transformers 5.19's words."""
    if not current:
        return traceback_text(_POST_INIT_056 + _HF_056, error)
    chain: List[Tuple[List[str], str]]
    if not os.path.isdir(path):
        # Not a repo id (HFValidationError: transformers raises it as an OSError from it), or none on the Hub
        # (its RepositoryNotFoundError, which names a request id, is not simulated).
        invalid = error.startswith("huggingface_hub.errors.HFValidationError: ")
        message = "OSError: %s" % error.split(": ", 1)[1] + ("" if invalid else _PRIVATE)
        raised = _NOT_A_REPO_ID if invalid else _NOT_ON_THE_HUB
        first = (_LONGCAT + _CACHED_FILE + [raised], message)
        last = (_MODEL_0523 + _POINTER + [raised], message)
        cause = [(_DOWNLOAD, error)] if invalid else []
        return _chain([*cause, first], _CAUSE) + _CONTEXT + _chain([*cause, last], _CAUSE)
    if not os.path.isfile(os.path.join(path, "config.json")):
        unrecognized = "ValueError: Unrecognized model in %s. Should have a `model_type` key in its config.json." % path
        return traceback_text(_MODEL_0523 + _UNRECOGNIZED, unrecognized)
    chain = [
        (_NOT_JSON, error),
        (
            _MODEL_0523 + _LONGCAT + [_BAD_JSON],
            "OSError: It looks like the config file at '%s' is not a valid JSON file."
            % os.path.join(path, "config.json"),
        ),
    ]
    return _chain(chain, _CONTEXT)


def _chain(sections: List[Tuple[List[str], str]], joint: str) -> str:
    return joint.join(traceback_text(frames, error) for frames, error in sections)


def config_refusal(current: bool, check: str, message: str) -> str:
    """``--config FILE`` refused by ConfigArgumentMerger (``check``: a key of ``_CONFIG_REFUSALS``), before any
    ServerArgs exists; ``current``: the run speaks 0.5.23."""
    frames = _MERGE_0523 if current else [_PREPARE_056, _MERGE_056]
    return traceback_text(frames + _CONFIG_REFUSALS[check][current], "ValueError: %s" % message)


def eagle_refusal(current: bool, check: str) -> str:
    """The EAGLE family's unguarded checks: ``steps-unset`` (--speculative-eagle-topk or
    --speculative-num-draft-tokens without --speculative-num-steps, a bare assert) and ``topk-unset`` (steps given
    without topk: ``None > 1``)."""
    if check == "steps-unset":
        error = "AssertionError"
    else:
        error = "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
    if current:
        return traceback_text(SPECULATIVE_0523 + list(_EAGLE_0523[check]), error)
    return traceback_text(_POST_INIT_056 + list(_EAGLE_056[check]), error)


def speculative_refusal(frames: List[str], error: str) -> str:
    """0.5.23's handle_speculative_decoding raised ``error``: ``frames`` from its own frame down to the raise."""
    return traceback_text(SPECULATIVE_0523 + frames, error)


def post_init_traceback(frames: List[str], error: str) -> str:
    """0.5.6: an exception in ServerArgs.__post_init__, ``frames`` from there on."""
    return traceback_text(_POST_INIT_056 + frames, error)
