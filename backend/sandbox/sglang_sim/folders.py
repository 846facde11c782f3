"""SIMULATED SGLang's reading of model folders: config.json, the weight files, and the EAGLE-3 drafter's
parameter shapes built to the target's hidden size (what a drafter that does not fit is checked against).

The errors are the lines transformers, huggingface_hub and SGLang's loaders raise. Stdlib only (safetensors
headers through the host's own reader), Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from backend.agent.host.shared.safetensors_header import read_header

EAGLE3_ARCH = "LlamaForCausalLMEagle3"


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


def read_model_config(path: str) -> Tuple[Optional[Dict[str, Any]], str]:
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


def text_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """The language model's config (multimodal wrappers such as Kimi-K2.5 nest it under text_config)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) and "hidden_size" in text else config


def weight_files(path: str) -> List[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".safetensors"))


def bytes_of(files: List[str]) -> int:
    return sum(os.path.getsize(f) for f in files)


def expected_eagle3_shapes(target: Dict[str, Any], drafter: Dict[str, Any]) -> Dict[str, List[int]]:
    """The EAGLE-3 drafter's parameter shapes when built to fit ``target`` (names without ``model.``)."""
    tcfg, dcfg = text_config(target), drafter
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


def torch_size(shape: List[int]) -> str:
    return "torch.Size([%s])" % ", ".join(str(d) for d in shape)
