"""Reports: recorded runs side by side, as Markdown or self-contained HTML to paste into a document.

A report is a list of blocks (``backend.report.blocks``) built here once from the history: the answer first (each
drafter against the baseline and the break-even), then the sweep, the comparison, the charts, throughput against
concurrency, latency and cost, where a cycle's time goes, acceptance, prompts, adaptive tiers, the drafters,
training checkpoints, the launch commands and the runs; ``backend.report.render`` renders and writes it. The
drafters' diff summary comes from the host (``checkpoint.inspect``) when it can be reached; otherwise the report
says why it is missing.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from backend.agent.host.shared import units
from backend.agent.host.shared.acceptance import per_position
from backend.agent.host.shared.units import human_bytes
from backend.drafters import checkpoint_diff, checkpoints
from backend.errors import SpecdeckError
from backend.history import History, RunSummary, Yardstick
from backend.measure import judge
from backend.measure.cost import Cost, drafter_sentence, gpus_of, per_million
from backend.report.blocks import Banner, Block, Bullets, Code, Heading, Para, Table
from backend.report.cells import (
    VS_LEGEND,
    bench_cell,
    distinct_labels,
    fmt,
    report_title,
    run_cells,
    run_label,
)
from backend.report.charts import PALETTE, Band, Chart
from backend.train.predict import gap_line

if TYPE_CHECKING:
    from backend.connection import Connection
    from backend.history.summary import BenchLevel, Rate


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "—"


def comparison_table(runs: list[RunSummary], yardstick: Yardstick) -> Table:
    """Concurrency, per-stream and aggregate tok/s, accept length, cycle ms, vs baseline and vs break-even, one row
    per run."""
    headers = ["run", "profile", "drafter", "samples", "streams", "tok/s per stream", "total tok/s",
               "accept length", "cycle ms", "vs baseline", f"vs break-even {yardstick.break_even:.2f}",
               "bench tok/s per stream @streams"]  # fmt: skip
    rows = []
    columns = ("profile", "drafter", "samples", "streams", "tok_s", "total_tok_s", "accept", "cycle_ms", "vs_baseline",
               "break_even")  # fmt: skip
    base, _ = judge.baseline_curve(yardstick, runs)
    swept = base and any(len(r.curve) > 1 for r in runs)
    if swept:
        headers.append("bench below baseline from")
    for run in runs:
        cells = run_cells(run, yardstick)
        name = run.job_id + (" ★" if run.is_baseline else "")
        rows.append([name, *cells.pick(columns), bench_cell(run)] + ([crossover_cell(run, base)] if swept else []))
    return Table(headers, rows)


def crossover_cell(run: RunSummary, base: dict[int, Rate]) -> str:
    """The concurrency at which a benched drafter falls below the baseline curve (past the floor and both
    benches' noise); ``none to N`` when it does not up to the highest level both were benched at, with the levels
    no verdict was reached at, within noise or too few samples (``none to 8 (no verdict at 8)``); ``—`` without
    speculation or shared levels."""
    curve = judge.curve_verdict(base, {p.streams: p.rate for p in run.curve})
    if not run.speculative or not curve.judged:
        return "—"
    if curve.falls_at is not None:
        return str(curve.falls_at)
    open_ = [c for c, word in curve.words.items() if word in ("within noise", "not enough samples")]
    return f"none to {curve.judged[-1]}" + (f" (no verdict at {judge.levels_text(open_)})" if open_ else "")


def level_series(history: History, run: RunSummary, streams: int) -> tuple[list[float], list[float]]:
    """(seconds since the run's first sample, per-stream tok/s) of the seconds the run ran ``streams`` requests:
    a per-stream line of one concurrency, never a 4-stream bench's seconds under a single-stream figure."""
    rows = history.samples(run.id)
    if not rows:
        return [], []
    t0 = rows[0]["t"]
    at = [r for r in rows if r["tok_s"] is not None and round(r["running_req"] or 0) == streams]
    return [float(r["t"] - t0) for r in at], [float(r["tok_s"]) for r in at]


def charts(history: History, runs: list[RunSummary], yardstick: Yardstick) -> list[Chart]:
    """tok/s per stream against the baseline (each run at the concurrency it is judged at) and accept length
    against the break-even, every run overlaid."""
    levels = {r.id: (judge.run_level(r, yardstick) or None) for r in runs}
    streams = {i: lv.streams if lv else 1 for i, lv in levels.items()}
    one = set(streams.values()) == {1}
    tok = [
        (run_label(r) + ("" if one else f" @{streams[r.id]}"), *level_series(history, r, streams[r.id])) for r in runs
    ]
    acc = [(run_label(r), *history.series(r.id, "accept_len")) for r in runs]
    title = (
        "Decode throughput per stream at 1 stream (tok/s)"
        if one
        else ("Decode throughput per stream at each run's judged concurrency (tok/s)")
    )
    return [
        Chart(
            title,
            "tok/s per stream",
            tok,
            [(yardstick.baseline_tok_s, f"baseline {yardstick.baseline_tok_s:.1f} tok/s (1 stream)")],
        ),
        Chart(
            "Accept length per decode-log interval",  # each point an interval's mean (the log's); a run's: totals
            "accept length",
            acc,
            [(yardstick.break_even, judge.break_even_text(yardstick.break_even, yardstick.cycle_ms, False))],
        ),
    ]


def crossover_text(run: RunSummary, base: dict[int, Rate], source: str) -> str:
    """Where ``run`` falls below the baseline curve, in one sentence (``judge.Curve.sentence``)."""
    curve = judge.curve_verdict(base, {p.streams: p.rate for p in run.curve})
    return curve.sentence(run_label(run), source) + "."


def _curve_series(run: RunSummary, key: str) -> tuple[str, list[float], list[float]]:
    points = [p for p in run.curve if getattr(p, key) is not None]
    return run_label(run), [float(p.streams) for p in points], [getattr(p, key) for p in points]


def concurrency_blocks(runs: list[RunSummary], yardstick: Yardstick) -> list[Block]:
    """The bench curves (per-stream and aggregate tok/s against concurrency) and where speculation stops paying."""
    curved = [r for r in runs if len(r.curve) > 1]
    if not curved:
        return []
    base, source = judge.baseline_curve(yardstick, runs)
    levels = sorted({p.streams for r in curved for p in r.curve} | base.keys())
    rows = []
    for run in curved:
        at = {p.streams: p for p in run.curve}
        cells = [
            f"{fmt(at[c].tok_s)} / {fmt(at[c].total_tok_s, 0)}{_itl_cell(at[c])}" if c in at else "—" for c in levels
        ]
        rows.append(
            [run.job_id + (" ★" if run.is_baseline else ""), run.profile or "—", *cells, crossover_cell(run, base)]
        )
    table = Table(["run", "profile", *(f"{c} stream(s)" for c in levels), "below baseline from"], rows)
    per_stream = [_curve_series(r, "tok_s") for r in curved]
    total = [_curve_series(r, "total_tok_s") for r in curved]
    if base and not any(r.is_baseline for r in curved) and yardstick.bench_by_streams:
        per_stream.append(
            (f"baseline ({source})", [float(c) for c in sorted(base)], [base[c].tok_s for c in sorted(base)])
        )
    blocks: list[Block] = [
        Heading("Throughput against concurrency"),
        Para(
            "Benches at several concurrency levels (`specdeck bench --concurrency 1,2,4,8`), newest per level: "
            "tok/s per stream / in all · inter-token latency p50/p95 ms. Speculation pays while a drafter's "
            "per-stream tok/s stays over the baseline's at the same concurrency; verify cost grows with the batch, "
            "so the gain shrinks with load (and inter-token latency rises with it)."
        ),
        table,
        Chart("Decode throughput per stream against concurrency", "tok/s per stream", per_stream,
              x_label="concurrent streams", discrete=True),
        Chart("Decode throughput in all against concurrency", "tok/s in all", total, x_label="concurrent streams",
              discrete=True),
        *itl_charts(curved),
    ]  # fmt: skip
    speculative = [r for r in curved if r.speculative]
    if speculative:
        blocks.append(Bullets([crossover_text(r, base, source) for r in speculative]))
    return blocks


def _pct(latency: dict[str, Any] | None, key: str, q: str) -> float | None:
    return ((latency or {}).get(key) or {}).get(q)


def _quantile_cell(latency: dict[str, Any] | None, key: str, q: str, digits: int = 0) -> str:
    """One percentile (ms) from a latency dict; a histogram's figure past its last bucket as ``>N``."""
    value = _pct(latency, key, q)
    over = q in ((latency or {}).get(key) or {}).get("over_last_bucket", ())
    return fmt(value, digits) if not over else f">{value:.0f}"


def _p50_p95(latency: dict[str, Any] | None, key: str, digits: int = 0) -> str:
    """``212 / 380`` (ms) from a latency dict; a histogram's figure past its last bucket as ``>N``."""
    return " / ".join(_quantile_cell(latency, key, q, digits) for q in ("p50", "p95"))


def latency_cells(run: RunSummary) -> tuple[str, str]:
    """The run's inter-token p50 / p95 and TTFT p95 (ms) as the History tab's detail shows them: its newest
    bench's (its own requests, what was benched); else its server's histograms since the server started, marked
    ``srv`` (SGLang's warm-up request is among them: its TTFT lifts the p95 of a short run); dashes for neither."""
    bench = ((run.bench or {}).get("result") or {}).get("latency")
    if bench:
        return _p50_p95(bench, "itl_ms", 1), _quantile_cell(bench, "ttft_ms", "p95")
    if not run.latency:
        return "—", "—"
    return _p50_p95(run.latency, "itl_ms", 1) + " srv", _quantile_cell(run.latency, "ttft_ms", "p95") + " srv"


def cost_curve(run: RunSummary, gpu_hour_usd: float | None) -> dict[int, Cost]:
    """A run's cost per million output tokens at each benched concurrency (its total tok/s there)."""
    gpus = gpus_of({}, run.argv)
    out = {}
    for point in run.curve:
        cost = per_million(point.total_tok_s, gpus, gpu_hour_usd)
        if cost is not None:
            out[point.streams] = cost
    return out


def _itl_cell(point: BenchLevel) -> str:
    """`` · 10.0/33.0 ms``: a bench level's inter-token latency p50/p95; nothing for benches before it was kept."""
    p50, p95 = point.itl_ms("p50"), point.itl_ms("p95")
    return "" if p50 is None or p95 is None else f" · {p50:.1f}/{p95:.1f} ms"


def itl_charts(curved: list[RunSummary]) -> list[Chart]:
    """Inter-token latency p50 and p95 against concurrency, per benched curve (none before latency was kept)."""
    series = []
    for run in curved:
        for q in ("p50", "p95"):
            points = [(float(p.streams), ms) for p in run.curve if (ms := p.itl_ms(q)) is not None]
            if points:
                series.append((f"{run_label(run)} {q}", [x for x, _ in points], [y for _, y in points]))
    if not series:
        return []
    return [
        Chart("Inter-token latency against concurrency", "ms per token", series, x_label="concurrent streams",
              discrete=True)
    ]  # fmt: skip


def latency_blocks(runs: list[RunSummary], baseline: RunSummary | None, gpu_hour_usd: float | None) -> list[Block]:
    """Latency and cost: per-request percentiles of each bench level (TTFT, inter-token, end-to-end), the server's
    own histograms as last read, dollars (or GPU-seconds) per million output tokens, and a sentence per drafter
    against the baseline (the inter-token curve against concurrency sits with the tok/s curves)."""
    rows = []
    for run in runs:
        gpus = gpus_of({}, run.argv)
        points = [(str(p.streams), p.latency, p.total_tok_s) for p in run.curve]
        if not points and run.bench:
            bench = run.bench
            points = [
                (str(bench.get("concurrency") or 1), bench["result"].get("latency"), bench["result"].get("total_tok_s"))
            ]
        for streams, latency, total in points:
            cost = per_million(total, gpus, gpu_hour_usd)
            rows.append([run.job_id, run_label(run), f"bench @{streams}", _p50_p95(latency, "ttft_ms"),
                         _p50_p95(latency, "itl_ms", 1), fmt(_pct(latency, "e2e_ms", "p95"), 0),
                         "—" if cost is None else cost.text().replace(" per million tokens", "")])  # fmt: skip
        if run.latency:
            cost = per_million(run.total_tok_s, gpus, gpu_hour_usd)
            rows.append([run.job_id, run_label(run), "server histograms", _p50_p95(run.latency, "ttft_ms"),
                         _p50_p95(run.latency, "itl_ms", 1), fmt(_pct(run.latency, "e2e_ms", "p95"), 0),
                         "—" if cost is None else cost.text().replace(" per million tokens", "")])  # fmt: skip
    if not rows:
        return []
    unit = "$ per million output tokens" if gpu_hour_usd else "GPU-s per million output tokens"
    price = (
        f"at ${gpu_hour_usd:g} per GPU-hour ([reference] gpu_hour_usd)"
        if gpu_hour_usd
        else "in GPU-seconds (set [reference] gpu_hour_usd for dollars)"
    )
    blocks: list[Block] = [
        Heading("Latency and cost"),
        Para(
            "Bench levels: percentiles over the requests (TTFT, end-to-end) and over every token gap (inter-token; "
            "a chunk of n tokens after t counts n gaps of t/n, as SGLang's histogram does), measured per streaming "
            "request on the host. Server histograms: SGLang's own, merged across ranks bucket by bucket and read as "
            "Prometheus's histogram_quantile, since the server started, as last read by a live view or a bench; "
            f">N lies past the last bucket. Cost {price}: the server's GPUs (tp × nodes) for the time a million "
            "output tokens take at the level's total tok/s (the run's mean for its server histograms row); it "
            "assumes the GPUs do nothing else and counts output tokens only."
        ),
        Table(["run", "profile", "measured", "TTFT p50 / p95 ms", "ITL p50 / p95 ms", "e2e p95 ms", unit], rows),
    ]
    base = (
        baseline
        if baseline is not None and baseline.curve
        else next((r for r in runs if not r.speculative and r.curve), None)
    )
    sentences = []
    for run in runs:
        if run.speculative and run.drafter and base is not None and run.id != base.id:
            sentence = drafter_sentence(run.drafter, run.algorithm or "speculation", cost_curve(run, gpu_hour_usd),
                                        cost_curve(base, gpu_hour_usd))  # fmt: skip
            if sentence:
                sentences.append(sentence[0].upper() + sentence[1:])
    if sentences:
        blocks.append(Bullets(sentences))
    return blocks


@dataclass
class DrafterFacts:
    """What the host told about the runs' drafters: inspect dicts by path, the target config, or why not."""

    inspected: dict[str, dict[str, Any]] = field(default_factory=dict)
    target: dict[str, Any] | None = None
    note: str | None = None


async def read_drafters(conn: Connection, runs: list[RunSummary]) -> DrafterFacts:
    """Inspect every drafter folder of ``runs`` on the host (headers only) and read the target's config."""
    facts = DrafterFacts()
    problems = []
    for path in dict.fromkeys(r.drafter_path for r in runs if r.drafter_path):
        try:
            facts.inspected[path] = await conn.call("checkpoint.inspect", path=path)
        except SpecdeckError as exc:
            problems.append(f"{path}: {exc}")
    model = next((_flag(r.argv, "--model-path") for r in runs if _flag(r.argv, "--model-path")), None)
    if model:
        try:
            got = await conn.call("fs.read", path=f"{model.rstrip('/')}/config.json", text=True)
            facts.target = json.loads(got["text"])
        except (SpecdeckError, ValueError) as exc:
            problems.append(f"the target's config.json ({model}): {exc}")
    if problems:
        facts.note = "; ".join(problems)
    return facts


def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def drafter_blocks(runs: list[RunSummary], facts: DrafterFacts | None) -> list[Block]:
    """The drafters' identity, their verdicts against the target and how the first differs from the others."""
    drafters: dict[str, RunSummary] = {}
    for run in runs:
        if run.drafter_path:
            drafters.setdefault(run.drafter_path, run)
    blocks: list[Block] = [Heading("Drafters")]
    if not drafters:
        return [*blocks, Para("No drafter: these runs decode without speculation.")]
    if facts is None:
        blocks.append(Para("Diff summary not included: the host was not asked (--no-inspect)."))
    elif facts.note:
        blocks.append(Para(f"Diff summary incomplete: the host could not be read ({facts.note})."))
    inspected = (facts.inspected if facts else {}) or {}
    rows = []
    for path, run in drafters.items():
        info = inspected.get(path)
        verdict = checkpoints.verdict(info, facts.target) if info and facts and facts.target else None
        size = run.drafter_size or (info or {}).get("total_bytes")
        rows.append(
            [
                run.drafter or "—",
                path,
                checkpoint_diff.format_params(info["total_params"]) if info else "—",
                human_bytes(size) if size else "—",
                (run.drafter_sha256 or "")[:16] or "not verified",
                "—" if verdict is None else checkpoints.verdict_word(verdict),
            ]
        )
    blocks.append(Table(["drafter", "path", "params", "size", "sha256", "vs target"], rows))
    paths = [p for p in drafters if p in inspected]
    for other in paths[1:]:
        a, b = drafters[paths[0]], drafters[other]
        d = checkpoint_diff.diff(inspected[paths[0]], inspected[other], facts.target if facts else None)
        counts: dict[str, int] = {}
        for row in d.tensors:
            counts[row.status] = counts.get(row.status, 0) + 1
        changed = [r for r in d.config if r.status != "same"]
        items = [
            "tensors: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
            f"config: {len(changed)} of {len(d.config)} keys differ"
            + (": " + ", ".join(f"{r.key} ({r.a} → {r.b})" for r in changed[:8]) if changed else ""),
            "verdict: " + d.verdict.word,
            *d.verdict.problems,
        ]
        blocks += [Heading(f"{a.drafter or paths[0]} vs {b.drafter or other}", 3), Bullets(items)]
    return blocks


def build(
    history: History,
    run_ids: list[str],
    yardstick: Yardstick,
    facts: DrafterFacts | None = None,
    sweep: str | None = None,
    gpu_hour_usd: float | None = None,
) -> list[Block]:
    """The report of ``run_ids`` (in that order) as blocks, with sweep ``sweep``'s table and charts first; costs in
    dollars at ``gpu_hour_usd`` per GPU-hour, else GPU-seconds."""
    runs = distinct_labels([history.run(i) for i in run_ids])
    baseline = history.baseline_run()
    swept = history.sweep_runs(sweep) if sweep else []
    simulated = any(r.simulated for r in [*runs, *swept])
    blocks: list[Block] = [
        Heading(("SIMULATED · " if simulated else "") + "specdeck report: " + report_title(runs), 1),
        *([Banner(SIMULATED_TEXT)] if simulated else []),
        *headline_blocks(history, runs, yardstick),
        Para(
            f"Generated {_when(time.time())}. Baseline {yardstick.baseline_tok_s:.1f} tok/s ({yardstick.source}), "
            f"configured verify cycle {yardstick.cycle_ms:g} ms, break-even accept length {yardstick.break_even:.2f} "
            "(cycle × baseline). Means are over the runs' decode log lines while requests ran, one point per "
            "second; per stream is SGLang's gen throughput divided by the running requests."
        ),
        *(sweep_blocks(history.sweep_runs(sweep), yardstick, sweep) if sweep else []),
        Heading("Comparison"),
        comparison_table(runs, yardstick),
        Para(VS_LEGEND),
        Heading("Charts"),
        *charts(history, runs, yardstick),
        *concurrency_blocks(runs, yardstick),
        *latency_blocks(runs, baseline, gpu_hour_usd),
        *anatomy_blocks(runs, yardstick.baseline_tok_s),
        *acceptance_blocks(runs),
        *prompt_blocks(runs),
        *tier_blocks(runs),
        *drafter_blocks(runs, facts),
        *training_blocks(runs),
        Heading("Launch commands"),
    ]
    for run in runs:
        blocks += [Para(f"{run.job_id} ({run_label(run)}):"), Code(shlex.join(run.argv) if run.argv else "—")]
    blocks += [Heading("Runs"), runs_table(runs)]
    return finish_charts(blocks, runs, simulated)


SPEED_WORDS = {"beats": "faster than the baseline", "below": "slower than the baseline", "within noise":
               "not told apart from the baseline",
               judge.LEVEL: f"level with the baseline ({judge.floor_text()})"}  # fmt: skip
BREAK_EVEN_WORDS = {"met": "clears the break-even", "not met": "falls short of the break-even",
                    "within noise": "not told apart from the break-even",
                    judge.LEVEL: f"level with the break-even ({judge.floor_text()})"}  # fmt: skip


def verdict_summary(words: list[tuple[int, str, str]]) -> str:
    """The judge's words over a drafter's benches in one line: ``faster than the baseline at 1, 4 streams; clears
    the break-even at 1, 4 streams``; a verdict the judge could not reach (too few requests) is not said."""
    out = []
    columns: tuple[tuple[Literal[1, 2], dict[str, str]], ...] = ((1, SPEED_WORDS), (2, BREAK_EVEN_WORDS))
    for index, names in columns:
        by_word: dict[str, list[int]] = {}
        for entry in words:
            if entry[index] in names:
                by_word.setdefault(entry[index], []).append(entry[0])
        out += [f"{names[w]} at {judge.levels_text(levels)} stream(s)" for w, levels in by_word.items()]
    return "; ".join(out)


SIMULATED_TEXT = (
    "SIMULATED: every figure here comes from specdeck's SGLang simulator (the sandbox), not from GPUs. It speaks "
    "SGLang's flags, logs and metrics with the operator's timing model; it shows what the tool does, not what "
    "a drafter would do on Kimi-K2.5."
)
GRAY = "#7f7f7f"


def run_colors(runs: list[RunSummary]) -> dict[str, str]:
    """One colour per run, in the order the report lists them, for every chart it draws."""
    return {run_label(r): PALETTE[i % len(PALETTE)] for i, r in enumerate(runs)}


def finish_charts(blocks: list[Block], runs: list[RunSummary], simulated: bool) -> list[Block]:
    """Every chart of the report with its runs' colours (a series named after a run, or after a run and what
    it shows of it: ``@4``, ``p95``) and, where any run came from the simulator, SIMULATED in its title."""
    from dataclasses import replace

    colors = run_colors(runs)
    out: list[Block] = []
    for block in blocks:
        if isinstance(block, Chart):
            named: dict[str, str] = {}
            for label, _, _ in block.series:
                owner = next((name for name in colors if label == name or label.startswith(name + " ")), None)
                if owner is not None:
                    named[label] = colors[owner]
                elif label.startswith("baseline"):
                    named[label] = GRAY  # a baseline not among the runs: never a run's colour
            title = block.title + (" — SIMULATED" if simulated else "")
            block = replace(block, colors={**named, **block.colors}, title=title)
        out.append(block)
    return out


def headline_blocks(history: History, runs: list[RunSummary], yardstick: Yardstick) -> list[Block]:
    """The answer first: for each drafter, its per-stream tok/s against the baseline at each concurrency it was
    benched at (like with like, the change's 95% interval over both benches' requests) and its accept length against
    the break-even of its own cycle; a run with no bench, its log figures. Every verdict is the judge's
    (``backend.measure.judge``): met / beats only where the interval clears the line."""
    from dataclasses import replace

    speculative = [r for r in runs if r.speculative]
    if not speculative:
        return []
    base, source = judge.baseline_curve(yardstick, runs)
    # The baseline's benches judge the drafters' benches at the same concurrency: the marked baseline's, else a
    # run of these without speculation (the one a reader sees beside them).
    judged_by = (
        yardstick
        if yardstick.bench_by_streams or not base
        else replace(yardstick, bench_by_streams={c: r.tok_s for c, r in base.items()}, bench_rates=base)
    )
    items = []
    for run in speculative:
        parts: list[str] = []
        words: list[tuple[int, str, str]] = []  # (streams, speed word, break-even word) of each bench
        newest: dict[int, dict[str, Any]] = {}
        for bench in history.benches(run.id):  # newest first
            streams = int(bench.get("concurrency") or 1)
            if bench.get("tok_s") and streams not in newest:
                newest[streams] = bench["result"]
        for streams in sorted(newest):
            said = judge.bench(newest[streams], judged_by, run.id)
            words.append((streams, said.speed.word, said.accept.word if said.break_even is not None else ""))
            accept = newest[streams].get("accept_len")
            accept_text = f"accept {accept:.2f} {said.accept_text()}".rstrip() if accept else ""
            figure = f"{newest[streams]['tok_s']:.1f} tok/s per stream"
            parts.append(
                f"at {streams} stream(s) {figure}, {said.speed_text()}" + (f"; {accept_text}" if accept_text else "")
            )
        if not parts:  # no bench: the run's log figures, judged the same way
            versus = judge.run_versus(run, yardstick)
            be = judge.run_break_even(run, yardstick)
            parts.append(
                f"{judge.run_figure(run, yardstick)} tok/s per stream (its log, no bench), "
                + ("—" if versus is None else versus.cell())
                + ("" if be is None else f"; break-even {be.line:.2f} {be.cell()}")
            )
        curve = judge.run_curve(run, judged_by, runs)
        if curve is not None and curve.unjudged:
            parts.append(curve.missing_text())
        summary = verdict_summary(words)
        details = "; ".join(parts)
        items.append(
            f"{run_label(run)}: " + (f"{summary}. " if summary else "") + details[:1].upper() + details[1:] + "."
        )
    where = (
        f"the baseline: {source}"
        if base
        else f"the baseline: {yardstick.baseline_tok_s:.1f} tok/s ({yardstick.source})"
    )
    how = (
        f"Per drafter, like with like ({where}); 95% intervals over each bench's requests, and a change against the "
        "baseline's bench over both benches' requests."
    )
    return [Heading("The answer"), Para(how), Bullets(items)]


def tier_blocks(runs: list[RunSummary]) -> list[Block]:
    """Adaptive runs: the tiers SGLang held, each with its share of the log time, tok/s and accept length."""
    items = []
    for run in runs:
        text = run.tiers_text()
        if text is None:
            continue
        per = "; ".join(
            f"{t['steps']} steps: {fmt(t['tok_s'])} tok/s per stream, accept length {fmt(t['accept_len'], 2)}"
            for t in run.tiers
        )
        items.append(f"{run_label(run)}: {text} ({per})")
    if not items:
        return []
    return [Heading("Adaptive step counts (SGLang's --speculative-adaptive)"), Bullets(items)]


def anatomy_blocks(runs: list[RunSummary], baseline_tok_s: float) -> list[Block]:
    """Where each profiled run's cycle went (its newest `specdeck profile`): the stage table, the bar, what it
    means with its sources, and what to know about the trace."""
    from backend.measure import anatomy

    blocks: list[Block] = []
    for run in runs:
        if not run.anatomy:
            continue
        a = anatomy.CycleAnatomy.from_json(run.anatomy)
        found = anatomy.findings(a, baseline_tok_s, run.version)
        blocks += [
            Para(f"{run_label(run)}: {anatomy.summary_line(a)}."),
            Table(list(anatomy.headers(a)), [list(r) for r in anatomy.rows(a)]),
            Code("\n".join(anatomy.bar_text(a))),
            Bullets(
                [f.text + (f" ({f.source})" if f.source else "") for f in found] + [*a.notes, anatomy.trace_line(a)]
            ),
        ]
    return [Heading("Where a cycle's time goes (SGLang's own profiler)"), *blocks] if blocks else []


def training_blocks(runs: list[RunSummary]) -> list[Block]:
    """Runs that served a training checkpoint: its prediction before the restart beside what was measured."""
    lines = [line for line in map(gap_line, runs) if line]
    if not lines:
        return []
    return [Heading("Training checkpoints: predicted before the restart, then measured"), Bullets(lines)]


def acceptance_blocks(runs: list[RunSummary]) -> list[Block]:
    """Each run's acceptance histogram (bars) and per-position acceptance, from its newest bench."""
    from backend.tune.advisor import histogram_of

    blocks: list[Block] = []
    curves: list[tuple[str, list[float], list[float]]] = []
    for run in runs:
        histogram = histogram_of(run)
        if histogram is None:
            continue
        measured = [(float(i), a) for i, a in enumerate(per_position(histogram), 1) if a is not None]
        curves.append((run_label(run), [x for x, _ in measured], [a for _, a in measured]))
        n = sum(histogram)
        top = max(histogram)
        rates = per_position(histogram)
        blocks += [
            Heading(f"Acceptance per position: {run.drafter or run.drafter_path} ({run.job_id})", 3),
            Table(
                ["drafts accepted", "verifies", "share", ""],
                [[str(k), str(h), f"{h / n:.0%}", "█" * round(30 * h / top)] for k, h in enumerate(histogram)],
            ),
            Table(
                ["position", "a_i (accepted given the one before was)"],
                [[str(i), fmt(a, 3)] for i, a in enumerate(rates, 1)],
            ),
        ]
    if not blocks:
        return []
    chart = Chart("acceptance per draft position", "a_i", curves, x_label="draft position", discrete=True)
    return [Heading("Acceptance"), chart, *blocks]


def prompt_blocks(runs: list[RunSummary]) -> list[Block]:
    """Each run's newest bench: its prompts (through the chat template or raw), accept length and tok/s per
    domain, the requests that looped and the collapse episodes it went through (issue 32)."""
    from backend.measure.bench import bench_notes, domain_rows

    notes, rows = [], []
    for run in runs:
        result = (run.bench or {}).get("result") or {}
        if not result.get("prompt_sets") and not result.get("domains"):
            continue  # a bench from before prompts were recorded
        notes += [f"{run.job_id} ({run_label(run)}): {line}" for line in bench_notes(result)]
        rows += [[run.job_id, run.profile or "—", *row] for row in domain_rows(result)]
    if not notes:
        return []
    table = Table(["run", "profile", "domain", "requests", "accept length", "tok/s"], rows)
    return [Heading("Prompts and domains"), Bullets(notes), *([table] if rows else [])]


SWEEP_COLUMNS = ["steps", "topk", "draft tokens", "tok/s", "accept length", "cycle ms", "vs baseline", "outcome", "run"]


def sweep_blocks(runs: list[RunSummary], yardstick: Yardstick, sweep: str) -> list[Block]:
    """A sweep's points (one run each) as a table, and tok/s and accept length against draft steps: measured
    points, the advisor's predicted curve with its interval, the baseline and the break-even lines."""
    from backend.tune import advisor

    points = sorted(((advisor.run_steps(r) or 0, r) for r in runs), key=lambda p: p[0])
    fleet = len({r.host for r in runs}) > 1  # a fleet sweep's: which host measured each point
    rows = []
    for steps, run in points:
        bench = run.bench or {}
        tok_s = bench.get("tok_s")
        vs = "—" if tok_s is None else judge.pct_text(judge.versus(yardstick, tok_s, 1, bench=True).pct)
        tokens = _flag(run.argv, "--speculative-num-draft-tokens") or "—"
        rows.append([str(steps), str(advisor.run_topk(run)), tokens, fmt(tok_s), fmt(bench.get("accept_len"), 2),
                     fmt(bench.get("cycle_ms")), vs, run.outcome or "—", run.job_id]
                    + ([run.host] if fleet else []))  # fmt: skip
    blocks: list[Block] = [
        Heading(f"Sweep {sweep}"),
        Table(SWEEP_COLUMNS + ["host"] * fleet, rows),
    ]
    with_hist = [r for _, r in points if advisor.histogram_of(r) is not None]
    bands_tok: list[Band] = []
    bands_acc: list[Band] = []
    measured_tok = [(float(k), r.bench["tok_s"]) for k, r in points if r.bench and r.bench.get("tok_s")]
    measured_acc = [(float(k), r.bench["accept_len"]) for k, r in points if r.bench and r.bench.get("accept_len")]
    series_tok = [("measured", [x for x, _ in measured_tok], [y for _, y in measured_tok])]
    series_acc = [("measured", [x for x, _ in measured_acc], [y for _, y in measured_acc])]
    if with_hist:
        source = max(with_hist, key=lambda r: (advisor.run_steps(r) or 0, sum(advisor.histogram_of(r) or [])))
        advice = advisor.advise(runs, yardstick, source.id)
        predicted = advice.rows
        ks = [float(r.steps) for r in predicted]
        series_tok.append(("predicted", ks, [r.tok_s for r in predicted]))
        series_acc += [
            ("predicted", ks, [r.accept_len for r in predicted]),
            ("break-even", ks, [judge.break_even(r.cycle_ms, yardstick.baseline_tok_s) for r in predicted]),
        ]
        lows, highs = [_gap(r.tok_s_low) for r in predicted], [_gap(r.tok_s_high) for r in predicted]
        bands_tok = [Band("predicted 95% interval", ks, lows, highs, series="predicted")]
        bands_acc = [Band("predicted 95% interval", ks, [r.accept_len_low for r in predicted],
                          [r.accept_len_high for r in predicted], series="predicted")]  # fmt: skip
        acc = advice.acceptance
        blocks.append(
            Para(
                f"Predicted from the per-position acceptance of the drafter's runs ({acc.steps} positions measured; "
                f"{acc.extrapolation()}); cost model {advice.cost.source}: {advice.cost.detail}. Interval: "
                f"{acc.to_json()['interval']}. Break-even: the accept length that matches the baseline at each "
                "step count's cycle time."
            )
        )
        if advice.best is not None:
            blocks.append(Para(advisor.best_line(advice)))
    baseline = f"baseline {units.tok_s(yardstick.baseline_tok_s)} tok/s ({yardstick.source})"
    blocks += [
        Chart("tok/s by draft steps", "tok/s per stream", series_tok, [(yardstick.baseline_tok_s, baseline)],
              x_label="draft steps", bands=bands_tok, discrete=True),
        Chart("accept length by draft steps", "accept length", series_acc, x_label="draft steps", bands=bands_acc,
              discrete=True),
    ]  # fmt: skip
    return blocks


def _gap(value: float | None) -> float:
    """A figure a row lacks (no cycle to divide by) as a gap in the chart's line."""
    return math.nan if value is None else value


# A run whose server never answered /server_info and whose launch recorded no release (before specdeck kept it).
VERSION_UNREAD = "not read (no /server_info, launch recorded none)"


def runs_table(runs: list[RunSummary]) -> Table:
    """When and how each run went, with the speculative numbers the server resolved."""
    rows = []
    for run in runs:
        rows.append(
            [
                run.id,
                _when(run.started),
                _when(run.stopped),
                (run.outcome or "—") + (f": {run.reason}" if run.reason and run.outcome == "crashed" else ""),
                run.version or VERSION_UNREAD,
                run.spec_text(),  # as resolved, else as its launch command states (no "—" for a stated number)
            ]
        )
    return Table(["run", "started", "stopped", "outcome", "sglang", "steps/topk/draft tokens"], rows)
