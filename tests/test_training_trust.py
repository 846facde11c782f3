"""A stranger's training folder is not trusted (issue 30, item 3), broken on purpose with a second uid
(setpriv, no account needed): a checkpoint folder another user planted in our output folder is refused for
resume, serve and export and marked in `train checkpoints`; an output or data folder of theirs (or one they
may write) starts nothing. One rule, the workdir's StrictModes (``safepath``), applied to every entry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.agent.host.shared import safepath
from tests.simhost import specdeck
from tests.test_training import write_config

NEIGHBOUR = 54321

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv"),
]


def as_neighbour(script: str) -> None:
    ids = str(NEIGHBOUR)
    subprocess.run(["setpriv", "--reuid", ids, "--regid", ids, "--clear-groups", "sh", "-c", script], check=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the neighbour can reach (tmp_path sits under root's 0700 pytest folder)."""
    path = Path(tempfile.mkdtemp(prefix="specdeck-shared-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_rule_judges_every_entry_and_names_the_path_and_owner(shared: Path):
    uid = os.geteuid()
    tree = shared / "out"
    (tree / "ckpt").mkdir(parents=True)
    (tree / "ckpt" / "training_state.pt").write_bytes(b"pickle")
    assert safepath.trust_reason(str(tree), uid) is None

    theirs = tree / "ckpt" / "extra.pt"
    theirs.write_bytes(b"their pickle")
    os.chown(theirs, NEIGHBOUR, NEIGHBOUR)
    assert safepath.trust_reason(str(tree), uid) == (
        f"{theirs} belongs to uid {NEIGHBOUR}, not to root: it may hold what they put there"
    )
    theirs.unlink()

    state = tree / "ckpt" / "training_state.pt"
    state.chmod(0o664)
    why = safepath.trust_reason(str(tree), uid)
    assert why.startswith(f"{state} (owner root, mode 0664) is writable by its group, who may have put")
    state.chmod(0o644)

    elsewhere = shared / "elsewhere"
    elsewhere.mkdir()
    os.chown(elsewhere, NEIGHBOUR, NEIGHBOUR)
    (tree / "ckpt-latest").symlink_to(elsewhere)  # our link, to their folder: judged where it leads
    assert f"{elsewhere} belongs to uid {NEIGHBOUR}" in safepath.trust_reason(str(tree), uid)
    (tree / "ckpt-latest").unlink()
    (tree / "ckpt-latest").symlink_to(tree / "ckpt")
    os.lchown(tree / "ckpt-latest", NEIGHBOUR, NEIGHBOUR)  # their link, to our folder: theirs to repoint
    assert f"{tree / 'ckpt-latest'} belongs to uid {NEIGHBOUR}" in safepath.trust_reason(str(tree), uid)


def train_jobs(config: Path) -> list[dict]:
    return [j for j in json.loads(specdeck(config, "jobs", "--json").stdout) if j["kind"].startswith("train")]


@pytest.mark.slow
def test_a_checkpoint_another_user_planted_is_refused_for_resume_serve_and_export(models, shared: Path):
    config = write_config(shared, models)
    out = shared / "out"
    assert "training ft: done" in specdeck(config, "train", "start", "ft").stdout
    out.chmod(0o777)  # for a moment (a team's habit, an old mode): long enough for a neighbour to plant one
    planted_pt = shared / "planted.pt"  # a whole torch file (its zip directory at its end): a pickle that runs code
    planted_pt.write_bytes(b"pickle that runs code\n" + b"PK\x05\x06" + bytes(18))
    planted_pt.chmod(0o644)
    as_neighbour(f"mkdir {out}/ft-step999999 && cp {planted_pt} {out}/ft-step999999/training_state.pt")
    out.chmod(0o755)
    planted = out / "ft-step999999"
    why = f"{planted} belongs to uid {NEIGHBOUR}, not to root: it may hold what they put there"
    jobs_before = train_jobs(config)

    rows = json.loads(specdeck(config, "train", "checkpoints", "ft", "--json").stdout)
    assert [(r["name"], r["untrusted"]) for r in rows][-2:] == [("ft-step150", None), ("ft-step999999", why)]
    assert f"[refused: {why}]" in specdeck(config, "train", "checkpoints", "ft").stdout

    err = specdeck(config, "train", "resume", "ft", rc=2).stderr
    assert err == f"specdeck: training ft: refused, nothing started: {why}\n"
    err = specdeck(config, "train", "serve", "ft", "latest", "--yes", rc=2).stderr  # the planted one is newest
    assert err == f"specdeck: training ft: checkpoint ft-step999999 refused: {why}\n"
    (out / "specdeck-exports").symlink_to(shared)  # where an export of ours would be written, and removed
    os.lchown(out / "specdeck-exports", NEIGHBOUR, NEIGHBOUR)
    err = specdeck(config, "train", "serve", "ft", "ft-step150", "--yes", rc=2).stderr
    theirs = f"{out}/specdeck-exports belongs to uid {NEIGHBOUR}, not to root: it may hold what they put there"
    assert err == f"specdeck: training ft: checkpoint ft-step150 refused: {theirs}\n"
    assert train_jobs(config) == jobs_before
    assert json.loads(specdeck(config, "serve", "status", "--json").stdout)["state"] == "none"


def test_an_output_or_data_folder_of_another_user_starts_nothing(models, shared: Path):
    (shared / "theirs").mkdir(mode=0o755)
    os.chown(shared / "theirs", NEIGHBOUR, NEIGHBOUR)  # the neighbour's folder, as their own training left it
    config = write_config(shared, models, output=str(shared / "theirs" / "out"))
    err = specdeck(config, "train", "start", "ft", rc=2).stderr
    assert err == (
        f"specdeck: training ft: refused, nothing started: {shared}/theirs belongs to uid {NEIGHBOUR}, so they can "
        "replace what is in it\n"
    )
    config = write_config(shared, models)
    (shared / "data").chmod(0o775)  # SpecForge's hidden states are torch pickles: a group member's are theirs
    err = specdeck(config, "train", "start", "ft", rc=2).stderr
    assert f"{shared}/data (owner root, mode 0775) is writable by its group" in err and err.count("\n") == 1
    assert train_jobs(config) == [] and not (shared / "out").exists()
