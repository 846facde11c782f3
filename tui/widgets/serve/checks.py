"""The Serve tab's preflight checks (the verdict first, then each check) and the command line the profile runs."""

from __future__ import annotations

from collections.abc import Iterable

from textual.markup import escape
from textual.widgets import Static

from backend.serve import preflight_checks

CHECK_MARKS = {
    "ok": ("✓", "$success"),
    "warn": ("!", "$warning"),
    "fail": ("✗", "$error"),
    "skip": ("-", "$text-muted"),
}


def count(items: list, one: str, many: str) -> str:
    return f"1 {one}" if len(items) == 1 else f"{len(items)} {many}"


def _names(checks: list[preflight_checks.Check]) -> str:
    return ", ".join(dict.fromkeys(c.name for c in checks))


class PreflightChecks(Static):
    """The checks of the selected profile: the client's own, or the host's preflight once run."""

    DEFAULT_CSS = "PreflightChecks { margin-top: 1; }"

    def show(self, checks: Iterable[preflight_checks.Check]) -> None:
        checks = list(checks)
        failed = [c for c in checks if c.status == "fail"]
        warned = [c for c in checks if c.status == "warn"]
        # The verdict first: a ✗ below the fold must not leave a column of ✓ to read.
        if failed:
            lines = [f"[b $error]✗ {count(failed, 'check fails', 'checks fail')}: {escape(_names(failed))}[/]"]
        elif warned:
            lines = [f"[b $warning]! {count(warned, 'warning', 'warnings')}: {escape(_names(warned))}[/]"]
        else:
            lines = [f"[b $success]✓ {count(checks, 'check passes', 'checks pass')}[/]"]
        for check in checks:
            mark, color = CHECK_MARKS[check.status]
            lines.append(f"[{color}]{mark}[/] {escape(check.name)}: {escape(check.message)}")
        self.update("\n".join(lines))


class CommandPreview(Static):
    """The selected profile's command line (every rank's, under its node), or why it has none."""

    DEFAULT_CSS = """
    CommandPreview { margin-top: 1; color: $text-secondary; }
    CommandPreview.-invalid { color: $text-error; }
    """

    def show(self, text: str, invalid: bool = False) -> None:
        self.update(text)
        self.set_class(invalid, "-invalid")
