"""What operators paste, read as a person reads it, and what could not be read said (issue 34).

Every artefact is someone else's text (tests/fixtures/real/, its source on its first lines); what each test
expects was read off it by hand before the reader ran on it (/work/research/34/INDEX.md holds those readings).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from backend.prometheus import read_scrape

REAL = Path(__file__).parent / "fixtures" / "real"


def _text(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli.main", *args], capture_output=True, text=True)


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
    from backend import latency

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
    out = _cli("parse-metrics", str(REAL / "metrics-dp-ranks-hand-summary-miles-pr2012.txt"))
    assert out.returncode == 0, out.stderr
    assert "no SGLang series (sglang:…) read from it" in out.stdout
    assert "note: not /metrics exposition" in out.stdout and "note: 5 lines unreadable" in out.stdout
    out = _cli("parse-metrics", str(REAL / "metrics-docs-early-curl-line-func-latency.prom"), "--json")
    assert '"notes": [\n    "1 shell line skipped' in out.stdout


# --- router pages ----------------------------------------------------------------------------------------


def test_a_0_2_router_page_reads_its_sgl_router_names() -> None:
    """sglang PR #6537: the router's first Prometheus page, from its `curl localhost:9000` line, cut inside a
    summary: 2 active workers, 9 + 7 requests processed, 1 + 1 running."""
    from backend import router_metrics

    view = router_metrics.read(None, _text("router-prom-0.2-curl-sgl-router-pr6537.prom"))
    assert (view.workers, view.requests_active, view.requests_total) == (2, 2, 16)
    assert view.healthy_workers is None and view.errors_total is None  # 0.2's first page says neither
    assert any("sgl_router_*" in n for n in view.notes)


def test_a_hand_shortened_router_page_is_said_unreadable() -> None:
    """A run book's reading of a 0.3.2 page (`smg_worker_health{r0} 1      smg_worker_health{r1} 1`, a value
    written as `absent (zero)`): not exposition, so no figure, and the lines named."""
    from backend import router_metrics

    view = router_metrics.read(None, _text("router-prom-smg-hand-shortened-runbook.txt"))
    assert view.workers is None and view.healthy_workers is None and view.errors_total is None
    assert view.notes[0].startswith("2 lines unreadable: 'smg_worker_health{r0} 1 smg_worker_health{r1} 1'")


def test_a_shortened_workers_answer_is_unknown_not_zero() -> None:
    """No real /workers paste was found (INDEX.md says so); its shape as sgl-model-gateway answers it, shortened
    with `...` as people shorten JSON."""
    from backend import router_metrics

    view = router_metrics.read('{"workers": [{"url": "http://10.0.0.1:30000", "is_healthy": true}, ...]}', None)
    assert view.workers is None and view.healthy_workers is None
    assert view.notes == ("the /workers answer is not valid JSON (shortened with '...'): the workers are unknown",)
