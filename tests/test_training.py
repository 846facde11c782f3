"""Trainings on the SIMULATED SpecForge through the real host agent: both eras' console read as SpecForge
writes it, checkpoints judged before a restart and then measured on the SIMULATED SGLang, bad input refused
with nothing started, and every trap (NaN, OOM, vocab mapping, shapes, a resume that restarted) said."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from pathlib import Path

import pytest

from backend.agent.host.train_checkpoints import scan_checkpoints
from backend.agent.host.train_log import Reader
from backend.connection import Connection
from backend.history import History, Yardstick
from backend.sandbox.environment import write_hidden_states
from backend.settings.config_file import load
from backend.train import training
from backend.train.predict import predict
from tests.simhost import TIME_SCALE, specdeck
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

STEP_S = "0.004"  # the simulated SpecForge's seconds a step: 150 steps in well under a second


def write_config(root: Path, models: dict, **training_keys: object) -> Path:
    data = root / "data"
    if not data.exists():
        write_hidden_states(data)
    keys = {
        "init": "aq-medai",
        "data": str(data),
        "eval_data": str(data),
        "vocab_mapping": str(data / "vocab_mapping" / "vocab_mapping.pt"),
        "output": str(root / "out"),
        "epochs": 1,
        "log_interval": 10,
        "save_interval": 50,
        "eval_interval": 50,
        **training_keys,
    }
    env = keys.pop("env", {})
    lines = [f"{k} = {json.dumps(v)}" for k, v in keys.items() if v is not None]
    env_line = ", ".join(f'{k} = "{v}"' for k, v in {"SPECDECK_SIM_SPECFORGE_STEP_S": STEP_S, **env}.items())
    path = root / "config.toml"
    path.write_text(
        f"""default_host = "sim"
