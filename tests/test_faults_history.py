"""Faults in the run history database: damaged, locked, from a newer specdeck, or busy with another writer.

What must hold: the CLI says in one line what is wrong and where the file is (no traceback, no "internal
error"); the panel starts, says it in the History tab and works on in the other tabs; a refused database is
never written to; commands that only read never need the write lock.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.history import History, HistoryUnavailable, history_path
from backend.history import store as history_store
from backend.jobs import JobInfo, wait_job
from backend.settings.model import builtin_defaults
from tests.helpers import run_cli, until

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def damaged() -> Path:
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a SQLite database\n" * 200)
    return path


def newer_schema() -> Path:
    """A database a future specdeck wrote (schema 99) in rollback-journal mode, as that specdeck may."""
    path = history_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE future (x)")
    db.execute("PRAGMA user_version=99")
    db.commit()
    db.close()
    return path


def test_cli_on_a_damaged_database_says_so_in_one_line():
    path = damaged()
    before = digest(path)
    res = run_cli("history", rc=None)
    assert res.returncode != 0
    assert res.stderr.count("\n") == 1 and "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert str(path) in res.stderr and "damaged" in res.stderr and "move it aside" in res.stderr
    assert digest(path) == before  # never written to


def test_cli_on_a_future_schema_refuses_without_writing():
    path = newer_schema()
    before = digest(path)
    res = run_cli("history", "--json", rc=None)
    assert res.returncode != 0 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and str(path) in res.stderr and "newer specdeck (schema 99)" in res.stderr
    assert digest(path) == before
    assert not Path(f"{path}-wal").exists()  # journal mode not switched to WAL behind its back
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert db.execute("PRAGMA user_version").fetchone()[0] == 99
    db.close()


def test_locked_database_is_refused_with_the_reason(monkeypatch, tmp_path):
    """Another process holds the file exclusively: the open gives up after its timeout with a sentence."""
    path = tmp_path / "h.sqlite3"
    History.open(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "db.execute('PRAGMA locking_mode=EXCLUSIVE'); db.execute('BEGIN EXCLUSIVE'); "
            "print('held', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(history_store, "LOCK_TIMEOUT_S", 0.2)
        with pytest.raises(HistoryUnavailable) as err:
            History.open(path)
        assert str(path) in str(err.value) and "locked by another process" in str(err.value)
    finally:
        holder.stdin.close()
        holder.wait(10)
    History.open(path).close()  # usable again once the other process is done


def test_reading_needs_no_write_lock(three_runs):
    """A writer holds the write lock (a long import, another panel): `specdeck history` still lists the runs,
    at once rather than after the lock timeout."""
    path = history_path()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "db.execute('BEGIN IMMEDIATE'); print('held', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        res = run_cli("history", rc=None)
        assert res.returncode == 0, res.stderr
        assert "eagle3-aq" in res.stdout
        assert time.monotonic() - t0 < history_store.LOCK_TIMEOUT_S
    finally:
        holder.stdin.close()
        holder.wait(10)


@pytest.mark.parametrize("make", [damaged, newer_schema], ids=["damaged", "future-schema"])
@pytest.mark.slow
async def test_panel_starts_and_says_it_in_the_history_tab(make, tmp_path, monkeypatch):
    from textual.widgets import Static, TabbedContent

    from tui.app import SpecdeckApp
    from tui.screens.history import HistoryPane

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = make()
    before = digest(path)
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("5")
        pane = app.query_one(HistoryPane)
        status = pane.query_one("#history-status", Static)
        await until(pilot, lambda: str(path) in str(status.content), "the error in the History tab")
        assert status.has_class("-error")
        # The rest of the panel works: connected, and the other tabs open.
        await until(pilot, lambda: app.connection.connected, "the connection")
        await pilot.press("3")
        await until(pilot, lambda: app.query_one(TabbedContent).active == "serve", "the Serve tab")
        await pilot.press("5")
        await until(pilot, lambda: "synced" not in str(status.content) and pane.error, "the error still said")
    assert digest(path) == before


# --- a server log truncated or replaced on the host while it is followed and recorded ----------------------

WRITER = """
import os, sys, time
def lines(first, n):
    for i in range(first, first + n):
        print("[2026-01-01 00:%02d:%02d TP0] Decode batch, #running-req: 1, #token: 100, token usage: 0.01, "
              "accept len: 2.50, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 80.00, "
              "#queue-req: 0, " % (i // 60, i % 60), flush=True)
lines(0, 30)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
lines(100, 20)
"""


async def truncating_job(conn, gate: Path) -> JobInfo:
    argv = [sys.executable, "-c", WRITER, str(gate)]
    return JobInfo.from_json(await conn.call("jobs.start", kind="serve", argv=argv, args={"profile": "t", "port": 9}))


def accept_samples(run_id: str) -> int:
    with History.open() as history:
        return history.db.execute("SELECT coalesce(sum(acc_n), 0) FROM samples WHERE run = ?", (run_id,)).fetchone()[0]


async def test_truncated_log_is_followed_and_recorded_again_from_its_start(tmp_path):
    """The log is truncated mid-follow: the feed says so, reads the new lines from the start, and the history
    keeps the 30 samples from before and records the 20 after (none lost, none twice)."""
    from backend.connection import Connection
    from backend.history import HistoryThread, run_id_of
    from backend.measure.livefeed import LiveFeed
    from backend.measure.series import LiveSeries
    from backend.settings.model import HostConfig

    conn = await Connection.open(HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path)))
    recorder = HistoryThread()
    try:
        gate = tmp_path / "gate"
        job = await truncating_job(conn, gate)
        recorder.record("local")
        changes: list[str] = []
        feed = LiveFeed(conn, LiveSeries(82.0), changes.append, poll_s=60, recorder=recorder)

        async def follow() -> None:
            async for _ in feed.follow(job):
                recorder.flush()

        follower = asyncio.create_task(follow())
        deadline = time.monotonic() + 30
        while feed.lines < 30:
            assert time.monotonic() < deadline, "the first 30 lines"
            await asyncio.sleep(0.02)
        os.truncate(job.log_path, 0)  # logrotate's copytruncate
        while "truncated" not in changes:
            assert time.monotonic() < deadline, "the truncation noticed"
            await asyncio.sleep(0.02)
        gate.touch()
        await asyncio.wait_for(follower, 30)
        assert feed.lines == 50 and feed.offset == os.path.getsize(job.log_path)
        recorder.flush(force=True).result(10)
        run_id = run_id_of("local", job.id)
        assert accept_samples(run_id) == 50
        with History.open() as history:
            assert history.imported(run_id) == feed.offset
    finally:
        recorder.close()
        await conn.close()


async def test_sync_imports_a_truncated_log_again_from_its_start(tmp_path):
    """Imported up to byte X, then truncated on the host and written again: the next sync notices the file is
    shorter than X and imports the new lines (before: it waited past the end for ever)."""
    from backend.connection import Connection
    from backend.history import run_id_of, sync_from_host
    from backend.settings.model import HostConfig

    conn = await Connection.open(HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path)))
    try:
        gate = tmp_path / "gate"
        job = await truncating_job(conn, gate)
        run_id = run_id_of("local", job.id)
        deadline = time.monotonic() + 30
        log = Path(job.log_path)
        while not log.exists() or len(log.read_text().splitlines()) < 30:
            assert time.monotonic() < deadline, "the first 30 lines"
            await asyncio.sleep(0.02)
        with History.open() as history:
            await sync_from_host(history, conn)
        assert accept_samples(run_id) == 30
        os.truncate(job.log_path, 0)
        gate.touch()
        await conn.call("jobs.wait", id=job.id, timeout=30)
        with History.open() as history:
            await sync_from_host(history, conn)
            assert history.imported(run_id) == os.path.getsize(job.log_path)
        assert accept_samples(run_id) == 50
    finally:
        await conn.close()


def decode_lines(first: int, n: int) -> str:
    """WRITER's lines ``first`` .. ``first + n - 1``, as a file holds them."""
    return "".join(
        f"[2026-01-01 00:{i // 60:02d}:{i % 60:02d} TP0] Decode batch, #running-req: 1, #token: 100, token usage: "
        "0.01, accept len: 2.50, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 80.00, "
        "#queue-req: 0, \n"
        for i in range(first, first + n)
    )


async def wait_lines(log: Path, n: int) -> None:
    deadline = time.monotonic() + 60
    while not log.exists() or len(log.read_text().splitlines()) < n:
        assert time.monotonic() < deadline, f"the first {n} lines"
        await asyncio.sleep(0.02)


async def test_sync_imports_a_rotated_log_longer_than_the_import_again_from_its_start(tmp_path):
    """Imported up to byte X, then the log is replaced by a new file already longer than X (logrotate's create
    mode, or copytruncate and written again between two syncs): the sync tells it by its first bytes and imports
    the new file whole (before: it went on from X, in the middle of the new file)."""
    from backend.connection import Connection
    from backend.history import run_id_of, sync_from_host
    from backend.settings.model import HostConfig

    conn = await Connection.open(HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path)))
    try:
        gate = tmp_path / "gate"
        job = await truncating_job(conn, gate)
        run_id = run_id_of("local", job.id)
        log = Path(job.log_path)
        await wait_lines(log, 30)
        with History.open() as history:
            await sync_from_host(history, conn)
            imported = history.imported(run_id)
        assert accept_samples(run_id) == 30
        rotated = tmp_path / "rotated"
        rotated.write_text(decode_lines(200, 60))
        assert rotated.stat().st_size > imported
        os.replace(rotated, log)  # the writer goes on into the old file, now nameless
        gate.touch()
        assert (await wait_job(conn, job.id, 120)).state == "done"
        with History.open() as history:
            report = await sync_from_host(history, conn)
            assert history.imported(run_id) == log.stat().st_size
        assert report.samples == 60 and accept_samples(run_id) == 90
    finally:
        await conn.close()


