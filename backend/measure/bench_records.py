"""Sweeps run elsewhere, as the advisor's measured points: the JSON-lines that SGLang's
``scripts/playground/bench_speculative.py`` appends (one record per config: ``batch_size``, ``steps``, ``topk``,
``num_draft_tokens``, ``acc_length``, ``step_time`` in seconds, the 20th percentile of ``step_time_dict``, and
``speed`` = acc_length / step_time, tokens per second of one request), or a CSV with the same column names.

A record with steps, topk and draft tokens all 0 is bench_speculative's plain decoding: its step time is the
plain decode step. Records at topk 1 with draft tokens other than steps + 1 (a cut chain) are set aside (the
advisor models full chains); a topk > 1 record is refused (a tree is not a chain).

Other benchmarks' output given by mistake is named, with what it says, rather than refused as a bad CSV:
``sglang.bench_serving``'s result block (and its 2026 speculative-decoding section), and
``bench_one_batch_server``'s JSON lines (``acc_length`` -1 there means no speculation).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.errors import UsageError

FIELDS = ("batch_size", "steps", "topk", "num_draft_tokens", "acc_length", "step_time", "speed")
INTS = ("batch_size", "steps", "topk", "num_draft_tokens")


@dataclass(frozen=True)
class BenchRecord:
    line: int  # where it is in the file (1-based line, the CSV header being line 1)
    batch_size: int
    steps: int
    topk: int
    num_draft_tokens: int
    acc_length: float
    step_time: float  # seconds per decode step (a verify cycle with speculation)
    speed: float  # tok/s of one request

    @property
    def plain(self) -> bool:
        return self.steps == 0 and self.topk == 0 and self.num_draft_tokens == 0


@dataclass(frozen=True)
class BenchSweep:
    """The records of one batch size, split into what the advisor reads."""

    path: str
    batch_size: int
    plain: BenchRecord | None
    chains: list[BenchRecord]
    set_aside: list[BenchRecord]  # topk 1, draft tokens ≠ steps + 1
    other_batches: list[int]


def _record(raw: object, line: int, where: str) -> BenchRecord:
    if not isinstance(raw, dict):
        raise UsageError(f"record at {where} line {line} is not an object; bench_speculative.py writes one per line.")
    values: dict[str, float] = {}
    for key in FIELDS:
        if raw.get(key) in (None, ""):
            raise UsageError(
                f"record at {where} line {line} has no {key!r}: bench_speculative.py records carry {', '.join(FIELDS)}."
            )
        try:
            value = float(raw[key])
        except (TypeError, ValueError):
            raise UsageError(f"record at {where} line {line}: {key!r} is {raw[key]!r}, not a number.") from None
        if not math.isfinite(value) or value < 0 or (key in INTS and value != int(value)):
            raise UsageError(f"record at {where} line {line}: {key!r} is {raw[key]!r}, not a number of at least 0.")
        values[key] = value
    batch_size, steps, topk, draft_tokens = (int(values[k]) for k in INTS)
    rec = BenchRecord(
        line, batch_size, steps, topk, draft_tokens, values["acc_length"], values["step_time"], values["speed"]
    )
    if rec.topk > 1:
        raise UsageError(
            f"record at {where} line {line} has topk {rec.topk}: the advisor models chains (topk 1); "
            "drop the tree records or rerun bench_speculative.py with --topk 1."
        )
    if not rec.plain and (rec.steps < 1 or rec.topk != 1 or rec.step_time <= 0 or rec.acc_length < 1):
        raise UsageError(
            f"record at {where} line {line}: steps {rec.steps}, topk {rec.topk}, step_time {rec.step_time}, "
            f"acc_length {rec.acc_length} is neither plain decoding (all 0) nor a chain (steps >= 1, topk 1)."
        )
    if rec.plain and rec.step_time <= 0:
        raise UsageError(f"record at {where} line {line}: plain decoding with step_time {rec.step_time}.")
    return rec


_NEEDS = (
    "the advisor needs scripts/playground/bench_speculative.py's records (its --output file, JSON lines: "
    "batch_size, steps, topk, num_draft_tokens, acc_length, step_time, speed per configuration)"
)
# bench_serving's result block: "Label (unit):   value" lines between its rules (values may be cut off).
_SERVING = re.compile(r"([A-Z][\w ()/%.-]*?):[ \t]*(\S(?:.*\S)?)?[ \t]*")
_SERVING_MARKS = ("Serving Benchmark Result", "Speculative Decoding", "Successful requests:", "Benchmark duration (s):")


def _bench_serving(text: str, where: str) -> str | None:
    """What a bench_serving result block says, as the sentence refusing it; None when it is not one."""
    if not any(mark in text for mark in _SERVING_MARKS):
        return None
    fields: dict[str, str] = {}
    cut: list[str] = []
    for line in text.splitlines():
        found = _SERVING.fullmatch(line.strip())
        if found and not line.lstrip().startswith("#"):
            fields.setdefault(found.group(1), found.group(2) or "")
            if not found.group(2):
                cut.append(found.group(1))
    said = []
    for label, what in (
        ("Successful requests", "{} requests"),
        ("Benchmark duration (s)", "in {} s"),
        ("Output token throughput (tok/s)", "output {} tok/s"),
        ("Accept length", "accept length {}"),
        ("Acceptance length (server)", "accept length {} (server)"),
        ("Acceptance rate (%)", "acceptance rate {}%"),
    ):
        if fields.get(label):
            said.append(what.format(fields[label]))
    concurrency = next((v for k, v in fields.items() if re.fullmatch(r"Max re\w+ concurrency", k)), None)
    if concurrency:
        said.append(f"max concurrency {concurrency}")
    drafts, accepted, tokens = (_number(fields.get(k)) for k in ("Drafts", "Accepted tokens", "Draft tokens"))
    if drafts and tokens and accepted is not None:
        said.append(
            f"its draft counts give {accepted / tokens:.2%} accepted and an accept length of "
            f"{(accepted + drafts) / drafts:.2f} (accepted + one bonus token per draft)"
        )
    cut_note = f"; {', '.join(cut[:3])} without {'its value' if len(cut) == 1 else 'values'} (cut?)" if cut else ""
    return (
        f"{where} is sglang.bench_serving's result block ({', '.join(said) or 'no figure read'}{cut_note}), a "
        f"serving benchmark over many requests, not step times per speculative configuration: {_NEEDS}."
    )


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _one_batch(rows: list[dict[str, Any]], where: str) -> str | None:
    """What bench_one_batch_server's records say, as the sentence refusing them; None when they are not its."""
    if not rows or not all({"input_len", "output_len", "latency", "output_throughput"} <= set(r) for r in rows):
        return None
    said = [f"batch {r.get('batch_size')}: output {r.get('output_throughput')} tok/s" for r in rows[:4]]
    plain = [r for r in rows if r.get("acc_length") == -1]
    note = f"; acc_length -1 in {len(plain)} of them: no speculation, not an accept length" if plain else ""
    return (
        f"{where} holds bench_one_batch_server's records ({'; '.join(said)}{note}), one batch's latency and "
        f"throughput each, not step times per speculative configuration: {_NEEDS}."
    )


