"""`specdeck advise` and `sweep`: which speculative step count pays, predicted and then measured."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared import expect
from backend.agent.host.shared.units import counted
from backend.cli.common import (
    add_json,
    confirmed,
    connect,
    connected,
    emit_json,
    emit_json_line,
    load_settings,
    print_detached,
)
from backend.cli.main import command
from backend.errors import UsageError
from backend.history import History, HistoryUnavailable, Yardstick, measured_baseline, sync_from_host
from backend.jobs import get_job
from backend.measure import bench_records, judge
from backend.measure.bench import DEFAULT_MAX_TOKENS, DEFAULT_REQUESTS
from backend.settings import config_file
from backend.tune import adaptive_ab, adaptive_proposal, advisor
from backend.tune import sweep as sweep_mod

if TYPE_CHECKING:
    from backend.cli.main import Subcommands
    from backend.connection import Connection
    from backend.settings.model import Settings


def register(sub: Subcommands) -> None:
    from backend.cli.livecmds import add_domains_option

    p = command(
        sub,
        "advise",
        "Predict accept length and tok/s for every draft step count from a run's per-position acceptance.",
    )
    p.add_argument(
        "ref",
        nargs="?",
        metavar="RUN",
        help="run id, job id or unique prefix (default: the newest drafter's run with the most steps measured)",
    )
    p.add_argument(
        "--max-steps", type=int, default=advisor.DEFAULT_MAX_STEPS, metavar="K", help="predict steps 1..K (default 7)"
    )
    p.add_argument(
        "--target", type=float, action="append", metavar="T", help="a target tok/s; repeat (default: 150 and 200)"
    )
    p.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="advise from SGLang's bench_speculative.py output (JSON lines) or a CSV with its columns",
    )
    p.add_argument(
        "--batch-size", type=int, metavar="B", help="with --from: the records' batch size (default 1, else smallest)"
    )
    p.add_argument(
        "--adaptive",
        action="store_true",
        help="propose SGLang's --speculative-adaptive-config (a step ladder per batch size) and what it should give",
    )
    p.add_argument(
        "--ab",
        metavar="PROFILE",
        help="with --adaptive: serve the proposal from PROFILE and bench it against the best fixed step count at the "
        "same concurrencies (restarts the server)",
    )
    p.add_argument(
        "--ab-resume",
        metavar="ID",
        help="with --ab: take over an earlier A/B job's measured sides (its ladder and expectations as it kept them)",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="with --ab: start the A/B job on the host and return (it survives; follow it with `specdeck jobs tail`)",
    )
    p.add_argument(
        "--apply",
        metavar="PROFILE",
        help="write the best step count (topk 1, draft tokens steps + 1) into PROFILE in the config file",
    )
    p.add_argument("--steps", type=int, metavar="K", help="with --apply: this step count instead of the best")
    p.add_argument("--yes", action="store_true", help="with --apply: apply a point that measured slower without asking")
    add_json(p)
    p.set_defaults(run=advise)

    p = command(
        sub,
        "sweep",
        "Restart the server at each speculative config, bench it and find the fastest (runs on the host).",
    )
    p.add_argument("profile", metavar="PROFILE", help="the speculative profile to vary")
    p.add_argument("--steps", metavar="LIST", help="draft step counts, e.g. 1,2,4 (with --resume: the earlier grid)")
    p.add_argument("--topk", type=int, default=1, help="speculative topk (default 1)")
    p.add_argument(
        "--draft-tokens", default="auto", metavar="auto|LIST", help="draft tokens: auto (steps + 1, topk 1) or 8,16"
    )
    p.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, metavar="N", help="bench requests per point")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="M", help="tokens per request")
    add_domains_option(p)
    p.add_argument(
        "--ready-timeout", type=float, default=sweep_mod.READY_TIMEOUT_S, metavar="S", help="seconds to wait for ready"
    )
    p.add_argument(
        "--smart", action="store_true", help="profile's point first, then as the advisor ranks, until none can win"
    )
    p.add_argument("--detach", action="store_true", help="start it and return (follow with `specdeck jobs tail`)")
    p.add_argument("--resume", metavar="ID", help="an earlier sweep job: take over its measured points")
    p.add_argument("--force", action="store_true", help="start despite a failed drafter verdict")
    p.add_argument(
        "--fleet", metavar="NAME", help="spread the points over the fleet's identical hosts, one per host at a time"
    )
    add_json(p)
    p.set_defaults(run=sweep)


async def advise(args: argparse.Namespace) -> int:
    ref = load_settings(args).reference
    targets = args.target or (150.0, 200.0)
    if args.steps is not None and not args.apply:
        raise UsageError("--steps goes with --apply PROFILE.")
    if args.from_file:
        if args.ref:
            raise UsageError("give a RUN or --from FILE, not both.")
        if args.adaptive:
            raise UsageError("--adaptive advises from the run history (its benches per concurrency), not --from FILE.")
        records = bench_records.load(args.from_file, args.batch_size)
        yardstick = Yardstick(ref.baseline_tok_s, ref.cycle_ms)
        advice = advisor.advise_bench(records, yardstick, max_steps=args.max_steps, targets=targets)
    else:
        if args.batch_size is not None:
            raise UsageError("--batch-size goes with --from FILE.")
        with History.open() as history:
            run_id = history.resolve(args.ref) if args.ref else None
            yardstick = history.yardstick(ref.baseline_tok_s, ref.cycle_ms)
            runs = history.runs()
        if (args.ab_resume or args.detach) and not args.ab:
            raise UsageError("--ab-resume and --detach go with --adaptive --ab PROFILE.")
        if args.adaptive:
            proposal = adaptive_proposal.propose_adaptive(runs, yardstick, run_id, max_steps=args.max_steps)
            if args.ab:
                return await _ab(args, proposal, yardstick.baseline_tok_s)
            if args.json:
                emit_json(proposal.to_json())
            else:
                print("\n".join(adaptive_proposal.adaptive_lines(proposal)))
            return 0
        advice = advisor.advise(runs, yardstick, run_id, max_steps=args.max_steps, targets=targets)
    applied = _apply(args, advice) if args.apply else None
    if args.json:
        emit_json({**advice.to_json(), **({"applied": applied} if args.apply else {})})
    else:
        print("\n".join(advisor.advice_lines(advice)))
        if applied:
            print(f"applied: {applied['text']} (saved to {applied['path']})" if applied["saved"] else applied["text"])
    return 0


def _apply(args: argparse.Namespace, advice: advisor.Advice) -> dict[str, Any]:
    """``advise --apply PROFILE``: the best step count (or ``--steps``) written into the profile with
    ``advisor.apply``; one that measured slower than another point is applied only when asked (``--yes``)."""
    settings = load_settings(args)
    profile = settings.profiles.get(args.apply)
    if profile is None:
        raise UsageError(f"no profile {args.apply!r} in the config; `specdeck config show` lists them.")
    if args.steps is None and (advice.best is None or advice.best.basis != "measured"):
        raise UsageError("nothing was measured to apply: sweep the profile first, or give --steps K.")
    steps = args.steps if args.steps is not None else advice.best.steps  # type: ignore[union-attr]
    applied = advisor.apply(profile, steps, advice)
    warning = applied.warning()
    if warning and not confirmed(
        args, f"{warning}. Apply steps {steps} anyway?", f"{warning}; pass --yes to apply it", "left it as it was"
    ):
        return {"text": f"{profile.name} left as it was", "saved": False, "path": None}
    if not applied.changed:
        return {"text": f"{profile.name} already runs {steps} steps", "saved": False, "path": None}
    _, path = config_file.save_profile(settings, applied.profile)
    return {"text": applied.text(), "saved": True, "path": str(path), "warning": warning or None}


async def _ab(args: argparse.Namespace, proposal: adaptive_proposal.AdaptiveProposal, baseline_tok_s: float) -> int:
    """``advise --adaptive --ab PROFILE``: the proposal served and benched against the best fixed step count, as a
    job on the host (``adaptive_ab.ab_start``) followed here to its end; ``--detach`` returns once it started,
    ``--ab-resume ID`` takes over an earlier A/B's measured sides with the numbers that job kept."""
    from backend.serve import command_line

    settings = load_settings(args)
    profile = command_line.get_profile(settings, args.ab)
    if not profile.algorithm:
        raise UsageError(f"profile {profile.name} runs without speculation: give a profile with a drafter.")
    async with connected(args, settings, follow=not args.detach) as conn:
        ab = adaptive_ab.ab_of(profile, proposal)
        if args.ab_resume:
            old = (await get_job(conn, args.ab_resume)).args
            if not isinstance(old.get("ab"), dict):
                raise UsageError(f"job {args.ab_resume} is not an adaptive A/B (see `specdeck jobs --kind sweep`).")
            ab = old["ab"]
        job = await adaptive_ab.ab_start(
            conn, settings, profile, ab, baseline_tok_s=baseline_tok_s, resume=args.ab_resume
        )
        print(f"adaptive A/B {job.id}: {ab['adaptive']} against {ab['fixed']}", file=sys.stderr, flush=True)
        if args.detach:
            print_detached(args, job)
            return 0

        def progress(event: sweep_mod.SweepEvent) -> None:
            if event.kind == "phase":
                extra = f" ({event.server_phase})" if event.server_phase else ""
                level = f" at {event.concurrency} streams" if event.concurrency else ""
                print(f"  {sweep_mod.point_name(event.point)}: {event.phase}{level}{extra}", file=sys.stderr)

        done = await sweep_mod.follow(conn, job.id, progress)
    result = adaptive_ab.ab_result(done)
    if args.json:
        emit_json({**proposal.to_json(), "ab": result.to_json()})
    else:
        print("\n".join([*adaptive_proposal.adaptive_lines(proposal), "", *adaptive_ab.ab_lines(result)]))
    return 0


