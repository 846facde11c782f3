"""A killed process still there is said for what it is (issue 30, item 7), broken on purpose: a server
process held in its exit by a tracer (PTRACE_O_TRACEEXIT: the kernel stops it inside do_exit, after SIGKILL)
is "still exiting" and waited for, not "survived SIGKILL"; one frozen in a cgroup v1 freezer is in
uninterruptible sleep with the SIGKILL pending; only a process that runs on is a survivor."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE

import pytest

from backend import jobs
from backend.agent.host.procstate import lingering
from backend.connection import Connection
from backend.errors import OperationFailed
from backend.serve import serving
from backend.settings.model import HostConfig
from tests.helpers import eventually
from tests.simhost import start_server

pytestmark = pytest.mark.e2e

# Seize ``pid`` with PTRACE_O_TRACEEXIT and hold it: every signal but SIGKILL stops it in a signal-delivery
# stop, and SIGKILL's exit stops at PTRACE_EVENT_EXIT until this process ends (then the exit completes).
TRACER = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_SEIZE, PTRACE_O_TRACEEXIT = 0x4206, 0x40
if libc.ptrace(PTRACE_SEIZE, int(sys.argv[1]), None, PTRACE_O_TRACEEXIT) != 0:
    sys.exit("cannot seize: errno %d" % ctypes.get_errno())
print("held", flush=True)
sys.stdin.read()
"""


def server_process(runner: int) -> int:
    """The simulator: the serve job's runner's child."""
    out = subprocess.run(["pgrep", "-P", str(runner)], capture_output=True, text=True).stdout.split()
    assert len(out) == 1, out
    return int(out[0])


async def test_a_killed_server_held_in_its_exit_is_still_exiting_and_waited_for(models, tmp_path, monkeypatch):
    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path / "hostwork"))
    conn = await Connection.open(host)
    tracer = None
    try:
        job = await start_server(conn, models, "baseline")
        pid = server_process(job.pid)
        tracer = subprocess.Popen([sys.executable, "-c", TRACER, str(pid)], stdin=PIPE, stdout=PIPE)
        if tracer.stdout.readline() != b"held\n":
            pytest.skip("cannot ptrace here (ptrace_scope, no CAP_SYS_PTRACE)")
        monkeypatch.setattr(jobs, "LINGER_WAIT_S", 1.0)
        with pytest.raises(OperationFailed) as failed:
            await serving.stop(conn, job=job.id, grace=1)  # SIGTERM held by the tracer; SIGKILL held at exit
        said = str(failed.value)
        assert "survived" not in said
        assert said == (
            f"the server was killed, but the kernel has not let go of process {pid} still exiting "
            f"(state t in ptrace_stop); `cat /proc/{pid}/stack` on the host shows where it waits"
        )
        states = (await conn.call("jobs.lingering", id=job.id))["left_states"]
        assert [(s["pid"], s["verdict"], s["killed"]) for s in states] == [(pid, "exiting", True)]

        waiting = asyncio.create_task(jobs.outlast(conn, job.id, states, within=120))
        await eventually(lambda: Path(f"/proc/{pid}/stat").exists(), "still held")
        tracer.stdin.close()  # the tracer goes: the kernel completes the exit
        waited, left = await waiting
        assert left == [] and [p.line for p in waited] == [f"process {pid} still exiting (state t in ptrace_stop)"]
    finally:
        if tracer is not None:
            tracer.kill()
            tracer.wait()
        await conn.close()


@pytest.fixture
def freezer(tmp_path):
    """A cgroup v1 freezer of our own (its frozen tasks ignore SIGKILL until thawed); skip where there is none."""
    root = Path("/sys/fs/cgroup/freezer")
    folder = root / f"specdeck-test-{os.getpid()}-{tmp_path.name}"
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"no cgroup v1 freezer to use here: {exc}")
    yield folder
    (folder / "freezer.state").write_text("THAWED")
    eventually_sync(lambda: not (folder / "cgroup.procs").read_text().strip(), "the freezer empty")
    folder.rmdir()


