"""The host switcher: every configured host plus ``local``, or a name or ``ssh://user@addr[:port]`` typed in as
``--host`` takes it; picking one reconnects the panel there. A malformed address is refused where it is typed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from backend.settings.model import HostConfig
from backend.settings.validation import ssh_url_problem
from tui.screens.dialog import Dialog
from tui.widgets.fieldinput import FieldInput


def host_choices(hosts: dict[str, HostConfig]) -> list[tuple[str, str]]:
    """(name, address) for every configured host, then ``local`` unless a host already has that name; an
    ssh_config alias shows where it leads (``ssh://gpu → root@10.1.230.174:2222 via bastion``)."""
    from backend.transport.sshconfig import where  # asyncssh's parser: not imported until the switcher opens

    rows = []
    for name, host in sorted(hosts.items()):
        leads = where(host.url) if host.url.startswith("ssh://") else ""
        rows.append((name, f"{host.url} → {leads}" if leads else host.url))
    if "local" not in hosts:
        rows.append(("local", "this machine, no SSH"))
    return rows


class HostSwitchScreen(Dialog[str | None]):
    """Dismisses with the chosen host's name, or None."""

    BINDINGS = [Binding("escape", "answer(None)", "Cancel", id="hosts.cancel")]
    DEFAULT_CSS = """
    HostSwitchScreen #hosts { height: auto; max-height: 16; }
    HostSwitchScreen #host-typed { margin-top: 1; }
    HostSwitchScreen #host-problem { color: $text-error; height: auto; }
    """

    def __init__(self, hosts: dict[str, HostConfig], current: str) -> None:
        super().__init__("Switch host")
        self.choices = host_choices(hosts)
        self.current = current

    def body(self) -> ComposeResult:
        options = [
            Option(Content(f"{'●' if name == self.current else ' '} {name}  {address}"), id=name)
            for name, address in self.choices
        ]
        yield OptionList(*options, id="hosts")
        yield FieldInput(placeholder="or type a host name or ssh://user@addr[:port], then enter", id="host-typed")
        yield Static(id="host-problem", markup=False)

    def on_mount(self) -> None:
        hosts = self.query_one(OptionList)
        names = [name for name, _ in self.choices]
        hosts.highlighted = names.index(self.current) if self.current in names else 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        typed = event.value.strip()
        problem = typed_host_problem(typed, [name for name, _ in self.choices])
        if problem:
            self.query_one("#host-problem", Static).update(problem)
            return
        self.dismiss(typed)


def typed_host_problem(typed: str, names: list[str]) -> str | None:
    """Why ``typed`` is not a host ``--host`` would take (a known name, ``local`` or an ssh:// address)."""
    if not typed:
        return "type a host name or ssh://user@addr[:port]"
    if typed in names:
        return None
    if typed.startswith("ssh://"):
        return ssh_url_problem(typed)
    return f"unknown host {typed!r}: use a configured name ({', '.join(names)}) or ssh://user@addr[:port]"