async def _plan(conn: Connection | None, args: argparse.Namespace, sandbox: bool) -> sweep_mod.SweepPlan:
    """The plan from the flags; with --resume and no --steps, the earlier sweep's grid (and its domains)."""
    from backend.measure import domains

    smart = args.smart
    named = args.domains
    if args.steps:
        steps = sweep_mod.parse_ints(args.steps, "--steps")
        tokens = None if args.draft_tokens == "auto" else sweep_mod.parse_ints(args.draft_tokens, "--draft-tokens")
        topk = args.topk
    elif args.resume:
        assert conn is not None  # a fleet's sweep gives --steps
        old = (await get_job(conn, args.resume)).args
        grid = old.get("grid") or []
        if not grid:
            raise UsageError(f"job {args.resume} is not a sweep; give --steps.")
        steps = tuple(dict.fromkeys(g[0] for g in grid))
        topk = grid[0][1] or 1
        auto = all(g[2] in (None, g[0] + 1) for g in grid)
        tokens = None if auto else tuple(dict.fromkeys(g[2] for g in grid))
        smart = smart or bool(old.get("smart"))
        named = named or ",".join(old.get("domains") or []) or None
    else:
        raise UsageError("give --steps, e.g. --steps 1,2,4 (or --resume ID to go on with a sweep).")
    sets = domains.parse(named, sandbox) if named else None
    return sweep_mod.SweepPlan(
        steps, topk, tokens, args.requests, args.max_tokens, smart=smart, ready_timeout=args.ready_timeout, domains=sets
    )


