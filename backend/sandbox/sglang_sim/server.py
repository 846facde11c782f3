"""SIMULATED SGLang server for the specdeck sandbox: not SGLang, no GPU, no model weights read.

Run as ``python -m backend.sandbox.sglang_sim <sglang.launch_server flags>``: the sandbox host's launcher is
this instead of ``python -m sglang.launch_server``. It speaks one SGLang release, 0.5.23 (the default) or
0.5.6, named by env ``SPECDECK_SIM_SGLANG_VERSION`` (the sandbox host's ``sglang_version``): it parses the
flags with that release's flag table (``backend.sglang.flags``), logs what that release logs (rank prefixes,
startup milestones, ``Prefill batch`` and ``Decode batch`` lines and what their accept rate counts, failure
signatures; ``SGLANG_LOG_MS`` and ``SGLANG_LOG_FORWARD_ITERS`` honoured), and serves its HTTP endpoints,
Prometheus names and per-request ``meta_info``, so the panel cannot tell it from the real server except where
it says so: the first log line says SIMULATED, ``/server_info`` has ``"simulated": true`` and ``version``
``0.5.23-sim``. Like SGLang, the HTTP port opens only after the model is loaded (connections are refused
while loading) and ``/health`` answers 503 until warmup is done.

Timing model (the operator's measurements, FIELD-NOTES §1):
- Without speculation one stream decodes at ``BASELINE_TOK_S`` (82 tok/s): a decode pass is 1000/82 ms.
- With speculation a cycle (``pass_ms``, the one cost function) costs ``VERIFY_BASE_MS`` + ``VERIFY_TOKEN_MS``
  per draft token verified + ``DRAFT_STEP_MS`` per draft step: one stream's cycle is 24 + 3k ms for k steps
  at topk 1, 33 ms at the operator's 3 steps. It gives each running request 1 + accepted drafts tokens, at
  most steps + 1.
- Acceptance is a chain with a conditional rate per position that falls as the drafter guesses further:
  a_i = a_1 · decay^(i−1), drafts accepted in order until the first rejection, so k steps give
  L(k) = 1 + Σ_{i≤k} Π_{j≤i} a_j. A drafter config.json's ``"specdeck_sim": {"accept": [a_1, ...]}`` or
  ``{"accept_p": p}`` (the same rate at every position) sets the rates; else an AQ-MedAI folder gets decay
  ``DECAY_AQ`` and L = 3.3 at 3 steps (≈ 100 tok/s; best at 4 steps, ≈ 103) and any other folder decay
  ``DECAY_OURS`` and L = 2.0 (≈ 60 tok/s, below baseline). Each request draws its own difficulty (its
  rates scaled by a factor around 1, ``REQUEST_SPREAD``), the sampling noise a bench sees between prompts.
  topk > 1 gives each position more candidates: its miss chance becomes (1 − a)^√topk (invented).
  ``--speculative-algorithm EAGLE`` with an EAGLE-3 drafter (``LlamaForCausalLMEagle3``) loads fine and
  accepts nothing: accept len 1.00, the silent trap of sglang PR #21272.
- Per request, ``meta_info`` carries SGLang 0.5.23's ``spec_verify_ct``, ``spec_accept_length``,
  ``spec_accept_rate``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` and
  ``spec_correct_drafts_histogram`` (bin k: verifies that accepted exactly k drafts), or 0.5.6's
  ``spec_accept_token_num`` / ``spec_draft_token_num`` for a 0.5.6 server (``spec_meta_info``).
- Concurrency (``pass_ms``, the one place the cost model lives): each extra running request adds
  ``BATCH_MS_BASELINE`` to a decode pass, so aggregate baseline throughput grows sublinearly with the batch;
  a verify cycle pushes every request's draft tokens through the target, so each extra request adds
  ``VERIFY_MS_PER_TOKEN`` per draft token. Verify cost grows faster than a plain pass, so speculation's gain
  shrinks with load: the AQ drafter (3.3 at 3 steps) beats the baseline per stream up to 5 running requests
  and falls below it from 6 (``crossover_batch``). Without CUDA graphs (``--disable-cuda-graph``, or a batch
  over ``--cuda-graph-max-bs``) passes cost ``NO_CUDA_GRAPH_FACTOR``x.
- ``SPECDECK_SIM_SCENARIO`` names a scenario file (``backend.sandbox.sglang_sim.scenario``, ``sandbox up --scenario``)
  that replaces this timing model and the named drafters' acceptance, so the sandbox can disagree with the advisor.
- Randomness comes from one ``random.Random(--random-seed)``: a seeded single stream is deterministic.
- Startup takes a few seconds, multiplied by env ``SPECDECK_SIM_TIME_SCALE`` (tests use ~0.1), and so is the
  idle self-check's 30 s (``idle.py``: an idle server's gauges go back to 0 running, 0 tok/s); decode timing
  is never scaled.

Across nodes (``--nnodes`` > 1): ``multinode.py`` adds the rendezvous on ``--dist-init-addr``, rank ≥ 1's
dummy health server and a peer's death ending the node, as SGLang's engine does.

Load checks: the target's config.json (``--model-path``), the drafter's config.json and safetensors headers.
The drafter's parameters are built to the target's hidden size, so a drafter that does not fit dies while
loading with SGLang's ``Attempted to load weight (torch.Size([...])) into parameter (torch.Size([...]))``.
Env ``SPECDECK_SIM_FAIL=oom|cuda_graph|warmup|unbalanced`` forces the other failure signatures (FIELD-NOTES
§5); a ``--mem-fraction-static`` too small for the weights gives SGLang's "Not enough memory" by itself.

Where it differs from SGLang 0.5.6, on purpose: a crash exits with status 1 and a drained SIGTERM with 0
(SGLang SIGKILLs its own process tree in both cases); new requests get 503 once SIGTERM arrived; one
scheduler serves every DP rank; memory figures (a 139.8 GB GPU) and resolved defaults are invented but follow
SGLang's arithmetic. Stdlib only (PyYAML for --config, as SGLang), Python 3.8+.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from backend.agent.host.shared.safetensors_header import CheckpointError, read_header
from backend.measure.breakeven import decayed_rates, first_rate_for
from backend.sandbox.sglang_sim import idle, loads, scenario
from backend.sandbox.sglang_sim import spec as sim_spec
from backend.sandbox.sglang_sim.dialect import Dialect, dialect_from_env
from backend.sandbox.sglang_sim.histograms import SimHistograms
from backend.sandbox.sglang_sim.log import SCHEDULER_FRAMES, Log, env_flag, rank_prefixes, traceback_text
from backend.sglang.flags import table
from backend.sglang.versions import (
    SIM_VERSION_ENV,
    SIM_VERSIONS,
    parse,
)

if TYPE_CHECKING:
    from backend.sandbox.sglang_sim.multinode import Node

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

GPU_MEM_GB = 139.8  # available per GPU before loading (an H200-class card; invented)
GRAPH_MEM_GB = 1.2
STALL_S = 1.0  # lateness the decode clock catches up; longer is a stall, not load
DRAIN_POLL_S = 5.0  # SGLang's sigterm_watchdog polls every 5 s
UNLIMITED_MAX_RUNNING = 1024
FAILURES = ("oom", "cuda_graph", "warmup", "unbalanced")  # SPECDECK_SIM_FAIL values

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
EAGLE3_ARCH = "LlamaForCausalLMEagle3"
# The text every response is made of, one word per token (a sentence so streamed text stays readable).
_TEXT = "The simulated server streams these words one token at a time while the panel measures speed. "
_WORDS = _TEXT.split(" ")[:-1]
_TOKEN_BASE_ID = 1000


DECAY_OURS = 0.85
DECAY_AQ = 0.9
FIRST_OURS = first_rate_for(2.0, 3, DECAY_OURS)  # ≈ 0.585: the team's drafter, 2.0 at 3 steps → ≈ 60 tok/s
FIRST_AQ = first_rate_for(3.3, 3, DECAY_AQ)  # ≈ 0.931: AQ-MedAI's drafter, 3.3 at 3 steps → ≈ 100 tok/s


def pass_ms(batch: int, spec: Dict[str, Any], graph: bool = True) -> float:
    """What one decode pass of ``batch`` running requests costs in ms: a verify cycle (with the draft steps)
    when ``spec`` holds the speculative settings, else a plain decode pass."""
    extra = max(0, batch - 1)
    chosen = scenario.active()
    if chosen is not None:  # a scenario file's model (backend.sandbox.sglang_sim.scenario) instead of the operator's
        ms = chosen.pass_ms(batch, spec)
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


class SimExit(Exception):
    """Ends the simulated server with ``code`` after its last lines were logged."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_TARGET_FRAMES = [
    *SCHEDULER_FRAMES,
    "srt/managers/scheduler.py:475 init_model_worker | self.tp_worker = TpModelWorker(",
    "srt/managers/tp_worker.py:246 __init__ | self._model_runner = ModelRunner(",
]
_DRAFT_FRAMES = [
    *SCHEDULER_FRAMES,
    "srt/managers/scheduler.py:497 init_model_worker | self.draft_worker = DraftWorkerClass(",
    "srt/speculative/eagle_worker.py:148 __init__ | super().__init__(",
    "srt/managers/tp_worker.py:246 __init__ | self._model_runner = ModelRunner(",
]


