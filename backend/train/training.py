"""Trainings from the client: ``[trainings.NAME]`` → SpecForge's command and run config, started as the host's
``train`` job (``backend.agent.host.train``), read back as a parsed status and checkpoints with what each
predicts on this host (``backend.train.predict``), exported and served in one step. The CLI (`specdeck
train ...`) and the Train tab call these.

On a sandbox host the command is the SIMULATED SpecForge (``backend.sandbox.specforge_sim``), never on
another host (the same guard as the SGLang simulator's).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared import units
from backend.drafters import checkpoints as checkpoints_mod
from backend.errors import OperationFailed, RemoteError, UsageError
from backend.jobs import Cancelled, JobInfo, cancel_job, wait_job
from backend.serve import command_line
from backend.serve.server import Launched, Server
from backend.serve.server_status import ServerStatus
from backend.settings.model import DrafterConfig, HostConfig, ProfileConfig, Settings, TrainingConfig
from backend.train import predict
from backend.train.records import TrainBatch, TrainRecord, TrainSummary, Trap

if TYPE_CHECKING:
    from backend.connection import Connection
    from backend.history import RunSummary, Yardstick

SIM_MODULE = "backend.sandbox.specforge_sim"
DEFAULT_PROFILE = "eagle3-aq"
EXPORT_TIMEOUT_S = 3600.0


def get_training(settings: Settings, name: str) -> TrainingConfig:
    try:
        return settings.trainings[name]
    except KeyError:
        known = ", ".join(sorted(settings.trainings)) or "none"
        raise UsageError(f"no training named {name!r} (configured: {known}; add [trainings.{name}])") from None


def init_path(settings: Settings, t: TrainingConfig) -> str | None:
    """The host folder of the drafter the training starts from (None: from scratch)."""
    if t.init is None:
        return None
    drafter = settings.drafters.get(t.init)
    return drafter.path if drafter is not None else t.init


def profile_of(settings: Settings, t: TrainingConfig) -> ProfileConfig:
    """The profile a checkpoint is served with: the training's, else the one serving its init drafter."""
    if t.profile:
        return command_line.get_profile(settings, t.profile)
    found = next((p for p in settings.profiles.values() if t.init and p.drafter == t.init and p.algorithm), None)
    return found or command_line.get_profile(settings, DEFAULT_PROFILE)


def run_id(t: TrainingConfig) -> str:
    return t.run_id or t.name


def _simulated(host: HostConfig) -> bool:
    if host.launcher != "simulator":
        return False
    if not (host.sandbox and host.on_this_machine):
        raise UsageError(f"host {host.name} asks for a simulator, which only runs on a sandbox host on this machine")
    return True


def command(host: HostConfig, t: TrainingConfig) -> tuple[list[str], str | None]:
    """(SpecForge's command before its arguments, working folder): the training's own, else the era's default
    on the host's Python; the SIMULATED one on a sandbox host."""
    if _simulated(host):
        repo = str(Path(__file__).resolve().parents[2])  # the simulator is this checkout's code
        sim = [host.python, "-m", SIM_MODULE]
        return ([*sim, "train"] if t.era == "unified" else [*sim, "script", "--nproc-per-node", str(t.gpus)]), repo
    if t.command:
        return list(t.command), host.workdir
    if t.era == "unified":
        return [host.python, "-m", "specforge.cli", "train"], host.workdir
    torchrun = [host.python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(t.gpus)]
    return [*torchrun, t.script], host.workdir


def export_command(host: HostConfig, t: TrainingConfig) -> list[str]:
    if _simulated(host):
        return [host.python, "-m", SIM_MODULE]
    return list(t.command[:-1]) if t.command and t.command[-1] == "train" else [host.python, "-m", "specforge.cli"]


