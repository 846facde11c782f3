"""`specdeck advise` and `sweep`: which speculative step count pays, predicted and then measured."""

from __future__ import annotations

import argparse

from backend import advisor
from backend.cli.common import add_json, emit_json, load_settings
from backend.cli.main import command
from backend.history import History


def register(sub) -> None:
    p = command(
        sub,
        "advise",
        "Predict accept length and tok/s for every draft step count from a run's per-position acceptance.",
    )
    p.add_argument(
        "ref", nargs="?", metavar="RUN", help="run id, job id or unique prefix (default: the newest with a histogram)"
    )
    p.add_argument(
        "--max-steps", type=int, default=advisor.DEFAULT_MAX_STEPS, metavar="K", help="predict steps 1..K (default 7)"
    )
    p.add_argument(
        "--target", type=float, action="append", metavar="T", help="a target tok/s; repeat (default: 150 and 200)"
    )
    add_json(p)
    p.set_defaults(run=advise)


async def advise(args: argparse.Namespace) -> int:
    ref = load_settings(args).reference
    with History.open() as history:
        run_id = history.resolve(args.ref) if args.ref else None
        yardstick = history.yardstick(ref.baseline_tok_s, ref.cycle_ms)
        runs = history.runs()
    advice = advisor.advise(runs, yardstick, run_id, max_steps=args.max_steps, targets=args.target or (150.0, 200.0))
    if args.json:
        emit_json(advice.to_json())
    else:
        print("\n".join(advisor.advice_lines(advice)))
    return 0
