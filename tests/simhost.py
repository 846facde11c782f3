"""A simulated SGLang host for tests: settings and config files over the fixture models, the CLI against them,
simulated servers started as serve jobs (and their logs' totals against the history's), a stand-in
nvidia-smi, and waiting for a process to go or to stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from backend.connection import Connection
from backend.history import History
from backend.jobs import JobInfo, get_job
from backend.measure.metrics import live_samples
from backend.serve import command_line
from backend.settings.model import HostConfig, Settings
from backend.settings.validation import parse
from tests.helpers import Ran, run_cli
from tests.sshd import free_port

REPO = Path(__file__).resolve().parents[1]

TIME_SCALE = "0.02"  # the simulator's startup in ~0.1 s instead of ~5 s
EAGLE = {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4}
PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python")


def make_settings(models: dict, **profiles: dict) -> Settings:
    """Settings whose target and drafters are the fixtures, with ``profiles`` (each on a free port)."""
    data = {
        "target": models["target"],
        "drafters": {name: {"path": models[name]} for name in ("ours", "aq-medai", "misfit")},
        "profiles": {},
    }
    for name, values in profiles.items():
        env = {"SPECDECK_SIM_TIME_SCALE": TIME_SCALE, **values.pop("env", {})}
        data["profiles"][name] = {"port": free_port(), "env": env, **values}
    return parse(data, "test")


def write_config(path: Path, models: dict, workdir: Path, ports: dict) -> Path:
    scale = f'env = {{ SPECDECK_SIM_TIME_SCALE = "{TIME_SCALE}" }}'
    path.write_text(
        f"""default_host = "sim"
target = {json.dumps(models["target"])}
[hosts.sim]
url = "local"
python = {json.dumps(sys.executable)}
workdir = {json.dumps(str(workdir))}
launcher = "simulator"
sandbox = true
[drafters.ours]
path = {json.dumps(models["ours"])}
[drafters.aq-medai]
path = {json.dumps(models["aq-medai"])}
[profiles.baseline]
port = {ports["a"]}
{scale}
[profiles.eagle3-ours]
port = {ports["a"]}
{scale}
[profiles.eagle3-aq]
port = {ports["b"]}
{scale}
"""
    )
    return path


def specdeck(config: Path, *args: str, rc: int | None = 0, process: bool = False) -> Ran:
    """`specdeck --config CONFIG ARGS` (``run_cli``)."""
    return run_cli("--config", str(config), *args, rc=rc, process=process)


def fake_nvidia_smi(bin_dir: Path, other_pid_file: Path) -> None:
    """An ``nvidia-smi`` on PATH for the agent: two GPUs; every simulator process on GPU0, the pid in
    ``other_pid_file`` (someone else's) on GPU1. A stand-in for the external tool, not for our code."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  --query-gpu=*) echo "0, GPU-a, NVIDIA H200, 71000, 143771, 35"\n'
        '    echo "1, GPU-b, NVIDIA H200, 69000, 143771, 0";;\n'
        '  --query-compute-apps=*) for p in $(pgrep -f backend.sandbox.sglang_sim); do echo "GPU-a, $p, 70000"; done;\n'
        f'    test -f {other_pid_file} && echo "GPU-b, $(cat {other_pid_file}), 69000";;\n'
        "esac\n"
    )
    script.chmod(0o755)


