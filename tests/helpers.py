"""Small things many test modules need: waiting on a Pilot-driven app, CLI options that reach a host, a run in
the history."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable

from textual.pilot import Pilot

from backend.history import History, filter_tail
from backend.metrics import Sample
from backend.settings import HostConfig


async def until(pilot: Pilot, cond: Callable[[], object], what: str, timeout: float = 20) -> None:
    """Let the app run until ``cond()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            notes = [n.message for n in pilot.app._notifications]
            raise AssertionError(f"timed out waiting for {what} (notifications: {notes})")
        await pilot.pause(0.02)


def host_args(host: HostConfig) -> list[str]:
    """CLI options that reach ``host`` (never the configured default host)."""
    args = ["--host", "local" if host.is_local else host.url, "--workdir", host.workdir, "--python", host.python]
    if not host.is_local:
        args += ["--identity", host.identity, "--known-hosts", host.known_hosts]
    return args


def record_run(
    job_id: str,
    profile: str,
    tok_s: float,
    accept: float | None,
    baseline: bool = False,
    started: float = 0.0,
    host: str = "local",
    streams: int = 1,
) -> str:
    """A finished run of ``host`` in the history: 30 one-second samples at ``streams`` running requests averaging
    ``tok_s`` per stream and ``accept``."""
    t0 = 1_800_000_000.0 + started
    job = {"id": job_id, "state": "done", "started": t0, "ended": t0 + 40, "args": {"profile": profile}}
    samples = [
        Sample(t0 + i, "decode", gen_tps=(tok_s + (i % 3 - 1)) * streams, accept_len=accept, running_req=streams)
        for i in range(30)
    ]
    with History.open() as history:
        run = history.upsert_run(host, job)
        assert history.import_chunk(run, 0, 1000, samples, filter_tail([], samples))
        if baseline:
            history.set_baseline(run)
    return run


def fill(path: str) -> None:
    """Write zeros to ``path`` until its disk is full."""
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * (1 << 20)
        try:
            while True:
                f.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
