"""`specdeck serve cmd|preflight|start|stop|restart|status|logs`: SGLang on the host, one profile at a time."""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from backend.cli.common import (
    add_json,
    add_raw,
    add_yes,
    confirmed,
    connect,
    emit_json,
    keep_in_history,
    load_settings,
    log_stream,
)
from backend.cli.main import command
from backend.connection import resolve_host
from backend.errors import OperationFailed, UsageError
from backend.jobs import get_job
from backend.serve import command_line, multinode, preflight_checks, server_status, serving
from backend.serve.server import OnStatus, Server
from backend.settings.model import ProfileConfig, Settings

if TYPE_CHECKING:
    from backend.cli.main import Subcommands

CHECK_MARKS = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "-"}
WAIT_READY_S = 3600.0  # Kimi-K2 on 8 GPUs takes minutes; an hour means something is wrong


def register(sub: Subcommands) -> None:
    p = command(sub, "serve", "Start, stop and watch the SGLang server (profiles from the config).")
    ssub = p.add_subparsers(dest="serve_command", metavar="ACTION")

    c = command(ssub, "cmd", "Print the exact launch command of a profile (nothing runs).")
    c.add_argument("profile", help="profile name (see `specdeck config show`)")
    add_json(c)
    c.set_defaults(run=cmd)

    c = command(ssub, "preflight", "Run the checks `serve start` runs, without starting anything.")
    c.add_argument("profile", help="profile name")
    c.add_argument("--force", action="store_true", help="let an incompatible drafter verdict through")
    add_json(c)
    c.set_defaults(run=preflight)

    for name, text in (
        ("start", "Check and start a profile's server as a detached job on the host."),
        ("restart", "Stop the current server (if any), then start a profile (also: switch profiles)."),
    ):
        c = command(ssub, name, text)
        c.add_argument("profile", help="profile name")
        c.add_argument("--wait-ready", action="store_true", help="wait until ready (or crashed), showing phases")
        c.add_argument("--timeout", type=float, default=WAIT_READY_S, help="seconds --wait-ready waits (default 3600)")
        c.add_argument("--force", action="store_true", help="start even if Compare finds the drafter incompatible")
        if name == "restart":
            add_yes(c)
        add_json(c)
        c.set_defaults(run=start if name == "start" else restart)

    c = command(
        ssub, "stop", "Stop the server: SIGTERM its process group, SIGKILL after --timeout, confirm it is gone."
    )
    c.add_argument("--timeout", type=float, default=serving.STOP_GRACE_S, help="seconds before SIGKILL (default 30)")
    c.add_argument("--port", type=int, help="the server on this port (default: the current one)")
    add_yes(c, "stop a ready server without asking")
    add_json(c)
    c.set_defaults(run=stop)

    c = command(ssub, "status", "Show the server's state, phase, and (when it crashed) the error and a hint.")
    c.add_argument("--port", type=int, help="the server on this port (default: the current one)")
    add_json(c)
    c.set_defaults(run=status)

    c = command(ssub, "logs", "Print the server's log (the current or last server).")
    c.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the server ends")
    c.add_argument("--lines", type=int, default=50, help="lines from the end to start with (default 50)")
    c.add_argument("--port", type=int, help="the server on this port (default: the current one)")
    add_raw(c)
    c.set_defaults(run=logs)


