"""Issue 24 budget: the panel left open on a 4-replica fleet's Fleet tab costs ≤ 1.5% of a core.

The sandbox's two SIMULATED hosts each serve two replicas (ready, no load) behind the real sglang-router; the
real panel runs in a terminal (tmux, 160x45) on the Fleet tab, which reads the fleet's status every 2 s. Its
process's CPU time is read over a window (bench_idle's harness) and its agents' beside it. The alternative, in
the same window and terminal size: what an operator runs without a fleet view, vllm-htop 0.5.0 on each replica
(four of them at 1 Hz; where vllm-htop is missing, bench_idle's 1 Hz /metrics poller, said so in the row). The
same panel on the Serve tab in a second window is what the fleet view adds to.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from bench.bench_idle import SETTLE_S, TMUX, WINDOW_S, _children, _pane_pid, _peer, _share, _wait_for
from bench.bench_startup import _env, _specdeck
from bench.harness import Row

ROOT = Path(__file__).resolve().parent.parent
ISSUE = 24
BUDGET = 1.5  # % of a core
FLEET = "bench4"  # sorts before the sandbox's own fleet: the tab shows it first


def _ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _add_fleet(config: str) -> list[int]:
    """Two replicas on each sandbox host and a router on the first: the replicas' ports."""
    *ports, router, prom = _ports(6)
    hosts = ("sandbox", "sandbox-2", "sandbox", "sandbox-2")
    replicas = ", ".join(f'{{host = "{h}", port = {p}}}' for h, p in zip(hosts, ports, strict=True))
    with open(config, "a") as f:
        f.write(
            f'\n[fleets.{FLEET}]\nprofile = "eagle3-ours"\nreplicas = [{replicas}]\n'
            f'router = {{host = "sandbox", port = {router}, prometheus_port = {prom}}}\n'
        )
    return ports


def _tmux(name: str, argv: list[str], env: dict[str, str]) -> None:
    command = " ".join(f"'{a}'" for a in argv)
    subprocess.run([*TMUX, "new-session", "-d", "-s", name, "-x", "160", "-y", "45", f"exec {command}"],
                   env=env, check=True)  # fmt: skip


def run() -> list[Row]:
    if shutil.which("tmux") is None:
        return [Row(ISSUE, "panel idle on a 4-replica Fleet tab", "-", "tmux is missing: not measured", ok=False)]
    with tempfile.TemporaryDirectory(prefix="bench-fleet-view-") as home:
        env = {**_env(home), "SPECDECK_PERSIST": "0", "TERM": "xterm-256color"}
        cli = _specdeck()
        up = subprocess.run([*cli, "sandbox", "up", "--hosts", "2", "--json"], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=True)  # fmt: skip
        config = json.loads(up.stdout)["config"]
        ports = _add_fleet(config)
        base = [*cli, "--config", config, "--host", "sandbox"]
        peer_argv, peer_name = _peer()
        try:
            subprocess.run([*base, "fleet", "up", FLEET], cwd=ROOT, env=env, check=True, capture_output=True)
            _tmux("panel", base, env)
            for i, port in enumerate(ports):
                _tmux(f"peer{i}", [*peer_argv, f"http://127.0.0.1:{port}"], env)
            _wait_for("panel", "connected")
            subprocess.run([*TMUX, "send-keys", "-t", "panel", "8"], check=True)
            _wait_for("panel", "4/4 workers healthy")
            time.sleep(SETTLE_S)
            panel = _pane_pid("panel")
            peers = [_pane_pid(f"peer{i}") for i in range(len(ports))]
            agents = _children(panel)
            shares = _share([panel, *peers, *agents], WINDOW_S)
            fleet_tab, peer_sum = shares[0], sum(shares[1 : 1 + len(peers)])
            agent = sum(shares[1 + len(peers) :])
            subprocess.run([*TMUX, "send-keys", "-t", "panel", "3"], check=True)
            time.sleep(SETTLE_S)
            serve_tab = _share([panel], WINDOW_S)[0]
        finally:
            subprocess.run([*TMUX, "kill-server"], capture_output=True)
            subprocess.run([*base, "fleet", "down", FLEET, "--yes"], cwd=ROOT, env=env, capture_output=True)
            subprocess.run([*cli, "sandbox", "down"], cwd=ROOT, env=env, capture_output=True)
    return [
        Row(
            ISSUE,
            f"panel idle on a 4-replica Fleet tab (ready, no load), % of a core ≤ {BUDGET}%",
            f"{fleet_tab:.2f}% (+{agent:.2f}% its agents)",
            f"{peer_name} ×4, one a replica: {peer_sum:.2f}%; the panel on Serve: {serve_tab:.2f}%",
            ok=fleet_tab <= BUDGET,
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
