"""Every commit subject after CUTOFF is at most 72 characters: `make lint` runs this, and `make test` through
tests/test_commit_subjects.py. ``python scripts/commit_subjects.py [REPO]``: exit 1 listing each longer subject.

CUTOFF is main's HEAD when the check was written: the ~415 longer subjects before it stay as written (main's
history is never rewritten), so only what comes after is held to the limit. Where the cutoff is not in the
history (a shallow clone, as a CI's may be) the commits made after it are checked, by committer time. Without a
git history of its own (a tarball, or a folder inside another repository) there is nothing to check: it says so
in one line and passes. Stdlib only; one `git log`, well under a second.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LIMIT = 72
CUTOFF = "155e49df4d160ee0eed5d5d1639baa0ada7ab98e"  # main's HEAD on 2026-12-05 once its last long subject landed
CUTOFF_TIME = 1796457381  # its committer time (%ct): the line drawn where the commit itself is not there


@dataclass(frozen=True)
class Subject:
    sha: str
    text: str


class NoHistory(Exception):
    """The folder has no git history of its own to check; the message says why."""


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise NoHistory("git is not installed") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise NoHistory(said[-1] if said else f"git {args[0]} failed")
    return done.stdout.decode(errors="replace")


def long_subjects(repo: Path, cutoff: str = CUTOFF, cutoff_time: int = CUTOFF_TIME) -> list[Subject]:
    """The commits after ``cutoff`` reachable from HEAD whose subject is over LIMIT characters, newest first.
    NoHistory when ``repo`` is no git work tree's top (or has no commit yet)."""
    try:
        top = _git(repo, "rev-parse", "--show-toplevel").strip()
    except NoHistory as why:
        raise NoHistory(f"{repo} is no git work tree ({why})") from None
    if Path(top).resolve() != repo.resolve():  # a tarball unpacked inside another repository: not our history
        raise NoHistory(f"{repo} has no git history of its own (it sits inside {top})")
    try:
        _git(repo, "rev-parse", "--verify", "-q", "HEAD")
    except NoHistory:
        raise NoHistory(f"{repo} has no commit yet") from None
    fields = "--format=%H%x00%ct%x00%s"
    try:
        _git(repo, "cat-file", "-e", f"{cutoff}^{{commit}}")
    except NoHistory:  # the cutoff is not here (a shallow clone): every commit, told apart by time below
        span = "HEAD"
    else:
        span = f"{cutoff}..HEAD"
    out = []
    for line in _git(repo, "log", fields, span).splitlines():
        sha, when, text = line.split("\0", 2)
        # Committed after the cutoff: also leaves out an old branch's commits that never reached main before it.
        if int(when) > cutoff_time and len(text) > LIMIT:
            out.append(Subject(sha, text))
    return out


def main(argv: list[str]) -> int:
    repo = Path(argv[0] if argv else Path(__file__).resolve().parents[1])
    try:
        found = long_subjects(repo, CUTOFF, CUTOFF_TIME)
    except NoHistory as why:
        print(f"commit subjects not checked: {why}")
        return 0
    for s in found:
        print(f"{s.sha[:12]} subject is {len(s.text)} characters (at most {LIMIT}): {s.text}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
