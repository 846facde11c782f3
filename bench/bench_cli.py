"""Issues 21 and 26: a CLI question over SSH, whole process, against OpenSSH's own `ssh host true`.

All reach the same loopback sshd (tests/sshd.py) with the same key, known_hosts checked, measured
interleaved so load on the box falls on all alike. Cold is a command with no kept connection (`--no-persist`:
its own handshake and agent start); warm goes through the control master the first command left
(backend/transport/control.py), commands a second apart as typed (the master's next agent is started by then):
`specdeck ping` as installed (the one-shot answer, backend/cli/quick.py) and, for comparison, the full CLI
(`python -m backend.cli.main`) through the same master. Config, state and the control socket live in a
temporary folder.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_startup import _env, _specdeck
from bench.harness import Row
from tests.sshd import start_sshd

ROOT = Path(__file__).resolve().parent.parent
RUNS = 7
PAUSE_S = 1.0  # between warm commands, as typed
COLD_RATIO = 1.3  # issue 21: cold ping ≤ 1.3× ssh host true
WARM_BUDGET_S = 0.150  # issue 26


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True)
    took = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{argv[:3]}... exited {res.returncode}: {res.stderr.decode(errors='replace')[-300:]}")
    return took


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as home:
        env = _env(home)
        runtime = tempfile.mkdtemp(prefix="sd-run-")  # short: a socket path must fit 108 bytes
        env.update(XDG_RUNTIME_DIR=runtime, SPECDECK_PERSIST="120")
        sshd = start_sshd(Path(home) / "sshd")
        ping = [*_specdeck(), *sshd.cli_args(f"{home}/work"), "ping", "--json"]
        cold_ping = [*_specdeck(), "--no-persist", *ping[len(_specdeck()) :]]
        full_ping = [sys.executable, "-m", "backend.cli.main", *ping[len(_specdeck()) :]]
        try:
            _timed(ping, env)  # installs the agent, leaves a master
            _timed(sshd.ssh_argv("true"), env)
            ssh, cold, warm, full = [], [], [], []
            for _ in range(RUNS):
                ssh.append(_timed(sshd.ssh_argv("true"), env))
                cold.append(_timed(cold_ping, env))
                time.sleep(PAUSE_S)
                warm.append(_timed(ping, env))
                time.sleep(PAUSE_S)
                full.append(_timed(full_ping, env))
        finally:
            subprocess.run([*_specdeck(), "disconnect", "--all"], cwd=ROOT, env=env, capture_output=True)
            sshd.stop()
            shutil.rmtree(runtime, ignore_errors=True)
    ssh_ms, cold_ms, warm_ms, full_ms = (statistics.median(x) * 1000 for x in (ssh, cold, warm, full))
    load = f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"  # a shared box: wall times move with it
    return [
        Row(
            21,
            f"`specdeck ping` over SSH cold (new connection), whole process ≤ {COLD_RATIO}× `ssh host true`",
            f"{cold_ms:.0f} ms ({cold_ms / ssh_ms:.2f}×)",
            f"`ssh host true`: {ssh_ms:.0f} ms; {load}",
            ok=cold_ms <= COLD_RATIO * ssh_ms,
        ),
        Row(
            26,
            f"`specdeck ping` over SSH warm (kept connection), whole process ≤ {WARM_BUDGET_S * 1000:.0f} ms, < ssh",
            f"{warm_ms:.0f} ms",
            f"`ssh host true`: {ssh_ms:.0f} ms; full CLI through the master: {full_ms:.0f} ms; {load}",
            ok=warm_ms <= WARM_BUDGET_S * 1000 and warm_ms < ssh_ms,
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
