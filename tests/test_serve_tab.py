"""The Serve tab driven through Pilot against the SIMULATED SGLang on `local`: edit, start, watch, crash, stop,
reattach after a reconnect; and the log view's follow mode on its own."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import tomlkit
from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Input, OptionList, Static, TabbedContent

from backend.connection import Connection
from backend.sandbox import fixtures
from backend.serve import preflight_checks, server_status, serving
from backend.settings.config_file import load
from backend.settings.model import Settings
from tests.helpers import until
from tests.simhost import fake_nvidia_smi
from tests.sshd import free_port
from tui.app import SpecdeckApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.serve import ServePane
from tui.widgets.logview import LogView
from tui.widgets.serve.state import CLOCK_LATE_S, next_change

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

SIZE = (150, 44)
SCALE = {"SPECDECK_SIM_TIME_SCALE": "0.02"}


@pytest.fixture
def settings(tmp_path) -> Settings:
    models = tmp_path / "models"
    eagle = {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4}
    port = free_port()
    data = {
        "default_host": "sim",
        "target": fixtures.write_target_config(str(models / "Kimi-K2.5")),
        "hosts": {
            "sim": {
                "url": "local",
                "python": sys.executable,
                "workdir": str(tmp_path / "host"),
                "launcher": "simulator",
                "sandbox": True,
            }
        },
        "drafters": {"ours": {"path": fixtures.write_drafter(str(models / "ours"), "ours")}},
        "profiles": {
            "baseline": {"port": port, "env": SCALE},
            "eagle3-ours": {"drafter": "ours", **eagle, "tp": 2, "port": port, "env": SCALE},  # gpu_box's 2 GPUs
            "eagle3-aq": {"drafter": "ours", **eagle, "port": free_port(), "env": SCALE},
            "oom": {"drafter": "ours", **eagle, "port": free_port(), "env": {**SCALE, "SPECDECK_SIM_FAIL": "oom"}},
            "dflash": {"drafter": "ours", "algorithm": "DFLASH", "dflash_block_size": 8, "port": free_port()},
        },
    }
    path = tmp_path / "config.toml"
    path.write_text(tomlkit.dumps(data))
    return load(str(path))


@pytest.fixture
async def cleanup(settings):
    """Stops whatever server a test left running."""
    yield
    conn = await Connection.open(settings.hosts["sim"])
    try:
        for job in await conn.call("jobs.list", kind="serve"):
            if job["state"] == "running":
                await conn.call("serve.stop", job=job["id"], timeout=5)
    finally:
        await conn.close()


@pytest.fixture
def gpu_box(tmp_path, monkeypatch):
    """A fake nvidia-smi on the agent's PATH: the simulator on GPU0, someone else's `sleep` on GPU1."""
    other = subprocess.Popen(["sleep", "120"])
    (tmp_path / "other.pid").write_text(str(other.pid))
    fake_nvidia_smi(tmp_path / "bin", tmp_path / "other.pid")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    yield other.pid
    other.kill()
    other.wait()


def text(app: App, selector: str) -> str:
    """A Static's text, looked up inside the Serve tab when there is one (other tabs reuse some ids)."""
    root = app.query_one(ServePane) if app.query(ServePane) else app
    return str(root.query_one(selector, Static).render())


def state_text(app: App) -> str:
    """The server's state as the Serve tab shows it: the head line (with its clock), then the block under it."""
    return text(app, "#server-head") + "\n" + text(app, "#server-state")


def state(app: SpecdeckApp) -> str | None:
    status = app.query_one(ServePane).status
    return status.state if status else None


async def open_serve_tab(app: SpecdeckApp, pilot: Pilot) -> ServePane:
    await until(pilot, lambda: app.connection.connected, "connected")
    await pilot.press("3")
    pane = app.query_one(ServePane)
    await until(pilot, lambda: pane.status is not None, "the server's status")
    return pane


async def select(pilot: Pilot, pane: ServePane, name: str) -> None:
    pane.query_one("#profiles").focus()
    names = list(pane.app.settings.profiles)
    pane.query_one("#profiles").highlighted = names.index(name)
    await until(pilot, lambda: pane.selected == name, f"profile {name} selected")


