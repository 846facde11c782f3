"""SGLang numbers: decode/prefill log lines and `/get_server_info` JSON (`/metrics`: ``backend.measure.prometheus``).

Log lines are parsed field by field so every format generation from 0.4.1.post7 to 0.5.23 reads the same
(FIELD-NOTES §5, §5b): the record starts at SGLang's ``[YYYY-MM-DD HH:MM:SS{.ms}{ranks}] `` prefix wherever it
is on the line (after colour codes, a Ray actor's prefix or a notebook's output: ``host.logline``, the rule
every log reader follows; ``.ms`` with SGLANG_LOG_MS=1; ranks DP, PP, ATTN_CP, MOE_DP, TP, EP), then
``Decode batch.``/``,``/`` [N],`` (SGLANG_LOG_FORWARD_ITERS), ``key: value`` fields separated by commas in any
order, unknown fields ignored (a newer release's too), trailing commas tolerated. What ``accept rate`` counts
depends on the release (``backend.sglang.versions``). Anything that is not a decode or prefill line gives no
sample; nothing here raises on bad input.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from backend.agent.host.shared.logline import Tier, record, tier_line
from backend.sglang.versions import accept_rate_definition

Kind = Literal["decode", "prefill"]

# The idle gap after which the next decode line's throughput is not trusted (see LiveFilter). Log stamps
# tick in whole seconds, so this is the smallest gap they can show; a kept sample that counted idle time
# skews the averages far more than a dropped good one.
DEFAULT_IDLE_GAP_S = 1.0
# A decode line whose running count moved by more than this share since the previous line spans two batch
# sizes: its throughput belongs to neither, and per stream it is off by up to that share (2 -> 1 doubles it).
# Under steady heavy load (40 -> 39) lines stay.
MAX_BATCH_CHANGE = 0.25


@dataclass(slots=True)
class Sample:
    """One decode or prefill log line; None where the line lacks the field. A value: nothing changes one
    (``dataclasses.replace`` makes another). Not frozen: a frozen dataclass sets each of its fields through
    ``object.__setattr__``, which cost half of a line's parse.

    The first ten fields are the `parse-log` contract (``to_json``); the fields after them are kept for
    callers that want them but are not part of that contract.
    """

    ts: float | None  # epoch seconds of the log prefix (local time), None without a prefix
    kind: Kind
    gen_tps: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    running_req: int | None = None
    queue_req: int | None = None
    token_usage: float | None = None
    cuda_graph: bool | None = None
    ranks: str | None = None  # e.g. "TP0", "DP0 TP0"
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    cache_hit_pct: float | None = None
    input_tps: float | None = None
    pending_token: int | None = None  # 0.5.23's prefill ``#pending-token``
    retracted_req: int | None = None  # ``#retracted-req``: requests pushed back to the queue for KV room
    prealloc_usage: float | None = None  # ``pre-allocated usage``: KV reserved ahead (PD disaggregation)
    # DSPARK's ragged verify (0.5.16+; only when above 0, in the order 0.5.23's metrics_reporter.py:1005-1009
    # writes them): the mean verify window, bonus slot counted, and the uncapped block accept length
    # (cap-accept mode). Interval means, like accept len.
    cap_len: float | None = None
    block_accept_len: float | None = None
    cut: bool = False  # the line ends before ``#queue-req`` (a paste's last line): its last value is not read

    @property
    def dp_rank(self) -> int | None:
        """The DP rank in the prefix (``DP3 TP3`` -> 3), None without one: each DP rank logs its own batch."""
        ranks = self.ranks
        if not ranks or not ranks.startswith("DP"):
            return None
        digits = ranks[2:].split(" ", 1)[0]
        return int(digits) if digits.isdigit() else None

    @property
    def stream_tps(self) -> float | None:
        """Per-stream decode tok/s: gen throughput (the sum over running requests) / running requests.

        None without throughput or while idle (0 running); a line that does not say how many run counts as one.
        """
        if self.gen_tps is None or self.running_req == 0:
            return None
        return self.gen_tps / (self.running_req or 1)

    def to_json(self) -> dict[str, Any]:
        """The `parse-log --json` record: exactly the contract's ten keys."""
        return {
            "ts": self.ts,
            "kind": self.kind,
            "gen_tps": self.gen_tps,
            "accept_len": self.accept_len,
            "accept_rate": self.accept_rate,
            "running_req": self.running_req,
            "queue_req": self.queue_req,
            "token_usage": self.token_usage,
            "cuda_graph": self.cuda_graph,
            "ranks": self.ranks,
        }


