"""`make screenshots`: an SVG of every tab, driven headless in a fresh sandbox with real data from the simulator.

The shots are the README's tour, taken by its keys and its benches (the Live tab's `b`: 8 requests of 512
tokens), so what a newcomer sees after pressing them is what the pictures show: AQ-MedAI's drafter downloading
(Drafters, `d`); the baseline, then the team's drafter served (Serve, `s`, then `w` `y`) and benched (Live,
`b`); the two drafters side by side once the download is done (Compare, `c` `x`); AQ-MedAI's drafter served and
ready (Serve), benched (Live), the three runs compared with the baseline marked (History, `b`, `space`), the
advisor on AQ-MedAI's run (Tune), AQ-MedAI's drafter fine-tuned with the SIMULATED SpecForge and its best
checkpoint served and benched (Train, `s`, `v` `y`, `b`), and the sandbox's two-host fleet behind the real
sglang-router under a bench through it (Fleet, `u` `y`, `b`). Before each shot the header's round trip is timed
again (the median of five), so a start-up's slow first ping is not the figure a picture keeps.
Everything runs in a throwaway user environment (config, state, data) so neither the user's sandbox nor their
history is touched.

Each tab's shot is one small function; ``--only`` picks some (the story still runs, so the data is there).
Run with ``python -m tui.screenshots [--out DIR] [--only TAB ...] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from backend.jobs import JobInfo, get_job, list_jobs, wait_job

if TYPE_CHECKING:
    from textual.pilot import Pilot

    from backend.connection import Connection
    from backend.serve.server_status import ServerStatus
    from backend.settings.model import Settings
    from tui.app import SpecdeckApp

SIZE = (160, 48)
OUT = Path(__file__).resolve().parents[1] / "screenshots"
TABS = ("drafters", "compare", "serve", "live", "history", "tune", "train", "fleet")
PROFILES = ("baseline", "eagle3-ours", "eagle3-aq")


@dataclass
class Story:
    """What the shots share: the app under Pilot, a connection of our own for setting the scene, the jobs."""

    app: SpecdeckApp
    pilot: Pilot[int]
    conn: Connection
    settings: Settings
    out: Path
    quick: bool
    download: JobInfo | None = None
    servers: dict[str, JobInfo] = field(default_factory=dict)
    saved: list[Path] = field(default_factory=list)

    async def press(self, *keys: str) -> None:
        await self.pilot.press(*keys)
        await self.pilot.pause(0.2)  # a key's message handled before the next key acts on what it changed


def screen_text(app) -> str:
    """The text on the screen now (from the SVG export), to wait for what a tab shows."""
    svg = app.export_screenshot()
    return html.unescape(" ".join(re.findall(r"<text[^>]*>(.*?)</text>", svg))).replace("\xa0", " ")


async def until(story: Story, cond: Callable[[], Awaitable[bool] | bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await story.pilot.pause(0.1)


async def show(story: Story, tab: str, *texts: str, timeout: float = 30) -> None:
    """Show ``tab`` and wait until the screen shows every one of ``texts``."""
    story.app.action_show_tab(tab)
    await until(story, lambda: all(t in screen_text(story.app) for t in texts), f"{tab} to show {texts}", timeout)
    await story.pilot.pause(0.5)  # one more frame for whatever else was in flight


async def fresh_rtt(story: Story) -> None:
    """The header's round trip timed again, as the panel times it: five single pings, their median shown."""
    from backend.connection import RTT_KEEP
    from tui.widgets.hostbar import HostBar

    bar = story.app.query_one(HostBar)
    for _ in range(RTT_KEEP):  # as many as the header keeps: the start-up's pings forgotten
        bar.show_rtt((await story.app.connection.ping(1)).median)
    await story.pilot.pause(0.2)


async def save(story: Story, tab: str, name: str | None = None) -> None:
    await fresh_rtt(story)
    path = story.out / f"{name or tab}.svg"
    story.app.save_screenshot(filename=path.name, path=str(story.out))
    story.saved.append(path)
    print(f"saved {path}", flush=True)


# --- setting the scene ------------------------------------------------------------------------------------


async def start_download(story: Story) -> None:
    """Download AQ-MedAI's drafter the way the tour does: Drafters tab, `↓` to its row, `d`."""
    await show(story, "drafters", "aq-medai")
    story.app.query_one("#drafters-pane DataTable").focus()
    await story.press("down", "d")

    from backend.drafters import downloads

    async def started() -> bool:
        running = await downloads.running_jobs(story.conn)
        story.download = running[0] if running else None
        return bool(running)

    await until(story, started, "the download to start")


