"""The speculative cycle's anatomy, read from the torch-profiler traces SGLang writes (one file per rank).

A decode cycle of EAGLE (v2 worker) is ``draft`` → ``step[VERIFY bs=N]`` → eagle_sample → ``draft_extend``, each
a host span (``user_annotation``) inside ``scheduler.run_batch``. The GPU work is read from the device timeline,
never from the host spans' times (the overlap scheduler launches 1-3 ms ahead): each kernel, memcpy or memset is
joined on its ``correlation`` id to the runtime call that launched it, and that call's place on the host names the
stage: the innermost stage span around it (``step[DRAFT …]`` counts for its enclosing ``draft`` or
``draft_extend``), or for work under no stage span, ``sample`` between the verify and the next span, else
``other``. A ``cudaGraphLaunch`` (one call, many GPU events) is a graph replay; a 1:1 launch is eager.

Per cycle, the GPU window runs from the cycle's first GPU event to the next cycle's first, and is split whole
among the stages: each named stage owns its hull on the GPU (first to last of its events: its own launch gaps are
its time), and whatever lies between the hulls (launch gaps, scheduler work, copies, collectives) is ``other``.
Busy is the union of every GPU event (all streams), so stages' ms sum to the cycle and busy + idle to each
stage's ms. tests/fixtures/real/traces/FORMAT.md says what the files hold. Pure and stdlib only (Python 3.8+).
"""

from __future__ import annotations

import bisect
import os
import re
from array import array
from collections import Counter
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .chrome_trace import TraceError, events, span

SPEC_STAGES = ("draft", "verify", "sample", "draft_extend", "other")
DECODE_STAGES = ("decode", "sample", "other")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
COLLECTIVE = re.compile(r"nccl|all_?reduce|allgather|all_gather|reduce_scatter|cross_device_reduce|all_to_all", re.I)
RANK_IN_NAME = re.compile(r"-((?:TP|DP|PP|EP)-\d+(?:-(?:TP|DP|PP|EP)-\d+)*)")
STRAGGLER_SHARE = 0.1  # ranks differ when their collective wait (or cycle) differs by this share of the cycle
EAGER_IDLE_SHARE = 0.3  # idle above this share of an eager cycle is mostly the profiler's own overhead

# What a launch was: one kernel (or copy) per call, a graph replay, or a call that launches nothing (a sync).
_EAGER, _GRAPH, _NONE = 0, 1, 2
Interval = Tuple[float, float]
SegKey = Tuple[Any, Any, int]  # (pid, tid, cycle ordinal on that thread)
Where = Tuple[Optional[str], Optional[int], str]  # a launch's stage, draft step and innermost span name
# a launch's segment, stage, draft step, launch kind, host duration, innermost span name
Attribution = Tuple[Optional[SegKey], str, Optional[int], int, float, str]


def span_stage(name: str) -> Optional[str]:
    """The stage a span names: SGLang's span names across releases (0.5.23 ``step[VERIFY``, older
    ``step[TARGET_VERIFY``, multi-layer EAGLE's ``step[DRAFT_EXTEND_V2``); ``step_draft`` for a draft forward
    whose stage is its enclosing ``draft`` or ``draft_extend``; None for a span that names no stage."""
    if name == "draft" or name == "draft_extend":
        return name
    if not name.startswith("step["):
        return None
    mode = name[5:].split(" ", 1)[0].rstrip("]")
    if mode in ("VERIFY", "TARGET_VERIFY"):
        return "verify"
    if mode.startswith("DRAFT_EXTEND"):
        return "draft_extend"
    if mode.startswith("DRAFT"):
        return "step_draft"
    if mode == "DECODE":
        return "decode"
    if mode in ("EXTEND", "MIXED", "PREFILL", "IDLE", "SPLIT_PREFILL"):
        return "prefill"
    return None


def _launch_kind(name: str) -> int:
    if "GraphLaunch" in name:  # cudaGraphLaunch, cuGraphLaunch(_v2), hipGraphLaunch
        return _GRAPH
    if "Launch" in name or "Memcpy" in name or "Memset" in name:
        return _EAGER
    return _NONE


