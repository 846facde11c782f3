"""`specdeck parse-log`, `breakeven`, `watch` and `bench`: the numbers a tuning session is judged by."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared import units
from backend.cli.common import (
    add_json,
    connected,
    emit_json,
    emit_json_line,
    keep_in_history,
    load_settings,
    yardstick_of,
)
from backend.cli.main import command
from backend.errors import UsageError
from backend.history import Yardstick, load_yardstick
from backend.jobs import JobInfo, get_job
from backend.measure import bench as bench_mod
from backend.measure import judge
from backend.measure.breakeven import breakeven, cycle_ms
from backend.measure.latency import format_ms
from backend.measure.livefeed import profile_steps
from backend.measure.metrics import LogReading, Sample, read_log
from backend.measure.prometheus import PR_31750, Scrape, read_scrape
from backend.measure.series import LiveSeries, engine_sum
from backend.sglang.versions import accept_rate_definition, accept_rate_label
from backend.tune.advisor import bench_acceptance_lines

if TYPE_CHECKING:
    from backend.cli.main import Subcommands
    from backend.connection import Connection
    from backend.settings.model import Settings

DEFAULT_TARGETS = (150.0, 200.0)  # the operator's goals (FIELD-NOTES §1)


def register(sub: Subcommands) -> None:
    p = command(sub, "parse-log", "Read the decode and prefill samples in a saved SGLang log (any version).")
    p.add_argument("file", help="a server log on this machine")
    p.add_argument(
        "--sglang-version",
        metavar="V",
        help="the SGLang that wrote the log, which decides what its accept rate counts (logs do not say)",
    )
    add_json(p)
    p.set_defaults(run=parse_log)

    p = command(
        sub,
        "parse-metrics",
        "Read a saved /metrics scrape as the Live tab reads a live one: each series and the engine's totals.",
    )
    p.add_argument("file", help="a /metrics page saved on this machine (curl http://HOST:PORT/metrics > FILE)")
    p.add_argument("later", nargs="?", help="a later scrape of the same server: latency over the time between the two")
    p.add_argument(
        "--latency",
        action="store_true",
        help="only the latency histograms' percentiles (TTFT, inter-token, end-to-end, queue), merged over ranks",
    )
    p.add_argument(
        "--sglang-version",
        metavar="V",
        help="the SGLang that served it, which decides what its accept rate counts (the page does not say)",
    )
    add_json(p)
    p.set_defaults(run=parse_metrics_cmd)

    p = command(
        sub,
        "breakeven",
        "The accept length that beats the baseline, and what target speeds demand (limit and finite steps).",
    )
    p.add_argument("--cycle-ms", type=float, help="verify cycle time in ms (default: the configured reference)")
    p.add_argument(
        "--baseline",
        type=float,
        help="baseline tok/s (default: the measured baseline run when one is marked in the history, "
        "else the configured reference)",
    )
    p.add_argument(
        "--target",
        type=float,
        action="append",
        metavar="T",
        help="a target tok/s; repeat for several (default: 150 and 200)",
    )
    p.add_argument("--steps", type=int, help="draft steps (default: the profile's speculative steps)")
    p.add_argument("--profile", help="profile whose steps to use (default: the first with speculation)")
    add_json(p)
    p.set_defaults(run=breakeven_cmd)

    p = command(sub, "watch", "Stream live samples from the server running on the host (Ctrl-C to stop).")
    p.add_argument("--port", type=int, help="the server's port, when several run")
    p.add_argument("--from-start", action="store_true", help="replay the server's log from its first line")
    p.add_argument(
        "--window",
        type=float,
        default=300.0,
        metavar="S",
        help="seconds of the server's latency histograms each latency line reads (default 300, the Live tab's 5 m)",
    )
    add_json(p)
    p.set_defaults(run=watch)

    p = command(sub, "bench", "Time streaming requests against the running server, from the host.")
    add_bench_options(p)
    add_prompt_options(p)
    add_json(p)
    p.set_defaults(run=bench)


def add_bench_options(p: argparse.ArgumentParser, *, port: bool = True) -> None:
    """`bench`'s options; `fleet bench` takes them too, less --port (it sends through its router)."""
    for flag, default, meta, what in (
        ("--requests", bench_mod.DEFAULT_REQUESTS, "N", "requests to send"),
        ("--max-tokens", bench_mod.DEFAULT_MAX_TOKENS, "M", "tokens per request"),
    ):
        p.add_argument(flag, type=int, default=default, metavar=meta, help=f"{what} (default {default})")
    p.add_argument(
        "--concurrency",
        default=str(bench_mod.DEFAULT_CONCURRENCY),
        metavar="C[,C...]",
        help="requests at a time; several (1,2,4,8) run the same bench at each level and record the curve "
        f"in the history (default {bench_mod.DEFAULT_CONCURRENCY})",
    )
    p.add_argument("--prompts", metavar="FILE", help="prompts: a JSON list or one per line (default: built-in)")
    if port:
        p.add_argument("--port", type=int, help="the server's port, when several run")
    p.add_argument("--slo-ttft-ms", type=float, metavar="T", help="goodput: requests with a first token within T ms")
    p.add_argument("--slo-itl-ms", type=float, metavar="I", help="goodput: requests with a mean ITL <= I ms")


