"""Pids come round (issue 20, item 2): a stranger that happens to hold an old runner's numbers is never taken
for the job's, and a job that has ended is never signalled.

Each case runs in its own pid namespace (unshare), where writing ns_last_pid steers the next pid: a double-
forking daemon is made to get the old runner's pid as its session id, exactly what pid_max 32768 does in time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root to make a pid namespace"),
]

# Runs as pid 1 of a new pid namespace; also the job runner (``agent_path()`` is this file).
DRIVER = """
import json, os, signal, sys, time
sys.path.insert(0, REPO)
from backend.agent.host import jobs, ownership, main as agent_main

if sys.argv[1:2] in (["job-run"], ["worker"]):
    sys.exit(agent_main.main(sys.argv[1:]))
if NO_CGROUP:  # where no cgroup can be made (a file is no folder): jobs fall back to the marker
    ownership.cgroup_parent_override = os.path.join(REPO, "README.md")


class Ctx:
    state_dir = STATE


def wait_for(cond, what):
    deadline = time.time() + 60
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.01)


def daemon_with_sid(sid):
    # A double-forking daemon whose session (and group) id is ``sid``: the next pid is steered to it.
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(sid - 1))
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            signal.pause()
        os._exit(0)
    assert middle == sid, (middle, sid)
    os.waitpid(middle, 0)
    return int(os.read(r, 32))


def members(pgid):
    return [pid for pid, ids in ownership._live_pids() if ids[0] == pgid]


def reap():  # pid 1 of this namespace inherits the orphans: reap them so they read gone
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def gone(pid):  # reaped, not only dead: a zombie still holds its pid, and the next fork would skip it
    reap()
    return not os.path.exists("/proc/%d" % pid)


out = {}
# 1. A job that is done; its runner's pid comes round as a daemon's session id.
done = jobs.start_job(STATE, "test", ["true"], {}, {})
wait_for(lambda: jobs.describe(done["dir"])["state"] == "done", "the job to end")
reap()
wait_for(lambda: gone(done["pid"]), "the runner to go")
d1 = daemon_with_sid(done["pid"])
out["done_cancel"] = jobs.cancel({"id": done["id"], "timeout": 2}, Ctx())
out["d1_alive"] = ownership.proc_start_time(d1) is not None

# 2. A job killed whole (runner and command, no exit.json); the daemon gets the runner's numbers.
killed = jobs.start_job(STATE, "test", ["sleep", "300"], {}, {})
wait_for(lambda: len(members(killed["pid"])) == 2, "sleep to start")
os.killpg(killed["pid"], signal.SIGKILL)
wait_for(lambda: (reap(), members(killed["pid"]))[1] == [] and gone(killed["pid"]), "it to go")
d2 = daemon_with_sid(killed["pid"])
out["killed_get"] = jobs.describe(killed["dir"])
out["killed_cancel"] = jobs.cancel({"id": killed["id"], "timeout": 2}, Ctx())
out["d2_alive"] = ownership.proc_start_time(d2) is not None
out["killed_rm"] = jobs.remove({"id": killed["id"]}, Ctx())

# 3. A real orphan still counts: its runner dies, the command (which carries the marker) runs on.
orphan = jobs.start_job(STATE, "test", ["sleep", "300"], {}, {})
wait_for(lambda: len(members(orphan["pid"])) == 2, "sleep to start")
os.kill(orphan["pid"], signal.SIGKILL)
wait_for(lambda: (reap(), ownership.proc_start_time(orphan["pid"]))[1] is None, "the runner to go")
out["orphan_get"] = jobs.describe(orphan["dir"])
out["orphan_cancel"] = jobs.cancel({"id": orphan["id"], "timeout": 5}, Ctx())
out["ping"] = __import__("backend.agent.host.probes", fromlist=["info"]).info({}, Ctx()).get("job_ownership", "")
for pid in (d1, d2):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # a stranger the job's cancel killed
        pass
