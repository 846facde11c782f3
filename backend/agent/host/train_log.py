"""What a SpecForge training printed, read on the host next to its log: the console (``Reader``) and, where
the console gives no per-position curves, the tensorboard event files.

SpecForge comes in two eras (FIELD-NOTES-TRAINING-FLEET §A):
- unified (``specforge train -c run.yaml``, PyPI 0.2.0): every rank prints ``step N: {'acc_0': …}`` (a Python
  dict: ``nan`` bare), the eval's ``step N: {'eval/per_position_acc': [...], 'eval/simulated_acc_len': …}``.
- script (``torchrun scripts/train_eagle3.py``, until 2026-07): a tqdm bar on stderr redrawn with ``\\r``
  (``Training Epoch E: …| n/total [elapsed<left, 3.48s/it, loss=…, acc=…, time=…]``) and, where logging is
  configured, ``Eval - Step S [...], position i,  Acc: …`` lines (for train and eval alike). Its per-position curves
  otherwise live only in tensorboard event files under ``<output_dir>/runs``: read with the host's own
  ``tensorboard`` package where it is installed (a stdlib agent has no TFRecord reader; not by hand), else
  said so.

A reader keeps its place per job in the agent (``train.read_up``), so a status poll reads only what was
written since the last one.

Traps said out loud (``traps``): the loss turning NaN (from which step), CUDA out of memory (with what the
error itself says: the allocation, what was free, which processes held the GPU; the batch size and max length
only where the job's own arguments say them), Triton running out of shared memory compiling a kernel (flex
attention's: not GPU memory, and no batch size fixes it), a segfault, an NCCL collective timing out, a warm start
without a vocab mapping (SpecForge regenerates d2t/t2d from the new data and misaligns the drafter's lm_head
slots; PR #534), a resume whose log starts before the step it resumed from (the script era's ``--resume``
before 2026-03 silently started again from scratch).

Consoles are also pasted (issues, notes): the script era's per-epoch summary (``Train Epoch [E/N], position i,
Acc: …`` and ``pLoss: …``) is read as the epoch's accuracy per position (epoch N of N: the run finished), and
``notes`` says what was not read: a summary line cut short, a traceback without its exception line, a second run
in the same console. Stdlib only, 3.8+.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

MAX_RECORDS = 4000  # step records kept per reader; beyond, every other old one goes (curves stay whole)
WINDOW = 5  # train logs before a checkpoint whose spread gives its accuracy's interval

_INF = float("inf")
_STEP = re.compile(r"step (\d+): (\{.*\})\s*$")
_BARE = re.compile(r"(?<![\w\"])(nan|inf)(?![\w\"])")
_TQDM = re.compile(
    r"Training Epoch (\d+):\s*(\d+)%\|[^|]*\|\s*(\d+)/(\d+) \[([\d:]+)<([\d:?]+),\s*([\d.?]+)\s*(s/it|it/s)"
    r"(?:,\s*(.*?))?\]"
)
_EVAL_LINE = re.compile(r"Eval - Step (\d+) \[[^\]]*\], position (\d+),\s*(Acc|pLoss|Acceptance Rate): (\S+)")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
_EPOCH_LINE = re.compile(
    r"(Train|Eval|Test) Epoch \[(\d+)/(\d+)\], position (\d+),\s*(Acc|pLoss|Acceptance Rate): ([-+\d.eEnainf]+)\s*$"
)
_EPOCH_START = re.compile(r"(?:Train|Eval|Test) Epoch \[\d+/\d+\]")
# Triton's compile-time shared memory limit (flex attention's kernels on a 99 KiB-per-SM card): "out of resource:
# <kernel> Required: N Hardware limit: M", on one line or the numbers on the next.
_SMEM = re.compile(r"out of resource:\s*([\w-]+)")
_SMEM_NUMBERS = re.compile(r"Required:\s*(\d+)\s+Hardware limit:\s*(\d+)")
_CUDA_OOM = re.compile(r"CUDA out of memory\. Tried to allocate ([\d.]+ [KMGT]iB)")
_GPU_FREE = re.compile(r"GPU (\d+) has a total capacity of ([\d.]+ [KMGT]iB) of which ([\d.]+ [KMGT]iB) is free")
_PROCESS = re.compile(r"Process (\d+) has ([\d.]+ [KMGT]iB) memory in use")
_TORCH_HELD = re.compile(r"Of the allocated memory ([\d.]+ [KMGT]iB) is allocated by PyTorch")
_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]")
_SEGFAULT = re.compile(
    r"Segfault encountered|Fatal Python error: Segmentation fault|Segmentation fault \(core dumped\)"
)
_NOSPACE = re.compile(r"No space left on device|Disk quota exceeded")
_NCCL = re.compile(r"Watchdog caught collective|NCCL (?:watchdog )?timeout|ProcessGroupNCCL.*[Tt]imeout")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)(?:, in (\S+))?')
# What a line must hold for ``Reader._errors`` to look further (most lines hold none: tqdm redraws, step dicts).
_MARKS = ("rror", "out of", "Required:", "egfault", "atchdog", "NCCL", "Traceback", "Restored", "incompatible")
_EXCEPTION_AT = re.compile(r"(?:^|\]:\s*|\s)((?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception)\b:?.*)$")
_RESTORED = re.compile(r"Restored optimizer/scheduler state: epoch=(\d+), step=(\d+)")
_SHAPES = re.compile(r"incompatible draft tensor shapes.*")


def step_dict(text: str) -> Tuple[Optional[Dict[str, Any]], bool]:
    """The dict SpecForge's ``_logger`` printed (``str(dict)`` of floats and lists of floats), or None; and
    whether it held a bare ``nan`` or ``inf``."""
    text = text.replace("'", '"')
    odd = "nan" in text or "inf" in text
    if odd:  # rare: the regex only where it can matter (it costs more than the parse)
        text = _BARE.sub(lambda m: "NaN" if m.group(1) == "nan" else "Infinity", text)
    try:
        return json.loads(text), odd
    except ValueError:
        return None, odd


def _num(value: Any) -> Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _finite(value: Optional[float]) -> bool:
    return value is not None and not math.isnan(value) and not math.isinf(value)


def _fin(value: Any) -> Optional[float]:
    """A finite number, else None (NaN stays out of the records: it is said as a trap instead)."""
    number = _num(value)
    return number if _finite(number) else None


def _clock(text: str) -> Optional[float]:
    """tqdm's ``1:02:03`` / ``09:06`` as seconds; None for ``?``."""
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        return None
    total = 0
    for p in parts:
        total = total * 60 + p
    return float(total)


