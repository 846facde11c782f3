"""What operators paste, read as a person reads it, and what could not be read said (issue 34).

Every artefact is someone else's text (tests/fixtures/real/, its source on its first lines); what each test
expects was read off it by hand before the reader ran on it (/work/research/34/INDEX.md holds those readings).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from backend.measure.prometheus import read_scrape
from tests.helpers import run_cli

pytestmark = pytest.mark.unit

REAL = Path(__file__).parent / "fixtures" / "real"


def _text(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


# --- /metrics pastes -----------------------------------------------------------------------------------


def test_counters_split_by_is_streaming_are_summed() -> None:
    """inferscope's grep of a live 0.5.19 page: no HELP/TYPE, each tokenizer counter split by is_streaming."""
    scrape = read_scrape(_text("metrics-grepd-is-streaming-split-inferscope.prom"))
    assert scrape.engine["prompt_tokens_total"] == 574.0 + 213.0
    assert scrape.engine["generation_tokens_total"] == 216.0 + 1024.0
    assert scrape.engine["num_queue_reqs"] == 0.0 and scrape.engine["token_usage"] == 0.0
    assert scrape.engine["gen_throughput"] is None and scrape.engine["num_running_reqs"] is None  # not on the page
    assert any("summed over the values of is_streaming" in n for n in scrape.notes)


def test_a_page_pasted_with_its_curl_line() -> None:
    """SGLang's early metrics docs: the code block starts with `$ curl …/metrics` and a blank line."""
    scrape = read_scrape(_text("metrics-docs-early-curl-line-func-latency.prom"))
    assert scrape.engine["prompt_tokens_total"] == 7.0 and scrape.engine["generation_tokens_total"] == 8.0
    assert all(scrape.engine[k] == 0.0 for k in ("num_running_reqs", "gen_throughput", "num_queue_reqs"))
    ttft = scrape.histograms[
        ("sglang:time_to_first_token_seconds", (("model_name", "meta-llama/Llama-3.1-8B-Instruct"),))
    ]
    assert ttft.count == 1.0 and math.isclose(ttft.total, 0.30457592010498047)
    assert ttft.counts[ttft.bounds.index(0.25)] == 0.0 and ttft.counts[ttft.bounds.index(0.5)] == 1.0
    assert scrape.notes[0] == "1 shell line skipped: '$ curl http://localhost:30000/metrics'"
    from backend.measure import latency

    figures = latency.summary(latency.of_scrape(scrape))
    assert 250 < figures["ttft_ms"].quantiles["p50"].value <= 500  # one request, in (0.25, 0.5] s
    assert 30 < figures["itl_ms"].quantiles["p50"].value <= 40  # the old time_per_output_token name, (0.03, 0.04]
    assert any("time_per_output_token_seconds read as" in n for n in scrape.notes)


def test_grepd_bucket_fragments_are_seen_not_guessed() -> None:
    """PR #1853's fragments: bucket lines without TYPE, from le=5.0 up, each cut inside its _count line. All
    1029 TTFTs are <= 5 s, and nothing below 5 s is in the paste: no median can be read, and that is said."""
    scrape = read_scrape(_text("metrics-old-names-bucket-fragments-pr1853.prom"))
    assert scrape.histograms == {} and scrape.series == []
    notes = "\n".join(scrape.notes)
    assert "2 lines unreadable: 'sglang:time_to_first_token_seconds_count{name=" in notes
    assert "read as histograms by the _bucket suffix" in notes
    assert "sglang:time_to_first_token_seconds: 1029 observations, 1029 of them <= 5 " in notes
    assert "sglang:waiting_request_latency_seconds: 1003 observations" in notes
    assert notes.count("no quantile is read") == 2


def test_two_dp_ranks_throughput_is_the_engines_sum() -> None:
    scrape = read_scrape(_text("metrics-dp-rank-gen-throughput-two-lines-pr7597.prom"))
    assert [s.key for s in scrape.series] == [("unified", 1, 0), ("unified", 0, 0)]
    assert scrape.engine["gen_throughput"] == 386.2656119271815 + 386.20832953491475 and scrape.notes == []