def run_config(
    settings: Settings, t: TrainingConfig, *, offline: bool, resume_from: str | None = None
) -> dict[str, Any]:
    """The unified era's run file (``specforge train -c``): only what the training sets; SpecForge's own
    defaults for the rest. ``resume_from`` and ``draft_checkpoint_path`` exclude each other."""
    init = init_path(settings, t)
    model: dict[str, Any] = {"target_model_path": t.target or settings.target}
    if init:
        model["draft_model_config"] = f"{init}/config.json"
        if resume_from is None:
            model["draft_checkpoint_path"] = init
    if t.vocab_mapping:
        model["vocab_mapping_path"] = t.vocab_mapping
    data: dict[str, Any] = {"hidden_states_path" if offline else "train_data_path": t.data}
    if t.eval_data:
        data["eval_hidden_states_path"] = t.eval_data
    if t.max_length:
        data["max_length"] = t.max_length
    keys = {
        "num_epochs": t.epochs,
        "max_steps": t.max_steps,
        "batch_size": t.batch_size,
        "learning_rate": t.learning_rate,
        "ttt_length": t.ttt_length,
        "save_interval": t.save_interval,
        "eval_interval": t.eval_interval,
        "log_interval": t.log_interval,
        "resume_from": resume_from,
    }
    training = {k: v for k, v in keys.items() if v is not None}
    return {
        "run_id": run_id(t),
        "output_dir": t.output,
        "model": model,
        "data": data,
        "training": training,
        "deployment": {"trainer": {"nnodes": 1, "nproc_per_node": t.gpus}},
    }


def script_flags(settings: Settings, t: TrainingConfig, *, resume: bool) -> list[str]:
    """``scripts/train_eagle3.py``'s flags for the training (tensorboard on: its console hides per-position
    figures unless logging is configured)."""
    init = init_path(settings, t)
    flags = ["--target-model-path", t.target or settings.target, "--train-data-path", t.data]
    flags += ["--train-hidden-states-path", t.data, "--output-dir", t.output]
    for flag, value in (
        ("--eval-hidden-states-path", t.eval_data),
        ("--num-epochs", t.epochs),
        ("--total-steps", t.max_steps),
        ("--batch-size", t.batch_size),
        ("--learning-rate", t.learning_rate),
        ("--max-length", t.max_length),
        ("--ttt-length", t.ttt_length),
        ("--save-interval", t.save_interval),
        ("--eval-interval", t.eval_interval),
        ("--log-interval", t.log_interval),
        ("--ckpt-dir", init),
    ):
        if value is not None:
            flags += [flag, str(value)]
    return flags + ["--report-to", "tensorboard"] + (["--resume"] if resume else [])


def job_args(settings: Settings, t: TrainingConfig, resume_step: int | None) -> dict[str, Any]:
    """What the train job records (the host's reader and checks read it back)."""
    init = init_path(settings, t)
    return {
        "training": t.name,
        "era": t.era,
        "output_dir": t.output,
        "run_id": run_id(t),
        "init": t.init,
        "init_path": init,
        "draft_config": f"{init}/config.json" if init else None,
        "warm_start": t.init if init and resume_step is None else None,
        # The script era regenerates the mapping whatever it is given (PR #534): a warm start there is the trap.
        "vocab_mapping": t.vocab_mapping if t.era == "unified" else None,
        "data": t.data,
        "epochs": t.epochs or (1 if t.era == "unified" else 10),
        "total_steps": t.max_steps,
        "batch_size": t.batch_size or 1,
        "max_length": t.max_length or 2048,
        "ttt_length": t.ttt_length or 7,
        "save_interval": t.save_interval,
        "eval_interval": t.eval_interval,
        "log_interval": t.log_interval or 50,
        "resume_step": resume_step,
        "profile": profile_of(settings, t).name,
        "gpus": t.gpus,
    }


# --- checks before a GPU hour is spent ---------------------------------------------------------------------


async def _target_config(conn: Connection, target: str) -> dict[str, Any] | None:
    try:
        got = await conn.call("fs.read", path=f"{target}/config.json", text=True)
    except RemoteError:
        return None
    try:
        config: dict[str, Any] | None = json.loads(got["text"])
        return config
    except ValueError:
        return None


