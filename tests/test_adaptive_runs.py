"""Adaptive runs seen: the step tier SGLang holds now (``serve status``'s ``spec_steps_now``), read from the log
lines SGLang writes when it switches and from ``/server_info``'s ``internal_states``.

No real log of an adaptive switch was found (research notes of issue 36, real/INDEX.md); the lines here are
made from SGLang 0.5.23's own format strings, quoted with their place in the wheel:
- ``"Switch adaptive runtime state: " f"steps {old} -> {new}, " f"draft_tokens {old+1} -> {new+1}"``
  (speculative/eagle_worker_v2.py:1866-1872), the worker's swap;
- ``f"Adaptive spec params updated: steps {old_steps} -> {target} " f"(ema_accept_len={ema:.2f})"``
  (speculative/adaptive_spec_params.py:266-270), a batch-size slot's decision.
"""

from __future__ import annotations

import pytest

from backend.agent.host.serve import _steps_now
from backend.agent.host.server_log import LogScan
from backend.agent.host.shared.logline import tier_line

pytestmark = pytest.mark.unit

STAMP = "[2026-10-30 12:00:0{}.{:03d} TP0] "


def line(i: int, message: str) -> str:
    return STAMP.format(i % 10, i) + message


def switch(old: int, new: int) -> str:
    return f"Switch adaptive runtime state: steps {old} -> {new}, draft_tokens {old + 1} -> {new + 1}"


def decided(old: int, new: int, ema: float) -> str:
    return f"Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})"


def test_the_tier_lines_of_sglangs_log():
    assert tier_line(switch(3, 5)) == (5, True, False)
    assert tier_line(decided(5, 1, 0.12)) == (1, False, False)
    # adaptive_spec_params.py:298-303: f"AdaptiveSpeculativeParams initialized: steps={…}, candidate_steps={…}"
    assert tier_line("AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5, 7]") == (3, False, True)
    assert tier_line("Decode batch, #running-req: 1, accept len: 2.00") is None


def test_the_tier_in_force_is_the_workers_last_switch():
    scan = LogScan()
    args = {"algorithm": "EAGLE3", "adaptive": True, "steps": 3}
    assert _steps_now(scan, args) == 3  # nothing said yet: the steps it was launched with
    scan.feed(line(1, decided(3, 5, 4.61)))  # 0.5.11's worker switched on the decision itself
    assert _steps_now(scan, args) == 5
    scan.feed(line(2, switch(5, 7)))
    scan.feed(line(3, decided(7, 5, 4.2)))  # a slot's decision: the worker's switch line comes with the next batch
    assert _steps_now(scan, args) == 7
    scan.feed(line(4, switch(7, 5)))
    scan.feed("[2026-10-30 12:00:05 TP1] " + switch(5, 1))  # another rank's line: rank 0 speaks
    assert _steps_now(scan, args) == 5
    assert _steps_now(LogScan(), {"algorithm": None}) is None  # no speculation: no steps at all
    fixed = LogScan()
    fixed.server_info = {"speculative_num_steps": 4}
    assert _steps_now(fixed, {"algorithm": "EAGLE3"}) == 4  # as resolved


def test_the_live_series_draws_the_tier_as_a_step_line_and_counts_time_per_tier():
    from backend.measure.metrics import Sample, parse_tier
    from backend.measure.series import LiveSeries

    series = LiveSeries()
    lines = [
        line(0, "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5, 7]"),
        line(4, switch(3, 5)),
        line(6, decided(5, 3, 2.1)),  # a slot's decision: the worker's switch line says when it takes effect
        line(7, switch(5, 3)),
    ]
    for text in lines:
        ts, tier = parse_tier(text)
        series.feed_tier(ts, tier.steps, tier.switch, tier.start)
    t0 = parse_tier(lines[0])[0]
    series.feed(Sample(ts=t0 + 9.010, kind="decode", gen_tps=90.0, accept_len=3.0, running_req=1))  # at 9.010 s
    assert [round(v) for v in series.steps.window(None).ys] == [3, 3, 5, 5, 3, 3]  # a step at each switch
    shares = dict(series.tier_shares())
    # 3 steps from 0.000 to 4.004 and from 7.007 to 9.010, 5 steps from 4.004 to 7.007
    assert shares[3] == pytest.approx((4.004 + 2.003) / 9.010) and shares[5] == pytest.approx(3.003 / 9.010)
    assert series.tier_title().startswith("steps in force (SGLang adaptive): 3 67% · 5 33%")


