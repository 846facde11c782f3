"""The shell's footer (tui/widgets/footer.py): the keys of each composition are let go when the footer composes
again (each focus or bindings change recomposes it)."""

from __future__ import annotations

import gc
import weakref

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets._footer import FooterKey

from tests.helpers import until
from tui.widgets.footer import ShellFooter

pytestmark = [pytest.mark.tui, pytest.mark.unit]

ACTIONS = {"noop", "toggle_help", "quit"}


class FooterApp(App[None]):
    BINDINGS = [
        Binding("a", "noop", "A key"),
        Binding("question_mark", "toggle_help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def compose(self) -> ComposeResult:
        yield ShellFooter(show_command_palette=False)  # as the shell composes it

    def action_noop(self) -> None:
        pass


def composed_anew(footer: ShellFooter, before: set[FooterKey]) -> bool:
    keys = list(footer.query(FooterKey))
    return {k.action for k in keys} == ACTIONS and before.isdisjoint(keys) and all(k.is_mounted for k in keys)


async def test_a_recomposed_footer_keeps_none_of_its_old_keys():
    app = FooterApp()
    async with app.run_test(size=(80, 5)) as pilot:
        footer = app.query_one(ShellFooter)
        await until(pilot, lambda: composed_anew(footer, set()), "the footer's keys")
        old = [weakref.ref(key) for key in footer.query(FooterKey)]
        for _ in range(3):
            shown = set(footer.query(FooterKey))
            app.screen.refresh_bindings()  # what a focus change does: the footer composes its keys again
            await until(pilot, lambda: composed_anew(footer, shown), "the footer composed again")  # noqa: B023
        gc.collect()
        assert [ref() for ref in old if ref() is not None] == []  # Textual's binding of `compact` held them all
