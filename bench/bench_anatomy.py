"""Issue 37 budgets: reading a 200 MB torch-profiler trace on the host with the streaming cycle reader, against
loading it with ``json.load`` (what a reader that parses the whole document does before it has read a thing).

The trace is made here, never committed: a real one (tests/fixtures/real/traces/spec-graph-bs8, 8 EAGLE cycles an
H200 ran, with its aten ops and flow events) repeated until its JSON reaches 200 MB, each copy shifted in time past
the one before and its correlation ids past the last copy's, then gzip'd as SGLang writes it. Each side runs in a
fresh process: wall time and peak RSS (``ru_maxrss``) of that process, the interpreter's own start included.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from backend.agent.host.shared.chrome_trace import events
from bench.harness import Row

ISSUE = 37
TARGET_BYTES = 200 * 10**6
SOURCE = next((Path(__file__).parents[1] / "tests/fixtures/real/traces").glob("spec-graph-bs8-1*.trace.json.gz"))
TIME_BUDGET = 1.5  # × json.load's time: the reader also finds every cycle, json.load only parses
MEMORY_BUDGET = 0.25  # × json.load's peak memory

_MEASURE = """
import json, resource, sys, time
t0 = time.perf_counter()
{body}
wall = time.perf_counter() - t0
print(json.dumps({{"s": wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "out": out}}))
"""
READER = """
from backend.agent.host.shared.cycle_anatomy import anatomy
a = anatomy([sys.argv[1]])
out = {"cycles": a["cycles"], "cycle_ms": a["cycle_ms"]}
"""
JSON_LOAD = """
import gzip
with gzip.open(sys.argv[1], "rt") as f:
    doc = json.load(f)
out = {"events": len(doc["traceEvents"])}
"""


def repeat_trace(source: Path, dest: Path, target_bytes: int) -> tuple[int, int]:
    """``source``'s events repeated until the JSON holds ``target_bytes``; returns (JSON bytes, events)."""
    header: dict = {}
    evs = list(events(str(source), header))
    once = [e for e in evs if e.get("ph") == "M" or e.get("cat") in ("Trace", "overhead")]
    timed = [e for e in evs if e not in once and isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    window = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 100.0
    corr = max((e.get("args") or {}).get("correlation", 0) for e in timed) + 1
    written = count = 0
    with gzip.open(dest, "wt", compresslevel=1) as f:
        head = json.dumps({k: v for k, v in header.items()})[:-1]
        f.write(head + ', "traceEvents": [\n')
        written += len(head)
        copy = 0
        while written < target_bytes:
            batch = once if copy == 0 else []
            for e in timed:
                shifted = dict(e, ts=round(e["ts"] + copy * window, 3))
                args = e.get("args")
                if args and "correlation" in args:
                    shifted["args"] = dict(args, correlation=args["correlation"] + copy * corr)
                if e.get("ph") in ("s", "f") and "id" in e:
                    shifted["id"] = e["id"] + copy * corr
                batch.append(shifted)
            for e in batch:
                text = json.dumps(e)
                f.write(("" if count == 0 else ",\n") + text)
                written += len(text) + 2
                count += 1
            copy += 1
        f.write("\n]}")
    return written, count


def _measure(body: str, path: Path) -> dict:
    code = _MEASURE.format(body=body.strip())
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="specdeck-bench-trace-") as tmp:
        path = Path(tmp) / "repeated-TP-0.trace.json.gz"
        size, count = repeat_trace(SOURCE, path, TARGET_BYTES)
        gz_mb = os.path.getsize(path) / 1e6
        ours = _measure(READER, path)
        plain = _measure(JSON_LOAD, path)
    what = f"{size / 1e6:.0f} MB of JSON ({gz_mb:.0f} MB gz, {count} events, {ours['out']['cycles']} cycles)"
    return [
        Row(
            ISSUE,
            f"read {what} on the host: time ≤ {TIME_BUDGET:g}× json.load's",
            f"{ours['s']:.1f} s",
            f"json.load alone: {plain['s']:.1f} s ({plain['s'] / ours['s']:.2f}×)",
            ours["s"] <= TIME_BUDGET * plain["s"],
        ),
        Row(
            ISSUE,
            f"read {what}: peak memory ≤ {MEMORY_BUDGET:g}× json.load's",
            f"{ours['peak_mb']:.0f} MB peak",
            f"json.load: {plain['peak_mb']:.0f} MB peak ({plain['peak_mb'] / ours['peak_mb']:.1f}×)",
            ours["peak_mb"] <= MEMORY_BUDGET * plain["peak_mb"],
        ),
    ]
