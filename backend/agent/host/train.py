"""Trainings on the host: SpecForge as a detached job of kind ``train``, read through the readers this agent
keeps per job (``train_log.Reader``), its checkpoints (``train_checkpoints``), and their export to SGLang as a
job of kind ``train-export``.

Parsing happens here, on the host, next to the log: a client asks for a summary (``train.status``) or a
stream of parsed records (``train.follow``) and never receives the raw tqdm redraws. A reader keeps its
place per job in this agent, so a status poll reads only what was written since the last one.

Stdlib only, 3.8+.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

from . import jobs
from .registry import AgentError, Context, method
from .train_checkpoints import checkpoint_untrusted, export_dir, scan_checkpoints, servable, untrusted
from .train_log import WINDOW, Reader, tensorboard_records
from .watch import Watch

KIND = "train"
EXPORT_KIND = "train-export"
INPUTS = "train-inputs"
FOLLOW_BATCH_S = 1.0  # a follower of a busy training log gets a batch at most this often
READ_CHUNK = 1 << 20

# --- the readers this agent keeps -------------------------------------------------------------------------

_READERS: Dict[str, Tuple[Reader, List[Any]]] = {}  # job id → (reader, [offset, inode])
_READERS_LOCK = threading.Lock()


def _job(state_dir: str, job_id: str) -> Dict[str, Any]:
    if not job_id or "/" in job_id or job_id.startswith("."):
        raise AgentError("invalid job id %r" % job_id, "invalid")
    folder = os.path.join(jobs.jobs_root(state_dir), job_id)
    if not os.path.isdir(folder):
        raise AgentError("no training job %s on this host (see `specdeck jobs`)" % job_id, "not_found")
    info = jobs.describe(folder)
    if info.get("kind") != KIND:
        raise AgentError("job %s is a %s job, not a training" % (job_id, info.get("kind")), "invalid")
    return info


def read_up(info: Dict[str, Any]) -> Reader:
    """The job's reader, fed with whatever its log gained since the last call (from the top if it was
    truncated or replaced)."""
    with _READERS_LOCK:
        entry = _READERS.get(info["id"])
        if entry is None:
            entry = _READERS[info["id"]] = (Reader(info.get("args")), [0, None])
        reader, place = entry
        try:
            f = open(info["log_path"], "rb")
        except OSError:
            return reader
        with f:
            st = os.fstat(f.fileno())
            inode = (st.st_dev, st.st_ino)
            if place[1] is not None and (inode != place[1] or st.st_size < place[0]):
                reader = Reader(info.get("args"))
                _READERS[info["id"]] = (reader, place)
                place[0] = 0
            place[1] = inode
            f.seek(place[0])
            while True:
                data = f.read(READ_CHUNK)
                if not data:
                    break
                place[0] += len(data)
                reader.feed(data)
        if info["state"] not in jobs.ACTIVE:
            reader.flush()
        return reader


def _checkpoints(info: Dict[str, Any], reader: Reader, state_dir: str) -> List[Dict[str, Any]]:
    """The output folder's checkpoints, each with the accuracy logged up to it by the newest of the
    training's jobs into that folder that logged its step (a resume's log starts where it resumed)."""
    args = info.get("args") or {}
    output = args.get("output_dir") or ""
    readers = [reader]
    for job in reversed(trainings(state_dir)):
        if job["id"] != info["id"] and (job.get("args") or {}).get("output_dir") == output:
            readers.append(read_up(job))
    out = []
    for c in scan_checkpoints(output, args.get("run_id")):
        covering = [r for r in readers if r.first_step is not None and r.first_step <= c["step"]]
        c["accuracy"] = next((a for a in (r.accuracy_at(c["step"]) for r in covering) if a), None)
        c["untrusted"] = checkpoint_untrusted(c)
        out.append(c)
    return out


def _status(info: Dict[str, Any], state_dir: str, series: bool = False) -> Dict[str, Any]:
    reader = read_up(info)
    summary = reader.summary()
    out: Dict[str, Any] = {"job": info, "summary": summary, "checkpoints": _checkpoints(info, reader, state_dir)}
    if series:
        out["series"] = reader.series()
    if not any(r.get("acc") for r in reader.records[-WINDOW:]):
        # The console gave no per-position accuracy (the script era without logging configured): the
        # tracker's event files may have it.
        records, how = tensorboard_records((info.get("args") or {}).get("output_dir") or "")
        summary["per_position_source"] = how
        if series and records:
            out["series"]["tensorboard"] = records
    else:
        summary["per_position_source"] = "console"
    return out


# --- RPC methods ------------------------------------------------------------------------------------------


def trainings(state_dir: str) -> List[Dict[str, Any]]:
    root = jobs.jobs_root(state_dir)
    return [j for j in (jobs.describe(p) for p in jobs.job_dirs(root)) if j.get("kind") == KIND]


@method("train.start")
def start(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Start a training job. ``argv`` is SpecForge's command; a ``config`` (the unified era's run file, as
    JSON, which SpecForge's ``-c`` reads like YAML) is written under the agent's state and its path replaces
    ``{config}`` in argv. Refused, with nothing started, when the data or the init drafter is missing or
    another training writes into the same output folder, or (unless ``resume``) it holds checkpoints."""
    args = dict(params.get("args") or {})
    argv = params.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise AgentError("train.start needs argv, a list of strings", "invalid")
    name = args.get("training") or "training"
    data = args.get("data")
    if not data or not os.path.exists(data):
        raise AgentError(
            "training %s: the data %s does not exist on the host; prepare it (or fix data in [trainings.%s])"
            % (name, data, name),
            "not_found",
        )
    init = args.get("init_path")
    if init and not os.path.isfile(os.path.join(init, "config.json")):
        raise AgentError(
            "training %s: the drafter to start from, %s, is not on the host (no config.json); download it first"
            % (name, init),
            "not_found",
        )
    output = os.path.abspath(args.get("output_dir") or "")
    if not args.get("output_dir"):
        raise AgentError("training %s has no output folder" % name, "invalid")
    for path in (data, output):  # what SpecForge loads (torch pickles run code) and resumes from
        why = untrusted(path)
        if why:
            raise AgentError("training %s: refused, nothing started: %s" % (name, why), "permission")
    for job in trainings(ctx.state_dir):
        if job["state"] in jobs.ACTIVE and os.path.abspath((job.get("args") or {}).get("output_dir") or "") == output:
            raise AgentError(
                "training %s (job %s) is already writing into %s; stop it first or choose another output folder"
                % ((job.get("args") or {}).get("training"), job["id"], output),
                "invalid",
            )
    found = scan_checkpoints(output)
    if found and not args.get("resume_step"):
        raise AgentError(
            "%s already holds checkpoints (%s): resume it with `specdeck train resume %s`, or choose another "
            "output folder" % (output, found[-1]["name"], name),
            "invalid",
        )
    if not args.get("total_steps") and os.path.isdir(data):
        # The plan's length for the ETA: prepared samples over the samples a step takes (SpecForge may drop a
        # few while loading, so it stays an estimate and says so).
        samples = sum(sum(1 for n in names if n.endswith(".ckpt")) for _, _, names in os.walk(data))
        per_step = int(args.get("batch_size") or 1) * int(args.get("gpus") or 1)
        if samples:
            args["total_steps"] = int(args.get("epochs") or 1) * max(1, samples // per_step)
            args["total_steps_estimated"] = samples
    config = params.get("config")
    if config is not None:
        folder = os.path.join(ctx.state_dir, INPUTS)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, "%s-%d.json" % (re.sub(r"[^\w.-]", "_", name), int(time.time() * 1000)))
        with open(path, "w") as f:
            json.dump(config, f, indent=2)
        argv = [path if a == "{config}" else a for a in argv]
        args["config_path"] = path
    args["output_dir"] = output
    try:
        os.makedirs(output, exist_ok=True)
    except OSError as exc:
        raise AgentError("cannot create the output folder %s: %s" % (output, exc.strerror), "permission") from None
    try:
        return jobs.start_job(ctx.state_dir, KIND, argv, args, params.get("env") or {}, params.get("cwd"))
    except AgentError:
        if config is not None:
            os.unlink(args["config_path"])
        raise


