"""Shared fixtures: an isolated user environment, a real sshd on loopback, and hosts over both transports."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from backend.history import History
from backend.settings.model import HostConfig
from tests.leftover_jobs import stop_jobs
from tests.runs import add_run
from tests.sshd import Sshd, start_sshd

# Hypothesis's timing checks fail a property on a loaded machine (parallel workers, a CPU hog), not a wrong answer.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

CLONE_NEWNET = 0x40000000
MAX_WORKERS = 4  # measured on 2 cores: the suite mostly waits on servers and other processes


def _can_make_netns() -> bool:
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: twice the cores, at most MAX_WORKERS, where each worker can have a loopback of its own;
    one process where none can (run as root or under scripts/netns-run for the parallel run)."""
    if not _can_make_netns():
        print("note: no network namespace per worker here; running the suite in one process", file=sys.stderr)
        return 0
    return min(MAX_WORKERS, 2 * (os.cpu_count() or 1))


# Each module says what kind of test it holds (``pytestmark``); `make test-fast` and ``-m`` select by them.
KINDS = {
    "unit": "code in the test's own process: it starts no other process and drives no panel",
    "tui": "drives the panel (a Textual app under Pilot) or renders its screens",
    "e2e": "runs real processes: the host agent, the SIMULATED SGLang, the sandbox hub, the router, chromium",
}
MARKS = {
    **KINDS,
    "ssh": "reaches a host through a real sshd on loopback (set on every test whose fixtures start one)",
    "slow": "left out of `make test-fast`: 1 s of CPU or more (its processes' too), measured on 2 cores",
}


def pytest_configure(config) -> None:
    """Registers the marks. An xdist worker gets a network namespace of its own (only loopback, up): each has
    all the ports, so no two workers' servers (the sshd, simulators, the sandbox's fixed 30000 and 8000, the
    host's port picker) ever race for one."""
    for name, meaning in MARKS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    if "PYTEST_XDIST_WORKER" in os.environ:
        _own_loopback()


def pytest_collection_modifyitems(config, items) -> None:
    """``ssh`` goes on every test that reaches the loopback sshd through its fixtures."""
    for item in items:
        if _reaches_sshd(item):
            item.add_marker("ssh")


def pytest_runtest_setup(item) -> None:
    """A test in a module without a kind mark fails, saying how to mark it (so a new module says what it is)."""
    if not KINDS.keys() & {m.name for m in item.iter_markers()}:
        pytest.fail(
            f"{item.path.name}: no kind mark: begin the module with `pytestmark = pytest.mark.unit` (or tui, e2e, "
            "or both; KINDS in tests/conftest.py says which is which)",
            pytrace=False,
        )


def _reaches_sshd(item) -> bool:
    params = getattr(item, "callspec", None)
    values = params.params.values() if params else ()
    return "sshd" in item.fixturenames or any(v == "ssh" or (isinstance(v, tuple) and "ssh" in v) for v in values)


def _own_loopback() -> None:
    # unshare moves only the calling thread: this one, which runs the tests and starts every process they use.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        pytest.exit(f"xdist worker: no network namespace of its own ({os.strerror(ctypes.get_errno())}); run as "
                    "root or under scripts/netns-run, or without -n", returncode=3)  # fmt: skip
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


