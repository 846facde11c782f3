"""State the App holds for every tab: reactives on ``SpecdeckApp`` that panes ``watch`` instead of being told."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.measure import domains as domain_sets


@dataclass(frozen=True)
class Baseline:
    """The tok/s every tab judges runs against: a History run's mean (``run_id``), or the configured figure (None)."""

    tok_s: float
    run_id: str | None = None


@dataclass(frozen=True)
class PromptChoice:
    """What the panel's benches send, chosen for the session (Live's ``d``): the prompt sets by domain (names
    ``backend.measure.domains.parse`` takes; none: the load generator's built-in prompts), and ``raw``: Live's bench
    sends them as they are, not through the target's chat template (a sweep's benches always use the template)."""

    domains: tuple[str, ...] = ()
    raw: bool = False

    def label(self) -> str:
        """``chat, code`` or ``built-in prompts``, with ``, raw`` when asked."""
        return (", ".join(self.domains) or "built-in prompts") + (", raw" if self.raw else "")

    def sets(self, sandbox: bool) -> dict[str, dict[str, Any]] | None:
        """The sets to send (``domains.parse``, as ``--domains`` is read), None for the built-in prompts."""
        return domain_sets.parse(",".join(self.domains), sandbox) if self.domains else None
