"""Goodput under an SLO, per-request latency percentiles from the load generator, and cost per million tokens."""

from __future__ import annotations

import pytest

from backend.agent.host import loadgen
from backend.errors import ConfigError, UsageError
from backend.measure.bench import Slo, goodput, goodput_line, latency_line
from backend.measure.cost import Cost, drafter_sentence, gpus_of, per_million
from backend.settings.config_file import load as load_settings

pytestmark = pytest.mark.unit


def test_percentiles_interpolate_between_closest_ranks() -> None:
    got = loadgen.percentiles([float(v) for v in range(1, 101)])
    assert got == pytest.approx({"p50": 50.5, "p90": 90.1, "p95": 95.05, "p99": 99.01})
    assert loadgen.percentiles([7.0]) == {"p50": 7.0, "p90": 7.0, "p95": 7.0, "p99": 7.0}
    assert loadgen.percentiles([])["p50"] is None


def test_inter_token_gaps_count_once_per_token() -> None:
    # A chunk of 3 tokens after 30 ms is three gaps of 10 ms, as SGLang's histogram counts it.
    ok = [{"ttft_ms": 100.0, "e2e_ms": 400.0, "itl_gaps": [[0.010, 3], [0.050, 1]]}]
    figures = loadgen.latency_figures(ok)
    assert figures["itl_ms"]["p50"] == pytest.approx(10.0) and figures["itl_ms"]["p99"] > 40
    assert figures["ttft_ms"]["p95"] == 100.0 and figures["e2e_ms"]["p50"] == 400.0


def test_summarize_keeps_the_percentiles_and_drops_the_gaps() -> None:
    ok = {"tokens": 4, "ttft_ms": 50.0, "decode_tok_s": 100.0, "e2e_tok_s": 50.0, "latency_s": 0.08, "e2e_ms": 80.0,
          "itl_ms": 10.0, "itl_gaps": [[0.01, 3]], "spec_verify_ct": None, "accept_len": 1.0}  # fmt: skip
    out = loadgen.summarize([ok, {"error": "x"}], 1.0)
    assert out["latency"]["itl_ms"]["p50"] == pytest.approx(10.0) and "itl_gaps" not in out["per_request"][0]


def result(*requests: dict, duration: float = 2.0) -> dict:
    return {"per_request": list(requests), "duration_s": duration}


def test_goodput_counts_requests_meeting_both_objectives() -> None:
    fast = {"ttft_ms": 100.0, "itl_ms": 10.0, "tokens": 100}
    slow_start = {"ttft_ms": 900.0, "itl_ms": 10.0, "tokens": 100}
    jerky = {"ttft_ms": 100.0, "itl_ms": 40.0, "tokens": 100}
    slo = Slo(ttft_ms=500, itl_ms=30)
    good = goodput(result(fast, slow_start, jerky, {"error": "HTTP 500"}), slo)
    assert good["share"] == 0.25 and good["requests"] == 1 and good["of"] == 4 and good["tok_s"] == 50.0
    assert goodput(result(fast, slow_start), Slo(itl_ms=30))["share"] == 1.0  # TTFT not judged
    line = goodput_line(good, 8, slo)
    assert line == "goodput 25% at 8 streams (1 of 4 requests within TTFT <= 500 ms and ITL <= 30 ms), 50.0 tok/s"


@pytest.mark.parametrize(("ttft", "itl", "flag"), [(0, None, "--slo-ttft-ms"), (None, -5, "--slo-itl-ms")])
def test_an_slo_must_be_above_zero(ttft, itl, flag) -> None:
    with pytest.raises(UsageError, match=f"^{flag} must be a number of milliseconds above 0"):
        Slo(ttft, itl)
    assert not Slo()


def test_latency_line_says_p50_and_p95() -> None:
    figures = {k: {"p50": 10.0, "p90": 11.0, "p95": 12.0, "p99": 13.0} for k in ("ttft_ms", "itl_ms", "e2e_ms")}
    assert latency_line({"latency": figures}).startswith("TTFT p50 10.0 / p95 12.0 ms, ITL p50 10.0")
    assert latency_line({}) is None


def test_gpus_are_the_whole_servers_tp_times_pp() -> None:
    assert gpus_of({"tp": 8}, ["python", "-m", "sglang.launch_server"]) == 8
    # --tp-size is the whole server's across its nodes (tp / nnodes on each), so nodes do not multiply.
    assert gpus_of({}, ["--tp-size", "16", "--nnodes", "2"]) == 16
    assert gpus_of({"tp": 8}, ["--nnodes=2", "--pp-size", "2"]) == 16
    assert gpus_of({}, []) == 1


