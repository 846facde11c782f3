"""`specdeck fleet up|status|down|bench NAME`: a fleet's replicas behind the real sglang-router, as one."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from backend.cli.common import add_json, confirmed, emit_json, keep_in_history, load_settings, yardstick_of
from backend.cli.main import command
from backend.errors import UsageError

if TYPE_CHECKING:
    from backend.cli.main import Subcommands
    from backend.fleet.fleets import FleetLinks, FleetStatus
    from backend.jobs import JobInfo
    from backend.measure.bench import BenchProgress
    from backend.settings.model import Settings


def register(sub: Subcommands) -> None:
    from backend.cli.livecmds import add_bench_options

    p = command(sub, "fleet", "Start, watch, bench and stop a fleet: replicas behind sglang-router.")
    fsub = p.add_subparsers(dest="fleet_command", metavar="ACTION")

    c = command(fsub, "up", "Check, then start every replica and the router (with every replica's URL).")
    c.add_argument("name", help="fleet name (see `specdeck config show`)")
    c.add_argument("--force", action="store_true", help="start even if Compare finds a drafter incompatible")
    add_json(c)
    c.set_defaults(run=up)

    c = command(fsub, "status", "Each replica's state and figures, the router's view, and the imbalance verdict.")
    c.add_argument("name", help="fleet name")
    add_json(c)
    c.set_defaults(run=status)

    c = command(fsub, "down", "Stop the router, then every replica (asks first while any runs).")
    c.add_argument("name", help="fleet name")
    c.add_argument("--yes", action="store_true", help="stop without asking")
    add_json(c)
    c.set_defaults(run=down)

    c = command(fsub, "bench", "specdeck's bench sent through the fleet's router (takes `bench`'s options).")
    c.add_argument("name", help="fleet name")
    add_bench_options(c, port=False)
    add_json(c)
    c.set_defaults(run=bench)


async def _links(args: argparse.Namespace, partial: bool = False) -> FleetLinks:
    from backend.fleet import fleets

    settings = load_settings(args)
    fleets.get_fleet(settings, args.name)  # an unknown name is bad input before any connection
    shared = not getattr(args, "no_persist", False)
    return await fleets.FleetLinks.open(settings, args.name, shared=shared, partial=partial)


async def up(args: argparse.Namespace) -> int:
    from backend.fleet import fleets

    def say(text: str) -> None:
        if not args.json:
            print(f"{args.name}: {text}", file=sys.stderr, flush=True)

    async with await _links(args) as links:
        try:
            st = await fleets.up(links, force=args.force, on_event=say)
        except fleets.FleetPreflightFailed as exc:
            if args.json:
                emit_json(exc.preflight.to_json())
            raise
        await _keep_runs(links)
        _show(args, st, links.settings)
    return 0


async def _keep_runs(links: FleetLinks) -> None:
    """Each replica's server run kept in the run history, as `serve start` keeps its own (not left to a sync)."""
    from backend.jobs import get_job

    for replica in links.fleet.replicas:
        conn = links.conn(replica.host)
        wire = await conn.call("serve.status", port=replica.port)
        if wire.get("job") and wire.get("port") == replica.port:
            await keep_in_history(conn, await get_job(conn, wire["job"]))


def _keep_bench(host: str, job: JobInfo, result: dict[str, Any]) -> None:
    """The bench kept in the run history as `bench` keeps its own; it spans every replica, so no one server's
    run holds it (a bench of its own, as History lists one)."""
    from dataclasses import replace

    from backend.history import History, HistoryUnavailable

    try:
        with History.open() as history:
            history.record_bench(host, replace(job, state="done"), result)
    except HistoryUnavailable as exc:
        print(f"specdeck: not kept in the run history: {exc}", file=sys.stderr)


async def status(args: argparse.Namespace) -> int:
    from backend.fleet import fleets

    async with await _links(args, partial=True) as links:  # an unreachable host reads as such, the rest shown
        st = await fleets.status(links)
        _show(args, st, links.settings)
    return 0


