"""A host connection: transport + agent, supervised, with observable state.

The CLI connects once (``Connection.open``) and fails fast with exit code 3. The TUI runs ``supervise()``:
on a drop it reconnects with backoff, restarts the agent and resumes every ``subscribe`` stream from where it
stopped; listeners see connecting → connected → reconnecting (with the next retry time) → connected, or
lost with the reason when retrying cannot help (a host key problem, a refused key).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from backend.agent.client import AgentClient
from backend.agent.host.shared.quantiles import round_trips
from backend.errors import ConnectionBlocked, ConnectionFailed, UsageError
from backend.settings.model import HostConfig, Settings
from backend.settings.validation import ssh_url_problem

BACKOFF_S = (1, 2, 4, 8, 15, 30)

if TYPE_CHECKING:
    from backend.transport.base import Transport


@dataclass(frozen=True)
class ConnState:
    status: str  # connecting | connected | reconnecting | lost
    reason: str = ""
    since: float = 0.0
    retry_at: float | None = None  # when the next attempt starts (reconnecting)
    attempt: int = 0


def local_workdir() -> str:
    from platformdirs import user_state_dir

    return str(os.path.join(user_state_dir("specdeck"), "local-host"))


def resolve_host(
    settings: Settings,
    spec: str | None,
    *,
    identity: str | None = None,
    known_hosts: str | None = None,
    python: str | None = None,
    workdir: str | None = None,
) -> HostConfig:
    """``--host`` → a HostConfig: a configured name, ``local``, or ``ssh://user@addr[:port]``."""
    spec = spec or settings.default_host
    if spec in settings.hosts:
        host = settings.hosts[spec]
    elif spec == "local":
        host = HostConfig(name="local", url="local", python=sys.executable, workdir=local_workdir())
    elif spec.startswith("ssh://"):
        if problem := ssh_url_problem(spec):
            raise UsageError(f"--host {problem}")
        # Ad-hoc host: state under the login's home unless --workdir says otherwise.
        host = HostConfig(name=spec, url=spec, python="python3", workdir=".")
    else:
        raise UsageError(
            f"unknown host {spec!r}: use a configured name ({', '.join(sorted(settings.hosts))}), "
            "local, or ssh://user@addr[:port]"
        )
    overrides: dict[str, Any] = {"identity": identity, "known_hosts": known_hosts, "python": python, "workdir": workdir}
    return replace(host, **{k: v for k, v in overrides.items() if v is not None})


def make_transport(host: HostConfig) -> Transport:
    if host.is_local:
        from backend.transport.local import LocalTransport

        return LocalTransport()
    from backend.transport.ssh import SSHTransport

    return SSHTransport(host.url, identity=host.identity, known_hosts=host.known_hosts)


