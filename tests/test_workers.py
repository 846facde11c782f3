"""The parallel run's isolation: each xdist worker has a loopback of its own, so no two workers race for a port."""

from __future__ import annotations

import os
import socket

import pytest

from tests.sshd import free_port


@pytest.mark.skipif("PYTEST_XDIST_WORKER" not in os.environ, reason="only under xdist (make test)")
def test_each_worker_has_a_loopback_of_its_own():
    assert os.readlink("/proc/self/ns/net") != os.readlink(f"/proc/{os.getppid()}/ns/net")
    port = free_port()
    with socket.create_server(("127.0.0.1", port)) as server:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # loopback is up
        server.accept()[0].close()
