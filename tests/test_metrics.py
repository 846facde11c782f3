"""SGLang log, /metrics and /get_server_info parsing across format generations (FIELD-NOTES §5)."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backend.measure.metrics import (
    LiveFilter,
    RankNumbers,
    Sample,
    ServerNumbers,
    live_samples,
    parse_line,
    parse_lines,
    server_info_numbers,
)
from backend.measure.prometheus import parse_metrics
from tests.sglang_lines import GENERATIONS

pytestmark = pytest.mark.unit

TS = datetime(2025, 1, 5, 10, 0, 7).timestamp()
P = "[2025-01-05 10:00:07 TP0] "


def _decode(**overrides: object) -> Sample:
    fields = dict(
        ts=TS,
        kind="decode",
        gen_tps=61.23,
        accept_len=2.05,
        accept_rate=0.51,
        running_req=1,
        queue_req=0,
        token_usage=0.01,
        cuda_graph=False,
        ranks="TP0",
    )
    fields.update(overrides)
    return Sample(**fields)


@pytest.mark.parametrize("generation", GENERATIONS)
def test_every_decode_format_generation(generation: str) -> None:
    sample = parse_line(P + GENERATIONS[generation] + "\n")
    assert sample is not None
    assert sample.kind == "decode" and sample.ts == TS and sample.ranks == "TP0"
    assert (sample.gen_tps, sample.accept_len, sample.running_req, sample.queue_req) == (61.23, 2.05, 1, 0)
    assert sample.token_usage == 0.01
    if "accept rate" in GENERATIONS[generation]:
        assert sample.accept_rate == 0.51
    else:
        assert sample.accept_rate is None
    assert sample.cuda_graph is (False if "cuda graph" in GENERATIONS[generation] else None)


@pytest.mark.parametrize(
    ("prefix", "ts", "ranks"),
    [
        ("", None, None),
        ("[2025-01-05 10:00:07] ", TS, None),
        ("[2025-01-05 10:00:07 TP0] ", TS, "TP0"),
        ("[2025-01-05 10:00:07 DP0 TP0] ", TS, "DP0 TP0"),
        ("[2025-01-05 10:00:07 EP0] ", TS, "EP0"),
        ("[2025-01-05 10:00:07 PP0] ", TS, "PP0"),
        ("[2025-01-05 10:00:07 DP1 TP8 EP8 PP0] ", TS, "DP1 TP8 EP8 PP0"),
    ],
)
def test_rank_prefixes(prefix: str, ts: float | None, ranks: str | None) -> None:
    sample = parse_line(prefix + GENERATIONS["0.5.9+ no trailing comma"])
    assert sample == _decode(ts=ts, ranks=ranks)


def test_json_record_has_exactly_the_contract_keys() -> None:
    record = parse_line(P + GENERATIONS["0.4.1.post7-0.4.6"]).to_json()
    assert list(record) == [
        "ts",
        "kind",
        "gen_tps",
        "accept_len",
        "accept_rate",
        "running_req",
        "queue_req",
        "token_usage",
        "cuda_graph",
        "ranks",
    ]
    assert record["accept_rate"] is None and record["cuda_graph"] is None and record["ts"] == TS


def test_without_speculation_there_is_no_accept_len() -> None:
    line = (
        "[2025-01-05 10:00:07] Decode batch, #running-req: 1, #token: 900, token usage: 0.01, "
        "cuda graph: True, gen throughput (token/s): 82.41, #queue-req: 0, "
    )
    sample = parse_line(line)
    assert sample.accept_len is None and sample.accept_rate is None
    assert sample.gen_tps == 82.41 and sample.cuda_graph is True


def test_hybrid_fields_give_token_usage_as_their_max() -> None:
    swa = (
        "Decode batch, #running-req: 2, #full token: 1000, full token usage: 0.10, #swa token: 900, "
        "swa token usage: 0.25, accept len: 3.10, accept rate: 0.52, cuda graph: True, "
        "gen throughput (token/s): 150.00, #queue-req: 1, "
    )
    mamba = (
        "Decode batch, #running-req: 1, #full token: 1000, full token usage: 0.10, mamba num: 3, "
        "mamba usage: 0.50, cuda graph: True, gen throughput (token/s): 90.00, #queue-req: 0"
    )
    assert parse_line(P + swa).token_usage == 0.25
    assert parse_line(P + swa).accept_len == 3.10
    assert parse_line(P + mamba).token_usage == 0.10


def test_other_graph_names_fill_cuda_graph() -> None:
    line = "Decode batch, #running-req: 1, npu graph: True, gen throughput (token/s): 9.5, #queue-req: 0"
    assert parse_line(line).cuda_graph is True


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "Prefill batch. #new-seq: 1, #new-token: 57, #cached-token: 3, cache hit rate: 5.00%, "
            "token usage: 0.00, #running-req: 0, #queue-req: 0",
            dict(new_seq=1, new_token=57, cached_token=3, cache_hit_pct=5.0, token_usage=0.0, running_req=0),
        ),
        (
            "Prefill batch. #new-seq: 2, #new-token: 8192, #cached-token: 0, token usage: 0.02, "
            "#running-req: 1, #queue-req: 3, ",
            dict(new_seq=2, new_token=8192, cached_token=0, token_usage=0.02, running_req=1, queue_req=3),
        ),
        (
            "Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.01, "
            "#running-req: 0, #queue-req: 0, input throughput (token/s): 1234.56, cuda graph: False, ",
            dict(new_token=512, input_tps=1234.56, cuda_graph=False, queue_req=0),
        ),
        (
            "Prefill batch [77], #new-seq: 1, #new-token: 40, #cached-token: 0, full token usage: 0.30, "
            "swa token usage: 0.20, #running-req: 0, #queue-req: 0, ",
            dict(new_token=40, token_usage=0.30),
        ),
    ],
)
def test_prefill_variants(line: str, expected: dict) -> None:
    sample = parse_line("[2025-01-05 10:00:07 DP0 TP0] " + line)
    assert sample.kind == "prefill" and sample.gen_tps is None and sample.ranks == "DP0 TP0"
    for key, value in expected.items():
        assert getattr(sample, key) == value, key


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "garbage",
        "[",
        "[]",
        "[] ",
        P,
        P + "Load weight begin. avail mem=78.50 GB",
        P + "Capture cuda graph begin. This can take up to several minutes.",
        P + "The server is fired up and ready to roll!",
        '[2025-01-05 10:00:07] INFO:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK',
        P + "Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.3000 -> 0.5000",
        P + "Scheduler hit an exception: Traceback (most recent call last):",
        "Traceback (most recent call last):",
        '{"gen throughput (token/s)": 82.0}',
        P + "Decode batch",
        P + "Decode batch.",
        P + "Decode batch, ",
        P + "Decode batch: #running-req: 1, gen throughput (token/s): 60.0",
        P + "Decode batches, #running-req: 1, gen throughput (token/s): 60.0",
        P + "Decode batch [x], #running-req: 1, gen throughput (token/s): 60.0",
        P + "Decode batch [12 #running-req: 1, gen throughput (token/s): 60.0",
        P + "Decode batch. #running-req: one, gen throughput (token/s): fast",
        P + "Decode batch. no fields here at all",
        P + "Decode batch, gen throughput (token/s): nan, accept len: inf",
        P + "decode batch. #running-req: 1, gen throughput (token/s): 60.0",
        "[not a date] Decode batch. #running-req: 1, gen throughput (token/s): 60.0",
        "[2025-13-45 10:00:07] Decode batch. #running-req: 1, gen throughput (token/s): 60.0",
        "[2025-01-05 10:00:07 tp0] Decode batch. #running-req: 1, gen throughput (token/s): 60.0",
        "[2025-01-05 10:00:07TP0] Decode batch. #running-req: 1, gen throughput (token/s): 60.0",
        "INFO Decode batch. #running-req: 1, gen throughput (token/s): 60.0",
        "\x00\xff\ufffd Decode batch. #running-req: 1",
        "x" * 100_000,
    ],
)
def test_noise_and_garbage_give_no_sample(line: str) -> None:
    assert parse_line(line) is None


def test_bad_values_drop_only_their_field() -> None:
    sample = parse_line(P + "Decode batch, #running-req: 1.5, accept len: 2.00, gen throughput (token/s): x")
    assert sample.accept_len == 2.0 and sample.running_req is None and sample.gen_tps is None


def test_non_strings_give_no_sample() -> None:
    assert parse_line(None) is None  # type: ignore[arg-type]
    assert parse_line(b"Decode batch. #running-req: 1") is None  # type: ignore[arg-type]


def test_parse_lines_reports_every_sample_as_logged() -> None:
    lines = [P + "Load weight end.", P + GENERATIONS["0.5.9+ no trailing comma"], "noise"] * 3
    samples = list(parse_lines(lines))
    assert samples == [_decode()] * 3


# --- the idle-gap rule -------------------------------------------------------------------------------


def _at(ts: float, kind: str = "decode", tps: float | None = 80.0) -> Sample:
    return Sample(ts, kind, gen_tps=tps if kind == "decode" else None, accept_len=2.0 if kind == "decode" else None)


def test_first_decode_and_first_after_idle_prefill_lose_throughput() -> None:
    live = LiveFilter(idle_gap_s=2.0)
    stream = [
        (_at(0), None),  # the very first decode line: counts time since server start
        (_at(1), 80.0),
        (_at(1.5, "prefill"), None),  # a new request while busy: no idle gap
        (_at(2), 80.0),
        (_at(10, "prefill"), None),  # 8 s since the last decode line: the server sat idle
        (_at(11, tps=5.0), None),
        (_at(12), 80.0),
        (_at(13.5, "prefill"), None),  # 1.5 s gap: under the threshold
        (_at(14), 80.0),
    ]
    for sample, tps in stream:
        out = live.accept(sample)
        assert out.gen_tps == tps
        assert out.accept_len == sample.accept_len  # accept length is still right after idle


def test_long_decode_interval_without_prefill_is_not_idle() -> None:
    live = LiveFilter(idle_gap_s=2.0)
    assert live.accept(_at(0)).gen_tps is None
    assert live.accept(_at(30)).gen_tps == 80.0  # slow decode-log interval, never idle


def test_filter_uses_arrival_time_without_prefix_and_is_idempotent() -> None:
    live = LiveFilter(idle_gap_s=2.0)
    plain = [
        (Sample(None, "decode", gen_tps=80.0), 0.0),
        (Sample(None, "decode", gen_tps=80.0), 1.0),
        (Sample(None, "prefill", new_seq=1), 9.0),
        (Sample(None, "decode", gen_tps=3.0), 10.0),
    ]
    out = [live.accept(s, now) for s, now in plain]
    assert [s.gen_tps for s in out] == [None, 80.0, None, None]
    again = LiveFilter(idle_gap_s=2.0)
    assert [again.accept(s, now) for s, now in zip(out, [n for _, n in plain], strict=True)] == out
    live.reset()
    assert live.accept(Sample(None, "decode", gen_tps=80.0), 11.0).gen_tps is None


def test_live_samples_over_log_lines() -> None:
    def decode(clock: str, tps: float) -> str:
        return f"[2025-01-05 10:{clock}] Decode batch, #running-req: 1, gen throughput (token/s): {tps}, #queue-req: 0"

    def prefill(clock: str, running: int = 0) -> str:
        return (
            f"[2025-01-05 10:{clock}] Prefill batch, #new-seq: 1, #new-token: 9, #running-req: {running}, #queue-req: 0"
        )

    lines = [
        prefill("00:00"),
        decode("00:01", 3.0),
        decode("00:02", 61.0),
        "noise",
        prefill("05:00"),
        decode("05:01", 7.0),
        decode("05:02", 60.0),
        prefill("05:03", running=1),  # joins a running batch a second after the last line: the gap is not exceeded
        decode("05:04", 59.0),
        prefill("05:05"),  # within the gap, but nothing was running: the next line's interval counts that
        decode("05:05", 20.0),
    ]
    assert [s.gen_tps for s in live_samples(lines) if s.kind == "decode"] == [None, 61.0, None, 60.0, 59.0, None]
    assert [s.gen_tps for s in parse_lines(lines) if s.kind == "decode"] == [3.0, 61.0, 7.0, 60.0, 59.0, 20.0]


# --- properties --------------------------------------------------------------------------------------

_REAL_START = re.compile(r"\s*(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( [A-Z]+\d+)*\] )?(Decode|Prefill) batch( \[\d+\])?[.,]")

_prefixes = st.sampled_from(["", P, "[2025-01-05 10:00:07 DP0 TP0] ", "[x] ", "[2025-01-05 10:00:07", "] "])
_markers = st.sampled_from(
    ["Decode batch", "Prefill batch", "Decode batch.", "Decode batch,", "Decode batch [3],", "Decode", ""]
)
_fragments = st.lists(
    st.sampled_from(
        [
            "#running-req: 1",
            "gen throughput (token/s): 5",
            "accept len: x",
            "token usage: 0.1",
            "cuda graph: Maybe",
            ": :",
            ",,",
            "%",
            "[",
            "]",
        ]
    )
    | st.text(max_size=12),
    max_size=8,
).map(", ".join)


@given(st.one_of(st.text(), st.builds(lambda a, b, c: a + b + c, _prefixes, _markers, _fragments)))
@pytest.mark.slow
def test_random_text_never_raises_nor_fakes_a_sample(line: str) -> None:
    sample = parse_line(line)
    if sample is not None:
        assert _REAL_START.match(line), line


_KEYS = {
    "gen throughput (token/s)": ("gen_tps", "{:.2f}"),
    "accept len": ("accept_len", "{:.2f}"),
    "accept rate": ("accept_rate", "{:.2f}"),
    "#running-req": ("running_req", "{}"),
    "#queue-req": ("queue_req", "{}"),
    "token usage": ("token_usage", "{:.2f}"),
    "cuda graph": ("cuda_graph", "{}"),
}
_values = {
    "gen_tps": st.floats(0, 10_000),
    "accept_len": st.floats(1, 8),
    "accept_rate": st.floats(0, 1),
    "running_req": st.integers(0, 4096),
    "queue_req": st.integers(0, 4096),
    "token_usage": st.floats(0, 1),
    "cuda_graph": st.booleans(),
}


@given(
    fields=st.lists(st.sampled_from(sorted(_KEYS)), min_size=1, unique=True).flatmap(st.permutations),
    values=st.fixed_dictionaries(_values),
    extras=st.lists(st.sampled_from(["#token: 12", "cap len: 9", "#retracted-req: 0", "weird: a b"])),
    head=st.sampled_from(["Decode batch.", "Decode batch,", "Decode batch [12],"]),
    tail=st.sampled_from(["", ",", ", "]),
    prefix=st.sampled_from(["", P, "[2025-01-05 10:00:07 DP0 TP0] "]),
)
def test_fields_in_any_order_with_extras(fields, values, extras, head, tail, prefix) -> None:
    parts = [f"{key}: {_KEYS[key][1].format(values[_KEYS[key][0]])}" for key in fields]
    for i, extra in enumerate(extras):
        parts.insert(i * 3 % (len(parts) + 1), extra)
    sample = parse_line(f"{prefix}{head} " + ", ".join(parts) + tail)
    assert sample is not None and sample.kind == "decode"
    # Without #queue-req the line was cut: the number it ends on may be the front of a longer one.
    whole = "#queue-req" in fields
    assert sample.cut is not whole
    untrusted = None if whole or tail else parts[-1].split(":")[0]
    for key, (attr, fmt) in _KEYS.items():
        expected = float(fmt.format(values[attr])) if fmt != "{}" else values[attr]
        assert getattr(sample, attr) == (expected if key in fields and key != untrusted else None), key


# --- Prometheus and server info ----------------------------------------------------------------------

METRICS = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="kimi-k2.5",pp_rank="0",tp_rank="1"} 9.0
sglang:num_running_reqs{engine_type="unified",model_name="kimi-k2.5",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="kimi-k2.5",pp_rank="0",tp_rank="0"} 0.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="kimi-k2.5",pp_rank="0",tp_rank="0"} 0.01
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="kimi-k2.5",pp_rank="0",tp_rank="0"} 60.61
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="kimi-k2.5",pp_rank="0",tp_rank="0"} 2.03
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="kimi-k2.5"} 123456.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="kimi-k2.5"} 654321.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="kimi-k2.5"} 2.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="kimi-k2.5"} 5.0
sglang:time_to_first_token_seconds_sum{model_name="kimi-k2.5"} 1.7
sglang:time_to_first_token_seconds_count{model_name="kimi-k2.5"} 5.0
"""