async def download_done(story: Story) -> None:
    if story.download is not None:
        job = await wait_job(story.conn, story.download.id, 300)
        if job.state != "done":
            raise RuntimeError(f"the aq-medai download ended {job.state}: {job.reason}")


async def server_now(story: Story) -> ServerStatus:
    """The host's server as it reports it now."""
    from backend.serve import serving
    from backend.serve.server_status import ServerStatus

    return ServerStatus.from_json(await serving.status(story.conn))


async def serve(story: Story, profile: str) -> JobInfo:
    """The tour's keys on the Serve tab: the profile highlighted, `s` (nothing runs) or `w` and `y` (a server runs);
    returns the serve job once it is ready."""
    from textual.widgets import OptionList

    from tui.screens.confirm import ConfirmScreen

    await show(story, "serve", profile)
    profiles = story.app.query_one("#profiles", OptionList)
    profiles.focus()
    names = [profiles.get_option_at_index(i).id for i in range(profiles.option_count)]
    profiles.highlighted = names.index(profile)
    await story.pilot.pause(0.3)
    running = (await server_now(story)).running
    await story.press("w" if running else "s")
    if running:
        await until(story, lambda: isinstance(story.app.screen, ConfirmScreen), "the switch question")
        await story.press("y")

    async def ready() -> bool:
        st = await server_now(story)
        return st.profile == profile and st.state in ("ready", "crashed")

    await until(story, ready, f"{profile} ready", 180)
    status = await server_now(story)
    if status.state != "ready" or status.job is None:
        raise RuntimeError(f"{profile} did not get ready: {status.error}")
    story.servers[profile] = job = await get_job(story.conn, status.job)
    return job


async def bench_live(story: Story, job: JobInfo) -> None:
    """The tour's bench: the Live tab's `b` (8 requests of 512 tokens), until its result is in."""
    from backend.measure import bench

    # The Live tab follows the server just started before its `b` benches it (else: "no server to bench").
    await show(story, "live", f"{job.profile} on port {job.port}: running", timeout=120)
    before = {b.id for b in await list_jobs(story.conn, kind="bench")}
    await story.press("b")

    async def done() -> bool:
        mine = [b for b in await list_jobs(story.conn, kind="bench") if b.id not in before]
        return bool(mine) and not mine[0].active

    await until(story, done, f"the bench on {job.profile}", 600)
    for b in await list_jobs(story.conn, kind="bench"):
        if b.id not in before:
            await bench.wait_result(story.conn, b.id)


# --- the shots --------------------------------------------------------------------------------------------


async def shot_drafters(story: Story) -> None:
    """AQ-MedAI's drafter downloading (a fifth to four fifths done)."""

    async def midway() -> bool:
        assert story.download is not None  # start_download found it
        job = await get_job(story.conn, story.download.id)
        t = job.transfer
        return job.state != "running" or (t is not None and t.file.endswith(".safetensors") and t.bytes > t.total / 5)

    await until(story, midway, "the download to be under way")
    await show(story, "drafters", "aq-medai: ")
    await save(story, "drafters")


async def shot_compare(story: Story) -> None:
    """Ours vs AQ-MedAI's drafter, side by side, the differences only (`2`, `c`, `x`)."""
    from tui.screens.compare import ComparePane

    pane = cast(ComparePane, await story.app.shown_pane("compare"))  # built when first shown
    await show(story, "compare", "aq-medai")
    story.app.query_one("#compare-config").focus()
    await story.press("c")
    await until(story, lambda: pane.diff is not None, "the comparison")
    await story.press("x")
    await show(story, "compare", "differences only", "COMPATIBLE")
    await save(story, "compare")


async def shot_serve(story: Story) -> None:
    """AQ-MedAI's drafter served and ready (`↓` to eagle3-aq, `w`, `y`)."""
    await serve(story, "eagle3-aq")
    await show(story, "serve", "ready")
    await save(story, "serve")


async def shot_live(story: Story) -> None:
    """Live charts of the AQ-MedAI server after the tour's bench (`4`, `b`), the baseline and break-even lines."""
    await bench_live(story, story.servers["eagle3-aq"])
    await show(story, "live", "break-even", "baseline")
    await story.pilot.pause(1.5)  # the charts redraw twice a second
    await save(story, "live")
    story.app.theme = "textual-light"  # the same tab on a light terminal
    await story.pilot.pause(1.5)
    await save(story, "live", "live-light")
    story.app.theme = "textual-dark"


