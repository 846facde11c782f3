"""The Live tab's latency panel: time to first token and inter-token latency, p50 and p95, over the window.

The figures are the server's own histograms (``backend.measure.latency``): scraped once a second, merged across
ranks bucket by bucket, windowed by difference and read as Prometheus's histogram_quantile reads them, so a
figure past the last bucket says ``>`` its bound instead of inventing a value.
"""

from __future__ import annotations

from textual.widgets import Static

from backend.measure.latency import Figures

ROWS = (("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms"))


def render_latency(figures: dict[str, Figures], window: str, histograms: bool | None) -> str:
    """The panel's text (markup): a row per quantity, or what keeps it empty."""
    head = f"[b]{'latency ' + window:<19}{'p50':>7} {'p95':>7}[/]"
    if histograms is False:
        return head + "\n[$text-muted]no latency histograms: launch the server with --enable-metrics[/]"
    if not figures or all(f.count == 0 for f in figures.values()):
        what = "waiting for the first scrape" if histograms is None else "no requests finished in the window"
        return head + f"\n[$text-muted]{what}[/]"
    lines = [head]
    for key, name in ROWS:
        fig = figures.get(key)
        if fig is None:
            continue
        lines.append(f"{name:<19}{fig.cell('p50'):>7} {fig.cell('p95'):>7}")
    ttft, itl = figures.get("ttft_ms"), figures.get("itl_ms")
    counts = []
    if ttft is not None:
        counts.append(f"{ttft.count:,.0f} first tokens")
    if itl is not None:
        counts.append(f"{itl.count:,.0f} gaps")
    lines.append(f"[$text-muted]histograms: {', '.join(counts)}[/]")
    return "\n".join(lines)


class LatencyPanel(Static):
    """Renders the latency figures of the Live window; ``show`` redraws only when the text changes."""

    def __init__(self, *, id: str | None = None) -> None:
        self.text = render_latency({}, "", None)
        super().__init__(self.text, id=id)

    def show(self, figures: dict[str, Figures], window: str, histograms: bool | None) -> None:
        text = render_latency(figures, window, histograms)
        if text != self.text:
            self.text = text
            self.update(text)
