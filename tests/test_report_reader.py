"""The report as a stakeholder reads it (issue 33), checked in a real headless Chromium: the answer first (each
drafter against the baseline at each benched concurrency, and the break-even, in the judge's words), SIMULATED on
the page and on every chart, one colour per run in every chart (read from the charts' data), idle spells as
gaps, discrete axes with ticks only where points are, a title that names what differs, the steps its launch
command states."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from backend.history import History, filter_tail
from backend.jobs import JobInfo
from backend.measure.metrics import Sample
from backend.report import document, render
from backend.report.charts import Chart
from tests.chromium import CHROMIUM, Chromium
from tests.runs import T0

pytestmark = pytest.mark.e2e

SIM = ["python", "-m", "backend.sandbox.sglang_sim", "--model-path", "/m/Kimi-K2.5", "--tp-size", "8"]
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path"]
# profile → (drafter, per-stream tok/s at 1 and 4 streams, accept length)
RUNS = {"eagle3-aq": ("aq-medai", 100.0, 80.0, 3.3), "eagle3-ours": ("ours", 60.0, 46.0, 1.95),
        "baseline": (None, 82.0, 72.0, None)}  # fmt: skip


def add_sim_run(history: History, n: int, profile: str, steps: int = 3) -> str:
    """A SIMULATED run (the sandbox's launch command, no server_info) with 40 one-stream seconds, an idle minute,
    20 four-stream seconds, and a bench at 1 and 4 streams whose 8 requests each say what they measured."""
    drafter, one, four, accept = RUNS[profile]
    argv = [*SIM, *([*SPEC, f"/d/{drafter}", "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(steps + 1)] if drafter else [])]  # fmt: skip
    args = {"profile": profile, "drafter": drafter, "algorithm": "EAGLE3" if drafter else None, "port": 30000}
    job = JobInfo(f"serve-{n}", state="done", started=T0, ended=T0 + 200, args=args, argv=tuple(argv))
    run = history.upsert_run("sandbox", job)
    samples = [Sample(T0 + 1 + i, "decode", gen_tps=one + i % 3 - 1, accept_len=accept, running_req=1)
               for i in range(40)]  # fmt: skip
    samples += [Sample(T0 + 100 + i, "decode", gen_tps=4 * (four + i % 3 - 1), accept_len=accept, running_req=4)
                for i in range(20)]  # fmt: skip
    assert history.import_chunk(run, 0, 1000, samples, filter_tail([], samples))
    for streams, tok in ((1, one), (4, four)):
        cycle = 1000 * (accept or 1.0) / tok
        requests = [{"decode_tok_s": tok + (i % 3 - 1), "accept_len": accept} for i in range(8)]
        result = {"server_job": job.id, "tok_s": tok, "concurrency": streams, "cycle_ms": cycle,
                  "accept_len": accept, "speculative": bool(drafter), "per_request": requests,
                  "ended": T0 + 300 + streams}  # fmt: skip
        history.record_bench("sandbox", JobInfo(f"bench-{n}-{streams}", state="done"), result)
    return run


def report_html(tmp_path, ids: list[str]) -> str:
    with History.open() as history:
        yardstick = history.yardstick(82.0, 30.0)
        html = render.to_html(document.build(history, ids, yardstick, None))
    path = tmp_path / "report.html"
    path.write_text(html)
    return path.as_uri()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install -y chromium)")
@pytest.mark.slow
async def test_a_stakeholder_reads_the_answer_first_in_chromium(tmp_path):
    with History.open() as history:
        ids = [add_sim_run(history, n, p) for n, p in enumerate(RUNS)]
    url = report_html(tmp_path, ids)
    async with Chromium(tmp_path / "chromium") as browser:
        await browser.call("Page.navigate", url=url)

        async def until(expression: str, what: str) -> object:
            deadline = time.monotonic() + 60
            while not (value := await browser.evaluate(expression)):
                assert time.monotonic() < deadline, f"the report never showed {what}"
                await asyncio.sleep(0.1)  # polling another process (the browser)
            return value

        # Parsed to its end (the Runs table comes after the last chart's script) and every chart drawn.
        await until(
            "document.readyState === 'complete' && document.querySelectorAll('.chart .main-svg').length >= 8",
            "its charts drawn",
        )
        text = await browser.evaluate("document.body.innerText")
        # The answer first: under the title and the SIMULATED banner, before any table of run ids.
        answer = text.index("The answer")
        assert text.index("SIMULATED: every figure") < answer < text.index("Comparison")
        lines = text[answer:].splitlines()
        aq = next(line for line in lines if line.startswith("eagle3-aq [aq-medai]:"))
        ours = next(line for line in lines if line.startswith("eagle3-ours [ours]:"))
        assert aq.startswith("eagle3-aq [aq-medai]: faster than the baseline at 1, 4 stream(s); clears the break-even")
        assert "+22.0% vs 82.0, the baseline's bench at 1 stream(s); beats it, 95% " in aq
        assert "+11.1% vs 72.0, the baseline's bench at 4 stream(s)" in aq  # like with like at 4 streams
        assert ours.startswith("eagle3-ours [ours]: slower than the baseline at 1, 4 stream(s); falls short of the")
        assert "accept 1.95 vs break-even 2.6" in ours and "(not met, 95% " in ours
        # The steps its launch command states (the run has no server_info): not "—".
        assert "3/1/4" in text[text.rindex("Runs") :]
        charts = json.loads(
            await browser.evaluate(
                "JSON.stringify([...document.querySelectorAll('.chart')].map(c => ({title: c.layout.title.text, "
                "x: c.layout.xaxis, traces: c.data.filter(t => t.line && t.line.color).map(t => "
                "({name: t.name, color: t.line.color, y: t.y}))})))"
            )
        )
    assert all(c["title"].endswith("— SIMULATED") for c in charts), [c["title"] for c in charts]
    colors: dict[str, set[str]] = {}
    for chart in charts:
        for trace in chart["traces"]:
            run = next((p for p in RUNS if trace["name"].startswith(p)), trace["name"])
            colors.setdefault(run, set()).add(trace["color"])
    assert all(len(c) == 1 for c in colors.values()), colors  # one colour per run, in every chart
    assert len({next(iter(colors[p])) for p in RUNS}) == 3  # three runs, three colours
    per_stream = next(c for c in charts if c["title"].startswith("Decode throughput per stream at 1 stream"))
    for trace in per_stream["traces"]:  # its one-stream seconds only: the 4-stream bench never dips under it
        values = [y for y in trace["y"] if y is not None]
        assert min(values) > 0.9 * RUNS[trace["name"].split()[0]][1], trace["name"]
    accept = next(c for c in charts if c["title"].startswith("Accept length"))
    assert all(None in t["y"] for t in accept["traces"])  # the idle minute is a gap, not a line across it
    concurrency = next(c for c in charts if c["title"].startswith("Decode throughput per stream against"))
    assert concurrency["x"]["tickvals"] == [1, 4]  # a discrete axis: no 2.5 streams


def test_the_title_names_what_differs():
    """Points of one sweep: named once, with the steps that tell them apart (not "A vs A vs A")."""
    with History.open() as history:
        ids = [add_sim_run(history, n, "eagle3-aq", steps) for n, steps in ((1, 1), (2, 2), (3, 4))]
        blocks = document.build(history, ids, history.yardstick(82.0, 30.0), None)
    title = blocks[0].text
    assert title == "SIMULATED · specdeck report: eagle3-aq [aq-medai]: 1/1/2, 2/1/3, 4/1/5", title
    legends = {label for b in blocks if isinstance(b, Chart) for label, _, _ in b.series}
    assert {"eagle3-aq [aq-medai] steps 1/1/2", "eagle3-aq [aq-medai] steps 4/1/5"} <= legends
    markdown = render.to_markdown(blocks)
    assert markdown.startswith("# SIMULATED") and "> **SIMULATED: every figure" in markdown
