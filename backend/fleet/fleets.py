"""Fleets: SGLang replicas behind the real sglang-router, watched as one.

A fleet (``[fleets.NAME]``, backend.settings.model.FleetConfig) is replicas (a profile served on a host, several on one
host by port) and one router: PyPI's ``sglang-router`` (0.3.2), run on its host's Python as a host job, never
simulated. ``status`` reads each replica's own /metrics through its host's agent, and the router's /health,
/workers and Prometheus ``smg_*`` page through the router host's; the imbalance verdict names the replica that
lags by tok/s per stream and by queue, or says balanced, only where the numbers clear the noise.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from backend.errors import ConfigError, ConnectionFailed, OperationFailed, RemoteError, SpecdeckError, UsageError
from backend.fleet import key as fleet_key
from backend.jobs import ACTIVE, JobInfo
from backend.serve import host_info, preflight_checks
from backend.serve.preflight_checks import Check, Preflight
from backend.settings.model import FleetConfig, ProfileConfig, ReplicaConfig, Settings
from backend.settings.validation import host_address

if TYPE_CHECKING:
    from backend.connection import Connection
    from backend.measure.bench import BenchPlan, OnProgress

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


def describe(fleet: FleetConfig) -> str:
    """The fleet in a line: ``baseline@gpu-a:30000, baseline@gpu-b:30000 behind sglang-router cache_aware at
    gpu-a:8000``."""
    replicas = ", ".join(f"{r.profile}@{replica_label(r)}" for r in fleet.replicas)
    rt = fleet.router
    return f"{replicas} behind sglang-router {rt.policy} at {rt.host}:{rt.port}"


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
    down: str | None = None  # why it cannot be asked, in a few words for the verdict (None while healthy)
    notes: tuple[str, ...] = ()  # what of its /workers and /metrics answers could not be read

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "down"}  # ``error`` says it in full


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
    # The server's accept length from totals (its finished requests' tokens over their verify calls, 0.5.13+);
    # where it has no verify counter, the last decode-log interval's gauge, and ``accept_basis`` says which.
    accept_len: float | None
    running: int | None
    queued: int | None
    port: int = 0
    label: str = ""
    accept_basis: str | None = None  # "totals" | "interval" (None without an accept length)

    def to_json(self) -> dict[str, Any]:
        keys = ("host", "url", "pid", "state", "healthy", "tok_s", "accept_len", "running", "queued")  # the contract
        return {k: getattr(self, k) for k in keys}

    def accept_cell(self) -> str:
        """The accept length for a table: ``2.31``, or ``2.31i`` where it is the last interval's (``INTERVAL_NOTE``)."""
        if self.accept_len is None:
            return "-"
        return f"{self.accept_len:.2f}" + ("i" if self.accept_basis == "interval" else "")


INTERVAL_NOTE = (
    "accept: from the finished requests' totals; i: the last decode-log interval's gauge (reset at every interval: "
    "SGLang before 0.5.13 has no verify-call counter to total)"
)


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
    key: str = ""  # how the fleet's key reaches replicas and router (fleet_key.HOW), "" for an all-loopback fleet

    def workers_text(self) -> str:
        """``1/2 workers healthy``: the replicas the router counts healthy whose server still runs (the rows'
        word), and the router's own count where its last health check has not caught up ('' without workers)."""
        r = self.router
        if r.workers is None:
            return ""
        healthy = sum(1 for x in self.replicas if x.healthy)
        text = f"{healthy}/{r.workers} workers healthy"
        if r.healthy_workers is not None and r.healthy_workers != healthy:
            text += f" (the router still counts {r.healthy_workers}: its health check has not caught up)"
        return text

    def to_json(self) -> dict[str, Any]:
        """What `specdeck fleet status --json` prints (the issue's shape, and the key's way)."""
        return {
            "router": self.router.to_json(),
            "replicas": [r.to_json() for r in self.replicas],
            "imbalance": self.imbalance.to_json(),
            "key": self.key or None,
        }


