"""specdeck's own bench: what a client of the running server sees, measured from the host.

The requests are sent by the host agent's load generator (``backend/agent/host/loadgen.py``), run as a
detached job of kind ``bench`` so a bench outlives the connection, never crosses the network and ends with a
``{"event": "result", ...}`` record in the job's events for history to read. This module starts, follows,
stops and summarises those jobs for the CLI and the Live tab.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backend.connection import Connection
from backend.errors import OperationFailed, UsageError
from backend.history import RunSummary, Yardstick
from backend.jobs import JobInfo, get_job, list_jobs, newest_running
from backend.measure import judge
from backend.measure.collapse import Collapse, Episode, collapses
from backend.measure.latency import format_ms
from backend.measure.livefeed import describe_server

# Sized for the verdicts a bench feeds (issue 32): at 4 × 256 a bench ended before the Live window had the 20
# decode log samples its verdict needs (3 kept on the sandbox: SGLang logs every 40 cycles, and each request's
# first line after idle is left out), and a sweep point's break-even had none. 8 × 512 is ~40 s of one stream at
# 100 tok/s: 22 kept samples on the sandbox, 8 requests for the bench's own interval (Student's t on 7 dof).
DEFAULT_REQUESTS = 8
DEFAULT_MAX_TOKENS = 512
DEFAULT_CONCURRENCY = 1
RESULT_KEYS = ("tok_s", "accept_len", "cycle_ms", "ttft_ms", "requests", "tokens", "acceptance", "per_request")
# The contract's keys for prompts (issue 32): the chat template's name or false, per-domain figures, looped requests.
PROMPT_KEYS = ("chat_template", "domains", "degenerate")
MAX_PROMPTS_BYTES = 16 << 20


@dataclass(frozen=True)
class BenchPlan:
    """What to send: ``requests`` streams of ``max_tokens`` tokens, ``concurrency`` at a time."""

    requests: int = DEFAULT_REQUESTS
    max_tokens: int = DEFAULT_MAX_TOKENS
    concurrency: int = DEFAULT_CONCURRENCY
    prompts: tuple[str, ...] | None = None  # None: the load generator's built-in set
    domains: dict[str, Any] | None = (
        None  # {name: {"dataset", "file"}} (``domains.parse``): the Hub's sets, on the host
    )
    raw: bool = False  # True: the prompts as they are, not through the target's chat template
    repeat: int = 1  # the same bench this many times, its spread across them reported

    def __post_init__(self) -> None:
        for name in ("requests", "max_tokens", "concurrency", "repeat"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                flag = name.replace("_", "-")
                raise UsageError(f"--{flag} must be a whole number of at least 1, got {value!r}.")
        if self.prompts is not None and not self.prompts:
            raise UsageError("the prompts file holds no prompts; give one prompt per line or a JSON list.")


@dataclass(frozen=True)
class Slo:
    """A latency objective per request: time to first token and mean inter-token latency, in ms (None: not
    judged). A failed request never meets it."""

    ttft_ms: float | None = None
    itl_ms: float | None = None

    def __post_init__(self) -> None:
        for flag, value in (("--slo-ttft-ms", self.ttft_ms), ("--slo-itl-ms", self.itl_ms)):
            if value is not None and not 0 < value < float("inf"):
                raise UsageError(f"{flag} must be a number of milliseconds above 0, got {value:g}.")

    def __bool__(self) -> bool:
        return self.ttft_ms is not None or self.itl_ms is not None

    def met(self, request: dict[str, Any]) -> bool:
        if "error" in request:
            return False
        if self.ttft_ms is not None and not request.get("ttft_ms", float("inf")) <= self.ttft_ms:
            return False
        itl = request.get("itl_ms")
        return self.itl_ms is None or itl is None or itl <= self.itl_ms

    def text(self) -> str:
        parts = [f"TTFT <= {self.ttft_ms:g} ms"] if self.ttft_ms is not None else []
        if self.itl_ms is not None:
            parts.append(f"ITL <= {self.itl_ms:g} ms")
        return " and ".join(parts)


def goodput(result: dict[str, Any], slo: Slo) -> dict[str, Any]:
    """The share of a bench's requests that met ``slo`` and their output tok/s over the bench's wall time."""
    requests = result.get("per_request") or []
    good = [r for r in requests if slo.met(r)]
    duration = result.get("duration_s") or 0
    return {
        "slo": {"ttft_ms": slo.ttft_ms, "itl_ms": slo.itl_ms},
        "share": len(good) / len(requests) if requests else None,
        "requests": len(good),
        "of": len(requests),
        "tok_s": sum(r.get("tokens") or 0 for r in good) / duration if duration > 0 else None,
    }


def read_prompts(path: str | Path) -> tuple[str, ...]:
    """Prompts from a local file: a JSON list of strings, or one prompt per non-empty line."""
    file = Path(path).expanduser()
    try:
        if file.stat().st_size > MAX_PROMPTS_BYTES:
            raise UsageError(f"{file} is over 16 MiB; a bench needs a few prompts, not a data set.")
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"prompts file {file} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read prompts file {file}: {exc}.") from None
    if text.lstrip().startswith("["):
        try:
            prompts = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{file} starts like JSON but is not valid JSON: {exc}.") from None
        if not isinstance(prompts, list) or not all(isinstance(p, str) and p.strip() for p in prompts):
            raise UsageError(f"{file}: a JSON prompts file must be a list of non-empty strings.")
        return tuple(prompts)
    return tuple(line for line in text.splitlines() if line.strip())


async def start_bench(conn: Connection, server: JobInfo, plan: BenchPlan) -> JobInfo:
    """Start a bench job against ``server`` (a running serve job); returns the bench job's description."""
    port = server.port
    health = await conn.call("http.request", url=f"http://127.0.0.1:{port}/health")
    if health.get("status") != 200:
        state = "is not answering" if health.get("status") is None else "is still starting"
        raise OperationFailed(
            f"the server ({describe_server(server)}) {state}; wait until `specdeck serve status` says ready."
        )
    params: dict[str, Any] = {
        "port": port,
        "requests": plan.requests,
        "max_tokens": plan.max_tokens,
        "concurrency": plan.concurrency,
        "profile": server.args.get("profile"),
        "server_job": server.id,
        "model_path": server.args.get("model"),  # whose chat template renders the prompts
        "raw": plan.raw,
        "endpoint": conn.host.hub_endpoint,
    }
    if plan.prompts is not None:
        params["prompts"] = list(plan.prompts)
    if plan.domains:
        params["domains"] = plan.domains
    return JobInfo.from_json(await conn.call("bench.start", **params))


