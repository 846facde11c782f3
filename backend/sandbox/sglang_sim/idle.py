"""SIMULATED SGLang's idle self-check: what an idle scheduler writes to its Prometheus gauges.

Both releases' scheduler loops poll for requests without blocking and, on every pass with no batch to run, run a
self-check whose metrics part republishes the gauges (read from the PyPI wheels):

- 0.5.6: ``Scheduler.self_check_during_idle`` → ``check_memory`` (scheduler_runtime_checker_mixin.py): with
  ``--enable-metrics`` on the metrics rank, once 30 s have passed since the collector's ``last_log_time`` (set by
  every ``log_stats``: a prefill or decode line's, or the previous idle one's) it sets ``num_running_reqs`` and
  ``num_queue_reqs`` recounted, ``num_used_tokens`` and ``token_usage`` (rounded to 2 places) recounted,
  ``gen_throughput`` 0, and calls ``log_stats``: every gauge is written again, the speculative ones with the values
  they had. So an idle server's gauges turn 30 s after its last line, then are rewritten every 30 s.
- 0.5.23: ``Scheduler.on_idle`` (only when fully idle) → ``metrics_reporter._maybe_log_idle_metrics``: the same
  fields, written at once when the running gauge disagrees with the running batch (the first idle pass after a
  batch: ``gauge_stale``), else when 30 s have passed since ``last_log_time``.

``/server_info``'s ``last_gen_throughput`` is left alone, as both releases leave it. The 30 s is multiplied by
``SPECDECK_SIM_TIME_SCALE`` like startup, so tests need not wait it out. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Protocol

IDLE_LOG_S = 30.0  # both releases: "During idle time, also collect metrics every 30 seconds."


class Engine(Protocol):
    """What an idle pass reads of the scheduler (``engine.Engine``, which imports this module)."""

    metrics: Any
    running: List[Any]
    waiting: Any
    max_total_tokens: int

    def _used_tokens(self) -> int: ...


class IdleCheck:
    """The metrics part of an idle scheduler pass; ``enabled`` is ``--enable-metrics``, ``current`` 0.5.23's rule."""

    def __init__(self, enabled: bool, current: bool, scale: float) -> None:
        self.enabled, self.current = enabled, current
        self.period = IDLE_LOG_S * scale

    def run(self, engine: Engine) -> Optional[float]:
        """One idle pass (``engine._cv`` held, nothing waiting or running): republish the gauges where the release
        would; returns the seconds until it would next (None: never, metrics off), for the loop's wait."""
        if not self.enabled:
            return None
        metrics = engine.metrics
        running, queued = len(engine.running), len(engine.waiting)
        stale = self.current and metrics.gauge("num_running_reqs") != running
        if stale or time.perf_counter() > metrics.last_log_time + self.period:
            used = engine._used_tokens()
            usage = used / engine.max_total_tokens
            metrics.set(
                {
                    "num_running_reqs": running,
                    "num_used_tokens": used,
                    "token_usage": usage if self.current else round(usage, 2),
                    "gen_throughput": 0.0,
                    "num_queue_reqs": queued,
                }
            )
        wait: float = max(0.0, metrics.last_log_time + self.period - time.perf_counter()) + 0.001
        return wait