class FleetLinks:
    """One connection per host a fleet uses (its replicas' and its router's), opened together, closed together.
    ``failed``: the hosts that could not be reached (a partial open), each with why."""

    def __init__(
        self, settings: Settings, fleet: FleetConfig, conns: dict[str, Connection], failed: dict[str, str] | None = None
    ) -> None:
        self.settings = settings
        self.fleet = fleet
        self.conns = conns
        self.failed = failed or {}

    @classmethod
    async def open(cls, settings: Settings, name: str, *, shared: bool = False, partial: bool = False) -> FleetLinks:
        """Connect to every host of fleet ``name`` at once. A host that cannot be reached raises ConnectionFailed
        (exit 3, the others closed), or with ``partial`` is kept in ``failed``: what runs there reads as
        unreachable (``status`` shows the rest of the fleet)."""
        from backend.connection import open_host

        fleet = get_fleet(settings, name)
        names = list(dict.fromkeys([*(r.host for r in fleet.replicas), fleet.router.host]))
        opened = await asyncio.gather(*(open_host(settings, h, shared=shared) for h in names), return_exceptions=True)
        conns = {h: c for h, c in zip(names, opened, strict=True) if not isinstance(c, BaseException)}
        errors = {h: c for h, c in zip(names, opened, strict=True) if isinstance(c, BaseException)}
        fatal = next((e for e in errors.values() if not (partial and isinstance(e, ConnectionFailed))), None)
        if fatal is not None:
            await asyncio.gather(*(c.close() for c in conns.values()), return_exceptions=True)
            raise fatal
        return cls(settings, fleet, conns, {h: str(e) for h, e in errors.items()})

    @classmethod
    def supervised(cls, settings: Settings, name: str) -> FleetLinks:
        """The panel's links to fleet ``name``: each host's connection kept up in the background (reconnecting
        after a drop); returns at once, and a host not yet connected reads as unreachable in ``status``."""
        from backend.connection import Connection, resolve_host

        fleet = get_fleet(settings, name)
        conns = {}
        for host in dict.fromkeys([*(r.host for r in fleet.replicas), fleet.router.host]):
            conns[host] = Connection(resolve_host(settings, host))
            conns[host].supervise()
        return cls(settings, fleet, conns)

    def conn(self, host: str) -> Connection:
        """The connection to ``host``; ConnectionFailed for a host a partial open could not reach."""
        if host in self.failed:
            raise ConnectionFailed(f"{host} cannot be reached: {self.failed[host]}")
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
    key = fleet_key.HOW if beyond_loopback(links.settings, fleet) else ""
    replicas = []
    for replica, (wire, scrape) in zip(fleet.replicas, replica_parts, strict=True):
        url = replica_url(links.settings, fleet, replica)
        replicas.append(_replica_status(replica, url, wire, scrape, health.get(url)))
    return FleetStatus(fleet.name, router, tuple(replicas), imbalance(replicas, router.down), key)


async def _http(conn: Connection, url: str, timeout: float = 2.0) -> dict[str, Any]:
    """A GET on the host's loopback through its agent: ``{"status", "text"}`` (status None when unreachable, or
    when the host itself cannot be asked)."""
    try:
        answer: dict[str, Any] = await conn.call("http.request", url=url, timeout=timeout)
        return answer
    except (ConnectionFailed, RemoteError) as exc:
        return {"status": None, "error": str(exc)}


async def _replica_view(links: FleetLinks, replica: ReplicaConfig) -> tuple[dict[str, Any], Any]:
    """The replica's server status on its host (the one on its port) and its /metrics read (None if none)."""
    try:
        conn = links.conn(replica.host)
        wire = await conn.call("serve.status", port=replica.port)
    except (ConnectionFailed, RemoteError) as exc:
        return {"state": "unreachable", "error": str(exc)}, None
    if wire.get("port") != replica.port:  # the host's newest server, on another port: none runs on this one
        wire = {"state": "none"}
    if wire.get("state") not in ("ready", "starting"):
        return wire, None
    page = await _http(conn, f"http://127.0.0.1:{replica.port}/metrics")
    if page.get("status") != 200:
        return wire, None
    # A page's parse takes milliseconds: off the event loop, so the panel's loop stays free meanwhile.
    return wire, await asyncio.to_thread(_figures, page.get("text") or "")


