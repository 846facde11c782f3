"""Sweeps: restart the server at each speculative config, bench it, and find the fastest; a detached job.

``sweep.start`` runs ``agent worker sweep INPUT`` as a job of kind ``sweep``, so a sweep survives the panel
and the connection like a server does. For each point (steps, topk, draft tokens) it stops the server, starts
the point's command (built by the client from the profile) as an ordinary serve job tagged with the sweep,
waits until it is ready (the profile's timeout), sends one short warm-up request, runs an ordinary bench job
against it and records the result; so every point is a run and a bench in history. A point that crashes or
never gets ready is recorded with its reason and the sweep goes on. At the end the server is left as found:
the one that was running is started again (its command came with the input), or none. SIGTERM (``jobs.cancel``)
stops the server the sweep started and ends the sweep.

``levels``: the concurrencies each point is benched at (default one stream), each a bench job of its own; the
point's record carries each level's figures (``levels``), its top-level ones the first level's. ``ab``: the
adaptive A/B (``backend.tune.adaptive_ab.ab_start``): two points, SGLang's adaptive ladder and the best fixed step
count, benched at the concurrencies the proposal expects figures for; what was expected travels with the job
(``ab`` in its args and its done event) so any client that follows it, or a later one, can judge it.

``smart``: the profile's own point first, then as the advisor ranks them until its stop rule holds
(``shared/sweep_order.py``, which the client's fleet sweep shares). ``fed``: the points come one at a time from the
client (``sweep.feed``: a point's index, or the end), which spreads one grid over several hosts; the sweep
waits ``feed_idle_s`` at most for the next, then ends as done (its client is gone), the host left as found.

Events (``events.jsonl``): ``{"event": "phase", "index", "phase", ...}`` as a point moves through stopping,
starting (with SGLang's startup phase), warming up and benching; ``point`` when one is measured (or
``"failed": reason``); ``plan`` with the order (smart sweeps re-plan after each point); then ``{"event":
"done", "sweep", "points": [{"steps", "topk", "draft_tokens", "tok_s", "accept_len", "cycle_ms", "run"}],
"best", "restarts", "grid", "saved", "stopped_early"}`` (smart: null, or the measured best and the remaining
points' predicted upper ends that it beat) or ``cancelled``. ``resume`` names an earlier sweep whose measured
points are taken over instead of run again. The profile's env reaches the job through its environment only
(``SPECDECK_SWEEP_ENV``), never the disk. Stdlib only, Python 3.8+.

Leaving the host as found holds in every ending: done, a crashed point, an error, cancel (the cancelled sweep
waits a little for its server to go, then starts the found one), and a sweep killed outright: then
``sweep.unrestored`` hands the job to the next client that attaches (which stops the sweep's leftover server and
starts the found profile itself, env and all). Whoever restores first claims ``restored.json`` in the sweep's
folder, so the host is never restored twice.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from . import jobs, loadgen, prompts, serve, servers
from .registry import AgentError, Context, method
from .shared.server_states import STATES as SERVER_STATES
from .shared.sweep_busy import busy_text
from .shared.sweep_order import Order
from .watch import Watch

KIND = "sweep"
ENV_KEY = "SPECDECK_SWEEP_ENV"
BENCH_TIMEOUT_S = 6 * 3600.0  # a bench that hangs this long is given up on (its requests time out sooner)
WARMUP_TOKENS = 16
STOP_TIMEOUT_S = 30.0
REQUEST_KEYS = ("spec_histogram", "decode_tok_s", "spec_verify_ct", "spec_proposed", "prompt")
INPUTS = "sweep-inputs"
RESTORED = "restored.json"  # in the sweep's folder: claimed once by whoever leaves the host as found
CANCEL_WAIT_S = 8.0  # a cancelled sweep waits this long for its server to go before restoring (cancel waits 15)
ORDERS = "orders.jsonl"  # in a fed sweep's folder: the points its client asked for, then {"end": true}
FEED_IDLE_S = 600.0  # a fed sweep given no next point for this long ends: its client is gone


def _check(params: Dict[str, Any]) -> Dict[str, Any]:
    points = params.get("points")
    if not isinstance(points, list) or not points:
        raise AgentError("a sweep needs at least one point", "invalid")
    for p in points:
        if not isinstance(p, dict) or not isinstance(p.get("argv"), list) or not isinstance(p.get("args"), dict):
            raise AgentError("each sweep point needs argv and args", "invalid")
    for key, low in (("requests", 1), ("max_tokens", 1)):
        value = params.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise AgentError("sweep %s must be a whole number of at least %d, got %r" % (key, low, value), "invalid")
    levels = params.get("levels") or [1]
    if not isinstance(levels, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in levels
    ):
        raise AgentError("sweep levels must be concurrencies of at least 1, got %r" % (levels,), "invalid")
    params["levels"] = sorted(set(levels))
    domains = params.get("domains")
    if domains is not None and (not isinstance(domains, dict) or not domains):
        raise AgentError("sweep domains must map names to {dataset, file}", "invalid")
    return params


def _json_lines(path: str) -> List[Dict[str, Any]]:
    """The objects of a JSON-lines file written as it is read (a torn last line is skipped); [] if absent."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if isinstance(ev, dict):
                    out.append(ev)
    except OSError:
        pass
    return out


