"""The Live tab's server line: which server is followed and what it says about itself, the time window, whether
drawing is paused (and how many samples were recorded since), and which earlier runs are drawn dashed.

State that redraws itself: ``facts`` is set from the feed when the pane hears ``LiveFeedUpdated``; ``paused``,
``window_index`` and ``overlay`` are bound to the pane's own reactives (``data_bind``). The line is laid out again
only when its text changes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from textual.markup import escape
from textual.reactive import reactive
from textual.widgets import Static

from backend.history import RunSummary
from backend.jobs import JobInfo
from backend.measure.livefeed import LiveFeed, describe_server
from backend.measure.metrics import ServerNumbers
from backend.measure.specnumbers import SpecFigures
from backend.sglang.versions import accept_rate_label, version_text

NO_SERVER = "no SGLang server is running on this host (start one on the Serve tab)"


@dataclass(frozen=True)
class ServerFacts:
    """What the feed knows of the followed server, as of one update (equal snapshots draw nothing new)."""

    server: JobInfo | None = None
    gone: bool = False
    info: ServerNumbers = field(default_factory=ServerNumbers)  # server_info_numbers() of the last poll
    metrics: dict[str, float | None] = field(default_factory=dict)  # the engine's totals in the last /metrics
    usage_by_rank: tuple[float, ...] = ()  # token usage per DP rank, when the server has several
    ranks: tuple[tuple[int, float, int], ...] = ()  # (DP rank, gen tok/s, running) of each rank, when several
    started_s: float | None = None  # SGLang 0.5.23's own startup time
    reachable: bool | None = None
    samples: int = 0  # samples read for this server
    spec: SpecFigures | None = None  # the per-algorithm figures (DSPARK's cap len, DFLASH's block acceptance)

    @classmethod
    def of(cls, feed: LiveFeed | None) -> ServerFacts:
        if feed is None:
            return cls()
        started = feed.startup.get("phases", {}).get("tokenizer_e2e")
        usage = tuple(feed.scrape.usage_by_rank.values()) if feed.scrape is not None else ()
        ranks = tuple((r.rank, round(r.total_tok_s, 1), r.streams) for r in feed.series.ranks_now())
        return cls(
            feed.server,
            feed.gone,
            feed.info or ServerNumbers(),
            dict(feed.metrics),
            usage if len(usage) > 1 else (),
            ranks if len(ranks) > 1 else (),
            started,
            feed.reachable,
            feed.samples,
            SpecFigures.of(feed.info, feed.scrape, feed.series.last_spec),
        )

    def text(self) -> str:
        """The server's part of the line, plain text."""
        server, info, metrics = self.server, self.info, self.metrics
        if server is None:
            return NO_SERVER
        text = f"{describe_server(server)}: {'gone' if self.gone else server.state}"
        if info.version:
            text += f" · {version_text(info.version)}"
        launched = (info.speculative_num_steps, info.speculative_num_draft_tokens)
        if info.speculative_num_steps:
            spec = (info.speculative_num_steps, info.speculative_eagle_topk, info.speculative_num_draft_tokens)
            text += " · steps/topk/draft {}/{}/{}".format(*spec)
        live = (metrics.get("spec_num_steps"), metrics.get("spec_num_draft_tokens"))
        if None not in live and live != launched:
            # 0.5.23 reports the numbers in use; under --speculative-adaptive they move away from the launch's.
            text += " · now steps/draft {:.0f}/{:.0f}".format(*live)
        # Accept figures only for a server that speculates (SGLang logs 0.00 for one that does not).
        speculates = bool(info.speculative_algorithm or server.algorithm)
        if speculates and info.avg_spec_accept_length is not None:
            text += f" · lifetime accept {info.avg_spec_accept_length:.2f}"
            ranks = [r.avg_spec_accept_length for r in info.dp_ranks]
            if len(ranks) > 1:  # one scheduler per DP rank, each with its own drafts
                text += " (DP ranks " + " / ".join("-" if a is None else f"{a:.2f}" for a in ranks) + ")"
        if speculates and metrics.get("spec_accept_rate") is not None and info.version:
            # The gauge is the last decode-log interval's (reset at each), beside a lifetime length: each says its
            # window.
            text += f" · {accept_rate_label(info.version)} last interval {metrics['spec_accept_rate']:.2f}"
        if speculates and self.spec is not None:
            for part in self.spec.parts():
                text += f" · {part}"
        if self.usage_by_rank:  # each DP rank has its own KV pool: one figure would hide the fullest
            text += " · token usage per DP rank " + " / ".join(f"{u:.2f}" for u in self.usage_by_rank)
        if self.started_s is not None:
            text += f" · started in {self.started_s:.0f}s"
        if self.reachable is False:
            text += " · HTTP not answering"
        if self.ranks:  # the charts draw the engine's sum; each DP rank decodes its own batch
            text += "\nper DP rank (tok/s over running): " + " · ".join(f"DP{r} {t:.1f}/{n}" for r, t, n in self.ranks)
        return text


class ServerLine(Static):
    """Two lines over the charts: the server, then the window, a pause and the overlay."""

    DEFAULT_CSS = """
    ServerLine { height: auto; color: $text-secondary; }
    ServerLine.-paused { color: $text-warning; }
    """

    facts: reactive[ServerFacts] = reactive(ServerFacts, init=False)
    paused: reactive[bool] = reactive(False, init=False)
    window_index: reactive[int] = reactive(0, init=False)
    overlay: reactive[list[RunSummary] | None] = reactive(None, init=False)

    def __init__(self, windows: tuple[str, ...], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.windows = windows  # the window labels ``window_index`` points into
        self._paused_at = (0.0, 0)  # (time, samples) when drawing paused

    def on_mount(self) -> None:
        self._show()

    def watch_facts(self) -> None:
        self._show()

    def watch_paused(self, paused: bool) -> None:
        self.set_class(paused, "-paused")
        if paused:
            self._paused_at = (time.time(), self.facts.samples)
        self._show()

    def watch_window_index(self) -> None:
        self._show()

    def watch_overlay(self) -> None:
        self._show()

    def _show(self) -> None:
        text = escape(self.facts.text()) + f"\nwindow {self.windows[self.window_index]}"
        if self.paused:
            since = time.strftime("%H:%M:%S", time.localtime(self._paused_at[0]))
            text += f" · [b]PAUSED since {since}[/], {self.facts.samples - self._paused_at[1]} new samples recorded"
        if self.overlay:
            text += " · dashed: last run of " + escape(", ".join(r.profile or r.id for r in self.overlay))
        if text != str(self.content):  # the same line again would still lay the screen out
            self.update(text)