_FLAGS = {word + end: word == "True" for word in ("True", "False") for end in ("", " ")}


def _flag(raw: str) -> bool:
    try:
        return _FLAGS[raw[1:] if raw[:1] == " " else raw]  # ": True" as split: one lookup, no strip
    except KeyError:
        raise ValueError(raw) from None


def _percent(raw: str) -> float:
    return float(raw.strip().removesuffix("%"))


def _epoch(raw: str) -> float:
    """A ``timestamp:`` field in epoch seconds: SGLang writes microseconds (ms and s are read too)."""
    value = float(raw)
    return value / 1e6 if value > 1e14 else value / 1e3 if value > 1e11 else value


# A line is gathered into a list in Sample's field order, plus two scratch slots for hybrid usage.
_SLOTS = [f.name for f in dataclasses.fields(Sample)] + ["full", "swa", "device", "stamp"]
_FULL = _SLOTS.index("full")
_TOKEN_USAGE, _RANKS, _STAMP = _SLOTS.index("token_usage"), _SLOTS.index("ranks"), _SLOTS.index("stamp")
_CUT = _SLOTS.index("cut")
# Every release's decode and prefill line carries ``#queue-req`` (0.4.1.post7 to 0.5.23, and the ports: NPU,
# sglang-jax): a line without it was cut, and the number it ends on may be the front of a longer one.
_WHOLE = "#queue-req"
# A label someone put before a record that has no prefix of SGLang's (``        # agg mode: Decode batch, …``
# copied into a comment): the record after it is whole, so it is read (``read_log`` says so).
_LABEL = re.compile(r"\s*(?:#+|//)?\s*[A-Za-z][\w ./-]{0,40}:\s?")
_HYBRID = slice(_FULL, _STAMP)

# Log key -> (slot, converter). Hybrid models print pool usages instead of `token usage` (0.5.23's
# pool_stats_observer: full/swa for sliding-window models, full + mamba for SSM hybrids, gpu/cpu for
# hierarchical sparse attention); the token pools are folded into token_usage as their max, the way SGLang's
# own gauge does. Mamba state slots and the host-side (cpu) pool are not KV tokens on the GPU: left out.
_CONVERTS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "gen throughput (token/s)": ("gen_tps", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "#running-req": ("running_req", int),
    "#queue-req": ("queue_req", int),
    "token usage": ("token_usage", float),
    "full token usage": ("full", float),
    "swa token usage": ("swa", float),
    "gpu token usage": ("device", float),
    "cuda graph": ("cuda_graph", _flag),
    "npu graph": ("cuda_graph", _flag),
    "cpu graph": ("cuda_graph", _flag),
    "musa graph": ("cuda_graph", _flag),
    "#new-seq": ("new_seq", int),
    "#new-token": ("new_token", int),
    "#cached-token": ("cached_token", int),
    "cache hit rate": ("cache_hit_pct", _percent),
    "input throughput (token/s)": ("input_tps", float),
    "#pending-token": ("pending_token", int),
    "#retracted-req": ("retracted_req", int),
    "pre-allocated usage": ("prealloc_usage", float),
    "cap len": ("cap_len", float),
    "block accept len": ("block_accept_len", float),
    "timestamp": ("stamp", _epoch),
}
_FIELDS: dict[str, tuple[int, Callable[[str], Any]]] = {
    key: (_SLOTS.index(name), convert) for key, (name, convert) in _CONVERTS.items()
}
_FIELDS.update({" " + key: spec for key, spec in _FIELDS.items()})  # as split by ", ": no strip on the hot path

