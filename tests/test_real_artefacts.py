"""Real artefacts (tests/fixtures/real/, each naming its source) read as a person reads them.

What each test expects was read off the artefact by hand: the numbers below are the artefact's own.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import pytest

from backend.measure.metrics import parse_lines, read_log
from backend.measure.prometheus import read_scrape
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

REAL = Path(__file__).parent / "fixtures" / "real"


def _text(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def _samples(name: str) -> list:
    return list(parse_lines(_text(name).splitlines()))


def test_every_artefact_names_its_source() -> None:
    for path in REAL.iterdir():
        if path.name == "README.md" or path.is_dir():  # a folder of traces says where they come from in its HOW.md
            continue
        head = path.read_text(encoding="utf-8")[:600]
        assert any(site in head for site in ("github.com/", "GitHub", "huggingface.co/", "docs.sglang.ai/")), path.name


# --- /metrics ------------------------------------------------------------------------------------------


def test_dp8_scrape_sums_throughput_over_its_dp_ranks() -> None:
    scrape = read_scrape(_text("metrics-dp8-aibrix-1614.prom"))
    target = [s for s in scrape.series if s.values.get("gen_throughput") is not None]
    assert sorted(s.dp_rank for s in target) == [0, 2, 3, 4, 5, 6, 7]  # DP1's line falls outside the excerpt
    assert all(s.dp_rank == s.tp_rank and s.engine_type == "unified" for s in scrape.series)
    by_rank = {s.dp_rank: s.values["gen_throughput"] for s in target}
    assert by_rank[3] == 141.7546862896204 and by_rank[0] == 35.423840583853774
    # the engine does the sum of its ranks, not one rank's figure (sglang issue 6892)
    expected = 141.7546862896204 + 35.423840583853774 + 35.41880810293355 + 141.74408727960696
    expected += 35.43700884115304 + 35.442541417324875 + 140.76470568188876
    assert math.isclose(scrape.engine["gen_throughput"], expected)
    # DP1 gives no throughput and six ranks no queue in the excerpt: the sums are short, and say so
    assert scrape.short == {"gen_throughput": 1, "num_queue_reqs": 6}
    assert scrape.engine["num_queue_reqs"] == 0.0


def test_dp8_retractions_and_a_pid_label() -> None:
    scrape = read_scrape(_text("metrics-dp8-retracted-aibrix-1614.prom"))
    assert [s.dp_rank for s in scrape.series] == [5, 4, 6, 7]  # num_paused_reqs is not read
    assert scrape.engine["num_retracted_reqs"] == 0.0


def test_the_draft_workers_accept_length_is_not_the_servers() -> None:
    scrape = read_scrape(_text("metrics-draft-and-target-tool-eval-bench.prom"))
    assert [s.key for s in scrape.series] == [("draft", None, 0), ("unified", None, 0)]
    assert scrape.engine["spec_accept_length"] == 2.8 and scrape.engine["spec_accept_rate"] == 0.6
    assert scrape.draft() == {"spec_accept_length": 2.7, "spec_accept_rate": 0.5}


def test_a_0_5_1_scrape_and_the_first_name_labelled_one() -> None:
    scrape = read_scrape(_text("metrics-0.5.1-13485.prom"))
    assert [s.key for s in scrape.series] == [("unified", None, 0)]
    assert scrape.engine["gen_throughput"] == 0.8371284457403783 and scrape.engine["num_running_reqs"] == 1.0
    assert scrape.usage_by_rank == {None: 0.0}
    first = read_scrape(_text("metrics-0.3-name-label-pr1853.prom"))
    assert [s.key for s in first.series] == [(None, None, None)]
    assert first.engine["max_total_num_tokens"] == 570979.0 and first.engine["prompt_tokens_total"] == 230794.0


def test_parse_metrics_cli_prints_a_row_per_series_and_the_engine(tmp_path: Path) -> None:
    path = REAL / "metrics-draft-and-target-tool-eval-bench.prom"
    out = run_cli("parse-metrics", str(path), "--sglang-version", "0.5.23").stdout
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["draft", "-", "0"] and lines[2].split()[:3] == ["unified", "-", "0"]
    assert lines[3].split()[0] == "engine" and "2.80" in lines[3] and "2.70" not in lines[3]
    assert "draft worker (engine_type=draft): accept length 2.70" in out
    assert "rate: accept rate (drafts only)" in out
    data = json.loads(run_cli("parse-metrics", str(path), "--json").stdout)
    assert data["engine"]["spec_accept_length"] == 2.8 and len(data["series"]) == 2
    missing = run_cli("parse-metrics", str(tmp_path / "none.prom"), rc=None)
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


# --- logs ----------------------------------------------------------------------------------------------


def test_dp_attention_mtp_log_keeps_each_ranks_line() -> None:
    samples = _samples("log-dp8-mtp-pr6081.log")
    assert [s.dp_rank for s in samples] == [0, 6, 5, 7, 2]
    assert [s.ranks for s in samples][:2] == ["DP0 TP0", "DP6 TP6"]
    assert [s.accept_len for s in samples] == [2.90, 2.86, 2.94, 2.65, 2.58]
    assert samples[0].gen_tps == 171.01 and samples[0].running_req == 8 and samples[0].cuda_graph is True
    assert samples[0].ts == datetime(2025, 5, 31, 18, 31, 21).timestamp()


def test_second_node_dp_ranks_8_to_15() -> None:
    samples = _samples("log-dp16-node1-pr20766.log")
    assert [s.dp_rank for s in samples] == [9, 13, 15, 10, 14, 11, 12, 8]
    assert {s.running_req for s in samples} == {12} and samples[2].gen_tps == 3.82


def test_eagle2_bench_prefill_lines() -> None:
    samples = _samples("log-eagle2-bench-2777.log")
    assert [s.kind for s in samples] == ["prefill"] * 7  # the access line is not a sample
    assert [s.queue_req for s in samples] == [0, 62, 61, 60, 59, 58, 57]
    assert samples[1].new_token == 75 and samples[1].cache_hit_pct == 0.0 and samples[1].token_usage == 0.01


def test_pd_prefill_server_with_trailing_commas() -> None:
    samples = _samples("log-pd-prefill-9187.log")
    assert [s.new_token for s in samples] == [8192, 7140, 8192, 7661]
    assert samples[1].input_tps == 559732.25 and samples[1].cached_token == 1 and samples[0].ranks == "TP0 EP0"


def test_glm51_prefill_with_pending_tokens() -> None:
    samples = _samples("log-glm51-prefill-23177.log")
    assert [(s.running_req, s.queue_req, s.pending_token) for s in samples] == [(116, 238, 595000), (122, 238, 595000)]
    assert samples[0].cuda_graph is False and samples[1].input_tps == 25797.44


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("*.log")))
def test_the_host_phase_scan_reads_the_same_records(name: str) -> None:
    """One rule for every reader: the host's scan finds each record where parse-log does. But a record behind a
    label SGLang never writes (``# agg mode: Decode batch, …`` copied into a comment): parse-log reads a paste's
    leniently and says so; a server's own log has none, and reading past ``word:`` on the host would take an
    exception line (``ValueError: …``) for a label."""
    from backend.agent.host.shared.logline import record

    lines = _text(name).splitlines()
    labelled = [note for note in read_log(lines).notes if "read after a label" in note]
    for line in lines:
        found = record(line)
        parsed = list(parse_lines([line]))
        if parsed:
            if not line[found.start :].startswith(("Decode batch", "Prefill batch")):
                assert labelled and line[found.start :].split(":")[0] in labelled[0]
                continue
            assert (found.stamp is not None) == (parsed[0].ts is not None)


# --- /server_info and versions -------------------------------------------------------------------------


def test_a_development_build_is_untested_drafts_only_and_says_so() -> None:
    from backend.measure.metrics import server_info_numbers
    from backend.sglang.versions import flag_table_version, support, version_text

    info = json.loads(_text("server-info-dev-build.json"))
    numbers = server_info_numbers(info)
    assert numbers.version == "0.0.0.dev1+g70df09b83"
    assert numbers.accept_rate_definition == "drafts"  # a 2026 build from git, not 0.0.0's "bonus counted"
    assert numbers.speculative_algorithm == "EAGLE" and numbers.speculative_num_steps == 3
    assert numbers.avg_spec_accept_length == 3.364100464100464 and numbers.max_total_num_tokens == 1206208
    assert support(numbers.version) == "untested" and flag_table_version(numbers.version) == "0.5.23"
    assert version_text(numbers.version) == "sglang 0.0.0.dev1+g70df09b83 (development build: untested)"


def test_notebook_output_before_the_record_on_the_same_line() -> None:
    samples = _samples("log-notebook-docs-send-request.log")
    decode = [s for s in samples if s.kind == "decode"]
    # "1. Country:[2025-01-23 19:35:34 TP0] Decode batch. …" and "…a must-visit[2025-01-23 19:35:35 TP0] …"
    assert [s.gen_tps for s in decode] == [5.91, 113.78, 144.03, 144.39]
    assert decode[1].ts == datetime(2025, 1, 23, 19, 35, 34).timestamp() and decode[1].ranks == "TP0"
    assert [s.cached_token for s in samples if s.kind == "prefill"] == [0, 30, 42, 3, 5]


def test_the_host_scan_reads_the_notebook_startup() -> None:
    from backend.agent.host.server_log import LogScan

    scan = LogScan()
    for line in _text("log-notebook-docs-send-request.log").splitlines():
        scan.feed(line)
    assert [p["phase"] for p in scan.phases] == [
        "loading weights",
        "allocating KV cache",
        "capturing CUDA graphs",
        "warming up",
        "ready",
    ]
    assert scan.elapsed["capturing CUDA graphs"] == 6.57  # "Capture cuda graph end. Time elapsed: 6.57 s"
    assert scan.kv_tokens == 444500 and scan.ready_at == datetime(2025, 1, 23, 19, 35, 33).timestamp()


def test_ray_actor_prefix_before_every_record() -> None:
    samples = _samples("log-ray-actor-openclaw-44.log")
    assert len(samples) == 7 and {s.ranks for s in samples} == {"TP0"}
    assert [s.gen_tps for s in samples][:2] == [1374.02, 1374.07] and samples[-1].gen_tps == 1370.83
    assert samples[0].ts == datetime(2026, 3, 22, 13, 53, 37).timestamp() and samples[0].queue_req == 0


def test_ray_prefix_in_colour_reaches_the_host_scan() -> None:
    """Ray colours its actor prefix when its output is a terminal (the codes as verl's logs show them)."""
    from backend.agent.host.server_log import LogScan

    line = _text("log-ray-actor-openclaw-44.log").splitlines()[1]
    coloured = "\x1b[36m" + line.replace(") [", ")\x1b[0m [", 1)
    assert list(parse_lines([coloured])) == list(parse_lines([line]))
    scan = LogScan()
    scan.feed(coloured.replace("Decode batch", "Load weight begin. avail mem=1 GB").split(", #")[0])
    assert scan.phases[0]["start"] == datetime(2026, 3, 22, 13, 53, 37).timestamp()


def test_a_terminal_that_cut_the_columns() -> None:
    samples = _samples("log-npu-cut-columns-pr25960.log")
    decode, prefill = samples[0], samples[1:]
    # what survived the cut: "token usaccept rate: 0.32" is no field a person can trust either
    assert (decode.running_req, decode.gen_tps, decode.cuda_graph) == (45, 863.65, False)
    assert decode.token_usage is None and decode.accept_rate is None and decode.queue_req is None
    assert [(s.queue_req, s.pending_token, s.new_token) for s in prefill] == [
        (81, 70187, 896),
        (80, 69308, 896),
        (80, 68464, 896),
    ]
    assert all(s.running_req is None for s in prefill)  # "#cached-tounning-req: 45"


def test_a_deployments_own_log_format_with_retractions_and_preallocation() -> None:
    samples = _samples("log-own-format-dp-pr11854.log")
    assert [s.dp_rank for s in samples] == [3, 5, 2, 4] and samples[0].ranks == "DP3 TP3 EP3"
    assert [s.gen_tps for s in samples] == [693.45, 674.19, 655.17, 679.00]
    assert {(s.retracted_req, s.prealloc_usage, s.running_req) for s in samples} == {(0, 0.0, 32)}
    assert samples[0].ts == datetime(2025, 10, 20, 3, 2, 22).timestamp() and samples[3].queue_req == 2


# --- drafter configs -----------------------------------------------------------------------------------


def _config(name: str) -> dict:
    return {k: v for k, v in json.loads(_text(name)).items() if k != "_source"}


def _eagle1_tensors(cfg: dict, bias: bool = True) -> dict:
    """The tensors SafeAILab's cnets1.py ``Model`` holds for ``cfg``: embed_tokens, one LlamaDecoderLayer under
    layers.0. (index 0: no input_layernorm), fc = Linear(2h, h, bias), and no lm_head (the target's is used)."""
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    shapes = {
        "embed_tokens.weight": [vocab, h],
        "layers.0.self_attn.q_proj.weight": [h, h],
        "layers.0.self_attn.k_proj.weight": [kv, h],
        "layers.0.self_attn.v_proj.weight": [kv, h],
        "layers.0.self_attn.o_proj.weight": [h, h],
        "layers.0.mlp.gate_proj.weight": [inter, h],
        "layers.0.mlp.up_proj.weight": [inter, h],
        "layers.0.mlp.down_proj.weight": [h, inter],
        "layers.0.post_attention_layernorm.weight": [h],
        "fc.weight": [h, 2 * h],
    }
    if bias:
        shapes["fc.bias"] = [h]
    return {n: {"dtype": "F16", "shape": s, "bytes": 2 * math.prod(s)} for n, s in shapes.items()}


# Llama-2-7b-chat's own sizes (hidden 4096, 32 layers, vocab 32000), as its published module print shows them.
LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096}
LLAMA2_7B |= {"num_hidden_layers": 32, "vocab_size": 32000}


def test_an_eagle1_drafter_is_judged_by_eagle1_rules_and_needs_eagle() -> None:
    from backend.drafters import checkpoints

    cfg = _config("drafter-eagle1-llama2-chat-7b-config.json")
    drafter = {"config": cfg, "tensors": _eagle1_tensors(cfg)}
    assert checkpoints.drafter_kind(drafter) == "EAGLE"  # its architectures say only LlamaForCausalLM
    judged = checkpoints.verdict(drafter, LLAMA2_7B)
    assert judged["compatible"] and judged["algorithm"] == "EAGLE" and judged["problems"] == []
    text = " ".join(judged["notes"])
    assert "--speculative-algorithm EAGLE;" in text and "EAGLE3" not in text and "lm_head" in text
    # on the wrong target it says what an EAGLE-1 drafter needs, never an EAGLE-3 rule
    wrong = checkpoints.verdict(drafter, {**LLAMA2_7B, "hidden_size": 5120, "vocab_size": 32064})
    assert any("fc.weight is [4096, 8192]" in p and "[5120, 10240]" in p for p in wrong["problems"])
    assert any("vocabularies must be the same" in p for p in wrong["problems"])
    assert not any("lm_head.weight is missing" in p or "aux" in p for p in wrong["problems"])


def test_preflight_tells_an_eagle1_drafter_to_use_eagle(tmp_path: Path) -> None:
    from backend.drafters import checkpoints

    cfg = _config("drafter-eagle1-llama2-chat-7b-config.json")
    judged = checkpoints.verdict({"config": cfg, "tensors": _eagle1_tensors(cfg, bias=False)}, LLAMA2_7B)
    assert judged["algorithm"] == "EAGLE"  # serving's preflight compares the profile's algorithm with this


def test_specforge_eagle3_configs_stay_eagle3() -> None:
    from backend.drafters import checkpoints

    cfg = _config("drafter-eagle3-kimi-k25-specforge-config.json")
    assert checkpoints.drafter_kind({"config": cfg, "tensors": {}}) == "EAGLE3"
    assert checkpoints.drafter_config(cfg) == (cfg, None)
    vl = _config("drafter-eagle3-qwen3-vl-8b-specforge-config.json")
    judged = checkpoints.verdict({"config": vl, "tensors": {}}, _config("target-model-info-partial.json"))
    assert judged["algorithm"] == "EAGLE3"


def test_a_target_config_without_sizes_says_which_checks_were_not_made() -> None:
    from backend.drafters import checkpoints

    vl = _config("drafter-eagle3-qwen3-vl-8b-specforge-config.json")
    h, v = vl["hidden_size"], vl["draft_vocab_size"]
    tensors = {
        "fc.weight": {"dtype": "BF16", "shape": [h, 3 * h], "bytes": 0},
        "midlayer.self_attn.q_proj.weight": {"dtype": "BF16", "shape": [h, 2 * h], "bytes": 0},
        "midlayer.self_attn.k_proj.weight": {"dtype": "BF16", "shape": [1024, 2 * h], "bytes": 0},
        "midlayer.self_attn.v_proj.weight": {"dtype": "BF16", "shape": [1024, 2 * h], "bytes": 0},
        "lm_head.weight": {"dtype": "BF16", "shape": [v, h], "bytes": 0},
        "d2t": {"dtype": "I64", "shape": [v], "bytes": 0},
        "t2d": {"dtype": "BOOL", "shape": [vl["vocab_size"]], "bytes": 0},
    }
    judged = checkpoints.verdict({"config": vl, "tensors": tensors}, _config("target-model-info-partial.json"))
    assert judged["compatible"]
    unchecked = " ".join(judged["unchecked"])
    assert "no vocab_size" in unchecked and "could not be checked against the target's" in unchecked
    assert "hidden_size: the target config has none" in unchecked
    # the drafter was trained for qwen3_vl and the partial target says qwen3_5: said, not hidden
    assert any("trained for model_type qwen3_vl" in n for n in judged["notes"])


def test_a_nested_speculators_config_is_read_from_where_it_nests() -> None:
    from backend.drafters import checkpoints

    # vLLM's speculators layout (as vllm's tests and SpecForge exports write it), around SpecForge's real sizes
    inner = _config("drafter-eagle3-qwen3-vl-8b-specforge-config.json")
    nested = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "draft_vocab_size": 32000,
        "eagle_aux_hidden_state_layer_ids": [1, 17, 32],
        "transformer_layer_config": {k: v for k, v in inner.items() if k not in ("architectures", "draft_vocab_size")},
    }
    cfg, where = checkpoints.drafter_config(nested)
    assert where == "transformer_layer_config" and cfg["hidden_size"] == 4096 and cfg["draft_vocab_size"] == 32000
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 17, 32]
    judged = checkpoints.verdict({"config": nested, "tensors": {}}, None)
    assert judged["algorithm"] == "EAGLE3"
    assert judged["notes"][0].startswith("nested config: read from transformer_layer_config")


