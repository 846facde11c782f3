"""The Serve tab's profile list: each profile's speculation, tp and port, the running one marked, an edit starred."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from backend.serve import preflight_checks
from backend.settings.model import ProfileConfig


def spec_text(profile: ProfileConfig) -> str:
    """A profile's speculation in the list: ``EAGLE3 3/1/4``, ``EAGLE3 adaptive``, ``DFLASH block 8``."""
    if not profile.algorithm:
        return "no speculation"
    if profile.adaptive:
        return f"{profile.algorithm} adaptive"
    if profile.algorithm in ("DFLASH", "DSPARK", "NGRAM"):
        return preflight_checks.algorithm_summary(profile)
    return f"{profile.algorithm} {profile.steps}/{profile.topk}/{profile.draft_tokens}"


class ProfileList(OptionList):
    """The profiles, in the config's order; its focus is the tab's keys (the pane's ``KEYS_WIDGET``)."""

    DEFAULT_CSS = "ProfileList { height: auto; max-height: 8; margin-bottom: 1; }"

    def fill(self, stored: dict[str, ProfileConfig], edits: dict[str, ProfileConfig], running: str | None) -> None:
        """Show ``stored`` (an edit in ``edits`` in its place, starred when it differs); ``running`` is marked."""
        # Names in a column (padded inside the bold, so no viewer can run a name into its description).
        width = max(map(len, stored), default=0) + 1
        shown = {self.get_option_at_index(i).id for i in range(self.option_count)}
        for name in stored:
            p = edits.get(name) or stored[name]
            spec = spec_text(p)
            mark = "[$success]●[/]" if name == running else " "
            edited = "*" if name in edits and edits[name] != stored[name] else ""
            label = escape(f"{name}{edited}".ljust(width))
            text = f"{mark} [b]{label}[/b] {escape(spec)} · tp {p.tp} · :{p.port}"
            if name in shown:
                self.replace_option_prompt(name, text)
            else:  # a profile added since (drafters add, from the Drafters tab)
                self.add_option(Option(text, id=name))