# What stands before a record's keyword ("[2025-01-31 12:00:00 DP0 TP0] ", maybe after colour codes or an
# actor's prefix) -> (ts, ranks), or None where SGLang's record does not start at the keyword or its stamp is no
# date. It changes once a second per rank, so a small cache makes the rule and the timestamps nearly free.
_HEADS: dict[str, tuple[float | None, str | None] | None] = {}
_HEADS_MAX = 4096


def _parse_head(head: str) -> tuple[float | None, str | None] | None:
    found = record(head)
    if found.start != len(head):
        return (None, None) if found.stamp is None and _LABEL.fullmatch(head) else None
    if found.stamp is None:
        return None, None
    stamp = found.stamp
    try:  # the prefix's pattern made every part digits
        ts = datetime(
            int(stamp[0:4]), int(stamp[5:7]), int(stamp[8:10]), int(stamp[11:13]), int(stamp[14:16]), int(stamp[17:19])
        ).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    if found.millis:  # SGLANG_LOG_MS=1: ``.%(msecs)03d`` after the seconds
        ts += int(found.millis) / 1000
    return ts, found.ranks or None


def parse_tier(line: str) -> tuple[float | None, Tier] | None:
    """(log time, tier) of a line where SGLang says the adaptive step count it switched to or decided
    (``logline.tier_line``), None for any other line (never raises)."""
    if not isinstance(line, str) or "daptive" not in line:
        return None
    found = record(line)
    tier = tier_line(line[found.start :])
    if tier is None:
        return None
    head = _parse_head(line[: found.start]) if found.stamp else None
    return (head[0] if head else None), tier


def parse_line(line: object) -> Sample | None:
    """The decode/prefill sample in one SGLang log line, or None for any other line (never raises)."""
    if not isinstance(line, str):
        return None
    # The cheap test first: most lines of a busy log are neither (access lines, other records).
    at = line.find("Decode batch")
    kind: Kind
    if at >= 0:
        kind, rest = "decode", line[at + 12 :]
    else:
        at = line.find("Prefill batch")
        if at < 0:
            return None
        kind, rest = "prefill", line[at + 13 :]
    before = line[:at]
    try:
        head = _HEADS[before]
    except KeyError:
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        head = _HEADS[before] = _parse_head(before)
    if head is None:  # the keyword is not where SGLang's record starts
        return None
    ts, ranks = head
    # After "batch": "." (old), "," (0.5.4.post1+) or " [N]," (0.5.4, and forward-iteration logging).
    if rest[:2] == " [":
        close = rest.find("]")
        if close < 0 or not (rest[2:close].isascii() and rest[2:close].isdigit()):
            return None
        rest = rest[close + 1 :]
    if not rest or rest[0] not in ".,":
        return None
    for shape in _SHAPES[kind]:
        fields = shape.pattern.match(rest)
        if fields is not None:
            try:
                sample = shape.build(ts, kind, ranks, fields.groups())
            except ValueError:
                break  # a value this shape cannot read: the line is read field by field
            if sample is not None:
                return sample
            break
    return _parse_fields(rest, ts, kind, ranks)


class _Shape(NamedTuple):
    """A line's keys in their order, as one compiled pattern and a builder made for it: a line of a shape seen
    before is read in one match and one call (no split, no key lookups)."""

    pattern: re.Pattern[str]
    build: Callable[[float | None, Kind, str | None, tuple[str, ...]], Sample | None]


# The shapes of each kind seen last, newest first: a server writes one decode and one prefill shape (a few
# more when its fields come and go), so the first pattern tried matches nearly every line. Every shape made is
# kept by its pattern (``_MADE``), so a log that cycles through more shapes than are tried never compiles one
# twice: it pays the field-by-field path, no more.
_SHAPES: dict[str, list[_Shape]] = {"decode": [], "prefill": []}
_SHAPES_MAX = 4
_MADE: dict[str, _Shape] = {}
_MADE_MAX = 256


