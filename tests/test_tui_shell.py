"""The TUI shell driven through Pilot against real hosts: `local` (an agent subprocess) and loopback sshd."""

from __future__ import annotations

import os
import platform
import re
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.command import CommandList, CommandPalette
from textual.widgets import Input, OptionList, Static, TabbedContent

from backend.agent.host.shared.units import duration
from backend.errors import OperationFailed
from backend.serve.host_info import Gpu
from backend.settings.config_file import load
from backend.settings.model import builtin_defaults
from backend.settings.validation import parse
from tests.helpers import dialog_input, until
from tui.app import SpecdeckApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.hostkey import HostKeyScreen
from tui.screens.hosts import HostSwitchScreen
from tui.tabs import TABS
from tui.widgets.hostbar import HostBar, badge_text, gpu_summary

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

SIZE = (130, 30)


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch) -> Path:
    """`local` keeps its workdir under the user state dir: put it in tmp_path."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def text(app: SpecdeckApp, selector: str) -> str:
    return str(app.query_one(selector, Static).content)


def live(app: SpecdeckApp) -> bool:
    """Connected, with fresh info and an RTT in the header. Every test waits for it, so none ends (and
    closes the connection) in the middle of a connect attempt."""
    bar = app.query_one(HostBar)
    return bar.state.status == "connected" and bar.info is not None and not bar.stale and bar.rtt_ms is not None


@pytest.mark.slow
async def test_mounts_connects_and_shows_the_host(state_home):
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected with info and rtt")
        assert text(app, "#badge") == "● connected"
        assert text(app, "#host") in ("local", f"local ({socket.gethostname()})")
        assert text(app, "#python") == f"py {platform.python_version()}"
        assert re.fullmatch(r"rtt [\d.]+ ms \((1 ping|median of \d)\)", text(app, "#rtt")), text(app, "#rtt")
        # Issue 32: one ping of 200 ms on a busy box read as the link's round trip. The median of the latest.
        bar = app.query_one(HostBar)
        for ms in (0.41, 0.52, 200.0, 0.45, 0.43):
            bar.show_rtt(ms)
        assert text(app, "#rtt") == "rtt 0.45 ms (median of 5)"
        bar.show_rtt(0.40)  # the oldest drops out
        assert bar.rtts.ms == (0.52, 200.0, 0.45, 0.43, 0.40) and text(app, "#rtt") == "rtt 0.45 ms (median of 5)"
        assert text(app, "#sglang").startswith("sglang")
        assert text(app, "#gpus") == gpu_summary(app.host_info.gpus)
        assert not app.query_one("#sandbox").display
        assert app.connection.host.workdir.startswith(str(state_home))
        for tab in TABS:  # the first tab and Live at start-up; the others once shown (tui.tabs)
            assert bool(app.query(f"#{tab.id}-pane")) == tab.eager, tab.id
    assert app.connection.agent is None  # closed on exit


@pytest.mark.slow
async def test_number_keys_switch_tabs():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected")
        tabs = app.query_one(TabbedContent)
        for n, tab in reversed(list(enumerate(TABS, 1))):
            await pilot.press(str(n))
            await until(pilot, lambda: tabs.active == tab.id, f"the {tab.id} tab")  # noqa: B023 (awaited at once)
            assert isinstance(app.query_one(f"#{tab.id}-pane"), tab.pane_class())  # built for its first show


def test_the_panel_imports_a_tab_module_only_when_the_tab_is_shown():
    code = "import sys, tui.app; print(' '.join(m for m in sys.modules if m.startswith('tui.screens.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert {tab.module for tab in TABS if not tab.eager}.isdisjoint(loaded), loaded  # imported at first show


# Runs the panel headless on `local` as an operator opens it (on Drafters, one drafter's path holding Rich markup),
# shows Live, and once Live has drawn and polled, says which modules were imported (issue 31: resident memory idle
# on Live).
LIVE_IDLE = """
import sys
from dataclasses import replace
from backend.settings.model import DrafterConfig, builtin_defaults
from tui.app import SpecdeckApp

class Probe(SpecdeckApp):
    def on_connection_changed(self, message):
        if message.connected:
            self.action_show_tab("live")
            self.set_timer(1.0, self.report)  # Live's first paint and its first poll of the host

    def report(self):
        print(" ".join(sorted(sys.modules)))
        self.exit()