@pytest.fixture(autouse=True)
def isolated_user(tmp_path_factory, monkeypatch):
    """Config, state, data and HF caches under a temp dir: tests never see (or write) the real user's."""
    home = tmp_path_factory.mktemp("user")
    for var, sub in (
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CACHE_HOME", "cache"),
        ("HF_HOME", "hf"),
    ):
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.delenv("SPECDECK_CONFIG", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # CLI runs connect directly: no kept SSH connection outlives a test (test_control.py turns it on).
    monkeypatch.setenv("SPECDECK_PERSIST", "0")
    return home


@pytest.fixture(autouse=True)
def no_leftover_jobs(request, isolated_user):
    """After each test, stop the host jobs it left running in its folders (its tmp_path, its user dirs)."""
    yield
    for root in (isolated_user, request.node.funcargs.get("tmp_path")):
        if root is not None:
            stop_jobs(root)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> Sshd:
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(params=["local", "ssh"])
def host(request, tmp_path) -> HostConfig:
    """The same host (this machine) reached directly and through the real sshd."""
    return _host(request, request.param, tmp_path)


# Each SGLang release the simulator speaks, over one transport each: every lifecycle and Live test runs
# against both releases and both transports without running four times.
SIM_HOSTS = [("local", "0.5.23"), ("ssh", "0.5.6")]


@pytest.fixture(params=SIM_HOSTS, ids=[f"{t}-{v}" for t, v in SIM_HOSTS])
def sim_host(request, tmp_path) -> HostConfig:
    """A sandbox host running the SGLang simulator of one release (``sglang_version``), local or over sshd."""
    transport, version = request.param
    return replace(_host(request, transport, tmp_path), launcher="simulator", sandbox=True, sglang_version=version)


def _host(request, transport: str, tmp_path: Path) -> HostConfig:
    workdir = str(tmp_path / "hostwork")
    if transport == "local":
        return HostConfig(name="local", url="local", python=sys.executable, workdir=workdir)
    server: Sshd = request.getfixturevalue("sshd")
    return HostConfig(
        name="loopback-ssh",
        url=server.url,
        python=sys.executable,
        workdir=workdir,
        identity=server.identity,
        known_hosts=server.known_hosts,
    )


TMPFS_BYTES = 64 << 20  # a small disk: room for a 48 MiB test model, little more
TMPFS_PYTHON = """#!/bin/sh
# The host's Python inside a private mount namespace with a small tmpfs on {mnt}: the agent, its jobs and
# their workers see a disk of {size} bytes there; nothing outside this namespace does. A command a job runs
# with this same Python (a training's SpecForge) stays in that namespace, on that disk.
[ -n "$SPECDECK_SMALL_DISK" ] && exec {python} "$@"
export SPECDECK_SMALL_DISK=1
exec unshare -m --propagation private sh -c 'mount -t tmpfs -o size={size} specdeck-test "$0" && exec "$@"' \\
  {mnt} {python} "$@"
"""


@pytest.fixture
def tmpfs_host(host: HostConfig, tmp_path) -> tuple[HostConfig, Path]:
    """``host`` whose Python runs in its own mount namespace with a small tmpfs on the returned folder (the
    test reaches it through ``/proc/<agent pid>/root``). Skips where mounting is impossible: it needs root or
    CAP_SYS_ADMIN."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    wrapper = tmp_path / "python-small-disk"
    wrapper.write_text(TMPFS_PYTHON.format(mnt=mnt, size=TMPFS_BYTES, python=sys.executable))
    wrapper.chmod(0o755)
    probe = subprocess.run([str(wrapper), "-c", "pass"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace here: {probe.stderr.strip()}")
    return replace(host, python=str(wrapper)), mnt


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """The Kimi-K2.5 target (config only) and sparse drafters by configured name, plus a Llama-3-8B misfit."""
    from backend.sandbox import fixtures

    root = tmp_path_factory.mktemp("models")
    return {
        "target": fixtures.write_target_config(str(root / "Kimi-K2.5")),
        "ours": fixtures.write_drafter(str(root / "output_100k_sglang" / "4"), "ours"),
        "aq-medai": fixtures.write_drafter(str(root / "aq_medai_k2"), "aq_medai_k2"),
        "misfit": fixtures.write_drafter(str(root / "llama3_eagle3"), "llama3_8b"),
    }


def pytest_report_header(config):
    sshd = "present" if Path("/usr/sbin/sshd").exists() else "MISSING"
    return f"sshd: {sshd}; netns: {os.environ.get('SPECDECK_NETNS', 'no')}"


@pytest.fixture
def three_runs(models) -> dict[str, str]:
    """Baseline, ours and AQ-MedAI runs of `local` in the history (82.0, 60.6 and 100.0 tok/s)."""
    with History.open() as history:
        return {
            "baseline": add_run(history, models, "serve-1-base", None, 82.0, None),
            "ours": add_run(history, models, "serve-2-ours", "ours", 60.6, 2.0),
            "aq": add_run(history, models, "serve-3-aq", "aq-medai", 100.0, 3.3),
        }
