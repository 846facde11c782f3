"""The Serve tab: pick a profile, adjust its numbers, start / stop / restart / switch SGLang with one key each,
and watch it come up (phase timeline, GPU memory, the log following its tail) or read why it died. The editor
offers the fields the profile's algorithm takes (``settings.PROFILE_FIELDS``, declared once: their ranges and
labels come from there) and ``A`` turns SGLang's adaptive step count on or off.

Everything shown comes from the host through the server face (``backend.serve.server``, which also makes a
multi-node server's status the whole server's): the status is pushed by the agent (``Server.watch``) and the
log is followed by byte offset (``serving.follow``); both resume by themselves after a reconnect, so the tab
reattaches to a server that kept running while the panel was away. Edits to a profile's numbers reach the
config file once typing pauses; numbers SGLang refuses (steps 0, topk 0, too few draft tokens) are never saved,
and a profile saved elsewhere (Tune's apply best) is shown as stored. Restart and switch on a live server ask
first, naming the server they stop: on a large model a restart costs minutes.

The pane holds the state (the server's status, the action in flight, the edits) and the actions; what it shows is
drawn by a widget per concern (``tui/widgets/serve/``: the profile list, the editor, the checks and command line,
the server's state and clock, the GPUs, the log's bar, the crash hint).
"""

from __future__ import annotations

import time
from dataclasses import replace

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import Input, OptionList, Static
from textual.worker import Worker

from backend.connection import Connection
from backend.errors import SpecdeckError, UsageError
from backend.serve import command_line, multinode, preflight_checks, server_status, serving
from backend.serve.host_info import GpuUse, gpu_use
from backend.serve.server import Server
from backend.settings.model import FIELD, ProfileConfig
from tui.messages import ConnectionChanged, OpenInCompare, ProfileSaved
from tui.screens.anatomy import PROFILE_TOOLTIP, AnatomyScreen
from tui.screens.confirm import ConfirmScreen
from tui.screens.pane import ShellPane
from tui.widgets.logview import LogView
from tui.widgets.serve.checks import CommandPreview, PreflightChecks, count
from tui.widgets.serve.editor import ProfileEditor
from tui.widgets.serve.gpus import GpuList
from tui.widgets.serve.hint import ServerHint
from tui.widgets.serve.logbar import LogBar
from tui.widgets.serve.profiles import ProfileList
from tui.widgets.serve.state import ServerState

TAIL_LINES = 500
GPU_EVERY_S = 5.0
SAVE_AFTER_S = 1.0  # edits reach the config file once typing pauses this long