print(json.dumps(out))
"""


def in_pid_namespace(tmp_path: Path, program: str, **consts: object) -> dict:
    """Run ``program`` as pid 1 of a new pid namespace (REPO and ``consts`` defined); the JSON it prints last."""
    driver = tmp_path / "driver.py"
    head = "".join(f"{k} = {v!r}\n" for k, v in {"REPO": str(REPO), "NO_CGROUP": False, **consts}.items())
    driver.write_text(head + textwrap.dedent(program))
    proc = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(driver)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("proof", ["cgroup", "marker"])
def test_a_stranger_with_an_old_runners_numbers_is_never_signalled(tmp_path, proof):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if proof == "cgroup":
        _need_cgroups()
    with _no_cgroup_left(state):
        out = in_pid_namespace(tmp_path, DRIVER, STATE=str(state), NO_CGROUP=proof == "marker")

    # A done job is final: cancel signals nothing, says done, and the daemon lives.
    assert out["done_cancel"]["state"] == "done" and out["done_cancel"]["stopped"] == []
    assert out["d1_alive"]

    # A job killed whole is failed (not orphaned with the daemon's pid); cancel leaves the daemon; rm works.
    got = out["killed_get"]
    assert got["state"] == "failed" and got["orphans"] == [], got
    assert "disappeared" in got["reason"]
    assert out["killed_cancel"]["stopped"] == [] and out["d2_alive"]
    assert out["killed_rm"]["removed"] == [got["id"]]

    # A true orphan is still found and stopped.
    assert out["orphan_get"]["state"] == "orphaned" and len(out["orphan_get"]["orphans"]) == 1
    assert out["orphan_cancel"]["state"] == "cancelled" and out["orphan_cancel"]["left"] == []
    assert out["orphan_cancel"]["stopped"] == out["orphan_get"]["orphans"]
    if proof == "cgroup":  # what `specdeck ping` prints
        assert out["ping"].startswith("job processes proven by a per-job cgroup;"), out["ping"]
    else:
        assert "per-job environment marker and start time (no per-job cgroup: cannot create a cgroup" in out["ping"]


def _need_cgroups() -> None:
    from backend.agent.host import ownership

    why = ownership._probe_cgroup()
    if why:
        pytest.skip(f"needs a cgroup v2 folder the agent can create and move processes into: {why}")


@contextlib.contextmanager
def _no_cgroup_left(state: Path):
    """After the test: no job's cgroup folder is left (a failed test's too, once its namespace is gone)."""
    from backend.agent.host import ownership

    try:
        yield
    finally:
        left = []
        for pid_file in state.glob("jobs/*/pid.json"):
            cgroup = json.loads(pid_file.read_text()).get("cgroup")
            if cgroup and os.path.isdir(cgroup["dir"]):
                left.append(cgroup["dir"])
                ownership.remove_cgroup(cgroup)
        assert not left, f"cgroup folders left behind: {left}"


# A command that escapes everything but its cgroup: a double-forking daemon in a session of its own, with
# an empty environment (env -i: no marker). Its pid goes to a file.
ESCAPE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        script = "echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 300" % ((sys.argv[1],) * 3)
        os.execvp("env", ["env", "-i", "sh", "-c", script])
    os._exit(0)
if sys.argv[2] == "stay":
    time.sleep(300)
"""

ESCAPER = """
import json, os, signal, sys, time
sys.path.insert(0, REPO)
from backend.agent.host import jobs, ownership, main as agent_main

if sys.argv[1:2] in (["job-run"], ["worker"]):
    sys.exit(agent_main.main(sys.argv[1:]))


class Ctx:
    state_dir = STATE


def wait_for(cond, what):
    deadline = time.time() + 60
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.01)
        try:  # pid 1 of this namespace inherits the daemons: reap them so they read gone
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def daemon_of(name, stay):
    path = os.path.join(STATE, name)
    job = jobs.start_job(STATE, "test", [sys.executable, "-c", ESCAPE, path, stay], {}, {})
    wait_for(lambda: os.path.exists(path), "the daemon to start")
    with open(path) as f:
        return job, int(f.read())


out = {}
# 1. A running job whose daemon left its session and cleared its environment: cancel still stops it.
running, d1 = daemon_of("d1", "stay")
out["d1_sid_apart"] = ownership.proc_ids(d1)[1] != running["pid"]
out["running_pids"] = jobs.job_pids(running["dir"])
out["d1"] = d1
out["cancel"] = jobs.cancel({"id": running["id"], "timeout": 5}, Ctx())
wait_for(lambda: ownership.proc_start_time(d1) is None, "the daemon to be stopped")

# 2. A done job (its command exited 0, exit.json written) whose daemon runs on in its cgroup: never signalled.
done, d2 = daemon_of("d2", "go")
wait_for(lambda: jobs.describe(done["dir"])["state"] == "done", "the job to end")
out["done_cancel"] = jobs.cancel({"id": done["id"], "timeout": 2}, Ctx())
out["d2_alive"] = ownership.proc_start_time(d2) is not None
cgroup = jobs._read_json(os.path.join(done["dir"], "pid.json"))["cgroup"]
out["done_rm"] = jobs.remove({"id": done["id"]}, Ctx())  # the daemon is moved out, unharmed; the folder goes
out["d2_alive_after_rm"] = ownership.proc_start_time(d2) is not None
out["cgroup_gone"] = not os.path.exists(cgroup["dir"])
os.kill(d2, signal.SIGKILL)
print(json.dumps(out))
"""