async def check_init(conn: Connection, settings: Settings, t: TrainingConfig) -> None:
    """The Compare verdict of the init drafter against the target: a warm start needs identical shapes
    (SpecForge refuses, or a Kimi-K2 drafter on another architecture loads wrong), so refuse before starting."""
    init = init_path(settings, t)
    if init is None:
        return
    try:
        inspected = await conn.call("checkpoint.inspect", path=init)
    except RemoteError as exc:
        hint = f" (`specdeck download {t.init}`)" if t.init in settings.drafters else ""
        raise UsageError(f"training {t.name}: the drafter to start from, {init}, cannot be read: {exc}{hint}") from None
    target = await _target_config(conn, t.target or settings.target)
    judged = checkpoints_mod.verdict(inspected, target)
    if not judged["compatible"]:
        why = judged["problems"][0] if judged["problems"] else f"it cannot be judged: {judged['unchecked'][-1]}"
        raise UsageError(
            f"training {t.name}: {t.init or init} cannot warm-start on {t.target or settings.target}: "
            f"{why} (see `specdeck diff {t.init or init} --target ...`)"
        )


async def _is_dir(conn: Connection, path: str) -> bool | None:
    try:
        st = await conn.call("fs.stat", path=path)
    except RemoteError:
        return None
    return bool(st.get("type") == "dir")


# --- the job ------------------------------------------------------------------------------------------------


async def jobs_of(conn: Connection, name: str) -> list[JobInfo]:
    return [JobInfo.from_json(j) for j in await conn.call("train.list", training=name)]


async def latest_job(conn: Connection, name: str) -> JobInfo:
    found = await jobs_of(conn, name)
    if not found:
        raise UsageError(f"training {name} has not run on this host (start it with `specdeck train start {name}`)")
    return max(found, key=lambda j: j.started or 0)


async def start(conn: Connection, settings: Settings, name: str, *, resume: bool = False) -> tuple[JobInfo, list[str]]:
    """Check and start the training (``resume``: from its newest checkpoint, with the era's mechanism);
    returns the job and the traps to say out loud now. Bad input raises UsageError with nothing started."""
    t = get_training(settings, name)
    kind = await _is_dir(conn, t.data)
    if kind is None:
        raise UsageError(f"training {name}: the data {t.data} does not exist on the host; prepare it first")
    if t.era == "unified" and not kind:
        raise UsageError(
            f"training {name}: {t.data} is a data file, and the unified SpecForge trains on one host only from "
            "prepared hidden states (online needs deployment.mode disaggregated): run "
            'scripts/prepare_hidden_states.py and point data at its folder, or set era = "script"'
        )
    await check_init(conn, settings, t)
    resume_step, resume_from = None, None
    if resume:
        found = [c for c in await checkpoint_list(conn, name) if c.get("step")]
        if not found:
            raise UsageError(f"training {name} has no checkpoint to resume from; start it with `specdeck train start`")
        newest = found[-1]
        resume_step, resume_from = int(newest["step"]), newest["path"]
    prefix, cwd = command(conn.host, t)
    config = None
    if t.era == "unified":
        config = run_config(settings, t, offline=bool(kind), resume_from=resume_from)
        argv = [*prefix, "-c", "{config}"]
    else:
        argv = prefix + script_flags(settings, t, resume=resume)
    args = job_args(settings, t, resume_step)
    wire = await conn.call(
        "train.start", argv=argv, env={"PYTHONUNBUFFERED": "1", **t.env}, cwd=cwd, config=config, args=args
    )
    job = JobInfo.from_json(wire)
    warnings = []
    if args["warm_start"] and not args["vocab_mapping"]:
        warnings.append(
            f"warm start from {t.init} without a vocab mapping: SpecForge regenerates d2t/t2d from the new data and "
            "misaligns the drafter's lm_head slots, and acc_i will not show it (SpecForge PR #534)"
            + ("; set vocab_mapping" if t.era == "unified" else "; the script era always does: prefer era = unified")
        )
    return job, warnings