def _shape(pattern: str, slots: list[int], converters: list[Callable[[str], Any]]) -> _Shape:
    """The builder for one shape, written out as the code a person would write for it (as namedtuple does):
    each group converted, a non-finite one refused (None: the slow path decides), the Sample made."""
    names = {i: f"v{n}" for n, i in enumerate(slots)}
    args = ["ts", "kind"] + [names.get(i, "None") for i in range(2, _FULL)]
    args[_RANKS] = "ranks"
    args[_CUT] = "False"  # shapes are learned from whole lines only
    lines = [f"    {names[slot]} = c{n}(groups[{n}])" for n, slot in enumerate(slots)]
    finite = " or ".join(f"{names[slot]} - {names[slot]}" for slot in slots)
    source = (
        "def build(ts, kind, ranks, groups):\n"
        + "\n".join(lines)
        + f"\n    if {finite}:\n        return None\n    return Sample({', '.join(args)})\n"
    )
    namespace: dict[str, Any] = {"Sample": Sample, **{f"c{n}": c for n, c in enumerate(converters)}}
    exec(source, namespace)  # our own text, made from the field table above
    return _Shape(re.compile(pattern), namespace["build"])


def _parse_fields(rest: str, ts: float | None, kind: Kind, ranks: str | None) -> Sample | None:
    """The fields after ``Decode batch`` one ``key: value`` at a time; learns the line's shape for the next. A
    line cut before ``#queue-req`` is read up to its last whole value and marked ``cut`` (never learned)."""
    values: list[Any] = [None] * len(_SLOTS)
    values[0], values[1], values[_RANKS], values[_CUT] = ts, kind, ranks, False
    found = False
    learnable = True
    last = None  # the slot the line's last part filled
    pattern: list[str] = []
    slots: list[int] = []
    converters: list[Callable[[str], Any]] = []
    fields = _FIELDS
    for part in rest[1:].split(","):
        last = None
        key, colon, raw = part.partition(":")
        spec = fields.get(key) or fields.get(key.strip())
        if spec is None:
            # An unknown part without a colon is a value's own comma's tail (DSPARK's ``est uncap acc len: 5.20
            # [4.90, 5.50]``): any such text, so the next line's numbers fit the shape learned from this one.
            pattern.append(re.escape(key + colon) + "[^,]*" if colon else "[^,:]*")
            continue
        pattern.append(re.escape(key + colon) + "([^,]*)")
        learnable = learnable and spec[0] < _FULL and spec[0] not in slots
        slots.append(spec[0])
        converters.append(spec[1])
        try:
            value = spec[1](raw)
        except ValueError:
            learnable = False
            continue
        if value - value:  # nan or inf (x - x is nan), never a real reading
            learnable = False
            continue
        values[spec[0]] = value
        last = spec[0]
        found = True
    if not found:
        return None
    if _WHOLE not in rest:
        learnable = False
        values[_CUT] = True
        if last is not None and rest.rstrip()[-1:] != ",":
            values[last] = None  # "accept rate: 0" may be the front of 0.14
    if learnable and _SHAPES_MAX:  # hybrid pools, stamps and repeated keys stay on this path
        text = re.escape(rest[0]) + ",".join(pattern) + r"\Z"
        shape = _MADE.get(text)
        if shape is None:
            if len(_MADE) >= _MADE_MAX:
                _MADE.clear()
            shape = _MADE[text] = _shape(text, slots, converters)
        shapes = _SHAPES[kind]
        shapes.insert(0, shape)
        del shapes[_SHAPES_MAX:]
    if values[_TOKEN_USAGE] is None:
        hybrid = [u for u in values[_HYBRID] if u is not None]
        if hybrid:
            values[_TOKEN_USAGE] = max(hybrid)
    if values[_STAMP] is not None:  # finer than the prefix's seconds
        values[0] = values[_STAMP]
    return Sample(*values[:_FULL])


def parse_lines(lines: Iterable[str]) -> Iterator[Sample]:
    """Every sample in ``lines`` as logged; other lines are skipped (``read_log`` also says what it skipped)."""
    for line in lines:
        sample = parse_line(line)
        if sample is not None:
            yield sample


@dataclass(frozen=True)
class LogReading:
    """A log or a paste of one read: its samples, and what could not be read or was read leniently."""

    samples: list[Sample]
    notes: tuple[str, ...]


# Logs that are not a server's, by a mark their lines carry -> what they are.
_FOREIGN = (
    ("SpecDecoding metrics", "a vLLM log (its SpecDecoding metrics lines), not SGLang's"),
    ("sglang_router_rs::", "an sglang-router log (sglang_router_rs), not a server's"),
    ("smg::", "a model gateway log (smg), not a server's"),
)


