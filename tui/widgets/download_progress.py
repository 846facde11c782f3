"""Per-file progress bars for one download (or verification) job: bytes, speed, ETA and phase per file.

The widget draws a ``backend.drafters.downloads.Progress`` the pane keeps; it never talks to the host. ``show`` is
cheap to call on every update: rows are mounted once per file and then only updated.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ProgressBar, Static

from backend.agent.host.shared.units import human_bytes
from backend.drafters.downloads import FileProgress, Progress, human_eta, human_rate, percent

STATE_STYLES = {"running": "bold", "done": "bold green", "failed": "bold red", "cancelled": "bold yellow"}


def file_detail(f: FileProgress) -> str:
    """``0.92/2.22 GiB 41.4% · 141.3 MiB/s · ETA 0:08 · downloading`` (speed and ETA only while it moves); while
    verifying, ``sha256 0.92/2.22 GiB 41.4% · …``: the bytes hashed (the bar stays at the bytes there). The
    percentage is ``percent``'s, as the CLI's bars and the table write it, not the bar's own rounding."""
    hashed = "sha256 " if f.phase == "verifying" else ""
    parts = [f"{hashed}{human_bytes(f.current)}/{human_bytes(f.total)} {percent(f.fraction)}"]
    if f.phase in ("downloading", "verifying"):
        parts += [human_rate(f.bytes_per_s), f"ETA {human_eta(f.eta_s)}"]
    parts.append(f.phase)
    return " · ".join(parts)


def headline(title: str, progress: Progress) -> Text:
    """The job's line: what it is and how it stands (the reason when it failed)."""
    text = Text(title + "  ", style="bold")
    if progress.state == "running":
        label = f"{human_bytes(progress.bytes)}/{human_bytes(progress.total)} {percent(progress.fraction)}"
    elif progress.state == "done":
        label = "done ✓"
    else:
        label = f"{progress.state}: {progress.reason or ''}".rstrip(": ")
    text.append(label, style=STATE_STYLES.get(progress.state, ""))
    return text


class FileRow(Horizontal):
    """One file: its name, a bar, and the numbers."""

    DEFAULT_CSS = """
    FileRow { height: 1; }
    FileRow .name { width: 28; text-overflow: ellipsis; text-wrap: nowrap; }
    FileRow ProgressBar { width: 34; }  /* the bar (32) and a gap: its percentage is the detail's */
    FileRow .detail { width: 1fr; color: $text-muted; text-wrap: nowrap; }
    """

    def __init__(self, f: FileProgress) -> None:
        super().__init__()
        self.file = f

    def compose(self) -> ComposeResult:
        yield Static(self.file.path, classes="name", markup=False)
        yield ProgressBar(show_eta=False, show_percentage=False)  # the detail's percentage is the one figure
        yield Static(classes="detail", markup=False)

    def on_mount(self) -> None:
        self.show(self.file)

    def show(self, f: FileProgress) -> None:
        self.file = f
        if not self.is_mounted:
            return  # drawn by on_mount, once the children exist
        self.query_one(ProgressBar).update(total=max(f.total, 1), progress=f.bytes)
        self.query_one(".detail", Static).update(file_detail(f))
        self.set_class(f.phase == "failed", "-failed")


class DownloadView(Vertical):
    """A job's headline and one ``FileRow`` per file."""

    DEFAULT_CSS = """
    DownloadView { height: auto; margin-bottom: 1; }
    DownloadView .headline { height: 1; }
    DownloadView FileRow.-failed .detail { color: $text-error; }
    """

    def __init__(self, title: str, progress: Progress, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.progress = progress
        self.rows: dict[str, FileRow] = {}

    def compose(self) -> ComposeResult:
        yield Static(Text(self.title), classes="headline")

    def on_mount(self) -> None:
        self.show(self.progress)

    def show(self, progress: Progress) -> None:
        self.progress = progress
        if not self.is_mounted:
            return  # drawn by on_mount, once the headline exists
        self.query_one(".headline", Static).update(headline(self.title, progress))
        for f in progress.files.values():
            row = self.rows.get(f.path)
            if row is None:
                self.rows[f.path] = FileRow(f)
                self.mount(self.rows[f.path])
            else:
                row.show(f)