@pytest.mark.slow
async def test_edit_start_watch_and_stop(settings, cleanup, gpu_box):
    app = SpecdeckApp(settings, host="sim")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_serve_tab(app, pilot)
        assert state(app) == "none" and "no server" in state_text(app)
        assert not pane.query_one("#edit-extra", Input).placeholder.startswith("--")  # empty reads as empty
        await select(pilot, pane, "eagle3-ours")
        assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in text(
            app, "#preview"
        )
        # Edit the numbers: a topk-1 mismatch shows at once, verdict first; the fix updates the command preview.
        pane.query_one("#edit-steps", Input).value = "2"
        await until(pilot, lambda: "✗ topk 1" in text(app, "#checks"), "the topk 1 check")
        assert text(app, "#checks").startswith("✗ 1 check fails: topk 1")
        pane.query_one("#edit-draft_tokens", Input).value = "5"
        await until(pilot, lambda: "--speculative-num-draft-tokens 5" in text(app, "#preview"), "the preview")
        pane.query_one("#edit-steps", Input).value = "4"
        await until(pilot, lambda: "--speculative-num-steps 4" in text(app, "#preview"), "the preview")
        assert "✗" not in text(app, "#checks")
        assert "eagle3-ours*" in str(pane.query_one("#profiles").get_option("eagle3-ours").prompt)

        # The edits reach the config file once typing pauses, the file's other keys untouched. Both edits: a
        # pause of a second between them (a loaded machine) saves the first alone, then both.
        def saved() -> tuple[int | None, int | None]:
            profile = load(settings.source).profiles["eagle3-ours"]
            return profile.steps, profile.draft_tokens

        await until(pilot, lambda: saved() == (4, 5), "the saved edits")
        assert "steps = 4" in Path(settings.source).read_text()
        await until(pilot, lambda: app.settings.profiles["eagle3-ours"].steps == 4, "the saved settings")

        pane.query_one("#profiles").focus()
        await pilot.press("s")
        await until(pilot, lambda: state(app) == "ready", "ready")
        # The start's own checks come with its answer, the state from the status watch: either may be first.
        await until(pilot, lambda: "knows every flag" in text(app, "#checks"), "the start's checks")
        status_text = state_text(app)
        assert "● ready" in status_text and "eagle3-ours" in status_text
        assert "EAGLE3 steps 4, topk 1, draft tokens 5" in status_text
        for phase in ("loading weights", "capturing CUDA graphs", "capturing draft graphs", "warming up"):
            assert f"✓ {phase}" in status_text
        assert "✓ sglang: sglang 0.5.23-sim on the host knows every flag" in text(app, "#checks")
        log = pane.query_one(LogView)
        await until(pilot, lambda: any("fired up" in line for line in log.lines_kept), "the log")
        await until(pilot, lambda: "GPU1" in text(app, "#gpu-list"), "the GPUs")
        assert "GPU0 █████░░░░░ 69.3/140 GiB" in text(app, "#gpu-list")
        assert f"pid {gpu_box} sleep (not ours)" in text(app, "#gpu-list")
        assert "GPUs busy with other processes" in text(app, "#checks")

        # w right after an arrow, before the list's message arrives: the question names the profile highlighted.
        profiles = pane.query_one("#profiles", OptionList)
        profiles.highlighted = next(i for i in range(profiles.option_count)
                                    if profiles.get_option_at_index(i).id == "baseline")  # fmt: skip
        pane.action_switch()
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the switch question")
        question = app.screen.question
        assert question.startswith("Stop eagle3-ours (ready for ") and "and start baseline?" in question, question
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "the switch declined")
        await select(pilot, pane, "eagle3-ours")

        job = pane.status.job
        await pilot.press("x")  # a ready server: asks first, naming it (issue 33); n keeps it
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the stop question")
        question = str(app.screen.query_one("#confirm-dialog").query(Static)[1].render())
        assert question.startswith("Stop eagle3-ours (ready for ") and f"pid {pane.status.pid}) on port" in question
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "the question answered")
        assert pane.busy is None and pane.status.job == job and state(app) == "ready"
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the stop question again")
        await pilot.press("y")
        await until(pilot, lambda: state(app) == "stopped", "stopped")
        await until(pilot, lambda: any("SIGTERM received" in line for line in log.lines_kept), "the drain lines")
        assert "○ stopped" in state_text(app)


