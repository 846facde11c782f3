"""Fleets: SGLang replicas behind the real sglang-router, watched as one.

A fleet (``[fleets.NAME]``, backend.settings.FleetConfig) is replicas (a profile served on a host, several on one
host by port) and one router: PyPI's ``sglang-router`` (0.3.2), run on its host's Python as a host job, never
simulated. ``status`` reads each replica's own /metrics through its host's agent, and the router's /health,
/workers and Prometheus ``smg_*`` page through the router host's; the imbalance verdict names the replica that
lags by tok/s per stream and by queue, or says balanced, only where the numbers clear the noise.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from backend.errors import ConfigError
from backend.settings import FleetConfig, ReplicaConfig, Settings, host_address

if TYPE_CHECKING:
    from backend.connection import Connection

ROUTER_KIND = "router"  # the router's host job kind
ROUTER_MODULE = "sglang_router.launch_router"
ROUTER_VERSION = "0.3.2"  # the release whose flags, endpoints and metric names this module speaks
ROUTER_INSTALL = f"pip install sglang-router=={ROUTER_VERSION}"

ReplicaState = Literal["none", "starting", "ready", "orphaned", "stopping", "stopped", "crashed", "unreachable"]


def get_fleet(settings: Settings, name: str) -> FleetConfig:
    """The configured fleet ``name``; ConfigError (exit 2) naming the ones there are."""
    try:
        return settings.fleets[name]
    except KeyError:
        known = ", ".join(sorted(settings.fleets)) or "none"
        raise ConfigError(f"no fleet named {name!r} (configured: {known}; add one as [fleets.{name}])") from None


def replica_label(replica: ReplicaConfig) -> str:
    """``host:port``: how a replica is named to a person (several may share a host)."""
    return f"{replica.host}:{replica.port}"


def replica_url(settings: Settings, fleet: FleetConfig, replica: ReplicaConfig) -> str:
    """Where the router reaches ``replica``: its loopback when both run on one machine, else its host's address."""
    router_at = host_address(settings.hosts.get(fleet.router.host))
    at = host_address(settings.hosts.get(replica.host))
    return f"http://{'127.0.0.1' if at == router_at else at}:{replica.port}"


def router_url(fleet: FleetConfig) -> str:
    """The router's URL on its own host (it listens on that host's loopback)."""
    return f"http://127.0.0.1:{fleet.router.port}"


# --- status, typed for the CLI and the panel ---------------------------------------------------------------


@dataclass(frozen=True)
class RouterStatus:
    """The router as its host and its own endpoints say: ``healthy`` is its /health answering 200."""

    host: str
    url: str
    pid: int | None
    healthy: bool
    policy: str
    workers: int | None = None  # registered workers (/workers)
    healthy_workers: int | None = None  # of them, healthy as the router sees them (smg_worker_health)
    requests_active: int | None = None  # smg_worker_requests_active summed over workers
    requests_total: int | None = None  # smg_router_requests_total summed
    errors_total: int | None = None  # smg_router_request_errors_total summed
    error: str | None = None  # why it is not healthy, in words

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica: its server's state and pid on its host, the router's word on its health (false once the
    server is gone), and its own /metrics figures (None where it gave none)."""

    host: str
    url: str
    pid: int | None
    state: ReplicaState
    healthy: bool
    tok_s: float | None  # generation tok/s per running stream
    accept_len: float | None
    running: int | None
    queued: int | None
    port: int = 0
    label: str = ""

    def to_json(self) -> dict[str, Any]:
        keys = ("host", "url", "pid", "state", "healthy", "tok_s", "accept_len", "running", "queued")
        return {k: getattr(self, k) for k in keys}


@dataclass(frozen=True)
class Imbalance:
    """``verdict`` in words; ``lagging`` the lagging replica's url (None when balanced or not decidable)."""

    verdict: str
    lagging: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "lagging": self.lagging}


@dataclass(frozen=True)
class FleetStatus:
    name: str
    router: RouterStatus
    replicas: tuple[ReplicaStatus, ...]
    imbalance: Imbalance

    def to_json(self) -> dict[str, Any]:
        """What `specdeck fleet status --json` prints (the issue's shape)."""
        return {
            "router": self.router.to_json(),
            "replicas": [r.to_json() for r in self.replicas],
            "imbalance": self.imbalance.to_json(),
        }


