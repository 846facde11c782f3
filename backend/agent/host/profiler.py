"""SGLang's own torch profiler on the running server, as a job: start it, keep it busy, read the traces here.

``profile.start`` runs a detached job of kind ``profile`` (``agent worker profiler INPUT``) that POSTs the body
the client built for the server's release to ``/start_profile`` (``output_dir`` is a fresh folder under the
workdir's ``traces/``), keeps the server decoding with streams of its own when it has no load (``load``), waits
until every rank's ``.trace.json.gz`` is written whole, reads them where they lie with the streaming cycle reader
and ends with one ``{"event": "result", "anatomy": ...}``: the summary crosses the link, the traces (tens to
hundreds of MB) stay on the host for Perfetto. A job that ends before the traces came sends ``/stop_profile``,
so the server is never left profiling. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from typing import TypeGuard  # Python 3.10+: for the checker only
from urllib import error as urlerror

from . import jobs, loadgen, loopback
from .keyfiles import key_file_of, read_key
from .registry import AgentError, Context, method
from .servers import listen_of, server_on
from .shared.chrome_trace import TraceError
from .shared.cycle_anatomy import anatomy

KIND = "profile"
INPUTS = "profile-inputs"
TRACES = "traces"  # under the workdir: <workdir>/traces/<stamp>/
POLL_S = 0.2
SETTLED_S = 1.0  # a trace file whose size has not moved this long is read (a cut-short one is waited for again)
DEFAULT_TIMEOUT_S = 600.0
LOAD_TOKENS = 256
TRACE_NAME = re.compile(r"\.trace\.json(\.gz)?$")
TP_RANK = re.compile(r"-TP-(\d+)")


def trace_root(state_dir: str) -> str:
    """``<workdir>/traces``: the state dir is ``<workdir>/.specdeck``."""
    return os.path.join(os.path.dirname(os.path.abspath(state_dir)), TRACES)


def _whole(value: Any, low: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check(params: Dict[str, Any]) -> Dict[str, Any]:
    """Validated profile parameters (AgentError on bad input)."""
    port = params.get("port")
    if not _whole(port, 1) or port > 65535:
        raise AgentError("profile port must be a TCP port, got %r" % (port,), "invalid")
    body = params.get("body")
    if not isinstance(body, dict):
        raise AgentError("profile body must be the /start_profile request body (an object)", "invalid")
    ranks = params.get("ranks")
    if ranks is not None and not (isinstance(ranks, list) and ranks and all(_whole(r, 0) for r in ranks)):
        raise AgentError("profile ranks must be a list of TP ranks (0, 1, ...)", "invalid")
    load = params.get("load")
    if load is not None and not _whole(load, 0):
        raise AgentError("profile load must be a number of streams (0: only the server's own load)", "invalid")
    expect = params.get("expect")
    if expect is not None and not _whole(expect, 1):
        raise AgentError("profile expect must be the number of trace files (ranks), got %r" % (expect,), "invalid")
    timeout = params.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise AgentError("profile timeout_s must be a positive number of seconds", "invalid")
    return {
        "port": port,
        "body": body,
        "ranks": ranks,
        "expect": expect,
        "load": load,
        "timeout_s": float(timeout),
        "server_job": params.get("server_job"),
        "model_path": params.get("model_path"),
    }


@method("profile.start")
def start(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Start a profile job against the server on ``port``; returns the job's description (its args hold the
    trace folder)."""
    checked = _check(params)
    stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + "".join(random.choice(string.digits) for _ in range(4))
    checked["trace_dir"] = os.path.join(trace_root(ctx.state_dir), stamp)
    try:
        os.makedirs(checked["trace_dir"], mode=0o755)
    except OSError as exc:
        raise AgentError(
            "cannot make the trace folder %s: %s" % (checked["trace_dir"], exc.strerror), "permission"
        ) from None
    server = server_on(ctx.state_dir, checked["port"])
    checked["key_file"], checked["address"] = key_file_of(server), listen_of(server)  # the key's file, never it
    # The load's prompts as the bench sends them (a template that cannot render refuses the profile now).
    checked["load_prompts"], info = loadgen.load_prompts(checked["model_path"]) if checked["load"] != 0 else ([], {})
    checked["load_note"] = info.get("chat_template_note")
    folder = os.path.join(ctx.state_dir, INPUTS)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, stamp + ".json")
    with open(path, "w") as f:
        json.dump(checked, f)
    args = {k: checked[k] for k in ("port", "server_job", "trace_dir", "ranks", "load")}
    args["steps"] = checked["body"].get("num_steps")
    args["chat_template"] = info.get("chat_template")  # the load's prompts, as a bench job's args say
    return jobs.start_job(ctx.state_dir, KIND, jobs.worker_argv("profiler", path), args, {})


