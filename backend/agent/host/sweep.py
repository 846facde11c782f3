"""Sweeps: restart the server at each speculative config, bench it, and find the fastest; a detached job.

``sweep.start`` runs ``agent worker sweep INPUT`` as a job of kind ``sweep``, so a sweep survives the panel
and the connection like a server does. For each point (steps, topk, draft tokens) it stops the server, starts
the point's command (built by the client from the profile) as an ordinary serve job tagged with the sweep,
waits until it is ready (the profile's timeout), sends one short warm-up request, runs an ordinary bench job
against it and records the result; so every point is a run and a bench in history. A point that crashes or
never gets ready is recorded with its reason and the sweep goes on. At the end the server is left as found:
the one that was running is started again (its command came with the input), or none. SIGTERM (``jobs.cancel``)
stops the server the sweep started and ends the sweep.

``smart``: the profile's own point first, then the rest in the order the advisor (``advice.py``) ranks them
from what was measured so far, until its stop rule holds: at least two distinct step counts measured, the
per-step cost fitted (never assumed), and the measured best's lower bound above the upper end of every
remaining prediction. ``best`` is ``advice.best``'s: the fastest, and within noise of it the fewest steps.

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
from typing import Dict, List, Optional

from . import advice, jobs, loadgen, serve
from .registry import AgentError, Context, method
from .server_states import STATES as SERVER_STATES

KIND = "sweep"
ENV_KEY = "SPECDECK_SWEEP_ENV"
BENCH_TIMEOUT_S = 6 * 3600.0  # a bench that hangs this long is given up on (its requests time out sooner)
WARMUP_TOKENS = 16
STOP_TIMEOUT_S = 30.0
REQUEST_KEYS = ("spec_histogram", "decode_tok_s", "spec_verify_ct", "spec_proposed", "prompt")
INPUTS = "sweep-inputs"
RESTORED = "restored.json"  # in the sweep's folder: claimed once by whoever leaves the host as found
CANCEL_WAIT_S = 8.0  # a cancelled sweep waits this long for its server to go before restoring (cancel waits 15)


def _check(params: dict) -> dict:
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
    return params


def _events_of(state_dir: str, job_id: str) -> List[dict]:
    path = os.path.join(jobs.jobs_root(state_dir), job_id, "events.jsonl")
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


@method("sweep.start")
def start(params: dict, ctx) -> dict:
    """Start a sweep job; ``resume`` (an earlier sweep's id) takes over its measured points."""
    checked = _check(params)
    root = jobs.jobs_root(ctx.state_dir)
    for name in sorted(os.listdir(root)):
        if name.startswith(KIND + "-"):
            job = jobs.describe(os.path.join(root, name))
            if job.get("kind") == KIND and job["state"] in jobs.ACTIVE:
                raise AgentError("sweep %s is running on this host; cancel it or let it finish first" % name, "busy")
    resume = params.get("resume")
    if resume:
        folder = os.path.join(root, str(resume))
        old = jobs.describe(folder) if "/" not in str(resume) and os.path.isdir(folder) else {}
        if old.get("kind") != KIND:
            raise AgentError("no sweep %s on this host (see `specdeck jobs --kind sweep`)" % resume, "not_found")
        if old["state"] in jobs.ACTIVE:
            raise AgentError("sweep %s is still running; cancel it first or let it finish" % resume, "busy")
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
        "resume": resume,
        "grid": [
            [p["args"].get("steps"), p["args"].get("topk"), p["args"].get("draft_tokens")] for p in checked["points"]
        ],
    }
    return jobs.start_job(ctx.state_dir, KIND, jobs.worker_argv("sweep", path), args, {ENV_KEY: json.dumps(env)})


def _job_dir(state_dir: str, job_id: str) -> str:
    return os.path.join(jobs.jobs_root(state_dir), job_id)


def chains_of(records: List[dict]) -> List[dict]:
    """Like with like: the points the advisor models (topk 1, draft tokens = steps + 1)."""
    return [r for r in records if (r.get("topk") or 1) == 1 and r.get("draft_tokens") in (None, r["steps"] + 1)]


