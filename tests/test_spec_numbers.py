"""Per-algorithm numbers read and shown live, each with its window: SGLang's spec gauges and decode-line fields are
the last decode-log interval's (0.5.23 metrics_reporter.py:1001-1004 zeroes what they are made of at every tick),
a run's accept length comes from totals (``sglang:generation_tokens_total`` over ``sglang:spec_verify_calls_total``,
both grown per finished request: metrics_collector.py:2092-2112). DSPARK's cap and block accept lengths, DFLASH's
block acceptance, and SGLang PR #31750's per-position gauges (an open PR: its series read behind that note).

The pages here are test input written in 0.5.23's exposition shape (its HELP texts quoted from the wheel), not
artefacts: no real scrape of these series was found (research notes of issue 36, real/INDEX.md).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.cli.livecmds import _watch_line
from backend.fleet import fleets
from backend.history import Yardstick
from backend.jobs import JobInfo
from backend.measure.metrics import Sample, ServerNumbers
from backend.measure.prometheus import PR_31750, read_scrape
from backend.measure.specnumbers import SpecFigures
from backend.settings.model import ReplicaConfig
from tests.helpers import run_cli
from tui.widgets.serverline import ServerFacts

pytestmark = pytest.mark.unit

LABELS = 'engine_type="unified",model_name="k",pp_rank="0",tp_rank="0"'


def page(**values: float) -> str:
    """A 0.5.23 /metrics page with the given sglang: gauges (and counters, named *_total)."""
    out = []
    for name, value in values.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        labels = 'model_name="k"' if kind == "counter" else LABELS
        out += [f"# TYPE sglang:{name} {kind}", f"sglang:{name}{{{labels}}} {value}"]
    return "\n".join(out) + "\n"


def test_a_runs_accept_length_comes_from_totals_never_from_the_interval_gauge():
    # The last interval accepted 1.5 per verify; the finished requests 3000 tokens over 1000 verifies.
    now = read_scrape(page(spec_accept_length=1.5, generation_tokens_total=3000, spec_verify_calls_total=1000))
    assert now.engine["spec_accept_length"] == 1.5 and now.run_accept_length() == 3.0
    earlier = read_scrape(page(spec_accept_length=2.9, generation_tokens_total=1000, spec_verify_calls_total=500))
    assert now.run_accept_length(earlier) == 4.0  # 2000 tokens over 500 verifies between the two
    old = read_scrape(page(spec_accept_length=2.2, generation_tokens_total=3000))  # 0.5.6-0.5.12: no verify counter
    assert old.run_accept_length() is None


def test_pr_31750s_per_position_gauges_behind_their_note():
    """SGLang PR #31750 (open): sglang:spec_accept_rate_per_position (the interval's), ..._total_... (lifetime)
    and sglang:spec_total_accept_length. Its text names no position label: the one integer label is read."""
    text = page(spec_total_accept_length=3.1)
    for i, (window, total) in enumerate([(0.9, 0.91), (0.7, 0.74), (0.5, 0.52)], start=1):
        text += f'sglang:spec_accept_rate_per_position{{{LABELS},position="{i}"}} {window}\n'
        text += f'sglang:spec_total_accept_rate_per_position{{{LABELS},draft_pos="{i - 1}"}} {total}\n'
    scrape = read_scrape(text)
    assert scrape.per_position == {"interval": [0.9, 0.7, 0.5], "total": [0.91, 0.74, 0.52]}  # 0-based: shifted
    assert scrape.run_accept_length() == 3.1  # no verify counter on this page: the PR's lifetime figure
    assert any(PR_31750 in note for note in scrape.notes)
    figures = SpecFigures.of(ServerNumbers(speculative_algorithm="EAGLE3"), scrape, None)
    assert figures.parts() == [f"a_i 0.91 0.74 0.52 ({PR_31750})"]


def test_dspark_and_dflash_figures_each_with_its_window():
    info = ServerNumbers(speculative_algorithm="DSPARK", speculative_num_draft_tokens=6, avg_spec_accept_length=3.9)
    gauges = read_scrape(page(spec_accept_length=3.2, spec_cap_length=4.5, spec_block_accept_length=4.1))
    assert SpecFigures.of(info, gauges, None).parts() == [
        "DSPARK cap len 4.50 of 6, block accept len 4.10 (last interval)"
    ]
    # Static verify: the gauges read 0 (no cap scheduled) and nothing is said; without /metrics the decode line's
    static = read_scrape(page(spec_accept_length=3.2, spec_cap_length=0.0, spec_block_accept_length=0.0))
    assert SpecFigures.of(info, static, None).parts() == []
    line = Sample(None, "decode", accept_len=3.0, cap_len=4.25)
    assert SpecFigures.of(info, None, line).parts() == ["DSPARK cap len 4.25 of 6 (last interval)"]
    dflash = ServerNumbers(speculative_algorithm="DFLASH", speculative_num_draft_tokens=8)
    run = read_scrape(page(spec_accept_length=3.0, generation_tokens_total=3700, spec_verify_calls_total=1000))
    assert SpecFigures.of(dflash, run, None).parts() == ["DFLASH block 8: 3.70 accepted per verify, 46% of it (run)"]
    lifetime = replace(dflash, avg_spec_accept_length=3.6)  # the server line's own lifetime figure comes first
    assert SpecFigures.of(lifetime, run, None).parts() == [
        "DFLASH block 8: 3.60 accepted per verify, 45% of it (lifetime)"
    ]
    early = read_scrape(page(spec_accept_length=4.0))  # no finished request yet: the interval's, said so
    assert SpecFigures.of(dflash, early, None).parts() == [
        "DFLASH block 8: 4.00 accepted per verify, 50% of it (last interval)"
    ]


def test_live_says_which_figure_is_the_intervals():
    info = ServerNumbers("0.5.23", speculative_algorithm="DSPARK", speculative_num_draft_tokens=6)
    info = replace(info, avg_spec_accept_length=3.9)
    scrape = read_scrape(page(spec_accept_length=3.2, spec_accept_rate=0.44, spec_cap_length=4.5))
    facts = ServerFacts(
        JobInfo("serve-1", state="running", args={"algorithm": "DSPARK"}),
        info=info,
        metrics=scrape.engine,
        spec=SpecFigures.of(info, scrape, None),
    )
    text = facts.text()
    assert "lifetime accept 3.90" in text and "accept rate (drafts only) last interval 0.44" in text
    assert "DSPARK cap len 4.50 of 6 (last interval)" in text


def test_watch_and_fleet_say_the_interval_or_use_totals():
    line = _watch_line(
        Sample(None, "decode", gen_tps=90.0, accept_len=3.0, running_req=1, cap_len=4.5, block_accept_len=4.0),
        Yardstick(82.0, 30.0),
    )
    assert "accept 3.00, cap len 4.50, block accept len 4.00 (interval)" in line
    replica = ReplicaConfig(host="gpu-a", profile="p", port=30000)
    totals = read_scrape(page(spec_accept_length=1.2, generation_tokens_total=2400, spec_verify_calls_total=1000))
    status = fleets._replica_status(replica, "http://x", {"state": "ready", "pid": 1}, totals, True)
    assert (status.accept_len, status.accept_basis, status.accept_cell()) == (2.4, "totals", "2.40")
    gauge = read_scrape(page(spec_accept_length=1.2))  # 0.5.6-0.5.12: only the gauge
    status = fleets._replica_status(replica, "http://x", {"state": "ready", "pid": 1}, gauge, True)
    assert (status.accept_basis, status.accept_cell()) == ("interval", "1.20i")


@pytest.mark.parametrize("later", [False, True])
def test_parse_metrics_says_the_interval_and_the_totals(tmp_path, later):
    ttft = "# TYPE sglang:time_to_first_token_seconds histogram\n"  # two scrapes: latency between them too
    ttft += 'sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="k"} %d\n'
    ttft += 'sglang:time_to_first_token_seconds_sum{model_name="k"} 1.0\n'
    ttft += 'sglang:time_to_first_token_seconds_count{model_name="k"} %d\n'
    first = tmp_path / "a.prom"
    first.write_text(
        page(spec_accept_length=1.5, generation_tokens_total=3000, spec_verify_calls_total=1000) + ttft % (5, 5)
    )
    args = ["parse-metrics", str(first), "--host", "local"]
    if later:
        second = tmp_path / "b.prom"
        second.write_text(
            page(spec_accept_length=2.5, generation_tokens_total=5000, spec_verify_calls_total=1500) + ttft % (9, 9)
        )
        args.insert(2, str(second))
    out = run_cli(*args).stdout
    assert "accept and rate: the last decode-log interval's gauges" in out
    if later:
        assert "accept length from totals between the two scrapes: 4.00" in out
    else:
        assert "accept length from totals since the server started: 3.00" in out


def test_a_history_runs_accept_length_is_its_totals_not_a_mean_of_intervals(tmp_path):
    """Each decode line's accept length is its interval's tokens over its verify passes; a run's is the sum of
    those over the sum of these. 10 lines at 1 running request accepting 2.0 and 10 at 8 accepting 4.0: the
    run verified 90 passes and accepted (20 + 320) / 90 = 3.78 per pass, not the 3.0 the lines average."""
    from backend.history import History, filter_tail

    t0 = 1_800_000_000.0
    samples = [
        Sample(
            ts=t0 + i, kind="decode", gen_tps=80.0, accept_len=2.0 if i < 10 else 4.0, running_req=1 if i < 10 else 8
        )
        for i in range(20)
    ]
    with History.open(tmp_path / "h.sqlite3") as history:
        run = history.upsert_run("box", JobInfo("serve-1", state="done", started=t0, ended=t0 + 30, args={}))
        assert history.import_chunk(run, 0, 100, samples, filter_tail([], samples))
        assert history.run(run).accept_len == pytest.approx(340 / 90)
