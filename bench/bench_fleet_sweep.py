"""Issue 24 budget: a sweep across a 2-host fleet takes at most 0.65× the serial sweep's wall time.

Both sweeps measure the same grid (steps 1-4 of aq-medai, topk 1) on SIMULATED SGLang hosts of this machine
(each its own workdir and port), with the operator's timing model: each point's bench is seconds of simulated
decoding, as a real point's is minutes, so the restarts' fixed costs do not hide the spread. The serial sweep
(one host's sweep job) runs first, then the fleet sweep over two hosts, in the same run.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import tempfile
import time
from pathlib import Path

from backend.connection import Connection
from backend.fleet import sweep as fleet_sweep
from backend.sandbox import fixtures
from backend.settings.model import HostConfig, Settings
from backend.settings.validation import parse
from backend.tune import sweep as sweep_mod
from bench.harness import Row

ISSUE = 24
BUDGET = 0.65  # fleet / serial wall time, two hosts
STEPS = (1, 2, 3, 4)
REQUESTS, MAX_TOKENS = 3, 160  # ~2 s of simulated decoding a point


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(root: Path) -> Settings:
    target = fixtures.write_target_config(str(root / "Kimi-K2.5"))
    drafter = fixtures.write_drafter(str(root / "aq_medai_k2"), "aq_medai_k2")
    env = {"SPECDECK_SIM_TIME_SCALE": "0.02"}  # startup in ~0.1 s: the bench measures the points, not the loads
    profile = {"drafter": "aq-medai", "algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4, "env": env}
    data = {"target": target, "drafters": {"aq-medai": {"path": drafter}}, "profiles": {"aq": profile}}
    return parse(data, "bench")


def _host(root: Path, name: str) -> HostConfig:
    return HostConfig(name, "local", sys.executable, str(root / name), launcher="simulator", sandbox=True)


async def _measure(root: Path) -> tuple[float, float, dict]:
    settings = _settings(root)
    plan = sweep_mod.SweepPlan(STEPS, requests=REQUESTS, max_tokens=MAX_TOKENS)
    conns = [await Connection.open(_host(root, name)) for name in ("bench-a", "bench-b")]
    try:
        t0 = time.perf_counter()
        job = await sweep_mod.start(conns[0], settings, "aq", plan, baseline_tok_s=82.0)
        await sweep_mod.follow(conns[0], job.id)
        serial = time.perf_counter() - t0
        members = [fleet_sweep.Member(c, _port()) for c in conns]
        t0 = time.perf_counter()
        done = await fleet_sweep.run(members, settings, "aq", plan, baseline_tok_s=82.0)
        fleet = time.perf_counter() - t0
    finally:
        for c in conns:
            await c.close()
    return serial, fleet, done


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="specdeck-bench-fleet-sweep-") as tmp:
        serial, fleet, done = asyncio.run(_measure(Path(tmp)))
    per_host = {h: sum(1 for p in done.points if p.host == h) for h in done.wire["hosts"]}
    ratio = fleet / serial
    return [
        Row(
            ISSUE,
            f"sweep of {len(STEPS)} points over a 2-host fleet ≤ {BUDGET}× the serial sweep's wall time",
            f"{fleet:.1f} s ({ratio:.2f}×; points {'+'.join(map(str, per_host.values()))})",
            f"serial sweep on one host: {serial:.1f} s",
            ratio <= BUDGET and all(p.failed is None for p in done.points),
        )
    ]
