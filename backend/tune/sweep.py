"""Sweeps from the client: a profile and a grid of speculative numbers → the host's sweep job
(``backend.agent.host.sweep``), followed to its ``done`` event; the CLI and the Tune tab share these calls.

The client builds each point's exact command from the profile with the point's steps/topk/draft tokens (the
same ``profile_command`` Serve uses), and the command that restarts whatever server was running, so the host
needs nothing but the commands. topk 1 means draft tokens = steps + 1 (SGLang adjusts it anyway).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from backend.agent.host.shared.sweep_busy import busy_text
from backend.connection import Connection
from backend.errors import OperationFailed, UsageError
from backend.jobs import JobInfo, get_job, list_jobs, newest_running
from backend.measure.bench import DEFAULT_MAX_TOKENS, DEFAULT_REQUESTS, bench_events
from backend.measure.judge import BestPoint
from backend.serve import command_line, preflight_checks, server_status, serving
from backend.settings.model import ProfileConfig, Settings

READY_TIMEOUT_S = 1800.0  # a 1T MoE on 8 GPUs takes minutes to load and capture graphs
TERMINAL = ("done", "cancelled")


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """``"1,2,4"`` → (1, 2, 4); UsageError naming ``what`` on anything else."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{what} must be whole numbers separated by commas, e.g. 1,2,4; got {text!r}.") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{what} must be whole numbers of at least 1, e.g. 1,2,4; got {text!r}.")
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class SweepPlan:
    """The grid (steps × draft tokens at one topk) and what each point's bench sends."""

    steps: tuple[int, ...]
    topk: int = 1
    draft_tokens: tuple[int, ...] | None = None  # None: auto (steps + 1, topk 1 only)
    requests: int = DEFAULT_REQUESTS
    max_tokens: int = DEFAULT_MAX_TOKENS
    smart: bool = False
    ready_timeout: float = READY_TIMEOUT_S
    domains: dict[str, Any] | None = None  # each bench's prompt sets, as `bench --domains` (``domains.parse``)

    def __post_init__(self) -> None:
        if self.topk < 1:
            raise UsageError(f"--topk must be at least 1, got {self.topk}.")
        if self.draft_tokens is None and self.topk != 1:
            raise UsageError("--draft-tokens auto means steps + 1, which needs --topk 1; give --draft-tokens 8,16.")
        if self.smart and self.topk != 1:
            raise UsageError("--smart ranks step counts at topk 1 only; drop --smart or use --topk 1.")
        for name in ("requests", "max_tokens"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}.")

    def grid(self) -> list[tuple[int, int, int]]:
        """(steps, topk, draft tokens) of every point, in the order given."""
        return [
            (steps, self.topk, tokens)
            for steps in self.steps
            for tokens in (self.draft_tokens if self.draft_tokens is not None else (steps + 1,))
        ]


def first_index(profile: ProfileConfig, plan: SweepPlan) -> int:
    """The grid index of the profile's own point (a smart sweep measures it first), else 0."""
    own = (profile.steps, profile.topk or 1, profile.draft_tokens or (profile.steps or 0) + 1)
    grid = plan.grid()
    return grid.index(own) if own in grid else 0


def point_profile(profile: ProfileConfig, steps: int, topk: int, draft_tokens: int) -> ProfileConfig:
    return replace(profile, steps=steps, topk=topk, draft_tokens=draft_tokens)