async def stop(conn: Connection, name: str) -> Cancelled:
    """Stop the training's running job (its whole process group)."""
    job = await latest_job(conn, name)
    if not job.active:
        raise UsageError(f"training {name} is not running (its last job {job.id} is {job.state})")
    return await cancel_job(conn, job.id, timeout=30)


@dataclass(frozen=True)
class TrainingStatus:
    """A training's newest job with its parsed console and its checkpoints (dicts from the host)."""

    job: JobInfo
    summary: TrainSummary
    checkpoints: list[dict[str, Any]]
    series: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> TrainingStatus:
        summary = TrainSummary.from_json(wire["summary"])
        return cls(JobInfo.from_json(wire["job"]), summary, wire["checkpoints"], wire.get("series") or {})

    @property
    def traps(self) -> tuple[Trap, ...]:
        return self.summary.traps


async def status(conn: Connection, name: str, *, series: bool = False) -> TrainingStatus:
    job = await latest_job(conn, name)
    return TrainingStatus.from_json(await conn.call("train.status", job=job.id, series=series))


async def checkpoint_list(conn: Connection, name: str) -> list[dict[str, Any]]:
    """Checkpoints in the training's output folder, whatever job wrote them (none before the first run)."""
    found = await jobs_of(conn, name)
    if not found:
        return []
    newest = max(found, key=lambda j: j.started or 0)
    checkpoints: list[dict[str, Any]] = await conn.call("train.checkpoints", job=newest.id)
    return checkpoints


@dataclass(frozen=True)
class CheckpointRow:
    """One checkpoint with what it predicts on this host at the profile's ``steps`` (``predictions``): accept
    length and one stream's tok/s with their 95% intervals, the verdicts against the baseline and the
    break-even, and what the newest run that served it measured. The predicted figures are None where the
    checkpoint carries no accuracy; ``to_json`` is the `train checkpoints --json` contract."""

    name: str
    step: int
    acc: tuple[float, ...] = ()
    predicted_accept_len: float | None = None
    predicted_accept_len_low: float | None = None
    predicted_accept_len_high: float | None = None
    model_accept_len: float | None = None
    predicted_tok_s: float | None = None
    predicted_tok_s_low: float | None = None
    predicted_tok_s_high: float | None = None
    cycle_ms: float | None = None
    break_even: float | None = None
    versus_baseline: str | None = None
    versus_break_even: str | None = None
    assumed: tuple[str, ...] | None = None  # None: no prediction made (the JSON leaves the key out)
    servable: bool = False
    serve_path: str | None = None
    accuracy_source: str | None = None
    latest: bool = False
    best: bool = False
    untrusted: str | None = None  # why it is refused: another user could have put it there
    steps: int = 3
    measured_tok_s: float | None = None
    measured_accept_len: float | None = None
    measured_run: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "assumed" or self.assumed is not None}
        out["acc"] = list(self.acc)
        if self.assumed is not None:
            out["assumed"] = list(self.assumed)
        return out


def predictions(
    settings: Settings,
    name: str,
    checkpoints: Sequence[dict[str, Any]],
    runs: Sequence[RunSummary],
    yardstick: Yardstick,
) -> tuple[list[CheckpointRow], predict.Basis | None]:
    """One row per checkpoint (the host's ``train.checkpoints``), oldest first, and the basis the predictions
    were costed on (None when no checkpoint carries an accuracy yet)."""
    t = get_training(settings, name)
    steps = profile_of(settings, t).steps or 3
    out, basis = [], None
    for c in checkpoints:
        accuracy = c.get("accuracy") or {}
        predicted, used = predict.predict(accuracy, steps, runs, yardstick)
        basis = basis or used
        if "assumed" in predicted:
            predicted["assumed"] = tuple(predicted["assumed"])
        row = CheckpointRow(
            name=c["name"],
            step=c["step"],
            acc=tuple(round(a, 4) for a in accuracy.get("acc") or []),
            **predicted,
            servable=bool(c.get("servable")),
            serve_path=c.get("serve_path"),
            accuracy_source=accuracy.get("source"),
            latest=bool(c.get("latest")),
            best=bool(c.get("best")),
            untrusted=c.get("untrusted"),
            steps=steps,
            **predict.measured(runs, c.get("serve_path")),
        )
        out.append(row)
    return out, basis


