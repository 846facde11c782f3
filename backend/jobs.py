"""Detached jobs on the host as the CLI and the TUI see them: remove an ended one, prune the old ones.

The host agent does the work (``backend/agent/host/jobs.py``): it removes only jobs that have ended and
refuses one that still runs (or whose runner died while its processes run on) with one sentence.
"""

from __future__ import annotations

import re
from typing import Any

from backend.errors import UsageError

PRUNE_DEFAULT = "7d"  # what the panel's prune key keeps: a week of ended jobs
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds in ``30m``, ``12h``, ``7d``, ``2w`` or ``1h30m``; UsageError for anything else."""
    clean = text.strip().lower()
    parts = _PART.findall(clean)
    if not clean or "".join(n + u for n, u in parts) != clean:
        raise UsageError(f"a duration looks like 30m, 12h, 7d or 1h30m, not {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


async def remove(conn: Any, job_id: str) -> list[str]:
    """Remove one ended job's folder; RemoteError (busy) if it still runs. Returns the removed ids."""
    return (await conn.call("jobs.remove", id=job_id))["removed"]


async def prune(conn: Any, older_than: float, kind: str | None = None) -> dict:
    """Remove every ended job (of ``kind``) that ended more than ``older_than`` seconds ago.

    Returns ``{"removed": [ids], "running": n}``; jobs that still run are never touched."""
    return await conn.call("jobs.prune", older_than=older_than, kind=kind)
