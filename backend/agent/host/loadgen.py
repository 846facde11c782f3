"""The bench's load generator: streaming requests to the SGLang server on the host's loopback, timed as a client.

``bench.start`` runs it as a detached job of kind ``bench`` (``agent worker loadgen INPUT``), so a bench
outlives the connection like a server does. Each request is a streaming ``/generate`` with ``ignore_eos``;
from its chunks come the time to the first token, the decode rate after it (the single-stream number the
82 tok/s baseline is), and the accept length ``completion_tokens / spec_verify_ct`` (1.0 without
speculation) — the quantities of SGLang's own ``sglang.test.send_one``, so the two can be cross-checked.
Where the server returns a per-request histogram (``spec_accept_histogram`` 0.5.9-0.5.20,
``spec_correct_drafts_histogram`` 0.5.12+) the result also carries the per-position acceptance summed over the
requests, and a DSPARK server's cap and block accept lengths (``dspark``); every release's meta_info keys are
read (``shared/acceptance.py``).

Prompts (``prompts.py``): the built-in set or per-domain sets from Hub datasets, through the target's chat template
unless asked for raw ones; each request carries its domain. A request whose completion looped
(``shared/degenerate.py``) is flagged and left out of the figures (``degenerate`` lists them); ``domains`` has
accept length and tok/s per domain.

The job's ``events.jsonl`` gets a ``progress`` event per finished request and ends with one
``{"event": "result", ...}`` holding the summary, which the run history reads back later. Stdlib only,
Python 3.8+.
"""

from __future__ import annotations

import json
import os
import random
import string
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib import error as urlerror

from . import loopback, prompts
from .jobs import start_job, worker_argv
from .keyfiles import key_file_of, read_key
from .registry import AgentError, Context, method
from .servers import listen_of, server_on
from .shared import acceptance, degenerate, measured_points
from .shared.quantiles import quantiles

# A small built-in prompt set: varied enough that a drafter's acceptance is not judged on one kind of text.
PROMPTS = [
    "Human: Give me a fully functional FastAPI server. Show the python code.\n\nAssistant:",
    "Explain how speculative decoding speeds up large language model inference, step by step.",
    "Write a short story about a lighthouse keeper who discovers a message in a bottle.",
    "Summarise the causes and consequences of the 1929 stock market crash in five paragraphs.",
    "Translate into French and explain the grammar: 'The children who were playing outside came home late.'",
    "List ten practical tips for reducing GPU memory use when serving a mixture-of-experts model.",
    "Write a Python function that merges overlapping intervals, with tests and a complexity analysis.",
    "Describe the water cycle to a ten-year-old, then again to a university hydrology student.",
]
PROMPT_DOMAINS = ["code", "chat", "chat", "chat", "chat", "chat", "code", "chat"]  # each built-in prompt's
REQUEST_TIMEOUT_S = 300.0  # per socket read: a stream that goes silent this long has failed
INPUTS = "bench-inputs"


class BenchError(Exception):
    """The bench cannot run or no request succeeded; the message says why."""


def _base_url(port: int, host: str = "127.0.0.1") -> str:
    return "http://%s:%d" % (host, port)


def health(port: int, timeout: float = 5.0, host: str = "127.0.0.1") -> Optional[int]:
    """The server's /health status, or None when nothing answers on the port."""
    try:
        with loopback.urlopen(_base_url(port, host) + "/health", timeout=timeout) as resp:
            return resp.status
    except urlerror.HTTPError as exc:
        return exc.code
    except (urlerror.URLError, OSError):
        return None