target = {json.dumps(models["target"])}
[hosts.sim]
url = "local"
python = {json.dumps(sys.executable)}
workdir = {json.dumps(str(root / "host"))}
launcher = "simulator"
sandbox = true
[drafters.aq-medai]
path = {json.dumps(models["aq-medai"])}
[drafters.misfit]
path = {json.dumps(models["misfit"])}
[profiles.eagle3-aq]
port = {free_port()}
env = {{ SPECDECK_SIM_TIME_SCALE = "{TIME_SCALE}" }}
[trainings.ft]
{chr(10).join(lines)}
env = {{ {env_line} }}
"""
    )
    return path


# --- the readers, on SpecForge's own lines ---------------------------------------------------------------


def test_unified_lines_every_rank_nan_and_eval():
    r = Reader({"training": "ft"})
    line = "step 50: {'acc_0': 0.61, 'acc_1': 0.5, 'ploss_0': 3.1, 'ploss_1': 3.4, 'acc': 0.55, 'loss': 5.82, "
    line += "'grad_norm': 0.83, 'lr': 9.8e-05, 'perf/optimizer_step_time_s': 0.5}\n"
    r.feed((line * 8).encode())  # printed on every rank
    r.feed(b"step 100: {'acc_0': nan, 'acc_1': nan, 'ploss_0': nan, 'loss': nan, 'lr': 9e-05}\n")
    r.feed(b"step 100: {'eval/avg_loss': 6.9, 'eval/per_position_acc': [0.62, 0.51], 'eval/simulated_acc_len': 0.94}")
    r.feed(b"\n")
    assert [rec["step"] for rec in r.records] == [50, 100] and r.records[0]["acc"] == [0.61, 0.5]
    assert r.records[1]["loss"] is None and r.evals[0]["acc"] == [0.62, 0.51]
    nan = r.traps["nan"]
    assert nan["step"] == 100 and "NaN from step 100" in nan["message"] and "9.80e-05" in nan["message"]


def test_script_era_tqdm_redraws_eval_lines_on_the_same_line_and_oom():
    r = Reader({"era": "script", "epochs": 1, "batch_size": 2, "max_length": 4096})
    bar = "\rTraining Epoch 0:   6%|###| {n}/2484 [09:06<2:14:55,  3.48s/it, loss=2.10, acc=0.61, time=3.46s]"
    data = "".join(bar.format(n=n) for n in range(48, 51))
    data += "Eval - Step 50 [51/10], position 0,  Acc: 0.45\nEval - Step 50 [51/10], position 1,  Acc: 0.30\n"
    data += "Eval - Step 50 [51/10], position 0, pLoss: 2.3456789\n"
    r.feed(data.encode())
    r.feed(b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.62 GiB.\n")
    r.flush()
    assert r.last_step == 50 and r.progress["total"] == 2484 and r.progress["left_s"] == 2 * 3600 + 14 * 60 + 55
    assert r.records[-1]["acc"] == [0.45, 0.30] and r.records[-1]["loss"] == 2.10
    oom = r.traps["oom"]["message"]
    assert "step 50" in oom and "batch size 2" in oom and "max length 4096" in oom
    assert r.summary()["eta_s"] == pytest.approx(8095.0)


def test_a_warm_start_without_a_vocab_mapping_is_said_from_the_start():
    r = Reader({"training": "ft", "warm_start": "aq-medai", "vocab_mapping": None})
    assert "PR #534" in r.traps["vocab_mapping"]["message"]
    assert "vocab_mapping" not in Reader({"warm_start": "aq-medai", "vocab_mapping": "/m.pt"}).traps


def test_prediction_adds_the_bonus_token_and_judges_only_where_the_interval_clears():
    # The interval covers a bench after serving (its noise, the published training-serving gap before any
    # checkpoint was served here): a baseline well under the prediction, so that it clears it.
    yardstick = Yardstick(60.0, 30.0)
    sure = {"acc": [0.9, 0.8, 0.7], "low": [0.89, 0.79, 0.69], "high": [0.91, 0.81, 0.71]}
    p, basis = predict(sure, 3, [], yardstick)
    assert p["predicted_accept_len"] == pytest.approx(1 + 0.9 + 0.72 + 0.504, abs=1e-3)
    assert basis.assumed and basis.measured_runs == 0 and "configured 30.0 ms at 3 steps" in basis.cost.detail
    assert "a bench of 8 requests" in basis.covers() and "training-serving gap" in basis.covers()
    assert p["predicted_tok_s"] == pytest.approx(1000 * 3.124 / 30, abs=0.5) and p["versus_baseline"] == "beats"
    low = p["predicted_accept_len_low"]
    assert low < p["predicted_accept_len"] < p["predicted_accept_len_high"]
    close = {"acc": [0.7, 0.6, 0.5], "low": [0.5, 0.4, 0.3], "high": [0.9, 0.8, 0.7]}
    assert predict(close, 3, [], yardstick)[0]["versus_baseline"] == "too close to call against"
    assert predict(None, 3, [], yardstick)[0]["predicted_tok_s"] is None


# --- the loop end to end: train, judge, serve, bench, measured against predicted ----------------------


@pytest.mark.slow
def test_train_judge_serve_and_measure(models, tmp_path):
    config = write_config(tmp_path, models)
    res = specdeck(config, "train", "start", "ft")
    assert "eval at step 50" in res.stdout and "training ft: done" in res.stdout
    assert "step 150: {" in specdeck(config, "train", "logs", "ft", "--lines", "3").stdout
    status = json.loads(specdeck(config, "train", "status", "ft", "--json").stdout)
    assert status["job"]["state"] == "done" and status["summary"]["step"] == 150
    assert status["summary"]["total_steps"] == 150 and status["summary"]["traps"] == []
    rows = json.loads(specdeck(config, "train", "checkpoints", "ft", "--json").stdout)
    assert [r["step"] for r in rows] == [50, 100, 150]
    keys = ("name", "step", "acc", "predicted_accept_len", "predicted_accept_len_low", "predicted_accept_len_high")
    keys += ("predicted_tok_s", "predicted_tok_s_low", "predicted_tok_s_high", "servable")
    for r in rows:
        assert all(k in r for k in keys) and not r["servable"]  # the unified era's need an export
        assert r["predicted_accept_len_low"] <= r["predicted_accept_len"] <= r["predicted_accept_len_high"]
        assert r["predicted_accept_len"] == pytest.approx(
            1 + sum(math.prod(r["acc"][: i + 1]) for i in range(3)), abs=0.01
        )
    listed = specdeck(config, "train", "checkpoints", "ft").stdout
    assert "the 82.0 tok/s baseline" in listed and "intervals 95% for a bench of 8 requests" in listed
    assert "the training-serving gap" in listed and "prior: 4 published pairs" in listed
    assert "no checkpoint 'nope'" in specdeck(config, "train", "serve", "ft", "nope", "--yes", rc=2).stderr

    served = json.loads(specdeck(config, "train", "serve", "ft", "best", "--wait-ready", "--yes", "--json").stdout)
    assert served["state"] == "ready" and served["checkpoint"] == "ft-step150"
    assert served["drafter_path"].endswith("specdeck-exports/ft-step150")
    # A server runs now: serving another checkpoint asks first; without a terminal to ask on, --yes is needed.
    refused = specdeck(config, "train", "serve", "ft", "ft-step50", rc=2).stderr
    assert "a server runs" in refused and "--yes" in refused
    specdeck(config, "bench", "--requests", "4", "--max-tokens", "160")
    rows = json.loads(specdeck(config, "train", "checkpoints", "ft", "--json").stdout)
    best = rows[-1]
    assert best["servable"] and best["measured_tok_s"] is not None
    with History.open() as history:
        run = history.run(best["measured_run"])
    assert run.drafter == "ft@ft-step150"
    # What it predicted before the restart (the cost then assumed: no run measured yet) stays with the run.
    before = run.training
    assert before["checkpoint"] == "ft-step150" and before["predicted_tok_s"] > best["predicted_tok_s"]
    gap = specdeck(config, "history").stdout
    assert f"ft ft-step150 predicted {before['predicted_tok_s']:.1f} tok/s" in gap and "; measured " in gap
    specdeck(config, "report", best["measured_run"], "--out", str(tmp_path / "r.md"), "--no-inspect")
    report = (tmp_path / "r.md").read_text()
    assert "Training checkpoints: predicted before the restart" in report and "ft ft-step150 predicted" in report
    # The simulated SGLang accepts per position as the checkpoint's accuracy says: the bench falls inside the
    # interval predicted before the restart, which covered a bench of four requests and the gap.
    assert before["predicted_accept_len_low"] <= run.bench["accept_len"] <= before["predicted_accept_len_high"]
    # The served checkpoint is this host's first pair: the next predictions say so.
    assert "1 served checkpoint here" in specdeck(config, "train", "checkpoints", "ft").stdout
    specdeck(config, "serve", "stop", "--yes")


# --- bad input: one sentence, exit 2, nothing started ---------------------------------------------------


def _train_jobs(config: Path) -> list[dict]:
    return [j for j in json.loads(specdeck(config, "jobs", "--json").stdout) if j["kind"] == "train"]


@pytest.mark.slow
def test_bad_input_starts_nothing(models, tmp_path):
    config = write_config(tmp_path, models, data=str(tmp_path / "nowhere"))
    err = specdeck(config, "train", "start", "ft", rc=2).stderr
    assert "does not exist on the host" in err and len(err.strip().splitlines()) == 1
    config = write_config(tmp_path, models, init="misfit")
    assert "cannot warm-start" in specdeck(config, "train", "start", "ft", rc=2).stderr
    assert _train_jobs(config) == []
    assert not (tmp_path / "out").exists()

    config = write_config(tmp_path, models, env={"SPECDECK_SIM_SPECFORGE_STEP_S": "1"})  # no checkpoint for 50 s
    specdeck(config, "train", "start", "ft", "--detach")
    assert "already writing into" in specdeck(config, "train", "start", "ft", rc=2).stderr
    assert len(_train_jobs(config)) == 1
    assert "no checkpoint yet" in specdeck(config, "train", "serve", "ft", "latest", "--yes", rc=2).stderr
    specdeck(config, "train", "stop", "ft")
    assert "no training named" in specdeck(config, "train", "status", "other", rc=2).stderr


# --- traps, broken on purpose ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def on_host(config: Path):
    """(connection, settings) of the config's sandbox host, in this process: no CLI start-up per step."""
    settings = load(config)
    conn = await Connection.open(settings.hosts["sim"])
    try:
        yield conn, settings
    finally:
        await conn.close()


