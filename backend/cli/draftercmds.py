"""`specdeck drafters find` and `specdeck drafters add`: the Hub's drafters for the target, judged before a byte of
weights moves, and one command from a found drafter to a configured, downloaded one with a profile serving it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from backend.cli.common import add_json, connect, emit_json, load_settings
from backend.cli.main import command
from backend.connection import resolve_host
from backend.drafters import downloads
from backend.drafters import find as df
from backend.drafters.sources import Sources, hub_endpoint
from backend.errors import OperationFailed, UsageError
from backend.settings.model import HostConfig, Settings

if TYPE_CHECKING:
    from backend.cli.main import Subcommands

FIND_EPILOG = """\
The target: --target hf://org/name (or org/name), a folder or config.json on the host, file://PATH; default the
configured target. The search runs where the Hub can be reached (--where auto: this machine, else the host's
huggingface_hub; client or host to insist) with the token huggingface_hub finds there (HF_TOKEN or a saved
login): never an argument. Card figures are the cards' claims, shown beside this host's break-even, never
measurements. Exit 2: the Hub cannot be reached from anywhere tried, it is rate-limiting (429), the target
cannot be read; exit 1: the Hub refused the search; exit 3: the host was needed and could not be reached.
"""
WHERE = ("auto", "client", "host")


def register(sub: Subcommands) -> None:
    group = command(sub, "drafters", "Find drafters for the target on the Hub and add one to the set-up.")
    verbs = group.add_subparsers(dest="drafters_command", metavar="COMMAND")

    p = command(
        verbs,
        "find",
        "Search the Hub for the target's drafters and judge each against it (config and headers, no weights).",
        epilog=FIND_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.add_argument(
        "--algorithm",
        action="append",
        metavar="ALGO",
        help="only drafters needing this --speculative-algorithm (EAGLE3, EAGLE, DFLASH, DSPARK; repeatable)",
    )
    add_json(p)
    p.set_defaults(run=find_cmd)

    p = command(
        verbs,
        "add",
        "Add a drafter from the Hub: judge it, write [drafters.NAME] and a profile serving it, download it.",
    )
    p.add_argument("repo", metavar="ORG/NAME", help="the drafter's Hub repo (as `drafters find` lists it)")
    _common(p)
    p.add_argument("--name", help="the drafter's name in the config (default: from the repo's name)")
    p.add_argument("--profile", help="the profile that serves it (default: <algorithm>-<name>)")
    p.add_argument("--force", action="store_true", help="add it even when the verdict says it cannot serve the target")
    p.add_argument("--no-download", action="store_true", help="write the config only; `specdeck download NAME` later")
    p.add_argument(
        "--token-env", metavar="VAR", help="send the token in this local environment variable to the download job"
    )
    add_json(p)
    p.set_defaults(run=add_cmd)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", metavar="T", help="the target model: hf://org/name, a folder or config.json on the host")
    p.add_argument("--where", choices=WHERE, default="auto", help="where the search runs (default: auto)")
    p.add_argument("--endpoint", metavar="URL", help="the hub (default: the host's hub_endpoint, HF_ENDPOINT, the Hub)")


def _sources(args: argparse.Namespace) -> tuple[Sources, Settings, HostConfig]:
    settings = load_settings(args)
    overrides = {k: getattr(args, k) for k in ("identity", "known_hosts", "python", "workdir")}
    host = resolve_host(settings, args.host, **overrides)
    return Sources(host, lambda: connect(args, settings), hub_endpoint(host, args.endpoint)), settings, host


def _algorithms(args: argparse.Namespace) -> list[str]:
    from backend.drafters.checkpoints import DRAFT_ARCHITECTURES

    known = sorted({*DRAFT_ARCHITECTURES.values(), "STANDALONE"})
    wanted = [a.upper() for a in args.algorithm or []]
    for algorithm in wanted:
        if algorithm not in known:
            raise UsageError(f"--algorithm {algorithm}: drafters need one of {', '.join(known)}")
    return wanted


async def find_cmd(args: argparse.Namespace) -> int:
    algorithms = _algorithms(args)
    sources, settings, host = _sources(args)
    try:
        found = await df.find(settings, host, sources, args.target, algorithms, args.where)
    finally:
        await sources.aclose()
    if args.json:
        emit_json(found.to_json())
    else:
        print("\n".join(render(found)))
    return 0


def _where(found: df.Found) -> str:
    return "this machine" if found.where == "client" else "the host"


def render(found: df.Found) -> list[str]:
    """The search as text: a header, one block per drafter that can serve the target, a line per other one."""
    target = found.target
    lines = [
        f"Drafters for {target.name or target.label} ({target.source}): {len(found.candidates)} repos, searched from "
        f"{_where(found)} on {found.endpoint} in {found.seconds:.1f} s",
        f"break-even accept length {found.break_even:.2f} ({found.break_even_source}); "
        + (f"SGLang {found.sglang_version} on the host" if found.sglang_version else "the host's SGLang not known"),
    ]
    usable = [c for c in found.candidates if c.compatible]
    others = [c for c in found.candidates if not c.compatible]
    if not usable:
        lines.append("no drafter found that SGLang can serve for this target")
    for i, c in enumerate(usable, 1):
        lines.append("")
        lines.extend(df.describe(c, found.break_even, f"{i:>2}. "))
    if others:
        lines += ["", f"not offered ({len(others)}):"]
        for c in others:
            why = c.problems[0] if c.problems else "no verdict"
            lines.append(f"  {c.repo}: {c.kind}: {why}")
    if usable:
        lines += ["", f"add one: specdeck drafters add {usable[0].repo}"]
    return lines


async def add_cmd(args: argparse.Namespace) -> int:
    if not df.REPO_ID.match(args.repo):
        raise UsageError(f"{args.repo!r} is not a Hub repo: write ORG/NAME")
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise UsageError(f"--token-env {args.token_env}: that variable is not set (or empty) here")
    sources, settings, host = _sources(args)
    try:
        found = await df.find(settings, host, sources, args.target, (), args.where, repos=[args.repo], search=False)
        candidate = found.candidate(args.repo)
        if candidate is None:
            raise UsageError(f"{args.repo} could not be read from {found.endpoint}")
        added = df.add(candidate, settings, host, args.name, args.profile, args.force)
        if not args.json:
            _say_added(added, candidate, found)
        result = added.to_json()
        if not args.no_download:
            from backend.cli.downloadcmds import watch

            conn = await sources.connection()
            job, plan = await downloads.start(conn, downloads.drafter_request(added.drafter, host, token=token))
            if not args.json:
                print(f"{downloads.start_text(added.drafter.name, plan)} on {host.name} (job {job.id})")
            progress = await watch(conn, job, quiet=args.json)
            result["download"] = {"job": job.id, "state": progress.state, "reason": progress.reason}
            if progress.state != "done":
                raise OperationFailed(f"download {progress.state}: {progress.reason or 'see `specdeck jobs`'}")
    finally:
        await sources.aclose()
    if args.json:
        emit_json({**result, "candidate": candidate.to_json(found.break_even)})
    elif added.profile is not None:
        print(f"serve it: specdeck serve start {added.profile.name}")
    return 0


def _say_added(added: df.Added, candidate: df.Candidate, found: df.Found) -> None:
    d = added.drafter
    print(f"{candidate.repo}: {candidate.algorithm}, for {found.target.name or found.target.label}")
    for note in candidate.notes[:1]:
        print(f"  note: {note}")
    print(f"wrote [drafters.{d.name}] into {added.path}: {d.repo} → {d.path} ({', '.join(d.files)})")
    if added.profile is None:
        print(added.profile_note)
    elif added.profile_note:
        print(f"wrote [profiles.{added.profile.name}]: {added.profile_note.split(': ', 1)[1]}")
    else:
        print(f"profile {added.profile.name} serves it already")
    sys.stdout.flush()
