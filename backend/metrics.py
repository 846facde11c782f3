"""SGLang numbers: decode/prefill log lines, Prometheus `/metrics` text and `/get_server_info` JSON.

Log lines are parsed field by field so every format generation from 0.4.1.post7 to 0.5.23 reads the same
(FIELD-NOTES §5, §5b): an optional ``[YYYY-MM-DD HH:MM:SS{.ms}{ranks}] `` prefix (``.ms`` with SGLANG_LOG_MS=1;
ranks DP, PP, ATTN_CP, MOE_DP, TP, EP), ``Decode batch.``/``,``/`` [N],`` (SGLANG_LOG_FORWARD_ITERS),
``key: value`` fields separated by commas in any order, unknown fields ignored (a newer release's too),
trailing commas tolerated. What ``accept rate`` counts depends on the release (``backend.sglang_versions``).
Anything that is not a decode or prefill line gives no sample; nothing here raises on bad input.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from backend.sglang_versions import accept_rate_definition

Kind = Literal["decode", "prefill"]

# The idle gap after which the next decode line's throughput is not trusted (see LiveFilter). Log stamps
# tick in whole seconds, so this is the smallest gap they can show; a kept sample that counted idle time
# skews the averages far more than a dropped good one.
DEFAULT_IDLE_GAP_S = 1.0
# A decode line whose running count moved by more than this share since the previous line spans two batch
# sizes: its throughput belongs to neither, and per stream it is off by up to that share (2 -> 1 doubles it).
# Under steady heavy load (40 -> 39) lines stay.
MAX_BATCH_CHANGE = 0.25


@dataclass(frozen=True, slots=True)
class Sample:
    """One decode or prefill log line; None where the line lacks the field.

    The first ten fields are the `parse-log` contract (``to_json``); the prefill-only fields after them
    are kept for callers that want them but are not part of that contract.
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


def _flag(raw: str) -> bool:
    word = raw.strip()
    if word == "True":
        return True
    if word == "False":
        return False
    raise ValueError(raw)


def _percent(raw: str) -> float:
    return float(raw.strip().removesuffix("%"))


# A line is gathered into a list in Sample's field order, plus two scratch slots for hybrid usage.
_SLOTS = [f.name for f in dataclasses.fields(Sample)] + ["full", "swa", "device"]
_FULL = _SLOTS.index("full")
_TOKEN_USAGE, _RANKS = _SLOTS.index("token_usage"), _SLOTS.index("ranks")

# Log key -> (slot, converter). Hybrid models print pool usages instead of `token usage` (0.5.23's
# pool_stats_observer: full/swa for sliding-window models, full + mamba for SSM hybrids, gpu/cpu for
# hierarchical sparse attention); the token pools are folded into token_usage as their max, the way SGLang's
# own gauge does. Mamba state slots and the host-side (cpu) pool are not KV tokens on the GPU: left out.
_FIELDS: dict[str, tuple[int, Callable[[str], Any]]] = {
    key: (_SLOTS.index(name), convert)
    for key, (name, convert) in {
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
    }.items()
}

# Prefix head ("2025-01-31 12:00:00 DP0 TP0") -> (ts, ranks), or None when it is not SGLang's prefix.
# The head changes once a second per rank, so a small cache makes timestamps nearly free.
_HEADS: dict[str, tuple[float, str | None] | None] = {}
_HEADS_MAX = 4096


def _parse_head(head: str) -> tuple[float, str | None] | None:
    stamp, tags = head[:19], head[19:]
    if len(stamp) != 19 or stamp[4] + stamp[7] + stamp[10] + stamp[13] + stamp[16] != "-- ::":
        return None
    fields = (stamp[0:4], stamp[5:7], stamp[8:10], stamp[11:13], stamp[14:16], stamp[17:19])
    if not all(f.isascii() and f.isdigit() for f in fields):
        return None
    try:
        ts = datetime(*(int(f) for f in fields)).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    if tags[:1] == ".":  # SGLANG_LOG_MS=1: ``.%(msecs)03d`` after the seconds
        millis = tags[1:4]
        if len(millis) != 3 or not (millis.isascii() and millis.isdigit()):
            return None
        ts, tags = ts + int(millis) / 1000, tags[4:]
    if not tags:
        return ts, None
    if tags[0] != " ":
        return None
    names = tags[1:].split(" ")
    for name in names:
        letters = name.rstrip("0123456789").replace("_", "")  # DP PP ATTN_CP MOE_DP TP EP
        if not (letters.isascii() and letters.isalpha() and letters.isupper() and len(letters) < len(name)):
            return None
    return ts, " ".join(names)


def _head(head: str) -> tuple[float, str | None] | None:
    try:
        return _HEADS[head]
    except KeyError:
        pass
    if len(_HEADS) >= _HEADS_MAX:
        _HEADS.clear()
    parsed = _HEADS[head] = _parse_head(head)
    return parsed


