"""The prompts a bench sends, built on the host: prompt sets per domain from Hub datasets, each through the target's
chat template unless the bench asked for raw prompts.

- Domains: ``{name: {"dataset": id, "file": path}}`` from the client. Each file is fetched by the host's own
  huggingface_hub (``repo_type="dataset"``, the host's HF_ENDPOINT and token, its cache) and read as JSON lines,
  a JSON list, or parquet (with the host's pyarrow, where it has one). A row becomes a conversation by the
  schema the common sets share: MT-Bench's ``prompt``/``turns`` (the first turn), GSM8K's ``question``,
  HumanEval's ``prompt`` (a function to complete), BFCL's ``question`` (a list of turns) with its ``function``
  list as tools. Without domains: the load generator's built-in prompts, each labelled with its domain.
- The template: ``chat_template.py``, from the target's ``tokenizer_config.json`` (its folder, or the host's
  Hugging Face cache for a Hub id), or ``chat_template.jinja`` beside it. None found: raw prompts, and the bench
  says so; found but not renderable here: refused with what to do.

Stdlib only at import (huggingface_hub, pyarrow and jinja2 imported by the calls that need them), Python 3.8+.
"""

from __future__ import annotations

import glob
import json
import os
import random
from typing import Any, Dict, List, Optional, Tuple

from .registry import AgentError
from .shared import chat_template

# A prompt as the chat API takes it: (messages, tools or None).
Conversation = Tuple[List[Dict[str, Any]], Optional[List[Dict[str, Any]]]]

MAX_ROWS = 200  # a bench needs a few prompts a domain, not a data set
# What a row of a domain's set is asked as, before its text.
LEADS = {"code": "Complete the following Python function. Reply with the code only.\n\n"}


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _hub_snapshot(repo_id: str) -> Optional[str]:
    """The newest snapshot of a Hub model repo in the host's Hugging Face cache, None when it has none."""
    home = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub"
    )
    snapshots = glob.glob(os.path.join(home, "models--" + repo_id.replace("/", "--"), "snapshots", "*"))
    return max(snapshots, key=os.path.getmtime) if snapshots else None


def target_template(model_path: Optional[str]) -> Tuple[Optional[str], Dict[str, Any], str]:
    """(template or None, the tokenizer config's special tokens, where it was looked for) of the target."""
    if not model_path:
        return None, {}, "the server's target is not known"
    folder = os.path.expanduser(model_path)
    if not os.path.isdir(folder):
        folder = _hub_snapshot(model_path) or folder
    config_path = os.path.join(folder, "tokenizer_config.json")
    config = _read_json(config_path) or {}
    template = chat_template.pick(config)
    if template is None:
        jinja_file = os.path.join(folder, "chat_template.jinja")
        try:
            with open(jinja_file, encoding="utf-8") as f:
                template = f.read() or None
        except OSError:
            pass
    return template, config, config_path


# --- prompt sets from Hub datasets ---------------------------------------------------------------------------


def _fetch(dataset: str, path: str, endpoint: Optional[str], unchecked: Optional[str] = None) -> str:
    """The dataset file through the host's huggingface_hub (its cache and token; ``endpoint``, else the host's
    HF_ENDPOINT, else the Hub); AgentError saying why not, with ``unchecked`` (the client's sentence for a path
    it could not check) after it."""
    from .hub_client import NO_HUB, hub_refusal, resolve_endpoint

    endpoint = resolve_endpoint(endpoint)
    try:
        import huggingface_hub
    except ImportError:
        raise AgentError(NO_HUB % "the bench's prompt sets", "failed") from None
    try:
        return huggingface_hub.hf_hub_download(dataset, path, repo_type="dataset", endpoint=endpoint)
    except Exception as exc:  # the hub's typed refusals, said in one sentence; anything else as it came
        said = hub_refusal(exc, dataset, endpoint, path, "main")
        message = "the prompt set %s/%s cannot be fetched: %s" % (dataset, path, said or exc)
        raise AgentError(message + (" (%s)" % unchecked.rstrip(".") if unchecked else ""), "failed") from None