CLAIMANT = """
import sys
from backend.history import History
with History.open(sys.argv[1]) as history:
    print(history.claim(sys.argv[2], "a panel elsewhere"), flush=True)
    sys.stdin.read()  # holds the claim until killed
"""


async def test_a_run_recorded_live_elsewhere_is_left_to_that_writer(tmp_path):
    """A panel in another process records a run live (its claim in the history): CLI work (`serve stop`,
    `bench`: record_run) and syncs in this process leave that log alone, and a second live view does not record
    it either, so no second writer cuts it at other places. Once that panel is gone (killed: its claim no longer
    counts), the next import takes the whole log."""
    from backend.connection import Connection
    from backend.history import HistoryThread, record_run, run_id_of, sync_from_host
    from backend.settings.model import HostConfig

    conn = await Connection.open(HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path)))
    claimant = None
    recorder = HistoryThread()
    recorder.record("local")
    try:
        gate = tmp_path / "gate"
        gate.touch()
        job = await truncating_job(conn, gate)
        run_id = run_id_of("local", job.id)
        ended = await wait_job(conn, job.id, 120)
        assert ended.state == "done"
        claimant = subprocess.Popen(
            [sys.executable, "-c", CLAIMANT, str(history_path()), run_id],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        assert claimant.stdout.readline().strip() == "0"
        with History.open() as history:
            await record_run(history, conn, ended)
            report = await sync_from_host(history, conn)
            assert history.imported(run_id) == 0 and report.samples == 0
        assert await recorder.recorded(ended) is None  # another live view: followed, not recorded here
        assert accept_samples(run_id) == 0

        claimant.kill()
        claimant.wait()
        with History.open() as history:
            report = await sync_from_host(history, conn)
            assert history.imported(run_id) == os.path.getsize(job.log_path)
        assert report.samples == 50 and accept_samples(run_id) == 50
        assert await recorder.recorded(ended) == os.path.getsize(job.log_path)  # a dead claim is no claim
    finally:
        if claimant is not None and claimant.poll() is None:
            claimant.kill()
            claimant.wait()
        recorder.close()
        await conn.close()
