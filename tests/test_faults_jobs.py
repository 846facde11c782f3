"""Faults injected into detached jobs on the host, driving the real agent over `local` and the real sshd.

Each test breaks something the way real hosts do (kill -9 of a job's runner, a spawn that fails, a folder an
agent died in the middle of writing, two cancels at once) and states what must hold afterwards. SGLang is the
SIMULATED one (backend/sandbox/sglang_sim/).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from backend.connection import Connection
from backend.errors import RemoteError
from backend.serve import server_status, serving
from backend.settings.model import HostConfig
from tests.helpers import Ran, fill, host_args, run_cli
from tests.simhost import make_settings, process_gone, until_gone

pytestmark = [pytest.mark.tui, pytest.mark.e2e]


@pytest.fixture
async def conn(host: HostConfig):
    """A connection to a sandbox host (the simulator may run); every job still running at the end is stopped."""
    c = await Connection.open(replace(host, launcher="simulator", sandbox=True))
    yield c
    for job in await c.call("jobs.list"):
        if job["state"] in ("running", "orphaned"):
            await c.call("jobs.cancel", id=job["id"], timeout=5)
    await c.close()


def group_of(pgid: int) -> list[int]:
    """Live pids of process group ``pgid``, seen from the test (not through the agent)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] not in "ZX" and int(fields[2]) == pgid:
                out.append(int(name))
    return out


@pytest.mark.slow
async def test_killed_runner_orphans_the_server_status_says_so_and_stop_leaves_no_process(conn, models):
    """kill -9 of a serve job's runner: `serve status` says orphaned (still running), `serve stop` stops what
    is left after checking it is ours, reports it, and no process of the group survives."""
    settings = make_settings(models, baseline={})
    started = await serving.start(conn, settings, settings.profiles["baseline"])
    ready = await serving.wait(conn, started["job"], within=30)
    assert ready["state"] == "ready", ready
    runner, server = ready["pgid"], ready["pid"]
    os.kill(runner, signal.SIGKILL)
    await until_gone(runner)

    status = await serving.status(conn)
    assert status["state"] == "orphaned" and status["job"] == started["job"], status
    typed = server_status.ServerStatus.from_json(status)
    assert server_status.state_label(typed) == "running, orphaned" and typed.running
    assert status["pid"] == server and str(server) in status["error"] and "serve stop" in status["hint"]
    assert not process_gone(server)
    jobs = {j["id"]: j for j in await conn.call("jobs.list")}
    assert jobs[started["job"]]["state"] == "orphaned" and server in jobs[started["job"]]["orphans"]
    # Still the port's holder: nothing else may start on it.
    assert (await conn.call("serve.port", port=ready["port"]))["held_by"]["job"] == started["job"]

    members = group_of(runner)
    stopped = await serving.stop(conn, grace=10)
    assert stopped["was_running"] and stopped["was_orphaned"] and stopped["left"] == []
    assert set(stopped["stopped"]) == set(members) and server in stopped["stopped"]
    assert stopped["state"] == "stopped" and str(server) in stopped["reason"]
    for pid in members:
        assert process_gone(pid), pid
    assert group_of(runner) == []
    assert (await serving.status(conn))["state"] == "stopped"


async def test_killed_runner_of_a_plain_job_cancel_stops_the_rest_and_says_what(conn):
    """The same through `jobs cancel`: the shell and its two children outlive the runner; cancel stops them."""
    job = await conn.call("jobs.start", kind="test", argv=["sh", "-c", "sleep 300 & echo up; sleep 300; wait"])
    async for ev in conn.stream("jobs.follow", id=job["id"], stream="log", offset=0, until_end=False):
        assert ev["lines"] == ["up"]
        break
    members: list[int] = []
    deadline = asyncio.get_running_loop().time() + 60
    while len(members) < 3:  # sh and its two sleeps
        assert asyncio.get_running_loop().time() < deadline, members
        await asyncio.sleep(0.02)
        members = [p for p in group_of(job["pid"]) if p != job["pid"]]
    os.kill(job["pid"], signal.SIGKILL)
    await until_gone(job["pid"])
    info = await conn.call("jobs.get", id=job["id"])
    assert info["state"] == "orphaned" and sorted(info["orphans"]) == sorted(members)
    out = await conn.call("jobs.cancel", id=job["id"], timeout=5)
    assert out["state"] == "cancelled" and out["left"] == [] and sorted(out["stopped"]) == sorted(members)
    assert "runner had died" in out["reason"]
    assert all(process_gone(p) for p in members) and group_of(job["pid"]) == []