def _events_of(state_dir: str, job_id: str) -> List[Dict[str, Any]]:
    return _json_lines(os.path.join(jobs.jobs_root(state_dir), job_id, "events.jsonl"))


@method("sweep.start")
def start(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Start a sweep job; ``resume`` (an earlier sweep's id) takes over its measured points."""
    checked = _check(params)
    root = jobs.jobs_root(ctx.state_dir)
    for name in sorted(os.listdir(root)):
        if name.startswith(KIND + "-"):
            job = jobs.describe(os.path.join(root, name))
            if job.get("kind") == KIND and job["state"] in jobs.ACTIVE:
                raise AgentError(busy_text(name), "busy")
    resume = params.get("resume")
    if resume:
        folder = os.path.join(root, str(resume))
        old = jobs.describe(folder) if "/" not in str(resume) and os.path.isdir(folder) else {}
        if old.get("kind") != KIND:
            raise AgentError("no sweep %s on this host (see `specdeck jobs --kind sweep`)" % resume, "not_found")
        if old["state"] in jobs.ACTIVE:
            raise AgentError("sweep %s is still running; cancel it first or let it finish" % resume, "busy")
    for name, spec in (checked.get("domains") or {}).items():  # fetched now: a set that cannot be read refuses
        prompts.domain_conversations(name, spec, checked.get("endpoint"))  # the sweep, not each point's bench
    env = checked.pop("env", None) or {}
    folder = os.path.join(ctx.state_dir, INPUTS)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, "%d-%d.json" % (os.getpid(), int(time.time() * 1000)))
    with open(path, "w") as f:
        json.dump(checked, f)
    first = checked["points"][0]["args"]
    args = {
        "profile": first.get("profile"),
        "port": first.get("port"),
        "points": len(checked["points"]),
        "smart": bool(checked.get("smart")),
        "fed": bool(checked.get("fed")),
        "resume": resume,
        "ab": params.get("ab"),  # an adaptive A/B: what it expects, for whoever follows it
        "levels": checked["levels"],
        "domains": sorted(checked["domains"]) if checked.get("domains") else None,
        "grid": [
            [p["args"].get("steps"), p["args"].get("topk"), p["args"].get("draft_tokens")] for p in checked["points"]
        ],
    }
    return jobs.start_job(ctx.state_dir, KIND, jobs.worker_argv("sweep", path), args, {ENV_KEY: json.dumps(env)})


def _job_dir(state_dir: str, job_id: str) -> str:
    return os.path.join(jobs.jobs_root(state_dir), job_id)


class Sweep(Order):
    """One sweep's run: the points, what was found, what it started, and its events."""

    def __init__(self, params: Dict[str, Any], state_dir: str, job_dir: str, env: Dict[str, Dict[str, str]]) -> None:
        super().__init__(params)
        self.state_dir, self.job_dir, self.env = state_dir, job_dir, env
        self.id = os.path.basename(job_dir)
        self.events = loadgen._Events(os.path.join(job_dir, "events.jsonl"))
        self.ctx = Context(state_dir, lambda event: None)
        self.started_job: Optional[str] = None  # the serve job of the current point
        self.bench_job: Optional[str] = None
        self.restarts = 0
        self.fed = 0  # the client's orders taken so far

    def emit(self, event: Dict[str, Any]) -> None:
        self.events.write(dict(event, t=round(time.time(), 3)), durable=event.get("event") in ("point", "done"))

    def phase(self, index: int, phase: str, **extra: object) -> None:
        """A point's phase event, with the point's numbers: people name a point by its steps, not its place in
        the grid (a smart sweep measures them out of order)."""
        numbers = {k: self.points[index]["args"].get(k) for k in ("steps", "topk", "draft_tokens", "profile")}
        if self.points[index]["args"].get("adaptive"):
            numbers["adaptive"] = True
        self.emit(dict({"event": "phase", "index": index, "phase": phase}, **numbers, **extra))

    # --- the server ---

    def running_server(self) -> Optional[Dict[str, Any]]:
        """The newest running server job on this host (a GPU host runs one at a time)."""
        running = [j for j in servers.serve_jobs(self.state_dir) if j["state"] in jobs.ACTIVE]
        return running[-1] if running else None

    def stop(self, job_id: str) -> None:
        serve.stop({"job": job_id, "timeout": STOP_TIMEOUT_S}, self.ctx)

    def start_server(
        self,
        argv: List[str],
        args: Dict[str, Any],
        env: Dict[str, str],
        cwd: Optional[str],
        files: Optional[Dict[str, Any]] = None,
    ) -> Dict[str, Any]:
        return serve.start({"argv": argv, "args": args, "env": env, "cwd": cwd, "files": files}, self.ctx)

    def wait_ready(self, index: int, job_id: str, timeout: float) -> Dict[str, Any]:
        """The server's status once it is no longer starting (or ``timeout`` passed); each startup phase it
        enters becomes a phase event. Waits on the host's file events (``serve.wait``), not a timer."""
        phases: List[Optional[str]] = []

        def on_status(status: Dict[str, Any]) -> None:
            if status["state"] == "starting" and status.get("phase") not in phases:
                phases.append(status.get("phase"))
                self.phase(index, "starting", server_phase=phases[-1])

        until = [state for state in SERVER_STATES if state != "starting"]
        return serve.wait({"job": job_id, "until": until, "timeout": timeout}, Context(self.state_dir, on_status))

    # --- one point ---

    def measure(self, index: int, requests: Optional[int] = None) -> Dict[str, Any]:
        """Serve the point (stop, start, wait ready, warm up) and bench it with ``requests`` (default: the
        sweep's) requests."""
        point = self.points[index]
        t0 = time.time()
        current = self.running_server()
        args = dict(point["args"], sweep=self.id, point=index, **self.params.get("tags", {}))
        self.phase(index, "stopping")
        if current is not None:
            self.stop(current["id"])
        self.phase(index, "starting")
        started = self.start_server(
            point["argv"], args, self.env.get("points") or {}, point.get("cwd"), point.get("files")
        )
        self.started_job = started["job"]
        self.restarts += 1
        status = self.wait_ready(index, started["job"], float(self.params.get("ready_timeout") or 1800))
        record = {k: point["args"].get(k) for k in ("steps", "topk", "draft_tokens", "profile")}
        if point["args"].get("adaptive"):
            record["adaptive"] = True
        record.update({"index": index, "run": started["job"], "startup_s": round(time.time() - t0, 2)})
        if self.params.get("host"):  # a fleet sweep's: its records say which host measured them
            record["host"] = self.params["host"]
        if status["state"] != "ready":
            reason = (
                status.get("error") or status.get("reason") or "not ready after %s s" % self.params.get("ready_timeout")
            )
            if status["state"] == "starting":
                self.stop(started["job"])
            return dict(record, failed="the server %s: %s" % (status["state"], reason))
        port = int(point["args"]["port"])
        self.phase(index, "warming up")
        try:  # the bench's first prompt as the bench sends it: through the target's chat template
            warm = loadgen.one_request(port, loadgen.load_prompts(point["args"].get("model"))[0][0], WARMUP_TOKENS)
        except AgentError as exc:
            warm = {"error": str(exc)}
        if "error" in warm:
            return dict(record, failed="warm-up failed: %s" % warm["error"])
        return self.bench(index, record, requests or self.params["requests"], t0)

    def bench(self, index: int, record: Dict[str, Any], requests: int, t0: float) -> Dict[str, Any]:
        """Bench the point's running server with ``requests`` requests at each of the sweep's levels; ``record``
        with what it measured (the first level's figures on top, every level's in ``levels``)."""
        levels: List[int] = self.params.get("levels") or [1]
        measured: List[Dict[str, Any]] = []
        for concurrency in levels:
            extra = {"concurrency": concurrency} if len(levels) > 1 else {}
            self.phase(index, "benching", **extra)
            result = self.bench_at(index, record["run"], max(requests, concurrency), concurrency)
            if result.get("failed"):
                return dict(record, failed=result["failed"], elapsed_s=round(time.time() - t0, 2))
            measured.append(result)
        first = measured[0]
        record = dict(record, bench=first["bench"], elapsed_s=round(time.time() - t0, 2))
        record.update({k: first.get(k) for k in ("tok_s", "accept_len", "cycle_ms", "step_times_ms")})
        record["acceptance"] = first.get("acceptance")
        record["per_request"] = first.get("per_request")
        if len(levels) > 1:
            keys = ("concurrency", "bench", "tok_s", "total_tok_s", "accept_len", "cycle_ms")
            record["levels"] = [{k: m.get(k) for k in keys} for m in measured]
        return record

    def bench_at(self, index: int, run: str, requests: int, concurrency: int) -> Dict[str, Any]:
        """One bench job of the point's running server at ``concurrency``: its figures, or ``failed``."""
        point = self.points[index]
        bench = loadgen.start(
            {
                "port": int(point["args"]["port"]),
                "requests": requests,
                "max_tokens": self.params["max_tokens"],
                "concurrency": concurrency,
                "profile": point["args"].get("profile"),
                "server_job": run,
                "model_path": point["args"].get("model"),  # its chat template renders the prompts
                "domains": self.params.get("domains"),
                "endpoint": self.params.get("endpoint"),
            },
            self.ctx,
        )
        self.bench_job = bench["id"]
        bench_dir = _job_dir(self.state_dir, bench["id"])
        jobs.wait({"id": bench["id"], "timeout": BENCH_TIMEOUT_S}, self.ctx)
        ends = [e for e in _events_of(self.state_dir, bench["id"]) if e.get("event") in ("result", "failed")]
        result = ends[-1] if ends else {}
        if result.get("event") != "result":
            return {"failed": "bench failed: %s" % (result.get("reason") or jobs.describe(bench_dir)["reason"])}
        out = {k: result.get(k) for k in ("tok_s", "total_tok_s", "accept_len", "cycle_ms", "step_times_ms")}
        out.update(concurrency=concurrency, bench=bench["id"], acceptance=result.get("acceptance"))
        # What the advisor resamples: each request's histogram, decode rate, drafted positions and prompt.
        out["per_request"] = [
            {k: r.get(k) for k in REQUEST_KEYS} for r in result.get("per_request") or [] if "error" not in r
        ]
        return out

    def separate(self) -> Optional[Dict[str, Any]]:
        """A smart sweep's last round: where the best is not separated from points that more requests would part
        it from, within the budget (``Order.separation``), each of those points served again and benched with
        that many requests: a run of its own, pooled with the first by step count as the advisor pools a
        sweep's runs (one arithmetic, one figure per point on every surface). Returns what was done, or None."""
        plan = self.separation()
        if plan is None:
            return None
        self.emit(plan)
        restarts = self.restarts
        for index in plan["order"]:
            record = dict(self.measure(index, plan["requests"]), separating=True)
            self.extra.append(record)
            self.emit(dict(record, event="point"))
        return {"requests": plan["requests"], "steps": plan["steps"], "restarts": self.restarts - restarts}

    # --- the whole sweep ---

    def run(self, finished: Dict[int, Dict[str, Any]], found: Optional[Dict[str, Any]]) -> int:
        """Measure the points not ``finished`` (fed: those the client asks for); ``found`` is the server to
        leave running at the end."""
        self.results.update(finished)
        fed = bool(self.params.get("fed"))
        todo = [] if fed else self.first_order(finished)
        self.emit({"event": "plan", "order": todo, "found": found and found["id"], "skipped": sorted(finished)})
        stopped_early = None
        while True:
            requests = None
            if fed:
                order = self.next_fed()
                if order is None:
                    break
                index, requests = order
            else:
                todo, plan, stopped_early = self.reorder(todo)
                if plan is not None:
                    self.emit(plan)
                if not todo:
                    break
                index = todo.pop(0)
            record = self.measure(index, requests)
            if requests:  # the client's separating round: the point measured again, pooled by step count
                record = dict(record, separating=True)
                self.extra.append(record)
            else:
                self.results[index] = record
            self.emit(dict(record, event="point"))
        restarts = self.restarts  # the grid's: a separating round's are its own
        separated = self.separate() if self.params.get("smart") and not fed else None
        self.leave_as_found(found)
        points = [self.results[i] for i in sorted(self.results)] + self.extra
        best = None if self.params.get("ab") else self.best()  # an A/B is judged level by level, by its client
        grid = len(self.points)
        self.emit(
            {
                "event": "done",
                "sweep": self.id,
                "points": points,
                "best": best,
                "restarts": self.restarts,
                "grid": grid,
                "saved": grid - len(finished) - restarts,
                "stopped_early": stopped_early,
                "separated": separated,
                "ab": self.params.get("ab"),
            }
        )
        return 0

    def next_fed(self) -> Optional[Tuple[int, Optional[int]]]:
        """The next point the client asks for (``sweep.feed``) and the requests to bench it with (None: the
        sweep's; a number: its separating round's), waiting for it on the folder's file events; None at its end,
        or when it asked for nothing in ``feed_idle_s`` (it is gone)."""
        path = os.path.join(self.job_dir, ORDERS)
        idle = float(self.params.get("feed_idle_s") or FEED_IDLE_S)
        watch = Watch(jobs.FOLLOW_POLL_S, idle)
        watch.add(self.job_dir)
        until = time.monotonic() + idle
        try:
            while time.monotonic() < until:
                orders = _json_lines(path)
                if len(orders) > self.fed:
                    order = orders[self.fed]
                    self.fed += 1
                    if order.get("end"):
                        return None
                    return int(order["index"]), (int(order["requests"]) if order.get("requests") else None)
                watch.wait(self.ctx)
            return None
        finally:
            watch.close()

    def leave_as_found(self, found: Optional[Dict[str, Any]]) -> None:
        """Stop the last point's server; start the one that was running before, if any (unless another
        restorer claimed the sweep first)."""
        if not jobs.create_json(os.path.join(self.job_dir, RESTORED), {"by": "sweep", "t": time.time()}):
            return
        current = self.running_server()
        if current is not None and current["id"] != (found or {}).get("id"):
            self.stop(current["id"])
        restore = self.params.get("restore")
        if found is not None and restore and self.running_server() is None:
            self.emit({"event": "phase", "phase": "restoring", "profile": restore["args"].get("profile")})
            status = self.start_server(
                restore["argv"], restore["args"], self.env.get("restore") or {}, restore.get("cwd")
            )
            self.emit({"event": "restored", "job": status["job"], "profile": restore["args"].get("profile")})


def worker_main(argv: List[str]) -> int:
    """The job's body: read the input, take over a resumed sweep's points, run the rest."""
    job_dir = os.environ["SPECDECK_JOB_DIR"]
    state_dir = os.path.dirname(os.path.dirname(job_dir))
    path = os.path.join(job_dir, "input.json")
    os.replace(argv[0], path)
    with open(path) as f:
        params = json.load(f)
    env = json.loads(os.environ.pop(ENV_KEY, "") or "{}")
    sweep = Sweep(params, state_dir, job_dir, env)
    finished: Dict[int, Dict[str, Any]] = {}
    found = sweep.running_server()
    if found is not None and (found.get("args") or {}).get("sweep"):
        found = None  # a point of a sweep that died: not what the operator had running
    if params.get("resume"):
        # What the first sweep found is what to leave running; its command is in its input (env from ours).
        found = None
        for ev in _events_of(state_dir, params["resume"]):
            if ev.get("event") == "point" and "index" in ev:
                finished[int(ev["index"])] = {k: v for k, v in ev.items() if k not in ("event", "t")}
            elif ev.get("event") == "plan" and "found" in ev and found is None and ev["found"]:
                found = {"id": ev["found"]}
        try:
            with open(os.path.join(_job_dir(state_dir, params["resume"]), "input.json")) as f:
                old_input = json.load(f)
        except (OSError, ValueError):
            old_input = {}
        params["restore"] = old_input.get("restore") if found is not None else None

    jobs.raise_on_sigterm()
    try:
        return sweep.run(finished, found)
    except AgentError:
        sweep.leave_as_found(found)  # a point that could not even be started: the host as found all the same
        raise
    except jobs.Cancelled:
        # SIGTERM what we started without waiting: the cancel's own deadline leaves no time for a drain.
        for job_id in (sweep.bench_job, sweep.started_job):
            job = jobs.describe(_job_dir(state_dir, job_id)) if job_id else {}
            if job.get("state") in jobs.ACTIVE:
                jobs.write_json(os.path.join(job["dir"], "cancel.json"), {"requested": time.time()})
                try:
                    jobs.send_signal({"id": job_id, "signal": "TERM"}, sweep.ctx)
                except AgentError:
                    pass  # it ended meanwhile
        sweep.emit({"event": "cancelled", "sweep": sweep.id, "stopped": sweep.started_job})
        gone = (
            not sweep.started_job
            or jobs.wait({"id": sweep.started_job, "timeout": CANCEL_WAIT_S}, sweep.ctx)["state"] not in jobs.ACTIVE
        )
        if gone:  # else the port is still held: the next client to attach restores (sweep.unrestored)
            sweep.leave_as_found(found)
        return 143


@method("sweep.feed")
def feed(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Give a running fed sweep its next point (``index``, with ``requests`` for a separating round's second
    measurement) or its end (``end``: it leaves the host as found)."""
    job_id = str(params.get("id") or "")
    folder = _job_dir(ctx.state_dir, job_id)
    job = jobs.describe(folder) if job_id.startswith(KIND + "-") and "/" not in job_id and os.path.isdir(folder) else {}
    if not (job.get("args") or {}).get("fed") or job.get("state") not in jobs.ACTIVE:
        raise AgentError("no running fleet sweep %s on this host" % job_id, "not_found")
    order: Dict[str, Any]
    if params.get("end"):
        order = {"end": True}
    else:
        index = params.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < int(job["args"]["points"]):
            raise AgentError("sweep %s has no point %r" % (job_id, index), "invalid")
        order = {"index": index}
        requests = params.get("requests")  # a separating round's: the point measured again with this many
        if requests is not None:
            if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
                raise AgentError(
                    "sweep %s: requests must be a whole number of at least 1, got %r" % (job_id, requests), "invalid"
                )
            order["requests"] = requests
    with open(os.path.join(folder, ORDERS), "a") as f:
        f.write(json.dumps(order) + "\n")
    return {"ok": True}


@method("sweep.unrestored")
def unrestored(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Claim the newest sweep that ended without leaving the host as found (killed, or cancelled while its
    server drained): ``{"sweep", "profile", "leftover"}``, the profile to start again (None: none ran) and the
    sweep's servers still running, for the caller to stop and start; ``{"sweep": None}`` when nothing is owed.
    A sweep followed by a server the sweep did not start is owed nothing: the operator moved on."""
    root = jobs.jobs_root(ctx.state_dir)
    sweeps = [jobs.describe(d) for d in jobs.job_dirs(root) if os.path.basename(d).startswith(KIND + "-")]
    sweeps = sorted((j for j in sweeps if j.get("kind") == KIND), key=lambda j: j.get("started") or 0)
    nothing: Dict[str, Any] = {"sweep": None, "profile": None, "leftover": []}
    if not sweeps or sweeps[-1]["state"] in jobs.ACTIVE:
        return nothing
    job = sweeps[-1]
    events = _events_of(ctx.state_dir, job["id"])
    if os.path.exists(os.path.join(job["dir"], RESTORED)) or any(e.get("event") == "done" for e in events):
        return nothing
    later = [s for s in servers.serve_jobs(ctx.state_dir) if (s.get("started") or 0) >= (job.get("started") or 0)]
    if any((s.get("args") or {}).get("sweep") != job["id"] for s in later):
        return nothing
    found = next((e.get("found") for e in events if e.get("event") == "plan"), None)
    try:
        with open(os.path.join(job["dir"], "input.json")) as f:
            restore = json.load(f).get("restore")
    except (OSError, ValueError):
        restore = None
    if not jobs.create_json(os.path.join(job["dir"], RESTORED), {"by": "client", "t": time.time()}):
        return nothing
    profile = (restore or {}).get("args", {}).get("profile") if found else None
    return {"sweep": job["id"], "profile": profile, "leftover": [s["id"] for s in later if s["state"] in jobs.ACTIVE]}
