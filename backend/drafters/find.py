"""`drafters find`: every published drafter for the target, judged against it before a byte of weights moves.

The Hub lists models and SGLang serves them; this joins the two. The search (``backend.agent.host.shared.hub_search``:
``list_models`` queries, then each candidate's config.json, README.md and safetensors headers read in parallel)
runs on this machine, or on the host when only the host can reach the Hub. Each candidate is then judged here:

- the same verdict ``diff`` and ``inspect`` give (``checkpoints.verdict``: the algorithm it needs, widths,
  vocabularies, aux layers, tensor shapes), plus what the Hub's listing shows (GGUF only, a LoRA adapter, gated);
- what it was trained for, from the config's declared verifier, the card's ``base_model`` (through a quantized
  copy to the drafter it copies) or the repo's name: "trained for Kimi-K2-Instruct, not Kimi-K2.5" is a finding,
  since shapes prove the family, not the generation;
- whether the host's SGLang release takes its ``--speculative-algorithm`` (``sglang_flags``);
- what its card claims (``drafter_cards``), beside this host's break-even (``breakeven`` via the history's
  yardstick), as claims, never measurements.

Candidates come best first: compatible and trained for the target, then unknown, then trained for another
model; then those not read (gated), drafters that do not fit, and lookalikes that are no drafter at all; within
each, by the accept length their card claims.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from backend.agent.host.shared import hub_search
from backend.agent.host.shared.units import human_bytes
from backend.drafters import checkpoints, inspection
from backend.drafters.cards import Card, Claim, parse_card
from backend.drafters.sources import HOST, HUB, Source, Sources, parse_source
from backend.errors import ConnectionFailed, OperationFailed, RemoteError, UsageError
from backend.measure.judge import claim_word, floor_text
from backend.settings.model import HostConfig, Settings

# Words in a repo's name that say what it is, not which model it drafts for.
DRAFTER_WORDS = frozenset((
    "eagle", "eagle1", "eagle2", "eagle3", "eagle3.1", "dflash", "dflash2", "dspark", "mtp", "nextn", "draft",
    "drafter", "drafts", "speculator", "speculators", "spec", "medusa", "hydra", "head", "heads",
))  # fmt: skip
PACKING_WORDS = frozenset((
    "mla", "fp8", "fp4", "nvfp4", "mxfp4", "int4", "int8", "w4a8", "w8a8", "bf16", "fp16", "gguf", "awq", "gptq",
    "lora",
))  # fmt: skip
TOOL_WORDS = frozenset(("sglang", "vllm", "specforge", "torchspec", "lmsys"))
_NOISE = re.compile(r"^(?:b\d+|\d+l|\d+k|v\d+(?:\.\d+)?|phase\d*)$", re.I)  # block size, layers, vocab, version
ALGORITHM_WORDS = {"EAGLE": "eagle", "EAGLE3": "eagle", "DFLASH": "dflash", "DSPARK": "dspark", "NEXTN": "mtp"}
LIMIT = 100  # repos per query (the Hub's most downloaded first)
WORD_LIMIT = 30  # repos per query on an algorithm word alone: drafters for every model come back

# Tiers, best first (see the module docstring).
DRAFTER, TARGET_COPY, ADAPTER, GGUF, NOT_DRAFTER, UNREAD = (
    "drafter", "target copy", "adapter", "gguf", "not a drafter", "not read",
)  # fmt: skip


# --- names ---------------------------------------------------------------------------------------------------


def _words(name: str) -> list[str]:
    """A model or repo name's words in their own spelling: ``Kimi-K2.5-Eagle3`` → Kimi, K2.5, Eagle3."""
    name = name.rsplit("/", 1)[-1]
    name = re.sub(r"\.(gguf|safetensors)$", "", name, flags=re.I)
    return [w for w in re.split(r"[-_\s]+", name) if w]


def name_tokens(name: str) -> list[str]:
    """Words to compare names by: lower case, dots dropped (``Kimi-K2.5`` and ``Kimi_K25`` read the same)."""
    return [w.lower().replace(".", "") for w in _words(name)]


def trained_name(repo: str) -> str | None:
    """The model a drafter's repo name says it drafts for (``AQ-MedAI/Kimi-K2-Instruct-eagle3`` →
    ``Kimi-K2-Instruct``), None when the name has no drafter word to tell the model's name from the rest."""
    words = [w for w in _words(repo) if w.lower() not in TOOL_WORDS]
    marks = [i for i, w in enumerate(words) if w.lower() in DRAFTER_WORDS]
    if not marks:
        return None

    def model(part: list[str]) -> list[str]:
        return [w for w in part if w.lower() not in DRAFTER_WORDS | PACKING_WORDS and not _NOISE.match(w)]

    before, after = model(words[: marks[0]]), model(words[marks[0] + 1 :])
    chosen = before or after
    return "-".join(chosen) if chosen else None