class Sweep:
    """One sweep's run: the points, what was found, what it started, and its events."""

    def __init__(self, params: dict, state_dir: str, job_dir: str, env: Dict[str, Dict[str, str]]) -> None:
        self.params, self.state_dir, self.job_dir, self.env = params, state_dir, job_dir, env
        self.id = os.path.basename(job_dir)
        self.events = loadgen._Events(os.path.join(job_dir, "events.jsonl"))
        self.ctx = Context(state_dir, lambda event: None)
        self.points: List[dict] = params["points"]
        self.results: Dict[int, dict] = {}
        self.started_job: Optional[str] = None  # the serve job of the current point
        self.bench_job: Optional[str] = None
        self.restarts = 0

    def emit(self, event: dict) -> None:
        self.events.write(dict(event, t=round(time.time(), 3)), durable=event.get("event") in ("point", "done"))

    # --- the server ---

    def running_server(self) -> Optional[dict]:
        """The newest running server job on this host (a GPU host runs one at a time)."""
        running = [j for j in serve.serve_jobs(self.state_dir) if j["state"] in jobs.ACTIVE]
        return running[-1] if running else None

    def stop(self, job_id: str) -> None:
        serve.stop({"job": job_id, "timeout": STOP_TIMEOUT_S}, self.ctx)

    def start_server(self, argv: List[str], args: dict, env: Dict[str, str], cwd: Optional[str]) -> dict:
        return serve.start({"argv": argv, "args": args, "env": env, "cwd": cwd}, self.ctx)

    def wait_ready(self, index: int, job_id: str, timeout: float) -> dict:
        """The server's status once it is no longer starting (or ``timeout`` passed); each startup phase it
        enters becomes a phase event. Waits on the host's file events (``serve.wait``), not a timer."""
        phases: List[Optional[str]] = []

        def on_status(status: dict) -> None:
            if status["state"] == "starting" and status.get("phase") not in phases:
                phases.append(status.get("phase"))
                self.emit({"event": "phase", "index": index, "phase": "starting", "server_phase": phases[-1]})

        until = [state for state in SERVER_STATES if state != "starting"]
        return serve.wait({"job": job_id, "until": until, "timeout": timeout}, Context(self.state_dir, on_status))

    # --- one point ---

    def measure(self, index: int) -> dict:
        point = self.points[index]
        args = dict(point["args"], sweep=self.id, point=index)
        t0 = time.time()
        self.emit({"event": "phase", "index": index, "phase": "stopping"})
        current = self.running_server()
        if current is not None:
            self.stop(current["id"])
        self.emit({"event": "phase", "index": index, "phase": "starting"})
        started = self.start_server(point["argv"], args, self.env.get("points") or {}, point.get("cwd"))
        self.started_job = started["job"]
        self.restarts += 1
        status = self.wait_ready(index, started["job"], float(self.params.get("ready_timeout") or 1800))
        record = {k: point["args"].get(k) for k in ("steps", "topk", "draft_tokens")}
        record.update({"index": index, "run": started["job"], "startup_s": round(time.time() - t0, 2)})
        if status["state"] != "ready":
            reason = (
                status.get("error") or status.get("reason") or "not ready after %s s" % self.params.get("ready_timeout")
            )
            if status["state"] == "starting":
                self.stop(started["job"])
            return dict(record, failed="the server %s: %s" % (status["state"], reason))
        port = int(point["args"]["port"])
        self.emit({"event": "phase", "index": index, "phase": "warming up"})
        warm = loadgen.one_request(port, loadgen.PROMPTS[0], WARMUP_TOKENS)
        if "error" in warm:
            return dict(record, failed="warm-up failed: %s" % warm["error"])
        self.emit({"event": "phase", "index": index, "phase": "benching"})
        bench = loadgen.start(
            {
                "port": port,
                "requests": self.params["requests"],
                "max_tokens": self.params["max_tokens"],
                "concurrency": 1,
                "profile": point["args"].get("profile"),
                "server_job": started["job"],
            },
            self.ctx,
        )
        self.bench_job = bench["id"]
        bench_dir = _job_dir(self.state_dir, bench["id"])
        jobs.wait({"id": bench["id"], "timeout": BENCH_TIMEOUT_S}, self.ctx)
        ends = [e for e in _events_of(self.state_dir, bench["id"]) if e.get("event") in ("result", "failed")]
        result = ends[-1] if ends else {}
        record.update({"bench": bench["id"], "elapsed_s": round(time.time() - t0, 2)})
        if result.get("event") != "result":
            return dict(
                record, failed="bench failed: %s" % (result.get("reason") or jobs.describe(bench_dir)["reason"])
            )
        record.update({k: result.get(k) for k in ("tok_s", "accept_len", "cycle_ms", "step_times_ms")})
        record["acceptance"] = result.get("acceptance")
        # What the advisor resamples: each request's histogram, decode rate, drafted positions and prompt.
        record["per_request"] = [
            {k: r.get(k) for k in REQUEST_KEYS} for r in result.get("per_request") or [] if "error" not in r
        ]
        return record

    # --- ordering ---

    def measured(self) -> List[dict]:
        return [r for r in self.results.values() if r.get("tok_s") is not None]

    def steps_of(self, index: int) -> int:
        return int(self.points[index]["args"]["steps"])

    def assess(self, todo: List[int]) -> dict:
        """The advisor over the points measured so far (``advice.assess``): rows, the one best, the stop rule
        for the step counts in ``todo``."""
        done = self.measured()
        baseline = float(self.params["baseline_tok_s"])
        plain = self.params.get("plain_step_ms") or 1000.0 / baseline
        points = [advice.Point.from_bench(int(r["steps"]), r) for r in chains_of(done)]
        candidates = sorted({self.steps_of(i) for i in todo})
        top = max([self.steps_of(i) for i in range(len(self.points))] + [1])
        return advice.assess(points, plain, baseline, top, candidates=candidates)

    def ranked(self, todo: List[int], assessed: dict) -> List[dict]:
        """The points in ``todo`` in the order to measure them: the stop rule's next first, then by prediction."""
        rows = {r["steps"]: r for r in assessed["rows"]}
        nxt = assessed["stop"]["next"]
        out = [dict(rows[self.steps_of(i)], index=i) for i in todo]
        return sorted(out, key=lambda r: (r["steps"] != nxt, -(r["tok_s"] or 0)))

    def best(self) -> Optional[dict]:
        """The one best measured point (``advice.best``: the fastest, within noise the fewest steps)."""
        measured = self.measured()
        if not measured:
            return None
        if not chains_of(measured):  # trees (topk > 1): no model to judge noise by, the fastest
            return dict(max(measured, key=lambda r: r["tok_s"]), tied_with=[])
        top = self.assess([])["best"]
        if top is None:
            return None
        same = [r for r in chains_of(measured) if int(r["steps"]) == top["steps"]]
        pick = max(same, key=lambda r: r["tok_s"]) if same else max(measured, key=lambda r: r["tok_s"])
        return dict(pick, tied_with=top.get("tied_with") or [])

    # --- the whole sweep ---

    def run(self, finished: Dict[int, dict], found: Optional[dict]) -> int:
        """Measure the points not ``finished``; ``found`` is the server to leave running at the end."""
        self.results.update(finished)
        todo = [i for i in range(len(self.points)) if i not in finished]
        if self.params.get("smart") and todo:
            first = self.params.get("first")
            todo.sort(key=lambda i: 0 if i == first else 1)
        self.emit({"event": "plan", "order": todo, "found": found and found["id"], "skipped": sorted(finished)})
        stopped_early = None
        while todo:
            if self.params.get("smart") and self.measured():
                assessed = self.assess(todo)
                ranked = self.ranked(todo, assessed)
                stop = assessed["stop"]
                if stop["can_stop"]:
                    best = assessed["best"] or {}
                    stopped_early = {
                        "best_steps": best.get("steps"),
                        "best_tok_s_low": best.get("measured_low"),
                        "why": stop["why"],
                        "remaining": [r["index"] for r in ranked],
                        "predicted": [{"steps": r["steps"], "tok_s_high": r["tok_s_high"]} for r in ranked],
                    }
                    break
                todo = [r["index"] for r in ranked]
                public = [{k: v for k, v in r.items() if k != "notes"} for r in ranked]
                self.emit({"event": "plan", "order": todo, "predicted": public, "why": stop["why"]})
            index = todo.pop(0)
            record = self.measure(index)
            self.results[index] = record
            self.emit(dict(record, event="point"))
        self.leave_as_found(found)
        points = [self.results[i] for i in sorted(self.results)]
        best = self.best()
        grid = len(self.points)
        self.emit(
            {
                "event": "done",
                "sweep": self.id,
                "points": points,
                "best": best,
                "restarts": self.restarts,
                "grid": grid,
                "saved": grid - len(finished) - self.restarts,
                "stopped_early": stopped_early,
            }
        )
        return 0

    def leave_as_found(self, found: Optional[dict]) -> None:
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
    finished: Dict[int, dict] = {}
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


