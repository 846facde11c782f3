"""`specdeck`: argument parsing, the shared options, and the one error funnel (message + exit code)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import pkgutil
import signal
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from backend import hosttext
from backend.cli.exits import end, stdout_closed
from backend.errors import SpecdeckError

if TYPE_CHECKING:
    # What each command module's ``register(sub)`` adds its subcommands to.
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

# Which module registers each command, so a command builds only its own parser: importing every command module
# cost a third of a second a run. A command missing here still works (the whole parser is built, as for
# `--help`); test_cli checks the table against what the modules register.
COMMANDS = {
    "sandbox": "sandboxcmds",
    "demo": "sandboxcmds",
    "ping": "hostcmds",
    "jobs": "hostcmds",
    "disconnect": "hostcmds",
    "config": "configcmds",
    "download": "downloadcmds",
    "drafters": "draftercmds",
    "inspect": "comparecmds",
    "diff": "comparecmds",
    "serve": "servecmds",
    "fleet": "fleetcmds",
    "parse-log": "livecmds",
    "breakeven": "livecmds",
    "watch": "livecmds",
    "bench": "livecmds",
    "profile": "profilecmds",
    "parse-metrics": "livecmds",
    "history": "historycmds",
    "report": "historycmds",
    "export": "historycmds",
    "advise": "tunecmds",
    "sweep": "tunecmds",
    "train": "traincmds",
    "trust": "trustcmds",
    "web": "webcmds",
}
# Host options that take a value: skipped when finding the command's name in argv.
_VALUED = ("--host", "--identity", "--known-hosts", "--python", "--workdir", "--config")


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
        "draftercmds",
        "comparecmds",
        "servecmds",
        "livecmds",
        "profilecmds",
        "fleetcmds",
        "historycmds",
        "tunecmds",
        "traincmds",
        "webcmds",
    )
    names.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    return [f"backend.cli.{n}" for n in names]


def command_name(argv: list[str]) -> str | None:
    """The command an argv names (its first word that is neither an option nor an option's value)."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if word in _VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


class _Version(argparse.Action):
    """`--version`, reading the installed metadata only when asked (importlib.metadata costs 20 ms a start)."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import version

        print(f"specdeck {version('specdeck')}")
        parser.exit()


def modules_for(argv: list[str]) -> list[str]:
    """The command modules an argv needs: its command's own, none to open the panel, all for `--help`."""
    name = command_name(argv)
    if name in COMMANDS:
        return [f"backend.cli.{COMMANDS[name]}"]
    if name is None and not {"-h", "--help"} & set(argv):
        return []
    return command_modules()


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (the README promises one line on stderr and exit 2); a
    command's subparsers are made of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} --help`\n")


def build_parser(modules: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with the commands of ``modules`` (default: every command module)."""
    parser = Parser(
        prog="specdeck",
        description="A control panel for EAGLE-3 speculative decoding on SGLang. "
        "With no command, opens the TUI on the default host.",
        epilog="Exit codes: 0 ok, 1 operation failed, 2 bad input or usage, 3 connection or host-key failure.",
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    add_host_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules() if modules is None else modules:
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
    g.add_argument(
        "--no-persist",
        action="store_true",
        default=argparse.SUPPRESS,
        help="connect directly: use no shared SSH connection and leave none behind (`specdeck disconnect`)",
    )
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


def command(sub: Subcommands, name: str, help: str, **kw: Any) -> argparse.ArgumentParser:
    """A subcommand that also accepts the host options after its name."""
    p = sub.add_parser(name, help=help, description=help, **kw)
    add_host_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names; every line it prints passes through ``hosttext.visible`` (host text
    cannot drive the terminal)."""
    with hosttext.guarded():
        return _main(sys.argv[1:] if argv is None else argv)


def _main(argv: list[str]) -> int:
    parser = build_parser(modules_for(argv))
    args = parser.parse_args(argv)
    for opt in ("host", "identity", "known_hosts", "python", "workdir", "config"):
        args.__dict__.setdefault(opt, None)
    args.__dict__.setdefault("debug", False)
    args.__dict__.setdefault("no_persist", False)
    run = getattr(args, "run", None)
    if run is None:
        if args.command:  # a group (e.g. `specdeck jobs x`) without a runnable leaf
            parser.parse_args([args.command, "--help"])
        from backend.cli.panel import open_tui

        run = open_tui
    try:
        try:
            code = asyncio.run(run(args))
        except Exception as exc:  # sqlite3 is imported only by commands that use the run history
            sqlite3 = sys.modules.get("sqlite3")
            if sqlite3 is None or not isinstance(exc, sqlite3.Error):
                raise
            # Met past the open (a page damaged later): the run history is our one database.
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
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            return 128 + signal.SIGPIPE  # the reader went away (`| head`): stop quietly, as Unix tools do
        if args.debug:
            raise
        print(f"specdeck: internal error: {exc!r} (run with --debug for the traceback)", file=sys.stderr)
        return 1
    return code or 0


if __name__ == "__main__":  # ends as the installed entry does (exits.end): no teardown of every module and object
    code = main()
    end(code)
    sys.exit(code)
