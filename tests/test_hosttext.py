"""Nothing a host writes drives the operator's terminal (issue 30, item 1), broken on purpose: a server's log
line carrying OSC 52 (the clipboard), OSC 0 (the title), CSI 2J (clear the screen), an 8-bit CSI, BEL, CR and
backspace, read back through the real CLI under a pseudo-terminal and through the panel's log pane, shows
each control as a visible escape; `--raw` keeps the bytes for a pipe only."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time

import pytest
from rich.segment import Segment
from textual.color import Color
from textual.widgets import Static

from backend import hosttext
from backend.cli.common import log_stream
from backend.connection import Connection
from backend.settings.model import HostConfig
from tests.helpers import CLI, host_args, until
from tests.simhost import start_server
from tui.visiblefilter import VisibleControls

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4K\x1b\\"  # OSC 52, ST-terminated: "rm -rf ~" into the clipboard
HOSTILE = f"[2026] worker says {CLIPBOARD}\x1b]0;pwned\x07\x1b[2J\x9b3J\x08bell\x07 tok/s ✓ done"
# What a terminal would obey: ESC and the 8-bit CSI, whatever follows them.
OBEYED = ("\x1b]52", "\x1b]0;", "\x1b[2J", "\x9b", "\x07", "\x08")


def test_visible_escapes_every_control_but_newline_and_tab():
    shown = hosttext.visible(HOSTILE + "\tcol\nnext\r")
    assert not any(c in shown for c in OBEYED) and "\r" not in shown
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x1b\\" in shown and "\\x9b3J" in shown and "\\x07" in shown
    assert "\\x08bell" in shown and "\\x0d" in shown and "\tcol\nnext" in shown
    assert "tok/s ✓ done" in shown  # valid UTF-8 as it is
    assert hosttext.visible(b"ok \xff\xfe \xe2\x9c\x93 \x1b[31m") == "ok \ufffd\ufffd ✓ \\x1b[31m"
    assert hosttext.visible("lone \udcff") == "lone \ufffd"  # a surrogateescape'd byte cannot be written
    assert hosttext.visible(shown) == shown  # applying it twice changes nothing more
    assert hosttext.visible("\x7f\x80\x9f\xa0") == "\\x7f\\x80\\x9f\xa0"  # DEL and C1; NBSP is text


def test_the_cli_streams_show_what_any_command_prints_as_escapes(capsys):
    out = io.StringIO()
    sys_stdout = sys.stdout
    sys.stdout = out
    try:
        with hosttext.guarded():
            print(HOSTILE)
            hosttext.unguarded(sys.stdout).write("\x1b[K")  # the CLI's own control, beneath the guard
            with hosttext.guarded():  # a second entry (quick.py, then main.py) wraps nothing twice
                assert hosttext.unguarded(sys.stdout) is out
    finally:
        sys.stdout = sys_stdout
    written = out.getvalue()
    assert not any(c in written.removesuffix("\x1b[K") for c in OBEYED) and written.endswith("\x1b[K")


def read_pty(argv: list[str], timeout: float = 120) -> tuple[int, bytes]:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal; its exit status and every byte it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=timeout), bytes(data)


@pytest.mark.slow
async def test_serve_logs_shows_a_hostile_log_line_as_escapes_on_a_terminal(models, tmp_path):
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "hostwork"))
    conn = await Connection.open(host)
    try:
        job = await start_server(conn, models, "baseline")
        with open(job.log_path, "a", encoding="utf-8") as log:  # what the server (or anything) wrote to its log
            log.write(HOSTILE + "\n")
        # the server logs its polls on: the last few lines may all be polls by the time the command reads them
        rc, data = read_pty([*CLI, "serve", "logs", "--lines", "100", *host_args(host)])
        assert rc == 0, data
        text = data.decode()
        assert "worker says \\x1b]52;c;cm0gLXJmIH4K\\x1b\\" in text and "\\x1b[2J\\x9b3J\\x08bell" in text
        assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text and "\x08" not in text

        rc, data = read_pty([*CLI, "serve", "logs", "--raw", *host_args(host)])
        assert rc == 2 and data.decode().count("\n") == 1 and "use it with a pipe or a file" in data.decode()
        assert b"\x1b" not in data

        logs = [*CLI, "serve", "logs", "--lines", "100", *host_args(host)]  # the server logs on: look it up
        piped = subprocess.run([*logs, "--raw"], capture_output=True)
        assert piped.returncode == 0 and HOSTILE.encode() + b"\n" in piped.stdout  # the bytes, for a pipe
        piped = subprocess.run(logs, capture_output=True)
        assert hosttext.visible(HOSTILE).encode() + b"\n" in piped.stdout and b"\x1b" not in piped.stdout
    finally:
        await conn.call("jobs.cancel", id=job.id)
        await conn.close()


def test_raw_refused_on_a_terminal_before_anything_runs(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Tty())
    from argparse import Namespace

    from backend.errors import UsageError

    try:
        log_stream(Namespace(raw=True))
    except UsageError as exc:
        assert "pipe or a file" in str(exc) and exc.exit_code == 2
    else:
        raise AssertionError("--raw on a terminal was accepted")


def test_the_panels_line_filter_keeps_the_width_and_obeys_nothing():
    segments = [Segment("ok "), Segment(HOSTILE), Segment(" tail", None)]
    width = Segment.get_line_length(segments)
    shown = VisibleControls().apply(segments, Color(0, 0, 0))
    joined = "".join(s.text for s in shown)
    assert Segment.get_line_length(shown) == width and not any(c in joined for c in OBEYED)
    assert joined.startswith("ok [2026] worker says \\x1b]52;c;")
    plain = [Segment("nothing to see")]
    assert VisibleControls().apply(plain, Color(0, 0, 0)) is plain


def test_the_filter_takes_the_escapes_cells_from_the_blanks_after_them():
    """What the escapes add comes out of the blanks that follow (a cell's padding: the next column stays put),
    never out of a word gap; where the blanks run out, the tail is cut and says so."""
    for segments, shown in (
        ([Segment("ab\x1bcd"), Segment(" " * 6), Segment("|next")], "ab\\x1bcd  |next"),
        ([Segment("ab\x1bcd "), Segment("|next")], "ab\\x1bcd …"),
        ([Segment("A" * 8 + "\x1b" + "B" * 4)], "A" * 8 + "\\x1…"),
    ):
        out = VisibleControls().apply(segments, Color(0, 0, 0))
        assert "".join(s.text for s in out) == shown
        assert Segment.get_line_length(out) == Segment.get_line_length(segments)


async def test_a_full_width_line_with_escs_in_the_log_pane_and_a_static():
    """A 160-column host line with three ESC bytes: the log pane escapes it before layout (172 cells, one row,
    its tail reached by scrolling: not cut, not wrapped); a plain Static in a wider box keeps it whole, the
    blanks after it giving the cells back; one it fills says it was cut instead of losing the tail unseen."""
    from textual.app import App, ComposeResult
    from textual.containers import Vertical

    from tui.widgets.logview import LogView

    line = "A" * 40 + "\x1b" + "B" * 40 + "\x1b" + "C" * 40 + "\x1b" + "D" * 39 + "Z"
    escaped = hosttext.visible(line)

    class Panel(App[None]):
        CSS = "#wide { width: 180; height: 1; } #full { width: 160; height: 1; } LogView { height: 4; }"

        def get_line_filters(self):  # the panel's filter, as SpecdeckApp adds it
            return [*super().get_line_filters(), VisibleControls()]

        def compose(self) -> ComposeResult:
            with Vertical():
                yield Static(line, markup=False, id="wide")
                yield Static(line, markup=False, id="full")
                yield LogView()

    def row(widget) -> str:
        (strip, *_) = widget.render_lines(widget.region.reset_offset)
        return "".join(seg.text for seg in strip)

    async with Panel().run_test(size=(200, 10)) as pilot:
        view = pilot.app.query_one(LogView)
        view.append([line, "next"])
        await until(pilot, lambda: len(view.lines) == 2, "both lines in the pane")
        assert ["".join(s.text for s in strip).rstrip() for strip in view.lines] == [escaped, "next"]
        assert view.virtual_size.width == len(escaped) == 172  # one row each, scrolled to see the tail
        assert row(pilot.app.query_one("#wide")) == escaped + " " * 8
        full = row(pilot.app.query_one("#full"))
        assert len(full) == 160 and full.endswith("D…") and full.startswith(escaped[:150])


@pytest.mark.slow
async def test_the_panels_log_pane_and_a_notification_reach_the_terminal_as_escapes(models, tmp_path):
    """The real panel on a host whose server logged the line: the Serve tab's log pane, and a notification
    quoting it (no widget of ours routes it: the app's filter does), rendered to the bytes a terminal gets."""
    from tests.simhost import make_settings
    from tui.app import SpecdeckApp
    from tui.screens.serve import ServePane
    from tui.widgets.logview import LogView

    settings = make_settings(models, baseline={})
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "hostwork"))
    conn = await Connection.open(host)
    try:
        job = await start_server(conn, models, "baseline")
        with open(job.log_path, "a", encoding="utf-8") as log:
            log.write(HOSTILE + "\n")
        app = SpecdeckApp(settings, host="local", overrides={"workdir": host.workdir})
        async with app.run_test(size=(160, 45), notifications=True) as pilot:
            await until(pilot, lambda: app.connection.connected, "connected")
            await pilot.press("3")
            pane = app.query_one(ServePane)
            view = pane.query_one(LogView)
            await until(pilot, lambda: HOSTILE in view.lines_kept, "the hostile line in the log pane")
            app.notify(f"the server said: {HOSTILE}", markup=False)
            await until(pilot, lambda: app.screen.query("Toast"), "the toast")
            later = Static(HOSTILE, markup=False)  # a widget nobody taught about host text: the app's filter
            await pane.mount(later)
            await pilot.pause(0.2)
            logged = "".join(seg.text for strip in view.lines for seg in strip)  # the pane escapes before layout
            assert "worker says \\x1b]52;c;cm0gLXJmIH4K\\x1b\\" in logged and not any(c in logged for c in OBEYED)
            toast = app.screen.query_one("Toast")  # notify escapes before the toast wraps the text
            for widget, part in ((toast, "bell\\x07 tok/s ✓ done"), (later, "worker says \\x1b]52;c;")):
                shown = "".join(seg.text for strip in widget.render_lines(widget.region.reset_offset) for seg in strip)
                assert part in shown, widget
                assert not any(c in shown for c in OBEYED), widget
            frame = app.screen._compositor.render_update(full=True).render_segments(app.console)
            assert not any(c in frame for c in OBEYED)  # Textual's own bytes are cursor moves and SGR only
    finally:
        await conn.call("jobs.cancel", id=job.id)
        await conn.close()
