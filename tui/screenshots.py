"""`make screenshots`: an SVG of every tab, driven headless in a fresh sandbox with real data from the simulator.

The story the shots tell, in order: AQ-MedAI's drafter downloading from the sandbox hub (Drafters) while the
baseline and the team's drafter are served and benched; the two drafters side by side once the download is
done (Compare); AQ-MedAI's drafter served and ready (Serve), its live charts against the baseline and the
break-even (Live), the three runs compared (History), the advisor on AQ-MedAI's run (Tune), and AQ-MedAI's
drafter fine-tuned with the SIMULATED SpecForge, its checkpoints predicted and one measured (Train), and the
sandbox's two-host fleet behind the real sglang-router under a bench through it (Fleet).
Everything runs in a throwaway user environment (config, state, data) so neither the user's sandbox nor their
history is touched.

Each tab's shot is one small function; ``--only`` picks some (the story still runs, so the data is there).
Run with ``python -m tui.screenshots [--out DIR] [--only TAB ...] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import os
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from backend.jobs import JobInfo, get_job, list_jobs, wait_job

SIZE = (160, 48)
OUT = Path(__file__).resolve().parents[1] / "screenshots"
TABS = ("drafters", "compare", "serve", "live", "history", "tune", "train", "fleet")
PROFILES = ("baseline", "eagle3-ours", "eagle3-aq")


@dataclass
class Story:
    """What the shots share: the app under Pilot, a connection of our own for setting the scene, the jobs."""

    app: object
    pilot: object
    conn: object
    settings: object
    out: Path
    quick: bool
    download: JobInfo | None = None
    servers: dict[str, JobInfo] = field(default_factory=dict)
    saved: list[Path] = field(default_factory=list)

    @property
    def max_tokens(self) -> int:
        """Tokens per bench request: half a minute of decode per measured run (decode is never sped up)."""
        return 96 if self.quick else 1600

    @property
    def live_requests(self) -> int:
        """Requests the Live shot's bench sends: about two minutes of samples on the charts."""
        return 1 if self.quick else 8


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


def save(story: Story, tab: str, name: str | None = None) -> None:
    path = story.out / f"{name or tab}.svg"
    story.app.save_screenshot(filename=path.name, path=str(story.out))
    story.saved.append(path)
    print(f"saved {path}", flush=True)


# --- setting the scene ------------------------------------------------------------------------------------


async def start_download(story: Story) -> None:
    """Download AQ-MedAI's drafter from the sandbox hub the way a person would: Drafters tab, its row, ``d``."""
    await show(story, "drafters", "aq-medai")
    table = story.app.query_one("#drafters-pane DataTable")
    table.focus()
    table.move_cursor(row=1)
    await story.pilot.press("d")

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


async def measured_run(story: Story, profile: str, keep: bool = False) -> JobInfo:
    """Serve ``profile``, bench it until its result is in, and stop it unless ``keep``; returns the serve job."""
    from backend.measure import bench
    from backend.serve import serving

    status = await serving.start(story.conn, story.settings, serving.get_profile(story.settings, profile))
    job_id = status["job"]
    ready = await serving.wait(story.conn, job_id, until=("ready", "crashed", "stopped"), within=120)
    if ready.get("state") != "ready":
        raise RuntimeError(f"{profile} did not get ready: {ready.get('error') or ready.get('state')}")
    job = await get_job(story.conn, job_id)
    story.servers[profile] = job
    plan = bench.BenchPlan(requests=2, max_tokens=story.max_tokens)
    started = await bench.start_bench(story.conn, job, plan)
    await bench.wait_result(story.conn, started.id)
    if not keep:
        await serving.stop(story.conn, job=job_id)
    return job


# --- the shots --------------------------------------------------------------------------------------------


async def shot_drafters(story: Story) -> None:
    """AQ-MedAI's drafter downloading (a fifth to four fifths done)."""

    async def midway() -> bool:
        job = await get_job(story.conn, story.download.id)
        progress = job.progress
        done, total = progress.get("bytes") or 0, progress.get("total") or 0
        return job.state != "running" or (progress.get("file", "").endswith(".safetensors") and done > total / 5)

    await until(story, midway, "the download to be under way")
    await show(story, "drafters", "aq-medai: ")
    save(story, "drafters")


async def shot_compare(story: Story) -> None:
    """Ours vs AQ-MedAI's drafter, side by side."""
    from tui.screens.compare import ComparePane

    story.app.query_one(ComparePane).compare_sources("ours", "aq-medai")
    await show(story, "compare", "aq-medai")
    save(story, "compare")


async def shot_serve(story: Story) -> None:
    """AQ-MedAI's drafter served and ready, its profile highlighted."""
    from textual.widgets import OptionList

    for profiles in story.app.query("#serve-pane OptionList").results(OptionList):
        with contextlib.suppress(Exception):  # the profile list's option ids are the profile names
            profiles.highlighted = profiles.get_option_index("eagle3-aq")
    await show(story, "serve", "ready")
    save(story, "serve")


async def shot_live(story: Story) -> None:
    """Live charts of the AQ-MedAI server under a bench, with the baseline and break-even lines."""
    from backend.measure import bench

    job = story.servers["eagle3-aq"]
    plan = bench.BenchPlan(requests=story.live_requests, max_tokens=story.max_tokens)
    started = await bench.start_bench(story.conn, job, plan)
    await show(story, "live", "break-even", "baseline")
    await bench.wait_result(story.conn, started.id)
    await story.pilot.pause(1.5)  # the charts redraw twice a second
    save(story, "live")
    story.app.theme = "textual-light"  # the same tab on a light terminal
    await story.pilot.pause(1.5)
    save(story, "live", "live-light")
    story.app.theme = "textual-dark"


