"""Run history: crash safety, imports from a real (simulated) server job, reports, export, CLI and the History tab."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import DataTable, Static

from backend.connection import Connection
from backend.history import History, LiveRecorder, filter_tail, parse_server_args, primed_filter, sync_from_host
from backend.jobs import JobInfo
from backend.measure import judge
from backend.measure.metrics import Sample, live_samples, parse_lines
from backend.report.cells import break_even_cell
from backend.report.charts import Chart, svg_chart, text_chart
from backend.settings.model import HostConfig, builtin_defaults
from tests.helpers import dialog_input, run_cli, until
from tests.runs import T0, add_run
from tests.sshd import free_port
from tests.test_layouts import column_shown
from tui.app import SpecdeckApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.history import HistoryPane
from tui.widgets.runchart import RunChart

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]


# --- storage ----------------------------------------------------------------------------------------------

WRITER = """
import sys, time
from backend.history import History, LiveRecorder
from backend.jobs import JobInfo
from backend.measure.metrics import Sample
history = History.open(sys.argv[1])
rec = LiveRecorder(history, "local")
rec.begin(JobInfo("serve-kill", started=0, args={"profile": "p"}))
i = 0
while True:
    for _ in range(50):  # distinct seconds, so every sample is its own row
        rec.add(Sample(ts=1e9 + i, kind="decode", gen_tps=float(i), accept_len=2.0))
        i += 1
    rec.mark(i)
    print("added", i, time.monotonic(), flush=True)
    if rec.flush():
        print("committed", i, time.monotonic(), flush=True)
    time.sleep(0.01)
