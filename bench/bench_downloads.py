"""Issue 4's budget (made strict by issue 11): a download through specdeck (a detached job on the host
reporting progress) costs the host no more than a plain ``hf_hub_download`` of the same file from the same
local hub, in the same run: the plain one's CPU time ≥ 95% of the job's, each side's lower quartile of 15 runs.

Both sides time the same thing, the ``hf_hub_download`` call (HEAD and transfer, not interpreter start-up):
the plain one in a fresh child, specdeck's from the job's own ``done`` event, each as wall time and as its
process's CPU time (every thread: the job's progress reporting included). The budget is on CPU time: on this
shared 2-core box the wall times of the same transfer spread 26%–237% between the two sides of a pair at load
4-10 (the hub, the client and other people's tests take turns on the cores), so the median of 9 pairs moved
85%–122% between runs of an unchanged product; the CPU a transfer takes is what the download path decides,
and the wall times are shown beside it. A transfer's CPU time moves too at load 8-11 (caches and memory
bandwidth are shared; pairs' ratios 53%-152%), but only upwards from what the transfer itself costs, so each
side's lower quartile of 15 is compared. They run in back-to-back pairs in alternating order. The job's
end-to-end time (RPC to ``done``) and the sha256 verification, which the plain download does not do, are
reported beside it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from backend.connection import Connection
from backend.drafters import downloads
from backend.sandbox.hub import HubServer
from backend.settings.model import HostConfig
from bench.bench_hub import FILENAME, REPO, SIZE, plain_download, write_sparse_safetensors
from bench.harness import Row

REPEAT = 15
BUDGET = 0.95


def scratch_dir() -> str | None:
    """/dev/shm when it has room: both sides then write to memory, so the ratio measures the download paths and
    not the disk's writeback, which stalls whichever side happens to run while dirty pages flush."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if st.f_bavail * st.f_frsize > 4 * SIZE else None


async def specdeck_download(conn: Connection, endpoint: str, to: Path) -> tuple[float, float, float, float]:
    """(transfer seconds and its CPU seconds from the job's done event, verify seconds, end-to-end seconds) of
    one job."""
    t0 = time.perf_counter()
    req = downloads.Request(repo=REPO, to=str(to), files=(FILENAME,), endpoint=endpoint)
    started, _ = await downloads.start(conn, req)
    progress_events = 0
    done = None
    async for _, event in downloads.follow(conn, started.id):
        progress_events += event.get("event") == "progress"
        if event.get("event") == "done":
            done = event
    wall = time.perf_counter() - t0
    if done is None or progress_events < 2:
        raise RuntimeError(f"the download job did not finish with progress: {started.id}")
    [f] = done["files"]
    if not f["verified"]:
        raise RuntimeError("the benchmark download was not verified")
    shutil.rmtree(to)
    return f["seconds"], f["cpu_seconds"], f["verify_seconds"], wall


async def measure(tmp: Path) -> dict[str, list[float]]:
    root = tmp / "hub"
    write_sparse_safetensors(root / REPO / FILENAME, SIZE)
    # The same environment for both clients: plain HTTP, and an HF cache that cannot short-cut the transfer.
    os.environ.update(HF_HUB_DISABLE_XET="1", HF_HOME=str(tmp / "hf_home"))
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp / "host"))
    out: dict[str, list[float]] = {"plain": [], "plain_cpu": [], "job": [], "job_cpu": [], "verify": [], "wall": []}
    with HubServer(root) as hub:
        hub.warm()  # hashing is a one-off per file, not part of a transfer
        conn = await Connection.open(host)
        try:
            # Warm both paths (agent upload, first imports, page cache of the hub's file) before timing.
            await specdeck_download(conn, hub.url, tmp / "warmup")
            await asyncio.to_thread(plain_download, hub.url, REPO, FILENAME, tmp)
            for i in range(REPEAT):
                # Pairs, each in alternating order: what one side leaves behind (dirty pages being written
                # back, a warm cache) falls on the other side just as often.
                for side in ("plain", "job") if i % 2 == 0 else ("job", "plain"):
                    if side == "plain":
                        plain = await asyncio.to_thread(plain_download, hub.url, REPO, FILENAME, tmp)
                        out["plain"].append(plain.seconds)
                        out["plain_cpu"].append(plain.cpu_seconds)
                    else:
                        seconds, cpu, verify, wall = await specdeck_download(conn, hub.url, tmp / f"job{i}")
                        out["job"].append(seconds)
                        out["job_cpu"].append(cpu)
                        out["verify"].append(verify)
                        out["wall"].append(wall)
        finally:
            await conn.close()
    return out


def run() -> list[Row]:
    saved = dict(os.environ)
    try:
        scratch = scratch_dir()
        with tempfile.TemporaryDirectory(prefix="bench-downloads-", dir=scratch) as tmp:
            times = asyncio.run(measure(Path(tmp)))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    # Each side's lower quartile of CPU time is the budget (interference only adds to it); the pairs' CPU and
    # wall ratios and each side's best run beside it.
    plain, job = SIZE / min(times["plain"]) / 1e6, SIZE / min(times["job"]) / 1e6
    cpu = sorted(p / j for p, j in zip(times["plain_cpu"], times["job_cpu"], strict=True))
    walls = sorted(p / j for p, j in zip(times["plain"], times["job"], strict=True))
    quartile = statistics.quantiles(times["plain_cpu"], n=4)[0] / statistics.quantiles(times["job_cpu"], n=4)[0]
    verify = statistics.median(times["verify"])
    wall = statistics.median(times["wall"])
    return [
        Row(
            issue=4,
            budget=f"download via specdeck job, plain hf_hub_download's CPU time ≥ {BUDGET:.0%} of the job's "
            f"(lower quartile of {REPEAT} each, {SIZE >> 20} MiB, {'into tmpfs' if scratch else 'on disk'})",
            measured=f"{quartile:.0%} (median pair {statistics.median(cpu):.0%}, pairs {cpu[0]:.0%}–{cpu[-1]:.0%}; "
            f"job {statistics.quantiles(times['job_cpu'], n=4)[0]:.2f} s CPU)",
            alternative=f"wall time: median pair {statistics.median(walls):.0%} (pairs {walls[0]:.0%}–{walls[-1]:.0%}, "
            f"load {os.getloadavg()[0]:.1f}); best of {REPEAT}: job {job:,.0f} MB/s, plain {plain:,.0f} MB/s",
            ok=quartile >= BUDGET,
        ),
        Row(
            issue=4,
            budget=f"sha256 verification of {SIZE >> 20} MiB (reported apart)",
            measured=f"{verify:.2f} s ({SIZE / verify / 1e6:,.0f} MB/s)",
            alternative=f"whole job, RPC to done: {wall:.2f} s",
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
