"""The Serve tab: pick a profile, adjust its numbers, start / stop / restart / switch SGLang with one key each,
and watch it come up (phase timeline, GPU memory, the log following its tail) or read why it died. The editor
offers the fields the profile's algorithm takes (``settings.PROFILE_FIELDS``, declared once: their ranges and
labels come from there) and ``A`` turns SGLang's adaptive step count on or off.

Everything shown comes from the host: the server's status is pushed by the agent (``serving.watch``) and the
log is followed by byte offset (``serving.follow``); both resume by themselves after a reconnect, so the tab
reattaches to a server that kept running while the panel was away. Edits to a profile's numbers reach the
config file once typing pauses; numbers SGLang refuses (steps 0, topk 0, too few draft tokens) are never saved,
and a profile saved elsewhere (Tune's apply best) is shown as stored. Restart and switch on a live server ask
first, naming the server they stop: on a large model a restart costs minutes.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker

from backend.connection import Connection
from backend.errors import SpecdeckError, UsageError
from backend.serve import multinode, serving
from backend.settings import FIELD, PROFILE_FIELDS, Declared, ProfileConfig
from tui.messages import ConnectionChanged, OpenInCompare, ProfileSaved
from tui.screens.anatomy import PROFILE_TOOLTIP, AnatomyScreen
from tui.screens.confirm import ConfirmScreen
from tui.screens.pane import ShellPane
from tui.widgets.fieldinput import FieldInput
from tui.widgets.logview import LogView

TAIL_LINES = 500
GPU_EVERY_S = 5.0
NODES_EVERY_S = 1.0  # a multi-node server: every node's status this often while it runs
CLOCK_LATE_S = 0.02  # the clock wakes this long after a figure's second turns, so it reads the new one
SAVE_AFTER_S = 1.0  # edits reach the config file once typing pauses this long
# The fields the editor offers (each shown when the profile's algorithm takes it); extra flags have their own line.
FIELDS: tuple[Declared, ...] = tuple(d for d in PROFILE_FIELDS if d.editor)
STATE_MARKS = {
    "none": ("○", "$text-muted"),
    "starting": ("◌", "$warning"),
    "ready": ("●", "$success"),
    "orphaned": ("◍", "$error"),
    "stopping": ("◌", "$warning"),
    "stopped": ("○", "$text-muted"),
    "crashed": ("✕", "$error"),
}
ROW_MARKS = {
    "done": ("✓", "$success"),
    "current": ("●", "$warning"),
    "failed": ("✕", "$error"),
    "pending": ("·", "$text-muted"),
}
CHECK_MARKS = {
    "ok": ("✓", "$success"),
    "warn": ("!", "$warning"),
    "fail": ("✗", "$error"),
    "skip": ("-", "$text-muted"),
}


def _spec_text(profile: ProfileConfig) -> str:
    """A profile's speculation in the list: ``EAGLE3 3/1/4``, ``EAGLE3 adaptive``, ``DFLASH block 8``."""
    if not profile.algorithm:
        return "no speculation"
    if profile.adaptive:
        return f"{profile.algorithm} adaptive"
    if profile.algorithm in ("DFLASH", "DSPARK", "NGRAM"):
        return serving.algorithm_summary(profile)
    return f"{profile.algorithm} {profile.steps}/{profile.topk}/{profile.draft_tokens}"


def _count(items: list, one: str, many: str) -> str:
    return f"1 {one}" if len(items) == 1 else f"{len(items)} {many}"


def _names(checks: list[serving.Check]) -> str:
    return ", ".join(dict.fromkeys(c.name for c in checks))


def _bar(used: float, total: float, width: int = 10) -> str:
    filled = round(width * used / total) if total else 0
    return "█" * filled + "░" * (width - filled)


def _next_change(st: serving.ServerStatus, now: float) -> float | None:
    """Seconds until an elapsed figure of the state block changes: the head's age (``since_text`` in minutes:
    each second for the first minute, then each minute) and the current phase's time so far (each second
    under an hour, then each minute, as it reads 2h04m)."""
    waits = []
    if st.since:
        age = max(0.0, now - st.since)
        step = 1.0 if age < 60 else 60.0
        waits.append(step - age % step + CLOCK_LATE_S)
    for row in serving.timeline(st, now):
        if row["state"] == "current" and row["seconds"] is not None:
            step = 1.0 if row["seconds"] < 3600 else 60.0
            waits.append(step - row["seconds"] % step + CLOCK_LATE_S)
    return min(waits, default=None)