def one_request(
    port: int,
    prompt: str,
    max_tokens: int,
    timeout: float = REQUEST_TIMEOUT_S,
    key: Optional[str] = None,
    host: str = "127.0.0.1",
) -> Dict[str, Any]:
    """Stream one ``/generate`` and time it; ``{"error": ...}`` instead of the figures when it fails. ``key``
    and ``host``: the server's API key and address (see ``servers.reach``)."""
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True},
        "stream": True,
    }
    headers = {"Content-Type": "application/json", **loopback.bearer(key)}
    req = loopback.request(_base_url(port, host) + "/generate", json.dumps(body).encode(), headers)
    t0 = time.perf_counter()
    first = last = None  # (time, completion tokens so far)
    gaps: List[List[float]] = []  # [seconds per token, tokens] of each chunk after the first
    meta: Dict[str, Any] = {}
    text = ""
    try:
        with loopback.urlopen(req, timeout=timeout) as resp:
            for raw in resp:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                now = time.perf_counter()
                chunk = json.loads(payload.decode("utf-8", "replace"))
                if "error" in chunk:
                    return {"error": "the server answered with an error: %s" % chunk["error"]}
                meta = chunk.get("meta_info") or {}
                text = chunk.get("text") if isinstance(chunk.get("text"), str) else text  # SGLang sends it whole
                tokens = meta.get("completion_tokens")
                if tokens is None:
                    tokens = len(chunk.get("output_ids") or [])
                if tokens and first is None:
                    first = (now, tokens)
                elif first is not None and last is not None and tokens > last[1]:
                    # A chunk of n tokens counts n gaps of interval/n: SGLang's own inter-token histogram rule.
                    gaps.append([(now - last[0]) / (tokens - last[1]), tokens - last[1]])
                last = (now, tokens)
    except urlerror.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:200]
        return {"error": "HTTP %d from /generate: %s" % (exc.code, detail)}
    except (urlerror.URLError, OSError, ValueError) as exc:
        return {"error": "/generate failed: %s" % getattr(exc, "reason", exc)}
    if first is None or last is None:
        return {"error": "/generate streamed no tokens"}
    latency = last[0] - t0
    decode_s = last[0] - first[0]
    looped = degenerate.repetition(text)
    spec = acceptance.request_figures(meta)  # whichever release's keys (0.5.6 to 0.5.23)
    verify_ct = spec["verify_ct"]
    tokens = last[1]
    return {
        "tokens": tokens,
        "ttft_ms": (first[0] - t0) * 1000.0,
        # Tokens after the first over the time after it: prefill and queueing stay out of the decode rate.
        "decode_tok_s": (tokens - first[1]) / decode_s if tokens > first[1] and decode_s > 0 else None,
        "e2e_tok_s": tokens / latency if latency > 0 else None,  # send_one's "speed"
        "latency_s": latency,
        "e2e_ms": latency * 1000.0,
        # The request's mean inter-token latency (TPOT): what an ITL SLO is judged on per request.
        "itl_ms": decode_s * 1000.0 / (tokens - first[1]) if tokens > first[1] else None,
        "itl_gaps": gaps,
        "spec_verify_ct": verify_ct,
        "accept_len": tokens / verify_ct if verify_ct else 1.0,  # send_one's rule: 1.0 without speculation
        "spec_histogram": spec["histogram"],  # SGLang 0.5.9+
        # Drafts proposed (0.5.6+): verifies × the startup's draft tokens − 1, under adaptive too (the tokenizer
        # knows the startup config only): below verifies × steps only where fewer positions were drafted.
        "spec_proposed": spec["proposed"],
        "spec_correct": spec["correct"],
        "cap_len": spec["cap_len"],  # DSPARK (0.5.16+), ragged verify: the mean verify window per pass
        "block_accept_len": spec["block_accept_len"],  # DSPARK cap-accept: the uncapped block accept length
        "cap_histogram": spec["cap_histogram"],
        "repetition": round(looped, 3),  # the share of its word 4-grams seen before in it
        "degenerate": looped > degenerate.THRESHOLD,
    }


def _mean(values: List[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99))


def percentiles(values: List[float]) -> Dict[str, Optional[float]]:
    """p50-p99 of ``values`` by the one percentile rule (``shared/quantiles.py``)."""
    return dict(zip([key for key, _ in QUANTILES], quantiles(values, [q for _, q in QUANTILES])))