async def bench_events(conn: Connection, job_id: str) -> AsyncIterator[dict[str, Any]]:
    """The bench job's events (progress, then result or failed) as they are written; ends with the job."""
    params = {"id": job_id, "stream": "events", "offset": 0}
    async for event in conn.subscribe("jobs.follow", params, lambda p, ev: {**p, "offset": ev["offset"]}):
        for line in event["lines"]:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


@dataclass(frozen=True)
class BenchProgress:
    """A bench's progress event (the host's loadgen): ``done`` of its ``total`` requests finished."""

    done: int
    total: int


OnProgress = Callable[[BenchProgress], None]


async def wait_result(conn: Connection, job_id: str, on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Follow a bench job to its end; its result record, or OperationFailed saying why there is none."""
    result = failed = None
    async for record in bench_events(conn, job_id):
        kind = record.get("event")
        if kind == "progress" and on_progress is not None:
            on_progress(BenchProgress(int(record.get("done") or 0), int(record.get("total") or 0)))
        elif kind == "result":
            result = record
        elif kind == "failed":
            failed = record
    if result is not None:
        return result
    job = await get_job(conn, job_id)
    reason = (failed or {}).get("reason") or job.reason or job.state
    raise OperationFailed(f"the bench did not finish: {reason}.")


async def running_bench(conn: Connection) -> JobInfo | None:
    """The newest running bench job on the host, if any."""
    return newest_running(await list_jobs(conn, "bench"))


async def stop_bench(conn: Connection, job_id: str) -> dict[str, Any]:
    """Cancel a bench job (its process group); returns its final description."""
    cancelled: dict[str, Any] = await conn.call("jobs.cancel", id=job_id)
    return cancelled


async def _bench_job(
    conn: Connection, server: JobInfo, plan: BenchPlan, on_progress: OnProgress | None
) -> tuple[JobInfo, dict[str, Any]]:
    """(job, result) of one bench, with the collapse episodes the server's log shows over it; the job is
    cancelled if the caller gives up (Ctrl-C)."""
    from backend.measure.livefeed import log_end

    start = await log_end(conn, server)
    job = await start_bench(conn, server, plan)
    finished = False
    try:
        result = await wait_result(conn, job.id, on_progress)
        finished = True
        return job, {"job": job.id, **result, "collapse": (await collapse_over(conn, server, start)).to_json()}
    finally:
        if not finished and conn.connected:
            await stop_bench(conn, job.id)


async def collapse_over(conn: Connection, server: JobInfo, offset: int) -> Collapse:
    """The collapse episodes in the server's log from byte ``offset`` to its end (what a bench went through)."""
    from backend.history.sync import read_lines
    from backend.measure.livefeed import log_end
    from backend.measure.metrics import parse_lines

    end, lines = await log_end(conn, server), []
    while offset < end:
        got, offset_now = await read_lines(conn, server.log_path, offset, end - offset)
        if offset_now <= offset:
            break
        lines.extend(got)
        offset = offset_now
    return collapses(parse_lines(lines))


async def run_bench(
    conn: Connection, server: JobInfo, plan: BenchPlan, on_progress: OnProgress | None = None
) -> dict[str, Any]:
    """Start a bench and wait for its result; the job is cancelled if the caller gives up (Ctrl-C)."""
    return (await _bench_job(conn, server, plan, on_progress))[1]


def parse_levels(text: str) -> tuple[int, ...]:
    """``--concurrency`` as typed: one level (``2``) or several for a sweep (``1,2,4,8``), ascending, no repeats."""
    try:
        levels = [int(part) for part in text.split(",")]
    except ValueError:
        levels = []
    if not levels or any(level < 1 for level in levels):
        raise UsageError(f"--concurrency takes whole numbers of at least 1, comma-separated (1,2,4,8), got {text!r}.")
    return tuple(sorted(set(levels)))


async def run_sweep(
    conn: Connection,
    server: JobInfo,
    plan: BenchPlan,
    levels: tuple[int, ...],
    on_level: Callable[[int, dict[str, Any]], None] | None = None,
    on_progress: OnProgress | None = None,
) -> list[tuple[JobInfo, dict[str, Any]]]:
    """The same bench at each concurrency in ``levels``, one bench job after another: [(job, result)].

    Each level sends at least as many requests as it runs at once, so every stream is busy for the whole level.
    """
    out = []
    for level in levels:
        step = replace(plan, concurrency=level, requests=max(plan.requests, level))
        job, result = await _bench_job(conn, server, step, on_progress)
        out.append((job, result))
        if on_level is not None:
            on_level(level, result)
    return out


def public_result(record: dict[str, Any]) -> dict[str, Any]:
    """A result record as `specdeck bench --json` prints it: the contract's keys first, then the rest."""
    out = {key: record.get(key) for key in RESULT_KEYS + PROMPT_KEYS}
    out["chat_template"] = record.get("chat_template") or False
    out["degenerate"] = record.get("degenerate") or []
    out.update({k: v for k, v in record.items() if k not in out and k != "event"})
    return out


def summary_line(result: dict[str, Any], yardstick: Yardstick, run_id: str | None = None) -> str:
    """One line: per-stream tok/s at the bench's concurrency against the baseline that judges it (the judge's
    like with like, with its requests' verdict), the aggregate, accept length against the break-even of its own
    cycle, TTFT. ``run_id``: the run it measured (the baseline's own reads = baseline)."""

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    judged = judge.bench(result, yardstick, run_id)
    tok_s, accept, cycle = result.get("tok_s"), result.get("accept_len"), result.get("cycle_ms")
    streams = result.get("concurrency") or 1
    line = f"{num(tok_s, '.1f')} tok/s per stream at {streams} stream(s)"
    if speed := judged.speed_text():
        line += f" ({speed})"
    if streams > 1:
        line += f", {num(result.get('total_tok_s'), '.1f')} tok/s in all"
    line += f", accept length {num(accept, '.2f')}"
    if judged.break_even is not None:
        line += f" {judged.accept_text()} at this bench's {cycle:.1f} ms cycles"
    return line + f", TTFT {num(result.get('ttft_ms'), '.0f')} ms"


def latency_line(result: dict[str, Any]) -> str | None:
    """``TTFT p50 212 / p95 240 ms, ITL p50 10.1 / p95 31.0 ms, e2e p50 2.9 / p95 3.1 s``, None for older results."""
    figures = result.get("latency")
    if not isinstance(figures, dict):
        return None
    parts = []
    for key, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("e2e_ms", "e2e")):
        got = figures.get(key) or {}
        if got.get("p50") is None:
            continue
        parts.append(f"{name} p50 {format_ms(got['p50'])} / p95 {format_ms(got['p95'])} ms")
    return ", ".join(parts) or None


