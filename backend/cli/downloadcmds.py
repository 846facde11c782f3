"""`specdeck download`: fetch a drafter onto the host as a detached job, with rich's progress bars or JSON lines.

The bytes go hub → host; this command only starts the job and watches it. Stopping the command (Ctrl-C, a
killed terminal, a dropped SSH link) leaves the job running: `specdeck jobs` lists it, `specdeck download
--attach ID` watches it again and `specdeck jobs cancel ID` stops it and removes its partial files.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from backend import hosttext
from backend.agent.host.shared.units import human_bytes
from backend.cli.common import add_json, connected, emit_json_line, load_settings
from backend.cli.main import command
from backend.connection import resolve_host
from backend.drafters import downloads
from backend.drafters.downloads import DownloadPlan, Progress, human_eta, human_rate, percent
from backend.errors import OperationFailed, UsageError
from backend.jobs import JobInfo, get_job, wait_job
from backend.settings.model import Settings

if TYPE_CHECKING:
    from rich.progress import TaskID

    from backend.cli.main import Subcommands
    from backend.connection import Connection

REDRAW_S = 0.1  # terminal redraws at most ten times a second


def register(sub: Subcommands) -> None:
    p = command(
        sub,
        "download",
        "Download a drafter onto the host (a detached job with progress, sha256 verification and clean cancel).",
    )
    p.add_argument(
        "target", nargs="?", metavar="REPO_ID|DRAFTER", help="hub repo (ORG/NAME) or a configured drafter's name"
    )
    p.add_argument("--to", metavar="DIR", help="folder on the host (default for a drafter: its configured path)")
    p.add_argument("--revision", metavar="R", help="branch, tag or commit (default: main or the drafter's)")
    p.add_argument(
        "--file",
        action="append",
        metavar="F",
        help="a file to fetch (repeatable; default config.json and model.safetensors)",
    )
    p.add_argument("--all", action="store_true", help="fetch every file of the repo")
    p.add_argument(
        "--endpoint", metavar="URL", help="hub or mirror (default: the host's configured hub, its HF_ENDPOINT, the Hub)"
    )
    p.add_argument(
        "--token-env", metavar="VAR", help="send the token in this local environment variable to the job (not argv)"
    )
    p.add_argument("--detach", action="store_true", help="start the job, print its id and return")
    p.add_argument("--attach", metavar="JOB_ID", help="watch a download job that is already running")
    add_json(p)
    p.set_defaults(run=download)


def build_request(args: argparse.Namespace, settings: Settings) -> downloads.Request:
    """The download the arguments ask for (usage errors before any connection is made)."""
    if args.all and args.file:
        raise UsageError("pass either --all or --file, not both")
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise UsageError(f"--token-env {args.token_env}: that variable is not set (or empty) here")
    host = resolve_host(settings, args.host)
    files = tuple(args.file) if args.file else None
    if "/" in args.target:
        if not args.to:
            raise UsageError("--to DIR is required when downloading a repo id (the folder on the host)")
        return downloads.Request(
            repo=args.target,
            to=args.to,
            revision=args.revision,
            files=files or downloads.DEFAULT_FILES,
            all_files=args.all,
            endpoint=downloads.endpoint_for(host, args.endpoint),
            token=token,
        )
    drafter = settings.drafters.get(args.target)
    if drafter is None:
        known = ", ".join(sorted(settings.drafters)) or "none"
        raise UsageError(f"unknown drafter {args.target!r} (configured: {known}); or pass a repo id ORG/NAME")
    return downloads.drafter_request(
        drafter,
        host,
        to=args.to,
        revision=args.revision,
        files=files,
        all_files=args.all or None,
        endpoint=args.endpoint,
        token=token,
    )


async def download(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    if bool(args.target) == bool(args.attach):
        raise UsageError("give a REPO_ID or DRAFTER to download, or --attach JOB_ID to watch a running download")
    req = build_request(args, settings) if args.target else None
    async with connected(args, settings, follow=not args.detach) as conn:
        if req is None:
            job = await get_job(conn, args.attach)
            if job.kind != "download":
                raise UsageError(f"job {args.attach} is a {job.kind} job, not a download")
        else:
            job, plan = await downloads.start(conn, req)
            _announce(args, plan, job, conn.host.name)
        if args.detach:
            return 0
        progress = await watch(conn, job, json_lines=args.json)
        if progress.state != "done":
            raise OperationFailed(f"download {progress.state}: {progress.reason or 'see `specdeck jobs`'}")
        return 0


async def watch(conn: Connection, job: JobInfo, json_lines: bool = False, quiet: bool = False) -> Progress:
    """Follow a download job to its end: rich's bars on a terminal (and the files' summary when it is done),
    its events as JSON lines with ``json_lines``, nothing with ``quiet``; returns its Progress."""
    progress = Progress(job.id)
    view = None if json_lines or quiet else Bars(sys.stdout)
    with view or contextlib.nullcontext():
        try:
            async for _, event in downloads.follow(conn, job.id):
                progress.apply(event)
                if view is not None:
                    view.draw(progress)
                elif json_lines:
                    emit_json_line(event)
        except asyncio.CancelledError:
            print(
                f"\nstopped watching; the download carries on on the host as job {job.id}: "
                f"`specdeck jobs` shows it, `specdeck download --attach {job.id}` watches it again, "
                f"`specdeck jobs cancel {job.id}` stops it",
                file=sys.stderr,
            )
            raise
        progress.finish(await wait_job(conn, job.id, 30))
        if view is not None:
            view.draw(progress, final=True)
    if view is not None and progress.state == "done":
        view.summary(progress)
    return progress


def _announce(args: argparse.Namespace, plan: DownloadPlan, job: JobInfo, host: str) -> None:
    if args.json:
        emit_json_line({"event": "job", "id": job.id, "preflight": plan.wire})
        return
    files = ", ".join(f.path for f in plan.files)
    print(
        f"{plan.repo}@{plan.revision} from {plan.endpoint}: {len(plan.files)} files "
        f"({human_bytes(plan.total)}: {files})"
    )
    print(f"  into {plan.to} on {host} ({human_bytes(plan.free)} free there)")
    for left in plan.leftovers:
        verb = "resuming" if left.action == "resume" else "removing"
        print(f"  {verb} a partial file from an earlier run: {left.path} ({human_bytes(left.bytes)})")
    if args.detach:
        print(f"job {job.id} started; watch it with `specdeck download --attach {job.id}` or `specdeck jobs`")
    else:
        print(f"job {job.id} (Ctrl-C stops watching, not the download)")


class Bars:
    """A Progress drawn by rich: one bar per file (name, bar, percent, bytes, the host's rate and ETA, phase),
    redrawn in place and fitted to the terminal's width as it changes. Quiet when ``out`` is not a terminal
    (a pipe, a log): only the lines before and the summary after; ``--json`` streams every event instead."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as RichProgress
        from rich.table import Column

        self.out = out
        # rich's own control sequences (colours, the redraw) go beneath the guard; the one piece of host text in
        # a bar, the file's name, is made visible by hand (short_name).
        self.console = Console(file=hosttext.unguarded(out))
        self.bars = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=None),
            # Fixed widths, so the bars keep their length as the figures and the phase change.
            TextColumn("{task.fields[numbers]}", table_column=Column(width=52, no_wrap=True)),
            TextColumn("{task.fields[phase]}", style="dim", table_column=Column(width=11, no_wrap=True)),
            console=self.console,
            auto_refresh=False,  # drawn when an event comes, at most every REDRAW_S
            expand=True,
            disable=not self.console.is_terminal,
        )
        self.tasks: dict[str, TaskID] = {}
        self.last = 0.0

    def __enter__(self) -> Bars:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def draw(self, progress: Progress, final: bool = False) -> None:
        for f in progress.files.values():
            shown, phase = numbers(f), f.phase  # the bar's own fields, drawn by its columns
            if f.path not in self.tasks:
                self.tasks[f.path] = self.bars.add_task(
                    short_name(f.path), total=f.total or 1, numbers=shown, phase=phase
                )
            # The bar is the bytes there (full once downloaded); hashing them is the numbers' own "sha256 N%".
            self.bars.update(self.tasks[f.path], completed=f.bytes, total=f.total or 1, numbers=shown, phase=phase)
        now = time.monotonic()
        if final or now - self.last >= REDRAW_S:
            self.bars.refresh()
            self.last = now

    def summary(self, progress: Progress) -> None:
        for f in progress.result:
            mark = "verified" if f.get("verified") else "not verified (the hub gives no digest)"
            self.out.write(f"{f['path']}: {human_bytes(f['bytes'])}, sha256 {f['sha256'][:16]}…, {mark}\n")
        self.out.flush()


def short_name(path: str) -> str:
    """The file's name as a bar shows it: the host's text made visible, cut to 28 characters."""
    path = hosttext.visible(path)
    return path if len(path) <= 28 else "…" + path[-27:]


def numbers(f: downloads.FileProgress) -> str:
    """``41.2%  0.92/2.22 GiB  141.3 MiB/s  ETA 0:08`` (rate and ETA while the file moves or is hashed); while
    verifying, ``sha256  0.3%  …``: the bytes hashed, not a download gone back."""
    hashing = "sha256 " if f.phase == "verifying" else ""
    out = f"{hashing}{percent(f.fraction):>6}  {human_bytes(f.current)}/{human_bytes(f.total)}"
    if f.phase in ("downloading", "verifying"):
        out += f"  {human_rate(f.bytes_per_s)}  ETA {human_eta(f.eta_s)}"
    return out