class _Trace:
    """What one file holds that the anatomy needs, kept compact: spans, launches and GPU events."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.header: Dict[str, Any] = {}
        self.spans: Dict[Tuple[Any, Any], List[Tuple[float, float, str]]] = {}
        self.launches: Dict[int, Tuple[Any, Any, float, float, int, str]] = {}
        self.gpu_start = array("d")
        self.gpu_end = array("d")
        self.gpu_corr = array("q")
        self.gpu_collective = array("b")
        self.gpu_device: List[Any] = []
        self.simulated = ""
        self._names: Dict[Any, int] = {}  # kernel name -> collective (1) or not: names repeat, a search is slow
        for event in events(path, self.header):
            self._take(event)
        for key, value in self.header.items():
            if "simulated" in key.lower() and value:
                self.simulated = str(value)

    def _collective(self, name: Any) -> int:
        found = self._names.get(name)
        if found is None:
            found = self._names[name] = 1 if isinstance(name, str) and COLLECTIVE.search(name) else 0
        return found

    def _take(self, event: Dict[str, Any]) -> None:
        cat = event.get("cat")
        if cat in GPU_CATS:
            times = span(event)
            corr = (event.get("args") or {}).get("correlation")
            if times is None or not isinstance(corr, int):
                return
            self.gpu_start.append(times[0])
            self.gpu_end.append(times[1])
            self.gpu_corr.append(corr)
            self.gpu_collective.append(self._collective(event.get("name")) if cat == "kernel" else 0)
            self.gpu_device.append(event.get("pid"))
        elif cat in LAUNCH_CATS:
            times = span(event)
            corr = (event.get("args") or {}).get("correlation")
            if times is not None and isinstance(corr, int):
                name = event.get("name") or ""
                kind = _launch_kind(name)
                self.launches[corr] = (event.get("pid"), event.get("tid"), times[0], times[1] - times[0], kind, name)
        elif cat == "user_annotation":
            times = span(event)
            name = event.get("name")
            if times is not None and isinstance(name, str):
                self.spans.setdefault((event.get("pid"), event.get("tid")), []).append((times[0], times[1], name))
                if name.startswith("SIMULATED"):
                    self.simulated = self.simulated or name


# --- intervals ------------------------------------------------------------------------------------------


def merge(intervals: Iterable[Interval]) -> List[Interval]:
    """The union of ``intervals`` as sorted, disjoint intervals."""
    out: List[List[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


class _Union:
    """Merged intervals with the covered length inside any window, by bisection."""

    def __init__(self, intervals: Iterable[Interval]) -> None:
        self.iv = merge(intervals)
        self.starts = [s for s, _ in self.iv]
        self.prefix = [0.0]
        for s, e in self.iv:
            self.prefix.append(self.prefix[-1] + e - s)

    def length(self, a: float, b: float) -> float:
        if b <= a or not self.iv:
            return 0.0
        lo = max(0, bisect.bisect_right(self.starts, a) - 1)
        hi = bisect.bisect_left(self.starts, b)
        if lo >= hi:
            return 0.0
        total = self.prefix[hi] - self.prefix[lo]
        s0, e0 = self.iv[lo]
        total -= max(0.0, min(e0, a) - s0)  # the first interval's part before a
        s1, e1 = self.iv[hi - 1]
        total -= max(0.0, e1 - max(s1, b))  # the last one's part after b
        return max(0.0, total)

    def total(self) -> float:
        return self.prefix[-1]


# --- the host side: segments (one scheduler iteration each) and where each launch sits ----------------------


class _Segment:
    """One scheduler iteration on a host thread: from its anchor (``scheduler.run_batch``, or the first stage
    span when the profiler started inside run_batch) to the next anchor."""

    def __init__(self, key: SegKey, start: float, end: float, spans: List[Tuple[float, float, str]]):
        self.key = key
        self.start = start
        stages = [span_stage(name) for _, _, name in spans]
        names = set(stages)
        if {"draft", "verify", "draft_extend"} <= names:
            self.kind = "spec"
        elif "decode" in names and "draft" not in names and "verify" not in names:
            self.kind = "decode"
        elif names & {"draft", "verify", "draft_extend"}:
            self.kind = "partial"
        else:
            self.kind = "prefill" if "prefill" in names else "other"
        # sample: work under no stage span after the target's forward and before the next span on the host
        self.sample_from = self.sample_until = None  # type: Optional[float]
        targets = [(s, e) for (s, e, _), st in zip(spans, stages) if st in ("verify", "decode")]
        if targets:
            self.sample_from = targets[-1][1]
            later = [s for s, _, _ in spans if s >= self.sample_from]
            self.sample_until = min(later) if later else end


def _segments(key: Tuple[Any, Any], spans: List[Tuple[float, float, str]]) -> List[_Segment]:
    runs = [(s, e) for s, e, name in spans if name == "scheduler.run_batch"]
    run_starts = [s for s, _ in runs]

    def in_run(ts: float) -> bool:
        i = bisect.bisect_right(run_starts, ts) - 1
        return i >= 0 and runs[i][0] <= ts <= runs[i][1]

    anchors = sorted(
        {s for s, _ in runs}
        | {
            s
            for s, _, name in spans
            if span_stage(name) in ("draft", "decode", "prefill") and not in_run(s) and name != "draft_extend"
        }
    )
    ordered = sorted(spans)
    starts = [s for s, _, _ in ordered]
    out = []
    for i, start in enumerate(anchors):
        end = anchors[i + 1] if i + 1 < len(anchors) else float("inf")
        inside = ordered[bisect.bisect_left(starts, start) : bisect.bisect_left(starts, end)]
        out.append(_Segment((key[0], key[1], i), start, end, inside))
    return out


def _attribute(spans: List[Tuple[float, float, str]], launches: List[Tuple[float, int]]) -> Dict[int, Where]:
    """For each (ts, corr) launch on one thread: (stage or None, draft step or None, innermost span name)."""
    order = sorted(spans, key=lambda sp: (sp[0], -sp[1]))
    stack: List[List[Any]] = []  # [end, name, stage, draft step ordinal, steps seen (for a draft span)]
    out: Dict[int, Where] = {}
    i = 0
    for ts, corr in sorted(launches):
        while i < len(order) and order[i][0] <= ts:
            start, end, name = order[i]
            while stack and stack[-1][0] < start:
                stack.pop()
            stage = span_stage(name)
            ordinal = None
            if stage == "step_draft":
                parent = next((f for f in reversed(stack) if f[2] in ("draft", "draft_extend")), None)
                if parent is not None:
                    ordinal = parent[4]
                    parent[4] += 1
            stack.append([end, name, stage, ordinal, 0])
            i += 1
        while stack and stack[-1][0] < ts:
            stack.pop()
        out[corr] = _stage_of(stack)
    return out


def _stage_of(stack: List[List[Any]]) -> Where:
    step = None
    for frame in reversed(stack):
        stage = frame[2]
        if stage == "step_draft":
            if step is None:
                step = frame[3]
            continue
        if stage is not None:
            return stage, step if stage == "draft" else None, stack[-1][1]
    if step is not None:
        return "draft", step, stack[-1][1]
    return None, None, stack[-1][1] if stack else ""


# --- one rank ----------------------------------------------------------------------------------------------


class _Rank:
    """One host process of one file (a TP rank): its cycles on the GPU timeline."""

    def __init__(self, label: str, trace: _Trace, pid: Any) -> None:
        self.label = label
        self.path = trace.path
        self.segments: Dict[SegKey, _Segment] = {}
        self.seg_starts: Dict[Tuple[Any, Any], List[float]] = {}
        self.seg_list: Dict[Tuple[Any, Any], List[_Segment]] = {}
        for key, spans in trace.spans.items():
            if key[0] != pid:
                continue
            segs = _segments(key, spans)
            self.seg_list[key] = segs
            self.seg_starts[key] = [s.start for s in segs]
            for seg in segs:
                self.segments[seg.key] = seg
        # launch -> (segment key or None, stage, draft step, graph kind, host duration, span name)
        per_thread: Dict[Tuple[Any, Any], List[Tuple[float, int]]] = {}
        for corr, (lpid, tid, ts, _, _, _) in trace.launches.items():
            if lpid == pid:
                per_thread.setdefault((lpid, tid), []).append((ts, corr))
        self.attr: Dict[int, Attribution] = {}
        for key, launches in per_thread.items():
            spans = trace.spans.get(key, [])
            stages = _attribute(spans, launches)
            starts = self.seg_starts.get(key, [])
            for ts, corr in launches:
                stage, step, inner = stages[corr]
                i = bisect.bisect_right(starts, ts) - 1
                within = self.seg_list[key][i] if i >= 0 else None
                if (
                    stage is None
                    and within is not None
                    and within.sample_from is not None
                    and within.sample_from <= ts < (within.sample_until or float("inf"))
                ):
                    stage = "sample"
                launch = trace.launches[corr]
                self.attr[corr] = (within.key if within else None, stage or "other", step, launch[4], launch[3], inner)


def _rank_label(path: str, pid: Any, several: bool, index: int) -> str:
    found = RANK_IN_NAME.search(os.path.basename(path))
    label = found.group(1) if found else "file %d" % (index + 1)
    return "%s pid %s" % (label, pid) if several else label


def read_ranks(paths: Sequence[str]) -> List[Dict[str, Any]]:
    """Each rank's anatomy (see :func:`rank_anatomy`), in the order of ``paths``; TraceError for a bad file."""
    out = []
    for index, path in enumerate(paths):
        trace = _Trace(path)
        launching = {v[0] for v in trace.launches.values()}  # host processes that launched GPU work: the ranks
        pids = sorted(launching, key=str) or sorted({pid for pid, _ in trace.spans}, key=str)[:1]
        for pid in pids:
            rank = _Rank(_rank_label(path, pid, len(pids) > 1, index), trace, pid)
            out.append(rank_anatomy(rank, trace))
    return out


