"""SIMULATED SGLang's launch sequence, phase by phase: init, target weights, KV cache, CUDA graphs, then the
drafter's; the milestones each release logs, 0.5.23's ``startup_time``, and the warmup request.

Load checks: the target's config.json (``--model-path``), the drafter's config.json and safetensors headers.
The drafter's parameters are built to the target's hidden size, so a drafter that does not fit dies while
loading with SGLang's ``Attempted to load weight (torch.Size([...])) into parameter (torch.Size([...]))``.
Env ``SPECDECK_SIM_FAIL=oom|cuda_graph|warmup|unbalanced`` forces the other failure signatures (FIELD-NOTES
§5); a ``--mem-fraction-static`` too small for the weights gives SGLang's "Not enough memory" by itself.
``--speculative-algorithm EAGLE`` with an EAGLE-3 drafter (``LlamaForCausalLMEagle3``) loads fine and accepts
nothing: accept len 1.00, the silent trap of sglang PR #21272. Memory figures (a 139.8 GB GPU) are invented but
follow SGLang's arithmetic. ``run`` returns the speculative model the engine decodes with: a new algorithm's
drafter loading and its ``spec`` go there. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from typing import TYPE_CHECKING, Any, Dict, List, NoReturn, Optional, Tuple

from backend.agent.host.shared.safetensors_header import CheckpointError
from backend.sandbox.sglang_sim import dspark as sim_dspark
from backend.sandbox.sglang_sim import scenario
from backend.sandbox.sglang_sim import spec as sim_spec
from backend.sandbox.sglang_sim.api import Server
from backend.sandbox.sglang_sim.args import UNLIMITED_MAX_RUNNING
from backend.sandbox.sglang_sim.dialect import Dialect
from backend.sandbox.sglang_sim.folders import (
    EAGLE3_ARCH,
    bytes_of,
    expected_eagle3_shapes,
    first_misfit,
    read_model_config,
    text_config,
    torch_size,
    weight_files,
)
from backend.sandbox.sglang_sim.log import SCHEDULER_FRAMES, Log, SimExit, rank_prefixes, traceback_text
from backend.sandbox.sglang_sim.timing import ACCEPT_P_NGRAM, drafter_rates, time_scale, widened

if TYPE_CHECKING:
    from backend.sandbox.sglang_sim.multinode import Node


GPU_MEM_GB = 139.8  # available per GPU before loading (an H200-class card; invented)
GRAPH_MEM_GB = 1.2
FAILURES = ("oom", "cuda_graph", "warmup", "unbalanced")  # SPECDECK_SIM_FAIL values


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


class Startup:
    """SGLang's launch sequence, phase by phase, with the checks and failures that end it."""

    def __init__(
        self, args: Dict[str, Any], target: Dict[str, Any], log: Log, dialect: Dialect, node: Optional[Node] = None
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

    def crash(self, frames: List[str], error: str) -> NoReturn:
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
        weights_gb: float = weight_bytes / float(1 << 30) / self.args["tp_size"]
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

    def kv_cache(self, config: Dict[str, Any], frames: List[str], draft: bool) -> int:
        """``KV Cache is allocated`` for the target (the static pool) or the drafter (one layer); #tokens."""
        tic = time.perf_counter()
        tcfg = text_config(config)
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

    def drafter(self) -> Tuple[Dict[str, Any], List[str]]:
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
        weights_gb = self.load_model("target", arch, bytes_of(weight_files(model_path)))
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
                        % (torch_size(misfit[0]), torch_size(misfit[1])),
                    )
            self.weights_loaded(draft_arch, tic, bytes_of(draft_files) / float(1 << 30) / args["tp_size"])
            self.kv_cache(draft_config, _DRAFT_FRAMES, draft=True)
            block = algo in ("DFLASH", "DSPARK")  # one parallel draft pass proposes the whole block
            if not block and (not self.dialect.current or int(args["speculative_num_steps"]) > 1):  # 0.5.23: > 1
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
                "drafter": scenario.drafter_name(args["speculative_draft_model_path"]),  # its domains (prompts.py)
            }
            if tiers is not None:
                spec.update(adaptive=tiers, initial_draft_tokens=steps + 1)
            if block:  # DFLASH, DSPARK: block - 1 drafts from one draft pass, accepted in order as a chain's are
                drafts = int(args["speculative_num_draft_tokens"]) - 1
                rates = drafter_rates(args["speculative_draft_model_path"], draft_config, drafts)
                spec.update(rates=rates, positions=drafts, draft_steps=1)
            if algo == "DSPARK":  # each request's verify window (``dspark``: the ragged verify modes)
                ragged = sim_dspark.mode()
                spec.update(ragged=ragged, dspark=sim_dspark.Ragged(ragged, drafts))
            chosen = scenario.active()
            key = scenario.drafter_key(args["speculative_draft_model_path"], draft_config)
            spread = chosen.spread(key) if chosen else None
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


def warmup(sim: Server, host: str, port: int, fail: bool) -> None:
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