def test_history_keeps_the_tiers_and_the_advisor_learns_each(tmp_path):
    """An adaptive run's tier lines stored beside its samples: the log time in each tier, their means, the run's
    text ("adaptive: 3 steps 60%, 5 steps 40%"), and a measured point per tier for the advisor (no one step count
    describes such a run)."""
    from backend.history import History, filter_tail
    from backend.jobs import JobInfo
    from backend.measure.metrics import Sample
    from backend.tune import advisor
    from tests.runs import AQ

    t0 = 1_800_000_000.0
    argv = ("python", "-m", "sglang.launch_server", "--speculative-draft-model-path", AQ, "--speculative-adaptive")
    args = {"profile": "aq-adaptive", "drafter": "aq-medai", "algorithm": "EAGLE3", "adaptive": True}
    with History.open(tmp_path / "h.sqlite3") as history:
        run = history.upsert_run(
            "box", JobInfo("serve-1", state="done", started=t0, ended=t0 + 20, args=args, argv=argv)
        )
        # 3 steps for 6 s at 90 tok/s and accept 3.0, then 5 steps for 4 s at 100 tok/s and accept 4.0
        samples = [
            Sample(ts=t0 + i, kind="decode", gen_tps=90.0 if i < 6 else 100.0, accept_len=3.0 if i < 6 else 4.0,
                   running_req=1)
            for i in range(10)
        ]  # fmt: skip
        tiers = [(t0, 3), (t0 + 6, 5)]
        assert history.import_chunk(run, 0, 100, samples, filter_tail([], samples), tiers=tiers)
        summary = history.run(run)
    assert [(t["steps"], t["seconds"], t["tok_s"], t["accept_len"]) for t in summary.tiers] == [
        (3, 6.0, 90.0, 3.0),
        (5, 4.0, 100.0, 4.0),
    ]
    assert summary.tiers_text() == "adaptive: 3 steps 60%, 5 steps 40%"
    points = advisor.tier_points(summary)
    assert [(p.steps, p.tok_s, p.accept_len) for p in points] == [(3, 90.0, 3.0), (5, 100.0, 4.0)]
    assert points[0].cycle_ms == pytest.approx(1000 * 3.0 / 90.0)
    assert advisor.same_drafter([summary], summary) == []  # not a run at one step count


def _tiered_histogram(rates: list[float], tiers: dict[int, float], n: int) -> list[int]:
    """The pooled histogram of ``n`` passes split over ``tiers`` (steps -> share), each pass accepting along
    ``rates`` up to its tier: expected counts, rounded."""
    out = [0.0] * (max(tiers) + 1)
    for steps, share in tiers.items():
        reached = share * n
        for k in range(steps):
            out[k] += reached * (1 - rates[k])
            reached *= rates[k]
        out[steps] += reached
    return [round(x) for x in out]