def rank_anatomy(rank: _Rank, trace: _Trace) -> Dict[str, Any]:
    """One rank's cycles: mean stage times per cycle, GPU busy and idle, whole-trace totals and notes."""
    device_rank: Dict[Any, bool] = {}
    mine: List[int] = []
    unlinked = 0
    for i, corr in enumerate(trace.gpu_corr):
        if corr in rank.attr:
            mine.append(i)
            device_rank[trace.gpu_device[i]] = True
    for i, corr in enumerate(trace.gpu_corr):  # work with no launching call: the rank that owns its device
        if corr not in trace.launches and trace.gpu_device[i] in device_rank:
            mine.append(i)
            unlinked += 1
    starts, ends = trace.gpu_start, trace.gpu_end
    everything = _Union((starts[i], ends[i]) for i in mine)
    collectives = _Union((starts[i], ends[i]) for i in mine if trace.gpu_collective[i])
    per_seg: Dict[SegKey, Dict[str, List[int]]] = {}
    stage_all: Dict[str, List[Interval]] = {}
    graph_events: Counter[int] = Counter()  # GPU events per graph launch (correlation id)
    for i in mine:
        got = rank.attr.get(trace.gpu_corr[i])
        if got is None:
            continue
        seg_key, stage = got[0], got[1]
        stage_all.setdefault(stage, []).append((starts[i], ends[i]))
        if got[3] == _GRAPH:
            graph_events[trace.gpu_corr[i]] += 1
        if seg_key is not None:
            per_seg.setdefault(seg_key, {}).setdefault(stage, []).append(i)
    first = sorted((min(starts[i] for ix in by.values() for i in ix), key) for key, by in per_seg.items())
    window_ms = (max(ends[i] for i in mine) - min(starts[i] for i in mine)) / 1e3 if mine else 0.0
    totals = {
        "window_ms": window_ms,
        "busy_ms": everything.total() / 1e3,
        "idle_ms": window_ms - everything.total() / 1e3,
        "stages_busy_ms": {k: _Union(v).total() / 1e3 for k, v in sorted(stage_all.items())},
        "gpu_events": len(mine),
        "unlinked_gpu_events": unlinked,
    }
    cycles = []
    kinds = Counter(rank.segments[key].kind for _, key in first)
    kind = "spec" if kinds.get("spec") else "decode" if kinds.get("decode") else None
    for n, (t0, key) in enumerate(first):
        seg = rank.segments[key]
        if seg.kind != kind:
            continue
        t1 = first[n + 1][0] if n + 1 < len(first) else max(ends[i] for ix in per_seg[key].values() for i in ix)
        cycles.append(_cycle(per_seg[key], trace, rank.attr, everything, collectives, t0, t1, kind))
    result: Dict[str, Any] = {
        "rank": rank.label,
        "trace": trace.path,
        "kind": kind,
        "simulated": trace.simulated or None,
        "partial_cycles": sum(c for k, c in kinds.items() if k != kind and k in ("spec", "decode", "partial")),
        "totals": totals,
    }
    result.update(_mean(cycles, kind))
    result["dropped"] = _dropped(rank, graph_events, kind)
    return result


