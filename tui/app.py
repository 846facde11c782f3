"""The specdeck TUI shell: header bar, the tabs, footer, command palette, host switcher and theme.

The shell owns the host connection. It never waits on it: the Connection's supervisor (re)connects in the
background and reports each state change, which the shell turns into a coalescing ``ConnectionChanged``
message for every tab. What a tab can count on is in ``tui.screens.pane``.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.filter import LineFilter
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import AwaitMount
from textual.widgets import TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from backend import jobs
from backend.connection import Connection, ConnState, resolve_host
from backend.errors import ConnectionFailed, HostKeyUnknown, SpecdeckError
from backend.history import HistoryThread, Yardstick
from backend.hosttext import visible
from backend.serve.host_info import HostInfo, host_info
from backend.settings.config_file import save_host, save_profile
from backend.settings.model import HostConfig, ProfileConfig, Settings
from tui import lazystrip
from tui.commands import ActionsProvider
from tui.driver import QuietLinuxDriver
from tui.messages import ConnectionChanged, OpenInCompare, ProfileSaved
from tui.screens.confirm import ConfirmScreen
from tui.screens.hostkey import HostKeyScreen
from tui.screens.hosts import HostSwitchScreen
from tui.screens.live import COMMIT_EVERY_S
from tui.screens.pane import ShellPane
from tui.state import Baseline, PromptChoice
from tui.tabs import TAB, TABS
from tui.visiblefilter import VisibleControls
from tui.widgets.footer import ShellFooter
from tui.widgets.hostbar import HostBar

if TYPE_CHECKING:
    from tui.screens.compare import ComparePane

RTT_EVERY_S = 15.0  # the header's round trip; each new figure repaints it, so an idle panel asks seldom
_TAB_KEYS = Binding.Group("tabs", compact=True)
_VISIBLE = VisibleControls()  # one instance: Textual caches each line's filtered form per filter


class SpecdeckApp(App[int]):
    """The panel on one host at a time; ``switch_host`` moves it to another."""

    # Absolute, so subclasses defined elsewhere (tests, probes, screenshot scripts) find it too.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "specdeck"
    COMMANDS = {ActionsProvider}
    # The screen's classes say how big the terminal is: app.tcss narrows, stacks and tightens panels below
    # 130 columns or 38 rows.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (130, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (38, "-tall")]
    # Every binding has an id (for set_keymap) and is a palette command (tui.commands).
    BINDINGS = [
        *(
            Binding(
                str(n),
                f"show_tab('{tab}')",
                f"{title} tab",
                id=f"tab.{tab}",
                tooltip=f"Show the {title} tab",
                group=_TAB_KEYS,
            )
            for n, (tab, title) in enumerate(((t.id, t.title) for t in TABS), 1)
        ),
        Binding("h", "switch_host", "Host", id="host.switch", tooltip="Switch to another host"),
        Binding("r", "reconnect", "Reconnect", id="host.reconnect", tooltip="Reconnect now, without waiting"),
        Binding(
            "J",
            "prune_jobs",
            "Prune jobs",
            id="jobs.prune",
            tooltip=f"Remove the host's ended jobs older than {jobs.PRUNE_DEFAULT} (running jobs stay)",
        ),
        Binding("t", "toggle_theme", "Theme", id="theme.toggle", tooltip="Toggle the dark and light themes"),
        Binding("question_mark", "toggle_help", "Help", id="help", tooltip="Show or hide the keys panel"),
        Binding("ctrl+p", "command_palette", "Palette", id="palette", tooltip="Search every action"),
        Binding("q", "quit", "Quit", id="quit", tooltip="Quit specdeck (jobs on the host keep running)"),
    ]

    # The tok/s every tab judges against: the configured figure until the history has a measured baseline run.
    # The Live tab reads it at start-up, the History tab sets it when a run is marked; tabs watch it.
    baseline: reactive[Baseline] = reactive(Baseline(0.0), init=False)
    # The prompt sets the panel's benches and sweeps send, chosen for the session (Live's and Tune's d).
    prompts: reactive[PromptChoice] = reactive(PromptChoice(), init=False)

    def __init__(
        self,
        settings: Settings,
        host: str | None,
        overrides: dict | None = None,
        sandbox: bool | None = None,
    ) -> None:
        super().__init__()
        lazystrip.install()  # every line the panel draws starts without Textual's seven empty caches
        self.settings = settings
        self.set_reactive(SpecdeckApp.baseline, Baseline(settings.reference.baseline_tok_s))
        self.host_config: HostConfig = resolve_host(settings, host, **(overrides or {}))
        # Forces the SANDBOX badge for the start-up host (demo mode); other hosts use their own config.
        self._sandbox_override = sandbox
        # Created now (cheap, no I/O) so tabs can always reach it; it connects once the app is mounted.
        self.connection = Connection(self.host_config)
        # The run history, on a thread of its own: every tab asks it and records through it, never SQLite here.
        self.history = HistoryThread(every_s=COMMIT_EVERY_S)
        self.host_info: HostInfo | None = None  # the host's `info`, refreshed after every (re)connect
        self._rtt_timer: Timer | None = None
        self._lost_reason = ""  # the last "connection lost" notified
        self._tabs_seen: set[str] = set()  # tabs shown once: what their first show built is frozen
        self._mounting: dict[str, AwaitMount] = {}  # panes built after start-up, by tab

    def get_line_filters(self) -> Sequence[LineFilter]:
        # Host text in any widget reaches the terminal with its controls shown, never obeyed.
        return [*super().get_line_filters(), _VISIBLE]

    def notify(self, message: str, *, title: str = "", **kwargs) -> None:
        # Errors quoted from a host's log: escaped before the toast wraps them (the filter would cut its lines).
        super().notify(visible(message), title=visible(title), **kwargs)

    def get_key_display(self, binding: Binding) -> str:
        # A one-character key shows as itself, as Textual shows it, but without Textual first asking unicodedata
        # for a character named so (none is): each miss reads pages of its name tables, ~0.6 MB resident for the
        # footer's keys (issue 31).
        if not binding.key_display and len(binding.key) == 1:
            return binding.key
        return super().get_key_display(binding)

    def get_driver_class(self) -> type[Driver]:
        # Textual's own terminal driver wakes its input thread ten times a second: ours sleeps until input.
        driver = super().get_driver_class()
        return QuietLinuxDriver if driver is LinuxDriver else driver

    async def yardstick(self) -> Yardstick:
        """What every figure is judged against now: the history's (the measured baseline by concurrency), else
        the configured figures (the history's failure is the Live tab's to say)."""
        ref = self.settings.reference
        try:
            return await self.history.query(lambda history: history.yardstick(ref.baseline_tok_s, ref.cycle_ms))
        except SpecdeckError:
            return Yardstick(ref.baseline_tok_s, ref.cycle_ms)

    @property
    def sandbox(self) -> bool:
        if self._sandbox_override is not None:
            return self._sandbox_override
        return self.host_config.sandbox

    def compose(self) -> ComposeResult:
        yield HostBar(self.host_config, self.sandbox, id="hostbar")
        with TabbedContent(id="tabs"):
            for tab in TABS:
                with TabPane(tab.title, id=tab.id):
                    if tab.eager:  # the others when first shown (``pane``)
                        yield tab.pane_class()(id=f"{tab.id}-pane")
        yield ShellFooter(show_command_palette=False)  # ctrl+p is one of our own bindings

    def on_mount(self) -> None:
        # Connect once the first frame is up: start-up paints the shell first, whatever the host does.
        self.call_after_refresh(self._attach_connection, self.connection)
        # What start-up built (the widgets of every tab, modules) lives as long as the panel: out of the
        # collector's sight, a full collection no longer walks it (~100 ms of a frame, while a log floods in).
        # Collected first, so the garbage of start-up is not kept; each tab's first show freezes again (below).
        self.call_after_refresh(self._freeze_settled)

    async def on_unmount(self) -> None:
        await self.connection.close()
        self.history.close()  # writes the last second the Live tab followed (a few ms)
        gc.unfreeze()  # what start-up built can go now (an app run inside a longer process: tests, the web panel)

    # --- the connection ------------------------------------------------------------------------------------

    def _attach_connection(self, conn: Connection) -> None:
        conn.on_state(partial(self._on_state, conn))
        conn.supervise()  # a background task: returns at once

    def _on_state(self, conn: Connection, state: ConnState) -> None:
        # Called on the event loop by the Connection; a connection we switched away from is ignored.
        if conn is self.connection:
            self.post_message(ConnectionChanged(state, conn.host))

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        state = message.state
        bars = self.query(HostBar)
        if not bars:  # the panel is closing: its widgets went before the connection's last word (its close)
            return
        bars.first().show_state(state)
        for pane in self.query(ShellPane):
            pane.post_message(ConnectionChanged(state, message.host))
        if state.status == "connected":
            self._load_info()
            self._poll_rtt()
        elif state.status == "lost":
            self._on_lost(state)

    def _on_lost(self, state: ConnState) -> None:
        err = self.connection.last_error
        if isinstance(err, HostKeyUnknown) and str(err) == state.reason:
            if not isinstance(self.screen, HostKeyScreen):
                self.push_screen(HostKeyScreen(err), partial(self._host_key_answered, self.connection, err))
        elif state.attempt <= 1 or state.reason != self._lost_reason:  # not again on every retry
            self.notify(state.reason, title="connection lost", severity="error", markup=False)
        self._lost_reason = state.reason

    def _host_key_answered(self, conn: Connection, err: HostKeyUnknown, trust: bool | None) -> None:
        if not trust or conn is not self.connection:
            return
        from backend.transport.hostkeys import trust_host_key

        try:
            trust_host_key(err.known_hosts, err.key_line)
        except OSError as exc:
            self.notify(f"cannot write {err.known_hosts}: {exc.strerror}", severity="error", markup=False)
            return
        self.notify(f"trusted {err.fingerprint} in {err.known_hosts}", markup=False)
        conn.retry_now()

    @work(
        group="info",
        exclusive=True,
        exit_on_error=False,
        name="host-info",
        description="read the host's info",
    )
    async def _load_info(self) -> None:
        conn = self.connection
        info = await host_info(conn)
        if conn is self.connection:
            self.host_info = info
            self.query_one(HostBar).show_info(info)

    def _arm_rtt(self) -> None:
        # A one-shot timer re-armed after each poll: polls never pile up behind a slow link.
        if self._rtt_timer is not None:
            self._rtt_timer.stop()
        self._rtt_timer = self.set_timer(RTT_EVERY_S, self._poll_rtt, name="rtt")

    @work(group="rtt", exclusive=True, exit_on_error=False, name="rtt", description="time an agent round trip")
    async def _poll_rtt(self) -> None:
        conn = self.connection
        if not conn.connected:
            return  # the next "connected" re-arms
        try:
            rtt = await conn.ping(1)
            if conn is self.connection:
                self.query_one(HostBar).show_rtt(rtt.median)
        finally:
            if conn is self.connection and conn.connected:
                self._arm_rtt()

    @work(group="close", exit_on_error=False, name="close-connection", description="close the previous host")
    async def _close_connection(self, conn: Connection) -> None:
        await conn.close()

    def switch_host(self, name: str | None) -> None:
        """Move the panel to host ``name`` (configured or ``local``): close the old connection, open one."""
        if name is None:
            return
        try:
            host = resolve_host(self.settings, name)
        except SpecdeckError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        old = self.connection
        self._sandbox_override = None
        self.host_config = host
        self.connection = Connection(self.host_config)
        self.host_info = None
        if self._rtt_timer is not None:
            self._rtt_timer.stop()
        self.query_one(HostBar).show_host(self.host_config, self.sandbox)
        self._attach_connection(self.connection)
        self._close_connection(old)
        if name.startswith("ssh://"):
            self._offer_to_save(name)

    def _offer_to_save(self, url: str) -> None:
        """A typed ssh:// address: offer to keep it in the config file as a host named after its address."""
        address = urlsplit(url).hostname or "host"
        name = next(n for n in (address, *(f"{address}-{i}" for i in range(2, 100))) if n not in self.settings.hosts)

        def answered(save: bool | None) -> None:
            if save:
                self.save_host(name, url)

        question = f"Keep {url} in the config file as host {name}, so h and --host {name} find it?"
        self.push_screen(ConfirmScreen("Save this host?", question, "Save", "Not now"), answered)

    @work(group="save-host", exit_on_error=False, thread=True, description="save the host to the config file")
    def save_host(self, name: str, url: str) -> None:
        settings, path = save_host(self.settings, name, url)
        self.call_from_thread(self._host_saved, settings, name, path)

    def _host_saved(self, settings: Settings, name: str, path: Path) -> None:
        self.settings = settings
        self.notify(f"host {name} saved to {path}")

    async def on_open_in_compare(self, message: OpenInCompare) -> None:
        # Composed first: a pane built for this show would otherwise pick its defaults over the drafter asked for.
        cast("ComparePane", await self.shown_pane("compare")).open_drafter(message.drafter)
        self.action_show_tab("compare")

    # --- the one error funnel ------------------------------------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.report_worker(event.worker)

    def report_worker(self, worker: Worker) -> None:
        """Turn a failed worker (the shell's or a tab's, started with exit_on_error=False) into a toast."""
        if worker.state != WorkerState.ERROR:
            return
        err = worker.error
        if isinstance(err, ConnectionFailed) and not self.connection.connected:
            return  # the header already says the link is down
        if isinstance(err, SpecdeckError):
            self.notify(str(err), severity="error", markup=False)  # messages quote [host]:port, paths
        else:
            self.log.error(worker, repr(err))
            what = worker.description or worker.name
            self.notify(f"{what} failed: {err!r}", title="internal error", severity="error", markup=False)

    # --- actions -------------------------------------------------------------------------------------------

    def pane(self, tab: str) -> ShellPane:
        """Tab ``tab``'s pane, its module imported and the pane mounted now if this is its first show (``tui.tabs``);
        a pane built late is told the connection's state, as the others were when it last changed."""
        found = self.query(f"#{tab}-pane")
        if found:
            return cast(ShellPane, found.first())
        pane = TAB[tab].pane_class()(id=f"{tab}-pane")
        self._mounting[tab] = self.query_one(f"TabPane#{tab}", TabPane).mount(pane)
        pane.post_message(ConnectionChanged(self.connection.state, self.connection.host))
        return pane

    async def shown_pane(self, tab: str) -> ShellPane:
        """``pane``, once mounted (its widgets composed): what an action run on it from outside needs."""
        pane = self.pane(tab)
        if tab in self._mounting:
            await self._mounting[tab]
        return pane

    def action_show_tab(self, tab: str) -> None:
        self.pane(tab)  # first: a tab is never shown without its pane
        tabs = self.query_one(TabbedContent)
        if tabs.active == tab:
            self._focus_tab(tab)  # already shown: its keys should still act
        tabs.active = tab  # a TabActivated follows, as for a click on the tab

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # However the tab was reached, its keys act at once: focus their owner once the tab is visible.
        pane_id = event.pane.id
        if pane_id is not None:
            self.pane(pane_id)  # a click on the tab's title shows it too
        self.call_after_refresh(self._focus_tab, pane_id)
        if pane_id is not None and pane_id not in self._tabs_seen:  # every tab pane has an id
            self._tabs_seen.add(pane_id)
            self.call_after_refresh(self._freeze_settled)

    def _freeze_settled(self) -> None:
        # Connecting, the tabs' first loads and a tab's first paint build ~50k long-lived objects after the
        # start-up freeze (render caches); every full collection walked them, ~45 ms of a frame while a log
        # floods in. Once per tab, so what freezing keeps of later garbage cycles is bounded. Frozen objects are
        # never collected: a widget frozen live and removed later (the footer's keys, each recompose; the
        # virtual nodes of every restyle) stayed in memory, with its styles and render caches, ~2 MB by the
        # time Live settled (issue 31). So the frozen ones are collected too, the garbage among them with
        # the rest: a full collection, ~40 ms of the tab's first show (~20 ms for the unfrozen alone).
        gc.unfreeze()
        gc.collect()
        gc.freeze()

    def _focus_tab(self, tab: str | None) -> None:
        if tab is None or self.query_one(TabbedContent).active != tab:  # not if another was chosen meanwhile
            return
        pane = self.query_one(f"#{tab}-pane", ShellPane)
        if pane.is_mounted:
            pane.focus_keys()
        else:  # built for this show: its widgets are not composed yet
            self.call_after_refresh(self._focus_tab, tab)

    def action_switch_host(self) -> None:
        self.push_screen(HostSwitchScreen(self.settings.hosts, self.host_config.name), self.switch_host)

    def action_reconnect(self) -> None:
        if self.connection.connected:
            self.notify(f"{self.host_config.name} is connected")
        else:
            self.connection.retry_now()

    @work(group="jobs", exclusive=True, exit_on_error=False, name="prune-jobs", description="prune ended jobs")
    async def action_prune_jobs(self) -> None:
        conn = self.connection
        if not conn.connected:
            self.notify(f"{self.host_config.name} is not connected: press r to reconnect first", severity="warning")
            return
        out = await jobs.prune(conn, jobs.parse_duration(jobs.PRUNE_DEFAULT))
        running = f"; {out.running} still running, kept" if out.running else ""
        self.notify(
            f"removed {len(out.removed)} ended job(s) older than {jobs.PRUNE_DEFAULT} from "
            f"{self.host_config.name}{running}"
        )

    @work(group="save-profile", exit_on_error=False, thread=True, description="save the profile to the config file")
    def save_profile(self, profile: ProfileConfig) -> None:
        """Write ``profile`` into the config file (comments and layout kept) and use the settings it gives."""
        settings, path = save_profile(self.settings, profile)
        self.call_from_thread(self._profile_saved, settings, profile, path)

    def _profile_saved(self, settings: Settings, profile: ProfileConfig, path: Path) -> None:
        self.settings = settings
        for pane in self.query(ShellPane):
            pane.post_message(ProfileSaved(settings.profiles[profile.name]))
        self.notify(f"profile {profile.name} saved to {path}")

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def action_toggle_help(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def action_show_help_panel(self) -> None:
        """The keys panel beside the tabs, under the header bar: on the screen it would split the header too."""
        from textual.widgets import HelpPanel  # here: its Markdown and Pygments cost 3 MB a panel never asked for help

        if self.screen.query(HelpPanel):
            return
        tabs = self.screen.query(TabbedContent)
        (tabs.first() if tabs else self.screen).mount(HelpPanel())
