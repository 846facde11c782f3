"""The warm CLI: a control master keeps one SSH connection per host between commands; every way its socket can
be wrong (stale, a master killed -9, two commands at once, another user's) ends in an answer or a direct
connection, and host keys are judged against the files on disk."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from backend.settings.model import HostConfig
from backend.transport import control
from tests.helpers import CLI, Ran, run_cli
from tests.simhost import process_gone, stop
from tests.sshd import Sshd

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def runtime(monkeypatch):
    """A short private runtime dir (a socket path must fit 108 bytes) with masters allowed; every master
    left there is asked to exit, then killed."""
    folder = tempfile.mkdtemp(prefix="sd-run-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    monkeypatch.setenv("SPECDECK_PERSIST", "60")
    yield Path(folder) / "specdeck"
    pids = [p for p in (master_pid(path) for path in control.sockets()) if p]
    run_cli("disconnect", "--all", rc=None, process=True)
    for pid in pids:
        if not process_gone(pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def cli(sshd: Sshd, workdir: Path, *args: str, extra: tuple[str, ...] = (), known_hosts: str | None = None) -> Ran:
    """A `specdeck` process: each leaves a master behind or rides one (the process is what is tested)."""
    return run_cli(*extra, *sshd.cli_args(str(workdir), known_hosts=known_hosts), *args, rc=None, process=True)


def host_of(sshd: Sshd, workdir: Path) -> HostConfig:
    return HostConfig(
        name=sshd.url,
        url=sshd.url,
        python=sys.executable,
        workdir=str(workdir),
        identity=sshd.identity,
        known_hosts=sshd.known_hosts,
    )


def master_pid(path: str) -> int | None:
    """The pid of the master answering at ``path``, or None."""

    async def hello() -> int | None:
        try:
            reply, _, writer = await control.request(path, {"op": "hello"})
        except (control.NoMaster, control.Unusable):
            return None
        writer.close()
        return reply["pid"]

    return asyncio.run(hello())


def until(cond: Callable[[], object], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return value


def ping(sshd: Sshd, workdir: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    res = cli(sshd, workdir, "ping", "--count", "1", "--json", extra=extra)
    assert res.returncode == 0, res.stderr
    return res


@pytest.mark.slow
def test_a_command_leaves_a_master_the_next_one_uses_and_disconnect_closes(sshd, tmp_path, runtime):
    ping(sshd, tmp_path)
    path = control.socket_path(host_of(sshd, tmp_path), create=False)
    pid = until(lambda: master_pid(path))
    assert oct(os.stat(runtime).st_mode & 0o777) == "0o700" and oct(os.stat(path).st_mode & 0o777) == "0o600"
    sessions = len(sshd.session_pids())
    out = json.loads(ping(sshd, tmp_path).stdout)
    assert out["host"] == sshd.url and len(sshd.session_pids()) == sessions  # no new SSH connection
    assert master_pid(path) == pid  # the same master served it
    res = cli(sshd, tmp_path, "disconnect")
    assert res.returncode == 0 and "connection closed" in res.stdout
    until(lambda: process_gone(pid))
    assert not os.path.exists(path)
    assert "no kept connection" in cli(sshd, tmp_path, "disconnect").stdout


def test_no_persist_leaves_nothing_behind(sshd, tmp_path, runtime):
    ping(sshd, tmp_path, extra=("--no-persist",))
    time.sleep(0.5)  # a master would have been spawned at exit, before this
    assert control.sockets() == [] and not list(runtime.glob("*.lock"))


@pytest.mark.slow
def test_a_stale_socket_and_a_master_killed_with_sigkill_fall_back_and_are_replaced(sshd, tmp_path, runtime):
    path = control.socket_path(host_of(sshd, tmp_path))
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # a socket file nobody listens on
    stale.close()
    ping(sshd, tmp_path)  # direct, then a master replaces the stale socket
    pid = until(lambda: master_pid(path))
    os.kill(pid, signal.SIGKILL)
    until(lambda: process_gone(pid))
    assert os.path.exists(path)  # left behind by the dead master
    res = ping(sshd, tmp_path)
    assert res.stderr == ""  # nothing to say: a stale socket is only "no master yet"
    assert until(lambda: master_pid(path)) != pid


@pytest.mark.slow
def test_commands_racing_share_one_master(sshd, tmp_path, runtime):
    def run_all() -> None:
        procs = [
            subprocess.Popen(
                [*CLI, *sshd.cli_args(str(tmp_path)), "ping", "--count", "1"],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for _ in range(3)
        ]
        assert [p.wait(120) for p in procs] == [0, 0, 0], [p.stderr.read() for p in procs if p.stderr]

    run_all()  # no master yet: each connects directly and leaves one; all but one step aside
    path = control.socket_path(host_of(sshd, tmp_path), create=False)
    pid = until(lambda: master_pid(path))
    run_all()  # three at once through the one master
    assert master_pid(path) == pid
    masters = subprocess.run(["pgrep", "-f", "backend.transport.master"], capture_output=True, text=True).stdout
    assert str(pid) in masters.split()


@pytest.mark.slow
def test_a_socket_or_folder_of_another_user_is_named_and_not_used(sshd, tmp_path, runtime):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a socket to another user")
    path = control.socket_path(host_of(sshd, tmp_path))
    foreign = socket.socket(socket.AF_UNIX)
    foreign.bind(path)
    foreign.listen()
    try:
        os.chown(path, 65534, 65534)
        res = ping(sshd, tmp_path)
        assert f"{path} belongs to uid 65534, not to you; connected directly" in res.stderr
        assert os.stat(path).st_uid == 65534  # left alone: not ours to replace
    finally:
        foreign.close()
    os.unlink(path)
    runtime.chmod(0o755)
    res = ping(sshd, tmp_path)
    assert "is open to other users (mode 755)" in res.stderr and control.sockets() == []


@pytest.mark.slow
def test_a_changed_known_hosts_is_checked_again(sshd, tmp_path, runtime):
    known = tmp_path / "known_hosts"
    shutil.copy(sshd.known_hosts, known)
    assert cli(sshd, tmp_path, "ping", "--count", "1", known_hosts=str(known)).returncode == 0
    host = host_of(sshd, tmp_path)
    path = control.socket_path(HostConfig(**{**host.__dict__, "known_hosts": str(known)}), create=False)
    pid = until(lambda: master_pid(path))
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    fake = (tmp_path / "k.pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{sshd.port} {' '.join(fake)}\n")
    res = cli(sshd, tmp_path, "ping", "--count", "1", known_hosts=str(known))
    assert res.returncode == 3 and "CHANGED" in res.stderr  # judged anew, not waved through by the master
    until(lambda: process_gone(pid))


@pytest.mark.slow
def test_a_stopped_master_is_named_in_one_line_and_disconnect_stops_it(sshd, tmp_path, runtime):
    """SIGSTOP stands in for any wedge: the master keeps its lock, so no new master replaces it. Each command
    names it in one line and connects directly; `disconnect` stops it (SIGTERM with SIGCONT) and a later
    command leaves a new master."""
    ping(sshd, tmp_path)
    path = control.socket_path(host_of(sshd, tmp_path), create=False)
    pid = until(lambda: master_pid(path))
    sessions = len(sshd.session_pids())
    stop(pid)
    try:
        said = f"specdeck: the kept connection (master pid {pid}) does not answer: connected directly; "
        said += "`specdeck disconnect` stops it\n"
        assert ping(sshd, tmp_path).stderr == said
        quick = subprocess.run(  # the installed entry: the quick path meets it first, the full CLI names it
            [sys.executable, "-m", "backend.cli.quick", *sshd.cli_args(str(tmp_path)), "ping", "--count", "1"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert quick.returncode == 0 and quick.stderr == said
        res = cli(sshd, tmp_path, "disconnect")
        assert res.returncode == 0, res.stderr
        assert res.stdout.endswith(f"the kept connection (master pid {pid}) did not answer: stopped it (SIGTERM)\n")
        assert process_gone(pid) and not os.path.exists(path)
        until(lambda: len(sshd.session_pids()) < sessions)  # its SSH connection went with it
    finally:
        if not process_gone(pid):
            os.kill(pid, signal.SIGKILL)
    assert ping(sshd, tmp_path).stderr == ""
    assert until(lambda: master_pid(path)) not in (None, pid)  # replaced now that the lock is free


def test_a_master_deaf_to_sigterm_is_killed_after_the_stop_timeout(tmp_path, runtime):
    """A process holding a socket's lock that neither answers nor ends on SIGTERM: SIGKILL after the timeout."""
    runtime.mkdir(mode=0o700, exist_ok=True)
    path = str(runtime / "ssh-deaf.sock")
    script = (
        "import fcntl, os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"lock = open({path + '.lock'!r}, 'a'); fcntl.flock(lock, fcntl.LOCK_EX)\n"
        "lock.write(str(os.getpid())); lock.flush(); print('held', flush=True); time.sleep(120)\n"
    )
    deaf = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert deaf.stdout.readline() == "held\n" and control.holder(path) == deaf.pid
        said = asyncio.run(control.stop(deaf.pid, path, timeout=0.5))
        assert said == f"the kept connection (master pid {deaf.pid}) did not answer: stopped it (SIGKILL after 0.5 s)"
        assert deaf.wait(10) == -signal.SIGKILL and control.holder(path) is None
    finally:
        deaf.kill()
        deaf.wait()


@pytest.mark.slow
def test_a_socket_path_too_long_is_said_in_one_line_and_leaves_nothing(sshd, tmp_path, monkeypatch):
    """As OpenSSH's "ControlPath too long for Unix domain socket": said, direct connection, no master spawned
    (it could not bind), no lock or socket file left."""
    folder = Path(tempfile.mkdtemp(prefix="sd-run-")) / ("x" * 80)
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    monkeypatch.setenv("SPECDECK_PERSIST", "60")
    try:
        for _ in range(2):
            res = ping(sshd, tmp_path)
            line = res.stderr.splitlines()
            assert len(line) == 1 and "ControlPath too long for Unix domain socket" in line[0], res.stderr
            assert "set XDG_RUNTIME_DIR to a shorter folder" in line[0] and line[0].endswith("; connected directly")
        time.sleep(0.5)  # a master would have been spawned at exit, before this (as test_no_persist waits)
        assert [p for p in folder.rglob("*") if not p.is_dir()] == []
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
