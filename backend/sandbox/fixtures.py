"""Drafter checkpoints without the weights: real headers over sparse holes, plus a corpus of corrupt files.

``write_sparse_safetensors`` writes a header exactly as the safetensors library would and leaves the data as a
hole, so a 2.22 GiB Kimi-K2 drafter (or a 1 TiB checkpoint) costs a few kilobytes of disk. The shapes and
configs follow FIELD-NOTES §2. Stdlib only (Python 3.8+) so the sandbox can use it on any interpreter.
"""

from __future__ import annotations

import copy
import json
import os
import struct
from typing import Any

from backend.agent.host.shared.safetensors_header import DTYPES

_ORDER = {dtype: i for i, dtype in enumerate(DTYPES)}


def header_bytes(tensors: dict[str, Any], metadata: dict[str, Any] | None = None) -> tuple[bytes, int]:
    """(8-byte length + header, data length) for ``{name: (dtype, shape)}``, laid out as the library does.

    The library orders tensors by dtype (its enum order, descending) then by name, writes compact JSON with
    ``__metadata__`` first and pads the header with spaces to a multiple of 8.
    """
    order = sorted(tensors, key=lambda name: (-_ORDER[tensors[name][0]], name))
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        dtype, shape = tensors[name]
        numel = 1
        for dim in shape:
            numel *= dim
        size = numel * DTYPES[dtype] // 8
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def write_sparse_safetensors(path: str, tensors: dict[str, Any], metadata: dict[str, Any] | None = None) -> str:
    """Write a valid safetensors file whose data is a hole (zeros when read); returns ``path``."""
    head, data_len = header_bytes(tensors, metadata)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + data_len)
    return path


# --- the real drafters and targets (FIELD-NOTES §2) ---


def eagle3_tensors(
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate: int,
    draft_vocab: int,
    target_vocab: int,
    aux_layers: int = 3,
) -> dict[str, Any]:
    """``{name: (dtype, shape)}`` of a one-layer EAGLE-3 drafter as SpecForge saves it (no embed_tokens)."""
    attn = "midlayer.self_attn."
    mlp = "midlayer.mlp."
    return {
        "fc.weight": ("BF16", [hidden, aux_layers * hidden]),
        attn + "q_proj.weight": ("BF16", [heads * head_dim, 2 * hidden]),
        attn + "k_proj.weight": ("BF16", [kv_heads * head_dim, 2 * hidden]),
        attn + "v_proj.weight": ("BF16", [kv_heads * head_dim, 2 * hidden]),
        attn + "o_proj.weight": ("BF16", [hidden, heads * head_dim]),
        mlp + "gate_proj.weight": ("BF16", [intermediate, hidden]),
        mlp + "up_proj.weight": ("BF16", [intermediate, hidden]),
        mlp + "down_proj.weight": ("BF16", [hidden, intermediate]),
        "midlayer.input_layernorm.weight": ("BF16", [hidden]),
        "midlayer.post_attention_layernorm.weight": ("BF16", [hidden]),
        "midlayer.hidden_norm.weight": ("BF16", [hidden]),
        "norm.weight": ("BF16", [hidden]),
        "lm_head.weight": ("BF16", [draft_vocab, hidden]),
        "d2t": ("I64", [draft_vocab]),
        "t2d": ("BOOL", [target_vocab]),
    }


# 15 tensors, 1,191,144,704 parameters, 2,382,317,568 bytes of data (2.2187 GiB).
KIMI_K2_DRAFTER_TENSORS = eagle3_tensors(7168, 64, 64, 128, 18432, 32000, 163840)
KIMI_K2_DRAFTER_PARAMS = 1_191_144_704
KIMI_K2_DRAFTER_BYTES = 2_382_317_568

KIMI_K2_DRAFTER_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 7168,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "head_dim": 128,
    "intermediate_size": 18432,
    "num_hidden_layers": 1,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 131072,
    "rope_theta": 50000.0,
    "vocab_size": 163840,
    "draft_vocab_size": 32000,
    "bos_token_id": 163584,
    "eos_token_id": 163585,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True},
}

KIMI_K2_TARGET_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 1,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 163840,
    "max_position_embeddings": 131072,
    "rope_theta": 50000.0,
    "rms_norm_eps": 1e-06,
    "bos_token_id": 163584,
    "eos_token_id": 163585,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

# An EAGLE-3 drafter for Llama-3-8B: self-consistent, but every width is wrong for a Kimi-K2 target.
LLAMA3_8B_DRAFTER_TENSORS = eagle3_tensors(4096, 32, 8, 128, 14336, 32000, 128256)
LLAMA3_8B_DRAFTER_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 14336,
    "num_hidden_layers": 1,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-05,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 29], "use_aux_hidden_state": True},
}

