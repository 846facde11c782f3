"""A run as every table shows it (the CLI, the History tab, reports): its cells (numbers, the judge's verdicts
against the baseline and the break-even, the bench's per-stream tok/s) and the label a report calls it by, distinct
among the runs shown, with the report's title from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backend.agent.host.shared import units
from backend.history import RunSummary, Yardstick
from backend.measure import judge


def fmt(value: float | None, digits: int = 1, signed: bool = False, suffix: str = "") -> str:
    """A number for a table cell; an em dash when there is none."""
    if value is None:
        return "—"
    return f"{value:+.{digits}f}{suffix}" if signed else f"{value:.{digits}f}{suffix}"


def break_even_cell(run: RunSummary, yardstick: Yardstick) -> str:
    """The judge's break-even verdict as a cell (``judge.BreakEven.cell``); ``—`` without speculation."""
    judged = judge.run_break_even(run, yardstick)
    return "—" if judged is None else judged.cell()


@dataclass(frozen=True)
class RunCells:
    """A run's table cells as every table shows them (CLI, History tab, reports): ``tok_s`` is per stream,
    ``total_tok_s`` the aggregate, ``streams`` the concurrency seen; ``vs_baseline`` says what it compared:
    ``@N`` against the baseline measured at N streams, ``/stream`` per stream against the single-stream
    baseline."""

    profile: str
    drafter: str
    spec: str
    host: str
    outcome: str
    samples: str
    streams: str
    tok_s: str
    total_tok_s: str
    accept: str
    cycle_ms: str
    vs_baseline: str
    break_even: str

    def pick(self, columns: Sequence[str]) -> list[str]:
        """The cells of ``columns`` (field names), in that order: a table's row."""
        return [getattr(self, c) for c in columns]


def run_cells(run: RunSummary, yardstick: Yardstick) -> RunCells:
    """A run's cells (``RunCells``)."""
    versus = judge.run_versus(run, yardstick)
    return RunCells(
        profile=run.profile or "—",
        drafter=run.drafter or "—",
        spec=run.spec_text(),
        host=run.host,
        outcome=run.outcome or "—",
        samples=str(run.samples),
        streams=run.concurrency_text(),
        tok_s=judge.run_figure(run, yardstick),
        total_tok_s=fmt(run.total_tok_s),
        accept=fmt(run.accept_len, 2),
        cycle_ms=fmt(run.cycle_ms),
        vs_baseline="—" if versus is None else versus.cell(),
        break_even=break_even_cell(run, yardstick),
    )


VS_LEGEND = (
    "vs baseline: @N compares per-stream tok/s at N running requests with the baseline measured at N; "
    "/stream compares per-stream tok/s with the single-stream baseline (no baseline measured at that concurrency)."
)


def bench_cell(run: RunSummary) -> str:
    """The run's bench per-stream tok/s with its concurrency: the whole curve when benched at several levels."""
    if len(run.curve) > 1:
        return " ".join(f"{units.tok_s(p.tok_s)}@{p.streams}" for p in run.curve)
    bench = run.bench or {}
    return fmt(bench.get("tok_s")) + (f"@{bench['concurrency']}" if bench.get("concurrency") else "")


def run_label(run: RunSummary) -> str:
    """What a report calls a run: its profile and drafter, or the name ``distinct_labels`` gave it."""
    return run.label or base_label(run)


def base_label(run: RunSummary) -> str:
    return f"{run.profile or run.job_id}" + (f" [{run.drafter}]" if run.drafter else "")


def distinct_labels(runs: list[RunSummary]) -> list[RunSummary]:
    """``runs`` each with a label no other of them has: profile and drafter, then what differs among those that
    share them (steps/topk/draft, host), then the job id. A sweep's points read ``eagle3-aq [aq-medai] steps
    2/1/3``, not five times ``eagle3-aq [aq-medai]``."""
    from dataclasses import replace

    groups: dict[str, list[RunSummary]] = {}
    for run in runs:
        groups.setdefault(base_label(run), []).append(run)
    labels: dict[str, str] = {}
    for base, group in groups.items():
        specs, hosts = {r.spec_text() for r in group}, {r.host for r in group}
        for run in group:
            label = base
            if len(group) > 1 and len(specs) > 1:
                label += f" steps {run.spec_text()}"
            if len(group) > 1 and len(hosts) > 1:
                label += f" on {run.host}"
            labels[run.id] = label
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1
    for run in runs:
        if counts[labels[run.id]] > 1:
            labels[run.id] += f" ({run.job_id})"
    return [replace(run, label=labels[run.id]) for run in runs]


def report_title(runs: list[RunSummary]) -> str:
    """What the report compares: ``A vs B vs C``; runs of one profile and drafter named once, with what differs
    (``eagle3-aq [aq-medai]: steps 1/1/2, 2/1/3, 4/1/5``)."""
    bases = list(dict.fromkeys(base_label(r) for r in runs))
    if len(bases) == 1 and len(runs) > 1:
        rest = [run_label(r).removeprefix(bases[0]).strip() for r in runs]
        return f"{bases[0]}: " + ", ".join(r.removeprefix("steps ") if r.startswith("steps ") else r for r in rest)
    return " vs ".join(dict.fromkeys(run_label(r) for r in runs))
