"""What sglang-router says of its workers: its ``GET /workers`` JSON and its Prometheus page, as 0.3.x names it
(``smg_*``, sgl-model-gateway ``observability/metrics.rs``) or 0.2.x did (``sgl_router_*``, sgl-router
``src/metrics.rs``). Pure: bad or missing input reads as nothing known, never an exception, and never as a
figure: a /workers answer that is not JSON (a paste shortened with ``...``) is unreadable, not "0 workers".
``RouterView.notes`` says what could not be read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Each figure's sample names, the model gateway's (0.3.x) first, then the router's own (0.2.x).
HEALTH = ("smg_worker_health", "sgl_router_worker_health")
ACTIVE = ("smg_worker_requests_active", "sgl_router_running_requests")
TOTAL = ("smg_router_requests_total", "sgl_router_requests_total")
PROCESSED = ("sgl_router_processed_requests_total",)  # 0.2.x, per worker: the routed count without TOTAL
ERRORS = ("smg_router_request_errors_total", "sgl_router_request_errors_total")
WORKERS = ("sgl_router_active_workers",)  # 0.2.x: the count alone
_READ = tuple(n.removesuffix("_total") for n in (*HEALTH, *ACTIVE, *TOTAL, *PROCESSED, *ERRORS, *WORKERS))


@dataclass(frozen=True)
class RouterView:
    """The router's figures: worker counts, requests, errors and each worker's health by url (None: not said);
    ``notes``: what of the answers could not be read."""

    workers: int | None = None
    healthy_workers: int | None = None
    requests_active: int | None = None
    requests_total: int | None = None
    errors_total: int | None = None
    health: dict[str, bool] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _workers(text: str | None, notes: list[str]) -> list[dict[str, Any]] | None:
    """The worker entries of a /workers answer (``{"workers": [...]}`` or a bare list); None when there is no
    answer or it cannot be read (said in ``notes``)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        cut = " (shortened with '...')" if "..." in text or "…" in text else ""
        notes.append(f"the /workers answer is not valid JSON{cut}: the workers are unknown")
        return None
    items = data.get("workers") if isinstance(data, dict) else data
    if not isinstance(items, list):
        notes.append("the /workers answer holds no list of workers: the workers are unknown")
        return None
    return [w for w in items if isinstance(w, dict)]


def _healthy(entry: dict[str, Any]) -> bool | None:
    for key in ("is_healthy", "healthy"):
        value = entry.get(key)
        if isinstance(value, bool):
            return value
    return None


def _add(total: int | None, value: float) -> int:
    return (total or 0) + int(value)


def read(workers_json: str | None, metrics_text: str | None) -> RouterView:
    """Merge the two pages; the Prometheus gauge wins for health (it is what the router acts on)."""
    notes: list[str] = []
    entries = _workers(workers_json, notes)
    health: dict[str, bool] = {}
    for entry in entries or ():
        url, ok = entry.get("url"), _healthy(entry)
        if isinstance(url, str) and ok is not None:
            health[url.rstrip("/")] = ok
    active = total = processed = errors = counted = None
    if metrics_text:
        from backend.measure.prometheus import families, only_families

        found, said = families(only_families(metrics_text, _READ))
        notes += said
        old = False
        for family in found:
            for sample in family.samples:
                name, value = sample.name, sample.value
                old = old or name.startswith("sgl_router_")
                worker = (sample.labels.get("worker") or sample.labels.get("worker_url") or "").rstrip("/")
                if name in HEALTH and worker:
                    health[worker] = value >= 1
                elif name in ACTIVE:
                    active = _add(active, value)
                elif name in TOTAL:
                    total = _add(total, value)
                elif name in PROCESSED:
                    processed = _add(processed, value)
                elif name in ERRORS:
                    errors = _add(errors, value)
                elif name in WORKERS:
                    counted = int(value)
        if old:
            notes.append("a 0.2.x router's page (sgl_router_* names), read as 0.3.x's smg_* figures")
    count = len(entries) if entries is not None else (len(health) or counted)
    return RouterView(
        workers=count,
        healthy_workers=sum(health.values()) if health else (0 if count == 0 else None),
        requests_active=active,
        requests_total=total if total is not None else processed,
        errors_total=errors,
        health=health,
        notes=tuple(notes),
    )