def _positions(d: Dict[str, Any], prefix: str) -> List[Optional[float]]:
    out: List[Optional[float]] = []
    i = 0
    while prefix + str(i) in d:
        out.append(_num(d[prefix + str(i)]))
        i += 1
    return out


_ACC_KEYS = tuple("acc_%d" % i for i in range(64))
_PLOSS_KEYS = tuple("ploss_%d" % i for i in range(64))
_RATE_KEYS = tuple("acceptance_rate_%d" % i for i in range(64))


def _width(d: Dict[str, Any], keys: Tuple[str, ...]) -> int:
    n = 0
    while n < len(keys) and keys[n] in d:
        n += 1
    return n


def _clean(values: List[Optional[float]]) -> List[Optional[float]]:
    return [v if _finite(v) else None for v in values]


class Reader(object):
    """What one training's console says so far: step records, evals, progress, traps. ``feed`` takes raw
    bytes as they were written (tqdm redraws with ``\\r``); the partial last line waits for the next feed."""

    def __init__(self, args: Optional[Dict[str, Any]] = None) -> None:
        self.args = args or {}
        self.era = self.args.get("era") or "unified"
        self.records: List[Dict[str, Any]] = []  # {"step", "acc", "ploss", "loss", "lr", "grad_norm", ...}
        self.evals: List[Dict[str, Any]] = []  # {"step", "acc", "simulated_acc_len", "loss"}
        self.progress: Dict[str, Any] = {}  # the script era's tqdm figures
        self.traps: Dict[str, Dict[str, Any]] = {}
        self.first_step: Optional[int] = None
        self.last_step: Optional[int] = None
        self.restored_step: Optional[int] = None
        self.last_error: Optional[str] = None
        self.epochs: List[Dict[str, Any]] = []  # the per-epoch summaries: {"epoch", "of", "phase", "acc", "ploss"}
        self.notes: List[str] = []  # what could not be read, said once each
        self._smem: Optional[Dict[str, Any]] = None  # a Triton shared-memory failure whose numbers may follow
        self._frames: List[Tuple[str, str, str]] = []  # the open traceback's frames (file, line, function)
        self._traceback = False  # a "Traceback (most recent call last):" not yet closed by its exception line
        self._cut_epoch: List[str] = []
        self.lines = 0
        self._partial = b""
        self._block: Optional[Dict[str, Any]] = None  # script era: the Eval - Step lines of one step being gathered
        self._new: List[Dict[str, Any]] = []  # records since the last take_new()
        self._width = 0  # positions in a unified step dict
        warm = self.args.get("warm_start")
        if warm and not self.args.get("vocab_mapping"):
            self._trap(
                "vocab_mapping",
                None,
                "warm start from %s without a vocab mapping: SpecForge regenerates d2t/t2d from the new data and "
                "misaligns the drafter's lm_head slots, and acc_i will not show it (SpecForge PR #534); set "
                "vocab_mapping in [trainings.%s]" % (warm, self.args.get("training") or "NAME"),
            )

    # --- input ---

    def feed(self, data: bytes) -> None:
        data = self._partial + data
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            self._partial = data
            return
        self._partial = data[cut + 1 :]
        for raw in data[: cut + 1].replace(b"\r", b"\n").split(b"\n"):
            if raw:
                self.line(raw.decode("utf-8", "replace"))

    def line(self, text: str) -> None:
        self.lines += 1
        m = _STEP.search(text) if "step " in text else None
        if m:
            step, body = int(m.group(1)), m.group(2)
            # Every rank prints the same dict (global sums): the first copy is read, the others only counted.
            done = self.evals if "'eval/" in body else self.records
            if done and done[-1]["step"] == step:
                return
            d, odd = step_dict(body)
            if d is not None:
                self._unified(step, d, odd)
            return
        if "Training Epoch" in text:
            m = _TQDM.search(text)
            if m:
                self._tqdm(m)
                # A print() after a redraw shares its line (tqdm ends with \r, not \n): read on past it.
                text = text[m.end() :]
        if "Eval - Step" in text:
            m = _EVAL_LINE.search(text)
            if m:
                self._eval_line(int(m.group(1)), int(m.group(2)), m.group(3), _num(m.group(4)))
            return
        if "Epoch [" in text:
            m = _EPOCH_LINE.search(text)
            if m:
                self._epoch_line(m)
                return
            if _EPOCH_START.search(text):
                self._cut_epoch.append(text.strip())
                return
        self._errors(text)

    def _errors(self, text: str) -> None:
        """The failures a console line can show: each trap once, the last error line, an open traceback."""
        if not self._traceback and not any(mark in text for mark in _MARKS):
            return
        if self._smem is not None and "Required:" in text:
            self._smem_numbers(text)
        m = _SMEM.search(text)
        if m:
            self._smem = {"kernel": m.group(1), "rank": self._rank(text, m.start())}
            self._smem_numbers(text)
        m = _CUDA_OOM.search(text)
        if m or (_OOM.search(text) and "out of resource" not in text):
            rank = self._rank(text, m.start() if m else len(text))
            self._trap("oom", self.last_step, self._oom_message(text, m, rank))
        if _SEGFAULT.search(text):
            self._trap(
                "segfault",
                self.last_step,
                "the training crashed in native code (a segmentation fault)%s: the log holds no Python frame to "
                "point at; a compiled library (torch, its CUDA kernels, flash-attn) failed, not the script's Python"
                % self._at_step(),
            )
        if _NOSPACE.search(text):
            self._trap(
                "disk_full",
                self.last_step,
                "the disk filled%s (No space left on device): a checkpoint being written then is incomplete and "
                "is not offered; free space where the output folder is, then resume" % self._at_step(),
            )
        m = _NCCL.search(text)
        if m:
            rank = self._rank(text, m.start())
            self._trap(
                "nccl_timeout",
                self.last_step,
                "an NCCL collective timed out%s%s (the watchdog stopped it): another rank stopped taking part "
                "(crashed, hung or stalled on data); the first error of any rank says why"
                % ("" if rank is None else " on rank %s" % rank, self._at_step()),
            )
        self._traceback_line(text)
        m = _RESTORED.search(text)
        if m:
            self.restored_step = int(m.group(2))
            return
        m = _SHAPES.search(text)
        if m:
            self._trap("shapes", None, "SpecForge refused the warm start: " + m.group(0).strip())
            return
        if text.startswith(("RuntimeError", "ValueError", "torch.", "AssertionError")) or "Error: " in text:
            m = _EXCEPTION_AT.search(text.rsplit("]: ", 1)[-1])
            self.last_error = (m.group(1) if m else text).strip()[:300]

    # --- failures ---

    @staticmethod
    def _rank(text: str, at: int) -> Optional[str]:
        """The rank a message at ``at`` belongs to: the last ``[rankN]`` before it (pastes run ranks' lines
        together)."""
        before = _RANK.findall(text[:at])
        return before[-1] if before else None

    def _at_step(self) -> str:
        return "" if self.last_step is None else " at step %d" % self.last_step

    def _smem_numbers(self, text: str) -> None:
        smem = self._smem or {}
        m = _SMEM_NUMBERS.search(text)
        if m:
            smem["required"], smem["limit"] = int(m.group(1)), int(m.group(2))
        need = (
            "needs %d bytes of shared memory per block and the GPU has %d" % (smem["required"], smem["limit"])
            if "required" in smem
            else "needs more shared memory than the GPU has (the numbers are not in the log)"
        )
        message = (
            "Triton could not compile %s%s: it %s. This is not GPU memory: batch size and max length do not "
            "change it. Smaller kernel blocks do (flex attention's kernel_options BLOCK_M/BLOCK_N 32, or fewer "
            "num_stages; SpecForge #336), or --attention-backend sdpa, or a GPU with more shared memory per SM"
            % (smem.get("kernel"), "" if smem.get("rank") is None else " on rank %s" % smem["rank"], need)
        )
        trap = self.traps.get("triton_smem")
        if trap is None:
            self._trap("triton_smem", self.last_step, message)
        else:
            trap["message"] = message  # the numbers came on a later line

    def _oom_message(self, text: str, tried: "Optional[re.Match[str]]", rank: Optional[str]) -> str:
        """CUDA out of memory, with what the error says of the GPU and only the job's own settings."""
        parts = ["CUDA out of memory%s%s" % (self._at_step(), "" if rank is None else " on rank %s" % rank)]
        free = _GPU_FREE.search(text)
        if tried:
            parts.append(": tried to allocate %s" % tried.group(1))
            if free:
                parts.append(" with %s of GPU %s's %s free" % (free.group(3), free.group(1), free.group(2)))
        held = _PROCESS.findall(text)
        if held:
            parts.append(
                "; processes holding that GPU: %s (this training among them: stop any other)"
                % ", ".join("%s %s" % (pid, size) for pid, size in held)
            )
        torch_held = _TORCH_HELD.search(text)
        if torch_held:
            parts.append("; PyTorch holds %s" % torch_held.group(1))
        known = [
            "%s %s" % (what, self.args[key])
            for key, what in (("batch_size", "batch size"), ("max_length", "max length"))
            if self.args.get(key)
        ]
        parts.append(
            ". Lower max_length or the batch size%s, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
            % (" (%s)" % ", ".join(known) if known else "")
        )
        return "".join(parts)

    def _traceback_line(self, text: str) -> None:
        """Follow a traceback to its exception line; one that ends without it is said in ``notes``."""
        if "Traceback (most recent call last)" in text:
            self._traceback, self._frames = True, []
            return
        if not self._traceback:
            return
        frame = _FRAME.search(text)
        if frame:
            self._frames.append((frame.group(1), frame.group(2), frame.group(3) or "?"))
        elif _EXCEPTION_AT.search(text.strip()) and not text.startswith(" "):
            self._traceback = False

    # --- the per-epoch summaries ---

    def _epoch_line(self, m: "re.Match[str]") -> None:
        phase, epoch, of, pos = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        key = {"Acc": "acc", "pLoss": "ploss", "Acceptance Rate": "ar"}[m.group(5)]
        last = self.epochs[-1] if self.epochs else None
        if last is None or (last["epoch"], last["of"], last["phase"]) != (epoch, of, phase):
            last = {"epoch": epoch, "of": of, "phase": phase, "acc": {}, "ploss": {}, "ar": {}}
            self.epochs.append(last)
        last[key][pos] = _num(m.group(6))

    def epoch_summary(self) -> Optional[Dict[str, Any]]:
        """The last epoch's summary: its accuracy and pLoss per position (positions in order, None where a line
        is missing), and whether it was the run's last epoch."""
        train = [e for e in self.epochs if e["phase"] == "Train"] or self.epochs
        if not train:
            return None
        e = train[-1]

        def row(values: Dict[int, Optional[float]]) -> List[Optional[float]]:
            return _clean([values.get(i) for i in range(max(values) + 1)]) if values else []

        return {
            "epoch": e["epoch"],
            "epochs": e["of"],
            "acc": row(e["acc"]),
            "ploss": row(e["ploss"]),
            "finished": e["epoch"] == e["of"],
        }

    # --- the unified era ---

    def _unified(self, step: int, d: Dict[str, Any], odd: bool = False) -> None:
        if "eval/avg_loss" in d or "eval/per_position_acc" in d:
            acc = d.get("eval/per_position_acc")
            rec = {
                "step": step,
                "acc": _clean([_num(a) for a in acc]) if isinstance(acc, list) else [],
                "simulated_acc_len": _fin(d.get("eval/simulated_acc_len")),
                "loss": _fin(d.get("eval/avg_loss")),
            }
            self.evals.append(rec)
            self._new.append(dict(rec, kind="eval"))
            return
        n = self._width
        if n >= len(_ACC_KEYS) or _ACC_KEYS[n] in d or (n and _ACC_KEYS[n - 1] not in d):
            n = self._width = _width(d, _ACC_KEYS)  # the positions (ttt_length), learned from the first dict
        get = d.get
        acc = [get(k) for k in _ACC_KEYS[:n]]
        ploss = [get(k) for k in _PLOSS_KEYS[:n]]
        rate = [get(k) for k in _RATE_KEYS[:n]]
        nan = False
        if odd:  # a bare nan or inf in the line: said as a trap, kept out of the records
            acc, ploss, rate = _clean(acc), _clean(ploss), _clean(rate)
            nan = None in acc or None in ploss
        loss = _fin(d.get("loss"))
        rec = {
            "step": step,
            "acc": acc,
            "ploss": ploss,
            "loss": loss,
            "lr": _fin(d.get("lr")),
            "grad_norm": _fin(d.get("grad_norm")),
            "acceptance_rate": rate,
            "step_time_s": _num(d.get("perf/optimizer_step_time_s", d.get("train/perf/optimizer_step_time_s"))),
            "samples_s": _num(d.get("perf/global_samples_per_second", d.get("train/perf/global_samples_per_second"))),
        }
        self._record(rec, nan or (loss is None and "loss" in d))

    # --- the script era ---

    def _tqdm(self, m: "re.Match[str]") -> None:
        epoch, n, total = int(m.group(1)), int(m.group(3)), int(m.group(4))
        rate, unit = _num(m.group(7)), m.group(8)
        post = dict(kv.split("=", 1) for kv in (m.group(9) or "").split(", ") if "=" in kv)
        step = epoch * total + n
        per_step = rate if unit == "s/it" else (1.0 / rate if rate else None)
        if self.progress.get("total") not in (None, total):  # another run's bar (a pasted console, notes)
            self.notes.append(
                "a second run in the console (its bar counts %d steps an epoch, the first %d): only the later one "
                "is read" % (total, self.progress["total"])
            )
            self.records, self.first_step, self.last_step = [], None, None
        self.progress = {
            "epoch": epoch,
            "n": n,
            "total": total,
            "elapsed_s": _clock(m.group(5)),
            "left_s": _clock(m.group(6)),
            "step_time_s": per_step,
        }
        if self.records and self.records[-1]["step"] == step:
            return
        loss = _num(post.get("loss"))
        acc = _num(post.get("acc"))
        rec = {
            "step": step,
            "acc": [],
            "acc_mean": acc if _finite(acc) else None,
            "ploss": [],
            "loss": loss if _finite(loss) else None,
            "lr": None,
            "grad_norm": _fin(post.get("grad_norm")),
            "acceptance_rate": [],
            "step_time_s": _num((post.get("time") or "").rstrip("s")) or per_step,
            "samples_s": None,
        }
        self._record(rec, post.get("loss") is not None and not _finite(loss))

    def _eval_line(self, step: int, pos: int, what: str, value: Optional[float]) -> None:
        block = self._block
        if block is None or block["step"] != step or (what == "Acc" and pos == 0 and block["acc"]):
            self._close_block()
            block = self._block = {"step": step, "acc": {}, "ploss": {}, "ar": {}}
        key = {"Acc": "acc", "pLoss": "ploss", "Acceptance Rate": "ar"}[what]
        block[key][pos] = value
        if key == "ploss" and value is not None and not _finite(value):
            self._trap("nan", step, self._nan_message(step))

    def _close_block(self) -> None:
        block, self._block = self._block, None
        if not block or not block["acc"]:
            return
        acc = _clean([block["acc"].get(i) for i in range(max(block["acc"]) + 1)])
        ploss = _clean([block["ploss"].get(i) for i in range(max(block["ploss"] or {0: 0}) + 1)])
        # The script prints train and eval alike ("Eval - Step"); the second block of a step is the eval's.
        rec = self._record_at(block["step"])
        if rec is not None and rec["acc"]:
            rec = {"step": block["step"], "acc": acc, "simulated_acc_len": _chain(acc) - 1.0, "loss": None}
            self.evals.append(rec)
            self._new.append(dict(rec, kind="eval"))
            return
        if rec is None:
            rec = {"step": block["step"], "loss": None, "lr": None, "grad_norm": None, "step_time_s": None}
            rec["samples_s"] = None
            self._record(dict(rec, acc=acc, ploss=ploss, acceptance_rate=[]), False)
        else:
            rec.update(acc=acc, ploss=ploss)

    # --- shared ---

    def _record_at(self, step: int) -> Optional[Dict[str, Any]]:
        for r in reversed(self.records):
            if r["step"] <= step:
                return r if r["step"] == step else None
        return None

    def flush(self) -> None:
        """Close what waits for more lines (the script era's last block)."""
        self._close_block()

    def _record(self, rec: Dict[str, Any], nan: bool) -> None:
        step = rec["step"]
        if self.first_step is None:
            self.first_step = step
            self._check_resume(step)
        self.last_step = step
        if nan:
            self._trap("nan", step, self._nan_message(step))
        self.records.append(rec)
        self._new.append(dict(rec, kind="train"))
        if len(self.records) > MAX_RECORDS:
            self.records = self.records[: MAX_RECORDS // 2 : 2] + self.records[MAX_RECORDS // 2 :]

    def _nan_message(self, step: int) -> str:
        lr = next((r.get("lr") for r in reversed(self.records) if r.get("lr")), None)
        return (
            "the loss is NaN from step %d%s: nothing after it learns; stop, lower the learning rate or check the "
            "data, and resume from a checkpoint before step %d"
        ) % (
            step,
            "" if lr is None else " (lr %.2e)" % lr,
            step,
        )

    def _check_resume(self, first: int) -> None:
        resumed = self.args.get("resume_step")
        if not resumed:
            return
        if first < int(resumed):
            self._trap(
                "resume_restart",
                first,
                "resumed from step %d but the log starts again at step %d: SpecForge started from scratch%s"
                % (
                    int(resumed),
                    first,
                    " (scripts/train_eagle3.py's --resume before 2026-03 never matched its own epoch_E_step_S "
                    "folders); stop it and update SpecForge"
                    if self.era == "script"
                    else "; stop it and check training.resume_from",
                ),
            )

    def _trap(self, kind: str, step: Optional[int], message: str) -> None:
        if kind not in self.traps:
            self.traps[kind] = {"kind": kind, "step": step, "message": message}

    def take_new(self) -> List[Dict[str, Any]]:
        out, self._new = self._new, []
        return out

    # --- output ---

    def total_steps(self) -> Optional[int]:
        if self.progress.get("total"):
            epochs = int(self.args.get("epochs") or 1)
            return int(self.progress["total"]) * epochs
        total = self.args.get("total_steps")
        return int(total) if total else None

    def summary(self) -> Dict[str, Any]:
        last = self.records[-1] if self.records else None
        step_time = None
        for r in reversed(self.records[-WINDOW:]):
            if r.get("step_time_s"):
                step_time = r["step_time_s"]
                break
        total = self.total_steps()
        eta = None
        if self.era == "script" and self.progress.get("left_s") is not None:
            epochs_left = int(self.args.get("epochs") or 1) - 1 - int(self.progress.get("epoch") or 0)
            eta = self.progress["left_s"] + max(0, epochs_left) * (self.progress.get("total") or 0) * (step_time or 0)
        elif total and step_time and self.last_step is not None:
            # The log interval's mean step time (includes data waits): what the rest will take at this pace.
            eta = max(0, total - self.last_step) * step_time
        last_eval = self.evals[-1] if self.evals else None
        epoch = self.epoch_summary()
        if epoch is not None and epoch["finished"]:
            eta = 0.0  # its last epoch's summary is written: the run is done, whatever bar was seen before it
        acc: List[Optional[float]] = next((r["acc"] for r in reversed(self.records) if r.get("acc")), [])
        return {
            "era": self.era,
            "step": self.last_step,
            "first_step": self.first_step,
            "total_steps": total,
            "eta_s": None if eta is None else round(eta, 1),
            "step_time_s": step_time,
            "samples_s": last.get("samples_s") if last else None,
            "loss": last.get("loss") if last else None,
            "lr": last.get("lr") if last else None,
            "grad_norm": last.get("grad_norm") if last else None,
            "acc": acc or (epoch["acc"] if epoch else []),
            "eval": last_eval,
            "epoch": epoch,
            "traps": list(self.traps.values()),
            "last_error": self.last_error,
            "notes": self._notes(),
            "lines": self.lines,
            "records": len(self.records),
        }

    def _notes(self) -> List[str]:
        """What of the console could not be read, each said once."""
        notes = list(self.notes)
        if self._cut_epoch:
            notes.append(
                "%d per-epoch summary line%s cut short, not read: %s"
                % (len(self._cut_epoch), "s" if len(self._cut_epoch) > 1 else "", repr(self._cut_epoch[-1][:80]))
            )
        if self._traceback:
            last = self._frames[-1] if self._frames else None
            notes.append(
                "a traceback ends without its exception line (cut?)"
                + ("" if last is None else ", last frame %s:%s in %s" % (os.path.basename(last[0]), last[1], last[2]))
            )
        return notes

    def accuracy_at(self, step: int) -> Optional[Dict[str, Any]]:
        """The per-position accuracy a checkpoint saved at ``step`` carries: the eval at that step if one ran,
        else the mean of the last ``WINDOW`` train logs up to it; low/high = that window's spread (the logged
        noise, not the training-serving gap)."""
        window = [r for r in self.records if r["step"] <= step and r.get("acc")][-WINDOW:]
        evals = [e for e in self.evals if e["step"] == step and e.get("acc")]
        if not window and not evals:
            return None
        width = max((len(r["acc"]) for r in window), default=0)
        mean, low, high = [], [], []
        for i in range(width):
            vals = [r["acc"][i] for r in window if i < len(r["acc"]) and r["acc"][i] is not None]
            if not vals:
                break
            m = sum(vals) / len(vals)
            half = (max(vals) - min(vals)) / 2.0
            mean.append(m)
            low.append(max(0.0, m - half))
            high.append(min(1.0, m + half))
        if evals:
            acc = [a for a in evals[-1]["acc"] if a is not None]
            halves = [(high[i] - low[i]) / 2.0 for i in range(len(low))] + [0.0] * len(acc)
            return {
                "source": "eval",
                "acc": acc,
                "low": [max(0.0, a - halves[i]) for i, a in enumerate(acc)],
                "high": [min(1.0, a + halves[i]) for i, a in enumerate(acc)],
                "logs": len(window),
            }
        return {"source": "train", "acc": mean, "low": low, "high": high, "logs": len(window)}

    def series(self) -> Dict[str, Any]:
        return {"train": self.records, "eval": self.evals}


def _chain(rates: List[Optional[float]]) -> float:
    total, reached = 1.0, 1.0
    for a in rates:
        if a is None:
            break
        reached *= a
        total += reached
    return total


# --- tensorboard, where the host has it ----------------------------------------------------------------


def tensorboard_records(output_dir: str) -> Tuple[Optional[List[Dict[str, Any]]], str]:
    """(per-step records from ``<output_dir>/runs`` event files, how): read with the host's ``tensorboard``
    package (a well-kept reader); (None, why) when it is missing or there are no event files."""
    runs = os.path.join(output_dir, "runs")
    files = []
    for root, _, names in os.walk(runs):
        files += [os.path.join(root, n) for n in names if "tfevents" in n]
    if not files:
        return None, "no tensorboard event files under %s" % runs
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # type: ignore
    except Exception:  # not installed (or broken): the agent has no TFRecord reader of its own
        return None, "tensorboard is not installed on the host: per-position curves need `pip install tensorboard`"
    by_step: Dict[int, Dict[str, float]] = {}
    for path in sorted(files):
        for event in EventFileLoader(path).Load():
            for value in getattr(event.summary, "value", ()):
                number = value.simple_value if value.HasField("simple_value") else None
                if number is None and value.HasField("tensor"):
                    vals = list(value.tensor.float_val) or list(value.tensor.double_val)
                    number = vals[0] if vals else None
                if number is not None:
                    by_step.setdefault(int(event.step), {})[value.tag] = float(number)
    out = []
    for step in sorted(by_step):
        tags = by_step[step]
        out.append(
            {
                "step": step,
                "acc": _clean(_positions(tags, "train/acc_")),
                "ploss": _clean(_positions(tags, "train/ploss_")),
                "lr": tags.get("train/lr"),
                "grad_norm": tags.get("train/grad_norm"),
                "eval_acc": _clean(_positions(tags, "eval/acc_")),
            }
        )
    return out, "tensorboard event files (%d)" % len(files)
