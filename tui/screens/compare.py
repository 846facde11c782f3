"""The Compare tab: two drafters side by side against the target, and whether B can drop in for A.

Pick A, B and the target: a configured drafter name, a host path, ``file://PATH`` or ``hf://org/name``; an
empty target means the configured one. The diff is read in a worker (headers only: through the agent on the
host, or from the hub with Range requests) and drawn as a verdict badge with its problems and notes, a summary
line and two side-by-side tables (config keys, tensors) with a "differences only" toggle; it exports as
Markdown. A configured drafter that is not on the host yet is read from its hub repo, and the status says so.
"""

from __future__ import annotations

import asyncio
import os
import re

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Static

from backend.drafters.checkpoint_diff import CheckpointDiff, diff_to_markdown, format_totals
from backend.drafters.sources import HOST, Source, Sources, hub_endpoint, parse_source, read_diff, target_source
from backend.errors import SpecdeckError, UsageError
from tui.messages import ConnectionChanged
from tui.screens.pane import ShellPane
from tui.screens.prompt import PromptScreen
from tui.widgets.diff_table import DiffTable, config_rows, tensor_rows

SOURCE_HINT = "drafter name, host path, file://PATH or hf://org/name"


class ComparePane(ShellPane):
    """The picks line; status, verdict badge, summary, problems and notes; the config and tensor tables."""

    KEYS_WIDGET = "#compare-config"

    BINDINGS = [
        Binding("c", "compare", "Compare", id="compare.run", tooltip="Compare A and B against the target"),
        Binding("a", "pick('a')", "A", id="compare.pick_a", tooltip="Pick drafter A (" + SOURCE_HINT + ")"),
        Binding("b", "pick('b')", "B", id="compare.pick_b", tooltip="Pick drafter B (" + SOURCE_HINT + ")"),
        Binding("g", "pick('target')", "Target", id="compare.pick_target", tooltip="Pick the target model"),
        Binding("s", "swap", "Swap", id="compare.swap", tooltip="Swap drafters A and B"),
        Binding(
            "x",
            "differences_only",
            "Diffs only",
            id="compare.differences",
            tooltip="Show only the rows that differ (toggle)",
        ),
        Binding("m", "export", "Markdown", id="compare.export", tooltip="Export the diff as Markdown"),
    ]

    DEFAULT_CSS = """
    ComparePane { padding: 0 1; }
    ComparePane #compare-picks { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    ComparePane #compare-status { height: auto; max-height: 3; color: $text-muted; }
    ComparePane #compare-head { height: 1; margin-top: 1; }
    ComparePane #compare-badge { width: auto; padding: 0 1; text-style: bold; color: $text-muted; }
    ComparePane #compare-badge.-compatible { background: $success-muted; color: $text-success; }
    ComparePane #compare-badge.-incompatible { background: $error-muted; color: $text-error; }
    ComparePane #compare-summary { width: 1fr; padding: 0 1; color: $text-secondary; text-wrap: nowrap; }
    ComparePane #compare-problems { height: auto; max-height: 7; color: $text-error; }
    ComparePane #compare-notes { height: auto; max-height: 4; color: $text-muted; }
    ComparePane .title { height: 1; margin-top: 1; text-style: bold; color: $text-primary; }
    ComparePane #compare-config { height: 1fr; }
    ComparePane #compare-tensors { height: 2fr; }
    """

    PICKS = {"a": "drafter A", "b": "drafter B", "target": "the target model"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.picks = {"a": "", "b": "", "target": ""}
        self.diff: CheckpointDiff | None = None
        self.labels: tuple[str, str] = ("A", "B")
        self.differences_only = False
        self._host: str | None = None
        self._pending = False  # a compare asked for while the host was not connected

    def compose(self) -> ComposeResult:
        yield Static(id="compare-picks", markup=False)
        yield Static(
            "Press c to compare A and B; a, b and g pick them and the target.", id="compare-status", markup=False
        )
        with Horizontal(id="compare-head"):
            yield Static("no verdict yet", id="compare-badge", markup=False)
            yield Static(id="compare-summary", markup=False)
        yield Static(id="compare-problems", markup=False)
        yield Static(id="compare-notes", markup=False)
        yield Static("config", id="compare-config-title", classes="title", markup=False)
        yield DiffTable("key", id="compare-config")
        yield Static("tensors", id="compare-tensors-title", classes="title", markup=False)
        yield DiffTable("tensor", id="compare-tensors")

    def on_mount(self) -> None:
        names = list(self.app.settings.drafters)
        self.picks["a"] = names[0] if names else ""
        self.picks["b"] = names[1] if len(names) > 1 else ""
        self._show_picks()

    # --- picking ---------------------------------------------------------------------------------------------

    def _show_picks(self) -> None:
        target = self.picks["target"] or f"{self.app.settings.target} (configured)"
        self.query_one("#compare-picks", Static).update(
            f"A (a): {self.picks['a'] or '—'}   B (b): {self.picks['b'] or '—'}   target (g): {target}"
        )

    def action_pick(self, key: str) -> None:
        settings = self.app.settings
        choices = list(settings.drafters) + [f"hf://{d.repo}" for d in settings.drafters.values() if d.repo]
        hint = f"empty: the configured target {settings.target}" if key == "target" else SOURCE_HINT

        def picked(value: str | None) -> None:
            if value is not None:
                self.compare_sources(**{**self.picks, key: value})

        self.app.push_screen(PromptScreen(f"Pick {self.PICKS[key]}", self.picks[key], hint, choices), picked)

    def compare_sources(self, a: str, b: str, target: str | None = None) -> None:
        """Pick A and B (and the target, unless None: keep it; "" is the configured one) and compare them."""
        self.picks.update(a=a, b=b, **({} if target is None else {"target": target}))
        self._show_picks()
        self.action_compare()

    def action_swap(self) -> None:
        self.compare_sources(self.picks["b"], self.picks["a"])

    def open_drafter(self, drafter: str) -> None:
        """Another tab asks to see ``drafter``: it becomes B, against A (another drafter if A was it)."""
        a = self.picks["a"]
        if a in ("", drafter):
            a = next((n for n in self.app.settings.drafters if n != drafter), "")
        self.compare_sources(a, drafter)

    # --- comparing -------------------------------------------------------------------------------------------

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        if self._host is not None and message.host.name != self._host and self.diff is not None:
            self._status(f"now on {message.host.name}: press c to compare there")
        self._host = message.host.name
        if message.connected and self._pending:
            self.action_compare()

    def _status(self, text: str) -> None:
        self.query_one("#compare-status", Static).update(text)

    def action_compare(self) -> None:
        self._clear()  # the last verdict is of other picks, or of a read that may fail now: never shown beside it
        app = self.app
        picks = {key: value.strip() for key, value in self.picks.items()}
        try:
            a = parse_source(picks["a"], app.settings, app.host_config)
            b = parse_source(picks["b"], app.settings, app.host_config)
            target = target_source(picks["target"] or None, app.settings, app.host_config)
        except UsageError as exc:
            self._status(f"✕ {exc}")
            self.notify(str(exc), severity="error")
            return
        needs_host = any(s.kind == HOST for s in (a, b, target))
        self._pending = needs_host and not app.connection.connected
        if self._pending:
            self._status(f"waiting for {app.host_config.name} to connect…")
            return
        self._status(f"reading {a.label} and {b.label}…")
        self.run_compare(a, b, target, required=bool(picks["target"]))

    @work(exclusive=True, group="compare", exit_on_error=False, name="compare", description="compare the drafters")
    async def run_compare(self, a: Source, b: Source, target: Source, required: bool) -> None:
        app = self.app
        conn = app.connection  # this host's; a switch later starts a new compare

        async def current():
            return conn

        sources = Sources(app.host_config, current, hub_endpoint(app.host_config), hub_fallback=True)
        try:
            result, _, _ = await read_diff(sources, a, b, target, target_required=required)
        except SpecdeckError as exc:
            self._status(f"✕ {exc}")
            raise  # the app's funnel notifies
        self._show(result, a, b, sources.fallbacks)

    def _clear(self) -> None:
        self.diff = None
        badge = self.query_one("#compare-badge", Static)
        badge.update("no verdict yet")
        badge.remove_class("-compatible", "-incompatible")
        for id in ("compare-summary", "compare-problems", "compare-notes"):
            self.query_one(f"#{id}", Static).update("")
        for table in self.query(DiffTable):
            table.show([])
        self.query_one("#compare-config-title", Static).update("config")
        self.query_one("#compare-tensors-title", Static).update("tensors")

    def _show(self, d: CheckpointDiff, a: Source, b: Source, fallbacks: dict[str, Source]) -> None:
        self.diff, self.labels = d, (a.label, b.label)
        where = []
        for side, source, path in (("A", a, d.paths.a), ("B", b, d.paths.b)):
            text = f"{side} {source.label}"
            if source.label in fallbacks:
                text += f" (not on {self.app.host_config.name} yet: the hub copy)"
            where.append(text + (f" → {path}" if path != source.label else ""))
        where.append(f"target → {d.paths.target or 'none (unreadable)'}")
        self._status(" · ".join(where))

        v = d.verdict
        badge = self.query_one("#compare-badge", Static)
        if v.compatible is None:
            badge.update(f"? UNCHECKED · {len(v.unchecked)} checks not made")
        else:
            badge.update("✔ COMPATIBLE" if v.compatible else f"✕ INCOMPATIBLE · {len(v.problems)} problems")
        badge.set_class(v.compatible is True, "-compatible")
        badge.set_class(v.compatible is False, "-incompatible")
        summary = d.summary
        self.query_one("#compare-summary", Static).update(
            f"A {format_totals(summary.a, ' · ')}   B {format_totals(summary.b, ' · ')}"
        )
        self.query_one("#compare-problems", Static).update("\n".join(f"✕ {p}" for p in v.problems))
        unchecked = [f"? not checked: {u}" for u in v.unchecked]
        self.query_one("#compare-notes", Static).update("\n".join(unchecked + [f"· {n}" for n in v.notes]))
        self.query_one("#compare-config", DiffTable).show(config_rows(d))
        self.query_one("#compare-tensors", DiffTable).show(tensor_rows(d))
        self._titles()

    def _titles(self) -> None:
        only = " · differences only (x)" if self.differences_only else ""
        config = self.query_one("#compare-config", DiffTable)
        tensors = self.query_one("#compare-tensors", DiffTable)
        if self.diff is None:
            return
        s = self.diff.summary
        self.query_one("#compare-config-title", Static).update(
            f"config: {len(config.rows_all)} keys, {config.differing} differ{only}"
        )
        self.query_one("#compare-tensors-title", Static).update(
            f"tensors: {s.a.tensors} in A, {s.b.tensors} in B, {tensors.differing} differ{only}"
        )

    def action_differences_only(self) -> None:
        self.differences_only = not self.differences_only
        for table in self.query(DiffTable):
            table.set_differences_only(self.differences_only)
        self._titles()

    # --- Markdown export -------------------------------------------------------------------------------------

    def action_export(self) -> None:
        if self.diff is None:
            self.notify("nothing to export yet: compare A and B first (c)", severity="warning")
            return
        a, b = (_slug(label) for label in self.labels)
        hint = "a file path, relative to " + os.getcwd()
        self.app.push_screen(PromptScreen("Export the diff as Markdown", f"diff-{a}-vs-{b}.md", hint), self._export_to)

    def _export_to(self, path: str | None) -> None:
        if path and self.diff is not None:
            self.write_markdown(os.path.abspath(os.path.expanduser(path)), self.diff, self.labels)

    @work(group="compare-export", exit_on_error=False, name="export", description="export the diff as Markdown")
    async def write_markdown(self, path: str, diff: CheckpointDiff, labels: tuple[str, str]) -> None:
        text = diff_to_markdown(diff, f"A ({labels[0]})", f"B ({labels[1]})")
        try:
            await asyncio.to_thread(_write, path, text)
        except OSError as exc:
            raise UsageError(f"cannot write {path} ({exc.strerror}); pick another path") from None
        self.notify(f"diff written to {path}", title="exported")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _slug(label: str) -> str:
    """A file-name-safe version of a source label: ``hf://AQ-MedAI/x@main`` → ``AQ-MedAI-x-main``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label.removeprefix("hf://").removeprefix("file://")).strip("-") or "x"
