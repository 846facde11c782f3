"""The server: one face for a host's SGLang server, whether it runs on that host alone or across several
(a multi-node profile, ``multinode``): status, preflight, start, restart, stop, wait, watch and its log.

The CLI's `serve` commands, the Serve tab, serving a training checkpoint and the advisor's A/B go through a
``Server``, so which of the two a server is gets decided here once: a status read on any node is made the
whole server's (every rank, a rank's death reaping the others), a stop stops every rank, and a restart
replaces whatever runs where the profile is served (its host; a multi-node profile's first node). What the
callers draw arrives typed: ``ServerStatus`` (with a ``NodeStatus`` per node), ``Launched``, ``Stopped`` and
``Seen``.

The host's connection is either handed in (the panel's) or opened on first need (the CLI's: a multi-node
start never needs it); other nodes' connections are opened when a multi-node server needs them. ``close``
closes what the face opened, never what it was handed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from backend.connection import Connection
from backend.serve import multinode, preflight_checks, server_status, serving
from backend.serve.preflight_checks import Preflight
from backend.serve.server_status import ServerStatus
from backend.settings.model import ProfileConfig, Settings

NODES_EVERY_S = 1.0  # `watch`: a multi-node server's whole status this often while it runs
OnStatus = Callable[[ServerStatus], None]


@dataclass(frozen=True)
class Launched:
    """A start or restart: the whole server's first status, the checks it passed, and what a restart stopped."""

    status: ServerStatus
    preflight: Preflight
    replaced: ServerStatus | None = None

    def to_json(self) -> dict[str, Any]:
        """As `serve start --json` prints it: the host's status with the preflight."""
        return {**self.status.wire, "preflight": self.preflight.to_json()}


@dataclass(frozen=True)
class Stopped:
    """A stop: the server as it ended (every node's line for a multi-node one) and what the stop found."""

    status: ServerStatus
    was_running: bool
    reason: str | None  # the job's end reason (cancelled, ...) where the host gave one
    gpus_freed: bool | None  # None: no nvidia-smi to ask
    lingered: tuple[str, ...]  # killed processes the kernel let go only later: waited for, named

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> Stopped:
        return cls(
            ServerStatus.from_json(wire),
            bool(wire.get("was_running")),
            wire.get("reason"),
            wire.get("gpus_freed"),
            tuple(wire.get("lingered") or ()),
        )


@dataclass(frozen=True)
class Seen:
    """One look from ``watch``: the whole server's status, and the job whose log is on this host (for a
    multi-node server, this host's own rank)."""

    status: ServerStatus
    log_job: str | None


