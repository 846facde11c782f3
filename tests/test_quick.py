"""The one-shot answer (backend/cli/quick.py): `specdeck ping` to a host whose master runs is answered with a
blocking socket and no asyncio, prints what the full CLI prints, and every fault on the way (a master killed
between the check and the connect, a stale or foreign socket, a master that hangs, hangs up or refuses, a
changed config or agent) falls back to the full CLI or is refused by it in one sentence, never hangs."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from argparse import Namespace
from pathlib import Path

import pytest

from backend.agent.host.shared import protocol
from backend.cli import quick, resolved
from backend.settings.model import HostConfig
from backend.transport import blocking, controlsock, sshimport
from backend.transport.blocking import BlockingAgent, Fallback
from tests.simhost import process_gone
from tests.sshd import Sshd
from tests.test_control import host_of, master_pid, runtime, until  # noqa: F401 (runtime: a fixture)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


def run(sshd: Sshd, workdir: Path, *args: str, entry: str = "quick", known_hosts: str | None = None):
    """The CLI as `specdeck` runs it (``quick``) or the full one (``main``), with its imports on stderr."""
    return subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            f"backend.cli.{entry}",
            *sshd.cli_args(str(workdir), known_hosts=known_hosts),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def imported(res: subprocess.CompletedProcess) -> set[str]:
    return {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}


def said(res: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in res.stderr.splitlines() if not line.startswith("import time:"))


def test_the_quick_path_imports_no_typing():
    """What a warm `ping` imports keeps its annotations for the checker (TYPE_CHECKING blocks, strings):
    importing typing cost a one-shot answer ~5 ms."""
    modules = ["backend.cli.quick", "backend.cli.resolved", "backend.cli.pingview", "backend.transport.blocking"]
    modules.append("backend.agent.host.shared.quantiles")
    code = f"import json, sys; import {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = json.loads(res.stdout)
    assert set(modules) <= set(loaded) and "typing" not in loaded


@pytest.mark.usefixtures("runtime")
@pytest.mark.slow
def test_a_warm_ping_goes_without_asyncio_prints_the_same_and_falls_back_when_the_master_goes(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    shutil.copy(sshd.known_hosts, known)
    first = run(sshd, tmp_path, "ping", "--count", "1", "--json", entry="main", known_hosts=str(known))
    assert first.returncode == 0, said(first)
    host = HostConfig(**{**host_of(sshd, tmp_path).__dict__, "known_hosts": str(known)})
    path = controlsock.socket_path(host, create=False)
    pid = until(lambda: master_pid(path))
    sessions = len(sshd.session_pids())

    res = run(sshd, tmp_path, "ping", "--json", "--count", "2", known_hosts=str(known))
    assert res.returncode == 0 and said(res) == "", said(res)
    assert "asyncio" not in imported(res) and "argparse" not in imported(res)
    out, full = json.loads(res.stdout), json.loads(first.stdout)
    assert out.keys() == full.keys() and out["host"] == sshd.url and out["hostname"] == full["hostname"]
    assert len(sshd.session_pids()) == sessions and master_pid(path) == pid  # the same connection
    text = run(sshd, tmp_path, "ping", "--count", "1", known_hosts=str(known))
    full_text = run(sshd, tmp_path, "ping", "--count", "1", entry="main", known_hosts=str(known))
    assert "asyncio" not in imported(text) and "asyncio" in imported(full_text)
    assert text.stdout.splitlines()[1:] == full_text.stdout.splitlines()[1:]  # all but the round trip figures
    assert text.stdout.startswith(f"{sshd.url} (")

    # The master killed between the socket's check and the connect: refused at once, no hang.
    entry = resolved.lookup(quick.parse_ping([*sshd.cli_args(str(tmp_path), known_hosts=str(known)), "ping"])[0])
    assert entry is not None and entry["socket"] == path
    check = blocking.check_socket

    def check_then_kill(p: str) -> None:
        check(p)
        os.kill(pid, signal.SIGKILL)
        until(lambda: process_gone(pid))

    blocking.check_socket = check_then_kill
    try:
        t0 = time.monotonic()
        with pytest.raises(Fallback), BlockingAgent(entry["socket"], entry["command"]) as agent:
            agent.open()
            agent.result(agent.send("info"), 60)
        assert time.monotonic() - t0 < controlsock.HELLO_TIMEOUT_S
    finally:
        blocking.check_socket = check
    assert os.path.exists(path)  # the dead master's socket, left behind
    res = run(sshd, tmp_path, "ping", "--count", "1", known_hosts=str(known))
    assert res.returncode == 0 and said(res) == "" and "asyncio" in imported(res)  # the full CLI, directly
    pid = until(lambda: master_pid(path))  # and a new master

    # A changed known_hosts: the master refuses, the full CLI judges the key anew and refuses in one sentence.
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    known.write_text(f"[127.0.0.1]:{sshd.port} {' '.join((tmp_path / 'k.pub').read_text().split()[:2])}\n")
    res = run(sshd, tmp_path, "ping", "--count", "1", known_hosts=str(known))
    assert res.returncode == 3 and "CHANGED" in said(res) and len(said(res).splitlines()) == 1
    until(lambda: process_gone(pid))


@pytest.mark.parametrize(
    "argv,parsed",
    [
        (["ping"], ({}, 5, False)),
        (["--host", "h", "ping", "--json", "--count=2"], ({"host": "h"}, 2, True)),
        (["ping", "--host=a", "--identity", "k", "--host", "b"], ({"host": "b", "identity": "k"}, 5, False)),
        (
            ["--known-hosts", "kh", "--python", "p", "--workdir", "w", "--config", "c", "ping"],
            ({"known_hosts": "kh", "python": "p", "workdir": "w", "config": "c"}, 5, False),
        ),
        (["--json", "ping"], None),  # argparse's error to give
        (["--count", "2", "ping"], None),
        (["ping", "--count", "0"], None),
        (["ping", "--count", "x"], None),
        (["ping", "--host"], None),
        (["ping", "--host", "--json"], None),
        (["ping", "--ho", "h"], None),  # an abbreviation: argparse's to judge
        (["--no-persist", "ping"], None),
        (["ping", "--debug"], None),
        (["ping", "ping"], None),
        (["jobs"], None),
        (["ping", "-h"], None),
        ([], None),
    ],
)
def test_only_a_plain_ping_argv_is_answered_here(argv, parsed):
    got = quick.parse_ping(argv)
    if parsed is None:
        assert got is None
    else:
        opts, count, as_json = parsed
        assert got == ({**dict.fromkeys(quick.FLAGS.values()), **opts}, count, as_json)


# --- masters that are not what they should be (no SSH needed) -----------------------------------------------


@pytest.fixture
def folder(monkeypatch, tmp_path_factory):
    base = tmp_path_factory.mktemp("rt", numbered=True)
    short = Path(f"/tmp/sdq-{os.getpid()}-{base.name}")  # a socket path must fit 108 bytes
    short.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short))
    monkeypatch.setenv("SPECDECK_PERSIST", "60")
    yield Path(controlsock.runtime_dir())
    shutil.rmtree(short, ignore_errors=True)


class FakeMaster:
    """A listener at ``path`` that does ``behave(conn)`` with each connection, on a thread."""

    def __init__(self, path: str, behave) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(path)
        self.sock.listen()
        self.behave = behave
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            self.behave(conn, self.done)

    def close(self) -> None:
        self.done.set()
        self.sock.close()


def ask(path: str) -> float:
    """Seconds until BlockingAgent at ``path`` gives up with Fallback."""
    t0 = time.monotonic()
    with pytest.raises(Fallback), BlockingAgent(path, "sh -c agent") as agent:
        agent.open()
        agent.result(agent.send("info"), 60)
    return time.monotonic() - t0


def hangs(conn, done) -> None:
    conn.recv(1 << 16)
    done.wait(30)


def hangs_up_after_yes(conn, done) -> None:
    conn.recv(1 << 16)
    conn.sendall(b'{"ok": true}\n' + controlsock.FRAME.pack(controlsock.STDOUT, 4) + b"noi\n")


def refuses(conn, done) -> None:
    conn.recv(1 << 16)
    conn.sendall(b'{"ok": false, "reason": "a known_hosts or ssh_config file changed since it connected"}\n')


def babbles(conn, done) -> None:
    conn.recv(1 << 16)
    conn.sendall(b"x" * (blocking.LINE_LIMIT + 10))
    done.wait(30)


def agent_exits(conn, done) -> None:
    conn.recv(1 << 16)
    code = json.dumps({"code": 97}).encode()
    conn.sendall(b'{"ok": true}\n' + controlsock.FRAME.pack(controlsock.EXIT, len(code)) + code)
    done.wait(30)


def agent_errs(conn, done) -> None:
    conn.recv(1 << 16)
    hello = b'{"hello": {"protocol": 2}}\n'
    err = b'#%08x\n{"id": 1, "error": {"message": "no", "kind": "failed"}}'
    err = err % (len(err) - 10)
    out = hello + err
    conn.sendall(b'{"ok": true}\n' + controlsock.FRAME.pack(controlsock.STDOUT, len(out)) + out)
    done.wait(30)


def agent_nests(conn, done) -> None:
    """A hello, then a frame of 200,000 nested arrays (RecursionError in json.loads): a Fallback, not a trace."""
    conn.recv(1 << 16)
    out = b'{"hello": {"protocol": 2}}\n' + protocol.frame(b"[" * 200_000)
    conn.sendall(b'{"ok": true}\n' + controlsock.FRAME.pack(controlsock.STDOUT, len(out)) + out)
    done.wait(30)


@pytest.mark.parametrize("behave", [hangs_up_after_yes, refuses, babbles, agent_exits, agent_errs, agent_nests])
def test_a_master_that_hangs_up_refuses_or_babbles_is_left_at_once(folder, behave):
    path = str(folder / "ssh-x.sock")
    fake = FakeMaster(path, behave)
    try:
        assert ask(path) < controlsock.HELLO_TIMEOUT_S
    finally:
        fake.close()


def test_a_master_that_never_answers_is_left_at_its_deadline(folder, monkeypatch):
    monkeypatch.setattr(blocking, "HELLO_TIMEOUT_S", 0.5)
    path = str(folder / "ssh-x.sock")
    fake = FakeMaster(path, hangs)
    try:
        assert 0.4 < ask(path) < 5
    finally:
        fake.close()


def test_no_socket_a_stale_one_or_not_a_socket_is_left_at_once(folder):
    path = folder / "ssh-x.sock"
    assert ask(str(path)) < 1  # none
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # nobody listens
    stale.close()
    assert ask(str(path)) < 1
    path.unlink()
    path.write_text("")
    assert ask(str(path)) < 1


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_socket_of_another_user_or_with_another_user_behind_it_is_not_used(folder, tmp_path):
    path = folder / "ssh-x.sock"
    foreign = socket.socket(socket.AF_UNIX)
    foreign.bind(str(path))
    foreign.listen()
    os.chown(path, 65534, 65534)
    try:
        assert ask(str(path)) < 1  # the file is another user's
    finally:
        foreign.close()
        path.unlink()
    # Our file, another user's process behind it (a socket moved in and handed to us).
    theirs = Path(tempfile.mkdtemp(prefix="sdq-theirs-"))  # under /tmp: a folder the other user can reach
    theirs.chmod(0o777)
    listener = (
        "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print(1, flush=True)"
    )
    listener += "; sys.stdin.read()"
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    proc = subprocess.Popen(
        [*drop, sys.executable, "-c", listener, str(theirs / "s")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "1"
        os.rename(theirs / "s", path)
        os.chown(path, 0, 0)
        assert ask(str(path)) < 1
    finally:
        proc.communicate("", timeout=10)
        shutil.rmtree(theirs, ignore_errors=True)


# --- what the ordinary path remembers ------------------------------------------------------------------------


def args_for(**kw) -> Namespace:
    return Namespace(**{**dict.fromkeys(resolved.OPTIONS), **kw})


def test_an_entry_holds_only_while_the_config_and_the_agent_are_as_they_were(folder, tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text(
        'default_host = "box"\n[hosts.box]\nurl = "ssh://me@127.0.0.1:2222"\npython = "python3"\nworkdir = "/w"\n'
    )
    host_dir = tmp_path / "host"
    shutil.copytree(resolved.HOST_DIR, host_dir)
    monkeypatch.setattr(resolved, "HOST_DIR", str(host_dir))
    args = args_for(config=str(config))
    opts = {o: getattr(args, o) for o in resolved.OPTIONS}
    host = HostConfig(name="box", url="ssh://me@127.0.0.1:2222", python="python3", workdir="/w")
    resolved.remember(args, host, "start agent")
    entry = resolved.lookup(opts)
    assert entry and (entry["name"], entry["command"]) == ("box", "start agent")
    assert entry["socket"] == controlsock.socket_path(host)
    entry_file = next(folder.glob("host-*.json"))
    assert oct(entry_file.stat().st_mode & 0o777) == "0o600"

    assert resolved.lookup({**opts, "host": "box"}) is None  # other options: another entry (none)
    resolved.remember(args, HostConfig(name="box", url="ssh://me@127.0.0.1:2223"), "x")  # not what args say
    assert resolved.lookup(opts)["command"] == "start agent"

    (host_dir / "main.py").write_text((host_dir / "main.py").read_text() + "\n# changed\n")
    assert resolved.lookup(opts) is None  # the agent's sources changed: its name would too
    resolved.remember(args, host, "start agent")
    assert resolved.lookup(opts) is not None

    config.write_text(config.read_text().replace("/w", "/v"))
    assert resolved.lookup(opts) is None  # the config changed: resolve again
    resolved.remember(args, host, "start agent")  # the config no longer says this host
    assert resolved.lookup(opts) is None

    resolved.remember(args, HostConfig(**{**host.__dict__, "workdir": "/v"}), "start agent")
    assert resolved.lookup(opts) is not None
    os.chown(entry_file, 65534, 65534) if os.geteuid() == 0 else entry_file.write_text("{not json")
    assert resolved.lookup(opts) is None  # another user's file, or a broken one
    assert not list(folder.glob("*.tmp"))


def test_a_relative_path_ties_an_entry_to_its_folder(folder, tmp_path, monkeypatch):
    host = HostConfig(name="ssh://me@h", url="ssh://me@h", python="python3", workdir=".", identity="key")
    args = args_for(host="ssh://me@h", identity="key")
    opts = {o: getattr(args, o) for o in resolved.OPTIONS}
    monkeypatch.chdir(tmp_path)
    resolved.remember(args, host, "start agent")
    assert resolved.lookup(opts) is not None
    monkeypatch.chdir(folder)
    assert resolved.lookup(opts) is None  # `key` would be another file here


def test_a_cold_command_leaves_no_agent_behind_though_it_does_not_wait_for_its_exit(sshd, tmp_path):
    res = run(sshd, tmp_path, "--no-persist", "ping", "--count", "1", entry="main")
    assert res.returncode == 0, said(res)

    def agents() -> list[str]:
        return subprocess.run(["pgrep", "-f", f"{tmp_path}/.specdeck"], capture_output=True, text=True).stdout.split()

    until(lambda: not agents(), timeout=30)  # the closed channel ended it


def test_asyncssh_comes_without_x509_support_and_offers_openssh_certificates_only():
    probe = (
        "import sys; from backend.transport import ssh; "
        "print('cryptography.x509' in sys.modules, 'asyncssh.crypto.x509' in sys.modules, *ssh._CERT_ALGS)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    x509, asyncssh_x509, *certs = out.stdout.split()
    assert (x509, asyncssh_x509) == ("False", "False")
    assert "ssh-ed25519-cert-v01@openssh.com" in certs and all(c.endswith("-cert-v01@openssh.com") for c in certs)


@pytest.mark.skipif(sshimport._ldconfig is None or not os.path.exists(sshimport._LD_CACHE), reason="glibc only")
def test_a_library_the_loader_cache_lacks_is_not_asked_of_ldconfig(monkeypatch):
    assert sshimport._in_ld_cache("c") == ctypes.util._findSoname_ldconfig("c")  # type: ignore[attr-defined]

    def no_process(name: str) -> str:
        raise AssertionError(f"ldconfig -p was run for {name}")

    monkeypatch.setattr(sshimport, "_ldconfig", no_process)
    assert sshimport._in_ld_cache("liboqs") is None  # asyncssh's second name for liboqs: never a file name
    monkeypatch.setattr(sshimport, "_LD_CACHE", "/nonexistent/ld.so.cache")
    with pytest.raises(AssertionError):  # no cache file to read: ldconfig decides, as before
        sshimport._in_ld_cache("liboqs")


def test_every_agent_method_is_found_in_its_module_by_the_table():
    import importlib
    import pkgutil

    import backend.agent.host as host
    from backend.agent.host.registry import HOMES, METHODS

    for info in pkgutil.iter_modules(host.__path__):
        importlib.import_module(f"backend.agent.host.{info.name}")
    assert {name: fn.__module__.rsplit(".", 1)[-1] for name, fn in METHODS.items()} == HOMES