def test_a_hand_summary_is_not_a_page_of_zeros() -> None:
    """miles #2012: an operator's own per-DP-rank summary; not exposition format, and said so."""
    scrape = read_scrape(_text("metrics-dp-ranks-hand-summary-miles-pr2012.txt"))
    assert scrape.series == [] and all(v is None for v in scrape.engine.values())
    assert scrape.notes[-1].startswith("not /metrics exposition")
    assert scrape.notes[0].startswith("5 lines unreadable: 'engine 10.4.90.74'")


def test_the_gateways_engine_metrics_read_as_sglangs() -> None:
    """smg #813: the model gateway re-serves SGLang's gauges as sglang_* with a worker_addr label."""
    scrape = read_scrape(_text("router-engine-metrics-smg-grpc-sidecar-813.prom"))
    assert [s.key for s in scrape.series] == [("unified", None, 0)]
    assert scrape.engine["num_used_tokens"] == 852.0 and scrape.histograms == {}  # le-labelled gauge: no histogram
    notes = "\n".join(scrape.notes)
    assert "1 shell line skipped: 'curl http://127.0.0.1:30001/engine_metrics'" in notes
    assert "3 lines unreadable" in notes and "read as sglang:*" in notes


def test_hybrid_pool_usage_and_first_collector_names() -> None:
    """Not an artefact: two names no real paste here holds, written as SGLang's collectors define them
    (full_token_usage: PR #19982; num_requests_running/waiting: PR #1853's collector)."""
    page = (
        'sglang:full_token_usage{engine_type="unified",tp_rank="0"} 0.01171875\n'
        'sglang:swa_token_usage{engine_type="unified",tp_rank="0"} 0.5\n'
        'sglang:num_requests_running{name="m"} 3.0\n'
        'sglang:num_requests_waiting{name="m"} 2.0\n'
    )
    scrape = read_scrape(page)
    assert scrape.engine["token_usage"] == 0.5  # the fullest pool, as the log's hybrid line is read
    assert scrape.engine["num_running_reqs"] == 3.0 and scrape.engine["num_queue_reqs"] == 2.0
    assert any("full_token_usage" in n for n in scrape.notes)
    assert any(n.startswith("sglang:num_requests_running read as sglang:num_running_reqs") for n in scrape.notes)
    both = read_scrape(page + 'sglang:token_usage{engine_type="unified",tp_rank="0"} 0.01\n')
    assert both.engine["token_usage"] == 0.01  # the server's own figure when it gives one


def test_parse_metrics_says_what_it_could_not_read() -> None:
    out = run_cli("parse-metrics", str(REAL / "metrics-dp-ranks-hand-summary-miles-pr2012.txt"))
    assert out.returncode == 0, out.stderr
    assert "no SGLang series (sglang:…) read from it" in out.stdout
    assert "note: not /metrics exposition" in out.stdout and "note: 5 lines unreadable" in out.stdout
    out = run_cli("parse-metrics", str(REAL / "metrics-docs-early-curl-line-func-latency.prom"), "--json")
    assert '"notes": [\n    "1 shell line skipped' in out.stdout


# --- router pages ----------------------------------------------------------------------------------------


def test_a_0_2_router_page_reads_its_sgl_router_names() -> None:
    """sglang PR #6537: the router's first Prometheus page, from its `curl localhost:9000` line, cut inside a
    summary: 2 active workers, 9 + 7 requests processed, 1 + 1 running."""
    from backend.fleet import router_metrics

    view = router_metrics.read(None, _text("router-prom-0.2-curl-sgl-router-pr6537.prom"))
    assert (view.workers, view.requests_active, view.requests_total) == (2, 2, 16)
    assert view.healthy_workers is None and view.errors_total is None  # 0.2's first page says neither
    assert any("sgl_router_*" in n for n in view.notes)


