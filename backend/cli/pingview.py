"""What `specdeck ping` prints, for the full command and the one-shot answer (``quick.py``) alike."""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing itself only for the checker (see quick.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def ping_report(host: str, info: dict[str, Any], rtt: Mapping[str, float]) -> dict[str, Any]:
    """The host's answer to `info` and the round trips, as `ping --json` shows them."""
    return {
        "host": host,
        "hostname": info["hostname"],
        "python": info["python"],
        "platform": info["platform"],
        "rtt_ms": {"median": rtt["median"], "p95": rtt["p95"]},
        "versions": info["versions"],
        "gpus": info["gpus"],
        "job_ownership": info.get("job_ownership"),
    }


def render_ping(out: dict[str, Any], as_json: bool) -> str:
    """The whole output, built before any of it is written (a malformed answer prints nothing)."""
    if as_json:
        return json.dumps(out, indent=2, default=str) + "\n"
    rtt = out["rtt_ms"]
    lines = [
        f"{out['host']} ({out['hostname']}): agent round trip {rtt['median']:.2f} ms median, {rtt['p95']:.2f} ms p95",
        f"  python {out['python']} on {out['platform']}",
        "  " + ", ".join(f"{k} {v}" if v else f"{k} missing" for k, v in out["versions"].items()),
    ]
    if out["job_ownership"]:
        lines.append(f"  {out['job_ownership']}")
    for g in out["gpus"]:
        lines.append(f"  GPU{g['index']} {g['name']}: {g['memory_used_mib']:.0f}/{g['memory_total_mib']:.0f} MiB")
    if not out["gpus"]:
        lines.append("  no GPUs (nvidia-smi not found)")
    return "\n".join(lines) + "\n"
