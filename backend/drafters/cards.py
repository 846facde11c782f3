"""What a drafter's model card claims: accept lengths per benchmark read from its markdown tables, with the
configuration they were measured at where the card says it (in the table, or in the lines before it).

These are published claims, never measurements: they are shown beside this host's break-even, labelled as the
card's. A card without a table of accept lengths says so (``Card.note``).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

# A header or row label that names an accept length (and not a rate: those are percentages of another thing).
_ACCEPT = re.compile(
    r"accept(?:ance|ed)?[\s_-]*len(?:gth)?|\bacc\.?\s*len\b|\bτ\b|\btau\b|\bmean accepted tokens\b", re.I
)
_RATE = re.compile(r"\brate\b|%", re.I)
_BENCH = re.compile(r"bench(?:mark)?|data\s*set|\btask\b|\beval", re.I)
_SPEEDUP = re.compile(r"speed[\s-]*up", re.I)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_ENGINES = (("sglang", "SGLang"), ("vllm", "vLLM"), ("tensorrt-llm", "TensorRT-LLM"), ("trt-llm", "TensorRT-LLM"))
_GPUS = r"H100|H200|H20|H800|B200|B300|GB200|GB300|A100|L40S|MI300X|MI325X|MI350X|MI355X|RTX\s*\d{4}|\d{4}"
_HARDWARE = re.compile(rf"(\d+)\s*[x×]\s*(?:NVIDIA\s+|AMD\s+)?({_GPUS})\b", re.I)
# The configuration a card names, in text or as SGLang flags: (key, pattern of its value).
_CONFIG = (
    ("steps", re.compile(r"(?:--speculative-num-steps|num[_ ]steps|\bsteps)\s*[=:]?\s*(\d+)\b(?!\s*k)", re.I)),
    ("topk", re.compile(r"(?:--speculative-eagle-topk|top[_-]?k)\s*[=:]?\s*(\d+)\b", re.I)),
    (
        "draft_tokens",
        re.compile(r"(?:--speculative-num-draft-tokens|num[_ ]draft[_ ]tokens|draft[_ ]tokens)\s*[=:]?\s*(\d+)", re.I),
    ),
    ("block_size", re.compile(r"block[ _-]size\s*[=:]?\s*(\d+)", re.I)),
)
# Table columns that carry part of the configuration, by header.
_CONFIG_COLUMNS = (
    ("draft_tokens", re.compile(r"draft\s*tokens|num_speculative_tokens", re.I)),
    ("steps", re.compile(r"^steps$|num[_ ]steps|draft\s*length", re.I)),
    ("topk", re.compile(r"top[_-]?k", re.I)),
    ("engine", re.compile(r"engine|framework|backend", re.I)),
    ("hardware", re.compile(r"\bgpus?\b|hardware", re.I)),
)


@dataclass(frozen=True)
class Claim:
    """One published figure: ``accept_len`` (or only a ``speedup``) on ``benchmark``, at ``config``."""

    benchmark: str | None
    accept_len: float | None
    config: dict[str, Any] = field(default_factory=dict)
    speedup: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"benchmark": self.benchmark, "accept_len": self.accept_len, "config": self.config}
        if self.speedup is not None:
            out["speedup"] = self.speedup
        return out

    @property
    def config_text(self) -> str:
        """``3/1/4 (SGLang, 8×H200)`` (steps/topk/draft tokens), ``block 8 (SGLang)``, or ``config not
        stated``."""
        c = self.config
        if c.get("steps") is not None or c.get("topk") is not None:
            head = "/".join("?" if c.get(k) is None else str(c[k]) for k in ("steps", "topk", "draft_tokens"))
        elif c.get("block_size") is not None or c.get("draft_tokens") is not None:
            head = f"block {c.get('block_size') or c['draft_tokens']}"
        else:
            head = "config not stated"
        extra = [str(c[k]) for k in ("engine", "hardware") if c.get(k)]
        if c.get("label"):
            extra.append(str(c["label"]))
        return head + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class Card:
    """The claims of one card; ``note`` says why there are none (no card, no table, tables without accept
    lengths)."""

    claims: tuple[Claim, ...]
    note: str | None = None

    @property
    def headline(self) -> float | None:
        """The median claimed accept length (what candidates are ranked by), None without one."""
        values = [c.accept_len for c in self.claims if c.accept_len is not None]
        return statistics.median(values) if values else None


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [_plain(c) for c in re.split(r"(?<!\\)\|", body)]


def _plain(cell: str) -> str:
    """A cell without markdown emphasis, code marks or links."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", cell)
    return re.sub(r"[*`_]{1,3}(?=\S)|(?<=\S)[*`_]{1,3}", "", text).replace("\\|", "|").strip()


