"""`specdeck web`: the panel in a browser, through textual-serve, for demos to people without a terminal.

Each browser tab that opens the page gets its own ``specdeck`` process (textual-serve runs the command and
streams its screen over a websocket), started with the same ``--config`` and ``--host`` as this command, so
the page shows exactly what ``specdeck`` would in a terminal. Whoever drives the page drives the panel (start
SGLang with any flags on the GPU host), so, as Jupyter does, the page and the websocket want a token that only
the owner has: random per start and printed in the URL, or fixed with ``--token-file`` or $SPECDECK_WEB_TOKEN.
The websocket also refuses another site's ``Origin``, so a page open in the same browser cannot drive it.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import hashlib
import hmac
import ipaddress
import os
import secrets
import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from backend.cli.common import load_settings
from backend.cli.main import command
from backend.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from textual_serve.server import Server

    from backend.cli.main import Subcommands

DEFAULT_PORT = 8080  # not 8000: sglang-router's port in every fleet (the sandbox's too)
LOOPBACK = "127.0.0.1"
TOKEN_ENV = "SPECDECK_WEB_TOKEN"
MIN_TOKEN = 16  # characters; a fixed token shorter than this is refused
_HOST_OPTIONS = (("host", "--host"), ("identity", "--identity"), ("known_hosts", "--known-hosts"),
                 ("python", "--python"), ("workdir", "--workdir"))  # fmt: skip


def register(sub: Subcommands) -> None:
    p = command(sub, "web", "Serve the panel in a browser (textual-serve) behind a token; loopback unless --bind.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--bind", default=LOOPBACK, metavar="ADDR", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--public-url", metavar="URL", help="the URL browsers use, when it is not http://ADDR:PORT")
    p.add_argument("--demo", action="store_true", help="serve the sandbox panel (like `specdeck demo`)")
    p.add_argument(
        "--token-file", metavar="FILE", help=f"a fixed access token, read from FILE (else ${TOKEN_ENV}, else random)"
    )
    p.set_defaults(run=web)


def access_token(token_file: str | None) -> str:
    """The token the page and websocket want: from ``--token-file``, else $SPECDECK_WEB_TOKEN, else random."""
    if token_file:
        try:
            token = Path(token_file).expanduser().read_text().strip()
        except OSError as exc:
            raise UsageError(f"cannot read --token-file {token_file}: {exc.strerror or exc}") from None
        source = f"--token-file {token_file}"
    elif os.environ.get(TOKEN_ENV):
        token, source = os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    else:
        return secrets.token_urlsafe(24)
    if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
        raise UsageError(f"the token from {source} must be at least {MIN_TOKEN} characters with no spaces")
    return token


def make_server(command: str, bind: str, port: int, title: str, public_url: str, token: str) -> Server:
    """textual-serve's Server, with the page and the websocket behind the token and the websocket same-origin."""
    import aiohttp_jinja2
    import jinja2
    from aiohttp import web as aioweb
    from textual_serve.server import Server

    # textual.js appends "?width=…" to the socket's URL, so the token rides in the path, as its digest: any
    # token then makes a plain path (a "+" or "/" from base64, percent-quoted, never matched aiohttp's route).
    ws_path = f"/ws/{hashlib.sha256(token.encode()).hexdigest()}"

    class GuardedServer(Server):
        # Borrowed: textual-serve's private ``Server._make_app`` (and its handle_* methods, templates_path and
        # statics_path), the only place its routes are made; there is no public hook for middleware. Capped in
        # pyproject.toml; tests/test_private_apis.py says when a release moves it.
        async def _make_app(self) -> aioweb.Application:
            # textual-serve's routes, with the socket's (named "websocket": the page's URL comes from it) moved
            # behind the token; no startup banner, this command prints its own lines.
            app = aioweb.Application(middlewares=[guard])
            aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
            app.add_routes([
                aioweb.get("/", self.handle_index, name="index"),
                aioweb.get(ws_path, self.handle_websocket, name="websocket"),
                aioweb.get("/download/{key}", self.handle_download, name="download"),
                aioweb.static("/static", self.statics_path, name="static"),
            ])  # fmt: skip
            return app

    def same_origin(request: aioweb.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:  # not a browser (a browser always sends it on a websocket): the token decides
            return True
        allowed = {urlsplit(public_url).netloc.lower(), request.host.lower()}
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and parts.netloc.lower() in allowed

    @aioweb.middleware
    async def guard(
        request: aioweb.Request, handler: Callable[[aioweb.Request], Awaitable[aioweb.StreamResponse]]
    ) -> aioweb.StreamResponse:
        path = request.path
        if path.startswith("/static/"):
            return await handler(request)  # textual-serve's own scripts and styles: nothing of ours
        if path == "/ws" or path.startswith("/ws/"):
            ok = hmac.compare_digest(request.raw_path.split("?")[0].encode(), ws_path.encode())
            if not ok or not same_origin(request):
                raise aioweb.HTTPForbidden(text="forbidden: wrong token or another site's page\n")
            return await handler(request)
        if not hmac.compare_digest(request.query.get("token", "").encode(), token.encode()):
            raise aioweb.HTTPForbidden(text="forbidden: open the URL `specdeck web` printed, with its ?token=\n")
        response = await handler(request)
        # The token is in this page's URL: never sent on as a Referer (the page loads a web font), never cached.
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    return GuardedServer(command, host=bind, port=port, title=title, public_url=public_url)


def is_loopback(addr: str) -> bool:
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def panel_command(args: argparse.Namespace) -> str:
    """The shell command textual-serve runs per browser session: ``specdeck`` with this command's options."""
    exe = Path(sys.executable).with_name("specdeck")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "backend.cli.main"]
    if getattr(args, "config", None):
        argv += ["--config", str(Path(args.config).expanduser().resolve())]
    for key, flag in _HOST_OPTIONS:
        value = getattr(args, key, None)
        if value:
            argv += [flag, value]
    return shlex.join(argv)