class Connection:
    def __init__(self, host: HostConfig, shared: bool = False) -> None:
        self.host = host
        # A CLI command's connection: through the host's control master when one runs, else direct, leaving a
        # master behind at close (backend/transport/control.py). ``note`` says why a master was not usable.
        self.shared = shared and not host.is_local
        # A CLI command ends with its close: the agent's channel is closed without waiting for the agent to
        # exit (it ends on the closed channel as on EOF); waiting cost a cold command ~50 ms on a loaded box.
        self.brief = False
        self.note = ""
        self._leave_master = False
        self.transport: Transport | None = None
        self.agent: AgentClient | None = None
        self.state = ConnState("connecting", since=time.time())
        self.hello: dict[str, Any] = {}
        self.last_error: ConnectionFailed | None = None  # the host-key error behind a "lost" state
        self._listeners: list[Callable[[ConnState], None]] = []
        self._connected = asyncio.Event()
        self._changed = asyncio.Event()  # set and replaced on every state change
        self._supervisor: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._give_up_after: int | None = None  # failed reconnects before a supervised CLI stops (None: never)
        self._gave_up: ConnectionFailed | None = None  # why it stopped: every follower then raises it
        self.generation = 0  # bumps on every (re)connect, so subscribers know to resume

    # --- state ---------------------------------------------------------------------------------------------

    def on_state(self, fn: Callable[[ConnState], None]) -> None:
        self._listeners.append(fn)
        fn(self.state)

    def _set(self, status: str, reason: str = "", **kw: Any) -> None:
        self.state = ConnState(status, reason, time.time(), **kw)
        if status == "connected":
            self._connected.set()
        else:
            self._connected.clear()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for fn in list(self._listeners):
            fn(self.state)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    # --- connecting ----------------------------------------------------------------------------------------

    async def _connect_once(self) -> None:
        transport = await self._through_master() if self.shared else None
        if transport is None:
            transport = make_transport(self.host)
            await transport.connect()
        agent = AgentClient(transport, self.host.python, self.host.workdir)
        try:
            self.hello = await agent.start()
        except BaseException:
            # Cancelled or failed mid-start: end the agent process too, or it outlives us.
            await asyncio.shield(agent.close())
            await transport.close()
            raise
        self.transport, self.agent = transport, agent
        self.generation += 1

    async def _through_master(self) -> Transport | None:
        """The host's control master as a transport, or None (connect directly; leave a master if we may)."""
        from backend.transport import control, controlsock

        if controlsock.persist_s() <= 0:
            return None
        try:
            return await control.ControlTransport.attach(self.host)
        except controlsock.NoMaster:
            self._leave_master = True  # none yet, or a stale socket: the new master replaces it
        except controlsock.Unanswering as exc:  # it keeps its lock, so no new master could replace it
            self.note = f"{exc}: connected directly; `specdeck disconnect` stops it"
        except controlsock.Unusable as exc:
            self.note = f"not using the shared connection: {exc}; connected directly"
        return None

    @classmethod
    async def open(cls, host: HostConfig, shared: bool = False) -> Connection:
        """Connect once; raise ConnectionFailed (exit 3) with the reason if that fails. ``shared``: see
        ``__init__``."""
        conn = cls(host, shared)
        conn._set("connecting")
        try:
            await conn._connect_once()
        except ConnectionFailed as exc:
            conn._set("lost", str(exc))
            raise
        conn._set("connected")
        return conn

    def supervise(self, give_up_after: int | None = None) -> None:
        """Keep the connection up in the background until ``close``; ``give_up_after`` failed reconnects (or a
        host that refuses for good) end it, and followers raise why (a CLI command then exits 3)."""
        self._give_up_after = give_up_after
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise(), name=f"supervise {self.host.name}")

    def retry_now(self) -> None:
        """Skip the backoff wait (the user asked to reconnect)."""
        self._wake.set()

    async def _supervise(self) -> None:
        attempt = 0
        while True:
            if self.agent is None:
                self._set("connecting" if attempt == 0 else "reconnecting", self.state.reason, attempt=attempt)
                try:
                    if not await self._attempt():
                        continue  # the user asked to retry while it hung: start again at once
                except ConnectionBlocked as exc:
                    self.last_error = exc
                    if self._give_up_after is not None:
                        self._give_up(exc)
                        return
                    self._set("lost", str(exc))
                    await self._wait_retry(None)
                    attempt = 0
                    continue
                except Exception as exc:
                    # Anything else (a network error, a bug) is shown and retried with backoff:
                    # the supervisor must outlive every error, or the panel stays "connecting" for good.
                    delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                    attempt += 1
                    if self._give_up_after is not None and attempt > self._give_up_after:
                        failed = exc if isinstance(exc, ConnectionFailed) else ConnectionFailed(str(exc))
                        self._give_up(failed)
                        return
                    status = "reconnecting" if isinstance(exc, ConnectionFailed) else "lost"
                    reason = str(exc) if isinstance(exc, ConnectionFailed) else f"{type(exc).__name__}: {exc}"
                    self._set(status, reason, retry_at=time.time() + delay, attempt=attempt)
                    await self._wait_retry(delay)
                    continue
                attempt = 0
                self._set("connected")
            assert self.agent is not None  # _connect_once set it
            reason = await self.agent.closed
            # Not connected from here on, before the (slow) close, so no one uses the dead agent meanwhile.
            self._set("reconnecting", reason, retry_at=time.time(), attempt=1)
            await self._drop()
            attempt = 1

    def _give_up(self, exc: ConnectionFailed) -> None:
        self._gave_up = exc
        self._set("lost", str(exc))

    async def _attempt(self) -> bool:
        """One connect, given up when the user asks to retry meanwhile (``retry_now``): False then."""
        self._wake.clear()
        connect = asyncio.ensure_future(self._connect_once())
        wake = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({connect, wake}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wake.cancel()
            if not connect.done():
                connect.cancel()  # its own cleanup ends the half-started agent
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await connect
        if not connect.cancelled():
            connect.result()  # raises what the connect met
        return self.agent is not None

    async def _wait_retry(self, delay: float | None) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except TimeoutError:
            pass

    async def _drop(self) -> None:
        agent, transport = self.agent, self.transport
        self.agent = self.transport = None
        if agent is not None and agent.pipe is not None and (self.brief or getattr(transport, "shared", False)):
            agent.pipe.kill()  # a command is done: the channel's end ends the agent, we need not wait for it
            if self.host.is_local:  # but a child of ours, killed, is reaped in a moment: unreaped, asyncio
                await agent.pipe.wait()  # says so on stderr once the loop has closed
        if agent is not None and not (self.brief and agent.pipe is not None):
            await agent.close()
        if transport is not None:
            await transport.close()

    async def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            try:
                await self._supervisor
            except asyncio.CancelledError:
                pass
            self._supervisor = None
        # Not connected from here on, before the (slow) close: waiters wait (until cancelled) instead of seeing
        # "connected", calling the dropped agent and retrying in a loop that never yields (a Live feed left on
        # the old host after a host switch froze the panel).
        self._connected.clear()
        agent = self.agent
        await self._drop()
        if self._leave_master and agent is not None:
            from backend.transport import control

            self._leave_master = False
            control.spawn_master(self.host, agent.start_argv())

    async def wait_connected(self, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except TimeoutError:
            raise ConnectionFailed(
                f"{self.host.name}: not connected ({self.state.reason or self.state.status})"
            ) from None

    # --- calls ---------------------------------------------------------------------------------------------

    async def call(self, method: str, deadline: float | None = None, **params: Any) -> Any:
        """One RPC. Fails fast (ConnectionFailed) while disconnected, so a UI never waits on a dead link.

        ``deadline`` bounds the wait for the answer (default 60 s, or a method's own ``timeout`` param + 30 s,
        which the host method receives as usual).
        """
        if self.agent is None or not self.connected:
            raise ConnectionFailed(f"{self.host.name}: not connected ({self.state.status})")
        if deadline is None:
            own = params.get("timeout")
            deadline = max(60.0, float(own) + 30) if isinstance(own, int | float) else 60.0
        return await self.agent.call(method, deadline=deadline, **params)

    async def stream(self, method: str, **params: Any) -> AsyncGenerator[dict[str, Any], None]:
        """A streaming RPC on the current connection; ends (raising ConnectionFailed) if the link drops."""
        if self.agent is None:
            raise ConnectionFailed(f"{self.host.name}: not connected ({self.state.status})")
        s = await self.agent.stream(method, **params)
        try:
            async for ev in s:
                yield ev
        finally:
            await s.aclose()

    async def subscribe(
        self,
        method: str,
        params: dict[str, Any],
        resume: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
    ) -> AsyncGenerator[dict[str, Any], None]:
        """A stream that survives reconnects: after a drop it waits for the supervisor's next connection, then
        calls the method again with ``resume(params, last_event)`` (e.g. the last byte offset), so nothing is
        lost or repeated."""
        while True:
            await self._next_connection(None)
            generation = self.generation
            try:
                async for ev in self.stream(method, **params):
                    params = resume(params, ev)
                    yield ev
                return
            except ConnectionFailed:
                if self._supervisor is None:
                    raise
                await self._next_connection(generation)

    async def _next_connection(self, generation: int | None) -> None:
        """Wait until the supervisor has connected again after connection ``generation`` (None: any connection;
        no polling); raises why when it gave up."""
        while not (self.connected and self.generation != generation):
            if self._gave_up is not None:
                raise self._gave_up
            await self._changed.wait()

    async def ping(self, count: int = 5) -> Pings:
        """Round trips over the persistent agent, in ms."""
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            await self.call("ping", deadline=10)
            times.append((time.perf_counter() - t0) * 1000)
        return Pings.of(times)


@dataclass(frozen=True)
class Pings:
    """What a ping measured: the median and p95 of ``samples`` round trips, in ms."""

    median: float
    p95: float
    samples: int

    @classmethod
    def of(cls, ms: Sequence[float]) -> Pings:
        figures = round_trips(ms)
        return cls(float(figures["median"]), float(figures["p95"]), int(figures["samples"]))


RTT_KEEP = 5  # the header's rtt: the median of this many latest pings


@dataclass(frozen=True)
class RoundTrips:
    """The latest single-ping round trips (ms, newest last, at most ``RTT_KEEP``): a header shows their median,
    so one slow ping on a busy host does not read as the link's round trip."""

    ms: tuple[float, ...] = ()

    def add(self, ms: float) -> RoundTrips:
        return RoundTrips((*self.ms, ms)[-RTT_KEEP:])

    @property
    def median(self) -> float | None:
        return round_trips(self.ms)["median"] if self.ms else None

    def text(self) -> str:
        """``rtt 0.42 ms (median of 5)``; '' before the first ping."""
        if not self.ms:
            return ""
        return f"rtt {self.median:.2f} ms " + ("(1 ping)" if len(self.ms) == 1 else f"(median of {len(self.ms)})")


async def open_host(settings: Settings, spec: str | None, shared: bool = False, **overrides: Any) -> Connection:
    return await Connection.open(resolve_host(settings, spec, **overrides), shared)
