"""The SIMULATED server's load endpoint, as the release it speaks serves it (what sglang-router's load monitor
and ``/get_loads`` poll).

SGLang 0.5.6 serves ``GET /get_load`` (http_server.py): a list of ``GetLoadReqOutput`` (io_struct.py, its
``BaseReq`` fields ``rid`` and ``http_worker_ipc`` included), one per DP rank, ``num_reqs`` counting running and
waiting requests. 0.5.23 dropped it for ``GET /v1/loads`` (entrypoints/v1_loads.py): ``{timestamp, version,
accelerator, num_accelerators, loads}``, each load a ``LoadSnapshot.to_dict()`` (managers/load_snapshot.py);
``?format=prometheus`` gives gauges named ``sglang_<key>`` by dp_rank. Each release answers the other's path 404.
The simulator runs one scheduler, so one rank (``dp_rank`` 0, as its /metrics labels it).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any, Dict, Tuple


def path_for(current: bool) -> str:
    """The load path the release serves: ``/v1/loads`` from 0.5.23, ``/get_load`` before."""
    return "/v1/loads" if current else "/get_load"


def _figures(engine: Any) -> Dict[str, Any]:
    with engine._cv:
        running, waiting = list(engine.running), list(engine.waiting)
    tokens = sum(r.prompt_tokens + len(r.output_ids) for r in running)
    waiting_tokens = sum(r.prompt_tokens for r in waiting)
    return {"running": len(running), "waiting": len(waiting), "tokens": tokens, "waiting_tokens": waiting_tokens}


def answer(sim: Any, query: str) -> Tuple[str, str]:
    """``(body, content type)`` of the load path of ``sim``'s release (``path_for``), for URL query ``query``."""
    current = sim.dialect.current
    engine = sim.engine
    f = _figures(engine)
    if not current:
        load = {"rid": None, "http_worker_ipc": None, "dp_rank": 0, "num_reqs": f["running"] + f["waiting"]}
        load.update({"num_waiting_reqs": f["waiting"], "num_tokens": f["tokens"] + f["waiting_tokens"]})
        return json.dumps([load]), "application/json"
    capacity = max(1, engine.max_total_tokens)
    snapshot: Dict[str, Any] = {
        "timestamp": time.time(),
        "dp_rank": 0,
        "num_running_reqs": f["running"],
        "num_waiting_reqs": f["waiting"],
        "num_waiting_uncached_tokens": f["waiting_tokens"],
        "num_used_tokens": f["tokens"],
        "num_total_tokens": f["tokens"],
        "num_active_tokens": f["tokens"],
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": engine.max_total_tokens,
        "max_running_requests": engine.max_running,
        "token_usage": round(f["tokens"] / capacity, 4),
        "gen_throughput": engine.last_gen_throughput,
        "cache_hit_rate": 0.0,
        "utilization": 1.0 if f["running"] else 0.0,
        "total_prefill_uncached_tokens": 0,
        "total_prefill_busy_us": 0,
        "decode_moments": None,
    }
    accept = engine.avg_spec_accept_length()
    if accept is not None:
        steps = max(1, int(engine.spec.get("steps") or 1))
        snapshot["speculative"] = {"accept_length": accept, "accept_rate": round((accept - 1) / steps, 4)}
    snapshot["queues"] = {"waiting": f["waiting"], "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0}
    if "format=prometheus" in query:
        return _prometheus(snapshot), "text/plain; version=0.0.4; charset=utf-8"
    body = {
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "version": sim.dialect.label,
        "accelerator": None,  # no GPU behind the simulator
        "num_accelerators": int(sim.args.get("tp_size") or 1),
        "loads": [snapshot],
    }
    return json.dumps(body), "application/json"


def _prometheus(snapshot: Dict[str, Any]) -> str:
    """``_format_loads_prometheus``: a gauge per number, sections prefixed (``spec_``, ``queues_``)."""
    prefixes = {"speculative": "spec"}
    lines = []
    for key, value in snapshot.items():
        if key == "dp_rank":
            continue
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, number in items:
            if not isinstance(number, (int, float)) or isinstance(number, bool):
                continue
            name = "sglang_%s" % key if sub is None else "sglang_%s_%s" % (prefixes.get(key, key), sub)
            lines.append("# TYPE %s gauge" % name)
            lines.append('%s{dp_rank="0"} %s' % (name, number))
    return "\n".join(lines) + "\n"
