"""`specdeck config show|init`: the effective settings, and a commented file to start from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from backend.agent.host.shared import units
from backend.cli.common import add_json, emit_json, load_settings
from backend.cli.main import command
from backend.errors import UsageError
from backend.measure.breakeven import live_breakeven
from backend.settings import config_file, template

if TYPE_CHECKING:
    from backend.cli.main import Subcommands


def register(sub: Subcommands) -> None:
    p = command(sub, "config", "Show or create the configuration.")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION")
    s = command(csub, "show", "Print the effective configuration (defaults overlaid by the file).")
    add_json(s)
    s.set_defaults(run=show)
    i = command(csub, "init", "Write a commented config file (to --config, SPECDECK_CONFIG or the user config dir).")
    i.add_argument("--force", action="store_true", help="overwrite an existing file")
    i.set_defaults(run=init)


async def show(args: argparse.Namespace) -> int:
    s = load_settings(args)
    data = s.to_json()
    ref = data["reference"]
    ref["break_even_accept_len"] = round(live_breakeven(ref["cycle_ms"], ref["baseline_tok_s"]), 4)
    if args.json:
        emit_json(data)
        return 0
    print(f"# from {s.source}")
    print(f"default_host = {s.default_host}\ntarget = {s.target}")
    for h in s.hosts.values():
        extra = " (sandbox, SIMULATED sglang)" if h.sandbox else ""
        print(f"host {h.name}: {h.url} python={h.python} workdir={h.workdir}{extra}")
    for d in s.drafters.values():
        print(f"drafter {d.name}: {d.path}" + (f" ← hf://{d.repo}" if d.repo else ""))
    for p in s.profiles.values():
        spec = f" {p.algorithm} drafter={p.drafter} steps={p.steps} topk={p.topk} draft_tokens={p.draft_tokens}"
        nodes = f" nodes={','.join(p.nodes)}" if p.nodes else ""
        print(f"profile {p.name}: tp={p.tp} port={p.port}{nodes}" + (spec if p.algorithm else " (no speculation)"))
    if s.fleets:
        from backend.fleet.fleets import describe

        for f in s.fleets.values():
            print(f"fleet {f.name}: {describe(f)}")
    r = s.reference
    print(
        f"reference: baseline {units.tok_s(r.baseline_tok_s)} tok/s, cycle {r.cycle_ms:g} ms, "
        f"break-even accept length {live_breakeven(r.cycle_ms, r.baseline_tok_s):.2f}"
    )
    return 0


async def init(args: argparse.Namespace) -> int:
    path, _ = config_file.config_path(args.config)
    if path.exists() and not args.force:
        raise UsageError(f"{path} already exists (use --force to overwrite)")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    path.write_text(template.INIT_TEMPLATE)
    print(f"wrote {path}")
    return 0
