# ruff: noqa: E501 -- the flag table keeps one flag per line.
"""SGLang's real launch flags: the flag table of ``python -m sglang.launch_server`` and a parser built from it.

Taken from SGLang 0.5.6 (the version AQ-MedAI's drafter card recommends), ``ServerArgs.add_cli_args`` in
``python/sglang/srt/server_args.py`` of the PyPI wheel ``sglang-0.5.6-py3-none-any.whl``
(wheel sha256 c32b6a5b…f66b, server_args.py sha256 90ed704e…3ebb), read with Python's ``ast`` so every
``add_argument`` call is here: option strings (first = SGLang's dest), type, choices, default, nargs, const,
required. Defaults are the dataclass defaults ``add_cli_args`` points at; ``help`` keeps the first sentence of
SGLang's help text (Apache-2.0, the SGLang Team). Dynamic choices (reasoning and tool-call parsers) are the
registries of that release.

Differences from SGLang's own parser, on purpose:
- ``build_parser`` defaults to ``allow_abbrev=False``. SGLang's parser is a plain ``ArgumentParser`` and so
  accepts any unique prefix: ``--tp 8`` works there only as a prefix of ``--tp-size`` (no release through
  0.5.23 registers ``--tp``). specdeck writes full names, so its validation refuses prefixes; the simulator
  passes ``allow_abbrev=True`` to behave like SGLang.
- ``--lora-paths`` keeps its strings (SGLang turns them into ``LoRARef`` objects).
- ``--config`` is accepted as a flag but its YAML is not merged (``prepare_server_args`` does that in SGLang).

The host's own ``launch_server --help`` is the truth for its version: ``parse_help_flags`` reads it.
Stdlib only and Python 3.8+: the sandbox simulator imports this module on the host side.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.errors import UsageError

SGLANG_VERSION = "0.5.6"
SGLANG_SOURCE = (
    "sglang-0.5.6-py3-none-any.whl (PyPI) python/sglang/srt/server_args.py ServerArgs.add_cli_args, "
    "sha256 90ed704ebe01b813446cceb83f3d0da4790a4172e736067f732cc0a369613ebb"
)

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
LOAD_FORMATS = (
    "auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "gguf", "bitsandbytes", "layered",
    "remote", "remote_instance",
)  # fmt: skip
ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla",
    "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
)  # fmt: skip
NSA_BACKENDS = ("flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter")
MOE_RUNNER_BACKENDS = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass",
    "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass",
)  # fmt: skip

# SGLang's dests that ServerArgs.from_cli_args renames to dataclass fields.
_RENAMED = {
    "tensor_parallel_size": "tp_size",
    "pipeline_parallel_size": "pp_size",
    "data_parallel_size": "dp_size",
    "expert_parallel_size": "ep_size",
}
_NOT_FIELDS = {"config"}  # a meta flag: not a ServerArgs field


@dataclass(frozen=True)
class Flag:
    """One ``launch_server`` option as SGLang registers it.

    ``type`` is one of ``str``, ``int``, ``float``, ``json`` (json.loads), ``json_list`` (SGLang's
    json_list_type), ``nullable_str`` ("" or "None" → None), ``switch`` (store_true) or ``lora_paths``.
    """

    names: tuple[str, ...]
    type: str
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    const: Any = None
    required: bool = False

    @property
    def dest(self) -> str:
        """The attribute argparse stores the value under (SGLang's first option string)."""
        return self.names[0][2:].replace("-", "_")

    @property
    def field(self) -> str | None:
        """The ServerArgs field (as ``/get_server_info`` names it), or None for ``--config``."""
        if self.dest in _NOT_FIELDS:
            return None
        return _RENAMED.get(self.dest, self.dest)


def _f(names: str, type_: str, help_: str, **extra: Any) -> Flag:
    if "choices" in extra:
        extra["choices"] = tuple(extra["choices"])
    return Flag(names=tuple(names.split()), type=type_, help=help_, **extra)


# fmt: off
_TABLE = (
    _f("--model-path --model", "str", "The path of the model weights.", required=True),
    _f("--tokenizer-path", "str", "The path of the tokenizer."),
    _f("--tokenizer-mode", "str", "Tokenizer mode.", default="auto", choices=["auto", "slow"]),
    _f("--tokenizer-worker-num", "int", "The worker num of the tokenizer manager.", default=1),
    _f("--skip-tokenizer-init", "switch", "If set, skip init tokenizer and pass input_ids in generate request."),
    _f("--load-format", "str", "The format of the model weights to load.", default="auto", choices=LOAD_FORMATS),
    _f("--model-loader-extra-config", "str", "Extra config for model loader.", default="{}"),
    _f("--trust-remote-code", "switch", "Whether or not to allow for custom models defined on the Hub in their own modeling files."),
    _f("--context-length", "int", "The model's maximum context length."),
    _f("--is-embedding", "switch", "Whether to use a CausalLM as an embedding model."),
    _f("--enable-multimodal", "switch", "Enable the multimodal functionality for the served model."),
    _f("--revision", "str", "The specific model version to use."),
    _f("--model-impl", "str", "Which implementation of the model to use.", default="auto"),
    _f("--host", "str", "The host of the HTTP server.", default="127.0.0.1"),
    _f("--port", "int", "The port of the HTTP server.", default=30000),
    _f("--fastapi-root-path", "str", "App is behind a path based routing proxy.", default=""),
    _f("--grpc-mode", "switch", "If set, use gRPC server instead of HTTP server."),
    _f("--skip-server-warmup", "switch", "If set, skip warmup."),
    _f("--warmups", "str", "Specify custom warmup functions (csv) to run before server starts eg."),
    _f("--nccl-port", "int", "The port for NCCL distributed environment setup."),
    _f("--checkpoint-engine-wait-weights-before-ready", "switch", "If set, the server will wait for initial weights to be loaded via checkpoint-engine or other update methods before serving inference requests."),
    _f("--dtype", "str", "Data type for model weights and activations.", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"]),
    _f("--quantization", "str", "The quantization method.", choices=["awq", "fp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt", "modelopt_fp8", "modelopt_fp4", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "qoq", "w4afp8", "mxfp4", "auto-round", "compressed-tensors"]),
    _f("--quantization-param-path", "nullable_str", "Path to the JSON file containing the KV cache scaling factors."),
    _f("--kv-cache-dtype", "str", "Data type for kv cache storage.", default="auto", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]),
    _f("--enable-fp32-lm-head", "switch", "If set, the LM head outputs (logits) are in FP32."),
    _f("--modelopt-quant", "str", "The ModelOpt quantization configuration."),
    _f("--modelopt-checkpoint-restore-path", "str", "Path to restore a previously saved ModelOpt quantized checkpoint."),
    _f("--modelopt-checkpoint-save-path", "str", "Path to save the ModelOpt quantized checkpoint after quantization."),
    _f("--modelopt-export-path", "str", "Path to export the quantized model in HuggingFace format after ModelOpt quantization."),
    _f("--quantize-and-serve", "switch", "Quantize the model with ModelOpt and immediately serve it without exporting."),
    _f("--mem-fraction-static", "float", "The fraction of the memory used for static allocation (model weights and KV cache memory pool)."),
    _f("--max-running-requests", "int", "The maximum number of running requests."),
    _f("--max-queued-requests", "int", "The maximum number of queued requests."),
    _f("--max-total-tokens", "int", "The maximum number of tokens in the memory pool."),
    _f("--chunked-prefill-size", "int", "The maximum number of tokens in a chunk for the chunked prefill."),
    _f("--max-prefill-tokens", "int", "The maximum number of tokens in a prefill batch.", default=16384),
    _f("--schedule-policy", "str", "The scheduling policy of the requests.", default="fcfs", choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"]),
    _f("--enable-priority-scheduling", "switch", "Enable priority scheduling."),
    _f("--abort-on-priority-when-disabled", "switch", "If set, abort requests that specify a priority when priority scheduling is disabled."),
    _f("--schedule-low-priority-values-first", "switch", "If specified with --enable-priority-scheduling, the scheduler will schedule requests with lower priority integer values first."),
    _f("--priority-scheduling-preemption-threshold", "int", "Minimum difference in priorities for an incoming request to have to preempt running request(s).", default=10),
    _f("--schedule-conservativeness", "float", "How conservative the schedule policy is.", default=1.0),
    _f("--page-size", "int", "The number of tokens in a page."),
    _f("--hybrid-kvcache-ratio", "float", "Mix ratio in [0,1] between uniform and hybrid kv buffers (0.0 = pure uniform: swa_size / full_size = 1)(1.0 = pure hybrid: swa_size / full_size = local_attention_size / context_length)", nargs="?", const=0.5),
    _f("--swa-full-tokens-ratio", "float", "The ratio of SWA layer KV tokens / full layer KV tokens, regardless of the number of swa:full layers.", default=0.8),
    _f("--disable-hybrid-swa-memory", "switch", "Disable the hybrid SWA memory pool."),
    _f("--radix-eviction-policy", "str", "The eviction policy of radix trees.", default="lru", choices=["lru", "lfu"]),
    _f("--device", "str", "The device to use ('cuda', 'xpu', 'hpu', 'npu', 'cpu')."),
    _f("--tensor-parallel-size --tp-size", "int", "The tensor parallelism size.", default=1),
    _f("--pipeline-parallel-size --pp-size", "int", "The pipeline parallelism size.", default=1),
    _f("--pp-max-micro-batch-size", "int", "The maximum micro batch size in pipeline parallelism."),
    _f("--stream-interval", "int", "The interval (or buffer size) for streaming in terms of the token length.", default=1),
    _f("--stream-output", "switch", "Whether to output as a sequence of disjoint segments."),
    _f("--random-seed", "int", "The random seed."),
    _f("--constrained-json-whitespace-pattern", "str", "(outlines and llguidance backends only) Regex pattern for syntactic whitespaces allowed in JSON constrained output."),
    _f("--constrained-json-disable-any-whitespace", "switch", "(xgrammar and llguidance backends only) Enforce compact representation in JSON constrained output."),
    _f("--watchdog-timeout", "float", "Set watchdog timeout in seconds.", default=300),
    _f("--dist-timeout", "int", "Set timeout for torch.distributed initialization."),
    _f("--download-dir", "str", "Model download directory for huggingface."),
    _f("--base-gpu-id", "int", "The base GPU ID to start allocating GPUs from.", default=0),
    _f("--gpu-id-step", "int", "The delta between consecutive GPU IDs that are used.", default=1),
    _f("--sleep-on-idle", "switch", "Reduce CPU usage when sglang is idle."),
    _f("--mm-process-config", "json", "Multimodal preprocessing config, a json config contains keys: `image`, `video`, `audio`"),
    _f("--log-level", "str", "The logging level of all loggers.", default="info"),
    _f("--log-level-http", "str", "The logging level of HTTP server."),
    _f("--log-requests", "switch", "Log metadata, inputs, outputs of all requests."),
    _f("--log-requests-level", "int", "0: Log metadata (no sampling parameters).", default=2, choices=[0, 1, 2, 3]),
    _f("--crash-dump-folder", "str", "Folder path to dump requests from the last 5 min before a crash (if any)."),
    _f("--show-time-cost", "switch", "Show time cost of custom marks."),
    _f("--enable-metrics", "switch", "Enable log prometheus metrics."),
    _f("--enable-metrics-for-all-schedulers", "switch", "Enable --enable-metrics-for-all-schedulers when you want schedulers on all TP ranks (not just TP 0) to record request metrics separately."),
    _f("--tokenizer-metrics-custom-labels-header", "str", "Specify the HTTP header for passing custom labels for tokenizer metrics.", default="x-custom-labels"),
    _f("--tokenizer-metrics-allowed-custom-labels", "str", "The custom labels allowed for tokenizer metrics.", nargs="+"),
    _f("--bucket-time-to-first-token", "float", "The buckets of time to first token, specified as a list of floats.", nargs="+"),
    _f("--bucket-inter-token-latency", "float", "The buckets of inter-token latency, specified as a list of floats.", nargs="+"),
    _f("--bucket-e2e-request-latency", "float", "The buckets of end-to-end request latency, specified as a list of floats.", nargs="+"),
    _f("--collect-tokens-histogram", "switch", "Collect prompt/generation tokens histogram."),
    _f("--prompt-tokens-buckets", "str", "The buckets rule of prompt tokens.", nargs="+"),
    _f("--generation-tokens-buckets", "str", "The buckets rule for generation tokens histogram.", nargs="+"),
    _f("--gc-warning-threshold-secs", "float", "The threshold for long GC warning.", default=0.0),
    _f("--decode-log-interval", "int", "The log interval of decode batch.", default=40),
    _f("--enable-request-time-stats-logging", "switch", "Enable per request time stats logging"),
    _f("--kv-events-config", "str", "Config in json format for NVIDIA dynamo KV event publishing."),
    _f("--enable-trace", "switch", "Enable opentelemetry trace"),
    _f("--otlp-traces-endpoint", "str", "Config opentelemetry collector endpoint if --enable-trace is set.", default="localhost:4317"),
    _f("--export-metrics-to-file", "switch", "Export performance metrics for each request to local file (e.g."),
    _f("--export-metrics-to-file-dir", "str", "Directory path for writing performance metrics files (required when --export-metrics-to-file is enabled)."),
    _f("--api-key", "str", "Set API key of the server."),
    _f("--served-model-name", "str", "Override the model name returned by the v1/models endpoint in OpenAI API server."),
    _f("--weight-version", "str", "Version identifier for the model weights.", default="default"),
    _f("--chat-template", "str", "The buliltin chat template name or the path of the chat template file."),
    _f("--completion-template", "str", "The buliltin completion template name or the path of the completion template file."),
    _f("--file-storage-path", "str", "The path of the file storage in backend.", default="sglang_storage"),
    _f("--enable-cache-report", "switch", "Return number of cached tokens in usage.prompt_tokens_details for each openai request."),
    _f("--reasoning-parser", "str", "Specify the parser for reasoning models, supported parsers are: ['deepseek-r1', 'deepseek-v3', 'glm45', 'gpt-oss', 'kimi', 'kimi_k2', 'qwen3', 'qwen3-thinking', 'minimax', 'minimax-append-think', 'step3'].", choices=["deepseek-r1", "deepseek-v3", "glm45", "gpt-oss", "kimi", "kimi_k2", "qwen3", "qwen3-thinking", "minimax", "minimax-append-think", "step3"]),
    _f("--tool-call-parser", "str", "Specify the parser for handling tool-call interactions.", choices=["deepseekv3", "deepseekv31", "deepseekv32", "glm", "glm45", "gpt-oss", "kimi_k2", "llama3", "mistral", "pythonic", "qwen", "qwen25", "qwen3_coder", "step3", "minimax-m2"]),
    _f("--tool-server", "str", "Either 'demo' or a comma-separated list of tool server urls to use for the model."),
    _f("--sampling-defaults", "str", "Where to get default sampling parameters.", default="model", choices=["openai", "model"]),
    _f("--data-parallel-size --dp-size", "int", "The data parallelism size.", default=1),
    _f("--load-balance-method", "str", "The load balancing strategy for data parallelism.", default="round_robin", choices=["round_robin", "shortest_queue", "minimum_tokens"]),
    _f("--load-watch-interval", "float", "The interval of load watching in seconds.", default=0.1),
    _f("--prefill-round-robin-balance", "switch", "Prefill is round robin balanced."),
    _f("--dist-init-addr --nccl-init-addr", "str", "The host address for initializing distributed backend (e.g., `192.168.0.2:25000`)."),
    _f("--nnodes", "int", "The number of nodes.", default=1),
    _f("--node-rank", "int", "The node rank.", default=0),
    _f("--json-model-override-args", "str", "A dictionary in JSON string format used to override default model configurations.", default="{}"),
    _f("--preferred-sampling-params", "str", "json-formatted sampling settings that will be returned in /get_model_info"),
    _f("--enable-lora", "switch", "Enable LoRA support for the model."),
    _f("--max-lora-rank", "int", "The maximum rank of LoRA adapters."),
    _f("--lora-target-modules", "str", "The union set of all target modules where LoRA should be applied.", choices=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj", "gate_up_proj", "all"], nargs="*"),
    _f("--lora-paths", "lora_paths", "The list of LoRA adapters to load."),
    _f("--max-loras-per-batch", "int", "Maximum number of adapters for a running batch, include base-only request.", default=8),
    _f("--max-loaded-loras", "int", "If specified, it limits the maximum number of LoRA adapters loaded in CPU memory at a time."),
    _f("--lora-eviction-policy", "str", "LoRA adapter eviction policy when memory pool is full.", default="lru", choices=["lru", "fifo"]),
    _f("--lora-backend", "str", "Choose the kernel backend for multi-LoRA serving.", default="csgmv", choices=["triton", "csgmv", "ascend"]),
    _f("--max-lora-chunk-size", "int", "Maximum chunk size for the ChunkedSGMV LoRA backend.", default=16, choices=[16, 32, 64, 128]),
    _f("--attention-backend", "str", "Choose the kernels for attention layers.", choices=ATTENTION_BACKENDS),
    _f("--prefill-attention-backend", "str", "Choose the kernels for prefill attention layers (have priority over --attention-backend).", choices=ATTENTION_BACKENDS),
    _f("--decode-attention-backend", "str", "Choose the kernels for decode attention layers (have priority over --attention-backend).", choices=ATTENTION_BACKENDS),
    _f("--sampling-backend", "str", "Choose the kernels for sampling layers.", choices=["flashinfer", "pytorch", "ascend"]),
    _f("--grammar-backend", "str", "Choose the backend for grammar-guided decoding.", choices=["xgrammar", "outlines", "llguidance", "none"]),
    _f("--mm-attention-backend", "str", "Set multimodal attention backend.", choices=["sdpa", "fa3", "triton_attn", "ascend_attn", "aiter_attn"]),
    _f("--nsa-prefill-backend", "str", "", default="flashmla_sparse", choices=NSA_BACKENDS),
    _f("--nsa-decode-backend", "str", "", default="fa3", choices=NSA_BACKENDS),
    _f("--enable-flashinfer-autotune", "switch", "Enable FlashInfer autotuning for optimal kernel selection."),
    _f("--speculative-algorithm", "str", "Speculative algorithm.", choices=SPECULATIVE_ALGORITHMS),
    _f("--speculative-draft-model-path --speculative-draft-model", "str", "The path of the draft model weights."),
    _f("--speculative-draft-model-revision", "str", "The specific draft model version to use."),
    _f("--speculative-draft-load-format", "str", "The format of the draft model weights to load.", choices=LOAD_FORMATS),
    _f("--speculative-num-steps", "int", "The number of steps sampled from draft model in Speculative Decoding."),
    _f("--speculative-eagle-topk", "int", "The number of tokens sampled from the draft model in eagle2 each step."),
    _f("--speculative-num-draft-tokens", "int", "The number of tokens sampled from the draft model in Speculative Decoding."),
    _f("--speculative-accept-threshold-single", "float", "Accept a draft token if its probability in the target model is greater than this threshold.", default=1.0),
    _f("--speculative-accept-threshold-acc", "float", "The accept probability of a draft token is raised from its target probability p to min(1, p / threshold_acc).", default=1.0),
    _f("--speculative-token-map", "str", "The path of the draft model's small vocab table."),
    _f("--speculative-attention-mode", "str", "Attention backend for speculative decoding operations (both target verify and draft extend).", default="prefill", choices=["prefill", "decode"]),
    _f("--speculative-moe-runner-backend", "str", "Choose the runner backend for MoE in speculative decoding.", choices=MOE_RUNNER_BACKENDS),
    _f("--speculative-ngram-min-match-window-size", "int", "The minimum window size for pattern matching in ngram speculative decoding.", default=1),
    _f("--speculative-ngram-max-match-window-size", "int", "The maximum window size for pattern matching in ngram speculative decoding.", default=12),
    _f("--speculative-ngram-min-bfs-breadth", "int", "The minimum breadth for BFS (Breadth-First Search) in ngram speculative decoding.", default=1),
    _f("--speculative-ngram-max-bfs-breadth", "int", "The maximum breadth for BFS (Breadth-First Search) in ngram speculative decoding.", default=10),
    _f("--speculative-ngram-match-type", "str", "The match type for cache tree.", default="BFS", choices=["BFS", "PROB"]),
    _f("--speculative-ngram-branch-length", "int", "The branch length for ngram speculative decoding.", default=18),
    _f("--speculative-ngram-capacity", "int", "The cache capacity for ngram speculative decoding.", default=10000000),
    _f("--expert-parallel-size --ep-size --ep", "int", "The expert parallelism size.", default=1),
    _f("--moe-a2a-backend", "str", "Choose the backend for MoE A2A.", default="none", choices=["none", "deepep", "mooncake", "ascend_fuseep"]),
    _f("--moe-runner-backend", "str", "Choose the runner backend for MoE.", default="auto", choices=MOE_RUNNER_BACKENDS),
    _f("--flashinfer-mxfp4-moe-precision", "str", "Choose the computation precision of flashinfer mxfp4 moe", default="default", choices=["default", "bf16"]),
    _f("--enable-flashinfer-allreduce-fusion", "switch", "Enable FlashInfer allreduce fusion with Residual RMSNorm."),
    _f("--deepep-mode", "str", "Select the mode when enable DeepEP MoE, could be `normal`, `low_latency` or `auto`.", default="auto", choices=["normal", "low_latency", "auto"]),
    _f("--ep-num-redundant-experts", "int", "Allocate this number of redundant experts in expert parallel.", default=0),
    _f("--ep-dispatch-algorithm", "str", "The algorithm to choose ranks for redundant experts in expert parallel."),
    _f("--init-expert-location", "str", "Initial location of EP experts.", default="trivial"),
    _f("--enable-eplb", "switch", "Enable EPLB algorithm"),
    _f("--eplb-algorithm", "str", "Chosen EPLB algorithm", default="auto"),
    _f("--eplb-rebalance-num-iterations", "int", "Number of iterations to automatically trigger a EPLB re-balance.", default=1000),
    _f("--eplb-rebalance-layers-per-chunk", "int", "Number of layers to rebalance per forward pass."),
    _f("--eplb-min-rebalancing-utilization-threshold", "float", "Minimum threshold for GPU average utilization to trigger EPLB rebalancing.", default=1.0),
    _f("--expert-distribution-recorder-mode", "str", "Mode of expert distribution recorder."),
    _f("--expert-distribution-recorder-buffer-size", "int", "Circular buffer size of expert distribution recorder."),
    _f("--enable-expert-distribution-metrics", "switch", "Enable logging metrics for expert balancedness"),
    _f("--deepep-config", "str", "Tuned DeepEP config suitable for your own cluster."),
    _f("--moe-dense-tp-size", "int", "TP size for MoE dense MLP layers."),
    _f("--elastic-ep-backend", "str", "Specify the collective communication backend for elastic EP.", choices=["none", "mooncake"]),
    _f("--mooncake-ib-device", "str", "The InfiniBand devices for Mooncake Backend transfer, accepts multiple comma-separated devices (e.g., --mooncake-ib-device mlx5_0,mlx5_1)."),
    _f("--max-mamba-cache-size", "int", "The maximum size of the mamba cache."),
    _f("--mamba-ssm-dtype", "str", "The data type of the SSM states in mamba cache.", default="float32", choices=["float32", "bfloat16"]),
    _f("--mamba-full-memory-ratio", "float", "The ratio of mamba state memory to full kv cache memory.", default=0.9),
    _f("--enable-hierarchical-cache", "switch", "Enable hierarchical cache"),
    _f("--hicache-ratio", "float", "The ratio of the size of host KV cache memory pool to the size of device pool.", default=2.0),
    _f("--hicache-size", "int", "The size of host KV cache memory pool in gigabytes, which will override the hicache_ratio if set.", default=0),
    _f("--hicache-write-policy", "str", "The write policy of hierarchical cache.", default="write_through", choices=["write_back", "write_through", "write_through_selective"]),
    _f("--hicache-io-backend", "str", "The IO backend for KV cache transfer between CPU and GPU", default="kernel", choices=["direct", "kernel", "kernel_ascend"]),
    _f("--hicache-mem-layout", "str", "The layout of host memory pool for hierarchical cache.", default="layer_first", choices=["layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"]),
    _f("--hicache-storage-backend", "str", "The storage backend for hierarchical KV cache.", choices=["file", "mooncake", "hf3fs", "nixl", "aibrix", "dynamic", "eic"]),
    _f("--hicache-storage-prefetch-policy", "str", "Control when prefetching from the storage backend should stop.", default="best_effort", choices=["best_effort", "wait_complete", "timeout"]),
    _f("--hicache-storage-backend-extra-config", "str", "A dictionary in JSON string format containing extra configuration for the storage backend."),
    _f("--enable-lmcache", "switch", "Using LMCache as an alternative hierarchical cache solution"),
    _f("--kt-weight-path", "str", "[ktransformers parameter] The path of the quantized expert weights for amx kernel."),
    _f("--kt-method", "str", "[ktransformers parameter] Quantization formats for CPU execution.", default="AMXINT4"),
    _f("--kt-cpuinfer", "int", "[ktransformers parameter] The number of CPUInfer threads."),
    _f("--kt-threadpool-count", "int", "[ktransformers parameter] One-to-one with the number of NUMA nodes (one thread pool per NUMA).", default=2),
    _f("--kt-num-gpu-experts", "int", "[ktransformers parameter] The number of GPU experts."),
    _f("--kt-max-deferred-experts-per-token", "int", "[ktransformers parameter] Maximum number of experts deferred to CPU per token."),
    _f("--dllm-algorithm", "str", "The diffusion LLM algorithm."),
    _f("--dllm-block-size", "int", "The number of tokens processed in each iteration of the block diffusion LLM."),
    _f("--enable-double-sparsity", "switch", "Enable double sparsity attention"),
    _f("--ds-channel-config-path", "str", "The path of the double sparsity channel config"),
    _f("--ds-heavy-channel-num", "int", "The number of heavy channels in double sparsity attention", default=32),
    _f("--ds-heavy-token-num", "int", "The number of heavy tokens in double sparsity attention", default=256),
    _f("--ds-heavy-channel-type", "str", "The type of heavy channels in double sparsity attention", default="qk"),
    _f("--ds-sparse-decode-threshold", "int", "The minimum decode sequence length required before the double-sparsity backend switches from the dense fallback to the sparse decode kernel.", default=4096),
    _f("--cpu-offload-gb", "int", "How many GBs of RAM to reserve for CPU offloading.", default=0),
    _f("--offload-group-size", "int", "Number of layers per group in offloading.", default=-1),
    _f("--offload-num-in-group", "int", "Number of layers to be offloaded within a group.", default=1),
    _f("--offload-prefetch-step", "int", "Steps to prefetch in offloading.", default=1),
    _f("--offload-mode", "str", "Mode of offloading.", default="cpu"),
    _f("--multi-item-scoring-delimiter", "int", "Delimiter token ID for multi-item scoring."),
    _f("--disable-radix-cache", "switch", "Disable RadixAttention for prefix caching."),
    _f("--cuda-graph-max-bs", "int", "Set the maximum batch size for cuda graph."),
    _f("--cuda-graph-bs", "int", "Set the list of batch sizes for cuda graph.", nargs="+"),
    _f("--disable-cuda-graph", "switch", "Disable cuda graph."),
    _f("--disable-cuda-graph-padding", "switch", "Disable cuda graph when padding is needed."),
    _f("--enable-profile-cuda-graph", "switch", "Enable profiling of cuda graph capture."),
    _f("--enable-cudagraph-gc", "switch", "Enable garbage collection during CUDA graph capture."),
    _f("--enable-layerwise-nvtx-marker", "switch", "Enable layerwise NVTX profiling annotations for the model."),
    _f("--enable-nccl-nvls", "switch", "Enable NCCL NVLS for prefill heavy requests when available."),
    _f("--enable-symm-mem", "switch", "Enable NCCL symmetric memory for fast collectives."),
    _f("--disable-flashinfer-cutlass-moe-fp4-allgather", "switch", "Disables quantize before all-gather for flashinfer cutlass moe."),
    _f("--enable-tokenizer-batch-encode", "switch", "Enable batch tokenization for improved performance when processing multiple text inputs."),
    _f("--disable-tokenizer-batch-decode", "switch", "Disable batch decoding when decoding multiple completions."),
    _f("--disable-outlines-disk-cache", "switch", "Disable disk cache of outlines to avoid possible crashes related to file system or high concurrency."),
    _f("--disable-custom-all-reduce", "switch", "Disable the custom all-reduce kernel and fall back to NCCL."),
    _f("--enable-mscclpp", "switch", "Enable using mscclpp for small messages for all-reduce kernel and fall back to NCCL."),
    _f("--enable-torch-symm-mem", "switch", "Enable using torch symm mem for all-reduce kernel and fall back to NCCL."),
    _f("--disable-overlap-schedule", "switch", "Disable the overlap scheduler, which overlaps the CPU scheduler with GPU model worker."),
    _f("--enable-mixed-chunk", "switch", "Enabling mixing prefill and decode in a batch when using chunked prefill."),
    _f("--enable-dp-attention", "switch", "Enabling data parallelism for attention and tensor parallelism for FFN."),
    _f("--enable-dp-lm-head", "switch", "Enable vocabulary parallel across the attention TP group to avoid all-gather across DP groups, optimizing performance under DP attention."),
    _f("--enable-two-batch-overlap", "switch", "Enabling two micro batches to overlap."),
    _f("--enable-single-batch-overlap", "switch", "Let computation and communication overlap within one micro batch."),
    _f("--tbo-token-distribution-threshold", "float", "The threshold of token distribution between two batches in micro-batch-overlap, determines whether to two-batch-overlap or two-chunk-overlap.", default=0.48),
    _f("--enable-torch-compile", "switch", "Optimize the model with torch.compile."),
    _f("--enable-torch-compile-debug-mode", "switch", "Enable debug mode for torch compile"),
    _f("--enable-piecewise-cuda-graph", "switch", "Optimize the model with piecewise cuda graph for extend/prefill only."),
    _f("--piecewise-cuda-graph-tokens", "json_list", "Set the list of tokens when using piecewise cuda graph."),
    _f("--piecewise-cuda-graph-compiler", "str", "Set the compiler for piecewise cuda graph.", default="eager", choices=["eager", "inductor"]),
    _f("--torch-compile-max-bs", "int", "Set the maximum batch size when using torch compile.", default=32),
    _f("--piecewise-cuda-graph-max-tokens", "int", "Set the maximum tokens when using piecewise cuda graph.", default=4096),
    _f("--torchao-config", "str", "Optimize the model with torchao.", default=""),
    _f("--enable-nan-detection", "switch", "Enable the NaN detection for debugging purposes."),
    _f("--enable-p2p-check", "switch", "Enable P2P check for GPU access, otherwise the p2p access is allowed by default."),
    _f("--triton-attention-reduce-in-fp32", "switch", "Cast the intermediate attention results to fp32 to avoid possible crashes related to fp16.This only affects Triton attention kernels."),
    _f("--triton-attention-num-kv-splits", "int", "The number of KV splits in flash decoding Triton kernel.", default=8),
    _f("--triton-attention-split-tile-size", "int", "The size of split KV tile in flash decoding Triton kernel."),
    _f("--num-continuous-decode-steps", "int", "Run multiple continuous decoding steps to reduce scheduling overhead.", default=1),
    _f("--delete-ckpt-after-loading", "switch", "Delete the model checkpoint after loading the model."),
    _f("--enable-memory-saver", "switch", "Allow saving memory using release_memory_occupation and resume_memory_occupation"),
    _f("--enable-weights-cpu-backup", "switch", "Save model weights (both main model and draft model, if any) to CPU memory during release_weights_occupation and resume_weights_occupation"),
    _f("--enable-draft-weights-cpu-backup", "switch", "Save draft model weights to CPU memory during release_weights_occupation and resume_weights_occupation"),
    _f("--allow-auto-truncate", "switch", "Allow automatically truncating requests that exceed the maximum input length instead of returning an error."),
    _f("--enable-custom-logit-processor", "switch", "Enable users to pass custom logit processors to the server (disabled by default for security)"),
    _f("--flashinfer-mla-disable-ragged", "switch", "Not using ragged prefill wrapper when running flashinfer mla"),
    _f("--disable-shared-experts-fusion", "switch", "Disable shared experts fusion optimization for deepseek v3/r1."),
    _f("--disable-chunked-prefix-cache", "switch", "Disable chunked prefix cache feature for deepseek, which should save overhead for short sequences."),
    _f("--disable-fast-image-processor", "switch", "Adopt base image processor instead of fast image processor."),
    _f("--keep-mm-feature-on-device", "switch", "Keep multimodal feature tensors on device after processing to save D2H copy."),
    _f("--enable-return-hidden-states", "switch", "Enable returning hidden states with responses."),
    _f("--scheduler-recv-interval", "int", "The interval to poll requests in scheduler.", default=1),
    _f("--numa-node", "int", "Sets the numa node for the subprocesses.", nargs="+"),
    _f("--enable-deterministic-inference", "switch", "Enable deterministic inference mode with batch invariant ops."),
    _f("--rl-on-policy-target", "str", "The training system that SGLang needs to match for true on-policy.", choices=["fsdp"]),
    _f("--enable-attn-tp-input-scattered", "switch", "Allow input of attention to be scattered when only using tensor parallelism, to reduce the computational load of operations such as qkv latent."),
    _f("--enable-nsa-prefill-context-parallel", "switch", "Enable context parallelism used in the long sequence prefill phase of DeepSeek v3.2."),
    _f("--enable-dynamic-batch-tokenizer", "switch", "Enable async dynamic batch tokenizer for improved performance when multiple requests arrive concurrently."),
    _f("--dynamic-batch-tokenizer-batch-size", "int", "[Only used if --enable-dynamic-batch-tokenizer is set] Maximum batch size for dynamic batch tokenizer.", default=32),
    _f("--dynamic-batch-tokenizer-batch-timeout", "float", "[Only used if --enable-dynamic-batch-tokenizer is set] Timeout in seconds for batching tokenization requests.", default=0.002),
    _f("--debug-tensor-dump-output-folder", "str", "The output folder for dumping tensors."),
    _f("--debug-tensor-dump-layers", "int", "The layer ids to dump.", nargs="+"),
    _f("--debug-tensor-dump-input-file", "str", "The input filename for dumping tensors"),
    _f("--debug-tensor-dump-inject", "str", "Inject the outputs from jax as the input of every layer.", default=False),
    _f("--disaggregation-mode", "str", "Only used for PD disaggregation.", default="null", choices=["null", "prefill", "decode"]),
    _f("--disaggregation-transfer-backend", "str", "The backend for disaggregation transfer.", default="mooncake", choices=["mooncake", "nixl", "ascend", "fake"]),
    _f("--disaggregation-bootstrap-port", "int", "Bootstrap server port on the prefill server.", default=8998),
    _f("--disaggregation-decode-tp", "int", "Decode tp size."),
    _f("--disaggregation-decode-dp", "int", "Decode dp size."),
    _f("--disaggregation-prefill-pp", "int", "Prefill pp size.", default=1),
    _f("--disaggregation-ib-device", "str", "The InfiniBand devices for disaggregation transfer, accepts single device (e.g., --disaggregation-ib-device mlx5_0) or multiple comma-separated devices (e.g., --disaggregation-ib-device mlx5_0,mlx5_1)."),
    _f("--disaggregation-decode-enable-offload-kvcache", "switch", "Enable async KV cache offloading on decode server (PD mode)."),
    _f("--num-reserved-decode-tokens", "int", "Number of decode tokens that will have memory reserved when adding new request to the running batch.", default=512),
    _f("--disaggregation-decode-polling-interval", "int", "The interval to poll requests in decode server.", default=1),
    _f("--custom-weight-loader", "str", "The custom dataloader which used to update the model.", nargs="*"),
    _f("--weight-loader-disable-mmap", "switch", "Disable mmap while loading weight using safetensors."),
    _f("--remote-instance-weight-loader-seed-instance-ip", "str", "The ip of the seed instance for loading weights from remote instance."),
    _f("--remote-instance-weight-loader-seed-instance-service-port", "int", "The service port of the seed instance for loading weights from remote instance."),
    _f("--remote-instance-weight-loader-send-weights-group-ports", "json_list", "The communication group ports for loading weights from remote instance."),
    _f("--enable-pdmux", "switch", "Enable PD-Multiplexing, PD running on greenctx stream."),
    _f("--pdmux-config-path", "str", "The path of the PD-Multiplexing config file."),
    _f("--sm-group-num", "int", "Number of sm partition groups.", default=8),
    _f("--config", "str", "Read CLI options from a config file."),
    _f("--mm-max-concurrent-calls", "int", "The max concurrent calls for async mm data processing.", default=32),
    _f("--mm-per-request-timeout", "int", "The timeout for each multi-modal request in seconds.", default=10.0),
    _f("--enable-broadcast-mm-inputs-process", "switch", "Enable broadcast mm-inputs process in scheduler."),
    _f("--decrypted-config-file", "str", "The path of the decrypted config file."),
    _f("--decrypted-draft-config-file", "str", "The path of the decrypted draft config file."),
    _f("--mm-enable-dp-encoder", "switch", "Enabling data parallelism for mm encoder."),
    _f("--forward-hooks", "json_list", "JSON-formatted forward hook specifications to attach to the model."),
)
# fmt: on

SPECS: tuple[Flag, ...] = _TABLE
# Every option string (aliases included) → its Flag.
FLAGS: dict[str, Flag] = {name: spec for spec in _TABLE for name in spec.names}


def _json_list(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}. Please provide a valid JSON list.") from None


def _nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


_TYPES = {
    "str": str,
    "int": int,
    "float": float,
    "json": json.loads,
    "json_list": _json_list,
    "nullable_str": _nullable_str,
    "lora_paths": str,
}


def _add_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for spec in SPECS:
        if spec.type == "switch":
            parser.add_argument(*spec.names, action="store_true", help=spec.help)
            continue
        kwargs: dict[str, Any] = {"type": _TYPES[spec.type], "default": spec.default, "help": spec.help}
        if spec.choices is not None:
            kwargs["choices"] = spec.choices
        if spec.type == "lora_paths":
            kwargs["nargs"] = "*"
        elif spec.nargs is not None:
            kwargs["nargs"] = spec.nargs
        if spec.const is not None:
            kwargs["const"] = spec.const
        if spec.required:
            kwargs["required"] = True
        parser.add_argument(*spec.names, **kwargs)
    return parser


def build_parser(prog: str = "sglang.launch_server", allow_abbrev: bool = False) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with SGLang 0.5.6's launch flags; errors exit with status 2 as SGLang's do."""
    return _add_flags(argparse.ArgumentParser(prog=prog, allow_abbrev=allow_abbrev))


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(
            f"SGLang {SGLANG_VERSION}'s launch_server would refuse these arguments ({message}); use full flag "
            "names from `python -m sglang.launch_server --help`."
        )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse launch arguments strictly (full names only); raises ``UsageError`` where SGLang would refuse."""
    parser = _add_flags(_RaisingParser(prog="sglang.launch_server", allow_abbrev=False))
    return parser.parse_args(list(argv))


def server_args(namespace: argparse.Namespace) -> dict[str, Any]:
    """The parsed values keyed by ServerArgs field (``tp_size``, not ``tensor_parallel_size``), before
    SGLang's own resolution (``__post_init__`` fills model-dependent defaults on the host)."""
    values = vars(namespace)
    return {spec.field: values[spec.dest] for spec in SPECS if spec.field is not None}


# An option line of argparse help: two-space indent, then the invocation; help text follows after 2+ spaces.
_OPTION_LINE = re.compile(r"^ {1,8}(-\S.*?)(?: {2,}|$)")
_OPTION = re.compile(r"(?:^|, )(--?[A-Za-z0-9][\w-]*)")


def parse_help_flags(help_text: str) -> set[str]:
    """The option strings a real ``launch_server --help`` lists (``--tp-size``, aliases too, ``-h``).

    Reads only the option lines (indented invocations), never flags mentioned inside help prose.
    """
    flags: set[str] = set()
    for line in help_text.splitlines():
        match = _OPTION_LINE.match(line)
        if match:
            flags.update(_OPTION.findall(match.group(1)))
    return flags


def unknown_flags(argv: Sequence[str], known: set[str]) -> list[str]:
    """The ``--flags`` of ``argv`` (``--name=value`` included) missing from ``known``, in order."""
    names = [arg.split("=", 1)[0] for arg in argv if arg.startswith("--")]
    return [name for name in names if name not in known]
