"""The live data source behind `specdeck watch` and the Live tab: the running server, followed as it works.

A running server is a detached job of kind ``serve`` whose log is the job's log and whose HTTP port is
``args["port"]`` on the host's loopback. ``LiveFeed.follow`` streams that log through ``jobs.follow``
(``Connection.subscribe`` resumes at the byte offset after a reconnect, so no line is lost or read twice),
parses each line, feeds a ``LiveSeries`` and yields the samples as the live view should see them (the first
throughput after an idle spell dropped). While following it polls ``/server_info`` (``/get_server_info`` on
older SGLang) and scrapes ``/metrics`` (one scrape for the gauges and the latency histograms) through the
agent's ``http.request``, each poll scheduled when the previous one finished, so slow answers never pile up.
Nothing here blocks: parsing yields to the event loop every few hundred lines, and a listener hears what
changed once per batch with samples instead of once per line (a batch of access-log lines alone, our own
polls' or another monitor's, tells nobody anything).

A ``Recorder`` (``backend.history.HistoryThread``) keeps what the feed follows in the run history. Log bytes
the history holds already are read for the series only (so the charts show the whole run); recording starts
at the first byte it lacks, so nothing is stored twice and no stored offset falls inside a batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol

from backend.connection import Connection
from backend.errors import ConnectionFailed, OperationFailed, RemoteError, UsageError
from backend.history import read_lines
from backend.jobs import JobInfo, get_job, list_jobs
from backend.measure.collapse import Tracker
from backend.measure.latency import LatencyWindow, of_scrape, summary_json
from backend.measure.metrics import LiveFilter, Sample, ServerNumbers, parse_line, parse_tier, server_info_numbers
from backend.measure.prometheus import Scrape, read_scrape
from backend.measure.series import LiveSeries
from backend.settings.model import Settings

POLL_S = 2.0  # /server_info: what it holds moves seldom (the lifetime accept length with decode lines)
LATENCY_S = 1.0  # /metrics, one scrape for the gauges and the latency histograms (those move with every token)
LATENCY_KEEP_S = 10.0  # how often the recorder keeps the run's latency figures while they change
# With no decode line since the last poll the gauges stand still: poll this many times slower (a server left
# idle costs the panel and the host next to nothing); the next decode line brings the pace back at once.
IDLE_POLL_FACTOR = 5
FIND_S = 2.0  # how often to look again when no server runs
# ``timeout`` is the RPC's own deadline (Connection.call takes it); http.request waits 5 s for the server.
RPC_TIMEOUT_S = 8.0
YIELD_EVERY = 500  # lines parsed between yields to the event loop (~5 ms), so a backlog never stalls a UI
READ_CHUNK = 1 << 20  # bytes per read of the part of a log the history holds already (jobs.follow's chunk)

# What a listener is told: a new server (or none), new samples, fresh poll figures, a latency scrape, the end.
Change = str  # "server" | "samples" | "poll" | "latency" | "truncated" | "ended"


async def running_servers(conn: Connection) -> list[JobInfo]:
    """The host's running serve jobs, newest first."""
    running = [j for j in await list_jobs(conn, "serve") if j.state == "running" and j.port]
    return sorted(running, key=lambda j: j.started or 0, reverse=True)


async def find_server(conn: Connection, port: int | None = None) -> JobInfo | None:
    """The running serve job on ``port``, or the newest one without a port; None when there is none."""
    for job in await running_servers(conn):
        if port is None or job.port == port:
            return job
    return None


async def require_server(conn: Connection, port: int | None = None) -> JobInfo:
    """Like ``find_server`` for commands: a sentence saying what to do when no (or no single) server fits."""
    servers = await running_servers(conn)
    if port is not None:
        servers = [j for j in servers if j.port == port]
    if not servers:
        where = f" on port {port}" if port is not None else ""
        raise OperationFailed(
            f"no SGLang server is running{where} on {conn.host.name}; start one with `specdeck serve start PROFILE`."
        )
    if len(servers) > 1:
        ports = ", ".join(str(j.port) for j in servers)
        raise UsageError(f"{len(servers)} servers are running on {conn.host.name} (ports {ports}); pass --port.")
    return servers[0]


def describe_server(job: JobInfo) -> str:
    """``profile on port P`` for messages; a served training checkpoint is named too (the profile alone says
    the drafter it was configured with): ``eagle3-aq with checkpoint k25-ft@step1200 on port P``."""
    name = job.profile or job.id
    served = job.args.get("training_checkpoint")
    if isinstance(served, dict) and served.get("checkpoint"):
        name += f" with checkpoint {served.get('training')}@{served['checkpoint']}"
    return f"{name} on port {job.port}"


