"""Faults in the run history database: damaged, locked, from a newer specdeck, or busy with another writer.

What must hold: the CLI says in one line what is wrong and where the file is (no traceback, no "internal
error"); the panel starts, says it in the History tab and works on in the other tabs; a refused database is
never written to; commands that only read never need the write lock.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend import history as history_mod
from backend.history import History, HistoryUnavailable, history_path
from backend.settings import builtin_defaults
from tests.helpers import until
from tests.test_history import three_runs  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "backend.cli.main", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


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
    res = cli("history")
    assert res.returncode != 0
    assert res.stderr.count("\n") == 1 and "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert str(path) in res.stderr and "damaged" in res.stderr and "move it aside" in res.stderr
    assert digest(path) == before  # never written to


def test_cli_on_a_future_schema_refuses_without_writing():
    path = newer_schema()
    before = digest(path)
    res = cli("history", "--json")
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
        monkeypatch.setattr(history_mod, "LOCK_TIMEOUT_S", 0.2)
        with pytest.raises(HistoryUnavailable) as err:
            History.open(path)
        assert str(path) in str(err.value) and "locked by another process" in str(err.value)
    finally:
        holder.stdin.close()
        holder.wait(10)
    History.open(path).close()  # usable again once the other process is done


def test_reading_needs_no_write_lock(three_runs):  # noqa: F811
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
        res = cli("history")
        assert res.returncode == 0, res.stderr
        assert "eagle3-aq" in res.stdout
        assert time.monotonic() - t0 < history_mod.LOCK_TIMEOUT_S
    finally:
        holder.stdin.close()
        holder.wait(10)


@pytest.mark.parametrize("make", [damaged, newer_schema], ids=["damaged", "future-schema"])
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
