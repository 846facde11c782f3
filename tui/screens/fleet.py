"""The Fleet tab: a configured fleet's replicas behind the real sglang-router, watched as one.

The router's line (its URL and host, health, pid, policy, workers healthy as it sees them, requests and errors
routed), the imbalance verdict, and a row per replica: its state and pid on its host, the router's word on its
health, tok/s per stream with a sparkline of the last minutes, accept length, running and queued requests.
Keys: bench through the router (again: stop it), start the fleet and stop it (each asks first), stop the
highlighted replica's server (asks first), pick another fleet (when several are configured), refresh now.
Everything comes from ``backend.fleet.fleets``: the tab holds its own connections to the fleet's hosts
(``FleetLinks.supervised``), polls ``fleet.status`` on a re-armed timer only while it is shown, and redraws
only when what it read changed.
"""

from __future__ import annotations

from collections import deque
from functools import partial

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.timer import Timer
from textual.widgets import DataTable, Static

from backend.connection import ConnState
from backend.errors import OperationFailed
from backend.fleet import fleets as fleet
from backend.fleet.fleets import INTERVAL_NOTE, FleetLinks, FleetStatus, ReplicaStatus
from backend.measure.bench import summary_line
from tui.screens.confirm import ConfirmScreen
from tui.screens.pane import ShellPane
from tui.screens.pick import PickScreen
from tui.widgets.sparkline import spark

STATUS_EVERY_S = 2.0  # a status is ~a dozen agent calls and a /metrics parse per replica: seldom when idle
TREND_POINTS = 120  # the sparkline's memory: 4 minutes at one point a poll
# (title, width) after the replica's name; the trend, last, takes what the pane has left (or is cut first).
COLUMNS = (("state", 11), ("router", 9), ("pid", 7), ("tok/s/stream", 12), ("accept", 6), ("run", 3), ("queue", 5))
TREND_MAX = 60
NO_FLEET = (
    "no fleet configured: add [fleets.NAME] with a profile, replicas = [{host = …}] and a router "
    "(`specdeck sandbox up --hosts 2` configures one)"
)


