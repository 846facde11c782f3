"""Stopping the host jobs a test left running (a runner, a simulated server, a download, a hub): a test that
fails before its gate opens, or that never cancels what it started, must not leave detached processes
loading the machine for the tests after it."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

from backend.agent.host import jobs, ownership

MAX_DEPTH = 6  # workdirs sit a few levels under a test's folders; models and hub repos below are not walked
CANCEL_TIMEOUT_S = 5.0


def state_dirs(root: Path) -> list[Path]:
    """The agent state folders (``WORKDIR/.specdeck`` with a ``jobs`` folder) under ``root``."""
    found = []
    base = len(root.parts)
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if ".specdeck" in dirnames and (here / ".specdeck" / "jobs").is_dir():
            found.append(here / ".specdeck")
        if len(here.parts) - base >= MAX_DEPTH:
            dirnames.clear()
        else:
            dirnames[:] = [d for d in dirnames if d != ".specdeck"]
    return found


def stop_jobs(root: Path) -> None:
    """Cancel every job still running or orphaned under ``root`` through the agent's own ``jobs.cancel``;
    then SIGKILL any process group of theirs still alive (same group and session as the runner, started
    after it) and what is left in each job's cgroup (an ended job's too), and remove the cgroup."""
    for state_dir in state_dirs(root):
        ctx = SimpleNamespace(state_dir=str(state_dir))
        for job_dir in jobs.job_dirs(str(state_dir / "jobs")):
            job_id = os.path.basename(job_dir)
            try:
                if jobs.describe(job_dir)["state"] in jobs.ACTIVE:
                    jobs.cancel({"id": job_id, "timeout": CANCEL_TIMEOUT_S}, ctx)
            except (jobs.AgentError, OSError):  # a half-removed folder: the kill below still applies
                pass
            _kill_left(Path(job_dir) / "pid.json")  # an ended job's too: a daemon it left in its cgroup


def _kill_left(pid_file: Path) -> None:
    try:
        pid_info = json.loads(pid_file.read_text())
    except (OSError, ValueError):
        return
    pgid = pid_info.get("pgid")
    runner = ownership.proc_start_time(pid_info.get("pid", 0)) == pid_info.get("start")
    if pgid and (runner or ownership.orphans(pid_info, fresh=True)):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if pid_info.get("cgroup"):  # what is left in its cgroup, then the cgroup (its runner may not have removed it)
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        while not ownership.remove_cgroup(pid_info["cgroup"]) and time.monotonic() < deadline:
            jobs._send_all(ownership.job_processes(pid_info), signal.SIGKILL)
            time.sleep(0.05)
