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
carry no rank at all; ``backend.measure.latency`` merges and windows them.

Pages are also pasted (issues, run books, a terminal): ``families`` reads those with prometheus_client's own
parser after setting aside what is not exposition format (the shell line that fetched the page, colour codes,
grep's ``file:`` prefixes, lines cut mid-way, hand-written summaries) and says in ``Scrape.notes`` what it set
aside and how it read the rest: histogram samples without their ``# TYPE`` read as a histogram by their
``_bucket`` suffix, a counter split by a label SGLang added (``is_streaming``) summed over its values, an older
release's name read as today's, the model gateway's ``sglang_*`` spelling read as ``sglang:*``. An unreadable
page reads as nothing known and says so, never as zeros; nothing here raises on bad input.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from backend.measure.histogram import HISTOGRAMS, Histogram, HistogramKey
from backend.measure.histogram import OLD_NAMES as OLD_HISTOGRAMS
from backend.standin import import_without_init

DRAFT = "draft"  # the draft worker's engine_type

# Prometheus sample name (counters keep their _total suffix) -> key in the rows and totals. 0.5.13 adds the live
# speculative numbers (they move under --speculative-adaptive) and the verify-call counter, 0.5.16 DSPARK's cap and
# block accept lengths. The spec gauges are interval means: SGLang zeroes what they are made of at every decode-log
# tick (0.5.23 metrics_reporter.py:1001-1004), so a scrape holds the last --decode-log-interval steps' figure, never
# a run's (``run_accept_length`` is one, from the counters).
NAMES = {
    "sglang:gen_throughput": "gen_throughput",
    "sglang:spec_accept_length": "spec_accept_length",
    "sglang:spec_accept_rate": "spec_accept_rate",
    "sglang:num_running_reqs": "num_running_reqs",
    "sglang:num_queue_reqs": "num_queue_reqs",
    "sglang:token_usage": "token_usage",
    "sglang:num_used_tokens": "num_used_tokens",
    "sglang:generation_tokens_total": "generation_tokens_total",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
    "sglang:spec_num_steps": "spec_num_steps",
    "sglang:spec_num_draft_tokens": "spec_num_draft_tokens",
    "sglang:spec_verify_calls_total": "spec_verify_calls_total",
    "sglang:spec_cap_length": "spec_cap_length",
    "sglang:spec_block_accept_length": "spec_block_accept_length",
    # From SGLang PR #31750 (open, not in a release yet): the lifetime mean accept length.
    "sglang:spec_total_accept_length": "spec_total_accept_length",
    "sglang:num_retracted_reqs": "num_retracted_reqs",
    "sglang:max_total_num_tokens": "max_total_num_tokens",
}
# Names of the first collector (SGLang PR #1853, Nov 2024: ``sglang/srt/metrics/metrics_collector.py``), gone by
# the rewrite the production-metrics docs showed at the end of 2024 -> today's name.
OLD_NAMES = {
    "sglang:num_requests_running": "sglang:num_running_reqs",
    "sglang:num_requests_waiting": "sglang:num_queue_reqs",
}
# Hybrid models' per-pool usage (full attention, sliding window; ``full_token_usage`` since SGLang PR #19982,
# March 2026): the engine's token usage where the page has no ``token_usage``, as the fullest pool (the log's rule).
POOL_USAGE = ("sglang:full_token_usage", "sglang:swa_token_usage")
SUMMED = frozenset(
    {
        "gen_throughput",
        "num_running_reqs",
        "num_queue_reqs",
        "num_used_tokens",
        "generation_tokens_total",
        "prompt_tokens_total",
        "spec_verify_calls_total",
        "num_retracted_reqs",
        "max_total_num_tokens",
    }
)
ACCEPTANCE = ("spec_accept_length", "spec_accept_rate")
# Means per verify step: over DP ranks weighted by each rank's verify steps, as accept length and rate are.
PER_VERIFY = (*ACCEPTANCE, "spec_cap_length", "spec_block_accept_length", "spec_total_accept_length")
# From SGLang PR #31750 (open, not in a release yet: no release's metrics_collector.py has them, 0.5.6-0.5.23): the
# conditional acceptance at each draft position over the last decode-log interval and over the server's life,
# positions past a pass's adaptive tier counted unobserved. The PR's text names the series, not their position
# label: the position is read from the one label beyond a series' place whose values are whole numbers.
PER_POSITION = {
    "sglang:spec_accept_rate_per_position": "interval",
    "sglang:spec_total_accept_rate_per_position": "total",
}
PR_31750 = "from SGLang PR #31750, not in a release yet"
# 0.5.23's startup durations, one sample per ``phase`` label -> key in Scrape.startup.
STARTUP = {
    "sglang:startup_time_seconds": "phases",
    "sglang:startup_cuda_graph_time_seconds": "cuda_graph",
}
# The labels that place a series in the engine; any other label that takes several values splits one series.
_PLACE = frozenset({"engine_type", "dp_rank", "tp_rank", "pp_rank", "moe_ep_rank", "model_name", "name", "pid"})

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
    ``sglang:`` histogram series in page order (buckets missing +Inf left out: no quantile can be read);
    ``notes`` says what of the text was not read, and how the rest was."""

    series: list[Series]
    engine: dict[str, float | None]  # one value per key of NAMES (None where no target series has it)
    usage_by_rank: dict[int | None, float]  # token usage per DP rank (None: no dp_rank label)
    startup: dict[str, dict[str, float]]  # {"phases": {phase: s}, "cuda_graph": {phase: s}}
    short: dict[str, int] = field(default_factory=dict)  # summed key -> DP ranks that lack it (the sum is short)
    histograms: dict[HistogramKey, Histogram] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # PR #31750's per-position gauges (``PER_POSITION``): {"interval"|"total": [a_1, a_2, …]} (None: a gap)
    per_position: dict[str, list[float | None]] = field(default_factory=dict)

    def run_accept_length(self, earlier: Scrape | None = None) -> float | None:
        """The mean accept length from totals, never from an interval gauge: generation tokens over verify calls
        of the requests finished since ``earlier`` (a scrape of the same server) or since the server started
        (``sglang:spec_verify_calls_total``, 0.5.13+, grows by a request's verify count when it finishes, as
        ``generation_tokens_total`` by its tokens: metrics_collector.py:2092-2112); else PR #31750's lifetime
        ``spec_total_accept_length``; None where the page has neither (0.5.6-0.5.12)."""
        tokens, verifies = self.engine.get("generation_tokens_total"), self.engine.get("spec_verify_calls_total")
        if earlier is not None and tokens is not None and verifies is not None:
            before_tokens = earlier.engine.get("generation_tokens_total") or 0.0
            before_verifies = earlier.engine.get("spec_verify_calls_total") or 0.0
            tokens, verifies = tokens - before_tokens, verifies - before_verifies
        if tokens is not None and verifies:
            return tokens / verifies
        return self.engine.get("spec_total_accept_length") if earlier is None else None

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
            "notes": self.notes,
            "run_accept_length": self.run_accept_length(),
            "per_position": self.per_position or None,
        }


# --- the exposition text, as pasted --------------------------------------------------------------------


class Family(NamedTuple):
    """One metric family as prometheus_client's parser gives it (``type`` "histogram", "unknown", …)."""

    name: str
    type: str
    samples: list[Any]
    inferred: bool = False  # a histogram gathered from samples without its # TYPE line


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_VALUE = r"[-+]?(?:[0-9]+\.?[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|[Ii]nf|NaN|nan)"
_LABELS = r'\{[ \t]*(?:[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*,?[ \t]*)*\}'
_SAMPLE = re.compile(rf"[A-Za-z_:][A-Za-z0-9_:]*(?:{_LABELS})?[ \t]+{_VALUE}(?:[ \t]+-?[0-9]+)?[ \t]*")
_META = re.compile(
    r"#[ \t]+(?:HELP[ \t]+[A-Za-z_:][A-Za-z0-9_:]*(?:[ \t].*)?"
    r"|TYPE[ \t]+[A-Za-z_:][A-Za-z0-9_:]*[ \t]+(?:counter|gauge|histogram|summary|untyped|unknown))[ \t]*"
)
# What stands before a sample on a pasted line: grep's ``file:`` or ``file:12:``, docker compose's ``name-1  | ``.
_PREFIX = re.compile(r"[\w./-]+(?::[0-9]+)?:|[\w.-]+[ \t]+\|[ \t]?")
# The shell around a page: a prompt, or the command that fetched it.
_SHELL = re.compile(r"(?:[$%>#][ \t]*)?(?:curl|wget|http|kubectl|docker|ssh)\b|[$%>][ \t]")


def _clip(line: str, width: int = 60) -> str:
    """A line quoted for a note: runs of spaces as one, at most ``width`` characters."""
    line = " ".join(line.split())
    return repr(line if len(line) <= width else line[: width - 1] + "…")


def _unreadable(lines: list[str], what: str = "line", done: str = "unreadable") -> str:
    """``3 lines unreadable: 'a'; 'b'; 'c' and 2 more``: a count and the first few, quoted."""
    shown = "; ".join(_clip(line) for line in lines[:3])
    more = f" and {len(lines) - 3} more" if len(lines) > 3 else ""
    return f"{len(lines)} {what}{'s' if len(lines) != 1 else ''} {done}: {shown}{more}"


def _tolerant(text: str) -> tuple[str, list[str], int]:
    """The exposition lines of a pasted page, notes on what was set aside, and how many samples were kept."""
    keep: list[str] = []
    shell: list[str] = []
    bad: list[str] = []
    prefixed = 0
    samples = 0
    coloured = "\x1b" in text
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).strip() if coloured else raw.strip()
        if not line:
            keep.append("")
            continue
        if line[0] == "#" and _META.fullmatch(line):
            keep.append(line)
            continue
        if _SAMPLE.fullmatch(line):
            keep.append(line)
            samples += 1
            continue
        prefix = _PREFIX.match(line)
        rest = line[prefix.end() :].lstrip() if prefix else ""
        if rest and (_SAMPLE.fullmatch(rest) or (rest[0] == "#" and _META.fullmatch(rest))):
            keep.append(rest)
            prefixed += 1
            samples += rest[0] != "#"
        elif _SHELL.match(line):
            shell.append(line)
        elif line[0] == "#" and not line.startswith(("# HELP", "# TYPE")):
            continue  # a comment: nothing to read in it
        else:
            bad.append(line)
    notes = []
    if shell:
        notes.append(_unreadable(shell, "shell line", "skipped"))
    if prefixed:
        notes.append(f"{prefixed} lines read after a grep or container prefix ('file:', 'name-1  | ')")
    if coloured:
        notes.append("colour codes removed")
    if bad:
        notes.append(_unreadable(bad))
    return "\n".join(keep) + "\n", notes, samples


