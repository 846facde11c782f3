"""The SIMULATED SGLang's torch profiler: ``/start_profile`` and ``/stop_profile``, and the traces they write.

What the release does (read from SGLang 0.5.23's wheel, tests/fixtures/real/traces/SGLANG-PROFILER.md): the body
is a ``ProfileReq`` (output_dir, num_steps, activities, with_stack, record_shapes, profile_by_stage, profile_id,
profile_prefix, …); the capture starts at the next forward (with ``profile_by_stage``, at the first decode batch),
stops after ``num_steps`` forwards, and every TP rank writes ``[<prefix>-]<profile_id>-TP-<r>[-DECODE]
.trace.json.gz`` into ``output_dir`` with the log lines ``Profiling starts…``, ``Stop profiling…`` and ``Profiling
done. Traces are saved to: …``. One step is one scheduler iteration: with EAGLE one draft, verify, draft-extend
cycle.

The traces are torch-profiler Chrome traces with SGLang's event structure (tests/fixtures/real/traces/FORMAT.md):
``user_annotation`` spans (``scheduler.run_batch``, ``draft``, ``step[VERIFY bs=N]``, ``step[DRAFT bs=N]``,
``draft_extend``, ``copy_result_to_cpu``, ``step[DECODE bs=N]``), ``cuda_runtime`` launches (``cudaGraphLaunch``
for a replay, ``cudaLaunchKernel`` per eager kernel) and ``kernel``/``gpu_memcpy`` events joined to them by
``correlation``, the host running ahead of graph replays. They are SIMULATED: the top-level ``specdeck_simulated``
key and a ``SIMULATED …`` span say so, and the kernels are stand-ins whose times split the simulator's own cycle
cost (``pass_ms``) among the stages. 0.5.6's files name the verify forward ``step[TARGET_VERIFY bs=N]`` (the name
older builds wrote, sgl-project/sglang #29960) and have no ``-DECODE`` suffix; its span names and body were not
read from its wheel.

Which stages replay as CUDA graphs: without ``--disable-cuda-graph`` (and at a batch within
``--cuda-graph-max-bs``) draft and draft-extend do; verify does too only with ``SPECDECK_SIM_VERIFY=graph``. The
default is the operator's setup (FIELD-NOTES §1: the verify pass could not be a graph, it hands hidden states to
the drafter): an eager verify whose launch gaps leave the GPU idle for ``1 - 1/NO_CUDA_GRAPH_FACTOR`` of it.
Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

# One forward pass as recorded: (wall time, ms, batch size, replayed as a graph, its speculation's facts).
Pass = Tuple[float, float, int, bool, Dict[str, Any]]

VERIFY_ENV = "SPECDECK_SIM_VERIFY"  # "graph": the target's verify replays as a CUDA graph
SAMPLE_MS = 0.3  # eagle_sample (or a plain step's sampling)
OTHER_MS = 0.5  # verify-input build, result copies and the host's gaps between stages
GRAPH_BUSY = 0.93  # a graph replay keeps the GPU this busy over its span
GRAPH_LEAD_MS = 1.5  # the overlap scheduler launches a replay this far ahead of the GPU
KERNELS = {"draft": 24, "verify": 48, "draft_extend": 16, "decode": 40, "sample": 6, "other": 3}
KERNEL_NAMES = (
    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<SIMULATED>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float> >",
    "void rmsnorm_kernel<SIMULATED>",
)
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BODY_0_5_23 = (  # ProfileReq, managers/io_struct.py:2374-2400
    "output_dir", "start_step", "num_steps", "activities", "profile_by_stage", "with_stack", "record_shapes",
    "profile_id", "merge_profiles", "profile_prefix", "profile_stages", "detailed_annotations",
)  # fmt: skip
BODY_0_5_6 = ("output_dir", "start_step", "num_steps", "activities", "with_stack", "record_shapes")


def verify_graph() -> bool:
    return os.environ.get(VERIFY_ENV, "").strip().lower() == "graph"


class Stage(object):
    """One stage of a simulated cycle on the GPU: its span, the busy part of it, graph or eager."""

    def __init__(self, name: str, ms: float, graph: bool, eager_busy: float) -> None:
        self.name, self.ms, self.graph = name, ms, graph
        self.busy = ms * (GRAPH_BUSY if graph else eager_busy)


def plan(
    ms: float,
    spec: Dict[str, Any],
    graph: bool,
    draft_step_ms: float,
    eager_factor: float,
    verify_as_graph: bool = False,
) -> List[Stage]:
    """A cycle of ``ms`` (the simulator's ``pass_ms``) split into its stages. With ``spec``: draft (one drafter
    pass per draft step), verify (the rest), sample, draft_extend (one drafter pass), other; without: decode,
    sample, other. Eager stages are busy ``1 / eager_factor`` of their time (the launch gaps are the rest)."""
    eager_busy = 1.0 / eager_factor
    scale = 1.0 if graph else eager_factor
    if not spec:
        decode = max(0.1, ms - (SAMPLE_MS + OTHER_MS) * scale)
        return [
            Stage("decode", decode, graph, eager_busy),
            Stage("sample", SAMPLE_MS * scale, False, 0.5),
            Stage("other", OTHER_MS * scale, False, 0.1),
        ]
    draft = draft_step_ms * spec["draft_steps"] * scale
    extend = draft_step_ms * scale
    rest = draft + extend + (SAMPLE_MS + OTHER_MS) * scale
    verify = max(0.1, ms - rest)
    return [
        Stage("draft", draft, graph, eager_busy),
        Stage("verify", verify, graph and verify_as_graph, eager_busy),
        Stage("sample", SAMPLE_MS * scale, False, 0.5),
        Stage("draft_extend", extend, graph, eager_busy),
        Stage("other", OTHER_MS * scale, False, 0.1),
    ]


def verify_graph_saving(ms: float, spec: Dict[str, Any], graph: bool, draft_step_ms: float, factor: float) -> float:
    """What a cycle of ``ms`` loses when its verify replays as a graph instead of eager launches (its gaps)."""
    if not spec or not graph:
        return 0.0
    verify = plan(ms, spec, graph, draft_step_ms, factor)[1]
    return verify.ms * (1.0 - 1.0 / factor)


class _Writer(object):
    """The events of one rank's trace, built cycle by cycle (times in µs from the trace's base)."""

    def __init__(self, pid: int, device: int, tp: int) -> None:
        self.pid, self.device, self.tp = pid, device, tp
        self.events: List[Dict[str, Any]] = []
        self.corr = 1000
        self.host = 0.0  # the host thread's clock (µs): launches and spans never go back in time

    def _x(self, cat: str, name: str, pid: Any, tid: Any, ts: float, dur: float, args: Dict[str, Any]) -> None:
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3)}
        event.update({"dur": round(max(dur, 0.001), 3), "args": args})
        self.events.append(event)

    def span(self, name: str, start: float, end: float) -> None:
        self._x("user_annotation", name, self.pid, self.pid, start, end - start, {"External id": len(self.events)})

    def _launch(self, name: str, at: float, dur: float) -> int:
        self.corr += 1
        start = max(at, self.host)
        self._x("cuda_runtime", name, self.pid, self.pid, start, dur, {"cbid": 211, "correlation": self.corr})
        self.host = start + dur + 1.0
        return self.corr

    def stage(self, stage: Stage, gpu: float) -> Tuple[float, float]:
        """The stage's kernels from GPU time ``gpu`` on (µs) and their launches: one ``cudaGraphLaunch`` ahead of
        the GPU for a replay, one ``cudaLaunchKernel`` just before each kernel for eager work. Returns the host
        time its launches took (start, end), for the spans around them."""
        n = KERNELS[stage.name]
        each_busy, each_gap = stage.busy * 1e3 / n, (stage.ms - stage.busy) * 1e3 / n
        lead = GRAPH_LEAD_MS * 1e3 if stage.graph else 10.0
        start = max(self.host, gpu - lead)
        self.host = start + 2.0
        corr = self._launch("cudaGraphLaunch", self.host, 60.0 + 2.0 * n) if stage.graph else 0
        t = gpu
        for k in range(n):
            t += each_gap
            if not stage.graph:
                corr = self._launch("cudaLaunchKernel", t - 8.0, 4.0)
            collective = self.tp > 1 and stage.name in ("verify", "decode") and k % 8 == 7
            name = ALLREDUCE if collective else KERNEL_NAMES[k % len(KERNEL_NAMES)]
            args = {"device": self.device, "stream": 7, "correlation": corr, "grid": [132, 1, 1]}
            self._x("kernel", name, self.device, 7, t, each_busy, args)
            t += each_busy
        return start, self.host + 1.0


def _cycle(w: _Writer, stages: List[Stage], gpu: float, names: Dict[str, str], steps: int, run_batch: bool) -> None:
    """One scheduler iteration from GPU time ``gpu`` (µs): its stages' launches inside SGLang's spans."""
    opened = w.host
    spans: List[Tuple[str, float, float]] = []
    for stage in stages:
        parts = [stage]
        if not stage.graph and stage.name == "draft":  # eager: one step[DRAFT] forward per draft step
            parts = [Stage("draft", stage.ms / steps, False, stage.busy / stage.ms) for _ in range(steps)]
        first = None
        for part in parts:
            a, b = w.stage(part, gpu)
            gpu += part.ms * 1e3
            first = a if first is None else first
            if not stage.graph and stage.name in ("draft", "draft_extend"):
                spans.append((names["step_draft"], a, b))
        end = w.host + 1.0
        assert first is not None  # a stage has one part at least
        if stage.name in ("draft", "draft_extend"):
            spans.append((stage.name, first - 1.0, end))
        elif stage.name in ("verify", "decode"):
            spans.append((names[stage.name], first - 1.0, end))
        elif stage.name == "other":
            spans.append(("copy_result_to_cpu", first - 1.0, end))
    for name, a, b in spans:
        w.span(name, a, b)
    if run_batch:  # the profiler starts inside run_batch: the first iteration has no scheduler.run_batch span
        w.span("scheduler.run_batch", opened - 2.0, w.host + 2.0)
    w.host += 5.0


class Profiler(object):
    """The profiler of one simulated server: the HTTP side starts and stops it, the engine reports each forward."""

    def __init__(
        self,
        version: str,
        current: bool,
        tp: int,
        info: Callable[[str, str], None],
        ranks: List[str],
        costs: Dict[str, float],
    ) -> None:
        self.version, self.current, self.tp = version, current, max(1, tp)
        self.info, self.ranks, self.costs = info, ranks, costs
        self._lock = threading.Lock()
        self.active: Optional[Dict[str, Any]] = None
        self.passes: List[Pass] = []

    # -- the endpoints --------------------------------------------------------------------------------

    def start(self, body: Optional[Dict[str, Any]]) -> Tuple[int, str]:
        """``/start_profile``: (status, text) as the release answers."""
        body = body or {}
        allowed = BODY_0_5_23 if self.current else BODY_0_5_6
        unknown = sorted(k for k in body if k not in allowed)
        if unknown:
            return 400, "Unknown field(s) in the profile request: %s" % ", ".join(unknown)
        with self._lock:
            if self.active is not None:
                return 400, "Profiling is already in progress. Call /stop_profile first."
            steps = body.get("num_steps")
            self.active = {
                "dir": body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp",
                "steps": int(steps) if steps not in (None, "") else None,
                "by_stage": bool(body.get("profile_by_stage")) and self.current,
                "id": body.get("profile_id") or str(time.time()),
                "prefix": body.get("profile_prefix"),
                "started": False,
                "forwards": 0,
            }
            self.passes = []
            if not self.active["by_stage"]:
                self._begin()
        return 200, "Start profiling.\n"

    def stop(self) -> Tuple[int, str]:
        """``/stop_profile``: write what was recorded."""
        with self._lock:
            if self.active is None:
                return 400, "Profiling is not in progress. Call /start_profile first."
            self._finish()
        return 200, "Stop profiling. This will take some time.\n"

    # -- the scheduler's side ---------------------------------------------------------------------------

    def on_pass(self, decode: bool, batch: int, graph: bool, ms: float, spec: Dict[str, Any]) -> None:
        """Called by the engine after each forward of ``ms`` (ending now)."""
        with self._lock:
            active = self.active
            if active is None:
                return
            if active["by_stage"] and not active["started"]:
                if not decode:
                    return
                self._begin()
            if decode or not active["by_stage"]:  # by stage, only decode batches count
                active["forwards"] += 1
            if decode:  # a prefill counts as a step but is not written (readers leave it out)
                self.passes.append((time.time(), ms, batch, graph, spec))
            if active["steps"] is not None and active["forwards"] >= active["steps"]:
                self._finish()

    def _begin(self) -> None:
        active = self.active
        assert active is not None
        active["started"] = True
        stage = " for DECODE" if active["by_stage"] else ""
        line = "Profiling starts%s. Traces will be saved to: %s (with profile id: %s)"
        for ranks in self.ranks:
            self.info(line % (stage, active["dir"], active["id"]), ranks)

    def _finish(self) -> None:
        active, passes = self.active, self.passes
        assert active is not None
        self.active, self.passes = None, []
        suffix = "-DECODE" if active["by_stage"] else ""
        for ranks in self.ranks:
            self.info("Stop profiling%s..." % suffix, ranks)
        threading.Thread(target=self._export, args=(active, passes, suffix), daemon=True).start()

    def _export(self, active: Dict[str, Any], passes: List[Pass], suffix: str) -> None:
        os.makedirs(active["dir"], exist_ok=True)
        for rank in range(self.tp):
            prefix = active["prefix"] + "-" if active["prefix"] else ""
            name = "%s%s-TP-%d%s.trace.json.gz" % (prefix, active["id"], rank, suffix)
            write_trace(
                os.path.join(active["dir"], name), passes, rank, self.tp, self.version, self.current, self.costs
            )
        for ranks in self.ranks:
            self.info("Profiling done. Traces are saved to: %s" % active["dir"], ranks)


def write_trace(
    path: str, passes: List[Pass], rank: int, tp: int, version: str, current: bool, costs: Dict[str, float]
) -> Dict[str, Any]:
    """One rank's trace of the recorded ``passes`` ((end time, ms, batch, graph, spec) each), gzip'd at ``path``
    (written under a temporary name, then renamed); returns the document."""
    names = {"verify": "step[VERIFY bs=%d]" if current else "step[TARGET_VERIFY bs=%d]"}
    names.update({"decode": "step[DECODE bs=%d]", "step_draft": "step[DRAFT bs=%d]"})
    base = int(passes[0][0] - 1) if passes else int(time.time())
    w = _Writer(4000 + rank, rank, tp)
    w.span("SIMULATED specdeck sandbox: SGLang %s-sim, no GPU ran this" % version, 0.0, 1.0)
    free = 0.0  # where the GPU is free again: a scheduler catching up on lateness never overlaps its passes
    for i, (end, ms, batch, graph, spec) in enumerate(passes):
        stages = plan(ms, spec, graph, costs["draft_step_ms"], costs["eager_factor"], verify_graph())
        gpu = max((end - base) * 1e6 - ms * 1e3, free)
        free = gpu + ms * 1e3
        w.host = max(w.host, gpu - 2 * GRAPH_LEAD_MS * 1e3)
        steps = max(1, int(spec.get("draft_steps") or 1))
        _cycle(w, stages, gpu, {k: v % batch for k, v in names.items()}, steps, run_batch=i > 0)
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank, "name": "SIMULATED GPU", "numSms": 132}],
        "specdeck_simulated": "SIMULATED SGLang %s-sim (specdeck sandbox): no GPU ran this" % version,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base * 1000000000,
        "traceEvents": w.events,
        "traceName": path,
    }
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt") as f:
        json.dump(doc, f)
    os.replace(tmp, path)
    return doc