def _cycle(
    by_stage: Dict[str, List[int]],
    trace: _Trace,
    attr: Dict[int, Attribution],
    everything: _Union,
    collectives: _Union,
    t0: float,
    t1: float,
    kind: str,
) -> Dict[str, Any]:
    """One cycle's window [t0, t1) split among its stages (see the module docstring)."""
    starts, ends, corrs = trace.gpu_start, trace.gpu_end, trace.gpu_corr
    names = SPEC_STAGES if kind == "spec" else DECODE_STAGES
    hulls: Dict[str, Interval] = {}
    own: Dict[str, _Union] = {}
    graph_time: Dict[str, float] = {}
    work_time: Dict[str, float] = {}
    host_launch: Dict[str, float] = {}
    kernels: Dict[str, int] = {}
    steps: Dict[int, List[float]] = {}
    seen_launch = set()
    for stage, idx in by_stage.items():
        stage = stage if stage in names else "other"
        own_iv = [(max(starts[i], t0), min(ends[i], t1)) for i in idx if ends[i] > t0 and starts[i] < t1]
        own[stage] = _Union(own_iv + (own[stage].iv if stage in own else []))
        if own_iv and stage != "other":
            lo = min(s for s, _ in own_iv)
            hi = max(e for _, e in own_iv)
            old = hulls.get(stage)
            hulls[stage] = (min(lo, old[0]), max(hi, old[1])) if old else (lo, hi)
        for i in idx:
            got = attr[corrs[i]]
            length = ends[i] - starts[i]
            work_time[stage] = work_time.get(stage, 0.0) + length
            if got[3] == _GRAPH:
                graph_time[stage] = graph_time.get(stage, 0.0) + length
            kernels[stage] = kernels.get(stage, 0) + 1
            if corrs[i] not in seen_launch:
                seen_launch.add(corrs[i])
                host_launch[stage] = host_launch.get(stage, 0.0) + got[4]
            if stage == "draft" and got[2] is not None:
                steps.setdefault(got[2], []).append(starts[i])
                steps[got[2]].append(ends[i])
    ms = dict.fromkeys(names, 0.0)
    busy = dict.fromkeys(names, 0.0)
    edges = sorted({t0, t1} | {x for h in hulls.values() for x in h if t0 <= x <= t1})
    for a, b in zip(edges, edges[1:]):
        if b <= a:
            continue
        owners = [st for st, (lo, hi) in hulls.items() if lo <= a and b <= hi]
        length, work = b - a, everything.length(a, b)
        if not owners:
            ms["other"] += length
            busy["other"] += work
            continue
        weights = [own[st].length(a, b) for st in owners]
        total = sum(weights)
        for st, w in zip(owners, weights):
            share = w / total if total > 0 else 1.0 / len(owners)
            ms[st] += length * share
            busy[st] += work * share
    stages = []
    for name in names:
        work = work_time.get(name, 0.0)
        stages.append(
            {
                "name": name,
                "ms": ms[name] / 1e3,
                "gpu_busy_ms": busy[name] / 1e3,
                "graph": None if not work else graph_time.get(name, 0.0) >= work / 2,
                "graph_share": None if not work else graph_time.get(name, 0.0) / work,
                "kernels": kernels.get(name, 0),
                "host_launch_ms": host_launch.get(name, 0.0) / 1e3,
                "steps_ms": [(max(v) - min(v)) / 1e3 for _, v in sorted(steps.items())]
                if name == "draft" and steps
                else None,
            }
        )
    return {
        "cycle_ms": (t1 - t0) / 1e3,
        "busy_ms": everything.length(t0, t1) / 1e3,
        "collective_ms": collectives.length(t0, t1) / 1e3,
        "stages": stages,
    }


