"""Messages of any size between the client and the agent: whole, or refused with a sentence; never dropped,
never waited on forever (issue 20, item 3), and a hello reader that keeps a bounded amount (item 7)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from backend.agent import client
from backend.agent.host import main as agent_main
from backend.agent.host.shared import protocol
from backend.connection import Connection
from backend.errors import ConnectionFailed, RemoteError
from backend.settings.model import HostConfig

pytestmark = pytest.mark.e2e


@pytest.mark.slow
async def test_a_reply_far_over_the_ssh_window_arrives_whole(host: HostConfig, tmp_path):
    """8 MiB read back (11 MiB of base64 in one reply, over asyncssh's 2 MiB line window) arrives byte for
    byte; a line-based reader handed back pieces, dropped them as invalid JSON and waited for ever."""
    blob = bytes(range(256)) * (32 << 10)
    (tmp_path / "blob").write_bytes(blob)
    conn = await Connection.open(host)
    try:
        got = await conn.call("fs.read", path=str(tmp_path / "blob"), deadline=45)
        assert base64.b64decode(got["data"]) == blob
        assert (await conn.ping(2)).samples == 2  # still in step afterwards
    finally:
        await conn.close()


async def test_a_megabyte_line_of_non_utf8_log_is_followed_not_skipped(host: HostConfig, tmp_path):
    """A 1 MiB line of bytes that are not UTF-8 (6 MiB once JSON escapes the replacement characters) and the
    line after it both reach a follower."""
    conn = await Connection.open(host)
    try:
        script = "head -c 1000000 /dev/zero | tr '\\0' '\\377'; echo; echo after-the-block"
        job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", script])
        await conn.call("jobs.wait", id=job["id"], timeout=30)
        lines: list[str] = []
        async with asyncio.timeout(45):
            async for ev in conn.stream("jobs.follow", id=job["id"], stream="log"):
                lines += ev["lines"]
        assert lines[-1] == "after-the-block"
        assert len(lines) == 2 and lines[0] == "\ufffd" * 1000000
    finally:
        await conn.close()


def test_an_answer_too_big_for_a_frame_is_refused_with_a_sentence(monkeypatch):
    """Over MAX_FRAME the agent sends an error for that request instead, and stops it."""
    monkeypatch.setattr(agent_main, "MAX_FRAME", 1000)
    out: list[bytes] = []

    class Sink:
        def write(self, b: bytes) -> None:
            out.append(b)

        def flush(self) -> None:
            pass

    agent = agent_main.Agent("/tmp", Sink())
    agent.send({"id": 4, "result": "x" * 5000})
    header, payload = out[0][: protocol.HEADER_LEN], out[0][protocol.HEADER_LEN :]
    assert protocol.frame_length(header) == len(payload)
    error = json.loads(payload)["error"]
    assert json.loads(payload)["id"] == 4 and error["kind"] == "invalid"
    assert "more than the 0.0 MiB one message may carry; ask for less" in error["message"]


class FakePipe:
    """The agent's stdout as given bytes, in small pieces."""

    def __init__(self, data: bytes, piece: int = 7) -> None:
        self.chunks = [data[i : i + piece] for i in range(0, len(data), piece)]
        self.killed = False

    async def read(self, n: int) -> bytes:
        await asyncio.sleep(0)
        return self.chunks.pop(0)[:n] if self.chunks else b""

    async def write(self, data: bytes) -> None:
        pass

    def kill(self) -> None:
        self.killed = True

    def close(self) -> None:
        pass


class FakeTransport:
    label = "fakehost"


async def reading(data: bytes) -> tuple[client.AgentClient, FakePipe]:
    agent = client.AgentClient(FakeTransport(), "python3", "/w")  # type: ignore[arg-type]
    agent.pipe = pipe = FakePipe(data)
    agent.reader = client.FrameReader(pipe)  # type: ignore[arg-type]
    return agent, pipe


async def test_frames_split_anywhere_are_read_whole_and_garbage_ends_the_connection():
    big = protocol.encode({"id": 1, "result": "y" * 3000})
    agent, pipe = await reading(big + protocol.encode({"id": 2, "result": 2}) + b"not a frame at all\n")
    first, second = asyncio.get_running_loop().create_future(), asyncio.get_running_loop().create_future()
    third = asyncio.get_running_loop().create_future()
    agent.pending.update({1: first, 2: second, 3: third})
    await agent._read_loop()
    assert first.result() == "y" * 3000 and second.result() == 2
    with pytest.raises(ConnectionFailed, match=r"the agent sent something unreadable .*not a frame header"):
        third.result()
    assert pipe.killed


DEEP = b"[" * 200_000  # json.loads raises RecursionError, which is no ValueError


@pytest.mark.parametrize(
    "payload, reason",
    [
        (DEEP, "nested deeper than JSON can be read here"),
        (b'{"id": 1, "result": "\xff"}', "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": 1', "not JSON"),
    ],
)
def test_any_undecodable_message_is_a_frame_error_with_its_reason(payload, reason):
    with pytest.raises(protocol.FrameError, match=reason):
        protocol.decode(payload)


def test_a_message_too_big_to_hold_once_read_is_a_frame_error(monkeypatch):
    def no_memory(_):
        raise MemoryError

    monkeypatch.setattr(protocol.json, "loads", no_memory)
    with pytest.raises(protocol.FrameError, match=r"of 0\.0 MiB that does not fit in memory once read"):
        protocol.decode(b"{}")


async def test_a_deeply_nested_frame_ends_the_connection_with_its_reason_not_the_agent_exited():
    agent, pipe = await reading(protocol.encode({"id": 1, "result": 1}) + protocol.frame(DEEP))
    first, second = asyncio.get_running_loop().create_future(), asyncio.get_running_loop().create_future()
    agent.pending.update({1: first, 2: second})
    await agent._read_loop()  # ends, rather than dying on RecursionError with "the agent exited"
    assert first.result() == 1
    with pytest.raises(ConnectionFailed, match=r"something unreadable \(a message nested deeper than JSON"):
        second.result()
    assert pipe.killed and "nested deeper" in agent.closed.result()


def test_the_agent_refuses_a_deeply_nested_request_and_answers_the_next(tmp_path):
    """A framed request it cannot read is refused alone (the stream is still in step); the next is answered."""
    out = io.BytesIO()
    inp = io.BytesIO(protocol.frame(DEEP) + protocol.encode({"id": 2, "method": "ping", "params": {}}))
    agent_main.Agent(str(tmp_path), out).serve(inp)

    def replies() -> list[dict]:
        stream = io.BytesIO(out.getvalue().split(b"\n", 1)[1])  # after the hello line
        return list(iter(lambda: (f := protocol.read_frame(stream)) and json.loads(f), None))

    deadline = time.monotonic() + 30
    while not any(r.get("id") == 2 for r in replies()):  # handled on a thread of its own
        assert time.monotonic() < deadline, out.getvalue()[:400]
        time.sleep(0.01)
    refused = replies()[0]
    assert refused["id"] is None and "malformed request: a message nested deeper" in refused["error"]["message"]


async def test_a_frame_header_over_the_limit_is_refused_not_buffered():
    agent, _ = await reading(b"#7fffffff\n" + b"z" * 100)
    waiter = asyncio.get_running_loop().create_future()
    agent.pending[1] = waiter
    await agent._read_loop()
    with pytest.raises(ConnectionFailed, match=r"over the 64\.0 MiB one message may carry"):
        waiter.result()


async def test_a_call_without_a_deadline_still_ends(host: HostConfig, tmp_path, monkeypatch):
    """The client's own default deadline bounds a call that names none (and the host method is cancelled)."""
    monkeypatch.setattr(client.AgentClient.call, "__defaults__", (1.0,))
    conn = await Connection.open(host)
    try:
        job = await conn.call("jobs.start", kind="test", argv=["sleep", "30"])
        async with asyncio.timeout(20):
            with pytest.raises(ConnectionFailed, match=r"jobs\.wait got no answer in 1 s"):
                await conn.agent.call("jobs.wait", id=job["id"], timeout=600)
        await conn.call("jobs.cancel", id=job["id"], timeout=5)
    finally:
        await conn.close()


def endless_python(tmp_path: Path) -> str:
    path = tmp_path / "chatty-python"
    loop = "import sys\nwhile True: sys.stdout.write('specdeck ' * 1000)"
    path.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{loop}"\n')
    path.chmod(0o755)
    return str(path)


async def test_a_host_printing_without_end_fails_fast_and_bounded(host: HostConfig, tmp_path):
    """A python that prints endlessly without a newline: the start fails with a sentence, long before the
    hello deadline, having kept a bounded amount (a line reader grew to gigabytes)."""
    with pytest.raises(ConnectionFailed, match=r"printed over 1 MiB before the agent started .*rc files"):
        async with asyncio.timeout(25):
            await Connection.open(replace(host, python=endless_python(tmp_path)))


async def test_a_request_too_big_for_a_frame_is_refused_before_sending(monkeypatch):
    monkeypatch.setattr(client, "MAX_FRAME", 100)
    agent, _ = await reading(b"")
    agent.closed = asyncio.get_running_loop().create_future()
    with pytest.raises(RemoteError, match=r"fs\.write request is 0\.0 MiB, more than one message may carry"):
        await agent._send({"id": 1, "method": "fs.write", "params": {"data": "q" * 500}})


async def test_a_failed_jobs_reason_quotes_a_capped_log_line(host: HostConfig):
    """A job that fails after a 64 KiB log line: its reason quotes the line's start and says how much was cut,
    so 40 such jobs list in a small reply."""
    conn = await Connection.open(host)
    try:
        job = await conn.call(
            "jobs.start", kind="test", argv=["sh", "-c", "head -c 65536 /dev/zero | tr '\\0' x; echo; exit 3"]
        )
        done = await conn.call("jobs.wait", id=job["id"], timeout=30)
        assert done["state"] == "failed" and done["reason"].startswith("exited with code 3: xxx")
        assert len(done["reason"]) < 600 and "more characters; see the job's log" in done["reason"]
    finally:
        await conn.close()


def test_a_request_without_a_thread_to_run_on_is_answered_not_fatal(monkeypatch):
    """At the host's process limit a thread cannot start: that request gets an error, and the agent lives on."""
    out: list[bytes] = []

    class Sink:
        def write(self, b: bytes) -> None:
            out.append(b)

        def flush(self) -> None:
            pass

    def no_thread(self) -> None:
        raise RuntimeError("can't start new thread")

    from backend.agent.host import probes  # noqa: F401  # registers ping

    monkeypatch.setattr(agent_main.threading.Thread, "start", no_thread)
    agent = agent_main.Agent("/tmp", Sink())
    agent.handle({"id": 9, "method": "ping"})
    reply = json.loads(out[0][protocol.HEADER_LEN :])
    assert reply["id"] == 9 and reply["error"]["kind"] == "busy" and "process limit" in reply["error"]["message"]
    assert agent.running == {}


def test_a_servers_error_context_quotes_capped_lines(tmp_path):
    from backend.agent.host import serve

    log = tmp_path / "log"
    log.write_text("x" * 65536 + "\nshort\n")
    lines = serve._tail(str(log))
    assert lines[-1] == "short" and len(lines[0]) < 600 and lines[0].endswith("see the job's log)")