# The gauges a replica's row shows: the page's other families (its histograms above all) are most of its parse.
_FIGURES = (
    "sglang:gen_throughput",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:spec_accept_length",
    "sglang:generation_tokens_total",  # with the verify calls: the accept length from totals
    "sglang:spec_verify_calls_total",
)


def _figures(text: str) -> Any:
    from backend.measure import prometheus

    return prometheus.read_scrape(prometheus.only_families(text, _FIGURES))


def _replica_status(
    replica: ReplicaConfig, url: str, wire: dict[str, Any], scrape: Any, router_healthy: bool | None
) -> ReplicaStatus:
    engine = scrape.engine if scrape is not None else {}
    accept, basis = (scrape.run_accept_length() if scrape is not None else None), "totals"
    if accept is None:
        accept, basis = engine.get("spec_accept_length"), "interval"
    running = engine.get("num_running_reqs")
    queued = engine.get("num_queue_reqs")
    gen = engine.get("gen_throughput")
    state: ReplicaState = wire.get("state") or "none"
    alive = state in ("ready", "starting", "orphaned")
    return ReplicaStatus(
        host=replica.host,
        url=url,
        pid=wire.get("pid") if alive else None,
        state=state,
        healthy=bool(router_healthy) and alive,
        tok_s=round(gen / running, 2) if gen is not None and running else None,
        accept_len=accept,
        running=None if running is None else int(running),
        queued=None if queued is None else int(queued),
        port=replica.port,
        label=replica_label(replica),
        accept_basis=None if accept is None else basis,
    )


async def _router_view(links: FleetLinks) -> tuple[RouterStatus, dict[str, bool]]:
    """The router's status and its word on each worker's health, by worker url."""
    from backend.fleet import router_metrics

    fleet = links.fleet
    base = router_url(fleet)
    try:
        conn = links.conn(fleet.router.host)
    except ConnectionFailed as exc:
        status = RouterStatus(fleet.router.host, base, None, False, fleet.router.policy, error=str(exc))
        return replace(status, down="its host cannot be reached"), {}
    job = await _router_wire(conn, fleet.name)
    prom = f"http://127.0.0.1:{fleet.router.prometheus_port}/metrics"
    health_page, workers_page, metrics_page = await asyncio.gather(
        _http(conn, base + "/health"), _http(conn, base + "/workers"), _http(conn, prom)
    )
    seen = router_metrics.read(
        workers_page.get("text") if workers_page.get("status") == 200 else None,
        metrics_page.get("text") if metrics_page.get("status") == 200 else None,
    )
    healthy = job is not None and health_page.get("status") == 200
    error = down = None
    if job is None:
        error, down = "the router is not running (specdeck fleet up starts it)", "not running"
    elif not healthy:
        error = health_page.get("error") or f"its /health answered {health_page.get('status')}"
        down = "not answering"
    router = RouterStatus(
        host=fleet.router.host,
        url=base,
        pid=(job.get("child_pid") or job.get("pid")) if job is not None else None,  # the router, not its runner
        healthy=healthy,
        policy=fleet.router.policy,
        workers=seen.workers,
        healthy_workers=seen.healthy_workers,
        requests_active=seen.requests_active,
        requests_total=seen.requests_total,
        errors_total=seen.errors_total,
        error=error,
        down=down,
        notes=seen.notes,
    )
    return router, seen.health if healthy else {}


async def _router_wire(conn: Connection, fleet: str) -> dict[str, Any] | None:
    """The host's description of the fleet's running router job (the newest), or None."""
    try:
        listed = await conn.call("jobs.list", kind=ROUTER_KIND)
    except (ConnectionFailed, RemoteError):
        return None
    mine = [j for j in listed if j.get("state") in ACTIVE and (j.get("args") or {}).get("fleet") == fleet]
    return max(mine, key=lambda j: j.get("started") or 0) if mine else None


async def router_job(conn: Connection, fleet: str) -> JobInfo | None:
    """The fleet's running router job on its host (the newest), or None."""
    wire = await _router_wire(conn, fleet)
    return None if wire is None else JobInfo.from_json(wire)


# --- lifecycle: preflight, up, down, bench --------------------------------------------------------------

