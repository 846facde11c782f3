"""Issue 4's baseline: a plain ``hf_hub_download`` from the sandbox's local Hub.

specdeck's download job must reach ≥ 95% of this throughput on the same file from the same hub in the same
run; :func:`plain_download` is the measurement to reuse for that comparison.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from backend.sandbox.hub import HubServer
from bench.harness import Row

SIZE = 256 << 20
REPO = "bench/drafter"
FILENAME = "model.safetensors"
REPEAT = 3

# Runs in a fresh interpreter so the client never shares a GIL with the server; imports are not timed.
_CHILD = """
import sys, time
from huggingface_hub import hf_hub_download
endpoint, repo_id, filename, local_dir = sys.argv[1:5]
t0, c0 = time.perf_counter(), time.process_time()
hf_hub_download(repo_id, filename, local_dir=local_dir, cache_dir=local_dir + "/.hf_cache", endpoint=endpoint)
print(time.perf_counter() - t0, time.process_time() - c0)
"""


@dataclass(frozen=True)
class Transfer:
    """One timed transfer."""

    bytes: int
    seconds: float
    cpu_seconds: float = 0.0  # the client process's CPU time (user + system, every thread) over the transfer

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6


def plain_download(endpoint: str, repo_id: str, filename: str, workdir: Path, python: str = sys.executable) -> Transfer:
    """Time a bare ``hf_hub_download`` of one file in a child ``python`` (plain HTTP, no progress bars).

    Downloads into a fresh folder under ``workdir`` and removes it afterwards; the wall and CPU times cover the
    HEAD and the transfer, not interpreter start-up or imports.
    """
    env = dict(os.environ, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    env.pop("HF_HUB_OFFLINE", None)
    target = Path(tempfile.mkdtemp(prefix="plain-", dir=workdir))
    try:
        env["HF_HOME"] = str(target / ".hf_home")  # never the real cache
        out = subprocess.run(
            [python, "-c", _CHILD, endpoint, repo_id, filename, str(target)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        wall, cpu = map(float, out.split()[-2:])
        return Transfer((target / filename).stat().st_size, wall, cpu)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def raw_get(endpoint: str, repo_id: str, filename: str) -> Transfer:
    """Time a GET of the same file with http.client, discarding the bytes: what the hub itself can serve."""
    u = urlsplit(endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    buf = bytearray(8 << 20)
    got = 0
    t0 = time.perf_counter()
    try:
        conn.request("GET", f"/{repo_id}/resolve/main/{filename}")
        resp = conn.getresponse()
        while n := resp.readinto(buf):
            got += n
    finally:
        conn.close()
    return Transfer(got, time.perf_counter() - t0)


def write_sparse_safetensors(path: Path, size: int) -> None:
    """A valid one-tensor safetensors file of ``size`` bytes whose data region is a hole (zeros)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = b""
    data = size
    for _ in range(2):  # the header's own length changes the data length once
        meta = {"weight": {"dtype": "U8", "shape": [data], "data_offsets": [0, data]}}
        header = json.dumps(meta, separators=(",", ":")).encode()
        header += b" " * (-len(header) % 8)
        data = size - 8 - len(header)
    with path.open("wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(size)


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
        root = Path(tmp) / "hub"
        write_sparse_safetensors(root / REPO / FILENAME, SIZE)
        with HubServer(root) as hub:
            hub.warm()  # hashing is a one-off per file, not part of a transfer
            plain = [plain_download(hub.url, REPO, FILENAME, Path(tmp)) for _ in range(REPEAT)]
            raw = max((raw_get(hub.url, REPO, FILENAME) for _ in range(REPEAT)), key=lambda t: t.mb_per_s)
    median = statistics.median(t.mb_per_s for t in plain)
    return [
        Row(
            issue=4,
            budget=f"baseline: plain hf_hub_download of {SIZE >> 20} MiB from the local hub (job ≥ 95%)",
            measured=f"{median:,.0f} MB/s (median of {REPEAT}; {min(t.seconds for t in plain):.2f} s best)",
            alternative=f"raw HTTP GET from the same hub: {raw.mb_per_s:,.0f} MB/s",
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