async def trained(conn: Connection, settings, *, resume: bool = False) -> tuple[training.TrainingStatus, list[str]]:
    """Start (or resume) the training, follow it to its end; its status and the warnings said at start."""
    job, warnings = await training.start(conn, settings, "ft", resume=resume)
    async for _ in training.follow(conn, job.id):
        pass
    return await training.status(conn, "ft"), warnings


async def test_nan_and_oom_are_said_with_their_step(models, tmp_path):
    async with on_host(write_config(tmp_path, models, env={"SPECDECK_SIM_SPECFORGE_FAIL": "nan@70"})) as (conn, s):
        st, _ = await trained(conn, s)
    assert [t.kind for t in st.traps] == ["nan"] and st.traps[0].step == 70

    config = write_config(tmp_path / "b", models, env={"SPECDECK_SIM_SPECFORGE_FAIL": "oom@33"})
    async with on_host(config) as (conn, s):
        st, _ = await trained(conn, s)
    assert st.job.state == "failed"
    message = st.traps[0].message  # the error's own numbers, and the job's settings (its arguments say them)
    assert message.startswith("CUDA out of memory at step 30: tried to allocate 7.62 GiB with 3.12 GiB of GPU 0's")
    assert "Lower max_length or the batch size (batch size 1, max length 2048)" in message
    res = specdeck(config, "train", "status", "ft")  # and said by the CLI
    assert "! CUDA out of memory at step 30" in res.stdout and "failed:" in res.stdout