def _main_traceback(frames: List[str], error: str) -> str:
    """An exception in ServerArgs.__post_init__ (the launcher process), ``frames`` from there on."""
    head = [
        "launch_server.py:24 <module> | server_args = prepare_server_args(sys.argv[1:])",
        "srt/server_args.py:4371 prepare_server_args | return ServerArgs.from_cli_args(raw_args)",
        "srt/server_args.py:3924 from_cli_args | return cls(**{attr: getattr(args, attr) for attr in attrs})",
    ]
    return traceback_text(head + frames, error)


_HF_CONFIG_FRAMES = [
    "srt/server_args.py:620 __post_init__ | self._handle_model_specific_adjustments()",
    "srt/server_args.py:937 _handle_model_specific_adjustments | hf_config = self.get_hf_config()",
    "srt/server_args.py:3934 get_hf_config | hf_config = get_config(",
    "srt/utils/hf_transformers_utils.py:219 get_config | config = AutoConfig.from_pretrained(",
]
_SPEC_FRAME = "srt/server_args.py:645 __post_init__ | self._handle_speculative_decoding()"


# ----------------------------------------------------------------------------------------------------------
# Model folders


def _hf_missing(path: str) -> str:
    """What transformers/huggingface_hub raise for a model path that is not a local folder."""
    if path.startswith("/") or path.count("/") > 1:
        return (
            "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
            "'namespace/repo_name': '%s'. Use `repo_type` argument if needed." % path
        )
    return (
        "OSError: %s is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'" % path
    )


def read_model_config(path: str) -> Tuple[Optional[dict], str]:
    """(config.json of a model folder, "") or (None, the error line SGLang's loaders raise)."""
    if not os.path.isdir(path):
        return None, _hf_missing(path)
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        return None, "OSError: %s does not appear to have a file named config.json." % path
    try:
        with open(config, encoding="utf-8") as f:
            return json.load(f), ""
    except ValueError as exc:
        return None, "json.decoder.JSONDecodeError: %s" % exc


