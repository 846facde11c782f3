"""Log samples as the history keeps them: merged per second, and the LiveFilter state an import resumes from."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from backend.measure.metrics import LiveFilter, Sample


def _bucket_row() -> dict[str, Any]:
    return {"tok_sum": 0.0, "tok_n": 0, "ps_sum": 0.0, "ps_n": 0, "acc_sum": 0.0, "acc_n": 0, "acc_wsum": 0.0,
            "acc_w": 0.0, "accept_rate": None, "running_req": None, "queue_req": None, "token_usage": None}  # fmt: skip


def downsample(samples: Iterable[Sample]) -> dict[int, dict[str, Any]]:
    """Decode samples merged per whole second of their log time (≤ 1 row/s); samples without a time are skipped.

    Accept length is kept twice: per line (each line's own, an interval mean) and weighted by the line's running
    requests (its verify passes), which sum to the run's accept length from totals.

    Throughput counts only while requests run (``Sample.stream_tps``); the LiveFilter already dropped the
    first line after idle. Per-stream figures are each line's own (per DP rank where the log has DP ranks,
    each rank decoding its own batch); with several DP ranks in a second the aggregate throughput is the sum
    of each rank's mean, and running and queued requests the sum of each rank's last, token usage the fullest
    rank's: the engine's figures, not one rank's.
    """
    out: dict[int, dict[str, Any]] = {}
    ranked: dict[int, dict[int, dict[str, Any]]] = {}  # second -> DP rank -> its sums and last counts
    for s in samples:
        if s.kind != "decode" or s.ts is None:
            continue
        second = int(s.ts)
        row = out.setdefault(second, _bucket_row())
        per_stream = s.stream_tps
        rank = s.dp_rank
        if per_stream is not None:
            row["ps_sum"] += per_stream
            row["ps_n"] += 1
            if rank is None:
                row["tok_sum"] += s.gen_tps
                row["tok_n"] += 1
        if s.accept_len is not None:
            row["acc_sum"] += s.accept_len
            row["acc_n"] += 1
            # A line's accept length is its interval's tokens over its verify passes, which grow with its running
            # requests: weighted by them, the lines' mean is the run's tokens over passes (totals), not a mean of
            # interval means (a busy minute and an idle one would count alike).
            row["acc_wsum"] += s.accept_len * (s.running_req or 1)
            row["acc_w"] += s.running_req or 1
        for key in ("accept_rate", "running_req", "queue_req", "token_usage"):
            if getattr(s, key) is not None:
                row[key] = getattr(s, key)
        if rank is not None:
            own = ranked.setdefault(second, {}).setdefault(rank, {"tok": 0.0, "n": 0})
            if per_stream is not None:
                own["tok"] += s.gen_tps
                own["n"] += 1
            for key in ("running_req", "queue_req", "token_usage"):
                if getattr(s, key) is not None:
                    own[key] = getattr(s, key)
    for second, ranks in ranked.items():
        row, means = out[second], [r["tok"] / r["n"] for r in ranks.values() if r["n"]]
        if means:
            row["tok_sum"], row["tok_n"] = row["tok_sum"] + math.fsum(means), row["tok_n"] + 1
        for key, merge in (("running_req", sum), ("queue_req", sum), ("token_usage", max)):
            values = [r[key] for r in ranks.values() if key in r]
            if values:
                row[key] = merge(values)
    return out


def filter_tail(tail: list[dict[str, Any]], samples: Iterable[Sample]) -> list[dict[str, Any]]:
    """What a LiveFilter needs to resume after ``samples``: each DP rank's last decode sample and one prefill
    after it.

    Feeding these to a fresh ``LiveFilter`` puts it in the state it had after the whole stream (its state per
    rank is the last decode time and whether a prefill after it found nothing running or came more than the
    idle gap after it): a prefill that found nothing running is kept, else the latest (the largest gap).
    """
    ranks: dict[int | None, list[dict[str, Any] | None]] = {}
    for rec in tail:
        pair = ranks.setdefault(Sample(**rec).dp_rank, [None, None])
        pair[0 if rec.get("kind") == "decode" else 1] = rec
    for s in samples:
        if s.ts is None:
            continue
        pair = ranks.setdefault(s.dp_rank, [None, None])
        if s.kind == "decode":
            pair[0], pair[1] = s.to_json(), None
        elif pair[0] is not None and (pair[1] is None or pair[1].get("running_req") != 0):
            pair[1] = s.to_json()
    return [x for pair in ranks.values() for x in pair if x is not None]


def primed_filter(tail: list[dict[str, Any]]) -> LiveFilter:
    """A LiveFilter in the state recorded by ``filter_tail``."""
    live = LiveFilter()
    for rec in tail:
        live.accept(Sample(**rec))
    return live