@pytest.mark.slow
async def test_crash_shows_the_hint_beside_the_log_and_switch_recovers(settings, cleanup):
    app = SpecdeckApp(settings, host="sim")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_serve_tab(app, pilot)
        await select(pilot, pane, "oom")
        await pilot.press("s")
        await until(pilot, lambda: state(app) == "crashed", "crashed")
        hint = pane.query_one("#hint", Static)
        await until(pilot, lambda: hint.has_class("-shown"), "the hint")
        assert "Why it crashed" in text(app, "#hint") and "raise --mem-fraction-static" in text(app, "#hint")
        assert "✕ allocating KV cache" in state_text(app)
        log = pane.query_one(LogView)
        await until(pilot, lambda: any("Not enough memory" in line for line in log.lines_kept), "the error line")
        await pilot.press("e")  # errors only
        errors = lambda: all(server_status.line_level(line) == "error" for line in log.lines_shown)  # noqa: E731
        await until(pilot, lambda: log.lines_shown and errors(), "errors only")
        assert "errors only" in text(app, "#log-badge")
        await pilot.press("e")
        await pilot.press("o")  # the Compare tab, for the drafter of the profile that failed: a message away
        await until(pilot, lambda: app.query_one(TabbedContent).active == "compare", "the Compare tab")
        await pilot.press("3")

        await select(pilot, pane, "baseline")
        await pilot.press("w")  # switch: stop whatever runs (nothing), start the selected profile
        await until(pilot, lambda: state(app) == "ready", "ready after the switch")
        assert not hint.has_class("-shown") and "baseline" in state_text(app)
        first = pane.status.job
        await pilot.press("R")  # a live server: asks first, naming what it stops; n keeps it
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the restart question")
        question = str(app.screen.query_one("#confirm-dialog").query(Static)[1].render())
        assert question.startswith("Restart baseline (ready for ") and f"pid {pane.status.pid})" in question
        assert "start baseline again?" in question
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "the question answered")
        assert pane.busy is None and pane.status.job == first
        await pilot.press("R")  # y: a new server job, the same profile
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the restart question again")
        await pilot.press("y")
        await until(pilot, lambda: pane.status.job != first and state(app) == "ready", "ready after the restart")
        assert pane.status.profile == "baseline"


@pytest.mark.slow
async def test_reattaches_to_a_running_server_after_a_reconnect(settings, cleanup):
    conn = await Connection.open(settings.hosts["sim"])
    try:
        started = await serving.start(conn, settings, settings.profiles["baseline"])
        await serving.wait(conn, started["job"], within=30)
    finally:
        await conn.close()
    app = SpecdeckApp(settings, host="sim")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_serve_tab(app, pilot)
        await until(pilot, lambda: state(app) == "ready", "the running server")
        log = pane.query_one(LogView)
        await until(pilot, lambda: any("fired up" in line for line in log.lines_kept), "its log tail")
        assert "●" in str(pane.query_one("#profiles").get_option("baseline").prompt)

        generation = app.connection.generation
        app.connection.agent.pipe.kill()  # the agent dies: the shell reconnects by itself
        await until(pilot, lambda: app.connection.generation > generation and app.connection.connected, "reconnect")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the stop question")
        await pilot.press("y")
        await until(pilot, lambda: state(app) == "stopped", "stopped after the reconnect")
        # Stopped: the file is whole. The view gets its last lines a follow batch later.
        log_file = Path(pane.status.log_path).read_text().splitlines()
        await until(pilot, lambda: log.lines_kept[-1:] == log_file[-1:], "the log's last line")
        kept = log.lines_kept
        assert kept == log_file[-len(kept) :]  # resumed at the offset: nothing lost or repeated