async def shot_history(story: Story) -> None:
    """The three runs compared: table and overlaid charts against the baseline and break-even."""
    from tui.screens.history import HistoryPane

    pane = cast(HistoryPane, await story.app.shown_pane("history"))  # built when first shown
    story.app.action_show_tab("history")
    pane.action_sync()
    want = [f"{story.conn.host.name}/{story.servers[p].id}" for p in PROFILES if p in story.servers]
    await until(story, lambda: set(want) <= {r.id for r in pane.runs}, "the runs in the History tab")
    story.app.query_one("#history-runs").focus()
    # The tour's keys: `b` on the baseline's run (the last of the three), then `space` on each.
    await story.press("down", "down", "b")
    await until(story, lambda: any(r.is_baseline for r in pane.runs), "the measured baseline")
    await story.press("up", "up", "space", "down", "space", "down", "space")
    await until(story, lambda: set(pane.selected) == set(want), "the three runs selected")
    await show(story, "history", "Comparing", "vs break-even")
    await save(story, "history")


async def shot_tune(story: Story) -> None:
    """The advisor on AQ-MedAI's run: its acceptance per position and the predicted tok/s by draft steps."""
    from textual.widgets import DataTable

    from tui.screens.tune import TunePane

    pane = cast(TunePane, await story.app.shown_pane("tune"))  # built when first shown
    story.app.action_show_tab("tune")
    pane.action_refresh()  # its benches too: the History tab's sync may still be importing them
    run_id = f"{story.conn.host.name}/{story.servers['eagle3-aq'].id}"
    table = pane.query_one("#tune-runs", DataTable)
    await until(story, lambda: run_id in table.rows, "the AQ-MedAI run in the Tune tab")
    table.move_cursor(row=table.get_row_index(run_id))
    await show(story, "tune", "◀ ", "baseline")  # best, or the only measured
    await save(story, "tune")


async def shot_train(story: Story) -> None:
    """AQ-MedAI's drafter fine-tuned for K2.5 (the SIMULATED SpecForge, `7`, `s`): its curves, and its checkpoints
    predicted before a restart beside the one served (`v`, `y`) and benched (`b`)."""
    from backend.history import sync_from_host
    from backend.measure import bench
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.train import TrainPane

    pane = cast(TrainPane, await story.app.shown_pane("train"))  # built when first shown
    await show(story, "train", "k25-ft")
    pane.query_one(pane.KEYS_WIDGET).focus()
    await story.press("s")
    await until(story, lambda: pane.job is not None and pane.job.state == "done", "the training to end", 300)
    await until(story, lambda: len(pane.rows) >= 3, "its checkpoints judged")
    before = (await server_now(story)).job
    await story.press("v")
    await until(story, lambda: isinstance(story.app.screen, ConfirmScreen), "the serve question")
    await story.press("y")

    async def ready() -> bool:
        st = await server_now(story)
        return st.job != before and st.state in ("ready", "crashed")

    await until(story, ready, "the checkpoint's server ready", 300)
    before_benches = {b.id for b in await list_jobs(story.conn, kind="bench")}
    await story.press("b")

    async def benched() -> bool:
        mine = [b for b in await list_jobs(story.conn, kind="bench") if b.id not in before_benches]
        return bool(mine) and not mine[0].active

    await until(story, benched, "the checkpoint's bench", 600)
    for b in await list_jobs(story.conn, kind="bench"):
        if b.id not in before_benches:
            await bench.wait_result(story.conn, b.id)
    await sync_from_host(story.app.history, story.conn)
    pane.action_refresh()
    await until(story, lambda: any(r.measured_tok_s for r in pane.rows), "measured beside predicted")
    await show(story, "train", "break-even", "measured")
    await save(story, "train")


async def shot_fleet(story: Story) -> None:
    """The sandbox's fleet (a replica on each of its two hosts, the real sglang-router on the first), started by
    the tour's keys (`8`, `u`, `y`) under a bench sent through the router (`b`): its line, the verdict, the
    replicas' figures and sparklines."""
    from backend.fleet import fleets
    from backend.serve import serving
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.fleet import FleetPane

    for job in await list_jobs(story.conn, kind="serve"):  # the earlier shots' servers hold the fleet's port
        if job.active:
            await serving.stop(story.conn, job=job.id)
    pane = cast(FleetPane, await story.app.shown_pane("fleet"))  # built when first shown
    await show(story, "fleet", "fleet sandbox")
    pane.query_one(pane.KEYS_WIDGET).focus()
    try:
        await story.press("u")
        await until(story, lambda: isinstance(story.app.screen, ConfirmScreen), "the start question")
        await story.press("y")
        await until(story, lambda: pane.changing is None and pane.status is not None and pane.status.router.healthy,
                    "the fleet up", 300)  # fmt: skip
        await story.press("b")
        points = 3  # a poll every 2 s: the tab's own bench (two rounds of two streams a replica) is short

        def loaded() -> bool:
            replicas = pane.status.replicas if pane.status is not None else ()
            trends = [[v for v in pane.trends.get(r.label, ()) if v is not None] for r in replicas]
            busy = all(r.running for r in replicas)
            return bool(trends) and busy and all(len(t) >= points for t in trends)

        await until(story, loaded, "the replicas' figures under the bench", 180)
        await show(story, "fleet", "workers healthy", "imbalance")
        await save(story, "fleet")
        await until(story, lambda: not pane.benching, "the bench through the router", 600)
    finally:
        links = await fleets.FleetLinks.open(story.settings, "sandbox")
        try:
            await fleets.down(links)
        finally:
            await links.close()


