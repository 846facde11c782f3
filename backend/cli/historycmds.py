"""`specdeck history`, `report` and `export`: recorded runs, side by side, on paper and as raw samples."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from backend.cli.common import add_json, connected, emit_json, load_settings
from backend.cli.main import command
from backend.errors import SpecdeckError, UsageError
from backend.history import History, RunSummary, Yardstick, sync_from_host
from backend.measure import judge
from backend.report.blocks import Block, Bullets, Table
from backend.report.cells import VS_LEGEND, fmt, run_cells
from backend.report.charts import CHART_MODES
from backend.report.document import DrafterFacts, concurrency_blocks, read_drafters
from backend.report.render import aligned, report_format, samples_csv, to_text
from backend.train.predict import gap_line

if TYPE_CHECKING:
    from backend.cli.main import Subcommands


def register(sub: Subcommands) -> None:
    p = command(sub, "history", "List the recorded server runs with their means against the baseline and break-even.")
    add_json(p)
    p.add_argument("--sync", action="store_true", help="first import the host's serve and bench jobs (--host)")
    p.add_argument("--deleted", action="store_true", help="list the deleted runs and benches (their tombstones)")
    p.set_defaults(run=list_runs)
    hsub = p.add_subparsers(dest="history_command", metavar="ACTION")
    b = command(hsub, "baseline", "Mark a run as the measured baseline: its mean tok/s becomes the baseline line.")
    b.add_argument("ref", nargs="?", metavar="RUN", help="run id, job id or a unique prefix (from `specdeck history`)")
    b.add_argument("--clear", action="store_true", help="go back to the configured baseline")
    add_json(b)
    b.set_defaults(run=baseline)
    d = command(hsub, "delete", "Delete runs with their samples and benches (the jobs on the host stay).")
    d.add_argument("refs", nargs="+", metavar="RUN", help="run ids, job ids or unique prefixes")
    add_json(d)
    d.set_defaults(run=delete)

    r = command(sub, "report", "Write a report comparing runs (tables, charts, drafter diff, launch commands).")
    r.add_argument("refs", nargs="*", metavar="RUN", help="run ids, job ids or unique prefixes, in table order")
    r.add_argument("--sweep", metavar="ID", help="a sweep's table and charts (its runs are compared when no RUN)")
    r.add_argument("--out", required=True, metavar="FILE", help="FILE.md (Markdown) or FILE.html (one page)")
    r.add_argument("--no-inspect", action="store_true", help="leave out the drafter diff (do not ask the host)")
    r.add_argument("--charts", choices=CHART_MODES, default="interactive",
                   help="HTML charts: interactive (hover, zoom, hide a run; plotly.js inline, ~5 MB, works offline) "
                        "or static (small SVGs)")  # fmt: skip
    r.set_defaults(run=report)

    e = command(sub, "export", "Export a run's per-second samples (tok/s, accept length, cycle ms, ...).")
    e.add_argument("ref", metavar="RUN", help="run id, job id or a unique prefix")
    fmt_group = e.add_mutually_exclusive_group(required=True)
    fmt_group.add_argument("--csv", action="store_true", help="CSV, one row per second")
    fmt_group.add_argument("--json", action="store_true", help="JSON: the run, its samples and benches")
    e.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    e.set_defaults(run=export)


def _yardstick(history: History, args: argparse.Namespace) -> Yardstick:
    ref = load_settings(args).reference
    return history.yardstick(ref.baseline_tok_s, ref.cycle_ms)


async def list_runs(args: argparse.Namespace) -> int:
    with History.open() as history:
        synced = None
        if args.sync:
            async with connected(args) as conn:
                synced = await sync_from_host(history, conn)
        if args.deleted:
            return _list_deleted(history, args.json)
        yardstick = _yardstick(history, args)
        runs = history.runs()
        if args.json:
            emit_json(
                {
                    "yardstick": yardstick.to_json(),
                    "runs": [judge.run_json(r, yardstick) for r in runs],
                    "benches": history.benches(standalone=True),
                    "sync": synced.to_json() if synced else None,
                    "database": str(history.path),
                }
            )
            return 0
        if synced:
            print(f"synced {synced.host}: {synced.runs} runs, {synced.samples} new samples, {synced.benches} benches")
        print(_yardstick_line(yardstick))
        print_runs(runs, yardstick)
        standalone = history.benches(standalone=True)
        if standalone:
            print(f"\n{len(standalone)} bench(es) without a recorded run:")
            for bench in standalone:
                print(
                    f"  {bench['id']}: {fmt(bench['tok_s'])} tok/s per stream at concurrency "
                    f"{bench['concurrency'] or '—'}, accept length {fmt(bench['accept_len'], 2)}"
                )
    return 0


def _yardstick_line(y: Yardstick) -> str:
    return judge.yardstick_text(y)


def print_runs(runs: list[RunSummary], yardstick: Yardstick) -> None:
    if not runs:
        print("no runs recorded yet (`specdeck history --sync` imports the host's servers)")
        return
    head = ("RUN", "PROFILE", "DRAFTER", "STEPS/TOPK/DRAFT", "OUTCOME", "SAMPLES", "STREAMS", "TOK/S/STREAM", "TOTAL",
            "ACCEPT", "VS BASE", "BREAK-EVEN")  # fmt: skip
    columns = ("profile", "drafter", "spec", "outcome", "samples", "streams", "tok_s", "total_tok_s", "accept",
               "vs_baseline", "break_even")  # fmt: skip
    rows: list[tuple[str, ...]] = [head]
    for r in runs:
        cells = run_cells(r, yardstick)
        rows.append((r.id + (" ★" if r.is_baseline else ""), *cells.pick(columns)))
    for line in aligned(rows, right=range(5, len(head) - 1)):  # numbers right-aligned
        print(line)
    if runs:
        print(VS_LEGEND)
    for line in filter(None, map(gap_line, runs)):
        print(line)
    curves: list[Block] = [b for b in concurrency_blocks(runs, yardstick) if isinstance(b, Table | Bullets)]
    if curves:
        print("\nbench tok/s per stream / in all, by concurrency:\n" + to_text(curves).rstrip())


async def baseline(args: argparse.Namespace) -> int:
    if bool(args.ref) == bool(args.clear):
        raise UsageError("give a RUN to mark as the baseline, or --clear")
    with History.open() as history:
        history.set_baseline(None if args.clear else history.resolve(args.ref))
        yardstick = _yardstick(history, args)
    if args.json:
        emit_json(yardstick.to_json())
    else:
        print(_yardstick_line(yardstick))
    return 0


def _list_deleted(history: History, as_json: bool) -> int:
    tombstones = history.deleted()
    if as_json:
        emit_json({"deleted": tombstones, "database": str(history.path)})
        return 0
    if not tombstones:
        print("nothing deleted")
    for t in tombstones:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(t["deleted_at"]))
        print(f"{t['id']}  {t['kind']}  {t['profile'] or '—'}  deleted {when}")
    return 0


async def delete(args: argparse.Namespace) -> int:
    with History.open() as history:
        ids = [history.resolve(ref) for ref in args.refs]
        deleted = history.delete(ids)
    if args.json:
        emit_json({"deleted": ids})
    else:
        print(f"deleted {deleted} run(s): {', '.join(ids)}")
    return 0


async def _drafter_facts(args: argparse.Namespace, runs: list[RunSummary]) -> DrafterFacts | None:
    """Ask each host that ran one of the drafters; a host that cannot be reached becomes a note."""
    from backend.connection import open_host

    if args.no_inspect:
        return None
    settings = load_settings(args)
    facts = DrafterFacts()
    notes = []
    for host in dict.fromkeys(r.host for r in runs if r.drafter_path):
        given = args.host or settings.default_host
        overrides = {k: getattr(args, k) for k in ("identity", "known_hosts", "python", "workdir") if getattr(args, k)}
        try:
            conn = await open_host(settings, host, **(overrides if host == given else {}))
        except SpecdeckError as exc:
            notes.append(f"{host}: {exc}")
            continue
        try:
            part = await read_drafters(conn, [r for r in runs if r.host == host])
        finally:
            await conn.close()
        facts.inspected.update(part.inspected)
        facts.target = facts.target or part.target
        if part.note:
            notes.append(part.note)
    facts.note = "; ".join(notes) or None
    return facts


async def report(args: argparse.Namespace) -> int:
    from backend.report import render

    if not report_format(args.out):
        raise UsageError(f"--out {args.out}: name the file .md (Markdown) or .html (one page)")
    with History.open() as history:
        ids = list(dict.fromkeys(history.resolve(ref) for ref in args.refs))
        if args.sweep and not ids:
            ids = [r.id for r in history.sweep_runs(args.sweep)]
        if not ids:
            raise UsageError("name the runs to report (see `specdeck history`) or a sweep with --sweep ID")
        yardstick = _yardstick(history, args)
        facts = await _drafter_facts(args, [history.run(i) for i in ids])
        price = load_settings(args).reference.gpu_hour_usd
        render.write(history, ids, yardstick, args.out, facts, args.sweep, price, args.charts)
    print(f"wrote {args.out} ({len(ids)} run(s))")
    return 0


async def export(args: argparse.Namespace) -> int:
    with History.open() as history:
        run_id = history.resolve(args.ref)
        samples = history.samples(run_id)
        if args.csv:
            text = samples_csv(samples)
        else:
            run = judge.run_json(history.run(run_id), _yardstick(history, args))
            doc = {"run": run, "samples": samples, "benches": history.benches(run_id)}
            text = json.dumps(doc, indent=2, default=str) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} ({len(samples)} samples)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
