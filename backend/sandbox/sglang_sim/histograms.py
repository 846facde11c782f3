"""SIMULATED SGLang latency histograms: time to first token, inter-token, end-to-end, queue time (and 0.5.23's
per-request time per output token), from the simulator's own request timings.

Names, HELP texts, default buckets and labels are the releases' own (FIELD-NOTES-TRAINING-FLEET §C; 0.5.6
``srt/metrics/collector.py`` and ``managers/tokenizer_manager.py``, 0.5.23
``srt/observability/metrics_collector.py``):

- the tokenizer's histograms carry ``model_name`` (0.5.6), or ``engine_type`` and ``model_name`` (0.5.23) with
  ``is_streaming`` on TTFT, E2E and TPOT, never on ITL;
- TTFT is observed when the first output reaches the tokenizer: at the first token for a streaming request,
  at the end for a non-streaming one (the scheduler sends it nothing before), which then records no ITL;
- ITL keeps SGLang's quirk: a release of n tokens after an interval adds n counts to the one bucket holding
  interval/n, and the whole interval to ``_sum``;
- ``queue_time_seconds`` is the scheduler's, one series per scheduler rank that emits: tp_rank 0 of each DP
  rank, or every TP rank with ``--enable-metrics-for-all-schedulers`` (each TP rank sees the same batches).
  Labels ``engine_type``, ``model_name``, ``pp_rank``, ``tp_rank`` (+ ``moe_ep_rank`` in 0.5.23) and
  ``dp_rank`` with data parallelism; requests go to DP ranks round robin.

The text is what prometheus_client's multiprocess collector writes: labels sorted, ``le`` last, buckets
cumulative, ``_sum`` and ``_count``, no ``_created``. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

TTFT = "sglang:time_to_first_token_seconds"
ITL = "sglang:inter_token_latency_seconds"
E2E = "sglang:e2e_request_latency_seconds"
TPOT = "sglang:request_time_per_output_token_seconds"  # 0.5.23 only
QUEUE = "sglang:queue_time_seconds"

_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
                0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)  # fmt: skip
_QUEUE_TAIL = (1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900,
               1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)  # fmt: skip


def _floats(values: Sequence[float]) -> Tuple[float, ...]:
    return tuple(float(v) for v in values)


# Default buckets per release and histogram (upper bounds without +Inf).
BUCKETS: Dict[str, Dict[str, Tuple[float, ...]]] = {
    "0.5.6": {
        TTFT: _floats(_TTFT_BUCKETS),
        ITL: _floats(_ITL_BUCKETS),
        E2E: _floats((*_TTFT_BUCKETS, 600, 1200, 1800, 2400)),
        QUEUE: _floats((0.0, 0.1, 0.2, 0.5, *_QUEUE_TAIL)),
    },
    "0.5.23": {
        TTFT: _floats(_TTFT_BUCKETS),
        ITL: _floats(_ITL_BUCKETS),
        TPOT: _floats(_ITL_BUCKETS),
        E2E: _floats((*_TTFT_BUCKETS, 600, 1200, 1800, 2400)),
        QUEUE: _floats((0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, *_QUEUE_TAIL)),
    },
}
HELP = {
    TTFT: "Histogram of time to first token in seconds.",
    ITL: "Histogram of inter-token latency in seconds.",
    E2E: "Histogram of End-to-end request latency in seconds",
    TPOT: "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
    QUEUE: "Histogram of queueing time in seconds.",
}
# ``--bucket-*`` flags (server args) that replace a tokenizer histogram's default buckets.
OVERRIDES = {TTFT: "bucket_time_to_first_token", ITL: "bucket_inter_token_latency", E2E: "bucket_e2e_request_latency"}
STREAMING_LABEL = (TTFT, E2E, TPOT)  # 0.5.23: is_streaming on these


class _Series(object):
    """One label set's buckets (per bucket, not cumulative, like prometheus_client's) and sum."""

    def __init__(self, n: int) -> None:
        self.buckets = [0.0] * (n + 1)  # the last is +Inf
        self.sum = 0.0


class _Family(object):
    def __init__(self, name: str, bounds: Tuple[float, ...]) -> None:
        self.name, self.bounds = name, bounds
        self.series: Dict[Tuple[Tuple[str, str], ...], _Series] = {}

    def observe(self, labels: Dict[str, str], value: float, n: int = 1, total: Optional[float] = None) -> None:
        key = tuple(sorted(labels.items()))
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = _Series(len(self.bounds))
        i = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))
        series.buckets[i] += n
        series.sum += value * n if total is None else total

    def lines(self) -> List[str]:
        if not self.series:
            return []
        out = ["# HELP %s %s" % (self.name, HELP[self.name]), "# TYPE %s histogram" % self.name]
        for key, series in self.series.items():
            labels = ",".join('%s="%s"' % (k, v) for k, v in key)
            head = labels + "," if labels else ""
            out.append("%s_sum{%s} %r" % (self.name, labels, series.sum))
            acc = 0.0
            for i, count in enumerate(series.buckets):
                acc += count
                le = repr(self.bounds[i]) if i < len(self.bounds) else "+Inf"
                out.append('%s_bucket{%sle="%s"} %r' % (self.name, head, le, acc))
            out.append("%s_count{%s} %r" % (self.name, labels, acc))
        return out


class _Timing(object):
    """What the tokenizer remembers of one request: when it came, its first output, its last release."""

    __slots__ = ("created", "first", "last", "released", "stream")

    def __init__(self, created: float, stream: bool) -> None:
        self.created, self.stream = created, stream
        self.first: Optional[float] = None
        self.last = created
        self.released = 0


class SimHistograms(object):
    """The release's latency histograms for one simulated server; every method is thread-safe."""

    def __init__(self, version: str, args: Dict[str, Any]) -> None:
        self.version = version
        self.current = version != "0.5.6"
        self._lock = threading.Lock()
        buckets = BUCKETS[version]
        self.families: Dict[str, _Family] = {}
        for name, bounds in buckets.items():
            flag = OVERRIDES.get(name)
            custom = args.get(flag) if flag else None
            self.families[name] = _Family(name, _floats(sorted(custom)) if custom else bounds)
        model = str(args.get("served_model_name") or args.get("model_path") or "default")
        self.tokenizer_labels = {"model_name": model}
        if self.current:
            self.tokenizer_labels["engine_type"] = "unified"
        self.scheduler_labels = self._scheduler_labels(args, model)
        self._timings: Dict[str, _Timing] = {}
        self._next_rank = 0

    def _scheduler_labels(self, args: Dict[str, Any], model: str) -> List[List[Dict[str, str]]]:
        """Per DP rank, the label sets of the schedulers that record (tp_rank 0, or all with the flag)."""
        dp, tp = max(1, int(args.get("dp_size") or 1)), max(1, int(args.get("tp_size") or 1))
        ep = max(1, int(args.get("ep_size") or 1))
        pp = max(1, int(args.get("pp_size") or 1))
        all_ranks = bool(args.get("enable_metrics_for_all_schedulers"))
        out = []
        for dp_rank in range(dp):
            ranks = []
            for tp_rank in range(tp if all_ranks else 1):
                for pp_rank in range(pp if all_ranks else 1):
                    labels = {"engine_type": "unified", "model_name": model, "pp_rank": str(pp_rank),
                              "tp_rank": str(tp_rank)}  # fmt: skip
                    if self.current:
                        labels["moe_ep_rank"] = str(tp_rank // max(1, tp // ep))
                    if dp > 1:
                        labels["dp_rank"] = str(dp_rank)
                    ranks.append(labels)
            out.append(ranks)
        return out

    # -- what the simulator reports ----------------------------------------------------------------------

    def arrived(self, rid: str, created: float, stream: bool) -> None:
        """A request reached the tokenizer at ``created`` (time.time())."""
        with self._lock:
            self._timings[rid] = _Timing(created, stream)

    def admitted(self, rid: str, created: float, now: Optional[float] = None) -> None:
        """The scheduler took the request into a batch: its queue time, on its DP rank's schedulers."""
        wait = max(0.0, (time.time() if now is None else now) - created)
        with self._lock:
            ranks = self.scheduler_labels[self._next_rank % len(self.scheduler_labels)]
            self._next_rank += 1
            for labels in ranks:
                self.families[QUEUE].observe(labels, wait)

    def released(self, rid: str, tokens: int, finished: bool, now: Optional[float] = None) -> None:
        """Output reached the tokenizer: ``tokens`` completion tokens in all so far."""
        now = time.time() if now is None else now
        with self._lock:
            timing = self._timings.get(rid)
            if timing is None:
                return
            labels = self.tokenizer_labels
            if timing.stream or finished:
                if timing.first is None:
                    timing.first = timing.last = now
                    timing.released = tokens
                    self._observe(TTFT, timing, now - timing.created)
                elif tokens > timing.released:
                    interval = now - timing.last
                    n = tokens - timing.released
                    self.families[ITL].observe(labels, interval / n, n, total=interval)
                    timing.last, timing.released = now, tokens
            if finished:
                del self._timings[rid]
                self._observe(E2E, timing, now - timing.created)
                if self.current and tokens > 1 and timing.first is not None:
                    self._observe(TPOT, timing, (now - timing.first) / (tokens - 1))

    def forget(self, rid: str) -> None:
        """An aborted request: nothing more is recorded for it."""
        with self._lock:
            self._timings.pop(rid, None)

    def _observe(self, name: str, timing: _Timing, value: float) -> None:
        labels = self.tokenizer_labels
        if self.current and name in STREAMING_LABEL:
            labels = dict(labels, is_streaming="true" if timing.stream else "false")
        self.families[name].observe(labels, value)

    def lines(self) -> List[str]:
        """The histograms' exposition lines, in the release's family order (empty ones left out)."""
        with self._lock:
            out: List[str] = []
            for family in self.families.values():
                out.extend(family.lines())
            return out
