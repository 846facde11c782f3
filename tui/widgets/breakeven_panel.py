"""The break-even calculator: editable cycle ms, baseline, steps and targets, with the limit figures AND the
finite-steps truth side by side (with 3 steps and 30 ms cycles nothing beats 133 tok/s, whatever p is)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.widgets import Input, Label, Static

from backend.errors import UsageError
from backend.measure.breakeven import BreakEven, breakeven
from tui.widgets.fieldinput import FieldInput


def parse_targets(text: str) -> list[float]:
    """Target tok/s from ``"150, 200"`` (commas or spaces)."""
    try:
        return [float(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise UsageError(f"targets must be numbers in tok/s, e.g. 150, 200 (got {text!r}).") from None


def _number(text: str, what: str, kind: type = float) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise UsageError(f"{what} must be a number, got {text!r}.") from None


def render_result(result: BreakEven) -> str:
    """The calculator's figures as Textual markup."""
    steps = result.steps
    lines = [f"break-even accept length [b]{result.break_even_accept_len:.2f}[/]"]
    if steps is not None:
        lines.append(f"{steps} steps: accept ≤ {steps + 1}, ceiling [b]{result.max_tok_s:.1f} tok/s[/]")
    else:
        lines.append("[$text-muted]no step count: limit figures only[/]")
    head = f"{'target':>6} {'accept':>6} {'p limit':>8}"
    lines.append(f"[b]{head}" + (f" {f'p {steps} steps':>11}" if steps is not None else "") + "[/]")
    for t in result.targets:
        row = f"{t.tok_s:>6g} {t.accept_len:>6.2f} {t.p_limit * 100:>7.1f}%"
        if steps is not None:
            if t.reachable and t.p_steps is not None:
                row += f" {t.p_steps * 100:>10.1f}%"
            else:
                row += " [$text-error]out of reach[/]"
        lines.append(row)
    return "\n".join(lines)


class BreakevenPanel(Vertical):
    """Inputs and figures; ``result`` is the last good ``backend.measure.breakeven.breakeven`` answer, ``error`` the
    sentence shown instead while an input is wrong."""

    def __init__(
        self, cycle_ms: float, baseline: float, steps: int | None, targets: Sequence[float], *, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self._initial = {
            "calc-cycle": f"{cycle_ms:g}",
            "calc-baseline": f"{baseline:g}",
            "calc-steps": "" if steps is None else str(steps),
            "calc-targets": ", ".join(f"{t:g}" for t in targets),
        }
        self._baseline = self._initial["calc-baseline"]  # the baseline last put in (not typed)
        self.result: BreakEven | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Label("Break-even calculator", classes="title")
        fields: tuple[tuple[str, str, Literal["integer", "number", "text"]], ...] = (
            ("calc-cycle", "cycle ms", "number"),
            ("calc-baseline", "baseline tok/s", "number"),
            ("calc-steps", "steps", "integer"),
            ("calc-targets", "targets tok/s", "text"),
        )
        for field_id, label, kind in fields:
            with Horizontal(classes="field"):
                yield Label(label)
                yield FieldInput(self._initial[field_id], id=field_id, type=kind, compact=True, select_on_focus=True)
        yield Static(id="calc-result")

    def on_mount(self) -> None:
        self.recompute()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.recompute()

    def value(self, field_id: str) -> str:
        return self.query_one(f"#{field_id}", Input).value.strip()

    def set_cycle(self, cycle_ms: float) -> None:
        """Put a measured cycle time in (the figures follow)."""
        self.query_one("#calc-cycle", Input).value = f"{cycle_ms:.1f}"

    def follow_baseline(self, text: str) -> None:
        """The baseline changed to ``text`` tok/s: put it in, unless the field holds a figure someone typed."""
        field = self.query_one("#calc-baseline", Input)
        if field.value.strip() == self._baseline:
            field.value = text
        self._baseline = text

    def recompute(self) -> None:
        out = self.query_one("#calc-result", Static)
        try:
            steps_text = self.value("calc-steps")
            self.result = breakeven(
                _number(self.value("calc-cycle"), "the cycle time"),
                _number(self.value("calc-baseline"), "the baseline"),
                parse_targets(self.value("calc-targets")),
                _number(steps_text, "the step count", int) if steps_text else None,
            )
            self.error = None
            out.update(render_result(self.result))
        except UsageError as exc:
            self.error = str(exc)
            out.update(f"[$text-warning]{escape(str(exc))}[/]")
