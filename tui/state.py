"""State the App holds for every tab: reactives on ``SpecdeckApp`` that panes ``watch`` instead of being told."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Baseline:
    """The tok/s every tab judges runs against: a History run's mean (``run_id``), or the configured figure (None)."""

    tok_s: float
    run_id: str | None = None