# --- the job's body --------------------------------------------------------------------------------------------


class ProfileError(Exception):
    """The profile could not be taken; the message says why and what to do."""


class Server(object):
    """Where our requests reach the server and the API key they send (``servers.reach``'s, read in the job)."""

    def __init__(self, port: int, address: str, key: Optional[str]) -> None:
        self.port, self.address, self.key = port, address, key

    def url(self, path: str) -> str:
        return "http://%s:%d%s" % (self.address, self.port, path)


def _post(server: Server, path: str, body: Optional[Dict[str, Any]], timeout: float = 30.0) -> str:
    data = json.dumps(body).encode() if body is not None else b""
    headers = {"Content-Type": "application/json", **loopback.bearer(server.key)}
    req = loopback.request(server.url(path), data, headers, method="POST")
    try:
        with loopback.urlopen(req, timeout=timeout) as resp:
            return resp.read().decode("utf-8", "replace")
    except urlerror.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace").strip()[:300]
        if exc.code in (401, 403):
            raise ProfileError("the server refused %s (%d): it wants its admin API key" % (path, exc.code)) from None
        raise ProfileError("the server answered %s with %d: %s" % (path, exc.code, text or exc.reason)) from None
    except (urlerror.URLError, OSError) as exc:
        raise ProfileError("the server on port %d did not answer %s (%s)" % (server.port, path, exc)) from None


def running_requests(server: Server) -> Optional[float]:
    """The server's running requests from its /metrics (None without metrics)."""
    req = loopback.request(server.url("/metrics"), headers=loopback.bearer(server.key))
    try:
        with loopback.urlopen(req, timeout=5.0) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urlerror.URLError, OSError):
        return None
    values = []
    for line in text.splitlines():
        if line.startswith("sglang:num_running_reqs") and " " in line:
            try:
                values.append(float(line.rsplit(" ", 1)[1]))
            except ValueError:
                continue
    return sum(values) if values else None


class _Load:
    """``streams`` streaming requests at a time, one after another, until stopped: decode steps to profile.
    ``prompts``: the bench's (``loadgen.load_prompts``)."""

    def __init__(self, server: Server, streams: int, prompts: List[str]) -> None:
        self.server, self.prompts = server, prompts
        self.stop = threading.Event()
        self.sent = 0
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(streams)]
        for thread in self.threads:
            thread.start()

    def _run(self, i: int) -> None:
        while not self.stop.is_set():
            prompt = self.prompts[(i + self.sent) % len(self.prompts)]
            server = self.server
            loadgen.one_request(server.port, prompt, LOAD_TOKENS, key=server.key, host=server.address)
            self.sent += 1

    def end(self) -> None:
        self.stop.set()  # a request in flight finishes on its own (daemon threads: the job does not wait)


def rank_of(name: str) -> Optional[int]:
    found = TP_RANK.search(name)
    return int(found.group(1)) if found else None


def wait_traces(
    trace_dir: str,
    expect: Optional[int],
    ranks: Optional[List[int]],
    deadline: float,
    on_wait: Optional[Callable[[int, int], None]] = None,
) -> List[str]:
    """The trace files in ``trace_dir`` once they are all written: ``expect`` of them (or as many as appear), each
    of a size that settled. ``ranks`` picks TP ranks. ProfileError at ``deadline``."""
    sizes: Dict[str, Tuple[int, float]] = {}
    want = len(ranks) if ranks is not None else expect
    while True:
        now = time.time()
        names = sorted(n for n in os.listdir(trace_dir) if TRACE_NAME.search(n))
        if ranks is not None:
            names = [n for n in names if rank_of(n) in ranks]
        settled = []
        for name in names:
            size = os.path.getsize(os.path.join(trace_dir, name))
            seen = sizes.get(name)
            if seen is None or seen[0] != size:
                sizes[name] = (size, now)
            elif now - seen[1] >= SETTLED_S and size > 0:
                settled.append(name)
        if names and len(settled) == len(names) and (want is None or len(names) >= want):
            return [os.path.join(trace_dir, n) for n in names]
        if now > deadline:
            got = "no trace file" if not names else "%d of %d trace files whole" % (len(settled), want or len(names))
            raise ProfileError(
                "the profiler wrote %s in %s in time: was the server decoding? (profile under load, or give it "
                "longer)" % (got, trace_dir)
            )
        if on_wait is not None:
            on_wait(len(names), len(settled))
        time.sleep(POLL_S)