def test_a_hand_shortened_router_page_is_said_unreadable() -> None:
    """A run book's reading of a 0.3.2 page (`smg_worker_health{r0} 1      smg_worker_health{r1} 1`, a value
    written as `absent (zero)`): not exposition, so no figure, and the lines named."""
    from backend.fleet import router_metrics

    view = router_metrics.read(None, _text("router-prom-smg-hand-shortened-runbook.txt"))
    assert view.workers is None and view.healthy_workers is None and view.errors_total is None
    assert view.notes[0].startswith("2 lines unreadable: 'smg_worker_health{r0} 1 smg_worker_health{r1} 1'")


def test_a_shortened_workers_answer_is_unknown_not_zero() -> None:
    """No real /workers paste was found (INDEX.md says so); its shape as sgl-model-gateway answers it, shortened
    with `...` as people shorten JSON."""
    from backend.fleet import router_metrics

    view = router_metrics.read('{"workers": [{"url": "http://10.0.0.1:30000", "is_healthy": true}, ...]}', None)
    assert view.workers is None and view.healthy_workers is None
    assert view.notes == ("the /workers answer is not valid JSON (shortened with '...'): the workers are unknown",)


# --- server logs -----------------------------------------------------------------------------------------


def _log(name: str):
    from backend.measure.metrics import read_log

    return read_log(_text(name).splitlines())


def test_a_line_cut_mid_number_is_not_a_zero() -> None:
    """sglang PR #30393: the paste's last decode line stops at `accept rate: 0` (0.14 or so, cut)."""
    reading = _log("log-hicache-prealloc-transfer-req-pr30393.log")
    whole, last = reading.samples[:4], reading.samples[4]
    assert [s.gen_tps for s in whole] == [183.10, 179.61, 185.97, 183.75]
    assert [s.accept_len for s in whole] == [1.67, 1.68, 1.73, 1.72] and not any(s.cut for s in whole)
    assert [s.prealloc_usage for s in whole] == [0.22, 0.26, 0.33, 0.33]
    assert last.cut and last.accept_rate is None and last.accept_len == 1.44 and last.running_req == 2
    assert last.gen_tps is None and last.queue_req is None
    assert reading.notes == (
        "1 line cut before #queue-req, read up to the last whole value: "
        "'…261312, token usage: 0.42, accept len: 1.44, accept rate: 0'",
    )


def test_cut_lines_without_ranks_and_in_a_deployments_own_format() -> None:
    """sglang PR #22166 (no rank in the prefix, cut at `token usage:`) and fastrl #4 (its own logging format,
    the "after" block cut after `accept len: 1.00, a`)."""
    no_ranks = _log("log-no-ranks-prefill-decode-pr22166.log").samples
    assert [(s.kind, s.ranks) for s in no_ranks][:2] == [("decode", None), ("prefill", None)]
    assert no_ranks[0].gen_tps == 1635.11 and [s.input_tps for s in no_ranks[1:4]] == [559.53, 1670.03, 4099.38]
    assert no_ranks[-1].cut and no_ranks[-1].running_req == 29 and no_ranks[-1].token_usage is None
    own = _log("log-own-format-no-ranks-fastrl-4.log").samples
    assert [s.gen_tps for s in own] == [5452.63, 5399.46, 6138.60, None]
    assert [s.cuda_graph for s in own] == [False, False, True, None] and [s.cut for s in own] == [False] * 3 + [True]
    assert own[3].accept_len == 1.00  # followed by a comma: whole
    assert own[2].ts < own[0].ts  # "after this PR" is another process, logged earlier