def process_gone(pid: int) -> bool:
    """Gone or a zombie. /proc alone decides: it may be reaped between any two looks at it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):
        return True


async def until_gone(pid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not process_gone(pid):
        assert time.monotonic() < deadline, f"pid {pid} still running"
        await asyncio.sleep(0.02)


def process_stopped(pid: int) -> bool:
    """Every thread of ``pid`` stopped (state T). ``kill(SIGSTOP)`` returns once the signal is queued and one
    thread is woken to act on it; until that thread gets a CPU, the others run on as they are woken (by a
    socket's data, say): on a busy machine, for tens of milliseconds."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
        return bool(threads) and all(
            Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(") ", 1)[1].startswith("T") for t in threads
        )
    except (FileNotFoundError, ProcessLookupError):
        return False  # gone, or a thread ended between the listing and its look


def stop(pid: int, timeout: float = 60) -> None:
    """SIGSTOP ``pid`` and return once it has stopped: the kernel wakes one thread to take the signal, and
    another woken meanwhile (by a request, a closed socket) can still answer before the process stops."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not process_stopped(pid):
        assert not process_gone(pid), f"pid {pid} ended before it stopped"
        assert time.monotonic() < deadline, f"pid {pid} not stopped {timeout:.0f} s after SIGSTOP"
        time.sleep(0.01)


async def until_stopped(pid: int, timeout: float = 60) -> None:
    """After ``kill(pid, SIGSTOP)``: until it has stopped, not merely been told to."""
    deadline = time.monotonic() + timeout
    while not process_stopped(pid):
        assert not process_gone(pid), f"pid {pid} ended before it stopped"
        assert time.monotonic() < deadline, f"pid {pid} not stopped {timeout:.0f} s after SIGSTOP"
        await asyncio.sleep(0.01)


# --- the simulator as the host's running server ---------------------------------------------------------


PROFILES = {"baseline": None, "eagle3-ours": "ours", "eagle3-aq": "aq-medai"}


def server_argv(models: dict, profile: str, port: int) -> list[str]:
    """The simulator with a profile's flags (as `specdeck serve` would launch SGLang)."""
    argv = [sys.executable, "-m", "backend.sandbox.sglang_sim", "--model-path", models["target"], "--tp-size", "8"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--enable-metrics", "--decode-log-interval", "5"]
    argv += ["--random-seed", "7"]
    drafter = PROFILES[profile]
    if drafter:
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", models[drafter]]
        argv += ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
        argv += ["--speculative-num-draft-tokens", "4"]
    return argv


async def start_server(conn: Connection, models: dict, profile: str) -> JobInfo:
    """A serve job running the simulator on a free port, once /health answers 200."""
    port = free_port()
    wire = await conn.call(
        "jobs.start",
        kind="serve",
        argv=server_argv(models, profile, port),
        # The target as `serve` records it: the bench renders its prompts with the target's chat template.
        args={"profile": profile, "port": port, "drafter": PROFILES[profile], "model": models["target"]},
        env={"SPECDECK_SIM_TIME_SCALE": "0.05", **command_line.launch_env(conn.host)},
        cwd=str(REPO),
    )
    job = JobInfo.from_json(wire)
    deadline = time.monotonic() + 60  # another process, on a loaded machine: poll with short waits
    while (await conn.call("http.request", url=f"http://127.0.0.1:{port}/health")).get("status") != 200:
        assert (await get_job(conn, job.id)).state == "running", job
        assert time.monotonic() < deadline, f"{profile} server not ready"
        await asyncio.sleep(0.02)
    return job


@contextlib.asynccontextmanager
async def servers(
    host: HostConfig, models: dict, *profiles: str
) -> AsyncIterator[tuple[Connection, dict[str, JobInfo]]]:
    """A connection to ``host`` with one simulated server per profile; every server is stopped after."""
    conn = await Connection.open(host)
    jobs: dict[str, JobInfo] = {}
    try:
        started = await asyncio.gather(*(start_server(conn, models, p) for p in profiles))
        jobs = dict(zip(profiles, started, strict=True))
        yield conn, jobs
    finally:
        for job in jobs.values():
            await conn.call("jobs.cancel", id=job.id)
        await conn.close()


def log_lines_of(job: JobInfo) -> list[str]:
    return Path(job.log_path).read_text().splitlines()


def recorded_totals(run_id: str) -> tuple[int, int, float]:
    """(tok/s samples, accept samples, tok/s sum) the history holds for a run."""
    with History.open() as history:
        row = history.db.execute(
            "SELECT coalesce(sum(tok_n), 0), coalesce(sum(acc_n), 0), coalesce(sum(tok_sum), 0) FROM samples "
            "WHERE run = ?",
            (run_id,),
        ).fetchone()
    return row[0], row[1], row[2]


def log_totals(job: JobInfo) -> tuple[int, int, float]:
    """The same totals for the whole log, read at once (post-idle throughput left out)."""
    decode = [s for s in live_samples(log_lines_of(job)) if s.kind == "decode"]
    tok = [s.gen_tps for s in decode if s.gen_tps is not None]
    return len(tok), len(decode), sum(tok)
