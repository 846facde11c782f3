"""SGLang's `/metrics` page read per series: a row per (engine_type, dp_rank, tp_rank) and the engine's totals.

One reader for the Live tab's polls and `specdeck parse-metrics` (a saved scrape). SGLang labels every
scheduler's gauges with ``engine_type`` (``unified``, ``prefill``/``decode`` when disaggregated, ``draft`` for
the draft worker's own collector), ``tp_rank``/``pp_rank`` and, with data parallelism, ``dp_rank``; older
counters carry ``model_name`` alone. What the engine does is read from those rows:

- the TP ranks of one DP rank run one batch: the lowest ``tp_rank`` of each (engine_type, dp_rank) speaks
  for it (``--enable-metrics-for-all-schedulers`` gives every TP rank a copy of the same numbers);
- throughput, running and queued requests, retractions, KV capacity and the counters are the sum over the
  DP ranks (each decodes its own batch, SGLang issue 6892);
- token usage is per rank (each DP rank has its own KV pool): the engine's figure is the fullest rank's,
  and ``Scrape.usage_by_rank`` keeps each one;
- accept length and rate are the target's, never the draft worker's (``engine_type="draft"`` reports its
  own); over DP ranks they are weighted by each rank's throughput (tokens over verify steps), else averaged.

Histograms are kept apart from those rows, one per label set (``Scrape.histograms``, keyed by name and every
label but ``le``): the tokenizer's ``is_streaming="true"`` and ``"false"`` series share a rank, and its series
carry no rank at all; ``backend.latency`` merges and windows them. Text that stops being valid exposition
format keeps what was read before the bad line; nothing here raises on bad input.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from backend.latency import Histogram, HistogramKey

DRAFT = "draft"  # the draft worker's engine_type

# Prometheus sample name (counters keep their _total suffix) -> key in the rows and totals. 0.5.23 adds the live
# speculative numbers (they move under --speculative-adaptive) and the verify-call counter.
NAMES = {
    "sglang:gen_throughput": "gen_throughput",
    "sglang:spec_accept_length": "spec_accept_length",
    "sglang:spec_accept_rate": "spec_accept_rate",
    "sglang:num_running_reqs": "num_running_reqs",
    "sglang:num_queue_reqs": "num_queue_reqs",
    "sglang:token_usage": "token_usage",
    "sglang:generation_tokens_total": "generation_tokens_total",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:spec_num_steps": "spec_num_steps",
    "sglang:spec_num_draft_tokens": "spec_num_draft_tokens",
    "sglang:spec_verify_calls_total": "spec_verify_calls_total",
    "sglang:num_retracted_reqs": "num_retracted_reqs",
    "sglang:max_total_num_tokens": "max_total_num_tokens",
}
SUMMED = frozenset(
    {
        "gen_throughput",
        "num_running_reqs",
        "num_queue_reqs",
        "generation_tokens_total",
        "prompt_tokens_total",
        "spec_verify_calls_total",
        "num_retracted_reqs",
        "max_total_num_tokens",
    }
)
ACCEPTANCE = ("spec_accept_length", "spec_accept_rate")
# 0.5.23's startup durations, one sample per ``phase`` label -> key in Scrape.startup.
STARTUP = {
    "sglang:startup_time_seconds": "phases",
    "sglang:startup_cuda_graph_time_seconds": "cuda_graph",
}

SeriesKey = tuple[str | None, int | None, int | None]  # (engine_type, dp_rank, tp_rank)


@dataclass
class Series:
    """One (engine_type, dp_rank, tp_rank)'s figures: ``values`` by key of ``NAMES``."""

    engine_type: str | None
    dp_rank: int | None
    tp_rank: int | None
    values: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> SeriesKey:
        return self.engine_type, self.dp_rank, self.tp_rank

    @property
    def is_draft(self) -> bool:
        return self.engine_type == DRAFT

    def to_json(self) -> dict[str, Any]:
        return {
            "engine_type": self.engine_type,
            "dp_rank": self.dp_rank,
            "tp_rank": self.tp_rank,
            **{key: self.values.get(key) for key in NAMES.values()},
        }