class FleetLinks:
    """One connection per host a fleet uses (its replicas' and its router's), opened together, closed together."""

    def __init__(self, settings: Settings, fleet: FleetConfig, conns: dict[str, Connection]) -> None:
        self.settings = settings
        self.fleet = fleet
        self.conns = conns

    @classmethod
    async def open(cls, settings: Settings, name: str, *, shared: bool = False) -> FleetLinks:
        """Connect to every host of fleet ``name`` at once; ConnectionFailed (exit 3) if one cannot be reached,
        with the others closed."""
        from backend.connection import open_host

        fleet = get_fleet(settings, name)
        names = list(dict.fromkeys([*(r.host for r in fleet.replicas), fleet.router.host]))
        opened = await asyncio.gather(*(open_host(settings, h, shared=shared) for h in names), return_exceptions=True)
        conns = {h: c for h, c in zip(names, opened, strict=True) if not isinstance(c, BaseException)}
        failed = next((c for c in opened if isinstance(c, BaseException)), None)
        if failed is not None:
            await asyncio.gather(*(c.close() for c in conns.values()), return_exceptions=True)
            raise failed
        return cls(settings, fleet, conns)

    def conn(self, host: str) -> Connection:
        return self.conns[host]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.conns.values()), return_exceptions=True)

    async def __aenter__(self) -> FleetLinks:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def status(links: FleetLinks) -> FleetStatus:
    """The fleet as it is now: every replica's server and /metrics and the router's view, read concurrently."""
    fleet = links.fleet
    router_part, *replica_parts = await asyncio.gather(
        _router_view(links), *(_replica_view(links, r) for r in fleet.replicas)
    )
    router, health = router_part
    replicas = []
    for replica, (wire, scrape) in zip(fleet.replicas, replica_parts, strict=True):
        url = replica_url(links.settings, fleet, replica)
        replicas.append(_replica_status(replica, url, wire, scrape, health.get(url)))
    return FleetStatus(fleet.name, router, tuple(replicas), imbalance(replicas))


async def _http(conn: Connection, url: str, timeout: float = 2.0) -> dict:
    """A GET on the host's loopback through its agent: ``{"status", "text"}`` (status None when unreachable, or
    when the host itself cannot be asked)."""
    from backend.errors import ConnectionFailed, RemoteError

    try:
        return await conn.call("http.request", url=url, timeout=timeout)
    except (ConnectionFailed, RemoteError) as exc:
        return {"status": None, "error": str(exc)}


async def _replica_view(links: FleetLinks, replica: ReplicaConfig) -> tuple[dict, Any]:
    """The replica's server status on its host (the one on its port) and its /metrics read (None if none)."""
    from backend import prometheus
    from backend.errors import ConnectionFailed, RemoteError

    conn = links.conn(replica.host)
    try:
        wire = await conn.call("serve.status", port=replica.port)
    except (ConnectionFailed, RemoteError) as exc:
        return {"state": "unreachable", "error": str(exc)}, None
    if wire.get("port") != replica.port:  # the host's newest server, on another port: none runs on this one
        wire = {"state": "none"}
    if wire.get("state") not in ("ready", "starting"):
        return wire, None
    page = await _http(conn, f"http://127.0.0.1:{replica.port}/metrics")
    return wire, prometheus.read_scrape(page.get("text") or "") if page.get("status") == 200 else None


def _replica_status(
    replica: ReplicaConfig, url: str, wire: dict, scrape: Any, router_healthy: bool | None
) -> ReplicaStatus:
    engine = scrape.engine if scrape is not None else {}
    running = engine.get("num_running_reqs")
    queued = engine.get("num_queue_reqs")
    gen = engine.get("gen_throughput")
    state = wire.get("state") or "none"
    alive = state in ("ready", "starting", "orphaned")
    return ReplicaStatus(
        host=replica.host,
        url=url,
        pid=wire.get("pid") if alive else None,
        state=state,
        healthy=bool(router_healthy) and alive,
        tok_s=round(gen / running, 2) if gen is not None and running else None,
        accept_len=engine.get("spec_accept_length"),
        running=None if running is None else int(running),
        queued=None if queued is None else int(queued),
        port=replica.port,
        label=replica_label(replica),
    )