@method("train.list")
def list_trainings(params: Dict[str, Any], ctx: Context) -> List[Dict[str, Any]]:
    """Training jobs on this host (of ``training`` if given), oldest first."""
    name = params.get("training")
    return [j for j in trainings(ctx.state_dir) if not name or (j.get("args") or {}).get("training") == name]


@method("train.status")
def status(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """One training's job, parsed summary and checkpoints (each with the accuracy it carries); ``series``
    adds every step and eval record for curves."""
    return _status(_job(ctx.state_dir, params.get("job", "")), ctx.state_dir, bool(params.get("series")))


_CURVE_KEYS = ("step", "kind", "acc", "loss", "lr", "simulated_acc_len")


def _curve_point(rec: Dict[str, Any]) -> Dict[str, Any]:
    """What a follower draws of a record (``train.status`` with ``series`` has the whole of each)."""
    return {k: rec[k] for k in _CURVE_KEYS if k in rec}


@method("train.follow")
def follow(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Stream the training's parsed records (step, kind, acc, loss, lr; an eval's simulated_acc_len) as its
    log grows: ``{"records": [...], "summary": {...}}`` per
    batch (every record so far first), until the job ends or the request is cancelled. Waits on inotify and
    sends at most every ``FOLLOW_BATCH_S`` (a chart needs no more); whether the job still runs is asked once
    a second, its exit record looked for at each wake."""
    info = _job(ctx.state_dir, params.get("job", ""))
    job_dir = info["dir"]
    watch = Watch(jobs.FOLLOW_POLL_S, jobs.LIVENESS_S)
    watch.add(job_dir)
    first, checked = True, time.monotonic()
    try:
        while not ctx.cancelled.is_set():
            ended = os.path.exists(os.path.join(job_dir, "exit.json"))
            if ended or time.monotonic() - checked >= jobs.LIVENESS_S:
                info, checked = jobs.describe(job_dir), time.monotonic()
                ended = info["state"] not in jobs.ACTIVE
            reader = read_up(info)
            new = reader.take_new()
            if first:
                new = [dict(r, kind="train") for r in reader.records] + [dict(e, kind="eval") for e in reader.evals]
            if new or first:
                ctx.emit({"records": [_curve_point(r) for r in new], "summary": reader.summary()})
                first = False
            if ended:
                break
            if watch.active:
                ctx.cancelled.wait(FOLLOW_BATCH_S)
            watch.wait(ctx)
    finally:
        watch.close()
    return {"job": jobs.describe(job_dir)}


@method("train.checkpoints")
def checkpoints(params: Dict[str, Any], ctx: Context) -> List[Dict[str, Any]]:
    info = _job(ctx.state_dir, params.get("job", ""))
    return _checkpoints(info, read_up(info), ctx.state_dir)


@method("train.export")
def export(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """Export a unified-era checkpoint for SGLang as a job (``agent worker train export INPUT``): SpecForge's
    ``export --to sglang`` into a temp folder, renamed to ``<output>/specdeck-exports/<checkpoint>`` once
    whole. ``argv`` is the SpecForge command (without ``export``)."""
    info = _job(ctx.state_dir, params.get("job", ""))
    args = info.get("args") or {}
    name = params.get("checkpoint")
    found = next((c for c in scan_checkpoints(args.get("output_dir") or "") if c["name"] == name), None)
    if found is None:
        raise AgentError("training %s has no checkpoint %s" % (args.get("training"), name), "not_found")
    out = export_dir(args["output_dir"], found["name"])
    why = checkpoint_untrusted(found)  # the checkpoint it loads, the exports folder it rmtrees in
    if why:
        raise AgentError("checkpoint %s: refused, nothing exported: %s" % (name, why), "permission")
    if found["servable"]:
        raise AgentError("%s is servable as it is (%s)" % (name, found["serve_path"]), "invalid")
    for job in jobs.list_jobs({"kind": EXPORT_KIND}, ctx):
        if job["state"] in jobs.ACTIVE and (job.get("args") or {}).get("output") == out:
            return job  # one export of a checkpoint at a time: the one under way is the answer
    argv = list(params.get("argv") or [])
    argv += ["export", "--to", "sglang", "--checkpoint", found["path"], "--draft-config"]
    argv += [args.get("draft_config") or os.path.join(args.get("init_path") or "", "config.json")]
    argv += ["--output-dir", "{output}"]
    if args.get("vocab_mapping"):
        argv += ["--vocab-mapping", args["vocab_mapping"]]
    folder = os.path.join(ctx.state_dir, INPUTS)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, "export-%d.json" % int(time.time() * 1000))
    with open(path, "w") as f:
        json.dump({"argv": argv, "output": out, "cwd": params.get("cwd")}, f)
    job_args = {"training": args.get("training"), "training_job": info["id"], "checkpoint": name, "output": out}
    return jobs.start_job(
        ctx.state_dir, EXPORT_KIND, jobs.worker_argv("train", "export", path), job_args, params.get("env") or {}
    )


def worker_main(argv: List[str]) -> int:
    """``export INPUT``: run the export into ``<output>.partial-<pid>``, rename it into place when it exits 0."""
    if argv[:1] != ["export"] or len(argv) != 2:
        sys.stderr.write("usage: agent worker train export INPUT\n")
        return 2
    with open(argv[1]) as f:
        spec = json.load(f)
    os.unlink(argv[1])
    out = spec["output"]
    tmp = "%s.partial-%d" % (out, os.getpid())
    os.makedirs(os.path.dirname(out), exist_ok=True)
    jobs.raise_on_sigterm()
    try:
        code = subprocess.call([tmp if a == "{output}" else a for a in spec["argv"]], cwd=spec.get("cwd"))
        if code == 0 and servable(tmp):
            shutil.rmtree(out, ignore_errors=True)
            os.rename(tmp, out)
            print("specdeck: export ready at %s" % out, flush=True)
            return 0
        print("specdeck: the export failed (exit %d); nothing was kept" % code, flush=True)
        return code or 1
    except jobs.Cancelled:
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
