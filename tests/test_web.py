"""`specdeck web`: the panel served by textual-serve, loaded by a real headless Chromium over loopback."""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import shlex
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from backend.cli.webcmds import is_loopback, panel_command
from tests.chromium import CHROMIUM, Chromium
from tests.helpers import CLI, run_cli
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]


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
    res = run_cli("web", "--host", "local", "--port", "70000", rc=None)
    assert res.returncode == 2 and "--port must be a TCP port" in res.stderr


async def start_web(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, str, str]:
    """`specdeck web ARGS` on a free port; returns the process, the URL it printed and what came before."""
    port = free_port()
    server = subprocess.Popen(
        [*CLI, "web", "--port", str(port), *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    deadline, before = time.monotonic() + 60, ""
    while True:  # another process: read its lines until it prints the URL
        assert time.monotonic() < deadline, "specdeck web did not print its URL"
        line = await asyncio.to_thread(server.stdout.readline)
        assert line or server.poll() is None, f"specdeck web exited: {before}"
        if line.startswith("serving specdeck"):
            return server, line.split(" on ", 1)[1].split()[0], before
        before += line


def stop_web(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)


async def other_site(ws_url: str) -> tuple[object, str]:
    """A page on another origin (another loopback port) whose script opens ``ws_url`` and writes how it went
    into its title: what a malicious page open in the owner's browser would try."""
    from aiohttp import web as aioweb

    page = f"""<html><head><title>pending</title></head><body><script>
      const s = new WebSocket({json.dumps(ws_url)});
      s.onopen = () => {{ document.title = "opened"; }};
      s.onerror = () => {{ document.title = "refused"; }};
    </script></body></html>"""

    async def serve(request: aioweb.Request) -> aioweb.Response:
        return aioweb.Response(text=page, content_type="text/html")

    app = aioweb.Application()
    app.router.add_get("/", serve)
    runner = aioweb.AppRunner(app)
    await runner.setup()
    port = free_port()
    await aioweb.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install -y chromium)")
@pytest.mark.slow
async def test_web_demo_serves_the_panel_only_to_its_owner(tmp_path):
    """With the printed URL the panel renders; without its token nothing does; another site's page cannot
    open the websocket even when it knows the token."""
    from backend.sandbox import environment

    server, url, _ = await start_web("--demo")
    runner = None
    try:
        base, token = url.split("/?token=")
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        ws_url = f"{base.replace('http:', 'ws:')}/ws/{hashlib.sha256(token.encode()).hexdigest()}"
        assert "specdeck: sandbox" in page and ws_url in page

        async with Chromium(tmp_path / "chromium") as browser:
            await browser.call("Page.navigate", url=f"{base}/")  # no token: a refusal, no panel
            deadline = time.monotonic() + 30
            while "forbidden" not in (await browser.evaluate("document.body ? document.body.innerText : ''") or ""):
                assert time.monotonic() < deadline, "the page without a token was not refused"
                await asyncio.sleep(0.05)
            assert browser.sockets == [] and browser.frames == []

            runner, evil = await other_site(ws_url)
            await browser.call("Page.navigate", url=evil)
            deadline = time.monotonic() + 30
            while (title := await browser.evaluate("document.title")) not in ("opened", "refused"):
                assert time.monotonic() < deadline, "the other site's socket neither opened nor failed"
                await asyncio.sleep(0.05)
            assert title == "refused" and browser.frames == []

            await browser.call("Page.navigate", url=url)
            await browser.until(lambda: all(w in browser.text() for w in ("SANDBOX", "History", "connected")),
                                "the panel")  # fmt: skip
            classes = (await browser.evaluate("document.body.className")).split()
            assert "-first-byte" in classes and "-closed" not in classes
            intro = await browser.evaluate("document.querySelector('.intro').textContent.trim()")
            assert intro.startswith("specdeck: sandbox")
            for tab in ("Drafters", "Compare", "Serve", "Live", "History"):
                assert tab in browser.text()
            shot = base64.b64decode((await browser.call("Page.captureScreenshot", format="png"))["data"])
            assert shot.startswith(b"\x89PNG") and len(shot) > 20_000
            (tmp_path / "web.png").write_bytes(shot)
            # The panel textual-serve started is `specdeck` on the sandbox config and host (looked up while the
            # browser holds its session: closing the page ends it).
            panels = [p for p in descendants(server.pid) if "--host sandbox" in cmdline(p) and "--config" in cmdline(p)]
            assert panels, [cmdline(p) for p in descendants(server.pid)]
    finally:
        if runner is not None:
            await runner.cleanup()
        stop_web(server)
        await environment.down()
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{p}").exists() and "--host sandbox" in cmdline(p) for p in panels):
        assert time.monotonic() < deadline, "a browser session's panel outlived the web server"
        await asyncio.sleep(0.05)


async def test_page_and_socket_refuse_requests_without_the_token_or_from_another_origin(tmp_path):
    import aiohttp

    token_file = tmp_path / "token"
    token_file.write_text("a-fixed-token-for-this-test\n")
    server, url, before = await start_web("--host", "local", "--bind", "0.0.0.0", "--token-file", str(token_file))
    assert "WARNING: serving on 0.0.0.0" in before
    try:
        port = int(url.split(":")[2].split("/")[0])
        local = f"http://127.0.0.1:{port}"
        assert url.endswith("/?token=a-fixed-token-for-this-test")
        async with aiohttp.ClientSession() as http:
            for path in ("/", "/?token=wrong", "/?token=a-fixed-token-for-this-tes", "/download/x"):
                assert (await http.get(local + path)).status == 403, path
            page = await http.get(local + "/?token=a-fixed-token-for-this-test")
            assert page.status == 200 and page.headers["Referrer-Policy"] == "no-referrer"
            for path, origin in (
                ("/ws", local),
                ("/ws/wrong", local),
                (f"/ws/{hashlib.sha256(b'a-fixed-token-for-this-test').hexdigest()}", "http://evil.example"),
            ):
                with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                    await http.ws_connect(f"ws://127.0.0.1:{port}{path}", headers={"Origin": origin})
                assert err.value.status == 403, path
    finally:
        stop_web(server)


def test_a_short_fixed_token_is_refused(tmp_path):
    res = run_cli("web", "--host", "local", "--port", str(free_port()), env={"SPECDECK_WEB_TOKEN": "short"}, rc=None)
    assert res.returncode == 2 and "at least 16 characters" in res.stderr


async def test_a_fixed_token_from_base64_opens_the_page_and_the_socket(tmp_path):
    """Issue 20, item 9: "+", "/" and "=" (`openssl rand -base64`) in a fixed token: the page loads and its
    websocket opens (it answered 404 when the token rode percent-quoted in the socket's path)."""
    import re

    import aiohttp

    token_file = tmp_path / "token"
    token_file.write_text("q+Zk/3vR9w+Lm2=pT8x+Yb4=\n")
    server, url, _ = await start_web("--host", "local", "--token-file", str(token_file))
    try:
        assert url.endswith("/?token=q%2BZk%2F3vR9w%2BLm2%3DpT8x%2BYb4%3D")
        async with aiohttp.ClientSession() as http:
            page = await http.get(url)
            assert page.status == 200
            ws_url = re.search(r"wss?://[^\"'\s]+/ws/[^\"'\s]+", await page.text()).group()
            origin = url.split("/?")[0]
            async with http.ws_connect(ws_url, headers={"Origin": origin}) as ws:
                assert not ws.closed
    finally:
        stop_web(server)


def test_default_port_leaves_the_sandbox_router_alone():
    """`specdeck web` beside `fleet up sandbox`: the router's port (8000, in every fleet by default) is not the
    web panel's default, nor is any port the sandbox's fleet holds."""
    from backend.cli.webcmds import DEFAULT_PORT
    from backend.sandbox import environment
    from backend.settings.model import RouterConfig

    router = RouterConfig(host="sandbox")
    taken = {environment.ROUTER_PORT, router.port, router.prometheus_port}
    taken |= {environment.replica_port(n) for n in range(1, 5)}
    assert DEFAULT_PORT not in taken