def _num(value: float | int | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


class FleetPane(ShellPane):
    """The Fleet tab body; ``name`` is the fleet shown, ``status`` its last read (None before the first)."""

    KEYS_WIDGET = "#fleet-replicas"

    DEFAULT_CSS = """
    FleetPane { padding: 0 1; }
    FleetPane #fleet-head, FleetPane #fleet-router, FleetPane #fleet-imbalance { height: auto; }
    FleetPane #fleet-head { text-style: bold; }
    FleetPane #fleet-router.-down, FleetPane #fleet-imbalance.-lagging { color: $text-warning; }
    FleetPane #fleet-replicas { height: 1fr; margin-top: 1; }
    FleetPane #fleet-bench, FleetPane #fleet-action { height: auto; color: $text-secondary; }
    """

    BINDINGS = [
        Binding("b", "bench", "Bench", id="fleet.bench", tooltip="Bench the fleet through its router (again: stop)"),
        Binding(
            "x",
            "stop_replica",
            "Stop replica",
            id="fleet.stop_replica",
            tooltip="Stop the highlighted replica's server (asks first)",
        ),
        Binding("u", "up", "Up", id="fleet.up", tooltip="Start the fleet: its replicas, then the router (asks first)"),
        Binding("D", "down", "Down", id="fleet.down", tooltip="Stop the fleet's router and every replica (asks first)"),
        Binding("n", "pick_fleet", "Fleet", id="fleet.pick", tooltip="Pick another configured fleet"),
        Binding("f5", "refresh", "Refresh", id="fleet.refresh", tooltip="Read the fleet's status again now"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.name_: str | None = None
        self.links: FleetLinks | None = None
        self.status: FleetStatus | None = None
        self.trends: dict[str, deque[float | None]] = {}
        self.benching = False
        self.changing: str | None = None  # "up" or "down" while the fleet is being started or stopped
        self.shown = False
        self._timer: Timer | None = None
        self._drawn: tuple | None = None  # what the screen shows, to redraw only on change

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-head", markup=False)
        yield Static(id="fleet-router", markup=False)
        yield Static(id="fleet-imbalance", markup=False)
        yield DataTable(id="fleet-replicas", cursor_type="row", zebra_stripes=True)
        yield Static(id="fleet-action", markup=False)
        yield Static(id="fleet-bench", markup=False)

    def on_mount(self) -> None:
        names = sorted(self.app.settings.fleets)
        self.name_ = names[0] if names else None
        self._draw()

    async def on_unmount(self) -> None:
        if self.links is not None:
            await self.links.close()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pick_fleet":  # the picker only where there is a choice
            return len(self.app.settings.fleets) > 1
        return super().check_action(action, parameters)

    # --- following the fleet -----------------------------------------------------------------------------------

    def on_show(self) -> None:
        self.shown = True
        self._drawn = None  # drawn while hidden, the trend had no width to fill
        self.call_after_refresh(self._draw)
        if self.name_ is not None and self.links is None:
            self._link(self.name_)
        self._poll()

    def on_hide(self) -> None:
        self.shown = False
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def on_resize(self) -> None:
        self._drawn = None  # the trend column's width follows the pane's
        self._draw()

    def _link(self, name: str) -> None:
        """Connections to every host of fleet ``name`` (kept up in the background); a state change polls."""
        self.links = FleetLinks.supervised(self.app.settings, name)
        for conn in self.links.conns.values():
            conn.on_state(partial(self._host_changed, self.links))

    def _host_changed(self, links: FleetLinks, state: ConnState) -> None:
        if links is self.links and state.status in ("connected", "lost") and self.shown:
            self._poll()

    def _arm(self) -> None:
        # A one-shot timer re-armed after each poll: polls never pile up behind a slow host.
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(STATUS_EVERY_S, self._poll, name="fleet-status") if self.shown else None

    @work(group="fleet-status", exclusive=True, exit_on_error=False, description="read the fleet's status")
    async def _poll(self) -> None:
        links = self.links
        try:
            if links is None or not any(c.connected for c in links.conns.values()):
                self._draw()  # says which hosts it waits for; the first connection polls again
                return
            st = await fleet.status(links)
            if links is self.links:
                self._take(st)
        finally:
            if links is self.links and links is not None:
                self._arm()

    def _take(self, st: FleetStatus) -> None:
        self.status = st
        for r in st.replicas:
            trend = self.trends.setdefault(r.label, deque(maxlen=TREND_POINTS))
            if r.tok_s is not None or (trend and trend[-1] is not None):  # an idle replica adds one gap, then rests
                trend.append(r.tok_s)
        self._draw()

    # --- drawing -----------------------------------------------------------------------------------------------

    def _draw(self) -> None:
        links, st = self.links, self.status
        states = tuple((h, c.state.status, c.state.reason) for h, c in links.conns.items()) if links else ()
        key = (self.name_, st, tuple((k, tuple(v)) for k, v in self.trends.items()), states, self.size.width)
        if key == self._drawn:
            return  # nothing new: an idle fleet costs a comparison a poll
        self._drawn = key
        head = self.query_one("#fleet-head", Static)
        if self.name_ is None:
            head.update(NO_FLEET)
            return
        settings = self.app.settings
        cfg = fleet.get_fleet(settings, self.name_)
        hosts = list(dict.fromkeys(r.host for r in cfg.replicas))
        simulated = [h for h in hosts if h in settings.hosts and settings.hosts[h].launcher == "simulator"]
        waiting = [f"{h}: {s}{f' ({why})' if why else ''}" for h, s, why in states if s != "connected"]
        head.update(
            f"fleet {self.name_}: {len(cfg.replicas)} replica{'s' * (len(cfg.replicas) != 1)} on {', '.join(hosts)}"
            + (" · SIMULATED SGLang behind the real router" if simulated == hosts else "")
            + (f" · SIMULATED SGLang on {', '.join(simulated)}" if simulated and simulated != hosts else "")
            + (" · " + "; ".join(waiting) if waiting else "")
        )
        self._draw_router(st)
        verdict = self.query_one("#fleet-imbalance", Static)
        text = f"imbalance: {st.imbalance.verdict}" if st else ""
        if st and any(r.accept_basis == "interval" for r in st.replicas):
            text += f"\n{INTERVAL_NOTE}"
        verdict.update(text + (f"\nkey: {st.key}" if st and st.key else ""))  # a fleet beyond loopback: its key
        verdict.set_class(bool(st and st.imbalance.lagging), "-lagging")
        self._draw_table(st.replicas if st else (), st is not None and st.router.down is not None)

    def _draw_router(self, st: FleetStatus | None) -> None:
        line = self.query_one("#fleet-router", Static)
        if st is None:
            line.update("router: reading…")
            return
        r = st.router
        parts = [f"router {r.url} on {r.host} ({r.policy})"]
        if r.healthy:
            parts.append(f"healthy, pid {r.pid}")
        else:
            parts.append(f"not healthy: {r.error}")
        if r.workers is not None:
            parts.append(st.workers_text())
        for value, what in ((r.requests_active, "active"), (r.requests_total, "routed"), (r.errors_total, "errors")):
            if value is not None:
                parts.append(f"{value} {what}")
        parts += r.notes
        line.update(" · ".join(parts))
        line.set_class(not r.healthy, "-down")

    def _draw_table(self, replicas: tuple[ReplicaStatus, ...], router_down: bool = False) -> None:
        table = self.query_one("#fleet-replicas", DataTable)
        current = self.current_replica()
        name_w = max((len(r.label) for r in replicas), default=7)
        pad = 2 * table.cell_padding
        used = name_w + sum(w for _, w in COLUMNS) + pad * (len(COLUMNS) + 2) + 1  # + the scrollbar's margin
        width = min(max(table.size.width - used, 8), TREND_MAX)
        if [c.content_width for c in table.ordered_columns] != [name_w, *(w for _, w in COLUMNS), width]:
            table.clear(columns=True)
            table.add_column("replica", width=name_w)
            for title, w in COLUMNS:
                table.add_column(title, width=w)
            table.add_column("trend", width=width)
        table.clear()
        top = max((v for trend in self.trends.values() for v in trend if v is not None), default=0.0)
        for r in replicas:
            table.add_row(
                r.label, r.state, "—" if router_down else "healthy" if r.healthy else "unhealthy",  # down: no word
                _num(r.pid, "d"), _num(r.tok_s, ".1f"),
                r.accept_cell(), _num(r.running, "d"), _num(r.queued, "d"),
                spark(self.trends.get(r.label, ()), width, top), key=r.label,
            )  # fmt: skip
        if current is not None and current in table.rows:
            table.move_cursor(row=table.get_row_index(current), animate=False)

    def current_replica(self) -> str | None:
        table = self.query_one("#fleet-replicas", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    # --- actions -------------------------------------------------------------------------------------------

    def _ready(self) -> bool:
        if self.name_ is None or self.links is None:
            self.app.notify(NO_FLEET, severity="warning", markup=False)
            return False
        return True

    def action_refresh(self) -> None:
        if self._ready():
            self._poll()

    def action_bench(self) -> None:
        if not self._ready():
            return
        if self.benching:
            self.workers.cancel_group(self, "fleet-bench")  # the bench job is cancelled with its waiter
            return
        self._bench()

    @work(group="fleet-bench", exclusive=True, exit_on_error=False, description="bench through the router")
    async def _bench(self) -> None:
        assert self.links is not None
        links, line = self.links, self.query_one("#fleet-bench", Static)
        plan = fleet.bench_plan(links.fleet)
        self.benching = True
        line.update(f"bench through the router: {plan.requests} requests, {plan.concurrency} at a time: starting")
        try:
            result = await fleet.bench(links, plan, lambda e: line.update(f"bench: {e.done}/{e.total} requests"))
            line.update("bench through the router: " + summary_line(result, await self.app.yardstick()))
        except OperationFailed as exc:
            line.update(f"bench: failed: {exc}")
            raise
        except BaseException:
            line.update("bench: stopped")
            raise
        finally:
            self.benching = False
        self._poll()

    def action_stop_replica(self) -> None:
        if not self._ready():
            return
        assert self.links is not None
        label = self.current_replica()
        replica = next((r for r in self.links.fleet.replicas if fleet.replica_label(r) == label), None)
        seen = next((r for r in self.status.replicas if r.label == label), None) if self.status else None
        if replica is None or seen is None or seen.pid is None:
            self.app.notify(f"{label or 'no replica'}: no server runs there to stop", severity="warning")
            return
        others = len(self.links.fleet.replicas) - 1
        others_text = "the other replica" if others == 1 else f"the other {others}"
        question = (
            f"Stop {label}'s server ({replica.profile}, pid {seen.pid}, {seen.state})? The router marks it "
            f"unhealthy and sends its requests to {others_text}; `specdeck fleet up {self.name_}` starts it "
            "again (loading the weights takes minutes on a large model)."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(replica)

        self.app.push_screen(ConfirmScreen("Stop the replica?", question, "Stop it", "Keep it running"), answered)

    @work(group="fleet-stop", exit_on_error=False, description="stop the replica")
    async def _stop(self, replica) -> None:
        assert self.links is not None
        await fleet.stop_replica(self.links, replica)
        self.app.notify(f"{fleet.replica_label(replica)}: its server is stopped")
        self._poll()

    def action_up(self) -> None:
        if not self._ready() or self._changing():
            return
        assert self.links is not None
        question = (
            f"Start fleet {self.name_}: {fleet.describe(self.links.fleet)}? The replicas start first, then the "
            "router; one already serving its profile is kept. Loading the weights takes minutes on a large model."
        )

        def answered(yes: bool | None) -> None:
            if yes and not self.changing:
                self._up()

        self.app.push_screen(ConfirmScreen("Start the fleet?", question, "Start it", "Not now"), answered)

    def action_down(self) -> None:
        if not self._ready() or self._changing():
            return
        running = [r.label for r in self.status.replicas if r.pid is not None] if self.status else []
        router = self.status is not None and self.status.router.pid is not None
        what = ", ".join(["its router"] * router + running) or "whatever of it runs"
        question = (
            f"Stop fleet {self.name_}: {what}? Requests in flight fail; `u` starts it again "
            "(loading the weights takes minutes on a large model)."
        )

        def answered(yes: bool | None) -> None:
            if yes and not self.changing:
                self._down()

        self.app.push_screen(ConfirmScreen("Stop the fleet?", question, "Stop it", "Keep it running"), answered)

    def _changing(self) -> bool:
        if self.changing:
            self.app.notify(f"fleet {self.name_}: {self.changing} is still under way", severity="warning")
        return bool(self.changing)

    @work(group="fleet-change", exclusive=True, exit_on_error=False, description="start the fleet")
    async def _up(self) -> None:
        assert self.links is not None
        links, line = self.links, self.query_one("#fleet-action", Static)
        self.changing = "up"
        line.update(f"fleet {self.name_}: preflight…")
        try:
            await fleet.up(links, on_event=lambda text: line.update(f"fleet {links.fleet.name}: {text}"))
            line.update(f"fleet {links.fleet.name}: up, every replica ready behind the router")
        except BaseException as exc:
            line.update(f"fleet {links.fleet.name}: not started: {exc}" if str(exc) else "")
            raise
        finally:
            self.changing = None
            self._poll()

    @work(group="fleet-change", exclusive=True, exit_on_error=False, description="stop the fleet")
    async def _down(self) -> None:
        assert self.links is not None
        links, line = self.links, self.query_one("#fleet-action", Static)
        self.changing = "down"
        line.update(f"fleet {self.name_}: stopping…")
        try:
            stopped = await fleet.down(links)
            line.update(f"fleet {links.fleet.name}: " + (f"stopped {', '.join(stopped)}" if stopped else "nothing ran"))
        except BaseException as exc:
            line.update(f"fleet {links.fleet.name}: stop failed: {exc}")
            raise
        finally:
            self.changing = None
            self._poll()

    def action_pick_fleet(self) -> None:
        fleets = self.app.settings.fleets
        choices = [(name, fleet.describe(f)) for name, f in sorted(fleets.items())]
        self.app.push_screen(PickScreen("Show fleet", choices, self.name_), self._picked)

    def _picked(self, name: str | None) -> None:
        if name is None or name == self.name_:
            return
        old = self.links
        self.name_, self.status, self.trends, self.links = name, None, {}, None
        self.query_one("#fleet-bench", Static).update("")
        self.query_one("#fleet-action", Static).update("")
        if old is not None:
            self._close(old)
        self._link(name)
        self._poll()

    @work(group="fleet-close", exit_on_error=False, description="close the previous fleet's connections")
    async def _close(self, links: FleetLinks) -> None:
        await links.close()