def _text_config(config: dict) -> dict:
    """The language model's config (multimodal wrappers such as Kimi-K2.5 nest it under text_config)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) and "hidden_size" in text else config


def weight_files(path: str) -> List[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".safetensors"))


def _bytes_of(files: List[str]) -> int:
    return sum(os.path.getsize(f) for f in files)


def expected_eagle3_shapes(target: dict, drafter: dict) -> Dict[str, List[int]]:
    """The EAGLE-3 drafter's parameter shapes when built to fit ``target`` (names without ``model.``)."""
    tcfg, dcfg = _text_config(target), drafter
    hidden = int(tcfg["hidden_size"])
    heads = int(dcfg.get("num_attention_heads", 1))
    kv_heads = int(dcfg.get("num_key_value_heads") or heads)
    head_dim = int(dcfg.get("head_dim") or int(dcfg.get("hidden_size", hidden)) // heads)
    inter = int(dcfg.get("intermediate_size", 4 * hidden))
    draft_vocab = int(dcfg.get("draft_vocab_size") or dcfg.get("vocab_size", tcfg.get("vocab_size", 0)))
    eagle = dcfg.get("eagle_config") or {}
    n_aux = len(eagle.get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
    attn = "midlayer.self_attn."
    return {
        "fc.weight": [hidden, n_aux * hidden],
        attn + "q_proj.weight": [heads * head_dim, 2 * hidden],
        attn + "k_proj.weight": [kv_heads * head_dim, 2 * hidden],
        attn + "v_proj.weight": [kv_heads * head_dim, 2 * hidden],
        attn + "o_proj.weight": [hidden, heads * head_dim],
        "midlayer.mlp.gate_proj.weight": [inter, hidden],
        "midlayer.mlp.up_proj.weight": [inter, hidden],
        "midlayer.mlp.down_proj.weight": [hidden, inter],
        "midlayer.input_layernorm.weight": [hidden],
        "midlayer.hidden_norm.weight": [hidden],
        "midlayer.post_attention_layernorm.weight": [hidden],
        "norm.weight": [hidden],
        "lm_head.weight": [draft_vocab, hidden],
        "embed_tokens.weight": [int(tcfg.get("vocab_size", 0)), hidden],
    }


def first_misfit(files: List[str], expected: Dict[str, List[int]]) -> Optional[Tuple[List[int], List[int]]]:
    """(loaded shape, parameter shape) of the first checkpoint tensor that does not fit, in file order."""
    for path in files:
        for name, info in read_header(path)["tensors"].items():
            key = name[len("model.") :] if name.startswith("model.") else name
            want = expected.get(key)
            if want is not None and list(info["shape"]) != want:
                return list(info["shape"]), want
    return None


def _size(shape: List[int]) -> str:
    return "torch.Size([%s])" % ", ".join(str(d) for d in shape)


def drafter_rates(path: str, config: dict, steps: int) -> List[float]:
    """A drafter folder's conditional acceptance at positions 1..steps: its ``specdeck_sim`` rates (the last
    one repeated past the list), else by the folder's name (see the module docstring)."""
    sim = config.get("specdeck_sim") or {}
    if "accept" in sim:
        given = [float(a) for a in sim["accept"]] or [0.0]
        return [given[min(i, len(given) - 1)] for i in range(steps)]
    if "accept_p" in sim:
        return [float(sim["accept_p"])] * steps
    chosen = scenario.active()
    given = chosen.rates(scenario.drafter_name(path), steps) if chosen is not None else None
    if given is not None:
        return given
    aq = scenario.drafter_name(path) == "aq-medai"
    first, decay = (FIRST_AQ, DECAY_AQ) if aq else (FIRST_OURS, DECAY_OURS)
    return decayed_rates(first, decay, steps)


def widened(rates: List[float], topk: int) -> List[float]:
    """Rates with ``topk`` candidates per position: the miss chance (1 − a) shrinks to (1 − a)^√topk."""
    return [1.0 - (1.0 - a) ** (max(1, topk) ** 0.5) for a in rates]


def spec_meta_info(version: str, req: "Request", completion: int, draft_tokens: int) -> Dict[str, Any]:
    """The speculative figures of a finished request's ``meta_info`` as SGLang ``version`` writes them."""
    proposed = req.verify_ct * (draft_tokens - 1)
    meta: Dict[str, Any] = {
        "spec_verify_ct": req.verify_ct,
        "spec_accept_length": completion / req.verify_ct if req.verify_ct else 0,
        "spec_accept_rate": req.accepted_drafts / proposed if proposed else 0.0,
    }
    if parse(version) >= (0, 5, 23):  # type: ignore[operator]
        meta["spec_num_correct_drafts"] = req.accepted_drafts
        meta["spec_num_proposed_drafts"] = proposed
        meta["spec_correct_drafts_histogram"] = list(req.histogram)
    else:
        meta["spec_accept_token_num"] = req.accepted_drafts
        meta["spec_draft_token_num"] = proposed
    return meta


# ----------------------------------------------------------------------------------------------------------
# Server args as SGLang resolves them


def resolve_args(args: Dict[str, Any], target: dict, log: Log) -> Dict[str, Any]:
    """Fill the model-dependent defaults ServerArgs.__post_init__ fills, with SGLang's warnings.

    Raises ``SimExit`` (after printing the traceback) where SGLang's checks raise in the main process.
    """
    model = args["model_path"]
    tcfg = _text_config(target)
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
            frames = [_SPEC_FRAME, "srt/arg_groups/speculative_hook.py:1416 _init_adaptive_speculative_params"]
            sys.stderr.write(_main_traceback(frames, "ValueError: %s" % exc) + "\n")
            raise SimExit(1) from None
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
                error = _main_traceback(
                    [_SPEC_FRAME, "srt/server_args.py:1723 _handle_speculative_decoding | assert ("],
                    "AssertionError",
                )
                sys.stderr.write(error + "\n")
                raise SimExit(1)
            auto = (3, 1, 4) if arch in _SPEC_DEFAULTS_3_1_4 or algo == "STANDALONE" else (5, 4, 8)
            (
                args["speculative_num_steps"],
                args["speculative_eagle_topk"],
                args["speculative_num_draft_tokens"],
            ) = auto
        if args["speculative_eagle_topk"] is None:
            frames = [
                _SPEC_FRAME,
                "srt/server_args.py:1753 _handle_speculative_decoding | self.speculative_eagle_topk > 1",
            ]
            error = "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
            sys.stderr.write(_main_traceback(frames, error) + "\n")
            raise SimExit(1)
        steps = args["speculative_num_steps"]
        if args["speculative_eagle_topk"] == 1 and args["speculative_num_draft_tokens"] != steps + 1:
            log.warning(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
            args["speculative_num_draft_tokens"] = steps + 1
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


# ----------------------------------------------------------------------------------------------------------
# Requests, metrics and the scheduler


class Request:
    """One generation request as the scheduler and the HTTP handler share it."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int, steps: int = 0, ease: float = 1.0) -> None:
        self.rid = uuid.uuid4().hex
        self.ease = ease  # this request's acceptance factor (how predictable its text is)
        self.histogram = [0] * (steps + 1)  # verifies that accepted exactly k drafts
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.created = time.time()
        self.output_ids: List[int] = []
        self.verify_ct = 0
        self.accepted_drafts = 0
        self.finished = False
        self.finished_time = 0.0
        self.aborted = False
        self._unsent = 0
        self._sent = 0
        self._cv = threading.Condition()
        # Told (rid, completion tokens so far, finished) at each release: what reaches SGLang's tokenizer.
        self.on_release: Optional[Callable[[str, int, bool], None]] = None

    def push(self, token_ids: List[int], finished: bool, stream_interval: int) -> None:
        """Append tokens; wake the handler every ``stream_interval`` tokens and at the end."""
        with self._cv:
            self.output_ids.extend(token_ids)
            self._unsent += len(token_ids)
            if finished:
                self.finished = True
                self.finished_time = time.time()
            if finished or self._unsent >= stream_interval:
                self._unsent = 0
                self._cv.notify_all()
                if self.on_release is not None:
                    self.on_release(self.rid, len(self.output_ids), finished)

    def updates(self) -> Any:
        """Yield (all output ids so far, finished) each time new tokens were released, until finished."""
        while True:
            with self._cv:
                while len(self.output_ids) == self._sent and not self.finished:
                    self._cv.wait()
                self._sent = len(self.output_ids)
                ids, finished = list(self.output_ids), self.finished
            yield ids, finished
            if finished:
                return

    def result(self) -> List[int]:
        """Wait until the request finishes; its output ids."""
        with self._cv:
            while not self.finished:
                self._cv.wait()
            return list(self.output_ids)


class Metrics:
    """Prometheus text in the shape SGLang's multiprocess registry exposes (no ``_created`` samples)."""

    GAUGES = (
        ("sglang:num_running_reqs", "The number of running requests."),
        ("sglang:num_used_tokens", "The number of used tokens."),
        ("sglang:token_usage", "The token usage."),
        ("sglang:gen_throughput", "The generation throughput (token/s)."),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
        ("sglang:cache_hit_rate", "The prefix cache hit rate."),
        ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
        ("sglang:spec_accept_length", "The average acceptance length of speculative decoding."),
    )
    ACCEPT_RATE_DOC = {
        False: "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).",
        True: "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
    }
    CURRENT_GAUGES = (  # 0.5.23: the live speculative numbers (they move under --speculative-adaptive)
        ("sglang:spec_num_steps", "Currently active speculative_num_steps."),
        (
            "sglang:spec_num_draft_tokens",
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
        ),
    )
    COUNTERS = (
        ("sglang:prompt_tokens_total", "Number of prefill tokens processed."),
        ("sglang:generation_tokens_total", "Number of generation tokens processed."),
        ("sglang:num_requests_total", "Number of requests processed."),
    )
    CURRENT_COUNTERS = (("sglang:spec_verify_calls_total", "Number of speculative decoding verification calls."),)
    PHASE_GAUGES = (  # 0.5.23: startup durations, one sample per phase label
        ("sglang:startup_time_seconds", "Engine startup duration by phase in seconds."),
        ("sglang:startup_cuda_graph_time_seconds", "CUDA graph capture duration by phase in seconds."),
    )

    def __init__(self, model_name: str, dp: bool, dialect: Dialect) -> None:
        self._lock = threading.Lock()
        labels = {"engine_type": "unified", "model_name": model_name, "pp_rank": "0", "tp_rank": "0"}
        if dp:
            labels["dp_rank"] = "0"
        self._labels_dict = labels
        self._gauge_labels = self._labels(labels)
        self._counter_labels = self._labels({"model_name": model_name})
        accept_rate = (("sglang:spec_accept_rate", self.ACCEPT_RATE_DOC[dialect.drafts_only]),)
        self.gauge_table = self.GAUGES + accept_rate + (self.CURRENT_GAUGES if dialect.current else ())
        self.counter_table = self.COUNTERS + (self.CURRENT_COUNTERS if dialect.current else ())
        self.phase_table = self.PHASE_GAUGES if dialect.current else ()
        self.gauges: Dict[str, float] = {}
        self.counters: Dict[str, float] = {}
        self.phases: Dict[str, Dict[str, float]] = {}
        self.histograms: Optional[SimHistograms] = None
        self.last_log_time = time.perf_counter()  # the collector's: when log_stats last wrote the gauges

    @staticmethod
    def _labels(labels: Dict[str, str]) -> str:
        return ",".join('%s="%s"' % (k, v.replace("\\", "\\\\").replace('"', '\\"')) for k, v in sorted(labels.items()))

    def set(self, values: Dict[str, float]) -> None:
        with self._lock:
            self.gauges.update(("sglang:" + k, float(v)) for k, v in values.items())
            self.last_log_time = time.perf_counter()

    def gauge(self, name: str) -> float:
        with self._lock:
            return self.gauges.get("sglang:" + name, 0.0)

    def set_phases(self, name: str, seconds: Dict[str, float]) -> None:
        """A phase-labelled gauge (``startup_time_seconds``): one value per phase."""
        with self._lock:
            self.phases["sglang:" + name] = dict(seconds)

    def count(self, prompt_tokens: int, generation_tokens: int, verify_ct: int = 0) -> None:
        with self._lock:
            for key, inc in (
                ("sglang:prompt_tokens_total", prompt_tokens),
                ("sglang:generation_tokens_total", generation_tokens),
                ("sglang:num_requests_total", 1),
                ("sglang:spec_verify_calls_total", verify_ct),
            ):
                self.counters[key] = self.counters.get(key, 0.0) + inc

    def render(self) -> str:
        out = []
        with self._lock:
            for kind, table, values, labels in (
                ("counter", self.counter_table, self.counters, self._counter_labels),
                ("gauge", self.gauge_table, self.gauges, self._gauge_labels),
            ):
                for name, doc in table:
                    if name in values:
                        out.append("# HELP %s %s" % (name, doc))
                        out.append("# TYPE %s %s" % (name, kind))
                        out.append("%s{%s} %r" % (name, labels, values[name]))
            for name, doc in self.phase_table:
                if name in self.phases:
                    out.append("# HELP %s %s" % (name, doc))
                    out.append("# TYPE %s gauge" % name)
                    for phase, value in self.phases[name].items():
                        labels = self._labels(dict(self._labels_dict, phase=phase))
                        out.append("%s{%s} %r" % (name, labels, value))
        if self.histograms is not None:
            out.extend(self.histograms.lines())
        return "\n".join(out) + "\n"


class Engine:
    """The scheduler: admits requests (a prefill pass each batch), runs decode passes, logs and counts."""

    def __init__(
        self, args: Dict[str, Any], spec: Dict[str, Any], log: Log, metrics: Metrics, ranks: str, dialect: Dialect
    ) -> None:
        self.log, self.metrics, self.ranks, self.dialect = log, metrics, ranks, dialect
        self.forward_iters = env_flag("SGLANG_LOG_FORWARD_ITERS")  # `Decode batch [5521], …`
        self.step_time_dict: Optional[Dict[int, List[float]]] = {} if env_flag("SGLANG_RECORD_STEP_TIME") else None
        self.spec = spec  # {} without speculation, else steps, draft_tokens, rates (per position), draft_steps
        self.interval = max(1, int(args["decode_log_interval"]))
        self.stream_interval = max(1, int(args["stream_interval"]))
        self.max_running = int(args["max_running_requests"] or UNLIMITED_MAX_RUNNING)
        self.graph_max_bs = 0 if args["disable_cuda_graph"] else int(args["cuda_graph_max_bs"])
        self.max_total_tokens = 1
        self.rng = random.Random(args["random_seed"])
        self._cv = threading.Condition()
        self.waiting: List[Request] = []
        self.running: List[Request] = []
        self.forward_ct = self.forward_ct_decode = 0
        self.generated_since_log = 0
        self.last_decode_log = time.perf_counter()
        self.spec_tokens = self.spec_ct = self.spec_correct = 0  # since the last decode line
        self.spec_total_tokens = self.spec_total_ct = 0
        self.last_gen_throughput = 0.0
        self.idle = idle.IdleCheck(bool(args["enable_metrics"]), dialect.current, time_scale())
        self._clock = 0.0
        self._word = 0

    def start(self, max_total_tokens: int) -> None:
        self.max_total_tokens = max(1, max_total_tokens)
        threading.Thread(target=self._loop, name="scheduler", daemon=True).start()

    def submit(self, prompt_tokens: int, max_new_tokens: int, stream: bool = True) -> Request:
        with self._cv:
            spread = self.spec.get("spread")
            if spread is None:
                ease = min(1.2, max(0.8, self.rng.gauss(1.0, REQUEST_SPREAD)))
            else:
                ease = min(scenario.MAX_EASE, max(0.0, self.rng.gauss(1.0, spread)))
            req = Request(prompt_tokens, max_new_tokens, self.spec.get("positions", self.spec.get("steps", 0)), ease)
            histograms = self.metrics.histograms
            if histograms is not None:
                histograms.arrived(req.rid, req.created, stream)
                req.on_release = histograms.released
            self.waiting.append(req)
            self._cv.notify()
        return req

    def abort(self, req: Request) -> None:
        with self._cv:
            req.aborted = True
            if self.metrics.histograms is not None:
                self.metrics.histograms.forget(req.rid)
            if req in self.waiting:
                self.waiting.remove(req)

    def avg_spec_accept_length(self) -> Optional[float]:
        with self._cv:
            return self.spec_total_tokens / self.spec_total_ct if self.spec_total_ct else None

    # -- the loop ---------------------------------------------------------------------------------------

    def _sleep(self, ms: float) -> None:
        """Advance the simulated clock by ``ms`` and sleep until it: any lateness (sleep overshoot, the process
        preempted beside a CPU hog) is caught up by the next passes, so rates hold; only a stall past
        ``STALL_S`` (a stopped process) restarts the clock instead of bursting. ``_loop`` restarts it after idle."""
        now = time.perf_counter()
        if self._clock < now - STALL_S:
            self._clock = now
        self._clock += ms / 1000.0
        time.sleep(max(0.0, self._clock - now))

    def _loop(self) -> None:
        while True:
            with self._cv:
                if not self.waiting and not self.running:
                    while not self.waiting and not self.running:
                        self._cv.wait(self.idle.run(self))  # SGLang's idle self-check rewrites the gauges
                    self._clock = time.perf_counter()  # the simulated GPU was idle, not late
                self.running = [r for r in self.running if not r.aborted]
                room = self.max_running - len(self.running)
                admitted, self.waiting = self.waiting[:room], self.waiting[room:]
            if admitted:
                self._prefill(admitted)
            elif self.running:
                self._decode()

    def _tokens(self, n: int) -> List[int]:
        ids = [_TOKEN_BASE_ID + (self._word + i) % len(_WORDS) for i in range(n)]
        self._word += n
        return ids

    def _used_tokens(self) -> int:
        return sum(r.prompt_tokens + len(r.output_ids) for r in self.running)

    def _finish(self, req: Request, ids: List[int]) -> None:
        req.push(ids, True, self.stream_interval)
        self.metrics.count(req.prompt_tokens, len(req.output_ids), req.verify_ct)

    def _batch(self, kind: str) -> str:
        """``Decode batch,`` or, with SGLANG_LOG_FORWARD_ITERS, ``Decode batch [iteration],``."""
        return "%s batch%s, " % (kind, " [%d]" % self.forward_ct if self.forward_iters else "")

    def _prefill(self, admitted: List[Request]) -> None:
        new_tokens = sum(r.prompt_tokens for r in admitted)
        ms = PREFILL_MS + PREFILL_MS_PER_TOKEN * new_tokens
        self._sleep(ms)
        self.forward_ct += 1
        with self._cv:
            running_bs = len(self.running)
            for req in admitted:
                if req.aborted:
                    continue
                if self.metrics.histograms is not None:
                    self.metrics.histograms.admitted(req.rid, req.created)
                if req.max_new_tokens <= 0:
                    self._finish(req, [])
                    continue
                if req.max_new_tokens == 1:
                    self._finish(req, self._tokens(1))
                else:
                    req.push(self._tokens(1), False, self.stream_interval)
                    self.running.append(req)
            used, queued = self._used_tokens(), len(self.waiting)
        usage = used / self.max_total_tokens
        msg = self._batch("Prefill") + "#new-seq: %d, #new-token: %d, #cached-token: 0, token usage: %.2f, " % (
            len(admitted),
            new_tokens,
            usage,
        )
        msg += "#running-req: %d, #queue-req: %d, " % (running_bs, queued)
        if self.dialect.current:
            msg += "#pending-token: 0, cuda graph: False, input throughput (token/s): %.2f" % (
                new_tokens / (ms / 1000.0)
            )
        self.log.info(msg, self.ranks)
        self.metrics.set(
            {
                "num_running_reqs": running_bs,
                "num_used_tokens": used,
                "token_usage": usage,
                "num_queue_reqs": queued,
                "cache_hit_rate": 0.0,
                "max_total_num_tokens": self.max_total_tokens,
            }
        )

    def _decode(self) -> None:
        with self._cv:
            batch = list(self.running)
        n = len(batch)
        graph = n <= self.graph_max_bs
        tiers = self.spec.get("adaptive")
        if tiers is not None:  # SGLang routes the batch to its slot's tier before drafting (activate_step_by_batch)
            steps = tiers.route(n)
            self.spec.update(steps=steps, draft_tokens=steps + 1, draft_steps=steps)
        self._sleep(pass_ms(n, self.spec, graph))
        accepted_drafts: List[int] = []
        with self._cv:
            for req in batch:
                if req.aborted:
                    continue
                count = 1
                if self.spec:
                    rates = self.spec["rates"][: self.spec["steps"]]
                    accepted = 0
                    while accepted < len(rates) and self.rng.random() < rates[accepted] * req.ease:
                        accepted += 1
                    count += accepted
                    accepted_drafts.append(accepted)
                    req.verify_ct += 1
                    self.spec_tokens += count
                    self.spec_correct += accepted
                    self.spec_ct += 1
                count = min(count, req.max_new_tokens - len(req.output_ids))
                req.accepted_drafts += count - 1
                if self.spec:
                    req.histogram[count - 1] += 1
                self.generated_since_log += count
                ids = self._tokens(count)
                if len(req.output_ids) + count >= req.max_new_tokens:
                    self._finish(req, ids)
                else:
                    req.push(ids, False, self.stream_interval)
            self.running = [r for r in self.running if not r.finished and not r.aborted]
            if tiers is not None:  # on_verify_complete: the slot's EMA, and its decision
                tiers.feed(n, accepted_drafts)
            self.forward_ct += 1
            self.forward_ct_decode += 1
            if self.forward_ct_decode % self.interval == 0:
                self._log_decode(n, graph)

    def _log_decode(self, n: int, graph: bool) -> None:
        """The decode line (0.5.6: scheduler_metrics_mixin.log_decode_stats; 0.5.23:
        metrics_reporter.report_decode_stats), called with ``_cv`` held."""
        now = time.perf_counter()
        if self.step_time_dict is not None:  # SGLANG_RECORD_STEP_TIME: seconds per decode step, by batch size
            self.step_time_dict.setdefault(n, []).append((now - self.last_decode_log) / self.interval)
        self.last_gen_throughput = self.generated_since_log / max(1e-9, now - self.last_decode_log)
        self.last_decode_log, self.generated_since_log = now, 0
        used = self._used_tokens()
        usage = used / self.max_total_tokens
        msg = self._batch("Decode") + "#running-req: %d, #token: %d, token usage: %.2f, " % (n, used, usage)
        accept_len = accept_rate = 0.0
        spec: Dict[str, float] = {"spec_accept_length": 0.0, "spec_accept_rate": 0.0}
        if self.spec:
            accept_len = self.spec_tokens / self.spec_ct if self.spec_ct else 0.0
            if self.dialect.drafts_only:  # correct drafts / proposed drafts
                drafted = self.spec_ct * (self.spec["draft_tokens"] - 1)
                accept_rate = self.spec_correct / drafted if drafted else 0.0
            else:  # (correct drafts + bonus tokens) / (verifies x draft tokens)
                drafted = self.spec_ct * self.spec["draft_tokens"]
                accept_rate = self.spec_tokens / drafted if drafted else 0.0
            self.spec_total_tokens += self.spec_tokens
            self.spec_total_ct += self.spec_ct
            self.spec_tokens = self.spec_ct = self.spec_correct = 0
            msg += "accept len: %.2f, accept rate: %.2f, " % (accept_len, accept_rate)
            spec = {"spec_accept_length": accept_len, "spec_accept_rate": accept_rate}
            if self.dialect.current:
                spec.update(spec_num_steps=self.spec["steps"], spec_num_draft_tokens=self.spec["draft_tokens"])
        msg += "cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d" % (
            graph,
            self.last_gen_throughput,
            len(self.waiting),
        )
        self.log.info(msg if self.dialect.current else msg + ", ", self.ranks)
        self.metrics.set(
            {
                **spec,
                "num_running_reqs": n,
                "num_used_tokens": used,
                "token_usage": usage,
                "gen_throughput": self.last_gen_throughput,
                "num_queue_reqs": len(self.waiting),
                "cache_hit_rate": 0.0,
                "max_total_num_tokens": self.max_total_tokens,
            }
        )

    def text(self, ids: List[int]) -> str:
        return "".join(_WORDS[(i - _TOKEN_BASE_ID) % len(_WORDS)] + " " for i in ids)


# ----------------------------------------------------------------------------------------------------------
# HTTP


def count_tokens(text: str) -> int:
    """A tokenizer stand-in: about four characters per token."""
    return max(1, len(text) // 4)


class Server:
    """Everything the HTTP handler needs: args, engine, metrics, state ("starting", "ready", "stopping")."""

    def __init__(self, args: Dict[str, Any], engine: Engine, metrics: Metrics, log: Log, dialect: Dialect) -> None:
        self.args, self.engine, self.metrics, self.log, self.dialect = args, engine, metrics, log, dialect
        self.startup_time: Dict[str, Any] = {}
        self.state = "starting"
        self.scheduler_info: Dict[str, Any] = {}
        self.memory_usage: Dict[str, Any] = {}
        self._active: Dict[str, Request] = {}  # requests whose response is still being written
        self._lock = threading.Lock()

    def admit(self, prompt_tokens: int, max_new_tokens: int, stream: bool = True) -> Optional[Request]:
        """A new request, or None once SIGTERM arrived."""
        with self._lock:
            if self.state == "stopping":
                return None
            req = self.engine.submit(prompt_tokens, max_new_tokens, stream)
            self._active[req.rid] = req
            return req

    def done(self, req: Request) -> None:
        with self._lock:
            self._active.pop(req.rid, None)

    def remaining(self) -> List[str]:
        with self._lock:
            return list(self._active)

    def stop_accepting(self) -> None:
        with self._lock:
            self.state = "stopping"

    def model_info(self) -> Dict[str, Any]:
        return {
            "model_path": self.args["model_path"],
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": self.args["preferred_sampling_params"],
            "weight_version": self.args["weight_version"],
            "has_image_understanding": False,
            "has_audio_understanding": False,
        }

    def server_info(self) -> Dict[str, Any]:
        """``/server_info``: the resolved args, and ``internal_states`` with one entry per DP rank."""
        internal = dict(self.args)
        internal["last_gen_throughput"] = self.engine.last_gen_throughput
        internal["memory_usage"] = self.memory_usage
        if self.dialect.current:
            internal["startup_time"] = self.startup_time
        avg = self.engine.avg_spec_accept_length()
        if avg is not None:
            internal["avg_spec_accept_length"] = avg
        with self.engine._cv:
            times = self.engine.step_time_dict
            if times is not None:
                internal["step_time_dict"] = {str(k): list(v) for k, v in times.items()}
        if self.engine.spec.get("adaptive") is not None:  # the worker publishes each switch (runtime override)
            internal["speculative_num_steps"] = self.engine.spec["steps"]
            internal["speculative_num_draft_tokens"] = self.engine.spec["draft_tokens"]
        states = [dict(internal, dp_rank=rank) for rank in range(max(1, int(self.args["dp_size"])))]
        info = dict(self.args)
        info.update(self.scheduler_info)
        info.update({"internal_states": states, "version": self.dialect.label, "simulated": True})
        return info

    def meta_info(self, req: Request, ids: List[int], finished: bool) -> Dict[str, Any]:
        """``meta_info`` of a /generate response after ``ids``; the spec figures come with the last one."""
        finish = {"type": "length", "length": req.max_new_tokens} if finished else None
        meta = {
            "id": req.rid,
            "finish_reason": finish,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": self.args["weight_version"],
            "total_retractions": 0,
            "completion_tokens": len(ids),
            "cached_tokens": 0,
        }
        if finished:
            spec = self.engine.spec
            if spec and req.verify_ct:
                # The tokenizer process knows the startup config only: under adaptive every pass counts as the
                # first tier's (0.5.23 tokenizer_manager.py:3138-3210; PR #34814 says the same).
                tokens = spec.get("initial_draft_tokens", spec["draft_tokens"])
                meta.update(spec_meta_info(self.dialect.version, req, len(ids), tokens))
            meta["e2e_latency"] = req.finished_time - req.created
        return meta


class Handler(BaseHTTPRequestHandler):
    """SGLang's HTTP API over http.server: JSON bodies, SSE streams in chunked encoding."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    sim: Server

    # -- plumbing ---------------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: access lines are written by ``_access`` in uvicorn's format."""

    def _access(self, status: int) -> None:
        client = "%s:%d" % self.client_address[:2]
        self.sim.log.access(client, self.requestline, status, self.responses.get(status, ("",))[0])

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        self.send_header("content-type", content_type)
        self.end_headers()
        self.wfile.write(body)
        self._access(status)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, message: str) -> None:
        error_type = {400: "BadRequestError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")
        self._json(status, {"object": "error", "message": message, "type": error_type, "param": None, "code": status})

    def _body(self) -> Optional[Dict[str, Any]]:
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._error(400, "The request body is not a JSON object.")
            return None
        return body

    def _stream(self, chunks: Any) -> None:
        """Send ``data: ...`` events with chunked transfer encoding, as they are produced."""
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)
        for chunk in chunks:
            data = ("data: %s\n\n" % chunk).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _run(
        self, prompt_tokens: int, max_new_tokens: int, respond: Callable[[Request], None], stream: bool = False
    ) -> None:
        """Admit a request and write its response; a client that leaves aborts it."""
        req = self.sim.admit(prompt_tokens, max_new_tokens, stream)
        if req is None:
            self._error(503, "The server is shutting down.")
            return
        try:
            respond(req)
        except (BrokenPipeError, ConnectionResetError):
            self.sim.engine.abort(req)
            self.close_connection = True
        finally:
            self.sim.done(req)

    # -- routes -----------------------------------------------------------------------------------------

    def _authorized(self, path: str) -> bool:
        """SGLang's API key middleware (0.5.6 ``add_api_key_middleware``; 0.5.23 ``utils/auth.py``): with
        --api-key every endpoint but the health, readiness (0.5.23) and metrics ones wants ``Authorization:
        Bearer KEY``; otherwise 401 ``{"error": "Unauthorized"}``."""
        key = self.sim.args.get("api_key")
        open_paths = ("/health", "/ready", "/metrics") if self.sim.dialect.current else ("/health", "/metrics")
        if not key or path.startswith(open_paths):
            return True
        header = self.headers.get("Authorization") or ""
        if self.sim.dialect.current:  # the scheme in any case, the token compared in constant time
            scheme, _, token = header.partition(" ")
            allowed = scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode())
        else:
            allowed = header == "Bearer " + key
        if not allowed:
            self._json(401, {"error": "Unauthorized"})
        return allowed

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        sim = self.sim
        if not self._authorized(path):
            return
        if path in ("/health", "/health_generate"):
            if sim.state == "stopping":
                sim.log.info("Health check request received during shutdown. Returning 503.")
            self._send(200 if sim.state == "ready" else 503, b"", "text/plain")
        elif path in ("/get_server_info", "/server_info"):
            if path == "/get_server_info":
                sim.log.warning(
                    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                    "Please use '/server_info' instead."
                )
            self._json(200, sim.server_info())
        elif path in ("/get_model_info", "/model_info"):
            if path == "/get_model_info":
                sim.log.warning(
                    "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                    "Please use '/model_info' instead."
                )
            self._json(200, sim.model_info())
        elif path == "/metrics" and sim.args["enable_metrics"]:
            self._send(200, sim.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/models":
            name = sim.args["served_model_name"]
            card = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang"}
            card.update({"root": name, "parent": None, "max_model_len": sim.args["context_length"]})
            self._json(200, {"object": "list", "data": [card]})
        elif path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            self._json(405, {"detail": "Method Not Allowed"})
        elif path == loads.path_for(sim.dialect.current):
            body, kind = loads.answer(sim, self.path.partition("?")[2])
            self._send(200, body.encode(), kind)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return
        routes = {
            "/generate": self._generate,
            "/v1/completions": self._completions,
            "/v1/chat/completions": self._chat,
        }
        if path not in routes:
            self._json(404, {"detail": "Not Found"})
            return
        body = self._body()
        if body is not None:
            routes[path](body)

    def _generate(self, body: Dict[str, Any]) -> None:
        """SGLang's native ``/generate``: ``text`` or ``input_ids``, ``sampling_params``, ``stream``."""
        prompt = body.get("text")
        if prompt is None and body.get("input_ids") is None:
            self._error(400, "Either text or input_ids should be provided.")
            return
        if isinstance(prompt, list):
            self._error(400, "The simulator serves one prompt per /generate request.")
            return
        prompt_tokens = len(body["input_ids"]) if prompt is None else count_tokens(str(prompt))
        params = body.get("sampling_params") or {}
        engine, sim = self.sim.engine, self.sim

        def out(req: Request, ids: List[int], finished: bool) -> Dict[str, Any]:
            return {
                "text": engine.text(ids),
                "output_ids": ids,
                "meta_info": sim.meta_info(req, ids, finished),
            }

        def chunks(req: Request) -> Any:
            for ids, finished in req.updates():
                yield json.dumps(out(req, ids, finished))
            yield "[DONE]"

        def respond(req: Request) -> None:
            if body.get("stream"):
                self._stream(chunks(req))
            else:
                self._json(200, out(req, req.result(), True))

        self._run(prompt_tokens, int(params.get("max_new_tokens", 128)), respond, bool(body.get("stream")))

    def _completions(self, body: Dict[str, Any]) -> None:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and not all(isinstance(token, int) for token in prompt):
            if len(prompt) != 1:  # a batch of prompts
                self._error(400, "The simulator serves one prompt per completion request.")
                return
            prompt = prompt[0]
        prompt_tokens = len(prompt) if isinstance(prompt, list) else count_tokens(str(prompt))
        self._openai(body, prompt_tokens, int(body.get("max_tokens") or 16), chat=False)

    def _chat(self, body: Dict[str, Any]) -> None:
        text = ""
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else ""
            parts = content if isinstance(content, list) else [{"text": content or ""}]
            text += " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) + " <|im_end|> "
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 128
        self._openai(body, count_tokens(text), int(limit), chat=True)

    def _openai(self, body: Dict[str, Any], prompt_tokens: int, max_tokens: int, chat: bool) -> None:
        """``/v1/completions`` and ``/v1/chat/completions`` in SGLang's OpenAI-compatible shapes."""
        self._run(
            prompt_tokens,
            max_tokens,
            lambda req: self._openai_respond(req, body, prompt_tokens, chat),
            bool(body.get("stream")),
        )

    def _openai_respond(self, req: Request, body: Dict[str, Any], prompt_tokens: int, chat: bool) -> None:
        engine = self.sim.engine
        model = body.get("model") or "default"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def usage(with_details: bool) -> Dict[str, Any]:
            n = len(req.output_ids)
            out = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n}
            if with_details:
                out["prompt_tokens_details"] = None
            out["reasoning_tokens"] = 0
            return out

        def envelope(choices: List[Dict[str, Any]], suffix: str = "") -> Dict[str, Any]:
            return {
                "id": req.rid,
                "object": obj + suffix,
                "created": created,
                "model": model,
                "choices": choices,
            }

        if not body.get("stream"):
            text = engine.text(req.result())
            if chat:
                message = {
                    "role": "assistant",
                    "content": text,
                    "reasoning_content": None,
                    "tool_calls": None,
                }
                choice = {"index": 0, "message": message, "logprobs": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None}
            choice.update({"finish_reason": "length", "matched_stop": None})
            response = envelope([choice])
            response.update({"usage": usage(True), "metadata": {"weight_version": self.sim.args["weight_version"]}})
            self._json(200, response)
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._stream(self._openai_chunks(req, chat, envelope, usage, include_usage))

    def _openai_chunks(self, req: Request, chat: bool, envelope: Callable, usage: Callable, include: bool) -> Any:
        """The SSE events of an OpenAI-style stream, produced as the scheduler releases tokens."""
        empty_delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
        sent = 0
        if chat:
            first = dict(empty_delta, role="assistant", content="")
            yield json.dumps(dict(envelope([self._choice(first, None, chat)], ".chunk"), usage=None))
        for ids, finished in req.updates():
            delta_text = self.sim.engine.text(ids[sent:])
            sent = len(ids)
            last = finished and not chat
            delta = dict(empty_delta, content=delta_text) if chat else delta_text
            choice = self._choice(delta, "length" if last else None, chat)
            yield json.dumps(dict(envelope([choice], ".chunk" if chat else ""), usage=None))
        if chat:
            yield json.dumps(dict(envelope([self._choice(empty_delta, "length", chat)], ".chunk"), usage=None))
        if include:
            final = dict(envelope([], ".chunk" if chat else ""), usage=usage(chat))
            yield json.dumps(final)
        yield "[DONE]"

    @staticmethod
    def _choice(delta: Any, finish: Optional[str], chat: bool) -> Dict[str, Any]:
        choice: Dict[str, Any] = {"index": 0}
        choice.update({"delta": delta} if chat else {"text": delta})
        choice.update({"logprobs": None, "finish_reason": finish, "matched_stop": None})
        return choice


# ----------------------------------------------------------------------------------------------------------
# Startup


class Startup:
    """SGLang's launch sequence, phase by phase, with the checks and failures that end it."""

    def __init__(
        self, args: Dict[str, Any], target: dict, log: Log, dialect: Dialect, node: Optional[Node] = None
    ) -> None:
        self.args, self.target, self.log, self.dialect = args, target, log, dialect
        self.scale = time_scale()
        self.fail = os.environ.get("SPECDECK_SIM_FAIL", "")
        self.ranks = rank_prefixes(args["dp_size"], args["pp_size"], args["tp_size"], args["ep_size"])
        self.node = node  # across nodes: this node's ranks only, and the rendezvous with the others
        if node is not None:
            self.ranks = node.local_ranks(self.ranks)
        self.avail = GPU_MEM_GB
        self.max_total_tokens = 0
        self.began = time.perf_counter()
        # 0.5.23's startup_time (engine.py, ``Engine startup timings``): seconds per phase and per graph.
        self.timings: Dict[str, Any] = {"load_weight": 0.0, "kv_cache_allocation": 0.0, "cuda_graph": {}}

    def pause(self, seconds: float) -> None:
        time.sleep(seconds * self.scale)

    def all_ranks(self, message: str) -> None:
        for ranks in self.ranks:
            self.log.info(message, ranks)

    def join(self) -> None:
        """The rendezvous with the other nodes (``multinode.Node``); one node has none."""
        if self.node is not None:
            self.node.join()

    def crash(self, frames: List[str], error: str) -> None:
        """Every scheduler rank reports the exception, then the launcher gives up (SGLang's SIGQUIT path)."""
        text = traceback_text(frames, error)
        for ranks in self.ranks:
            self.log.error("Scheduler hit an exception: %s" % text, ranks)
        self.log.error("Received sigquit from a child process. It usually means the child failed.")
        raise SimExit(1)

    def load_model(self, kind: str, arch: str, weight_bytes: int) -> float:
        """``Load weight begin/end``; returns the per-GPU weight memory in GB."""
        tic = time.perf_counter()
        self.all_ranks("Load weight begin. avail mem=%.2f GB" % self.avail)
        self.pause(1.6 if kind == "target" else 0.4)
        weights_gb = weight_bytes / float(1 << 30) / self.args["tp_size"]
        self.weights_loaded(arch, tic, weights_gb)
        return weights_gb

    def weights_loaded(self, arch: str, tic: float, weights_gb: float) -> None:
        """``Load weight end`` in the release's words (0.5.23 adds ``elapsed=``, drops ``dtype=``)."""
        self.avail -= weights_gb
        elapsed = time.perf_counter() - tic
        self.timings["load_weight"] += elapsed
        if self.dialect.current:
            self.all_ranks(
                "Load weight end. elapsed=%.2f s, type=%s, avail mem=%.2f GB, mem usage=%.2f GB."
                % (elapsed, arch, self.avail, weights_gb)
            )
            return
        dtype = str(self.target.get("torch_dtype") or "bfloat16")
        self.all_ranks(
            "Load weight end. type=%s, dtype=torch.%s, avail mem=%.2f GB, mem usage=%.2f GB."
            % (arch, dtype, self.avail, weights_gb)
        )

    def kv_cache(self, config: dict, frames: List[str], draft: bool) -> int:
        """``KV Cache is allocated`` for the target (the static pool) or the drafter (one layer); #tokens."""
        tic = time.perf_counter()
        tcfg = _text_config(config)
        layers = 1 if draft else int(tcfg.get("num_hidden_layers", 1))
        if tcfg.get("kv_lora_rank") and not draft:  # MLA: one latent per token, replicated on every rank
            per_token = (int(tcfg["kv_lora_rank"]) + int(tcfg.get("qk_rope_head_dim", 64))) * layers * 2
        else:
            heads = int(tcfg.get("num_attention_heads", 1))
            kv_heads = int(tcfg.get("num_key_value_heads") or heads)
            head_dim = int(tcfg.get("head_dim") or int(tcfg.get("hidden_size", 128)) // heads)
            per_token = max(1, 2 * kv_heads * head_dim * layers * 2 // self.args["tp_size"])
        if draft:
            tokens = self.max_total_tokens
        else:
            static_gb = self.args["mem_fraction_static"] * GPU_MEM_GB
            kv_gb = static_gb - (GPU_MEM_GB - self.avail)
            tokens = int(kv_gb * (1 << 30) / per_token) if kv_gb > 0 else 0
            if self.args["max_total_tokens"]:
                tokens = min(tokens, int(self.args["max_total_tokens"]))
            if tokens <= 0 or self.fail == "oom":
                self.crash(
                    [
                        *frames,
                        "srt/model_executor/model_runner.py:1749 init_memory_pool | raise RuntimeError(",
                    ],
                    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                    "Current value: self.server_args.mem_fraction_static=%r" % self.args["mem_fraction_static"],
                )
            self.max_total_tokens = tokens
        size_gb = tokens * per_token / float(1 << 30)
        self.avail -= size_gb
        head = "KV Cache is allocated. " + ("dtype: torch.bfloat16, " if self.dialect.current else "")
        if tcfg.get("kv_lora_rank") and not draft:
            self.all_ranks(head + "#tokens: %d, KV size: %.2f GB" % (tokens, size_gb))
        else:
            half = size_gb / 2
            self.all_ranks(head + "#tokens: %d, K size: %.2f GB, V size: %.2f GB" % (tokens, half, half))
        self.all_ranks("Memory pool end. avail mem=%.2f GB" % self.avail)
        self.pause(0.3 if not draft else 0.1)
        self.timings["kv_cache_allocation"] += time.perf_counter() - tic
        return tokens

    # The graphs captured, as each release names them in its log: (0.5.6 label, 0.5.23 label, timing key).
    GRAPHS = {
        "target": ("cuda graph", "target verify CUDA graph", "target_verify"),
        "baseline": ("cuda graph", "target decode CUDA graph", "decode"),
        "draft": ("draft cuda graph", "draft decode CUDA graph", "draft_decode"),
        "draft_extend": ("draft extend cuda graph", "draft extend CUDA graph", "draft_extend"),
    }

    def capture(self, graph: str, seconds: float, frames: List[str]) -> None:
        """``Capture … begin/end`` for one of ``GRAPHS`` (skipped with --disable-cuda-graph, as SGLang does)."""
        if self.args["disable_cuda_graph"]:
            return
        old_label, new_label, key = self.GRAPHS[graph]
        tic = time.perf_counter()
        target = graph in ("target", "baseline")
        max_bs = int(self.args["cuda_graph_max_bs"])
        sizes = [s for s in [1, 2, 4, 8, *list(range(16, max_bs + 1, 8))] if s <= max_bs]
        if self.dialect.current:
            per_req = 1 if graph == "baseline" else self.args["speculative_num_draft_tokens"]
            if graph == "draft":
                per_req = self.args["speculative_eagle_topk"]
            self.all_ranks(
                "Capture %s begin. backend=full, num_tokens_per_req=%s, avail mem=%.2f GB"
                % (new_label, per_req, self.avail)
            )
        else:
            self.all_ranks(
                "Capture %s begin. This can take up to several minutes. avail mem=%.2f GB" % (old_label, self.avail)
            )
            if target:
                self.log.info("Capture cuda graph bs %s" % sizes, self.ranks[0])
        self.pause(seconds)
        if target and self.fail == "cuda_graph":
            self.crash(
                [*frames, "srt/model_executor/cuda_graph_runner.py:346 __init__ | raise Exception("],
                "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. "
                "GPU 0 has a "
                "total capacity of %.2f GiB of which 1.06 GiB is free.\n" % GPU_MEM_GB + "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
            )
        used = GRAPH_MEM_GB if target else GRAPH_MEM_GB / 2
        self.avail -= used
        elapsed = time.perf_counter() - tic
        self.timings["cuda_graph"][key] = elapsed
        if self.dialect.current:
            self.all_ranks(
                "Capture %s end. %selapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
                % (new_label, "bs=%s, " % sizes if target else "", elapsed, used, self.avail)
            )
        else:
            self.all_ranks(
                "Capture %s end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB."
                % (old_label, elapsed, used, self.avail)
            )

    def startup_time(self) -> Dict[str, Any]:
        """0.5.23's ``startup_time`` (``/server_info`` internal state, Prometheus) once the engine is up."""
        graphs = {
            key: 0.0 for key in ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
        }
        graphs.update(self.timings["cuda_graph"])
        total = time.perf_counter() - self.began
        return dict(self.timings, cuda_graph=graphs, scheduler_e2e=total, tokenizer_e2e=total)

    def drafter(self) -> Tuple[dict, List[str]]:
        """The drafter's config and weight files, or a crash with the error SGLang's draft worker raises."""
        path = self.args["speculative_draft_model_path"]
        frames = _DRAFT_FRAMES
        if path is None or os.path.normpath(path) == os.path.normpath(self.args["model_path"]):
            self.crash(
                frames,
                "ValueError: SIMULATED: the target has no MTP layers; pass --speculative-draft-model-path.",
            )
        config, error = read_model_config(path)
        if config is None:
            self.crash(frames, error)
        files = weight_files(path)
        if not files:
            self.crash(frames, "RuntimeError: Cannot find any model weights with `%s`" % path)
        return config, files

    def run(self) -> Tuple[Dict[str, Any], int, Dict[str, Any]]:
        """Init, load, KV cache, graphs (target, then drafter); returns (spec model, #tokens, memory)."""
        args, target = self.args, self.target
        arch = (target.get("architectures") or ["LlamaForCausalLM"])[0]
        algo = args["speculative_algorithm"]
        self.all_ranks("Init torch distributed begin.")
        self.join()
        self.pause(0.3)
        if self.fail == "unbalanced":
            local = GPU_MEM_GB
            self.crash(
                [
                    *_TARGET_FRAMES,
                    "srt/model_executor/model_runner.py:720 init_torch_distributed | raise ValueError(",
                ],
                "ValueError: The memory capacity is unbalanced. "
                "Some GPUs may be occupied by other processes. "
                "min_per_gpu_memory=%r, local_gpu_memory=%r, local_gpu_memory * 0.9=%r"
                % (local * 0.62, local, local * 0.9),
            )
        self.all_ranks("Init torch distributed ends. mem usage=0.00 GB")
        model_path = args["model_path"]
        weights_gb = self.load_model("target", arch, _bytes_of(weight_files(model_path)))
        tokens = self.kv_cache(target, _TARGET_FRAMES, draft=False)
        kv_gb = GPU_MEM_GB - self.avail - weights_gb
        self.capture("target" if algo else "baseline", 1.0, _TARGET_FRAMES)
        spec: Dict[str, Any] = {}
        if algo == "NGRAM":
            steps = int(args["speculative_num_draft_tokens"]) - 1
            spec = {"steps": steps, "draft_tokens": steps + 1, "rates": [ACCEPT_P_NGRAM] * steps, "draft_steps": 0}
        elif algo:
            draft_config, draft_files = self.drafter()
            draft_arch = (draft_config.get("architectures") or ["LlamaForCausalLM"])[0]
            tic = time.perf_counter()
            self.all_ranks("Load weight begin. avail mem=%.2f GB" % self.avail)
            self.pause(0.4)
            if draft_arch == EAGLE3_ARCH:
                try:
                    misfit = first_misfit(draft_files, expected_eagle3_shapes(target, draft_config))
                except CheckpointError as exc:
                    self.crash(
                        _DRAFT_FRAMES,
                        "safetensors_rust.SafetensorError: Error while deserializing header: %s" % exc,
                    )
                if misfit is not None:
                    self.crash(
                        [
                            *_DRAFT_FRAMES,
                            "srt/models/llama_eagle3.py:262 load_weights | weight_loader(param, loaded_weight)",
                            "srt/model_loader/weight_utils.py:845 default_weight_loader | "
                            "assert param.size() == loaded_weight.size(), (",
                        ],
                        "AssertionError: Attempted to load weight (%s) into parameter (%s)"
                        % (_size(misfit[0]), _size(misfit[1])),
                    )
            self.weights_loaded(draft_arch, tic, _bytes_of(draft_files) / float(1 << 30) / args["tp_size"])
            self.kv_cache(draft_config, _DRAFT_FRAMES, draft=True)
            if not self.dialect.current or int(args["speculative_num_steps"]) > 1:  # 0.5.23: steps > 1 only
                self.capture("draft", 0.4, _DRAFT_FRAMES)
            self.capture("draft_extend", 0.3, _DRAFT_FRAMES)
            steps = int(args["speculative_num_steps"])
            tiers = None
            if args.get("speculative_adaptive"):  # one runtime state per tier, the drafter's rates up to the top
                graphs = 0 if args["disable_cuda_graph"] else int(args["cuda_graph_max_bs"])
                tiers = sim_spec.Tiers(args, self.log, self.ranks[0], graphs)
                tiers.built(0.3 * self.scale)
            positions = max(tiers.tiers) if tiers is not None else steps
            rates = drafter_rates(args["speculative_draft_model_path"], draft_config, positions)
            # EAGLE with an EAGLE-3 drafter loads and accepts nothing (sglang PR #21272).
            if algo == "EAGLE" and draft_arch == EAGLE3_ARCH:
                rates = [0.0] * positions
            spec = {
                "steps": steps,
                "draft_tokens": int(args["speculative_num_draft_tokens"]),
                "rates": widened(rates, int(args["speculative_eagle_topk"] or 1)),
                "draft_steps": steps,
            }
            if tiers is not None:
                spec.update(adaptive=tiers, positions=positions, initial_draft_tokens=steps + 1)
            chosen = scenario.active()
            spread = chosen.spread(scenario.drafter_name(args["speculative_draft_model_path"])) if chosen else None
            if spread is not None:
                spec["spread"] = spread  # the scenario's noise of a_1 across requests
        self.log.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
            "max_running_requests=%d, "
            "context_len=%d, available_gpu_mem=%.2f GB"
            % (
                tokens,
                args["chunked_prefill_size"],
                args["max_prefill_tokens"],
                int(args["max_running_requests"] or UNLIMITED_MAX_RUNNING),
                args["context_length"],
                self.avail,
            ),
            self.ranks[0],
        )
        memory = {"weight": round(weights_gb, 2), "kvcache": round(kv_gb, 2), "token_capacity": tokens}
        memory["graph"] = 0.0 if args["disable_cuda_graph"] else GRAPH_MEM_GB
        return spec, tokens, memory


def _bind(host: str, port: int) -> ThreadingHTTPServer:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class _HTTPServer(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True
        # uvicorn's backlog: socketserver's 5 drops a burst of connects while the accept thread waits for a
        # CPU, and a dropped SYN starts its stream a second late (the kernel's first retransmit).
        request_queue_size = 2048

    return _HTTPServer((host, port), Handler)


def _warmup(sim: Server, host: str, port: int, fail: bool) -> None:
    """SGLang's warmup: wait for /get_model_info, then one /generate of 8 tokens through the server."""
    if host in ("", "0.0.0.0", "::"):
        host = "::1" if host == "::" else "127.0.0.1"
    base = "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)
    key = sim.args.get("api_key")
    headers = {"Authorization": "Bearer %s" % key} if key else {}  # SGLang's warmup sends its own key
    urllib.request.urlopen(urllib.request.Request(base + "/get_model_info", headers=headers), timeout=30).read()
    if fail:
        error = traceback_text(
            [
                "srt/entrypoints/http_server.py:1560 _execute_server_warmup | "
                'assert res.status_code == 200, f"{res.text}"'
            ],
            'AssertionError: {"object":"error","message":"Internal server error",'
            '"type":"InternalServerError",'
            '"param":null,"code":500}',
        )
        sim.log.error("Initialization failed. warmup error: %s" % error)
        raise SimExit(1)
    body = json.dumps(
        {"text": "The capital city of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
    )
    request = urllib.request.Request(base + "/generate", body.encode(), {"Content-Type": "application/json", **headers})
    urllib.request.urlopen(request, timeout=60).read()


def merge_config(argv: List[str], parser: argparse.ArgumentParser) -> List[str]:
    """SGLang's ``--config FILE``: a YAML mapping of options read in the process (so what it holds, an API key,
    is in no command line) and put before the command line's own, which win (ConfigArgumentMerger)."""
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    if at == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = argv[at + 1]
    if os.path.splitext(path)[1].lower() not in (".yaml", ".yml"):
        raise ValueError("Config file must be YAML format, got: %s" % os.path.splitext(path)[1])
    if not os.path.exists(path):
        raise ValueError("Config file not found: %s" % path)
    import yaml  # as SGLang: PyYAML, only where a config file is given

    with open(path) as f:
        config = yaml.safe_load(f) or {}
    if not isinstance(config, dict):
        raise ValueError("Config file must contain a dictionary at root level")
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


def serve(argv: List[str]) -> int:
    """Run the simulated server until SIGTERM (0) or a failure (1); bad flags exit 2 from argparse."""
    # SGLang's own parser is a plain ArgumentParser: unique prefixes such as --tp work there too.
    try:
        dialect = dialect_from_env()
    except ValueError as exc:
        sys.stderr.write(
            "SIMULATED: %s=%s is not a release the simulator speaks (%s).\n"
            % (SIM_VERSION_ENV, exc, ", ".join(SIM_VERSIONS))
        )
        return 2
    flags = table(dialect.version)  # the release's own flags: 0.5.23 refuses 0.5.6's --cuda-graph-max-bs
    parser = flags.build_parser(prog="launch_server.py", allow_abbrev=True)
    try:
        argv = merge_config(argv, parser)
    except ValueError as exc:
        sys.stderr.write(_main_traceback([], "ValueError: %s" % exc) + "\n")
        return 1
    args = flags.server_args(parser.parse_args(argv))
    log = Log(args["log_level"])
    log.info(
        "SIMULATED SGLang %s server (specdeck sandbox stand-in for python -m sglang.launch_server): "
        "no GPU, no model, timings from the operator's measurements." % dialect.label
    )
    try:
        if scenario.active() is not None:
            log.info("SIMULATED: timing and acceptance from the scenario %s" % os.environ[scenario.ENV])
    except scenario.ScenarioError as exc:
        log.error("SIMULATED: %s=%s cannot be used: %s." % (scenario.ENV, os.environ[scenario.ENV], exc))
        return 2
    if os.environ.get("SPECDECK_SIM_FAIL", "") not in ("", *FAILURES):
        log.error("SIMULATED: SPECDECK_SIM_FAIL must be one of %s." % ", ".join(FAILURES))
        return 2
    target, error = read_model_config(args["model_path"])
    if target is None:
        sys.stderr.write(_main_traceback(_HF_CONFIG_FRAMES, error) + "\n")
        return 1
    args = resolve_args(args, target, log)
    log.info("server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in args.items()))
    node: Optional[Node] = None
    if args["nnodes"] > 1:
        from backend.sandbox.sglang_sim import multinode  # only a multi-node server loads it

        refused = multinode.check(args)
        if refused:
            sys.stderr.write(_main_traceback([], "AssertionError: %s" % refused) + "\n")
            return 1
        node = multinode.Node(args, log, dialect)
    startup = Startup(args, target, log, dialect, node)
    spec, tokens, memory = startup.run()
    if node is not None and node.rank:
        return node.follow()  # a node >= 1 serves no API
    metrics = Metrics(args["served_model_name"], args["dp_size"] > 1, dialect)
    metrics.histograms = SimHistograms(dialect.version, args)
    engine = Engine(args, spec, log, metrics, startup.ranks[0], dialect)
    sim = Server(args, engine, metrics, log, dialect)
    sim.memory_usage = memory
    if dialect.current:
        sim.startup_time = timings = startup.startup_time()
        log.info(
            "Engine startup timings (s): load_weight=%.2f, kv_cache_allocation=%.2f, scheduler_e2e=%.2f, "
            "cuda_graph={%s}, tokenizer_e2e=%.2f"
            % (
                timings["load_weight"],
                timings["kv_cache_allocation"],
                timings["scheduler_e2e"],
                ", ".join("%s=%.2f" % kv for kv in timings["cuda_graph"].items()),
                timings["tokenizer_e2e"],
            )
        )
        metrics.set_phases("startup_time_seconds", {k: v for k, v in timings.items() if k != "cuda_graph"})
        metrics.set_phases("startup_cuda_graph_time_seconds", timings["cuda_graph"])
    sim.scheduler_info = {
        "status": "ready",
        "max_total_num_tokens": tokens,
        "max_req_input_len": args["context_length"] - 1,
    }
    engine.start(tokens)

    host, port = args["host"], args["port"]
    log.uvicorn("INFO", "Started server process [%d]" % os.getpid())
    log.uvicorn("INFO", "Waiting for application startup.")
    log.uvicorn("INFO", "Application startup complete.")
    Handler.sim = sim
    try:
        httpd = _bind(host, port)
    except OSError as exc:
        log.uvicorn(
            "ERROR",
            "[Errno %d] error while attempting to bind on address %r: %s"
            % (exc.errno, (host, port), exc.strerror.lower()),
        )
        log.uvicorn("INFO", "Waiting for application shutdown.")
        log.uvicorn("INFO", "Application shutdown complete.")
        return 1
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    log.uvicorn("INFO", "Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (host, port))

    # From here SIGTERM drains instead of killing; the handler only writes to a pipe the main thread reads.
    wake_r, wake_w = os.pipe()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: os.write(wake_w, b"x"))
    if not args["skip_server_warmup"]:
        startup.pause(0.2)
        _warmup(sim, host, port, startup.fail == "warmup")
    sim.state = "ready"
    log.info("The server is fired up and ready to roll!")

    os.read(wake_r, 1)
    sim.stop_accepting()
    log.warning("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    while True:
        remaining = sim.remaining()
        log.info(
            "Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=%r."
            % (len(remaining), remaining)
        )
        if not remaining:
            break
        time.sleep(DRAIN_POLL_S * startup.scale)
    httpd.shutdown()
    return 0


def main() -> None:
    try:
        code = serve(sys.argv[1:])
    except SimExit as exc:
        code = exc.code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # daemon threads (scheduler, HTTP) end with the process, as SGLang's children do


if __name__ == "__main__":
    main()