@pytest.mark.parametrize("host", ["local"], indirect=True)
async def test_concurrent_cancels_all_succeed_and_agree(conn):
    """Two cancels of one job at once, 8 times: both answer cancelled with the same exit record."""
    for _ in range(8):
        job = await conn.call("jobs.start", kind="test", argv=["sleep", "300"])
        a, b = await asyncio.gather(
            conn.call("jobs.cancel", id=job["id"], timeout=5), conn.call("jobs.cancel", id=job["id"], timeout=5)
        )
        assert a["state"] == b["state"] == "cancelled", (a, b)
        assert (a["reason"], a["ended"]) == (b["reason"], b["ended"])
        assert a["left"] == b["left"] == []
        assert not [n for n in os.listdir(job["dir"]) if n.endswith(".tmp")]


async def test_a_spawn_that_fails_leaves_no_folder_and_says_why(conn):
    """A NUL in an env value makes the spawn fail: one sentence, and no job folder (temp or final) stays."""
    root = os.path.join((await conn.call("info"))["state_dir"], "jobs")
    before = set(os.listdir(root)) if os.path.isdir(root) else set()
    with pytest.raises(RemoteError) as err:
        await conn.call("jobs.start", kind="test", argv=["true"], env={"BAD": "a\0b"})
    assert "cannot start the test job on the host" in str(err.value) and "\n" not in str(err.value)
    assert set(os.listdir(root)) == before
    assert [j for j in await conn.call("jobs.list") if j["kind"] == "test"] == []


async def test_a_folder_without_pid_is_failed_after_a_while_and_removable(conn):
    """A job folder an older agent left with spec.json only (it died before pid.json) reads failed once it is
    old enough, not running forever; it can be removed, and a stale half-created temp folder is swept."""
    root = os.path.join((await conn.call("info"))["state_dir"], "jobs")
    os.makedirs(root, exist_ok=True)
    legacy = os.path.join(root, "test-20200101-000000-abcd")
    os.mkdir(legacy, 0o700)
    with open(os.path.join(legacy, "spec.json"), "w") as f:
        json.dump({"kind": "test", "argv": ["true"], "started": time.time() - 120}, f)
    stale = os.path.join(root, ".new-test-20200101-000000-efgh")
    os.mkdir(stale, 0o700)
    os.utime(stale, (time.time() - 120, time.time() - 120))
    [job] = [j for j in await conn.call("jobs.list") if j["id"] == os.path.basename(legacy)]
    assert job["state"] == "failed" and "never started" in job["reason"]
    assert not os.path.exists(stale)
    assert (await conn.call("jobs.remove", id=job["id"]))["removed"] == [job["id"]]
    assert not os.path.exists(legacy)


def specdeck_cli(host: HostConfig, *args: str, rc: int = 0) -> Ran:
    return run_cli(*args, *host_args(host), rc=rc)