class Server:
    """The server on ``host`` (a connection, or how to open one when first needed); see the module docstring.
    ``nodes``: connections to other nodes shared with the caller (its own otherwise, closed by ``close``)."""

    def __init__(
        self,
        settings: Settings,
        host: Connection | Callable[[], Awaitable[Connection]],
        *,
        nodes: multinode.Nodes | None = None,
    ) -> None:
        self.settings = settings
        self._host = host if isinstance(host, Connection) else None
        self._opener = None if isinstance(host, Connection) else host
        self._links = nodes
        self._own_links = nodes is None
        self._job_hosts: dict[str, Connection] = {}  # where each job the face saw lives (a restart's two)

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._links is not None and self._own_links:
            await self._links.close()
        if self._host is not None and self._opener is not None:
            await self._host.close()

    async def host(self) -> Connection:
        """The host's connection, opened now if it was not handed in."""
        if self._host is None:
            assert self._opener is not None
            self._host = await self._opener()
        if self._host.host.name in self.settings.hosts:
            self.nodes().adopt(self._host.host.name, self._host)
        return self._host

    def nodes(self) -> multinode.Nodes:
        if self._links is None:
            self._links = multinode.Nodes(self.settings)
        return self._links

    async def _place(self, profile: ProfileConfig | None) -> Connection:
        """Where ``profile`` is served: a multi-node profile's first node, else the host."""
        if profile is not None and multinode.is_multinode(profile):
            return await self.nodes().get(profile.nodes[0])
        return await self.host()

    async def _whole(self, conn: Connection, wire: dict[str, Any]) -> ServerStatus:
        """``wire`` as ``conn``'s host reported it, made the whole server's (``multinode.expand``)."""
        args = wire.get("args") or {}
        if args.get("nodes"):
            self.nodes().adopt(args["nodes"][args.get("node_rank") or 0], conn)
            wire = await multinode.expand(self.nodes(), wire)
        return await self._noted(conn, ServerStatus.from_json(wire))

    async def _noted(self, conn: Connection, status: ServerStatus) -> ServerStatus:
        """``status``, its job's host noted (``job_host``): a whole multi-node server's is its first node."""
        if status.job:
            nodes = status.args.get("nodes")
            self._job_hosts[status.job] = await self.nodes().get(nodes[0]) if nodes else conn
        return status

    # --- reading ----------------------------------------------------------------------------------------------

    async def here(self, *, job: str | None = None, port: int | None = None) -> ServerStatus:
        """The host's own server as it reported it (a multi-node server's rank on this host: its log is here)."""
        return ServerStatus.from_json(await serving.status(await self.host(), job=job, port=port))

    async def status(self, *, job: str | None = None, port: int | None = None) -> ServerStatus:
        """The host's server (``job``, else the newest running one, on ``port``, else the newest), whole."""
        conn = await self.host()
        return await self._whole(conn, await serving.status(conn, job=job, port=port))

    async def current(self, profile: ProfileConfig) -> ServerStatus:
        """The server running where ``profile`` is served, whole: what a restart to ``profile`` stops."""
        conn = await self._place(profile)
        return await self._whole(conn, await serving.status(conn))

    async def job_host(self, status: ServerStatus) -> Connection:
        """The connection to the host whose job ``status.job`` is (a multi-node server's first node)."""
        if status.job in self._job_hosts:
            return self._job_hosts[status.job]
        if status.args.get("nodes"):
            return await self.nodes().get(status.args["nodes"][0])
        return await self.host()

    async def preflight(self, profile: ProfileConfig, *, force: bool = False) -> Preflight:
        """The checks `start` runs (on every node, and that the nodes agree, for a multi-node profile)."""
        if multinode.is_multinode(profile):
            return await multinode.preflight(self.nodes(), self.settings, profile, force=force)
        return await preflight_checks.preflight(await self.host(), self.settings, profile, force=force)

    # --- the lifecycle ----------------------------------------------------------------------------------------

    async def start(
        self, profile: ProfileConfig, *, force: bool = False, tags: dict[str, Any] | None = None
    ) -> Launched:
        """Preflight, then start ``profile``'s server (every rank of a multi-node one). Raises
        ``PreflightFailed`` listing the failed checks; ``tags`` go into the job's args (history keeps them)."""
        if multinode.is_multinode(profile):  # its status is the whole server's already
            conn = await self.nodes().get(profile.nodes[0])
            wire = await multinode.start(self.nodes(), self.settings, profile, force=force, tags=tags)
        else:
            conn = await self.host()
            wire = await serving.start(conn, self.settings, profile, force=force, tags=tags)
        preflight = Preflight.from_json(wire.pop("preflight"))
        return Launched(await self._noted(conn, ServerStatus.from_json(wire)), preflight)

    async def restart(
        self,
        profile: ProfileConfig,
        *,
        force: bool = False,
        tags: dict[str, Any] | None = None,
        grace: float = serving.STOP_GRACE_S,
    ) -> Launched:
        """Stop the server running where ``profile`` is served (every rank of it), then start ``profile``:
        also how a profile is switched to."""
        current = await self.current(profile)
        if current.running:
            await self._stop(await self.job_host(current), current, grace)
        launched = await self.start(profile, force=force, tags=tags)
        return replace(launched, replaced=current) if current.running else launched

    async def stop(
        self, *, job: str | None = None, port: int | None = None, grace: float = serving.STOP_GRACE_S
    ) -> Stopped:
        """Stop the host's server (every rank of a multi-node one): SIGTERM, SIGKILL after ``grace`` s, then
        confirm nothing of it is left and its GPUs are free (``OperationFailed`` naming what is left)."""
        conn = await self.host()
        wire = await serving.status(conn, job=job, port=port)
        args = wire.get("args") or {}
        if not args.get("nodes"):
            return Stopped.from_json(await serving.stop(conn, job=job, port=port, grace=grace))
        self.nodes().adopt(args["nodes"][args.get("node_rank") or 0], conn)
        stopped = Stopped.from_json(await multinode.stop(self.nodes(), wire, grace=grace))
        await self._noted(conn, stopped.status)
        return stopped

    async def _stop(self, conn: Connection, whole: ServerStatus, grace: float) -> None:
        if whole.nodes:
            await multinode.stop(self.nodes(), whole.wire, grace=grace)
        else:
            await serving.stop(conn, job=whole.job, grace=grace)

    async def wait(
        self,
        status: ServerStatus,
        *,
        until: tuple[str, ...] = server_status.ENDED_STATES,
        within: float | None = None,
        on_status: OnStatus | None = None,
    ) -> ServerStatus:
        """Follow the server ``status`` is of (every rank of a multi-node one) until its state is in ``until`` or
        ``within`` seconds pass; ``on_status`` sees each look. Returns the last status."""
        show = None if on_status is None else (lambda wire: on_status(ServerStatus.from_json(wire)))
        if status.args.get("nodes"):
            wire = await multinode.wait(self.nodes(), status.wire, until=until, within=within, on_status=show)
        else:
            conn = await self.job_host(status)
            wire = await serving.wait(conn, status.job, until=until, within=within, on_status=show)
        return ServerStatus.from_json(wire)

    async def watch(self, *, every: float = NODES_EVERY_S) -> AsyncIterator[Seen]:
        """The host's server on every change the host pushes, until cancelled; while a multi-node server runs,
        its whole status every ``every`` seconds too (a rank can die on another host). Survives reconnects."""
        conn = await self.host()
        pushed = serving.watch(conn).__aiter__()
        upcoming: asyncio.Future[ServerStatus] = asyncio.ensure_future(pushed.__anext__())
        here: ServerStatus | None = None
        whole_running = False
        try:
            while True:
                if here is not None and here.args.get("nodes") and whole_running:
                    done, _ = await asyncio.wait({upcoming}, timeout=every)
                    if not done:  # nothing new from the host: look at every node again
                        whole = await self._whole(conn, await serving.status(conn, job=here.job))
                        whole_running = whole.running
                        yield Seen(whole, here.job)
                        continue
                here = await upcoming
                upcoming = asyncio.ensure_future(pushed.__anext__())
                whole = await self._whole(conn, here.wire) if here.args.get("nodes") else here
                whole_running = whole.running
                yield Seen(whole, here.job)
        finally:
            upcoming.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await upcoming
            await pushed.aclose()  # type: ignore[attr-defined]

    # --- the log ----------------------------------------------------------------------------------------------

    async def tail(self, job: str, lines: int = 50) -> serving.LogTail:
        """The last ``lines`` lines of job ``job``'s log on the host, and the offset to follow from."""
        return await serving.tail(await self.host(), job, lines)

    async def follow(self, job: str, offset: int) -> AsyncIterator[list[str]]:
        """The log's new lines from byte ``offset`` until the server ends (``serving.follow``)."""
        async for lines in serving.follow(await self.host(), job, offset):
            yield lines
