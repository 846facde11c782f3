"""What the history reads back: a run's summary, its concurrency levels and bench curve, and the yardstick
(baseline and cycle time) runs are judged against."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from backend.measure.breakeven import live_breakeven
from backend.measure.series import clears, interval95


@dataclass(frozen=True)
class Level:
    """What a run did at one concurrency: seconds of samples with ``streams`` running requests, and the means."""

    streams: int
    seconds: int
    tok_s: float  # per stream
    total_tok_s: float  # aggregate (SGLang's gen throughput)


@dataclass(frozen=True)
class BenchLevel:
    """A run's newest bench at one concurrency: one point of its tok/s-against-concurrency curve."""

    streams: int
    tok_s: float  # per stream: the load generator's decode rate per request
    total_tok_s: float | None  # all streams together: tokens / wall time
    accept_len: float | None
    cycle_ms: float | None
    bench: str  # the bench id
    latency: dict | None = None  # the bench's per-request percentiles: {"ttft_ms": {"p50": ...}, "itl_ms": ...}

    def itl_ms(self, key: str) -> float | None:
        """The bench's inter-token latency percentile ``key`` ("p50", "p95"), None for older benches."""
        return ((self.latency or {}).get("itl_ms") or {}).get(key)


@dataclass(frozen=True)
class Versus:
    """A run against the baseline, like with like: at its own concurrency when the baseline was measured
    there, else per stream against the single-stream baseline."""

    pct: float
    streams: int | None  # the concurrency both were measured at; None: per stream vs the single-stream figure
    basis: str  # what was compared, in words

    def cell(self) -> str:
        """``+1.2% @2`` (same concurrency) or ``-4.0% /stream`` (per stream vs single-stream)."""
        return f"{self.pct:+.1f}% " + (f"@{self.streams}" if self.streams else "/stream")


@dataclass(frozen=True)
class Yardstick:
    """What runs are judged against: the single-stream baseline tok/s (measured run or configured), the
    per-stream tok/s the measured baseline run saw at each concurrency, and the cycle time."""

    baseline_tok_s: float
    cycle_ms: float
    baseline_run: str | None = None  # the measured baseline's run id, None for the configured figure
    by_streams: dict[int, float] = field(default_factory=dict)  # running requests -> measured per-stream tok/s
    bench_by_streams: dict[int, float] = field(default_factory=dict)  # concurrency -> the baseline's bench tok/s

    @property
    def break_even(self) -> float:
        return live_breakeven(self.cycle_ms, self.baseline_tok_s)

    @property
    def measured(self) -> bool:
        """Whether the single-stream figure was measured (the baseline run decoded one stream at a time)."""
        return self.baseline_run is not None and self.measured_at(1) is not None

    @property
    def source(self) -> str:
        if self.measured:
            return f"measured by run {self.baseline_run}"
        if self.baseline_run:
            levels = self.by_streams.keys() | self.bench_by_streams.keys()
            return f"configured; run {self.baseline_run} measured {_levels_text(levels)} streams only"
        return "configured"

    def measured_at(self, streams: int | None) -> float | None:
        """The per-stream tok/s the baseline run's log showed at ``streams`` running requests (what runs' and the
        Live tab's log figures compare with: like with like), else its bench there; None when it never ran at
        that concurrency. Benches compare with benches (``bench_versus``)."""
        streams = streams or 1
        return self.by_streams.get(streams) or self.bench_by_streams.get(streams)

    def at(self, streams: int | None) -> float:
        """Per-stream baseline tok/s at ``streams`` running requests: measured there, else the single-stream figure."""
        measured = self.measured_at(streams) if (streams or 1) > 1 else None
        return self.baseline_tok_s if measured is None else measured

    def versus(self, run: RunSummary) -> Versus | None:
        """``run`` against the baseline at the same concurrency when measured, else per stream vs single-stream."""
        streams = run.streams
        level = next((lv for lv in run.levels if lv.streams == streams), None)
        measured = self.measured_at(streams) if level is not None else None
        if measured is not None:
            pct = 100.0 * (level.tok_s / measured - 1.0)
            return Versus(pct, streams, f"at {streams} stream(s) vs the baseline measured at {streams}")
        if run.tok_s is None:
            return None
        where = "measured" if self.measured else "configured"
        pct = 100.0 * (run.tok_s / self.baseline_tok_s - 1.0)
        return Versus(pct, None, f"per stream vs the single-stream baseline ({where})")

    def bench_versus(self, streams: int, tok_s: float) -> Versus:
        """A bench's per-stream tok/s at ``streams`` against the baseline's bench at the same concurrency when
        one was measured, else per stream against the single-stream baseline."""
        if streams in self.bench_by_streams:
            pct = 100.0 * (tok_s / self.bench_by_streams[streams] - 1.0)
            return Versus(pct, streams, f"vs the baseline's bench at {streams} stream(s)")
        where = "measured" if self.measured else "configured"
        pct = 100.0 * (tok_s / self.baseline_tok_s - 1.0)
        return Versus(pct, None, f"per stream vs the single-stream baseline ({where})")

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_tok_s": self.baseline_tok_s,
            "baseline_source": "measured" if self.measured else "configured",
            "baseline_run": self.baseline_run,
            "baseline_by_streams": {str(k): round(v, 4) for k, v in sorted(self.by_streams.items())},
            "baseline_bench_by_streams": {str(k): round(v, 4) for k, v in sorted(self.bench_by_streams.items())},
            "cycle_ms": self.cycle_ms,
            "break_even_accept_len": round(self.break_even, 4),
        }


