"""The Tune tab's charts: a run's acceptance histogram (bars), its per-position acceptance with the interval, and
predicted tok/s against draft steps with the interval, the measured points and the labelled baseline.

Each draws what it is given (``backend.tune.advisor.Advice`` or a sweep's points) and repaints on the next frame;
they hold no data of their own beyond what the last draw showed.
"""

from __future__ import annotations

from collections.abc import Sequence

from backend.tune.advisor import Advice
from backend.tune.sweep import SweepPoint
from tui.widgets.chart import FittedPlot

MEASURED = (215, 165, 0)  # gold: the measured points stand out from the predicted lines
PREDICTED = "cyan"
BOUND = "gray"


class HistogramChart(FittedPlot):
    """Verifies that accepted exactly k drafts, k = 0..steps."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.bars: list[int] = []

    def show(self, advice: Advice | None) -> None:
        plt = self.plt
        plt.clear_data()
        self.bars = list(advice.acceptance.histogram) if advice else []
        if not self.bars or advice is None:
            self.set_titles("acceptance histogram: no run with one", "no histogram yet")
        else:
            run = advice.run
            assert run is not None  # Tune advises on a run
            n = sum(self.bars)
            self.set_titles(
                f"drafts accepted per verify: {run.drafter or run.drafter_path} ({n} verifies)",
                f"drafts accepted per verify ({n} verifies)",
                "accepted per verify",
            )
            plt.bar([str(k) for k in range(len(self.bars))], self.bars, color=PREDICTED)
            self.set_y_axis([0, *self.bars])
            plt.xlabel("drafts accepted")
            plt.ylabel("verifies")
        self.refresh()


class PositionChart(FittedPlot):
    """Conditional acceptance a_i per draft position, measured, with its 95 % interval and the extrapolation."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.points: list[float] = []

    def show(self, advice: Advice | None, max_steps: int) -> None:
        plt = self.plt
        plt.clear_data()
        self.set_y_axis([0.0, 1.0])
        self.points = list(advice.acceptance.rates) if advice else []
        if not self.points or advice is None:
            self.set_titles("per-position acceptance: no run with a histogram", "no acceptance yet")
            self.refresh()
            return
        acc = advice.acceptance
        run = advice.run
        assert run is not None  # Tune advises on a run
        xs = list(range(1, len(acc.rates) + 1))
        self.set_titles(
            f"a_i per position: {run.drafter or run.drafter_path} (gold measured, grey 95%, cyan extrapolated)",
            "a_i per position (gold measured, cyan extrapolated)",
            "acceptance a_i by position",
        )
        plt.plot(xs, acc.low, color=BOUND, marker="dot")
        plt.plot(xs, acc.high, color=BOUND, marker="dot")
        plt.plot(xs, acc.rates, color=MEASURED, marker="hd")
        last = acc.rates[-1] if acc.rates else 0.0
        d = acc.decays(acc.rates)[0]  # the fitted decay (one position: the labelled assumption)
        ext = [min(1.0, last * d ** (j - len(xs))) for j in range(len(xs), max_steps + 1)]
        if len(ext) > 1:
            plt.plot(list(range(len(xs), max_steps + 1)), ext, color=PREDICTED, marker="dot")
        plt.xticks(list(range(1, max(max_steps, len(xs)) + 1)))  # positions are whole numbers
        plt.xlabel("draft position")
        plt.ylabel("a_i")
        self.refresh()


class StepsChart(FittedPlot):
    """Predicted tok/s per step count (line, interval in grey), measured points, the labelled baseline."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.measured: list[tuple[int, float]] = []

    def show(self, advice: Advice | None, sweep_points: Sequence[SweepPoint] = ()) -> None:
        plt = self.plt
        plt.clear_data()
        if advice is None:
            self.set_titles("tok/s by draft steps: no advice yet", "no advice yet")
            self.measured = [(p.steps, p.tok_s) for p in sweep_points if p.steps is not None and p.tok_s is not None]
        else:
            rows = advice.rows
            ks = [r.steps for r in rows]
            best = advice.best
            measured_best = best is not None and best.basis == "measured"
            figure = best and (best.measured_tok_s if measured_best else best.tok_s)
            basis = "measured" if measured_best else "predicted"
            head = f"best {best.steps}: {basis} {figure:.1f} tok/s" if best else "no best"
            if best and best.word != "best":
                head = f"{best.steps} the only measured: {figure:.1f} tok/s"
            self.set_titles(
                f"tok/s by steps, {head} (cyan predicted, grey 95%, gold measured)",
                f"tok/s by steps, {head} (cyan predicted, gold measured)",
                f"tok/s by steps, {head}",
                "tok/s by steps",
            )
            plt.plot(ks, [r.tok_s_low for r in rows], color=BOUND, marker="dot")
            plt.plot(ks, [r.tok_s_high for r in rows], color=BOUND, marker="dot")
            plt.plot(ks, [r.tok_s for r in rows], color=PREDICTED, marker="hd")
            measured = dict(advice.measured())
            measured.update({p.steps: p.tok_s for p in sweep_points if p.steps is not None and p.tok_s is not None})
            self.measured = sorted(measured.items())
            baseline = advice.yardstick.baseline_tok_s
            plt.hline(baseline, BOUND)
            plt.text(f"baseline {baseline:.1f}", ks[0], baseline, color=BOUND, alignment="left")
            bounds = [b for r in rows for b in (r.tok_s_low, r.tok_s_high) if b is not None]
            self.set_y_axis([*bounds, baseline, *(v for _, v in self.measured)])
        if self.measured:
            plt.scatter([k for k, _ in self.measured], [v for _, v in self.measured], color=MEASURED, marker="●")
        steps = {k for k, _ in self.measured} | ({r.steps for r in advice.rows} if advice else set())
        if steps:
            plt.xticks(list(range(min(steps), max(steps) + 1)))  # step counts are whole numbers
        plt.xlabel("draft steps")
        plt.ylabel("tok/s")
        self.refresh()