# The team's drafter: the K2 shapes, trained with SpecForge on Kimi-K2.5, so its config says what that run did
# and AQ-MedAI's K2 drafter does not: K2.5's context (262144, as AQ-MedAI's own K2.5 drafter publishes, not
# K2-Instruct's 131072) and SpecForge's default aux layers for Kimi, [1, 29, 57] (AQ-MedAI's: [2, 30, 58];
# both noted in backend/sandbox/catalog/AQ-MedAI__*.json). Compare has two real differences to show.
OURS_DRAFTER_CONFIG = {
    **copy.deepcopy(KIMI_K2_DRAFTER_CONFIG),
    "max_position_embeddings": 262144,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
}


# kind → (tensors, config, safetensors metadata). "ours" has the K2 shapes and its own metadata.
def dflash_tensors(hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, intermediate: int,
                   target_layers: int) -> dict[str, Any]:  # fmt: skip
    """``{name: (dtype, shape)}`` of a DFlash block drafter (z-lab/dflash's DFlashDraftModel): fc fusing the
    target layers it reads, its decoder layers, no embed_tokens or lm_head (the target's are used)."""
    out = {"fc.weight": ("BF16", [hidden, target_layers * hidden]), "norm.weight": ("BF16", [hidden])}
    out["hidden_norm.weight"] = ("BF16", [hidden])
    for i in range(layers):
        p = f"layers.{i}."
        out[p + "self_attn.q_proj.weight"] = ("BF16", [heads * head_dim, hidden])
        out[p + "self_attn.k_proj.weight"] = ("BF16", [kv_heads * head_dim, hidden])
        out[p + "self_attn.v_proj.weight"] = ("BF16", [kv_heads * head_dim, hidden])
        out[p + "self_attn.o_proj.weight"] = ("BF16", [hidden, heads * head_dim])
        out[p + "mlp.gate_proj.weight"] = ("BF16", [intermediate, hidden])
        out[p + "mlp.up_proj.weight"] = ("BF16", [intermediate, hidden])
        out[p + "mlp.down_proj.weight"] = ("BF16", [hidden, intermediate])
        out[p + "input_layernorm.weight"] = ("BF16", [hidden])
        out[p + "post_attention_layernorm.weight"] = ("BF16", [hidden])
    return out


# A DFlash drafter for Kimi-K2.5 shaped as z-lab/Kimi-K2.5-DFlash's config says (the sandbox Hub's catalog entry:
# 6 layers, 64 heads of 128, 8 KV heads, intermediate 18432), with the dflash_config SGLang reads: block 8 (its
# card), the target layers it fuses and a mask token inside Kimi's vocabulary (ours: the catalog has none).
DFLASH_K25_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 7168,
    "num_hidden_layers": 6,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 18432,
    "vocab_size": 163840,
    "max_position_embeddings": 262144,
    "num_target_layers": 61,
    "dflash_config": {"block_size": 8, "target_layer_ids": [1, 15, 29, 43, 57], "mask_token_id": 163838},
    "torch_dtype": "bfloat16",
}
DFLASH_K25_TENSORS = dflash_tensors(7168, 6, 64, 8, 128, 18432, 5)

# A DSpark drafter for Kimi-K2.5 as SGLang 0.5.23's parser reads one (dspark_config.py: the fields nested under
# dflash_config, the Markov head's under dspark_config): gamma 5, the window of the one real DSPARK decode line found
# (SGLang issue #36081). No DSpark config.json was found (research notes of issue 36, §6.2): its shape follows the
# parser, on DFlash's layers (the Markov head's weights are not in the sparse file).
DSPARK_K25_CONFIG = {
    **{k: v for k, v in DFLASH_K25_CONFIG.items() if k != "dflash_config"},
    "architectures": ["DSparkDraftModel"],
    "dflash_config": {"block_size": 5, "target_layer_ids": [1, 15, 29, 43, 57], "mask_token_id": 163838},
    "dspark_config": {"markov_rank": 4, "markov_head_type": "gated"},
}

DRAFTERS = {
    "aq_medai_k2": (KIMI_K2_DRAFTER_TENSORS, KIMI_K2_DRAFTER_CONFIG, {"format": "pt"}),
    "ours": (KIMI_K2_DRAFTER_TENSORS, OURS_DRAFTER_CONFIG, {"format": "pt", "specforge_samples": "37000"}),
    "llama3_8b": (LLAMA3_8B_DRAFTER_TENSORS, LLAMA3_8B_DRAFTER_CONFIG, {"format": "pt"}),
    "dflash_k25": (DFLASH_K25_TENSORS, DFLASH_K25_CONFIG, {"format": "pt"}),
    "dspark_k25": (DFLASH_K25_TENSORS, DSPARK_K25_CONFIG, {"format": "pt"}),
}


