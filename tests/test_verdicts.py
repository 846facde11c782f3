"""Verdicts only where the data clears them: the Live tab's beats/below/within noise from the window mean's
interval, History's and reports' break-even verdict from the log accept length's, the baseline's own run read
as "= baseline", no accept figures for a server that does not speculate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.history import History
from backend.jobs import JobInfo
from backend.measure import judge
from backend.measure.breakeven import live_breakeven
from backend.measure.metrics import Sample, ServerNumbers
from backend.measure.series import SeriesView
from backend.report.cells import break_even_cell
from tui.widgets.numbers import LiveNumbers, verdict
from tui.widgets.serverline import ServerFacts

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


def window(values: list[float]):
    return SeriesView(list(range(len(values))), values).stats()


def test_live_verdict_needs_an_interval_that_clears_the_baseline():
    steady = [100.0 + (i % 3 - 1) for i in range(60)]
    assert "beats baseline" in verdict(LiveNumbers(tok_s=window(steady), baseline=82.0))
    assert "below baseline" in verdict(LiveNumbers(tok_s=window([60.0 + (i % 3) for i in range(60)]), baseline=82.0))
    # Swinging around 82 (a bench's bursts): within noise, not "beats".
    swings = [82.0 + (30 if (i // 6) % 2 else -29) for i in range(60)]
    text = verdict(LiveNumbers(tok_s=window(swings), baseline=82.0))
    assert "within noise of baseline" in text and "beats" not in text
    assert "not enough samples" in verdict(LiveNumbers(tok_s=window([100.0] * 5), baseline=82.0))
    # The baseline run against itself, at +0%: the baseline, never "beats baseline".
    own = verdict(LiveNumbers(tok_s=window([82.0 + (i % 2) for i in range(60)]), baseline=82.0, own_baseline=True))
    assert "= baseline" in own and "beats" not in own


def test_no_accept_figures_for_a_server_without_speculation():
    info = ServerNumbers("0.5.23-sim", avg_spec_accept_length=0.0)
    plain = ServerFacts(JobInfo("serve-1", state="running", args={"profile": "baseline"}), info=info,
                        metrics={"spec_accept_rate": 0.0})  # fmt: skip
    assert "accept" not in plain.text()
    spec = ServerFacts(JobInfo("serve-2", state="running", args={"algorithm": "EAGLE3"}),
                       info=replace(info, speculative_algorithm="EAGLE3", avg_spec_accept_length=3.1),
                       metrics={"spec_accept_rate": 0.7})  # fmt: skip
    assert "lifetime accept 3.10" in spec.text() and "accept rate (drafts only) last interval 0.70" in spec.text()


def test_the_baseline_run_reads_equal_baseline_in_history_and_reports(models, tmp_path):
    from backend.history import History
    from backend.report.cells import run_cells
    from tests.runs import add_run

    with History.open(tmp_path / "h.sqlite3") as history:
        base = add_run(history, models, "serve-b1", None, 82.0, None)
        other = add_run(history, models, "serve-b2", None, 82.0, None)
        history.set_baseline(base)
        yardstick = history.yardstick(82.0, 30.0)
        runs = {r.id: r for r in history.runs()}
    assert run_cells(runs[base], yardstick).vs_baseline == "= baseline"
    assert run_cells(runs[other], yardstick).vs_baseline != "= baseline"  # another run at 82: a number


def _run_with_accepts(history, job_id: str, accepts: list[float]):
    run = history.upsert_run("local", JobInfo(job_id, state="done", started=T0, args={"algorithm": "EAGLE3"}))
    samples = [Sample(T0 + i, "decode", gen_tps=90.0, accept_len=a, running_req=1) for i, a in enumerate(accepts)]
    assert history.import_chunk(run, 0, 10, samples, [])
    return history.run(run)


def test_history_break_even_verdict_needs_an_interval_that_clears_it(tmp_path):
    line = live_breakeven(30.0, 82.0)  # the one break-even (2.46)
    with History.open(tmp_path / "h.sqlite3") as history:
        y = history.yardstick(82.0, 30.0)
        # Mean above the line but swinging across it: within noise, no "met" and no break_even_met.
        swings = _run_with_accepts(history, "serve-swing", [line + (0.9 if (i // 4) % 2 else -0.8) for i in range(40)])
        assert swings.accept_len > line and judge.break_even_met(swings, y) is None
        assert break_even_cell(swings, y).startswith("within noise (+") and swings.to_json()["accept_len_low"] < line
        steady = _run_with_accepts(history, "serve-steady", [line + 0.5 + 0.01 * (i % 3) for i in range(40)])
        assert judge.break_even_met(steady, y) is True and break_even_cell(steady, y).startswith("met (+0.5")
        few = _run_with_accepts(history, "serve-few", [3.0] * 5)
        assert judge.break_even_met(few, y) is None
        assert break_even_cell(few, y) == f"too few samples ({3.0 - line:+.2f})"
