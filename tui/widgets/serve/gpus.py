"""The Serve tab's GPU list: each GPU's memory as a bar, and the processes on it that are not ours."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from backend.serve.host_info import GpuUse


def _bar(used: float, total: float, width: int = 10) -> str:
    filled = round(width * used / total) if total else 0
    return "█" * filled + "░" * (width - filled)


class GpuList(Static):
    """``show`` the host's ``serve.gpus`` answer; laid out again only when its text changes (it is polled)."""

    DEFAULT_CSS = "GpuList { width: 36; color: $text-secondary; }"

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text: str | None = None

    def show(self, gpus: GpuUse | None) -> None:
        if gpus is None or not gpus.nvidia_smi:
            self._draw("[$text-muted]no GPUs (nvidia-smi not found)[/]")
            return
        lines = []
        for g in gpus.gpus:
            used, total = (g.memory_used_mib or 0) / 1024, (g.memory_total_mib or 0) / 1024
            lines.append(f"GPU{g.index} {_bar(used, total)} {used:.1f}/{total:.0f} GiB")
            for p in g.processes:
                if not p.job:
                    lines.append(f"  [$warning]pid {p.pid} {escape(p.name or '?')} (not ours)[/]")
        self._draw("\n".join(lines))

    def _draw(self, text: str) -> None:
        if text != self._text:
            self.update(text)
            self._text = text