def test_with_only_adaptive_runs_the_advisor_learns_positions_per_tier(tmp_path):
    """An adaptive run of AQ-MedAI's drafter benched: 60% of its passes at 3 steps, 40% at 5 (its log's tiers).
    Its bench's pooled histogram, read with those tiers (positions past a pass's tier unobserved), teaches the
    advisor a_1..a_5; before, with no fixed-step run of the drafter, Tune predicted 'accept 1.00' at every step
    count: the tier points carried no histogram, so no position was measured."""
    from backend.history import History, Yardstick, filter_tail
    from backend.jobs import JobInfo
    from backend.measure.metrics import Sample
    from backend.tune import advisor
    from tests.runs import AQ

    rates = [0.9, 0.85, 0.8, 0.75, 0.7]
    t0 = 1_800_000_000.0
    argv = ("python", "-m", "sglang.launch_server", "--speculative-draft-model-path", AQ, "--speculative-adaptive")
    args = {"profile": "aq-adaptive", "drafter": "aq-medai", "algorithm": "EAGLE3", "adaptive": True}
    with History.open(tmp_path / "h.sqlite3") as history:
        run = history.upsert_run(
            "box", JobInfo("serve-1", state="done", started=t0, ended=t0 + 20, args=args, argv=argv)
        )
        samples = [
            Sample(ts=t0 + i, kind="decode", gen_tps=90.0 if i < 6 else 100.0, accept_len=3.3 if i < 6 else 3.9,
                   running_req=1)
            for i in range(10)
        ]  # fmt: skip
        assert history.import_chunk(run, 0, 100, samples, filter_tail([], samples), tiers=[(t0, 3), (t0 + 6, 5)])
        histogram = _tiered_histogram(rates, {3: 0.6, 5: 0.4}, 200_000)
        result = {"tok_s": 95.0, "accept_len": 3.5, "cycle_ms": 36.8, "server_job": "serve-1",
                  "acceptance": {"histogram": histogram, "verify_ct": sum(histogram)}}  # fmt: skip
        history.record_bench("box", JobInfo("bench-1", state="done", ended=t0 + 21), result)
        runs = history.runs()
    [summary] = runs
    assert [t["passes"] for t in summary.tiers] == [6, 4]  # decode lines x running requests in each tier
    advice = advisor.advise(runs, Yardstick(82.0, 30.0))
    assert advice.acceptance.rates == pytest.approx(rates, abs=2e-3)
    by_steps = {row.steps: row for row in advice.rows}
    assert by_steps[3].accept_len == pytest.approx(1 + 0.9 + 0.9 * 0.85 + 0.9 * 0.85 * 0.8, abs=0.01)
    assert all(row.accept_len > 1.5 for row in advice.rows)


def test_tier_points_without_a_histogram_still_teach_acceptance():
    """The root of 'pred accept 1.00': an acceptance with no position measured predicted length 1 at every step
    count. Points that carry only accept lengths (an adaptive run's tiers) give it, as bench records do."""
    from backend.agent.host.shared import advice
    from backend.agent.host.shared.measured_points import Point

    points = [
        Point(3, [], 90.0, 1000 * 3.0 / 90.0, accept_len=3.0),
        Point(5, [], 100.0, 1000 * 3.8 / 100.0, accept_len=3.8),
    ]
    done = advice.assess(points, 1000 / 82.0, 82.0, 7)
    assert done["acceptance"].steps == 5
    assert {r["steps"]: r["accept_len"] for r in done["rows"]}[3] == pytest.approx(3.0, abs=0.01)
    assert {r["steps"]: r["accept_len"] for r in done["rows"]}[5] == pytest.approx(3.8, abs=0.01)


def test_a_bench_on_an_adaptive_server_reads_its_positions_with_the_tier_mix():
    """Live and `bench` on an adaptive server: the passes per tier its log showed (decode lines x running) give
    the per-position curve with the positions past a pass's tier unobserved, and say so."""
    from backend.measure.metrics import Sample, parse_tier
    from backend.measure.series import LiveSeries
    from backend.tune.advisor import acceptance_lines

    series = LiveSeries()
    for i, text in enumerate(["AdaptiveSpeculativeParams initialized: steps=1, candidate_steps=[1, 3]"] + [""] * 9):
        if text:
            ts, tier = parse_tier(line(0, text))
            series.feed_tier(ts, tier.steps, tier.switch, tier.start)
        if i == 5:
            ts, tier = parse_tier(line(5, switch(1, 3)))
            series.feed_tier(ts, tier.steps, tier.switch, tier.start)
        series.feed(Sample(ts=1_900_000_000.0 + i, kind="decode", gen_tps=90.0, accept_len=2.0, running_req=2))
    assert series.tier_passes == {1: 10.0, 3: 10.0}  # five lines of two running requests at each
    hist = [100, 540, 108, 252]  # half the passes at tier 1 and half at 3 (test_acceptance's example)
    lines = acceptance_lines({"histogram": hist, "per_position": [0.9, 0.4, 0.7]}, "aq", tiers=series.tier_passes)
    assert "a_i 0.90 → 0.80 → 0.70" in lines
    assert lines[-1].startswith("adaptive: passes per tier 1 50% · 3 50%; positions past a pass's tier unobserved")
