"""SGLang numbers: decode/prefill log lines, Prometheus `/metrics` text and `/get_server_info` JSON.

Log lines are parsed field by field so every format generation from 0.4.1.post7 to today reads the same
(FIELD-NOTES §5): an optional ``[YYYY-MM-DD HH:MM:SS{ranks}] `` prefix, ``Decode batch.``/``,``/`` [N],``,
``key: value`` fields separated by commas in any order, unknown fields ignored, trailing commas tolerated.
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

Kind = Literal["decode", "prefill"]

# The idle gap after which the next decode line's throughput is not trusted (see LiveFilter). Log stamps
# tick in whole seconds, so this is the smallest gap they can show; a kept sample that counted idle time
# skews the averages far more than a dropped good one.
DEFAULT_IDLE_GAP_S = 1.0


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
_SLOTS = [f.name for f in dataclasses.fields(Sample)] + ["full", "swa"]
_FULL = _SLOTS.index("full")
_TOKEN_USAGE, _RANKS = _SLOTS.index("token_usage"), _SLOTS.index("ranks")

# Log key -> (slot, converter). Hybrid models print full/swa usage instead of `token usage`; those are
# folded into token_usage the way SGLang's own gauge does (their max).
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
        "cuda graph": ("cuda_graph", _flag),
        "npu graph": ("cuda_graph", _flag),
        "cpu graph": ("cuda_graph", _flag),
        "#new-seq": ("new_seq", int),
        "#new-token": ("new_token", int),
        "#cached-token": ("cached_token", int),
        "cache hit rate": ("cache_hit_pct", _percent),
        "input throughput (token/s)": ("input_tps", float),
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
    more than ``idle_gap_s`` after the last decode line (a new request after an idle spell). Times are the
    samples' log timestamps, or ``now`` (the arrival time) for lines without a prefix. Prefill samples pass
    through unchanged. Feeding an already filtered stream again changes nothing.
    """

    def __init__(self, idle_gap_s: float = DEFAULT_IDLE_GAP_S) -> None:
        self.idle_gap_s = idle_gap_s
        self.reset()

    def reset(self) -> None:
        """Forget the history: the next decode line counts as the first."""
        self._last_decode: float | None = None
        self._idle = True

    def accept(self, sample: Sample, now: float | None = None) -> Sample:
        """``sample`` as the live series should see it."""
        t = sample.ts if sample.ts is not None else (time.monotonic() if now is None else now)
        if sample.kind == "prefill":
            if self._last_decode is None or t - self._last_decode > self.idle_gap_s:
                self._idle = True
            return sample
        idle, self._idle, self._last_decode = self._idle, False, t
        if idle and sample.gen_tps is not None:
            return dataclasses.replace(sample, gen_tps=None)
        return sample


def live_samples(lines: Iterable[str], idle_gap_s: float = DEFAULT_IDLE_GAP_S) -> Iterator[Sample]:
    """The samples in ``lines`` with post-idle throughput dropped (see ``LiveFilter``), for live views."""
    live = LiveFilter(idle_gap_s)
    for sample in parse_lines(lines):
        yield live.accept(sample)


# Prometheus sample name (counters keep their _total suffix) -> key in parse_metrics' result.
_PROMETHEUS = {
    "sglang:gen_throughput": "gen_throughput",
    "sglang:spec_accept_length": "spec_accept_length",
    "sglang:spec_accept_rate": "spec_accept_rate",
    "sglang:num_running_reqs": "num_running_reqs",
    "sglang:num_queue_reqs": "num_queue_reqs",
    "sglang:token_usage": "token_usage",
    "sglang:generation_tokens_total": "generation_tokens_total",
    "sglang:prompt_tokens_total": "prompt_tokens_total",
}


def parse_metrics(text: str) -> dict[str, float | None]:
    """SGLang's gauges and counters from a `/metrics` page; None for those it lacks.

    With several label sets (ranks), the one with ``tp_rank="0"`` wins, else the first. Text that stops
    being valid exposition format keeps what was read before the bad line.
    """
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, tuple[bool, float]] = {}  # key -> (is tp_rank 0, value)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = _PROMETHEUS.get(sample.name)
                if key is None or not math.isfinite(sample.value):
                    continue
                rank0 = sample.labels.get("tp_rank") == "0"
                if key not in found or (rank0 and not found[key][0]):
                    found[key] = (rank0, float(sample.value))
    except (ValueError, TypeError, IndexError, KeyError):
        pass
    return {key: found[key][1] if key in found else None for key in _PROMETHEUS.values()}


def _number(value: object, kind: type) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or (kind is int and value != int(value)):
        return None
    return kind(value)


def server_info_numbers(info: dict[str, Any]) -> dict[str, Any]:
    """The numbers specdeck uses from `/get_server_info`; None where this SGLang version lacks them.

    ``avg_spec_accept_length`` and ``last_gen_throughput`` live in ``internal_states[0]`` on newer
    versions and at the top level on older ones.
    """
    if not isinstance(info, dict):
        info = {}
    states = info.get("internal_states")
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}

    def pick(key: str) -> object:
        return state.get(key, info.get(key))

    algorithm = info.get("speculative_algorithm")
    version = info.get("version")
    return {
        "version": version if isinstance(version, str) else None,
        "avg_spec_accept_length": _number(pick("avg_spec_accept_length"), float),
        "last_gen_throughput": _number(pick("last_gen_throughput"), float),
        "speculative_algorithm": algorithm if isinstance(algorithm, str) else None,
        "speculative_num_steps": _number(info.get("speculative_num_steps"), int),
        "speculative_eagle_topk": _number(info.get("speculative_eagle_topk"), int),
        "speculative_num_draft_tokens": _number(info.get("speculative_num_draft_tokens"), int),
    }
