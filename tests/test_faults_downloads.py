"""Faults injected into drafter downloads on the host, driving the real agent over `local` and the real sshd.

A file replaced behind the sidecar's back, and a disk that fills in the middle of a transfer: each test
states what must hold afterwards (no stale "verified", a failure with both numbers, nothing left pretending
to be complete, a clean next download).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.drafters import downloads
from backend.sandbox.hub import HubServer
from backend.settings.model import DrafterConfig, HostConfig
from tests.conftest import TMPFS_BYTES
from tests.helpers import fill
from tests.hubrepo import MODEL_BYTES, RATE, REPO, run_job, write_repo

pytestmark = pytest.mark.e2e


@pytest.fixture
def fast_hub(tmp_path):
    root = tmp_path / "hub"
    write_repo(root)
    with HubServer(root) as server:
        server.warm()
        yield server


@pytest.fixture
async def conn(host: HostConfig):
    c = await Connection.open(host)
    yield c
    await c.close()


async def state_of(conn: Connection, to: Path, repo: str = REPO) -> str:
    [row] = await downloads.status(conn, [DrafterConfig("d", str(to), repo)])
    return row.state


@pytest.mark.slow
async def test_a_replaced_file_with_size_and_mtime_kept_is_no_longer_verified(conn, fast_hub, tmp_path):
    """Same size and mtime, other bytes (written in place, then the mtime put back as `cp -p` does), or the
    same bytes in a new file (`rsync -a`): neither is "verified" until hashed again; nor is a record made
    against another repo."""
    to = tmp_path / "out"
    job, _ = await run_job(conn, downloads.Request(repo=REPO, to=str(to), endpoint=fast_hub.url))
    assert job["state"] == "done", job
    model = to / "model.safetensors"
    assert await state_of(conn, to) == "verified"
    assert await state_of(conn, to, repo="other/drafter") == "present"

    original = tmp_path / "original.safetensors"
    shutil.copy2(model, original)
    before = os.stat(model)
    with open(model, "r+b") as f:
        f.seek(before.st_size - 8)
        f.write(b"\x01" * 8)
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(model)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert await state_of(conn, to) == "present"

    copy = to / "model.safetensors.copy"
    shutil.copy2(original, copy)  # the original bytes, size and mtime, as a new file
    os.replace(copy, model)
    assert os.stat(model).st_mtime_ns == before.st_mtime_ns
    assert await state_of(conn, to) == "present"
    checked = await conn.call("download.verify", path=str(to), repo=REPO, endpoint=fast_hub.url)
    assert checked["ok"]
    assert await state_of(conn, to) == "verified"


@pytest.mark.slow
async def test_disk_full_mid_download_fails_with_both_numbers_and_the_next_download_is_clean(tmpfs_host, tmp_path):
    host, mnt = tmpfs_host
    root = tmp_path / "hub"
    write_repo(root)
    # Slow while the disk fills: the fill follows the first progress event, which a loaded machine may deliver
    # a second late; at RATE the 48 MiB would be written by then and nothing would fail.
    with HubServer(root, rate_bps=RATE // 8) as hub:
        hub.warm()
        conn = await Connection.open(host)
        try:
            agent = (await conn.call("info"))["pid"]
            inside = f"/proc/{agent}/root{mnt}"  # the tmpfs as the agent sees it
            assert (await conn.call("fs.disk", path=str(mnt)))["total"] == TMPFS_BYTES
            to = mnt / "drafter"
            started, _ = await downloads.start(conn, downloads.Request(repo=REPO, to=str(to), endpoint=hub.url))
            failed = None
            async for _, event in downloads.follow(conn, started.id):
                moving = event.get("file") == "model.safetensors" and event["event"] == "progress" and event["bytes"]
                if moving and not os.path.exists(f"{inside}/filler"):
                    fill(f"{inside}/filler")  # the disk fills while the model is on its way
                if event["event"] == "failed":
                    failed = event
            job = await conn.call("jobs.wait", id=started.id, timeout=30)
            assert job["state"] == "failed", job
            assert failed is not None and failed["file"] == "model.safetensors"
            assert failed["needed"] == MODEL_BYTES and 0 <= failed["free"] < failed["needed"]
            assert job["reason"].startswith(f"disk full in {to} while downloading model.safetensors")
            assert f"({MODEL_BYTES} bytes)" in job["reason"] and f"({failed['free']} bytes) is free" in job["reason"]
            # Nothing pretends to be the complete file.
            assert not os.path.exists(f"{inside}/drafter/model.safetensors")
            assert await state_of(conn, to) in ("partial", "missing")

            os.remove(f"{inside}/filler")
            hub.rate_bps = RATE  # read per request
            again, _ = await run_job(conn, downloads.Request(repo=REPO, to=str(to), endpoint=hub.url))
            assert again["state"] == "done", again
            assert await state_of(conn, to) == "verified"
            assert os.path.getsize(f"{inside}/drafter/model.safetensors") == MODEL_BYTES
        finally:
            await conn.close()


def test_a_byte_rewritten_while_verifying_is_never_verified(tmp_path):
    """Issue 20, item 6: a writer changes a weight byte while it is hashed. The file's identity is read from the
    open file before the first byte and compared after the last, so the result is "changed while verifying"
    (not ok, nothing recorded as verified), never a match recorded against the changed file."""
    import hashlib

    from backend.agent.host import drafter_folder

    data = os.urandom(3 << 20)
    weights = tmp_path / "model.safetensors.bin"
    weights.write_bytes(data)
    entry = {"path": weights.name, "sha256": hashlib.sha256(data).hexdigest()}
    os.utime(weights, ns=(10**18, 10**18))  # written long ago: the rewrite below surely moves mtime

    def rewrite_when_hashed(n: int) -> None:
        if n == len(data):  # every byte read, the identity not yet read again
            with open(weights, "r+b") as f:
                f.seek(17)
                f.write(bytes([data[17] ^ 0xFF]))

    result = drafter_folder.check_file(str(tmp_path), entry, rewrite_when_hashed)
    assert not result["verified"] and result["changed"]
    assert "changed while it was being verified" in result["problem"]
    assert drafter_folder.read_sidecar(str(tmp_path)) == {}


def test_a_download_already_running_is_found_through_a_link(tmp_path):
    """Issue 20, item 8: `--to` through a symbolic link to the folder a download writes into is that folder."""
    import json

    from backend.agent.host import download as host_download
    from backend.agent.host import jobs, ownership

    state, folder = tmp_path / "state", tmp_path / "drafter"
    folder.mkdir()
    (tmp_path / "link").symlink_to(folder)
    job = Path(jobs.jobs_root(str(state))) / "download-20261201-000000-abcd"
    job.mkdir()
    (job / "spec.json").write_text(json.dumps({"kind": "download", "args": {"to": str(folder)}, "started": 1.0}))
    me = {"pid": os.getpid(), "pgid": os.getpgid(0), "start": ownership.proc_start_time(os.getpid())}
    (job / "pid.json").write_text(json.dumps(me))  # this process plays its live runner
    for alias in (tmp_path / "link", tmp_path / "link" / ".." / "drafter"):
        busy = host_download.running_download(str(state), os.path.abspath(str(alias)))
        assert busy is not None and busy["id"] == job.name, alias
