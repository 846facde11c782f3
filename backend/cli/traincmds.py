"""`specdeck train`: fine-tune a drafter with SpecForge on the host, watch it learn, and know before a restart
what each checkpoint predicts against the baseline; serve one in one step."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from backend.cli.common import (
    add_json,
    add_raw,
    confirmed,
    connected,
    emit_json,
    emit_json_line,
    keep_in_history,
    load_settings,
    log_stream,
    print_detached,
)
from backend.cli.main import command
from backend.errors import UsageError
from backend.jobs import get_job
from backend.serve import serving
from backend.serve.server import Server
from backend.settings.model import Settings
from backend.train import training

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from backend.cli.main import Subcommands
    from backend.connection import Connection
    from backend.history import History
    from backend.settings.model import Settings
    from backend.train.predict import Basis
    from backend.train.records import TrainSummary
    from backend.train.training import CheckpointRow


def register(sub: Subcommands) -> None:
    p = command(
        sub, "train", "Fine-tune a drafter with SpecForge on the host (a detached job) and judge its checkpoints."
    )
    tsub = p.add_subparsers(dest="train_command", metavar="ACTION", required=True)

    def action(
        name: str, help: str, run: Callable[[argparse.Namespace], Awaitable[int] | int], *, json: bool = True
    ) -> argparse.ArgumentParser:
        q = command(tsub, name, help)
        q.add_argument("name", metavar="NAME", help="a [trainings.NAME] of the config")
        if json:
            add_json(q)
        q.set_defaults(run=run)
        return q

    q = action("start", "Start the training: checks the data, the init drafter and the output folder first.", start)
    q.add_argument("--detach", action="store_true", help="start it and return (it runs on without the panel)")
    q = action("resume", "Resume the training from its newest checkpoint (the era's own mechanism).", resume)
    q.add_argument("--detach", action="store_true", help="start it and return")
    action("status", "The training's state, step, ETA, accuracy per position, loss and traps.", status)
    q = action("logs", "SpecForge's console as written (tqdm redraws as lines).", logs, json=False)
    q.add_argument("-f", "--follow", action="store_true", help="follow the log until the training ends")
    q.add_argument("--lines", type=int, default=50, metavar="N", help="lines from the end first (default 50)")
    add_raw(q)
    action("stop", "Stop the training (its whole process group).", stop)
    action("checkpoints", "Each checkpoint's predicted accept length and tok/s on this host, with intervals.", ckpts)
    q = action("serve", "Serve a checkpoint with the training's profile (exporting it first if needed).", serve)
    q.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoint's name, latest or best")
    q.add_argument("--wait-ready", action="store_true", help="wait until the server is ready")
    q.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for ready (default 1800)")
    q.add_argument("--yes", action="store_true", help="replace a running server without asking")
    q.add_argument("--force", action="store_true", help="start despite a failed drafter verdict")


def _history() -> History:
    from backend.history import History

    return History.open()


def _settings(args: argparse.Namespace) -> Settings:
    """The settings, the training ``--name`` checked in them (before any connection is made)."""
    settings = load_settings(args)
    training.get_training(settings, args.name)
    return settings


async def _start(args: argparse.Namespace, resume: bool) -> int:
    settings = _settings(args)
    async with connected(args, settings, follow=not args.detach) as conn:  # attached: rides out a dropped link
        job, warnings = await training.start(conn, settings, args.name, resume=resume)
        for warning in warnings:
            print(f"specdeck: ! {warning}", file=sys.stderr, flush=True)
        print(f"training {args.name}: started (job {job.id}), log {job.log_path}", file=sys.stderr, flush=True)
        if args.detach:
            print_detached(args, job)
            return 0
        said: set[str] = set()
        async for batch in training.follow(conn, job.id):
            for rec in batch.records:
                if args.json:
                    emit_json_line(rec.wire)
                elif rec.kind == "eval":
                    length = rec.simulated_acc_len
                    print(
                        f"  eval at step {rec.step}: acc {training.accuracy_text(rec.acc, 7)}, "
                        f"simulated_acc_len {length:.2f}"
                        if length is not None
                        else f"  eval at {rec.step}"
                    )
            summary = batch.summary
            for trap in summary.traps:
                if trap.kind not in said:
                    said.add(trap.kind)
                    print(f"specdeck: ! {trap.message}", file=sys.stderr, flush=True)
            if not args.json and summary.step is not None and batch.records:
                print(_progress_line(summary), flush=True)
        ended = await get_job(conn, job.id)
        final = await training.status(conn, args.name)
    if args.json:
        emit_json_line({"job": ended.to_json(), "summary": final.summary.wire})
    else:
        print(f"training {args.name}: {ended.state}" + (f" ({ended.reason})" if ended.reason else ""))
    return 0 if ended.state == "done" else 1


def _progress_line(summary: TrainSummary) -> str:
    total = summary.total_steps
    step = f"step {summary.step}" + (f"/{total}" if total else "")
    loss = summary.loss
    return (
        f"  {step}: acc {training.accuracy_text(summary.acc)}, "
        f"loss {'NaN' if loss is None else f'{loss:.3f}'}, {training.eta_text(summary.eta_s)}"
    )


async def start(args: argparse.Namespace) -> int:
    return await _start(args, resume=False)


async def resume(args: argparse.Namespace) -> int:
    return await _start(args, resume=True)


async def status(args: argparse.Namespace) -> int:
    settings = _settings(args)
    async with connected(args, settings) as conn:
        st = await training.status(conn, args.name)
    if args.json:
        emit_json({"job": st.job.to_json(), "summary": st.summary.wire, "checkpoints": st.checkpoints})
        return 0
    s = st.summary
    print(f"training {args.name}: {st.job.state} (job {st.job.id}), {s.era} SpecForge")
    if s.step is not None:
        print(_progress_line(s))
        extra = [
            f"lr {s.lr:.2e}" if s.lr else None,
            f"grad norm {s.grad_norm:.2f}" if s.grad_norm else None,
        ]
        extra += [f"{s.samples_s:.1f} samples/s" if s.samples_s else None]
        extra += [f"{s.step_time_s:.2f} s/step" if s.step_time_s else None]
        if any(extra):
            print("  " + ", ".join(e for e in extra if e))
    else:
        print("  no step logged yet")
    if s.eval is not None:
        print(f"  eval at step {s.eval.step}: acc {training.accuracy_text(s.eval.acc, 7)}")
    if s.epoch is not None:
        ep = s.epoch
        done = " (its last: the run finished)" if ep.finished else ""
        print(f"  epoch {ep.epoch}/{ep.epochs}{done}: acc {training.accuracy_text(ep.acc, 7)}")
    if s.per_position_source and s.per_position_source != "console":
        print(f"  per-position accuracy: {s.per_position_source}")
    for trap in st.traps:
        print(f"  ! {trap.message}")
    for note in s.notes:
        print(f"  note: {note}")
    if st.job.reason and st.job.state == "failed":
        print(f"  failed: {st.job.reason}")
    print(f"  checkpoints: {len(st.checkpoints)} (`specdeck train checkpoints {args.name}`); log {st.job.log_path}")
    return 0


async def logs(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise UsageError("--lines must be 0 or more")
    settings = _settings(args)
    out_stream = log_stream(args)
    async with connected(args, settings, follow=args.follow) as conn:
        job = await training.latest_job(conn, args.name)
        out = await serving.tail(conn, job.id, args.lines) if args.lines else serving.LogTail()
        for line in out.lines:
            print(line.rsplit("\r", 1)[-1], file=out_stream)  # a tqdm line holds every redraw: the last is the bar now
        if args.follow:
            async for lines in serving.follow(conn, job.id, out.offset):
                for line in lines:
                    print(line.rsplit("\r", 1)[-1], file=out_stream, flush=True)
    return 0


async def stop(args: argparse.Namespace) -> int:
    settings = _settings(args)
    async with connected(args, settings) as conn:
        out = await training.stop(conn, args.name)
    if args.json:
        emit_json(out.wire)
    else:
        print(
            f"training {args.name}: stopped (job {out.job.id}); its checkpoints stay: "
            f"`specdeck train resume {args.name}`"
        )
    return 0


async def _predicted(conn: Connection, settings: Settings, name: str) -> tuple[list[CheckpointRow], Basis | None]:
    found = await training.checkpoint_list(conn, name)
    ref = settings.reference
    with _history() as history:
        runs = history.runs(conn.host.name)
        yardstick = history.yardstick(ref.baseline_tok_s, ref.cycle_ms)
    return training.predictions(settings, name, found, runs, yardstick)


async def ckpts(args: argparse.Namespace) -> int:
    settings = _settings(args)
    async with connected(args, settings) as conn:
        rows, basis = await _predicted(conn, settings, args.name)
    if args.json:
        emit_json([row.to_json() for row in rows])
        return 0
    if not rows:
        print(f"training {args.name} has no checkpoint yet")
        return 0
    for row in rows:
        print(
            training.checkpoint_line(row, settings.reference.baseline_tok_s if basis is None else basis.baseline_tok_s)
        )
    if basis is not None:  # last: what the intervals cover is read after them
        print(training.basis_line(basis, rows[0].steps))
    return 0


async def serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    async with connected(args, settings) as conn, Server(settings, conn) as server:
        rows, _ = await _predicted(conn, settings, args.name)
        chosen = training.pick(rows, args.checkpoint, args.name)
        current = await server.current(training.profile_of(settings, training.get_training(settings, args.name)))
        if current.running and not args.yes:
            what = f"{current.profile} (job {current.job})"
            question = f"a server runs: {what}. Stop it and serve {chosen.name}?"
            if not confirmed(args, question, f"a server runs: {what}; pass --yes to stop it and serve {chosen.name}"):
                return 1
        if not chosen.servable and not chosen.untrusted and not args.json:
            print(f"exporting {chosen.name} for SGLang (specforge export --to sglang)…", file=sys.stderr, flush=True)
        served = await training.serve(conn, settings, args.name, chosen, force=args.force)
        st = served.launched.status
        if args.wait_ready:
            st = await server.wait(st, within=args.timeout)
        if st.job:  # a started server's, always
            head = await server.job_host(st)
            await keep_in_history(head, await get_job(head, st.job))
    if args.json:
        emit_json(served.to_json(st if args.wait_ready else None))
    else:
        print(f"{args.name}: serving {chosen.name} with profile {st.profile} (job {st.job}), state {st.state}")
    return 0
