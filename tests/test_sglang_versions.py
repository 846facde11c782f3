"""SGLang 0.5.6 and 0.5.23 told apart: saved logs of both, the accept-rate definition, what each line and page
of every release between them gives, and how a version is named.

The saved logs (``tests/fixtures/sglang-<version>.log``) are composed line by line from the format strings of
each release's PyPI wheel (FIELD-NOTES §5b: metrics_reporter, model_runner, cuda_graph_setup, eagle_worker_v2,
engine), with a Kimi-K2.5 + EAGLE-3 launch's figures; no GPU ran them.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from backend.agent.host.server_log import LogScan
from backend.measure.metrics import parse_line, parse_lines, server_info_numbers
from backend.measure.prometheus import parse_metrics, startup_seconds
from backend.sglang import versions
from backend.sglang.versions import BONUS_COUNTED, DRAFTS_ONLY

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures"
VERSIONS = ("0.5.6", "0.5.23")
# What each saved log must give: decode lines (accept len, accept rate, gen tok/s), the first stamp's seconds.
EXPECTED = {
    "0.5.23": {
        "decode": [(3.30, 0.77, 11.20), (3.32, 0.77, 100.61), (3.28, 0.76, 99.42), (3.35, 0.78, 101.07)],
        "first": datetime(2026, 10, 14, 9, 18, 2, 455000).timestamp(),
        "definition": DRAFTS_ONLY,
    },
    "0.5.6": {
        "decode": [(2.03, 0.51, 5.12), (2.01, 0.50, 60.33), (2.02, 0.51, 60.61), (2.00, 0.50, 59.87)],
        "first": datetime(2025, 12, 2, 10, 5, 1).timestamp(),
        "definition": BONUS_COUNTED,
    },
}
PHASES = [
    "loading weights",
    "allocating KV cache",
    "capturing CUDA graphs",
    "loading draft weights",
    "capturing draft graphs",
    "warming up",
    "ready",
]


def saved_log(version: str) -> list[str]:
    return (FIXTURES / f"sglang-{version}.log").read_text().splitlines()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_saved_log_gives_the_right_samples(version: str) -> None:
    samples = list(parse_lines(saved_log(version)))
    decode = [s for s in samples if s.kind == "decode"]
    want = EXPECTED[version]
    assert [(s.accept_len, s.accept_rate, s.gen_tps) for s in decode] == want["decode"]
    assert decode[0].ts == pytest.approx(want["first"]) and all(s.ranks == "TP0" for s in samples)
    assert [s.kind for s in samples].count("prefill") == 2
    # Accept length is the same quantity in both; the rate is not: 0.5.23's counts drafts only.
    definition = versions.accept_rate_definition(version)
    assert definition == want["definition"]
    for s in decode:
        drafts_only = (s.accept_len - 1) / 3  # steps 3, topk 1: 3 drafts per verify
        bonus = s.accept_len / 4
        assert s.accept_rate == pytest.approx(drafts_only if definition == DRAFTS_ONLY else bonus, abs=0.006)
    prefill = [s for s in samples if s.kind == "prefill"][-1]
    assert prefill.new_token == 412 and prefill.queue_req == 0
    if version == "0.5.23":
        assert (prefill.pending_token, prefill.cuda_graph, prefill.input_tps) == (0, False, 2.41)
        # SGLANG_LOG_MS=1: two decode lines within one second keep their order and their spacing.
        assert decode[1].ts - decode[0].ts == pytest.approx(1.216)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_saved_log_gives_the_startup_phases_with_real_durations(version: str) -> None:
    scan = LogScan()
    for line in saved_log(version):
        scan.feed(line)
    assert [p["phase"] for p in scan.phases] == PHASES
    starts = [p["start"] for p in scan.phases]
    assert starts == sorted(starts) and scan.ready_at == scan.phases[-1]["start"]
    # SGLang's own timings: both releases time the graph captures, 0.5.23 the weight loads too.
    assert scan.elapsed["capturing CUDA graphs"] == pytest.approx(42.37)
    assert scan.elapsed["capturing draft graphs"] == pytest.approx(8.21 + 5.45)
    if version == "0.5.23":
        assert scan.elapsed["loading weights"] == pytest.approx(148.20)
        assert scan.elapsed["loading draft weights"] == pytest.approx(3.61)
        assert scan.startup_timings["load_weight"] == 151.81
        assert scan.startup_timings["cuda_graph"]["target_verify"] == 42.37
        assert scan.phases[1]["start"] == pytest.approx(datetime(2026, 10, 14, 9, 16, 40, 512000).timestamp())
    else:
        assert "loading weights" not in scan.elapsed and scan.startup_timings is None
    assert scan.accept[-1] == EXPECTED[version]["decode"][-1][0]


def test_only_rank_zero_speaks_for_the_phases() -> None:
    scan = LogScan()
    scan.feed("[2026-10-14 09:14:12.307 DP0 ATTN_CP1 TP0] Load weight begin. avail mem=138.41 GB")
    scan.feed("[2026-10-14 09:14:12.309 MOE_DP1 TP0] Load weight begin. avail mem=138.41 GB")
    assert scan.phases == []  # another attention-CP or MoE-DP rank: not rank 0
    scan.feed("[2026-10-14 09:14:12.400 DP0 ATTN_CP0 MOE_DP0 TP0 EP0] Load weight begin. avail mem=138.41 GB")
    assert [p["phase"] for p in scan.phases] == ["loading weights"]


# Decode lines of 0.5.23 with what lies around the fields: each gives the same numbers.
CURRENT_LINES = {
    "ms stamp, forward iteration, every rank kind": (
        "[2026-10-14 09:16:13.517 DP0 PP0 ATTN_CP0 MOE_DP0 TP0 EP0] Decode batch [5521], #running-req: 1, "
        "#token: 1523, token usage: 0.01, accept len: 2.05, accept rate: 0.35, cuda graph: True, "
        "gen throughput (token/s): 61.23, #queue-req: 0"
    ),
    "MFU suffix": (
        "[2026-10-14 09:16:13.517 TP0] Decode batch, #running-req: 1, #token: 1523, token usage: 0.01, "
        "accept len: 2.05, accept rate: 0.35, cuda graph: True, gen throughput (token/s): 61.23, #queue-req: 0, "
        "est. decode TFLOPS/s (per GPU): 12.30, est. read BW (GB/s per GPU): 1830.11, "
        "est. write BW (GB/s per GPU): 4.10"
    ),
    "SWA pools": (
        "[2026-10-14 09:16:13.517 TP0] Decode batch, #running-req: 1, #full token: 1523, full token usage: 0.01, "
        "#swa token: 300, swa token usage: 0.00, accept len: 2.05, accept rate: 0.35, cuda graph: True, "
        "gen throughput (token/s): 61.23, #queue-req: 0"
    ),
    "hisparse pools": (
        "[2026-10-14 09:16:13.517 TP0] Decode batch, #running-req: 1, #gpu token: 1523, gpu token usage: 0.01, "
        "#cpu token: 90000, cpu token usage: 0.40, accept len: 2.05, accept rate: 0.35, musa graph: True, "
        "gen throughput (token/s): 61.23, #queue-req: 0"
    ),
    "a newer release's fields anywhere": (
        "[2026-10-14 09:16:13.517 TP0] Decode batch, #running-req: 1, cap len: 4.00, #token: 1523, "
        "token usage: 0.01, accept len: 2.05, accept rate: 0.35, block accept len: 2.10, cuda graph: True, "
        "gen throughput (token/s): 61.23, #queue-req: 0, fwd occupancy: 91.20%, hypothetical: [1, 2]"
    ),
}


@pytest.mark.parametrize("case", CURRENT_LINES)
def test_current_decode_lines_read_field_by_field(case: str) -> None:
    sample = parse_line(CURRENT_LINES[case])
    assert sample is not None and sample.kind == "decode"
    assert (sample.gen_tps, sample.accept_len, sample.accept_rate, sample.token_usage) == (61.23, 2.05, 0.35, 0.01)
    assert sample.cuda_graph is True and sample.running_req == 1 and sample.queue_req == 0
    assert sample.ts == pytest.approx(datetime(2026, 10, 14, 9, 16, 13, 517000).timestamp())


def test_a_malformed_millisecond_stamp_is_not_a_line_of_sglang() -> None:
    assert parse_line("[2026-10-14 09:16:13.5x7 TP0] Decode batch, #running-req: 1") is None
    assert parse_line("[2026-10-14 09:16:13. TP0] Decode batch, #running-req: 1") is None


METRICS_0523 = """\
# TYPE sglang:spec_num_steps gauge
sglang:spec_num_steps{engine_type="unified",model_name="k",pp_rank="0",tp_rank="0"} 3.0
# TYPE sglang:spec_num_draft_tokens gauge
sglang:spec_num_draft_tokens{engine_type="unified",model_name="k",pp_rank="0",tp_rank="0"} 4.0
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{model_name="k"} 1520.0
# TYPE sglang:startup_time_seconds gauge
sglang:startup_time_seconds{model_name="k",phase="load_weight"} 151.81
sglang:startup_time_seconds{model_name="k",phase="kv_cache_allocation"} 0.61
# TYPE sglang:startup_cuda_graph_time_seconds gauge
sglang:startup_cuda_graph_time_seconds{model_name="k",phase="target_verify"} 42.37
sglang:startup_cuda_graph_time_seconds{model_name="k",phase="draft_extend"} 5.45
"""


def test_current_prometheus_names_beside_the_old_ones() -> None:
    numbers = parse_metrics(METRICS_0523)
    assert (numbers["spec_num_steps"], numbers["spec_num_draft_tokens"]) == (3.0, 4.0)
    assert numbers["spec_verify_calls_total"] == 1520.0 and numbers["gen_throughput"] is None
    assert startup_seconds(METRICS_0523) == {
        "phases": {"load_weight": 151.81, "kv_cache_allocation": 0.61},
        "cuda_graph": {"target_verify": 42.37, "draft_extend": 5.45},
    }
    assert startup_seconds("sglang:gen_throughput 1\n") == {"phases": {}, "cuda_graph": {}}  # 0.5.6


def test_server_info_per_dp_rank() -> None:
    info = {
        "version": "0.5.23",
        "internal_states": [
            {"dp_rank": 0, "avg_spec_accept_length": 3.2, "last_gen_throughput": 100.0},
            {"dp_rank": 1, "avg_spec_accept_length": 3.4, "last_gen_throughput": 96.0},
            {"dp_rank": 2, "last_gen_throughput": 0.0},  # no verify yet
        ],
    }
    numbers = server_info_numbers(info)
    assert numbers.avg_spec_accept_length == pytest.approx(3.3) and numbers.last_gen_throughput == 196.0
    assert [r.avg_spec_accept_length for r in numbers.dp_ranks] == [3.2, 3.4, None]
    assert numbers.accept_rate_definition == DRAFTS_ONLY
    assert server_info_numbers({"version": "0.5.6"}).accept_rate_definition == BONUS_COUNTED


@pytest.mark.parametrize(
    ("version", "definition", "support", "table", "text"),
    [
        ("0.5.6", BONUS_COUNTED, "known", "0.5.6", "sglang 0.5.6"),
        ("0.5.6.post2", BONUS_COUNTED, "known", "0.5.6", "sglang 0.5.6.post2"),
        ("0.5.10.post1", BONUS_COUNTED, "between", "0.5.6", "sglang 0.5.10.post1"),  # the last bonus-counting
        ("0.5.11", DRAFTS_ONLY, "between", "0.5.11", "sglang 0.5.11"),  # adaptive and DFLASH appear
        ("0.5.12.post1", DRAFTS_ONLY, "between", "0.5.11", "sglang 0.5.12.post1"),
        ("0.5.15.post1", DRAFTS_ONLY, "between", "0.5.13", "sglang 0.5.15.post1"),
        ("0.5.18", DRAFTS_ONLY, "between", "0.5.16", "sglang 0.5.18"),  # DSPARK appeared in 0.5.16
        ("0.5.23", DRAFTS_ONLY, "known", "0.5.23", "sglang 0.5.23"),
        ("0.5.24", DRAFTS_ONLY, "untested", "0.5.23", "sglang 0.5.24 (untested version)"),
        ("0.6.0rc1", DRAFTS_ONLY, "untested", "0.5.23", "sglang 0.6.0rc1 (untested version)"),
        ("nightly", None, "unknown", "0.5.23", "sglang nightly"),
    ],
)
def test_versions_are_told_apart(version, definition, support, table, text) -> None:
    assert versions.accept_rate_definition(version) == definition
    assert versions.support(version) == support
    assert versions.flag_table_version(version) == table
    assert versions.version_text(version) == text


def test_a_real_server_past_the_newest_known_release_is_marked_untested() -> None:
    from backend.serve.server_status import speculative_summary

    assert speculative_summary({"version": "0.5.24"}) == "sglang 0.5.24 (untested version): no speculation"
    assert speculative_summary({"version": "0.5.23"}) == "sglang 0.5.23: no speculation"
    assert speculative_summary({"version": "0.5.23-sim", "simulated": True}).startswith("sglang 0.5.23-sim (SIMULATED)")


def test_labels_never_leave_a_rate_unnamed() -> None:
    assert versions.accept_rate_label("0.5.23") == "accept rate (drafts only)"
    assert versions.accept_rate_label("0.5.6") == "accept rate (bonus counted)"
    assert versions.accept_rate_label(None) == "accept rate (definition unknown)"
    assert versions.version_text("0.5.6", simulated=True) == "sglang 0.5.6-sim SIMULATED"
    assert versions.version_text(None) == "sglang not installed"


def test_an_unknown_newer_release_still_works_the_hosts_help_decides() -> None:
    from backend.serve import preflight_checks
    from backend.serve.host_info import HostInfo
    from backend.settings.model import ProfileConfig, builtin_defaults
    from backend.sglang import flags
    from tui.widgets.hostbar import sglang_text

    settings = builtin_defaults()
    profile = settings.profiles["eagle3-aq"]
    newer = ProfileConfig(**{**vars(profile), "extra_args": ("--speculative-brand-new", "3")})
    # Our newest table does not know the flag: a first opinion only...
    checks = preflight_checks.profile_checks(settings, newer, "0.5.24")
    assert [c.status for c in checks if c.name == "flags"] == ["fail"]
    # ...the host's own --help knows it, so the start goes ahead with a note.
    helped = {
        "version": "0.5.24",
        "help": "  --model-path MODEL_PATH\n  --speculative-brand-new N\n"
        + "".join(f"  {name} X\n" for name in flags.table("0.5.23").flags),
    }
    judged = {c.name: c for c in preflight_checks._sglang_checks(checks, newer, helped, settings)}
    assert judged["flags"].status == "warn" and "the host runs sglang 0.5.24" in judged["flags"].message
    assert judged["sglang"].status == "ok"
    # The header names the release and says it is untested.
    host = settings.hosts["gpu-box"]
    assert sglang_text(HostInfo(versions={"sglang": "0.5.24"}), host, False) == "sglang 0.5.24 (untested version)"
    assert sglang_text(HostInfo(versions={"sglang": "0.5.23"}), host, False) == "sglang 0.5.23"