def parse_line(line: str) -> Sample | None:
    """The decode/prefill sample in one SGLang log line, or None for any other line (never raises)."""
    if not isinstance(line, str):
        return None
    text = line.strip()
    ts: float | None = None
    ranks: str | None = None
    if text.startswith("["):
        end = text.find("] ")
        if end < 0:
            return None
        head = _head(text[1:end])
        if head is None:
            return None
        ts, ranks = head
        text = text[end + 2 :]
    if text.startswith("Decode batch"):
        kind, rest = "decode", text[12:]
    elif text.startswith("Prefill batch"):
        kind, rest = "prefill", text[13:]
    else:
        return None
    # After "batch": "." (old), "," (0.5.4.post1+) or " [N]," (0.5.4, and forward-iteration logging).
    if rest.startswith(" ["):
        close = rest.find("]")
        if close < 0 or not (rest[2:close].isascii() and rest[2:close].isdigit()):
            return None
        rest = rest[close + 1 :]
    if not rest or rest[0] not in ".,":
        return None
    values: list[Any] = [None] * len(_SLOTS)
    values[0], values[1], values[_RANKS] = ts, kind, ranks
    found = False
    for part in rest[1:].split(","):
        key, _, raw = part.partition(":")
        spec = _FIELDS.get(key.strip())
        if spec is None:
            continue
        try:
            value = spec[1](raw)
        except ValueError:
            continue
        if value - value:  # nan or inf (x - x is nan), never a real reading
            continue
        values[spec[0]] = value
        found = True
    if not found:
        return None
    if values[_TOKEN_USAGE] is None:
        hybrid = [u for u in values[_FULL:] if u is not None]
        if hybrid:
            values[_TOKEN_USAGE] = max(hybrid)
    return Sample(*values[:_FULL])


def parse_lines(lines: Iterable[str]) -> Iterator[Sample]:
    """Every sample in ``lines`` as logged (for `parse-log`); other lines are skipped."""
    for line in lines:
        sample = parse_line(line)
        if sample is not None:
            yield sample


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
    """

    def __init__(self, idle_gap_s: float = DEFAULT_IDLE_GAP_S) -> None:
        self.idle_gap_s = idle_gap_s
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next decode line counts as the first."""
        self._last_decode: float | None = None
        self._running: int | None = None  # the previous decode line's running count
        self._idle = True

    def accept(self, sample: Sample, now: float | None = None) -> Sample:
        """``sample`` as the live series should see it."""
        t = sample.ts if sample.ts is not None else (time.monotonic() if now is None else now)
        if sample.kind == "prefill":
            if self._last_decode is None or t - self._last_decode > self.idle_gap_s or sample.running_req == 0:
                self._idle = True
            return sample
        idle, self._idle, self._last_decode = self._idle, False, t
        before, now_running = self._running, sample.running_req
        if now_running is not None:
            self._running = now_running
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


# Prometheus sample name (counters keep their _total suffix) -> key in parse_metrics' result. 0.5.23 adds the
# live speculative numbers (they move under --speculative-adaptive) and the verify-call counter.
_PROMETHEUS = {
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
}
# 0.5.23's startup durations, one sample per ``phase`` label -> key in startup_seconds' result.
_STARTUP = {
    "sglang:startup_time_seconds": "phases",
    "sglang:startup_cuda_graph_time_seconds": "cuda_graph",
}


def _families(text: str) -> Iterator[Any]:
    """The exposition's metric families; text that stops being valid ends the iteration quietly."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        yield from text_string_to_metric_families(text)
    except (ValueError, TypeError, IndexError, KeyError):
        return


def parse_metrics(text: str) -> dict[str, float | None]:
    """SGLang's gauges and counters from a `/metrics` page; None for those it lacks.

    With several label sets (ranks), the one with ``tp_rank="0"`` wins, else the first. Text that stops
    being valid exposition format keeps what was read before the bad line.
    """
    found: dict[str, tuple[bool, float]] = {}  # key -> (is tp_rank 0, value)
    for family in _families(text):
        for sample in family.samples:
            key = _PROMETHEUS.get(sample.name)
            if key is None or not math.isfinite(sample.value):
                continue
            rank0 = sample.labels.get("tp_rank") == "0"
            if key not in found or (rank0 and not found[key][0]):
                found[key] = (rank0, float(sample.value))
    return {key: found[key][1] if key in found else None for key in _PROMETHEUS.values()}


def startup_seconds(text: str) -> dict[str, dict[str, float]]:
    """0.5.23's ``sglang:startup_time_seconds{phase}`` and ``startup_cuda_graph_time_seconds{phase}`` as
    ``{"phases": {phase: s}, "cuda_graph": {phase: s}}`` (empty where the server has none: 0.5.6)."""
    out: dict[str, dict[str, float]] = {key: {} for key in _STARTUP.values()}
    for family in _families(text):
        for sample in family.samples:
            key = _STARTUP.get(sample.name)
            phase = sample.labels.get("phase")
            if key is not None and phase and math.isfinite(sample.value):
                out[key].setdefault(phase, float(sample.value))  # several ranks: the first
    return out


def _number(value: object, kind: type) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or (kind is int and value != int(value)):
        return None
    return kind(value)


_PER_RANK = ("avg_spec_accept_length", "last_gen_throughput")


def server_info_numbers(info: dict[str, Any]) -> dict[str, Any]:
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
    ranks = [
        {
            key: _number(state.get(key, info.get(key)), float)
            for key in ("avg_spec_accept_length", "last_gen_throughput")
        }
        for state in states
    ]
    accepts = [r["avg_spec_accept_length"] for r in ranks if r["avg_spec_accept_length"] is not None]
    throughputs = [r["last_gen_throughput"] for r in ranks if r["last_gen_throughput"] is not None]
    algorithm = info.get("speculative_algorithm")
    version = info.get("version") if isinstance(info.get("version"), str) else None
    return {
        "version": version,
        "accept_rate_definition": accept_rate_definition(version),
        "avg_spec_accept_length": sum(accepts) / len(accepts) if accepts else None,
        "last_gen_throughput": sum(throughputs) if throughputs else None,
        "dp_ranks": ranks,
        "speculative_algorithm": algorithm if isinstance(algorithm, str) else None,
        "speculative_num_steps": _number(info.get("speculative_num_steps"), int),
        "speculative_eagle_topk": _number(info.get("speculative_eagle_topk"), int),
        "speculative_num_draft_tokens": _number(info.get("speculative_num_draft_tokens"), int),
    }
