"""`specdeck web`: the panel in a browser, through textual-serve, for demos to people without a terminal.

Each browser tab that opens the page gets its own ``specdeck`` process (textual-serve runs the command and
streams its screen over a websocket), started with the same ``--config`` and ``--host`` as this command, so
the page shows exactly what ``specdeck`` would in a terminal. Loopback only by default: whoever reaches the
page can drive the panel (start and stop servers), and there is no login.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import shlex
import signal
import sys
from pathlib import Path

from backend.cli.common import load_settings
from backend.cli.main import command

DEFAULT_PORT = 8000
LOOPBACK = "127.0.0.1"
_HOST_OPTIONS = (("host", "--host"), ("identity", "--identity"), ("known_hosts", "--known-hosts"),
                 ("python", "--python"), ("workdir", "--workdir"))  # fmt: skip


def register(sub) -> None:
    p = command(sub, "web", "Serve the panel in a browser (textual-serve); loopback only unless --bind says otherwise.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--bind", default=LOOPBACK, metavar="ADDR", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--public-url", metavar="URL", help="the URL browsers use, when it is not http://ADDR:PORT")
    p.add_argument("--demo", action="store_true", help="serve the sandbox panel (like `specdeck demo`)")
    p.set_defaults(run=web)


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
    from textual_serve.server import Server

    from backend.connection import resolve_host
    from backend.errors import UsageError

    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port must be a TCP port (1-65535), got {args.port}")
    if args.demo:
        from backend.sandbox import environment

        out = await environment.up()
        args.config, args.host = out["config"], environment.HOST_NAME
    host = resolve_host(load_settings(args), args.host)  # fail here, not in every browser tab
    if not is_loopback(args.bind):
        print(
            f"warning: serving on {args.bind}: anyone who can reach it drives the panel on {host.name} "
            "(start and stop servers) with no login; prefer the default 127.0.0.1 and an SSH tunnel.",
            file=sys.stderr,
        )
    url_host = f"[{args.bind}]" if ":" in args.bind else args.bind
    public_url = args.public_url or f"http://{url_host}:{args.port}"
    cmd = panel_command(args)
    server = Server(cmd, host=args.bind, port=args.port, title=f"specdeck: {host.name}", public_url=public_url)
    # Server.serve() runs its own event loop; this command already runs in one, so start its app here.
    runner = aioweb.AppRunner(await server._make_app())
    await runner.setup()
    try:
        await aioweb.TCPSite(runner, args.bind, args.port).start()
    except OSError as exc:
        await runner.cleanup()
        raise UsageError(f"cannot listen on {args.bind}:{args.port}: {exc.strerror}; pick another --port") from None
    print(f"serving specdeck ({host.name}) on {public_url}  (Ctrl+C stops)", flush=True)
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
