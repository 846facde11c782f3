"""What sglang-router 0.3.2 says of its workers: its ``GET /workers`` JSON and its Prometheus page's ``smg_*``
series (names as in sgl-model-gateway ``observability/metrics.rs``). Pure: bad or missing input reads as
nothing known, never an exception."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

_READ = ("smg_worker_health", "smg_worker_requests_active", "smg_router_requests_total", "smg_router_request_errors")


@dataclass(frozen=True)
class RouterView:
    """The router's figures: worker counts, requests, errors and each worker's health by url (None: not said)."""

    workers: int | None = None
    healthy_workers: int | None = None
    requests_active: int | None = None
    requests_total: int | None = None
    errors_total: int | None = None
    health: dict[str, bool] = field(default_factory=dict)


def _workers(text: str | None) -> list[dict]:
    """The worker entries of a /workers answer (``{"workers": [...]}`` or a bare list)."""
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        return []
    items = data.get("workers") if isinstance(data, dict) else data
    return [w for w in items if isinstance(w, dict)] if isinstance(items, list) else []


def _healthy(entry: dict) -> bool | None:
    for key in ("is_healthy", "healthy"):
        if isinstance(entry.get(key), bool):
            return entry[key]
    return None


def read(workers_json: str | None, metrics_text: str | None) -> RouterView:
    """Merge the two pages; the Prometheus gauge wins for health (it is what the router acts on)."""
    entries = _workers(workers_json)
    health: dict[str, bool] = {}
    for entry in entries:
        url, ok = entry.get("url"), _healthy(entry)
        if isinstance(url, str) and ok is not None:
            health[url.rstrip("/")] = ok
    active = total = errors = None
    if metrics_text:
        from prometheus_client.parser import text_string_to_metric_families

        from backend.prometheus import only_families

        try:
            for family in text_string_to_metric_families(only_families(metrics_text, _READ)):
                for sample in family.samples:
                    worker = (sample.labels.get("worker") or "").rstrip("/")
                    if sample.name == "smg_worker_health" and worker:
                        health[worker] = sample.value >= 1
                    elif sample.name == "smg_worker_requests_active":
                        active = (active or 0) + int(sample.value)
                    elif sample.name == "smg_router_requests_total":
                        total = (total or 0) + int(sample.value)
                    elif sample.name == "smg_router_request_errors_total":
                        errors = (errors or 0) + int(sample.value)
        except ValueError:
            pass  # what was read before the bad line stands
    count = len(entries) if workers_json is not None else (len(health) or None)
    return RouterView(
        workers=count,
        healthy_workers=sum(health.values()) if health else (0 if count == 0 else None),
        requests_active=active,
        requests_total=total,
        errors_total=errors,
        health=health,
    )
