"""Simulator scenarios built from published sweeps (../shared/TUNING-TABLES.md): the file checked key by key, the
simulator's timing and acceptance taken from it, and the smart sweep held to a model it was not built on."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from backend.agent.host.shared.acceptance_model import chain
from backend.connection import Connection
from backend.sandbox.sglang_sim import scenario
from backend.sandbox.sglang_sim import timing as sim
from backend.settings.model import HostConfig
from backend.tune import sweep as sweep_mod
from tests.helpers import run_cli
from tests.simhost import EAGLE, make_settings

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "backend" / "sandbox" / "scenarios"
T1 = SCENARIOS / "t1-llama31-8b-vllm.json"
T2 = SCENARIOS / "t2-maverick-costly-steps.json"


def true_tok_s(chosen: scenario.Scenario, drafter: str, steps: int) -> float:
    """What the scenario's model gives one stream at ``steps``: L(k) / c(k)."""
    return 1000.0 * chain(chosen.rates(drafter, steps)) / chosen.pass_ms(1, {"steps": steps, "draft_steps": steps})


def test_a_scenario_is_checked_key_by_key(tmp_path):
    good = json.loads(T1.read_text())
    scenario.Scenario(good)
    for broken, says in (
        ({k: v for k, v in good.items() if k != "draft_step_ms"}, "no 'draft_step_ms'"),
        ({**good, "decode_ms": {"one": 7.0}}, "decode_ms key 'one'"),
        ({**good, "draft_step_ms": -1}, "draft_step_ms must be a number"),
        ({**good, "drafters": {"aq-medai": {"per_position": [0.8, 1.2]}}}, "drafters.aq-medai.per_position[1]"),
        ({**good, "drafters": {"eagle": {"per_position": [0.8]}}}, "drafters.eagle is not a sandbox drafter"),
    ):
        with pytest.raises(scenario.ScenarioError, match=says.replace("[", r"\[").replace("]", r"\]")):
            scenario.Scenario(broken)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**good, "drafters": {"ours": {"per_position": [1.5]}}}))
    out = run_cli("sandbox", "up", "--scenario", str(bad), rc=None)
    assert out.returncode == 2 and "drafters.ours.per_position[0] is 1.5" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    state = Path(os.environ["XDG_STATE_HOME"]) / "specdeck" / "sandbox"
    assert not state.exists()  # nothing written


def test_the_simulator_takes_its_model_from_the_scenario(monkeypatch):
    chosen = scenario.load(str(T1))
    assert chosen.decode_ms(1) == 7.07 and chosen.decode_ms(8) == 7.07  # one size given: flat
    two = scenario.load(str(T2))
    assert two.decode_ms(8) == 26.0 and two.decode_ms(4) == pytest.approx(20.0 + 6.0 * 3 / 7)
    monkeypatch.setenv(scenario.ENV, str(T1))
    spec = {"steps": 3, "draft_tokens": 4, "draft_steps": 3, "rates": [0.5] * 3}
    assert sim.pass_ms(1, spec) == pytest.approx(7.07 + 1.13 + 3 * 0.45 + 3 * 0.55)
    assert sim.pass_ms(1, {}) == pytest.approx(7.07)  # plain: T1's 7.07 ms, not the operator's 12.2
    assert sim.drafter_rates("/data/eagle3/aq_medai_k2", {}, 3) == [0.78, 0.744, 0.741]
    assert sim.drafter_rates("/data/eagle3/output_100k_sglang/4", {}, 2) == [0.68, 0.618]
    # T1's published cycles (AL × TPOT: 10.2 ms at K = 2, 15.2 at K = 7) and their best K, 4 (within 1% of 5).
    assert [round(chosen.pass_ms(1, {"draft_steps": k}), 1) for k in (2, 7)] == [10.2, 15.2]
    monkeypatch.delenv(scenario.ENV)
    assert sim.pass_ms(1, {"draft_tokens": 4, "draft_steps": 3}) == pytest.approx(33.0)  # the operator's again


@pytest.fixture
async def conn(tmp_path):
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "host"),
                      launcher="simulator", sandbox=True)  # fmt: skip
    c = await Connection.open(host)
    yield c
    for kind in ("sweep", "bench", "serve"):
        for job in await c.call("jobs.list", kind=kind):
            if job["state"] == "running":
                await c.call("jobs.cancel", id=job["id"], timeout=10)
    await c.close()


@pytest.mark.parametrize("path", [T1, T2], ids=["T1-cheap-steps", "T2-costly-steps"])
@pytest.mark.slow
async def test_smart_sweep_on_a_published_scenario_does_not_stop_on_a_slow_point(conn, models, path):
    chosen = scenario.load(str(path))
    grid = (1, 2, 3, 4)
    truth = {k: true_tok_s(chosen, "aq-medai", k) for k in grid}
    settings = make_settings(models, aq={"drafter": "aq-medai", **EAGLE, "env": {scenario.ENV: str(path)}})
    plan = sweep_mod.SweepPlan(grid, requests=3, max_tokens=96, smart=True)
    baseline = 1000.0 / chosen.decode_ms(1)
    job = await sweep_mod.start(conn, settings, "aq", plan, baseline_tok_s=baseline)
    seen: list[sweep_mod.SweepEvent] = []
    done = (await asyncio.wait_for(sweep_mod.follow(conn, job.id, seen.append), 240)).wire
    measured = [e.point.steps for e in seen if e.kind == "point" and not e.point.failed]
    # Each point's cycle from SGLang's own step times (the sweep runs its servers with SGLANG_RECORD_STEP_TIME=1).
    assert all(p["step_times_ms"] for p in done["points"] if not p.get("failed"))
    assert min(min(p["step_times_ms"]) for p in done["points"]) >= chosen.decode_ms(1)  # no cycle under a plain step
    assert len(set(measured)) >= 2  # never stops on its first point
    best = done["best"]["steps"]
    # The one it settles on is within noise of the published best: never a point 29% slower.
    pts = [(p["steps"], p["tok_s"]) for p in done["points"]]
    assert truth[best] >= 0.9 * max(truth.values()), (best, truth, pts, done["best"])
    if done["stopped_early"]:
        assert done["stopped_early"]["best_steps"] == best