def _mean(cycles: List[Dict[str, Any]], kind: Optional[str]) -> Dict[str, Any]:
    """Per-cycle means over ``cycles`` in the contract's shape (cycles, cycle_ms, stages, idle_ms, ...)."""
    n = len(cycles)
    if not n:
        return {
            "cycles": 0,
            "cycle_ms": None,
            "cycle_ms_range": None,
            "stages": [],
            "idle_ms": None,
            "busy_ms": None,
            "collective_ms": None,
        }

    def avg(values: Iterable[float]) -> float:
        return sum(values) / n

    stages = []
    for j, first in enumerate(cycles[0]["stages"]):
        rows = [c["stages"][j] for c in cycles]
        flags = [r["graph"] for r in rows if r["graph"] is not None]
        shares = [r["graph_share"] for r in rows if r["graph_share"] is not None]
        step_rows = [r["steps_ms"] for r in rows if r["steps_ms"]]
        width = min((len(s) for s in step_rows), default=0)
        stages.append(
            {
                "name": first["name"],
                "ms": avg(r["ms"] for r in rows),
                "gpu_busy_ms": avg(r["gpu_busy_ms"] for r in rows),
                "graph": None if not flags else sum(flags) * 2 >= len(flags),
                "graph_share": sum(shares) / len(shares) if shares else None,
                "kernels": avg(r["kernels"] for r in rows),
                "host_launch_ms": avg(r["host_launch_ms"] for r in rows),
                "steps_ms": [sum(s[k] for s in step_rows) / len(step_rows) for k in range(width)] or None,
            }
        )
    cycle = avg(c["cycle_ms"] for c in cycles)
    busy = avg(c["busy_ms"] for c in cycles)
    return {
        "cycles": n,
        "cycle_ms": cycle,
        "cycle_ms_range": [min(c["cycle_ms"] for c in cycles), max(c["cycle_ms"] for c in cycles)],
        "stages": stages,
        "idle_ms": cycle - busy,
        "busy_ms": busy,
        "collective_ms": avg(c["collective_ms"] for c in cycles),
    }