def test_labelled_lines_are_read_and_foreign_lines_are_said() -> None:
    labelled = _log("log-labelled-agg-disagg-in-parser-comment.log")
    assert [(s.accept_len, s.gen_tps, s.running_req) for s in labelled.samples] == [(2.47, 167.86, 14), (2.20, 0.40, 1)]
    assert labelled.samples[1].prealloc_usage == 0.0 and labelled.samples[1].retracted_req == 0
    assert labelled.notes == ("2 records read after a label SGLang does not write: '# agg mode:'; '# disagg mode:'",)
    tokenspeed = _log("log-tokenspeed-patched-decode-line-smg-1965.log")
    assert tokenspeed.samples == []
    assert "'[ts] [2026-07-24 20:53:48,415 ATTN TP RANK 0] - INFO - Deco…'" in tokenspeed.notes[0]
    assert "not read" in tokenspeed.notes[0]
    jax = _log("log-sglang-jax-cache-miss-pr564.log")
    assert len(jax.samples) == 9 and round(sum(s.gen_tps for s in jax.samples) / 9, 2) == 84.51
    assert "'[2025-12-17 05:10:47] Decode batch'" in jax.notes[0]  # its 10th line, cut before any field


def test_other_programs_logs_are_named() -> None:
    vllm = _log("log-vllm-ascend-not-sglang-specdecoding-13664.log")
    assert vllm.samples == [] and vllm.notes == (
        "a vLLM log (its SpecDecoding metrics lines), not SGLang's: nothing read (2 of its lines seen)",
    )
    for name in ("router-log-queues-tree-eviction-pr7899.log", "router-log-no-workers-startup-12621.log"):
        reading = _log(name)
        assert reading.samples == [] and reading.notes[0].startswith("an sglang-router log (sglang_router_rs)")


def test_parse_log_says_what_it_could_not_read() -> None:
    out = run_cli("parse-log", str(REAL / "log-hicache-prealloc-transfer-req-pr30393.log"))
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()
    assert rows[5].endswith("(cut)") and rows[5].split()[3] == "1.44" and rows[5].split()[4] == "-"
    assert out.stdout.rstrip().endswith("accept len: 1.44, accept rate: 0'")
    out = run_cli("parse-log", str(REAL / "router-log-grpc-health-fail-pr11310.log"), "--json")
    assert out.stdout.strip() == "[]" and "specdeck: note: an sglang-router log" in out.stderr


def _failure(name: str) -> tuple[str | None, str | None]:
    from backend.agent.host.server_log import LogScan, error_line

    lines = _text(name).splitlines()
    scan = LogScan()
    for line in lines:
        scan.feed(line)
    key, line, _, _ = scan.failure()
    return key, error_line(line, lines[-50:], scan.found_ranks.get(key))


def test_a_cut_traceback_says_where_it_stops_and_on_which_rank() -> None:
    """sglang #12567: TP7 (not TP0) hit the exception; the paste stops inside the traceback."""
    assert _failure("log-tp7-scheduler-exception-12567.log") == (
        "scheduler",
        "Scheduler hit an exception (on TP7); the traceback ends without its exception line (cut?), "
        "last frame scheduler.py:999 in event_loop_overlap",
    )
    assert _failure("log-npu-mindspore-eagle3-v2-exception-pr17643.log")[1] == (
        "Scheduler hit an exception; the traceback ends without its exception line (cut?), "
        "last frame eagle_worker_v2.py:506 in _draft_extend_for_prefill"
    )
    assert _failure("log-inline-backtick-merge-batch-pr10090.log") == ("scheduler", "RuntimeError: Sizes of tensors")


def test_a_docker_compose_prefix_is_read_past() -> None:
    """sglang #12076: every line behind `sglang-1  | `; the request failed with CancelledError."""
    from backend.agent.host.shared.logline import record

    assert _failure("log-docker-compose-prefix-cancelled-12076.log") == (None, "asyncio.exceptions.CancelledError")
    line = "sglang-1  | asyncio.exceptions.CancelledError"
    assert line[record(line).start :] == "asyncio.exceptions.CancelledError"


# --- SpecForge consoles ----------------------------------------------------------------------------------


def _console(name: str) -> dict:
    """The host's reader over a pasted console (its `# source` header, ours, left out)."""
    from backend.agent.host.train_log import Reader

    reader = Reader({"era": "script"})  # a paste: no job arguments (batch size, length) are known
    body = "".join(line for line in _text(name).splitlines(True) if not line.startswith("# source"))
    reader.feed(body.encode())
    reader.flush()
    return reader.summary()


