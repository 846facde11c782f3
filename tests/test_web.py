"""`specdeck web`: the panel served by textual-serve, loaded by a real headless Chromium over loopback."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from backend.cli.webcmds import is_loopback, panel_command

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # Nothing but loopback, even outside the test network namespace (the page links a web font).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1600,1000",
]  # fmt: skip
_ESCAPES = re.compile(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] not in ("Z", "X"):
                children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_panel_command_is_specdeck_with_the_same_config_and_host(tmp_path):
    args = argparse.Namespace(config=str(tmp_path / "c.toml"), host="sandbox", identity=None, known_hosts=None,
                              python=None, workdir="/w")  # fmt: skip
    argv = shlex.split(panel_command(args))
    assert Path(argv[0]).name == "specdeck" or argv[1:3] == ["-m", "backend.cli.main"]
    assert argv[-6:] == ["--config", str(tmp_path / "c.toml"), "--host", "sandbox", "--workdir", "/w"]
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_bad_port_is_a_usage_error():
    res = subprocess.run(
        [sys.executable, "-m", "backend.cli.main", "web", "--host", "local", "--port", "70000"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert res.returncode == 2 and "--port must be a TCP port" in res.stderr


async def browse(url: str, user_dir: Path, want: tuple[str, ...], timeout: float = 60) -> dict:
    """Open ``url`` in headless Chromium (DevTools protocol) until the terminal's websocket has streamed every
    string in ``want``; returns the page's body classes, the streamed text and a screenshot."""
    import aiohttp

    proc = await asyncio.create_subprocess_exec(
        str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={user_dir}", "--remote-debugging-port=0", "about:blank",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        port_file = user_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):  # another process: short polls
            assert time.monotonic() < deadline, "Chromium did not open its DevTools port"
            await asyncio.sleep(0.05)
        devtools = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as http:
            targets = await (await http.get(f"http://127.0.0.1:{devtools}/json/list")).json()
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                frames: list[bytes] = []
                next_id = iter(range(1, 1 << 30))

                def on_event(msg: dict) -> None:
                    if msg.get("method") == "Network.webSocketFrameReceived":
                        r = msg["params"]["response"]
                        frames.append(base64.b64decode(r["payloadData"]) if r["opcode"] == 2 else b"")

                async def call(method: str, **params) -> dict:
                    i = next(next_id)
                    await ws.send_json({"id": i, "method": method, "params": params})
                    while True:
                        msg = json.loads((await ws.receive()).data)
                        if msg.get("id") == i:
                            return msg.get("result", {})
                        on_event(msg)

                await call("Network.enable")
                await call("Page.navigate", url=url)
                deadline = time.monotonic() + timeout
                text = ""
                while not all(w in text for w in want):
                    assert time.monotonic() < deadline, f"the page never showed {want}: {text[-2000:]!r}"
                    try:
                        on_event(json.loads((await asyncio.wait_for(ws.receive(), 0.5)).data))
                    except TimeoutError:
                        pass
                    text = _ESCAPES.sub("", b"".join(frames).decode("utf-8", "replace"))
                body = await call("Runtime.evaluate", expression="document.body.className")
                title = await call("Runtime.evaluate", expression="document.querySelector('.intro').textContent.trim()")
                shot = await call("Page.captureScreenshot", format="png")
                return {
                    "classes": body["result"]["value"].split(),
                    "intro": title["result"]["value"],
                    "text": text,
                    "png": base64.b64decode(shot["data"]),
                }
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install -y chromium)")
async def test_web_demo_serves_the_panel_to_headless_chromium(tmp_path):
    from backend.sandbox import environment

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "backend.cli.main", "web", "--demo", "--port", str(port)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # another process: poll its port with short waits
            assert server.poll() is None, server.stdout.read()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "specdeck web did not listen"
            await asyncio.sleep(0.05)
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        assert "specdeck: sandbox" in page and f"ws://127.0.0.1:{port}/ws" in page

        shown = await browse(f"http://127.0.0.1:{port}/", tmp_path / "chromium", ("SANDBOX", "History", "connected"))
        assert "-first-byte" in shown["classes"] and "-closed" not in shown["classes"]
        assert shown["intro"].startswith("specdeck: sandbox")
        for tab in ("Drafters", "Compare", "Serve", "Live", "History"):
            assert tab in shown["text"]
        assert shown["png"].startswith(b"\x89PNG") and len(shown["png"]) > 20_000
        (tmp_path / "web.png").write_bytes(shown["png"])

        # The panel textual-serve started is `specdeck` on the sandbox config and host.
        panels = [p for p in descendants(server.pid) if "--host sandbox" in cmdline(p) and "--config" in cmdline(p)]
        assert panels, [cmdline(p) for p in descendants(server.pid)]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            assert server.wait(timeout=20) == 0
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
            await environment.down()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{p}").exists() and "--host sandbox" in cmdline(p) for p in panels):
        assert time.monotonic() < deadline, "a browser session's panel outlived the web server"
        await asyncio.sleep(0.05)