def _quoted(lines: list[str], tail: bool = False, width: int = 60) -> str:
    """The first two lines for a note, quoted, spaces squeezed; ``tail``: their ends (where a cut line stops)."""
    shown = []
    for line in lines[:2]:
        line = " ".join(line.split())
        if len(line) > width:
            line = "…" + line[1 - width :] if tail else line[: width - 1] + "…"
        shown.append(repr(line))
    return "; ".join(shown) + (f" and {len(lines) - 2} more" if len(lines) > 2 else "")


def read_log(lines: Iterable[str]) -> LogReading:
    """Every sample in ``lines`` (``parse_lines``) and notes on the rest: record lines that gave no sample
    (another engine's format, cut before their fields), lines cut before ``#queue-req`` (their last value not
    read), records read after a label, and a log that is another program's."""
    samples: list[Sample] = []
    unread: list[str] = []
    cut: list[str] = []
    labelled: list[str] = []
    foreign: dict[str, int] = {}
    for line in lines:
        sample = parse_line(line)
        if sample is not None:
            samples.append(sample)
            if sample.cut:
                cut.append(line.strip())
            if sample.ts is None and sample.ranks is None:
                at = max(line.find("Decode batch"), line.find("Prefill batch"))
                if record(line[:at]).start != at:
                    labelled.append(line[:at].strip())
        elif "Decode batch" in line or "Prefill batch" in line:
            unread.append(line.strip())
        else:
            for mark, what in _FOREIGN:
                if mark in line:
                    foreign[what] = foreign.get(what, 0) + 1
    notes = []
    if cut:
        notes.append(
            f"{len(cut)} line{'s' if len(cut) > 1 else ''} cut before #queue-req, read up to the last "
            f"whole value: {_quoted(cut, tail=True)}"
        )
    if labelled:
        notes.append(
            f"{len(labelled)} record{'s' if len(labelled) > 1 else ''} read after a label SGLang does not "
            f"write: {_quoted(labelled)}"
        )
    if unread:
        notes.append(
            f"{len(unread)} 'Decode batch'/'Prefill batch' line{'s' if len(unread) > 1 else ''} in a form "
            f"SGLang does not write or cut before their fields: not read: {_quoted(unread)}"
        )
    for what, count in foreign.items():
        if not samples:
            notes.append(f"{what}: nothing read ({count} of its lines seen)")
    return LogReading(samples, tuple(notes))