def _command(settings: Settings, host: Any, profile: ProfileConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the point as the host takes it: argv, cwd, args; the env that goes through the job's environment)."""
    cmd = command_line.profile_command(settings, host, profile)
    # SGLang's own step times (step_time_dict in /server_info) give each point's cycle; a list append a log line.
    env = {"SGLANG_RECORD_STEP_TIME": "1", **cmd.env}
    point = {"argv": cmd.argv, "cwd": cmd.cwd, "args": command_line.job_args(settings, profile)}
    return {**point, "files": cmd.files} if cmd.files else point, env


async def start(
    conn: Connection,
    settings: Settings,
    profile_name: str,
    plan: SweepPlan,
    *,
    baseline_tok_s: float,
    resume: str | None = None,
    force: bool = False,
    fed: dict[str, Any] | None = None,
) -> JobInfo:
    """Check the profile, build every point's command and start the sweep job; returns its description.
    ``fed``: one host of a fleet sweep (``backend.fleet.sweep``): ``{"tags", "host", "port", "feed_idle_s"}``,
    the job measures the points the client feeds it, its servers on ``port`` and tagged with ``tags``, its
    records with ``host``."""
    profile = command_line.get_profile(settings, profile_name)
    if fed is not None and fed.get("port"):
        profile = replace(profile, port=fed["port"])
    if not profile.algorithm:
        raise UsageError(f"profile {profile.name} runs without speculation: sweep a profile with a drafter.")
    params: dict[str, Any] = {
        "requests": plan.requests,
        "max_tokens": plan.max_tokens,
        "smart": plan.smart,
        "first": first_index(profile, plan),
        "ready_timeout": plan.ready_timeout,
        "baseline_tok_s": baseline_tok_s,
    }
    if plan.domains:
        params.update(domains=plan.domains, endpoint=conn.host.hub_endpoint)
    if fed is not None:
        params.update(fed=True, tags=fed.get("tags") or {}, host=fed.get("host"), feed_idle_s=fed.get("feed_idle_s"))
    points = [point_profile(profile, steps, topk, tokens) for steps, topk, tokens in plan.grid()]
    return await start_points(conn, settings, profile, points, params, resume=resume, force=force)


async def start_points(
    conn: Connection,
    settings: Settings,
    profile: ProfileConfig,
    points: list[ProfileConfig],
    params: dict[str, Any],
    *,
    resume: str | None = None,
    force: bool = False,
) -> JobInfo:
    """Check ``profile`` (its preflight, a multi-node server in the way), build each point's command from its
    profile and the found server's, and start the host's sweep job with ``params`` (requests, max tokens,
    levels, ...); its description."""
    await refuse_if_running(conn)  # before the server is touched or the preflight finds its port held
    if resume is None:  # a resumed sweep leaves the host as the first one found it
        await restore_found(conn, settings)
    current = await serving.status(conn)
    running = current.get("state") in server_status.RUNNING_STATES
    if running and (current.get("args") or {}).get("nodes"):
        args = current["args"]
        raise UsageError(
            f"{conn.host.name} serves rank {args.get('node_rank') or 0} of {args.get('profile')}, a multi-node server "
            f"on {', '.join(args['nodes'])}: stop it with `specdeck serve stop` first (a sweep leaves one host's "
            "server as it found it, not a multi-node one)."
        )
    checks = await preflight_checks.preflight(conn, settings, profile, force=force)
    # The sweep stops the running server itself: its port being held is no reason to refuse.
    held = [c for c in checks.failures if c.name == "port" and running]
    if len(checks.failures) > len(held):
        raise preflight_checks.PreflightFailed(replace(checks, checks=tuple(c for c in checks.checks if c not in held)))
    commands: list[dict[str, Any]] = []
    env: dict[str, Any] = {}
    for served in points:
        command, env = _command(settings, conn.host, served)
        command["args"]["sglang_version"] = checks.version  # as serving.start records it: History's fallback
        commands.append(command)
    restore = restore_env = None
    found = current.get("profile")
    if running and found in settings.profiles:
        # Its own command, as found (a fleet's replica serves its profile on its own port, with flags of its own);
        # the env, which the host keeps nowhere, from the profile.
        _, restore_env = _command(settings, conn.host, settings.profiles[found])
        job = await conn.call("jobs.get", id=current["job"])
        restore = {"argv": job["argv"], "cwd": job.get("cwd"), "args": job["args"]}
    params = {
        **params,
        "points": commands,
        "restore": restore,
        "resume": resume,
        "env": {"points": env, "restore": restore_env or {}},
    }
    return JobInfo.from_json(await conn.call("sweep.start", **params))


@dataclass(frozen=True)
class Restored:
    """What ``restore_found`` did for a sweep that could not leave the host as found: the leftover server jobs it
    stopped, the profile it found running and the job that serves it again (None: none was running)."""

    sweep: str
    profile: str | None
    leftover: tuple[str, ...]
    started: str | None


async def restore_found(conn: Connection, settings: Settings) -> Restored | None:
    """Leave the host as the newest sweep found it when that sweep could not (killed outright, or cancelled
    while its server drained): stop the sweep's leftover server, start the profile it found running. What was
    done, else None; the host makes sure it happens once."""
    owed = await conn.call("sweep.unrestored")
    if owed["sweep"] is None:
        return None
    for job in owed["leftover"]:
        await serving.stop(conn, job=job)
    profile = owed["profile"]
    if profile is not None and profile not in settings.profiles:
        raise OperationFailed(
            f"sweep {owed['sweep']} found profile {profile} running, which this config does not have: start it "
            "yourself with `specdeck serve start`."
        )
    started = await serving.start(conn, settings, settings.profiles[profile], force=True) if profile else None
    return Restored(owed["sweep"], profile, tuple(owed["leftover"]), started["job"] if started else None)


@dataclass(frozen=True)
class SweepPoint:
    """A grid point by its numbers (``index``: its place in the grid), with what was measured there, or why it
    failed: a phase or point event's, a done event's points. ``wire`` keeps it as the host wrote it."""

    index: int | None = None
    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None
    profile: str | None = None
    adaptive: bool = False  # an adaptive profile's point (an A/B's), named by its profile
    tok_s: float | None = None
    accept_len: float | None = None
    cycle_ms: float | None = None
    run: str | None = None
    failed: str | None = None
    elapsed_s: float | None = None  # the point's restart and bench
    host: str | None = None  # a fleet sweep's: the host that measured it
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> SweepPoint:
        index = wire.get("index")
        return cls(
            index=index if isinstance(index, int) else None,
            steps=wire.get("steps"),
            topk=wire.get("topk"),
            draft_tokens=wire.get("draft_tokens"),
            profile=wire.get("profile"),
            adaptive=bool(wire.get("adaptive")),
            tok_s=wire.get("tok_s"),
            accept_len=wire.get("accept_len"),
            cycle_ms=wire.get("cycle_ms"),
            run=wire.get("run"),
            failed=wire.get("failed"),
            elapsed_s=wire.get("elapsed_s"),
            host=wire.get("host"),
            wire=wire,
        )


@dataclass(frozen=True)
class SweepEvent:
    """One event of a sweep (the host's ``events.jsonl``), typed where it arrives: ``kind`` phase (a point moving
    through stopping, starting, warming up, benching), point (measured, or failed), plan (the order; a separating
    round), done, cancelled, restored. ``point``: the point it is of (all None for none); the done event's
    ``points``, ``best`` and counts; ``started``: when the point of a phase began (a follower's, ``since``)."""

    kind: str
    point: SweepPoint = SweepPoint()
    t: float | None = None
    phase: str | None = None
    server_phase: str | None = None  # SGLang's startup phase, while starting
    concurrency: int | None = None  # an A/B's bench level
    skipped: tuple[int, ...] = ()  # plan: points taken over from an earlier sweep
    why: str | None = None  # plan: why a separating round
    points: tuple[SweepPoint, ...] = ()  # done
    best: BestPoint | None = None
    restarts: int = 0
    grid: int = 0
    saved: int = 0
    separated: dict[str, Any] | None = None  # done: the separating round's requests, steps and restarts
    sweep: str | None = None  # done: the sweep's id (a fleet sweep's own)
    ab: bool = False  # done: an adaptive A/B's, judged level by level (``adaptive_ab.ab_result``)
    started: float | None = None
    host: str | None = None  # a fleet sweep's: the host whose event it is
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> SweepEvent:
        best = wire.get("best")
        return cls(
            kind=str(wire.get("event") or ""),
            point=SweepPoint.from_json(wire),
            t=wire.get("t"),
            phase=wire.get("phase"),
            server_phase=wire.get("server_phase"),
            concurrency=wire.get("concurrency"),
            skipped=tuple(wire.get("skipped") or ()),
            why=wire.get("why"),
            points=tuple(SweepPoint.from_json(p) for p in wire.get("points") or ()),
            best=BestPoint.from_json(best) if best else None,
            restarts=int(wire.get("restarts") or 0),
            grid=int(wire.get("grid") or 0),
            saved=int(wire.get("saved") or 0),
            separated=wire.get("separated"),
            sweep=wire.get("sweep"),
            ab=bool(wire.get("ab")),
            host=wire.get("host"),
            wire=wire,
        )

    @property
    def index(self) -> int | None:
        return self.point.index

    @property
    def best_point(self) -> SweepPoint | None:
        """The done event's best as a point: its numbers and what was measured there."""
        return None if self.best is None else SweepPoint.from_json(self.best.wire)


def since(event: SweepEvent, was: SweepEvent | None, host: str | None = None) -> SweepEvent:
    """A phase event with when its point began (``started``): the previous phase's of the same point, else its own
    time; ``host``, a fleet sweep's, names where."""
    same = was is not None and was.index == event.index
    started = was.started if was is not None and same else event.t
    return replace(event, started=started, host=host or event.host)


async def events(conn: Connection, job_id: str) -> AsyncIterator[SweepEvent]:
    """The sweep's events as they are written, from the first; ends with the job."""
    async for record in bench_events(conn, job_id):
        yield SweepEvent.from_json(record)


async def follow(conn: Connection, job_id: str, on_event: Callable[[SweepEvent], None] | None = None) -> SweepEvent:
    """Follow a sweep to its end; its ``done`` event, or OperationFailed saying why there is none."""
    last = None
    async for event in events(conn, job_id):
        if on_event is not None:
            on_event(event)
        if event.kind in TERMINAL:
            last = event
    if last is not None and last.kind == "done":
        return last
    job = await get_job(conn, job_id)
    if last is not None:
        raise OperationFailed(f"sweep {job_id} was cancelled; the server it started was stopped.")
    raise OperationFailed(f"sweep {job_id} ended without a result: {job.reason or job.state}.")


async def cancel(conn: Connection, job_id: str) -> dict[str, Any]:
    """Cancel a sweep: it SIGTERMs the server and bench it started, then ends."""
    cancelled: dict[str, Any] = await conn.call("jobs.cancel", id=job_id, timeout=15)
    return cancelled


async def running(conn: Connection) -> JobInfo | None:
    """The newest running sweep job on the host, if any."""
    return newest_running(await list_jobs(conn, "sweep"))


class SweepRunning(OperationFailed):
    """A sweep (``job``) runs on the host already: one at a time."""

    def __init__(self, job: JobInfo, host: str) -> None:
        super().__init__(busy_text(job.id, host))
        self.job = job


async def refuse_if_running(conn: Connection) -> None:
    """SweepRunning naming the sweep the host runs (or whose runner died while its processes live on), if any:
    checked before anything else a start does, so that sweep is the reason given, not the port its server
    holds. The host's ``sweep.start`` refuses with the same sentence when two clients start at once."""
    active = [j for j in await list_jobs(conn, "sweep") if j.active]
    if active:
        raise SweepRunning(max(active, key=lambda j: j.started or 0), conn.host.name)


def point_name(point: SweepPoint) -> str:
    """A point by its numbers, ``steps 4 (topk 1, draft 5)``: its place in the grid (``index``) is not the order
    a smart sweep measures in, so "point 4" read as steps 4 on the second point. ``sweep`` for an event of no
    point (restoring the server found); ``grid point N`` from an agent whose events carry no numbers; an adaptive
    point by its profile (``aq-adaptive (adaptive from 3 steps)``)."""
    if point.index is None:
        return "sweep"
    if point.adaptive:
        return f"{point.profile} (adaptive from {point.steps} steps)"
    if point.steps is None:
        return f"grid point {point.index + 1}"
    return f"steps {point.steps} (topk {point.topk}, draft {point.draft_tokens})"


def point_line(point: SweepPoint) -> str:
    """One point as a line of text: its numbers and what was measured (or why it failed)."""
    head = f"steps {point.steps}, topk {point.topk}, draft tokens {point.draft_tokens}"
    if point.adaptive:
        head = f"{point.profile} (adaptive from {point.steps} steps)"
    if point.host:  # a fleet sweep's: which host measured it
        head += f" on {point.host}"
    if point.failed:
        return f"{head}: failed: {point.failed}"
    tok_s, accept, cycle = point.tok_s, point.accept_len, point.cycle_ms
    return (
        f"{head}: {tok_s:.1f} tok/s, accept length {accept:.2f}, cycle {cycle:.1f} ms (run {point.run})"
        if tok_s is not None and accept is not None and cycle is not None
        else f"{head}: no figures (run {point.run})"
    )


def public_done(done: dict[str, Any]) -> dict[str, Any]:
    """The done event as `specdeck sweep --json` prints it: the point keys of the contract first."""
    keys = ("steps", "topk", "draft_tokens", "tok_s", "accept_len", "cycle_ms", "run")

    def point(p: dict[str, Any]) -> dict[str, Any]:
        out = {k: p.get(k) for k in keys}
        out.update({k: v for k, v in p.items() if k not in out and k not in ("acceptance", "per_request")})
        return out

    out = {k: v for k, v in done.items() if k not in ("points", "best", "t")}
    out["points"] = [point(p) for p in done.get("points") or []]
    out["best"] = point(done["best"]) if done.get("best") else None
    return out
