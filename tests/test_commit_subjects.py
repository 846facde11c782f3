"""scripts/commit_subjects.py: this repository's subjects after the cutoff, and the check itself on small
repositories made here (a long subject after the cutoff, a shallow clone, no history at all)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # runs git

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "commit_subjects.py"
spec = importlib.util.spec_from_file_location("commit_subjects", SCRIPT)
assert spec is not None and spec.loader is not None
check = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = check  # its dataclass looks its module up there
spec.loader.exec_module(check)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
LONG = "A subject that runs on past the seventy-two characters a subject is allowed"


def test_this_repositorys_subjects_after_the_cutoff():
    """What `make test` holds every commit to; passes with its note where the tree has no history (a tarball)."""
    done = subprocess.run([sys.executable, str(SCRIPT), str(REPO)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" or done.stdout.startswith("commit subjects not checked: "), done.stdout


def git(repo: Path, *args: str, when: int | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    if when is not None:
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"] = f"@{when} +0000"
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def commit(repo: Path, subject: str, when: int) -> str:
    git(repo, "commit", "-q", "--allow-empty", "-m", subject, when=when)
    return git(repo, "rev-parse", "HEAD")


@needs_git
def test_a_long_subject_after_the_cutoff_fails_one_before_it_does_not(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, LONG, 1_000)  # before the cutoff: kept as written
    cutoff = commit(repo, "The cutoff", 2_000)
    commit(repo, "Short and after it", 3_000)
    late = commit(repo, LONG + " too", 4_000)
    commit(repo, "x" * 72, 5_000)  # exactly the limit
    found = check.long_subjects(repo, cutoff, 2_000)
    assert [(s.sha, s.text) for s in found] == [(late, LONG + " too")]

    # Shallow (CI's clone may be): the cutoff is not there, the commits after its time are still checked.
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{repo}", str(shallow))
    assert [s.sha for s in check.long_subjects(shallow, cutoff, 2_000)] == [late]
    # The script's own verdict: one line per subject, exit 1.
    monkeypatch.setattr(check, "CUTOFF", cutoff)
    monkeypatch.setattr(check, "CUTOFF_TIME", 2_000)
    assert check.main([str(repo)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{late[:12]} subject is {len(LONG) + 4} characters (at most 72): {LONG} too"]


@needs_git
def test_no_history_is_said_in_one_line_and_passes(tmp_path, capsys):
    plain = tmp_path / "tarball"
    plain.mkdir()
    assert check.main([str(plain)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(f"commit subjects not checked: {plain} is no git work tree")

    git(tmp_path, "init", "-q")  # unpacked inside another repository: that history is not the tree's
    assert check.main([str(plain)]) == 0
    assert "has no git history of its own" in capsys.readouterr().out
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    assert check.main([str(fresh)]) == 0
    assert "has no commit yet" in capsys.readouterr().out