def _dropped(rank: _Rank, graph_events: Counter[int], kind: Optional[str]) -> Optional[Dict[str, Any]]:
    """Graph replays in whole cycles that recorded fewer GPU events than their siblings (the same stage under the
    same span): the profiler's activity buffer drops records under long replays (AMD-AGI/Hyperloom #1121,
    TraceLens #827). None when every replay recorded alike."""
    groups: Dict[Tuple[str, str], List[int]] = {}
    for corr, (seg_key, stage, _, launch_kind, _, inner) in rank.attr.items():
        if launch_kind != _GRAPH or seg_key is None or rank.segments[seg_key].kind != kind:
            continue
        groups.setdefault((stage, inner), []).append(graph_events.get(corr, 0))
    short = []
    for (stage, inner), counts in sorted(groups.items()):
        usual = Counter(counts).most_common(1)[0][0]
        fewer = [c for c in counts if c < usual]
        if fewer:
            short.append(
                {
                    "stage": stage,
                    "span": inner,
                    "replays": len(counts),
                    "short": len(fewer),
                    "events": min(fewer),
                    "usual_events": usual,
                }
            )
    return {"replays": short} if short else None


# --- all files -----------------------------------------------------------------------------------------------


def anatomy(paths: Sequence[str]) -> Dict[str, Any]:
    """The anatomy of the traces in ``paths`` (SGLang's ``.trace.json.gz``, one per rank; a plain decode trace
    among them is the baseline step), in the shape of ``specdeck profile --json``:
    ``{"cycles", "cycle_ms", "stages": [{"name", "ms", "gpu_busy_ms", "graph"}…], "idle_ms", "baseline_step",
    "trace", ...}`` plus ``ranks`` (each rank's figures), ``straggler`` and ``notes`` (sentences).
    Raises TraceError when a file cannot be read or holds no decode cycle."""
    if not paths:
        raise TraceError("no trace files given")
    ranks = read_ranks(paths)
    spec = [r for r in ranks if r["kind"] == "spec"]
    decode = [r for r in ranks if r["kind"] == "decode"]
    main = spec or decode
    if not main:
        raise TraceError(
            "no whole decode cycle in %s: profile a few decode steps (num_steps, under load)" % ", ".join(paths)
        )
    first = main[0]
    out: Dict[str, Any] = {key: first[key] for key in ("cycles", "cycle_ms", "stages", "idle_ms")}
    out["baseline_step"] = _baseline(decode[0]) if spec and decode else None
    out["trace"] = first["trace"]
    out["kind"] = first["kind"]
    out["busy_ms"] = first["busy_ms"]
    out["cycle_ms_range"] = first["cycle_ms_range"]
    out["traces"] = [r["trace"] for r in ranks]
    out["simulated"] = first["simulated"]
    out["ranks"] = [_rank_row(r) for r in main]
    out["straggler"] = straggler(main)
    out["totals"] = first["totals"]
    out["dropped"] = first["dropped"]
    out["notes"] = notes(first, out["straggler"])
    return out


