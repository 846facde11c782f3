"""Issue 35: `drafters find` over 50 candidates on the sandbox Hub: the listing, then every candidate's config.json,
card and safetensors header read in parallel threads, in ≤ 3 s; against the same reads one candidate at a time.

The hub serves the catalog of real repos plus copies of one real drafter (AQ-MedAI/Kimi-K25-eagle3: its config,
card and sparse weights) to reach 50 candidates; it runs in its own process, so the client's threads and the
server never share a GIL.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backend.agent.host.shared import hub_search
from backend.drafters import find as df
from backend.sandbox import hub_catalog
from bench.harness import Row

CANDIDATES = 50
BUDGET_S = 3.0
REPEAT = 3
COPIED = "AQ-MedAI/Kimi-K25-eagle3"


def write_hub(root: Path) -> None:
    hub_catalog.write_catalog(root)
    item = hub_catalog.entry(COPIED)
    for i in range(CANDIDATES - 15):  # the search finds 15 of the catalog's repos for Kimi-K2.5
        hub_catalog.write_repo(root, {**item, "repo": f"bench-copies/Kimi-K2.5-eagle3-copy-{i:02d}"})


def timed(queries: list[dict], url: str, workers: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    result = hub_search.search(queries, endpoint=url, workers=workers)
    return time.perf_counter() - t0, len(result["candidates"])


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-find-") as tmp:
        root = Path(tmp) / "hub"
        write_hub(root)
        url_file = Path(tmp) / "hub.url"
        server = subprocess.Popen(
            [sys.executable, "-m", "backend.sandbox.hub", "--root", str(root), "--port-file", str(url_file)],
            stdout=subprocess.PIPE,
        )
        try:
            url = server.stdout.readline().decode().strip()  # type: ignore[union-attr]
            target = df.Target("Kimi-K2.5", "Kimi-K2.5", None, None, "bench")
            queries = df.build_queries(target)
            timed(queries, url, hub_search.WORKERS)  # warm: the hub's first listing reads every card once
            parallel = [timed(queries, url, hub_search.WORKERS) for _ in range(REPEAT)]
            serial = [timed(queries, url, 1) for _ in range(REPEAT)]
        finally:
            server.terminate()
            server.wait(10)
    count = parallel[0][1]
    best = statistics.median(s for s, _ in parallel)
    one = statistics.median(s for s, _ in serial)
    return [
        Row(
            issue=35,
            budget=f"drafters find: {count} candidates listed and read (config, card, header) in ≤ {BUDGET_S:g} s",
            measured=f"{best:.2f} s (median of {REPEAT}, {hub_search.WORKERS} threads)",
            alternative=f"one candidate at a time: {one:.2f} s ({one / best:.1f}×)",
            ok=best <= BUDGET_S and count >= CANDIDATES,
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
