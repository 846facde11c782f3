"""The advisor over a history: inputs picked from runs, the cost model fitted, `specdeck advise` output."""

from __future__ import annotations

import json

import pytest

from backend.errors import UsageError
from backend.history import History, Yardstick
from backend.jobs import JobInfo
from backend.measure import bench_records
from backend.tune import adaptive_proposal, advisor
from tests.helpers import Ran, run_cli
from tests.runs import add_benched_run

pytestmark = pytest.mark.unit


@pytest.fixture
def history(tmp_path):
    with History.open(tmp_path / "h.sqlite3") as h:
        yield h


def test_advice_fits_cost_from_runs_and_predicts(history):
    add_benched_run(history, 1, 1, 27.0, 70.0, None)
    three = add_benched_run(history, 2, 2, 30.0, 70.0, [20, 48, 32])  # a_1 = 0.8, a_2 = 0.4
    five = add_benched_run(history, 3, 5, 39.0, 50.0, None)
    # A later bench of the 5-step run at 4 streams: a batch's cycle, kept out of the step count's cost.
    loaded = {"tok_s": 30.0, "accept_len": 2.0, "cycle_ms": 70.0, "server_job": "serve-3", "concurrency": 4}
    history.record_bench("box", JobInfo("bench-loaded", state="done", ended=9999.0), loaded)
    assert history.run(five).bench["concurrency"] == 4  # the newest bench is the loaded one
    advice = advisor.advise(history.runs(), Yardstick(82.0, 30.0), max_steps=3)
    assert advice.run.id == three  # the newest run with a histogram
    assert advice.cost.source == "fitted" and advice.cost(3) == pytest.approx(33.0)
    assert [r.tok_s for r in advice.rows] == pytest.approx([1800 / 27, 2120 / 30, 2184 / 33], abs=0.01)
    assert advice.measured() == {1: 70.0, 2: 70.0}
    # 1 and 2 steps both measured 70 tok/s: the first of the fastest, not separated from the other.
    assert advice.best.steps == 1 and advice.best.not_separated_from == (2,)
    assert advice.best.basis == "measured"
    needs = advice.targets.targets
    assert advice.targets.steps == 1 and advice.targets.max_tok_s == pytest.approx(2000 / 27)
    assert needs[0].tok_s == 150 and needs[0].reachable is False  # 4.5 > 2: out of reach at 1 step
    assert advice.stop["can_stop"] is False and advice.stop["next"] == 3  # fitted, but 3 may still beat 70
    text = "\n".join(advisor.advice_lines(advice))
    assert "cost model (fitted)" in text and "best: steps 1 measured fastest (70.0 tok/s" in text
    assert "not separated from 2" in text
    assert "out of reach" in text and "would measure 3 steps next" in text


def test_advice_per_step_cost_and_bad_input(history):
    only = add_benched_run(history, 1, 3, 33.0, 100.0, [5, 10, 20, 65])
    advice = advisor.advise(history.runs(), Yardstick(82.0, 30.0), only)
    # One step count: per step the middle of 0..(33 − 12.2) / 3 (a cycle holds one plain step), labelled assumed.
    assert advice.cost.source == "assumed" and advice.cost(4) == pytest.approx(33.0 + (33.0 - 1000 / 82) / 6)
    assert "per-step cost assumed" in advice.rows[3].notes and advice.stop["can_stop"] is False
    assert len(advice.rows) == advisor.DEFAULT_MAX_STEPS and advice.rows[3].extrapolated
    with pytest.raises(UsageError, match="at least 1"):
        advisor.advise(history.runs(), Yardstick(82.0, 30.0), max_steps=0)
    longer = add_benched_run(history, 3, 5, 39.0, 100.0, [5, 10, 20, 30, 20, 15])
    add_benched_run(history, 4, 1, 27.0, 70.0, [40, 60])  # newest, but 1 position measured: the 5-step run is read
    assert advisor.advise(history.runs(), Yardstick(82.0, 30.0)).run.id == longer
    plain = add_benched_run(history, 2, 3, 33.0, 100.0, None)
    with pytest.raises(UsageError, match="no per-position acceptance"):
        advisor.advise(history.runs(), Yardstick(82.0, 30.0), plain)