SHOTS: dict[str, Callable[[Story], Awaitable[None]]] = {
    "drafters": shot_drafters,
    "compare": shot_compare,
    "serve": shot_serve,
    "live": shot_live,
    "history": shot_history,
    "tune": shot_tune,
    "train": shot_train,
    "fleet": shot_fleet,
}


async def tell(story: Story, only: set[str]) -> None:
    """Set the scene step by step, taking each wanted shot when its data is there."""

    async def take(tab: str) -> None:
        if tab in only:
            await SHOTS[tab](story)

    await start_download(story)
    await take("drafters")
    for profile in PROFILES[:2]:  # the tour's steps 3-5: serve, then bench from the Live tab
        await bench_live(story, await serve(story, profile))
    await download_done(story)
    await take("compare")
    if "serve" not in only:
        await serve(story, "eagle3-aq")
    await take("serve")
    if "live" not in only:
        await bench_live(story, story.servers["eagle3-aq"])
    await take("live")
    await take("history")
    await take("tune")
    await take("train")
    await take("fleet")


async def run(out: Path, only: set[str], quick: bool = False) -> list[Path]:
    """Take the shots in a fresh sandbox; returns the files written."""
    from backend.connection import Connection
    from backend.sandbox import environment
    from backend.settings import config_file
    from tui.app import SpecdeckApp

    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPECDECK_SIM_SPECFORGE_STEP_S", "0.01" if quick else "0.03")  # k25-ft in 6 or 18 s
    hosts = 2 if "fleet" in only else 1  # the second host serves only the fleet's replica
    box = await environment.up(hub_rate="600M" if quick else environment.DEFAULT_HUB_RATE, hosts=hosts)
    settings = config_file.load(box.config)
    conn = await Connection.open(settings.host(environment.HOST_NAME))
    app = SpecdeckApp(settings, host=environment.HOST_NAME)
    story = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            story = Story(app, pilot, conn, settings, out, quick)
            await until(story, lambda: app.connection.connected, "the panel to connect")
            if quick:  # the test's run: short benches behind the same keys (`make screenshots` keeps the tour's)
                from backend.measure.bench import BenchPlan
                from tui.widgets.benchbar import BenchBar

                for bar in app.query(BenchBar):
                    bar.plan = BenchPlan(requests=2, max_tokens=96)
            await tell(story, only)
    finally:
        for job in await list_jobs(conn):
            if job.state == "running":
                await conn.call("jobs.cancel", id=job.id, timeout=10)
        await conn.close()
    return story.saved if story else []


def isolate() -> tempfile.TemporaryDirectory:
    """A throwaway user environment (config, state, data, caches) and fast simulated start-ups."""
    home = tempfile.TemporaryDirectory(prefix="sd-")
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_STATE_HOME", "state"), ("XDG_DATA_HOME", "data"),
                     ("XDG_CACHE_HOME", "cache"), ("HF_HOME", "hf")):  # fmt: skip
        os.environ[var] = os.path.join(home.name, sub)
    os.environ.pop("SPECDECK_CONFIG", None)
    os.environ.pop("SPECDECK_HISTORY", None)
    os.environ.setdefault("SPECDECK_SIM_TIME_SCALE", "0.1")
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    return home


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tui.screenshots", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the SVGs (default {OUT})")
    parser.add_argument("--only", nargs="+", choices=TABS, help="shoot only these tabs")
    parser.add_argument("--quick", action="store_true", help="short benches and a fast hub (for tests)")
    args = parser.parse_args(argv)
    with isolate():
        saved = asyncio.run(run(args.out, set(args.only or TABS), args.quick))
    print(f"{len(saved)} screenshot(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