def same_model(trained: str | None, target: str | None) -> bool | None:
    """Whether a drafter trained for ``trained`` is for ``target`` (by name): True when the target's words are
    in its name (``Kimi-K2.5-Thinking`` for ``Kimi-K2.5``), False when the names part (another generation or
    another model), None when either is unknown."""
    if not trained or not target:
        return None
    have, want = name_tokens(trained), name_tokens(target)
    if not have or not want:
        return None
    n = len(want)
    if any(have[i : i + n] == want for i in range(len(have) - n + 1)):
        return True
    return len(have) >= 2 and want[: len(have)] == have  # a shorter name of it (Kimi-K2 for Kimi-K2-Instruct)


def spellings(name: str) -> list[str]:
    """How repo ids write a model's name: as it is, and without the version's dot (``Kimi-K25``)."""
    out = [name]
    if "." in name and name.replace(".", "") not in out:
        out.append(name.replace(".", ""))
    return out


def family(name: str) -> str | None:
    """The name up to its version's minor part (``Kimi-K2.5`` → ``Kimi-K2``: its siblings and predecessors),
    or the first word when there is no dotted version; None when that is the name itself."""
    match = re.match(r"^(.*?\d+)\.\d+", name)
    prefix = match.group(1) if match else _words(name)[0] if _words(name) else None
    return prefix if prefix and prefix != name else None


# --- the target ----------------------------------------------------------------------------------------------


REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Target:
    """What the drafters are judged against: its name (for the search and for "trained for"), its repo on the
    Hub when known, its config.json (None until read, for a hub target) and where it came from."""

    label: str
    name: str | None
    repo: str | None
    config: dict[str, Any] | None
    source: str

    def to_json(self) -> dict[str, Any]:
        cfg = self.config or {}
        return {
            "name": self.name,
            "repo": self.repo,
            "source": self.source,
            "architectures": checkpoints.architectures(cfg),
            "model_type": cfg.get("model_type"),
        }


def _named(config: dict[str, Any] | None, fallback: str | None) -> tuple[str | None, str | None]:
    """(name, repo) from a config's ``_name_or_path`` (a repo id or a path), else from ``fallback``."""
    given = (config or {}).get("_name_or_path")
    if isinstance(given, str) and given.strip():
        given = given.strip().rstrip("/")
        repo = given if REPO_ID.match(given) and not given.startswith((".", "/")) else None
        return given.rsplit("/", 1)[-1], repo
    return (fallback.rstrip("/").rsplit("/", 1)[-1] if fallback else None), None


async def resolve_target(text: str | None, settings: Settings, host: HostConfig, sources: Sources) -> Target:
    """``--target`` → a Target: ``hf://org/name`` or ``org/name`` (read with the search), a folder or
    config.json on the host, ``file://PATH``; without one, the configured target folder on the host."""
    if text and (text.startswith(inspection.HUB_PREFIX) or (REPO_ID.match(text) and not text.startswith("."))):
        spec = text if text.startswith(inspection.HUB_PREFIX) else inspection.HUB_PREFIX + text
        repo, _ = inspection.parse_hub_spec(spec)
        return Target(text, repo.split("/", 1)[1], repo, None, spec)
    source = Source(HOST, settings.target, "configured target") if text is None else parse_source(text, settings, host)
    if source.kind == HUB:  # parse_source's hub form with a revision
        repo, _ = inspection.parse_hub_spec(source.location)
        return Target(text or repo, repo.split("/", 1)[1], repo, None, source.location)
    config = await sources.target_config(source)
    name, named_repo = _named(config, source.location)
    where = f"{source.location} on {host.name}" if source.kind == HOST else source.location
    return Target(source.label, name, named_repo, config, where)


