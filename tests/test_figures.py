"""One rounding rule per quantity (``backend.agent.host.shared.units``): every tok/s figure the CLI, the reports and the
training lines print has one decimal, every accept length and break-even two, so one figure never reads two
ways (82 and 82.0, 2.7 and 2.71). Read from the rendered text, as an operator meets it."""

from __future__ import annotations

import re

import pytest

from backend.agent.host.shared.cost_model import CostModel
from backend.history import History, Yardstick
from backend.report import document, render
from backend.train import training
from backend.train.predict import Basis
from backend.tune import advisor
from tests.helpers import run_cli
from tests.runs import add_benched_run

pytestmark = pytest.mark.unit

NUMBER = r"(\d+(?:\.\d+)?)"
# A tok/s figure: "109.1 tok/s", its interval's ends after it "109.1 tok/s (92.4–111.0)", a curve's "98.7@4".
TOK_S = [rf"{NUMBER} tok/s", rf"tok/s \({NUMBER}[–-]{NUMBER}\)", rf"{NUMBER}@\d+"]
ACCEPT = [rf"break-even(?: accept length)? {NUMBER}", rf"accept length {NUMBER}(?! steps)"]


def decimals(figure: str) -> int:
    return len(figure.split(".")[1]) if "." in figure else 0


def printed_two_ways(text: str) -> list[str]:
    """The tok/s figures without one decimal and the accept lengths without two, with their line."""
    wrong = []
    for line in text.splitlines():
        for pattern in TOK_S:
            for m in re.finditer(pattern, line):
                wrong += [f"{g!r} in {line!r}" for g in m.groups() if decimals(g) != 1]
        for pattern in ACCEPT:
            for m in re.finditer(pattern, line):
                wrong += [f"{g!r} in {line!r}" for g in m.groups() if decimals(g) != 2]
    return wrong


def test_the_rule_reads_what_it_should():
    line = "baseline 82 tok/s; break-even 2.7; 109.1 tok/s (92–111), 98@4"
    assert [w.split(" in ")[0] for w in printed_two_ways(line)] == ["'82'", "'92'", "'111'", "'98'", "'2.7'"]
    assert printed_two_ways("baseline 82.0 tok/s; break-even accept length 2.46; accept length at most 4") == []


def test_reports_advice_and_training_lines_print_each_quantity_one_way(tmp_path):
    yardstick = Yardstick(82.0, 30.0)
    with History.open(tmp_path / "h.sqlite3") as history:
        add_benched_run(history, 1, 2, 30.0, 90.0, [20, 48, 32], sweep="sweep-abc")
        add_benched_run(history, 2, 3, 33.0, 100.0, [5, 10, 20, 65], sweep="sweep-abc")
        runs = history.sweep_runs("sweep-abc")
        text = render.to_markdown(document.build(history, [r.id for r in runs], yardstick, None, "sweep-abc"))
        text += "\n" + "\n".join(advisor.advice_lines(advisor.advise(history.runs(), yardstick)))
    row = training.CheckpointRow("ft-step1200", 1200, predicted_accept_len=3.1, predicted_accept_len_low=2.9,
                                 predicted_accept_len_high=3.3, predicted_tok_s=96.04, predicted_tok_s_low=89.0,
                                 predicted_tok_s_high=103.0, versus_baseline="beats", versus_break_even="above",
                                 break_even=2.7, measured_tok_s=97.0, measured_run="r", servable=True)  # fmt: skip
    basis = Basis(CostModel(24.0, 3.0, "assumed", "one step count"), 82.0, "configured", 0)
    text += "\n" + training.checkpoint_line(row, 82.0) + "\n" + training.basis_line(basis, 3)
    assert "tok/s" in text and "break-even" in text
    assert printed_two_ways(text) == []


def test_cli_prints_each_quantity_one_way(tmp_path):
    env = {"SPECDECK_HISTORY": str(tmp_path / "none.sqlite3")}
    out = []
    for args in (["breakeven", "--cycle-ms", "30", "--baseline", "82", "--steps", "3"], ["config", "show"]):
        res = run_cli(*args, env=env, rc=None)
        assert res.returncode == 0, res.stderr
        out.append(res.stdout)
    text = "\n".join(out)
    assert "82.0 tok/s" in text and printed_two_ways(text) == []


def test_counts_agree_with_their_nouns():
    """ "1 tensors", "1 restarts saved" (issue 33): one home for a count and its noun."""
    from backend.agent.host.shared.units import counted
    from backend.drafters.checkpoint_diff import Totals, format_totals

    assert (counted(1, "restart"), counted(3, "restart")) == ("1 restart", "3 restarts")
    assert counted(0, "tensor") == "0 tensors"
    assert format_totals(Totals(params=1000, bytes=2048, tensors=1)).endswith("2.00 KiB, 1 tensor")
