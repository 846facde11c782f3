"""A report's blocks (``backend.report.blocks``) rendered: as Markdown (charts as text plots in fenced blocks),
for a terminal (tables aligned as the CLI's own), or as one self-contained HTML page (an interactive plotly.js
figure carried inline, or a small static SVG, ``--charts static``, each with labelled reference lines at the
baseline and the break-even and shaded prediction intervals); the report written to a file whole or not at all,
and samples as CSV.
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
from typing import Any

from backend.errors import UsageError
from backend.history import History, Yardstick
from backend.report.blocks import Banner, Block, Bullets, Code, Heading, Para, Table
from backend.report.charts import Chart, ChartMode, html_chart, html_head, text_chart
from backend.report.document import DrafterFacts, build

# --- Markdown ---------------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    """The report as Markdown (charts as text plots in fenced blocks)."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Banner):
            out += [f"> **{b.text}**", ""]
        elif isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {item}" for item in b.items] + [""]
        elif isinstance(b, Table):
            out.append("| " + " | ".join(_md_cell(h) for h in b.headers) + " |")
            out.append("|" + "---|" * len(b.headers))
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Code):
            out += ["```sh", b.text, "```", ""]
        elif isinstance(b, Chart):
            body = "(no samples recorded)" if b.empty else text_chart(b)
            out += [f"**{b.title}**", "", "```text", body, "```", ""]
    return "\n".join(out)


# --- the terminal -----------------------------------------------------------------------------------------


def aligned(rows: list[list[str]] | list[tuple[str, ...]], right: range | tuple[int, ...] = ()) -> list[str]:
    """Rows as a terminal prints a table: each column as wide as its widest cell, two spaces apart, the columns
    in ``right`` right-aligned (numbers), the last left as is (no trailing spaces)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    last = len(widths) - 1
    return [
        "  ".join(
            cell if i == last and i not in right else cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]


def to_text(blocks: list[Block]) -> str:
    """Blocks for a terminal (`specdeck history`): tables aligned as the command's own, no Markdown syntax; charts
    as text plots."""
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading | Para | Banner):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {item}" for item in b.items] + [""]
        elif isinstance(b, Table):
            out += [*aligned([b.headers, *b.rows]), ""]
        elif isinstance(b, Code):
            out += [b.text, ""]
        elif isinstance(b, Chart):
            out += [b.title, "(no samples recorded)" if b.empty else text_chart(b), ""]
    return "\n".join(out)


# --- HTML and SVG -----------------------------------------------------------------------------------------


_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
th { background: #f3f3f3; }
pre { background: #f6f6f6; padding: 0.8em; white-space: pre-wrap; word-break: break-all; font-size: 0.85em; }
figure { margin: 1em 0; }
.banner { position: sticky; top: 0; z-index: 10; background: #fff3cd; border: 2px solid #b45309; color: #7c2d12;
          font-weight: bold; padding: 0.6em 1em; margin: 0.5em 0 1em; }
"""


def to_html(blocks: list[Block], charts: ChartMode = "interactive") -> str:
    """The report as one self-contained HTML page: charts drawn by plotly.js, which the page carries inline (no
    request leaves the file), or as small static SVGs (``charts="static"``)."""
    e = html.escape
    title = next((b.text for b in blocks if isinstance(b, Heading)), "specdeck report")
    head = html_head(charts) if any(isinstance(b, Chart) for b in blocks) else ""
    out = [f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{e(title)}</title>',
           f"<style>{_CSS}</style>", head, "</head>\n<body>"]  # fmt: skip
    n_charts = 0
    for b in blocks:
        if isinstance(b, Banner):
            out.append(f'<div class="banner">{e(b.text)}</div>')
        elif isinstance(b, Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{e(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            cells = "".join(f"<th>{e(h)}</th>" for h in b.headers)
            body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            out.append(f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(b, Code):
            out.append(f"<pre><code>{e(b.text)}</code></pre>")
        elif isinstance(b, Chart):
            out.append(f"<figure>{html_chart(b, charts, n_charts)}</figure>")
            n_charts += 1
    out.append("</body>\n</html>\n")
    return "\n".join(out)


def render(blocks: list[Block], fmt_name: str, charts: ChartMode = "interactive") -> str:
    """``md`` or ``html`` (its charts ``interactive`` or ``static``)."""
    return to_html(blocks, charts) if fmt_name == "html" else to_markdown(blocks)


def write(
    history: History,
    run_ids: list[str],
    yardstick: Yardstick,
    path: str,
    facts: DrafterFacts | None = None,
    sweep: str | None = None,
    gpu_hour_usd: float | None = None,
    charts: ChartMode = "interactive",
) -> None:
    """The report of ``run_ids`` written to ``path`` (its name says the format: .md or .html), whole or not at all:
    what `specdeck report` and the History tab's key write."""
    import os

    kind = report_format(path)
    if not kind:
        raise UsageError(f"{path}: name the file .md (Markdown) or .html (one page)")
    text = render(build(history, run_ids, yardstick, facts, sweep, gpu_hour_usd), kind, charts)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


def report_format(path: str) -> str:
    """The format an output file's name asks for: ``md`` or ``html`` (None for anything else)."""
    lower = path.lower()
    if lower.endswith((".html", ".htm")):
        return "html"
    if lower.endswith((".md", ".markdown")):
        return "md"
    return ""


def samples_csv(samples: list[dict[str, Any]]) -> str:
    """Samples as CSV (the columns of ``History.samples``)."""
    buf = io.StringIO()
    keys = [
        "t",
        "tok_s",
        "total_tok_s",
        "accept_len",
        "accept_rate",
        "accept_rate_definition",
        "cycle_ms",
        "running_req",
        "queue_req",
        "token_usage",
    ]
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    for row in samples:
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in keys})
    return buf.getvalue()
