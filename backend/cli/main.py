"""`specdeck`: argument parsing, the shared options, and the one error funnel (message + exit code)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import pkgutil
import select
import signal
import sqlite3
import sys
from importlib.metadata import version

from backend.errors import SpecdeckError


def command_modules() -> list[str]:
    """Every ``backend/cli/*cmds.py``: each has register(subparsers), whose parsers set_defaults(run=coro_fn)."""
    import backend.cli

    names = [m.name for m in pkgutil.iter_modules(backend.cli.__path__) if m.name.endswith("cmds")]
    # `--help` lists commands in the order an operator meets them; modules not named here come last.
    order = (
        "sandboxcmds",
        "hostcmds",
        "configcmds",
        "downloadcmds",
        "comparecmds",
        "servecmds",
        "livecmds",
        "historycmds",
        "tunecmds",
        "webcmds",
    )
    names.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    return [f"backend.cli.{n}" for n in names]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdeck",
        description="A control panel for EAGLE-3 speculative decoding on SGLang. "
        "With no command, opens the TUI on the default host.",
        epilog="Exit codes: 0 ok, 1 operation failed, 2 bad input or usage, 3 connection or host-key failure.",
    )
    parser.add_argument("--version", action="version", version=f"specdeck {version('specdeck')}")
    add_host_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(name).register(sub)
    return parser


def add_host_options(parser: argparse.ArgumentParser) -> None:
    """Options every command takes (also accepted after the command name)."""
    g = parser.add_argument_group("host and config")
    g.add_argument("--host", default=argparse.SUPPRESS, help="configured host name, local, or ssh://user@addr[:port]")
    g.add_argument("--identity", metavar="FILE", default=argparse.SUPPRESS, help="SSH private key to use")
    g.add_argument(
        "--known-hosts",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="known_hosts to verify against and trust into (default: ssh_config's, else ~/.ssh/known_hosts)",
    )
    g.add_argument("--python", metavar="PATH", default=argparse.SUPPRESS, help="the host's Python interpreter")
    g.add_argument("--workdir", metavar="DIR", default=argparse.SUPPRESS, help="the host's work folder")
    g.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="config file (or SPECDECK_CONFIG)")
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


def command(sub, name: str, help: str, **kw) -> argparse.ArgumentParser:
    """A subcommand that also accepts the host options after its name."""
    p = sub.add_parser(name, help=help, description=help, **kw)
    add_host_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for opt in ("host", "identity", "known_hosts", "python", "workdir", "config"):
        args.__dict__.setdefault(opt, None)
    args.__dict__.setdefault("debug", False)
    run = getattr(args, "run", None)
    if run is None:
        if args.command:  # a group (e.g. `specdeck jobs x`) without a runnable leaf
            parser.parse_args([args.command, "--help"])
        from backend.cli.panel import open_tui

        run = open_tui
    try:
        try:
            code = asyncio.run(run(args))
        except sqlite3.Error as exc:  # met past the open (a page damaged later): the run history is our one database
            from backend.history import history_path, unusable

            raise unusable(history_path(), exc) from exc
    except SpecdeckError as exc:
        if args.debug:
            raise
        print(f"specdeck: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and _stdout_closed():
            return 128 + signal.SIGPIPE  # the reader went away (`| head`): stop quietly, as Unix tools do
        if args.debug:
            raise
        print(f"specdeck: internal error: {exc!r} (run with --debug for the traceback)", file=sys.stderr)
        return 1
    return code or 0


def _stdout_closed() -> bool:
    """Whether stdout's reader is gone (a pipe with no reader polls as an error); if so, stdout points at
    /dev/null from now on, so the flush at exit cannot complain about the same broken pipe."""
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        if not any(ev & select.POLLERR for _, ev in poll.poll(0)):
            return False
    except (OSError, ValueError):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return True


if __name__ == "__main__":
    sys.exit(main())
