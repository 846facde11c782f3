"""What command modules share: loading settings, connecting to --host, printing JSON or text."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from backend import settings as settings_mod
from backend.jobs import JobInfo
from backend.settings import Settings


def load_settings(args: argparse.Namespace) -> Settings:
    return settings_mod.load(args.config)


async def connect(args: argparse.Namespace, settings: Settings | None = None):
    """Connect once to --host (exit 3 on failure), through its control master unless --no-persist."""
    from backend.connection import open_host

    settings = settings or load_settings(args)
    conn = await open_host(
        settings,
        args.host,
        shared=not getattr(args, "no_persist", False),
        identity=args.identity,
        known_hosts=args.known_hosts,
        python=args.python,
        workdir=args.workdir,
    )
    if conn.note:
        print(f"specdeck: {conn.note}", file=sys.stderr)
    return conn


async def keep_in_history(conn, server: JobInfo, benches: Sequence[tuple[JobInfo, dict]] = ()) -> str | None:
    """Keep CLI work in the run history: serve job ``server``'s run (with its log's samples once it has ended),
    and ``benches`` ((bench job, result) pairs) with it, so `specdeck history` and `report` show it. Returns the
    run id; None, said on stderr, when the history cannot be used (the command's own work stands).

    A running server's log is left to whoever follows it live (a panel elsewhere records it; two writers
    cutting the same log at different places would leave a gap): `serve stop` or `history --sync` imports it.
    """
    from backend.history import History, HistoryUnavailable, record_run

    latency = await server_latency(conn, server) if server.active else None
    try:
        with History.open() as history:
            if server.active:
                run_id = history.upsert_run(conn.host.name, server)
                if latency:
                    history.set_latency(run_id, latency)
            else:
                run_id = await record_run(history, conn, server)
            for job, result in benches:
                history.record_bench(conn.host.name, replace(job, state="done"), result)
    except HistoryUnavailable as exc:
        print(f"specdeck: not kept in the run history: {exc}", file=sys.stderr)
        return None
    return run_id


async def server_latency(conn, server: JobInfo) -> dict | None:
    """The running server's latency figures since it started (its /metrics histograms); None when it has none
    or cannot be asked now."""
    from backend import latency
    from backend.errors import ConnectionFailed, RemoteError

    try:
        page = await conn.call("http.request", url=f"http://127.0.0.1:{server.port}/metrics")
    except (ConnectionFailed, RemoteError):
        return None
    if page.get("status") != 200:
        return None
    return latency.summary_json(latency.parse(page.get("text") or "")) or None


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def emit_json_line(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