# --- DP ranks through the live series, parse-log, watch and the history -------------------------------


def _steady(name: str) -> list[str]:
    """The artefact's decode lines, then the same lines one second later (each rank's batch held steady)."""
    lines = [line for line in _text(name).splitlines() if "Decode batch" in line]
    later = [line.replace(":07 DP", ":08 DP") for line in lines]
    return lines + later


def test_each_dp_rank_is_its_own_stream_and_the_engine_their_sum() -> None:
    from backend.measure.metrics import LiveFilter
    from backend.measure.series import LiveSeries

    lines = _steady("log-dp16-node1-pr20766.log")
    live = LiveFilter()
    kept = [live.accept(s) for s in parse_lines(lines)]
    # every rank's first line is its first after idle; none is taken for another rank's next line
    assert [s.gen_tps for s in kept[:8]] == [None] * 8 and all(s.gen_tps for s in kept[8:])
    series = LiveSeries(82.0)
    for sample in parse_lines(lines):
        series.feed(sample, now=0.0)
    assert sorted(series.ranks) == [8, 9, 10, 11, 12, 13, 14, 15]
    total = series.total_tok_s.last[1]
    assert math.isclose(total, 3.83 * 6 + 3.82 + 3.84) and series.streams.last[1] == 96  # 8 ranks × 12
    assert math.isclose(series.tok_s.last[1], total / 96)
    assert series.ranks[15].total_tok_s.last[1] == 3.82 and series.ranks[15].streams.last[1] == 12