def goodput_line(good: dict[str, Any], streams: int, slo: Slo) -> str:
    """``goodput 87% at 8 streams (7 of 8 requests within TTFT <= 500 ms and ITL <= 30 ms), 410.2 tok/s``."""
    share = "-" if good["share"] is None else f"{good['share'] * 100:.0f}%"
    tok_s = "-" if good["tok_s"] is None else f"{good['tok_s']:.1f}"
    what = "stream" if streams == 1 else "streams"
    within = f"{good['requests']} of {good['of']} requests within {slo.text()}"
    return f"goodput {share} at {streams} {what} ({within}), {tok_s} tok/s"


# --- prompts, domains, loops and repeats (issue 32) ---------------------------------------------------------


def prompts_line(result: dict[str, Any]) -> str:
    """What the prompts were: their sets, and through the target's chat template or raw (and why)."""
    sets = result.get("prompt_sets") or {}
    where = ", ".join(sorted(set(sets.values()))) or "built-in"
    note = result.get("chat_template_note") or (
        f"through the target's chat template ({result['chat_template']})" if result.get("chat_template") else "raw"
    )
    return f"prompts: {where}, {note}"


def domain_rows(result: dict[str, Any]) -> list[list[str]]:
    """``[domain, requests, accept length, tok/s]`` per domain of a bench (its ``domains``)."""
    out = []
    for name, d in (result.get("domains") or {}).items():
        accept = "-" if d.get("accept_len") is None else f"{d['accept_len']:.2f}"
        tok_s = "-" if d.get("tok_s") is None else f"{d['tok_s']:.1f}"
        out.append([name, str(d.get("requests", 0)), accept, tok_s])
    return out