def _parse(text: str) -> list[Family]:
    return [Family(f.name, f.type, f.samples) for f in _text_parser()(text)]


@functools.cache
def _text_parser() -> Callable[[str], Iterable[Any]]:
    """prometheus_client's text parser, imported without its package's ``__init__`` (``backend.standin``).
    Once: the Live feed parses every poll."""
    (parser,) = import_without_init("prometheus_client", "prometheus_client.parser")
    found: Callable[[str], Iterable[Any]] = parser.text_string_to_metric_families
    return found


def families(text: str) -> tuple[list[Family], list[str]]:
    """The metric families of a scraped or pasted page, and notes on what was not read and how the rest was.

    A page that prometheus_client reads whole is taken as it is (the Live path pays nothing more); otherwise
    the lines it cannot read are set aside first (``_tolerant``) and counted in the notes. Histogram samples
    without a ``# TYPE`` line are gathered into a histogram by their ``_bucket`` suffix.
    """
    notes: list[str] = []
    try:
        found = _parse(text)
    except (ValueError, TypeError, IndexError, KeyError):
        cleaned, notes, samples = _tolerant(text)
        if not samples:
            return [], [*notes, "not /metrics exposition: none of its lines is a metric sample, nothing read"]
        try:
            found = _parse(cleaned)
        except (ValueError, TypeError, IndexError, KeyError):
            found, refused = _line_by_line(cleaned)
            notes.append(_unreadable(refused))
    return _typed(found, notes), notes