@dataclass
class Scrape:
    """A /metrics page read: its series in page order, the engine's totals, 0.5.23's startup gauges and every
    ``sglang:`` histogram series in page order (buckets missing +Inf left out: no quantile can be read)."""

    series: list[Series]
    engine: dict[str, float | None]  # one value per key of NAMES (None where no target series has it)
    usage_by_rank: dict[int | None, float]  # token usage per DP rank (None: no dp_rank label)
    startup: dict[str, dict[str, float]]  # {"phases": {phase: s}, "cuda_graph": {phase: s}}
    short: dict[str, int] = field(default_factory=dict)  # summed key -> DP ranks that lack it (the sum is short)
    histograms: dict[HistogramKey, Histogram] = field(default_factory=dict)

    @property
    def dp_ranks(self) -> list[int | None]:
        """The target's DP ranks in order (one ``None`` without data parallelism)."""
        return sorted({s.dp_rank for s in self.series if not s.is_draft}, key=lambda r: -1 if r is None else r)

    def draft(self) -> dict[str, float | None]:
        """The draft worker's own figures (accept length and rate), None where it reports none."""
        rows = [s for s in self.series if s.is_draft]
        return {key: _first(rows, key) for key in ACCEPTANCE}

    def to_json(self) -> dict[str, Any]:
        return {
            "series": [s.to_json() for s in self.series],
            "engine": self.engine,
            "usage_by_rank": [{"dp_rank": r, "token_usage": u} for r, u in self.usage_by_rank.items()],
            "draft": self.draft(),
            "startup": self.startup,
            "short": self.short,
        }