async def _router_view(links: FleetLinks) -> tuple[RouterStatus, dict[str, bool]]:
    """The router's status and its word on each worker's health, by worker url."""
    from backend import router_metrics

    fleet = links.fleet
    conn = links.conn(fleet.router.host)
    job = await router_job(conn, fleet.name)
    base = router_url(fleet)
    prom = f"http://127.0.0.1:{fleet.router.prometheus_port}/metrics"
    health_page, workers_page, metrics_page = await asyncio.gather(
        _http(conn, base + "/health"), _http(conn, base + "/workers"), _http(conn, prom)
    )
    seen = router_metrics.read(
        workers_page.get("text") if workers_page.get("status") == 200 else None,
        metrics_page.get("text") if metrics_page.get("status") == 200 else None,
    )
    healthy = job is not None and health_page.get("status") == 200
    error = None
    if job is None:
        error = "the router is not running (specdeck fleet up starts it)"
    elif not healthy:
        error = health_page.get("error") or f"its /health answered {health_page.get('status')}"
    router = RouterStatus(
        host=fleet.router.host,
        url=base,
        pid=job.pid if job is not None else None,
        healthy=healthy,
        policy=fleet.router.policy,
        workers=seen.workers,
        healthy_workers=seen.healthy_workers,
        requests_active=seen.requests_active,
        requests_total=seen.requests_total,
        errors_total=seen.errors_total,
        error=error,
    )
    return router, seen.health if healthy else {}


async def router_job(conn: Connection, fleet: str):
    """The fleet's running router job on its host (the newest), or None."""
    from backend.errors import ConnectionFailed, RemoteError
    from backend.jobs import list_jobs

    try:
        jobs = await list_jobs(conn, kind=ROUTER_KIND)
    except (ConnectionFailed, RemoteError):
        return None
    mine = [j for j in jobs if j.active and j.args.get("fleet") == fleet]
    return max(mine, key=lambda j: j.started or 0) if mine else None


# --- imbalance --------------------------------------------------------------------------------------------

LAG_FRACTION = 0.25  # a replica lags when its tok/s per stream is this far under the others' median …
MIN_STREAMS = 2  # … and each compared replica has at least this many running streams (fewer: noise)
QUEUE_LAG = 4  # or when it queues this many more requests than the least-queued replica


def imbalance(replicas: list[ReplicaStatus]) -> Imbalance:
    """Which replica lags (by tok/s per stream, then by queue), or balanced; says when it cannot tell."""
    gone = [r for r in replicas if not r.healthy]
    if gone:
        worst = gone[0]
        why = "is gone" if worst.state not in ("ready", "starting") else "is unhealthy as the router sees it"
        return Imbalance(f"{worst.label} {why}", worst.url)
    measured = [r for r in replicas if r.tok_s is not None and (r.running or 0) >= MIN_STREAMS]
    queues = [r for r in replicas if r.queued is not None]
    if len(queues) >= 2:
        most = max(queues, key=lambda r: r.queued or 0)
        least = min(queues, key=lambda r: r.queued or 0)
        if (most.queued or 0) - (least.queued or 0) >= QUEUE_LAG:
            return Imbalance(
                f"{most.label} lags: {most.queued} queued against {least.queued} on {least.label}",
                most.url,
            )
    if len(measured) < 2:
        return Imbalance(f"too little load to judge (needs {MIN_STREAMS}+ running streams on 2+ replicas)")
    median = statistics.median(r.tok_s or 0.0 for r in measured)
    slow = min(measured, key=lambda r: r.tok_s or 0.0)
    if (slow.tok_s or 0.0) < median * (1 - LAG_FRACTION):
        return Imbalance(
            f"{slow.label} lags: {slow.tok_s:.1f} tok/s per stream against the median {median:.1f}",
            slow.url,
        )
    return Imbalance("balanced")
