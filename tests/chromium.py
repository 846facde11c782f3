"""Headless Chromium (Debian's, installed by `make test-deps`) driven over the DevTools protocol, for the tests
that load a page the way a person's browser would: the web panel, the HTML report."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    # Nothing but loopback, even outside the test network namespace (the page links a web font).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--window-size=1600,1000",
]  # fmt: skip
_ESCAPES = re.compile(r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78])")


class Chromium:
    """Headless Chromium driven over the DevTools protocol; it records the frames every page's websockets get and
    the URL of every request a page makes."""

    def __init__(self, user_dir: Path) -> None:
        self.user_dir = user_dir
        self.frames: list[bytes] = []
        self.sockets: list[str] = []  # the URL of every websocket a page opened
        self.requests: list[str] = []  # the URL of every request a page made (documents, scripts, images, XHR)
        self.ids = iter(range(1, 1 << 30))

    async def __aenter__(self) -> Chromium:
        import aiohttp

        self.proc = await asyncio.create_subprocess_exec(
            str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={self.user_dir}", "--remote-debugging-port=0",
            "about:blank", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        port_file = self.user_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):  # another process: short polls
            assert time.monotonic() < deadline, "Chromium did not open its DevTools port"
            await asyncio.sleep(0.05)
        devtools = int(port_file.read_text().split()[0])
        self.http = aiohttp.ClientSession()
        targets = await (await self.http.get(f"http://127.0.0.1:{devtools}/json/list")).json()
        page = next(t for t in targets if t["type"] == "page")
        self.ws = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.call("Network.enable")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.ws.close()
        await self.http.close()
        if self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()

    def _event(self, msg: dict) -> None:
        if msg.get("method") == "Network.webSocketFrameReceived":
            r = msg["params"]["response"]
            self.frames.append(base64.b64decode(r["payloadData"]) if r["opcode"] == 2 else b"")
        elif msg.get("method") == "Network.webSocketCreated":
            self.sockets.append(msg["params"]["url"])
        elif msg.get("method") == "Network.requestWillBeSent":
            self.requests.append(msg["params"]["request"]["url"])

    async def call(self, method: str, **params) -> dict:
        i = next(self.ids)
        await self.ws.send_json({"id": i, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive()).data)
            if msg.get("id") == i:
                return msg.get("result", {})
            self._event(msg)

    async def evaluate(self, expression: str):
        return (await self.call("Runtime.evaluate", expression=expression, awaitPromise=True))["result"].get("value")

    async def until(self, cond, what: str, timeout: float = 60) -> None:
        """Pump DevTools events until ``cond()`` holds."""
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, f"the browser never showed {what}"
            try:
                self._event(json.loads((await asyncio.wait_for(self.ws.receive(), 0.5)).data))
            except TimeoutError:
                pass

    def text(self) -> str:
        return _ESCAPES.sub("", b"".join(self.frames).decode("utf-8", "replace"))