class ServePane(ShellPane):
    """The Serve tab body (see the module docstring)."""

    KEYS_WIDGET = "#profiles"

    DEFAULT_CSS = """
    ServePane #serve-body { height: 1fr; }
    ServePane #serve-left { width: 50; padding: 0 1; border-right: vkey $panel; }
    ServePane .title { text-style: bold; color: $text-primary; }
    ServePane #serve-right { width: 1fr; padding: 0 1; }
    ServePane #serve-top { height: auto; max-height: 14; }
    ServePane #log-row { height: 1fr; }
    ServePane #log { width: 1fr; border: none; }
    """

    BINDINGS = [
        Binding("s", "start", "Start", id="serve.start", tooltip="Start the selected profile's server"),
        Binding(
            "S",
            "start(True)",
            "Start anyway",
            id="serve.start_force",
            tooltip="Start the selected profile even if Compare finds its drafter incompatible (--force)",
        ),
        Binding("x", "stop", "Stop", id="serve.stop", tooltip="Stop the server (SIGTERM, SIGKILL after 30 s)"),
        Binding(
            "R", "restart", "Restart", id="serve.restart", tooltip="Restart the running server's profile (asks first)"
        ),
        Binding(
            "w",
            "switch",
            "Switch",
            id="serve.switch",
            tooltip="Switch profiles: stop the running server and start the selected one (asks first)",
        ),
        Binding("p", "preflight", "Check", id="serve.preflight", tooltip="Run the selected profile's preflight checks"),
        Binding("f", "follow", "Follow", id="serve.follow", tooltip="Follow the server log's tail again"),
        Binding("e", "errors_only", "Errors", id="serve.errors", tooltip="Show only the log's error lines (toggle)"),
        Binding("slash", "filter", "Filter", id="serve.filter", tooltip="Filter the server log"),
        Binding(
            "a",
            "polls",
            "Polls",
            id="serve.polls",
            tooltip="Show or hide the access-log lines of specdeck's own polls (GET /metrics, /server_info, "
            "/health from the host)",
        ),
        Binding(
            "o", "open_compare", "Compare", id="serve.compare", tooltip="Compare the server's drafter with the target"
        ),
        Binding(
            "A",
            "adaptive",
            "Adaptive",
            id="serve.adaptive",
            tooltip="Let SGLang pick the step count per batch (--speculative-adaptive) for the selected profile, "
            "or go back to its fixed steps",
        ),
        Binding("P", "profile", "Profile", id="serve.profile", tooltip=PROFILE_TOOLTIP),
    ]

    # The host's last word on the server and the action in flight (one at a time): either redraws the state.
    status: reactive[server_status.ServerStatus | None] = reactive(None, init=False)
    busy: reactive[str | None] = reactive(None, init=False)

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gpus: GpuUse | None = None
        self.checks: tuple[preflight_checks.Check, ...] | None = None  # the host's preflight, once run
        self.edits: dict[str, ProfileConfig] = {}
        self._sent: dict[str, ProfileConfig] = {}  # the edit last handed to the App to save, per profile
        self.selected: str | None = None
        self._conn: Connection | None = None  # the connection the watchers run on
        self._log_job: str | None = None
        self._gpu_timer: Timer | None = None
        self._save_timer: Timer | None = None
        self._watcher: Worker | None = None
        self._node_links: multinode.Nodes | None = None  # connections to a multi-node server's other hosts

    def compose(self) -> ComposeResult:
        with Horizontal(id="serve-body"):
            with VerticalScroll(id="serve-left", can_focus=False):
                yield Static("Profiles", classes="title")
                yield ProfileList(id="profiles", compact=True)
                yield ProfileEditor()
                yield PreflightChecks(id="checks")
                yield CommandPreview(id="preview", markup=False)
            with Vertical(id="serve-right"):
                with Horizontal(id="serve-top"):
                    yield ServerState(id="server-box")
                    yield GpuList(id="gpu-list")
                yield LogBar(id="log-bar")
                with Horizontal(id="log-row"):
                    yield LogView(classify=server_status.line_level, hide=server_status.is_poll_line, id="log")
                    yield ServerHint(id="hint")

    def on_mount(self) -> None:
        names = list(self.app.settings.profiles)
        self.selected = names[0] if names else None
        self._fill_profiles()
        if self.selected:
            self.query_one(ProfileList).highlighted = 0
            self._fill_editor()
        log = self.query_one(LogView)
        self.watch(log, "pending", self._show_badge)
        self.watch(log, "following", self._show_badge)
        self._render_state()

    def on_show(self) -> None:
        self.query_one(ServerState).seen(True)
        self._poll_gpus()  # fresh figures as soon as the tab is seen (the shell focuses the profiles list)

    def on_hide(self) -> None:
        self.query_one(ServerState).seen(False)

    # --- the connection and the feeds -------------------------------------------------------------------------

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        conn = self.app.connection
        if message.connected and (conn is not self._conn or self._watcher is None or not self._watcher.is_running):
            # A new connection (start-up or host switch), or a watch that failed: watch the host's server.
            # A reconnect of the same connection needs nothing: both feeds resume by themselves.
            self._conn, self._log_job, self.status, self.gpus = conn, None, None, None
            self.query_one(LogView).reset()
            self._watcher = self._follow_status(conn)
            self._poll_gpus()
        self._fill_preview()
        self._render_state()

    @work(group="serve-watch", exclusive=True, exit_on_error=False, description="follow the server's status")
    async def _follow_status(self, conn: Connection) -> None:
        async for seen in self._server(conn).watch():
            if conn is not self.app.connection:
                return
            self.status = seen.status
            if seen.log_job != self._log_job:  # this host's own log (its rank's, of a multi-node server)
                self._log_job = seen.log_job
                self._follow_log(conn, self._log_job)

    def _server(self, conn: Connection | None = None) -> Server:
        """The server face on this host; connections to a multi-node server's other hosts are kept here, opened
        when first needed and closed with the tab."""
        if self._node_links is None:
            self._node_links = multinode.Nodes(self.app.settings)
        return Server(self.app.settings, conn or self.app.connection, nodes=self._node_links)

    async def on_unmount(self) -> None:
        if self._node_links is not None:
            await self._node_links.close()

    def watch_status(self) -> None:
        self._fill_profiles()
        self._render_state()

    def watch_busy(self) -> None:
        self._render_state()

    @work(group="serve-log", exclusive=True, exit_on_error=False, description="follow the server log")
    async def _follow_log(self, conn: Connection, job: str | None) -> None:
        log = self.query_one(LogView)
        if job is None:
            log.reset()
            return
        tail = await serving.tail(conn, job, TAIL_LINES)
        log.reset(tail.lines)
        async for lines in serving.follow(conn, job, tail.offset):
            if conn is not self.app.connection:
                return
            log.append(lines)

    @work(group="serve-gpus", exclusive=True, exit_on_error=False, description="read the GPUs")
    async def _poll_gpus(self) -> None:
        # A one-shot timer re-armed after each poll: polls never pile up behind a slow link.
        conn = self.app.connection
        try:
            # nvidia-smi costs the host a little: only when seen
            if conn.connected and self.parent is not None and self.parent.display:
                self.gpus = await gpu_use(conn)
                self.query_one(GpuList).show(self.gpus)
        finally:
            if self._gpu_timer is not None:
                self._gpu_timer.stop()
            if self.is_mounted and self.parent is not None and self.parent.display:  # hidden: on_show polls and re-arms
                self._gpu_timer = self.set_timer(GPU_EVERY_S, self._poll_gpus, name="serve-gpus")

    # --- profiles and the editor ------------------------------------------------------------------------------

    def _profile(self, name: str | None) -> ProfileConfig | None:
        if name is None:
            return None
        return self.edits.get(name) or self.app.settings.profiles.get(name)

    def _fill_profiles(self) -> None:
        running = self.status.profile if self.status and self.status.running else None
        self.query_one(ProfileList).fill(self.app.settings.profiles, self.edits, running)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id == "profiles" and event.option.id != self.selected:
            self.selected = event.option.id
            self.checks = None
            self._fill_editor()

    def _fill_editor(self) -> None:
        profile = self._profile(self.selected)
        if profile is None:
            return
        self.query_one(ProfileEditor).show(profile)
        self._fill_preview()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-filter":
            self.query_one(LogView).set_filter(event.value)
        elif (event.input.id or "").startswith("edit-") and self.selected:
            try:
                self.edits[self.selected] = self._read_editor()
            except UsageError as exc:
                self._show_preview(str(exc), invalid=True)
                return
            self._save_soon()
            self.checks = None
            self._fill_profiles()
            self._fill_preview()

    def _save_soon(self) -> None:
        """Write the edited profile to the config file once typing pauses."""
        if self._save_timer is not None:
            self._save_timer.stop()
        self._save_timer = self.set_timer(SAVE_AFTER_S, self._save, name="serve-save")

    def _save(self) -> None:
        profile = self._profile(self.selected)
        if profile is not None and profile != self.app.settings.profiles.get(profile.name):
            self._sent[profile.name] = profile
            self.app.save_profile(profile)

    def on_profile_saved(self, message: ProfileSaved) -> None:
        """The stored profile is the truth: an edit it matches is done, one saved elsewhere replaces ours (the
        editor shows it), and only typing since our own save stays pending."""
        stored = message.profile
        edit = self.edits.pop(stored.name, None)
        if edit is not None and edit != stored and self._sent.get(stored.name) == stored:
            self.edits[stored.name] = edit  # our own save, with newer typing still to be saved
            return
        self._fill_profiles()
        if stored.name == self.selected and edit != stored:  # saved elsewhere: show it (ours shows already)
            self.checks = None
            self._fill_editor()

    def _read_editor(self) -> ProfileConfig:
        """The selected profile with the editor's values; raises UsageError on a value SGLang can't take."""
        assert self.selected is not None  # the editor shows the selected profile
        base = self._profile(self.selected) or self.app.settings.profiles[self.selected]
        return self.query_one(ProfileEditor).read(base)

    def _fill_preview(self) -> None:
        profile = self._profile(self.selected)
        if profile is None:
            self._show_preview("no profiles configured")
            return
        try:
            if profile.nodes:  # every rank's command line, each under its node
                ranks = multinode.plan(self.app.settings, profile)
                lines = [f"# {r.node}, rank {r.rank}\n{command_line.shell_line(r.argv, r.env)}" for r in ranks]
                text = "\n".join(lines)
            else:
                cmd = command_line.profile_command(self.app.settings, self.app.host_config, profile)
                text = command_line.shell_line(cmd.argv, cmd.env)
        except SpecdeckError as exc:
            self._show_preview(str(exc), invalid=True)
            return
        self._show_preview(text)
        if self.checks is None:
            version = command_line.host_sglang_version(self.app.host_config, self.app.host_info)
            self.query_one(PreflightChecks).show(preflight_checks.profile_checks(self.app.settings, profile, version))

    def _show_preview(self, text: str, invalid: bool = False) -> None:
        self.query_one(CommandPreview).show(text, invalid)

    # --- actions ----------------------------------------------------------------------------------------------

    def action_start(self, force: bool = False) -> None:
        self._act("start", force)

    def action_stop(self) -> None:
        self._act("stop")

    def action_restart(self) -> None:
        self._act("restart")

    def action_switch(self) -> None:
        self._act("switch")

    def action_preflight(self) -> None:
        self._act("preflight")

    def action_follow(self) -> None:
        self.query_one(LogView).follow()

    def action_errors_only(self) -> None:
        log = self.query_one(LogView)
        log.set_filter(errors_only=not log.errors_only)
        self._show_badge()

    def action_polls(self) -> None:
        log = self.query_one(LogView)
        log.set_filter(show_hidden=log.hiding)
        self._show_badge()

    def action_filter(self) -> None:
        self.query_one("#log-filter", Input).focus()

    def action_adaptive(self) -> None:
        """Turn SGLang's adaptive step count on or off for the selected profile (saved like any edit)."""
        profile = self._profile(self.selected)
        if profile is None:
            return
        if not profile.algorithm or not FIELD["adaptive"].applies(profile.algorithm):
            takers = ", ".join(FIELD["adaptive"].algorithms or ())
            self.notify(
                f"{profile.name} runs {profile.algorithm or 'without speculation'}: SGLang adapts the steps of "
                f"{takers} only",
                severity="warning",
            )
            return
        self.edits[profile.name] = replace(profile, adaptive=not profile.adaptive)
        self._save_soon()
        self.checks = None
        self._fill_profiles()
        self._fill_preview()

    def action_profile(self) -> None:
        status = self.status
        if status is None or status.state != "ready" or not status.job:
            self.notify("no server is ready to profile; start one first", severity="warning")
            return
        self.app.push_screen(AnatomyScreen(status.job))

    def action_open_compare(self) -> None:
        """Compare the drafter that failed (or the selected profile's) against the target."""
        st = self.status
        drafter = st.drafter if st and st.hint_action == "compare" else None
        profile = self._profile(self.selected)
        drafter = drafter or (profile.drafter if profile else None)
        if drafter:
            self.post_message(OpenInCompare(drafter))
        else:
            self.app.action_show_tab("compare")

    def _act(self, what: str, force: bool = False) -> None:
        # A key pressed right after an arrow comes before the list's "highlighted" message: act on (and name, in
        # any question) the profile the list highlights now, not the one last heard of.
        profiles = self.query_one("#profiles", OptionList)
        if profiles.highlighted is not None:
            shown = profiles.get_option_at_index(profiles.highlighted).id
            if shown is not None and shown != self.selected:
                self.selected, self.checks = shown, None
                self._fill_editor()
        if self.busy:
            self.notify(f"{self.busy} is still running", severity="warning")
            return
        if not self.app.connection.connected:
            self.notify(f"{self.app.host_config.name} is not connected", severity="error")
            return
        st = self.status
        if what in ("restart", "switch") and st is not None and st.running:
            self._confirm_replace(what, st, force)
            return
        if what == "stop" and st is not None and st.state in server_status.SERVING_STATES:
            self._confirm_stop(st)
            return
        self.busy = what
        self._run_action(what, force)

    def _confirm_replace(self, what: str, st: server_status.ServerStatus, force: bool) -> None:
        """Ask before stopping a live server: it names the server it stops and the profile it starts."""
        name = self._restart_target(st) if what == "restart" else self.selected
        running = server_status.running_text(st, time.time())
        if what == "restart":
            question = f"Restart {running}: stop it and start {name} again?"
        else:
            question = f"Stop {running} and start {name}?"
        question += " Loading the weights and capturing CUDA graphs again takes minutes on a large model."

        def answered(yes: bool | None) -> None:
            if yes and not self.busy:
                self.busy = what
                self._run_action(what, force)

        title = "Restart the server?" if what == "restart" else "Switch profiles?"
        yes = "Restart" if what == "restart" else "Switch"
        self.app.push_screen(ConfirmScreen(title, question, yes, "Keep it running"), answered)

    def _confirm_stop(self, st: server_status.ServerStatus) -> None:
        """Ask before stopping a server that may be serving someone (the Fleet tab's `x` asks the same)."""
        question = f"Stop {server_status.running_text(st, time.time())}"
        question += f" on port {st.port}?" if st.port else "?"
        question += " Requests in flight fail, and starting it again takes minutes on a large model."

        def answered(yes: bool | None) -> None:
            if yes and not self.busy:
                self.busy = "stop"
                self._run_action("stop", False)

        self.app.push_screen(ConfirmScreen("Stop the server?", question, "Stop", "Keep it running"), answered)

    def _restart_target(self, st: server_status.ServerStatus | None) -> str | None:
        """The profile a restart starts: the running server's, else the selected one."""
        current = st.profile if st else None
        return current if current in self.app.settings.profiles else self.selected

    @work(group="serve-action", exit_on_error=False, description="serve action")
    async def _run_action(self, what: str, force: bool) -> None:
        server = self._server()
        try:
            if what == "stop":
                out = await server.stop()
                if not out.was_running:
                    self.notify("no server is running")
                elif out.status.nodes:
                    self.notify(f"stopped {out.status.profile} on {len(out.status.nodes)} nodes")
                else:
                    self.notify(f"stopped {out.status.profile}")
                return
            name = self._restart_target(self.status) if what == "restart" else self.selected
            profile = self._profile(name)
            if profile is None:
                raise UsageError("no profile selected")
            if what == "preflight":
                self._show_checks(await server.preflight(profile, force=force))
                return
            launch = server.start if what == "start" else server.restart
            try:
                launched = await launch(profile, force=force)
            except preflight_checks.PreflightFailed as exc:
                self._show_checks(exc.preflight)  # its toast says which checks fail
                return
            self._show_checks(launched.preflight)
            if profile.nodes:
                self.notify(f"starting {profile.name} on {len(profile.nodes)} nodes, served by {profile.nodes[0]}")
            else:
                self.notify(f"starting {profile.name} on port {profile.port}")
        finally:
            self.busy = None

    def _show_checks(self, preflight: preflight_checks.Preflight) -> None:
        self.checks = preflight.checks
        self.query_one(PreflightChecks).show(preflight.checks)
        failed = preflight.failures
        if failed:
            self.notify(
                "; ".join(f"{c.name}: {c.message}" for c in failed),
                title=f"{preflight.profile}: {count(failed, 'check fails', 'checks fail')}",
                severity="error",
                markup=False,
            )
            checks = self.query_one(PreflightChecks)
            self.call_after_refresh(checks.scroll_visible, top=True)

    # --- the server's state -----------------------------------------------------------------------------------

    def _render_state(self) -> None:
        self.query_one(ServerState).show(self.status, self.busy)
        self.query_one(ServerHint).show(self.status)

    def _show_badge(self, *_: object) -> None:
        self.query_one(LogBar).show(self.query_one(LogView))