@pytest.mark.slow
async def test_editor_refuses_numbers_sglang_refuses_and_shows_the_stored_profile(settings):
    app = SpecdeckApp(settings, host="sim")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_serve_tab(app, pilot)
        await select(pilot, pane, "eagle3-aq")
        for key, value, words in (
            ("steps", "0", "steps 0: a speculative server drafts at least 1 step"),
            ("topk", "0", "topk 0: each draft step keeps at least 1 candidate"),
            ("draft_tokens", "3", "draft tokens 3 with topk 1 is fewer than steps + 1 = 4"),
        ):
            pane.query_one(f"#edit-{key}", Input).value = value
            await until(pilot, lambda w=words: w in text(app, "#preview"), f"{key} {value} refused")
            assert "not saved" in text(app, "#preview") and "eagle3-aq" not in pane.edits
            pane._fill_editor()  # back to the stored numbers
        # Tune's apply best saves elsewhere: the editor shows the stored profile, and the next edit builds on it.
        app.save_profile(replace(settings.profiles["eagle3-aq"], steps=5, draft_tokens=6))
        await until(pilot, lambda: pane.query_one("#edit-steps", Input).value == "5", "the stored steps")
        assert pane.query_one("#edit-draft_tokens", Input).value == "6"
        pane.query_one("#edit-port", Input).value = "30123"
        await until(pilot, lambda: load(settings.source).profiles["eagle3-aq"].port == 30123, "the next edit saved")
        assert load(settings.source).profiles["eagle3-aq"].draft_tokens == 6

        # The host's preflight fails: the verdict heads the column, a toast names the checks, the column scrolls.
        pane.query_one("#edit-port", Input).value = str(settings.profiles["eagle3-aq"].port)
        pane.query_one("#edit-extra", Input).value = "--no-such-flag 1"
        pane.query_one("#profiles").focus()
        await pilot.press("p")
        await until(pilot, lambda: pane.checks is not None and not pane.busy, "the host's preflight", 90)
        assert any(n.title and "fail" in n.title and "--no-such-flag" in n.message for n in app._notifications)
        assert text(app, "#checks").split("\n")[0].startswith("✗ ") and "fail" in text(app, "#checks").split("\n")[0]
        left = pane.query_one("#serve-left")
        await until(pilot, lambda: left.max_scroll_y == 0 or left.scroll_y > 0, "the checks scrolled into view")


@pytest.mark.slow
async def test_the_editor_offers_what_the_algorithm_takes_and_A_turns_adaptive_on(settings):
    """Fields come from the profile declarations: a DFLASH profile edits its block and window, not steps or topk;
    ranges are the declarations' (block 0 refused, never saved); A toggles SGLang's adaptive steps, saved."""
    app = SpecdeckApp(settings, host="sim")
    async with app.run_test(size=SIZE) as pilot:
        pane = await open_serve_tab(app, pilot)

        def shown(name: str) -> bool:
            return pane.query_one(f"#edit-{name}", Input).display

        await select(pilot, pane, "dflash")
        assert shown("dflash_block_size") and shown("draft_window") and shown("draft_attention_backend")
        assert not shown("steps") and not shown("topk") and not shown("dspark_block_size")
        assert pane.query_one("#edit-dflash_block_size", Input).value == "8"
        assert "--speculative-dflash-block-size 8" in text(app, "#preview")
        pane.query_one("#edit-dflash_block_size", Input).value = "0"
        await until(pilot, lambda: "block 0: a DFLASH block holds at least 1 position" in text(app, "#preview"), "0")
        assert "not saved" in text(app, "#preview") and "dflash" not in pane.edits
        pane._fill_editor()
        await pilot.press("A")  # DFLASH has no adaptive steps: said, nothing changes
        await until(pilot, lambda: any("adapts the steps of" in n.message for n in app._notifications), "refused")

        await select(pilot, pane, "eagle3-aq")
        assert shown("steps") and shown("topk") and not shown("dflash_block_size")
        await pilot.press("A")
        await until(pilot, lambda: load(settings.source).profiles["eagle3-aq"].adaptive, "adaptive saved")
        assert "--speculative-adaptive" in text(app, "#preview").split()
        assert "EAGLE3 adaptive" in str(pane.query_one("#profiles").get_option("eagle3-aq").prompt)
        await pilot.press("A")
        await until(pilot, lambda: not load(settings.source).profiles["eagle3-aq"].adaptive, "adaptive off again")