def read_rows(path: str, limit: int = MAX_ROWS) -> List[Dict[str, Any]]:
    """A dataset file's first ``limit`` rows: JSON lines, a JSON list (or ``{"data": [...]}``), or parquet."""
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise AgentError(
                "%s is parquet and the host has no pyarrow: install it there (pip install pyarrow) or name a JSON "
                "file of the set" % os.path.basename(path),
                "failed",
            ) from None
        return [row for row in pq.read_table(path).slice(0, limit).to_pylist() if isinstance(row, dict)]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        doc = doc.get("data") or doc.get("rows")
    if isinstance(doc, list):
        return [row for row in doc[:limit] if isinstance(row, dict)]
    rows: List[Dict[str, Any]] = []
    for line in text.splitlines():
        if len(rows) >= limit:
            break
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def conversation(row: Dict[str, Any], domain: str) -> Optional[Conversation]:
    """(messages, tools) a dataset row asks, by the common sets' fields; None for a row it cannot read."""
    tools = row.get("function") or row.get("tools")
    tools = tools if isinstance(tools, list) and tools else None
    question = row.get("question")
    if isinstance(question, list):  # BFCL: a list of turns (a list of messages each)
        turns = question[0] if question and isinstance(question[0], list) else question
        messages = [
            {"role": str(m.get("role") or "user"), "content": str(m.get("content") or "")}
            for m in turns
            if isinstance(m, dict) and m.get("content")
        ]
        return (messages, tools) if messages else None
    for key in ("turns", "prompt", "question", "problem", "instruction", "text"):
        value = row.get(key)
        if isinstance(value, list):
            value = next((v for v in value if isinstance(v, str) and v.strip()), None)
        if isinstance(value, str) and value.strip():
            return [{"role": "user", "content": LEADS.get(domain, "") + value}], tools
    return None


def random_prompts(count: int, seed: int = 1305) -> List[Conversation]:
    """Prompts of random words, as a ``random`` dataset of a serving benchmark sends: what sends a model into a
    loop (lightseekorg/tokenspeed #1305)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out: List[Conversation] = []
    for _ in range(count):
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(48)]
        out.append(([{"role": "user", "content": " ".join(words)}], None))
    return out


def domain_conversations(name: str, spec: Dict[str, Any], endpoint: Optional[str]) -> List[Conversation]:
    """A domain's conversations: random words (``{"random": N}``) or a Hub dataset's file."""
    if spec.get("random"):
        return random_prompts(int(spec["random"]))
    dataset, path = spec.get("dataset"), spec.get("file")
    if not isinstance(dataset, str) or not isinstance(path, str):
        raise AgentError("domain %s needs a dataset id and a file" % name, "invalid")
    unchecked = spec.get("unchecked")
    rows = read_rows(_fetch(dataset, path, endpoint, unchecked if isinstance(unchecked, str) else None))
    out = [c for c in (conversation(r, name) for r in rows) if c is not None]
    if not out:
        raise AgentError("the prompt set %s/%s holds no row a prompt can be read from" % (dataset, path), "failed")
    return out


# --- the bench's prompts ---------------------------------------------------------------------------------------


def interleaved(sets: Dict[str, List[Any]]) -> List[Tuple[str, Any]]:
    """(domain, item) taking one of each domain in turn, so a bench of any length spreads over the domains."""
    out: List[Tuple[str, Any]] = []
    i = 0
    while any(i < len(items) for items in sets.values()):
        out.extend((name, items[i]) for name, items in sets.items() if i < len(items))
        i += 1
    return out


def build(
    builtin: List[Tuple[str, str]],
    domains: Optional[Dict[str, Dict[str, Any]]],
    raw: bool,
    model_path: Optional[str],
    endpoint: Optional[str] = None,
) -> Tuple[List[Dict[str, str]], Dict[str, Any]]:
    """The bench's prompts (``{"text", "domain"}``) and what was done to them (``chat_template``: the template's
    family, its own name, or False; ``chat_template_via``; ``chat_template_note``; ``prompt_sets``)."""
    if domains:
        sets = {name: domain_conversations(name, spec, endpoint) for name, spec in domains.items()}
        source = {
            name: "random words" if spec.get("random") else "%s/%s" % (spec["dataset"], spec["file"])
            for name, spec in domains.items()
        }
    else:
        sets = {}
        for name, text in builtin:
            sets.setdefault(name, []).append(([{"role": "user", "content": text}], None))
        source = {name: "built-in" for name in sets}
    pairs = interleaved(sets)
    info: Dict[str, Any] = {"prompt_sets": source, "chat_template": False, "chat_template_via": None}
    template, tokens, where = (None, {}, "") if raw else target_template(model_path)
    if raw:
        info["chat_template_note"] = "raw prompts, as asked (--raw-prompts)"
    elif template is None:
        info["chat_template_note"] = (
            "no chat template in %s: raw prompts" if model_path else "%s: raw prompts"
        ) % where
    out = []
    for name, (messages, tools) in pairs:
        if template is None:
            text = "\n\n".join(m["content"] for m in messages)
            if tools:
                text += "\n\nTools: " + json.dumps(tools, ensure_ascii=False)
        else:
            try:
                text, via = chat_template.render(template, messages, tools, tokens)
            except chat_template.TemplateError as exc:
                raise AgentError(str(exc), "failed") from None
            info["chat_template"] = chat_template.family(template) or "the target's own"
            info["chat_template_via"] = via
            info["chat_template_note"] = "through the target's chat template (%s, rendered with %s)" % (
                info["chat_template"],
                via,
            )
        out.append({"text": text, "domain": name})
    return out, info