def _baseline(rank: Dict[str, Any]) -> Dict[str, Any]:
    keys = ("cycles", "cycle_ms", "stages", "idle_ms", "busy_ms", "trace", "cycle_ms_range")
    return {key: rank[key] for key in keys}


def _rank_row(rank: Dict[str, Any]) -> Dict[str, Any]:
    keys = ("rank", "trace", "cycles", "cycle_ms", "busy_ms", "idle_ms", "collective_ms", "dropped")
    row = {key: rank[key] for key in keys}
    row["stages"] = {s["name"]: s["ms"] for s in rank["stages"]}
    return row


def straggler(ranks: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The rank the others wait for, when ranks differ: the one with the least collective wait (the others sit in
    their all-reduce for it), or without collectives the one with the longest cycle; None when they agree within
    STRAGGLER_SHARE of the cycle."""
    timed = [r for r in ranks if r["cycle_ms"]]
    if len(timed) < 2:
        return None
    cycle = max(r["cycle_ms"] for r in timed)
    waits = [r["collective_ms"] or 0.0 for r in timed]
    if max(waits) - min(waits) > STRAGGLER_SHARE * cycle:
        slow = timed[waits.index(min(waits))]
        why = "the other ranks wait up to %.2f ms a cycle in collectives for it" % (max(waits) - min(waits))
    elif cycle - min(r["cycle_ms"] for r in timed) > STRAGGLER_SHARE * cycle:
        slow = max(timed, key=lambda r: r["cycle_ms"])
        why = "its cycle is %.2f ms, the fastest rank's %.2f ms" % (slow["cycle_ms"], min(r["cycle_ms"] for r in timed))
    else:
        return None
    return {"rank": slow["rank"], "why": why}


def notes(rank: Dict[str, Any], slow: Optional[Dict[str, Any]]) -> List[str]:
    """What a reader of these figures must know about this trace, one sentence each."""
    out = []
    if rank["simulated"]:
        out.append("SIMULATED: this trace was written by specdeck's SGLang simulator, not by a GPU.")
    stages = [s for s in rank["stages"] if s["name"] != "other"]
    eager = [s["name"] for s in stages if s["graph"] is False and s["name"] != "sample"]
    cycle = rank["cycle_ms"] or 0.0
    if eager and not rank["simulated"] and rank["idle_ms"] is not None and rank["idle_ms"] > EAGER_IDLE_SHARE * cycle:
        out.append(
            "%s ran eager: the profiler slows every eager launch on the host, so much of the %.2f ms idle per cycle "
            "is the profiler's own overhead, not the server's (an eager cycle on an H200: 8.1 ms unprofiled, 16.2 ms "
            "profiled); time the cycle without the profiler (a bench) before trusting it."
            % (" and ".join(eager), rank["idle_ms"])
        )
    launch = sum(s["host_launch_ms"] for s in stages if s["graph"])
    if launch > 0:
        out.append(
            "cudaGraphLaunch holds the host %.2f ms a cycle here, inflated by the profiler (a 271-node graph on an "
            "H200: 0.13-0.18 ms unprofiled, 0.42-0.50 ms profiled)." % launch
        )
    dropped = rank["dropped"]
    if dropped:
        worst = dropped["replays"][0]
        out.append(
            "possibly dropped records: %d of %d %s graph replays recorded %d GPU events where the others recorded "
            "%d; busy and idle from this trace are not reliable (the profiler's activity buffer, AMD-AGI/"
            "Hyperloom #1121)."
            % (worst["short"], worst["replays"], worst["stage"], worst["events"], worst["usual_events"])
        )
    if rank["partial_cycles"]:
        out.append("%d partial cycle(s) at the window's edges left out." % rank["partial_cycles"])
    unlinked = rank["totals"]["unlinked_gpu_events"]
    if unlinked:
        out.append("%d GPU events had no launching call in the trace: counted as busy, in no stage." % unlinked)
    if slow:
        out.append("%s is the straggler: %s." % (slow["rank"], slow["why"]))
    return out
