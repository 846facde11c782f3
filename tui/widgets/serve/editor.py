"""The Serve tab's profile editor: the selected profile's numbers, only the fields its algorithm takes (declared
once in ``settings.PROFILE_FIELDS``: labels, ranges and help come from there), and its extra flags."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.widgets import Input, Label

from backend.errors import UsageError
from backend.serve import preflight_checks
from backend.settings.model import PROFILE_FIELDS, Declared, ProfileConfig
from tui.widgets.fieldinput import FieldInput

# The fields the editor offers (each shown when the profile's algorithm takes it); extra flags have their own line.
FIELDS: tuple[Declared, ...] = tuple(d for d in PROFILE_FIELDS if d.editor)


class ProfileEditor(Vertical):
    """The fields (``#edit-<name>``) and extra flags (``#edit-extra``); typing posts ``Input.Changed``."""

    DEFAULT_CSS = """
    ProfileEditor { height: auto; }
    ProfileEditor #editor { grid-size: 4; grid-columns: 10 1fr 10 1fr; grid-rows: 1; height: auto; grid-gutter: 0 1; }
    ProfileEditor #editor Label { color: $text-muted; }
    ProfileEditor #extra-label { color: $text-muted; margin-top: 1; }
    """

    def compose(self) -> ComposeResult:
        with Grid(id="editor"):
            for declared in FIELDS:
                yield Label(declared.text, id=f"label-{declared.name}")
                yield FieldInput(
                    id=f"edit-{declared.name}", type="integer" if declared.kind is int else "text",
                    compact=True, select_on_focus=False, placeholder="—" if declared.optional else "",
                    tooltip=declared.help,
                )  # fmt: skip
        yield Label("extra flags", id="extra-label")
        # An empty box must not read as a value: no flag in its placeholder (the tooltip has an example).
        yield FieldInput(
            id="edit-extra", placeholder="— none", compact=True,
            tooltip="More SGLang flags, as on its command line, e.g. --mem-fraction-static 0.85",
        )  # fmt: skip

    def show(self, profile: ProfileConfig) -> None:
        """Show ``profile``'s values, without posting ``Input.Changed`` (they are not edits)."""
        with self.prevent(Input.Changed):
            for declared in FIELDS:
                value = getattr(profile, declared.name)
                field = self.query_one(f"#edit-{declared.name}", Input)
                field.value = "" if value is None else str(value)
                # Only what the profile's algorithm takes (a profile without speculation: tp and port).
                shown = declared.applies(profile.algorithm) and (declared.algorithms is None or bool(profile.algorithm))
                field.display = self.query_one(f"#label-{declared.name}", Label).display = shown
            self.query_one("#edit-extra", Input).value = shlex.join(profile.extra_args)

    def read(self, base: ProfileConfig) -> ProfileConfig:
        """``base`` with the editor's values; raises UsageError on a value SGLang can't take."""
        values: dict[str, Any] = {}
        for declared in FIELDS:
            if not declared.applies(base.algorithm):
                continue
            try:
                value = declared.read(self.query_one(f"#edit-{declared.name}", Input).value)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if (problem := declared.problem(value)) is not None:
                raise UsageError(f"{problem}: SGLang refuses it, so it is not saved")
            values[declared.name] = value
        if base.algorithm and (
            problem := preflight_checks.speculative_problem(
                values.get("steps"), values.get("topk"), values.get("draft_tokens")
            )
        ):
            raise UsageError(f"{problem}: SGLang refuses it, so it is not saved")
        try:
            extra = shlex.split(self.query_one("#edit-extra", Input).value)
        except ValueError as exc:
            raise UsageError(f"extra flags: {exc}") from None
        return replace(base, extra_args=tuple(extra), **values)
