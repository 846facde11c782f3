"""The SIMULATED server's latency histograms: SGLang's names, buckets and labels per release, read back by
prometheus_client's own text parser and by backend.measure.latency."""

from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from backend.measure import latency
from backend.sandbox.sglang_sim.histograms import BUCKETS, E2E, ITL, QUEUE, TPOT, TTFT, SimHistograms
from tests.test_simulator import launch, sims  # noqa: F401  (sims is a fixture)

pytestmark = pytest.mark.e2e

ARGS = {"served_model_name": "kimi", "tp_size": 8, "dp_size": 1}


def families(hist: SimHistograms) -> dict:
    text = "\n".join(hist.lines()) + "\n"
    return {f.name: f for f in text_string_to_metric_families(text)}


def one_stream(hist: SimHistograms, rid: str = "a", t0: float = 100.0) -> None:
    """Arrives at t0, queued 0.05 s, first token at +0.3 s, then 3 tokens in one release 0.084 s later, done."""
    hist.arrived(rid, t0, stream=True)
    hist.admitted(rid, t0, now=t0 + 0.05)
    hist.released(rid, 1, False, now=t0 + 0.3)
    hist.released(rid, 4, True, now=t0 + 0.384)


@pytest.mark.parametrize("version", ["0.5.6", "0.5.23"])
def test_names_buckets_and_labels_are_the_releases(version: str) -> None:
    hist = SimHistograms(version, ARGS)
    one_stream(hist)
    got = families(hist)
    current = version == "0.5.23"
    assert set(got) == {TTFT, ITL, E2E, QUEUE} | ({TPOT} if current else set())
    for name, family in got.items():
        assert family.type == "histogram"
        les = [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")]
        assert [float(le) for le in les[:-1]] == list(BUCKETS[version][name]) and les[-1] == "+Inf"
    ttft = next(s for s in got[TTFT].samples if s.name.endswith("_count"))
    itl = next(s for s in got[ITL].samples if s.name.endswith("_count"))
    queue = next(s for s in got[QUEUE].samples if s.name.endswith("_count"))
    if current:
        assert ttft.labels == {"engine_type": "unified", "model_name": "kimi", "is_streaming": "true"}
        assert itl.labels == {"engine_type": "unified", "model_name": "kimi"}  # no is_streaming on ITL
        assert queue.labels == {"engine_type": "unified", "model_name": "kimi", "moe_ep_rank": "0", "pp_rank": "0",
                                "tp_rank": "0"}  # fmt: skip
        assert float(BUCKETS[version][QUEUE][1]) == 0.001
    else:
        assert ttft.labels == {"model_name": "kimi"} and itl.labels == {"model_name": "kimi"}
        assert queue.labels == {"engine_type": "unified", "model_name": "kimi", "pp_rank": "0", "tp_rank": "0"}
        assert float(BUCKETS[version][QUEUE][1]) == 0.1


def test_inter_token_latency_keeps_sglangs_chunk_quirk() -> None:
    hist = SimHistograms("0.5.23", ARGS)
    one_stream(hist)
    samples = {(s.name, s.labels.get("le")): s.value for s in families(hist)[ITL].samples}
    # One release of 3 tokens after 0.084 s: 3 counts in the bucket holding 0.028, the whole interval in _sum.
    assert samples[(ITL + "_bucket", "0.025")] == 0 and samples[(ITL + "_bucket", "0.03")] == 3
    assert samples[(ITL + "_count", None)] == 3 and samples[(ITL + "_sum", None)] == pytest.approx(0.084)
    tpot = {(s.name, s.labels.get("le")): s.value for s in families(hist)[TPOT].samples}
    assert tpot[(TPOT + "_sum", None)] == pytest.approx(0.028)  # (finish − first token) / (4 − 1)


def test_a_non_streaming_request_has_its_first_output_at_the_end_and_no_itl() -> None:
    hist = SimHistograms("0.5.23", ARGS)
    hist.arrived("b", 10.0, stream=False)
    hist.released("b", 1, False, now=10.2)  # the scheduler sends a non-streaming request nothing before the end
    hist.released("b", 8, True, now=11.0)
    got = families(hist)
    ttft = [s for s in got[TTFT].samples if s.name.endswith("_sum")]
    assert len(ttft) == 1 and ttft[0].value == pytest.approx(1.0) and ttft[0].labels["is_streaming"] == "false"
    assert ITL not in got


def test_each_recording_scheduler_rank_has_its_own_queue_series() -> None:
    hist = SimHistograms("0.5.23", dict(ARGS, dp_size=2, enable_metrics_for_all_schedulers=True, ep_size=8))
    for i in range(4):
        one_stream(hist, rid=str(i))
    queue = [s for s in families(hist)[QUEUE].samples if s.name.endswith("_count")]
    assert len(queue) == 16  # 2 DP ranks x 8 TP ranks, all recording
    assert {s.labels["dp_rank"] for s in queue} == {"0", "1"} and all(s.value == 2 for s in queue)
    assert {s.labels["moe_ep_rank"] for s in queue} == {str(r) for r in range(8)}
    merged = latency.merge(latency.parse("\n".join(hist.lines()) + "\n"), QUEUE)
    assert (
        merged is not None and merged.series == 16 and merged.histogram.count == 32
    )  # 4 requests seen by 8 TP ranks each


def test_bucket_flags_replace_the_defaults() -> None:
    hist = SimHistograms("0.5.6", dict(ARGS, bucket_time_to_first_token=[0.5, 0.25]))
    one_stream(hist)
    les = [s.labels["le"] for s in families(hist)[TTFT].samples if s.name.endswith("_bucket")]
    assert les == ["0.25", "0.5", "+Inf"]


def _stream(sim, max_tokens: int) -> None:
    body = {"text": "Hello", "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True}, "stream": True}
    req = urllib.request.Request(
        sim.base + "/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()


def test_the_simulator_serves_them_from_its_own_timings(models, sims):  # noqa: F811
    sim = sims(launch(models, "aq-medai", "--enable-metrics", "--dp-size", "2"))
    sim.wait_ready()
    _stream(sim, 40)
    status, raw = sim.request("/metrics")
    assert status == 200
    names = {f.name for f in text_string_to_metric_families(raw.decode())}
    assert {TTFT, ITL, E2E, QUEUE, TPOT} <= names
    scrape = latency.parse(raw.decode())
    got = latency.summary(scrape)
    assert got["ttft_ms"].count == 2  # the warmup's (not streamed) and ours
    assert got["queue_ms"].series == 2  # one per DP rank
    assert got["itl_ms"].count == 39  # our 40 tokens after the first; the warmup streamed none
    # A verify cycle of ~33 ms gives ~3.3 tokens: SGLang's quirk puts each token near 10 ms.
    p50 = got["itl_ms"].quantiles["p50"].value
    assert p50 is not None and 4 < p50 < 40
