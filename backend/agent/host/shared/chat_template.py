"""A bench prompt through the target's chat template: the turns the drafter was trained on, not raw text.

A drafter learns on conversations rendered with the target's template (SpecForge's ``--chat-template``); raw
prompts without it lower acceptance silently (SemiAnalysis InferenceX PR #1116 review). The template is the
``chat_template`` of the target's ``tokenizer_config.json`` (a string, or a list of ``{"name", "template"}`` of
which ``default`` is taken), or a ``chat_template.jinja`` beside it.

Rendering: with jinja2 where the host has it (it does where SGLang is installed), the way transformers renders
it (a sandboxed environment with ``trim_blocks``/``lstrip_blocks``, ``raise_exception``, ``tojson``, the messages,
the tools, ``add_generation_prompt``, the special tokens); without it, the common families by their turn markers
(``FAMILIES``), one user turn and the assistant's opening, without any default system prompt a template would
add. ``render`` says which it used. Stdlib only (jinja2 imported inside the call), Python 3.8+.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

# Family → the marker that names it in a template's text, first match wins.
FAMILIES: Tuple[Tuple[str, str], ...] = (
    ("kimi", "<|im_user|>"),
    ("chatml", "<|im_start|>"),
    ("llama3", "<|start_header_id|>"),
    ("deepseek", "<｜User｜>"),
    ("mistral", "[INST]"),
)
# What any family's rendered prompt holds (the simulator reads a templated prompt by these).
MARKERS = tuple(marker for _, marker in FAMILIES)


class TemplateError(Exception):
    """The template cannot be rendered here; the message says why and what to do."""


def family(template: str) -> Optional[str]:
    """The family a template's text belongs to by its turn markers, None for one of its own."""
    for name, marker in FAMILIES:
        if marker in template:
            return name
    return None


def templated(text: str) -> bool:
    """Whether a prompt carries a chat template's turn markers."""
    return any(marker in text for marker in MARKERS)


def pick(config: Dict[str, Any]) -> Optional[str]:
    """The chat template in a tokenizer_config.json's content: the string, or the ``default`` of a named list."""
    value = config.get("chat_template")
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default") or next((t for t in named.values() if isinstance(t, str)), None)
        return chosen if isinstance(chosen, str) and chosen.strip() else None
    return None


def _token(value: Any) -> str:
    if isinstance(value, dict):  # {"content": "<s>", "__type": "AddedToken", ...}
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _jinja(
    template: str, messages: Sequence[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]], tokens: Dict[str, Any]
) -> str:
    import jinja2  # the host's, where it has one (SGLang brings it)
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError("the chat template refused the prompt: %s" % message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda obj, indent=None, **_: json.dumps(obj, indent=indent, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    try:
        compiled = env.from_string(template)
        return compiled.render(
            messages=list(messages),
            tools=tools or None,
            add_generation_prompt=True,
            bos_token=_token(tokens.get("bos_token")),
            eos_token=_token(tokens.get("eos_token")),
        )
    except jinja2.TemplateError as exc:
        raise TemplateError("the chat template does not render: %s" % exc) from None


def _turns(messages: Sequence[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]]) -> List[Tuple[str, str]]:
    """(role, content) pairs; tools go in a system turn (the built-in renderers have no tool syntax of their own)."""
    out = [("system", "Tools: " + json.dumps(tools, ensure_ascii=False))] if tools else []
    return out + [(str(m.get("role") or "user"), str(m.get("content") or "")) for m in messages]


def _builtin(name: str, messages: Sequence[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]], bos: str) -> str:
    turns = _turns(messages, tools)
    if name == "kimi":
        tag = {"system": "<|im_system|>", "user": "<|im_user|>", "assistant": "<|im_assistant|>"}
        body = "".join("%s%s<|im_middle|>%s<|im_end|>" % (tag.get(r, "<|im_user|>"), r, c) for r, c in turns)
        return body + "<|im_assistant|>assistant<|im_middle|>"
    if name == "chatml":
        return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (r, c) for r, c in turns) + "<|im_start|>assistant\n"
    if name == "llama3":
        body = "".join("<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>" % (r, c) for r, c in turns)
        return (bos or "<|begin_of_text|>") + body + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    if name == "deepseek":
        tag = {"user": "<｜User｜>", "assistant": "<｜Assistant｜>"}
        system = "".join(c for r, c in turns if r == "system")
        body = "".join(tag.get(r, "<｜User｜>") + c for r, c in turns if r != "system")
        return bos + system + body + "<｜Assistant｜>"
    # mistral: system text leads the first user turn
    system = "\n\n".join(c for r, c in turns if r == "system")
    users = [c for r, c in turns if r != "system"]
    first = (system + "\n\n" if system else "") + (users[0] if users else "")
    return (bos or "<s>") + "[INST] %s [/INST]" % first


def render(
    template: str,
    messages: Sequence[Dict[str, Any]],
    tools: Optional[List[Dict[str, Any]]] = None,
    tokens: Optional[Dict[str, Any]] = None,
) -> Tuple[str, str]:
    """(prompt text, how: ``jinja2`` or ``built-in``) of ``messages`` (and ``tools``) through ``template``, the
    assistant's turn opened; TemplateError when neither can render it."""
    tokens = tokens or {}
    try:
        return _jinja(template, messages, tools, tokens), "jinja2"
    except ImportError:
        pass
    name = family(template)
    if name is None:
        raise TemplateError(
            "the target's chat template is none of the families rendered without jinja2 (%s) and the host has "
            "no jinja2: install it there (pip install jinja2) or bench with --raw-prompts"
            % ", ".join(n for n, _ in FAMILIES)
        )
    return _builtin(name, messages, tools, _token(tokens.get("bos_token"))), "built-in"
