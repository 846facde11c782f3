"""The suite's own rules: each xdist worker has a loopback of its own (no two race for a port), and every module
says what kind of test it holds (`make test-fast` and ``-m`` select by it)."""

from __future__ import annotations

import ast
import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.sshd import free_port

pytestmark = pytest.mark.unit

TESTS = Path(__file__).parent


@pytest.mark.skipif("PYTEST_XDIST_WORKER" not in os.environ, reason="only under xdist (make test)")
def test_each_worker_has_a_loopback_of_its_own():
    assert os.readlink("/proc/self/ns/net") != os.readlink(f"/proc/{os.getppid()}/ns/net")
    port = free_port()
    with socket.create_server(("127.0.0.1", port)) as server:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # loopback is up
        server.accept()[0].close()


@pytest.mark.xdist_group("suite-guard")
@pytest.mark.skipif("PYTEST_XDIST_WORKER" not in os.environ, reason="only under xdist (make test)")
def test_a_group_runs_on_one_worker(request):
    """--dist loadgroup keeps a group on one worker only when xdist can suffix the node id with it (pytest 9.2
    left it no way: test_compare's hub, hashed once per worker, was hashed by every worker at once)."""
    if getattr(request.config.option, "loadgroup", False):  # a worker of --dist loadgroup
        assert request.node.nodeid.endswith("@suite-guard")


def kinds_of(path: Path) -> set[str]:
    """The kind marks a module's ``pytestmark`` names."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            found |= {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)} & conftest.KINDS.keys()
    return found


def test_every_module_says_its_kind():
    assert [p.name for p in sorted(TESTS.glob("test_*.py")) if not kinds_of(p)] == []


def test_a_test_without_a_kind_fails_saying_how_to_mark_it(request):
    class Unmarked:
        path = TESTS / "test_new.py"

        def iter_markers(self):
            return iter(())

    with pytest.raises(pytest.fail.Exception, match=r"test_new.py: no kind mark: begin the module with `pytestmark"):
        conftest.pytest_runtest_setup(Unmarked())
    conftest.pytest_runtest_setup(request.node)  # this module says it is unit


def test_ssh_goes_on_the_tests_whose_fixtures_reach_the_sshd():
    def item(fixtures: tuple[str, ...], **params: object) -> SimpleNamespace:
        return SimpleNamespace(fixturenames=fixtures, callspec=SimpleNamespace(params=params))

    assert conftest._reaches_sshd(item(("sshd", "tmp_path")))
    assert conftest._reaches_sshd(item(("host",), host="ssh"))
    assert conftest._reaches_sshd(item(("sim_host",), sim_host=("ssh", "0.5.6")))
    assert not conftest._reaches_sshd(item(("host",), host="local"))
    assert not conftest._reaches_sshd(item(("sim_host",), sim_host=("local", "0.5.23")))
