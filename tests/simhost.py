"""A simulated SGLang host for tests: settings and config files over the fixture models, the CLI against them,
a stand-in nvidia-smi, and waiting for a process to go."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from backend.settings import Settings, parse
from tests.sshd import free_port

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


def specdeck(config: Path, *args: str, rc: int | None = 0) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [sys.executable, "-m", "backend.cli.main", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rc is None or res.returncode == rc, (res.stdout, res.stderr)
    return res


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
        '  --query-compute-apps=*) for p in $(pgrep -f backend.sandbox.simulator); do echo "GPU-a, $p, 70000"; done;\n'
        f'    test -f {other_pid_file} && echo "GPU-b, $(cat {other_pid_file}), 69000";;\n'
        "esac\n"
    )
    script.chmod(0o755)


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


async def until_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not process_gone(pid):
        assert time.monotonic() < deadline, f"pid {pid} still running"
        await asyncio.sleep(0.02)
