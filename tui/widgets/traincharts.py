"""The Train tab's charts: per-position accuracy over steps (train logs as lines, evals as points), the accept
length those accuracies imply at the serving steps against the break-even line, and the loss.

Each draws what it is given (the training's step and eval records) and repaints on the next frame; the
series are decimated to the chart's width first, so a long run costs what a short one does.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual_plotext import PlotextPlot

from backend.agent.host.advice import chain

COLORS = ("cyan", "green", (215, 165, 0), "magenta", "blue", "red", "white")
BOUND = "gray"
POSITIONS = 4  # acc_0..acc_3: what 3 draft steps (and the bonus) rest on; more would crowd the chart


def thin(records: Sequence[dict], width: int) -> list[dict]:
    """Every n-th record so at most ``width`` remain (the newest always kept)."""
    if len(records) <= max(2, width):
        return list(records)
    step = len(records) / float(width)
    picked = [records[int(i * step)] for i in range(width)]
    return [*picked[:-1], records[-1]]


def implied_accept_len(acc: Sequence[float | None], steps: int) -> float | None:
    """L = 1 + Σ Π acc_i over the serving steps (None when the record carries no accuracy)."""
    rates = [a for a in list(acc)[:steps] if a is not None]
    return chain(rates) if len(rates) == min(steps, len(acc)) and rates else None


class AccuracyChart(PlotextPlot):
    """acc_i per logged step for the first positions; eval accuracy as points."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines = 0

    def show(self, train: Sequence[dict], evals: Sequence[dict]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.ylim(0.0, 1.0)
        rows = thin([r for r in train if r.get("acc")], max(20, self.size.width - 10))
        self.lines = 0
        if not rows:
            plt.title("accuracy per position: no step logged yet")
            self.refresh()
            return
        plt.title("acc_0..3 by step (dots: eval)")
        for i in range(min(POSITIONS, max(len(r["acc"]) for r in rows))):
            pts = [(r["step"], r["acc"][i]) for r in rows if i < len(r["acc"]) and r["acc"][i] is not None]
            if pts:
                plt.plot([s for s, _ in pts], [a for _, a in pts], color=COLORS[i])
                self.lines += 1
            epts = [(e["step"], e["acc"][i]) for e in evals if i < len(e.get("acc") or [])]
            if epts:
                plt.scatter([s for s, _ in epts], [a for _, a in epts], color=COLORS[i], marker="●")
        plt.xlabel("step")
        self.refresh()


class AcceptChart(PlotextPlot):
    """The accept length each logged step's accuracy implies at the serving steps, with the break-even."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.last: float | None = None

    def show(self, train: Sequence[dict], steps: int, break_even: float) -> None:
        plt = self.plt
        plt.clear_data()
        pts = [(r["step"], implied_accept_len(r.get("acc") or [], steps)) for r in train]
        pts = [(s, v) for s, v in pts if v is not None]
        pts = [(p["step"], p["v"]) for p in thin([{"step": s, "v": v} for s, v in pts], max(20, self.size.width - 10))]
        self.last = pts[-1][1] if pts else None
        plt.ylim(1.0, steps + 1.0)
        if not pts:
            plt.title(f"accept length at {steps} steps: none yet")
        else:
            plt.title(f"accept length at {steps} steps: {self.last:.2f}")
            plt.plot([s for s, _ in pts], [v for _, v in pts], color="cyan", marker="hd")
            plt.hline(break_even, BOUND)
            plt.text(f"break-even {break_even:.2f}", pts[0][0], break_even, color=BOUND, alignment="left")
        plt.xlabel("step")
        self.refresh()


class LossChart(PlotextPlot):
    """The training loss (Σ 0.8^i·ploss_i) by step; NaN steps are gaps."""

    def show(self, train: Sequence[dict]) -> None:
        plt = self.plt
        plt.clear_data()
        rows = thin([r for r in train if r.get("loss") is not None], max(20, self.size.width - 10))
        if not rows:
            plt.title("loss: none logged yet")
        else:
            plt.title(f"loss: {rows[-1]['loss']:.3f}")
            plt.plot([r["step"] for r in rows], [r["loss"] for r in rows], color="magenta", marker="hd")
        plt.xlabel("step")
        self.refresh()