@method("sweep.unrestored")
def unrestored(params: dict, ctx) -> dict:
    """Claim the newest sweep that ended without leaving the host as found (killed, or cancelled while its
    server drained): ``{"sweep", "profile", "leftover"}``, the profile to start again (None: none ran) and the
    sweep's servers still running, for the caller to stop and start; ``{"sweep": None}`` when nothing is owed.
    A sweep followed by a server the sweep did not start is owed nothing: the operator moved on."""
    root = jobs.jobs_root(ctx.state_dir)
    sweeps = [jobs.describe(d) for d in jobs.job_dirs(root) if os.path.basename(d).startswith(KIND + "-")]
    sweeps = sorted((j for j in sweeps if j.get("kind") == KIND), key=lambda j: j.get("started") or 0)
    nothing = {"sweep": None, "profile": None, "leftover": []}
    if not sweeps or sweeps[-1]["state"] in jobs.ACTIVE:
        return nothing
    job = sweeps[-1]
    events = _events_of(ctx.state_dir, job["id"])
    if os.path.exists(os.path.join(job["dir"], RESTORED)) or any(e.get("event") == "done" for e in events):
        return nothing
    later = [s for s in serve.serve_jobs(ctx.state_dir) if (s.get("started") or 0) >= (job.get("started") or 0)]
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