def crossover(baseline: dict[int, float], drafter: dict[int, float]) -> int | None:
    """The lowest concurrency measured for both at which the drafter's per-stream tok/s is below the
    baseline's (None when it stays ahead at every shared level)."""
    return next((c for c in sorted(baseline.keys() & drafter.keys()) if drafter[c] < baseline[c]), None)


def _levels_text(levels: Iterable[int]) -> str:
    return "/".join(str(n) for n in sorted(levels))


@dataclass(frozen=True)
class RunSummary:
    """One run as the runs table shows it; the means are None until it has samples."""

    id: str
    host: str
    job_id: str
    profile: str | None
    drafter: str | None
    drafter_path: str | None
    drafter_size: int | None
    drafter_sha256: str | None
    algorithm: str | None
    started: float | None
    stopped: float | None
    outcome: str | None
    reason: str | None
    is_baseline: bool
    version: str | None
    argv: list[str]
    samples: int
    tok_s: float | None  # per stream: gen throughput / running requests, averaged over busy seconds
    accept_len: float | None
    cycle_ms: float | None  # from the per-second means: 1000 × accept len / per-stream tok/s
    total_tok_s: float | None = None  # aggregate: SGLang's gen throughput, averaged over busy seconds
    levels: tuple[Level, ...] = ()  # the concurrency the run saw, most seconds first
    curve: tuple[BenchLevel, ...] = ()  # its newest bench at each concurrency, by concurrency
    bench: dict | None = None  # the newest bench of this run (tok_s, accept_len, cycle_ms, ttft_ms, ...)
    server_info: dict = field(default_factory=dict)
    sweep: str | None = None  # the sweep job that started this run as one of its points
    latency: dict | None = None  # its server's latency histograms as last read (backend.measure.latency.summary_json)
    anatomy: dict | None = None  # its server's newest profile: where a cycle's time went (backend.measure.anatomy)
    # The training checkpoint it served and what that predicted before the restart (`specdeck train serve`).
    training: dict | None = None
    # The error of ``accept_len``: batch means over its per-second log samples (None under 20 of them).
    accept_len_sem: float | None = None
    accept_len_dof: int = 0

    @property
    def speculative(self) -> bool:
        """Launched with a speculative algorithm, or seen accepting drafts (in its log or its benches)."""
        accepts = [self.accept_len, (self.bench or {}).get("accept_len"), *(p.accept_len for p in self.curve)]
        return bool(self.algorithm) or any(a is not None and a > 1.0 for a in accepts)

    def spec_numbers(self) -> tuple[int | None, int | None, int | None] | None:
        """(steps, topk, draft tokens) as the server resolved them, else as its launch command states them; None
        for a run launched without speculation."""
        keys = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
        flags = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
        stated = any(flag in self.argv for flag in ("--speculative-algorithm", *flags))
        if not (self.server_info.get("speculative_algorithm") or self.algorithm or stated):
            return None
        out = []
        for key, flag in zip(keys, flags, strict=True):
            value = self.server_info.get(key)
            if value is None and flag in self.argv[:-1]:
                value = self.argv[self.argv.index(flag) + 1]
            try:
                out.append(int(value) if value is not None else None)
            except (TypeError, ValueError):
                out.append(None)
        return out[0], out[1], out[2]

    def spec_text(self) -> str:
        """``3/1/4`` (steps/topk/draft tokens; ``?`` for one not stated), ``—`` without speculation."""
        numbers = self.spec_numbers()
        return "—" if numbers is None else "/".join("?" if n is None else str(n) for n in numbers)

    @property
    def streams(self) -> int | None:
        """The concurrency the run spent most seconds at (None without samples)."""
        return self.levels[0].streams if self.levels else None

    def concurrency_text(self) -> str:
        """The concurrency seen: ``1`` for one level, ``1 (60%) 2 (15%) 4 (5%) 8 (20%)`` for several: every level,
        by concurrency (the first three by time dropped a bench's 4-stream share)."""
        total = sum(lv.seconds for lv in self.levels)
        if len(self.levels) <= 1:
            return str(self.streams) if self.levels else "—"
        by_streams = sorted(self.levels, key=lambda lv: lv.streams)
        return " ".join(f"{lv.streams} ({100 * lv.seconds / total:.0f}%)" for lv in by_streams)

    def vs_baseline_pct(self, yardstick: Yardstick) -> float | None:
        """How much faster (+) or slower (−) than the baseline, in percent (see ``Yardstick.versus``)."""
        versus = yardstick.versus(self)
        return None if versus is None else versus.pct

    def break_even(self, yardstick: Yardstick) -> float:
        """The accept length this run had to reach: the configured break-even for one stream; for a run at more
        streams, its own cycle at that batch × the baseline per stream at that concurrency (the configured
        cycle and the single-stream baseline are one stream's figures)."""
        if (self.streams or 1) > 1 and self.cycle_ms is not None:
            return live_breakeven(self.cycle_ms, yardstick.at(self.streams))
        return yardstick.break_even

    def accept_interval(self) -> tuple[float, float] | None:
        """The log accept length's 95% interval (None under 20 seconds of samples)."""
        if self.accept_len is None or self.accept_len_sem is None:
            return None
        return interval95(self.accept_len, self.accept_len_sem, self.accept_len_dof)

    def break_even_verdict(self, yardstick: Yardstick) -> str | None:
        """``met`` / ``not met`` where the accept length's 95% interval clears the break-even, ``within noise``
        where it straddles it, ``too few samples`` without an interval; None without speculation or samples."""
        if not self.speculative or self.accept_len is None:
            return None
        interval = self.accept_interval()
        if interval is None:
            return "too few samples"
        return {1: "met", -1: "not met", 0: "within noise"}[clears(*interval, self.break_even(yardstick))]

    def break_even_met(self, yardstick: Yardstick) -> bool | None:
        """True / False only where the accept length's interval clears the break-even; else None."""
        return {"met": True, "not met": False}.get(self.break_even_verdict(yardstick) or "")

    def live_break_even(self, yardstick: Yardstick) -> float | None:
        """The break-even for this run's own measured cycle time and the baseline at its concurrency."""
        return None if self.cycle_ms is None else live_breakeven(self.cycle_ms, yardstick.at(self.streams))

    def falls_below_baseline_at(self, yardstick: Yardstick) -> int | None:
        """The lowest benched concurrency at which this speculative run is slower per stream than the baseline's
        bench at the same concurrency (None without speculation, a baseline curve, or a crossing)."""
        if not self.speculative:
            return None
        return crossover(yardstick.bench_by_streams, {point.streams: point.tok_s for point in self.curve})

    def to_json(self, yardstick: Yardstick) -> dict[str, Any]:
        out = asdict(self)
        out["streams"] = self.streams
        versus = yardstick.versus(self)
        out["vs_baseline_pct"] = None if versus is None else round(versus.pct, 2)
        out["vs_baseline_streams"] = None if versus is None else versus.streams
        out["vs_baseline_basis"] = None if versus is None else versus.basis
        out["break_even"] = round(self.break_even(yardstick), 4)
        out["break_even_met"] = self.break_even_met(yardstick)
        out["break_even_verdict"] = self.break_even_verdict(yardstick)
        interval = self.accept_interval()
        out["accept_len_low"], out["accept_len_high"] = (
            (None, None) if interval is None else map(round, interval, (4, 4))
        )
        out["falls_below_baseline_at"] = self.falls_below_baseline_at(yardstick)
        live = self.live_break_even(yardstick)
        out["live_break_even"] = None if live is None else round(live, 4)
        return out