async def cmd(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    profile = command_line.get_profile(settings, args.profile)
    if multinode.is_multinode(profile):
        return _multinode_cmd(settings, profile, args.json)
    host = resolve_host(settings, args.host, python=args.python, workdir=args.workdir)
    # A line `serve start` would refuse is no launch command: the checks that need no host decide it.
    failed = [c for c in preflight_checks.profile_checks(settings, profile, host.sglang_version) if c.status == "fail"]
    if failed:
        why = "; ".join(f"{c.name}: {c.message}" for c in failed)
        raise UsageError(f"profile {profile.name} would not start ({why}); fix it in the config or the Serve tab")
    out = command_line.profile_command(settings, host, profile)
    if args.json:
        emit_json(out.to_json())
        return 0
    for path, text in out.files.items():  # what the launch reads on the host (an adaptive config), first
        print(f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && cat > {shlex.quote(path)} <<'EOF'\n{text}EOF")
    print(command_line.shell_line(out.argv, out.env))
    return 0


def _multinode_cmd(settings: Settings, profile: ProfileConfig, as_json: bool) -> int:
    ranks = multinode.commands(settings, profile)
    if as_json:
        emit_json({"ranks": ranks, "dist_init_port": None})
        return 0
    for rank in ranks:
        print(f"# {rank['node']}: rank {rank['rank']} of {len(ranks)}")
        print(command_line.shell_line(rank["argv"], rank["env"]))
    print(f"# {multinode.PORT_PLACEHOLDER}: a free port on {ranks[0]['node']}, found there when the server starts")
    return 0


def _print_checks(checks: Iterable[preflight_checks.Check]) -> None:
    for c in checks:
        print(f"  {CHECK_MARKS[c.status]} {c.name}: {c.message}")


def _server(args: argparse.Namespace, settings: Settings, *, follow: bool = False) -> Server:
    """The server face on --host, connected when first needed (a multi-node start never needs it)."""
    return Server(settings, partial(connect, args, settings, follow=follow))


async def preflight(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    profile = command_line.get_profile(settings, args.profile)
    async with _server(args, settings) as server:
        result = await server.preflight(profile, force=args.force)
    if args.json:
        emit_json(result.to_json())
    else:
        print(f"{profile.name}: " + ("ready to start" if result.ok else "would not start"))
        _print_checks(result.checks)
    return 0 if result.ok else 2


async def start(args: argparse.Namespace) -> int:
    return await _launch(args, restart=False)


async def restart(args: argparse.Namespace) -> int:
    try:
        return await _launch(args, restart=True)
    except _LeftRunning:
        return 1


async def _launch(args: argparse.Namespace, restart: bool) -> int:
    """`serve start|restart`, on one host or every node of a multi-node profile alike (the face's to tell)."""
    settings = load_settings(args)
    profile = command_line.get_profile(settings, args.profile)
    async with _server(args, settings) as server:
        if restart:
            _ask_before_stopping(args, await server.current(profile), f"and start {profile.name}")
        try:
            launched = await (server.restart if restart else server.start)(profile, force=args.force)
        except preflight_checks.PreflightFailed as exc:
            if args.json:
                emit_json(exc.preflight.to_json())
            else:
                _print_checks(exc.preflight.failures)
            raise
        st = launched.status
        if not args.json:
            _print_checks(launched.preflight.warnings)
            _print_started(st)
        final = None
        if args.wait_ready:
            final = await server.wait(st, within=args.timeout, on_status=None if args.json else _progress())
        for done in (launched.replaced, st):  # a restart ended the one before
            if done is not None and done.job:
                head = await server.job_host(done)
                await keep_in_history(head, await get_job(head, done.job))
    if args.json:
        emit_json(final.wire if final else launched.to_json())
    elif final:
        _print_status(final)
    if final:
        _raise_unless_ready(final, args.timeout)
    return 0


def _print_started(st: server_status.ServerStatus) -> None:
    if not st.nodes:
        print(f"{st.profile}: started (job {st.job}) on port {st.port}, log {st.log_path}")
        return
    print(f"{st.profile}: started on {len(st.nodes)} nodes, served by rank 0 on port {st.port}")
    for node in st.nodes:
        print(f"  {node.node}: rank {node.rank}, job {node.job}, log {node.log_path}")


def _progress() -> OnStatus:
    """Each startup phase once as it begins (each node's, for a multi-node server)."""
    seen: set[tuple[str, str | None]] = set()

    def show(st: server_status.ServerStatus) -> None:
        if not st.nodes and st.state == "starting" and ("", st.phase) not in seen:
            seen.add(("", st.phase))
            print(f"  {st.phase}…", flush=True)
        for node in st.nodes:
            if node.state == "starting" and (node.node, node.phase) not in seen:
                seen.add((node.node, node.phase))
                print(f"  {node.node} (rank {node.rank}): {node.phase}…", flush=True)

    return show


def _raise_unless_ready(st: server_status.ServerStatus, timeout: float) -> None:
    if st.state == "ready":
        return
    if st.state == "crashed":
        hint = f" {st.hint}" if st.hint else ""
        raise OperationFailed(f"{st.profile} crashed while {st.phase}: {st.error}.{hint}")
    if st.state == "starting":
        raise OperationFailed(
            f"{st.profile} is not ready after {timeout:g} s (still {st.phase}); it keeps starting: "
            "`specdeck serve status`"
        )
    if st.state == "orphaned":
        raise OperationFailed(f"{st.profile} lost its job runner while {st.phase}: {st.hint}")
    raise OperationFailed(f"{st.profile} ended ({st.state}) before it was ready: `specdeck serve logs`")


async def stop(args: argparse.Namespace) -> int:
    try:
        return await _stop(args)
    except _LeftRunning:
        return 1


async def _stop(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    async with _server(args, settings) as server:
        _ask_before_stopping(args, await server.status(port=args.port))
        out = await server.stop(port=args.port, grace=args.timeout)
        if out.was_running and out.status.job:
            head = await server.job_host(out.status)
            await keep_in_history(head, await get_job(head, out.status.job))
    st = out.status
    if args.json:
        emit_json(st.wire)
    elif not out.was_running:
        print("no server is running" + (f" (last: {st.profile}, {st.state})" if st.profile else ""))
    else:
        freed = {True: "GPU memory freed", False: "GPU memory still held", None: "no nvidia-smi to check GPUs"}
        how = f" ({out.reason})" if out.reason not in (None, "cancelled") else ""
        where = f" on {len(st.nodes)} nodes" if st.nodes else ""
        # Killed, and let go by the kernel only later: waited for, named.
        gpus = "GPU memory not checked after that wait" if out.lingered else freed[out.gpus_freed]
        print(f"{st.profile}: stopped{how}{where}; no process left, {gpus}")
        for line in out.lingered:
            print(f"  waited for {line}")
    return 0


class _LeftRunning(Exception):
    """The operator answered no: nothing was stopped."""


def _ask_before_stopping(args: argparse.Namespace, current: server_status.ServerStatus, then: str = "") -> None:
    """A ready server may be serving someone: stop it only with --yes or a yes at the terminal (the panel's
    `x` asks the same); raises _LeftRunning on a no."""
    if current.state not in server_status.SERVING_STATES:
        return
    where = f"{current.state}, port {current.port}, pid {current.pid}"
    what = f"{current.profile or 'a server'} ({where})"
    doing = " ".join(filter(None, ("stop it", then)))
    if not confirmed(args, f"{what} is serving. {doing.capitalize()}?", f"{what} is serving; pass --yes to {doing}"):
        raise _LeftRunning


async def status(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    async with _server(args, settings) as server:
        st = await server.status(port=args.port)
    if args.json:
        emit_json(st.wire)
    else:
        _print_status(st)
    return 0


def _print_status(st: server_status.ServerStatus) -> None:
    if st.state == "none":
        print("no server has run on this host (start one with `specdeck serve start PROFILE`)")
        return
    where = f"on port {st.port} (pid {st.pid})" if st.running else f"on port {st.port}"
    print(f"{st.profile}: {server_status.state_label(st)} {where} {server_status.since_text(st, time.time())}")
    if st.state in ("starting", "crashed"):
        print(f"  phase: {st.phase}")
    for node in st.nodes:
        print(f"  node {multinode.node_line(node)}")
    summary = server_status.speculative_summary(st.server_info)
    if summary:
        print(f"  {summary}")
    if now := server_status.steps_now_text(st):
        print(f"  {now}")
    timed = server_status.startup_text(st)
    if timed:
        print(f"  {timed}")
    for warning in st.warnings:
        print(f"  ! {warning}")
    if st.error:
        print(f"  error: {st.error}")
    if st.hint:
        print(f"  hint: {st.hint}")
    print(f"  log: {st.log_path}")


async def logs(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise UsageError("--lines must be 0 or more")
    out_stream = log_stream(args)
    async with _server(args, load_settings(args), follow=args.follow) as server:
        st = await server.here(port=args.port)  # this host's own log (its rank's, of a multi-node server)
        if st.state == "none" or st.job is None:
            raise UsageError("no server has run on this host, so there is no log")
        # jobs.tail reads 0 as its default; with --lines 0 start at the end of the log.
        out = await server.tail(st.job, args.lines) if args.lines else serving.LogTail((), st.wire["log_size"])
        for line in out.lines:
            print(line, file=out_stream)
        if args.follow:
            async for lines in server.follow(st.job, out.offset):
                for line in lines:
                    print(line, file=out_stream, flush=True)
    return 0