@pytest.mark.slow
async def test_jobs_rm_and_prune_remove_only_ended_jobs(conn, host):
    """`jobs rm` refuses a running job in one sentence and removes an ended one; `jobs prune --older-than`
    removes ended jobs older than that and keeps running ones and recent ones."""
    running = await conn.call("jobs.start", kind="test", argv=["sleep", "300"])
    old = await conn.call("jobs.start", kind="test", argv=["true"])
    recent = await conn.call("jobs.start", kind="test", argv=["true"])
    for job in (old, recent):
        assert (await conn.call("jobs.wait", id=job["id"], timeout=30))["state"] == "done"
    with open(os.path.join(old["dir"], "exit.json")) as f:
        record = json.load(f)
    os.remove(os.path.join(old["dir"], "exit.json"))
    with open(os.path.join(old["dir"], "exit.json"), "w") as f:
        json.dump(dict(record, ended=time.time() - 3 * 86400), f)

    refused = specdeck_cli(host, "jobs", "rm", running["id"], rc=1)
    assert f"job {running['id']} is still running; stop it first" in refused.stderr
    assert refused.stderr.count("\n") == 1 and os.path.isdir(running["dir"])
    bad = specdeck_cli(host, "jobs", "prune", "--older-than", "soon", rc=2)
    assert "a duration looks like" in bad.stderr

    pruned = json.loads(specdeck_cli(host, "jobs", "prune", "--older-than", "2d", "--json").stdout)
    assert pruned == {"removed": [old["id"]], "running": 1}
    assert not os.path.exists(old["dir"]) and os.path.isdir(recent["dir"])
    assert specdeck_cli(host, "jobs", "rm", recent["id"]).stdout == f"removed {recent['id']}\n"
    assert not os.path.exists(recent["dir"])
    await conn.call("jobs.cancel", id=running["id"], timeout=5)
    assert "removed 1 ended job(s) older than 0s" in specdeck_cli(host, "jobs", "prune", "--older-than", "0s").stdout
    assert not os.path.exists(running["dir"])


@pytest.mark.slow
async def test_the_panel_prunes_ended_jobs_with_a_key(tmp_path, monkeypatch):
    """J (footer and palette) removes the host's ended jobs older than a week and says how many."""
    from backend.settings.model import builtin_defaults
    from tests.helpers import until
    from tui.app import SpecdeckApp

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    app = SpecdeckApp(builtin_defaults(), host="local")
    async with app.run_test(size=(130, 30)) as pilot:
        await until(pilot, lambda: app.connection.connected, "connected")
        job = await app.connection.call("jobs.start", kind="test", argv=["true"])
        await app.connection.call("jobs.wait", id=job["id"], timeout=30)
        exit_path = os.path.join(job["dir"], "exit.json")
        with open(exit_path) as f:
            record = json.load(f)
        os.remove(exit_path)
        with open(exit_path, "w") as f:
            json.dump(dict(record, ended=time.time() - 8 * 86400), f)
        assert "jobs.prune" in {b.id for b in app.BINDINGS}
        await pilot.press("J")
        await until(pilot, lambda: not os.path.exists(job["dir"]), "the job's folder to go")
        await until(pilot, lambda: any("removed 1 ended job(s)" in n.message for n in app._notifications), "a toast")


async def next_event(events, timeout: float = 20) -> dict:
    return await asyncio.wait_for(anext(events), timeout)


async def test_a_truncated_or_rotated_log_restarts_its_followers_from_the_top(conn):
    """A log cut to zero, then one replaced by a new file (rotation): the follower is told ("log truncated")
    and gets every line of the new content, instead of waiting past the end forever."""
    job = await conn.call("jobs.start", kind="test", argv=["sleep", "300"])
    log = os.path.join(job["dir"], "log")

    def append(*lines: str) -> None:
        with open(log, "a") as f:
            f.write("".join(line + "\n" for line in lines))

    append("one", "two")
    events = conn.stream("jobs.follow", id=job["id"], stream="log", offset=0, until_end=False).__aiter__()
    try:
        assert (await next_event(events))["lines"] == ["one", "two"]
        os.truncate(log, 0)
        append("three")
        got = await next_event(events)
        assert got == {"offset": 0, "lines": [], "truncated": "log truncated"}
        assert (await next_event(events))["lines"] == ["three"]

        os.rename(log, log + ".1")
        append("four", "five", "six")  # a new file, longer than where the follower was
        got = await next_event(events)
        assert got["truncated"] == "log truncated" and got["offset"] == 0
        assert (await next_event(events))["lines"] == ["four", "five", "six"]
    finally:
        await events.aclose()
    status = await conn.call("jobs.tail", id=job["id"], lines=5)
    assert status["lines"] == ["four", "five", "six"]


