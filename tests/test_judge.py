"""The one judge (backend/measure/judge.py): like with like, verdicts only where an interval clears the line, one
way to write a change, and each mismatch issue 32 found between surfaces reproduced and held."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend.history import History, Yardstick
from backend.history.summary import Level, Rate, RunSummary
from backend.jobs import JobInfo
from backend.measure import judge
from backend.measure.bench import summary_line
from backend.measure.metrics import Sample
from backend.report.cells import run_cells

pytestmark = pytest.mark.e2e

T0 = 1_800_000_000.0


def _run(run_id: str, levels: list[Level], *, algorithm: str | None = "EAGLE3", **kw) -> RunSummary:
    seconds = sum(lv.seconds for lv in levels)
    mean = sum(lv.tok_s * lv.seconds for lv in levels) / seconds if seconds else None
    fields = dict(
        id=run_id, host="local", job_id=run_id.split("/")[-1], profile="eagle3-aq", drafter="aq-medai",
        drafter_path="/m/aq", drafter_size=None, drafter_sha256=None, algorithm=algorithm, started=T0, stopped=None,
        outcome="stopped", reason=None, is_baseline=False, version="0.5.23", argv=[], samples=seconds, tok_s=mean,
        accept_len=3.3 if algorithm else None, cycle_ms=33.0 if algorithm else None,
        levels=tuple(sorted(levels, key=lambda lv: -lv.seconds)),
    )  # fmt: skip
    fields.update(kw)
    return RunSummary(**fields)


# One request's decode rate about its bench's mean, in standard deviations: mean 0, sample sd exactly 1.
_SPREAD = (-1.5, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5)


def _rates(figures: dict[int, float], rel_sd: float = 0.01) -> dict[int, Rate]:
    """Benches of 8 requests at each concurrency whose decode rates spread ``rel_sd`` about each figure."""
    spread = {c: [{"decode_tok_s": v * (1 + rel_sd * z)} for z in _SPREAD] for c, v in figures.items()}
    return {c: Rate.of_bench(v, {"per_request": spread[c]}) for c, v in figures.items()}


def test_a_change_is_written_one_way():
    assert judge.pct_text(12.56) == "+12.6%" and judge.pct_text(-5.44) == "-5.4%"
    # Issue 32: "-0%" on one screen and "+0.0%" on another for the same nothing.
    assert judge.pct_text(-0.04) == judge.pct_text(0.0) == judge.pct_text(0.049) == "0.0%"
    assert judge.pct_text(None) == "—"
    assert judge.at_text(60.0, 8) == "60.0 @8" and judge.at_text(61.8, 1) == "61.8"


def test_ahead_at_every_concurrency_only_where_a_baseline_was_measured():
    # Issue 32: -5.4% and -26.8% per stream at 4 and 8 streams against the one-stream baseline, then "speculation
    # stays ahead of the baseline at every concurrency measured" with no baseline above one stream.
    curve = judge.curve_verdict(_rates({1: 82.0}), _rates({1: 101.0, 2: 95.0, 4: 77.6, 8: 60.0}))
    said = curve.sentence()
    assert curve.judged == (1,) and curve.unjudged == (2, 4, 8) and curve.falls_at is None
    assert "every concurrency" not in said
    assert "no baseline measured at 2, 4, 8 streams: bench the baseline there" in said
    full = judge.curve_verdict(
        _rates({1: 82.0, 2: 80.0, 4: 77.0, 8: 70.0}), _rates({1: 101.0, 2: 95.0, 4: 77.6, 8: 60.0})
    )
    assert full.falls_at == 8 and full.sentence() == (
        "speculation falls below the baseline at 8 concurrent stream(s), ahead at 1, 2, level with it (within 2%) at 4"
    )
    none = judge.curve_verdict({}, _rates({1: 101.0, 2: 95.0}))
    assert none.sentence() == "speculation: no baseline measured at 1, 2 streams: bench the baseline there"


def test_a_bench_is_judged_by_the_baselines_bench_at_its_concurrency():
    # Issue 32: the fleet bench judged 4 streams against the single-stream baseline though baselines at 2 and 4
    # were measured (its line took a float).
    y = Yardstick(82.0, 30.0, "local/serve-base", {1: 82.0}, {1: 81.0, 2: 79.0, 4: 75.0})
    result = {"tok_s": 77.6, "concurrency": 4, "total_tok_s": 310.4, "accept_len": 3.1, "cycle_ms": 40.0,
              "speculative": True, "ttft_ms": 44.0}  # fmt: skip
    judged = judge.bench(result, y)
    assert judged.versus.streams == 4 and judged.versus.baseline == 75.0
    assert judged.break_even == pytest.approx(judge.break_even(40.0, 75.0))
    line = summary_line(result, y)
    assert "(+3.5% vs 75.0, the baseline's bench at 4 stream(s)" in line and f"break-even {40 * 75 / 1000:.2f}" in line
    # A concurrency the baseline never ran at: against the single-stream figure, said so.
    lone = summary_line({**result, "concurrency": 8}, y)
    assert "vs 82.0, the single-stream baseline" in lone
    # The baseline's own bench is the baseline.
    assert "= baseline" in summary_line({**result, "concurrency": 1, "tok_s": 81.0}, y, "local/serve-base")


def test_a_bench_verdict_comes_from_its_requests():
    y = Yardstick(82.0, 30.0)
    steady = [{"decode_tok_s": 100.0 + i % 3, "accept_len": 3.3 + 0.01 * (i % 2)} for i in range(4)]
    result = {"tok_s": 101.0, "concurrency": 1, "accept_len": 3.3, "cycle_ms": 33.0, "speculative": True,
              "per_request": steady}  # fmt: skip
    judged = judge.bench(result, y)
    assert judged.speed.word == "beats" and judged.accept.word == "met" and judged.speed.count == 4
    swinging = [{"decode_tok_s": v, "accept_len": a} for v, a in ((60.0, 2.0), (110.0, 3.6), (70.0, 2.2))]
    judged = judge.bench({**result, "tok_s": 80.0, "per_request": swinging}, y)
    assert judged.speed.word == "within noise" and judged.accept.word == "within noise"
    one = judge.bench({**result, "per_request": steady[:1]}, y)
    assert one.speed.word == "not enough samples" and "not enough requests to judge: 1/2" in one.speed_text()


def test_a_runs_change_is_computed_from_the_figure_beside_it():
    # Issue 32: History's "92.3 tok/s/stream ... +22.1% @1": the percentage used the one-stream seconds (100.1),
    # the figure all of them.
    y = Yardstick(82.0, 30.0, "local/serve-base", {1: 82.0, 4: 70.0})
    run = _run("local/serve-aq", [Level(1, 60, 100.1, 100.1), Level(8, 40, 80.1, 640.8)])
    assert run.tok_s == pytest.approx(92.1, abs=0.1)
    cells = run_cells(run, y)
    versus = judge.run_versus(run, y)
    assert versus.streams == 1 and cells.vs_baseline == "+22.1% @1"
    assert cells.tok_s == "100.1 @1" and versus.value == pytest.approx(100.1)
    # At a level the baseline never ran at, a figure against the single-stream baseline, labelled so.
    busy = _run("local/serve-aq8", [Level(8, 60, 60.0, 480.0)])
    assert run_cells(busy, y).tok_s == "60.0 @8" and run_cells(busy, y).vs_baseline == "-26.8% /stream"


def test_the_baselines_own_row_shows_the_figure_the_baseline_is(tmp_path):
    # Issue 32: "baseline 82.0 (measured by run …)" beside that run's own row at 77.6 (its mean over 1, 2, 4 streams).
    with History.open(tmp_path / "h.sqlite3") as history:
        base = history.upsert_run("local", JobInfo("serve-base", state="done", started=T0))
        samples = [Sample(T0 + i, "decode", gen_tps=82.0, running_req=1) for i in range(20)]
        samples += [Sample(T0 + 20 + i, "decode", gen_tps=4 * 73.2, running_req=4) for i in range(20)]
        assert history.import_chunk(base, 0, 10, samples, [])
        history.set_baseline(base)
        y = history.yardstick(82.0, 30.0)
        run = history.run(base)
    assert run.tok_s == pytest.approx(77.6) and y.baseline_tok_s == pytest.approx(82.0)
    cells = run_cells(run, y)
    assert cells.vs_baseline == "= baseline" and cells.tok_s == "82.0 @1"
    assert judge.run_json(run, y)["judged_tok_s"] == pytest.approx(82.0)


def test_a_runs_latency_is_its_benchs_not_the_warm_up():
    # Issue 32: TTFT p95 175 ms for every run (SGLang's warm-up request in the server histogram) while each bench
    # measured 42-44 ms.
    from backend.report.document import latency_cells

    server = {"ttft_ms": {"p50": 44.0, "p95": 175.0}, "itl_ms": {"p50": 10.0, "p95": 12.0}}
    benched = {"ttft_ms": {"p50": 42.0, "p95": 44.0}, "itl_ms": {"p50": 10.1, "p95": 11.9}}
    run = _run("local/serve-aq", [Level(1, 30, 100.0, 100.0)], latency=server,
               bench={"tok_s": 100.0, "result": {"latency": benched}})  # fmt: skip
    assert latency_cells(run) == ("10.1 / 11.9", "44")
    alone = _run("local/serve-aq2", [Level(1, 30, 100.0, 100.0)], latency=server)
    assert latency_cells(alone) == ("10.0 / 12.0 srv", "175 srv")


def test_a_short_bench_is_judged_by_its_requests_where_the_log_has_too_few_samples():
    # Issue 32: History's break-even said "too few samples" for every bench and sweep run (under 20 log seconds).
    y = Yardstick(82.0, 30.0)
    requests = [{"accept_len": a, "decode_tok_s": 100.0} for a in (3.2, 3.4, 3.3, 3.35)]
    bench = {"tok_s": 100.0, "accept_len": 3.31, "concurrency": 1, "result": {"per_request": requests}}
    run = _run("local/serve-aq", [Level(1, 5, 100.0, 100.0)], bench=bench)
    assert run.accept_interval() is None  # five log seconds: no interval of its own
    judged = judge.run_break_even(run, y)
    # Around the bench's own accept length (tokens over verifies), the figure every surface shows for it.
    assert judged.word == "met" and judged.requests == 4 and judged.accept_len == pytest.approx(3.31)
    assert judged.cell().startswith("met (+0.85 ±") and judged.cell().endswith(", 4 bench requests)")
    # A bench at another concurrency than the run is judged at says nothing of it.
    elsewhere = _run("local/serve-aq4", [Level(1, 5, 100.0, 100.0)], bench={**bench, "concurrency": 4})
    assert judge.run_break_even(elsewhere, y).word == "too few samples"


def test_a_sweep_says_before_it_starts_what_it_can_part():
    from backend.agent.host.shared.expect import bench_noise

    said = judge.sweep_scope(bench_noise([], 8))
    assert said.startswith("at 8 requests a point the sweep parts points more than 17% apart")
    assert "none measured here yet" in said and "closer than 6% none parts at any length" in said
    measured = [[{"accept_len": 3.3, "decode_tok_s": 100.0 + 7 * i} for i in range(8)]] * 5
    assert "from 40 requests measured here" in judge.sweep_scope(bench_noise(measured, 8))
    assert judge.bench_scope(1, 1).startswith("1 request: a figure, no verdict")


@pytest.mark.slow
async def test_the_default_bench_is_long_enough_for_its_verdicts(models, tmp_path):
    # Issue 32: Live's b bench (4 × 256 tokens) always ended "not enough samples to judge (3/20)". The default bench,
    # against the simulator's AQ-MedAI drafter (the fewest log lines per token) at SGLang's decode log interval,
    # leaves the window the 20 samples its verdict needs, and its own requests judge it too.
    import sys

    from backend.connection import Connection
    from backend.history import record_run
    from backend.jobs import JobInfo
    from backend.measure.bench import BenchPlan, run_bench
    from backend.measure.metrics import live_samples
    from backend.measure.series import LiveSeries
    from backend.serve import command_line
    from backend.settings.model import HostConfig
    from tests.simhost import REPO, server_argv
    from tests.sshd import free_port

    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "hw"))
    conn = await Connection.open(host)
    job = None
    try:
        port = free_port()
        argv = server_argv(models, "eagle3-aq", port)
        argv[argv.index("--decode-log-interval") + 1] = str(command_line.DECODE_LOG_INTERVAL)
        wire = await conn.call("jobs.start", kind="serve", argv=argv, cwd=str(REPO),
                               args={"profile": "eagle3-aq", "port": port, "drafter": "aq-medai",
                                     "model": models["target"]},  # its chat template: the prompts trained on
                               env={"SPECDECK_SIM_TIME_SCALE": "0.05",
                                    **command_line.launch_env(conn.host)})  # fmt: skip
        job = JobInfo.from_json(wire)
        while (await conn.call("http.request", url=f"http://127.0.0.1:{port}/health")).get("status") != 200:
            await asyncio.sleep(0.05)
        result = await run_bench(conn, job, BenchPlan())
        series = LiveSeries(82.0)
        for sample in live_samples(Path(job.log_path).read_text().splitlines()):
            series.feed(sample, now=0.0)
        tok = series.tok_s.stats()
        y = Yardstick(82.0, 30.0)
        assert tok.sem is not None and judge.speed_verdict(tok, 82.0).word == "beats", tok.count
        assert judge.bench(result, y).speed.word == "beats" and judge.bench(result, y).accept.word == "met"
        with History.open(tmp_path / "h.sqlite3") as history:
            run = history.run(await record_run(history, conn, job))
        assert judge.run_break_even(run, y).word == "met"
    finally:
        if job is not None:
            await conn.call("jobs.cancel", id=job.id)
        await conn.close()


def test_every_surface_says_one_figure_for_one_sweep_point(tmp_path, capsys):
    # Issue 32: Tune's toast said "best steps 3: 91.8" while the table beside it said "3 … 93.6 ◀ best". The
    # sweep's done event (the host's arithmetic), the CLI's lines, the toast, the advisor's table and the report
    # say the same best, the same figure for each point, the same words.
    import argparse

    from backend.agent.host.shared.sweep_order import Order
    from backend.cli.tunecmds import _print_done
    from backend.report import document, render
    from backend.tune import advisor
    from backend.tune.sweep import SweepEvent, SweepPlan

    spread = (-1.1, -0.3, 0.5, 0.9)
    truth = {2: 90.0, 3: 100.0, 4: 102.0}
    records = []
    for i, (steps, tok_s) in enumerate(truth.items()):
        rates = [tok_s * (1 + 0.06 * z) for z in spread]
        per_request = [{"decode_tok_s": r, "accept_len": 3.0, "spec_histogram": [3, 4, 6, 27][: steps + 1],
                        "prompt": n} for n, r in enumerate(rates)]  # fmt: skip
        histogram = [4 * h for h in [3, 4, 6, 27][: steps + 1]]
        records.append({"index": i, "steps": steps, "topk": 1, "draft_tokens": steps + 1, "tok_s": sum(rates) / 4,
                        "accept_len": 3.0, "cycle_ms": 3000.0 / (sum(rates) / 4), "per_request": per_request,
                        "acceptance": {"histogram": histogram}, "run": f"serve-{i}"})  # fmt: skip
    order = Order({"points": [{"args": {"steps": k}} for k in truth], "baseline_tok_s": 82.0})
    order.results = {r["index"]: r for r in records}
    done = SweepEvent.from_json({"event": "done", "points": records, "best": order.best(), "restarts": 3, "grid": 3})
    y = Yardstick(82.0, 30.0)
    with History.open(tmp_path / "h.sqlite3") as history:
        for r in records:
            argv = ("python", "-m", "sglang.launch_server", "--speculative-draft-model-path", "/m/aq",
                    "--speculative-num-steps", str(r["steps"]), "--speculative-eagle-topk", "1")  # fmt: skip
            args = {"profile": "eagle3-aq", "drafter": "aq-medai", "algorithm": "EAGLE3", "sweep": "sweep-x"}
            history.upsert_run("box", JobInfo(r["run"], args=args, argv=argv, state="done", started=1000.0))
            result = {k: r[k] for k in ("tok_s", "accept_len", "cycle_ms", "per_request", "acceptance")}
            history.record_bench("box", JobInfo(f"bench-{r['index']}", state="done", ended=2000.0 + r["index"]),
                                 {**result, "server_job": r["run"]})  # fmt: skip
        # An earlier bench of 3 steps outside the sweep (the toast's 91.8 against the table's 93.6 was this
        # pooled in): it stays out of the sweep's figures.
        other = {k: v for k, v in records[1].items() if k != "run"}
        args = {"profile": "eagle3-aq", "drafter": "aq-medai", "algorithm": "EAGLE3"}
        argv = ("python", "-m", "sglang.launch_server", "--speculative-draft-model-path", "/m/aq",
                "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")  # fmt: skip
        history.upsert_run("box", JobInfo("serve-earlier", args=args, argv=argv, state="done", started=500.0))
        history.record_bench("box", JobInfo("bench-earlier", state="done", ended=900.0),
                             {**other, "tok_s": 110.0, "server_job": "serve-earlier"})  # fmt: skip
        runs = history.sweep_runs("sweep-x")
        advice = advisor.advise(history.runs(), y, runs[0].id)  # what Tune's table shows for the sweep's runs
        report = render.to_markdown(document.build(history, [r.id for r in runs], y, None, "sweep-x"))
    toast = "sweep done: " + judge.best_sentence(done.best)  # Tune's toast (tui/screens/tune.py)
    table = judge.best_sentence(advice.best)  # the advisor's, whose steps Tune marks "◀ best"
    _print_done(argparse.Namespace(json=False), SweepPlan((2, 3, 4)), done)
    cli = capsys.readouterr().out
    assert toast.removeprefix("sweep done: ") == table and table in cli and f"best: {table}" in report
    assert done.best.steps == advice.best.steps == 4 and advice.best.not_separated_from == (3,)
    for r in records:  # each point one figure: the done event's, the advisor's table, the CLI and the report
        row = next(x for x in advice.rows if x.steps == r["steps"])
        assert f"{row.measured_tok_s:.1f}" == f"{r['tok_s']:.1f}"
        assert f"{r['tok_s']:.1f} tok/s" in cli and f"| {r['tok_s']:.1f} |" in report


def test_a_drafter_table_compares_drafters_at_one_stream_or_says_the_concurrency():
    # Issue 32: Tune's table showed aq-medai at 60.0 tok/s (its per-stream figure at 8 streams) beside ours at 61.8
    # (one stream): the best drafter read as the worst.
    from backend.history.summary import BenchLevel

    curve = (BenchLevel(1, 103.0, 103.0, 3.7, 36.0, "b1"), BenchLevel(8, 60.0, 480.0, 3.6, 60.0, "b8"))
    aq = _run("local/serve-aq", [Level(8, 30, 60.0, 480.0)], curve=curve,
              bench={"tok_s": 60.0, "accept_len": 3.6, "concurrency": 8})  # fmt: skip
    assert judge.bench_figure(aq) == (103.0, 3.7, 1)  # its one-stream bench, beside the others' one-stream figures
    only8 = _run("local/serve-aq8", [Level(8, 30, 60.0, 480.0)], bench={"tok_s": 60.0, "concurrency": 8})
    tok_s, _, streams = judge.bench_figure(only8)
    assert judge.at_text(tok_s, streams) == "60.0 @8"


def test_the_fleets_workers_count_agrees_with_its_rows():
    # Issue 32: the Fleet router line said "2/2 workers healthy" for two minutes beside a row "stopped unhealthy"
    # (the router's last health check, before it noticed).
    from backend.fleet.fleets import FleetStatus, Imbalance, ReplicaStatus, RouterStatus

    router = RouterStatus("gpu-a", "http://127.0.0.1:30080", 7, True, "cache_aware", workers=2, healthy_workers=2)
    up = ReplicaStatus("gpu-a", "http://10.0.0.1:30000", 11, "ready", True, 90.0, 3.3, 2, 0)
    down = ReplicaStatus("gpu-b", "http://10.0.0.2:30000", None, "stopped", False, None, None, None, None)
    status = FleetStatus("pair", router, (up, down), Imbalance("gpu-b is not running"))
    assert (
        status.workers_text() == "1/2 workers healthy (the router still counts 2: its health check has not caught up)"
    )
    caught_up = FleetStatus(
        "pair", RouterStatus(**{**router.__dict__, "healthy_workers": 1}), (up, down), status.imbalance
    )
    assert caught_up.workers_text() == "1/2 workers healthy"


def test_a_difference_inside_the_practical_floor_is_level_however_narrow_its_interval():
    # Issue 32: Live's bench of the baseline against the configured 82 tok/s said "below it, 95% 81.9-82.0": a
    # difference of 0.06% called a verdict because 200 requests made the interval narrow.
    from backend.agent.host.shared import advice, expect, measured_points
    from backend.measure.series import Stats
    from backend.train.predict import verdict

    assert judge.FLOOR == measured_points.TOK_S_SE_FLOOR == expect.BENCH_FLOOR == 0.02  # one floor, the sweep's
    y = Yardstick(82.0, 30.0)
    tight = [{"decode_tok_s": 81.9 + 0.1 * (i % 2)} for i in range(200)]
    judged = judge.bench({"tok_s": 81.95, "concurrency": 1, "per_request": tight}, y)
    assert judged.speed.word == "level with"
    # (the interval is the change's, in percent, as the curve says it: -0.07% to -0.05% against 82)
    assert "; level with it, within 2%, 95% -0.1% to -0.1% over its 200 requests" in judged.speed_text()
    assert "below" not in summary_line({"tok_s": 81.95, "concurrency": 1, "per_request": tight}, y)
    # Past the floor the interval decides as before.
    fast = [{"decode_tok_s": 90.0 + 0.1 * (i % 2)} for i in range(20)]
    assert judge.bench({"tok_s": 90.05, "concurrency": 1, "per_request": fast}, y).speed.word == "beats"
    # Live's window: the same rule.
    window = Stats(600, 81.9, 81.95, 81.9, 82.0, 81.8, 82.1, sem=0.005, sem_dof=9)
    assert judge.speed_verdict(window, 82.0).word == "level with"
    assert judge.speed_verdict(Stats(600, 70.0, 70.0, 70.0, 70.0, 70.0, 70.0, 0.1, 9), 82.0).word == "below"
    # The curve: within 2% is level, neither ahead nor falling below.
    # (benches of 8 requests spread 0.5% each: narrow intervals)
    curve = judge.curve_verdict(_rates({1: 82.0, 4: 75.0, 8: 70.0}, 0.005), _rates({1: 90.0, 4: 74.5, 8: 60.0}, 0.005))
    assert curve.level == (4,) and curve.falls_at == 8
    assert (
        curve.sentence()
        == "speculation falls below the baseline at 8 concurrent stream(s), ahead at 1, level with it (within 2%) at 4"
    )
    even = judge.curve_verdict(_rates({1: 82.0, 4: 75.0}, 0.005), _rates({1: 82.5, 4: 74.2}, 0.005))
    assert even.falls_at is None and "level with the baseline (within 2%) at 1, 4" in even.sentence()
    # The break-even (the same quantity in accept length) and a checkpoint's prediction.
    requests = [{"decode_tok_s": 82.0, "accept_len": 2.47 + 0.002 * (i % 2)} for i in range(50)]
    result = {"tok_s": 82.0, "concurrency": 1, "accept_len": 2.471, "cycle_ms": 30.0, "speculative": True,
              "per_request": requests}  # fmt: skip
    assert judge.bench(result, y).accept.word == "level with"
    assert verdict(82.5, 82.4, 82.6, 82.0) == "level with" and verdict(90.0, 89.0, 91.0, 82.0) == "beats"
    # The sweep never separates two points inside the floor: its best and "not separated" agree with "level".
    rows = [{"steps": k, "measured_tok_s": v, "measured_low": v - 0.01, "measured_high": v + 0.01,
             "measured_requests": 500, "request_rel_sd": 0.001} for k, v in ((3, 100.0), (4, 101.5))]  # fmt: skip
    best = judge.BestPoint.from_json(advice.best(rows))
    assert best.steps == 4 and best.not_separated_from == (3,) and best.requests_to_separate is None
    assert "closer than two benches can be told apart" in judge.best_sentence(best)
    # A wide interval around a figure inside the floor may hide a difference that matters: within noise.
    assert judge.judged_word(82.5, 60.0, 105.0, 82.0, ("beats", "below")) == "within noise"
    assert judge.judged_word(82.5, 81.0, 83.5, 82.0, ("beats", "below")) == "level with"


def test_a_bench_through_a_fleets_router_is_judged_at_the_streams_each_replica_runs():
    # Issue 32: the fleet bench sent 4 streams over 2 replicas and judged their per-stream figure against one
    # server's baseline at 4 streams; each replica ran 2.
    y = Yardstick(82.0, 30.0, "local/serve-base", {1: 82.0}, {1: 81.0, 2: 79.0, 4: 75.0})
    result = {"tok_s": 78.0, "concurrency": 4, "replicas": 2, "total_tok_s": 312.0, "accept_len": 3.1,
              "cycle_ms": 40.0, "speculative": True, "ttft_ms": 44.0}  # fmt: skip
    judged = judge.bench(result, y)
    assert judged.versus.streams == 2 and judged.versus.baseline == 79.0
    assert judged.break_even == pytest.approx(judge.break_even(40.0, 79.0))
    line = summary_line(result, y)
    assert "vs 79.0, the baseline's bench at 2 stream(s) (4 through the router over 2 replicas: 2 each if even)" in line
    # Streams that do not split evenly: no one server's baseline matches, so no verdict, said so.
    uneven = judge.bench({**result, "concurrency": 3}, y)
    assert uneven.versus is None and uneven.break_even is None
    assert "no verdict: 3 streams do not split evenly over 2 replicas" in summary_line({**result, "concurrency": 3}, y)


def test_one_measured_point_is_the_only_one_measured_not_the_best():
    # A Tune screenshot marked a run's one benched step count "◀ best" and titled its chart "best 3" while the
    # advisor predicted 4 at 99.8 tok/s [84.5-118.8] beside 3's 98.8: nothing had been compared with it.
    from backend.agent.host.shared import advice

    rows = [
        {"steps": 3, "tok_s": 98.6, "tok_s_low": 87.3, "tok_s_high": 111.1, "measured_tok_s": 98.8},
        {"steps": 4, "tok_s": 99.8, "tok_s_low": 84.5, "tok_s_high": 118.8, "measured_tok_s": None},
    ]
    alone = judge.BestPoint.from_json(advice.best(rows))
    assert alone.word == "only measured"
    assert "only step count measured" in judge.best_sentence(alone) and "measured fastest" not in judge.best_sentence(
        alone
    )
    rows[1]["measured_tok_s"] = 90.0
    two = judge.BestPoint.from_json(advice.best(rows))
    assert two.word == "best" and "measured fastest" in judge.best_sentence(two)
    predicted = judge.BestPoint.from_json(advice.best([dict(r, measured_tok_s=None) for r in rows]))
    assert predicted.word == "best"


def _bench(history: History, run: str, streams: int, tok_s: float, rel_sd: float, accept: float | None) -> None:
    """A bench of ``run`` at ``streams`` of 8 requests whose decode rates average ``tok_s`` with ``rel_sd``."""
    rates = [{"decode_tok_s": tok_s * (1 + rel_sd * z), "accept_len": accept} for z in _SPREAD]
    result = {"server_job": run, "tok_s": tok_s, "accept_len": accept, "concurrency": streams,
              "ended": T0 + 100 + streams, "per_request": rates}  # fmt: skip
    history.record_bench("local", JobInfo(f"bench-{run}-{streams}", state="done"), result)


def test_the_curve_says_within_noise_where_the_two_benches_requests_do_not_part_them(tmp_path):
    # Audit: the curve was judged from point estimates against the 2% floor, so two benches of one configuration
    # at 8 streams (8 requests, each one's rate spread 6%: the bench's figure ±2.1%) got opposite verdicts,
    # "falls below at 8" from one (-2.5%) and "level with it" from the other (-1.3%). Judged by both benches'
    # requests, neither difference clears: within noise, with the interval said. A clear fall (-20%) still falls.
    with History.open(tmp_path / "h.sqlite3") as history:
        for job in ("serve-base", "serve-a", "serve-b", "serve-c"):
            history.upsert_run("local", JobInfo(job, state="done", started=T0, args={"profile": job}))
        _bench(history, "serve-base", 1, 82.0, 0.06, None)
        _bench(history, "serve-base", 8, 60.0, 0.06, None)
        for job, at8 in (("serve-a", 60.0 * 0.975), ("serve-b", 60.0 * 0.987), ("serve-c", 60.0 * 0.8)):
            _bench(history, job, 1, 100.0, 0.06, 3.3)
            _bench(history, job, 8, at8, 0.06, 3.3)
        history.set_baseline("local/serve-base")
        y = history.yardstick(82.0, 30.0)
        runs = [history.run(f"local/serve-{x}") for x in "abc"]
        a, b, c = (judge.run_curve(run, y) for run in runs)
    for same in (a, b):
        assert same is not None and same.falls_at is None and same.level == ()
        said = same.sentence()
        assert said.startswith("speculation is ahead of the baseline at 1 stream(s), within noise at 8 (95% ")
        assert "falls below" not in said and "level with" not in said
    assert "within noise at 8 (95% -9.1% to +4.1%)" in a.sentence()
    assert c is not None and c.falls_at == 8
    assert c.sentence() == "speculation falls below the baseline at 8 concurrent stream(s), ahead at 1"
    # Every surface draws the judge's: the report's and History's column, --json, the report's sentence.
    from backend.report.document import crossover_cell, crossover_text

    base, source = judge.baseline_curve(y, runs)
    assert [crossover_cell(run, base) for run in runs] == ["none to 8 (no verdict at 8)"] * 2 + ["8"]
    assert judge.run_json(runs[0], y)["curve_verdicts"]["8"] == {
        "word": "within noise", "change_low_pct": -9.11, "change_high_pct": 4.11, "requests": 8
    }  # fmt: skip
    assert "within noise at 8 (95% -9.1% to +4.1%)" in crossover_text(runs[0], base, source)
    # A bench recorded before per-request rates were kept has no interval: no word, however far apart.
    old = judge.curve_verdict({8: Rate(60.0)}, {8: Rate(40.0)})
    assert old.falls_at is None and old.sentence() == (
        "speculation has too few samples against the baseline at 8 stream(s) (a bench needs two requests with "
        "their rates on each side)"
    )


def test_a_bench_is_judged_against_a_noisy_baseline_bench_by_both_benches_requests():
    # Audit: judge.bench took the baseline's bench figure as exact, its interval over the speculative bench's
    # requests only: +4% at 4 streams with 8 steady requests "beats" the baseline's bench there though that bench's
    # own 8 requests swing 8% (its figure ±6.7%). Judged like the curve (both benches' requests): within noise, the
    # change's interval said in percent as the curve says it. A quiet baseline bench still parts them.
    noisy = _rates({4: 75.0}, 0.08)
    y = Yardstick(82.0, 30.0, "local/serve-base", {1: 82.0}, {4: 75.0}, noisy)
    steady = [{"decode_tok_s": 78.0 * (1 + 0.01 * z)} for z in _SPREAD]
    result = {"tok_s": 78.0, "concurrency": 4, "per_request": steady}
    judged = judge.bench(result, y)
    assert judged.speed.word == "within noise"
    said = summary_line(result, y)
    assert "(+4.0% vs 75.0, the baseline's bench at 4 stream(s); within noise, 95% " in said
    assert "over its 8 requests and the baseline bench's 8" in said and "beats" not in said
    # The same interval as the curve's level at 4: one rule.
    curve = judge.curve_verdict(noisy, {4: Rate.of_bench(78.0, result)})
    assert (judged.speed.low, judged.speed.high) == (curve.verdicts[0].low, curve.verdicts[0].high)
    quiet = Yardstick(82.0, 30.0, "local/serve-base", {1: 82.0}, {4: 75.0}, _rates({4: 75.0}, 0.01))
    assert judge.bench(result, quiet).speed.word == "beats"
    # A baseline bench with no per-request rates (recorded before they were kept): its figure as exact, said so.
    old = Yardstick(82.0, 30.0, "local/serve-base", {1: 82.0}, {4: 75.0}, {4: Rate(75.0)})
    assert judge.bench(result, old).speed.word == "beats"
    assert "over its 8 requests, the baseline bench's figure taken as exact: it has no per-request rates" in (
        summary_line(result, old)
    )
