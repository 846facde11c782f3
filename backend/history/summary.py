"""What the history reads back: a run's summary, its concurrency levels and bench curve, and the yardstick
(baseline and cycle time) runs are judged against; the judging itself is ``backend.measure.judge``'s."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from backend.agent.host.shared.measured_points import t975
from backend.measure.breakeven import live_breakeven
from backend.measure.series import interval95, requests_interval
from backend.sglang.versions import SIM_SUFFIX


@dataclass(frozen=True)
class Level:
    """What a run did at one concurrency: seconds of samples with ``streams`` running requests, and the means."""

    streams: int
    seconds: int
    tok_s: float  # per stream
    total_tok_s: float  # aggregate (SGLang's gen throughput)


def finished_requests(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A bench result's per-request figures of the requests that finished (a failed request has none)."""
    return [r for r in result.get("per_request") or [] if isinstance(r, dict) and "error" not in r]


@dataclass(frozen=True)
class Rate:
    """A bench's per-stream tok/s with the 95% interval over its requests' decode rates (Student's t, around the
    bench's own figure); ``low``/``high`` None under two requests, or for a bench recorded before per-request
    rates were kept."""

    tok_s: float
    low: float | None = None
    high: float | None = None
    requests: int = 0  # the requests with a rate (those the interval is over)

    @classmethod
    def of_bench(cls, tok_s: float, result: Mapping[str, Any]) -> Rate:
        """The rate of a bench result (``loadgen.summarize``) whose per-stream figure is ``tok_s``."""
        requests = finished_requests(result)
        interval = requests_interval((r.get("decode_tok_s") for r in requests), tok_s)
        if interval is None:
            return cls(float(tok_s), requests=sum(1 for r in requests if r.get("decode_tok_s")))
        return cls(*interval)

    @property
    def interval(self) -> tuple[float, float, float, int] | None:
        """(tok/s, low, high, requests) as ``requests_interval`` gives it; None without an interval."""
        if self.low is None or self.high is None:
            return None
        return self.tok_s, self.low, self.high, self.requests

    @property
    def se(self) -> float | None:
        """The figure's standard error (the interval's half over Student's t at its requests)."""
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2 / t975(self.requests - 1)


@dataclass(frozen=True)
class BenchLevel:
    """A run's newest bench at one concurrency: one point of its tok/s-against-concurrency curve."""

    streams: int
    tok_s: float  # per stream: the load generator's decode rate per request
    total_tok_s: float | None  # all streams together: tokens / wall time
    accept_len: float | None
    cycle_ms: float | None
    bench: str  # the bench id
    latency: dict[str, Any] | None = (
        None  # the bench's per-request percentiles: {"ttft_ms": {"p50": ...}, "itl_ms": ...}
    )
    tok_s_low: float | None = None  # the 95% interval over its requests' decode rates (``Rate``)
    tok_s_high: float | None = None
    requests: int = 0

    @property
    def rate(self) -> Rate:
        return Rate(self.tok_s, self.tok_s_low, self.tok_s_high, self.requests)

    def itl_ms(self, key: str) -> float | None:
        """The bench's inter-token latency percentile ``key`` ("p50", "p95"), None for older benches."""
        return ((self.latency or {}).get("itl_ms") or {}).get(key)