def test_advise_cli_json_and_no_data(tmp_path):
    path = tmp_path / "cli.sqlite3"
    env = {"SPECDECK_HISTORY": str(path)}
    with History.open(path) as h:
        add_benched_run(h, 1, 3, 33.0, 100.0, None)
    out = run_cli("advise", env=env, rc=None)
    assert out.returncode == 2 and "no run in the history has a per-position acceptance" in out.stderr
    with History.open(path) as h:
        add_benched_run(h, 2, 3, 33.0, 100.0, [5, 10, 20, 65])
    out = run_cli("advise", "serve-2", "--json", "--max-steps", "5", env=env, rc=None)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["run"] == "box/serve-2" and len(doc["rows"]) == 5 and doc["cost_model"]["source"] == "assumed"
    assert doc["acceptance"]["per_position"] == pytest.approx([0.95, 85 / 95, 65 / 85], abs=1e-4)
    assert doc["best"]["steps"] in range(1, 6) and doc["rows"][2]["measured_tok_s"] == 100.0
    assert doc["can_stop"] is False and doc["next"] in range(1, 6)  # one step count measured: never stops
    assert {"steps", "tok_s", "tok_s_low", "tok_s_high", "measured_tok_s"} <= set(doc["rows"][0])


def test_report_of_a_sweep_and_the_acceptance_of_its_runs(history, tmp_path):
    from backend.report import document, render

    add_benched_run(history, 1, 2, 30.0, 90.0, [20, 48, 32], sweep="sweep-abc")
    add_benched_run(history, 2, 3, 33.0, 100.0, [5, 10, 20, 65], sweep="sweep-abc")
    add_benched_run(history, 3, 3, 33.0, 100.0, None)  # not the sweep's
    runs = history.sweep_runs("sweep-a")  # a unique prefix will do
    assert [r.job_id for r in runs] == ["serve-1", "serve-2"] and runs[0].sweep == "sweep-abc"
    assert runs[0].to_json()["sweep"] == "sweep-abc"
    with pytest.raises(UsageError, match="no run of sweep"):
        history.sweep_runs("sweep-zzz")
    blocks = document.build(history, [r.id for r in runs], Yardstick(82.0, 30.0), None, "sweep-abc")
    text = render.to_markdown(blocks)
    assert "## Sweep sweep-abc" in text and "| 3 | 1 | — | 100.0 | 2.00 | 33.0 | +22.0% |" in text
    assert "tok/s by draft steps" in text and "baseline 82.0 tok/s" in text and "break-even (+)" in text
    assert "Acceptance per position: aq-medai (serve-2)" in text and "| 3 | 65 | 65% |" in text
    assert "| 1 | 0.950 |" in text and "acceptance per draft position" in text  # a_1 = 95/100
    page = render.to_html(blocks, "static")
    assert page.count("<svg") >= 4 and "draft steps" in page and page.count('<polygon class="band"') == 2


# T1 (vLLM issue #20780) written as bench_speculative.py would: batch 1, step_time = AL × TPOT, speed = 1 / TPOT.
T1_AL = {2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54}
T1_TPOT = {2: 4.32, 3: 4.09, 4: 4.05, 5: 4.13, 6: 4.20, 7: 4.29}


def bench_record(steps: int, batch: int = 1, **extra) -> dict:
    if steps == 0:
        record = {"acc_length": 1.0, "step_time": 0.00707, "speed": 141.443}
    else:
        record = {"acc_length": T1_AL[steps], "step_time": T1_AL[steps] * T1_TPOT[steps] / 1000,
                  "speed": 1000 / T1_TPOT[steps]}  # fmt: skip
    topk = 0 if steps == 0 else 1
    tokens = 0 if steps == 0 else steps + 1
    return {"batch_size": batch, "steps": steps, "topk": topk, "num_draft_tokens": tokens, **record,
            "completion_tokens": 512, **extra}  # fmt: skip