def latency_figures(ok: List[Dict[str, Any]]) -> Dict[str, Dict[str, Optional[float]]]:
    """TTFT and end-to-end percentiles over the requests, inter-token percentiles over every token gap (ms)."""
    itl: List[float] = []
    for r in ok:
        for per_token, n in r.get("itl_gaps") or ():
            itl.extend([per_token * 1000.0] * int(n))
    return {
        "ttft_ms": percentiles([r["ttft_ms"] for r in ok]),
        "itl_ms": percentiles(itl),
        "e2e_ms": percentiles([r["e2e_ms"] for r in ok if r.get("e2e_ms") is not None]),
    }


def _figures(ok: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Accept length (tokens over verifies) and mean decode tok/s of some requests."""
    speculative = [r for r in ok if r.get("spec_verify_ct")]
    accept = (
        sum(r["tokens"] for r in speculative) / sum(r["spec_verify_ct"] for r in speculative) if speculative else 1.0
    )
    return {"tok_s": _mean([r["decode_tok_s"] for r in ok if r.get("decode_tok_s") is not None]), "accept_len": accept}


def by_domain(ok: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """``{domain: {"tok_s", "accept_len", "requests"}}`` over the requests that did not loop."""
    out: Dict[str, Dict[str, Any]] = {}
    for name in sorted({r.get("domain") or "chat" for r in ok}):
        mine = [r for r in ok if (r.get("domain") or "chat") == name]
        out[name] = dict(_figures(mine), requests=len(mine))
    return out


def summarize(results: List[Dict[str, Any]], wall_s: float) -> Dict[str, Any]:
    """The bench's figures over the requests that succeeded and did not loop (BenchError when none
    succeeded); when every one looped, over those, said in ``all_degenerate``."""
    succeeded = [r for r in results if "error" not in r]
    if not succeeded:
        reason = results[0]["error"] if results else "no requests were sent"
        raise BenchError("no request succeeded: %s" % reason)
    looped = [r for r in succeeded if r.get("degenerate")]
    ok = [r for r in succeeded if not r.get("degenerate")] or succeeded
    tokens = sum(r["tokens"] for r in succeeded)
    speculative = [r for r in succeeded if r["spec_verify_ct"]]
    figures = _figures(ok)
    tok_s, accept = figures["tok_s"], figures["accept_len"]
    latency = latency_figures(succeeded)
    for r in results:
        r.pop("itl_gaps", None)  # the percentiles hold them; the per-request record stays small
    return {
        "tok_s": tok_s,
        "accept_len": accept,
        "cycle_ms": 1000.0 * accept / tok_s if tok_s else None,
        "ttft_ms": _mean([r["ttft_ms"] for r in succeeded]),
        "requests": len(ok),
        "failed": len(results) - len(succeeded),
        "degenerate": [r.get("index", i) for i, r in enumerate(succeeded) if r.get("degenerate")],
        "all_degenerate": len(looped) == len(succeeded),
        "domains": by_domain(ok),
        "tokens": tokens,
        "total_tok_s": tokens / wall_s if wall_s > 0 else None,
        "e2e_tok_s": _mean([r["e2e_tok_s"] for r in succeeded if r["e2e_tok_s"] is not None]),
        "speculative": bool(speculative),
        "acceptance": acceptance.summarize(
            [
                {"spec_verify_ct": r["spec_verify_ct"], "spec_correct_drafts_histogram": r.get("spec_histogram")}
                for r in ok
            ]
        ),
        "dspark": acceptance.dspark_summary(ok),
        "duration_s": wall_s,
        "latency": latency,
        "per_request": results,
    }


def run(
    port: int,
    prompts: List[Any],
    requests: int,
    max_tokens: int,
    concurrency: int,
    on_request: Optional[Callable[[int, Dict[str, Any]], None]] = None,
    key: Optional[str] = None,
    host: str = "127.0.0.1",
) -> Dict[str, Any]:
    """Send ``requests`` streaming requests, ``concurrency`` at a time, cycling through ``prompts`` (strings, or
    ``{"text", "domain"}``; ``key`` and ``host``: the server's API key and address)."""
    status = health(port, host=host)
    if status != 200:
        what = "nothing answers" if status is None else "/health answers %d" % status
        raise BenchError("the server on port %d is not ready (%s); wait until it is, then bench again" % (port, what))
    results: List[Optional[Dict[str, Any]]] = [None] * requests
    lock = threading.Lock()
    todo = list(range(requests))

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            prompt = prompts[i % len(prompts)]
            text, domain = (prompt["text"], prompt.get("domain")) if isinstance(prompt, dict) else (prompt, None)
            result = one_request(port, text, max_tokens, key=key, host=host)
            result["index"] = i
            result["prompt"] = i % len(prompts)  # a prompt's requests are one sample of acceptance, not several
            if domain:
                result["domain"] = domain
            with lock:
                results[i] = result
                if on_request is not None:
                    on_request(i, result)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(concurrency, requests)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out = summarize([r for r in results if r is not None], time.perf_counter() - t0)
    times = step_times(port, concurrency, key, host)
    if times:
        out["step_times_ms"] = times
    return out


def step_times(port: int, batch: int, key: Optional[str] = None, host: str = "127.0.0.1") -> List[float]:
    """SGLang's own step times at ``batch`` running requests (``step_time_dict`` of ``/server_info``, kept
    when the server runs with ``SGLANG_RECORD_STEP_TIME=1``), in ms; empty when it keeps none."""
    try:
        req = loopback.request(_base_url(port, host) + "/server_info", headers=loopback.bearer(key))
        with loopback.urlopen(req, timeout=10.0) as resp:
            info = json.loads(resp.read().decode("utf-8", "replace"))
    except (urlerror.URLError, OSError, ValueError):
        return []
    return measured_points.step_times_ms(info, batch) if isinstance(info, dict) else []


# --- the job --------------------------------------------------------------------------------------------


def _check(params: Dict[str, Any]) -> Dict[str, Any]:
    """Validated bench parameters (AgentError on bad input)."""
    out: Dict[str, Any] = {}
    for key, low in (("port", 1), ("requests", 1), ("max_tokens", 1), ("concurrency", 1)):
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise AgentError("bench %s must be a whole number of at least %d, got %r" % (key, low, value), "invalid")
        out[key] = value
    prompts = params.get("prompts")
    if prompts is not None and (not isinstance(prompts, list) or not all(isinstance(p, str) and p for p in prompts)):
        raise AgentError("bench prompts must be a list of non-empty strings", "invalid")
    domains = params.get("domains")
    if domains is not None and (not isinstance(domains, dict) or not domains):
        raise AgentError("bench domains must map names to {dataset, file}", "invalid")
    out["prompts"] = prompts
    out["domains"] = domains
    out["raw"] = bool(params.get("raw"))
    out["model_path"] = params.get("model_path")
    out["endpoint"] = params.get("endpoint")
    out["profile"] = params.get("profile")
    out["server_job"] = params.get("server_job")
    return out


def load_prompts(model_path: Optional[str]) -> Tuple[List[str], Dict[str, Any]]:
    """The built-in prompts as a bench sends them, through the target's chat template where it has one, and what
    was done to them (``bench_prompts``): what a sweep's warm-up and the profiler's load send, so the server sees
    the text the bench measures. AgentError for a template that cannot render (the bench is refused for it too)."""
    built, info = bench_prompts(
        {"prompts": None, "domains": None, "raw": False, "model_path": model_path, "endpoint": None}
    )
    return [p["text"] for p in built], info


def bench_prompts(checked: Dict[str, Any]) -> Tuple[List[Dict[str, str]], Dict[str, Any]]:
    """The bench's prompts and what was done to them (``prompts.build``): the operator's own prompts as they are
    (the chat template applied unless raw), else the domains' sets, else the built-in set."""
    if checked["prompts"] is not None:
        builtin = [("custom", p) for p in checked["prompts"]]
    else:
        builtin = list(zip(PROMPT_DOMAINS, PROMPTS))
    return prompts.build(builtin, checked["domains"], checked["raw"], checked["model_path"], checked["endpoint"])


@method("bench.start")
def start(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Start a bench job against the server on ``port``; returns the job's description."""
    checked = _check(params)
    # The input (prompts may be long) goes through a file: argv has a per-argument size limit.
    folder = os.path.join(ctx.state_dir, INPUTS)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    token = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(12))
    path = os.path.join(folder, token + ".json")
    server = server_on(ctx.state_dir, checked["port"])  # a server, or a fleet's router
    checked["key_file"], checked["address"] = key_file_of(server), listen_of(server)  # the key's file, never it
    custom = checked["prompts"]
    # Built here, before the job: a set that cannot be fetched or a template that cannot render is refused now.
    checked["prompts"], checked["prompt_info"] = bench_prompts(checked)
    with open(path, "w") as f:
        json.dump(checked, f)
    args = {k: checked[k] for k in ("port", "profile", "server_job", "requests", "max_tokens", "concurrency")}
    sets = sorted(set(checked["prompt_info"]["prompt_sets"].values()))
    args["prompts"] = "%d custom" % len(custom) if custom else ", ".join(sets)
    args["chat_template"] = checked["prompt_info"]["chat_template"]
    return start_job(ctx.state_dir, "bench", worker_argv("loadgen", path), args, {})


class _Events:
    """Appends events to the job's events.jsonl, one JSON object per line."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, event: Dict[str, Any], durable: bool = False) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(event) + "\n")
            f.flush()
            if durable:
                os.fsync(f.fileno())


def worker_main(argv: List[str]) -> int:
    """The job's body: read the input, run the bench, record progress and the result."""
    job_dir = os.environ["SPECDECK_JOB_DIR"]
    path = os.path.join(job_dir, "input.json")
    os.replace(argv[0], path)  # the input stays with the job it describes
    with open(path) as f:
        params = json.load(f)
    events = _Events(os.path.join(job_dir, "events.jsonl"))
    total = params["requests"]
    finished = [0]

    def on_request(i: int, result: Dict[str, Any]) -> None:
        finished[0] += 1
        if "error" in result:
            print("request %d/%d failed: %s" % (i + 1, total, result["error"]), flush=True)
        else:
            decode = result["decode_tok_s"]
            print(
                "request %d/%d: %d tokens, ttft %.0f ms, decode %s tok/s, accept length %.2f"
                % (
                    i + 1,
                    total,
                    result["tokens"],
                    result["ttft_ms"],
                    "-" if decode is None else "%.1f" % decode,
                    result["accept_len"],
                ),
                flush=True,
            )
        events.write({"event": "progress", "done": finished[0], "total": total, "t": time.time()})

    started = time.time()
    print(
        "bench: %d requests of %d tokens, %d at a time, against %s:%d"
        % (total, params["max_tokens"], params["concurrency"], params.get("address") or "127.0.0.1", params["port"]),
        flush=True,
    )
    try:
        key = read_key(params.get("key_file"))
        result = run(
            params["port"],
            params["prompts"],
            total,
            params["max_tokens"],
            params["concurrency"],
            on_request,
            key,
            params.get("address") or "127.0.0.1",
        )
    except BenchError as exc:
        print("bench failed: %s" % exc, flush=True)
        events.write({"event": "failed", "reason": str(exc), "t": time.time()}, durable=True)
        return 1
    record = {"event": "result", "started": started, "ended": time.time()}
    record.update({k: params.get(k) for k in ("port", "profile", "server_job", "max_tokens", "concurrency")})
    record.update(params.get("prompt_info") or {})
    record.update(result)
    events.write(record, durable=True)
    print(
        "bench done: %s tok/s per stream, accept length %.2f, ttft %.0f ms"
        % ("-" if result["tok_s"] is None else "%.1f" % result["tok_s"], result["accept_len"], result["ttft_ms"]),
        flush=True,
    )
    return 0