async def test_script_era_resume_that_restarted_from_scratch(models, tmp_path):
    env = {"SPECDECK_SIM_SPECFORGE_REV": "2026-01", "SPECDECK_SIM_SPECFORGE_INFO": "1"}
    config = write_config(tmp_path, models, era="script", epochs=2, max_steps=60, env=env)
    async with on_host(config) as (conn, s):
        st, warnings = await trained(conn, s)
        assert any("PR #534" in w for w in warnings)  # the script era regenerates the mapping whatever it is given
        found = scan_checkpoints(str(tmp_path / "out"))
        assert [c["name"] for c in found] == ["epoch_0_step_50", "epoch_0_step_60"]
        assert all(c["servable"] for c in found)
        st, _ = await trained(conn, s, resume=True)
    traps = {t.kind: t.message for t in st.traps}
    assert "resumed from step 60" in traps["resume_restart"] and "before 2026-03" in traps["resume_restart"]


async def test_unified_resume_goes_on_from_the_newest_checkpoint(models, tmp_path):
    async with on_host(write_config(tmp_path, models, env={"SPECDECK_SIM_SPECFORGE_STEP_S": "0.03"})) as (conn, s):
        job, _ = await training.start(conn, s, "ft")
        async for _ in training.follow(conn, job.id):
            if scan_checkpoints(str(tmp_path / "out")):
                break
        await training.stop(conn, "ft")
        saved = scan_checkpoints(str(tmp_path / "out"))[-1]["step"]
        st, _ = await trained(conn, s, resume=True)
        rows = await training.checkpoint_list(conn, "ft")
    assert st.job.args["resume_step"] == saved and (st.summary.first_step or 0) > saved
    assert st.traps == () and st.summary.step == 150
    run_file = json.loads(Path(st.job.args["config_path"]).read_text())
    assert run_file["training"]["resume_from"].endswith(f"ft-step{saved}")
    assert "draft_checkpoint_path" not in run_file["model"]  # SpecForge refuses both at once
    assert rows[-1]["step"] == 150 and all(r["accuracy"] for r in rows)


