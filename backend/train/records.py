"""A training's console as the host parsed it (``backend.agent.host.train_log``), typed where it arrives: the
step and eval records a follower draws, the traps, the last epoch's summary and the whole summary. ``wire``
keeps each as the host said it (what ``--json`` prints)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

RecordKind = Literal["train", "eval"]
Accuracy = tuple[float | None, ...]  # acc_i per draft position, None where a position was not logged


@dataclass(frozen=True)
class TrainRecord:
    """One logged step (``kind`` train) or eval: its per-position accuracy, loss and learning rate (an eval's
    SpecForge ``simulated_acc_len`` where it gave one)."""

    step: int
    kind: RecordKind = "train"
    acc: Accuracy = ()
    loss: float | None = None
    lr: float | None = None
    simulated_acc_len: float | None = None
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any], kind: RecordKind | None = None) -> TrainRecord:
        """``kind`` where the host left it out (the summary's eval, a follow batch after the first)."""
        return cls(
            step=int(wire["step"]),
            kind=kind or ("eval" if wire.get("kind") == "eval" else "train"),
            acc=tuple(wire.get("acc") or ()),
            loss=wire.get("loss"),
            lr=wire.get("lr"),
            simulated_acc_len=wire.get("simulated_acc_len"),
            wire=wire,
        )


@dataclass(frozen=True)
class Trap:
    """A known way a training goes wrong, seen in its console (``kind``: nan, oom, disk_full, resume_restart...),
    from ``step`` on, in one sentence."""

    kind: str
    message: str
    step: int | None = None

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> Trap:
        return cls(wire["kind"], wire["message"], wire.get("step"))


@dataclass(frozen=True)
class EpochSummary:
    """The last epoch's summary line (the script era): its accuracy per position, and whether it was the run's
    last epoch."""

    epoch: int
    epochs: int
    acc: Accuracy = ()
    finished: bool = False

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> EpochSummary:
        return cls(wire["epoch"], wire["epochs"], tuple(wire.get("acc") or ()), bool(wire.get("finished")))


@dataclass(frozen=True)
class TrainSummary:
    """Where the training stands (``train.status``, each ``train.follow`` batch): the last step's figures, the
    time left, the last eval and epoch, the traps and what of the console could not be read. All None before
    the first step is logged."""

    era: str | None = None
    step: int | None = None
    first_step: int | None = None
    total_steps: int | None = None
    eta_s: float | None = None
    step_time_s: float | None = None
    samples_s: float | None = None
    loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    acc: Accuracy = ()
    eval: TrainRecord | None = None
    epoch: EpochSummary | None = None
    traps: tuple[Trap, ...] = ()
    notes: tuple[str, ...] = ()
    per_position_source: str | None = None  # train.status only: console, or the tracker's event files
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> TrainSummary:
        last_eval, epoch = wire.get("eval"), wire.get("epoch")
        return cls(
            era=wire.get("era"),
            step=wire.get("step"),
            first_step=wire.get("first_step"),
            total_steps=wire.get("total_steps"),
            eta_s=wire.get("eta_s"),
            step_time_s=wire.get("step_time_s"),
            samples_s=wire.get("samples_s"),
            loss=wire.get("loss"),
            lr=wire.get("lr"),
            grad_norm=wire.get("grad_norm"),
            acc=tuple(wire.get("acc") or ()),
            eval=None if not last_eval else TrainRecord.from_json(last_eval, "eval"),
            epoch=None if not epoch else EpochSummary.from_json(epoch),
            traps=tuple(Trap.from_json(t) for t in wire.get("traps") or ()),
            notes=tuple(wire.get("notes") or ()),
            per_position_source=wire.get("per_position_source"),
            wire=wire,
        )


@dataclass(frozen=True)
class TrainBatch:
    """One ``train.follow`` batch: the records not seen before, oldest first, and the summary after them."""

    records: tuple[TrainRecord, ...]
    summary: TrainSummary
