"""The Serve tab's hint beside the log: why the server crashed (or what is off), and what to do."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from backend.serve import server_status


class ServerHint(Static):
    """Shown only while the server's status carries a hint."""

    DEFAULT_CSS = """
    ServerHint { width: 40; display: none; padding: 0 1; border-left: vkey $error; color: $text; }
    ServerHint.-shown { display: block; }
    """

    def show(self, st: server_status.ServerStatus | None) -> None:
        if not st or not st.hint:
            self.set_class(False, "-shown")
            return
        title = "Why it crashed" if st.state == "crashed" else "Something is off"
        parts = [f"[b $error]{title}[/]"]
        if st.error:
            parts.append(escape(st.error))
        parts.append(escape(st.hint))
        if st.hint_action == "compare":
            parts.append("[$text-muted]o: open Compare[/]")
        self.update("\n\n".join(parts))
        self.set_class(True, "-shown")