"""


def test_kill_9_mid_write_loses_at_most_the_last_second(tmp_path):
    db = tmp_path / "h.sqlite3"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], cwd=REPO, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    seen: list[str] = []
    commits = pending = 0
    assert proc.stdout is not None
    for line in proc.stdout:  # another process: read its progress as it goes
        seen.append(line)
        if line.startswith("committed"):
            commits, pending = commits + 1, 0
        elif line.startswith("added") and commits >= 3:
            pending += 1
            if pending == 5:  # land the kill between commits, with batches added since the last one
                break
    os.kill(proc.pid, signal.SIGKILL)
    seen += proc.stdout.read().splitlines()
    proc.wait()
    added = [line.split() for line in seen if line.startswith("added")]
    last_added, killed_at = int(added[-1][1]), float(added[-1][2])
    times = {int(n): float(t) for _, n, t in added}

    check = sqlite3.connect(db)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()
    with History.open(db) as history:
        kept = history.samples("local/serve-kill")
        assert len(kept) >= 150  # three commits of at least 50
        # Every sample added more than a second (plus a commit's time) before the kill is there, in order.
        assert [s["t"] for s in kept] == [int(1e9) + i for i in range(len(kept))]
        lost = [n for n, t in times.items() if n > len(kept)]
        assert all(killed_at - times[n] <= 1.25 for n in lost), (len(kept), last_added)
        assert history.import_state("local/serve-kill")[0] == len(kept)  # the offset moved with the samples
        history.delete(["local/serve-kill"])  # and the file takes writes again
        assert history.runs() == []


def test_downsampling_merges_a_second_split_across_imports(tmp_path):
    with History.open(tmp_path / "h.sqlite3") as history:
        run = history.upsert_run("h", JobInfo("serve-x", started=T0))
        first = [Sample(ts=T0, kind="decode", gen_tps=60.0, accept_len=2.0)]
        second = [Sample(ts=T0 + 0.5, kind="decode", gen_tps=62.0, accept_len=2.2)]
        assert history.import_chunk(run, 0, 10, first, [])
        assert not history.import_chunk(run, 0, 10, first, [])  # already imported: not counted twice
        assert history.import_chunk(run, 10, 20, second, [])
        [row] = history.samples(run)
        assert row["tok_s"] == pytest.approx(61.0) and row["accept_len"] == pytest.approx(2.1)
        assert row["cycle_ms"] == pytest.approx(1000 * 2.1 / 61.0)


def test_filter_tail_resumes_the_live_filter_exactly():
    lines = [
        "[2025-01-01 00:00:00] Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, token usage: 0.00, ",
        "[2025-01-01 00:00:01] Decode batch, #running-req: 1, accept len: 2.00, gen throughput (token/s): 5.00, ",
        "[2025-01-01 00:00:02] Decode batch, #running-req: 1, accept len: 2.00, gen throughput (token/s): 60.0, ",
        "[2025-01-01 00:00:09] Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, token usage: 0.00, ",
        "[2025-01-01 00:00:10] Decode batch, #running-req: 1, accept len: 2.00, gen throughput (token/s): 7.00, ",
        "[2025-01-01 00:00:11] Decode batch, #running-req: 1, accept len: 2.00, gen throughput (token/s): 61.0, ",
        # Under a second later, but nothing was running: the next line's interval counts the idle moment. The
        # prefill after it (one running by then) must not hide that from a filter resumed between them.
        "[2025-01-01 00:00:12] Prefill batch, #new-seq: 1, #new-token: 9, token usage: 0.00, #running-req: 0, ",
        "[2025-01-01 00:00:12] Prefill batch, #new-seq: 1, #new-token: 9, token usage: 0.00, #running-req: 1, ",
        "[2025-01-01 00:00:13] Decode batch, #running-req: 2, accept len: 2.00, gen throughput (token/s): 40.0, ",
        "[2025-01-01 00:00:14] Decode batch, #running-req: 2, accept len: 2.00, gen throughput (token/s): 120.0, ",
    ]
    whole = [s.gen_tps for s in live_samples(lines)]
    assert whole == [None, None, 60.0, None, None, 61.0, None, None, None, 120.0]
    for cut in range(len(lines) + 1):
        head = list(live_samples(lines[:cut]))
        live = primed_filter(filter_tail([], head))
        rest = [live.accept(s).gen_tps for s in parse_lines(lines[cut:])]
        assert [s.gen_tps for s in head] + rest == whole, cut


def test_parse_server_args_reads_literals_and_skips_the_rest():
    line = "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='/m', tp_size=8, x=<Enum.A: 1>)"
    assert parse_server_args(line) is None  # not Python syntax at all: nothing rather than a guess
    line = "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='/m', tp_size=8, fn=print, ids=[2, 30])"
    assert parse_server_args(line) == {"model_path": "/m", "tp_size": 8, "ids": [2, 30]}
    assert parse_server_args("Decode batch, accept len: 2.0") is None
    assert parse_server_args("server_args=ServerArgs(tp_size=8, **{'a': 1})") == {"tp_size": 8}


def test_baseline_and_yardstick(three_runs):
    with History.open() as history:
        assert history.measured_baseline() is None
        assert history.yardstick(82.0, 30.0).break_even == pytest.approx(2.46)
        history.set_baseline(three_runs["baseline"])
        assert history.measured_baseline() == pytest.approx(82.0)
        y = history.yardstick(82.0, 30.0)
        assert y.baseline_run == three_runs["baseline"] and y.break_even == pytest.approx(2.46)
        runs = {r.id: r for r in history.runs()}
        ours, aq, base = runs[three_runs["ours"]], runs[three_runs["aq"]], runs[three_runs["baseline"]]
        assert judge.run_versus(ours, y).pct == pytest.approx(100 * (60.6 / 82 - 1))
        assert judge.break_even_met(ours, y) is False and judge.break_even_met(aq, y) is True
        assert judge.break_even_met(base, y) is None
        history.delete([three_runs["baseline"]])
        assert history.measured_baseline() is None  # back to the configured figure
        with pytest.raises(Exception, match="no run"):
            history.set_baseline("local/nope")


def test_a_baseline_at_concurrency_2_is_judged_per_stream_not_as_a_doubling(models, tmp_path):
    with History.open(tmp_path / "h.sqlite3") as history:
        run_id = add_run(history, models, "serve-c2", None, 80.25, None, streams=2)  # SGLang logs ≈ 160.5 tok/s
        run = history.run(run_id)
        assert run.total_tok_s == pytest.approx(160.5) and run.tok_s == pytest.approx(80.25)
        assert run.streams == 2 and run.concurrency_text() == "2"
        versus = judge.run_versus(run, history.yardstick(82.0, 30.0))
        assert versus.streams is None and "single-stream baseline (configured)" in versus.basis
        assert versus.pct == pytest.approx(-2.1, abs=0.1) and versus.cell() == "-2.1% /stream"  # not +95.7%


def test_a_measured_baseline_is_the_yardstick_at_its_own_concurrency(models, tmp_path):
    with History.open(tmp_path / "h.sqlite3") as history:
        base = history.upsert_run("local", JobInfo("serve-base", state="done", started=T0))
        # One stream for 10 s, then two streams for 10 s, an idle line and a second merging both.
        samples = [Sample(T0 + i, "decode", gen_tps=82.0, running_req=1) for i in range(10)]
        samples += [Sample(T0 + 10 + i, "decode", gen_tps=157.0, running_req=2) for i in range(10)]
        samples += [Sample(T0 + 20, "decode", gen_tps=0.5, running_req=0)]
        assert history.import_chunk(base, 0, 10, samples, [])
        history.set_baseline(base)
        y = history.yardstick(85.0, 30.0)
        assert y.measured and y.baseline_tok_s == pytest.approx(82.0)
        assert y.by_streams == pytest.approx({1: 82.0, 2: 78.5}) and judge.baseline_at(y, 2) == (pytest.approx(78.5), 2)
        assert judge.baseline_at(y, 4) == (82, None)
        assert [lv.streams for lv in history.run(base).levels] == [1, 2]  # the idle second is no level
        assert history.run(base).concurrency_text() == "1 (50%) 2 (50%)"
        aq = history.run(add_run(history, models, "serve-aq2", "aq-medai", 91.0, 3.3, streams=2))
        versus = judge.run_versus(aq, y)
        assert versus.streams == 2 and versus.pct == pytest.approx(100 * (91 / 78.5 - 1))
        assert versus.cell().endswith("@2")
        assert judge.run_live_break_even(aq, y) == pytest.approx(aq.cycle_ms * 78.5 / 1000)
        four = history.run(add_run(history, models, "serve-aq4", "aq-medai", 77.5, 3.3, streams=4))
        four_vs = judge.run_versus(four, y)
        assert four_vs.streams is None and four_vs.pct == pytest.approx(100 * (77.5 / 82 - 1))
        # Break-even at the same batch: its own cycle there × the baseline per stream there (else single-stream).
        line = judge.run_break_even_line(aq, y)
        assert line == pytest.approx(aq.cycle_ms * 78.5 / 1000) and line > y.break_even
        assert judge.run_break_even_line(four, y) == pytest.approx(four.cycle_ms * 82.0 / 1000)
        assert break_even_cell(aq, y).endswith(f" of {judge.run_break_even_line(aq, y):.2f} @2)")
        doc = y.to_json()
        assert doc["baseline_by_streams"] == {"1": 82.0, "2": 78.5} and doc["baseline_source"] == "measured"
        # Like with like: runs (log figures) against the baseline's log at 2 streams, benches against its bench.
        result = {"server_job": "serve-base", "tok_s": 80.0, "concurrency": 2, "ended": T0 + 60}
        history.record_bench("local", JobInfo("bench-base2", state="done"), result)
        y = history.yardstick(85.0, 30.0)
        assert y.bench_by_streams == {2: 80.0} and judge.measured_at(y, 2) == pytest.approx(78.5)
        assert judge.run_versus(aq, y).pct == pytest.approx(100 * (91 / 78.5 - 1))
        assert judge.versus(y, 84.0, 2, bench=True).pct == pytest.approx(5.0)
        assert judge.versus(y, 84.0, 2, bench=True).streams == 2
        # A baseline run benched only at 4 streams (its log not imported yet) keeps the configured single stream.
        only = history.upsert_run("local", JobInfo("serve-b4", started=T0))
        bench4 = {"server_job": "serve-b4", "tok_s": 73.0, "concurrency": 4, "ended": T0 + 80}
        history.record_bench("local", JobInfo("bench-b4", state="done"), bench4)
        history.set_baseline(only)
        y = history.yardstick(82.0, 30.0)
        assert not y.measured and y.baseline_tok_s == 82.0 and judge.baseline_at(y, 4)[0] == 73.0
        assert history.measured_baseline() is None
        assert y.source == f"configured; run {only} measured 4 streams only"


def test_a_schema_1_database_is_migrated_in_place(tmp_path):
    db_path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(db_path)
    old.executescript(
        """CREATE TABLE runs (id TEXT PRIMARY KEY, host TEXT NOT NULL, job_id TEXT NOT NULL, profile TEXT,
               args TEXT NOT NULL DEFAULT '{}', argv TEXT NOT NULL DEFAULT '[]', server_info TEXT, version TEXT,
               drafter_name TEXT, drafter_path TEXT, drafter_size INTEGER, drafter_sha256 TEXT, drafter_checked REAL,
               started REAL, stopped REAL, state TEXT, outcome TEXT, reason TEXT,
               is_baseline INTEGER NOT NULL DEFAULT 0, log_offset INTEGER NOT NULL DEFAULT 0,
               filter_tail TEXT NOT NULL DEFAULT '[]', updated REAL);
           CREATE TABLE samples (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, t INTEGER NOT NULL,
               tok_sum REAL NOT NULL DEFAULT 0, tok_n INTEGER NOT NULL DEFAULT 0, acc_sum REAL NOT NULL DEFAULT 0,
               acc_n INTEGER NOT NULL DEFAULT 0, accept_rate REAL, running_req REAL, queue_req REAL,
               token_usage REAL, PRIMARY KEY (run, t)) WITHOUT ROWID;
           INSERT INTO runs (id, host, job_id) VALUES ('h/serve-1', 'h', 'serve-1');
           INSERT INTO samples (run, t, tok_sum, tok_n, running_req) VALUES ('h/serve-1', 1, 320.0, 2, 2),
               ('h/serve-1', 2, 1.0, 1, 0);
           PRAGMA user_version=1;"""
    )
    old.close()
    with History.open(db_path) as history:
        run = history.run("h/serve-1")
        assert run.tok_s == pytest.approx(80.0) and run.total_tok_s == pytest.approx(160.0) and run.streams == 2
    with History.open(db_path) as again:  # opening a migrated database changes nothing
        assert again.run("h/serve-1").tok_s == pytest.approx(80.0)
        assert again.db.execute("PRAGMA user_version").fetchone()[0] >= 2
        # Schema 4: a run keeps its server's latency figures; a migrated run has none until read.
        assert again.run("h/serve-1").latency is None
        figures = {"ttft_ms": {"p50": 212.0, "p95": 380.0, "over_last_bucket": [], "count": 12.0}}
        again.set_latency("h/serve-1", figures)
        assert again.run("h/serve-1").latency == figures
        again.set_latency("h/nothing", figures)  # a run the history lacks: nothing written, nothing raised


# --- sync from a real host job ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_sync_from_host_imports_a_simulator_run_and_its_bench(tmp_path, models):
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "hostwork"))
    conn = await Connection.open(host)
    port = free_port()
    argv = [sys.executable, "-m", "backend.sandbox.sglang_sim", "--model-path", models["target"], "--tp-size", "8",
            "--host", "127.0.0.1", "--port", str(port), "--enable-metrics", "--decode-log-interval", "5",
            "--random-seed", "7", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", models["aq-medai"], "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]  # fmt: skip
    args = {"profile": "eagle3-aq", "port": port, "drafter": "aq-medai", "algorithm": "EAGLE3", "steps": 3}
    job = await conn.call(
        "jobs.start", kind="serve", argv=argv, args=args, env={"SPECDECK_SIM_TIME_SCALE": "0.05"}, cwd=str(REPO)
    )
    history = History.open()
    try:
        deadline = time.monotonic() + 60  # another process, on a loaded machine: poll with short waits
        while (await conn.call("http.request", url=f"http://127.0.0.1:{port}/health")).get("status") != 200:
            assert time.monotonic() < deadline, "the server's /health"
            await asyncio.sleep(0.02)
        bench = await conn.call(
            "bench.start", port=port, requests=2, max_tokens=160, concurrency=1, profile="eagle3-aq",
            server_job=job["id"],
        )  # fmt: skip

        async def busy() -> bool:
            return (await conn.call("jobs.get", id=bench["id"]))["state"] == "running"

        syncs = 0
        while await busy():
            await sync_from_host(history, conn)  # mid-run imports: each resumes where the last stopped
            syncs += 1
            await asyncio.sleep(0.15)
        await conn.call("jobs.cancel", id=job["id"])
        final = await sync_from_host(history, conn)
        again = await sync_from_host(history, conn)
        assert syncs >= 3 and final.runs == 1 and again.samples == 0 and again.benches == 0

        run_id = f"local/{job['id']}"
        run = history.run(run_id)
        assert run.profile == "eagle3-aq" and run.drafter == "aq-medai" and run.drafter_path == models["aq-medai"]
        assert run.outcome == "stopped" and run.argv == argv and run.version == "0.5.23-sim"
        assert run.server_info["speculative_num_steps"] == 3 and run.server_info["tp_size"] == 8
        rated = [row for row in history.samples(run_id) if row["accept_rate"] is not None]
        assert rated and {row["accept_rate_definition"] for row in rated} == {"drafts"}  # 0.5.23's rate
        assert run.drafter_size == os.path.getsize(Path(models["aq-medai"]) / "model.safetensors") + os.path.getsize(
            Path(models["aq-medai"]) / "config.json"
        )
        assert run.tok_s > 82 and run.accept_len > 2.46  # aq-medai beats the baseline in the simulator
        assert run.bench is not None and run.bench["tok_s"] > 82 and run.bench["run"] == run_id
        acceptance = run.bench["acceptance"]  # the per-position acceptance is kept with the bench
        assert len(acceptance["histogram"]) == 4 and len(acceptance["per_position"]) == 3
        assert len(history.benches(run_id)) == 1 and history.benches(standalone=True) == []

        # The incremental imports add up to one import of the whole log, idle-time throughput left out.
        log = Path((await conn.call("jobs.get", id=job["id"]))["log_path"]).read_text().splitlines()
        expected = [s for s in live_samples(log) if s.kind == "decode"]
        row = history.db.execute(
            "SELECT sum(tok_n), sum(acc_n), sum(tok_sum) FROM samples WHERE run = ?", (run_id,)
        ).fetchone()
        assert row[0] == sum(1 for s in expected if s.gen_tps is not None)
        assert row[1] == len(expected)
        assert row[2] == pytest.approx(sum(s.gen_tps for s in expected if s.gen_tps is not None))
    finally:
        history.close()
        await conn.close()


def test_live_recorder_commits_at_most_once_a_second(tmp_path):
    with History.open(tmp_path / "h.sqlite3") as history:
        rec = LiveRecorder(history, "h")
        run = rec.begin(JobInfo("serve-live", started=T0))
        t0 = time.monotonic()
        i = 0
        # A second and a half of samples, and on until one commit (a starved loop may skip the first second).
        while time.monotonic() < t0 + 1.5 or not rec.commits:
            rec.add(Sample(ts=T0 + i / 10, kind="decode", gen_tps=80.0, accept_len=1.0))
            i += 1
            rec.mark(i)
            rec.flush()
            time.sleep(0.005)
        assert 1 <= rec.commits <= 1 + (time.monotonic() - t0) / rec.every_s  # at most once a second
        rec.end(JobInfo("serve-live", state="done", started=T0, ended=T0 + 9))
        assert history.import_state(run)[0] == i
        summary = history.run(run)
        assert summary.outcome == "stopped" and summary.samples == len({int(i / 10) for i in range(i)})


def test_an_offset_alone_waits_for_a_sample_or_the_end(tmp_path):
    """Another monitor's polls put an access-log line in the log each second: the offset past lines with no
    sample is not committed on its own (a commit a second for nothing), only with the next sample or the end."""
    with History.open(tmp_path / "h.sqlite3") as history:
        rec = LiveRecorder(history, "h", every_s=0)
        run = rec.begin(JobInfo("serve-live", started=T0))
        rec.add(Sample(ts=T0, kind="decode", gen_tps=80.0, accept_len=1.0))
        rec.mark(100)
        assert rec.flush() and rec.commits == 1 and rec.idle
        for offset in (200, 300):  # access-log lines alone
            rec.mark(offset)
            assert not rec.flush() and rec.idle
        assert rec.commits == 1 and history.import_state(run)[0] == 100
        rec.end(JobInfo("serve-live", state="done", started=T0, ended=T0 + 9))
        assert history.import_state(run)[0] == 300


# --- reports, export, CLI ---------------------------------------------------------------------------------


def test_a_report_mixing_concurrency_labels_each_run(models, tmp_path):
    with History.open() as history:
        history.set_baseline(add_run(history, models, "serve-b1", None, 82.0, None))
        add_run(history, models, "serve-aq1", "aq-medai", 100.0, 3.3)
        add_run(history, models, "serve-aq4", "aq-medai", 77.5, 3.3, streams=4)
    out = tmp_path / "mixed.md"
    run_cli("report", "serve-b1", "serve-aq1", "serve-aq4", "--out", str(out), "--no-inspect")
    rows = {line.split(" | ")[0].strip("| ★"): line.split(" | ") for line in out.read_text().splitlines()}
    assert rows["serve-aq1"][4] == "1" and rows["serve-aq1"][9] == "+22.0% @1"  # measured at 1 stream
    assert rows["serve-aq4"][4] == "4" and rows["serve-aq4"][9] == "-5.5% /stream"  # no baseline measured at 4
    assert rows["serve-aq4"][6] == "310.0"  # the aggregate, labelled as such, never compared with 82


@pytest.mark.parametrize("suffix, charts", [("md", "interactive"), ("html", "interactive"), ("html", "static")])
def test_report_holds_the_numbers_of_its_runs(three_runs, tmp_path, suffix, charts):
    out = tmp_path / f"report.{suffix}"
    run_cli("report", "serve-1", "serve-2", "serve-3", "--out", str(out), "--host", "local", "--charts", charts)
    text = out.read_text()
    for tok, acc in (("82.0", None), ("60.6", "2.00"), ("100.0", "3.30")):
        assert f"{tok}" in text
        if acc:
            assert acc in text
    assert "−26.1%" in text or "-26.1%" in text  # ours vs the 82 tok/s baseline
    assert "+22.0% /stream" in text and "not met (-0.46 ±0.00)" in text and "met (+0.84 ±0.00)" in text
    assert "tok/s per stream" in text and "@N compares" in text
    assert "cycle ms" in text and "33.0" in text  # 1000 × 2.0 / 60.6
    assert "break-even 2.46" in text and "baseline 82.0 tok/s" in text  # labelled reference lines
    assert "--speculative-draft-model-path" in text  # the exact launch commands
    assert "ours vs aq-medai" in text and "compatible" in text and "1.19 B" in text  # the drafter diff
    if charts == "static":
        assert "<script" not in text and text.count("<svg") == 2
        assert text.count('class="ref"') == 2 and text.count('class="run"') >= 4
    elif suffix == "html":
        assert text.count('<div id="chart-') == 2 and text.count('"dash":"dash"') == 2  # a run per line, refs dashed
    else:
        assert text.count("```text") == 2


def test_report_without_the_host_says_so(three_runs, tmp_path):
    out = tmp_path / "r.md"
    run_cli("report", "serve-2", "--out", str(out), "--no-inspect")
    assert "the host was not asked" in out.read_text()
    res = run_cli("report", "serve-2", "--out", str(tmp_path / "r.pdf"), rc=2)
    assert ".md" in res.stderr and ".html" in res.stderr
    res = run_cli("report", "serve-", "--out", str(out), rc=2)
    assert "matches 3 runs" in res.stderr


def test_export_csv_and_json(three_runs, tmp_path):
    rows = list(csv.DictReader(io.StringIO(run_cli("export", "serve-3-aq", "--csv").stdout)))
    assert len(rows) == 30 and float(rows[1]["tok_s"]) == 100.0 and float(rows[0]["accept_len"]) == 3.3
    assert float(rows[0]["cycle_ms"]) == pytest.approx(1000 * 3.3 / 99.0)
    out = tmp_path / "x.json"
    run_cli("export", "local/serve-2-ours", "--json", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["run"]["profile"] == "eagle3-ours" and doc["run"]["break_even_met"] is False
    assert len(doc["samples"]) == 30 and doc["benches"] == []
    assert run_cli("export", "nope", "--csv", rc=2).stderr.startswith("specdeck: no run matches")


def test_history_cli_lists_marks_and_deletes(three_runs):
    doc = json.loads(run_cli("history", "--json").stdout)
    assert doc["yardstick"]["baseline_source"] == "configured" and doc["yardstick"]["break_even_accept_len"] == 2.46
    by_profile = {r["profile"]: r for r in doc["runs"]}
    assert by_profile["eagle3-aq"]["vs_baseline_pct"] == pytest.approx(21.95, abs=0.01)
    assert by_profile["eagle3-aq"]["vs_baseline_streams"] is None and by_profile["eagle3-aq"]["streams"] == 1
    assert "per stream" in by_profile["eagle3-aq"]["vs_baseline_basis"]
    assert by_profile["eagle3-aq"]["levels"] == [{"streams": 1, "seconds": 30, "tok_s": 100.0, "total_tok_s": 100.0}]
    assert by_profile["eagle3-ours"]["break_even_met"] is False and by_profile["baseline"]["break_even_met"] is None
    text = run_cli("history").stdout
    assert "baseline 82.0 tok/s (configured)" in text and "met (+0.84 ±0.00)" in text
    # Issue 32: History's 2.46 beside Live's measured one: each says the cycle it comes from.
    assert "break-even accept length 2.46 (configured cycle 30 ms)" in text
    assert "measured by run local/serve-1-base" in run_cli("history", "baseline", "serve-1").stdout
    assert json.loads(run_cli("history", "baseline", "--clear", "--json").stdout)["baseline_source"] == "configured"
    assert run_cli("history", "baseline", rc=2).stderr.strip().endswith("or --clear")
    assert "deleted 1 run(s)" in run_cli("history", "delete", "serve-2").stdout
    assert len(json.loads(run_cli("history", "--json").stdout)["runs"]) == 2
    tombstones = json.loads(run_cli("history", "--json", "--deleted").stdout)["deleted"]
    assert [(t["id"], t["kind"]) for t in tombstones] == [("local/serve-2-ours", "run")]


def test_charts_render_as_text_and_svg():
    chart = Chart("tok/s", "tok/s", [("a", [0.0, 1.0, 2.0], [60.0, 61.0, 59.0]), ("b", [0.0, 1.0], [99.0, 101.0])],
                  [(82.0, "baseline 82.0 tok/s")])  # fmt: skip
    text = text_chart(chart, width=60, height=12)
    assert "baseline 82.0 tok/s" in text and "a (o)" in text and "b (x)" in text and "\x1b" not in text
    svg = svg_chart(chart)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "baseline 82.0 tok/s" in svg
    assert "no samples recorded" in svg_chart(Chart("x", "y", []))


# --- the History tab --------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_history_tab_compares_marks_and_deletes(three_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("5")
        pane = app.query_one(HistoryPane)
        table = pane.query_one("#history-runs", DataTable)
        await until(pilot, lambda: table.row_count == 3 and "synced local" in pane.last_sync, "runs and a sync")
        await until(pilot, lambda: app.focused is table, "the runs focused (after the tab's refresh)")

        # Select two runs: the comparison shows both, with the labelled reference lines.
        ids = [str(k.value) for k in table.rows]
        await pilot.press("space", "down", "space")
        await until(pilot, lambda: pane.selected == ids[:2], "two runs selected")
        tok_chart = pane.query_one("#history-tok", RunChart)
        await until(pilot, lambda: tok_chart.chart is not None and len(tok_chart.chart.series) == 2, "two runs charted")
        tok = tok_chart.chart
        accept = pane.query_one("#history-accept", RunChart).chart
        assert tok is not None and accept is not None
        assert len(tok.series) == 2 and tok.refs == [(82.0, "baseline 82.0 tok/s (1 stream)")]
        assert accept.refs[0][1] == "break-even 2.46 (configured cycle 30 ms)"  # Live's measured one says so
        assert pane.query_one("#history-compare", DataTable).row_count == 2

        # Mark the highlighted run as the baseline: the yardstick follows it.
        await pilot.press("b")
        highlighted = pane.current_run()
        await until(pilot, lambda: pane.yardstick.baseline_run == highlighted, "the run marked as the baseline")
        with History.open() as history:
            assert history.baseline_run().id == highlighted
        await pilot.press("b")
        await until(pilot, lambda: pane.yardstick.baseline_run is None, "the baseline unmarked")

        # Delete asks first, naming the highlighted run (not the selection); "n" keeps, "y" deletes that one.
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm dialog")
        assert str(app.screen.query(Static)[1].render()).startswith(f"{highlighted}: ")
        await pilot.press("n")
        assert table.row_count == 3
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm dialog")
        await pilot.press("y")
        await until(pilot, lambda: table.row_count == 2, "the highlighted run deleted")
        assert highlighted not in {str(k.value) for k in table.rows} and highlighted not in pane.selected
        # A sync does not bring it back: its tombstone says it was deleted.
        pane.last_sync = ""
        await pilot.press("s")
        await until(pilot, lambda: pane.last_sync.startswith("synced"), "the next sync", 30)
        assert table.row_count == 2 and highlighted not in {str(k.value) for k in table.rows}

        # Every tab key is a palette command too.
        await pilot.press("ctrl+p")
        await dialog_input(pilot, CommandPalette, "the palette")
        await pilot.press(*"History: ")
        commands = app.screen.query_one(CommandList)
        await until(pilot, lambda: commands.option_count >= 5, "History commands")


@pytest.mark.slow
def test_cli_work_is_in_the_history_without_a_sync(models, tmp_path):
    """`serve start`, `bench`, `serve stop` from the CLI, then `specdeck history`: the run is there, stopped, with
    its samples and its bench, and the run id `bench` printed is what `report` takes."""
    from tests.simhost import specdeck, write_config
    from tests.sshd import free_port

    config = write_config(tmp_path / "config.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()})
    try:
        specdeck(config, "serve", "start", "eagle3-ours", "--wait-ready")
        bench = specdeck(config, "bench", "--requests", "2", "--max-tokens", "64").stdout
        [line] = [line for line in bench.splitlines() if line.startswith("recorded with run ")]
        run_id = line.removeprefix("recorded with run ").split(":")[0]
        # A report right away, the server still running: the bench, the samples so far, the launch numbers.
        [early] = [r for r in json.loads(specdeck(config, "history", "--json").stdout)["runs"] if r["id"] == run_id]
        assert early["outcome"] == "running" and early["samples"] > 0
        report = tmp_path / "early.md"
        specdeck(config, "report", run_id, "--out", str(report), "--no-inspect")
        assert "| 3/1/4 |" in report.read_text() and "0.5.23" in report.read_text()
        specdeck(config, "serve", "stop", "--yes")
    finally:
        specdeck(config, "serve", "stop", "--yes", rc=None)
    doc = json.loads(specdeck(config, "history", "--json").stdout)
    [run] = [r for r in doc["runs"] if r["id"] == run_id]
    assert run["profile"] == "eagle3-ours" and run["outcome"] == "stopped" and run["samples"] > 0
    with History.open() as history:
        [bench_row] = history.benches(run_id)
    assert bench_row["tok_s"] > 0
    out = tmp_path / "r.md"
    specdeck(config, "report", run_id, "--out", str(out), "--no-inspect")
    assert run_id in out.read_text()


@pytest.mark.parametrize("size", [(100, 30), (160, 45)])
@pytest.mark.slow
async def test_history_detail_shows_the_highlighted_runs_latency(three_runs, tmp_path, monkeypatch, size):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    figures = {"itl_ms": {"p50": 11.0, "p95": 35.5, "over_last_bucket": []},
               "ttft_ms": {"p50": 90.0, "p95": 8000.0, "over_last_bucket": ["p95"]}}  # fmt: skip
    with History.open() as history:
        for run in three_runs.values():
            history.set_latency(run, figures)
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        pane = app.query_one(HistoryPane)
        detail = pane.query_one("#history-compare", DataTable)
        await until(pilot, lambda: detail.row_count == 1 and detail.size.width > 0, "the highlighted run's detail")
        # The latency columns are kept at 100x30 too (lower-priority columns drop instead), inside the table.
        headers = [str(c.label) for c in detail.ordered_columns]
        assert headers[0] == "run" and "vs baseline" in headers
        assert column_shown(detail, "ITL p50/p95 ms") and column_shown(detail, "TTFT p95 ms"), headers
        runs = pane.query_one("#history-runs", DataTable)  # the accept length the detail leaves to it, in view
        assert all(
            column_shown(runs, key) for key in ("drafter", "tok/s/stream", "accept", "vs baseline", "break-even")
        )
        row = [str(cell) for cell in detail.get_row_at(0)]
        # No bench: the server's histograms since it started, warm-up and all, marked so.
        assert "11.0 / 35.5 srv" in row and ">8000 srv" in row
        if size[0] < 130:
            assert "samples" not in headers and len(headers) < 15


@pytest.mark.slow
async def test_history_detail_says_where_a_bench_curve_falls_below_the_baselines(three_runs, tmp_path, monkeypatch):
    """The History tab's detail never showed where a drafter's bench curve falls below the baseline's (the
    report's "bench below baseline from"): no priority named it, so it dropped at every width. At 160 columns it
    is in view, the latency columns with it (what gives way: the columns the runs table above already shows)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with History.open() as history:
        for key, curve in (("baseline", {1: 82.0, 4: 75.0}), ("aq", {1: 100.0, 4: 70.0})):
            job = three_runs[key].rsplit("/", 1)[-1]
            for streams, tok_s in curve.items():  # 8 requests each, 1% apart: the fall at 4 (-6.7%) clears
                rates = [{"decode_tok_s": tok_s * (1 + 0.01 * (i % 3 - 1))} for i in range(8)]
                result = {"server_job": job, "tok_s": tok_s, "concurrency": streams, "per_request": rates,
                          "ended": T0 + 100 + streams}  # fmt: skip
                history.record_bench("local", JobInfo(f"bench-{key}-{streams}", state="done"), result)
        history.set_baseline(three_runs["baseline"])
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("5")
        pane = app.query_one(HistoryPane)
        runs = pane.query_one("#history-runs", DataTable)
        await until(pilot, lambda: runs.row_count == 3 and app.focused is runs, "the runs, focused")
        for _ in range(3):
            if pane.current_run() == three_runs["aq"]:
                break
            await pilot.press("down")
        detail = pane.query_one("#history-compare", DataTable)
        column = "bench below baseline from"

        def aq_detail() -> bool:
            return detail.row_count == 1 and str(detail.get_cell_at((0, 0))) == "serve-3-aq"

        await until(pilot, lambda: pane.current_run() == three_runs["aq"] and aq_detail(), "the aq run's detail")
        await until(pilot, lambda: detail.size.width > 0, "the detail drawn")
        assert column_shown(detail, column), [str(c.label) for c in detail.ordered_columns]
        assert column_shown(detail, "ITL p50/p95 ms") and column_shown(detail, "TTFT p95 ms")
        assert str(detail.get_cell_at((0, detail.get_column_index(column)))) == "4"


