"""Log samples as the history keeps them: merged per second, and the LiveFilter state an import resumes from."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from backend.metrics import LiveFilter, Sample


def _bucket_row() -> dict[str, Any]:
    return {"tok_sum": 0.0, "tok_n": 0, "ps_sum": 0.0, "ps_n": 0, "acc_sum": 0.0, "acc_n": 0, "accept_rate": None,
            "running_req": None, "queue_req": None, "token_usage": None}  # fmt: skip


def downsample(samples: Iterable[Sample]) -> dict[int, dict[str, Any]]:
    """Decode samples merged per whole second of their log time (≤ 1 row/s); samples without a time are skipped.

    Throughput counts only while requests run (``Sample.stream_tps``); the LiveFilter already dropped the
    first line after idle.
    """
    out: dict[int, dict[str, Any]] = {}
    for s in samples:
        if s.kind != "decode" or s.ts is None:
            continue
        row = out.setdefault(int(s.ts), _bucket_row())
        per_stream = s.stream_tps
        if per_stream is not None:
            row["tok_sum"] += s.gen_tps
            row["tok_n"] += 1
            row["ps_sum"] += per_stream
            row["ps_n"] += 1
        if s.accept_len is not None:
            row["acc_sum"] += s.accept_len
            row["acc_n"] += 1
        for key in ("accept_rate", "running_req", "queue_req", "token_usage"):
            if getattr(s, key) is not None:
                row[key] = getattr(s, key)
    return out


def filter_tail(tail: list[dict], samples: Iterable[Sample]) -> list[dict]:
    """What a LiveFilter needs to resume after ``samples``: the last decode sample and one prefill after it.

    Feeding these two to a fresh ``LiveFilter`` puts it in the state it had after the whole stream (its state
    is the last decode time and whether a prefill after it found nothing running or came more than the idle
    gap after it): a prefill that found nothing running is kept, else the latest (the largest gap).
    """
    decode, prefill = [*tail, None, None][:2]
    for s in samples:
        if s.ts is None:
            continue
        if s.kind == "decode":
            decode, prefill = s.to_json(), None
        elif decode is not None and (prefill is None or prefill.get("running_req") != 0):
            prefill = s.to_json()
    return [x for x in (decode, prefill) if x is not None]


def primed_filter(tail: list[dict]) -> LiveFilter:
    """A LiveFilter in the state recorded by ``filter_tail``."""
    live = LiveFilter()
    for rec in tail:
        live.accept(Sample(**rec))
    return live
