"""Issue 6 budgets: log parsing speed, decimating a day of samples, and ring-buffer memory over time.

Issue 26 raised the parsing budget back to the 141k lines/s it had before the parser learned more fields: each
line shape is learned once and read in one compiled match after that (the field-by-field path, measured in
the same run, is what every line paid before).
"""

from __future__ import annotations

import random
import re
import time
import tracemalloc
from datetime import datetime

from backend.measure import metrics
from backend.measure.metrics import Sample, parse_line
from backend.measure.series import DAY_AT_1HZ, RingSeries
from bench.harness import Row, median_ms, timeit

ISSUE = 6
LINES = 100_000
PARSE_BUDGET = 141_000  # lines/s (issue 26: where it was before the parser learned more fields)
DECIMATE_BUDGET_MS = 10.0  # a slice of the 25 ms chart redraw


def _log(n: int) -> list[str]:
    """A busy server's log: mostly decode lines (the expensive kind), some prefill lines and noise.

    Ten lines a second, so the timestamp changes every tenth line (a real log changes far less often).
    """
    rng = random.Random(6)
    out = []
    for i in range(n):
        second = i // 10
        stamp = f"[2025-01-05 {second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d} DP0 TP0] "
        roll = rng.random()
        if roll < 0.8:
            out.append(
                f"{stamp}Decode batch, #running-req: {rng.randint(1, 8)}, #token: {rng.randint(100, 9000)}, "
                f"token usage: {rng.random():.2f}, accept len: {rng.uniform(1, 4):.2f}, "
                f"accept rate: {rng.random():.2f}, cuda graph: False, "
                f"gen throughput (token/s): {rng.uniform(40, 140):.2f}, #queue-req: 0, "
            )
        elif roll < 0.9:
            out.append(
                f"{stamp}Prefill batch, #new-seq: 1, #new-token: {rng.randint(10, 4000)}, #cached-token: 0, "
                f"token usage: {rng.random():.2f}, #running-req: 0, #queue-req: 0, "
            )
        else:
            out.append(f'{stamp}INFO:     127.0.0.1:{rng.randint(1024, 65535)} - "POST /generate HTTP/1.1" 200 OK')
    return out


# The naive way, for comparison: strptime on every prefix, one regex search per field, same Sample out.
_NAIVE_PREFIX = re.compile(r"^\[([\d-]+ [\d:]+)((?: [A-Z]+\d+)*)\] (Decode|Prefill) batch")
_NAIVE_FIELDS = [
    (name, convert, re.compile(re.escape(key) + r": ([^,]+)"))
    for name, key, convert in [
        ("gen_tps", "gen throughput (token/s)", float),
        ("accept_len", "accept len", float),
        ("accept_rate", "accept rate", float),
        ("running_req", "#running-req", int),
        ("queue_req", "#queue-req", int),
        ("token_usage", "token usage", float),
        ("cuda_graph", "cuda graph", lambda raw: raw.strip() == "True"),
    ]
]


def _naive(line: str) -> Sample | None:
    head = _NAIVE_PREFIX.match(line)
    if head is None:
        return None
    ts = datetime.strptime(head[1], "%Y-%m-%d %H:%M:%S").timestamp()
    fields = {}
    for name, convert, pattern in _NAIVE_FIELDS:
        found = pattern.search(line)
        if found:
            fields[name] = convert(found[1])
    kind = "decode" if head[3] == "Decode" else "prefill"
    return Sample(ts, kind, ranks=head[2].strip() or None, **fields)


def _lines_per_s(parse, lines: list[str]) -> float:
    seconds = min(timeit(lambda: [parse(line) for line in lines], repeat=3))
    return len(lines) / seconds


def _field_by_field_per_s(lines: list[str]) -> float:
    """parse_line with no shape learned: every line split and looked up key by key."""
    learned, metrics._SHAPES_MAX = metrics._SHAPES_MAX, 0
    for shapes in metrics._SHAPES.values():
        shapes.clear()
    try:
        return _lines_per_s(parse_line, lines)
    finally:
        metrics._SHAPES_MAX = learned


