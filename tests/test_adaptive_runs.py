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

from backend.agent.host.serve import LogScan, _steps_now
from backend.agent.host.shared.logline import tier_line

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