def write_drafter(
    directory: str,
    kind: str,
    tensors: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    **config_overrides: object,
) -> str:
    """Write ``config.json`` + a sparse ``model.safetensors`` for drafter ``kind`` (see ``DRAFTERS``).

    ``tensors`` updates shapes (``{name: (dtype, shape)}``, a None value drops the tensor), ``metadata``
    replaces the safetensors metadata and keyword arguments replace top-level config keys (None drops one).
    Returns ``directory``.
    """
    base_tensors, base_config, base_metadata = DRAFTERS[kind]
    layout = dict(base_tensors)
    for name, spec in (tensors or {}).items():
        if spec is None:
            layout.pop(name, None)
        else:
            layout[name] = spec
    config = copy.deepcopy(base_config)
    for key, value in config_overrides.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_sparse_safetensors(
        os.path.join(directory, "model.safetensors"), layout, base_metadata if metadata is None else metadata
    )
    return directory


# The sandbox target's chat template: Kimi-K2's turn markers, written here for the sandbox (not Moonshot's file,
# which also declares tools and a default system prompt its own way).
SANDBOX_CHAT_TEMPLATE = (
    "{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif message['role'] == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>"
    "{%- else -%}<|im_user|>user<|im_middle|>{%- endif -%}"
    "{{ message['content'] }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)
SANDBOX_TOKENIZER_CONFIG = {
    "_source": "SIMULATED: written for the specdeck sandbox in Kimi-K2's special tokens; not Moonshot's file",
    "bos_token": "[BOS]",
    "eos_token": "[EOS]",
    "chat_template": SANDBOX_CHAT_TEMPLATE,
}


def write_target_config(directory: str) -> str:
    """Write the Kimi-K2 target's ``config.json`` and a ``tokenizer_config.json`` with a chat template (no
    weights); returns ``directory``."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(KIMI_K2_TARGET_CONFIG, f, indent=2)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(SANDBOX_TOKENIZER_CONFIG, f, indent=2)
    return directory


# --- corrupt files: each breaks one rule of safetensors_header ---


def _file(header: object, data_len: int, declared: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(text) if declared is None else declared
    return struct.pack("<Q", n) + text + b"\0" * data_len


def _t(dtype: str, shape: list[float], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


CORRUPT_FILES = {
    # name: (bytes, the rule CheckpointError names)
    "too_small.safetensors": (b"\x10\x00\x00", "too_small"),
    "header_over_100mb.safetensors": (struct.pack("<Q", 100_000_001) + b"{}", "header_too_large"),
    "header_longer_than_file.safetensors": (
        _file({"a": _t("F32", [1], 0, 4)}, 4, declared=4096),
        "header_length",
    ),
    "truncated.safetensors": (_file({"a": _t("F32", [4, 4], 0, 64)}, 40), "file_size"),
    "trailing_bytes.safetensors": (_file({"a": _t("F32", [2], 0, 8)}, 12), "file_size"),
    "not_utf8.safetensors": (_file(b'{"a\xff": 1}', 0), "utf8"),
    "not_json.safetensors": (_file(b"this is not json", 0), "json"),
    "nan_in_json.safetensors": (
        _file(b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', 4),
        "json",
    ),
    "not_object.safetensors": (_file([1, 2, 3], 0), "not_object"),
    "metadata_not_strings.safetensors": (_file({"__metadata__": {"step": 4}}, 0), "metadata"),
    "missing_offsets.safetensors": (_file({"a": {"dtype": "F32", "shape": [1]}}, 4), "entry"),
    "unknown_dtype.safetensors": (_file({"a": _t("F128", [1], 0, 16)}, 16), "dtype"),
    "negative_shape.safetensors": (_file({"a": _t("F32", [-1, 4], 0, 16)}, 16), "shape"),
    "float_shape.safetensors": (_file({"a": _t("F32", [2.0], 0, 8)}, 8), "shape"),
    "offsets_not_pair.safetensors": (
        _file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, 4),
        "offsets",
    ),
    "overlapping_offsets.safetensors": (
        _file({"a": _t("F32", [4], 0, 16), "b": _t("F32", [4], 8, 24)}, 24),
        "contiguous",
    ),
    "gapped_offsets.safetensors": (
        _file({"a": _t("F32", [4], 0, 16), "b": _t("F32", [4], 20, 36)}, 36),
        "contiguous",
    ),
    "not_from_zero.safetensors": (_file({"a": _t("F32", [4], 4, 20)}, 20), "contiguous"),
    "span_mismatch.safetensors": (_file({"a": _t("F32", [2, 2], 0, 12)}, 12), "span"),
    "half_byte.safetensors": (_file({"a": _t("F4", [3], 0, 2)}, 2), "misaligned"),
}


def write_corrupt_corpus(directory: str) -> dict[str, Any]:
    """Write every file of ``CORRUPT_FILES`` into ``directory``; returns ``{path: rule}``."""
    os.makedirs(directory, exist_ok=True)
    out = {}
    for name, (data, rule) in CORRUPT_FILES.items():
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        out[path] = rule
    return out