READY_WAIT_S = 3600.0  # a replica's startup (Kimi-K2 on 8 GPUs takes minutes)
ROUTER_WAIT_S = 120.0  # the router's start and its workers' registration (seconds on a healthy fleet)
ROUTER_POLL_S = 0.1
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def beyond_loopback(settings: Settings, fleet: FleetConfig) -> list[ReplicaConfig]:
    """The replicas on another machine than the router's: they must listen where it reaches them, so the fleet
    gets a key (``fleet_key``)."""
    router_at = host_address(settings.hosts.get(fleet.router.host))
    return [r for r in fleet.replicas if host_address(settings.hosts.get(r.host)) != router_at]


def replica_profile(
    settings: Settings, fleet: FleetConfig, replica: ReplicaConfig, listen: str = "0.0.0.0", key_file: str = ""
) -> ProfileConfig:
    """The profile ``replica`` is served with: on its port; where several replicas share a machine, on its own
    GPUs (``--base-gpu-id``: the GPUs of the replicas before it there are skipped); on a machine other than
    the router's, listening on ``listen`` (its address there where known: the loopback every other server
    listens on would keep the router out); with ``key_file`` (the host's copy of the fleet's key), reading it
    with SGLang's ``--config``."""
    profile = settings.profiles[replica.profile]
    address = host_address(settings.hosts.get(replica.host))
    index = fleet.replicas.index(replica)
    before = [r for r in fleet.replicas[:index] if host_address(settings.hosts.get(r.host)) == address]
    extra = profile.extra_args
    if before:
        extra += ("--base-gpu-id", str(sum(settings.profiles[r.profile].tp for r in before)))
    beyond = address != host_address(settings.hosts.get(fleet.router.host))
    if key_file:
        extra += ("--config", key_file)
    return replace(profile, port=replica.port, extra_args=extra, listen=listen if beyond else profile.listen)


# sglang-router 0.3.2 takes the worker key only as --api-key (argv): its own entry, given the key from the file.
ROUTER_WITH_KEY = (
    "import json, sys; from sglang_router.launch_router import launch_router, parse_router_args; "
    "args = parse_router_args(sys.argv[2:]); args.api_key = json.load(open(sys.argv[1]))['api-key']; "
    "launch_router(args)"
)


def router_argv(settings: Settings, fleet: FleetConfig, python: str, key_file: str = "") -> list[str]:
    """The real router's launch command on its host (``python``: that host's): every replica's URL, the policy,
    loopback ports; with ``key_file`` (the host's copy of the fleet's key), the key it sends every worker."""
    router = fleet.router
    urls = [replica_url(settings, fleet, r) for r in fleet.replicas]
    start = [python, "-c", ROUTER_WITH_KEY, key_file] if key_file else [python, "-m", ROUTER_MODULE]
    argv = [*start, "--worker-urls", *urls, "--policy", router.policy]
    argv += ["--host", "127.0.0.1", "--port", str(router.port)]
    return [*argv, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(router.prometheus_port)]


@dataclass(frozen=True)
class FleetPreflight:
    """Every replica's preflight and the router's own checks, all asked before anything starts."""

    replicas: tuple[tuple[ReplicaConfig, Preflight], ...]
    router: tuple[Check, ...]

    @property
    def failures(self) -> list[str]:
        out = [f"{replica_label(r)}: {c.message}" for r, p in self.replicas for c in p.failures]
        return out + [f"router: {c.message}" for c in self.router if c.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "replicas": [{"replica": replica_label(r), **p.to_json()} for r, p in self.replicas],
            "router": [c.to_json() for c in self.router],
        }


class FleetPreflightFailed(UsageError):
    """``up`` refused before starting anything: each failed check, named by its replica (or the router)."""

    def __init__(self, name: str, checks: FleetPreflight) -> None:
        self.preflight = checks
        super().__init__(f"not starting fleet {name}: " + "; ".join(checks.failures))


