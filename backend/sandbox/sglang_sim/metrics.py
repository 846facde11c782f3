"""SIMULATED SGLang's ``/metrics`` page: gauges, counters and phase gauges by release, in the shape SGLang's
multiprocess Prometheus registry exposes; the histograms are ``histograms.py``'s. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import threading
import time
from typing import Dict, Optional

from backend.sandbox.sglang_sim.dialect import Dialect
from backend.sandbox.sglang_sim.histograms import SimHistograms


class Metrics:
    """Prometheus text in the shape SGLang's multiprocess registry exposes (no ``_created`` samples)."""

    GAUGES = (
        ("sglang:num_running_reqs", "The number of running requests."),
        ("sglang:num_used_tokens", "The number of used tokens."),
        ("sglang:token_usage", "The token usage."),
        ("sglang:gen_throughput", "The generation throughput (token/s)."),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
        ("sglang:cache_hit_rate", "The prefix cache hit rate."),
        ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    )
    ACCEPT_LENGTH_DOC = {  # 0.5.6 metrics/collector.py:308-315; 0.5.23 observability/metrics_collector.py:511-516
        False: "The average acceptance length of speculative decoding.",
        True: "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
    }
    ACCEPT_RATE_DOC = {
        False: "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).",
        True: "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
    }
    CURRENT_GAUGES = (  # 0.5.23: DSPARK's (0.5.16+), the live speculative numbers (moving under adaptive)
        (
            "sglang:spec_cap_length",
            "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is "
            "scheduled).",
        ),
        (
            "sglang:spec_block_accept_length",
            "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in "
            "DSpark cap-accept mode).",
        ),
        ("sglang:spec_num_steps", "Currently active speculative_num_steps."),
        (
            "sglang:spec_num_draft_tokens",
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
        ),
    )
    COUNTERS = (
        ("sglang:prompt_tokens_total", "Number of prefill tokens processed."),
        ("sglang:generation_tokens_total", "Number of generation tokens processed."),
        ("sglang:num_requests_total", "Number of requests processed."),
    )
    CURRENT_COUNTERS = (("sglang:spec_verify_calls_total", "Number of speculative decoding verification calls."),)
    PHASE_GAUGES = (  # 0.5.23: startup durations, one sample per phase label
        ("sglang:startup_time_seconds", "Engine startup duration by phase in seconds."),
        ("sglang:startup_cuda_graph_time_seconds", "CUDA graph capture duration by phase in seconds."),
    )

    def __init__(self, model_name: str, dp: bool, dialect: Dialect) -> None:
        self._lock = threading.Lock()
        labels = {"engine_type": "unified", "model_name": model_name, "pp_rank": "0", "tp_rank": "0"}
        if dp:
            labels["dp_rank"] = "0"
        self._labels_dict = labels
        self._gauge_labels = self._labels(labels)
        self._counter_labels = self._labels({"model_name": model_name})
        accept_rate = (
            ("sglang:spec_accept_length", self.ACCEPT_LENGTH_DOC[dialect.drafts_only]),
            ("sglang:spec_accept_rate", self.ACCEPT_RATE_DOC[dialect.drafts_only]),
        )
        self.gauge_table = self.GAUGES + accept_rate + (self.CURRENT_GAUGES if dialect.current else ())
        self.counter_table = self.COUNTERS + (self.CURRENT_COUNTERS if dialect.current else ())
        self.phase_table = self.PHASE_GAUGES if dialect.current else ()
        self.gauges: Dict[str, float] = {}
        self.counters: Dict[str, float] = {}
        self.phases: Dict[str, Dict[str, float]] = {}
        self.histograms: Optional[SimHistograms] = None
        self.last_log_time = time.perf_counter()  # the collector's: when log_stats last wrote the gauges

    @staticmethod
    def _labels(labels: Dict[str, str]) -> str:
        return ",".join('%s="%s"' % (k, v.replace("\\", "\\\\").replace('"', '\\"')) for k, v in sorted(labels.items()))

    def set(self, values: Dict[str, float]) -> None:
        with self._lock:
            self.gauges.update(("sglang:" + k, float(v)) for k, v in values.items())
            self.last_log_time = time.perf_counter()

    def gauge(self, name: str) -> float:
        with self._lock:
            return self.gauges.get("sglang:" + name, 0.0)

    def set_phases(self, name: str, seconds: Dict[str, float]) -> None:
        """A phase-labelled gauge (``startup_time_seconds``): one value per phase."""
        with self._lock:
            self.phases["sglang:" + name] = dict(seconds)

    def count(self, prompt_tokens: int, generation_tokens: int, verify_ct: int = 0) -> None:
        with self._lock:
            for key, inc in (
                ("sglang:prompt_tokens_total", prompt_tokens),
                ("sglang:generation_tokens_total", generation_tokens),
                ("sglang:num_requests_total", 1),
                ("sglang:spec_verify_calls_total", verify_ct),
            ):
                self.counters[key] = self.counters.get(key, 0.0) + inc

    def render(self) -> str:
        out = []
        with self._lock:
            for kind, table, values, labels in (
                ("counter", self.counter_table, self.counters, self._counter_labels),
                ("gauge", self.gauge_table, self.gauges, self._gauge_labels),
            ):
                for name, doc in table:
                    if name in values:
                        out.append("# HELP %s %s" % (name, doc))
                        out.append("# TYPE %s %s" % (name, kind))
                        out.append("%s{%s} %r" % (name, labels, values[name]))
            for name, doc in self.phase_table:
                if name in self.phases:
                    out.append("# HELP %s %s" % (name, doc))
                    out.append("# TYPE %s gauge" % name)
                    for phase, value in self.phases[name].items():
                        labels = self._labels(dict(self._labels_dict, phase=phase))
                        out.append("%s{%s} %r" % (name, labels, value))
        if self.histograms is not None:
            out.extend(self.histograms.lines())
        return "\n".join(out) + "\n"