def test_the_per_epoch_summary_is_read_and_a_finished_run_reads_finished() -> None:
    """Notes on a Qwen3-4B run: two runs' tqdm bars, then the H100 run's `Train Epoch [6/6]` summary."""
    s = _console("specforge-tqdm-and-epoch-summary-notes-qwen3-4b.log")
    assert s["epoch"] == {
        "epoch": 6,
        "epochs": 6,
        "acc": [0.68, 0.63, 0.61, 0.59, 0.57, 0.55, 0.53],
        "ploss": [0.49, 0.56, 0.60, 0.63, 0.66, 0.69, 0.72],
        "finished": True,
    }
    assert s["acc"] == [0.68, 0.63, 0.61, 0.59, 0.57, 0.55, 0.53]
    assert s["eta_s"] == 0.0  # not "21 minutes left": its last epoch's summary is written
    assert (s["step"], s["total_steps"], s["loss"], s["records"]) == (457, 1667, 1.11, 1)  # the H100 run's bar
    assert s["notes"] == [
        "a second run in the console (its bar counts 1667 steps an epoch, the first 20000): only the later one is read"
    ]


def test_an_epoch_summary_cut_inside_its_last_line() -> None:
    """fan-niu's overfit test: epoch 100 of 100, the curve collapsing after position 0; the last pLoss cut."""
    s = _console("specforge-epoch-summary-overfit-100-cut-fan-niu.log")
    assert s["epoch"]["acc"] == [0.61, 0.30, 0.21, 0.16, 0.12, 0.10, 0.07] and s["epoch"]["finished"]
    assert s["epoch"]["ploss"] == [1.60, 2.34, 2.69, 2.92, 3.10, 3.26]  # the 7th is cut
    assert s["notes"] == ["1 per-epoch summary line cut short, not read: 'Train Epoch [100/100], position 6, pL'"]


def test_triton_shared_memory_is_not_cuda_memory() -> None:
    """SpecForge #194 (one line, rank 3) and PyTorch #180278 (the numbers on a later line)."""
    one_line = _console("specforge-triton-smem-oom-one-line-rank3-194.log")
    assert [t["kind"] for t in one_line["traps"]] == ["triton_smem"]
    message = one_line["traps"][0]["message"]
    assert message.startswith("Triton could not compile triton_tem_fused_0 on rank 3: it needs 107008 bytes")
    assert "the GPU has 101376" in message and "batch size and max length do not change it" in message
    assert "BLOCK_M/BLOCK_N 32" in message and "num_stages" in message
    two_lines = _console("specforge-flex-attn-smem-two-line-pytorch-180278.log")
    assert [t["kind"] for t in two_lines["traps"]] == ["triton_smem"]
    assert "needs 139776 bytes of shared memory per block and the GPU has 101376" in two_lines["traps"][0]["message"]


def test_cuda_oom_advice_quotes_the_error_and_invents_nothing() -> None:
    """SpecForge #336: after the shared-memory fix, a real CUDA OOM on rank 1 with other processes on the GPU."""
    traps = {t["kind"]: t["message"] for t in _console("specforge-cuda-oom-after-smem-fix-prose-336.txt")["traps"]}
    oom = traps["oom"]
    assert oom.startswith(
        "CUDA out of memory on rank 1: tried to allocate 1.02 GiB with 30.69 GiB of GPU 1's 47.40 GiB free"
    )
    assert "583936 29.95 GiB, 1818617 16.71 GiB" in oom and "PyTorch holds 16.25 GiB" in oom
    assert "batch size 1" not in oom and "2048" not in oom and "step ?" not in oom  # nothing the paste did not say
    assert "107008" in traps["triton_smem"]  # the first error it quotes, as written