async def _router_checks(links: FleetLinks, running: bool) -> tuple[Check, ...]:
    """The router host's Python has sglang-router (the release this module speaks), and its ports are free."""
    fleet, conn = links.fleet, links.conn(links.fleet.router.host)
    asked = (conn.call("serve.port", port=p) for p in (fleet.router.port, fleet.router.prometheus_port))
    info, *ports = await asyncio.gather(host_info.host_info(conn), *asked)
    version = info.versions.get("sglang_router")
    where = f"{conn.host.name}'s Python ({conn.host.python})"
    if version is None:
        checks = [Check("router", "fail", f"sglang-router is not installed in {where}: run `{ROUTER_INSTALL}` there")]
    elif version != ROUTER_VERSION:
        text = f"sglang-router {version} in {where}; specdeck speaks {ROUTER_VERSION} (`{ROUTER_INSTALL}`)"
        checks = [Check("router", "warn", text)]
    else:
        checks = [Check("router", "ok", f"sglang-router {version} in {where}")]
    if not running:  # a running router of this fleet holds them itself
        for what, port in zip(("port", "prometheus_port"), ports, strict=True):
            if not port["free"]:
                checks.append(Check(f"router {what}", "fail", f"port {port['port']} on {conn.host.name} is taken"))
    return tuple(checks)


async def preflight(links: FleetLinks, *, force: bool = False) -> FleetPreflight:
    """Every check ``up`` makes, all at once; replicas that already serve on their port are not checked again."""
    fleet, settings = links.fleet, links.settings
    current = [wire for wire, _ in await asyncio.gather(*(_replica_view(links, r) for r in fleet.replicas))]
    todo = [r for r, wire in zip(fleet.replicas, current, strict=True) if wire.get("state") not in _ALIVE]
    others = tuple(  # a server of another profile on a replica's port is not the fleet's
        (r, Preflight(r.profile, (Check("server", "fail", _other_server(r, wire)),)))
        for r, wire in zip(fleet.replicas, current, strict=True)
        if wire.get("state") in _ALIVE and wire.get("profile") != r.profile
    )
    own_keys = tuple(  # a key of the profile's own would lock the router out, or the replica out of the fleet's
        (r, Preflight(r.profile, (Check("key", "fail", _own_key(settings, r)),)))
        for r in (fleet.replicas if beyond_loopback(settings, fleet) else ())
        if _own_key(settings, r)
    )
    router_running = await router_job(links.conn(fleet.router.host), fleet.name) is not None
    checked, router = await asyncio.gather(
        asyncio.gather(
            *(
                preflight_checks.preflight(
                    links.conn(r.host), settings, replica_profile(settings, fleet, r), force=force
                )
                for r in todo
            )
        ),
        _router_checks(links, router_running),
    )
    return FleetPreflight(tuple(zip(todo, checked, strict=True)) + others + own_keys, router)


def _own_key(settings: Settings, replica: ReplicaConfig) -> str:
    """Why the replica's profile cannot take the fleet's key ("" when it can)."""
    extra = settings.profiles[replica.profile].extra_args
    own = [flag for flag in ("--api-key", "--admin-api-key", "--config") if flag in extra]
    if not own:
        return ""
    return (
        f"profile {replica.profile} sets {' and '.join(own)} in its extra arguments: a fleet whose replicas leave "
        "loopback gives them and its router a key of its own; remove them from the profile"
    )


async def _keys(links: FleetLinks) -> dict[str, str]:
    """The fleet's key on every host it uses (replicas' and router's): each host's 0600 copy, by host name; {}
    for a fleet all on the router's machine (nothing of it leaves loopback)."""
    fleet = links.fleet
    if not beyond_loopback(links.settings, fleet):
        return {}
    key = fleet_key.key_for(fleet.name)
    hosts = list(dict.fromkeys([*(r.host for r in fleet.replicas), fleet.router.host]))
    kept = await asyncio.gather(*(links.conn(h).call("serve.key", name=f"fleet-{fleet.name}", key=key) for h in hosts))
    return {host: out["path"] for host, out in zip(hosts, kept, strict=True)}


async def _listen_address(links: FleetLinks, replica: ReplicaConfig) -> str:
    """Where a replica beyond loopback listens: its host's address as the router reaches it, where that is one
    of the machine's own (an IP it can bind); else every interface."""
    at = host_address(links.settings.hosts.get(replica.host))
    try:
        ipaddress.ip_address(at)
    except ValueError:
        return "0.0.0.0"  # a name: which interface it means is not known here
    out = await links.conn(replica.host).call("serve.port", port=replica.port, address=at)
    return at if out.get("address_local") else "0.0.0.0"