def domain_lines(result: dict[str, Any]) -> list[str]:
    """Accept length and tok/s per domain, a row each (nothing for a bench of one domain)."""
    rows = domain_rows(result)
    if len(rows) < 2:
        return []
    return [f"{'DOMAIN':<8}  {'REQUESTS':>8}  {'ACCEPT':>6}  {'TOK/S':>7}"] + [
        f"{name:<8}  {n:>8}  {accept:>6}  {tok_s:>7}" for name, n, accept, tok_s in rows
    ]


def domains_inline(result: dict[str, Any]) -> str | None:
    """``chat 2.69 · 81.5 tok/s (6), code 3.29 · 96.0 tok/s (6)``: the per-domain table on one line."""
    rows = domain_rows(result)
    if len(rows) < 2:
        return None
    return ", ".join(f"{name} {accept} · {tok_s} tok/s ({n})" for name, n, accept, tok_s in rows)


def collapse_line(result: dict[str, Any]) -> str | None:
    """The collapse episodes the bench went through (``collapse.Collapse.line``), None for none."""
    got = result.get("collapse") or {}
    episodes = tuple(Episode(**e) for e in got.get("episodes") or [])
    return Collapse(episodes, got.get("share"), got.get("full_batch")).line()


def bench_notes(result: dict[str, Any]) -> list[str]:
    """What a bench's prompts were, which requests looped, and the collapse episodes it went through."""
    return [prompts_line(result), *filter(None, (degenerate_line(result), collapse_line(result)))]