def _num(value: float | int | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _show(args: argparse.Namespace, st: FleetStatus, settings: Settings) -> None:
    from backend.fleet.fleets import INTERVAL_NOTE

    if args.json:
        emit_json(st.to_json())
        return
    simulated = {h for h, c in settings.hosts.items() if c.launcher == "simulator"}
    r = st.router
    line = f"router {r.host} {r.url} ({r.policy}): " + ("healthy" if r.healthy else f"NOT healthy: {r.error}")
    if r.workers is not None:
        line += f", {st.workers_text()}"
    if r.requests_total is not None:
        line += f", {r.requests_total} requests routed"
    print(line)
    for note in r.notes:
        print(f"  router: {note}")
    heads = f"  {'replica':<30} {'state':<11} {'router':<9} {'pid':>7} {'tok/s/str':>9} {'accept':>6}"
    print(heads + f" {'run':>4} {'queue':>5}")
    for x in st.replicas:
        seen = "-" if r.down else "healthy" if x.healthy else "unhealthy"  # a router that is down says nothing
        label = x.label + (" SIMULATED" if x.host in simulated else "")
        print(
            f"  {label:<30} {x.state:<11} {seen:<9} {_num(x.pid, 'd'):>7} {_num(x.tok_s):>9} "
            f"{x.accept_cell():>6} {_num(x.running, 'd'):>4} {_num(x.queued, 'd'):>5}"
        )
    if any(x.accept_basis == "interval" for x in st.replicas):
        print(f"  {INTERVAL_NOTE}")
    print(f"imbalance: {st.imbalance.verdict}")
    if st.key:
        print(f"key: {st.key}")


async def down(args: argparse.Namespace) -> int:
    from backend.fleet import fleets

    async with await _links(args) as links:
        if not args.yes and await fleets.live(links):
            question = f"fleet {args.name} is running. Stop its router and every replica?"
            if not confirmed(
                args, question, f"fleet {args.name} is running; pass --yes to stop its router and replicas"
            ):
                return 1
        stopped = await fleets.down(links)
    if args.json:
        emit_json({"stopped": stopped})
    else:
        print(f"{args.name}: " + (f"stopped {', '.join(stopped)}" if stopped else "nothing was running"))
    return 0


async def bench(args: argparse.Namespace) -> int:
    from backend.fleet import fleets
    from backend.jobs import get_job
    from backend.measure import bench as bench_mod

    prompts = bench_mod.read_prompts(args.prompts) if args.prompts else None
    levels = bench_mod.parse_levels(args.concurrency)
    if len(levels) > 1:
        raise UsageError("fleet bench takes one --concurrency level; sweep levels against one server with `bench`")
    plan = bench_mod.BenchPlan(args.requests, args.max_tokens, levels[0], prompts)
    slo = bench_mod.Slo(args.slo_ttft_ms, args.slo_itl_ms)
    async with await _links(args) as links:
        where = fleets.router_url(links.fleet)
        print(
            f"bench through fleet {args.name}'s router ({where}): {plan.requests} requests of {plan.max_tokens} "
            f"tokens, {plan.concurrency} at a time",
            file=sys.stderr,
            flush=True,
        )
        result = await fleets.bench(links, plan, _progress)
        router_host = links.fleet.router.host
        _keep_bench(router_host, await get_job(links.conn(router_host), result["job"]), result)
    good = bench_mod.goodput(result, slo) if slo else None
    if args.json:
        emit_json({**bench_mod.public_result(result), **({"goodput": good} if good else {})})
        return 0
    print(bench_mod.summary_line(result, yardstick_of(links.settings)))
    if line := bench_mod.latency_line(result):
        print(line)
    if good:
        print(bench_mod.goodput_line(good, plan.concurrency, slo))
    for note in bench_mod.bench_notes(result):  # the prompts: through the replicas' chat template, or raw and why
        print(note)
    print(f"{result['requests']} requests, {result['tokens']} tokens, bench job {result['job']}")
    return 0


def _progress(event: BenchProgress) -> None:
    print(f"  {event.done}/{event.total} requests done", file=sys.stderr, flush=True)