def build_queries(target: Target, algorithms: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The Hub queries for a target: its repo named as base model in card metadata, its name as repo ids spell
    it, its family (siblings and predecessors: drafters for those are lookalikes to refuse), and the drafter
    words of the algorithms asked for (all of them by default)."""
    out: list[dict[str, Any]] = []
    if target.repo:
        out.append({"filter": [f"base_model:{target.repo}"], "sort": "downloads", "limit": LIMIT})
    names = spellings(target.name) if target.name else []
    for name in [*names, family(target.name) if target.name else None, _words(target.name)[0] if target.name else None]:
        if name and all(q.get("search") != name for q in out):
            out.append({"search": name, "sort": "downloads", "limit": LIMIT})
    wanted = list(algorithms) or list(ALGORITHM_WORDS)
    for word in dict.fromkeys(ALGORITHM_WORDS[a] for a in wanted if a in ALGORITHM_WORDS):
        out.append({"search": word, "sort": "downloads", "limit": WORD_LIMIT})
    return out


# --- one candidate -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One repo the search found, judged against the target."""

    repo: str
    kind: str
    algorithm: str | None
    trained_for: str | None
    trained_for_source: str | None
    for_target: bool | None
    compatible: bool
    problems: tuple[str, ...]
    notes: tuple[str, ...]
    unchecked: tuple[str, ...]
    card: Card
    size_bytes: int | None
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    gated: bool = False
    downloads: int | None = None
    files: tuple[str, ...] = ()  # what a download fetches: config.json and the weights
    params: int | None = None
    shape: dict[str, Any] = field(default_factory=dict)  # what the verdict compared: widths, vocabularies, dtypes

    @property
    def tier(self) -> int:
        if self.compatible:
            return {True: 0, None: 1, False: 2}[self.for_target]
        return {UNREAD: 3, DRAFTER: 4}.get(self.kind, 5)

    @property
    def headline(self) -> float | None:
        return self.card.headline

    def sort_key(self) -> tuple[int, bool, float, int, str]:
        claimed = self.headline
        return (self.tier, claimed is None, -(claimed or 0.0), -(self.downloads or 0), self.repo)

    def to_json(self, break_even: float | None = None) -> dict[str, Any]:
        claims = [c.to_json() for c in self.card.claims]
        if break_even is not None:
            for raw, claim in zip(claims, self.card.claims, strict=True):
                raw["versus_break_even"] = claim_verdict(claim, break_even)
        return {
            "repo": self.repo,
            "kind": self.kind,
            "algorithm": self.algorithm,
            "trained_for": self.trained_for,
            "trained_for_source": self.trained_for_source,
            "for_target": self.for_target,
            "compatible": self.compatible,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "unchecked": list(self.unchecked),
            "claims": claims,
            "claims_note": self.card.note,
            "claimed_accept_len": self.headline,
            "size_bytes": self.size_bytes,
            "params": self.params,
            "shape": self.shape,
            "architectures": list(self.architectures),
            "model_type": self.model_type,
            "gated": self.gated,
            "downloads": self.downloads,
            "files": list(self.files),
        }


def claim_verdict(claim: Claim, break_even: float) -> str | None:
    """A claim against this host's break-even (``judge.claim_word``); None for one without an accept length."""
    return None if claim.accept_len is None else claim_word(claim.accept_len, break_even)


def claim_line(claim: Claim, break_even: float) -> str:
    """``claims 3.20 on GSM8K at 3/1/4 (SGLang, 8×H200): above the break-even 2.46 if the cycle holds``."""
    on = f" on {claim.benchmark}" if claim.benchmark else ""
    if claim.accept_len is None:
        return f"claims a {claim.speedup:g}× speed-up{on} at {claim.config_text} (no accept length)"
    head = f"claims {claim.accept_len:.2f}{on} at {claim.config_text}"
    if (said := claim_verdict(claim, break_even)) == "above":
        return f"{head}: above the break-even {break_even:.2f} if the cycle holds"
    if said == "level":
        return f"{head}: level with the break-even {break_even:.2f} ({floor_text()}), no faster at this cycle"
    return f"{head}: below the break-even {break_even:.2f}, slower than no speculation at this cycle"


SHOWN_CLAIMS = 3  # claim lines per candidate in the text views (the JSON has all)


def describe(c: Candidate, break_even: float, lead: str = "") -> list[str]:
    """A candidate in words, as the CLI prints it and the panel shows it: what it needs and was trained for, its
    size, its card's claims beside the break-even (the latest column of a table of phases), then why it is
    refused, or its first note, and what was not checked."""
    trained = "trained for an unknown model" if c.trained_for is None else f"trained for {c.trained_for}"
    if c.for_target is False:
        trained += " (NOT the target)"
    size = human_bytes(c.size_bytes) if c.size_bytes is not None else "size unknown"
    lines = [f"{lead}{c.repo}: {c.algorithm or c.kind}, {trained}, {size}"]
    if c.shape and c.kind == DRAFTER:
        lines.append(f"    {shape_text(c.shape)}")
    claims = [cl for cl in c.card.claims if cl.accept_len is not None] or list(c.card.claims)
    last = claims[-1].config.get("label") if claims else None
    if last:  # columns of one table (training phases, configs): the last one is the card's latest
        claims = [cl for cl in claims if cl.config.get("label") == last]
    for claim in claims[:SHOWN_CLAIMS]:
        lines.append(f"    {claim_line(claim, break_even)}")
    if len(claims) > SHOWN_CLAIMS:
        lines.append(f"    … and {len(claims) - SHOWN_CLAIMS} more claims")
    if c.card.note:
        lines.append(f"    card: {c.card.note}")
    lines += [f"    problem: {p}" for p in c.problems]
    lines += [f"    note: {n}" for n in c.notes[: 1 if c.compatible else 0]]
    lines += [f"    not checked: {u}" for u in c.unchecked]
    return lines


def _trained_for(raw: dict[str, Any], kind: str) -> tuple[str | None, str | None]:
    """(the model a candidate was trained for, where that was read)."""
    verifier = (((raw.get("config") or {}).get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    if isinstance(verifier, str) and verifier:
        return verifier, "the config's verifier"
    card = raw.get("card_data") or {}
    base = card.get("base_model")
    base = base[0] if isinstance(base, list) and base else base
    if isinstance(base, str) and base:
        relation = card.get("base_model_relation") or next(
            (t.split(":")[1] for t in raw.get("tags") or [] if t.startswith("base_model:") and t.count(":") >= 2), None
        )
        parent = trained_name(base)
        if relation in ("quantized", "merge", "adapter") and parent and kind == DRAFTER:
            return parent, f"the card's base_model {base} ({relation}: a copy of that drafter), by its name"
        return base, "the card's base_model"
    named = trained_name(raw["repo"]) if kind == DRAFTER else None
    if named:
        return named, "the repo's name"
    return None, None


def shape_facts(config: dict[str, Any] | None, info: dict[str, Any] | None) -> dict[str, Any]:
    """The numbers the verdict compared, as the candidate carries them: hidden size, layers, head dim, vocabulary
    and draft vocabulary, the aux layers it reads, and its weights' bytes by dtype."""
    cfg, _ = checkpoints.drafter_config(config)
    lang = checkpoints.language_config(cfg) or {}
    out: dict[str, Any] = {
        key: lang[key]
        for key in ("hidden_size", "num_hidden_layers", "head_dim", "vocab_size", "draft_vocab_size")
        if isinstance(lang.get(key), int)
    }
    aux = ((cfg or {}).get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    aux = aux if aux is not None else ((cfg or {}).get("dflash_config") or {}).get("target_layer_ids")
    if isinstance(aux, list):
        out["aux_layers"] = aux
    if info is not None:
        dtypes: dict[str, int] = {}
        for tensor in info["tensors"].values():
            dtypes[tensor["dtype"]] = dtypes.get(tensor["dtype"], 0) + tensor["bytes"]
        out["bytes_by_dtype"] = dtypes
    return out


def shape_text(shape: dict[str, Any]) -> str:
    """``hidden 7168, 1 layer, head_dim 128, vocab 163840 (draft 32000), aux layers [2, 30, 58], BF16``."""
    parts = []
    if "hidden_size" in shape:
        parts.append(f"hidden {shape['hidden_size']}")
    if "num_hidden_layers" in shape:
        layers = shape["num_hidden_layers"]
        parts.append(f"{layers} layer{'s' if layers != 1 else ''}")
    if "head_dim" in shape:
        parts.append(f"head_dim {shape['head_dim']}")
    if "vocab_size" in shape:
        draft = shape.get("draft_vocab_size")
        extra = f" (draft {draft})" if draft and draft != shape["vocab_size"] else ""
        parts.append(f"vocab {shape['vocab_size']}{extra}")
    if "aux_layers" in shape:
        parts.append(f"aux layers {shape['aux_layers']}")
    if shape.get("bytes_by_dtype"):
        parts.append("/".join(sorted(shape["bytes_by_dtype"], key=lambda d: -shape["bytes_by_dtype"][d])))
    return ", ".join(parts)


def _lookalike(raw: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, why) for a repo the Hub's file list alone shows is no SGLang drafter; None to judge it."""
    names = raw.get("siblings") or []
    if any(n.endswith(".gguf") for n in names) and not any(n.endswith(".safetensors") for n in names):
        return GGUF, "GGUF files only (llama.cpp and the like): SGLang loads a safetensors checkpoint"
    if "adapter_config.json" in names and "config.json" not in names:
        return ADAPTER, "a LoRA adapter (adapter_config.json), not a drafter: it changes a base model's weights"
    if "config.json" not in names and not any(n.endswith(".safetensors") for n in names):
        return NOT_DRAFTER, "no config.json and no safetensors: nothing SGLang could load"
    return None


def judge(raw: dict[str, Any], target: Target, sglang_version: str | None, known_version: bool) -> Candidate:
    """One raw search result → a Candidate (see the module docstring for what is judged)."""
    errors = raw.get("errors") or []
    problems: list[str] = []
    notes: list[str] = []
    unchecked: list[str] = []
    info = None
    readme_error = next((e for e in errors if e.get("what") == "README.md"), None)
    card = parse_card(raw.get("readme")) if "README.md" in (raw.get("siblings") or []) else Card((), "no model card")
    if readme_error is not None:
        card = Card((), f"card not read ({readme_error['message']})")
    algorithm = None
    blocking = next((e for e in errors if e.get("kind") in (hub_search.GATED, hub_search.NOT_FOUND)), None)
    lookalike = _lookalike(raw)
    if blocking is not None:
        kind = UNREAD
        if blocking["kind"] == hub_search.GATED:
            problems.append(
                "gated: its files were not read; request access on its Hub page and set HF_TOKEN where the "
                "search runs, then search again"
            )
        else:
            problems.append(f"not found or private: {blocking['message']}")
    elif lookalike is not None:
        kind = lookalike[0]
        problems.append(lookalike[1])
    else:
        kind = DRAFTER
        for err in errors:
            problems.append(f"{err['what']}: {err['message']}")
        headers = raw.get("headers")
        if headers is not None:
            read: list[tuple[str, int | None, dict[str, Any]]] = [
                (h["name"], None, {"__metadata__": h.get("metadata"), **h["tensors"]}) for h in headers
            ]
            try:
                spec, weight_map = f"hf://{raw['repo']}", raw.get("weight_map")
                info = inspection.hub_result(spec, raw.get("config"), read, weight_map, [], raw.get("index_metadata"))
            except UsageError as exc:
                problems.append(f"a safetensors header is corrupt: {exc}")
        if problems:  # the shapes could not be read: no verdict on tensors that were never seen
            algorithm = checkpoints.drafter_kind({"config": raw.get("config")})
            unchecked.append("tensor shapes: the safetensors headers were not read")
        else:
            if raw.get("skipped"):
                notes.append(raw["skipped"])
            drafter = info or {"path": f"hf://{raw['repo']}", "config": raw.get("config"), "tensors": {}}
            judged = checkpoints.verdict(drafter, target.config)
            algorithm = judged["algorithm"]
            kind = {"target copy": TARGET_COPY, "language model": NOT_DRAFTER}.get(judged["kind"], DRAFTER)
            if algorithm == "STANDALONE":
                kind = DRAFTER
            problems += judged["problems"]
            if judged["compatible"] is None:  # nothing wrong seen, but its tensors were not: not offered
                problems.append("not checked: " + (judged["unchecked"] or ["its tensor shapes"])[-1])
            notes += judged["notes"]
            unchecked += judged["unchecked"]
    trained_for, trained_from = _trained_for(raw, kind)
    for_target = same_model(trained_for, target.name) if kind == DRAFTER else None
    if kind == DRAFTER and for_target is False:
        finding = f"trained for {trained_for}, not {target.name} (from {trained_from})"
        if not problems:  # it loads, which is what makes it a trap
            finding += ": the shapes fit, but the hidden states it learned from are another model's"
        notes.insert(0, finding)
    elif kind == DRAFTER and for_target is None and target.name:
        notes.insert(0, "which model it was trained for is not said (no base_model, no name to read): measure it")
    if kind == DRAFTER and algorithm:
        archs = checkpoints.architectures(raw.get("config"))
        serve = serve_problem(algorithm, archs, sglang_version, known_version)
        if serve:
            (problems if serve[0] == "problem" else unchecked).append(serve[1])
    cfg = raw.get("config") or {}
    compatible = kind == DRAFTER and not problems and algorithm is not None
    files: tuple[str, ...] = ()
    if info is not None:
        weights = [f["name"] for f in info["files"]]
        index = ["model.safetensors.index.json"] if raw.get("weight_map") else []
        files = tuple(["config.json", *index, *weights] if raw.get("config") is not None else [*index, *weights])
    return Candidate(
        repo=raw["repo"],
        kind=kind,
        algorithm=algorithm,
        trained_for=trained_for,
        trained_for_source=trained_from,
        for_target=for_target,
        compatible=compatible,
        problems=tuple(problems),
        notes=tuple(notes),
        unchecked=tuple(unchecked),
        card=card,
        size_bytes=info["total_bytes"] if info is not None else None,
        architectures=tuple(checkpoints.architectures(cfg)),
        model_type=cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None,
        gated=bool(raw.get("gated")),
        downloads=raw.get("downloads"),
        files=files,
        params=info["total_params"] if info is not None else raw.get("parameters_total"),
        shape=shape_facts(raw.get("config"), info),
    )


# Draft classes SGLang registered before 0.5.23 too (the older releases' algorithms list them by name).
_LONG_KNOWN = {"LlamaForCausalLMEagle3", "LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle", "MistralForCausalLMEagle"}


def serve_problem(algorithm: str, archs: list[str], version: str | None, known_version: bool) -> tuple[str, str] | None:
    """Whether the host's SGLang release takes the algorithm (and the draft class): ("problem", why),
    ("unchecked", why) or None."""
    from backend.sglang.flags import speculative_algorithms as algorithms_of
    from backend.sglang.flags import table

    if not known_version:
        return "unchecked", "the host's SGLang release is not known here, so whether it serves this was not checked"
    if version is None:
        return "problem", "SGLang is not installed on the host"
    takes = algorithms_of(version)
    if algorithm not in takes:
        return "problem", (
            f"SGLang {version} on the host has no --speculative-algorithm {algorithm} (it takes {', '.join(takes)})"
        )
    read = table(version).version
    new = [a for a in archs if a in checkpoints.DRAFT_ARCHITECTURES and a not in _LONG_KNOWN]
    if new and read != "0.5.23":
        return "unchecked", (
            f"whether SGLang {version} registers {new[0]} is not known here (the draft classes were read from 0.5.23)"
        )
    return None


# --- the search ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A finished search: the target, where it ran, what it asked, and the candidates best first."""

    target: Target
    where: str  # "client" or "host"
    endpoint: str
    queries: tuple[dict[str, Any], ...]
    seconds: float
    sglang_version: str | None
    break_even: float
    break_even_source: str
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target.to_json(),
            "searched": {
                "where": self.where,
                "endpoint": self.endpoint,
                "queries": list(self.queries),
                "candidates": len(self.candidates),
                "seconds": self.seconds,
            },
            "sglang_version": self.sglang_version,
            "break_even": {"accept_len": round(self.break_even, 4), "source": self.break_even_source},
            "candidates": [c.to_json(self.break_even) for c in self.candidates],
        }

    def candidate(self, repo: str) -> Candidate | None:
        return next((c for c in self.candidates if c.repo == repo), None)


def _search_error(exc: hub_search.HubSearchError | RemoteError, where: str, endpoint: str) -> Exception:
    """One sentence for a search that could not run; exit 2 for no route, a rate limit or a missing library."""
    kind = exc.kind if isinstance(exc, hub_search.HubSearchError) else exc.data.get("reason")
    data = exc.data
    if kind == hub_search.RATE_LIMITED:
        wait = f", retry after {data['retry_after']} s" if data.get("retry_after") is not None else ""
        return UsageError(
            f"the hub at {endpoint} is rate-limiting {where} (HTTP 429{wait}); wait and search again, or set "
            "HF_TOKEN there for a higher limit"
        )
    if kind == hub_search.OFFLINE:
        return UsageError(f"{where} cannot reach the hub at {endpoint} ({exc}); check the network and HF_ENDPOINT")
    if kind == hub_search.NO_LIBRARY:
        return UsageError(str(exc))
    return OperationFailed(f"the hub at {endpoint} refused the search from {where}: {exc}")


async def gather(params: dict[str, Any], where: str, sources: Sources) -> tuple[dict[str, Any], str]:
    """Run the search here (``client``), on the host (``host``), or here and on the host when this machine has
    no route to the Hub (``auto``); returns (the raw result, where it ran)."""
    endpoint = params.get("endpoint") or "the default hub (HF_ENDPOINT or huggingface.co)"
    here = None
    if where in ("auto", "client"):
        try:
            return await asyncio.to_thread(hub_search.search, **params), "client"
        except hub_search.HubSearchError as exc:
            if where == "client" or exc.kind != hub_search.OFFLINE:
                raise _search_error(exc, "this machine", endpoint) from None
            here = exc
    try:
        conn = await sources.connection()
    except ConnectionFailed as exc:
        if here is None:
            raise
        raise UsageError(
            f"this machine cannot reach the hub at {endpoint} ({here}) and the host cannot be reached to search "
            f"from there ({exc})"
        ) from None
    try:
        return await conn.call("hub.search", deadline=600, **params), "host"
    except RemoteError as exc:
        if exc.data.get("reason") is None:
            raise
        error = _search_error(exc, f"the host {sources.host.name}", endpoint)
        if here is not None and exc.data.get("reason") == hub_search.OFFLINE:
            error = UsageError(
                f"neither this machine nor {sources.host.name} can reach the hub at {endpoint} (here: {here}; "
                f"there: {exc}); check the network and HF_ENDPOINT"
            )
        raise error from None


async def host_sglang_version(host: HostConfig, sources: Sources) -> tuple[str | None, bool]:
    """(the SGLang release the host runs, whether that is known): the simulator's without a connection, else the
    host's ``info`` (best effort: an unreachable host leaves it unknown)."""
    from backend.serve.command_line import host_sglang_version as version_of
    from backend.serve.host_info import host_info

    if host.launcher == "simulator":
        return version_of(host, None), True
    try:
        conn = await sources.connection()
        return version_of(host, await host_info(conn)), True
    except (ConnectionFailed, RemoteError, OSError):
        return None, False


def break_even(settings: Settings) -> tuple[float, str]:
    """This host's break-even accept length (the history's measured baseline, else the configured one)."""
    from backend.history import load_yardstick

    ref = settings.reference
    yardstick = load_yardstick(ref.baseline_tok_s, ref.cycle_ms)
    return yardstick.break_even, f"{yardstick.source} baseline, {ref.cycle_ms:g} ms cycle"


async def find(
    settings: Settings,
    host: HostConfig,
    sources: Sources,
    target_text: str | None = None,
    algorithms: Iterable[str] = (),
    where: str = "auto",
    repos: Iterable[str] = (),
    search: bool = True,
) -> Found:
    """Search the Hub for the target's drafters and judge each; ``repos`` are read too, found or not (only they,
    without ``search``)."""
    algorithms = [a.upper() for a in algorithms]
    repos = list(repos)
    target = await resolve_target(target_text, settings, host, sources)
    wanted = [*([target.repo] if target.repo and target.config is None else []), *repos]
    queries = build_queries(target, algorithms) if search else []
    params = {"queries": queries, "repos": list(dict.fromkeys(wanted))}
    if sources.endpoint:
        params["endpoint"] = sources.endpoint
    searched, asked = gather(params, where, sources), host_sglang_version(host, sources)
    (raw, ran), (version, known) = await asyncio.gather(searched, asked)
    if target.config is None:
        target = _hub_target(target, raw)
    line, line_source = break_even(settings)
    judged = [judge(item, target, version, known) for item in raw["candidates"] if item["repo"] != target.repo]
    if algorithms:
        judged = [c for c in judged if c.algorithm in algorithms or c.repo in repos]
    return Found(
        target=target,
        where=ran,
        endpoint=raw["endpoint"],
        queries=tuple(raw["queries"]),
        seconds=raw["seconds"],
        sglang_version=version,
        break_even=line,
        break_even_source=line_source,
        candidates=tuple(sorted(judged, key=Candidate.sort_key)),
    )


def _hub_target(target: Target, raw: dict[str, Any]) -> Target:
    """The hub target with the config.json the search read for it; a target that cannot be read is bad input."""
    item = next((c for c in raw["candidates"] if c["repo"] == target.repo), None)
    why = None
    if item is None:
        why = "the search did not return it"
    elif item.get("errors"):
        err = item["errors"][0]
        why = {"gated": "gated or private: set HF_TOKEN to a token with access"}.get(err["kind"], err["message"])
    elif item.get("config") is None:
        why = "it has no config.json"
    if why or item is None:
        raise UsageError(f"the target {target.source} could not be read ({why}); name a model repo or folder")
    name, _ = _named(item["config"], target.repo)
    return Target(target.label, target.name or name, target.repo, item["config"], target.source)


# --- from a found drafter to the operator's set-up -------------------------------------------------------------

DEFAULT_NUMBERS = {"EAGLE3": (3, 1, 4), "EAGLE": (3, 1, 4), "STANDALONE": (3, 1, 4)}  # steps, topk, draft tokens


def default_name(repo: str, settings: Settings) -> str:
    """A configured drafter's name for ``repo``: the one it already has, else its repo name as a TOML bare
    key (``kimi-k25-eagle3``), with the owner in front when another repo has that name."""
    for name, drafter in settings.drafters.items():
        if drafter.repo == repo:
            return name
    owner, base = (re.sub(r"[^a-z0-9_-]+", "-", part.lower()).strip("-") for part in repo.split("/", 1))
    if base not in settings.drafters:
        return base
    return f"{owner}-{base}"


def profile_values(algorithm: str, card: Card) -> tuple[dict[str, Any], str]:
    """The profile fields a drafter of ``algorithm`` is served with, and where they came from: the steps, topk
    and draft tokens (or a DFLASH block) its card's claims were measured at, else the algorithm's usual ones,
    else none (SGLang picks them: a block drafter's from its config)."""
    values: dict[str, Any] = {"algorithm": algorithm}
    numbers = card_numbers(card)
    block = next((c.config["block_size"] for c in card.claims if isinstance(c.config.get("block_size"), int)), None)
    if algorithm == "DFLASH" and block is not None:
        return {**values, "dflash_block_size": block}, "the card's claims"
    if algorithm in DEFAULT_NUMBERS:
        steps, topk, draft = numbers or DEFAULT_NUMBERS[algorithm]
        values.update(steps=steps, topk=topk, draft_tokens=draft)
        return values, "the card's claims" if numbers else f"{algorithm}'s usual numbers"
    return values, "SGLang's defaults"


def card_numbers(card: Card) -> tuple[int, int, int] | None:
    """The steps/topk/draft tokens most of the card's claims were measured at, None when it names none."""
    seen = [
        (c.config["steps"], c.config["topk"], c.config["draft_tokens"])
        for c in card.claims
        if all(isinstance(c.config.get(k), int) for k in ("steps", "topk", "draft_tokens"))
    ]
    return max(set(seen), key=seen.count) if seen else None


@dataclass(frozen=True)
class Added:
    """What ``add`` wrote: the drafter, the profile that serves it (None, and why, when none could be written)
    and the config file."""

    settings: Settings
    drafter: Any  # settings.DrafterConfig
    profile: Any  # settings.ProfileConfig | None
    profile_note: str | None
    path: str

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "config": self.path,
            "drafter": asdict(self.drafter),
            "profile": asdict(self.profile) if self.profile is not None else None,
            "profile_note": self.profile_note,
        }


def add(
    candidate: Candidate,
    settings: Settings,
    host: HostConfig,
    name: str | None = None,
    profile: str | None = None,
    force: bool = False,
) -> Added:
    """Write ``[drafters.NAME]`` for a found drafter (its repo, a folder under the host's workdir, the files a
    download fetches) and a profile serving it with its card's numbers (or the algorithm's usual ones), into
    the config file, comments kept (``settings.save_drafter``/``save_profile``). A candidate that cannot serve
    the target is refused unless ``force``. The download is the caller's (``downloads.drafter_request``)."""
    from backend.settings.config_file import save_drafter, save_profile
    from backend.settings.model import ALGORITHMS, DrafterConfig, ProfileConfig

    if not candidate.compatible and not force:
        why = candidate.problems[0] if candidate.problems else "its algorithm is not known"
        raise UsageError(f"{candidate.repo} cannot serve the target: {why}; pass --force to add it anyway")
    name = name or default_name(candidate.repo, settings)
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise UsageError(f"{name!r} is not a drafter name: use letters, digits, '-' and '_'")
    existing = settings.drafters.get(name)
    if existing is not None and existing.repo != candidate.repo:
        raise UsageError(
            f"drafter {name} is configured already for {existing.repo or existing.path}: pick another --name"
        )
    files = candidate.files or DrafterConfig.files
    path = existing.path if existing is not None else f"{host.workdir.rstrip('/')}/drafters/{name}"
    drafter = DrafterConfig(name=name, path=path, repo=candidate.repo, files=tuple(files))
    settings, written = save_drafter(settings, drafter)
    algorithm = candidate.algorithm
    if algorithm not in ALGORITHMS:
        what = algorithm or "an unknown algorithm"
        note: str | None = f"no profile written: specdeck's profiles take {', '.join(ALGORITHMS)}, not {what}"
        return Added(settings, settings.drafters[name], None, note, str(written))
    serving = [p.name for p in settings.profiles.values() if p.drafter == name and p.algorithm == algorithm]
    profile_name = profile or (serving[0] if serving else f"{algorithm.lower()}-{name}")
    current = settings.profiles.get(profile_name)
    if current is not None and current.drafter != name:
        raise UsageError(
            f"profile {profile_name} serves {current.drafter or 'no drafter'} already: pick another --profile"
        )
    values, source = profile_values(algorithm, candidate.card)
    if current is None:
        settings, written = save_profile(settings, ProfileConfig(name=profile_name, drafter=name, **values))
    shown = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in values.items() if k != "algorithm") or "SGLang's own"
    note = f"profile {profile_name}: {algorithm}, {shown} from {source}" if current is None else None
    return Added(settings, settings.drafters[name], settings.profiles[profile_name], note, str(written))