def _line_by_line(text: str) -> tuple[list[Family], list[str]]:
    """The families of ``text`` without each line that prometheus_client refuses (rare: lines that look right)."""
    kept: list[str] = []
    refused: list[str] = []
    for line in text.splitlines():
        try:
            _parse(line + "\n")
        except (ValueError, TypeError, IndexError, KeyError):
            refused.append(line)
            continue
        kept.append(line)
    try:
        return _parse("\n".join(kept) + "\n"), refused
    except (ValueError, TypeError, IndexError, KeyError):
        return [], refused + kept  # the TYPE lines and samples disagree: nothing is read rather than a guess


def _typed(found: list[Family], notes: list[str]) -> list[Family]:
    """``found`` with the untyped ``X_bucket``/``X_sum``/``X_count`` samples of a histogram ``X`` (its ``# TYPE``
    not pasted: a grep) gathered into one histogram family where ``X_bucket`` came."""
    bases = {
        f.name[:-7]
        for f in found
        if f.type == "unknown" and f.name.endswith("_bucket") and all("le" in s.labels for s in f.samples)
    }
    if not bases:
        return found
    out: list[Family] = []
    gathered: dict[str, Family] = {}
    for f in found:
        base = None
        if f.type == "unknown":
            for suffix in ("_bucket", "_sum", "_count"):
                if f.name.endswith(suffix) and f.name[: -len(suffix)] in bases:
                    base = f.name[: -len(suffix)]
        if base is None:
            out.append(f)
        elif base in gathered:
            gathered[base].samples.extend(f.samples)
        else:
            gathered[base] = Family(base, "histogram", list(f.samples), inferred=True)
            out.append(gathered[base])
    notes.append(
        f"{len(bases)} histogram{'s' if len(bases) > 1 else ''} without '# TYPE' read as histograms by the "
        f"_bucket suffix: {', '.join(sorted(bases))}"
    )
    return out


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