def _other_server(replica: ReplicaConfig, wire: dict[str, Any]) -> str:
    return (
        f"port {replica.port} serves profile {wire.get('profile')} (job {wire.get('job')}), not the fleet's "
        f"{replica.profile}: stop it first with `specdeck serve stop --port {replica.port}`"
    )


_ALIVE = ("starting", "ready", "orphaned")


async def up(links: FleetLinks, *, force: bool = False, on_event: Callable[[str], None] | None = None) -> FleetStatus:
    """Start every replica that is not serving (hosts at once, one replica at a time per host), wait until
    all are ready, then the router with every replica's URL, and wait until it has registered them all.

    Raises FleetPreflightFailed (nothing started) or OperationFailed (what this call started is stopped)."""
    from backend.serve import serving
    from backend.serve.server_status import ENDED_STATES

    say = on_event or (lambda _text: None)
    fleet, settings = links.fleet, links.settings
    checks = await preflight(links, force=force)
    if not checks.ok:
        raise FleetPreflightFailed(fleet.name, checks)
    started: list[ReplicaConfig] = []
    keys = await _keys(links)
    beyond = beyond_loopback(settings, fleet)
    listen = dict(zip(beyond, await asyncio.gather(*(_listen_address(links, r) for r in beyond)), strict=True))
    if beyond:
        where = ", ".join(f"{replica_label(r)} on {listen[r]}:{r.port}" for r in beyond)
        say(f"listening beyond loopback, with the fleet's key: {where}")

    async def start_on(host: str) -> None:
        for replica, _ in checks.replicas:
            if replica.host == host:
                profile = replica_profile(settings, fleet, replica, listen.get(replica, "0.0.0.0"), keys.get(host, ""))
                await serving.start(links.conn(host), settings, profile, force=force, tags={"fleet": fleet.name})
                started.append(replica)
                say(f"{replica_label(replica)}: started {profile.name}")

    async def ready(replica: ReplicaConfig) -> None:
        conn = links.conn(replica.host)
        wire = await conn.call("serve.status", port=replica.port)
        last = await serving.wait(conn, wire.get("job"), until=("ready", *ENDED_STATES), within=READY_WAIT_S)
        if last.get("state") != "ready":
            why = last.get("error") or f"it is {last.get('state')}"
            raise OperationFailed(f"replica {replica_label(replica)} did not become ready: {why}")
        say(f"{replica_label(replica)}: ready")

    try:
        await asyncio.gather(*(start_on(h) for h in dict.fromkeys(r.host for r, _ in checks.replicas)))
        await asyncio.gather(*(ready(r) for r in fleet.replicas))
        await _start_router(links, say, keys.get(fleet.router.host, ""))
    except BaseException:
        await asyncio.gather(*(stop_replica(links, r) for r in started), return_exceptions=True)
        raise
    return await status(links)


async def _start_router(links: FleetLinks, say: Callable[[str], None], key_file: str) -> None:
    fleet = links.fleet
    conn = links.conn(fleet.router.host)
    job = await router_job(conn, fleet.name)
    if job is None:
        urls = [replica_url(links.settings, fleet, r) for r in fleet.replicas]
        args = {"fleet": fleet.name, "port": fleet.router.port, "policy": fleet.router.policy, "workers": urls}
        wire = await conn.call(
            "jobs.start",
            kind=ROUTER_KIND,
            argv=router_argv(links.settings, fleet, conn.host.python, key_file),
            args=args,
            env={},
        )
        job = JobInfo.from_json(wire)
        say(f"router: started sglang-router on {fleet.router.host}:{fleet.router.port} (job {job.id})")
    try:
        await _router_ready(conn, job, len(fleet.replicas))
    except BaseException:
        await conn.call("jobs.cancel", id=job.id)
        raise
    say(f"router: {len(fleet.replicas)} workers registered")


