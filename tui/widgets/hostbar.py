"""The header bar: which host, whether we are connected to it, and what it is (RTT, sglang, GPUs).

The bar only draws what the app hands it. When the link drops it keeps the last data, dims it and says how
old it is, and counts down to the next reconnect attempt; fresh ``info`` after a reconnect clears that.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from backend.agent.host.shared.units import duration
from backend.connection import ConnState, RoundTrips
from backend.serve.host_info import Gpu, HostInfo
from backend.settings.model import HostConfig
from backend.sglang.versions import DEFAULT_SIM_VERSION, version_text


def badge_text(state: ConnState, now: float) -> str:
    """The connection badge: connected, connecting…, reconnecting in 3s, lost (retry in 3s)."""
    if state.status == "connected":
        return "● connected"
    if state.status == "connecting":
        return "◌ connecting…"
    if state.status == "reconnecting":
        if state.retry_at is not None and state.retry_at > now:
            return f"↻ reconnecting in {math.ceil(state.retry_at - now)}s"
        return "↻ reconnecting…"
    if state.retry_at is not None and state.retry_at > now:
        return f"✕ lost, retry in {math.ceil(state.retry_at - now)}s"
    return "✕ lost"


def gpu_summary(gpus: Sequence[Gpu]) -> str:
    """Count, model and memory used/total over all GPUs: ``8x H200 412/1128 GiB``."""
    if not gpus:
        return "no GPUs"
    names = {g.name or "GPU" for g in gpus}
    name = names.pop() if len(names) == 1 else "GPUs"
    used = sum(g.memory_used_mib or 0 for g in gpus) / 1024
    total = sum(g.memory_total_mib or 0 for g in gpus) / 1024
    return f"{len(gpus)}x {name} {used:.0f}/{total:.0f} GiB"


def sglang_text(info: HostInfo, host: HostConfig, sandbox: bool) -> str:
    """``sglang 0.5.23``, ``sglang 0.5.24 (untested version)``, or the simulator's ``sglang 0.5.23-sim SIMULATED``."""
    if sandbox:
        # The sandbox serves a simulator: never let a screenshot pass it off as a real SGLang.
        return version_text(host.sglang_version or DEFAULT_SIM_VERSION, simulated=True)
    return version_text(info.sglang)


class HostBar(Horizontal):
    """One line at the top of the app; the app calls the ``show_*`` methods."""

    def __init__(self, host: HostConfig, sandbox: bool, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host
        self.sandbox = sandbox
        self.state = ConnState("connecting", since=time.time())
        self.info: HostInfo | None = None
        self.rtts = RoundTrips()
        self.stale_since: float | None = None  # when the shown data stopped being live

    @property
    def stale(self) -> bool:
        return self.stale_since is not None

    def compose(self) -> ComposeResult:
        yield Static("SANDBOX", id="sandbox", markup=False)
        yield Static(id="host", markup=False)
        yield Static(id="badge", markup=False)
        with Horizontal(id="facts"):
            # SGLang (SIMULATED) first: a narrow terminal cuts the header's end, never that word.
            for name in ("sglang", "gpus", "rtt", "python"):
                yield Static(id=name, markup=False)
        yield Static(id="stale", markup=False)
        yield Static(id="reason", markup=False)

    def on_mount(self) -> None:
        # The countdown and the stale age move on their own; one tick a second is all they need, and only while
        # one shows: a connected header has nothing that moves between samples.
        self._ticker = self.set_interval(1, self._draw, pause=True, name="hostbar-clock")
        self._draw()

    def show_host(self, host: HostConfig, sandbox: bool) -> None:
        """A different host: forget everything we knew about the old one."""
        self.host, self.sandbox = host, sandbox
        self.info = self.stale_since = None
        self.rtts = RoundTrips()
        self._draw()

    def show_state(self, state: ConnState) -> None:
        if state.status != "connected" and self.stale_since is None and self.info is not None:
            self.stale_since = state.since
        self.state = state
        self._draw()

    def show_info(self, info: HostInfo) -> None:
        """Fresh ``info`` from the host: the data is live again."""
        self.info = info
        self.stale_since = None
        self._draw()

    @property
    def rtt_ms(self) -> float | None:
        """The round trip shown: the median of the latest pings."""
        return self.rtts.median

    def show_rtt(self, ms: float) -> None:
        """One more ping's round trip; the header shows the median of the latest (``RoundTrips``)."""
        self.rtts = self.rtts.add(ms)
        self._draw()

    def _set(self, widget_id: str, text: str) -> None:
        widget = self.query_one(f"#{widget_id}", Static)
        if widget.display != bool(text):
            widget.display = bool(text)
        if widget.content != text:
            # Same width (an rtt's digits): no layout of the whole screen for it.
            widget.update(text, layout=len(text) != len(str(widget.content)))

    def _draw(self) -> None:
        if not self.is_mounted or not self.children:  # closing: its widgets go before it does
            return
        now = time.time()
        info = self.info
        self.query_one("#sandbox").display = self.sandbox
        hostname = info.hostname if info else None
        self._set(
            "host",
            f"{self.host.name} ({hostname})" if hostname and hostname != self.host.name else self.host.name,
        )
        badge = self.query_one("#badge", Static)
        if not badge.has_class(f"-{self.state.status}"):  # a restyle every second costs a layout
            badge.set_classes([f"-{self.state.status}"])
        self._set("badge", badge_text(self.state, now))
        badge.tooltip = self.state.reason or None
        self._set("rtt", self.rtts.text())
        self._set("python", f"py {info.python}" if info and info.python else "")
        self._set("sglang", sglang_text(info, self.host, self.sandbox) if info else "")
        self._set("gpus", gpu_summary(info.gpus) if info else "")
        self.query_one("#facts").set_class(self.stale, "-stale")
        self._set("stale", f"stale {duration(now - self.stale_since)}" if self.stale_since is not None else "")
        show_reason = self.state.status in ("reconnecting", "lost")
        self._set("reason", self.state.reason if show_reason else "")
        moving = self.stale_since is not None or (self.state.retry_at is not None and self.state.retry_at > now)
        self._ticker.resume() if moving else self._ticker.pause()