def _name(name: str, renamed: dict[str, int]) -> str:
    """A sample's name as today's SGLang spells it: the gateway's ``sglang_X`` as ``sglang:X``, an old name as
    its successor (``renamed`` counts each for the notes)."""
    if name.startswith("sglang_"):
        name = "sglang:" + name[7:]
        renamed["sglang_"] = renamed.get("sglang_", 0) + 1
    new = OLD_NAMES.get(name)
    if new is not None:
        renamed[name] = renamed.get(name, 0) + 1
        return new
    return name


def read_scrape(text: str) -> Scrape:
    """Every SGLang series on a /metrics page and what they say of the whole engine (see the module's rules)."""
    by_key: dict[SeriesKey, Series] = {}
    startup: dict[str, dict[str, float]] = {key: {} for key in STARTUP.values()}
    histograms: dict[HistogramKey, Histogram] = {}
    notes: list[str] = []
    renamed: dict[str, int] = {}
    first: dict[tuple[SeriesKey, str], dict[str, str]] = {}  # the labels of each value kept
    # (series, key) -> {labels: value}: a name's samples in one series that differ by another label.
    split: dict[tuple[SeriesKey, str], dict[tuple[tuple[str, str], ...], float]] = {}
    pools: dict[SeriesKey, float] = {}
    positions: dict[str, dict[int, float]] = {}
    if isinstance(text, str):
        found, notes = families(text)
        for family in found:
            if family.type == "histogram" and family.name.startswith(("sglang:", "sglang_")):
                _read_histograms(family, _name(family.name, renamed), histograms, notes)
                continue
            for sample in family.samples:
                value = sample.value
                if not math.isfinite(value):
                    continue
                name = sample.name
                if name[:7] == "sglang_" or name in OLD_NAMES:
                    name = _name(name, renamed)
                key = NAMES.get(name)
                if key is not None:
                    labels = sample.labels
                    rank = (labels.get("engine_type"), _rank(labels, "dp_rank"), _rank(labels, "tp_rank"))
                    row = by_key.get(rank)
                    if row is None:
                        row = by_key[rank] = Series(*rank)
                    if key not in row.values:
                        row.values[key] = float(value)
                        first[(rank, key)] = labels
                        continue
                    parts = split.get((rank, key))
                    if parts is None:
                        parts = split[(rank, key)] = {_identity(first[(rank, key)]): row.values[key]}
                    parts.setdefault(_identity(labels), float(value))  # a repeated line counts once
                elif name in STARTUP:
                    phase = sample.labels.get("phase")
                    if phase:
                        startup[STARTUP[name]].setdefault(phase, float(value))  # ranks: the first
                elif name in PER_POSITION:
                    _read_position(sample.labels, float(value), PER_POSITION[name], positions)
                elif name in POOL_USAGE:
                    labels = sample.labels
                    rank = (labels.get("engine_type"), _rank(labels, "dp_rank"), _rank(labels, "tp_rank"))
                    pools[rank] = max(float(value), pools.get(rank, 0.0))
        _join_split(by_key, split, notes)
        _pool_usage(by_key, pools, notes)
        _renamed_notes(renamed, histograms, notes)
    series = list(by_key.values())
    engine, usage, short = _totals(series)
    _from_one(positions)
    per_position = {window: [got.get(i) for i in range(1, max(got) + 1)] for window, got in positions.items() if got}
    if per_position or engine.get("spec_total_accept_length") is not None:
        notes.append(f"per-position acceptance and total accept length gauges read ({PR_31750})")
    return Scrape(series, engine, usage, startup, short, histograms, notes, per_position)