async def shot_history(story: Story) -> None:
    """The three runs compared: table and overlaid charts against the baseline and break-even."""
    from tui.screens.history import HistoryPane

    pane = story.app.query_one(HistoryPane)
    story.app.action_show_tab("history")
    pane.action_sync()
    want = {f"{story.conn.host.name}/{story.servers[p].id}" for p in PROFILES if p in story.servers}
    await until(story, lambda: want <= {r.id for r in pane.runs}, "the runs in the History tab")
    pane.selected = [f"{story.conn.host.name}/{story.servers[p].id}" for p in PROFILES if p in story.servers]
    pane.reload()
    await show(story, "history", "Comparing", "break-even 2.46")
    save(story, "history")


async def shot_tune(story: Story) -> None:
    """The advisor on AQ-MedAI's run: its acceptance per position and the predicted tok/s by draft steps."""
    from textual.widgets import DataTable

    from tui.screens.tune import TunePane

    pane = story.app.query_one(TunePane)
    story.app.action_show_tab("tune")
    pane.action_refresh()  # its benches too: the History tab's sync may still be importing them
    run_id = f"{story.conn.host.name}/{story.servers['eagle3-aq'].id}"
    table = pane.query_one("#tune-runs", DataTable)
    await until(story, lambda: run_id in table.rows, "the AQ-MedAI run in the Tune tab")
    table.move_cursor(row=table.get_row_index(run_id))
    await show(story, "tune", "◀ best", "baseline")
    save(story, "tune")


async def shot_train(story: Story) -> None:
    """AQ-MedAI's drafter fine-tuned for K2.5 (the SIMULATED SpecForge): its curves, and its checkpoints
    predicted before a restart beside the one served and benched."""
    from backend.history import sync_from_host
    from backend.measure import bench
    from backend.serve import serving
    from backend.train import training
    from tui.screens.train import TrainPane

    pane = story.app.query_one(TrainPane)
    story.app.action_show_tab("train")
    pane.action_start()
    await until(story, lambda: pane.job is not None and pane.job.state == "done", "the training to end", 300)
    await until(story, lambda: len(pane.rows) >= 3, "its checkpoints judged")
    best = training.pick(pane.rows, "best", pane.name_)
    out = await training.serve(story.conn, story.settings, pane.name_, best)
    ready = await serving.wait(story.conn, out["job"], until=("ready", "crashed", "stopped"), within=120)
    if ready.get("state") != "ready":
        raise RuntimeError(f"the checkpoint's server did not get ready: {ready.get('error') or ready.get('state')}")
    job = await get_job(story.conn, out["job"])
    started = await bench.start_bench(story.conn, job, bench.BenchPlan(requests=2, max_tokens=story.max_tokens))
    await bench.wait_result(story.conn, started.id)
    await sync_from_host(story.app.history, story.conn)
    pane.action_refresh()
    await until(story, lambda: any(r.get("measured_tok_s") for r in pane.rows), "measured beside predicted")
    await show(story, "train", "break-even", "measured")
    save(story, "train")


async def shot_fleet(story: Story) -> None:
    """The sandbox's fleet (a replica on each of its two hosts, the real sglang-router on the first) under a
    bench sent through the router: its line, the verdict, the replicas' figures and sparklines."""
    from backend.fleet import fleets
    from backend.measure import bench
    from backend.serve import serving
    from tui.screens.fleet import FleetPane

    for job in await list_jobs(story.conn, kind="serve"):  # the earlier shots' servers hold the fleet's port
        if job.active:
            await serving.stop(story.conn, job=job.id)
    pane = story.app.query_one(FleetPane)
    links = await fleets.FleetLinks.open(story.settings, "sandbox")
    try:
        await fleets.up(links)
        story.app.action_show_tab("fleet")
        plan = bench.BenchPlan(requests=8, max_tokens=story.max_tokens, concurrency=4)
        sent = asyncio.ensure_future(fleets.bench(links, plan))
        points = 1 if story.quick else 12  # a poll every 2 s: half a minute of sparkline

        def loaded() -> bool:
            replicas = pane.status.replicas if pane.status is not None else ()
            trends = [[v for v in pane.trends.get(r.label, ()) if v is not None] for r in replicas]
            return bool(trends) and all(len(t) >= points for t in trends)

        await until(story, loaded, "the replicas' figures under the bench", 120)
        await show(story, "fleet", "workers healthy", "imbalance")
        save(story, "fleet")
        await sent
    finally:
        await fleets.down(links)
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
    for profile in PROFILES[:2]:
        await measured_run(story, profile)
    await download_done(story)
    await take("compare")
    await measured_run(story, "eagle3-aq", keep=True)
    await take("serve")
    await take("live")
    await take("history")
    await take("tune")
    await take("train")
    await take("fleet")


async def run(out: Path, only: set[str], quick: bool = False) -> list[Path]:
    """Take the shots in a fresh sandbox; returns the files written."""
    from backend import settings as settings_mod
    from backend.connection import Connection
    from backend.sandbox import environment
    from tui.app import SpecdeckApp

    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPECDECK_SIM_SPECFORGE_STEP_S", "0.01" if quick else "0.03")  # k25-ft in 6 or 18 s
    hosts = 2 if "fleet" in only else 1  # the second host serves only the fleet's replica
    box = await environment.up(hub_rate="600M" if quick else environment.DEFAULT_HUB_RATE, hosts=hosts)
    settings = settings_mod.load(box["config"])
    conn = await Connection.open(settings.host(environment.HOST_NAME))
    app = SpecdeckApp(settings, host=environment.HOST_NAME)
    story = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            story = Story(app, pilot, conn, settings, out, quick)
            await until(story, lambda: app.connection.connected, "the panel to connect")
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
