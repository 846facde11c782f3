"""The server's status, typed where it arrives (``ServerStatus``: its state, phases, nodes and what SGLang
reported), and its words shared by the CLI and the TUI: state labels, the phase timeline, how long it has been in
its state, SGLang's startup timings, log line levels and the speculative summary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from backend.agent.host.shared.server_states import DRAFT_PHASES, PHASES
from backend.agent.host.shared.server_states import (
    STATES as STATES,  # computed on the host; re-exported for CLI and TUI
)
from backend.agent.host.shared.units import duration
from backend.errors import RemoteError
from backend.sglang import versions

RUNNING_STATES = ("starting", "ready", "orphaned", "stopping")
# A stop of a server in these states asks first (the panel's dialog, the CLI's prompt or --yes): it may be
# serving someone (an orphaned one too: its runner died, not its server).
SERVING_STATES = ("ready", "orphaned")
ENDED_STATES = ("ready", "orphaned", "crashed", "stopped", "none")  # what `start --wait-ready` waits for
# How a state reads where one is shown (the CLI and the Serve tab); the others read as they are named.
STATE_LABELS = {"orphaned": "running, orphaned"}


def running_text(status: ServerStatus, now: float) -> str:
    """The running server as a confirmation names it: ``eagle3-aq (ready for 42m10s, pid 2111)``."""
    parts = [" ".join(filter(None, (state_label(status), since_text(status, now))))]
    parts += [f"pid {status.pid}"] if status.pid else []
    return f"{status.profile or 'a server'} ({', '.join(parts)})"


ServerState = Literal["none", "starting", "ready", "orphaned", "stopping", "stopped", "crashed"]


@dataclass(frozen=True)
class Phase:
    """One startup phase the host saw: when it started and ended (epoch seconds), and what SGLang timed."""

    name: str
    start: float | None
    end: float | None
    measured: float | None = None


@dataclass(frozen=True)
class NodeStatus:
    """One node of a multi-node server as ``multinode.expand`` reports it: its host, rank, job and state."""

    node: str
    rank: int
    state: str  # a server state, or ``unknown`` where its host cannot be asked now
    job: str | None = None
    phase: str | None = None
    port: int | None = None
    pid: int | None = None
    since: float | None = None
    ended: float | None = None
    error: str | None = None
    log_path: str | None = None

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> NodeStatus:
        keys = ("job", "phase", "port", "pid", "since", "ended", "error", "log_path")
        return cls(wire["node"], wire["rank"], wire["state"], **{k: wire.get(k) for k in keys})


@dataclass(frozen=True)
class ServerStatus:
    """The host's word on its server (``serve.status`` / ``serve.wait``), parsed once where it arrives; ``wire``
    keeps it as the host said it (what ``--json`` prints)."""

    state: ServerState
    profile: str | None = None
    port: int | None = None
    pid: int | None = None
    job: str | None = None
    phase: str | None = None
    since: float | None = None
    args: dict[str, Any] = field(default_factory=dict)
    phases: tuple[Phase, ...] = ()
    server_info: dict[str, Any] | None = None
    startup_timings: dict[str, Any] | None = None
    kv_tokens: int | None = None  # max_total_num_tokens as the log stated it
    warnings: tuple[str, ...] = ()
    error: str | None = None
    hint: str | None = None
    hint_action: str | None = None
    log_path: str | None = None
    nodes: tuple[NodeStatus, ...] = ()  # a multi-node server's line per node (backend.serve.multinode.expand)
    spec_steps_now: int | None = None  # the draft steps in force (an adaptive server's tier); None without speculation
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> ServerStatus:
        if wire.get("state") not in STATES:
            raise RemoteError(f"the host reported an unknown server state {wire.get('state')!r}")
        phases = tuple(
            Phase(p["phase"], p.get("start"), p.get("end"), p.get("measured")) for p in wire.get("phases") or []
        )
        return cls(
            state=cast(ServerState, wire["state"]),
            profile=wire.get("profile"),
            port=wire.get("port"),
            pid=wire.get("pid"),
            job=wire.get("job"),
            phase=wire.get("phase"),
            since=wire.get("since"),
            args=wire.get("args") or {},
            phases=phases,
            server_info=wire.get("server_info"),
            startup_timings=wire.get("startup_timings"),
            kv_tokens=wire.get("kv_tokens"),
            warnings=tuple(wire.get("warnings") or ()),
            error=wire.get("error"),
            hint=wire.get("hint"),
            hint_action=wire.get("hint_action"),
            log_path=wire.get("log_path"),
            nodes=tuple(NodeStatus.from_json(n) for n in wire.get("nodes") or ()),
            spec_steps_now=wire.get("spec_steps_now"),
            wire=wire,
        )

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def drafter(self) -> str | None:
        return self.args.get("drafter")


# --- presentation helpers shared by the CLI and the TUI ---------------------------------------------------

_ERROR_LINE = re.compile(
    r"Traceback \(most recent|^\s+File \"|(?:Error|Exception)\b|\bERROR\b|hit an exception|sigquit|[Ff]ailed\b"
)
_WARNING_LINE = re.compile(r"\bWARNING\b|\bwarning\b|deprecated|SIGTERM received")


# A uvicorn access-log line of a GET from the host itself of what specdeck polls: the Live tab's numbers
# (/server_info or /get_server_info and /metrics, every second) and the agent's /health probe.
_POLL_LINE = re.compile(
    r'INFO:\s+127\.0\.0\.1:\d+ - "GET /(?:metrics|server_info|get_server_info|health)(?:\?[^ "]*)? HTTP/[\d.]+" \d{3}'
)


def is_poll_line(line: str) -> bool:
    """True for the access-log line of one of specdeck's own polls of the server (a person's own GET of those
    paths from the host reads the same)."""
    return _POLL_LINE.search(line) is not None


def line_level(line: str) -> str | None:
    """``error``, ``warning`` or None for one server log line (what the log pane highlights)."""
    if _ERROR_LINE.search(line):
        return "error"
    if _WARNING_LINE.search(line):
        return "warning"
    return None


def expected_phases(args: dict[str, Any] | None) -> tuple[str, ...]:
    """The startup phases a server with these job args goes through (no draft phases without a drafter)."""
    if args and args.get("drafter"):
        return PHASES
    return tuple(p for p in PHASES if p not in DRAFT_PHASES)


RowState = Literal["done", "current", "failed", "pending"]


@dataclass(frozen=True)
class TimelineRow:
    """One phase of a server's timeline: done, current, failed (where it crashed) or pending, with its duration
    in seconds (so far, for the current one; None where not started)."""

    phase: str
    state: RowState
    seconds: float | None = None


def timeline(status: ServerStatus, now: float) -> list[TimelineRow]:
    """Rows for a phase timeline: every phase this server goes through, in order."""
    seen = {entry.name: entry for entry in status.phases}
    names = list(expected_phases(status.args))
    names += [name for name in seen if name not in names]
    last = status.phases[-1].name if status.phases else None
    rows: list[TimelineRow] = []
    for name in names:
        entry = seen.get(name)
        if entry is None:
            rows.append(TimelineRow(name, "pending"))
            continue
        start, end = entry.start, entry.end
        state: RowState
        if name == last and status.state == "crashed":
            state = "failed"
        elif end is None and status.running and name != "ready":
            state = "current"
        else:
            state = "done"
        seconds = None if start is None else max(0.0, (end if end is not None else now) - start)
        if state == "done" and entry.measured is not None:
            seconds = entry.measured  # what SGLang itself timed (load, graph capture): finer than log stamps
        rows.append(TimelineRow(name, state, seconds))
    return rows


def state_label(status: ServerStatus) -> str:
    """The words for the server's state: ``ready``, ``running, orphaned``, ..."""
    return STATE_LABELS.get(status.state, status.state)