def test_parse_log_and_watch_say_the_engines_sum_and_each_rank(tmp_path: Path) -> None:
    from backend.cli.livecmds import _watch_line
    from backend.history import Yardstick
    from backend.measure.series import LiveSeries

    log = tmp_path / "dp.log"
    log.write_text("\n".join(_steady("log-dp16-node1-pr20766.log")) + "\n")
    out = run_cli("parse-log", str(log), "--host", "local").stdout
    assert "aggregate gen throughput: mean" in out and "8 DP ranks, each its own batch" in out
    assert "  DP15: 3.8 tok/s over 12.0 running" in out
    series = LiveSeries(82.0)
    samples = list(parse_lines(log.read_text().splitlines()))
    for sample in samples:
        series.feed(sample, now=0.0)
    line = _watch_line(series.filter.accept(samples[-1]), Yardstick(82.0, 30.0), series)
    assert line.split()[1] == "DP8" and "engine (8 DP ranks): 30.6 tok/s over 96 running" in line


def test_the_history_keeps_the_engines_sum_per_second() -> None:
    from backend.history.samples import downsample, filter_tail, primed_filter
    from backend.measure.metrics import LiveFilter

    live = LiveFilter()
    kept = [live.accept(s) for s in parse_lines(_steady("log-dp16-node1-pr20766.log"))]
    rows = downsample(kept)
    second = rows[int(datetime(2026, 3, 17, 17, 35, 8).timestamp())]
    assert math.isclose(second["tok_sum"] / second["tok_n"], 3.83 * 6 + 3.82 + 3.84)
    assert second["running_req"] == 96 and second["ps_n"] == 8  # per stream: each rank's own figure
    # an import resumes every rank's filter where it stopped: the next line of DP9 keeps its throughput
    resumed = primed_filter(filter_tail([], kept))
    nxt = next(parse_lines([_steady("log-dp16-node1-pr20766.log")[0].replace(":07 DP", ":09 DP")]))
    assert resumed.accept(nxt).gen_tps == 3.83


