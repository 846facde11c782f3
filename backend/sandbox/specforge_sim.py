"""SIMULATED SpecForge for the specdeck sandbox: not SpecForge, no GPU, no torch, no weights read or learnt.

``python -m backend.sandbox.specforge_sim train -c RUN.json [section.key=value ...]`` speaks the unified era
(``specforge train``, PyPI 0.2.0): ``step N: {...}`` on every rank (``deployment.trainer.nproc_per_node``),
the eval's ``eval/*`` dict, checkpoints ``<output_dir>/<run_id>-step<N>/training_state.pt`` +
``training_state_rank{r}.pt`` with ``<run_id>-latest``/``-best`` links and ``<run_id>.best_meta.json``, the
"rewinding checkpoint timeline" warning, ``training.resume_from`` and ``model.draft_checkpoint_path``.
``... export --to sglang --checkpoint C --draft-config J --output-dir D`` writes a servable folder.
``... script [--nproc-per-node N] <scripts/train_eagle3.py flags>`` speaks the script era: the tqdm bar on
stderr redrawn with ``\\r``, ``epoch_E_step_S/`` folders (servable), and, with env
``SPECDECK_SIM_SPECFORGE_INFO=1`` (as if logging were configured, PR #393), its ``Eval - Step`` lines.

It learns: each position's accuracy rises from the init drafter's (the SGLang simulator's rates for that
folder, ``simulator.drafter_rates``, so one model of a drafter serves both) towards a ceiling,
acc_i(s) = c_i − (c_i − a_i)·e^(−s/TAU), logged with a little noise. A checkpoint's ``training_state.pt`` is a
sparse file that starts with one JSON line (SIMULATED: real ones are torch pickles) holding its step and the
rates it would serve with; the export writes them as the drafter's ``specdeck_sim.accept``, which the SGLang
simulator serves, so a served checkpoint accepts per position as its accuracy says. A warm start without
``model.vocab_mapping_path`` regenerates the mapping and serves at ``MISMAPPED`` of that, while the logged
accuracy looks the same (SpecForge PR #534).

Env: ``SPECDECK_SIM_SPECFORGE_STEP_S`` (seconds a step, default 0.1), ``SPECDECK_SIM_SPECFORGE_FAIL`` =
``nan@S`` (the loss goes NaN from step S) or ``oom@S`` (CUDA out of memory at step S),
``SPECDECK_SIM_SPECFORGE_REV`` (the script era's date, default 2026-06; before 2026-03 ``--resume`` silently
starts again from step 0). Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from backend.sandbox import fixtures
from backend.sandbox.sglang_sim.folders import expected_eagle3_shapes, first_misfit
from backend.sandbox.sglang_sim.timing import drafter_rates

TAU = 150.0  # steps for the accuracy to close 63% of its gap to the ceiling
NOISE = 0.012  # the logged accuracy's noise per log
MISMAPPED = 0.55  # what a regenerated vocab mapping leaves of the drafter's serving acceptance
STATE_BYTES = 2_382_317_568  # a Kimi-K2 drafter's bf16 weights: the size of the shared state file
RANK_BYTES = 64 << 20


def step_s() -> float:
    return float(os.environ.get("SPECDECK_SIM_SPECFORGE_STEP_S") or 0.1)


def fault() -> Tuple[Optional[str], int]:
    text = os.environ.get("SPECDECK_SIM_SPECFORGE_FAIL") or ""
    kind, _, at = text.partition("@")
    return (kind or None), int(at or 0)


# --- the learning model -------------------------------------------------------------------------------


class Learner(object):
    """Per-position accuracy against the step, from an init drafter (or from scratch)."""

    def __init__(self, init: Optional[str], positions: int, mapped: bool, seed: int) -> None:
        if init:
            with open(os.path.join(init, "config.json")) as f:
                config = json.load(f)
            self.start = drafter_rates(init, config, positions)
            self.ceiling = [a + 0.45 * (1.0 - a) for a in self.start]
        else:
            self.start = [0.08 * 0.9**i for i in range(positions)]
            self.ceiling = [0.78 * 0.93**i for i in range(positions)]
        self.serve_factor = MISMAPPED if init and not mapped else 1.0
        self.rng = random.Random(seed)

    def acc(self, step: int) -> List[float]:
        gone = math.exp(-step / TAU)
        return [c - (c - self.start[i]) * gone for i, c in enumerate(self.ceiling)]

    def logged(self, step: int) -> List[float]:
        return [min(1.0, max(0.0, a + self.rng.gauss(0.0, NOISE))) for a in self.acc(step)]

    def serve(self, step: int) -> List[float]:
        return [round(a * self.serve_factor, 4) for a in self.acc(step)]


def plosses(acc: List[float]) -> List[float]:
    return [round(-math.log(max(a, 1e-3)) * 1.7 + 0.4, 4) for a in acc]


def loss_of(ploss: List[float]) -> float:
    return sum(0.8**i * p for i, p in enumerate(ploss))


# --- data and checkpoints -----------------------------------------------------------------------------


def count_samples(path: str) -> int:
    """Samples in a prepared hidden-states folder (``data_*.ckpt`` files) or a JSONL data file (lines)."""
    if os.path.isdir(path):
        n = 0
        for _, _, names in os.walk(path):
            n += sum(1 for name in names if name.startswith("data_") and name.endswith(".ckpt"))
        return n
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


ZIP_END = b"PK\x05\x06" + bytes(18)  # an empty zip's end-of-central-directory record


def write_state(path: str, state: Dict[str, Any], size: int) -> None:
    """A sparse ``.pt`` whose first line is the SIMULATED state as JSON, written in place as torch.save writes
    (a disk that fills leaves it cut), ending as torch.save's zip archives end: with the directory's record."""
    with open(path, "wb") as f:
        f.write((json.dumps(dict(state, specforge_sim=True)) + "\n").encode())
        f.truncate(size - len(ZIP_END))
        f.seek(0, 2)
        f.write(ZIP_END)


def read_state(path: str) -> Dict[str, Any]:
    with open(path, "rb") as f:
        state: Dict[str, Any] = json.loads(f.readline().decode())
        return state


def draft_tensors(config: Dict[str, Any]) -> Dict[str, Any]:
    return fixtures.eagle3_tensors(
        config["hidden_size"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"],
        config["intermediate_size"],
        config.get("draft_vocab_size") or config["vocab_size"],
        config["vocab_size"],
    )


def write_servable(folder: str, draft_config: Dict[str, Any], accept: List[float]) -> None:
    """config.json (with the rates the SGLang simulator serves) + a sparse model.safetensors."""
    os.makedirs(folder, exist_ok=True)
    config = dict(draft_config, specdeck_sim={"accept": accept})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    fixtures.write_sparse_safetensors(os.path.join(folder, "model.safetensors"), draft_tensors(draft_config))


def _link(output: str, name: str, target: str) -> None:
    link = os.path.join(output, name)
    if os.path.islink(link) or os.path.exists(link):
        os.remove(link)
    os.symlink(os.path.basename(target), link)


def check_fit(init: str, target: str) -> Optional[str]:
    """SpecForge's warm-start refusal when the init drafter's tensors do not fit the target, else None."""
    with open(os.path.join(target, "config.json")) as f:
        target_cfg = json.load(f)
    with open(os.path.join(init, "config.json")) as f:
        draft_cfg = json.load(f)
    files = [os.path.join(init, n) for n in sorted(os.listdir(init)) if n.endswith(".safetensors")]
    misfit = first_misfit(files, expected_eagle3_shapes(target_cfg, draft_cfg))
    if misfit is None:
        return None
    return "ValueError: %s has incompatible draft tensor shapes: checkpoint %s, model %s" % (init, misfit[0], misfit[1])


# --- the unified era ----------------------------------------------------------------------------------


def _set(config: Dict[str, Any], dotted: str) -> None:
    key, _, value = dotted.partition("=")
    parts = key.split(".")
    node = config
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    try:
        node[parts[-1]] = json.loads(value)
    except ValueError:
        node[parts[-1]] = value


def _fmt(d: Dict[str, Any]) -> str:
    # SpecForge prints ``str(dict)`` of floats: repr(nan) is nan, as there.
    return "{" + ", ".join("%r: %r" % (k, v) for k, v in d.items()) + "}"


def train_unified(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="specforge train")
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("overrides", nargs="*")
    ns = parser.parse_args(argv)
    with open(ns.config) as f:
        cfg = json.load(f)
    for o in ns.overrides:
        _set(cfg, o)
    model, data, training = cfg.get("model") or {}, cfg.get("data") or {}, cfg.get("training") or {}
    out, run_id = cfg.get("output_dir") or "./output", cfg.get("run_id") or "specforge-run"
    world = int(((cfg.get("deployment") or {}).get("trainer") or {}).get("nproc_per_node") or 1)
    print("SIMULATED SpecForge 0.2.0 (the unified runtime): not SpecForge; no GPU, no model", flush=True)
    if training.get("resume_from") and model.get("draft_checkpoint_path"):
        print("ValueError: training.resume_from and model.draft_checkpoint_path are mutually exclusive", flush=True)
        return 2
    init = model.get("draft_checkpoint_path") or None
    if init:
        why = check_fit(init, model["target_model_path"])
        if why:
            print(why, flush=True)
            return 1
    path = data.get("hidden_states_path") or data.get("train_data_path")
    assert path is not None, "the run file names its data (specdeck writes one of the two)"
    batch = int(training.get("batch_size") or 1)
    per_epoch = max(1, count_samples(path) // (batch * world))
    total = per_epoch * int(training.get("num_epochs") or 1)
    if training.get("max_steps"):
        total = min(total, int(training["max_steps"]))
    ttt = int(training.get("ttt_length") or 7)
    learner = Learner(init, ttt, bool(model.get("vocab_mapping_path")), int(training.get("seed") or 42))
    start = 0
    if training.get("resume_from"):
        target = training["resume_from"]
        target = os.path.realpath(target) if os.path.islink(target) else target
        state = read_state(os.path.join(target, "training_state.pt"))
        if int(state.get("world_size") or world) != world:
            print("ValueError: checkpoint %s was written at world_size=%s" % (target, state.get("world_size")))
            return 1
        start = int(state["global_step"])
        learner.serve_factor = float(state.get("serve_factor", learner.serve_factor))
    log_every = int(training.get("log_interval") or 50)
    save_every = int(training.get("save_interval") or 0)
    eval_every = int(training.get("eval_interval") or 0) if data.get("eval_hidden_states_path") else 0
    lr0 = float(training.get("learning_rate") or 1e-4)
    kind, at = fault()
    os.makedirs(out, exist_ok=True)
    best = None
    meta_path = os.path.join(out, run_id + ".best_meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            best = json.load(f).get("score")
    began = time.monotonic()
    for step in range(start + 1, total + 1):
        time.sleep(step_s())
        if kind == "oom" and step >= at:
            print("Traceback (most recent call last):", flush=True)
            print('  File "specforge/training/controller.py", line 668, in _fit', flush=True)
            print(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.62 GiB. GPU 0 has a total "
                "capacity of 139.80 GiB of which 3.12 GiB is free. (SIMULATED)",
                flush=True,
            )
            return 1
        nan = kind == "nan" and step >= at
        if step % log_every == 0:
            acc = learner.logged(step)
            ploss = plosses(acc)
            metrics: Dict[str, Any] = {}
            metrics.update({"acc_%d" % i: float("nan") if nan else round(a, 4) for i, a in enumerate(acc)})
            metrics.update({"ploss_%d" % i: float("nan") if nan else p for i, p in enumerate(ploss)})
            metrics["acc"] = float("nan") if nan else round(sum(acc) / len(acc), 4)
            metrics["loss"] = float("nan") if nan else round(loss_of(ploss), 4)
            metrics.update({"acceptance_rate_%d" % i: round(a * 0.93, 4) for i, a in enumerate(acc)})
            metrics["acceptance_rate"] = round(sum(acc) / len(acc) * 0.93, 4)
            metrics["grad_norm"] = float("nan") if nan else round(0.9 * math.exp(-step / 400.0) + 0.2, 4)
            metrics["lr"] = lr0 * min(1.0, step / max(1.0, 0.015 * total)) * (1 - 0.9 * step / total)
            elapsed = time.monotonic() - began
            began = time.monotonic()
            per = elapsed / log_every
            metrics.update(
                {
                    "perf/optimizer_steps_per_hour": round(3600.0 / per, 1),
                    "perf/optimizer_step_time_s": round(per, 4),
                    "perf/data_wait_time_s": round(per * 0.04, 4),
                    "perf/train_compute_time_s": round(per * 0.95, 4),
                    "perf/durable_ack_time_s": 0.0,
                    "perf/global_samples_per_second": round(batch * world / per, 2),
                }
            )
            line = "step %d: %s" % (step, _fmt(metrics))
            for _ in range(world):
                print(line, flush=True)
        evaluated = None
        if eval_every and step % eval_every == 0:
            acc = [round(a, 4) for a in learner.acc(step)]
            sim_len = 0.0
            reached = 1.0
            for a in acc:
                reached *= a
                sim_len += reached
            evaluated = {
                "eval/avg_loss": round(loss_of(plosses(acc)), 4),
                "eval/avg_acc": acc[0],
                "eval/per_position_acc": acc,
                "eval/simulated_acc_len": round(sim_len, 4),
            }
            evaluated.update({"eval/acceptance_rate_%d" % i: round(a * 0.93, 4) for i, a in enumerate(acc)})
            evaluated.update({"eval/ploss_%d" % i: p for i, p in enumerate(plosses(acc))})
            line = "step %d: %s" % (step, _fmt(evaluated))
            for _ in range(world):
                print(line, flush=True)
        is_best = evaluated is not None and not nan and (best is None or evaluated["eval/simulated_acc_len"] > best)
        if (save_every and step % save_every == 0) or is_best or step == total:
            folder = save_unified(out, run_id, step, learner, world, nan)
            if is_best:
                best = evaluated["eval/simulated_acc_len"]  # type: ignore[index]
                _link(out, run_id + "-best", folder)
                with open(meta_path, "w") as f:
                    json.dump(
                        {
                            "run_id": run_id,
                            "step": step,
                            "score": best,
                            "metric": "eval/simulated_acc_len",
                            "metrics": evaluated,
                        },
                        f,
                        indent=2,
                    )
    return 0


def save_unified(out: str, run_id: str, step: int, learner: Learner, world: int, nan: bool) -> str:
    stale = []
    for name in sorted(os.listdir(out)):
        tail = name[len(run_id) + 5 :]
        if name.startswith(run_id + "-step") and tail.isdigit() and int(tail) >= step:
            stale.append(os.path.join(out, name))
    if stale:
        print("WARNING: rewinding checkpoint timeline at step %d: deleting %s" % (step, ", ".join(stale)), flush=True)
        for path in stale:
            for n in os.listdir(path):
                os.remove(os.path.join(path, n))
            os.rmdir(path)
    folder = os.path.join(out, "%s-step%d" % (run_id, step))
    os.makedirs(folder, exist_ok=True)
    for rank in range(world):
        write_state(os.path.join(folder, "training_state_rank%d.pt" % rank), {"rank": rank}, RANK_BYTES)
    state = {
        "global_step": step,
        "epoch": 0,
        "strategy": "eagle3",
        "world_size": world,
        "serve_accept": [0.0] * len(learner.start) if nan else learner.serve(step),
        "serve_factor": learner.serve_factor,
    }
    write_state(os.path.join(folder, "training_state.pt"), state, STATE_BYTES)
    _link(out, run_id + "-latest", folder)
    return folder


def export(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="specforge export")
    parser.add_argument("--to", choices=("hf", "sglang"), required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--draft-config", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--vocab-mapping", default=None)
    ns = parser.parse_args(argv)
    path = ns.checkpoint
    if not os.path.isfile(os.path.join(path, "training_state.pt")):
        latest = [n for n in os.listdir(path) if n.endswith("-latest")] if os.path.isdir(path) else []
        if len(latest) != 1:
            print("FileNotFoundError: no complete checkpoint found under %s" % path, flush=True)
            return 1
        path = os.path.realpath(os.path.join(path, latest[0]))
    state = read_state(os.path.join(path, "training_state.pt"))
    with open(ns.draft_config) as f:
        draft_config = json.load(f)
    draft_config.pop("specdeck_sim", None)
    time.sleep(step_s() * 5)
    write_servable(ns.output_dir, draft_config, state["serve_accept"])
    print("exported sglang draft to %s (SIMULATED)" % ns.output_dir, flush=True)
    return 0


# --- the script era -----------------------------------------------------------------------------------


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return "%d:%02d:%02d" % (h, m, s) if h else "%02d:%02d" % (m, s)


def train_script(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/train_eagle3.py")
    parser.add_argument("--nproc-per-node", type=int, default=1)  # torchrun's, in front
    parser.add_argument("--target-model-path", required=True)
    parser.add_argument("--draft-model-config")
    parser.add_argument("--train-data-path", required=True)
    parser.add_argument("--train-hidden-states-path")
    parser.add_argument("--eval-hidden-states-path")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--num-epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--ttt-length", type=int, default=7)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--ckpt-dir")
    parser.add_argument("--eval-interval", type=int, default=5000)
    parser.add_argument("--save-interval", type=int, default=5000)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--total-steps", type=int)
    parser.add_argument("--report-to", default="none")
    parser.add_argument("--chat-template", default="llama3")
    ns, _ = parser.parse_known_args(argv)
    info = os.environ.get("SPECDECK_SIM_SPECFORGE_INFO") == "1"
    print("SIMULATED SpecForge scripts/train_eagle3.py: not SpecForge; no GPU, no model", flush=True)
    if ns.ckpt_dir:
        if not os.path.isdir(ns.ckpt_dir):
            print("ValueError: Provided base model dir %s is not a valid directory." % ns.ckpt_dir, flush=True)
            return 1
        why = check_fit(ns.ckpt_dir, ns.target_model_path)
        if why:
            print(why, flush=True)
            return 1
    data = ns.train_hidden_states_path or ns.train_data_path
    per_epoch = max(1, count_samples(data) // (ns.batch_size * ns.nproc_per_node))
    # Fine-tuning regenerates the vocab mapping from the data in this era, always (PR #534).
    learner = Learner(ns.ckpt_dir, ns.ttt_length, False, 42)
    start = 0
    if ns.resume and os.path.isdir(ns.output_dir):
        found = sorted(
            (int(n.split("_")[3]), n) for n in os.listdir(ns.output_dir) if n.startswith("epoch_") and "_step_" in n
        )
        old = (os.environ.get("SPECDECK_SIM_SPECFORGE_REV") or "2026-06") < "2026-03"
        last = None if old or not found else os.path.join(ns.output_dir, found[-1][1])
        print("Last checkpoint detected: %s" % last, flush=True)
        if last is not None:
            state = read_state(os.path.join(last, "training_state.pt"))
            start = int(state["global_step"])
            if info:
                print("Restored optimizer/scheduler state: epoch=%d, step=%d, lr=%.6f" % (state["epoch"], start, 1e-4))
    total = per_epoch * ns.num_epochs
    if ns.total_steps:
        total = min(total, ns.total_steps)
    kind, at = fault()
    began = time.monotonic()
    step = start
    draft_config = _script_config(ns)
    for epoch in range(start // per_epoch, ns.num_epochs):
        for n in range(1, per_epoch + 1):
            gstep = epoch * per_epoch + n
            if gstep <= start:
                continue
            if gstep > total:
                break
            time.sleep(step_s())
            step = gstep
            if kind == "oom" and step >= at:
                sys.stderr.write("\n")
                print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.62 GiB. (SIMULATED)", flush=True)
                return 1
            nan = kind == "nan" and step >= at
            acc = learner.logged(step)
            loss = float("nan") if nan else loss_of(plosses(acc))
            elapsed = time.monotonic() - began
            per = elapsed / max(1, step - start)
            left = per * (per_epoch - n)
            bar = "#" * (10 * n // per_epoch)
            sys.stderr.write(
                "\rTraining Epoch %d: %3d%%|%-10s| %d/%d [%s<%s, %5.2fs/it, loss=%.2f, acc=%.2f, "
                "acceptance_rate=%.2f, time=%.2fs, grad_norm=%.2f]"
                % (
                    epoch,
                    100 * n // per_epoch,
                    bar,
                    n,
                    per_epoch,
                    _clock(elapsed),
                    _clock(left),
                    per,
                    loss,
                    float("nan") if nan else sum(acc) / len(acc),
                    sum(acc) / len(acc) * 0.93,
                    per,
                    0.5,
                )
            )
            sys.stderr.flush()
            if info and step % ns.log_interval == 0:
                _eval_lines(step, ns.num_epochs, [float("nan")] * len(acc) if nan else acc)
            if info and ns.eval_hidden_states_path and step % ns.eval_interval == 0:
                _eval_lines(step, ns.num_epochs, learner.acc(step))
            if step % ns.save_interval == 0 or step == total:
                save_script(ns.output_dir, epoch, step, learner, draft_config, nan)
        sys.stderr.write("\n")
        if step >= total:
            break
    print("Training completed at step %d, saving final checkpoint..." % step, flush=True)
    return 0


def _eval_lines(step: int, epochs: int, acc: List[float]) -> None:
    head = "Eval - Step %d [%d/%d], position " % (step, step + 1, epochs)
    for i, a in enumerate(acc):
        print(head + "%d,  Acc: %.2f" % (i, a), flush=True)
    for i, a in enumerate(acc):
        print(head + "%d,  Acceptance Rate: %.4f" % (i, a * 0.93), flush=True)
    for i, p in enumerate(plosses(acc) if not math.isnan(acc[0]) else acc):
        print(head + "%d, pLoss: %s" % (i, p), flush=True)


def _script_config(ns: argparse.Namespace) -> Dict[str, Any]:
    path = os.path.join(ns.ckpt_dir, "config.json") if ns.ckpt_dir else ns.draft_model_config
    if path:
        with open(path) as f:
            config: Dict[str, Any] = json.load(f)
        config.pop("specdeck_sim", None)
        return config
    return dict(fixtures.KIMI_K2_DRAFTER_CONFIG)


def save_script(out: str, epoch: int, step: int, learner: Learner, config: Dict[str, Any], nan: bool) -> None:
    folder = os.path.join(out, "epoch_%d_step_%d" % (epoch, step))
    accept = [0.0] * len(learner.start) if nan else learner.serve(step)
    write_servable(folder, config, accept)
    write_state(os.path.join(folder, "training_state.pt"), {"epoch": epoch, "global_step": step}, RANK_BYTES)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        return train_unified(argv[1:])
    if argv[:1] == ["export"]:
        return export(argv[1:])
    if argv[:1] == ["script"]:
        return train_script(argv[1:])
    sys.stderr.write("usage: specforge_sim train -c RUN | export --to sglang ... | script FLAGS (SIMULATED)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