def startup_text(status: ServerStatus) -> str | None:
    """SGLang's own startup timings (0.5.23's ``Engine startup timings`` line): ``SGLang timed load_weight
    151.8s, kv_cache_allocation 0.6s, scheduler_e2e 210.1s, graphs target_verify 42.4s, draft_decode 8.2s``."""
    timings = status.startup_timings
    pool = f"KV pool {status.kv_tokens:,} tokens (max_total_num_tokens)" if status.kv_tokens else None
    if not timings:
        return pool
    parts = [f"{k} {v:.1f}s" for k, v in timings.items() if isinstance(v, int | float) and k != "tokenizer_e2e"]
    graphs = [f"{k} {v:.1f}s" for k, v in (timings.get("cuda_graph") or {}).items() if v]
    text = "SGLang timed " + ", ".join(parts + (["graphs " + ", ".join(graphs)] if graphs else []))
    return f"{text}; {pool}" if pool else text


def phase_took(seconds: float | None) -> str:
    """How long a phase took, as the timeline shows it: tenths under ten seconds (what millisecond stamps and
    SGLang's own timings resolve), else ``duration``'s 3m05s."""
    if seconds is None:
        return ""
    return f"{seconds:.1f}s" if seconds < 10 else duration(seconds)


def since_text(status: ServerStatus, now: float, minutes: bool = False) -> str:
    """How long the server has been in its state: ``for 3m05s`` while it runs, ``12s ago`` once it ended;
    ``minutes``: whole minutes past the first one (``for 3m``), for a screen that should not redraw every second
    while nothing happens."""
    if not status.since:
        return ""
    age = max(0.0, now - status.since)
    text = f"{int(age // 60)}m" if minutes and 60 <= age < 3600 else duration(age)
    return f"for {text}" if status.running else f"{text} ago"


def steps_now_text(status: ServerStatus) -> str | None:
    """``adaptive: 5 steps now`` for an adaptive server (SGLang picks the tier per batch); None otherwise."""
    if not status.args.get("adaptive") or status.spec_steps_now is None:
        return None
    return f"adaptive: {status.spec_steps_now} steps now (SGLang picks the tier per batch)"


def speculative_summary(info: dict[str, Any] | None) -> str | None:
    """``sglang 0.5.6: EAGLE3 steps 3, topk 1, draft tokens 4`` from the server's resolved args."""
    if not info:
        return None
    version = info.get("version") if isinstance(info.get("version"), str) else "?"
    # A real server past the newest known release reads "(untested version)".
    text = f"sglang {version} (SIMULATED)" if info.get("simulated") else versions.version_text(version)
    if info.get("speculative_algorithm"):
        text += (
            f": {info['speculative_algorithm']} steps {info.get('speculative_num_steps')}, "
            f"topk {info.get('speculative_eagle_topk')}, draft tokens {info.get('speculative_num_draft_tokens')}"
        )
    else:
        text += ": no speculation"
    return text
