"""`specdeck serve cmd|preflight|start|stop|restart|status|logs`: SGLang on the host, one profile at a time."""

from __future__ import annotations

import argparse
import shlex
import time
from typing import TYPE_CHECKING, Any

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
from backend.serve import multinode, serving

if TYPE_CHECKING:
    from collections.abc import Callable

    from backend.cli.main import Subcommands
    from backend.settings import ProfileConfig, Settings

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
    profile = serving.get_profile(settings, args.profile)
    if multinode.is_multinode(profile):
        return _multinode_cmd(settings, profile, args.json)
    host = resolve_host(settings, args.host, python=args.python, workdir=args.workdir)
    # A line `serve start` would refuse is no launch command: the checks that need no host decide it.
    failed = [c for c in serving.profile_checks(settings, profile, host.sglang_version) if c.status == "fail"]
    if failed:
        why = "; ".join(f"{c.name}: {c.message}" for c in failed)
        raise UsageError(f"profile {profile.name} would not start ({why}); fix it in the config or the Serve tab")
    out = serving.profile_command(settings, host, profile)
    if args.json:
        emit_json(out)
        return 0
    for path, text in out["files"].items():  # what the launch reads on the host (an adaptive config), first
        print(f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])} && cat > {shlex.quote(path)} <<'EOF'\n{text}EOF")
    print(serving.shell_line(out["argv"], out["env"]))
    return 0


def _multinode_cmd(settings: Settings, profile: ProfileConfig, as_json: bool) -> int:
    ranks = multinode.commands(settings, profile)
    if as_json:
        emit_json({"ranks": ranks, "dist_init_port": None})
        return 0
    for rank in ranks:
        print(f"# {rank['node']}: rank {rank['rank']} of {len(ranks)}")
        print(serving.shell_line(rank["argv"], rank["env"]))
    print(f"# {multinode.PORT_PLACEHOLDER}: a free port on {ranks[0]['node']}, found there when the server starts")
    return 0


def _print_checks(checks: list[dict[str, Any]]) -> None:
    for c in checks:
        print(f"  {CHECK_MARKS[c['status']]} {c['name']}: {c['message']}")