def test_cli_history_prints_every_level_and_no_markdown():
    """`specdeck history` (issue 33): the streams column names every concurrency the run saw (the first three by
    time dropped a bench's 4-stream share), and the bench curves are an aligned table like the runs above
    them, not a Markdown one."""
    with History.open() as history:
        run = history.upsert_run("local", JobInfo("serve-levels", state="done", started=T0, args={"profile": "p"}))
        seconds = {1: 12, 2: 6, 8: 4, 4: 2}  # the 4-stream share is the smallest
        samples, t = [], T0
        for streams, n in seconds.items():
            for _ in range(n):
                t += 1
                samples.append(Sample(t, "decode", gen_tps=80.0 * streams, accept_len=3.0, running_req=streams))
        assert history.import_chunk(run, 0, 10, samples, [])
        assert history.run(run).concurrency_text() == "1 (50%) 2 (25%) 4 (8%) 8 (17%)"
        for streams, tok in ((1, 95.0), (4, 77.0)):
            result = {"server_job": "serve-levels", "tok_s": tok, "concurrency": streams, "ended": t + streams}
            history.record_bench("local", JobInfo(f"bench-{streams}", state="done"), result)
    out = run_cli("history").stdout
    assert "4 (8%)" in out and "|---|" not in out and "| run |" not in out
    curves = out.split("by concurrency:\n", 1)[1].splitlines()
    assert curves[0].split()[:4] == ["run", "profile", "1", "stream(s)"] and "serve-levels" in curves[1]


