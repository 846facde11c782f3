"""Why a cycle costs what it costs: the speculative cycle's anatomy from SGLang's own profiler, and what it means.

``capture`` starts the running server's torch profiler through a host job (``backend/agent/host/profiler.py``:
the traces are read where they are written, only the summary comes back), ``read_traces`` reads saved
``.trace.json.gz`` files here with the same reader (``backend/agent/host/shared/cycle_anatomy.py``).
``CycleAnatomy`` is the summary, typed where it arrives; ``findings`` says which stage dominates and what the
break-even would be if it shrank (``backend/measure/breakeven.py``), with the SGLang flags that change it, never as
a promise. The CLI, the panel and reports draw ``rows`` and ``findings``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared.chrome_trace import TraceError
from backend.errors import OperationFailed, UsageError
from backend.jobs import JobInfo
from backend.measure.breakeven import live_breakeven
from backend.sglang.versions import NEWEST, parse

STAGE_NAMES = ("draft", "verify", "sample", "draft_extend", "other", "decode")
DEFAULT_STEPS = 8  # scheduler iterations profiled: the first and last may be partial and are left out
BY_STAGE_FROM = (0, 5, 23)  # profile_by_stage read from this release's source (SGLANG-PROFILER.md §1)
GRAPH_SHARE = 0.1  # host launch time of graph replays worth a finding, as a share of the cycle
GAP_SHARE = 0.15  # GPU idle between stages worth a finding, as a share of the cycle

if TYPE_CHECKING:
    from backend.connection import Connection


@dataclass(frozen=True)
class StageTime:
    """One stage's mean time per cycle: ``ms`` on the GPU timeline (busy + idle), ``graph`` True for a CUDA-graph
    replay, False for eager launches, None when it had no GPU work."""

    name: str
    ms: float
    gpu_busy_ms: float
    graph: bool | None
    kernels: float = 0.0
    host_launch_ms: float = 0.0
    steps_ms: tuple[float, ...] | None = None

    @property
    def idle_ms(self) -> float:
        return max(0.0, self.ms - self.gpu_busy_ms)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> StageTime:
        steps = wire.get("steps_ms")
        return cls(
            name=str(wire["name"]),
            ms=float(wire["ms"]),
            gpu_busy_ms=float(wire["gpu_busy_ms"]),
            graph=wire.get("graph"),
            kernels=float(wire.get("kernels") or 0.0),
            host_launch_ms=float(wire.get("host_launch_ms") or 0.0),
            steps_ms=tuple(steps) if steps else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ms": self.ms,
            "gpu_busy_ms": self.gpu_busy_ms,
            "graph": self.graph,
            "kernels": self.kernels,
            "host_launch_ms": self.host_launch_ms,
            "steps_ms": list(self.steps_ms) if self.steps_ms else None,
        }


@dataclass(frozen=True)
class CycleAnatomy:
    """The mean cycle of a profile (or a plain decode step's, for a baseline server), and where it was read."""

    cycles: int
    cycle_ms: float
    stages: tuple[StageTime, ...]
    idle_ms: float
    trace: str
    baseline: CycleAnatomy | None = None
    traces: tuple[str, ...] = ()
    ranks: tuple[dict[str, Any], ...] = ()
    straggler: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    simulated: str | None = None

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> CycleAnatomy:
        """The reader's (or the host job's) summary; OperationFailed when it holds no cycle."""
        if not wire.get("cycles") or not wire.get("cycle_ms"):
            raise OperationFailed("the profile holds no whole decode cycle; profile again under load.")
        base = wire.get("baseline_step")
        return cls(
            cycles=int(wire["cycles"]),
            cycle_ms=float(wire["cycle_ms"]),
            stages=tuple(StageTime.from_json(s) for s in wire.get("stages") or ()),
            idle_ms=float(wire.get("idle_ms") or 0.0),
            trace=str(wire.get("trace") or ""),
            baseline=cls.from_json({**base, "trace": base.get("trace", "")}) if base else None,
            traces=tuple(wire.get("traces") or ()),
            ranks=tuple(wire.get("ranks") or ()),
            straggler=wire.get("straggler"),
            notes=tuple(wire.get("notes") or ()),
            simulated=wire.get("simulated"),
        )

    @property
    def speculative(self) -> bool:
        return any(s.name == "verify" for s in self.stages)

    def stage(self, name: str) -> StageTime | None:
        return next((s for s in self.stages if s.name == name), None)

    def dominant(self) -> StageTime:
        """The stage that takes the most of the cycle ("other" only when nothing else has time)."""
        named = [s for s in self.stages if s.name != "other"] or list(self.stages)
        return max(named, key=lambda s: s.ms)

    def to_json(self) -> dict[str, Any]:
        """``specdeck profile --json``'s contract: cycles, cycle_ms, stages, idle_ms, baseline_step, trace."""
        return {
            "cycles": self.cycles,
            "cycle_ms": self.cycle_ms,
            "stages": [s.to_json() for s in self.stages],
            "idle_ms": self.idle_ms,
            "baseline_step": self.baseline.to_json() if self.baseline else None,
            "trace": self.trace,
            "traces": list(self.traces),
            "ranks": list(self.ranks),
            "straggler": self.straggler,
            "notes": list(self.notes),
            "simulated": self.simulated,
        }


@dataclass(frozen=True)
class Finding:
    """What a stage's time means: a sentence, the cycle and break-even now and if the stage shrank, its source."""

    text: str
    stage: str | None = None
    cycle_ms: float | None = None
    new_cycle_ms: float | None = None
    break_even: float | None = None
    new_break_even: float | None = None
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# --- what it means ---------------------------------------------------------------------------------------------

# What makes each stage a graph replay, and where that is said.
_EAGER_WHY = {
    "verify": (
        "SGLang replays verify as a graph unless {disable} is set or the batch is above {max_bs} (the operator's "
        "build ran it eager: it had to hand hidden states to the drafter)",
        "sglang 0.5.23 model_executor/model_runner.py _forward_raw, runner/decode_cuda_graph_runner.py; FIELD-NOTES §1",
    ),
    "draft": (
        "EAGLEDraftCudaGraphRunner replays the draft steps as one graph unless {disable} is set",
        "sglang 0.5.23 speculative/eagle_worker_v2.py:695",
    ),
    "draft_extend": (
        "EAGLEDraftExtendCudaGraphRunner replays draft extend as a graph unless {disable} is set",
        "sglang 0.5.23 speculative/eagle_worker_v2.py:1207",
    ),
    "decode": (
        "a plain decode step replays as a graph unless {disable} is set or the batch is above {max_bs}",
        "sglang 0.5.23 model_executor/runner/decode_cuda_graph_runner.py",
    ),
}


def _flags(version: str | None) -> dict[str, str]:
    """The release's names for the flags the findings name."""
    from backend.sglang import flags as sglang_flags

    known = sglang_flags.table(version).flags
    max_bs = "--cuda-graph-max-bs" if "--cuda-graph-max-bs" in known else "--cuda-graph-max-bs-decode"
    return {"disable": "--disable-cuda-graph", "max_bs": max_bs}


def _what_if(a: CycleAnatomy, baseline_tok_s: float, stage: str, saved: float, text: str, source: str) -> Finding:
    """``text: cycle C → C' ms, break-even B → B'`` with ``saved`` ms off the cycle."""
    new = max(a.cycle_ms - saved, 1e-6)
    now_be, new_be = live_breakeven(a.cycle_ms, baseline_tok_s), live_breakeven(new, baseline_tok_s)
    line = f"{text}: cycle {a.cycle_ms:.1f} → {new:.1f} ms, break-even {now_be:.2f} → {new_be:.2f}"
    return Finding(line, stage, a.cycle_ms, new, now_be, new_be, source)


def findings(a: CycleAnatomy, baseline_tok_s: float, version: str | None = None) -> list[Finding]:
    """Which stage dominates, and what the cycle and break-even (at ``baseline_tok_s``) would be if a stage or the
    time between stages shrank, each with the flag or source that says how. Estimates from this trace: an eager
    stage's gaps in a profiled trace are partly the profiler's own (see the anatomy's notes)."""
    top = a.dominant()
    how = "a CUDA-graph replay" if top.graph else "eager launches" if top.graph is False else "no GPU work"
    share = top.ms / a.cycle_ms
    out = [
        Finding(f"{top.name} dominates: {top.ms:.2f} of {a.cycle_ms:.2f} ms a cycle ({share:.0%}), {how}.", top.name)
    ]
    flags = _flags(version)
    for stage in sorted(a.stages, key=lambda s: -s.idle_ms):
        if stage.graph is not False or stage.name not in _EAGER_WHY or stage.idle_ms < 0.05 * a.cycle_ms:
            continue
        why, source = _EAGER_WHY[stage.name]
        text = f"{stage.name} as a CUDA graph (its {stage.idle_ms:.1f} ms of launch gaps gone)"
        found = _what_if(a, baseline_tok_s, stage.name, stage.idle_ms, text, source)
        out.append(replace(found, text=f"{found.text}; {why.format(**flags)}."))
    verify = a.stage("verify")
    forward = a.baseline.stage("decode") if a.baseline else None
    if verify is not None and forward is not None and verify.graph and verify.ms > forward.ms:
        text = f"verify as short as a plain decode forward ({forward.ms:.2f} ms)"
        found = _what_if(a, baseline_tok_s, "verify", verify.ms - forward.ms, text, "the baseline trace")
        fewer = "; fewer draft tokens (--speculative-num-draft-tokens) make verify shorter, and accept fewer."
        out.append(replace(found, text=found.text + fewer))
    launch = sum(s.host_launch_ms for s in a.stages if s.graph)
    if launch > GRAPH_SHARE * a.cycle_ms:
        out.append(
            Finding(
                f"graph launches hold the scheduler thread {launch:.2f} ms a cycle: a large verify graph's "
                "cudaGraphLaunch is not hidden by the overlap scheduler (the profiler inflates it).",
                source="sgl-project/sglang #29960",
            )
        )
    other = a.stage("other")
    if other is not None and other.idle_ms > GAP_SHARE * a.cycle_ms:
        text = f"the {other.idle_ms:.1f} ms a cycle the GPU waits between stages (host work, launches) hidden"
        found = _what_if(a, baseline_tok_s, "other", other.idle_ms, text, "FIELD-NOTES-2026: the overlap scheduler")
        hidden = "; SGLang's overlap scheduler hides host work behind the GPU unless --disable-overlap-schedule is set."
        out.append(replace(found, text=found.text + hidden))
    if a.baseline is not None and a.speculative:
        step = a.baseline.cycle_ms
        per_stream = 1000.0 / step
        needed = live_breakeven(a.cycle_ms, per_stream)
        out.append(
            Finding(
                f"speculation adds {a.cycle_ms - step:.2f} ms to a plain decode step of {step:.2f} ms: against that "
                f"baseline ({per_stream:.0f} tok/s a stream, profiled) the break-even is {needed:.2f}.",
                cycle_ms=a.cycle_ms,
                break_even=needed,
                source="the baseline trace",
            )
        )
    return out


# --- the table ---------------------------------------------------------------------------------------------


def graph_text(graph: bool | None) -> str:
    return "graph" if graph else "eager" if graph is False else "-"


def rows(a: CycleAnatomy) -> list[tuple[str, ...]]:
    """The table the CLI, the panel and reports draw (``headers(a)``): stage, ms, share, GPU busy, idle, graph or
    eager, and with a baseline trace its plain decode step's ms for the same stage ("decode" beside verify)."""
    base = {s.name: s for s in a.baseline.stages} if a.baseline else {}
    if "decode" in base:
        base["verify"] = base.pop("decode")
    out: list[tuple[str, ...]] = []
    for s in a.stages:
        b = base.get(s.name)
        row = (s.name, f"{s.ms:.2f}", f"{s.ms / a.cycle_ms:.0%}", f"{s.gpu_busy_ms:.2f}", f"{s.idle_ms:.2f}")
        out.append((*row, graph_text(s.graph), *(() if a.baseline is None else ("-" if b is None else f"{b.ms:.2f}",))))
    busy = f"{a.cycle_ms - a.idle_ms:.2f}"
    total = ("cycle", f"{a.cycle_ms:.2f}", "100%", busy, f"{a.idle_ms:.2f}", "")
    out.append((*total, *(() if a.baseline is None else (f"{a.baseline.cycle_ms:.2f}",))))
    return out


HEADERS = ("stage", "ms", "share", "GPU busy", "idle", "launch", "baseline ms")


def headers(a: CycleAnatomy) -> tuple[str, ...]:
    """``rows``' column names: the baseline's only with a baseline trace."""
    return HEADERS if a.baseline is not None else HEADERS[:-1]


def summary_line(a: CycleAnatomy) -> str:
    """``8 cycles of 33.34 ms (11.19 idle on the GPU), 8 ranks``."""
    what = "cycles" if a.speculative else "decode steps"
    ranks = f", {len(a.ranks)} ranks" if len(a.ranks) > 1 else ""
    return f"{a.cycles} {what} of {a.cycle_ms:.2f} ms ({a.idle_ms:.2f} idle on the GPU){ranks}"


def trace_line(a: CycleAnatomy, where: str = "") -> str:
    """Where the traces are, for Perfetto: their folder when they share one (a file per rank), else the files."""
    files = a.traces or (a.trace,)
    folders = {f.rsplit("/", 1)[0] for f in files}
    shown = f"{folders.pop()}/ ({len(files)} files)" if len(files) > 1 and len(folders) == 1 else ", ".join(files)
    return f"traces{where}, for https://ui.perfetto.dev: {shown}"


# --- reading and capturing -------------------------------------------------------------------------------------


def read_traces(paths: list[str]) -> CycleAnatomy:
    """Saved traces (``.trace.json.gz``, one per rank; a plain decode trace among them is the baseline) read here;
    UsageError with the reader's sentence when one is not a trace."""
    from backend.agent.host.shared.cycle_anatomy import anatomy

    try:
        return CycleAnatomy.from_json(anatomy(paths))
    except TraceError as exc:
        raise UsageError(f"{exc}.") from None


def check_steps(steps: object) -> int:
    """``--steps`` checked: a whole number of scheduler iterations, at least 2 (the edges may be partial)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise UsageError(f"--steps must be a whole number of at least 2, got {steps!r}.")
    return steps


def start_body(version: str | None, steps: int) -> dict[str, Any]:
    """``/start_profile``'s body for the server's release, without output_dir (the host job fills it in): CPU and
    GPU, no stacks or shapes (traces several times smaller), decode batches only where the release can say so."""
    body: dict[str, Any] = {"num_steps": check_steps(steps), "activities": ["CPU", "GPU"], "with_stack": False}
    body["record_shapes"] = False
    if (parse(version or NEWEST) or (0, 0, 0)) >= BY_STAGE_FROM:
        body["profile_by_stage"] = True  # the window starts at the first decode batch, never at a prefill
    return body


async def server_release(conn: Connection, server: JobInfo) -> tuple[str | None, int]:
    """(SGLang version, TP ranks) of the running ``server``, from its server_info."""
    for path in ("/server_info", "/get_server_info"):
        page = await conn.call("http.request", url=f"http://127.0.0.1:{server.port}{path}")
        if page.get("status") == 200:
            try:
                info = json.loads(page.get("text") or "{}")
            except ValueError:
                break
            return info.get("version"), int(info.get("tp_size") or 1) * int(info.get("pp_size") or 1)
    return None, 1


@dataclass(frozen=True)
class ProfilePlan:
    """What to profile: ``steps`` scheduler iterations, these TP ``ranks`` (None: all), with ``load`` streams of
    our own (None: one when the server has none running)."""

    steps: int = DEFAULT_STEPS
    ranks: tuple[int, ...] | None = None
    load: int | None = None
    timeout_s: float = 600.0


def parse_ranks(text: str | None) -> tuple[int, ...] | None:
    """``--ranks 0,3`` → (0, 3); None for all."""
    if not text:
        return None
    try:
        ranks = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        ranks = ()
    if not ranks or min(ranks) < 0:
        raise UsageError(f"--ranks takes TP ranks, comma-separated (0 or 0,3), got {text!r}.")
    return ranks


async def start_capture(conn: Connection, server: JobInfo, plan: ProfilePlan) -> JobInfo:
    """Start a profile job on ``server``; returns the job (its args hold the trace folder on the host)."""
    from backend.measure.livefeed import describe_server

    health = await conn.call("http.request", url=f"http://127.0.0.1:{server.port}/health")
    if health.get("status") != 200:
        state = "is not answering" if health.get("status") is None else "is still starting"
        raise OperationFailed(f"the server ({describe_server(server)}) {state}; profile it once it answers.")
    version, ranks = await server_release(conn, server)
    if plan.ranks is not None and max(plan.ranks) >= ranks:
        raise UsageError(f"--ranks {max(plan.ranks)} is past the server's {ranks} TP rank(s).")
    params: dict[str, Any] = {
        "port": server.port,
        "body": start_body(version, plan.steps),
        "expect": ranks,
        "ranks": list(plan.ranks) if plan.ranks is not None else None,
        "load": plan.load,
        "timeout_s": plan.timeout_s,
        "server_job": server.id,
        "model_path": server.args.get("model"),  # whose chat template renders the load's prompts
    }
    return JobInfo.from_json(await conn.call("profile.start", **params))


async def wait_capture(
    conn: Connection, job: JobInfo, on_progress: Callable[[dict[str, Any]], None] | None = None
) -> CycleAnatomy:
    """Follow a profile job to its end: the anatomy it read, or OperationFailed saying why there is none."""
    from backend.jobs import get_job
    from backend.measure.bench import bench_events

    result = failed = None
    async for record in bench_events(conn, job.id):
        kind = record.get("event")
        if kind == "progress" and on_progress is not None:
            on_progress(record)
        elif kind == "result":
            result = record
        elif kind == "failed":
            failed = record
    if result is None:
        ended = await get_job(conn, job.id)
        reason = (failed or {}).get("reason") or ended.reason or ended.state
        raise OperationFailed(f"the profile did not finish: {reason}.")
    return CycleAnatomy.from_json(result["anatomy"])


async def capture(
    conn: Connection, server: JobInfo, plan: ProfilePlan, on_progress: Callable[[dict[str, Any]], None] | None = None
) -> CycleAnatomy:
    """Profile ``server`` and read the traces on the host; the job is cancelled if the caller gives up."""
    job = await start_capture(conn, server, plan)
    finished = False
    try:
        out = await wait_capture(conn, job, on_progress)
        finished = True
        return out
    finally:
        if not finished and conn.connected:
            await conn.call("jobs.cancel", id=job.id)


def with_kept_baseline(a: CycleAnatomy, host: str) -> CycleAnatomy:
    """``a`` with the newest profile kept in the run history of a plain decode server on ``host`` as its baseline
    step (the same table then says what speculation adds to a step); as it is when it has one, speculates not, or
    none was kept (or the history cannot be read)."""
    if a.baseline is not None or not a.speculative:
        return a
    from backend.history import History, HistoryUnavailable

    try:
        with History.open() as history:
            kept = history.profiles(host)
    except HistoryUnavailable:
        return a
    for run_id, wire in kept:
        if wire.get("cycles") and not any(s.get("name") == "verify" for s in wire.get("stages") or ()):
            base = CycleAnatomy.from_json(wire)
            note = f"the baseline step is run {run_id}'s kept profile: profile the baseline server again to renew it"
            return replace(a, baseline=base, notes=(*a.notes, note))
    return a


def keep(run_id: str, a: CycleAnatomy) -> str | None:
    """Keep ``a`` with run ``run_id`` in the run history (reports show it); the reason when it cannot be."""
    from backend.history import History, HistoryUnavailable

    try:
        with History.open() as history:
            history.set_anatomy(run_id, a.to_json())
    except HistoryUnavailable as exc:
        return str(exc)
    return None


def progress_text(event: dict[str, Any]) -> str:
    """A profile job's progress event as a few words for a status line."""
    stage = event.get("stage")
    if stage == "profiling":
        load = event.get("load")
        return "profiling" + (f" with {load} stream(s) of our own" if load else " under the server's load")
    if stage == "writing":
        return f"the server is writing its traces ({event.get('whole', 0)} of {event.get('files', 0)} whole)"
    if stage == "reading":
        return f"reading {event.get('files')} trace(s), {event.get('bytes', 0) / 1e6:.0f} MB, on the host"
    return str(stage or "")


def text_lines(a: CycleAnatomy, found: list[Finding]) -> list[str]:
    """The anatomy as the CLI prints it: the summary, the table, what it means (with sources), the notes, where the
    trace is."""
    table = [headers(a), *rows(a)]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]

    def line(row: tuple[str, ...]) -> str:
        cells = [c.ljust(w) if i in (0, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return "  ".join(cells).rstrip()

    out = [summary_line(a), *(line(r) for r in table)]
    for f in found:
        out.append(f"- {f.text}" + (f" (source: {f.source})" if f.source else ""))
    if a.straggler is None and len(a.ranks) > 1:
        out.append(f"{len(a.ranks)} ranks, none behind the others")
    out += [f"note: {n}" for n in a.notes]
    return [*out, trace_line(a)]


def bar_cells(stages: tuple[StageTime, ...], width: int, scale_ms: float) -> list[tuple[str, int, int]]:
    """A stacked bar of ``stages`` over ``width`` cells for ``scale_ms``: (stage, busy cells, idle cells) each, the
    cells rounded so that the bar's length stays proportional to its total (a stage under half a cell gets none)."""
    out = []
    edge = 0.0
    drawn = 0
    for s in stages:
        busy_end = edge + s.gpu_busy_ms / scale_ms * width
        end = edge + s.ms / scale_ms * width
        busy = round(busy_end) - drawn
        total = round(end) - drawn
        out.append((s.name, max(0, busy), max(0, total - max(0, busy))))
        drawn = round(end)
        edge = end
    return out


def bar_text(a: CycleAnatomy, width: int = 60) -> list[str]:
    """The cycle (and the baseline step) as text bars, █ busy and ░ idle, for reports: one line per bar and a key."""
    scale = max(a.cycle_ms, a.baseline.cycle_ms if a.baseline else 0.0)
    bars = [("cycle", a)] + ([("baseline", a.baseline)] if a.baseline else [])
    marks = "#=*+-~"
    names = dict.fromkeys(s.name for _, which in bars for s in which.stages)
    key = {name: marks[i % len(marks)] for i, name in enumerate(names)}
    out = []
    for label, which in bars:
        cells = bar_cells(which.stages, width, scale)
        out.append(f"{label:>8} |" + "".join(key[n] * b + "." * i for n, b, i in cells) + f"| {which.cycle_ms:.2f} ms")
    out.append("         " + "  ".join(f"{mark} {name}" for name, mark in key.items()) + "  . idle")
    return out