def _naive_decimate(xs, ys, width: int) -> tuple[list[float], list[float]]:
    """Per-point Python loop: the obvious way to bucket min/max."""
    t0, span = xs[0], (xs[-1] - xs[0]) or 1.0
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}
    for i in range(len(xs)):
        col = min(int((xs[i] - t0) / span * width), width - 1)
        if col not in lo or ys[i] < ys[lo[col]]:
            lo[col] = i
        if col not in hi or ys[i] > ys[hi[col]]:
            hi[col] = i
    keep = sorted(set(lo.values()) | set(hi.values()))
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _memory_after(seconds: int) -> int:
    """Bytes held by a day-sized RingSeries and by a plain list after ``seconds`` samples at 1 Hz."""
    tracemalloc.start()
    series = RingSeries(DAY_AT_1HZ)
    for i in range(seconds):
        series.append(float(i), 80.0 + i % 5)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return held


def _list_memory_after(seconds: int) -> int:
    tracemalloc.start()
    points = [(float(i), 80.0 + i % 5) for i in range(seconds)]
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del points
    return held


def run() -> list[Row]:
    """Parse speed vs a per-field-regex parser, decimation vs a per-point loop, memory vs a list."""
    lines = _log(LINES)
    ours = _lines_per_s(parse_line, lines)
    naive = _lines_per_s(_naive, lines)
    by_field = _field_by_field_per_s(lines)
    decode_only = [line for line in lines if "Decode batch" in line]
    ours_decode = _lines_per_s(parse_line, decode_only)

    series = RingSeries(DAY_AT_1HZ)
    rng = random.Random(6)
    start = time.time() - DAY_AT_1HZ
    for i in range(DAY_AT_1HZ):
        series.append(start + i, 80.0 + rng.gauss(0, 4))
    decimate_ms = median_ms(timeit(lambda: series.decimate(200), repeat=15))
    view = series.window()
    naive_decimate_ms = median_ms(timeit(lambda: _naive_decimate(view.xs, view.ys, 200), repeat=3))
    stats_ms = median_ms(timeit(series.stats, repeat=5))

    hour, day, two_days = _memory_after(3_600), _memory_after(DAY_AT_1HZ), _memory_after(2 * DAY_AT_1HZ)
    list_hour, list_day = _list_memory_after(3_600), _list_memory_after(DAY_AT_1HZ)
    mib = 1024 * 1024
    return [
        Row(
            ISSUE,
            f"log parsing ≥ {PARSE_BUDGET // 1000}k lines/s (80% decode, 10% prefill, 10% noise)",
            f"{ours / 1000:.0f}k lines/s (decode lines only: {ours_decode / 1000:.0f}k/s)",
            f"field by field (no learned shapes): {by_field / 1000:.0f}k lines/s; strptime + a regex search per "
            f"field: {naive / 1000:.0f}k lines/s ({ours / naive:.1f}x slower)",
            ok=ours >= PARSE_BUDGET and ours_decode >= PARSE_BUDGET,
        ),
        Row(
            ISSUE,
            f"decimate 24 h at 1 Hz (86,400 points) to 200 columns ≤ {DECIMATE_BUDGET_MS:.0f} ms",
            f"{decimate_ms:.1f} ms (stats p50/p95 over the same day: {stats_ms:.1f} ms)",
            f"per-point loop: {naive_decimate_ms:.1f} ms ({naive_decimate_ms / decimate_ms:.1f}x slower)",
            ok=decimate_ms <= DECIMATE_BUDGET_MS,
        ),
        Row(
            ISSUE,
            "series memory bounded (RingSeries sized for 24 h at 1 Hz: grows to a day's points, no further)",
            f"1 h: {hour / mib:.2f} MiB, 24 h: {day / mib:.2f} MiB, 48 h: {two_days / mib:.2f} MiB",
            f"list of (t, v) tuples: 1 h {list_hour / mib:.2f} MiB, 24 h {list_day / mib:.2f} MiB",
            ok=two_days <= day * 1.01 and day < list_day,
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