def advise_from(tmp_path, name: str, text: str, *more: str) -> Ran:
    path = tmp_path / name
    path.write_text(text)
    env = {"SPECDECK_HISTORY": str(tmp_path / "none.sqlite3")}
    return run_cli("advise", "--from", str(path), *more, env=env, rc=None)


def test_advise_from_bench_speculative_json_lines_and_csv(tmp_path):
    records = [bench_record(0), bench_record(2), bench_record(5), bench_record(3, batch=8)]
    out = advise_from(tmp_path, "sweep.jsonl", "".join(json.dumps(r) + "\n" for r in records), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = {r["steps"]: r for r in doc["rows"]}
    assert doc["cost_model"]["source"] == "fitted" and doc["cost_model"]["plain_step_ms"] == pytest.approx(7.07)
    assert rows[2]["measured_tok_s"] == pytest.approx(1000 / 4.32, abs=0.01) and rows[3]["measured_tok_s"] is None
    for k in (3, 4, 6, 7):  # the published figures of the step counts not in the file fall inside their rows
        assert rows[k]["tok_s_low"] <= 1000 / T1_TPOT[k] <= rows[k]["tok_s_high"], rows[k]
    assert doc["can_stop"] is False and doc["next"] in (3, 4) and doc["best"]["steps"] in (2, 5)
    assert doc["baseline"]["baseline_tok_s"] == pytest.approx(141.443)  # the plain-decoding record

    csv_text = (
        ",".join(bench_record(0))
        + "\n"
        + "".join(",".join(str(v) for v in bench_record(k).values()) + "\n" for k in (0, 2, 3, 4, 5, 6, 7))
    )
    out = advise_from(tmp_path, "sweep.csv", csv_text, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["can_stop"] is True and doc["next"] is None  # every step count measured
    # 4 is the published fastest: the best is it, with the step counts it is not separated from (records carry
    # no requests: no count that would separate them).
    rows = {r["steps"]: r for r in doc["rows"]}
    assert doc["best"]["steps"] == 4 and doc["best"]["requests_to_separate"] is None
    assert all(rows[k]["measured_tok_s"] <= doc["best"]["measured_tok_s"] for k in doc["best"]["not_separated_from"])
    text = advise_from(tmp_path, "sweep.csv", csv_text).stdout
    assert "sweep.csv at batch size 1: 6 chain records" in text and "best: " in text


def test_advise_from_bad_records_names_the_record(tmp_path):
    bad = {k: v for k, v in bench_record(3).items() if k != "step_time"}
    out = advise_from(tmp_path, "a.jsonl", json.dumps(bench_record(2)) + "\n" + json.dumps(bad) + "\n")
    assert out.returncode == 2 and "line 2 has no 'step_time'" in out.stderr and "Traceback" not in out.stderr
    tree = bench_record(3, topk=4, num_draft_tokens=8)
    out = advise_from(tmp_path, "b.jsonl", json.dumps(tree) + "\n")
    assert out.returncode == 2 and "line 1 has topk 4" in out.stderr
    out = advise_from(tmp_path, "c.csv", "batch_size,steps\n1,3\n")
    assert out.returncode == 2 and "lacks topk" in out.stderr
    out = advise_from(tmp_path, "d.jsonl", json.dumps(bench_record(3)) + "\n", "--batch-size", "4")
    assert out.returncode == 2 and "no record at batch size 4" in out.stderr
    assert not list(tmp_path.glob("*.sqlite3"))  # nothing written


def test_predict_from_rates_costs_given_acceptance_with_this_hosts_runs(history):
    add_benched_run(history, 1, 2, 30.0, 70.0, [20, 48, 32])
    add_benched_run(history, 2, 4, 36.0, 90.0, [5, 10, 20, 30, 35])
    advice = advisor.predict_from_rates([0.8, 0.7, 0.6], [0.02, 0.03, 0.05], history.runs(), Yardstick(82.0, 30.0))
    assert advice.cost.source == "fitted" and advice.cost(3) == pytest.approx(33.0)
    assert advice.measured() == {}  # another drafter's tok/s are no measurement of these rates
    row = advice.rows[2]
    assert row.accept_len == pytest.approx(1 + 0.8 + 0.56 + 0.336) and row.tok_s_low < row.tok_s
    assert advice.rows[4].extrapolated
    with pytest.raises(UsageError, match="within"):
        advisor.predict_from_rates([1.2], [0.1], history.runs(), Yardstick(82.0, 30.0))


def bench_at(history: History, n: int, streams: int, tok_s: float, cycle: float) -> None:
    """A bench of run ``serve-<n>`` at ``streams`` concurrent requests (a point of its curve)."""
    result = {"tok_s": tok_s, "accept_len": 2.0, "cycle_ms": cycle, "server_job": f"serve-{n}", "concurrency": streams}
    history.record_bench("box", JobInfo(f"bench-{n}-{streams}", state="done", ended=1500.0 + 10 * n + streams), result)


def test_the_adaptive_config_climbs_at_one_stream_and_stops_drafting_where_the_baseline_wins(history):
    """Runs at 1, 3 and 5 steps of one drafter, each benched at 1, 8 and 32 streams; the baseline benched there
    too. The proposal is SGLang's own config (batch-size keys, candidate_steps) whose slots SGLang's policy,
    fed this drafter's acceptance, settles on the fastest tier at each concurrency; at 32 streams the baseline
    is ahead and the slot stops drafting (tier 0, SGLang 0.5.14+). The fixed step count to beat is 3 (measured
    fastest; 4 only predicted)."""
    add_benched_run(history, 1, 1, 27.0, 70.0, [20, 80])
    add_benched_run(history, 2, 3, 33.0, 95.0, [5, 10, 20, 65])
    add_benched_run(history, 3, 5, 39.0, 90.0, None)
    for n, (at8, at32) in {1: (60.0, 30.0), 2: (70.0, 28.0), 3: (62.0, 22.0)}.items():
        bench_at(history, n, 8, at8, 50.0)
        bench_at(history, n, 32, at32, 120.0)
    yardstick = Yardstick(82.0, 30.0, "box/serve-0", {1: 82.0}, {1: 82.0, 8: 55.0, 32: 40.0})
    proposal = adaptive_proposal.propose_adaptive(history.runs(), yardstick, version="0.5.23", max_steps=5)
    config = proposal.config
    assert set(config) == {"1", "32"}  # 8 streams wants the ladder 1 streams has: one slot serves both
    # SGLang's policy follows acceptance, not speed: where the baseline is ahead the slot holds tier 0 alone.
    assert config["1"] == {"candidate_steps": [1, 3]} and config["32"] == {"candidate_steps": [0]}
    from backend.sglang.adaptive import problem

    assert problem(config, "0.5.23", proposal.steps) is None and proposal.steps == 3
    rows = {r["concurrency"]: r for r in proposal.expected}
    assert rows[1]["steps"] == [3] and rows[1]["tok_s"] == 95.0 and rows[1]["basis"] == "measured"
    assert rows[8]["steps"] == [3] and rows[8]["tok_s"] == 70.0
    assert rows[32]["steps"] == [0] and rows[32]["tok_s"] == 40.0 and rows[32]["basis"] == "baseline"
    assert all(r["tok_s_low"] <= r["tok_s"] <= r["tok_s_high"] for r in proposal.expected)
    assert proposal.fixed["steps"] == 3  # the best one step count over the same concurrencies
    assert [r["tok_s"] for r in proposal.fixed["expected"]] == [95.0, 70.0, 28.0]
    # Before 0.5.14 there is no tier 0: the 32-stream slot keeps drafting, at its cheapest.
    old = adaptive_proposal.propose_adaptive(history.runs(), yardstick, version="0.5.13", max_steps=5)
    assert 0 not in {s for slot in old.config.values() for s in slot["candidate_steps"]}
    assert any("no tier 0" in n for n in old.notes)


def test_advise_adaptive_cli_json_contract(tmp_path):
    path = tmp_path / "cli.sqlite3"
    env = {"SPECDECK_HISTORY": str(path)}
    with History.open(path) as h:
        add_benched_run(h, 1, 3, 33.0, 100.0, [5, 10, 20, 65])
    out = run_cli("advise", "--adaptive", "--json", env=env, rc=None)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc["adaptive_config"]) == {"1"} and doc["adaptive_config"]["1"]["candidate_steps"][-1] == doc["steps"]
    assert [set(r) >= {"concurrency", "tok_s", "tok_s_low", "tok_s_high"} for r in doc["expected"]] == [True]
    text = run_cli("advise", "--adaptive", env=env, rc=None)
    assert text.returncode == 0 and "adaptive config for" in text.stdout


def test_apply_writes_the_best_and_asks_before_a_slower_point(tmp_path):
    # Issue 32 (and 31's one home): "k steps -> topk 1, draft tokens k+1" and apply-best in advisor.apply, shared by
    # Tune's `a` and `advise --apply`; a point that measured slower than another is applied only when asked.
    import tomllib

    from backend.settings.validation import parse

    records = "".join(json.dumps(bench_record(k)) + "\n" for k in (0, 2, 3, 4, 5, 6, 7))
    config = tmp_path / "config.toml"
    config.write_text('[profiles.aq]\ndrafter = "ours"\nalgorithm = "EAGLE3"\nsteps = 3\ntopk = 1\ndraft_tokens = 4\n')
    out = advise_from(tmp_path, "t1.jsonl", records, "--apply", "aq", "--config", str(config), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["best"]["steps"] == 4 and doc["applied"]["saved"] and doc["applied"]["warning"] is None
    saved = parse(tomllib.loads(config.read_text()), str(config)).profiles["aq"]
    assert (saved.steps, saved.topk, saved.draft_tokens) == (4, 1, 5)
    # 2 steps measured slower than 3-7: without a terminal it is refused, naming --yes; with --yes it is written.
    slower = advise_from(tmp_path, "t1.jsonl", records, "--apply", "aq", "--steps", "2", "--config", str(config))
    assert slower.returncode == 2 and "steps 2 (measured 231.5 tok/s) is slower than" in slower.stderr
    assert "--yes" in slower.stderr
    forced = advise_from(tmp_path, "t1.jsonl", records, "--apply", "aq", "--steps", "2", "--yes", "--config",
                         str(config))  # fmt: skip
    assert forced.returncode == 0 and "applied: aq: steps 2, topk 1, draft tokens 3" in forced.stdout
    # The same rule without the CLI (Tune's `a`): what measured faster, in words.
    advice = advisor.advise_bench(bench_records.load(str(tmp_path / "t1.jsonl")), Yardstick(82.0, 30.0))
    applied = advisor.apply(saved, 2, advice)
    assert applied.faster and applied.warning().startswith("steps 2 (measured 231.5 tok/s) is slower than")
    assert not advisor.apply(saved, 4, advice).warning() and not advisor.apply(saved, 4, advice).changed
    with pytest.raises(UsageError, match="at least 1"):
        advisor.apply(saved, 0, advice)


def test_applying_a_step_count_level_with_the_fastest_asks_nothing():
    # Issue 32: a verdict over a difference too small to matter. 3 steps at 100.0 against 4 at 101.0 (1%) is
    # level (the judge's 2% floor): applying 3 does not say "slower than" nor ask for --yes; 110.0 would.
    import types

    from backend.settings.model import builtin_defaults

    profile = next(p for p in builtin_defaults().profiles.values() if p.algorithm)
    close = types.SimpleNamespace(measured=lambda: {3: 100.0, 4: 101.0})
    assert advisor.apply(profile, 3, close).faster == () and not advisor.apply(profile, 3, close).warning()
    apart = types.SimpleNamespace(measured=lambda: {3: 100.0, 4: 110.0})
    assert advisor.apply(profile, 3, apart).faster == ((4, 110.0),)
