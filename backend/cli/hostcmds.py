"""`specdeck ping` and `specdeck jobs`: what the host is, and the long work running on it."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from backend.agent.host.shared.units import duration, human_bytes
from backend.cli.common import add_json, connected, emit_json, load_settings
from backend.cli.main import command
from backend.cli.pingview import ping_report, render_ping
from backend.errors import UsageError

if TYPE_CHECKING:  # backend.jobs is imported by the jobs commands themselves: `ping` goes without it
    from backend.cli.main import Subcommands
    from backend.jobs import JobInfo


def register(sub: Subcommands) -> None:
    p = command(sub, "ping", "Check the host: agent round trip, Python, platform, ML libraries, GPUs.")
    p.add_argument("--count", type=int, default=5, help="round trips to time (default 5)")
    add_json(p)
    p.set_defaults(run=ping)

    p = command(sub, "disconnect", "Close the SSH connection kept open for the host between commands (or --all).")
    p.add_argument("--all", action="store_true", help="every host's kept connection")
    add_json(p)
    p.set_defaults(run=disconnect)

    p = command(sub, "jobs", "List the detached jobs on the host (downloads, servers, benchmarks).")
    add_json(p)
    p.add_argument("--kind", help="only jobs of this kind (download, serve, bench, ...)")
    p.set_defaults(run=list_jobs)
    jsub = p.add_subparsers(dest="jobs_command", metavar="ACTION")
    c = command(jsub, "cancel", "Cancel a running job: SIGTERM its process group, SIGKILL after --timeout.")
    c.add_argument("id", help="job id (from `specdeck jobs`)")
    c.add_argument("--timeout", type=float, default=10, help="seconds before SIGKILL (default 10)")
    add_json(c)
    c.set_defaults(run=cancel_job)
    c = command(jsub, "rm", "Remove an ended job's folder from the host (refused while it runs).")
    c.add_argument("id", help="job id (from `specdeck jobs`)")
    add_json(c)
    c.set_defaults(run=remove_job)
    c = command(jsub, "prune", "Remove every ended job older than --older-than from the host; running jobs stay.")
    c.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help="how long ago the job ended: 30m, 12h, 7d, 1h30m (0s removes every ended job)",
    )
    c.add_argument("--kind", help="only jobs of this kind (download, serve, bench, ...)")
    add_json(c)
    c.set_defaults(run=prune_jobs)


async def ping(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise UsageError("--count must be at least 1")
    async with connected(args) as conn:
        info = await conn.call("info")
        rtt = await conn.ping(args.count)
    sys.stdout.write(render_ping(ping_report(conn.host.name, info, {"median": rtt.median, "p95": rtt.p95}), args.json))
    return 0


async def disconnect(args: argparse.Namespace) -> int:
    from backend.connection import resolve_host
    from backend.transport import control, controlsock

    if args.all:
        paths = control.sockets()
    else:
        host = resolve_host(load_settings(args), args.host, identity=args.identity, known_hosts=args.known_hosts)
        if host.is_local:
            raise UsageError(f"{host.name} is this machine: there is no connection to close")
        name = host.name
        try:
            paths = [controlsock.socket_path(host, create=False)]
        except controlsock.NoMaster:
            paths = []
        except controlsock.Unusable as exc:
            raise UsageError(f"cannot use the control folder: {exc}") from None
    done = [outcome for outcome in [await control.disconnect(path) for path in paths] if outcome]
    if args.json:
        emit_json({"closed": len(done), "done": done})
    elif args.all:
        print(f"closed {len(done)} kept connection(s)")
        for outcome in done:
            if outcome != "connection closed":
                print(f"  {outcome}")
    else:
        print(f"{name}: {done[0] if done else 'no kept connection'}")
    return 0


def _progress(job: JobInfo) -> str:
    """The last progress event of a running job, e.g. `  model.safetensors 520.00 MiB/2.22 GiB 22.8%`: the
    figures the download's own bars write."""
    from backend.drafters.downloads import percent

    t = job.transfer
    if job.state != "running" or t is None:
        return ""
    return f"  {t.file} {human_bytes(t.bytes)}/{human_bytes(t.total)} {percent(t.bytes / t.total)}"


async def list_jobs(args: argparse.Namespace) -> int:
    from backend import jobs as jobs_mod

    async with connected(args) as conn:
        jobs = await jobs_mod.list_jobs(conn, args.kind)
    if args.json:
        emit_json([j.to_json() for j in jobs])
        return 0
    if not jobs:
        print("no jobs on this host")
        return 0
    for j in jobs:
        args_text = " ".join(f"{k}={v}" for k, v in j.args.items())
        reason = f"  ({j.reason})" if j.reason and j.state != "done" else ""
        age = f"{duration(time.time() - j.started)} ago" if j.started else "-"
        print(f"{j.id:<36} {j.state:<10} {age:<12} {args_text}{reason}{_progress(j)}")
    return 0


async def cancel_job(args: argparse.Namespace) -> int:
    from backend import jobs as jobs_mod

    async with connected(args) as conn:
        out = await jobs_mod.cancel_job(conn, args.id, timeout=args.timeout)
    job = out.job
    if args.json:
        emit_json({**job.to_json(), "stopped": list(out.stopped), "left": list(out.left)})
    else:
        print(f"{job.id}: {job.state}" + (f" ({job.reason})" if job.reason else ""))
    return 0


async def remove_job(args: argparse.Namespace) -> int:
    from backend import jobs as jobs_mod

    async with connected(args) as conn:
        removed = await jobs_mod.remove(conn, args.id)
    if args.json:
        emit_json({"removed": removed})
    else:
        print(f"removed {removed[0]}")
    return 0


async def prune_jobs(args: argparse.Namespace) -> int:
    from backend import jobs as jobs_mod

    older_than = jobs_mod.parse_duration(args.older_than)
    async with connected(args) as conn:
        out = await jobs_mod.prune(conn, older_than, args.kind)
    if args.json:
        emit_json(out.to_json())
    else:
        running = f"; {out.running} still running, kept" if out.running else ""
        print(f"removed {len(out.removed)} ended job(s) older than {args.older_than}{running}")
    return 0
