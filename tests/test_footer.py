"""The shell's footer (tui/widgets/footer.py): composed again only when the keys it shows change (each focus or
bindings change signals it), and nothing of an earlier composition is kept."""

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
    noop_enabled = True

    def compose(self) -> ComposeResult:
        yield ShellFooter(show_command_palette=False)  # as the shell composes it

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "noop" and not self.noop_enabled else True  # None: shown, disabled

    def action_noop(self) -> None:
        pass


def composed_anew(footer: ShellFooter, before: set[FooterKey]) -> bool:
    keys = list(footer.query(FooterKey))
    return {k.action for k in keys} == ACTIONS and before.isdisjoint(keys) and all(k.is_mounted for k in keys)


async def test_the_footer_composes_again_only_for_other_keys_and_keeps_none_of_the_old():
    app = FooterApp()
    async with app.run_test(size=(80, 5)) as pilot:
        footer = app.query_one(ShellFooter)
        await until(pilot, lambda: composed_anew(footer, set()), "the footer's keys")
        first = set(footer.query(FooterKey))
        app.screen.refresh_bindings()  # what a focus change does; the same keys: nothing to draw anew
        await pilot.pause(0.2)
        assert set(footer.query(FooterKey)) == first
        old = [weakref.ref(key) for key in first]
        for _ in range(3):
            shown = set(footer.query(FooterKey))
            app.noop_enabled = not app.noop_enabled
            app.screen.refresh_bindings()
            await until(pilot, lambda: composed_anew(footer, shown), "the footer composed again")  # noqa: B023
        assert [k.has_class("-disabled") for k in footer.query(FooterKey) if k.action == "noop"] == [True]
        del first
        gc.collect()
        assert [ref() for ref in old if ref() is not None] == []  # Textual's binding of `compact` held them all


async def test_a_footer_told_to_compose_after_its_screen_closed_does_nothing():
    # A screen's idle callbacks can still ask its footer to compose once the screen is popped (the Find screen
    # closed under load): reading the bindings of a footer with no screen ended the panel with NoScreen.
    app = FooterApp()
    async with app.run_test(size=(80, 5)) as pilot:
        footer = app.query_one(ShellFooter)
        await until(pilot, lambda: composed_anew(footer, set()), "the footer's keys")
        await footer.remove()
        await footer.recompose()
        await pilot.pause()
    assert app.return_code in (None, 0)
