"""What a profile means, and where it shows: ``specdeck profile --from``, the report, the SIMULATED server's traces.

The real traces (tests/fixtures/real/traces/) are read as an operator who was sent them would; the simulator's
traces must read as SGLang's do, and its verify-as-graph scenario must agree with what the eager one predicts.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from backend.agent.host.shared.cycle_anatomy import SPEC_STAGES
from backend.errors import OperationFailed
from backend.history import History
from backend.measure import anatomy
from backend.report import document, render
from backend.sandbox.sglang_sim import traces
from tests.helpers import run_cli
from tests.runs import add_run
from tests.simhost import log_lines_of, servers

pytestmark = pytest.mark.e2e

TRACES = Path(__file__).parent / "fixtures" / "real" / "traces"
SPEC = {"steps": 3, "draft_tokens": 4, "draft_steps": 3}
COSTS = {"draft_step_ms": 1.5, "eager_factor": 1.6}  # the simulator's DRAFT_STEP_MS and NO_CUDA_GRAPH_FACTOR


def real(scenario: str) -> str:
    (path,) = TRACES.glob(f"{scenario}-1*.trace.json.gz")
    return str(path)


def simulated(tmp_path: Path, name: str, ms: float, spec: dict, graph: bool = True, tp: int = 1, **kw) -> list[str]:
    passes = [(1_800_000_000.0 + i * ms / 1000, ms, 1, graph, spec) for i in range(8)]
    paths = []
    for rank in range(tp):
        path = tmp_path / f"{name}-TP-{rank}.trace.json.gz"
        traces.write_trace(str(path), passes, rank, tp, kw.get("version", "0.5.23"), kw.get("current", True), COSTS)
        paths.append(str(path))
    return paths


def test_the_simulated_eager_verify_predicts_the_simulated_graph_verify(tmp_path, monkeypatch):
    # the operator's setup: 33 ms cycles at 3 steps, verify eager (FIELD-NOTES §1)
    eager = anatomy.read_traces(simulated(tmp_path, "eager", 33.0, SPEC))
    assert eager.simulated and eager.notes[0].startswith("SIMULATED")
    assert abs(eager.cycle_ms - 33.0) < 0.05
    verify = eager.stage("verify")
    assert verify.graph is False and eager.stage("draft").graph and eager.stage("draft_extend").graph
    found = anatomy.findings(eager, 82.0, "0.5.23")
    assert found[0].text.startswith("verify dominates: 26.00 of 33.00 ms a cycle (79%), eager launches")
    what_if = next(f for f in found if f.stage == "verify" and f.new_cycle_ms)
    assert what_if.break_even == pytest.approx(33.0 * 82 / 1000, abs=0.01)
    assert "--cuda-graph-max-bs-decode" in what_if.text and "FIELD-NOTES" in what_if.source
    # the same server with verify replayed as a graph: the cycle the what-if named
    monkeypatch.setenv(traces.VERIFY_ENV, "graph")
    saved = traces.verify_graph_saving(33.0, SPEC, True, COSTS["draft_step_ms"], COSTS["eager_factor"])
    graph = anatomy.read_traces(simulated(tmp_path, "graph", 33.0 - saved, SPEC))
    assert graph.stage("verify").graph is True
    assert graph.cycle_ms == pytest.approx(what_if.new_cycle_ms, rel=0.01)
    assert not any(f.stage == "verify" and f.new_cycle_ms for f in anatomy.findings(graph, 82.0))


def test_simulated_traces_per_release_and_rank(tmp_path):
    old = anatomy.read_traces(simulated(tmp_path, "old", 33.0, SPEC, version="0.5.6", current=False))
    assert [s.name for s in old.stages] == list(SPEC_STAGES) and abs(old.cycle_ms - 33.0) < 0.05
    doc = json.loads(gzip.decompress(Path(old.trace).read_bytes()))
    names = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"}
    assert "step[TARGET_VERIFY bs=1]" in names and "step[VERIFY bs=1]" not in names
    assert doc["specdeck_simulated"].startswith("SIMULATED SGLang 0.5.6-sim")
    off = anatomy.read_traces(simulated(tmp_path, "nograph", 33.0 * 1.6, SPEC, graph=False))
    assert {s.graph for s in off.stages if s.name != "sample"} == {False}
    assert off.stage("draft").steps_ms is not None and len(off.stage("draft").steps_ms) == 3
    tp = anatomy.read_traces(simulated(tmp_path, "tp", 33.0, SPEC, tp=2))
    assert [r["rank"] for r in tp.ranks] == ["TP-0", "TP-1"] and tp.straggler is None
    assert all(r["collective_ms"] > 0 for r in tp.ranks)


def test_profile_from_saved_traces_prints_the_contract(tmp_path):
    out = run_cli("profile", "--from", real("spec-graph-bs8"), real("decode-graph-bs8"), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert {"cycles", "cycle_ms", "stages", "idle_ms", "baseline_step", "trace"} <= set(got)
    assert got["cycles"] == 8 and got["trace"] == real("spec-graph-bs8")
    assert [s["name"] for s in got["stages"]] == list(SPEC_STAGES)
    for stage in got["stages"]:
        assert {"name", "ms", "gpu_busy_ms", "graph"} <= set(stage) and stage["graph"] in (True, False, None)
    assert abs(sum(s["ms"] for s in got["stages"]) - got["cycle_ms"]) <= 0.05 * got["cycle_ms"]
    assert [s["name"] for s in got["baseline_step"]["stages"]] == ["decode", "sample", "other"]
    assert got["findings"][0]["text"].startswith("verify dominates")

    text = run_cli("profile", "--from", real("spec-eager-bs1"))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("8 cycles of 16.21 ms")
    assert re.match(r"verify\s+9\.13\s+56%\s+0\.97\s+8\.16\s+eager$", lines[3])  # no baseline: no column
    assert any(line.startswith("- verify as a CUDA graph") for line in lines)
    assert any("profiler's own overhead" in line for line in lines if line.startswith("note:"))


def test_profile_of_something_else_is_one_sentence(tmp_path):
    bad = tmp_path / "notes.trace.json.gz"
    bad.write_text("{}")
    out = run_cli("profile", "--from", str(bad), rc=None)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == f"specdeck: {bad} holds no traceEvents: not a torch-profiler trace."
    out = run_cli("profile", "--steps", "1", "--host", "local", rc=None)
    assert out.returncode == 2 and "--steps must be a whole number of at least 2" in out.stderr


def test_start_body_per_release():
    new = anatomy.start_body("0.5.23-sim", 8)
    assert new == {
        "num_steps": 8,
        "activities": ["CPU", "GPU"],
        "with_stack": False,
        "record_shapes": False,
        "profile_by_stage": True,
    }
    assert "profile_by_stage" not in anatomy.start_body("0.5.6", 8)
    assert anatomy.parse_ranks("3,0,3") == (0, 3) and anatomy.parse_ranks(None) is None
    with pytest.raises(Exception, match="--ranks takes TP ranks"):
        anatomy.parse_ranks("x")


def test_the_report_shows_a_kept_profile(tmp_path):
    a = anatomy.read_traces([real("spec-graph-bs8"), real("decode-graph-bs8")])
    with History.open(tmp_path / "h.sqlite3") as history:
        run = add_run(history, {"target": "/t", "ours": "/d"}, "serve-1", "ours", 60.0, 2.0)
        history.set_anatomy(run, a.to_json())
        summary = history.run(run)
        assert anatomy.CycleAnatomy.from_json(summary.anatomy) == a
        blocks = document.anatomy_blocks([summary], 82.0)
    md = render.to_markdown(blocks)
    assert "## Where a cycle's time goes (SGLang's own profiler)" in md
    assert "| verify | 1.27 | 63% | 1.10 | 0.17 | graph | 1.08 |" in md
    assert "baseline |" in md and "speculation adds 0.91 ms" in md
    assert document.anatomy_blocks([replace(summary, anatomy=None)], 82.0) == []


def test_a_kept_baseline_profile_is_the_baseline_step_of_a_later_one():
    spec = anatomy.read_traces([real("spec-graph-bs8")])
    assert anatomy.with_kept_baseline(spec, "box") is spec  # nothing kept yet
    with History.open() as history:
        base = add_run(history, {"target": "/t", "ours": "/d"}, "serve-1", None, 82.0, None)
        spec_run = add_run(history, {"target": "/t", "ours": "/d"}, "serve-2", "ours", 60.0, 2.0)
        history.set_anatomy(spec_run, spec.to_json())  # a speculating server's profile is never a baseline
    assert anatomy.with_kept_baseline(spec, "local") is spec
    assert anatomy.keep(base, anatomy.read_traces([real("decode-graph-bs8")])) is None
    got = anatomy.with_kept_baseline(spec, "local")
    assert got.baseline is not None and got.baseline.stage("decode").graph is True
    assert got.notes[-1].startswith(f"the baseline step is run {base}'s kept profile")
    assert got.to_json()["baseline_step"]["cycles"] == 8
    assert anatomy.with_kept_baseline(spec, "elsewhere") is spec


def test_the_bar_keeps_its_length_proportional():
    a = anatomy.read_traces([real("spec-eager-bs8"), real("decode-eager-bs8")])
    cells = anatomy.bar_cells(a.stages, 100, a.cycle_ms)
    assert sum(b + i for _, b, i in cells) == 100
    base = anatomy.bar_cells(a.baseline.stages, 100, a.cycle_ms)
    assert sum(b + i for _, b, i in base) == round(100 * a.baseline.cycle_ms / a.cycle_ms)
    verify = dict((n, (b, i)) for n, b, i in cells)["verify"]
    assert verify[1] > verify[0]  # eager verify: idle (launch gaps under the profiler) outweighs busy


# --- end to end: SGLang's (SIMULATED) profiler on a running server, the traces read on the host -----------------


@pytest.mark.slow
async def test_profile_a_running_server_reads_its_traces_on_the_host(sim_host, models):
    async with servers(sim_host, models, "eagle3-ours", "baseline") as (conn, jobs):
        plan = anatomy.ProfilePlan(steps=4)
        seen: list[dict] = []
        spec = await anatomy.capture(conn, jobs["eagle3-ours"], plan, seen.append)
        base = await anatomy.capture(conn, jobs["baseline"], replace(plan, ranks=(0, 7)), seen.append)
    assert spec.simulated and spec.speculative and spec.cycles >= 2
    # the simulator's own 24 + 3k ms at 3 steps (a late scheduler beside a CPU hog leaves the GPU waiting: "other")
    assert spec.stage("verify").ms == pytest.approx(26.0, rel=0.01) and spec.cycle_ms >= 33.0 * 0.99
    assert spec.stage("verify").graph is False and spec.stage("draft").graph is True
    assert len(spec.ranks) == 8 and spec.straggler is None  # --tp-size 8: a trace per rank, read on the host
    trace_dir = Path(spec.trace).parent
    assert trace_dir.parent == Path(sim_host.workdir) / "traces"
    dialect = sim_host.sglang_version
    suffix = "-DECODE" if dialect == "0.5.23" else ""
    assert sorted(p.name for p in trace_dir.iterdir())[0].endswith(f"-TP-0{suffix}.trace.json.gz")
    assert [s.name for s in base.stages] == ["decode", "sample", "other"] and len(base.ranks) == 2
    assert base.stage("decode").ms == pytest.approx(1000 / 82 - 0.8, rel=0.01) and base.cycle_ms >= 1000 / 82 * 0.99
    stages = [e.get("stage") for e in seen]
    assert "profiling" in stages and "reading" in stages
    # the server's own words, as its release logs them
    log = log_lines_of(jobs["eagle3-ours"])
    assert any("Profiling done. Traces are saved to: " + str(trace_dir) in line for line in log)


@pytest.mark.slow
async def test_profile_says_why_when_the_server_cannot_be_profiled(sim_host, models):
    async with servers(sim_host, models, "eagle3-ours") as (conn, jobs):
        job = jobs["eagle3-ours"]
        started = await conn.call("http.request", url=f"http://127.0.0.1:{job.port}/start_profile", json={})
        assert started["status"] == 200 and started["text"] == "Start profiling.\n"
        with pytest.raises(OperationFailed, match="Profiling is already in progress"):
            await anatomy.capture(conn, job, anatomy.ProfilePlan(steps=2, load=0, timeout_s=30))
        stopped = await conn.call("http.request", url=f"http://127.0.0.1:{job.port}/stop_profile", json={})
        assert stopped["status"] == 200
        with pytest.raises(OperationFailed, match="was the server decoding"):
            await anatomy.capture(conn, job, anatomy.ProfilePlan(steps=2, load=0, timeout_s=2))


def test_what_speculation_adds_to_a_step_read_off_fastrl_7():
    # mit-han-lab/fastrl #7 (H20, Qwen2.5-7B, TP 2): forward time with and without speculation per batch size
    text = (Path(__file__).parent / "fixtures" / "real" / "profile-fastrl-7-forward-time.md").read_text()
    rows = re.findall(r"\|\s*(\d+)(?:<br />)?\s*\|\s*([\d.]+)\s*s\s*\|\s*([\d.]+)\s*s\s*\|", text)
    assert [r[0] for r in rows] == ["1", "6", "12"] and rows[0] == ("1", "0.00845", "0.0039")
    for _, with_sd, without in rows:
        cycle, step = float(with_sd) * 1000, float(without) * 1000
        spec = anatomy.CycleAnatomy(1, cycle, (anatomy.StageTime("verify", cycle, cycle, True),), 0.0, "")
        base = anatomy.CycleAnatomy(1, step, (anatomy.StageTime("decode", step, step, True),), 0.0, "")
        found = anatomy.findings(replace(spec, baseline=base), 1000 / step)
        added = found[-1]
        assert added.text.startswith(f"speculation adds {cycle - step:.2f} ms to a plain decode step of {step:.2f} ms")
        # the accept length a drafter must beat: the cycle over the step it replaces (2.17 at batch 1)
        assert added.break_even == pytest.approx(cycle / step)
