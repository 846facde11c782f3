"""The SIMULATED SGLang learns what breaks each of the bench's promises about prompts (issue 32), and the published
numbers play as scenarios: lightseekorg's per-domain accept lengths for Kimi-K2.5, tokenspeed #1305's loops (3.93
accepted per verify against 1.94 on chat), mratsim #2's collapse at a full batch with a deep queue."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from backend.agent.host.shared.measured_points import Point
from backend.connection import Connection
from backend.jobs import JobInfo
from backend.measure import domains
from backend.measure.bench import BenchPlan, run_bench
from backend.sandbox import hub_catalog
from backend.sandbox.hub import HubServer
from backend.sandbox.sglang_sim import prompts as sim_prompts
from backend.sandbox.sglang_sim import scenario
from backend.serve import command_line
from backend.settings.model import HostConfig
from tests.simhost import REPO, server_argv
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

SCENARIOS = REPO / "backend" / "sandbox" / "scenarios"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hubroot")
    hub_catalog.write_datasets(root)
    with HubServer(root) as server:
        yield server


@pytest.fixture
async def conn(tmp_path, hub):
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "host"),
                      launcher="simulator", sandbox=True, hub_endpoint=hub.url)  # fmt: skip
    c = await Connection.open(host)
    yield c
    for job in await c.call("jobs.list", kind="serve"):
        if job["state"] == "running":
            await c.call("jobs.cancel", id=job["id"], timeout=10)
    await c.close()


async def serve(conn: Connection, models: dict, scenario_file: str | None = None, *extra: str) -> JobInfo:
    port = free_port()
    env = {"SPECDECK_SIM_TIME_SCALE": "0.05", **command_line.launch_env(conn.host)}
    if scenario_file:
        env[scenario.ENV] = str(SCENARIOS / scenario_file)
    wire = await conn.call(
        "jobs.start",
        kind="serve",
        argv=[*server_argv(models, "eagle3-aq", port), *extra],
        args={"profile": "eagle3-aq", "port": port, "drafter": "aq-medai", "model": models["target"]},
        env=env,
        cwd=str(REPO),
    )
    job = JobInfo.from_json(wire)
    while (await conn.call("http.request", url=f"http://127.0.0.1:{port}/health")).get("status") != 200:
        await asyncio.sleep(0.05)
    return job


@pytest.mark.slow
async def test_raw_prompts_accept_less_than_templated_ones(conn, models):
    """Raw prompts without the chat template lower acceptance silently (SemiAnalysis InferenceX PR #1116)."""
    job = await serve(conn, models)
    templated = await run_bench(conn, job, BenchPlan(requests=8, max_tokens=96))
    raw = await run_bench(conn, job, BenchPlan(requests=8, max_tokens=96, raw=True))
    assert templated["chat_template"] == "kimi" and raw["chat_template"] is False
    assert raw["accept_len"] < templated["accept_len"] - 0.2, (raw["accept_len"], templated["accept_len"])


@pytest.mark.slow
async def test_published_per_domain_accept_lengths_come_back_per_domain(conn, models):
    """lightseekorg/kimi-k2.5-eagle3's card (MT-Bench 2.69, GSM8K 3.20, HumanEval 3.29, BFCL 3.6-3.8) as a
    scenario: the bench's per-domain table gives each back, chat the lowest."""
    job = await serve(conn, models, "k25-domains-lightseekorg.json")
    sets = domains.parse("chat,code,math,tools", sandbox=True)
    got = await run_bench(conn, job, BenchPlan(requests=24, max_tokens=128, domains=sets))
    table = got["domains"]
    published = {"chat": 2.69, "math": 3.20, "code": 3.29, "tools": 3.7}
    for name, length in published.items():
        assert table[name]["requests"] == 6 and table[name]["accept_len"] == pytest.approx(length, abs=0.3), table
    assert min(table, key=lambda n: table[n]["accept_len"]) == "chat"


@pytest.mark.slow
async def test_looping_completions_are_flagged_and_kept_out(conn, models):
    """tokenspeed #1305: random completions in a loop accept 3.93 per verify against 1.94 on chat. The looping
    requests are flagged; the bench's figures, and the advisor's points, are chat's."""
    job = await serve(conn, models, "tokenspeed-1305-loops.json")
    sets = domains.parse("chat,random", sandbox=True)
    got = await run_bench(conn, job, BenchPlan(requests=8, max_tokens=128, domains=sets))
    looped = [r for r in got["per_request"] if r.get("degenerate")]
    assert sorted(got["degenerate"]) == sorted(r["index"] for r in looped) and len(looped) == 4
    assert all(r["domain"] == "random" and r["repetition"] > 0.9 for r in looped)
    loop_accept = sum(r["tokens"] for r in looped) / sum(r["spec_verify_ct"] for r in looped)
    # Four looping requests of 128 tokens, each one's last block cut: 20,000 drawn as the engine draws them measure
    # 3.919 sd 0.041, so ±0.1 held only for some seeds (2.5% of draws outside); ±0.15 leaves 0.06% outside.
    assert loop_accept == pytest.approx(3.93, abs=0.15)
    assert got["accept_len"] == pytest.approx(1.94, abs=0.25) and "random" not in got["domains"]
    point = Point.from_bench(3, got)
    assert len(point.histograms) == 4  # the advisor sees the chat requests only


@pytest.mark.slow
async def test_a_full_batch_with_a_deep_queue_collapses_and_the_bench_says_so(conn, models):
    """mratsim #2: whole batches at accept 1.00 while full with a deep queue. Four slots, twelve requests at
    once: the bench names the episodes and their share of the time; without the scenario there are none."""
    limit = ("--max-running-requests", "4")
    plan = BenchPlan(requests=12, max_tokens=64, concurrency=12)
    job = await serve(conn, models, "mratsim-2-collapse.json", *limit)
    got = await run_bench(conn, job, plan)
    collapse = got["collapse"]
    assert collapse["episodes"] and collapse["full_batch"] == 4 and 0 < collapse["share"] <= 1
    await conn.call("jobs.cancel", id=job.id, timeout=10)
    calm = await run_bench(conn, await serve(conn, models, None, *limit), plan)
    assert calm["collapse"]["episodes"] == []


def test_a_prompt_is_read_by_its_markers_its_set_and_its_words():
    templated = sim_prompts.traits("<|im_user|>user<|im_middle|>Convert 250 US dollars to euros.<|im_end|>")
    assert templated == sim_prompts.Traits(True, "tools", False)
    assert sim_prompts.traits("Write a Python function that merges intervals.").domain == "code"
    assert sim_prompts.traits("qzx vbnm " * 20).looping and not sim_prompts.traits("the " * 40).looping
    words = sim_prompts.text(sim_prompts.Words(7).ids(64))
    from backend.agent.host.shared import degenerate

    assert not degenerate.degenerate(words) and degenerate.degenerate(
        sim_prompts.text(sim_prompts.Words(7).ids(64, True))
    )


def test_scenarios_read_their_prompt_keys_and_refuse_bad_ones(tmp_path):
    loaded = scenario.load(str(SCENARIOS / "tokenspeed-1305-loops.json"))
    assert loaded.loop_accept == 3.93 and loaded.domains("aq-medai") == {"chat": 1.94} and not loaded.collapse
    bad = Path(tmp_path, "bad.json")
    doc = scenario.load(str(SCENARIOS / "mratsim-2-collapse.json"))
    assert doc.collapse and doc.domains("aq-medai") is None
    text = (SCENARIOS / "k25-domains-lightseekorg.json").read_text().replace('"chat": 2.69', '"chat": 0.5')
    bad.write_text(text)
    with pytest.raises(scenario.ScenarioError, match=r"domains\.chat must be a number of at least 1"):
        scenario.load(str(bad))