async def _router_ready(conn: Connection, job: JobInfo, workers: int) -> None:
    """Until the router answers /health and lists every worker healthy; OperationFailed with its log's last
    lines if it exits first, or after ROUTER_WAIT_S."""
    from backend.fleet import router_metrics
    from backend.jobs import get_job

    base = f"http://127.0.0.1:{job.port}"
    deadline = time.monotonic() + ROUTER_WAIT_S
    while True:
        current = await get_job(conn, job.id)
        if not current.active:
            tail = (await conn.call("jobs.tail", id=job.id, lines=5)).get("lines") or []
            last = next((line for line in reversed(tail) if line.strip()), "no output")
            last = _ANSI.sub("", last).strip()  # its Rust log lines come coloured
            raise OperationFailed(f"sglang-router exited ({current.reason or current.state}): {last}")
        health, listed = await asyncio.gather(_http(conn, base + "/health"), _http(conn, base + "/workers"))
        if health.get("status") == 200 and listed.get("status") == 200:
            seen = router_metrics.read(listed.get("text"), None)
            if seen.workers == workers and seen.healthy_workers == workers:
                return
        if time.monotonic() > deadline:
            raise OperationFailed(f"sglang-router did not register its {workers} workers in {ROUTER_WAIT_S:.0f} s")
        await asyncio.sleep(ROUTER_POLL_S)


async def stop_replica(links: FleetLinks, replica: ReplicaConfig) -> None:
    """Stop one replica's server (the router marks it unhealthy at its next health check)."""
    from backend.serve import serving

    await serving.stop(links.conn(replica.host), port=replica.port)


async def live(links: FleetLinks) -> bool:
    """Whether anything of the fleet runs (its router, or a replica's server)."""
    fleet = links.fleet
    router = await router_job(links.conn(fleet.router.host), fleet.name)
    views = await asyncio.gather(*(_replica_view(links, r) for r in fleet.replicas))
    return router is not None or any(wire.get("state") in _ALIVE for wire, _ in views)


async def down(links: FleetLinks) -> list[str]:
    """Stop the router, then every replica (hosts at once); returns what was stopped, by name."""
    fleet = links.fleet
    conn = links.conn(fleet.router.host)
    stopped = []
    job = await router_job(conn, fleet.name)
    if job is not None:
        await conn.call("jobs.cancel", id=job.id)
        stopped.append("router")
    views = await asyncio.gather(*(_replica_view(links, r) for r in fleet.replicas))
    alive = [r for r, (wire, _) in zip(fleet.replicas, views, strict=True) if wire.get("state") in _ALIVE]
    # Every replica is stopped whatever another's stop meets; what went wrong is said once, for all of them.
    results = await asyncio.gather(*(stop_replica(links, r) for r in alive), return_exceptions=True)
    for exc in results:
        if isinstance(exc, BaseException) and not isinstance(exc, SpecdeckError):
            raise exc
    failed = [f"{replica_label(r)}: {e}" for r, e in zip(alive, results, strict=True) if e is not None]
    stopped += [replica_label(r) for r, e in zip(alive, results, strict=True) if e is None]
    if failed:
        raise OperationFailed(f"{'; '.join(failed)} (stopped: {', '.join(stopped) or 'nothing'})")
    return stopped


async def bench(links: FleetLinks, plan: BenchPlan, on_progress: OnProgress | None = None) -> dict[str, Any]:
    """specdeck's bench sent through the router (from its host), as `specdeck bench` sends it to a server."""
    from backend.measure import bench as bench_mod

    fleet = links.fleet
    conn = links.conn(fleet.router.host)
    job = await router_job(conn, fleet.name)
    if job is None:
        name = fleet.name
        raise OperationFailed(f"fleet {name}'s router is not running: start it with `specdeck fleet up {name}`")
    from backend.serve.command_line import target_path

    profiles = sorted({r.profile for r in fleet.replicas})
    # The router's job records no target: the replicas' one (where they share it) renders the prompts through its
    # chat template, looked up on the router's host, as a server's bench does; replicas of several targets: raw.
    targets = {target_path(links.settings, links.settings.profiles[r.profile]) for r in fleet.replicas}
    model = targets.pop() if len(targets) == 1 else None
    server = replace(job, args={**job.args, "profile": "+".join(profiles), "model": model})
    result = await bench_mod.run_bench(conn, server, plan, on_progress)
    return {**result, "replicas": len(fleet.replicas)}  # the judge's: per replica against one server's baseline