async def web(args: argparse.Namespace) -> int:
    from aiohttp import web as aioweb

    from backend.connection import resolve_host

    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be a TCP port (1-65535), got {args.port}")
    token = access_token(args.token_file)
    if args.demo:
        from backend.sandbox import environment

        out = await environment.up()
        args.config, args.host = out.config, environment.HOST_NAME
    host = resolve_host(load_settings(args), args.host)  # fail here, not in every browser tab
    url_host = f"[{args.bind}]" if ":" in args.bind else args.bind
    public_url = (args.public_url or f"http://{url_host}:{args.port}").rstrip("/")
    cmd = panel_command(args)
    server = make_server(cmd, args.bind, args.port, f"specdeck: {host.name}", public_url, token)
    # Server.serve() runs its own event loop; this command already runs in one, so start its app here.
    runner = aioweb.AppRunner(await server._make_app())
    await runner.setup()
    try:
        await aioweb.TCPSite(runner, args.bind, args.port).start()
    except OSError as exc:
        await runner.cleanup()
        fix = "pick another --port" if exc.errno == errno.EADDRINUSE else "check --bind (an address of this machine)"
        raise UsageError(f"cannot listen on {args.bind}:{args.port}: {exc.strerror}; {fix}") from None
    if not is_loopback(args.bind):
        print(
            f"WARNING: serving on {args.bind}:{args.port}, reachable from other machines. Whoever has the URL "
            f"below drives the panel on {host.name} (starts SGLang with any flags there), and it travels as plain "
            f"HTTP. Prefer the default 127.0.0.1 and `ssh -L {args.port}:127.0.0.1:{args.port}` to this machine.",
            file=sys.stderr,
            flush=True,
        )
    print(f"serving specdeck ({host.name}) on {public_url}/?token={quote(token, safe='')}  (Ctrl+C stops)", flush=True)
    print(f"each browser session runs: {cmd}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()  # closes the websockets: each session's panel is told to quit
    return 0
