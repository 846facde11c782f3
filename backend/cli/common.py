"""What command modules share: loading settings, connecting to --host, printing JSON or text."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from backend import hosttext
from backend.settings import config_file
from backend.settings.model import Settings

if TYPE_CHECKING:  # backend.jobs (and its dataclasses) only for the commands that use jobs
    from backend.connection import Connection, ConnState
    from backend.history import Yardstick
    from backend.jobs import JobInfo


def load_settings(args: argparse.Namespace) -> Settings:
    return config_file.load(args.config, getattr(args, "host", None))


FOLLOW_RECONNECTS = 6  # a following command retries this many times (the panel's backoff: about a minute)


async def connect(args: argparse.Namespace, settings: Settings | None = None, *, follow: bool = False) -> Connection:
    """Connect to --host (exit 3 on failure), through its control master unless --no-persist. ``follow``: a
    command that follows a job (download, serve logs -f, watch, bench, sweep) reconnects like the panel when the
    link drops, with the same backoff, and its streams resume at the byte or event they reached; it gives up
    (exit 3) after FOLLOW_RECONNECTS failed tries."""
    from backend.connection import open_host

    settings = settings or load_settings(args)
    conn = await open_host(
        settings,
        args.host,
        shared=not getattr(args, "no_persist", False),
        identity=args.identity,
        known_hosts=args.known_hosts,
        python=args.python,
        workdir=args.workdir,
    )
    conn.brief = True
    if conn.note:
        print(f"specdeck: {conn.note}", file=sys.stderr)
    if conn.shared and conn.agent is not None:
        from backend.cli import resolved
        from backend.transport.base import shell_command
        from backend.transport.controlsock import persist_s

        if persist_s() > 0:  # a master is used or left behind: the next one-shot command can find it
            resolved.remember(args, conn.host, shell_command(conn.agent.start_argv()))
    if follow:
        conn.on_state(_Reconnects())
        conn.supervise(give_up_after=FOLLOW_RECONNECTS)
    return conn


@contextlib.asynccontextmanager
async def connected(
    args: argparse.Namespace, settings: Settings | None = None, *, follow: bool = False
) -> AsyncIterator[Any]:
    """``connect``'s connection for the block, closed however the block ends."""
    conn = await connect(args, settings, follow=follow)
    try:
        yield conn
    finally:
        await conn.close()


def print_detached(args: argparse.Namespace, job: JobInfo) -> None:
    """What a command started with --detach prints: the job (its JSON with --json), to follow or cancel later."""
    if args.json:
        emit_json(job.to_json())
    else:
        print(job.id)


class _Reconnects:
    """Says on stderr when a following command's link drops, each retry, and when it is back."""

    def __init__(self) -> None:
        self.dropped = False

    def __call__(self, state: ConnState) -> None:
        if state.status == "connected":
            if self.dropped:
                print("specdeck: reconnected; following on from where it stopped", file=sys.stderr)
            self.dropped = False
        elif state.status == "reconnecting" and state.retry_at is not None:
            wait = max(0.0, state.retry_at - time.time())
            print(f"specdeck: connection lost ({state.reason}); retrying in {wait:.0f} s", file=sys.stderr)
            self.dropped = True


async def keep_in_history(
    conn: Connection, server: JobInfo, benches: Sequence[tuple[JobInfo, dict[str, Any]]] = ()
) -> str | None:
    """Keep CLI work in the run history: serve job ``server``'s run as a sync imports it (its log's samples so
    far, the server's launch numbers, the drafter's verify state on the host) and ``benches`` ((bench job,
    result) pairs) with it, so a `specdeck report` right after shows all of it. Returns the run id; None, said on
    stderr, when the history cannot be used (the command's own work stands).

    A log a live view records (a panel following it) is left to that view, as a sync leaves it.
    """
    from backend.history import History, HistoryUnavailable, record_run

    latency = await server_latency(conn, server) if server.active else None
    try:
        with History.open() as history:
            run_id = await record_run(history, conn, server)
            if server.active and latency:
                history.set_latency(run_id, latency)
            for job, result in benches:
                history.record_bench(conn.host.name, replace(job, state="done"), result)
    except HistoryUnavailable as exc:
        print(f"specdeck: not kept in the run history: {exc}", file=sys.stderr)
        return None
    return run_id


def yardstick_of(settings: Settings) -> Yardstick:
    """What this host's figures are judged against (the measured baseline when one is marked); the configured
    figures, said on stderr, when the history cannot be read."""
    from backend.history import HistoryUnavailable, Yardstick, load_yardstick

    ref = settings.reference
    try:
        return load_yardstick(ref.baseline_tok_s, ref.cycle_ms)
    except HistoryUnavailable as exc:
        print(f"specdeck: the run history cannot be read ({exc}); judged by the configured baseline", file=sys.stderr)
        return Yardstick(ref.baseline_tok_s, ref.cycle_ms)


async def server_latency(conn: Connection, server: JobInfo) -> dict[str, Any] | None:
    """The running server's latency figures since it started (its /metrics histograms); None when it has none
    or cannot be asked now."""
    from backend.errors import ConnectionFailed, RemoteError
    from backend.measure import latency

    try:
        page = await conn.call("http.request", url=f"http://127.0.0.1:{server.port}/metrics")
    except (ConnectionFailed, RemoteError):
        return None
    if page.get("status") != 200:
        return None
    return latency.summary_json(latency.parse(page.get("text") or "")) or None


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def emit_json_line(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def add_raw(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--raw",
        action="store_true",
        help="the log's control characters as the host wrote them, for a pipe or file (refused on a terminal)",
    )


def log_stream(args: argparse.Namespace) -> TextIO:
    """Where a `logs` command prints: stdout, which shows the host's control characters as visible escapes;
    with --raw the stream beneath it, which only a pipe or file may get (UsageError on a terminal)."""
    if not args.raw:
        return sys.stdout
    if sys.stdout.isatty():
        from backend.errors import UsageError

        raise UsageError(
            "--raw passes the log's control characters to the terminal as they are: "
            "use it with a pipe or a file, or leave it out to see them as escapes"
        )
    return hosttext.unguarded(sys.stdout)


def confirmed(args: argparse.Namespace, question: str, refusal: str, declined: str = "left it running") -> bool:
    """Whether to go on with something that stops a live server (or another thing to ask about): ``--yes``, else
    the terminal's y/N answer to ``question`` (no prints ``declined``); without a terminal, UsageError with
    ``refusal``, which names ``--yes`` (a script must say it means it)."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        from backend.errors import UsageError

        raise UsageError(refusal)
    if input(f"{question} [y/N] ").strip().lower() in ("y", "yes"):
        return True
    print(declined)
    return False


def add_yes(p: argparse.ArgumentParser, what: str = "stop a running server without asking") -> None:
    p.add_argument("--yes", action="store_true", help=f"{what} (needed without a terminal)")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