@pytest.mark.parametrize(
    "block",
    [
        b"one\ntwo\n",
        b"\n",
        b"a\n\nb\n",
        b'GET "/health" 200\n',
        b"back\\slash\n",
        b"tab\there\r\n",
        b"caf\xc3\xa9 \xe2\x80\xa8 split\n",
        b"bad utf8 \xff\n",
        b"esc \x1b[31mred\x1b[0m\x7f\n",
        b"no newline at the end",
    ],
)
def test_lines_json_is_exactly_what_json_dumps_writes(block: bytes):
    """The followers' fast encoding equals the plain one for every kind of line (escapes, odd breaks)."""
    from backend.agent.host.shared.protocol import lines_json

    plain = json.dumps(block.decode("utf-8", "replace").splitlines(), separators=(",", ":")).encode()
    assert lines_json(block) == plain


async def test_a_full_disk_before_pid_json_leaves_no_folder_and_the_next_start_works(tmpfs_host):
    """The host's state folder on a disk that fills up: starting a job fails in one sentence with nothing
    half-written left; once there is room again, jobs start as before."""
    host, mnt = tmpfs_host
    workdir = mnt.parent / "work"
    (workdir / ".specdeck").mkdir(parents=True, mode=0o700)
    (workdir / ".specdeck" / "jobs").symlink_to(mnt)  # the jobs on the small disk, the agent itself not
    conn = await Connection.open(replace(host, workdir=str(workdir)))
    try:
        agent = (await conn.call("info"))["pid"]
        inside = f"/proc/{agent}/root{mnt}"  # the tmpfs as the agent sees it
        first = await conn.call("jobs.start", kind="test", argv=["true"])
        assert (await conn.call("jobs.wait", id=first["id"], timeout=30))["state"] == "done"
        root = inside
        fill(f"{inside}/filler")
        before = set(os.listdir(root))
        with pytest.raises(RemoteError) as err:
            await conn.call("jobs.start", kind="test", argv=["true"])
        assert str(err.value).startswith("cannot start the test job on the host: No space left on device")
        assert "\n" not in str(err.value) and set(os.listdir(root)) == before
        assert [j["id"] for j in await conn.call("jobs.list")] == [first["id"]]
        os.remove(f"{inside}/filler")
        again = await conn.call("jobs.start", kind="test", argv=["true"])
        assert (await conn.call("jobs.wait", id=again["id"], timeout=30))["state"] == "done"
    finally:
        await conn.close()


async def test_the_log_followers_of_cli_and_panel_say_the_log_was_truncated(conn):
    """`serve logs -f` and the Serve tab read the log through serving.follow: a truncation shows as one line
    saying so, then the new lines."""
    job = await conn.call("jobs.start", kind="test", argv=["sleep", "300"])
    log = os.path.join(job["dir"], "log")
    with open(log, "a") as f:
        f.write("old one\nold two\n")
    batches = serving.follow(conn, job["id"], 0).__aiter__()
    try:
        assert await next_event(batches) == ["old one", "old two"]
        with open(log, "w") as f:  # truncated, as `> log` or logrotate's copytruncate does
            f.write("new\n")
        assert await next_event(batches) == [serving.TRUNCATED_LINE]
        assert await next_event(batches) == ["new"]
    finally:
        await batches.aclose()


@pytest.mark.parametrize("host", ["local"], indirect=True)
async def test_a_runner_whose_agent_died_before_go_runs_nothing(conn, tmp_path):
    """The agent dies between spawning a runner and renaming the job folder into place: the runner reads EOF
    instead of "go" and exits without running the command."""
    state = (await conn.call("info"))["state_dir"]
    [agent] = [n for n in os.listdir(state) if n.startswith("agent-") and n.endswith(".pyz")]
    job_dir = tmp_path / ".new-test-x"
    job_dir.mkdir()
    marker = tmp_path / "ran"
    (job_dir / "spec.json").write_text(json.dumps({"kind": "test", "argv": ["touch", str(marker)], "args": {}}))
    runner = subprocess.run(
        [sys.executable, os.path.join(state, agent), "job-run", str(job_dir)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert runner.returncode == 1 and not marker.exists()
    assert sorted(os.listdir(job_dir)) == ["spec.json"]