def test_segfaults_and_nccl_timeouts_are_traps() -> None:
    segfault = _console("specforge-segfault-banner-unknown-frames-539.log")
    assert [t["kind"] for t in segfault["traps"]] == ["segfault"]
    assert "no Python frame" in segfault["traps"][0]["message"]
    nccl = _console("specforge-class-nccl-watchdog-after-tqdm-llamafactory-8261.log")
    assert [t["kind"] for t in nccl["traps"]] == ["nccl_timeout"]
    assert nccl["traps"][0]["message"].startswith("an NCCL collective timed out on rank 5")


def test_a_traceback_without_its_exception_line_is_said() -> None:
    s = _console("log-npu-mindspore-eagle3-v2-exception-pr17643.log")
    assert s["notes"] == [
        "a traceback ends without its exception line (cut?), last frame eagle_worker_v2.py:506 in "
        "_draft_extend_for_prefill"
    ]


# --- drafter configs seen alone ------------------------------------------------------------------------


def _config_folder(tmp_path: Path, name: str) -> Path:
    """A folder holding the artefact as its config.json and nothing else (a repo browsed before its weights)."""
    folder = tmp_path / name.removesuffix(".json")
    folder.mkdir()
    (folder / "config.json").write_text(_text(name), encoding="utf-8")
    return folder


def _judged(tmp_path: Path, name: str) -> tuple[dict, dict]:
    from backend.drafters.checkpoints import verdict
    from backend.drafters.inspection import inspect_local

    info = inspect_local(str(_config_folder(tmp_path, name)))
    return info, verdict(info, None)


def test_a_config_alone_is_read_and_its_shapes_are_unchecked(tmp_path: Path) -> None:
    """SpecForge's EAGLE-3.1 config for Qwen3-30B-A3B: head_dim 128 set explicitly, fc_norm and norm_output."""
    info, v = _judged(tmp_path, "drafter-eagle3.1-explicit-head-dim-specforge-qwen3-30b-a3b.json")
    assert info["files"] == [] and info["tensors"] == {} and info["config"]["draft_vocab_size"] == 32000
    assert info["notes"] == ["config.json alone: no *.safetensors were read, so no tensor shape could be checked"]
    assert v["compatible"] is None and v["problems"] == [] and v["algorithm"] == "EAGLE3"
    assert any("unchecked, not missing" in u for u in v["unchecked"])
    assert "head_dim 128 is set (not hidden_size 2048 / 32 heads = 64): q_proj has 32 x 128 = 4096 rows" in v["notes"]
    assert "EAGLE-3.1 extras set: fc_norm, norm_output" in v["notes"]
    assert any("default layers 2, L/2 and L-3" in n for n in v["notes"])  # it has no eagle_config: right here


def test_an_moe_drafter_with_its_aux_layers(tmp_path: Path) -> None:
    info, v = _judged(tmp_path, "drafter-eagle3-moe-draft-aux-ids-specforge-qwen3-30b-a3b.json")
    assert v["compatible"] is None and v["problems"] == []
    assert "an MoE decoder layer: 128 experts, 8 per token, moe_intermediate_size 768" in v["notes"]
    assert not any("default layers" in n for n in v["notes"])  # eagle_config names them: [1, 23, 44]
    assert info["config"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 23, 44]


def test_dflash_and_mtp_drafters_are_judged_by_their_own_kind(tmp_path: Path) -> None:
    _, dflash = _judged(tmp_path, "drafter-dflash-specforge-qwen3-4b.json")
    assert dflash["algorithm"] == "DFLASH" and dflash["problems"] == [] and dflash["compatible"] is None
    assert dflash["notes"][0] == (
        "a DFlash block drafter (DFlashDraftModel): 5 layers, block size 16, target layers [1, 9, 17, 25, 33] of "
        "36; judged by its own kind, not EAGLE's"
    )
    assert not any("default layers" in n or "EAGLE3" in n for n in dflash["notes"])
    _, mtp = _judged(tmp_path, "drafter-mtp-shared-lm-head-specforge-qwen3.5-4b.json")
    assert mtp["problems"] == [] and mtp["algorithm"] is None
    assert "shares the target's lm_head" in mtp["notes"][0] and not any("lm_head" in u for u in mtp["unchecked"])


