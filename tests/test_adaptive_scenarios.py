"""Adaptive against fixed steps where it should win and where it should lose, on the simulator's own model and on
the SIMULATED SGLang itself (which runs SGLang's policy, checked against SGLang's code in test_profiles).

- t3 (backend/sandbox/scenarios/t3-adaptive-wins-verify-grows-with-batch.json): a verify that grows steeply with
  the batch. A ladder that stops drafting from 8 streams keeps the fixed profile's 3 steps at one stream and the
  baseline's speed under load, where fixed 3 steps fall below it.
- t4 (t4-adaptive-loses-costly-steps.json): costly draft steps and a drafter whose accepted drafts keep SGLang's
  EMA above the 3 -> 5 threshold: the policy follows acceptance, not cost, and holds 5 steps where 3 are faster.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backend.agent.host.shared.acceptance_model import chain
from backend.connection import Connection
from backend.measure.bench import BenchPlan, run_bench
from backend.measure.livefeed import find_server
from backend.sandbox.sglang_sim import scenario
from backend.serve import server_status, serving
from backend.settings.model import HostConfig
from backend.sglang.adaptive import AdaptivePolicy, default_config
from backend.tune.adaptive_proposal import settled_tiers
from tests.simhost import make_settings

pytestmark = pytest.mark.e2e

SCENARIOS = Path(__file__).resolve().parents[1] / "backend" / "sandbox" / "scenarios"
T3 = SCENARIOS / "t3-adaptive-wins-verify-grows-with-batch.json"
T4 = SCENARIOS / "t4-adaptive-loses-costly-steps.json"
T3_LADDER = {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0]}}


def per_stream(chosen: scenario.Scenario, batch: int, steps: int) -> float:
    """The model's per-stream tok/s of aq-medai at ``steps`` with ``batch`` running; at tier 0 SGLang still
    verifies the bonus token and extends the draft (a plain pass and a draft step)."""
    if steps == 0:
        return 1000.0 / chosen.pass_ms(batch, {"steps": 0, "draft_tokens": 1, "draft_steps": 0})
    rates = chosen.rates("aq-medai", steps)
    return 1000.0 * chain(rates) / chosen.pass_ms(batch, {"steps": steps, "draft_steps": steps})


def adaptive_steps(chosen: scenario.Scenario, config: dict, start: int, batch: int) -> list[int]:
    """The tiers SGLang's policy holds at ``batch`` when fed what aq-medai accepts at each tier."""
    slot = AdaptivePolicy(config, start).slot(batch)
    return settled_tiers(
        {"candidate_steps": slot.candidates}, slot.steps, lambda k: chain(chosen.rates("aq-medai", k)) - 1 if k else 0
    )


def test_adaptive_wins_where_a_fixed_step_count_falls_below_the_baseline():
    chosen = scenario.load(str(T3))
    for batch, want in ((1, [3]), (4, [3]), (8, [0]), (16, [0])):
        assert adaptive_steps(chosen, T3_LADDER, 3, batch) == want
    fixed = {b: per_stream(chosen, b, 3) for b in (1, 8, 16)}
    adaptive = {b: per_stream(chosen, b, adaptive_steps(chosen, T3_LADDER, 3, b)[0]) for b in (1, 8, 16)}
    assert adaptive[1] == fixed[1]  # the same 3 steps at one stream
    assert adaptive[8] > 1.08 * fixed[8] and adaptive[16] > 1.4 * fixed[16]  # near the baseline's speed
    assert fixed[8] < 1000.0 / chosen.pass_ms(8, {})  # where fixed 3 steps lose to no speculation at all


def test_adaptive_loses_where_acceptance_climbs_past_the_cheapest_step_count():
    chosen = scenario.load(str(T4))
    one_stream = {"1": default_config("0.5.23")["1"]}  # SGLang's shipped one-stream ladder [1, 3, 5, 7]
    assert adaptive_steps(chosen, one_stream, 3, 1) == [5]  # from 3 it climbs (EMA 2.56 > 2.5) and holds 5
    best = max(range(1, 8), key=lambda k: per_stream(chosen, 1, k))
    assert best in (2, 3) and per_stream(chosen, 1, 3) > 1.08 * per_stream(chosen, 1, 5)