def add_domains_option(p: argparse.ArgumentParser) -> None:
    """``--domains``: `bench`'s and `sweep`'s, read by ``domains.parse``."""
    from backend.measure.domains import HUB_SETS

    p.add_argument(
        "--domains",
        metavar="D[,D...]",
        help=f"prompt sets from Hub datasets, read on the host, with a row per domain ({', '.join(HUB_SETS)}; "
        "default: the built-in prompts)",
    )


def add_prompt_options(p: argparse.ArgumentParser) -> None:
    """`bench`'s prompt options (issue 32): which sets, through the chat template or not, how many times."""
    add_domains_option(p)
    p.add_argument(
        "--raw-prompts",
        action="store_true",
        help="send the prompts as they are (default: through the target's chat template, as the drafter was trained)",
    )
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="run the bench N times and report the spread")


def _num(value: float | int | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _clock(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%H:%M:%S", time.localtime(ts))


# --- parse-log ------------------------------------------------------------------------------------------


def _read_log(path: str) -> LogReading:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return read_log(f)
    except FileNotFoundError:
        raise UsageError(f"log file {path} does not exist.") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder; pass a log file.") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}.") from None


def _read_scrape(path: str) -> Scrape:
    return read_scrape(_read_page(path))


def _read_page(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        raise UsageError(f"metrics file {path} does not exist.") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder; pass a log file.") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}.") from None


def _has(samples: list[Sample], key: str) -> bool:
    return any(getattr(s, key) is not None for s in samples)


def _averages(samples: Iterable[Sample], baseline: float) -> LiveSeries:
    """The samples as the live series sees them (throughput after idle spells dropped)."""
    samples = list(samples)
    series = LiveSeries(baseline, capacity=max(1, len(samples)))
    for sample in samples:
        series.feed(sample, now=0.0)
    return series


async def parse_log(args: argparse.Namespace) -> int:
    reading = _read_log(args.file)
    samples = reading.samples
    notes = [f"note: {n}" for n in reading.notes]
    if args.json:
        emit_json([s.to_json() for s in samples])  # the contract is the list: what was not read goes to stderr
        for note in notes:
            print(f"specdeck: {note}", file=sys.stderr)
        return 0
    if not samples:
        print("\n".join([f"{args.file}: no Decode batch or Prefill batch lines read", *notes]))
        return 0
    ranked = len({s.dp_rank for s in samples} - {None}) > 1  # a column only where several ranks log
    extra = [(k, h) for k, h in (("retracted_req", "retract"), ("prealloc_usage", "prealloc")) if _has(samples, k)]
    print(f"{'time':<8}  " + (f"{'dp':>3} " if ranked else ""), end="")
    print(f"{'kind':<7} {'tok/s':>8} {'accept':>6} {'rate':>5} {'run':>4} {'queue':>5} {'usage':>5}  graph", end="")
    print("".join(f" {h:>8}" for _, h in extra))
    for s in samples:
        graph = "-" if s.cuda_graph is None else ("yes" if s.cuda_graph else "no")
        rank = f"{_num(s.dp_rank, 'd'):>3} " if ranked else ""
        print(
            f"{_clock(s.ts):<8}  {rank}{s.kind:<7} {_num(s.gen_tps):>8} {_num(s.accept_len):>6} "
            f"{_num(s.accept_rate):>5} {_num(s.running_req, 'd'):>4} {_num(s.queue_req, 'd'):>5} "
            f"{_num(s.token_usage):>5}  {graph:<5}"
            + "".join(f" {_num(getattr(s, k), 'g'):>8}" for k, _ in extra)
            + ("  (cut)" if s.cut else "")
        )
    baseline = load_settings(args).reference.baseline_tok_s
    series = _averages(samples, baseline)
    decode = sum(1 for s in samples if s.kind == "decode")
    print(f"\n{decode} decode and {len(samples) - decode} prefill samples")
    tok, accept, cycle = series.tok_s.stats(), series.accept_len.stats(), series.cycle_ms.stats()
    if tok.count and tok.mean is not None:  # a window with samples has a mean
        dropped = sum(1 for s in samples if s.kind == "decode" and s.gen_tps is not None) - tok.count
        total, streams = series.total_tok_s.stats(), series.streams.stats()
        print(
            f"per-stream tok/s: mean {tok.mean:.1f}, p50 {tok.p50:.1f}, p95 {tok.p95:.1f} "
            f"({judge.pct_text(judge.pct(tok.mean, baseline))} vs the {baseline:g} single-stream baseline; "
            f"{dropped} idle, first-after-idle or batch-change samples left out)"
        )
        print(
            f"aggregate gen throughput: mean {total.mean:.1f} tok/s over {streams.mean:.1f} running requests "
            f"on average ({streams.min:g}–{streams.max:g})"
        )
    if len(series.ranks) > 1:
        print(f"{len(series.ranks)} DP ranks, each its own batch (the figures above are the engine's sum):")
        for dp, own in sorted(series.ranks.items()):
            rt, rs, ra = own.total_tok_s.stats(), own.streams.stats(), own.accept_len.stats()
            said = f"  DP{dp}: "
            said += f"{rt.mean:.1f} tok/s over {rs.mean:.1f} running" if rt.count else "no throughput kept"
            said += f", accept length {ra.mean:.2f}" if ra.count else ""
            print(said)
    if accept.count:
        print(f"accept length: mean {accept.mean:.2f}, p50 {accept.p50:.2f}, p95 {accept.p95:.2f}")
    if cycle.count and cycle.mean is not None:  # a window with samples has a mean
        line = judge.break_even(cycle.mean, baseline)
        print(f"cycle time: mean {cycle.mean:.1f} ms; break-even accept length {line:.2f}")
    if any(s.accept_rate is not None for s in samples):
        print(_rate_note(args.sglang_version))
    if notes:
        print("\n".join(notes))
    return 0


# --- parse-metrics --------------------------------------------------------------------------------------

_SCRAPE_COLUMNS = (  # (heading, key, format)
    ("gen tok/s", "gen_throughput", ".2f"),
    ("run", "num_running_reqs", ".0f"),
    ("queue", "num_queue_reqs", ".0f"),
    ("usage", "token_usage", ".2f"),
    ("accept", "spec_accept_length", ".2f"),
    ("rate", "spec_accept_rate", ".2f"),
    ("retract", "num_retracted_reqs", ".0f"),
    ("kv tokens", "max_total_num_tokens", ".0f"),
)


def _scrape_latency(args: argparse.Namespace, first: Scrape, later: Scrape | None) -> dict[str, Any] | None:
    """parse-metrics' latency figures: the histograms of FILE, or their increase up to LATER; None when FILE has
    none and none were asked for (NoHistograms when they were: --latency, or two scrapes)."""
    from backend.measure import latency

    start = latency.of_scrape(first)
    if later is None and not args.latency and not start:
        return None
    latency.require_histograms(start, args.file)
    if later is None:
        return latency.summary(start)
    end = latency.of_scrape(later)
    latency.require_histograms(end, args.later)
    return latency.summary(latency.window(end, start))


def _latency_table(figures: dict[str, Any], what: str) -> None:
    print(f"latency ({what}, ms)  {'p50':>8} {'p90':>8} {'p95':>8} {'p99':>8} {'mean':>8} {'count':>10}")
    for key, fig in figures.items():
        cells = " ".join(f"{fig.cell(q):>8}" for q in ("p50", "p90", "p95", "p99"))
        mean = "-" if fig.mean_ms is None else format_ms(fig.mean_ms)
        merged = f"  (merged over {fig.series} series)" if fig.series > 1 else ""
        print(f"{key:<22}{cells} {mean:>8} {fig.count:>10,.0f}{merged}")
    if any(q.over for fig in figures.values() for q in fig.quantiles.values()):
        print(">N: past the last finite bucket, N ms; the histogram says no more than that")


async def parse_metrics_cmd(args: argparse.Namespace) -> int:
    first = _read_scrape(args.file)
    later = None if args.later is None else _read_scrape(args.later)
    figures = _scrape_latency(args, first, later)
    what = f"from {args.file} to {args.later}" if args.later else "since the server started"
    if args.latency:
        if args.json:
            emit_json(latency_record(figures or {}, None))
        else:
            _latency_table(figures or {}, what)
        return 0
    scrape = later or first
    if args.json:
        emit_json({**scrape.to_json(), "latency": None if figures is None else latency_record(figures, None)})
        return 0
    notes = [f"note: {n}" for n in (first.notes if later is None else [*first.notes, *later.notes])]
    if not scrape.series:
        print("\n".join([f"{args.later or args.file}: no SGLang series (sglang:…) read from it", *notes]))
        return 0
    head = f"{'engine':<8} {'dp':>3} {'tp':>3}  " + " ".join(f"{h:>{max(len(h), 6)}}" for h, _, _ in _SCRAPE_COLUMNS)
    print(head)

    def cells(values: dict[str, Any]) -> str:
        return " ".join(f"{_num(values.get(k), f):>{max(len(h), 6)}}" for h, k, f in _SCRAPE_COLUMNS)

    for s in scrape.series:
        print(f"{s.engine_type or '-':<8} {_num(s.dp_rank, 'd'):>3} {_num(s.tp_rank, 'd'):>3}  {cells(s.values)}")
    ranks = [r for r in scrape.dp_ranks if r is not None]
    over = f"sum over {len(ranks)} DP ranks" if len(ranks) > 1 else "one rank"
    print(f"{'engine':<16}  {cells(scrape.engine)}")
    print(
        f"\nthe engine ({over}): throughput, requests, retractions and KV tokens are summed; usage is the fullest "
        "rank's; accept length and rate are the target's"
        + (", weighted by each rank's verify steps" if len(ranks) > 1 else "")
    )
    for key, lacking in scrape.short.items():
        print(f"{key}: {lacking} of {len(ranks)} DP ranks do not report it, so the engine's sum is short")
    if len(scrape.usage_by_rank) > 1:
        print("token usage per DP rank: " + ", ".join(f"DP{r} {u:.2f}" for r, u in scrape.usage_by_rank.items()))
    draft = scrape.draft()
    if draft["spec_accept_length"] is not None or draft["spec_accept_rate"] is not None:
        print(
            f"draft worker (engine_type=draft): accept length {_num(draft['spec_accept_length'])}, rate "
            f"{_num(draft['spec_accept_rate'])}: its own figures, not the server's"
        )
    if scrape.engine["spec_accept_length"] is not None:
        dspark = [
            f"{name} {scrape.engine[key]:.2f}"
            for name, key in (("cap len", "spec_cap_length"), ("block accept len", "spec_block_accept_length"))
            if scrape.engine.get(key)
        ]
        print(
            "accept and rate"
            + (f" (and DSPARK's {', '.join(dspark)})" if dspark else "")
            + ": the last decode-log interval's gauges (SGLang resets them at every interval), not a run's"
        )
        run = scrape.run_accept_length(first if later is not None else None)
        if run is not None:
            what = "between the two scrapes" if later is not None else "since the server started"
            print(f"accept length from totals {what}: {run:.2f} (generation tokens / verify calls, finished requests)")
    for window, rates in scrape.per_position.items():
        rates_text = " ".join("-" if a is None else f"{a:.2f}" for a in rates)
        over = "last interval" if window == "interval" else "lifetime"
        print(f"per-position acceptance ({over}): {rates_text} ({PR_31750})")
    if scrape.engine["spec_accept_rate"] is not None:
        print(_rate_note(args.sglang_version, "the page's accept rate"))
    graphs = scrape.startup["cuda_graph"]
    if graphs:
        print("CUDA graph capture: " + ", ".join(f"{k} {v:.1f}s" for k, v in graphs.items()))
    if figures:
        print()
        _latency_table(figures, what)
    if notes:
        print("\n" + "\n".join(notes))
    return 0


def _rate_note(version: str | None, what: str = "the log's accept rate") -> str:
    """What a ``rate`` column counts: one definition per SGLang release, never left unsaid."""
    definition = accept_rate_definition(version)
    if definition is None:
        return (
            f"rate: {what}, definition unknown: SGLang 0.5.11 and newer count drafts only, older "
            "releases count the bonus token too; pass --sglang-version to name it"
        )
    return f"rate: {accept_rate_label(version)}, as SGLang {version} writes it"


# --- breakeven ------------------------------------------------------------------------------------------


async def breakeven_cmd(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    cycle = settings.reference.cycle_ms if args.cycle_ms is None else args.cycle_ms
    if args.baseline is None:
        yardstick = load_yardstick(settings.reference.baseline_tok_s, cycle)
        base, run = yardstick.baseline_tok_s, yardstick.baseline_run
        source = "measured" if run else "configured"
    else:
        base, run, source = args.baseline, None, "given"
    steps = args.steps if args.steps is not None else profile_steps(settings, args.profile)
    result = breakeven(cycle, base, args.target or DEFAULT_TARGETS, steps)
    if args.json:
        emit_json({**result.to_json(), "baseline_source": source, "baseline_run": run})
        return 0
    against = f"{units.tok_s(base)} tok/s measured by run {run}" if run else f"{units.tok_s(base)} tok/s"
    print(f"break-even accept length: {result.break_even_accept_len:.2f} ({cycle:g} ms cycles against {against})")
    if steps is not None:
        print(f"ceiling with {steps} steps: {result.max_tok_s:.1f} tok/s (accept length at most {steps + 1})")
    head = f"{'target':>8}  {'accept len':>10}  {'p (unbounded)':>13}"
    print(head + (f"  {f'p ({steps} steps)':>13}  reachable" if steps is not None else ""))
    for t in result.targets:
        line = f"{t.tok_s:>8g}  {t.accept_len:>10.2f}  {t.p_limit * 100:>12.1f}%"
        if steps is not None:
            p_steps = "-" if t.p_steps is None else f"{t.p_steps * 100:.1f}%"
            verdict = "yes" if t.reachable else f"no: out of reach with {steps} steps"
            line += f"  {p_steps:>13}  {verdict}"
        print(line)
    return 0


# --- watch ----------------------------------------------------------------------------------------------


def _watch_line(sample: Sample, yardstick: Yardstick, series: LiveSeries | None = None) -> str:
    """One sample as `watch` prints it, judged against the baseline at its running requests (``judge.versus``);
    with DP ranks it names its rank and ends with the engine's sum."""
    rank = "" if sample.dp_rank is None else f"DP{sample.dp_rank} "
    if sample.kind == "prefill":
        return f"{_clock(sample.ts)}  {rank}prefill  #running-req {_num(sample.running_req, 'd')}"
    parts = [f"{_clock(sample.ts)}  {rank}decode "]
    per_stream = sample.stream_tps
    baseline, _ = judge.baseline_at(yardstick, sample.running_req)
    if per_stream is None:
        parts.append("     - tok/s (idle or first after idle: left out)")
    else:
        vs = judge.versus(yardstick, per_stream, sample.running_req)
        parts.append(
            f"{per_stream:6.1f} tok/s per stream ({vs.cell():>12} vs {vs.baseline:.1f}), {sample.gen_tps:.1f} in all"
        )
    if sample.accept_len is not None:
        # A decode line's figures are its interval's (the last --decode-log-interval steps), never the run's.
        extra = "".join(
            f", {name} {value:.2f}"
            for name, value in (("cap len", sample.cap_len), ("block accept len", sample.block_accept_len))
            if value is not None
        )
        parts.append(f"accept {sample.accept_len:.2f}{extra} (interval)")
        if per_stream:
            cycle = cycle_ms(sample.accept_len, per_stream)
            parts.append(f"cycle {cycle:.1f} ms, break-even {judge.break_even(cycle, baseline):.2f}")
    parts.append(f"#running-req {_num(sample.running_req, 'd')}")
    ranks = series.ranks_now() if series is not None and sample.dp_rank is not None else []
    if len(ranks) > 1:
        total, streams, _ = engine_sum(ranks)
        parts.append(f"engine ({len(ranks)} DP ranks): {total:.1f} tok/s over {streams} running")
    return "  ".join(parts)


def latency_record(figures: dict[str, Any], window_s: float | None) -> dict[str, Any]:
    """A latency figures line of `watch --json` and `parse-metrics --json`: ``{"kind": "latency", ...}``."""
    return {"kind": "latency", "window_s": window_s, **{key: fig.to_json() for key, fig in figures.items()}}


def latency_text(figures: dict[str, Any]) -> str:
    """``TTFT p50 212 p95 380 ms  ITL p50 10.2 p95 31.0 ms  e2e ...`` from latency figures."""
    names = {"ttft_ms": "TTFT", "itl_ms": "ITL", "e2e_ms": "e2e", "queue_ms": "queue"}
    return "  ".join(f"{names[k]} p50 {f.cell('p50')} p95 {f.cell('p95')} ms" for k, f in figures.items())


async def watch(args: argparse.Namespace) -> int:
    from backend.measure.livefeed import LiveFeed, describe_server, log_end, require_server

    if not args.window > 0:
        raise UsageError(f"--window must be a number of seconds above 0, got {args.window:g}.")
    settings = load_settings(args)
    yardstick = yardstick_of(settings)
    async with connected(args, settings, follow=True) as conn:
        server = await require_server(conn, args.port)
        offset = 0 if args.from_start else await log_end(conn, server)
        print(f"watching {describe_server(server)} on {conn.host.name} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        shown: list[tuple[float, ...]] = [()]  # the counts of the last latency figures said

        def on_change(change: str) -> None:
            if change != "latency":
                return
            figures = feed.latency.figures(args.window)
            counts = tuple(f.count for f in figures.values())
            if not figures or counts == shown[0]:
                return  # nothing new finished in the window: no line
            shown[0] = counts
            if args.json:
                emit_json_line({"ts": time.time(), **latency_record(figures, args.window)})
            else:
                print(f"{_clock(time.time())}  latency ({args.window:g} s)  {latency_text(figures)}", flush=True)

        feed = LiveFeed(conn, LiveSeries(yardstick.baseline_tok_s), on_change)
        async for sample in feed.follow(server, offset):
            if args.json:
                emit_json_line(sample.to_json())
            else:
                print(_watch_line(sample, yardstick, feed.series), flush=True)
        state = feed.server.state if feed.server is not None else "ended"
        print(f"the server stopped ({state})", file=sys.stderr)
    return 0


# --- bench ----------------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> int:
    from backend.measure import domains
    from backend.measure.livefeed import describe_server, require_server

    prompts = bench_mod.read_prompts(args.prompts) if args.prompts else None
    levels = bench_mod.parse_levels(args.concurrency)
    if args.prompts and args.domains:
        raise UsageError("--prompts and --domains both name the prompts: give one of them.")
    slo = bench_mod.Slo(args.slo_ttft_ms, args.slo_itl_ms)
    settings = load_settings(args)
    async with connected(args, settings, follow=True) as conn:
        sets = domains.parse(args.domains, bool(conn.host.sandbox)) if args.domains else None
        plan = bench_mod.BenchPlan(
            args.requests, args.max_tokens, levels[0], prompts, sets, args.raw_prompts, args.repeat
        )
        server = await require_server(conn, args.port)
        if len(levels) > 1:
            return await _sweep(args, settings, conn, server, plan, levels, slo)
        print(
            f"bench on {describe_server(server)}: {plan.requests} requests of {plan.max_tokens} tokens, "
            f"{plan.concurrency} at a time"
            + (f", {plan.repeat} times" if plan.repeat > 1 else "")
            + f"; {judge.bench_scope(plan.requests, plan.concurrency)}",
            file=sys.stderr,
            flush=True,
        )
        repeats = []
        for _ in range(plan.repeat):
            result = await bench_mod.run_bench(conn, server, plan, _progress)
            job = await get_job(conn, result["job"])
            run_id = await keep_in_history(conn, server, [(job, result)])
            repeats.append(result)
    if result.get("failed"):
        print(f"specdeck: {result['failed']} of {plan.requests} requests failed", file=sys.stderr)
    extra, lines = _level_extras(result, server, settings, slo)
    if plan.repeat > 1:
        extra["repeats"] = [{k: r.get(k) for k in ("job", "tok_s", "accept_len", "requests")} for r in repeats]
        extra["spread"] = bench_mod.spread(repeats)
    if args.json:
        emit_json({**bench_mod.public_result(result), **extra, "run": run_id})
    else:
        print(bench_mod.summary_line(result, yardstick_of(settings), run_id))
        if plan.repeat > 1:
            print(bench_mod.spread_line(extra["spread"]))
        notes = bench_mod.bench_notes(result)
        print(notes[0])
        for line in [*bench_mod.domain_lines(result), *notes[1:]]:
            print(line)
        for line in lines:
            print(line)
        tiers = _tier_mix(run_id) if server.adaptive else None
        for line in bench_acceptance_lines(result, server.drafter, tiers=tiers):
            print(line)
        print(f"{result['requests']} requests, {result['tokens']} tokens, bench job {result['job']}")
        if run_id:
            print(f"recorded with run {run_id}: `specdeck report {run_id} --out report.md`")
    return 0


def _tier_mix(run_id: str | None) -> dict[int, float] | None:
    """An adaptive server's share of passes per tier, as its run in the history has it (None: not recorded)."""
    from backend.history import History, HistoryUnavailable

    if run_id is None:
        return None
    try:
        with History.open() as history:
            return history.run(run_id).tier_mix()
    except (HistoryUnavailable, UsageError):
        return None


def _level_extras(
    result: dict[str, Any], server: JobInfo, settings: Settings, slo: bench_mod.Slo
) -> tuple[dict[str, Any], list[str]]:
    """A bench level's cost per million tokens (and goodput under ``slo``) for the JSON, and the lines saying them."""
    from backend.measure.cost import gpus_of, per_million

    streams = result.get("concurrency") or 1
    cost = per_million(result.get("total_tok_s"), gpus_of(server.args, server.argv), settings.reference.gpu_hour_usd)
    out: dict[str, Any] = {"cost": None if cost is None else cost.to_json()}
    lines = [line] if (line := bench_mod.latency_line(result)) else []
    if slo:
        out["goodput"] = bench_mod.goodput(result, slo)
        lines.append(bench_mod.goodput_line(out["goodput"], streams, slo))
    if cost is not None:
        lines.append(f"cost: {cost.text()} on {cost.gpus} GPUs")
    return out, lines


def _progress(event: bench_mod.BenchProgress) -> None:
    print(f"  {event.done}/{event.total} requests done", file=sys.stderr, flush=True)


async def _sweep(
    args: argparse.Namespace,
    settings: Settings,
    conn: Connection,
    server: JobInfo,
    plan: bench_mod.BenchPlan,
    levels: tuple[int, ...],
    slo: bench_mod.Slo,
) -> int:
    """``bench --concurrency 1,2,4,8``: the bench at each level, recorded in the history with the server's run,
    judged per level against the baseline's bench at the same concurrency (else the single-stream figure)."""
    from backend.history import History, HistoryUnavailable, Yardstick
    from backend.measure.livefeed import describe_server

    print(
        f"bench sweep on {describe_server(server)}: concurrency {','.join(map(str, levels))}, "
        f"at least {plan.requests} requests of {plan.max_tokens} tokens per level",
        file=sys.stderr,
        flush=True,
    )

    def on_level(level: int, result: dict[str, Any]) -> None:
        print(
            f"  concurrency {level}: {_num(result.get('tok_s'), '.1f')} tok/s per stream, "
            f"{_num(result.get('total_tok_s'), '.1f')} in all, accept length {_num(result.get('accept_len'))}",
            file=sys.stderr,
            flush=True,
        )

    done = await bench_mod.run_sweep(conn, server, plan, levels, on_level, _progress)
    ref = settings.reference
    run_id = await keep_in_history(conn, server, done)
    yardstick, run = Yardstick(ref.baseline_tok_s, ref.cycle_ms), None
    if run_id is not None:
        try:
            with History.open() as history:
                yardstick, run = history.yardstick(ref.baseline_tok_s, ref.cycle_ms), history.run(run_id)
        except HistoryUnavailable as exc:
            print(f"specdeck: the run history cannot be read: {exc}", file=sys.stderr)
    rows = []
    for (_, result), level in zip(done, levels, strict=True):
        tok_s = result.get("tok_s")
        versus = judge.versus(yardstick, tok_s, level, bench=True, run_id=run_id) if tok_s else None
        row = bench_mod.public_result(result)
        row.update(_level_extras(result, server, settings, slo)[0])
        row.update(
            concurrency=level,
            vs_baseline_pct=None if versus is None or versus.own else round(versus.pct, 2),
            vs_baseline_streams=None if versus is None else versus.streams,
            vs_baseline_basis=None if versus is None else versus.basis,
            vs_baseline_cell="—" if versus is None else versus.cell(),
        )
        rows.append(row)
    curve = None if run is None else judge.run_curve(run, yardstick)
    falls = None if curve is None else curve.falls_at
    if args.json:
        emit_json({
            "run": run_id, "levels": rows, "yardstick": yardstick.to_json(), "falls_below_baseline_at": falls,
            "no_baseline_at": None if curve is None else list(curve.unjudged),
            "curve_verdicts": None if curve is None else curve.to_json(),
        })  # fmt: skip
        return 0
    print(
        f"{'STREAMS':>7}  {'TOK/S/STREAM':>12}  {'TOTAL':>7}  {'ACCEPT':>6}  {'CYCLE MS':>8}  {'TTFT P95':>8}  "
        f"{'ITL P50/P95':>11}  {'GOODPUT':>7}  VS BASELINE"
    )
    for row in rows:
        vs = row["vs_baseline_cell"]
        lat = row.get("latency") or {}
        itl = lat.get("itl_ms") or {}
        itl_cell = f"{_num(itl.get('p50'), '.1f')}/{_num(itl.get('p95'), '.1f')}"
        good = row.get("goodput")
        good_cell = "-" if not good or good["share"] is None else f"{good['share'] * 100:.0f}%"
        print(
            f"{row['concurrency']:>7}  {_num(row['tok_s'], '.1f'):>12}  {_num(row.get('total_tok_s'), '.1f'):>7}  "
            f"{_num(row['accept_len']):>6}  {_num(row['cycle_ms'], '.1f'):>8}  "
            f"{_num((lat.get('ttft_ms') or {}).get('p95'), '.0f'):>8}  {itl_cell:>11}  {good_cell:>7}  {vs}"
        )
    costs = [(row["concurrency"], row["cost"]) for row in rows if row.get("cost")]
    if costs:
        unit = "usd_per_million" if costs[0][1]["usd_per_million"] is not None else "gpu_s_per_million"
        cells = ", ".join(
            f"{n}: ${c[unit]:.2f}" if unit == "usd_per_million" else f"{n}: {c[unit]:,.0f} GPU-s" for n, c in costs
        )
        print(f"cost per million output tokens by streams ({costs[0][1]['gpus']} GPUs): {cells}")
    if slo:
        print(f"goodput: the share of requests within {slo.text()} (ITL: the request's mean)")
    print(f"@N: against the baseline's bench at N streams, /stream: per stream vs the single-stream baseline "
          f"{yardstick.baseline_tok_s:.1f} tok/s")  # fmt: skip
    if run is None:
        return 0
    print(f"recorded with run {run_id}: `specdeck report {run_id} --out report.md` draws the curve")
    if curve is None:
        print(f"no speculation here: `specdeck history baseline {run_id}` makes these the yardstick per concurrency")
    else:
        print(curve.sentence())
    return 0