def test_parse_metrics_reads_sglang_gauges_and_counters() -> None:
    assert parse_metrics(METRICS) == {
        "gen_throughput": 60.61,
        "spec_accept_length": 2.03,
        "spec_accept_rate": None,  # before 0.5.3.post3
        "num_running_reqs": 1.0,  # tp_rank 0 wins over the rank listed first
        "num_queue_reqs": 0.0,
        "token_usage": 0.01,
        "num_used_tokens": None,
        "generation_tokens_total": 654321.0,
        "prompt_tokens_total": 123456.0,
        "spec_num_steps": None,  # 0.5.23's live speculative numbers and verify counter
        "spec_num_draft_tokens": None,
        "spec_verify_calls_total": None,
        "spec_cap_length": None,  # DSPARK's (0.5.16+)
        "spec_block_accept_length": None,
        "spec_total_accept_length": None,  # SGLang PR #31750's (not in a release)
        "num_retracted_reqs": None,
        "max_total_num_tokens": None,
    }


def test_parse_metrics_sums_dp_ranks_and_tolerates_garbage_and_tolerates_garbage() -> None:
    text = 'sglang:gen_throughput{dp_rank="1"} 10\nsglang:gen_throughput{dp_rank="0"} 20\n'
    assert parse_metrics(text)["gen_throughput"] == 30.0  # each DP rank decodes its own batch
    truncated = METRICS[: METRICS.index("sglang:gen_throughput{")] + "sglang:gen_throughput{broken\n"
    partial = parse_metrics(truncated)
    assert partial["token_usage"] == 0.01 and partial["gen_throughput"] is None
    assert set(parse_metrics("<html>404</html>").values()) == {None}
    assert set(parse_metrics("").values()) == {None}


