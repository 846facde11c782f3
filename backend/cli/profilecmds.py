"""`specdeck profile`: where a speculative cycle's time goes, from SGLang's own profiler (or saved traces)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from backend.cli.common import add_json, connected, emit_json, keep_in_history, load_settings
from backend.cli.main import command
from backend.measure import anatomy as anatomy_mod

if TYPE_CHECKING:
    from backend.cli.main import Subcommands


def register(sub: Subcommands) -> None:
    p = command(
        sub,
        "profile",
        "Profile a few decode cycles with SGLang's own torch profiler and say where a cycle's time goes "
        "(draft, verify, sample, draft extend, the gaps between), graph or eager, and what the break-even "
        "would be if a stage shrank.",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=anatomy_mod.DEFAULT_STEPS,
        metavar="N",
        help=f"scheduler iterations to profile (default {anatomy_mod.DEFAULT_STEPS}; partial ones are left out)",
    )
    p.add_argument("--ranks", metavar="R[,R...]", help="TP ranks whose traces to read (default: all)")
    p.add_argument(
        "--load",
        type=int,
        metavar="S",
        help="streams of our own to keep the server decoding (default: one when it has nothing running)",
    )
    p.add_argument("--port", type=int, help="the server's port, when several run")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="give up after S seconds (default 600)")
    p.add_argument(
        "--from",
        dest="files",
        nargs="+",
        metavar="FILE",
        help="read saved traces here instead (.trace.json.gz, one per rank; a plain decode trace among them is "
        "the baseline step)",
    )
    add_json(p)
    p.set_defaults(run=profile)


def _progress(event: dict[str, Any]) -> None:
    print(f"profile: {anatomy_mod.progress_text(event)}", file=sys.stderr, flush=True)


async def profile(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    baseline = settings.reference.baseline_tok_s
    if args.files:
        result = anatomy_mod.read_traces(args.files)
        _show(args, result, anatomy_mod.findings(result, baseline), None)
        return 0
    from backend.measure.livefeed import describe_server, require_server

    plan = anatomy_mod.ProfilePlan(
        anatomy_mod.check_steps(args.steps), anatomy_mod.parse_ranks(args.ranks), args.load, args.timeout
    )
    async with connected(args, settings, follow=True) as conn:
        server = await require_server(conn, args.port)
        print(f"profile of {describe_server(server)}: {plan.steps} steps", file=sys.stderr, flush=True)
        version = (await anatomy_mod.server_release(conn, server))[0]
        result = await anatomy_mod.capture(conn, server, plan, _progress)
        run_id = await keep_in_history(conn, server)
        if run_id and (why := anatomy_mod.keep(run_id, result)):
            print(f"specdeck: the profile is not kept in the run history: {why}", file=sys.stderr)
        result = anatomy_mod.with_kept_baseline(result, conn.host.name)
    _show(args, result, anatomy_mod.findings(result, baseline, version), run_id)
    return 0


def _show(
    args: argparse.Namespace, result: anatomy_mod.CycleAnatomy, found: list[anatomy_mod.Finding], run_id: str | None
) -> None:
    if args.json:
        emit_json({**result.to_json(), "findings": [f.to_json() for f in found], "run": run_id})
        return
    lines = anatomy_mod.text_lines(result, found)
    if not args.files:
        lines[-1] = anatomy_mod.trace_line(result, " on the host")
    for line in lines:
        print(line)