def pick(checkpoints: Sequence[CheckpointRow], which: str, name: str) -> CheckpointRow:
    """``latest``, ``best`` (the -best link, else the highest predicted accept length) or a checkpoint's name."""
    if not checkpoints:
        raise UsageError(f"training {name} has no checkpoint yet")
    if which == "latest":
        return checkpoints[-1]
    if which == "best":
        marked = [c for c in checkpoints if c.best]
        if marked:
            return marked[-1]
        scored = [(c.predicted_accept_len, c) for c in checkpoints if c.predicted_accept_len is not None]
        return max(scored, key=lambda s: s[0])[1] if scored else checkpoints[-1]
    found = next((c for c in checkpoints if c.name == which), None)
    if found is None:
        names = ", ".join(c.name for c in checkpoints[-5:])
        raise UsageError(f"training {name} has no checkpoint {which!r} (latest ones: {names}; or latest, best)")
    return found


async def export(conn: Connection, settings: Settings, name: str, checkpoint: CheckpointRow) -> str:
    """The folder SGLang loads for ``checkpoint``: itself when servable, else `specforge export --to sglang`
    run as a job on the host and waited for. One another user could have put there is refused (UsageError)."""
    if checkpoint.untrusted:
        raise UsageError(f"training {name}: checkpoint {checkpoint.name} refused: {checkpoint.untrusted}")
    if checkpoint.servable and checkpoint.serve_path:
        return checkpoint.serve_path
    t = get_training(settings, name)
    job = await latest_job(conn, name)
    wire = await conn.call(
        "train.export", job=job.id, checkpoint=checkpoint.name, argv=export_command(conn.host, t), cwd=None
    )
    ended = await wait_job(conn, wire["id"], EXPORT_TIMEOUT_S)
    if ended.state != "done":
        why = f"{ended.state}: {ended.reason} (log {ended.log_path})"
        raise OperationFailed(f"the export of {checkpoint.name} {why}")
    output: str = ended.args["output"]
    return output


def checkpoint_drafter(name: str, checkpoint: str) -> str:
    """The drafter name a served checkpoint carries into history: the training and the checkpoint."""
    return f"{name}@{checkpoint}"


def serving_settings(settings: Settings, name: str, checkpoint: str, path: str) -> tuple[Settings, ProfileConfig]:
    """Settings with the checkpoint as a drafter and the training's profile pointing at it."""
    t = get_training(settings, name)
    drafter = DrafterConfig(name=checkpoint_drafter(name, checkpoint), path=path, files=())
    profile = replace(profile_of(settings, t), drafter=drafter.name)
    changed = replace(
        settings,
        drafters={**settings.drafters, drafter.name: drafter},
        profiles={**settings.profiles, profile.name: profile},
    )
    return changed, profile


@dataclass(frozen=True)
class Served:
    """A checkpoint served: the server's launch, and which checkpoint of which training, exported where."""

    launched: Launched
    training: str
    checkpoint: str
    drafter_path: str

    def to_json(self, status: ServerStatus | None = None) -> dict[str, Any]:
        """As `train serve --json` prints it: the launch (or ``status``, a later look) with the checkpoint."""
        seen = self.launched.to_json() if status is None else status.wire
        return {**seen, "checkpoint": self.checkpoint, "training": self.training, "drafter_path": self.drafter_path}