def test_server_info_numbers_new_and_old_layouts() -> None:
    new = {
        "version": "0.5.6",
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "internal_states": [{"avg_spec_accept_length": 3.31, "last_gen_throughput": 131.5}],
    }
    assert server_info_numbers(new) == ServerNumbers(
        version="0.5.6",
        accept_rate_definition="bonus",
        avg_spec_accept_length=3.31,
        last_gen_throughput=131.5,
        dp_ranks=(RankNumbers(3.31, 131.5),),
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        max_total_num_tokens=None,
    )
    old = {"version": "0.4.3", "avg_spec_accept_length": 2.0, "last_gen_throughput": 60}
    numbers = server_info_numbers(old)
    assert numbers.avg_spec_accept_length == 2.0 and numbers.last_gen_throughput == 60.0
    assert numbers.speculative_num_steps is None and numbers.speculative_algorithm is None


def test_server_info_numbers_before_the_first_spec_step_and_with_junk() -> None:
    starting = {"version": "0.5.6", "speculative_algorithm": None, "internal_states": [{}]}
    assert server_info_numbers(starting).avg_spec_accept_length is None
    junk = {"version": 5, "speculative_num_steps": "3", "internal_states": "x", "last_gen_throughput": True}
    for numbers in (server_info_numbers(junk), server_info_numbers([])):
        assert numbers == ServerNumbers(dp_ranks=(RankNumbers(),))


def test_retractions_preallocation_and_the_microsecond_timestamp_field() -> None:
    line = (
        P + "Decode batch, #running-req: 4, #token: 900, token usage: 0.20, pre-allocated usage: 0.05, "
        "#retracted-req: 2, cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 1, "
        "timestamp: 1736071207250000"
    )
    sample = parse_line(line)
    assert (sample.retracted_req, sample.prealloc_usage, sample.gen_tps) == (2, 0.05, 120.5)
    assert sample.ts == 1736071207.25  # finer than the prefix's whole seconds
    assert parse_line(line) == sample  # the second read takes the learned shape: the same sample