async def sweep(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    baseline = measured_baseline() or settings.reference.baseline_tok_s
    if args.fleet:
        return await _fleet_sweep(args, settings, baseline)
    async with connected(args, settings, follow=not args.detach) as conn:
        plan = await _plan(conn, args, bool(conn.host.sandbox))
        job = await sweep_mod.start(
            conn, settings, args.profile, plan, baseline_tok_s=baseline, resume=args.resume, force=args.force
        )
        sets = f", prompt sets {', '.join(plan.domains)}" if plan.domains else ""
        print(f"sweep {job.id}: {len(plan.grid())} points of {args.profile}{sets}", file=sys.stderr, flush=True)
        print(f"  {_scope(plan)}", file=sys.stderr, flush=True)
        if args.detach:
            print_detached(args, job)
            return 0
        finished = False

        def progress(event: sweep_mod.SweepEvent) -> None:
            kind = event.kind
            if args.json:
                if kind not in sweep_mod.TERMINAL:  # the done event is printed last, in its public shape
                    emit_json_line({k: v for k, v in event.wire.items() if k not in ("acceptance", "per_request")})
            elif kind == "phase":
                extra = f" ({event.server_phase})" if event.server_phase else ""
                print(f"  {sweep_mod.point_name(event.point)}: {event.phase}{extra}", file=sys.stderr, flush=True)
            elif kind == "point":
                print("  " + sweep_mod.point_line(event.point), file=sys.stderr, flush=True)
            elif kind == "plan" and event.skipped:
                taken = ", ".join(str(i + 1) for i in event.skipped)
                print(f"  taking over points {taken} from {args.resume}", file=sys.stderr, flush=True)

        try:
            done = await sweep_mod.follow(conn, job.id, progress)
            finished = True
        finally:
            if not finished and conn.connected:
                await sweep_mod.cancel(conn, job.id)
            if conn.connected:  # every ending leaves the host as found (a cancelled sweep may leave it to us)
                restored = await sweep_mod.restore_found(conn, settings)
                if restored and restored.started:
                    print(f"started {restored.profile} again, as the sweep found it", file=sys.stderr)
    return _print_done(args, plan, done)


def _scope(plan: sweep_mod.SweepPlan) -> str:
    """What the sweep can part at its length (``judge.sweep_scope``), one request's spread from this host's
    benches (the prior where the history has none or cannot be read)."""
    try:
        with History.open() as history:
            lists = advisor.bench_lists(history.runs())
    except HistoryUnavailable:
        lists = []
    return judge.sweep_scope(expect.bench_noise(lists, plan.requests))


def _print_done(args: argparse.Namespace, plan: sweep_mod.SweepPlan, done: sweep_mod.SweepEvent) -> int:
    if args.json:
        emit_json_line(sweep_mod.public_done(done.wire))
        return 0
    for point in done.points:
        print(sweep_mod.point_line(point))
    best = done.best_point
    print(f"best: {sweep_mod.point_line(best)}" if best else "best: none (no point was measured)")
    if best:
        print(f"  {judge.best_sentence(done.best)}")
    separated = done.separated
    if separated:
        steps = ", ".join(str(k) for k in separated["steps"])
        print(f"  separating round: steps {steps} measured again with {separated['requests']} more requests each")
    if plan.smart:
        print(f"{counted(done.restarts, 'restart')} for a grid of {done.grid}: {done.saved} saved")
    return 0


async def _fleet_sweep(args: argparse.Namespace, settings: Settings, baseline: float) -> int:
    """`sweep PROFILE --fleet NAME`: the grid over the fleet's hosts (``backend.fleet.sweep``), followed from
    here to its end; then every host's runs imported, so `report --sweep ID` has them at once."""
    from backend.fleet import sweep as fleet_sweep

    if args.detach or args.resume:
        raise UsageError("a fleet sweep is driven from here: drop --detach and --resume (or --fleet).")
    if not args.steps:
        raise UsageError("give --steps, e.g. --steps 1,2,4.")
    pairs = fleet_sweep.members_of(settings, args.fleet)
    plan = await _plan(None, args, settings.hosts[pairs[0][0]].sandbox)
    conns = []
    try:
        for host, _ in pairs:
            conns.append(await connect(argparse.Namespace(**{**vars(args), "host": host}), settings, follow=True))
        members = [fleet_sweep.Member(c, port) for c, (_, port) in zip(conns, pairs, strict=True)]
        names = ", ".join(host for host, _ in pairs)
        print(f"fleet sweep of {args.profile} over {names}: {len(plan.grid())} points", file=sys.stderr, flush=True)
        print(f"  {_scope(plan)}", file=sys.stderr, flush=True)

        def progress(host: str, event: sweep_mod.SweepEvent) -> None:
            kind = event.kind
            if args.json:
                if kind not in sweep_mod.TERMINAL:
                    out = {k: v for k, v in event.wire.items() if k not in ("acceptance", "per_request")}
                    emit_json_line({**out, "host": host or None})
            elif kind == "phase":
                extra = f" ({event.server_phase})" if event.server_phase else ""
                where = f"{host} {sweep_mod.point_name(event.point)}"
                print(f"  {where}: {event.phase}{extra}", file=sys.stderr, flush=True)
            elif kind == "point":
                print("  " + sweep_mod.point_line(replace(event.point, host=host)), file=sys.stderr, flush=True)
            elif kind == "plan" and event.phase == "separating":
                print(f"  separating round: {event.why}", file=sys.stderr, flush=True)

        done = await fleet_sweep.run(
            members, settings, args.profile, plan, baseline_tok_s=baseline, force=args.force, on_event=progress
        )
        with History.open() as history:
            for conn in conns:
                await sync_from_host(history, conn)
    finally:
        for conn in conns:
            await conn.close()
    rc = _print_done(args, plan, done)
    if not args.json:
        print(f"report: specdeck report --sweep {done.sweep}")
    return rc