def parse(text: str, where: str) -> list[BenchRecord]:
    """Records from JSON lines (a first character ``{``) or a CSV with the same columns; another benchmark's
    output is refused with what it is and what it says."""
    stripped = text.lstrip()
    if not stripped:
        raise UsageError(f"{where} is empty: give bench_speculative.py's --output file (JSON lines) or a CSV.")
    foreign = _bench_serving(text, where)
    if foreign is not None:
        raise UsageError(foreign)
    records = []
    # A comment line before the records (a note, a pasted source) does not make them a CSV.
    first = next((line for line in stripped.splitlines() if not line.lstrip().startswith("#")), "")
    if first.lstrip().startswith("{"):
        rows = []
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        foreign = _one_batch([r for r in rows if isinstance(r, dict)], where)
        if foreign is not None:
            raise UsageError(foreign)
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"record at {where} line {n} is not JSON ({exc.msg}).") from None
            records.append(_record(raw, n, where))
    else:
        reader = csv.DictReader(io.StringIO(text))
        missing = [k for k in FIELDS if k not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(
                f"{where}'s CSV header lacks {', '.join(missing)}: it needs the columns {', '.join(FIELDS)}."
            )
        records = [_record(row, n, where) for n, row in enumerate(reader, 2)]
    return records


def load(path: str | Path, batch_size: int | None = None) -> BenchSweep:
    """The file's records at ``batch_size`` (default: 1 if any, else the smallest in the file)."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {where}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError:
        raise UsageError(f"{where} is not text: give bench_speculative.py's JSON lines or a CSV.") from None
    records = parse(text, where)
    sizes = sorted({r.batch_size for r in records})
    if batch_size is None:
        batch_size = 1 if 1 in sizes else sizes[0]
    if batch_size not in sizes:
        raise UsageError(f"{where} has no record at batch size {batch_size}; it has {sizes}.")
    mine = [r for r in records if r.batch_size == batch_size]
    plain = [r for r in mine if r.plain]
    chains = [r for r in mine if not r.plain and r.num_draft_tokens == r.steps + 1]
    if not chains:
        raise UsageError(
            f"{where} has no speculative record at batch size {batch_size} with num_draft_tokens = steps + 1 and "
            "topk 1 (the chains the advisor models)."
        )
    return BenchSweep(
        where,
        batch_size,
        plain[-1] if plain else None,
        chains,
        [r for r in mine if not r.plain and r.num_draft_tokens != r.steps + 1],
        [s for s in sizes if s != batch_size],
    )
