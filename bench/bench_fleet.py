"""Issue 24: `fleet status` over 8 replicas, the whole function on open links (what the panel's Fleet view
calls each poll), against the same reads made one after another (per replica its server's status, then its
/metrics; then the router's pages).

The fleet is real but for SGLang: 8 SIMULATED replicas on 4 sandbox hosts of this machine (own workdirs, so
own agents; two replicas a host, by port) behind the real sglang-router 0.3.2, started by `fleet.up`. The
whole `specdeck fleet status --json` process (its agents started fresh) is reported beside it, unbudgeted.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backend.fleet import fleets
from backend.sandbox import fixtures
from backend.settings.validation import parse
from bench.bench_startup import _env
from bench.harness import Row, median_ms
from tests.sshd import free_port

ROOT = Path(__file__).resolve().parent.parent
HOSTS = 4
PER_HOST = 2
RUNS = 15
BUDGET_MS = 150.0


def _settings(root: Path):
    hosts = {}
    for i in range(HOSTS):
        workdir = root / f"host-{i}"
        workdir.mkdir()
        hosts[f"sim-{i}"] = {
            "url": "local",
            "python": sys.executable,
            "workdir": str(workdir),
            "launcher": "simulator",
            "sandbox": True,
        }
    replicas = [{"host": f"sim-{i}", "port": free_port()} for i in range(HOSTS) for _ in range(PER_HOST)]
    data = {
        "target": fixtures.write_target_config(str(root / "models" / "Kimi-K2.5")),
        "hosts": hosts,
        "drafters": {"ours": {"path": fixtures.write_drafter(str(root / "models" / "ours"), "ours")}},
        "profiles": {"eagle3-ours": {"env": {"SPECDECK_SIM_TIME_SCALE": "0.02"}}},
        "fleets": {
            "eight": {
                "profile": "eagle3-ours",
                "replicas": replicas,
                "router": {"host": "sim-0", "port": free_port(), "prometheus_port": free_port()},
            }
        },
    }
    return data, parse(data, "bench")


async def _sequential(links: fleets.FleetLinks) -> None:
    """The alternative: every read of `status`, one after another."""
    for replica in links.fleet.replicas:
        conn = links.conn(replica.host)
        await conn.call("serve.status", port=replica.port)
        await conn.call("http.request", url=f"http://127.0.0.1:{replica.port}/metrics", timeout=2)
    conn = links.conn(links.fleet.router.host)
    await conn.call("jobs.list", kind=fleets.ROUTER_KIND)
    base = fleets.router_url(links.fleet)
    for url in (base + "/health", base + "/workers", f"http://127.0.0.1:{links.fleet.router.prometheus_port}/metrics"):
        await conn.call("http.request", url=url, timeout=2)


def _process_ms(config: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "backend.cli.main", "--config", str(config), "fleet", "status", "eight", "--json"]
    subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, check=True)
    return (time.perf_counter() - t0) * 1000


async def _measure(settings, config: Path, env: dict[str, str]) -> tuple[list[float], list[float], float, int, float]:
    links = await fleets.FleetLinks.open(settings, "eight")
    try:
        t0 = time.perf_counter()
        st = await fleets.up(links)
        up_s = time.perf_counter() - t0
        ready = sum(r.healthy for r in st.replicas)
        concurrent, sequential = [], []
        for _ in range(RUNS):  # interleaved: load on the box falls on both alike
            t0 = time.perf_counter()
            await fleets.status(links)
            concurrent.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await _sequential(links)
            sequential.append(time.perf_counter() - t0)
        process_ms = await asyncio.to_thread(_process_ms, config, env)
        return concurrent, sequential, up_s, ready, process_ms
    finally:
        await fleets.down(links)
        await links.close()


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        data, settings = _settings(root)
        config = root / "fleet.toml"  # the same fleet as a file, for the whole process
        config.write_text(_toml(data))
        env = _env(str(root / "home"))
        concurrent, sequential, up_s, ready, process_ms = asyncio.run(_measure(settings, config, env))
    fn_ms, seq_ms = median_ms(concurrent), median_ms(sequential)
    load = f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    replicas = HOSTS * PER_HOST
    return [
        Row(
            24,
            f"`fleet status` over {replicas} replicas on {HOSTS} hosts, whole function on open links, median "
            f"≤ {BUDGET_MS:.0f} ms",
            f"{fn_ms:.0f} ms ({ready}/{replicas} healthy)",
            f"the same reads in sequence: {seq_ms:.0f} ms; whole process (fresh agents): {process_ms:.0f} ms; "
            f"`fleet up`: {up_s:.1f} s; {load}",
            ok=fn_ms <= BUDGET_MS and ready == replicas,
        )
    ]


def _toml(data: dict) -> str:
    """The bench's settings as a config file (TOML written by hand: the values are names, paths and ports)."""
    import json

    lines = [f"target = {json.dumps(data['target'])}"]
    for name, host in data["hosts"].items():
        lines.append(f"[hosts.{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in host.items()]
    lines += ["[drafters.ours]", f"path = {json.dumps(data['drafters']['ours']['path'])}"]
    f = data["fleets"]["eight"]
    replicas = ", ".join(f'{{host = "{r["host"]}", port = {r["port"]}}}' for r in f["replicas"])
    router = f["router"]
    lines += [
        "[fleets.eight]",
        'profile = "eagle3-ours"',
        f"replicas = [{replicas}]",
        f'router = {{host = "sim-0", port = {router["port"]}, prometheus_port = {router["prometheus_port"]}}}',
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    for row in run():
        print(row)
