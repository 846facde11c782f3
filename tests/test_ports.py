"""Ports for servers of ours: outside the kernel's ephemeral range wherever the host's range leaves room, and
free to bind (backend/agent/host/ports.py)."""

from __future__ import annotations

import socket

import pytest

from backend.agent.host import ports

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("kernel_range", "allowed"),
    [
        ((32768, 60999), lambda p: ports.LOWEST <= p < 32768 or p > 60999),  # Linux's default
        ((10000, 60999), lambda p: p > 60999),  # nothing below: above it
        ((1024, 65535), lambda p: p >= ports.LOWEST),  # nothing outside: anywhere from LOWEST, as before
    ],
)
def test_a_run_outside_the_ephemeral_range_where_there_is_one(monkeypatch, kernel_range, allowed):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: kernel_range)
    for _ in range(50):
        port = ports.free_run(7, "127.0.0.1")
        assert port is not None and all(allowed(p) for p in range(port, port + 7)), port


def test_a_port_held_by_a_listener_is_not_bindable():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not ports.bindable(port, "127.0.0.1")
    assert ports.bindable(port, "127.0.0.1")


def test_the_kernels_range_is_read_and_a_missing_file_means_linuxs_default(tmp_path):
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ports.ephemeral_range(str(path)) == (40000, 50000)
    assert ports.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