@pytest.mark.slow
async def test_typing_at_full_speed_into_an_input_just_emptied_keeps_every_key(settings):
    """Keys that arrive together, as a terminal delivers fast typing: all queued before the first is handled.
    Textual ran an Input's editing keys only once they had bubbled up to the App, so the key typed after a
    backspace was inserted first and then erased ("0.01" saved as ".01"); FieldInput keeps key order."""
    app = SpecdeckApp(settings, host="sim")

    def burst(*keys: str) -> None:
        names = {".": "full_stop", " ": "space", "-": "minus"}
        for key in keys:
            char = {"backspace": "\x08", "ctrl+u": "\x15"}.get(key, key)
            app.post_message(events.Key(names.get(key, key), char))

    async with app.run_test(size=SIZE) as pilot:
        pane = await open_serve_tab(app, pilot)
        await select(pilot, pane, "eagle3-aq")
        extra = pane.query_one("#edit-extra", Input)
        extra.focus()
        await until(pilot, lambda: app.focused is extra, "the extra flags focused")
        burst("end", *["backspace"] * 30, *"--mem-fraction-static 0.01")
        await until(pilot, lambda: extra.value == "--mem-fraction-static 0.01", "every key typed")
        await until(pilot, lambda: load(settings.source).profiles["eagle3-aq"].extra_args[-1:] == ("0.01",), "saved")
        burst("ctrl+u", *"--x 0.02")
        await until(pilot, lambda: extra.value == "--x 0.02", "emptied and typed in one burst")
        port = pane.query_one("#edit-port", Input)
        port.focus()
        await until(pilot, lambda: app.focused is port, "the port focused")
        burst("ctrl+u", *"30123")
        await until(pilot, lambda: port.value == "30123", "the port typed in one burst")


def test_preflight_fails_on_numbers_sglang_refuses(settings):
    for numbers, words in (
        ({"steps": 0}, "steps 0"),
        ({"topk": 0}, "topk 0"),
        ({"steps": 4, "draft_tokens": 4}, "draft tokens 4 with topk 1 is fewer than steps + 1 = 5"),
    ):
        profile = replace(settings.profiles["eagle3-aq"], **numbers)
        checks = preflight_checks.profile_checks(settings, profile)
        failed = [c for c in checks if c.status == "fail" and c.name == "speculative numbers"]
        assert failed and words in failed[0].message, checks
    assert (
        preflight_checks.speculative_problem(None, None, None) is None
        and preflight_checks.speculative_problem(3, 1, 4) is None
    )


def test_every_serve_key_has_an_id_and_a_tooltip():
    ids = [b.id for b in ServePane.BINDINGS]
    assert all(i and i.startswith("serve.") for i in ids) and len(set(ids)) == len(ids)
    assert all(b.tooltip for b in ServePane.BINDINGS)


def test_the_clock_wakes_when_a_figure_shown_changes():
    now = 1_000_000.0
    ready = server_status.ServerStatus(
        "ready", since=now - 65.25, phases=(server_status.Phase("ready", now - 65.25, None),)
    )
    # A server left running shows whole minutes past its first: its head redraws once a minute, not every second.
    assert (
        server_status.since_text(ready, now, minutes=True) == "for 1m"
        and server_status.since_text(ready, now) == "for 1m05s"
    )
    assert next_change(ready, now) == pytest.approx(54.75 + CLOCK_LATE_S)  # "for 1m" turns 2m
    young = replace(ready, since=now - 5.25)
    assert server_status.since_text(young, now, minutes=True) == "for 5s"
    assert next_change(young, now) == pytest.approx(0.75 + CLOCK_LATE_S)  # "for 5s" turns 6s
    assert server_status.since_text(replace(ready, state="stopped"), now, minutes=True) == "1m ago"
    old = server_status.ServerStatus("ready", since=now - 3725.0)
    assert next_change(old, now) == pytest.approx(55 + CLOCK_LATE_S)  # "for 1h02m" turns 1h03m: per minute
    # Starting for an hour, its current phase 2.5 s old: that phase's figure turns first.
    starting = replace(old, state="starting", phases=(server_status.Phase("loading weights", now - 2.5, None),))
    assert next_change(starting, now) == pytest.approx(0.5 + CLOCK_LATE_S)
    assert next_change(server_status.ServerStatus("none"), now) is None