@dataclass(frozen=True)
class Yardstick:
    """What runs are judged against: the single-stream baseline tok/s (measured run or configured), the
    per-stream tok/s the measured baseline run saw at each concurrency, and the cycle time."""

    baseline_tok_s: float
    cycle_ms: float
    baseline_run: str | None = None  # the measured baseline's run id, None for the configured figure
    by_streams: dict[int, float] = field(default_factory=dict)  # running requests -> measured per-stream tok/s
    bench_by_streams: dict[int, float] = field(default_factory=dict)  # concurrency -> the baseline's bench tok/s
    # The same benches with their intervals over their requests (none for a bench without per-request rates).
    bench_rates: dict[int, Rate] = field(default_factory=dict)

    @property
    def break_even(self) -> float:
        return live_breakeven(self.cycle_ms, self.baseline_tok_s)

    @property
    def measured(self) -> bool:
        """Whether the single-stream figure was measured (the baseline run decoded one stream at a time)."""
        return self.baseline_run is not None and (self.by_streams.get(1) or self.bench_by_streams.get(1)) is not None

    @property
    def source(self) -> str:
        if self.measured:
            return f"measured by run {self.baseline_run}"
        if self.baseline_run:
            levels = self.by_streams.keys() | self.bench_by_streams.keys()
            return f"configured; run {self.baseline_run} measured {_levels_text(levels)} streams only"
        return "configured"

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_tok_s": self.baseline_tok_s,
            "baseline_source": "measured" if self.measured else "configured",
            "baseline_run": self.baseline_run,
            "baseline_by_streams": {str(k): round(v, 4) for k, v in sorted(self.by_streams.items())},
            "baseline_bench_by_streams": {str(k): round(v, 4) for k, v in sorted(self.bench_by_streams.items())},
            "baseline_bench_intervals": {
                str(k): None if r.low is None or r.high is None else [round(r.low, 4), round(r.high, 4), r.requests]
                for k, r in sorted(self.bench_rates.items())
            },
            "cycle_ms": self.cycle_ms,
            "break_even_accept_len": round(self.break_even, 4),
        }


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
    bench: dict[str, Any] | None = None  # the newest bench of this run (tok_s, accept_len, cycle_ms, ttft_ms, ...)
    server_info: dict[str, Any] = field(default_factory=dict)
    sweep: str | None = None  # the sweep job that started this run as one of its points
    latency: dict[str, Any] | None = (
        None  # its server's latency histograms as last read (backend.measure.latency.summary_json)
    )
    anatomy: dict[str, Any] | None = (
        None  # its server's newest profile: where a cycle's time went (backend.measure.anatomy)
    )
    # The training checkpoint it served and what that predicted before the restart (`specdeck train serve`).
    training: dict[str, Any] | None = None
    # The error of ``accept_len``: batch means over its per-second log samples (None under 20 of them).
    accept_len_sem: float | None = None
    accept_len_dof: int = 0
    # An adaptive run's tiers: {"steps", "seconds", "tok_s", "accept_len", "passes"} each (History.tier_means);
    # () else.
    tiers: tuple[dict[str, Any], ...] = ()
    # What a report calls it where profile and drafter do not tell it from the runs beside it (a sweep's points:
    # `eagle3-aq [aq-medai] steps 4`); set by the report, None elsewhere (``backend.report.cells.run_label``).
    label: str | None = None

    def tier_mix(self) -> dict[int, float] | None:
        """An adaptive run's share of verify passes per tier (what a pooled histogram of its requests mixes);
        None for a run that said no tier."""
        passes = {int(t["steps"]): float(t.get("passes") or 0.0) for t in self.tiers}
        total = sum(passes.values())
        return {k: v / total for k, v in passes.items() if v} if total > 0 else None

    def tiers_text(self) -> str | None:
        """``adaptive: 3 steps 58%, 5 steps 42%`` (the log time in each tier SGLang held), None for a fixed run."""
        total = sum(t["seconds"] for t in self.tiers)
        if not total:
            return None
        return "adaptive: " + ", ".join(f"{t['steps']} steps {t['seconds'] / total:.0%}" for t in self.tiers)

    @property
    def simulated(self) -> bool:
        """Served by the sandbox's SGLang simulator (its launch command, or the release it reported)."""
        return any("backend.sandbox." in arg for arg in self.argv) or (self.version or "").endswith(SIM_SUFFIX)

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

    def accept_interval(self) -> tuple[float, float] | None:
        """The log accept length's 95% interval (None under 20 seconds of samples)."""
        if self.accept_len is None or self.accept_len_sem is None:
            return None
        return interval95(self.accept_len, self.accept_len_sem, self.accept_len_dof)

    def to_json(self) -> dict[str, Any]:
        """The run's figures (``backend.measure.judge.run_json`` adds what they are judged to say)."""
        out = asdict(self)
        del out["label"]  # a report's name for it, not a figure
        out["simulated"] = self.simulated
        out["streams"] = self.streams
        interval = self.accept_interval()
        out["accept_len_low"], out["accept_len_high"] = (
            (None, None) if interval is None else map(round, interval, (4, 4))
        )
        return out