def degenerate_line(result: dict[str, Any]) -> str | None:
    """How many requests looped and what was done with them."""
    looped = result.get("degenerate") or []
    if not looped:
        return None
    total = len(looped) + (0 if result.get("all_degenerate") else result.get("requests") or 0)
    kept = (
        "every request looped: the figures are theirs, and no user sees this acceptance"
        if result.get("all_degenerate")
        else "left out of the figures, the best and the advisor"
    )
    return (
        f"{len(looped)} of {total} requests looped (n-gram repetition in the completion: "
        f"requests {', '.join(str(i + 1) for i in looped)}): {kept} (lightseekorg/tokenspeed #1305)"
    )


def spread(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The spread of the same bench repeated: per figure its values, mean, standard deviation, min and max."""
    out: dict[str, Any] = {"runs": len(results)}
    for key in ("tok_s", "accept_len"):
        values = [r[key] for r in results if r.get(key) is not None]
        if not values:
            out[key] = None
            continue
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
        out[key] = {"values": values, "mean": mean, "sd": sd, "min": min(values), "max": max(values)}
    return out


def spread_line(figures: dict[str, Any]) -> str:
    """``3 runs: 84.1 tok/s ±2.3 sd (81.5-86.7), accept length 2.95 ±0.04 sd (2.91-2.99)``."""
    parts = []
    for key, what, fmt in (("tok_s", "tok/s", ".1f"), ("accept_len", "accept length", ".2f")):
        f = figures.get(key)
        if f:
            parts.append(f"{what} {f['mean']:{fmt}} ±{f['sd']:{fmt}} sd ({f['min']:{fmt}}-{f['max']:{fmt}})")
    return f"{figures['runs']} runs: " + ", ".join(parts)


def bench_brief(result: dict[str, Any]) -> str | None:
    """One line for a panel: ``kimi template · chat 2.69 · 81.5 tok/s (6), code … · 2 looped · collapse 31%``;
    None for a bench from before prompts were recorded."""
    if not result.get("prompt_sets") and not result.get("domains"):
        return None
    template = result.get("chat_template")
    parts = [f"{template} template" if template else "raw prompts"]
    inline = domains_inline(result)
    if inline:
        parts.append(inline)
    if result.get("degenerate"):
        parts.append(f"{len(result['degenerate'])} looped (left out)")
    share = (result.get("collapse") or {}).get("share")
    if (result.get("collapse") or {}).get("episodes"):
        parts.append("collapse" + ("" if share is None else f" {share:.0%} of the time"))
    return " · ".join(parts)


def run_bench_brief(run: RunSummary) -> str | None:
    """``bench_brief`` of the run's newest bench (None without one): the History tab's line per run."""
    return bench_brief((run.bench or {}).get("result") or {})
