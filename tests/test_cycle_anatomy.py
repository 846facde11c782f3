"""The cycle reader against traces the torch profiler really wrote (tests/fixtures/real/traces/, HOW.md there).

Each trace's ``.figures.json`` holds the profiler's own figures for that run, read through torch's Python API on
the H200 (not from the file): the GPU window, the kernel+copy union busy time, idle, and each stage's union. The
reader must agree with them, tell graph replays from eager launches, and say what a reader must know.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest

from backend.agent.host.shared import chrome_trace, cycle_anatomy
from backend.agent.host.shared.chrome_trace import TraceError
from backend.agent.host.shared.cycle_anatomy import anatomy, span_stage
from tests.simhost import PY38

pytestmark = pytest.mark.e2e

REAL = Path(__file__).parent / "fixtures" / "real"
TRACES = REAL / "traces"
SCENARIOS = sorted(p.name.split(".")[0] for p in TRACES.glob("*.figures.json"))


def trace_of(scenario: str) -> Path:
    (path,) = [p for p in TRACES.glob(f"{scenario}-1*.trace.json.gz")]
    return path


def figures(scenario: str) -> dict:
    return json.loads((TRACES / f"{scenario}.figures.json").read_text())


def close(got: float, want: float, share: float = 0.02, floor_ms: float = 0.002) -> bool:
    return abs(got - want) <= max(share * abs(want), floor_ms)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_busy_idle_and_stages_agree_with_the_profilers_own_figures(scenario):
    fig = figures(scenario)
    got = anatomy([str(trace_of(scenario))])
    totals = got["totals"]
    assert close(totals["window_ms"], fig["gpu_window_first_to_last_device_event_ms"])
    assert close(totals["busy_ms"], fig["gpu_busy_kernels_plus_memcpy_union_ms"])
    assert close(totals["idle_ms"], fig["gpu_idle_in_window_ms"])
    mine = dict(totals["stages_busy_ms"])
    mine["other"] = mine.pop("other", 0.0) + mine.pop("sample", 0.0)  # the figures' other holds eagle_sample
    assert set(mine) == set(fig["stage_gpu_busy_ms"])
    for stage, want in fig["stage_gpu_busy_ms"].items():
        assert close(mine[stage], want), (stage, mine[stage], want)
    # every profiled iteration is a whole cycle, and the cycles tile the window
    assert got["cycles"] == fig["cycles"]
    assert close(got["cycle_ms"] * got["cycles"], totals["window_ms"])
    assert close(got["busy_ms"] * got["cycles"], totals["busy_ms"])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_stages_sum_to_the_cycle_and_say_graph_or_eager(scenario):
    got = anatomy([str(trace_of(scenario))])
    spec = scenario.startswith("spec")
    graph = "-graph-" in scenario
    names = [s["name"] for s in got["stages"]]
    assert names == (list(cycle_anatomy.SPEC_STAGES) if spec else list(cycle_anatomy.DECODE_STAGES))
    assert abs(sum(s["ms"] for s in got["stages"]) - got["cycle_ms"]) <= 0.05 * got["cycle_ms"]
    assert abs(got["idle_ms"] - sum(s["ms"] - s["gpu_busy_ms"] for s in got["stages"])) < 1e-6
    forwards = ("draft", "verify", "draft_extend") if spec else ("decode",)
    for stage in got["stages"]:
        assert 0 <= stage["gpu_busy_ms"] <= stage["ms"] + 1e-9
        if stage["name"] in forwards:
            assert stage["graph"] is graph, stage
        else:
            assert stage["graph"] is False  # sampling and copies are eager in every scenario
    verify = max(got["stages"], key=lambda s: s["ms"])
    assert verify["name"] == ("verify" if spec else "decode")
    draft = got["stages"][0]
    # eager draft forwards are two step[DRAFT] spans (3 steps, topk 1); one graph replay hides its steps
    assert (len(draft["steps_ms"]) if draft["steps_ms"] else None) == (2 if spec and not graph else None)


def test_eager_idle_is_said_to_be_mostly_the_profilers_overhead_and_graph_launch_cost_is_flagged():
    eager = anatomy([str(trace_of("spec-eager-bs1"))])
    assert eager["idle_ms"] > 0.8 * eager["cycle_ms"]
    assert any(
        "profiler's own overhead" in n and "draft and verify and draft_extend ran eager" in n for n in eager["notes"]
    )
    graph = anatomy([str(trace_of("spec-graph-bs1"))])
    assert not any("overhead" in n for n in graph["notes"])
    assert any(n.startswith("cudaGraphLaunch holds the host") and "profiled" in n for n in graph["notes"])
    # the 271-node verify replay holds the host 0.42-0.50 ms with the profiler on (HOW.md's bench)
    verify = next(s for s in graph["stages"] if s["name"] == "verify")
    assert 0.25 < verify["host_launch_ms"] < 0.6


def test_a_baseline_decode_trace_among_the_files_is_the_baseline_step():
    got = anatomy([str(trace_of("spec-graph-bs1")), str(trace_of("decode-graph-bs1"))])
    assert got["kind"] == "spec" and got["trace"].endswith(trace_of("spec-graph-bs1").name)
    base = got["baseline_step"]
    assert [s["name"] for s in base["stages"]] == ["decode", "sample", "other"]
    assert base["cycles"] == 8 and 0.8 < base["cycle_ms"] < got["cycle_ms"]
    assert [r["rank"] for r in got["ranks"]] == ["TP-0"] and got["straggler"] is None


def _rewrite(src: Path, dst: Path, change) -> None:
    header: dict = {}
    kept = [e for e in (change(e) for e in chrome_trace.events(str(src), header)) if e is not None]
    with gzip.open(dst, "wt") as f:
        json.dump({**header, "traceEvents": kept}, f)


def test_graph_replays_that_recorded_fewer_kernels_are_flagged_as_possibly_dropped_records(tmp_path):
    src = trace_of("spec-graph-bs8")
    launches = [e for e in chrome_trace.events(str(src)) if e.get("name") == "cudaGraphLaunch"]
    victim = launches[4]["args"]["correlation"]  # a verify replay (draft, verify, draft_extend per cycle)
    seen = [0]

    def drop_half(event):
        if event.get("cat") == "kernel" and event["args"].get("correlation") == victim:
            seen[0] += 1
            return None if seen[0] % 2 else event
        return event

    out = tmp_path / "dropped-TP-0.trace.json.gz"
    _rewrite(src, out, drop_half)
    got = anatomy([str(out)])
    (short,) = got["dropped"]["replays"]
    assert short["stage"] == "verify" and short["short"] == 1 and short["replays"] == 8
    assert short["events"] < short["usual_events"]
    assert any(n.startswith("possibly dropped records: 1 of 8 verify graph replays") for n in got["notes"])
    assert anatomy([str(src)])["dropped"] is None


def test_a_rank_the_others_wait_for_names_itself(tmp_path):
    src = trace_of("spec-graph-bs1")
    slow, waiting = tmp_path / "p-TP-0.trace.json.gz", tmp_path / "p-TP-1.trace.json.gz"
    _rewrite(src, slow, lambda e: e)

    def as_allreduce(event):  # rank 1's longest kernels become its wait in an all-reduce
        if event.get("cat") == "kernel" and event.get("dur", 0) > 8:
            return {**event, "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"}
        return event

    _rewrite(src, waiting, as_allreduce)
    got = anatomy([str(slow), str(waiting)])
    assert [r["rank"] for r in got["ranks"]] == ["TP-0", "TP-1"]
    assert got["ranks"][1]["collective_ms"] > 0.1 * got["cycle_ms"] and got["ranks"][0]["collective_ms"] == 0
    assert got["straggler"]["rank"] == "TP-0"
    assert any(n.startswith("TP-0 is the straggler: the other ranks wait") for n in got["notes"])


def test_span_names_across_releases_from_real_traces():
    text = (REAL / "profile-29960-cudagraphlaunch-verify.md").read_text()
    assert "step[TARGET_VERIFY ...]" in text  # an older release's name for the verify forward
    assert span_stage("step[TARGET_VERIFY bs=32]") == "verify"
    assert span_stage("step[VERIFY bs=8 g_sq=32 g_sqsq=128 forward_id=3]") == "verify"  # detailed_annotations
    text = (REAL / "profile-32850-draft-extend-span.md").read_text()
    assert "`step[DRAFT_EXTEND_V2 bs=1]`" in text
    assert span_stage("step[DRAFT_EXTEND_V2 bs=1]") == "draft_extend"
    assert span_stage("step[DRAFT bs=4]") == "step_draft"
    assert span_stage("step[EXTEND bs=4 toks=2048]") == "prefill"
    assert span_stage("scheduler.run_batch") is None


@pytest.mark.slow
def test_the_stream_reader_gives_what_json_load_gives_across_any_chunk_edge(monkeypatch):
    path = trace_of("spec-graph-bs1-stack")
    with gzip.open(path, "rt") as f:
        whole = json.load(f)
    for chunk in (1 << 20, 7):
        monkeypatch.setattr(chrome_trace, "CHUNK", chunk)
        header: dict = {}
        assert list(chrome_trace.events(str(path), header)) == whole["traceEvents"]
        assert header == {k: v for k, v in whole.items() if k != "traceEvents"}


@pytest.mark.parametrize(
    "content, says",
    [
        (b"not json at all", "is not a Chrome trace"),
        # mtime=0: the same bytes, so the same test ids, in every xdist worker
        (gzip.compress(b'{"schemaVersion": 1}', mtime=0), "holds no traceEvents"),
        (gzip.compress(b'{"traceEvents": [{"ph": "X"}, {"ph": ', mtime=0)[:-6], "cut short or damaged"),
        (b'{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected ',' or ']'"),
        (b"", "found 'the end'"),
    ],
)
def test_a_file_that_is_not_a_trace_is_one_sentence(tmp_path, content, says):
    path = tmp_path / "x.trace.json.gz"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=says):
        anatomy([str(path)])


def test_no_decode_cycle_says_what_to_profile(tmp_path):
    path = tmp_path / "empty.trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    with pytest.raises(TraceError, match="no whole decode cycle"):
        anatomy([str(path)])
    with pytest.raises(TraceError, match="cannot read"):
        anatomy([str(tmp_path / "missing.trace.json.gz")])


@pytest.mark.skipif(not PY38.exists(), reason="needs the host's oldest Python, 3.8")
def test_the_host_reads_a_trace_with_python_3_8(tmp_path):
    package = tmp_path / "specdeck_host"
    package.mkdir()
    for name in ("__init__.py", "chrome_trace.py", "cycle_anatomy.py"):
        source = Path(cycle_anatomy.__file__).with_name(name)
        (package / name).write_text(source.read_text())
    code = "import json,sys; from specdeck_host import cycle_anatomy as c; print(json.dumps(c.anatomy(sys.argv[1:])))"
    out = subprocess.run(
        [str(PY38), "-c", code, str(trace_of("spec-eager-bs8"))], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json.loads(json.dumps(anatomy([str(trace_of("spec-eager-bs8"))])))