def test_cost_per_million_tokens_in_dollars_or_gpu_seconds() -> None:
    cost = per_million(100.0, 8, 3.6)  # 8 GPUs for 10,000 s: 80,000 GPU-s = 22.2 GPU-h
    assert cost is not None and cost.gpu_s == pytest.approx(80_000) and cost.usd == pytest.approx(80.0)
    assert cost.text() == "$80.00 per million tokens"
    no_price = per_million(100.0, 8, None)
    assert no_price is not None and no_price.text() == "80,000 GPU-s per million tokens"
    assert per_million(0, 8, 3.6) is None and per_million(None, 8, 3.6) is None


def curve(prices: dict[int, float]) -> dict[int, Cost]:
    return {n: Cost(usd * 1000, usd, 8) for n, usd in prices.items()}


def test_one_sentence_per_drafter_against_the_baseline() -> None:
    base = curve({1: 1.00, 2: 0.60, 4: 0.40, 8: 0.30})
    aq = curve({1: 0.81, 2: 0.50, 4: 0.38, 8: 0.35})
    assert drafter_sentence("aq-medai", "EAGLE3", aq, base) == (
        "at 1 stream EAGLE3 with aq-medai costs $0.81 per million tokens, 19% less than the baseline; "
        "from 8 streams it costs more."
    )
    ours = curve({1: 1.30, 2: 0.70})
    assert drafter_sentence("ours", "EAGLE3", ours, base).endswith("30% more than the baseline; more at every "
                                                                  "concurrency measured (up to 2).")  # fmt: skip
    assert drafter_sentence("x", "EAGLE3", curve({16: 1.0}), base) is None


def test_a_price_at_or_below_zero_is_a_config_error(tmp_path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[reference]\ngpu_hour_usd = 0\n")
    with pytest.raises(ConfigError, match=r"reference\.gpu_hour_usd.*above 0 dollars"):
        load_settings(config)
    config.write_text("[reference]\ngpu_hour_usd = 3\n")
    assert load_settings(config).reference.gpu_hour_usd == 3.0


def _bench(history, run_id: str, streams: int, tok_s: float, total: float, itl: tuple[float, float]) -> None:
    from backend.jobs import JobInfo

    job = run_id.split("/", 1)[1]
    latency = {"ttft_ms": {"p50": 40.0, "p95": 60.0}, "itl_ms": {"p50": itl[0], "p95": itl[1]}, "e2e_ms": {"p95": 900}}
    accept = 3.3 if job == "serve-a" else 1.0
    result = {"tok_s": tok_s, "total_tok_s": total, "accept_len": accept, "cycle_ms": 30.0, "server_job": job,
              "concurrency": streams, "latency": latency}  # fmt: skip
    history.record_bench("local", JobInfo(f"bench-{job}-{streams}", state="done", ended=float(streams)), result)


def test_the_report_has_latency_by_level_the_itl_curve_and_a_cost_sentence_per_drafter(tmp_path, models) -> None:
    from backend.history import History, Yardstick
    from backend.report import document, render
    from tests.runs import add_run

    with History.open(tmp_path / "h.sqlite3") as history:
        base = add_run(history, models, "serve-b", None, 82.0, None)
        aq = add_run(history, models, "serve-a", "aq-medai", 100.0, 3.3)
        for streams, (b_total, a_total) in {1: (80.0, 98.0), 4: (290.0, 300.0), 8: (520.0, 480.0)}.items():
            _bench(history, base, streams, b_total / streams, b_total, (12.2, 13.0))
            _bench(history, aq, streams, a_total / streams, a_total, (10.0, 33.0))
        history.set_latency(aq, {"ttft_ms": {"p50": 30000.0, "p95": 30000.0, "over_last_bucket": ["p50", "p95"]}})
        blocks = document.build(history, [base, aq], Yardstick(82.0, 30.0), gpu_hour_usd=3.6)
    md = render.to_markdown(blocks)
    section = md.split("## Latency and cost")[1]
    assert "| serve-a | eagle3-aq [aq-medai] | bench @8 | 40 / 60 | 10.0 / 33.0 | 900 | $16.67 |" in section
    assert "| serve-a | eagle3-aq [aq-medai] | server histograms | >30000 / >30000 |" in section
    assert "Inter-token latency against concurrency" in md and "eagle3-aq [aq-medai] p95" in md  # beside tok/s
    assert "| 75.0 / 300 · 10.0/33.0 ms |" in md.split("## Throughput against concurrency")[1]
    # $3.6 x 8 GPUs = $28.8 an hour: 98 tok/s -> $81.63 per million, the baseline's 80 -> $100.00 (18% less).
    assert (
        "- At 1 stream EAGLE3 with aq-medai costs $81.63 per million tokens, 18% less than the baseline; "
        "from 8 streams it costs more." in section
    )
    assert "GPU-s" not in section