def _read_position(labels: dict[str, str], value: float, window: str, out: dict[str, dict[int, float]]) -> None:
    """One PR #31750 per-position sample: its position from the one non-place label holding a whole number (the
    first rank's sample of a position is kept). Positions count from 1; a page counting from 0 is shifted."""
    found = [v for k, v in labels.items() if k not in _PLACE and k != "engine_type" and v.isdigit()]
    if len(found) != 1 or labels.get("engine_type") == DRAFT or not math.isfinite(value):
        return
    out.setdefault(window, {}).setdefault(int(found[0]), value)


def _from_one(per_position: dict[str, dict[int, float]]) -> None:
    for got in per_position.values():
        if 0 in got:  # counted from 0: position 1 is the first draft
            shifted = {i + 1: v for i, v in got.items()}
            got.clear()
            got.update(shifted)


def _identity(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _join_split(
    by_key: dict[SeriesKey, Series],
    split: dict[tuple[SeriesKey, str], dict[tuple[tuple[str, str], ...], float]],
    notes: list[str],
) -> None:
    """A name with several samples in one series: summed where a label beyond the series' place splits a
    count (``is_streaming``: the tokenizer counts streamed and whole requests apart), else the first kept."""
    said: dict[tuple[str, bool], list[str]] = {}
    for (rank, key), parts in split.items():
        if len(parts) < 2:
            continue
        sets = [dict(p) for p in parts]
        by = sorted({k for s in sets for k in s if len({s.get(k) for s in sets}) > 1})
        summed = key in SUMMED and not _PLACE.intersection(by)
        if summed:
            by_key[rank].values[key] = math.fsum(parts.values())
        what = said.setdefault((", ".join(by), summed), [])
        if key not in what:
            what.append(key)
    for (labels, summed), keys in said.items():
        if summed:
            notes.append(f"{', '.join(keys)} summed over the values of {labels} (each value counts its own requests)")
        else:
            notes.append(f"{', '.join(keys)}: several series differ by {labels}; the first on the page is read")


def _pool_usage(by_key: dict[SeriesKey, Series], pools: dict[SeriesKey, float], notes: list[str]) -> None:
    """Token usage from a hybrid model's per-pool gauges, where the series has no ``token_usage``."""
    used = False
    for rank, value in pools.items():
        row = by_key.get(rank)
        if row is None:
            row = by_key[rank] = Series(*rank)
        if "token_usage" not in row.values:
            row.values["token_usage"] = value
            used = True
    if used:
        notes.append("token usage read from full_token_usage / swa_token_usage (the fullest pool; no token_usage)")


def _renamed_notes(renamed: dict[str, int], histograms: dict[HistogramKey, Histogram], notes: list[str]) -> None:
    gateway = renamed.pop("sglang_", 0)
    if gateway:
        notes.append(
            f"{gateway} samples named sglang_* (the model gateway's /engine_metrics spelling) read as sglang:*"
        )
    for old in renamed:
        notes.append(f"{old} read as {OLD_NAMES.get(old, old)} (its name in SGLang PR #1853's collector, Nov 2024)")
    names = {name for name, _ in histograms}
    for old, (key, why) in OLD_HISTOGRAMS.items():
        if old in names:
            notes.append(f"{old} read as {HISTOGRAMS[key]} ({why})")


def _read_histograms(family: Family, name: str, out: dict[HistogramKey, Histogram], notes: list[str]) -> None:
    """A histogram family's series into ``out`` by (name, labels without ``le``, sorted); the first sample of a
    bucket wins. A series without its +Inf bucket is left out (no quantile can be read), and so is a grep'd one
    whose lowest bucket already holds observations: the buckets below it are not in the paste."""
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
    for key, counts in buckets.items():
        bounds = sorted(counts)
        if not math.isinf(bounds[-1]):
            notes.append(f"{name}: a series without its +Inf bucket (cut?): not read")
        elif family.inferred and counts[bounds[0]] > 0:
            notes.append(
                f"{name}: {counts[bounds[-1]]:g} observations, {counts[bounds[0]]:g} of them <= {bounds[0]:g} (the "
                "lowest bucket in the paste): its lower buckets are not in it, so no quantile is read"
            )
        else:
            out[(name, key)] = Histogram(tuple(bounds), tuple(counts[b] for b in bounds), sums.get(key, 0.0))


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
        values = [value for g in speakers if (value := g[key]) is not None]
        if not values:
            engine[key] = None
        elif key in SUMMED:
            engine[key] = math.fsum(values)
            lacking = sum(1 for g in ranked if g[key] is None)
            if lacking and len(ranked) > 1:
                short[key] = lacking
        elif key == "token_usage":
            engine[key] = max(values)
        elif key in PER_VERIFY:
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
    ranks = [(g, value) for g in speakers if (value := g[key]) is not None]
    if len(ranks) == 1:
        return ranks[0][1]
    cycles = [  # (throughput, verify steps a second)
        (tok_s, tok_s / length)
        for g, _ in ranks
        if (tok_s := g["gen_throughput"]) is not None and (length := g["spec_accept_length"])
    ]
    steps = [s for _, s in cycles]
    if len(steps) == len(ranks) and math.fsum(steps) > 0:
        if key == "spec_accept_length":
            return math.fsum(tok_s for tok_s, _ in cycles) / math.fsum(steps)
        return math.fsum(value * w for (_, value), w in zip(ranks, steps, strict=True)) / math.fsum(steps)
    return math.fsum(value for _, value in ranks) / len(ranks)


def parse_metrics(text: str) -> dict[str, float | None]:
    """The engine's gauges and counters from a /metrics page (``read_scrape(text).engine``)."""
    return read_scrape(text).engine


def startup_seconds(text: str) -> dict[str, dict[str, float]]:
    """0.5.23's ``sglang:startup_time_seconds{phase}`` and ``startup_cuda_graph_time_seconds{phase}`` as
    ``{"phases": {phase: s}, "cuda_graph": {phase: s}}`` (empty where the server has none: 0.5.6)."""
    return read_scrape(text).startup