class LiveFilter:
    """Drops the gen throughput of decode lines whose interval includes idle time.

    SGLang's gen throughput is the tokens generated since the previous decode line divided by the wall time
    since it, so the first decode line after the server sat idle counts the idle time and reads tiny. The
    rule: a decode sample's ``gen_tps`` is dropped (the sample is kept with ``gen_tps=None``, since its
    accept length is still right) when it is the first decode line seen, or when a prefill line arrived
    more than ``idle_gap_s`` after the last decode line or found nothing running (``#running-req: 0``: a
    new request after an idle spell, however short: between a bench's levels the gap is well under a
    second, yet the next line's interval counts it), or when its running count moved by more than
    ``MAX_BATCH_CHANGE`` since the previous decode line (the interval spans two batch sizes, so neither the
    per-stream figure nor the level it would count for is right). Times are the samples' log timestamps, or
    ``now`` (the arrival time) for lines without a prefix. Prefill samples pass through unchanged. Feeding an
    already filtered stream again changes nothing.

    Each DP rank (``DP3`` in the prefix) runs its own batch and logs its own lines, so the rule holds per rank:
    one rank's line never counts as another's previous line.
    """

    def __init__(self, idle_gap_s: float = DEFAULT_IDLE_GAP_S) -> None:
        self.idle_gap_s = idle_gap_s
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next decode line of every rank counts as the first."""
        # dp rank -> [last decode time, the previous decode line's running count, idle since]
        self._ranks: dict[int | None, list[Any]] = {}

    def accept(self, sample: Sample, now: float | None = None) -> Sample:
        """``sample`` as the live series should see it."""
        t = sample.ts if sample.ts is not None else (time.monotonic() if now is None else now)
        state = self._ranks.get(sample.dp_rank)
        if state is None:
            state = self._ranks[sample.dp_rank] = [None, None, True]
        if sample.kind == "prefill":
            if state[0] is None or t - state[0] > self.idle_gap_s or sample.running_req == 0:
                state[2] = True
            return sample
        idle, state[2], state[0] = state[2], False, t
        before, now_running = state[1], sample.running_req
        if now_running is not None:
            state[1] = now_running
            if before and abs(now_running - before) > MAX_BATCH_CHANGE * max(now_running, before):
                idle = True
        if idle and sample.gen_tps is not None:
            return dataclasses.replace(sample, gen_tps=None)
        return sample


def live_samples(lines: Iterable[str], idle_gap_s: float = DEFAULT_IDLE_GAP_S) -> Iterator[Sample]:
    """The samples in ``lines`` with post-idle throughput dropped (see ``LiveFilter``), for live views."""
    live = LiveFilter(idle_gap_s)
    for sample in parse_lines(lines):
        yield live.accept(sample)


def _number(value: object, kind: type[int] | type[float]) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or (kind is int and value != int(value)):
        return None
    return kind(value)


_PER_RANK = ("avg_spec_accept_length", "last_gen_throughput")  # internal_states' figures, one pair per DP rank


@dataclass(frozen=True)
class RankNumbers:
    """One DP rank's own figures in /server_info's ``internal_states`` (None before its first verify)."""

    avg_spec_accept_length: float | None = None
    last_gen_throughput: float | None = None


@dataclass(frozen=True)
class ServerNumbers:
    """The numbers specdeck uses from a server's /server_info (``server_info_numbers``); None where this
    version lacks them."""

    version: str | None = None
    accept_rate_definition: str | None = None  # what this version's accept rate counts
    avg_spec_accept_length: float | None = None  # the mean over the DP ranks that have one
    last_gen_throughput: float | None = None  # the sum over the DP ranks
    dp_ranks: tuple[RankNumbers, ...] = ()
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    max_total_num_tokens: int | None = None  # the KV pool, in tokens


def server_info_numbers(info: object) -> ServerNumbers:
    """The numbers specdeck uses from `/server_info` (`/get_server_info`); None where this version lacks them.

    ``internal_states`` holds one entry per DP rank on newer versions (older ones keep the figures at the top
    level): ``avg_spec_accept_length`` is the mean over the ranks that have one (absent before the first
    verify), ``last_gen_throughput`` the sum over ranks (each rank decodes its own batch), and ``dp_ranks``
    keeps each rank's own pair. ``accept_rate_definition`` says what this version's accept rate counts.
    """
    if not isinstance(info, dict):
        info = {}
    raw = info.get("internal_states")
    states = [s for s in raw if isinstance(s, dict)] if isinstance(raw, list) else []
    if not states:
        states = [info]
    ranks = tuple(
        RankNumbers(*(_number(state.get(key, info.get(key)), float) for key in _PER_RANK)) for state in states
    )
    accepts = [a for r in ranks if (a := r.avg_spec_accept_length) is not None]
    throughputs = [t for r in ranks if (t := r.last_gen_throughput) is not None]
    algorithm = info.get("speculative_algorithm")
    version = info.get("version") if isinstance(info.get("version"), str) else None

    def whole(key: str) -> int | None:
        return None if (n := _number(info.get(key), int)) is None else int(n)

    return ServerNumbers(
        version=version,
        accept_rate_definition=accept_rate_definition(version),
        avg_spec_accept_length=sum(accepts) / len(accepts) if accepts else None,
        last_gen_throughput=sum(throughputs) if throughputs else None,
        dp_ranks=ranks,
        speculative_algorithm=algorithm if isinstance(algorithm, str) else None,
        speculative_num_steps=whole("speculative_num_steps"),
        speculative_eagle_topk=whole("speculative_eagle_topk"),
        speculative_num_draft_tokens=whole("speculative_num_draft_tokens"),
        max_total_num_tokens=whole("max_total_num_tokens"),
    )