@pytest.mark.parametrize("size", [(100, 30), (160, 45)])
@pytest.mark.slow
async def test_sweep_points_in_history_say_their_steps_and_host(tmp_path, monkeypatch, size):
    """A sweep's points are one profile at several steps (issue 33): the runs table's profile cell says each one's
    steps/topk/draft from its launch command, a column which host ran it, at both sizes."""
    from tests.runs import add_benched_run

    with History.open() as history:
        for n, steps in ((1, 2), (2, 4)):
            add_benched_run(history, n, steps, 30.0 + steps, 90.0 + steps, None, sweep="sweep-1")
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        pane = app.query_one(HistoryPane)
        runs = pane.query_one("#history-runs", DataTable)
        await until(pilot, lambda: runs.row_count == 2 and runs.size.width > 0, "the two points")
        assert column_shown(runs, "profile") and column_shown(runs, "host")
        cells = [[str(c) for c in runs.get_row_at(i)] for i in range(2)]
        assert sorted(row[1] for row in cells) == ["eagle3-aq 2/1/?", "eagle3-aq 4/1/?"]
        assert all(row[3] == "box" for row in cells)


def test_a_runs_sglang_version_is_its_launchs_where_its_server_never_answered(tmp_path):
    # Issue 32: the HTML report's sglang column said "—" for every run without /server_info, though the launch
    # knew the release (the host's --help, the simulator's own).
    from backend.report.document import VERSION_UNREAD, runs_table

    with History.open(tmp_path / "h.sqlite3") as history:
        launched = history.upsert_run(
            "local", JobInfo("serve-1", state="done", started=T0, args={"sglang_version": "0.5.23-sim"})
        )
        bare = history.upsert_run("local", JobInfo("serve-2", state="done", started=T0 + 10))
        answered = history.upsert_run("local", JobInfo("serve-3", state="done", args={"sglang_version": "0.5.6"}))
        history.set_server_info(answered, {"version": "0.5.6.post1"})
        runs = [history.run(launched), history.run(bare), history.run(answered)]
    assert [r.version for r in runs] == ["0.5.23-sim", None, "0.5.6.post1"]
    cells = [row[runs_table(runs).headers.index("sglang")] for row in runs_table(runs).rows]
    assert cells == ["0.5.23-sim", VERSION_UNREAD, "0.5.6.post1"] and VERSION_UNREAD.startswith("not read")
