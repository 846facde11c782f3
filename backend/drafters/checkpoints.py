"""What a drafter checkpoint is and whether it serves a target: the draft architectures SGLang registers and
the algorithm each needs, the drafter's kind and family from its config and tensors, the facts a config states,
and the verdict against a target (ok / warn / fail, each check with one sentence), from the dict
``inspect_checkpoint`` returns (the host agent's ``checkpoint.inspect`` gives the same), so the CLI and the TUI
call these functions whatever the source. No weights are read: the verdict's checks are the ones FIELD-NOTES §2
lists as catching real failures.
"""

from __future__ import annotations

from typing import Any

EAGLE3_ARCH = "LlamaForCausalLMEagle3"
AUX_IDS = "eagle_config.eagle_aux_hidden_state_layer_ids"


def _int(cfg: dict[str, Any] | None, key: str) -> int | None:
    value = (cfg or {}).get(key)
    return value if type(value) is int else None


def _shape(tensors: dict[str, Any], name: str, dims: int) -> list[int] | None:
    info = tensors.get(name)
    return info["shape"] if info and len(info["shape"]) == dims else None


def language_config(cfg: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part of a target config that describes the language model (multimodal ones nest it)."""
    text = cfg.get("text_config") if cfg else None
    if cfg and "hidden_size" not in cfg and isinstance(text, dict):
        return text
    return cfg


# The draft model classes SGLang 0.5.23 registers (its srt/models EntryClass lists, read from the wheel) and the
# --speculative-algorithm each needs. Names with "eagle" in them beyond these are judged by their tensors.
DRAFT_ARCHITECTURES = {
    "LlamaForCausalLMEagle3": "EAGLE3",
    "Eagle3DeepseekV2ForCausalLM": "EAGLE3",  # MLA attention (kimi_k25_eagle3.py): one layer, an MLA target
    "LlamaForCausalLMEagle": "EAGLE",
    "Qwen2ForCausalLMEagle": "EAGLE",
    "MistralForCausalLMEagle": "EAGLE",
    "MistralLarge3ForCausalLMEagle": "EAGLE",
    **dict.fromkeys(
        (
            "DFlashDraftModel",
            "DFlash2DraftModel",
            "DFlash2BeamDraftModel",
            "MiniMaxDFlash2DraftModel",
            "DFlashLagunaForCausalLM",
            "MuseGlimmerAssistantModel",
        ),
        "DFLASH",
    ),
    **dict.fromkeys(
        (
            "DSparkDraftModel",
            "Qwen3DSparkModel",
            "LingDSparkModel",
            "Lfm2DSparkDraftModel",
            "DSparkMiniMaxDraftModel",
            "DeepseekV4ForCausalLMDSpark",
        ),
        "DSPARK",
    ),
}
MLA_EAGLE3_ARCH = "Eagle3DeepseekV2ForCausalLM"
BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")  # block drafters: the target's embedding and lm_head, no aux fc of 3


def architectures(cfg: dict[str, Any] | None) -> list[str]:
    """The config's ``architectures`` names (strings only)."""
    archs = (cfg or {}).get("architectures") or []
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _algorithm(cfg: dict[str, Any] | None) -> str | None:
    names = architectures(cfg)
    for name in names:
        if name in DRAFT_ARCHITECTURES:
            return DRAFT_ARCHITECTURES[name]
    if any("eagle3" in a.lower() for a in names):
        return "EAGLE3"
    if any("eagle" in a.lower() for a in names):
        return "EAGLE"
    return None


# vLLM's speculators format nests the drafter's model config; its own keys (draft vocab, aux layers) stay on top.
NESTED_KEYS = ("transformer_layer_config",)


def drafter_config(cfg: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """The drafter's config as SGLang reads it, and the key it was read from when the file nests it (vLLM's
    speculators format: ``transformer_layer_config`` under top-level ``draft_vocab_size``, aux layer ids…)."""
    if not isinstance(cfg, dict):
        return cfg, None
    for key in NESTED_KEYS:
        inner = cfg.get(key)
        if isinstance(inner, dict) and "hidden_size" not in cfg:
            merged = {**inner, **{k: v for k, v in cfg.items() if k != key}}
            aux = cfg.get("eagle_aux_hidden_state_layer_ids", cfg.get("aux_hidden_state_layer_ids"))
            if aux is not None and "eagle_config" not in cfg:
                merged["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux}
            return merged, key
    return cfg, None


def _decoder_prefix(tensors: dict[str, Any]) -> str | None:
    """Where the drafter's one decoder layer lives: ``midlayer.`` (EAGLE-3 as SpecForge saves it) or
    ``layers.0.`` (EAGLE-1/2, and the speculators format)."""
    for prefix in ("midlayer.", "layers.0.", "model.layers.0."):
        if f"{prefix}self_attn.q_proj.weight" in tensors or f"{prefix}self_attn.q_a_proj.weight" in tensors:
            return prefix
    return None


def _layout(cfg: dict[str, Any] | None, tensors: dict[str, Any]) -> str | None:
    """What the tensors are, whatever the config says: ``EAGLE`` for an EAGLE-1/2 layout (fc [h, 2h]: the
    token's embedding and the target's last hidden state; no lm_head, the target's is used; the decoder layer
    under ``layers.0.``), ``EAGLE3`` for an EAGLE-3 one (fc fusing several aux layers, or ``midlayer.``, or its
    own lm_head), None when there is no fc to tell."""
    fc, hidden = _shape(tensors, "fc.weight", 2), _int(cfg, "hidden_size")
    if fc is None:
        return "EAGLE3" if _decoder_prefix(tensors) == "midlayer." else None
    eagle1 = fc[1] == 2 * fc[0] and (hidden is None or fc[0] == hidden)
    if eagle1 and "lm_head.weight" not in tensors and _decoder_prefix(tensors) in ("layers.0.", "model.layers.0."):
        return "EAGLE"
    return "EAGLE3" if not eagle1 or _decoder_prefix(tensors) == "midlayer." else None


def drafter_kind(drafter: dict[str, Any]) -> str | None:
    """``EAGLE3``, ``EAGLE`` (EAGLE-1/2), ``DFLASH`` or ``DSPARK``: what ``--speculative-algorithm`` it needs, from
    its architectures or, where they name no EAGLE (yuhuili's EAGLE-1/2 drafters say ``LlamaForCausalLM``), from
    its layout (``_layout``). Where architectures and tensors disagree the tensors decide (SGLang builds the class
    the config names and then fails to load them; ``verdict`` says so). None when neither says (an MTP drafter's
    algorithm is not judged here)."""
    cfg, _ = drafter_config(drafter.get("config"))
    family = drafter_family(cfg)
    if family is not None:
        return {"DFlash": "DFLASH", "DSpark": "DSPARK"}.get(family)
    named, layout = _algorithm(cfg), _layout(cfg, drafter.get("tensors") or {})
    if named in BLOCK_ALGORITHMS:
        return named  # a block drafter's fc fuses several target layers too: its layout alone reads as EAGLE-3
    return layout or named if named else ("EAGLE" if layout == "EAGLE" else None)


def drafter_family(cfg: dict[str, Any] | None) -> str | None:
    """``DFlash``, ``DSpark`` or ``MTP`` where the config says the drafter is one (its own config block or class:
    SpecForge's ``dflash_config`` / ``DFlashDraftModel``; DSpark's ``dspark_config``, the ``dspark_*`` keys of a
    draft bundled in its target, or a ``…DSpark…`` class; ``mtp_config`` / ``Qwen3_5MTPDraftModel``): such a
    drafter is not built like EAGLE's and is not judged by EAGLE's rules. None for everything else. DSpark is
    told apart first: published DSpark drafts nest their fields under ``dflash_config`` (SGLang 0.5.23
    speculative/dspark_components/dspark_config.py:206-211)."""
    if not isinstance(cfg, dict):
        return None
    archs = " ".join(a for a in cfg.get("architectures") or [] if isinstance(a, str)).lower()
    if "dspark" in archs or isinstance(cfg.get("dspark_config"), dict) or any(k.startswith("dspark_") for k in cfg):
        return "DSpark"
    if isinstance(cfg.get("dflash_config"), dict) or "dflash" in archs:
        return "DFlash"
    if isinstance(cfg.get("mtp_config"), dict) or "mtpdraft" in archs:
        return "MTP"
    return None


def config_facts(cfg: dict[str, Any] | None) -> list[str]:
    """What a drafter's config.json says that shapes alone would not: its kind where it is not EAGLE's, an
    explicit head_dim that hidden_size / heads would get wrong, EAGLE-3.1's extras, an MoE decoder layer."""
    cfg, _ = drafter_config(cfg)
    if not isinstance(cfg, dict):
        return []
    facts = []
    arch = ", ".join(a for a in cfg.get("architectures") or [] if isinstance(a, str)) or "no architectures"
    family = drafter_family(cfg)
    if family == "DFlash":
        found = cfg.get("dflash_config")
        dflash = found if isinstance(found, dict) else {}
        said = [f"{cfg.get('num_hidden_layers')} layers"]
        block = cfg.get("block_size") or dflash.get("block_size")
        if block is not None:
            said.append(f"block size {block}")
        if dflash.get("target_layer_ids") is not None:
            said.append(f"target layers {dflash.get('target_layer_ids')} of {cfg.get('num_target_layers')}")
        facts.append(f"a DFlash block drafter ({arch}): {', '.join(said)}; judged by its own kind, not EAGLE's")
    elif family == "DSpark":
        block = _block_config(cfg)
        facts.append(
            f"a DSpark block drafter ({arch}): gamma {block.get('block_size')}, markov rank {block.get('markov_rank')} "
            f"({block.get('markov_head_type')}), target layers {block.get('target_layer_ids')}; judged by its own "
            "kind, not EAGLE's"
        )
    elif family == "MTP":
        found = cfg.get("mtp_config")
        mtp = found if isinstance(found, dict) else {}
        shared = " that shares the target's lm_head (no lm_head of its own)" if mtp.get("share_lm_head") else ""
        facts.append(
            f"an MTP drafter ({arch}), {cfg.get('num_hidden_layers')} layer(s){shared}; judged by its own kind, not "
            "EAGLE's"
        )
    hidden, heads, head_dim = _int(cfg, "hidden_size"), _int(cfg, "num_attention_heads"), _int(cfg, "head_dim")
    if hidden and heads and head_dim and head_dim * heads != hidden:
        facts.append(
            f"head_dim {head_dim} is set (not hidden_size {hidden} / {heads} heads = {hidden // heads}): q_proj has "
            f"{heads} x {head_dim} = {heads * head_dim} rows"
        )
    extras = [k for k in ("fc_norm", "norm_output") if cfg.get(k) is True]
    if extras:
        facts.append(f"EAGLE-3.1 extras set: {', '.join(extras)}")
    experts = _int(cfg, "num_experts") or _int(cfg, "n_routed_experts")
    if experts:
        facts.append(
            f"an MoE decoder layer: {experts} experts, {cfg.get('num_experts_per_tok')} per token, "
            f"moe_intermediate_size {cfg.get('moe_intermediate_size')}"
        )
    return facts


def verdict_word(v: dict[str, Any]) -> str:
    """``compatible``, ``incompatible`` or ``unchecked`` (no problem found, but the tensor shapes were not seen)."""
    return "unchecked" if v["compatible"] is None else "compatible" if v["compatible"] else "incompatible"


def _trained_for(drafter: dict[str, Any]) -> str | None:
    """The target model_type a drafter says it was trained for, when its config or metadata records one."""
    cfg = drafter.get("config") or {}
    for source in (cfg, cfg.get("eagle_config") or {}, drafter.get("metadata") or {}):
        named = source.get("target_model_type") if isinstance(source, dict) else None
        if isinstance(named, str):
            return named
    return None


def verdict(drafter: dict[str, Any], target_config: dict[str, Any] | None) -> dict[str, Any]:
    """Judge one drafter (an inspect dict) against the target's config.json.

    Returns ``{"compatible", "problems", "notes", "unchecked", "algorithm", "kind"}``: problems are sentences
    naming the tensor or key and both numbers; ``unchecked`` says which checks could not be made and why (a target
    config without vocab_size, say); ``algorithm`` is the ``--speculative-algorithm`` it needs (None if unknown);
    ``kind`` is ``drafter``, or for a config with no draft layout behind it ``target copy`` or ``language model``.
    An EAGLE-1/2 drafter is judged by EAGLE-1 rules and never told to use EAGLE3; a DFlash drafter by its own; an
    MTP one by none of EAGLE's. A config seen without its safetensors (a hub page, a folder holding config.json
    alone) has its tensor checks unchecked, not failed: ``compatible`` is then None unless the config itself
    shows a problem.
    """
    cfg, nested = drafter_config(drafter.get("config"))
    tensors = drafter.get("tensors") or {}
    family = drafter_family(cfg)
    target = language_config(target_config)
    problems: list[str] = []
    notes: list[str] = []
    unchecked: list[str] = []
    algorithm = drafter_kind(drafter)
    if nested:
        notes.append(f"nested config: read from {nested} (vLLM's speculators format), its top-level keys on top")

    named = _algorithm(cfg)
    notes += config_facts(cfg)
    if algorithm is None and family is None and cfg is not None and _whole_model(cfg, tensors, target):
        # No draft layout at all: a whole language model, judged as one (a copy of the target, or a standalone
        # draft if it shares the target's vocabulary).
        return _whole_model_verdict(cfg, target, notes)
    if cfg is None:
        problems.append("there is no config.json: SGLang needs it to build the drafter; add the drafter's config")
    elif family is not None:
        pass  # its own kind: config_facts said what it is
    elif named and algorithm and named != algorithm:
        arch = EAGLE3_ARCH if algorithm == "EAGLE3" else "LlamaForCausalLMEagle"
        problems.append(
            f"architectures is {cfg.get('architectures')} ({'EAGLE-3' if named == 'EAGLE3' else 'EAGLE-1/2'}) but "
            f"the tensors are an {'EAGLE-3' if algorithm == 'EAGLE3' else 'EAGLE-1/2'} drafter's: SGLang would build "
            f"the wrong model for them; set architectures to [{arch!r}]"
        )
    elif algorithm is None and not tensors:
        unchecked.append(
            f"the kind: architectures is {cfg.get('architectures')}, no EAGLE class; only the tensors' layout could "
            "tell an EAGLE-1/2 drafter (yuhuili's say LlamaForCausalLM) from something else, and none were read"
        )
    elif algorithm is None:
        problems.append(
            f"architectures is {cfg.get('architectures')}, not an EAGLE-3 one such as {EAGLE3_ARCH}, and the "
            "tensors are not an EAGLE-1/2 layout (fc [h, 2h], no lm_head, a decoder layer under layers.0.)"
        )

    hidden_d, hidden_t = _int(cfg, "hidden_size"), _int(target, "hidden_size")
    if hidden_d and hidden_t and hidden_d != hidden_t:
        problems.append(f"hidden_size is {hidden_d} but the target's hidden_size is {hidden_t}")
    if target_config is not None and hidden_t is None:
        unchecked.append(
            "hidden_size: the target config has none, so the drafter's widths were checked against its own"
        )
    hidden = hidden_t or hidden_d
    hidden_name = "the target's hidden_size" if hidden_t else "hidden_size"
    vocab_t = _int(target, "vocab_size")
    if target_config is not None and vocab_t is None:
        unchecked.append(
            "vocab: the target config has no vocab_size (a partial config, or a wrapper that nests it elsewhere), "
            "so the drafter's vocabulary and its token maps could not be checked against the target's"
        )

    if family == "MTP":
        vocab_d = _int(cfg, "vocab_size")
        if vocab_d and vocab_t and vocab_d != vocab_t:
            problems.append(f"vocab_size is {vocab_d} but the target's is {vocab_t}: an MTP head predicts its tokens")
        unchecked.append(
            "the MTP drafter's tensors: "
            + ("specdeck checks EAGLE and block layouts only" if tensors else "no safetensors read (config.json alone)")
        )
    elif algorithm == "EAGLE":
        _eagle1_checks(cfg, tensors, hidden, hidden_name, vocab_t, problems, notes)
    elif algorithm in BLOCK_ALGORITHMS:
        _block_checks(cfg, tensors, target, hidden, hidden_name, vocab_t, problems, notes, unchecked)
    elif algorithm is not None or tensors:
        _eagle3_checks(cfg, tensors, target, hidden, hidden_name, vocab_t, problems, notes, unchecked, target_config)
    if not tensors and family is None and algorithm not in BLOCK_ALGORITHMS:
        unchecked.append(
            "tensor shapes: no safetensors were read (config.json alone), so fc, the decoder layer, lm_head and "
            "d2t/t2d are unchecked, not missing"
        )

    if algorithm == "EAGLE3":
        notes.append(
            "launch with --speculative-algorithm EAGLE3: with EAGLE an EAGLE-3 drafter loads without error "
            "and silently gives accept length 1.00"
        )
    elif algorithm == "EAGLE":
        notes.append(
            "an EAGLE-1/2 drafter (not EAGLE-3): launch with --speculative-algorithm EAGLE; it reads the target's "
            "last hidden state and uses the target's lm_head"
        )
    elif algorithm in BLOCK_ALGORITHMS:
        block = (cfg or {}).get("block_size") or ((cfg or {}).get("dflash_config") or {}).get("block_size")
        notes.append(
            f"a block drafter: launch with --speculative-algorithm {algorithm}; SGLang drafts one block with 1 step "
            f"and topk 1, its draft tokens the block size ({block if block else 'not in the config: SGLang uses 16'})"
        )
    if target_config is None:
        notes.append("no target config: checked against the drafter's own config only")
    else:
        trained_for = _trained_for(drafter)
        target_types = {(target_config or {}).get("model_type"), (target or {}).get("model_type")}
        if trained_for and trained_for not in target_types:
            notes.append(
                f"trained for model_type {trained_for} but the target is {target_config.get('model_type')}: "
                "same shapes ≠ same behaviour, the target's hidden states at the aux layers may differ"
            )
        elif not problems:
            notes.append("same shapes ≠ same behaviour: it will load; measure the accept length on this target")
    return {
        "compatible": False if problems else (None if not tensors or family == "MTP" else True),
        "problems": problems,
        "notes": notes,
        "unchecked": unchecked,
        "algorithm": algorithm,
        "kind": "drafter",
    }


def _eagle1_checks(
    cfg: dict[str, Any] | None,
    tensors: dict[str, Any],
    hidden: int | None,
    hidden_name: str,
    vocab_t: int | None,
    problems: list[str],
    notes: list[str],
) -> None:
    """EAGLE-1/2 (SafeAILab's cnets.py, SGLang's llama_eagle): fc fuses the token's embedding with the target's
    last hidden state (2h inputs), one Llama decoder layer of width h, the target's lm_head and vocabulary."""
    fc = _shape(tensors, "fc.weight", 2)
    if fc is None and tensors:
        problems.append(
            "fc.weight is missing: an EAGLE drafter fuses the embedding and the target's hidden state with it"
        )
    elif fc is not None and hidden and (fc[0] != hidden or fc[1] != 2 * hidden):
        problems.append(
            f"fc.weight is {fc} but an EAGLE-1/2 drafter of {hidden_name} {hidden} has [{hidden}, {2 * hidden}]"
        )
    prefix = _decoder_prefix(tensors) or "layers.0."
    for proj in ("q", "k", "v") if tensors else ():
        name = f"{prefix}self_attn.{proj}_proj.weight"
        shape = _shape(tensors, name, 2)
        if shape is None:
            problems.append(f"{name} is missing: the drafter's decoder layer is incomplete")
        elif hidden and shape[1] != hidden:
            problems.append(f"{name} takes {shape[1]} inputs but {hidden_name} is {hidden}")
    vocab_d = _int(cfg, "vocab_size")
    if vocab_d and vocab_t and vocab_d != vocab_t:
        problems.append(
            f"vocab_size is {vocab_d} but the target's vocab_size is {vocab_t}: an EAGLE-1/2 drafter proposes "
            "through the target's lm_head, so the vocabularies must be the same"
        )
    embed = _shape(tensors, "embed_tokens.weight", 2)
    if embed is not None and vocab_t and embed[0] != vocab_t:
        problems.append(f"embed_tokens.weight has {embed[0]} rows but the target's vocab_size is {vocab_t}")
    notes.append("no lm_head: an EAGLE-1/2 drafter uses the target's (SGLang shares it); no aux layers, no d2t/t2d")


def _eagle3_checks(
    cfg: dict[str, Any] | None,
    tensors: dict[str, Any],
    target: dict[str, Any] | None,
    hidden: int | None,
    hidden_name: str,
    vocab_t: int | None,
    problems: list[str],
    notes: list[str],
    unchecked: list[str],
    target_config: dict[str, Any] | None,
) -> None:
    """EAGLE-3 (SpecForge): fc fuses the aux layers' hidden states (n × h inputs), the decoder layer reads the
    embedding and that (2h), its own lm_head over a draft vocabulary mapped to the target's by d2t/t2d."""
    hidden_d = _int(cfg, "hidden_size")
    found = (cfg or {}).get("eagle_config")
    eagle = found if isinstance(found, dict) else {}
    aux = eagle.get("eagle_aux_hidden_state_layer_ids")
    layers = _int(target, "num_hidden_layers")
    if aux is None:
        n_aux = 3
        if cfg is not None:
            notes.append(f"no {AUX_IDS}: SGLang captures its default layers 2, L/2 and L-3 of the target")
    elif not isinstance(aux, list) or not all(type(i) is int for i in aux):
        problems.append(f"{AUX_IDS} is {aux!r}, not a list of layer numbers")
        n_aux = 3
    else:
        n_aux = len(aux)
        if target_config is not None and layers is None:
            unchecked.append("aux layers: the target config has no num_hidden_layers, so the ids could not be checked")
        # SGLang captures the input of layer id + 1 (the output of layer id): the last usable id is L - 2.
        last = layers - 2 if layers else None
        for layer in aux if last is not None else ():
            if not 0 <= layer <= last:
                problems.append(
                    f"{AUX_IDS} has {layer} but the target has {layers} layers: SGLang reads the input of "
                    f"layer id + 1, so ids must be 0 to {last}"
                )

    fc = _shape(tensors, "fc.weight", 2)
    if eagle.get("use_aux_hidden_state") is False:
        notes.append("use_aux_hidden_state is false: the drafter reads only the target's last hidden state")
    elif fc is None:
        if tensors:
            problems.append("fc.weight is missing: an EAGLE-3 drafter fuses the target's aux hidden states with it")
    else:
        if hidden and fc[1] != n_aux * hidden:
            wanted = n_aux * hidden
            problems.append(
                f"fc.weight takes {fc[1]} inputs but {n_aux} aux layers × {hidden_name} {hidden} = {wanted}"
            )
        if hidden_d and fc[0] != hidden_d:
            problems.append(f"fc.weight has {fc[0]} output rows but hidden_size is {hidden_d}")

    prefix = _decoder_prefix(tensors) or "midlayer."
    if f"{prefix}self_attn.q_a_proj.weight" in tensors or MLA_EAGLE3_ARCH in architectures(cfg):
        _mla_checks(cfg, tensors, target, prefix, hidden, problems)
    else:
        for proj in ("q", "k", "v") if tensors else ():
            name = f"{prefix}self_attn.{proj}_proj.weight"
            shape = _shape(tensors, name, 2)
            if shape is None:
                problems.append(f"{name} is missing: the drafter's decoder layer is incomplete")
            elif hidden and shape[1] != 2 * hidden:
                problems.append(f"{name} takes {shape[1]} inputs but 2 × {hidden_name} {hidden} = {2 * hidden}")

    draft_vocab = _int(cfg, "draft_vocab_size") or _int(cfg, "vocab_size")
    vocab = vocab_t or _int(cfg, "vocab_size")
    vocab_name = "the target's vocab_size" if vocab_t else "vocab_size"
    if not tensors:
        return  # the rest are the tensors' checks
    lm_head = _shape(tensors, "lm_head.weight", 2)
    if lm_head is None:
        problems.append("lm_head.weight is missing: the drafter cannot propose tokens")
    elif draft_vocab and lm_head[0] != draft_vocab:
        problems.append(f"lm_head.weight has {lm_head[0]} rows but draft_vocab_size is {draft_vocab}")
    d2t = _shape(tensors, "d2t", 1)
    if d2t is not None and draft_vocab and d2t[0] != draft_vocab:
        problems.append(f"d2t has {d2t[0]} entries but draft_vocab_size is {draft_vocab}")
    elif d2t is None and draft_vocab and vocab and draft_vocab != vocab:
        problems.append(
            f"d2t is missing but draft_vocab_size {draft_vocab} differs from {vocab_name} {vocab}: "
            "SGLang cannot map draft tokens to target tokens"
        )
    t2d = _shape(tensors, "t2d", 1)
    if t2d is not None and vocab and t2d[0] != vocab:
        problems.append(f"t2d has {t2d[0]} entries but {vocab_name} is {vocab}")


def _whole_model(cfg: dict[str, Any] | None, tensors: dict[str, Any], target: dict[str, Any] | None) -> bool:
    """Whether a config with no draft class is a whole model rather than a drafter in an unnamed class: its
    tensors (when read) have no draft layout; without them, it has the target's depth and width, or more layers
    than any drafter (yuhuili's EAGLE-1 configs say LlamaForCausalLM with one layer: only tensors tell those)."""
    if cfg is None or "fc.weight" in tensors or _decoder_prefix(tensors):
        return False
    if tensors:
        return True
    lang = language_config(cfg) or {}
    layers = _int(lang, "num_hidden_layers")
    same_shape = layers is not None and layers == _int(target, "num_hidden_layers")
    return (same_shape and _int(lang, "hidden_size") == _int(target, "hidden_size")) or (layers or 0) > 2


def _whole_model_verdict(cfg: dict[str, Any], target: dict[str, Any] | None, notes: list[str]) -> dict[str, Any]:
    """A config with no draft layout behind it: the target's own shape (a copy of it, quantized or fine-tuned,
    not a drafter), or a language model that can draft as STANDALONE only with the target's vocabulary."""
    lang = language_config(cfg) or {}
    archs = architectures(cfg)
    layers, hidden = _int(lang, "num_hidden_layers"), _int(lang, "hidden_size")
    problems: list[str] = []
    algorithm, kind = None, "language model"
    target_shape = layers and layers == _int(target, "num_hidden_layers") and hidden == _int(target, "hidden_size")
    if target is not None and target_shape:
        kind = "target copy"
        problems.append(
            f"architectures {archs} with {layers} layers of hidden_size {hidden}: a whole model of the target's "
            "shape (the target, a copy of it or a sibling), not a drafter"
        )
    else:
        vocab_d, vocab_t = _int(lang, "vocab_size"), _int(target, "vocab_size")
        if vocab_d and vocab_t and vocab_d == vocab_t:
            algorithm = "STANDALONE"
            notes.append(
                f"a standalone draft model ({', '.join(archs) or 'no architectures'}, {layers} layers): launch "
                f"with --speculative-algorithm STANDALONE; it shares the target's vocabulary ({vocab_t} tokens)"
            )
        else:
            why = (
                f"vocab_size {vocab_d} vs the target's {vocab_t}"
                if vocab_d and vocab_t
                else "the vocabularies could not be compared"
            )
            problems.append(
                f"architectures {archs} is a language model, not a draft model SGLang registers (EAGLE, EAGLE-3, "
                f"DFlash, DSpark); as a STANDALONE draft it needs the target's vocabulary: {why}"
            )
    return {
        "compatible": not problems,
        "problems": problems,
        "notes": notes,
        "unchecked": [],
        "algorithm": algorithm,
        "kind": kind,
    }


def _block_checks(
    cfg: dict[str, Any] | None,
    tensors: dict[str, Any],
    target: dict[str, Any] | None,
    hidden: int | None,
    hidden_name: str,
    vocab_t: int | None,
    problems: list[str],
    notes: list[str],
    unchecked: list[str],
) -> None:
    """DFlash/DSpark (SGLang's dflash.py): fc fuses the hidden states of ``dflash_config.target_layer_ids``
    (n × h inputs), the decoder layers have width h, and the target's embedding and lm_head are used, so the
    vocabularies must be the same; ``mask_token_id`` is a target token."""
    cfg = cfg or {}
    dflash = _block_config(cfg)
    ids = dflash.get("target_layer_ids")
    algorithm = "DSPARK" if drafter_family(cfg) == "DSpark" else "DFLASH"
    builds = [name for name, needs in DRAFT_ARCHITECTURES.items() if needs == algorithm]
    archs = architectures(cfg)
    bundled = algorithm == "DSPARK" and "DeepseekV4ForCausalLM" in archs  # SGLang picks ...DSpark for it
    if archs and not bundled and not set(archs) & set(builds):
        problems.append(
            f"architectures is {archs}: SGLang 0.5.23 builds a {algorithm} draft as one of {', '.join(builds)}"
        )
    layers = _int(target, "num_hidden_layers")
    if dflash is cfg:
        unchecked.append(
            "dflash_config: the config has none (target_layer_ids, mask_token_id), so which target layers the "
            "drafter reads could not be checked; SGLang falls back to its defaults"
        )
    elif isinstance(ids, list) and all(type(i) is int for i in ids) and layers:
        for layer in ids:
            if not 0 <= layer < layers:
                problems.append(f"dflash_config.target_layer_ids has {layer} but the target has {layers} layers")
    declared = _int(cfg, "num_target_layers")
    if declared and layers and declared != layers:
        problems.append(
            f"num_target_layers is {declared} but the target has {layers} layers: it was trained on another target"
        )
    fc = _shape(tensors, "fc.weight", 2)
    if not tensors:
        unchecked.append("the block drafter's tensors: no safetensors were read (config.json alone)")
    elif fc is None:
        problems.append("fc.weight is missing: a block drafter fuses the target's hidden states with it")
    elif hidden:
        if fc[0] != hidden or fc[1] % hidden:
            problems.append(f"fc.weight is {fc} but {hidden_name} is {hidden}: its inputs must be whole layers")
        elif isinstance(ids, list) and fc[1] != len(ids) * hidden:
            problems.append(
                f"fc.weight takes {fc[1]} inputs but {len(ids)} target layers × {hidden_name} {hidden} = "
                f"{len(ids) * hidden}"
            )
    vocab_d = _int(cfg, "vocab_size")
    if vocab_d and vocab_t and vocab_d != vocab_t:
        problems.append(
            f"vocab_size is {vocab_d} but the target's vocab_size is {vocab_t}: a block drafter proposes through "
            "the target's embedding and lm_head"
        )
    mask = _int(dflash, "mask_token_id")
    if mask is not None and vocab_t and not 0 <= mask < vocab_t:
        problems.append(f"dflash_config.mask_token_id {mask} is not a token of the target's {vocab_t}")
    if algorithm == "DSPARK":
        _dspark_rules(dflash, mask, problems, notes)
    else:
        _dflash_rules(dflash, problems, notes)
    notes.append("no embed_tokens or lm_head of its own: a block drafter uses the target's")


def _block_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A block drafter's keys as SGLang reads them: ``dflash_config`` (and DSpark's ``dspark_config``) over the
    top level, and a bundled DSpark draft's ``dspark_``-prefixed keys (0.5.23 dflash_utils._cfg_get;
    dspark_config.py:162-237). The config itself when it has none of them."""
    blocks = [cfg[k] for k in ("dflash_config", "dspark_config") if isinstance(cfg.get(k), dict)]
    prefixed = {k[len("dspark_") :]: v for k, v in cfg.items() if k.startswith("dspark_") and k != "dspark_config"}
    if not blocks and not prefixed:
        return cfg
    merged = {**cfg, **prefixed}
    if "noise_token_id" in prefixed and "mask_token_id" not in merged:
        merged["mask_token_id"] = prefixed["noise_token_id"]
    for block in blocks:
        merged.update(block)
    return merged


def _dflash_rules(block: dict[str, Any], problems: list[str], notes: list[str]) -> None:
    """What SGLang 0.5.23's DFLASH parser refuses beyond the shapes (speculative/dflash_utils.py:445-800), and the
    block size it will verify."""
    for pair in (("conv_kernel_size", "conv_group_size"), ("selector_rank", "selector_top_k")):
        if (block.get(pair[0]) is None) != (block.get(pair[1]) is None):
            problems.append(f"{pair[0]} and {pair[1]} are set together or not at all (SGLang refuses one alone)")
    multiplier = block.get("output_multiplier")
    if multiplier is not None and not (isinstance(multiplier, int | float) and multiplier > 0):
        problems.append(f"output_multiplier is {multiplier!r}: SGLang needs a positive number")
    size = block.get("block_size")
    if size is not None and not (type(size) is int and size >= 1):
        problems.append(f"block_size is {size!r}: SGLang needs a whole number 1 or more")
    notes.append(
        f"DFLASH verifies {size} positions per pass (block_size; the profile's dflash_block_size overrides it)"
        if size
        else "no block_size: SGLang verifies 16 positions unless the profile sets dflash_block_size"
    )
    layer_types = block.get("layer_types") or []
    if block.get("is_causal") is True or (layer_types and all(t == "sliding_attention" for t in layer_types)):
        notes.append("every draft layer is sliding (or causal): SGLang may run the draft on trtllm_mha")


def _dspark_rules(block: dict[str, Any], mask: int | None, problems: list[str], notes: list[str]) -> None:
    """What SGLang 0.5.23's DSpark parser and worker refuse (dspark_config.py:214-322, its words), and gamma."""
    if mask is None:
        problems.append("DSpark requires mask_token_id to be set in the draft model config.")
    rank, head = block.get("markov_rank"), block.get("markov_head_type")
    if not (type(rank) is int and rank > 0):
        problems.append(f"DSpark draft requires markov_rank > 0; got markov_rank={rank}.")
    elif head not in ("vanilla", "gated", "rnn"):
        problems.append(f"markov_head_type is {head!r}: SGLang builds vanilla, gated or rnn")
    size = block.get("block_size")
    gamma = size if type(size) is int and size > 0 else 7
    notes.append(
        f"DSPARK drafts gamma = {gamma} tokens per verify (window {gamma + 1})"
        + ("" if size else ": no block_size, SGLang's default")
    )


def _mla_checks(
    cfg: dict[str, Any] | None,
    tensors: dict[str, Any],
    target: dict[str, Any] | None,
    prefix: str,
    hidden: int | None,
    problems: list[str],
) -> None:
    """An MLA EAGLE-3 drafter (SGLang's Eagle3DeepseekV2ForCausalLM): its attention reads 2h inputs through the
    low-rank projections and shares the target's MLA KV layout, so the ranks and head dims must be the target's;
    SGLang builds exactly one layer."""
    for proj in ("q_a_proj", "kv_a_proj_with_mqa"):
        name = f"{prefix}self_attn.{proj}.weight"
        shape = _shape(tensors, name, 2)
        if shape is None:
            problems.append(f"{name} is missing: the drafter's MLA attention is incomplete")
        elif hidden and shape[1] != 2 * hidden:
            problems.append(f"{name} takes {shape[1]} inputs but 2 × hidden_size {hidden} = {2 * hidden}")
    if target is not None and _int(target, "kv_lora_rank") is None:
        problems.append("an MLA drafter shares the target's MLA KV cache, but the target config has no kv_lora_rank")
    for key in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        mine, theirs = _int(cfg, key), _int(target, key)
        if mine is not None and theirs is not None and mine != theirs:
            problems.append(f"{key} is {mine} but the target's is {theirs}: an MLA drafter shares its KV layout")
    layers = _int(cfg, "num_hidden_layers")
    if layers is not None and layers != 1:
        problems.append(f"num_hidden_layers is {layers}: SGLang's MLA EAGLE-3 (Eagle3DeepseekV2ForCausalLM) builds 1")