def test_a_job_whose_daemon_escapes_its_session_and_environment_is_still_stopped(tmp_path):
    """Issue 20, item 2: the job's cgroup holds what it forks, whatever its session or environment."""
    _need_cgroups()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with _no_cgroup_left(state):
        out = in_pid_namespace(tmp_path, ESCAPER, STATE=str(state), ESCAPE=ESCAPE)
    assert out["d1_sid_apart"] and out["d1"] in out["running_pids"]
    assert out["cancel"]["state"] == "cancelled" and out["d1"] in out["cancel"]["stopped"]
    assert out["cancel"]["left"] == []
    # A done job is final even with its daemon still in its cgroup; rm moves the daemon out, unharmed, and
    # removes the cgroup.
    assert out["done_cancel"]["state"] == "done" and out["done_cancel"]["stopped"] == [] and out["d2_alive"]
    assert len(out["done_rm"]["removed"]) == 1 and out["d2_alive_after_rm"] and out["cgroup_gone"]


CLAIMANT = """
import json, os, signal, sys, time
sys.path.insert(0, REPO)
from backend.history import History
from backend.history import store

r, w = os.pipe()
panel = os.fork()
if panel == 0:
    with History.open(DB) as history:
        history.claim("local/serve-1", "a panel")
    os.write(w, b"x")
    signal.pause()
os.read(r, 1)
with History.open(DB) as history:
    before = history.recorder_of("local/serve-1")
os.kill(panel, signal.SIGKILL)  # the panel is killed with -9: its claim stays in the database
os.waitpid(panel, 0)
killed = time.time()
while time.time() < killed + getattr(store, "CLAIM_SLACK_S", 0) + 0.1:  # so a later start is a later one
    time.sleep(0.02)
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(panel - 1))
stranger = os.fork()
if stranger == 0:
    signal.pause()
with History.open(DB) as history:
    after = history.recorder_of("local/serve-1")
os.kill(stranger, signal.SIGKILL)
print(json.dumps({"before": before, "after": after, "same_pid": stranger == panel}))
"""


def test_a_dead_panels_claim_is_not_kept_alive_by_its_pid_coming_round(tmp_path):
    """Issue 20, item 4: a panel killed with -9, its pid taken by another process: the claim no longer counts
    (syncs stored 0 samples until that process exited)."""
    out = in_pid_namespace(tmp_path, CLAIMANT, DB=str(tmp_path / "history.sqlite"))
    assert out == {"before": "a panel", "after": None, "same_pid": True}


def test_a_cgroup_that_takes_no_processes_falls_back_to_the_marker(monkeypatch):
    """The no-internal-processes family of refusals (here EOPNOTSUPP: a threaded subtree takes no process)
    leaves nothing behind and ping says why the marker is used."""
    from backend.agent.host import ownership

    _need_cgroups()
    own = ownership._own_cgroup()
    assert own is not None
    base = Path(own[0]) / f"{ownership.CGROUP_PREFIX}test-{os.getpid()}"
    sleeper = None
    try:
        (base / "t").mkdir(parents=True)
        (base / "t" / "cgroup.type").write_text("threaded\n")
        monkeypatch.setattr(ownership, "cgroup_parent_override", str(base / "t"))
        monkeypatch.setattr(ownership, "_last_cgroup_why", None)
        sleeper = subprocess.Popen(["sleep", "60"])
        cgroup, why = ownership.cgroup_for("job", sleeper.pid)
        assert cgroup is None and "Operation not supported" in why
        assert not (base / "t" / f"{ownership.CGROUP_PREFIX}job").exists()
        said = ownership.method_in_use()
        assert "per-job environment marker" in said and "cannot move a process into a cgroup" in said, said
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        ownership.remove_cgroup(str(base))
    assert not base.exists()