def _families(text: str) -> Iterator[Any]:
    """The exposition's metric families; text that stops being valid ends the iteration quietly."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        yield from text_string_to_metric_families(text)
    except (ValueError, TypeError, IndexError, KeyError):
        return


def _rank(labels: dict[str, str], name: str) -> int | None:
    raw = labels.get(name)
    return int(raw) if raw is not None and raw.isdigit() else None


def _first(rows: list[Series], key: str) -> float | None:
    return next((s.values[key] for s in rows if key in s.values), None)


def only_families(text: str, names: tuple[str, ...]) -> str:
    """The lines of exposition ``text`` that belong to families named ``names`` (a prefix match: a longer
    name that begins with one is kept, and left to the reader to tell apart)."""
    keep = [
        line
        for line in text.splitlines()
        if line.startswith(names) or (line.startswith(("# HELP ", "# TYPE ")) and line[7:].startswith(names))
    ]
    return "\n".join(keep) + "\n"


def read_scrape(text: str) -> Scrape:
    """Every SGLang series on a /metrics page and what they say of the whole engine (see the module's rules)."""
    by_key: dict[SeriesKey, Series] = {}
    startup: dict[str, dict[str, float]] = {key: {} for key in STARTUP.values()}
    histograms: dict[HistogramKey, Histogram] = {}
    if isinstance(text, str):
        for family in _families(text):
            if family.type == "histogram" and family.name.startswith("sglang:"):
                histograms.update(_histograms(family))
                continue
            for sample in family.samples:
                if not math.isfinite(sample.value):
                    continue
                key = NAMES.get(sample.name)
                if key is not None:
                    labels = sample.labels
                    rank = (labels.get("engine_type"), _rank(labels, "dp_rank"), _rank(labels, "tp_rank"))
                    found = by_key.get(rank)
                    if found is None:
                        found = by_key[rank] = Series(*rank)
                    found.values.setdefault(key, float(sample.value))
                elif sample.name in STARTUP:
                    phase = sample.labels.get("phase")
                    if phase:
                        startup[STARTUP[sample.name]].setdefault(phase, float(sample.value))  # ranks: the first
    series = list(by_key.values())
    engine, usage, short = _totals(series)
    return Scrape(series, engine, usage, startup, short, histograms)


def _histograms(family: Any) -> dict[HistogramKey, Histogram]:
    """A histogram family's series by (name, labels without ``le``, sorted); the first sample of a bucket wins."""
    buckets: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    for sample in family.samples:
        labels, value = sample.labels, float(sample.value)
        if sample.name.endswith("_bucket") and "le" in labels:
            try:
                bound = float(labels["le"])
            except ValueError:
                continue
            if math.isfinite(value):
                key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                buckets.setdefault(key, {}).setdefault(bound, value)
        elif sample.name.endswith("_sum") and math.isfinite(value):
            sums.setdefault(tuple(sorted(labels.items())), value)
    out: dict[HistogramKey, Histogram] = {}
    for key, counts in buckets.items():
        bounds = sorted(counts)
        if math.isinf(bounds[-1]):
            out[(family.name, key)] = Histogram(tuple(bounds), tuple(counts[b] for b in bounds), sums.get(key, 0.0))
    return out


def _totals(series: list[Series]) -> tuple[dict[str, float | None], dict[int | None, float], dict[str, int]]:
    """The engine's figures from the target's series: one speaker per (engine_type, dp_rank), then per key
    a sum, a throughput-weighted mean (acceptance), the fullest rank (usage) or the first rank's value."""
    groups: dict[tuple[str | None, int | None], list[Series]] = {}
    for s in sorted((s for s in series if not s.is_draft), key=lambda s: -1 if s.tp_rank is None else s.tp_rank):
        groups.setdefault((s.engine_type, s.dp_rank), []).append(s)
    speakers = [{key: _first(rows, key) for key in NAMES.values()} for rows in groups.values()]
    engine: dict[str, float | None] = {}
    short: dict[str, int] = {}
    ranked = [g for (_, dp_rank), g in zip(groups, speakers, strict=True) if dp_rank is not None]
    for key in NAMES.values():
        values = [g[key] for g in speakers if g[key] is not None]
        if not values:
            engine[key] = None
        elif key in SUMMED:
            engine[key] = math.fsum(values)
            lacking = sum(1 for g in ranked if g[key] is None)
            if lacking and len(ranked) > 1:
                short[key] = lacking
        elif key == "token_usage":
            engine[key] = max(values)
        elif key in ACCEPTANCE:
            engine[key] = _acceptance(speakers, key)
        else:
            engine[key] = values[0]
    usage: dict[int | None, float] = {}
    for (_, dp_rank), rows in groups.items():
        value = _first(rows, "token_usage")
        if value is not None:
            usage[dp_rank] = max(value, usage.get(dp_rank, value))
    return engine, dict(sorted(usage.items(), key=lambda item: -1 if item[0] is None else item[0])), short


def _acceptance(speakers: list[dict[str, float | None]], key: str) -> float | None:
    """Accept length or rate over DP ranks, each weighted by its verify steps (throughput / accept length):
    the engine's tokens over its steps. The plain mean when some rank's steps are unknown."""
    ranks = [g for g in speakers if g[key] is not None]
    if len(ranks) == 1:
        return ranks[0][key]
    steps = [
        g["gen_throughput"] / g["spec_accept_length"]
        for g in ranks
        if g["gen_throughput"] is not None and g["spec_accept_length"]
    ]
    if len(steps) == len(ranks) and math.fsum(steps) > 0:
        if key == "spec_accept_length":
            return math.fsum(g["gen_throughput"] for g in ranks) / math.fsum(steps)
        return math.fsum(g[key] * w for g, w in zip(ranks, steps, strict=True)) / math.fsum(steps)
    return math.fsum(g[key] for g in ranks) / len(ranks)


def parse_metrics(text: str) -> dict[str, float | None]:
    """The engine's gauges and counters from a /metrics page (``read_scrape(text).engine``)."""
    return read_scrape(text).engine


def startup_seconds(text: str) -> dict[str, dict[str, float]]:
    """0.5.23's ``sglang:startup_time_seconds{phase}`` and ``startup_cuda_graph_time_seconds{phase}`` as
    ``{"phases": {phase: s}, "cuda_graph": {phase: s}}`` (empty where the server has none: 0.5.6)."""
    return read_scrape(text).startup