def test_a_learned_shape_reads_every_line_as_the_field_by_field_path_does() -> None:
    """The fast path (one compiled match per known shape) gives the same samples as the slow one, and a value it
    cannot read (nan, a cut-off number) falls back to the slow one instead of losing or inventing a field."""
    from backend.measure import metrics

    lines = [line for path in sorted(REAL.glob("*.log")) for line in path.read_text(encoding="utf-8").splitlines()]
    for shapes in metrics._SHAPES.values():
        shapes.clear()
    first = [metrics.parse_line(line) for line in lines]  # learns the shapes on the way
    assert any(metrics._SHAPES.values())
    assert [metrics.parse_line(line) for line in lines] == first
    ray = lines[next(i for i, line in enumerate(lines) if line.startswith("(SGLangEngine"))]
    broken = ray.replace("1374.02", "nan").replace("#running-req: 6", "#running-req: 6x")
    sample = metrics.parse_line(broken)
    assert sample.gen_tps is None and sample.running_req is None and sample.token_usage == 0.04


def test_the_live_tabs_server_line_gives_a_line_per_dp_rank() -> None:
    from types import SimpleNamespace

    from backend.jobs import JobInfo
    from backend.measure.series import LiveSeries
    from tui.widgets.serverline import ServerFacts

    series = LiveSeries(82.0)
    for sample in parse_lines(_steady("log-dp16-node1-pr20766.log")):
        series.feed(sample, now=0.0)
    server = JobInfo(id="serve-1", kind="serve", args={"profile": "dp16", "port": 30000})
    scrape = read_scrape(_text("metrics-0.5.1-13485.prom"))
    feed = SimpleNamespace(
        server=server, gone=False, info=None, metrics=scrape.engine, scrape=scrape, series=series,
        startup={}, reachable=True, samples=16,
    )  # fmt: skip
    text = ServerFacts.of(feed).text()
    assert "\nper DP rank (tok/s over running): DP8 3.8/12 · DP9 3.8/12" in text and "DP15 3.8/12" in text
    assert "token usage per DP rank" not in text  # one rank's usage is the engine's


def test_inspect_and_diff_say_an_eagle1_drafter_needs_eagle(tmp_path: Path) -> None:
    from backend.sandbox.fixtures import write_sparse_safetensors

    cfg = _config("drafter-eagle1-llama2-chat-7b-config.json")
    drafter = tmp_path / "eagle1"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps(cfg))
    tensors = {n: (t["dtype"], t["shape"]) for n, t in _eagle1_tensors(cfg).items()}
    write_sparse_safetensors(str(drafter / "model.safetensors"), tensors)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(LLAMA2_7B))

    def cli(*args: str) -> str:
        return run_cli(*args, "--host", "local").stdout

    assert "drafter: EAGLE-1/2 (not EAGLE-3): --speculative-algorithm EAGLE" in cli("inspect", str(drafter))
    out = cli("diff", str(drafter), str(drafter), "--target", str(target))
    assert "verdict: COMPATIBLE (A needs EAGLE, B needs EAGLE)" in out and "EAGLE3" not in out.split("verdict:")[1]