class ServePane(ShellPane):
    """The Serve tab body (see the module docstring)."""

    KEYS_WIDGET = "#profiles"

    DEFAULT_CSS = """
    ServePane #serve-body { height: 1fr; }
    ServePane #serve-left { width: 50; padding: 0 1; border-right: vkey $panel; }
    ServePane .title { text-style: bold; color: $text-primary; }
    ServePane #profiles { height: auto; max-height: 8; margin-bottom: 1; }
    ServePane #editor { grid-size: 4; grid-columns: 10 1fr 10 1fr; grid-rows: 1; height: auto; grid-gutter: 0 1; }
    ServePane #editor Label { color: $text-muted; }
    ServePane #extra-label { color: $text-muted; margin-top: 1; }
    ServePane #preview { margin-top: 1; color: $text-secondary; }
    ServePane #preview.-invalid { color: $text-error; }
    ServePane #checks { margin-top: 1; }
    ServePane #serve-right { width: 1fr; padding: 0 1; }
    ServePane #serve-top { height: auto; max-height: 14; }
    ServePane #server-box { width: 1fr; height: auto; }
    ServePane #gpu-list { width: 36; color: $text-secondary; }
    ServePane #log-bar { height: 1; margin-top: 1; }
    ServePane #log-filter { width: 1fr; }
    ServePane #log-badge { width: auto; padding: 0 1; }
    ServePane #log-badge.-frozen { background: $warning-muted; color: $text-warning; }
    ServePane #log-row { height: 1fr; }
    ServePane #log { width: 1fr; border: none; }
    ServePane #hint { width: 40; display: none; padding: 0 1; border-left: vkey $error; color: $text; }
    ServePane #hint.-shown { display: block; }
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
    status: reactive[serving.ServerStatus | None] = reactive(None, init=False)
    busy: reactive[str | None] = reactive(None, init=False)

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.gpus: dict | None = None
        self.checks: tuple[serving.Check, ...] | None = None  # the host's preflight, once run
        self.edits: dict[str, ProfileConfig] = {}
        self._sent: dict[str, ProfileConfig] = {}  # the edit last handed to the App to save, per profile
        self.selected: str | None = None
        self._conn: Connection | None = None  # the connection the watchers run on
        self._log_job: str | None = None
        self._gpu_timer: Timer | None = None
        self._save_timer: Timer | None = None
        self._watcher: Worker | None = None
        self._state_shape: list[int] = []  # the line lengths of the head, then of the block under it, last drawn
        self._drawn: dict[str, str] = {}  # what each Static updated by a timer shows now (its id → text)
        self._clock: Timer | None = None  # redraws the state when its next elapsed figure changes
        self._seen = False  # the tab is shown: a hidden tab's clock would lay the screen out for nothing
        self._node_links: multinode.Nodes | None = None  # connections to a multi-node server's other hosts

    def compose(self) -> ComposeResult:
        with Horizontal(id="serve-body"):
            with VerticalScroll(id="serve-left", can_focus=False):
                yield Static("Profiles", classes="title")
                yield OptionList(id="profiles", compact=True)
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
                yield Static(id="checks")
                yield Static(id="preview", markup=False)
            with Vertical(id="serve-right"):
                with Horizontal(id="serve-top"):
                    with Vertical(id="server-box"):
                        # The head line holds the clock: its own widget, so a tick repaints one line, not the block.
                        yield Static(id="server-head")
                        yield Static(id="server-state")
                    yield Static(id="gpu-list")
                with Horizontal(id="log-bar"):
                    yield FieldInput(id="log-filter", placeholder="filter the log (/), e: errors only", compact=True)
                    yield Static(id="log-badge")
                with Horizontal(id="log-row"):
                    yield LogView(classify=serving.line_level, hide=serving.is_poll_line, id="log")
                    yield Static(id="hint")

    def on_mount(self) -> None:
        names = list(self.app.settings.profiles)
        self.selected = names[0] if names else None
        self._fill_profiles()
        if self.selected:
            self.query_one("#profiles", OptionList).highlighted = 0
            self._fill_editor()
        log = self.query_one(LogView)
        self.watch(log, "pending", self._show_badge)
        self.watch(log, "following", self._show_badge)
        self._render_state()

    def on_show(self) -> None:
        self._seen = True
        self._render_state()
        self._poll_gpus()  # fresh figures as soon as the tab is seen (the shell focuses the profiles list)

    def on_hide(self) -> None:
        self._seen = False
        self._wind_clock(None)

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
        async for status in serving.watch(conn):
            if conn is not self.app.connection:
                return
            if status.args.get("nodes"):
                self._follow_nodes(conn, status.job)  # the whole server's status, every node's line
            else:
                self.status = status
            if status.job != self._log_job:
                self._log_job = status.job
                self._follow_log(conn, self._log_job)

    def _node_conns(self) -> multinode.Nodes:
        """Connections to the nodes of a multi-node server: this host's own, the others' opened when needed."""
        if self._node_links is None:
            self._node_links = multinode.Nodes(self.app.settings)
        if self.app.host_config.name in self.app.settings.hosts:
            self._node_links.adopt(self.app.host_config.name, self.app.connection)
        return self._node_links

    @work(group="serve-nodes", exclusive=True, exit_on_error=False, description="follow every node")
    async def _follow_nodes(self, conn: Connection, job: str | None) -> None:
        # Each look is one status per node; a rank that died has the others stopped (multinode.expand).
        while conn is self.app.connection:
            wire = await serving.status(conn, job=job)
            nodes = self._node_conns()
            nodes.adopt(wire["args"]["nodes"][wire["args"].get("node_rank") or 0], conn)
            self.status = serving.ServerStatus.from_json(await multinode.expand(nodes, wire))
            if not self.status.running:
                return
            await asyncio.sleep(NODES_EVERY_S)

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
        log.reset(tail["lines"])
        async for lines in serving.follow(conn, job, tail["offset"]):
            if conn is not self.app.connection:
                return
            log.append(lines)

    @work(group="serve-gpus", exclusive=True, exit_on_error=False, description="read the GPUs")
    async def _poll_gpus(self) -> None:
        # A one-shot timer re-armed after each poll: polls never pile up behind a slow link.
        conn = self.app.connection
        try:
            if conn.connected and self.parent.display:  # nvidia-smi costs the host a little: only when seen
                self.gpus = await conn.call("serve.gpus")
                self._render_gpus()
        finally:
            if self._gpu_timer is not None:
                self._gpu_timer.stop()
            if self.is_mounted and self.parent.display:  # hidden: on_show polls and re-arms
                self._gpu_timer = self.set_timer(GPU_EVERY_S, self._poll_gpus, name="serve-gpus")

    # --- profiles and the editor ------------------------------------------------------------------------------

    def _profile(self, name: str | None) -> ProfileConfig | None:
        if name is None:
            return None
        return self.edits.get(name) or self.app.settings.profiles.get(name)

    def _fill_profiles(self) -> None:
        options = self.query_one("#profiles", OptionList)
        running = self.status.profile if self.status and self.status.running else None
        # Names in a column (padded inside the bold, so no viewer can run a name into its description).
        width = max(map(len, self.app.settings.profiles), default=0) + 1
        shown = {options.get_option_at_index(i).id for i in range(options.option_count)}
        for name in self.app.settings.profiles:
            p = self._profile(name)
            spec = _spec_text(p)
            mark = "[$success]●[/]" if name == running else " "
            edited = "*" if name in self.edits and self.edits[name] != self.app.settings.profiles[name] else ""
            label = escape(f"{name}{edited}".ljust(width))
            text = f"{mark} [b]{label}[/b] {escape(spec)} · tp {p.tp} · :{p.port}"
            if name in shown:
                options.replace_option_prompt(name, text)
            else:  # a profile added since (drafters add, from the Drafters tab)
                options.add_option(Option(text, id=name))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id == "profiles" and event.option.id != self.selected:
            self.selected = event.option.id
            self.checks = None
            self._fill_editor()

    def _fill_editor(self) -> None:
        profile = self._profile(self.selected)
        if profile is None:
            return
        with self.prevent(Input.Changed):
            for declared in FIELDS:
                value = getattr(profile, declared.name)
                field = self.query_one(f"#edit-{declared.name}", Input)
                field.value = "" if value is None else str(value)
                # Only what the profile's algorithm takes (a profile without speculation: tp and port).
                shown = declared.applies(profile.algorithm) and (declared.algorithms is None or bool(profile.algorithm))
                field.display = self.query_one(f"#label-{declared.name}", Label).display = shown
            self.query_one("#edit-extra", Input).value = shlex.join(profile.extra_args)
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
        base = self._profile(self.selected) or self.app.settings.profiles[self.selected]
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
            problem := serving.speculative_problem(values.get("steps"), values.get("topk"), values.get("draft_tokens"))
        ):
            raise UsageError(f"{problem}: SGLang refuses it, so it is not saved")
        try:
            extra = shlex.split(self.query_one("#edit-extra", Input).value)
        except ValueError as exc:
            raise UsageError(f"extra flags: {exc}") from None
        return replace(base, extra_args=tuple(extra), **values)

    def _fill_preview(self) -> None:
        profile = self._profile(self.selected)
        if profile is None:
            self._show_preview("no profiles configured")
            return
        try:
            if profile.nodes:  # every rank's command line, each under its node
                ranks = multinode.commands(self.app.settings, profile)
                lines = [f"# {r['node']}, rank {r['rank']}\n{serving.shell_line(r['argv'], r['env'])}" for r in ranks]
                text = "\n".join(lines)
            else:
                cmd = serving.profile_command(self.app.settings, self.app.host_config, profile)
                text = serving.shell_line(cmd["argv"], cmd["env"])
        except SpecdeckError as exc:
            self._show_preview(str(exc), invalid=True)
            return
        self._show_preview(text)
        if self.checks is None:
            version = serving.host_sglang_version(self.app.host_config, self.app.host_info)
            self._render_checks(serving.profile_checks(self.app.settings, profile, version))

    def _show_preview(self, text: str, invalid: bool = False) -> None:
        preview = self.query_one("#preview", Static)
        preview.update(text)
        preview.set_class(invalid, "-invalid")

    def _render_checks(self, checks: Iterable[serving.Check]) -> None:
        checks = list(checks)
        failed = [c for c in checks if c.status == "fail"]
        warned = [c for c in checks if c.status == "warn"]
        # The verdict first: a ✗ below the fold must not leave a column of ✓ to read.
        if failed:
            lines = [f"[b $error]✗ {_count(failed, 'check fails', 'checks fail')}: {escape(_names(failed))}[/]"]
        elif warned:
            lines = [f"[b $warning]! {_count(warned, 'warning', 'warnings')}: {escape(_names(warned))}[/]"]
        else:
            lines = [f"[b $success]✓ {_count(checks, 'check passes', 'checks pass')}[/]"]
        for check in checks:
            mark, color = CHECK_MARKS[check.status]
            lines.append(f"[{color}]{mark}[/] {escape(check.name)}: {escape(check.message)}")
        self.query_one("#checks", Static).update("\n".join(lines))

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
        if what == "stop" and st is not None and st.state in serving.SERVING_STATES:
            self._confirm_stop(st)
            return
        self.busy = what
        self._run_action(what, force)

    def _confirm_replace(self, what: str, st: serving.ServerStatus, force: bool) -> None:
        """Ask before stopping a live server: it names the server it stops and the profile it starts."""
        name = self._restart_target(st) if what == "restart" else self.selected
        running = serving.running_text(st, time.time())
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

    def _confirm_stop(self, st: serving.ServerStatus) -> None:
        """Ask before stopping a server that may be serving someone (the Fleet tab's `x` asks the same)."""
        question = f"Stop {serving.running_text(st, time.time())}"
        question += f" on port {st.port}?" if st.port else "?"
        question += " Requests in flight fail, and starting it again takes minutes on a large model."

        def answered(yes: bool | None) -> None:
            if yes and not self.busy:
                self.busy = "stop"
                self._run_action("stop", False)

        self.app.push_screen(ConfirmScreen("Stop the server?", question, "Stop", "Keep it running"), answered)

    def _restart_target(self, st: serving.ServerStatus | None) -> str | None:
        """The profile a restart starts: the running server's, else the selected one."""
        current = st.profile if st else None
        return current if current in self.app.settings.profiles else self.selected

    @work(group="serve-action", exit_on_error=False, description="serve action")
    async def _run_action(self, what: str, force: bool) -> None:
        conn, settings = self.app.connection, self.app.settings
        try:
            if what == "stop" and self.status is not None and self.status.nodes:
                out = await multinode.stop(self._node_conns(), await serving.status(conn, job=self.status.job))
                self.notify(f"stopped {out['profile']} on {len(out['nodes'])} nodes")
                return
            if what == "stop":
                out = await serving.stop(conn)
                if out["was_running"]:
                    self.notify(f"stopped {out['profile']}")
                else:
                    self.notify("no server is running")
                return
            name = self._restart_target(self.status) if what == "restart" else self.selected
            profile = self._profile(name)
            if profile is None:
                raise UsageError("no profile selected")
            if profile.nodes:
                await self._run_nodes(what, profile, force)
                return
            if what == "preflight":
                result = await serving.preflight(conn, settings, profile, force=force)
                self._show_checks(result)
                return
            launch = serving.start if what == "start" else serving.restart
            try:
                out = await launch(conn, settings, profile, force=force)
            except serving.PreflightFailed as exc:
                self._show_checks(exc.preflight)  # its toast says which checks fail
                return
            self._show_checks(serving.Preflight.from_json(out["preflight"]))
            self.notify(f"starting {profile.name} on port {profile.port}")
        finally:
            self.busy = None

    async def _run_nodes(self, what: str, profile: ProfileConfig, force: bool) -> None:
        """Preflight, start, restart or switch to a multi-node profile: every node in one step."""
        nodes, settings = self._node_conns(), self.app.settings
        if what == "preflight":
            self._show_checks(await multinode.preflight(nodes, settings, profile, force=force))
            return
        st = self.status
        if what != "start" and st is not None and st.running:
            wire = await serving.status(self.app.connection, job=st.job)
            await (multinode.stop(nodes, wire) if st.nodes else serving.stop(self.app.connection, job=st.job))
        try:
            out = await multinode.start(nodes, settings, profile, force=force)
        except serving.PreflightFailed as exc:
            self._show_checks(exc.preflight)
            return
        self._show_checks(serving.Preflight.from_json(out["preflight"]))
        self.notify(f"starting {profile.name} on {len(profile.nodes)} nodes, served by {profile.nodes[0]}")

    def _show_checks(self, preflight: serving.Preflight) -> None:
        self.checks = preflight.checks
        self._render_checks(preflight.checks)
        failed = preflight.failures
        if failed:
            self.notify(
                "; ".join(f"{c.name}: {c.message}" for c in failed),
                title=f"{preflight.profile}: {_count(failed, 'check fails', 'checks fail')}",
                severity="error",
                markup=False,
            )
            checks = self.query_one("#checks", Static)
            self.call_after_refresh(checks.scroll_visible, top=True)

    # --- the server's state -----------------------------------------------------------------------------------

    def _render_state(self) -> None:
        st = self.status
        conn = self.app.connection
        head, lines = "[$text-muted]waiting for the host…[/]", []
        if st is not None:
            head, *lines = self._state_lines(st, time.time())
        if not conn.connected and st is not None:
            lines.append(f"[$warning]{conn.state.status}: showing the last known state[/]")
        if self.busy:
            lines.append(f"[$warning]{self.busy}…[/]")
        # The clock changes digits only: same line lengths, same wrapping, so no layout of the whole screen. A
        # ready server's block under the head keeps its text, so a tick repaints the head line alone.
        shape = [len(head), -1] + [len(line) for line in lines]
        layout = shape != self._state_shape
        self._draw("server-head", head, layout=layout)
        self._draw("server-state", "\n".join(lines), layout=layout)
        self._state_shape = shape
        self._render_hint(st)
        self._wind_clock(_next_change(st, time.time()) if self._seen and st is not None else None)

    def _wind_clock(self, wait: float | None) -> None:
        """Redraw the state in ``wait`` seconds (None: not at all)."""
        if self._clock is not None:
            self._clock.stop()
        self._clock = None if wait is None else self.set_timer(wait, self._render_state, name="serve-clock")

    def _draw(self, id: str, text: str, layout: bool = True) -> bool:
        """Update Static ``id`` unless it shows ``text`` already (timers redraw the same text most times); True
        if it was updated."""
        if self._drawn.get(id) == text:
            return False
        self.query_one(f"#{id}", Static).update(text, layout=layout)
        self._drawn[id] = text
        return True

    def _state_lines(self, st: serving.ServerStatus, now: float) -> list[str]:
        mark, color = STATE_MARKS[st.state]
        if st.state == "none":
            return [
                f"[{color}]{mark} no server[/] on {escape(self.app.host_config.name)}: s starts the selected profile"
            ]
        label = serving.state_label(st)
        head = f"[{color}]{mark} {label}[/]  [b]{escape(st.profile or '?')}[/b] · port {st.port}"
        head += f" · pid {st.pid}" if st.pid and st.running else ""
        # Whole minutes past the first: a server left running redraws its head once a minute, not every second.
        lines = [f"{head} · {serving.since_text(st, now, minutes=True)}"]
        lines += [f"  {escape(multinode.node_line(entry))}" for entry in st.nodes]
        summary = serving.speculative_summary(st.server_info)
        if summary:
            lines.append(escape(summary))
        timed = serving.startup_text(st)
        if timed:
            lines.append(escape(timed))
        lines += [f"[$warning]! {escape(w)}[/]" for w in st.warnings]
        for row in serving.timeline(st, now):
            mark, color = ROW_MARKS[row["state"]]
            # A ready server's ready phase lasts since the head's "for 3m": the head alone ticks (one line).
            took = "" if row["phase"] == "ready" and st.state == "ready" else serving.phase_took(row["seconds"])
            lines.append(f"[{color}]{mark}[/] {row['phase']:<24} {took}".rstrip())
        return lines

    def _render_hint(self, st: serving.ServerStatus | None) -> None:
        hint = self.query_one("#hint", Static)
        if not st or not st.hint:
            hint.set_class(False, "-shown")
            return
        title = "Why it crashed" if st.state == "crashed" else "Something is off"
        parts = [f"[b $error]{title}[/]"]
        if st.error:
            parts.append(escape(st.error))
        parts.append(escape(st.hint))
        if st.hint_action == "compare":
            parts.append("[$text-muted]o: open Compare[/]")
        hint.update("\n\n".join(parts))
        hint.set_class(True, "-shown")

    def _render_gpus(self) -> None:
        gpus = self.gpus or {}
        if not gpus.get("nvidia_smi"):
            self._draw("gpu-list", "[$text-muted]no GPUs (nvidia-smi not found)[/]")
            return
        lines = []
        for g in gpus["gpus"]:
            used, total = (g.get("memory_used_mib") or 0) / 1024, (g.get("memory_total_mib") or 0) / 1024
            lines.append(f"GPU{g['index']} {_bar(used, total)} {used:.1f}/{total:.0f} GiB")
            for p in g.get("processes", []):
                if not p.get("job"):
                    lines.append(f"  [$warning]pid {p['pid']} {escape(p.get('name') or '?')} (not ours)[/]")
        self._draw("gpu-list", "\n".join(lines))

    def _show_badge(self, *_: object) -> None:
        log = self.query_one(LogView)
        badge = self.query_one("#log-badge", Static)
        frozen = not log.following
        text = f"↓ {log.pending} new lines (f)" if frozen else "following"
        if log.errors_only:
            text += " · errors only"
        if log.hiding:
            text += " · our polls hidden (a)"
        badge.update(text)
        badge.set_class(frozen, "-frozen")