def profile_steps(settings: Settings, profile: str | None = None) -> int | None:
    """The draft steps live numbers are judged with: ``profile``'s, else the first speculating profile's."""
    if profile is not None:
        if profile not in settings.profiles:
            known = ", ".join(sorted(settings.profiles))
            raise UsageError(f"unknown profile {profile!r} (configured: {known}).")
        steps = settings.profiles[profile].steps
        if steps is None:
            raise UsageError(f"profile {profile!r} does not speculate; pass --steps.")
        return steps
    return next((p.steps for p in settings.profiles.values() if p.steps is not None), None)


def _resume(params: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    return {**params, "offset": event["offset"]}


class Recorder(Protocol):
    """Where a feed records the runs it follows (``backend.history.HistoryThread``, ``LiveRecorder``'s contract):
    ``begin`` when following a server from a byte offset, ``add`` per sample (post-idle throughput dropped),
    ``add_tier`` per adaptive tier line (its start or a switch),
    ``mark`` after each batch with the offset read up to, ``truncated`` when the host says the log was truncated
    or replaced (it is followed again from its start), ``end`` with the job once the server has ended."""

    async def recorded(self, job: JobInfo) -> int | None:
        """Bytes of the job's log recorded already, the run claimed for this recorder; None when another live
        view records it (the feed then follows it without recording)."""
        ...

    def begin(self, job: JobInfo, offset: int) -> None: ...

    def add(self, sample: Sample) -> None: ...

    def add_tier(self, t: float, steps: int) -> None: ...

    def mark(self, offset: int) -> None: ...

    def truncated(self) -> None: ...

    def end(self, job: JobInfo) -> None: ...

    async def keep_latency(self, job: JobInfo, figures: dict[str, Any]) -> None:
        """The run's latency figures (its server's histograms since it started), when this recorder holds it."""
        ...


class LiveFeed:
    """Follows one host's running server into a ``LiveSeries``; ``info`` and ``metrics`` hold the last polls.

    ``listener(change)`` is called on the event loop after each batch of log lines ("samples"), each poll
    ("poll"), when the followed server changes ("server"), when the host says its log was truncated or replaced
    ("truncated": followed again from its start) and when it ends ("ended"). A ``recorder`` gets
    what is followed (see ``Recorder``).
    """

    def __init__(
        self,
        conn: Connection,
        series: LiveSeries,
        listener: Callable[[Change], None] | None = None,
        poll_s: float = POLL_S,
        find_s: float = FIND_S,
        recorder: Recorder | None = None,
    ) -> None:
        self.conn = conn
        self.series = series
        self.listener = listener
        self.recorder = recorder
        self.poll_s = poll_s
        self.find_s = find_s
        self.server: JobInfo | None = None  # the serve job being followed (its last known description)
        self.gone = False  # the server left the host's running jobs without the feed seeing it end
        self.info: ServerNumbers | None = None  # server_info_numbers() of the last /server_info answer
        self.metrics: dict[str, float | None] = {}  # the engine's totals in the last /metrics answer
        self.scrape: Scrape | None = None  # read_scrape() of the last /metrics answer: every series in it
        self.startup: dict[str, dict[str, float]] = {}  # startup_seconds(): SGLang 0.5.23's startup gauges
        self.reachable: bool | None = None  # did the last poll get an answer
        self.offset = 0  # bytes of the server's log read so far
        self.lines = 0  # log lines read for this server
        self.samples = 0  # decode and prefill samples among them
        self.polls = 0
        self.filter = LiveFilter()
        self.latency_s = LATENCY_S
        self.latency = LatencyWindow()  # the server's latency histograms, one scrape a second
        self.latency_scrapes = 0  # scrapes of this server that held histograms
        self.histograms: bool | None = None  # did the last /metrics answer hold any (None: not asked yet)
        self._idle_waiters: list[asyncio.Future[None]] = []  # polls of an idle server, woken by the next sample
        self.collapse = Tracker()  # decode lines for the collapse episodes Live names (issue 32)

    @property
    def running_server(self) -> JobInfo | None:
        """The server followed while it runs (None once it ended or left the host's running jobs)."""
        server = self.server
        return server if server is not None and server.state == "running" and not self.gone else None

    def _tell(self, change: Change) -> None:
        if self.listener is not None:
            self.listener(change)

    def reset(self) -> None:
        """Empty the series (and their idle history); following and recording carry on from where they are."""
        self.series.reset()
        self.collapse.clear()

    def _start(self, job: JobInfo, offset: int) -> None:
        """Take on ``job``: a different server than before starts a new run (empty series, fresh polls)."""
        if self.server is None or self.server.id != job.id:
            self.reset()
            self.filter.reset()
            self.info, self.metrics, self.startup, self.reachable = None, {}, {}, None
            self.scrape = None
            self.latency.clear()
            self.latency_scrapes, self.histograms = 0, None
            self.lines = self.samples = self.polls = 0
        self.server, self.offset, self.gone = job, offset, False
        self._tell("server")

    async def follow(self, job: JobInfo, offset: int = 0) -> AsyncIterator[Sample]:
        """The samples of ``job``'s log from byte ``offset`` as the live view sees them; ends when the job does.

        Every sample (prefill too) is fed to the series; the yielded ones have ``gen_tps`` None where it
        counted idle time. Polls the server's HTTP endpoints while following.
        """
        self._start(job, offset)
        poller = asyncio.create_task(self._poll(job), name=f"poll {job.id}")
        scraper = asyncio.create_task(self._scrape(job), name=f"metrics {job.id}")
        recorder = self.recorder
        unyielded = 0  # lines parsed since the last yield, across events: a queued backlog of small events
        # arrives without the loop getting a turn between them
        try:
            async with contextlib.aclosing(self._batches(job, offset)) as batches:
                async for event, recording in batches:
                    self.offset = event["offset"]
                    if event.get("truncated"):
                        if recording and recorder is not None:
                            recorder.truncated()
                        self._tell("truncated")
                        continue
                    before = self.samples
                    for line in event["lines"]:
                        unyielded += 1
                        if unyielded >= YIELD_EVERY:
                            unyielded = 0
                            await asyncio.sleep(0)
                        sample = parse_line(line)
                        if sample is None:
                            tier = parse_tier(line)
                            if tier is not None:
                                ts, said = tier
                                self.series.feed_tier(ts or time.time(), said.steps, said.switch, said.start)
                                if (
                                    recording
                                    and recorder is not None
                                    and ts is not None
                                    and (said.switch or said.start)
                                ):
                                    recorder.add_tier(ts, said.steps)
                            continue
                        now = time.time()
                        self.samples += 1
                        for waiter in self._idle_waiters:
                            if not waiter.done():
                                waiter.set_result(None)
                        self.series.feed(sample, now)
                        self.collapse.feed(sample)
                        sample = self.filter.accept(sample, now)
                        if recording and recorder is not None:
                            recorder.add(sample)
                        yield sample
                    self.lines += len(event["lines"])
                    if recording and recorder is not None:
                        recorder.mark(self.offset)
                    if self.samples != before:  # access-log lines alone (polls, another monitor's) change nothing
                        self._tell("samples")
        finally:
            poller.cancel()
            scraper.cancel()
        try:
            self.server = await get_job(self.conn, job.id)
        except ConnectionFailed:
            pass
        if recorder is not None and self.server is not None:
            recorder.end(self.server)
        self._tell("ended")

    async def _batches(self, job: JobInfo, offset: int) -> AsyncGenerator[tuple[dict[str, Any], bool], None]:
        """(``jobs.follow`` event, to be recorded?) from byte ``offset`` on: the part of the log the recorder
        holds already is read for the series only, the rest is followed and recorded."""
        start, recording = offset, False
        if self.recorder is not None:
            held = await self.recorder.recorded(job)
            if held is not None:
                start, recording = max(offset, held), True
                self.recorder.begin(job, start)
        while offset < start:
            try:
                lines, end = await read_lines(self.conn, job.log_path, offset, min(READ_CHUNK, start - offset))
            except RemoteError:
                break  # the log is gone or unreadable: the follow below says what there is
            if end == offset:
                break
            offset = end
            yield {"offset": end, "lines": lines}, False
        params = {"id": job.id, "stream": "log", "offset": start}
        async with contextlib.aclosing(self.conn.subscribe("jobs.follow", params, _resume)) as events:
            async for event in events:
                yield event, recording

    async def run(self, port: int | None = None) -> None:
        """Forever: follow the running server from the start of its log, or wait for one (the Live tab's worker).

        Rides out disconnects when the connection is supervised.
        """
        while True:
            try:
                job = await find_server(self.conn, port)
            except ConnectionFailed:
                await self.conn.wait_connected()
                continue
            if job is None:
                if self.server is not None and self.server.state == "running" and not self.gone:
                    self.gone = True
                    self._tell("ended")
                await asyncio.sleep(self.find_s)
                continue
            same = self.server is not None and self.server.id == job.id
            try:
                async for _ in self.follow(job, self.offset if same else 0):
                    pass
            except ConnectionFailed:
                await self.conn.wait_connected()
            if self.server is not None and self.server.state == "running":
                await asyncio.sleep(self.find_s)  # the follow ended early (e.g. a reconnect without resume)

    # --- polling ------------------------------------------------------------------------------------------

    async def _get(self, port: int | None, path: str) -> dict[str, Any] | None:
        """``http.request`` to the server; None when the host cannot be asked right now."""
        try:
            answer: dict[str, Any] = await self.conn.call(
                "http.request", timeout=RPC_TIMEOUT_S, url=f"http://127.0.0.1:{port}{path}"
            )
            return answer
        except (ConnectionFailed, RemoteError):
            return None

    async def _poll(self, job: JobInfo) -> None:
        """Poll /server_info until cancelled; the next round starts once this one has finished."""
        port = job.port
        info_path = "/server_info"
        info_text = None  # the last page read: an idle server's comes back the same, unparsed
        seen = self.samples
        while True:
            info = await self._get(port, info_path)
            if info is not None and info.get("status") == 404 and info_path == "/server_info":
                info_path = "/get_server_info"  # SGLang before /server_info existed
                info = await self._get(port, info_path)
            answered = info is not None and info.get("status") == 200
            if answered and info is not None and info["text"] != info_text:
                try:
                    self.info = server_info_numbers(json.loads(info["text"]))
                    info_text = info["text"]
                except ValueError:
                    pass
            self.reachable = answered
            self.polls += 1
            self._tell("poll")
            seen = await self._pace(self.poll_s, seen)

    async def _scrape(self, job: JobInfo) -> None:
        """Scrape /metrics once a second until cancelled, one scrape for everything read from it: the engine's
        gauges (``scrape``, ``metrics``, ``startup``) and the latency histograms (``latency``). Stops asking a
        server launched without --enable-metrics. The recorder keeps the run's latency figures since the server
        started every ``LATENCY_KEEP_S`` while they change (a run's history: its latency as last seen)."""
        kept, kept_at = None, 0.0
        seen, text, figures = self.samples, None, None
        while True:
            page = await self._get(job.port, "/metrics")
            if page is not None and page.get("status") == 404:
                self.histograms = False
                return
            if page is not None and page.get("status") == 200:
                changed = page["text"] != text
                if changed:  # an idle server's page comes back the same: parsed once, added again
                    text = page["text"]
                    self.scrape = await asyncio.to_thread(read_scrape, text)
                    self.metrics = self.scrape.engine
                    if not self.startup:  # once: the engine sets them before the port opens (0.5.6: none)
                        self.startup = self.scrape.startup
                    figures = of_scrape(self.scrape)
                self.histograms = bool(figures)
                if figures:
                    now = time.monotonic()
                    self.latency.add(now, figures)
                    self.latency_scrapes += 1
                    if self.recorder is not None and figures != kept and now - kept_at >= LATENCY_KEEP_S:
                        kept, kept_at = figures, now
                        await self.recorder.keep_latency(job, summary_json(figures))
                    self._tell("latency")  # the window's figures move as old scrapes leave it, even unchanged
                elif changed:
                    self._tell("poll")
            seen = await self._pace(self.latency_s, seen)

    async def _pace(self, seconds: float, seen: int) -> int:
        """Wait ``seconds`` before the next poll; where no sample came since the last one (samples == ``seen``)
        the server stands idle: wait up to IDLE_POLL_FACTOR times that, ended by the next sample. The sample
        count to compare with next time."""
        await asyncio.sleep(seconds)
        if self.samples == seen:
            waiter = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, seconds * (IDLE_POLL_FACTOR - 1))
            except TimeoutError:
                pass
            finally:
                self._idle_waiters.remove(waiter)
        return self.samples


async def log_end(conn: Connection, job: JobInfo) -> int:
    """The byte offset just past the last complete line of ``job``'s log (where `watch` starts)."""
    return int((await conn.call("jobs.tail", id=job.id, lines=1))["offset"])
