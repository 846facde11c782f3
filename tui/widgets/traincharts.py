"""The Train tab's charts: per-position accuracy over steps (train logs as lines, evals as points), the accept
length those accuracies imply at the serving steps against the break-even line, and the loss.

Each draws what it is given (the training's step and eval records) and repaints on the next frame; the
series are decimated to the chart's width first, so a long run costs what a short one does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from backend.agent.host.shared.acceptance_model import chain
from backend.train.records import TrainRecord
from tui.widgets.chart import FittedPlot, nice_ticks, tick_label

COLORS = ("cyan", "green", (215, 165, 0), "magenta", "blue", "red", "white")
BOUND = "gray"
POSITIONS = 4  # acc_0..acc_3: what 3 draft steps (and the bonus) rest on; more would crowd the chart


T = TypeVar("T")


def thin(records: Sequence[T], width: int) -> list[T]:
    """Every n-th record so at most ``width`` remain (the newest always kept)."""
    if len(records) <= max(2, width):
        return list(records)
    step = len(records) / float(width)
    picked = [records[int(i * step)] for i in range(width)]
    return [*picked[:-1], records[-1]]


def step_axis(plt, steps: Sequence[int]) -> None:
    """The x axis over the logged ``steps`` with round ticks inside them (0, 200, 400: a step is a whole number)."""
    lo, hi = min(steps), max(steps)
    ticks = [t for t in nice_ticks([lo, hi]) if lo <= t <= hi] or [lo, hi]
    plt.xlim(lo, max(hi, lo + 1))
    plt.xticks(ticks, [tick_label(t, ticks) if len(ticks) > 1 else str(int(t)) for t in ticks])
    plt.xlabel("step")


def implied_accept_len(acc: Sequence[float | None], steps: int) -> float | None:
    """L = 1 + Σ Π acc_i over the serving steps (None when the record carries no accuracy)."""
    rates = [a for a in list(acc)[:steps] if a is not None]
    return chain(rates) if len(rates) == min(steps, len(acc)) and rates else None


class AccuracyChart(FittedPlot):
    """acc_i per logged step for the first positions; eval accuracy as points."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines = 0

    def show(self, train: Sequence[TrainRecord], evals: Sequence[TrainRecord]) -> None:
        plt = self.plt
        plt.clear_data()
        self.set_y_axis([0.0, 1.0])
        rows = thin([r for r in train if r.acc], max(20, self.size.width - 10))
        self.lines = 0
        if not rows:
            self.set_titles("accuracy per position: no step logged yet", "accuracy: none logged yet")
            self.refresh()
            return
        self.set_titles("acc_0..3 by step (dots: eval)", "acc_0..3 by step", "accuracy")
        for i in range(min(POSITIONS, max(len(r.acc) for r in rows))):
            pts = [(r.step, a) for r in rows if i < len(r.acc) and (a := r.acc[i]) is not None]
            if pts:
                plt.plot([s for s, _ in pts], [a for _, a in pts], color=COLORS[i])
                self.lines += 1
            epts = [(e.step, e.acc[i]) for e in evals if i < len(e.acc)]
            if epts:
                plt.scatter([s for s, _ in epts], [a for _, a in epts], color=COLORS[i], marker="●")
        step_axis(plt, [r.step for r in rows])
        self.refresh()


class AcceptChart(FittedPlot):
    """The accept length each logged step's accuracy implies at the serving steps, with the break-even."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.last: float | None = None

    def show(self, train: Sequence[TrainRecord], steps: int, break_even: float) -> None:
        plt = self.plt
        plt.clear_data()
        implied = ((r.step, implied_accept_len(r.acc, steps)) for r in train)
        pts = thin([(s, v) for s, v in implied if v is not None], max(20, self.size.width - 10))
        self.last = pts[-1][1] if pts else None
        self.set_y_axis([1.0, steps + 1.0, break_even])
        if not pts:
            self.set_titles(f"accept length at {steps} steps: none yet", "accept length: none yet")
            plt.xlabel("step")
        else:
            # The newest logged step's figure, said so: the checkpoints table beside it predicts each checkpoint's.
            step = pts[-1][0]
            self.set_titles(
                f"accept length at {steps} steps: {self.last:.2f} at step {step} (train log)",
                f"accept length: {self.last:.2f} at step {step}",
                "accept length",
            )
            plt.plot([s for s, _ in pts], [v for _, v in pts], color="cyan", marker="hd")
            plt.hline(break_even, BOUND)
            plt.text(f"break-even {break_even:.2f}", pts[0][0], break_even, color=BOUND, alignment="left")
            step_axis(plt, [s for s, _ in pts])
        self.refresh()


class LossChart(FittedPlot):
    """The training loss (Σ 0.8^i·ploss_i) by step; NaN steps are gaps."""

    def show(self, train: Sequence[TrainRecord]) -> None:
        plt = self.plt
        plt.clear_data()
        rows = thin([(r.step, r.loss) for r in train if r.loss is not None], max(20, self.size.width - 10))
        if not rows:
            self.set_titles("loss: none logged yet")
            plt.xlabel("step")
        else:
            self.set_titles(f"loss: {rows[-1][1]:.3f}", "loss")
            plt.plot([s for s, _ in rows], [loss for _, loss in rows], color="magenta", marker="hd")
            self.set_y_axis([loss for _, loss in rows if loss == loss] or [0.0])  # NaN: a gap, no bound
            step_axis(plt, [s for s, _ in rows])
        self.refresh()