def test_inspect_prints_what_a_config_alone_says(tmp_path: Path) -> None:
    folder = _config_folder(tmp_path, "drafter-eagle3.1-explicit-head-dim-specforge-qwen3-30b-a3b.json")
    out = run_cli("--host", "local", "inspect", f"file://{folder}")
    assert out.returncode == 0, out.stderr
    assert "tensors: none read (no safetensors file): the shapes are unchecked, not missing" in out.stdout
    assert "config says: EAGLE-3.1 extras set: fc_norm, norm_output" in out.stdout
    assert "drafter: EAGLE3: --speculative-algorithm EAGLE3" in out.stdout
    dflash = run_cli(
        "--host",
        "local",
        "inspect",
        f"file://{_config_folder(tmp_path, 'drafter-dflash-specforge-qwen3-4b.json')}/config.json",
    )
    assert dflash.returncode == 0 and "config says: a DFlash block drafter" in dflash.stdout


def test_a_hub_repo_with_config_json_alone(tmp_path: Path) -> None:
    from backend.sandbox.hub import HubServer

    repo = tmp_path / "hub" / "z-lab" / "qwen3-4b-dflash"
    repo.mkdir(parents=True)
    (repo / "config.json").write_text(_text("drafter-dflash-specforge-qwen3-4b.json"), encoding="utf-8")
    with HubServer(tmp_path / "hub") as hub:
        out = run_cli("--host", "local", "inspect", "hf://z-lab/qwen3-4b-dflash", "--endpoint", hub.url)
    assert out.returncode == 0, out.stderr
    assert "config says: a DFlash block drafter" in out.stdout and "unchecked, not missing" in out.stdout


# --- other benchmarks' output given to `advise --from` ----------------------------------------------------


def _advise(name: str) -> subprocess.CompletedProcess:
    return run_cli("advise", "--from", str(REAL / name), rc=None)


def test_bench_serving_output_is_named_with_what_it_says() -> None:
    out = _advise("bench-serving-dspark-accept-length-amd-pr30964.txt")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "CSV header" not in out.stderr
    assert "is sglang.bench_serving's result block (1024 requests, in 235.40 s, output 4454.35 tok/s, " in out.stderr
    assert "accept length 4.84, max concurrency 256)" in out.stderr
    assert "the advisor needs scripts/playground/bench_speculative.py's records" in out.stderr
    typo = _advise("bench-serving-0.4.0-typo-concurrency-2805.txt").stderr
    assert (
        "1648 requests" in typo and "max concurrency not set" in typo and "Median TTFT (ms) without its value" in typo
    )
    bare = _advise("bench-serving-no-trailing-spaces-dp-attn-pr9359.txt").stderr
    assert "12800 requests" in bare and "output 66941.40 tok/s" in bare and "Concurrency without its value" in bare


def test_the_speculative_section_is_read_and_checked() -> None:
    """sglang PR #16694: 5709 of 8187 draft tokens accepted over 2729 drafts: 69.73%, (5709 + 2729) / 2729 = 3.09."""
    out = _advise("bench-serving-spec-decoding-section-pr16694.txt").stderr
    assert "accept length 3.09 (server), acceptance rate 69.73%" in out
    assert "its draft counts give 69.73% accepted and an accept length of 3.09" in out


def test_bench_one_batch_server_records_are_named() -> None:
    out = _advise("bench-one-batch-server-jsonl-acc-minus-one-dsv4-flash.txt")
    assert out.returncode == 2 and "has no 'steps'" not in out.stderr
    assert (
        "holds bench_one_batch_server's records (batch 33: output 551.92 tok/s; batch 38: output 225.45" in out.stderr
    )
    assert "acc_length -1 in 2 of them: no speculation, not an accept length" in out.stderr