def bench_plan(fleet: FleetConfig) -> BenchPlan:
    """The panel's bench through the router: enough streams that every replica runs MIN_STREAMS of them (so the
    imbalance verdict can judge while it runs), and two rounds of them."""
    from backend.measure.bench import BenchPlan

    streams = MIN_STREAMS * len(fleet.replicas)
    return BenchPlan(requests=2 * streams, concurrency=streams)


# --- imbalance --------------------------------------------------------------------------------------------

# vllm-htop's rules for vLLM replicas (its imbalance and load-balance checks), read for SGLang's figures: an
# outlier against the median, so one idle or bursty replica cannot fake an alert.
OUTLIER_RATIO = 1.5  # slow decode: the median tok/s per stream over this replica's (its TPOT p95 over the median)
QUEUE_SPREAD = 3  # and queue skew: more than this many requests beyond the least-queued replica, and …
MIN_STREAMS = 2  # tok/s per stream is compared only where each replica runs this many streams (fewer: noise)


_DOWN_ORDER = ("cannot be reached", "is gone", "is not running", "is unhealthy as the router sees it")


def _down_reason(r: ReplicaStatus) -> str:
    if r.state == "unreachable":
        return _DOWN_ORDER[0]
    if r.state in _ALIVE:
        return _DOWN_ORDER[3]
    return _DOWN_ORDER[2] if r.state == "none" else _DOWN_ORDER[1]


def imbalance(replicas: list[ReplicaStatus], router_down: str | None = None) -> Imbalance:
    """The replica that lags (unreachable, gone or unhealthy first, then by queue, then by tok/s per stream), or
    balanced; says so when the load is too light to tell. With the router down (``router_down``: why, in a few
    words) no replica is seen healthy: the verdict says the router is down, and judges the replicas by their own
    states and figures."""
    own = _imbalance(replicas, router_down is None)
    if router_down is None:
        return own
    if own.verdict == NO_REPLICA:
        return replace(own, verdict=f"the router is down ({router_down}) and {NO_REPLICA}")
    return replace(own, verdict=f"the router is down ({router_down}); by the replicas' own figures: {own.verdict}")


NO_REPLICA = "no replica is running"


def _imbalance(replicas: list[ReplicaStatus], router_up: bool) -> Imbalance:
    if replicas and not any(r.state in _ALIVE or r.state == "unreachable" for r in replicas):
        return Imbalance(NO_REPLICA)
    down = [r for r in replicas if not r.healthy and (router_up or r.state not in _ALIVE)]
    if down:
        worst = min(down, key=lambda r: _DOWN_ORDER.index(_down_reason(r)))
        return Imbalance(f"{worst.label} {_down_reason(worst)}", worst.url)
    queues = [r for r in replicas if r.queued is not None]
    if len(queues) >= 2:
        most = max(queues, key=lambda r: r.queued or 0)
        least = min(queues, key=lambda r: r.queued or 0)
        median = statistics.median(r.queued or 0 for r in queues)
        deep, shallow = most.queued or 0, least.queued or 0
        if deep - shallow > QUEUE_SPREAD and deep > OUTLIER_RATIO * max(1.0, median):
            return Imbalance(f"{most.label} lags: {deep} queued against {shallow} on {least.label}", most.url)
    measured = [r for r in replicas if r.tok_s is not None and (r.running or 0) >= MIN_STREAMS]
    if len(measured) < 2:
        return Imbalance(f"too little load to judge (needs {MIN_STREAMS}+ running streams on 2+ replicas)")
    median = statistics.median(r.tok_s or 0.0 for r in measured)
    slow = min(measured, key=lambda r: r.tok_s or 0.0)
    if median > OUTLIER_RATIO * (slow.tok_s or 0.0):
        return Imbalance(
            f"{slow.label} lags: {slow.tok_s:.1f} tok/s per stream against the median {median:.1f}", slow.url
        )
    return Imbalance("balanced")
