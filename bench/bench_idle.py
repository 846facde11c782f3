"""Issue 26: what the panel costs left open on an idle server, against vllm-htop polling the same server.

The sandbox's SIMULATED SGLang server is started ready with no load; the real panel runs in a terminal
(tmux, 160x45) on the Live tab, then on the Serve tab, and its process's CPU time (utime + stime, every
thread) is read from /proc over each window; its local agent is read beside it. Issue 31: its resident memory
(VmRSS) on Live, once settled, against the peer's read at the same moment. The peer, in the same run and
the same terminal size, is vllm-htop 0.5.0 (PyPI; htop for vLLM's /metrics, `make bench` installs it in the
bench venv) polling the server's /metrics at 1 Hz: it fetches and parses SGLang's metrics and draws its table
(the names are not vLLM's, so its numbers stay empty; the polling, parsing and drawing are the cost). Where
vllm-htop is not installed, the peer is a 1 Hz /metrics poller of our own, said so in the row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_agent_cost import cpu_seconds
from bench.bench_startup import _env, _specdeck
from bench.harness import Row

ROOT = Path(__file__).resolve().parent.parent
WINDOW_S = 30.0
SETTLE_S = 10.0
SERVE_BUDGET = 1.0  # % of a core (issue 26)
RSS_BUDGET_MB = 50.0  # resident memory on Live, idle (issue 31; vllm-htop holds ~24 MB)
TMUX = ["tmux", "-L", f"specdeck-bench-{os.getpid()}"]
# The alternative where vllm-htop is missing: the least a 1 Hz monitor does (fetch, parse, print a line).
POLLER = """
import sys, time, urllib.request
url = sys.argv[1] + "/metrics"
while True:
    body = urllib.request.urlopen(url, timeout=4).read().decode()
    rows = [l.split() for l in body.splitlines() if l and not l.startswith("#")]
    print("\\x1b[H", len(rows), "series", flush=True)
    time.sleep(1)
"""


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _thread_ns(pid: int) -> dict[int, int]:
    """Nanoseconds each thread of ``pid`` has run so far (the kernel's schedstat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between the listing and the read
    return out


def _share(pids: list[int], seconds: float) -> list[float]:
    """% of one core each pid used over the next ``seconds``: its threads' run time in nanoseconds. /proc's
    utime + stime come in 10 ms ticks, a third of an idle panel's 30 s share (0.27% against its peer's 0.23%
    read as a fail one run and a pass the next); a process one of whose threads ended meanwhile (its time
    would be lost from the sum) is read in ticks instead, which keep ended threads."""
    t0 = time.monotonic()
    ticks0 = [cpu_seconds(p) for p in pids]
    ns0 = [_thread_ns(p) for p in pids]
    time.sleep(seconds)
    ns1 = [_thread_ns(p) for p in pids]
    dt = time.monotonic() - t0
    out = []
    for pid, before, after, c0 in zip(pids, ns0, ns1, ticks0, strict=True):
        if set(before) - set(after):
            out.append((cpu_seconds(pid) - c0) / dt * 100)
        else:
            out.append(sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9 / dt * 100)
    return out


def _pane_pid(session: str) -> int:
    out = subprocess.run([*TMUX, "list-panes", "-t", session, "-F", "#{pane_pid}"], capture_output=True, text=True)
    return int(out.stdout.split()[0])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _wait_for(session: str, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = subprocess.run([*TMUX, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
        if text in screen:
            return
        time.sleep(0.2)
    raise RuntimeError(f"{session}: {text!r} never showed")


def _peer() -> tuple[list[str], str]:
    exe = Path(sys.executable).with_name("vllm-htop")
    if exe.exists():
        return [str(exe), "--interval", "1", "--url"], "vllm-htop 0.5.0 at 1 Hz"
    return [sys.executable, "-c", POLLER], "vllm-htop not installed (offline?): a 1 Hz /metrics poller"


def run() -> list[Row]:
    if shutil.which("tmux") is None:
        return [Row(26, "panel idle cost", "-", "tmux is missing: not measured", ok=False)]
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as home:
        # Its own run history too (the panel records what Live follows): never the operator's, nor another run's.
        env = {**_env(home), "XDG_DATA_HOME": f"{home}/data", "SPECDECK_PERSIST": "0", "TERM": "xterm-256color"}
        cli = _specdeck()
        up = subprocess.run([*cli, "sandbox", "up", "--json"], cwd=ROOT, env=env, capture_output=True, text=True)
        config = json.loads(up.stdout)["config"]
        base = [*cli, "--config", config, "--host", "sandbox"]
        subprocess.run([*base, "serve", "start", "baseline", "--wait-ready"], cwd=ROOT, env=env, check=True,
                       capture_output=True)  # fmt: skip
        status = json.loads(
            subprocess.run([*base, "serve", "status", "--json"], cwd=ROOT, env=env, capture_output=True).stdout
        )
        port = status.get("port") or 30000
        peer_argv, peer_name = _peer()
        try:
            for name, argv in (("panel", base), ("peer", [*peer_argv, f"http://127.0.0.1:{port}"])):
                command = " ".join(f"'{a}'" for a in argv)
                subprocess.run([*TMUX, "new-session", "-d", "-s", name, "-x", "160", "-y", "45", f"exec {command}"],
                               env=env, check=True)  # fmt: skip
            _wait_for("panel", "connected")
            subprocess.run([*TMUX, "send-keys", "-t", "panel", "4"], check=True)
            time.sleep(SETTLE_S)
            panel, peer = _pane_pid("panel"), _pane_pid("peer")
            agents = _children(panel)
            live = _share([panel, peer, *agents], WINDOW_S)
            rss = (_rss_mb(panel), _rss_mb(peer))
            subprocess.run([*TMUX, "send-keys", "-t", "panel", "3"], check=True)
            time.sleep(SETTLE_S)
            serve = _share([panel, peer], WINDOW_S)
        finally:
            subprocess.run([*TMUX, "kill-server"], capture_output=True)
            subprocess.run([*base, "serve", "stop", "--yes"], cwd=ROOT, env=env, capture_output=True)
            subprocess.run([*cli, "sandbox", "down"], cwd=ROOT, env=env, capture_output=True)
    agent = sum(live[2:])
    return [
        Row(
            26,
            "panel idle on Live (ready server, no load), % of a core ≤ the peer's in the same run",
            f"{live[0]:.2f}% (+{agent:.2f}% its agent)",
            f"{peer_name}: {live[1]:.2f}%",
            ok=live[0] <= live[1],
        ),
        Row(
            26,
            f"panel idle on Serve, % of a core ≤ {SERVE_BUDGET}%",
            f"{serve[0]:.2f}%",
            f"{peer_name}: {serve[1]:.2f}%",
            ok=serve[0] <= SERVE_BUDGET,
        ),
        Row(
            31,
            f"panel resident memory idle on Live (VmRSS, after {SETTLE_S:.0f} s) ≤ {RSS_BUDGET_MB:.0f} MB",
            f"{rss[0]:.1f} MB",
            f"{peer_name}: {rss[1]:.1f} MB",
            ok=rss[0] <= RSS_BUDGET_MB,
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