def _is_separator(cells: list[str]) -> bool:
    return bool(cells) and all(re.fullmatch(r":?-{2,}:?", c.replace(" ", "")) for c in cells if c)


def tables(text: str) -> list[tuple[list[str], list[list[str]], str]]:
    """Each markdown table of ``text``: (header, rows, the text before it back to the previous table or
    heading of its level), in order."""
    lines = text.splitlines()
    out = []
    i, context_start = 0, 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and _is_separator(_cells(lines[i + 1])):
            header = _cells(lines[i])
            j = i + 2
            rows = []
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                rows.append(_cells(lines[j]))
                j += 1
            before = [ln for ln in lines[context_start:i] if not ln.lstrip().startswith("|")]
            out.append((header, rows, "\n".join(before)))
            i = context_start = j
            continue
        if re.match(r"#{1,3}\s", lines[i]):
            context_start = i
        i += 1
    return out


def _number(cell: str) -> float | None:
    if not cell or _RATE.search(cell):
        return None
    match = _NUMBER.search(cell.replace(",", ""))
    return float(match.group()) if match else None


def _benchmark(cell: str) -> str:
    """``HumanEval (Code)`` → ``HumanEval``: the name, without a trailing remark."""
    name = re.sub(r"\s*\([^)]*\)\s*$", "", cell).strip()
    return name or cell.strip()


def context_config(text: str) -> dict[str, Any]:
    """The configuration a card's text states: steps, topk, draft tokens, block size, engine, hardware."""
    out: dict[str, Any] = {}
    for key, pattern in _CONFIG:
        match = pattern.search(text)
        if match:
            out[key] = int(match.group(1))
    lowered = text.lower()
    for word, name in _ENGINES:
        if word in lowered:
            out["engine"] = name
            break
    hardware = _HARDWARE.search(text)
    if hardware:
        gpu = re.sub(r"\s+", " ", hardware.group(2)).upper()
        out["hardware"] = f"{hardware.group(1)}×{gpu}"
    return out


def _row_config(header: list[str], row: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, name in enumerate(header):
        if i >= len(row) or not row[i] or _ACCEPT.search(name):
            continue
        for key, pattern in _CONFIG_COLUMNS:
            if pattern.search(name):
                value = row[i]
                number = _number(value) if key in ("steps", "topk", "draft_tokens") else None
                out[key] = int(number) if number is not None else value
                break
    return out


def _table_claims(header: list[str], rows: list[list[str]], before: str) -> list[Claim]:
    base = context_config(before)
    lowered = [h.lower() for h in header]
    bench = next((i for i, h in enumerate(header) if _BENCH.search(h)), None)
    accept = [i for i, h in enumerate(header) if _ACCEPT.search(h) and not _RATE.search(h)]
    speed = [i for i, h in enumerate(header) if _SPEEDUP.search(h)]
    if not accept and _ACCEPT.search(before):
        # The text says the figures are accept lengths and the columns name phases or configs: every column
        # of plausible lengths (1 to 20, not counts) is one.
        accept = [
            i
            for i in range(len(header))
            if i != bench
            and lowered[i] not in ("n", "#", "count", "samples")
            and rows
            and all((v := _number(r[i] if i < len(r) else "")) is not None and 1.0 <= v <= 20.0 for r in rows)
        ]
    claims = []
    if accept or speed:
        first = bench if bench is not None else 0
        for row in rows:
            config = {**base, **_row_config(header, row)}
            name = _benchmark(row[first]) if bench is not None and first < len(row) else None
            if bench is None and row and row[0]:
                config["label"] = f"{header[0]} {row[0]}"  # what the row is, a concurrency or a config
            speedup = _number(row[speed[0]]) if speed and speed[0] < len(row) else None
            columns: list[int | None] = list(accept) if accept else [None]
            for i in columns:
                value = _number(row[i]) if i is not None and i < len(row) else None
                if value is None and speedup is None:
                    continue
                label = header[i] if i is not None and len(accept) > 1 else None
                claims.append(Claim(name, value, {**config, **({"label": label} if label else {})}, speedup))
    return claims


def parse_card(readme: str | None) -> Card:
    """The claims of a model card (its README.md's text; None when the repo has no card)."""
    if readme is None:
        return Card((), "no model card")
    body = re.sub(r"\A---\n.*?\n---\n", "", readme, flags=re.S)  # the front matter is metadata, not claims
    found = tables(body)
    claims = [claim for header, rows, before in found for claim in _table_claims(header, rows, before)]
    if claims:
        return Card(tuple(claims))
    if not found:
        return Card((), "the card has no table of claims")
    return Card((), "the card's tables give no accept length")