@pytest.mark.slow
async def test_the_simulator_measures_the_win(models, tmp_path, monkeypatch):
    """The A/B on SIMULATED SGLang under t3: 16 streams each, fixed 3 steps against the ladder; the adaptive
    server's log shows the slot from 8 streams holding tier 0."""
    host = HostConfig(
        name="sim", url="local", python=sys.executable, workdir=str(tmp_path / "host"), launcher="simulator",
        sandbox=True, sglang_version="0.5.23",
    )  # fmt: skip
    env = {scenario.ENV: str(T3)}
    settings = make_settings(
        models,
        fixed={"drafter": "aq-medai", "algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4, "env": env},
        ladder={"drafter": "aq-medai", "algorithm": "EAGLE3", "steps": 3, "adaptive": True,
                "adaptive_config": T3_LADDER, "env": env},
    )  # fmt: skip
    measured = {}
    conn = await Connection.open(host)
    try:
        for name in ("fixed", "ladder"):
            started = await serving.start(conn, settings, settings.profiles[name])
            assert (await serving.wait(conn, started["job"], within=60))["state"] == "ready"
            result = await run_bench(
                conn, await find_server(conn), BenchPlan(requests=16, max_tokens=120, concurrency=16)
            )
            measured[name] = result["tok_s"]
            if name == "ladder":
                log = Path((await serving.status(conn))["log_path"]).read_text()
                assert "Switch adaptive runtime state: steps 3 -> 0, draft_tokens 4 -> 1" in log
            await serving.stop(conn, grace=10)
    finally:
        await conn.close()
    # The model says 1.5x at a full 16 (1.1x at 8, which the ramp and a loaded machine shrank to under 1.05x);
    # measured at 16 beside a CPU hog at load 10: 1.44x to 1.47x.
    assert measured["ladder"] > 1.25 * measured["fixed"], measured


@pytest.mark.slow
async def test_advise_adaptive_serves_its_proposal_and_benches_it_against_fixed_steps(models, tmp_path):
    """The Tune tab's A, ``advise --adaptive --ab``: the proposal from a history whose drafter falls below the
    baseline at 16 streams ({"1": [1, 3], "16": [0]}) served as <profile>-adaptive, then the best fixed step count,
    each benched at 1 and 16 streams on SIMULATED SGLang under t3; a job on the host (``adaptive_ab.ab_start``), as a
    sweep is: the client that started it goes away, another finds it running and follows it to its end, and the
    host is left as it was found (no server)."""
    from backend.history import History, Yardstick
    from backend.tune import adaptive_ab, adaptive_proposal
    from backend.tune import sweep as sweep_mod
    from tests.runs import add_benched_run
    from tests.test_advisor import bench_at

    with History.open(tmp_path / "h.sqlite3") as history:
        add_benched_run(history, 2, 3, 33.0, 95.0, [5, 10, 20, 65])
        bench_at(history, 2, 16, 38.0, 120.0)
        yardstick = Yardstick(82.0, 30.0, "box/serve-0", {1: 82.0}, {1: 82.0, 16: 62.5})
        proposal = adaptive_proposal.propose_adaptive(history.runs(), yardstick, version="0.5.23", max_steps=5)
    assert proposal.config == {"1": {"candidate_steps": [1, 3]}, "16": {"candidate_steps": [0]}}
    host = HostConfig(
        name="sim", url="local", python=sys.executable, workdir=str(tmp_path / "host"), launcher="simulator",
        sandbox=True, sglang_version="0.5.23",
    )  # fmt: skip
    env = {scenario.ENV: str(T3)}
    settings = make_settings(
        models, aq={"drafter": "aq-medai", "algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4, "env": env}
    )
    profile = settings.profiles["aq"]
    conn = await Connection.open(host)
    try:
        job = await adaptive_ab.ab_start(
            conn, settings, profile, adaptive_ab.ab_of(profile, proposal), requests=16, max_tokens=100
        )
    finally:
        await conn.close()  # the panel that started it is gone
    conn = await Connection.open(host)
    try:
        running = await sweep_mod.running(conn)
        assert running is not None and running.id == job.id and running.args["ab"]["adaptive"] == "aq-adaptive"
        result = adaptive_ab.ab_result(await sweep_mod.follow(conn, job.id))
        assert (await serving.status(conn)).get("state") not in server_status.RUNNING_STATES  # left as found
    finally:
        await conn.close()
    assert (result.adaptive, result.fixed, result.failed) == ("aq-adaptive", "aq-fixed3", ())
    rows = {r.concurrency: r for r in result.rows}
    assert set(rows) == {1, 16} and rows[16].adaptive_tok_s > rows[16].fixed_tok_s
    assert rows[1].adaptive_tok_s == pytest.approx(rows[1].fixed_tok_s, rel=0.15)  # the same 3 steps
    assert any("adaptive" in line and "fixed" in line for line in adaptive_ab.ab_lines(result))
