"""Issue 3 budgets: header-only inspect of a 1 TiB checkpoint and diffing two 2.2 GiB drafters, locally and
over SSH (a real sshd on loopback).

Every checkpoint is a sparse file (a real header over a hole), so the numbers prove only the header is read.
The alternatives, measured in the same run: the operator's way (one ``ssh host python -c …`` per file and
question: config.json of A, of B and of the target, then each drafter's shapes with the safetensors library),
the same without the ssh hop, and that library call in-process.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safetensors import safe_open

from backend.agent.host.shared.checkpoint_scan import inspect_checkpoint
from backend.drafters.checkpoint_diff import diff
from backend.drafters.sources import HOST, Source, Sources, read_diff
from backend.sandbox.fixtures import (
    KIMI_K2_TARGET_CONFIG,
    write_drafter,
    write_sparse_safetensors,
    write_target_config,
)
from bench.harness import Row, median_ms, timeit
from tests.sshd import Sshd, start_sshd

ISSUE = 3
TIB = 1 << 40
INSPECT_BUDGET_MS = 5.0  # local share of "well under a second over SSH"
DIFF_BUDGET_MS = 5.0  # local share of "≤ 50 ms on a warm connection"
SSH_INSPECT_BUDGET_MS = 100.0  # "well under a second": a tenth of one
SSH_DIFF_BUDGET_MS = 50.0
PROCESS_SPEEDUP = 2.0  # the whole `specdeck diff` process vs the operator's ssh + python -c per question


def _library_shapes(path: str) -> dict:
    """In-process, what the ``python -c`` does: open with the library, read every tensor's dtype and shape."""
    with safe_open(path, "np") as f:
        out = {name: (f.get_slice(name).get_dtype(), f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        out["__metadata__"] = f.metadata()
    return out


_SCRIPT = (
    "import sys; from safetensors import safe_open; f = safe_open(sys.argv[1], 'np'); "
    "print(f.metadata(), [(k, f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()])"
)


def _python_c(path: str) -> None:
    subprocess.run([sys.executable, "-c", _SCRIPT, path], check=True, capture_output=True)


def run() -> list[Row]:
    """The local rows and the SSH rows, on the same sparse checkpoints."""
    with tempfile.TemporaryDirectory(prefix="specdeck-bench-") as tmp:
        huge = os.path.join(tmp, "huge")
        os.mkdir(huge)
        write_sparse_safetensors(os.path.join(huge, "model.safetensors"), {"w": ("BF16", [TIB // 2])})
        a_dir = write_drafter(os.path.join(tmp, "aq"), "aq_medai_k2")
        b_dir = write_drafter(os.path.join(tmp, "ours"), "ours")
        target = write_target_config(os.path.join(tmp, "Kimi-K2.5"))
        rows = _local_rows(huge, a_dir, b_dir)
        sshd = start_sshd(Path(tmp) / "sshd")
        try:
            rows += _ssh_rows(sshd, os.path.join(tmp, "work"), huge, a_dir, b_dir, target)
        finally:
            sshd.stop()
    return rows


def _local_rows(huge: str, a_dir: str, b_dir: str) -> list[Row]:
    """Inspect a 1 TiB sparse checkpoint; diff two Kimi-K2 drafters; each against the library's safe_open."""
    huge_file = os.path.join(huge, "model.safetensors")
    info = inspect_checkpoint(huge)
    assert info["total_bytes"] == TIB
    inspect_ms = median_ms(timeit(lambda: inspect_checkpoint(huge), repeat=50))
    library_huge_ms = median_ms(timeit(lambda: _library_shapes(huge_file), repeat=50))
    process_huge_ms = median_ms(timeit(lambda: _python_c(huge_file), repeat=5))

    a, b = inspect_checkpoint(a_dir), inspect_checkpoint(b_dir)
    assert diff(a, b, KIMI_K2_TARGET_CONFIG).verdict.compatible
    diff_ms = median_ms(timeit(lambda: diff(a, b, KIMI_K2_TARGET_CONFIG), repeat=200))
    whole_ms = median_ms(
        timeit(lambda: diff(inspect_checkpoint(a_dir), inspect_checkpoint(b_dir), KIMI_K2_TARGET_CONFIG), 50)
    )
    files = [os.path.join(d, "model.safetensors") for d in (a_dir, b_dir)]
    library_pair_ms = median_ms(timeit(lambda: [_library_shapes(f) for f in files], repeat=50))
    process_pair_ms = median_ms(timeit(lambda: [_python_c(f) for f in files], repeat=5))
    return [
        Row(
            ISSUE,
            f"inspect a 1 TiB sparse checkpoint locally (header only) ≤ {INSPECT_BUDGET_MS:.0f} ms",
            f"{inspect_ms:.2f} ms",
            f"python -c with safe_open: {process_huge_ms:.0f} ms; in-process: {library_huge_ms:.2f} ms",
            ok=inspect_ms <= INSPECT_BUDGET_MS,
        ),
        Row(
            ISSUE,
            f"diff + verdicts of two inspected 2.2 GiB Kimi-K2 drafters ≤ {DIFF_BUDGET_MS:.0f} ms",
            f"{diff_ms:.2f} ms (inspect both + diff: {whole_ms:.2f} ms)",
            f"python -c with safe_open per file, shapes only: {process_pair_ms:.0f} ms; "
            f"in-process: {library_pair_ms:.2f} ms",
            ok=diff_ms <= DIFF_BUDGET_MS,
        ),
    ]


# --- over SSH ---


async def _warm(host, huge: str, a_dir: str, b_dir: str, target: str) -> tuple[list[float], list[float]]:
    """Seconds per 1 TiB inspect and per whole diff (inspect A and B, read the target, diff) on one connection."""
    from backend.connection import Connection

    conn = await Connection.open(host)

    async def opened():
        return conn

    sources = Sources(host, opened)
    a, b, t = (Source(HOST, path, path) for path in (a_dir, b_dir, target))
    try:
        inspect_s, diff_s = [], []
        for _ in range(5):  # warm up: the agent's imports, the page cache
            await conn.call("checkpoint.inspect", path=huge)
            await read_diff(sources, a, b, t)
        for _ in range(50):
            t0 = time.perf_counter()
            info = await conn.call("checkpoint.inspect", path=huge)
            inspect_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result, _, _ = await read_diff(sources, a, b, t)
            diff_s.append(time.perf_counter() - t0)
        assert info["total_bytes"] == TIB and result.verdict.compatible
    finally:
        await conn.close()
    return inspect_s, diff_s


_CONFIG_SCRIPT = "import json, sys; print(json.load(open(sys.argv[1])))"


def _operator(sshd: Sshd, a_dir: str, b_dir: str, target: str) -> None:
    """The operator's way: one ssh + python -c per file and question, each answer printed for the eye."""
    ssh = sshd.ssh_argv()
    for folder in (a_dir, b_dir, target):
        script = f'"{_CONFIG_SCRIPT}" {folder}/config.json'
        subprocess.run([*ssh, f"{sys.executable} -c {script}"], check=True, capture_output=True)
    for folder in (a_dir, b_dir):
        script = f'"{_SCRIPT}" {folder}/model.safetensors'
        subprocess.run([*ssh, f"{sys.executable} -c {script}"], check=True, capture_output=True)


def _specdeck(flags: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "backend.cli.main", *flags, *args, "--json"], check=True, capture_output=True
    )


def _ssh_rows(sshd: Sshd, workdir: str, huge: str, a_dir: str, b_dir: str, target: str) -> list[Row]:
    from backend.settings.model import HostConfig

    host = HostConfig(
        name="bench",
        url=sshd.url,
        python=sys.executable,
        workdir=workdir,
        identity=sshd.identity,
        known_hosts=sshd.known_hosts,
    )
    inspect_s, diff_s = asyncio.run(_warm(host, huge, a_dir, b_dir, target))
    inspect_ms, diff_ms = median_ms(inspect_s), median_ms(diff_s)
    flags = ["--host", sshd.url, "--identity", sshd.identity, "--known-hosts", sshd.known_hosts]
    flags += ["--python", sys.executable, "--workdir", workdir]
    # Alternate the two ways so a busy machine slows both alike; the agent is already uploaded (by _warm).
    process_s, operator_s, inspect_process_s, operator_huge_s = [], [], [], []
    for _ in range(5):
        process_s += timeit(lambda: _specdeck(flags, "diff", a_dir, b_dir, "--target", target), repeat=1)
        operator_s += timeit(lambda: _operator(sshd, a_dir, b_dir, target), repeat=1)
        inspect_process_s += timeit(lambda: _specdeck(flags, "inspect", huge), repeat=1)
        operator_huge_s += timeit(
            lambda: subprocess.run(
                [*sshd.ssh_argv(), f'{sys.executable} -c "{_SCRIPT}" {huge}/model.safetensors'],
                check=True,
                capture_output=True,
            ),
            repeat=1,
        )
    process, operator = statistics.median(process_s), statistics.median(operator_s)
    return [
        Row(
            ISSUE,
            f"inspect a 1 TiB sparse checkpoint over SSH, warm connection ≤ {SSH_INSPECT_BUDGET_MS:.0f} ms",
            f"{inspect_ms:.2f} ms",
            f"whole `specdeck inspect` process: {median_ms(inspect_process_s):.0f} ms; "
            f"ssh + python -c safe_open: {median_ms(operator_huge_s):.0f} ms",
            ok=inspect_ms <= SSH_INSPECT_BUDGET_MS,
        ),
        Row(
            ISSUE,
            f"diff two 2.2 GiB drafters + target over SSH, warm connection ≤ {SSH_DIFF_BUDGET_MS:.0f} ms",
            f"{diff_ms:.2f} ms",
            "inspect A and B and read the target's config.json through the agent, then diff and verdict",
            ok=diff_ms <= SSH_DIFF_BUDGET_MS,
        ),
        Row(
            ISSUE,
            f"whole `specdeck diff` process over SSH ≥ {PROCESS_SPEEDUP:.0f}× faster than ssh + python -c per question",
            f"{operator / process:.1f}× ({process * 1000:.0f} ms)",
            f"5 × ssh + python -c (3 configs, 2 headers): {operator * 1000:.0f} ms",
            ok=operator / process >= PROCESS_SPEEDUP,
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