async def serve(
    conn: Connection, settings: Settings, name: str, checkpoint: CheckpointRow, *, force: bool = False
) -> Served:
    """Export (if needed) and start the training's profile with the checkpoint as its drafter, through the server
    face: the server running where it is served is stopped first (the caller asked)."""
    path = await export(conn, settings, name, checkpoint)
    changed, profile = serving_settings(settings, name, checkpoint.name, path)
    keys: tuple[str, ...] = ("predicted_accept_len", "predicted_accept_len_low", "predicted_accept_len_high")
    keys += ("model_accept_len", "predicted_tok_s", "predicted_tok_s_low", "predicted_tok_s_high", "steps", "step")
    tag = {"training": name, "checkpoint": checkpoint.name, **{k: getattr(checkpoint, k) for k in keys}}
    async with Server(changed, conn) as server:
        launched = await server.restart(profile, force=force, tags={"training_checkpoint": tag})
    return Served(launched, name, checkpoint.name, path)


async def follow(conn: Connection, job_id: str) -> AsyncIterator[TrainBatch]:
    """The training's parsed records as they are written (batches, every record so far first), until the job
    ends; survives reconnects (records already seen are dropped by step)."""
    seen: dict[str, int] = {}
    async for event in conn.subscribe("train.follow", {"job": job_id}, lambda params, _: params):
        fresh = []
        for rec in (TrainRecord.from_json(r) for r in event.get("records") or []):
            if rec.step > seen.get(rec.kind, -1):
                seen[rec.kind] = rec.step
                fresh.append(rec)
        yield TrainBatch(tuple(fresh), TrainSummary.from_json(event.get("summary") or {}))


def accuracy_text(acc: Sequence[float | None], width: int = 4) -> str:
    return " ".join("—" if a is None else f"{a:.2f}" for a in list(acc)[:width])


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA unknown"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"ETA {h}h{m:02d}m" if h else f"ETA {m}m{s:02d}s"


def checkpoint_line(row: CheckpointRow, baseline_tok_s: float) -> str:
    """``step 1200: accept 3.10 (2.90-3.30) → 96.2 tok/s (89.0–103.4), beats the baseline`` and what was measured."""
    head = f"step {row.step} ({row.name})"
    refused = f" [refused: {row.untrusted}]" if row.untrusted else ""
    if row.predicted_accept_len is None:
        return f"{head}: no accuracy logged up to it{refused}"
    assert row.predicted_accept_len_low is not None and row.predicted_accept_len_high is not None
    assert row.predicted_tok_s is not None and row.break_even is not None  # predicted with the accept length
    assert row.predicted_tok_s_low is not None and row.predicted_tok_s_high is not None
    text = (
        f"{head}: accept {row.predicted_accept_len:.2f} ({row.predicted_accept_len_low:.2f}-"
        f"{row.predicted_accept_len_high:.2f}) → {units.tok_s(row.predicted_tok_s)} tok/s "
        f"({units.tok_s_range(row.predicted_tok_s_low, row.predicted_tok_s_high)}), {row.versus_baseline} "
        f"the {units.tok_s(baseline_tok_s)} tok/s baseline; {row.versus_break_even} break-even "
        f"{units.accept_len(row.break_even)}"
    )
    if row.measured_tok_s is not None:
        text += f"; measured {row.measured_tok_s:.1f} tok/s (run {row.measured_run})"
    if row.untrusted:
        return text + refused
    return text + ("" if row.servable else " [export first]")


def basis_line(basis: predict.Basis, steps: int) -> str:
    """What the predictions were costed on, in one line (assumed parts said)."""
    cost = basis.cost
    return (
        f"at {steps} draft steps: cycle {cost(steps):.1f} ms ({cost.source}: {cost.detail}); baseline "
        f"{units.tok_s(basis.baseline_tok_s)} tok/s ({basis.baseline_source}); "
        f"break-even accept length {basis.break_even(steps):.2f}; {basis.covers()}"
    )
