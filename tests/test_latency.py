"""backend.measure.latency: Prometheus's histogram_quantile, bucket-by-bucket merging across ranks, windows
by difference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from backend.measure import latency
from backend.measure.histogram import Histogram, bucket_quantile
from backend.measure.latency import LatencyWindow
from tests.helpers import run_cli

pytestmark = pytest.mark.unit

INF = math.inf


def q(value: float, bounds, counts) -> float | None:
    return bucket_quantile(value, tuple(bounds), tuple(counts)).value


# Prometheus's own cases (promql/promqltest/testdata/histograms.test), at 50m: 0+5x10 is 50 and so on.
POSITIVE = ((0.1, 0.2, 1.0, INF), (50, 70, 110, 120))
NEGATIVE = ((-0.2, -0.1, 0.3, INF), (10, 20, 20, 30))


@pytest.mark.parametrize(
    ("quantile", "positive", "negative"),
    [(0, 0, -0.2), (0.2, 0.048, -0.2), (0.5, 0.15, -0.15), (0.8, 0.72, 0.3), (1, 1, 0.3)],
)
def test_quantiles_match_prometheus_test_data(quantile: float, positive: float, negative: float) -> None:
    assert q(quantile, *POSITIVE) == pytest.approx(positive)
    assert q(quantile, *NEGATIVE) == pytest.approx(negative)


def test_middle_of_buckets_and_a_zero_lowest_bound() -> None:
    bounds, counts = (0, 2, 4, 6, INF), (0, 10, 20, 30, 30)  # testhistogram2 at 7m: q(1/6)=1, q(1/2)=3, q(5/6)=5
    assert q(1 / 6, bounds, counts) == pytest.approx(1)
    assert q(0.5, bounds, counts) == pytest.approx(3)
    assert q(5 / 6, bounds, counts) == pytest.approx(5)
    assert q(0, (0, 0.1, INF), (3, 4, 4)) == 0  # queue_time's 0 bucket: its bound, not an interpolation


def test_past_the_last_finite_bound_is_said_as_a_floor() -> None:
    got = bucket_quantile(0.99, (0.1, 0.2, INF), (1, 2, 10))
    assert got.value == 0.2 and got.over
    assert not bucket_quantile(0.05, (0.1, 0.2, INF), (1, 2, 10)).over
    fig = latency.figures(Histogram((0.1, 0.2, INF), (1, 2, 10)))
    assert fig.cell("p99") == ">200" and fig.to_json()["over_last_bucket"] == ["p50", "p90", "p95", "p99"]


def test_no_observations_bad_quantiles_and_no_inf_give_nothing() -> None:
    assert q(0.5, (0.1, INF), (0, 0)) is None
    assert q(math.nan, *POSITIVE) is None and q(-0.1, *POSITIVE) is None and q(1.1, *POSITIVE) is None
    assert q(0.5, (0.1, 0.2), (1, 2)) is None
    assert latency.figures(Histogram((0.1, INF), (0, 0))).cell("p50") == "-"


def test_non_monotonic_and_imprecise_counts_are_lifted_like_prometheus() -> None:
    # ensureMonotonic: 0.2's 40 is lifted to 50, so rank 60 falls in (0.2, 1]: 0.2 + 0.8 · (60 − 50) / 60.
    assert q(0.5, (0.1, 0.2, 1.0, INF), (50, 40, 110, 120)) == pytest.approx(0.2 + 0.8 * 10 / 60)
    # correctPrecisionErrors: 100 and 100 + 1e-13 are the same count.
    assert q(0.995, (0.1, 0.2, INF), (100, 100 + 1e-13, 100 + 1e-13)) == pytest.approx(0.0995)


def test_summing_ranks_bucket_by_bucket_is_prometheus_sum_by_le() -> None:
    # request_duration_seconds at 50m: four series; histogram_quantile(0.3 / 0.5, sum by (le)) = 0.075 / 0.12777…
    series = [(10, 30, 40), (20, 50, 60), (30, 40, 60), (40, 70, 90)]
    scrape = {("x", (("instance", str(i)),)): Histogram((0.1, 0.2, INF), counts) for i, counts in enumerate(series)}
    merged = latency.merge(scrape, "x")
    assert merged is not None and merged.series == 4 and merged.histogram.counts == (100, 190, 250)
    assert merged.histogram.quantile(0.3).value == pytest.approx(0.075)
    assert merged.histogram.quantile(0.5).value == pytest.approx(0.1277777777777778)
    # Averaging the per-rank medians would say otherwise: that is what merging never does.
    per_rank = [Histogram((0.1, 0.2, INF), c).quantile(0.5).value for c in series]
    assert sum(per_rank) / 4 != pytest.approx(merged.histogram.quantile(0.5).value)


def test_series_with_other_bounds_are_left_out_and_counted() -> None:
    scrape = {
        ("x", (("r", "0"),)): Histogram((0.1, INF), (1, 2)),
        ("x", (("r", "1"),)): Histogram((0.1, INF), (3, 4)),
        ("x", (("r", "2"),)): Histogram((0.5, INF), (9, 9)),
    }
    merged = latency.merge(scrape, "x")
    assert merged is not None and merged.histogram.counts == (4, 6) and merged.mismatched == 1
    assert latency.merge(scrape, "y") is None


def test_a_window_is_the_increase_and_a_reset_counts_from_zero() -> None:
    start = Histogram((0.1, INF), (10, 20), 3.0)
    end = Histogram((0.1, INF), (15, 30), 4.0)
    assert latency.increase(end, start) == Histogram((0.1, INF), (5, 10), 1.0)
    restarted = Histogram((0.1, INF), (2, 3), 0.5)
    assert latency.increase(restarted, start) == restarted
    assert latency.increase(end, None) == end


def test_the_live_window_reads_the_last_seconds_only() -> None:
    key = ("sglang:inter_token_latency_seconds", ())
    win = LatencyWindow(keep_s=100)
    assert win.figures(30) == {}
    win.add(0, {key: Histogram((0.01, 0.1, INF), (0, 0, 0))})
    win.add(10, {key: Histogram((0.01, 0.1, INF), (100, 100, 100))})  # 100 fast tokens in the first 10 s
    win.add(20, {key: Histogram((0.01, 0.1, INF), (100, 200, 200))})  # then 100 slower ones
    last10 = win.figures(10)["itl_ms"]
    assert last10.count == 100 and last10.quantiles["p50"].value == pytest.approx(55.0)
    whole = win.figures(60)["itl_ms"]  # longer than kept: from the oldest scrape
    assert whole.count == 200 and whole.quantiles["p50"].value == pytest.approx(10.0)


def test_the_window_thins_old_scrapes_and_keeps_only_keep_s() -> None:
    key = ("sglang:time_to_first_token_seconds", ())
    win = LatencyWindow(keep_s=1800, fine_s=60, coarse_s=10)
    for t in range(3600):  # an hour of scrapes, one request a second
        win.add(float(t), {key: Histogram((1.0, INF), (float(t), float(t)))})
    assert len(win) <= 60 + 1800 / 10 + 2
    assert win.figures(300)["ttft_ms"].count == pytest.approx(300, abs=10)  # start within coarse_s
    assert win.figures(30)["ttft_ms"].count == 30  # exact inside the fine part
    assert win.figures(None)["ttft_ms"].count == 3599  # since the server started: the newest scrape whole


PAGE = """\
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{engine_type="unified",is_streaming="true",model_name="m"} 0.9
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="0.1",model_name="m"} 2.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="0.2",model_name="m"} 4.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="+Inf",model_name="m"} 4.0
sglang:time_to_first_token_seconds_count{engine_type="unified",is_streaming="true",model_name="m"} 4.0
sglang:time_to_first_token_seconds_sum{engine_type="unified",is_streaming="false",model_name="m"} 0.1
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="false",le="0.1",model_name="m"} 0.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="false",le="0.2",model_name="m"} 1.0
sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="false",le="+Inf",model_name="m"} 1.0
sglang:time_to_first_token_seconds_count{engine_type="unified",is_streaming="false",model_name="m"} 1.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 80.0
"""


def test_a_page_gives_every_series_and_the_streaming_split_is_summed() -> None:
    scrape = latency.parse(PAGE)
    assert len(scrape) == 2
    fig = latency.summary(scrape)["ttft_ms"]
    assert fig.count == 5 and fig.series == 2
    assert fig.quantiles["p50"].value == pytest.approx(100 + 100 * 0.5 / 3)  # rank 2.5 of (2, 5, 5)
    assert fig.mean_ms == pytest.approx(200.0)
    assert set(latency.summary_json(scrape)) == {"ttft_ms"}


def test_the_reader_keeps_every_histogram_series_and_no_row_for_them() -> None:
    from backend.measure.prometheus import read_scrape

    scrape = read_scrape(PAGE)
    ttft = "sglang:time_to_first_token_seconds"
    streaming, plain = (
        (ttft, (("engine_type", "unified"), ("is_streaming", flag), ("model_name", "m"))) for flag in ("true", "false")
    )
    assert list(scrape.histograms) == [streaming, plain]  # the same rank, told apart by is_streaming
    assert scrape.histograms[plain] == Histogram((0.1, 0.2, INF), (0.0, 1.0, 1.0), 0.1)
    assert [s.key for s in scrape.series] == [("unified", None, 0)]  # the gauge's; the tokenizer's has no rank
    assert latency.of_scrape(scrape) == latency.parse(PAGE)
    # SGLang's docs scrape: func_latency_seconds is kept by the reader, and is no latency figure here.
    docs = read_scrape(
        (Path(__file__).parent / "fixtures" / "real" / "metrics-docs-production-metrics.prom").read_text()
    )
    assert len(docs.histograms) == 4 and len(latency.of_scrape(docs)) == 3


def test_a_page_without_histograms_is_said_in_one_sentence() -> None:
    scrape = latency.parse("# TYPE sglang:gen_throughput gauge\nsglang:gen_throughput 1.0\n")
    assert scrape == {}
    with pytest.raises(latency.NoHistograms, match="holds none of SGLang's latency histograms"):
        latency.require_histograms(scrape, "scrape.txt")
    assert latency.parse("sglang:time_to_first_token_seconds_bucket{le=0.1} oops\n") == {}


def test_the_live_panel_says_each_state_in_one_line() -> None:
    from tui.widgets.latency_panel import render_latency

    assert "--enable-metrics" in render_latency({}, "5 m", False)
    assert "waiting for the first scrape" in render_latency({}, "5 m", None)
    assert "no requests finished" in render_latency({"ttft_ms": latency.figures(Histogram((0.1, INF), (0, 0)))},
                                                    "1 m", True)  # fmt: skip
    figures = latency.summary(latency.parse(PAGE))
    text = render_latency(figures, "5 m", True)
    assert text.splitlines()[1].split() == ["TTFT", "ms", "117", "192"] and "5 first tokens" in text


def test_the_scrape_in_sglangs_own_docs_lies_past_its_last_ttft_bucket() -> None:
    # docs/references/production_metrics.md: 11,008 first tokens, 2,513 of them within the last finite bound (30 s).
    text = (Path(__file__).parent / "fixtures" / "real" / "metrics-docs-production-metrics.prom").read_text()
    got = latency.summary(latency.parse(text))
    assert set(got) == {"ttft_ms", "itl_ms", "e2e_ms"}  # ITL under its older name; func_latency is no latency here
    ttft = got["ttft_ms"]
    assert ttft.count == 11008 and ttft.cell("p50") == ">30000" and ttft.quantiles["p50"].over
    assert got["e2e_ms"].cell("p99") == ">60000"
    itl = got["itl_ms"]  # rank 0.5 x 7,400,757 falls in (0.075, 0.1]: 75 + 25 x (3,700,378.5 - 433,413) / 4,516,782
    assert itl.quantiles["p50"].value == pytest.approx(75 + 25 * (3_700_378.5 - 433_413) / (4_950_195 - 433_413))


def test_parse_metrics_reads_one_scrape_or_the_window_between_two(tmp_path) -> None:
    first, later = tmp_path / "a.prom", tmp_path / "b.prom"
    first.write_text(PAGE)
    # The same server later: 10 more streaming first tokens, all within 0.1 s.
    later.write_text(PAGE.replace('le="0.1",model_name="m"} 2.0', 'le="0.1",model_name="m"} 12.0')
                     .replace('le="0.2",model_name="m"} 4.0', 'le="0.2",model_name="m"} 14.0')
                     .replace('le="+Inf",model_name="m"} 4.0', 'le="+Inf",model_name="m"} 14.0'))  # fmt: skip
    whole = json.loads(run_cli("parse-metrics", str(first), "--latency", "--json").stdout)
    assert whole["kind"] == "latency" and whole["ttft_ms"]["count"] == 5
    window = json.loads(run_cli("parse-metrics", str(first), str(later), "--json").stdout)
    assert window["latency"]["ttft_ms"]["count"] == 10 and window["latency"]["ttft_ms"]["p50"] == pytest.approx(50)
    assert window["engine"]["gen_throughput"] == 80.0  # the gauges are the later scrape's
    text = run_cli("parse-metrics", str(first), str(later)).stdout
    assert f"latency (from {first} to {later}, ms)" in text and "(merged over 2 series)" in text  # is_streaming
    assert "ttft_ms" in run_cli("parse-metrics", str(first)).stdout.split("latency (since the server started")[1]


def test_parse_metrics_without_histograms_says_so_in_one_sentence(tmp_path) -> None:
    page = tmp_path / "gauges.prom"
    page.write_text("# TYPE sglang:gen_throughput gauge\nsglang:gen_throughput 1.0\n")
    assert run_cli("parse-metrics", str(page)).returncode == 0  # the gauges alone are still a scrape
    for args in ([str(page), "--latency"], [str(page), str(page)]):
        res = run_cli("parse-metrics", *args, rc=None)
        assert res.returncode == 2 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
        assert "holds none of SGLang's latency histograms" in res.stderr and "--enable-metrics" in res.stderr


class _Pages:
    """A connection whose /metrics answers are given in turn (the last one repeats)."""

    def __init__(self, *answers: dict) -> None:
        self.answers = list(answers)

    async def call(self, method: str, **params) -> dict:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class _Kept:
    def __init__(self) -> None:
        self.kept: list[dict] = []

    async def keep_latency(self, job, figures: dict) -> None:
        self.kept.append(figures)


async def test_the_feed_stops_asking_a_server_without_metrics_and_says_when_a_page_has_no_histograms() -> None:
    import asyncio

    from backend.jobs import JobInfo
    from backend.measure.livefeed import LiveFeed
    from backend.measure.series import LiveSeries

    job = JobInfo("serve-1", args={"port": 30000})
    feed = LiveFeed(_Pages({"status": 404, "text": "Not Found"}), LiveSeries())  # type: ignore[arg-type]
    await asyncio.wait_for(feed._scrape(job), 5)  # launched without --enable-metrics: it ends
    assert feed.histograms is False and feed.latency_scrapes == 0

    gauges = {"status": 200, "text": "# TYPE sglang:gen_throughput gauge\nsglang:gen_throughput 1.0\n"}
    recorder = _Kept()
    feed = LiveFeed(_Pages(gauges, {"status": 200, "text": PAGE}), LiveSeries(), recorder=recorder)  # type: ignore[arg-type]
    feed.latency_s = 0.01
    task = asyncio.create_task(feed._scrape(job))
    try:
        for _ in range(500):
            if feed.latency_scrapes >= 3:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert feed.histograms is True and len(feed.latency) >= 3
    # The recorder keeps the run's figures once, then every LATENCY_KEEP_S while they change (here they do not).
    assert recorder.kept == [latency.summary_json(latency.parse(PAGE))]


class _Asked(_Pages):
    """``_Pages`` that counts what was asked for, by path."""

    def __init__(self, *answers: dict) -> None:
        super().__init__(*answers)
        self.paths: list[str] = []

    async def call(self, method: str, **params) -> dict:
        self.paths.append(params["url"].split(":30000", 1)[1])
        return await super().call(method, **params)


async def test_one_metrics_scrape_feeds_the_gauges_and_the_latency_histograms() -> None:
    import asyncio

    from backend.jobs import JobInfo
    from backend.measure.livefeed import LiveFeed
    from backend.measure.prometheus import read_scrape
    from backend.measure.series import LiveSeries

    job = JobInfo("serve-1", args={"port": 30000})
    conn = _Asked({"status": 200, "text": PAGE})
    feed = LiveFeed(conn, LiveSeries())  # type: ignore[arg-type]
    feed.latency_s = 0.01
    task = asyncio.create_task(feed._scrape(job))
    try:
        for _ in range(500):
            if feed.latency_scrapes >= 3:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    # Every /metrics answer served both: the engine's gauges and the histograms (the same page, parsed once).
    assert feed.metrics == read_scrape(PAGE).engine and feed.metrics["gen_throughput"] == 80.0
    assert feed.histograms is True
    assert set(conn.paths) == {"/metrics"} and len(conn.paths) - feed.latency_scrapes in (0, 1)
    # The /server_info poll asks for nothing else.
    conn = _Asked({"status": 200, "text": "{}"})
    feed = LiveFeed(conn, LiveSeries(), poll_s=0.01)  # type: ignore[arg-type]
    task = asyncio.create_task(feed._poll(job))
    try:
        for _ in range(500):
            if feed.polls >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert feed.polls >= 2 and set(conn.paths) == {"/server_info"}