def test_a_replaced_log_is_read_again_from_its_top(tmp_path):
    from backend.agent.host.train import read_up

    log = tmp_path / "log"
    log.write_text("step 10: {'acc_0': 0.5, 'loss': 3.0}\nstep 20: {'acc_0': 0.6, 'loss': 2.9}\n")
    info = {"id": "train-replaced", "log_path": str(log), "state": "running", "args": {}}
    assert [r["step"] for r in read_up(info).records] == [10, 20]
    log.unlink()
    log.write_text("step 5: {'acc_0': 0.4, 'loss': 3.1}\n")  # rotated: a new file
    assert [r["step"] for r in read_up(info).records] == [5]


def test_a_failed_export_leaves_nothing(tmp_path, monkeypatch):
    from backend.agent.host import train as host_train

    out = tmp_path / "out" / "specdeck-exports" / "run-step50"
    spec = tmp_path / "export.json"
    fails = [
        sys.executable,
        "-c",
        "import os, sys; os.makedirs(sys.argv[1]); open(sys.argv[1] + '/config.json', 'w'); sys.exit(3)",
    ]
    spec.write_text(json.dumps({"argv": [*fails, "{output}"], "output": str(out)}))
    assert host_train.worker_main(["export", str(spec)]) == 3
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_the_script_era_without_logging_says_where_its_curves_are(tmp_path):
    from backend.agent.host.train_log import tensorboard_records

    assert tensorboard_records(str(tmp_path)) == (None, f"no tensorboard event files under {tmp_path}/runs")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "events.out.tfevents.1.host").write_bytes(b"")
    records, how = tensorboard_records(str(tmp_path))
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        assert records is None and "tensorboard is not installed on the host" in how
    else:
        assert records == [] and how == "tensorboard event files (1)"


# --- a disk that fills mid-training (issue 30, item 6) ----------------------------------------------------


@pytest.mark.parametrize("host", ["local"], indirect=True)
@pytest.mark.slow
async def test_a_disk_that_fills_mid_save_leaves_a_cut_checkpoint_that_is_not_offered(tmpfs_host, models, tmp_path):
    """The output folder on a small tmpfs, filled after the first checkpoint but for a few pages: the next save
    writes its rank files, starts training_state.pt and meets ENOSPC before torch.save's zip directory (written
    last). The training fails with the trap said; the cut checkpoint is on disk and is offered nowhere."""
    import os

    from tests.helpers import eventually, fill

    host, mnt = tmpfs_host
    config = write_config(tmp_path, models, output=str(mnt / "out"), env={"SPECDECK_SIM_SPECFORGE_STEP_S": "0.03"})
    config.write_text(config.read_text().replace(f"python = {json.dumps(sys.executable)}", f'python = "{host.python}"'))
    async with on_host(config) as (conn, settings):
        job, _ = await training.start(conn, settings, "ft")
        inside = f"/proc/{(await conn.call('info'))['pid']}/root{mnt}"  # the tmpfs as the agent and its jobs see it
        await eventually(lambda: os.path.islink(f"{inside}/out/ft-latest"), "the first checkpoint", timeout=60)
        ranks = len(list(Path(f"{inside}/out/ft-step50").glob("training_state_rank*.pt")))
        fill(f"{inside}/filler")
        with open(f"{inside}/filler", "r+b") as f:  # room for the rank files (two pages each: sparse) and a page
            f.truncate(os.path.getsize(f"{inside}/filler") - (2 * ranks + 1) * 4096)
        async for _ in training.follow(conn, job.id):
            pass
        st = await training.status(conn, "ft")
        cut = Path(f"{inside}/out/ft-step100/training_state.pt")
        assert cut.exists() and not cut.read_bytes()[-22:].startswith(b"PK\x05\x06")  # half-written, on disk
        rows = await training.checkpoint_list(conn, "ft")
    assert st.job.state == "failed"
    assert [t.kind for t in st.traps] == ["disk_full"] and "No space left on device" in st.traps[0].message
    assert [r["name"] for r in rows] == ["ft-step50"]  # the cut one is offered to no resume, serve or export