settings = builtin_defaults()
odd = DrafterConfig("odd", "/models/a[/b]")  # drawn as the text it is, never read as markup (it ended the panel)
Probe(replace(settings, drafters={**settings.drafters, "odd": odd}), host="local").run(headless=True, size=(160, 45))
"""
# Each is imported where it is first used; a module that appears here should be too (measure it before).
NOT_ON_LIVE = (
    "rich._emoji_codes",  # Rich markup's emoji table: a table cell given as str is parsed as markup
    "backend.measure.anatomy",  # the Profile key's (P)
    "tui.screens.promptsets",  # the prompt sets dialog's (d), with its SelectionList
    "textual.widgets._selection_list",
    "backend.tune.advisor",  # a finished bench's acceptance lines; the Tune tab's
    "plotext._core",  # plotext's module-level API and global figure: the charts draw on figures of their own
    "textual_plotext",
)


def test_the_panel_on_live_imports_none_of_what_it_does_not_use(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "SPECDECK_PERSIST": "0"}
    res = subprocess.run([sys.executable, "-c", LIVE_IDLE], capture_output=True, text=True, env=env, timeout=120)
    loaded = set(res.stdout.split())
    assert res.returncode == 0 and "tui.screens.live" in loaded, res.stderr[-2000:]  # no report: it ended early
    assert {m for m in NOT_ON_LIVE if m in loaded} == set()


@pytest.mark.slow
async def test_palette_lists_every_action_and_runs_them():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected")
        await pilot.press("ctrl+p")
        await dialog_input(pilot, CommandPalette, "the palette")
        commands = app.screen.query_one(CommandList)
        expected = {b.tooltip for b in app.BINDINGS if b.id != "palette"}
        assert len(expected) == len(app.BINDINGS) - 1
        # Each tab's own bindings with an id are commands too, named after the tab.
        expected |= {
            f"{tab.title}: {b.tooltip or b.description}"
            for tab in TABS
            for b in Binding.make_bindings(tab.pane_class().BINDINGS)
            if b.id
        }
        assert {"Show the Drafters tab", "Switch to another host", "Reconnect now, without waiting"} <= expected

        def listed() -> set[str]:
            return {commands.get_option_at_index(i).hit.text for i in range(commands.option_count)}

        await until(pilot, lambda: listed() == expected, "every action in the palette")
        await pilot.press(*"toggle the dark", "enter")
        await until(pilot, lambda: app.theme == "textual-light", "the theme command")


@pytest.mark.slow
async def test_theme_toggles_dark_and_light():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected")
        assert app.theme == "textual-dark"
        await pilot.press("t")
        await until(pilot, lambda: app.theme == "textual-light" and not app.current_theme.dark, "light")
        await pilot.press("t")
        await until(pilot, lambda: app.theme == "textual-dark", "dark again")


@pytest.mark.slow
async def test_help_panel_toggles():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected")
        await pilot.press("question_mark")
        await until(pilot, lambda: app.screen.query("HelpPanel"), "the help panel")
        await pilot.press("question_mark")
        await until(pilot, lambda: not app.screen.query("HelpPanel"), "the help panel to close")


@pytest.mark.slow
async def test_drop_keeps_stale_data_counts_down_and_reconnects():
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected")
        bar = app.query_one(HostBar)
        conn = app.connection
        old_pid, python_shown = conn.hello["pid"], text(app, "#python")
        # Reconnect attempts fail (no interpreter there), so the countdown shows; then kill the agent.
        host = conn.host
        conn.host = replace(host, python="/nonexistent/python3")
        os.kill(old_pid, signal.SIGKILL)

        await until(pilot, lambda: text(app, "#badge").startswith("↻ reconnecting in"), "the reconnect countdown")
        assert bar.stale and app.query_one("#facts").has_class("-stale")
        assert text(app, "#stale").startswith("stale ")
        assert text(app, "#python") == python_shown  # the last data stays on screen
        assert "no Python at /nonexistent/python3" in text(app, "#reason")
        assert app.query_one("#badge").has_class("-reconnecting")
        await pilot.press("2")  # the UI still answers while the host is away
        await until(pilot, lambda: app.query_one(TabbedContent).active == "compare", "the Compare tab")

        conn.host = host
        await pilot.press("r")  # reconnect now instead of waiting out the backoff
        await until(pilot, lambda: live(app) and conn.hello.get("pid") != old_pid, "reconnected with fresh data")
        assert text(app, "#badge") == "● connected"
        assert not app.query_one("#facts").has_class("-stale") and not app.query_one("#stale").display


@pytest.mark.slow
async def test_host_switcher_moves_the_panel_to_another_host(tmp_path):
    settings = parse(
        {
            "hosts": {
                "sandbox": {
                    "url": "local",
                    "sandbox": True,
                    "python": sys.executable,
                    "workdir": str(tmp_path),
                }
            }
        },
        "test config",
    )
    app = SpecdeckApp(settings, host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected to local")
        old = app.connection
        await pilot.press("h")
        # Pushed, then composed and focused by its own message loop: its list takes keys a moment later.
        await until(pilot, lambda: isinstance(app.screen, HostSwitchScreen) and isinstance(app.focused, OptionList),
                    "the host list focused")  # fmt: skip
        hosts = app.screen.query_one(OptionList)
        assert [hosts.get_option_at_index(i).id for i in range(hosts.option_count)] == [
            "gpu-box",
            "sandbox",
            "local",
        ]
        assert hosts.highlighted == 2  # the current host
        await pilot.press("up")
        await until(pilot, lambda: hosts.get_option_at_index(hosts.highlighted).id == "sandbox", "the sandbox")
        await pilot.press("enter")

        await until(pilot, lambda: app.host_config.name == "sandbox" and live(app), "connected to the sandbox")
        assert app.connection is not old and app.connection.host.workdir == str(tmp_path)
        await until(pilot, lambda: old.agent is None, "the old connection closed")
        assert app.query_one("#sandbox").display
        assert text(app, "#sglang").endswith("SIMULATED")
        assert text(app, "#host").startswith("sandbox")


@pytest.mark.slow
async def test_the_host_switcher_takes_a_typed_name_and_refuses_a_malformed_url(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("# mine\n")
    app = SpecdeckApp(load(str(config)), host="local")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected to local")
        await pilot.press("h")
        await until(pilot, lambda: isinstance(app.screen, HostSwitchScreen), "the switcher")
        typed = app.screen.query_one("#host-typed", Input)
        typed.focus()
        problem = app.screen.query_one("#host-problem", Static)
        for bad, words in (("ssh://bad url", "has a space in it"), ("nope", "unknown host 'nope'")):
            typed.value = bad
            await pilot.press("enter")
            await until(pilot, lambda w=words: w in str(problem.render()), f"{bad} refused")
            assert isinstance(app.screen, HostSwitchScreen) and app.host_config.name == "local"
        typed.value = "local"
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, HostSwitchScreen), "the typed host taken")

        # A typed ssh:// address is taken as --host takes it, and offered to be kept (a closed loopback port).
        await pilot.press("h")
        await until(pilot, lambda: isinstance(app.screen, HostSwitchScreen), "the switcher again")
        typed = app.screen.query_one("#host-typed", Input)
        typed.focus()
        typed.value = "ssh://root@127.0.0.1:1"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the offer to save it")
        assert app.host_config.url == "ssh://root@127.0.0.1:1"
        await pilot.press("y")
        await until(pilot, lambda: "127.0.0.1" in app.settings.hosts, "the host saved")
        assert load(str(config)).hosts["127.0.0.1"].url == "ssh://root@127.0.0.1:1"
        assert config.read_text().startswith("# mine\n")


@pytest.mark.slow
async def test_sandbox_flag_forces_the_badge():
    app = SpecdeckApp(builtin_defaults(), host="local", sandbox=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected")
        assert app.query_one("#sandbox").display
        assert text(app, "#sglang").endswith("SIMULATED")


@pytest.mark.slow
async def test_unknown_host_key_dialog_trusts_the_key_and_connects(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    raw = {
        "url": sshd.url,
        "python": sys.executable,
        "workdir": str(tmp_path / "w"),
        "identity": sshd.identity,
    }
    settings = parse({"hosts": {"loop": {**raw, "known_hosts": str(known)}}}, "test config")
    app = SpecdeckApp(settings, host="loop")
    async with app.run_test(size=SIZE) as pilot:
        dialog = lambda: isinstance(app.screen, HostKeyScreen) and app.screen.query("#fingerprint")  # noqa: E731
        await until(pilot, dialog, "the host-key dialog, composed")
        shown = str(app.screen.query_one("#fingerprint", Static).content)
        assert shown.startswith("SHA256:") and shown == app.connection.last_error.fingerprint
        assert text(app, "#badge") == "✕ lost"

        await pilot.press("n")  # refused: nothing written, the panel waits for the user
        assert known.read_text() == "" and app.connection.state.status == "lost"
        await pilot.press("r")  # asking again shows the dialog again
        await until(pilot, lambda: isinstance(app.screen, HostKeyScreen), "the dialog again")
        await pilot.press("y")

        await until(pilot, lambda: live(app), "connected over ssh", timeout=30)
        assert sshd.host_key_pub in known.read_text()
    # The line the dialog wrote is one OpenSSH accepts too.
    ssh = subprocess.run(sshd.ssh_argv("true", known_hosts=str(known)), capture_output=True, text=True, timeout=60)
    assert ssh.returncode == 0, ssh.stderr


@pytest.mark.slow
async def test_changed_host_key_is_refused_without_a_dialog(sshd, tmp_path):
    import asyncssh

    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().strip()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other}\n")
    raw = {"url": sshd.url, "python": sys.executable, "workdir": str(tmp_path / "w"), "identity": sshd.identity}
    settings = parse({"hosts": {"loop": {**raw, "known_hosts": str(known)}}}, "test config")
    app = SpecdeckApp(settings, host="loop")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.query_one(HostBar).state.status == "lost", "the refusal")
        assert "CHANGED" in text(app, "#reason")
        await until(pilot, lambda: any("CHANGED" in n.message for n in app._notifications), "a notification")
        assert not isinstance(app.screen, HostKeyScreen)
        assert known.read_text() == f"[127.0.0.1]:{sshd.port} {other}\n"


@pytest.mark.slow
async def test_worker_failures_become_notifications():
    app = SpecdeckApp(builtin_defaults(), host="local")

    async def fails_cleanly() -> None:
        raise OperationFailed("the job failed: disk full")

    async def has_a_bug() -> None:
        raise KeyError("oops")

    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: live(app), "connected")
        app.run_worker(fails_cleanly(), exit_on_error=False)
        # A tab's worker reaches the same funnel (worker state messages do not bubble on their own).
        app.query_one("#live-pane").run_worker(has_a_bug(), exit_on_error=False, description="parse the log")
        messages = lambda: [n.message for n in app._notifications]  # noqa: E731
        await until(pilot, lambda: len(messages()) >= 2, "two notifications")
        assert "the job failed: disk full" in messages()
        assert any(m.startswith("parse the log failed: KeyError") for m in messages())
        assert app.is_running


def test_header_text_helpers():
    from backend.connection import ConnState

    assert duration(5) == "5s" and duration(185) == "3m05s" and duration(7440) == "2h04m"
    assert badge_text(ConnState("reconnecting", retry_at=102.2), now=100) == "↻ reconnecting in 3s"
    assert badge_text(ConnState("reconnecting", retry_at=99), now=100) == "↻ reconnecting…"
    assert badge_text(ConnState("lost", "bad key"), now=0) == "✕ lost"
    gpus = [Gpu(i, "H200", memory_used_mib=1024.0 * 10, memory_total_mib=1024.0 * 141) for i in range(8)]
    assert gpu_summary(gpus) == "8x H200 80/1128 GiB"
    assert gpu_summary([]) == "no GPUs"


async def test_a_connection_word_after_the_headers_widgets_went_draws_nothing():
    # Closing, Textual removes the header's own widgets before the header; the connection's last word (its close)
    # can arrive between the two, and the header queried a widget gone: NoMatches ended the panel's close.
    from textual.app import App, ComposeResult

    from backend.connection import ConnState
    from backend.settings.model import HostConfig

    class Bar(App[None]):
        def compose(self) -> ComposeResult:
            yield HostBar(HostConfig(name="local", url="local"), sandbox=False)

    app = Bar()
    async with app.run_test() as pilot:
        bar = app.query_one(HostBar)
        await bar.remove_children()
        bar.show_state(ConnState("lost", "closed"))
        await pilot.pause()
    assert app.return_code in (None, 0)