def eventually_sync(cond, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_killed_process_frozen_in_the_kernel_is_in_uninterruptible_sleep(freezer):
    proc = subprocess.Popen(["sleep", "120"])
    try:
        (freezer / "cgroup.procs").write_text(str(proc.pid))
        (freezer / "freezer.state").write_text("FROZEN")
        eventually_sync(lambda: (freezer / "freezer.state").read_text().strip() == "FROZEN", "frozen")
        proc.send_signal(signal.SIGKILL)
        time.sleep(0.2)  # the signal is pending at once; give a thawed task the chance to have died by now
        state = lingering(proc.pid)
        assert state is not None and state["verdict"] == "uninterruptible" and state["state"] == "D"
        assert state["text"].startswith("in uninterruptible sleep in ") and state["text"].endswith(", SIGKILL pending")
        said = jobs.left_sentence([jobs.Lingering.from_json(state)], "the server", "on gpu-1")
        assert said.startswith(f"the server was killed, but the kernel has not let go of process {proc.pid} in ")
        (freezer / "freezer.state").write_text("THAWED")
        assert proc.wait(30) == -signal.SIGKILL and lingering(proc.pid) is None
    finally:
        (freezer / "freezer.state").write_text("THAWED")
        proc.kill()
        proc.wait()


def test_only_a_process_that_runs_on_is_a_survivor():
    proc = subprocess.Popen(["sleep", "120"])
    try:
        state = lingering(proc.pid)
        assert state is not None and state["verdict"] == "alive" and state["text"].startswith("alive (state ")
        dying = {"pid": 7, "verdict": "exiting", "text": "still exiting (state D in exit_mmap)"}
        said = jobs.left_sentence([jobs.Lingering.from_json(s) for s in (state, dying)], "the server", "on the host")
        assert said == f"processes [{proc.pid}] of the server survived SIGKILL on the host; check them there"
    finally:
        proc.kill()
        proc.wait()
    assert lingering(proc.pid) is None  # reaped
    zombie = subprocess.Popen(["true"])
    eventually_sync(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1].startswith("Z"), "a zombie")
    assert lingering(zombie.pid) is None  # exited, only not reaped: nothing to wait for
    zombie.wait()


def test_a_runner_that_removed_its_jobs_cgroup_and_lives_a_moment_on_is_no_process_of_the_job(tmp_path):
    """bench_fleet's teardown once said "processes [PID] of the server survived SIGKILL": the runner, caught by
    the cancel after it had moved out of its job's cgroup and removed it, alive for its last moment. A removed
    cgroup held nothing: its job has no process left, whatever runs in the runner's process group."""
    from backend.agent.host.jobs import _left_of
    from backend.agent.host.ownership import job_processes, proc_start_time

    runner = subprocess.Popen(["sleep", "120"], start_new_session=True)  # a leader of its own group, alive
    try:
        hierarchy = tmp_path / "cgroup"
        hierarchy.mkdir()  # the job's folder in it is gone; the hierarchy is there
        pid_info = {"pid": runner.pid, "pgid": runner.pid, "start": proc_start_time(runner.pid), "token": "t",
                    "cgroup": {"dir": str(hierarchy / "specdeck-job"), "path": "/specdeck-job"}}  # fmt: skip
        assert job_processes(pid_info) == []
        assert _left_of(pid_info) == {"left": [], "left_states": []}
        # No hierarchy at all (cgroups not mounted where the agent looks): the marker decides, as before.
        unmounted = {**pid_info, "cgroup": {"dir": str(tmp_path / "none" / "specdeck-job"), "path": "/x"}}
        assert job_processes(unmounted) == [(runner.pid, pid_info["start"])]
    finally:
        runner.kill()
        runner.wait()