def test_poll_lines_are_our_own_gets_of_what_the_panel_polls():
    polls = [
        '[2026-01-01 00:00:00] INFO:     127.0.0.1:40112 - "GET /metrics HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:40113 - "GET /server_info HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:40114 - "GET /get_server_info HTTP/1.1" 404 Not Found',
        'INFO:     127.0.0.1:40115 - "GET /health HTTP/1.1" 503 Service Unavailable',
    ]
    others = [
        'INFO:     127.0.0.1:40116 - "POST /generate HTTP/1.1" 200 OK',
        'INFO:     10.1.2.3:40117 - "GET /metrics HTTP/1.1" 200 OK',  # someone else's scraper
        'INFO:     127.0.0.1:40118 - "GET /health_generate HTTP/1.1" 200 OK',
        "[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, #token: 90, "
        "gen throughput (token/s): 80.00, #queue-req: 0",
    ]
    assert all(server_status.is_poll_line(line) for line in polls)
    assert not any(server_status.is_poll_line(line) for line in others)


# --- the log view on its own ------------------------------------------------------------------------------------


class LogApp(App):
    def compose(self) -> ComposeResult:
        yield LogView(classify=server_status.line_level, max_lines=200)


async def test_log_view_follows_freezes_counts_and_filters():
    app = LogApp()
    async with app.run_test(size=(80, 12)) as pilot:
        log = app.query_one(LogView)
        log.append([f"[2026-01-01 00:00:00] line {i}" for i in range(100)])
        await until(pilot, lambda: log.following and log.is_vertical_scroll_end, "at the tail")  # after a refresh
        log.scroll_home(animate=False)
        await until(pilot, lambda: not log.following, "frozen")
        log.append(["[2026-01-01 00:00:01] Scheduler hit an exception: Traceback (most recent call last):"])
        log.append(["one more", "and another"])
        await pilot.pause()
        assert log.pending == 3 and log.scroll_y == 0  # the view stays where the reader is
        log.follow()
        await until(pilot, lambda: log.is_vertical_scroll_end and log.pending == 0, "following again")
        assert log.following

        log.set_filter("line 9")
        assert log.lines_shown == [f"[2026-01-01 00:00:00] line {i}" for i in (9, *range(90, 100))]
        log.set_filter("", errors_only=True)
        assert len(log.lines_shown) == 1 and "hit an exception" in log.lines_shown[0]
        log.set_filter(errors_only=False)

        log.append([f"x{i}" for i in range(300)])  # bounded: only the newest max_lines are kept
        assert len(log.lines_kept) == 200 and log.lines_kept[-1] == "x299"
        await asyncio.sleep(0)


class PollLogApp(App):
    def compose(self) -> ComposeResult:
        yield LogView(classify=server_status.line_level, hide=server_status.is_poll_line, max_lines=200)


async def test_log_view_keeps_hidden_lines_and_shows_them_when_asked():
    app = PollLogApp()
    poll = 'INFO:     127.0.0.1:40112 - "GET /metrics HTTP/1.1" 200 OK'
    request = 'INFO:     127.0.0.1:40113 - "POST /generate HTTP/1.1" 200 OK'
    async with app.run_test(size=(80, 12)) as pilot:
        log = app.query_one(LogView)
        log.append([poll, request, poll])
        await pilot.pause()
        assert log.hiding and log.lines_shown == [request] and log.lines_kept == [poll, request, poll]
        log.set_filter(show_hidden=True)
        assert not log.hiding and log.lines_shown == [poll, request, poll]
        log.set_filter("generate")  # the other filters still apply
        assert log.lines_shown == [request]