def read_when_whole(paths: List[str], params: Dict[str, Any], deadline: float) -> Dict[str, Any]:
    """The anatomy of ``paths``; a file still being written (cut short) is waited for again until ``deadline``."""
    while True:
        try:
            return anatomy(paths)
        except TraceError as exc:
            if "cut short" not in str(exc) or time.time() > deadline:
                raise
        time.sleep(SETTLED_S)
        paths = wait_traces(params["trace_dir"], params.get("expect"), params.get("ranks"), deadline)


class _Run:
    """One profile: the load it brought, whether the server is profiling, and the job's events."""

    def __init__(self, params: Dict[str, Any], job_dir: str) -> None:
        self.params = params
        self.server = Server(params["port"], params.get("address") or "127.0.0.1", read_key(params.get("key_file")))
        self.events = loadgen._Events(os.path.join(job_dir, "events.jsonl"))
        self.deadline = time.time() + params["timeout_s"]
        self.load: Optional[_Load] = None
        self.profiling = False

    def progress(self, stage: str, **extra: Any) -> None:
        self.events.write(dict({"event": "progress", "stage": stage, "t": time.time()}, **extra))

    def capture(self) -> List[str]:
        """Start the profiler (with our own load first when the server has none) and wait for its traces."""
        params = self.params
        body = dict(params["body"], output_dir=params["trace_dir"])
        running = running_requests(self.server)
        streams = params["load"]
        if streams is None:  # auto: one stream of our own when the server has nothing running
            streams = 0 if running else 1
        if streams:
            # before the start: a release whose /start_profile answers once its steps ran needs them decoding
            print("profile: %d stream(s) of %d tokens keep the server decoding" % (streams, LOAD_TOKENS), flush=True)
            print("profile: the bench's built-in prompts, %s" % params["load_note"], flush=True)
            self.load = _Load(self.server, streams, params["load_prompts"])
        print("profile: POST /start_profile %s" % json.dumps(body), flush=True)
        answer = _post(self.server, "/start_profile", body, timeout=max(1.0, self.deadline - time.time()))
        self.profiling = True  # ours to stop from here: a refused start may be someone else's profile running
        print("server: %s" % answer.strip(), flush=True)
        self.progress("profiling", running=running, load=streams, trace_dir=params["trace_dir"])

        def on_wait(seen: int, whole: int) -> None:
            if seen:
                self.progress("writing", files=seen, whole=whole)

        paths = wait_traces(params["trace_dir"], params.get("expect"), params.get("ranks"), self.deadline, on_wait)
        self.profiling = False
        return paths

    def finish(self) -> None:
        """Stop our load, and the server's profiler if its traces never came."""
        if self.load is not None:
            self.load.end()
        if self.profiling:
            try:
                _post(self.server, "/stop_profile", None, timeout=10.0)
            except ProfileError as exc:
                print("profile: /stop_profile: %s" % exc, flush=True)


def worker_main(argv: List[str]) -> int:
    """The job's body: start the profiler, bring load if the server has none, wait, read, record the result."""
    jobs.raise_on_sigterm()
    job_dir = os.environ["SPECDECK_JOB_DIR"]
    path = os.path.join(job_dir, "input.json")
    os.replace(argv[0], path)
    with open(path) as f:
        params = json.load(f)
    run = _Run(params, job_dir)
    try:
        paths = run.capture()
        run.finish()
        run.progress("reading", files=len(paths), bytes=sum(os.path.getsize(p) for p in paths))
        print("profile: reading %s" % ", ".join(os.path.basename(p) for p in paths), flush=True)
        t0 = time.time()
        result = read_when_whole(paths, params, run.deadline)
        print("profile: read in %.1f s" % (time.time() - t0), flush=True)
    except (ProfileError, TraceError) as exc:
        print("profile failed: %s" % exc, flush=True)
        run.events.write({"event": "failed", "reason": str(exc), "t": time.time()}, durable=True)
        return 1
    except jobs.Cancelled:
        print("profile cancelled", flush=True)
        return 1
    finally:
        run.finish()
    record = {"event": "result", "anatomy": result, "trace_dir": params["trace_dir"], "t": time.time()}
    run.events.write(record, durable=True)
    print("profile done: %d cycles of %.2f ms" % (result["cycles"], result["cycle_ms"]), flush=True)
    return 0