async def preflight(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    profile = serving.get_profile(settings, args.profile)
    if multinode.is_multinode(profile):
        nodes = multinode.Nodes(settings)
        try:
            result = await multinode.preflight(nodes, settings, profile, force=args.force)
        finally:
            await nodes.close()
    else:
        conn = await connect(args, settings)
        try:
            result = await serving.preflight(conn, settings, profile, force=args.force)
        finally:
            await conn.close()
    if args.json:
        emit_json(result.to_json())
    else:
        print(f"{profile.name}: " + ("ready to start" if result.ok else "would not start"))
        _print_checks(result.to_json()["checks"])
    return 0 if result.ok else 2


async def start(args: argparse.Namespace) -> int:
    return await _launch(args, restart=False)


async def restart(args: argparse.Namespace) -> int:
    try:
        return await _launch(args, restart=True)
    except _LeftRunning:
        return 1


async def _launch(args: argparse.Namespace, restart: bool) -> int:
    settings = load_settings(args)
    profile = serving.get_profile(settings, args.profile)
    if multinode.is_multinode(profile):
        return await _launch_nodes(args, settings, profile, restart)
    conn = await connect(args, settings)
    try:
        current = await serving.status(conn) if restart else {}
        _ask_before_stopping(args, current, f"and start {profile.name}")
        before = current.get("job")
        launch = serving.restart if restart else serving.start
        try:
            out = await launch(conn, settings, profile, force=args.force)
        except serving.PreflightFailed as exc:
            if args.json:
                emit_json(exc.preflight.to_json())
            else:
                _print_checks([c.to_json() for c in exc.preflight.failures])
            raise
        if not args.json:
            _print_checks([c for c in out["preflight"]["checks"] if c["status"] == "warn"])
            print(f"{profile.name}: started (job {out['job']}) on port {out['port']}, log {out['log_path']}")
        if args.wait_ready:
            out = await serving.wait(
                conn, out["job"], within=args.timeout, on_status=None if args.json else _print_progress()
            )
        for job in dict.fromkeys(j for j in (before, out["job"]) if j):  # a restart ended the one before
            await keep_in_history(conn, await get_job(conn, job))
    finally:
        await conn.close()
    return _report_launch(args, out)


async def _launch_nodes(args: argparse.Namespace, settings: Settings, profile: ProfileConfig, restart: bool) -> int:
    """`serve start|restart` of a multi-node profile: every node's rank in one step, followed together."""
    nodes = multinode.Nodes(settings)
    try:
        head = await nodes.get(profile.nodes[0])
        before = await multinode.expand(nodes, await serving.status(head)) if restart else None
        _ask_before_stopping(args, before or {}, f"and start {profile.name}")
        if before and before["state"] in serving.RUNNING_STATES:
            if before.get("nodes"):
                await multinode.stop(nodes, before)
            else:
                await serving.stop(head, job=before["job"])
        try:
            out = await multinode.start(nodes, settings, profile, force=args.force)
        except serving.PreflightFailed as exc:
            if args.json:
                emit_json(exc.preflight.to_json())
            else:
                _print_checks([c.to_json() for c in exc.preflight.failures])
            raise
        if not args.json:
            _print_checks([c for c in out["preflight"]["checks"] if c["status"] == "warn"])
            print(f"{profile.name}: started on {len(profile.nodes)} nodes, served by rank 0 on port {out['port']}")
            for entry in out["nodes"]:
                print(f"  {entry['node']}: rank {entry['rank']}, job {entry['job']}, log {entry['log_path']}")
        if args.wait_ready:
            show = None if args.json else _print_node_progress()
            out = await multinode.wait(nodes, out, within=args.timeout, on_status=show)
        for job in dict.fromkeys(j for j in ((before or {}).get("job"), out["job"]) if j):
            await keep_in_history(head, await get_job(head, job))
    finally:
        await nodes.close()
    return _report_launch(args, out)


def _report_launch(args: argparse.Namespace, out: dict[str, Any]) -> int:
    """What `serve start|restart` prints once it is done (a one-host or a multi-node server alike)."""
    if args.json:
        emit_json(out)
    elif args.wait_ready:
        _print_status(out)
    if args.wait_ready:
        _raise_unless_ready(out, args.timeout)
    return 0


def _print_node_progress() -> Callable[[dict[str, Any]], None]:
    seen: set[tuple[str, str]] = set()

    def show(st: dict[str, Any]) -> None:
        for entry in st.get("nodes") or []:
            if entry["state"] == "starting" and (entry["node"], entry["phase"]) not in seen:
                seen.add((entry["node"], entry["phase"]))
                print(f"  {entry['node']} (rank {entry['rank']}): {entry['phase']}…", flush=True)

    return show


def _print_progress() -> Callable[[dict[str, Any]], None]:
    seen: set[str] = set()

    def show(st: dict[str, Any]) -> None:
        if st["state"] == "starting" and st["phase"] not in seen:
            seen.add(st["phase"])
            print(f"  {st['phase']}…", flush=True)

    return show


def _raise_unless_ready(st: dict[str, Any], timeout: float) -> None:
    if st["state"] == "ready":
        return
    if st["state"] == "crashed":
        hint = f" {st['hint']}" if st.get("hint") else ""
        raise OperationFailed(f"{st['profile']} crashed while {st['phase']}: {st['error']}.{hint}")
    if st["state"] == "starting":
        raise OperationFailed(
            f"{st['profile']} is not ready after {timeout:g} s (still {st['phase']}); it keeps starting: "
            "`specdeck serve status`"
        )
    if st["state"] == "orphaned":
        raise OperationFailed(f"{st['profile']} lost its job runner while {st['phase']}: {st['hint']}")
    raise OperationFailed(f"{st['profile']} ended ({st['state']}) before it was ready: `specdeck serve logs`")


async def stop(args: argparse.Namespace) -> int:
    try:
        return await _stop(args)
    except _LeftRunning:
        return 1


async def _stop(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    conn = await connect(args, settings)
    nodes = multinode.Nodes(settings)
    try:
        current = await serving.status(conn, port=args.port)
        _ask_before_stopping(args, current)
        if (current.get("args") or {}).get("nodes"):
            nodes.adopt(current["args"]["nodes"][current["args"].get("node_rank") or 0], conn)
            out = await multinode.stop(nodes, current, grace=args.timeout)
            head = await nodes.get(current["args"]["nodes"][0])
        else:
            out = await serving.stop(conn, port=args.port, grace=args.timeout)
            head = conn
        if out["was_running"]:
            await keep_in_history(head, await get_job(head, out["job"]))
    finally:
        await nodes.close()
        await conn.close()
    if args.json:
        emit_json(out)
    elif not out["was_running"]:
        print("no server is running" + (f" (last: {out['profile']}, {out['state']})" if out["profile"] else ""))
    else:
        freed = {True: "GPU memory freed", False: "GPU memory still held", None: "no nvidia-smi to check GPUs"}
        how = f" ({out['reason']})" if out.get("reason") not in (None, "cancelled") else ""
        where = f" on {len(out['nodes'])} nodes" if out.get("nodes") else ""
        waited = out.get("lingered") or []  # killed, and let go by the kernel only later: waited for, named
        gpus = "GPU memory not checked after that wait" if waited else freed[out["gpus_freed"]]
        print(f"{out['profile']}: stopped{how}{where}; no process left, {gpus}")
        for line in waited:
            print(f"  waited for {line}")
    return 0


class _LeftRunning(Exception):
    """The operator answered no: nothing was stopped."""


def _ask_before_stopping(args: argparse.Namespace, current: dict[str, Any], then: str = "") -> None:
    """A ready server may be serving someone: stop it only with --yes or a yes at the terminal (the panel's
    `x` asks the same); raises _LeftRunning on a no."""
    if current.get("state") not in serving.SERVING_STATES:
        return
    where = f"{current.get('state')}, port {current.get('port')}, pid {current.get('pid')}"
    what = f"{current.get('profile') or 'a server'} ({where})"
    doing = " ".join(filter(None, ("stop it", then)))
    if not confirmed(args, f"{what} is serving. {doing.capitalize()}?", f"{what} is serving; pass --yes to {doing}"):
        raise _LeftRunning


async def status(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    conn = await connect(args, settings)
    nodes = multinode.Nodes(settings)
    try:
        out = await serving.status(conn, port=args.port)
        if (out.get("args") or {}).get("nodes"):
            nodes.adopt(out["args"]["nodes"][out["args"].get("node_rank") or 0], conn)
            out = await multinode.expand(nodes, out)
    finally:
        await nodes.close()
        await conn.close()
    if args.json:
        emit_json(out)
    else:
        _print_status(out)
    return 0


def _print_status(wire: dict[str, Any]) -> None:
    st = serving.ServerStatus.from_json(wire)
    if st.state == "none":
        print("no server has run on this host (start one with `specdeck serve start PROFILE`)")
        return
    where = f"on port {st.port} (pid {st.pid})" if st.running else f"on port {st.port}"
    print(f"{st.profile}: {serving.state_label(st)} {where} {serving.since_text(st, time.time())}")
    if st.state in ("starting", "crashed"):
        print(f"  phase: {st.phase}")
    for entry in wire.get("nodes") or []:
        print(f"  node {multinode.node_line(entry)}")
    summary = serving.speculative_summary(st.server_info)
    if summary:
        print(f"  {summary}")
    if now := serving.steps_now_text(st):
        print(f"  {now}")
    timed = serving.startup_text(st)
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
    conn = await connect(args, follow=args.follow)
    try:
        st = await serving.status(conn, port=args.port)
        if st["state"] == "none":
            raise UsageError("no server has run on this host, so there is no log")
        # jobs.tail reads 0 as its default; with --lines 0 start at the end of the log.
        out = await serving.tail(conn, st["job"], args.lines) if args.lines else {"lines": [], "offset": st["log_size"]}
        for line in out["lines"]:
            print(line, file=out_stream)
        if args.follow:
            async for lines in serving.follow(conn, st["job"], out["offset"]):
                for line in lines:
                    print(line, file=out_stream, flush=True)
    finally:
        await conn.close()
    return 0
