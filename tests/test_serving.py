"""Serving: profiles → SGLang's command line, preflight, and the server's lifecycle on the SIMULATED SGLang,
through both transports (`local` and the real sshd).

The simulator guard: the `host` fixture's HostConfig gets ``sandbox=True, launcher="simulator"`` in code here.
A config file cannot say that for an SSH host (settings refuse it), and ``command_line.launcher_argv`` refuses the
simulator on any host that is not a sandbox host on this machine; the loopback sshd is this machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from backend.agent.host.shared.server_states import PHASES
from backend.connection import Connection
from backend.errors import RemoteError, UsageError
from backend.sandbox import environment
from backend.serve import command_line, preflight_checks, server_status, serving
from backend.settings.model import HostConfig, ProfileConfig, builtin_defaults
from backend.settings.validation import parse
from backend.sglang.flags import FLAGS, server_args
from backend.sglang.flags import parse as parse_flags
from tests.simhost import (
    EAGLE,
    PY38,
    TIME_SCALE,
    fake_nvidia_smi,
    make_settings,
    process_gone,
    specdeck,
    until_gone,
    write_config,
)
from tests.sshd import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
async def conn(sim_host: HostConfig):
    """A connection to the simulator host; every server still running at the end is stopped."""
    c = await Connection.open(sim_host)
    yield c
    for job in await c.call("jobs.list", kind="serve"):
        if job["state"] == "running":
            await c.call("serve.stop", job=job["id"], timeout=5)
    await c.close()


# --- profiles → command lines ---------------------------------------------------------------------------------


def test_builtin_profiles_argv_parse_strictly_and_mean_exactly_the_profile():
    settings = builtin_defaults()
    host = settings.hosts["gpu-box"]
    for profile in settings.profiles.values():
        cmd = command_line.profile_command(settings, host, profile.name)
        argv = cmd.argv
        assert argv[:3] == ["/root/ml-env/bin/python3", "-m", "sglang.launch_server"]
        assert cmd.cwd == "/data/eagle3" and cmd.env == {"PYTHONUNBUFFERED": "1", "SGLANG_LOG_MS": "1"}
        # Full names only: every flag is one SGLang registers, and the strict parser takes the line.
        assert all(a in FLAGS for a in argv[3:] if a.startswith("--"))
        args = server_args(parse_flags(argv[3:]))
        assert args["model_path"] == "/data/models/Kimi-K2.5" and args["tp_size"] == 8
        assert (args["host"], args["port"]) == ("127.0.0.1", 30000)
        assert args["trust_remote_code"] and args["enable_metrics"] and args["decode_log_interval"] == 40
        drafter = settings.drafters[profile.drafter].path if profile.drafter else None
        assert args["speculative_algorithm"] == profile.algorithm
        assert args["speculative_draft_model_path"] == drafter
        assert args["speculative_num_steps"] == profile.steps
        assert args["speculative_eagle_topk"] == profile.topk
        assert args["speculative_num_draft_tokens"] == profile.draft_tokens
    ours = command_line.profile_command(settings, host, "eagle3-ours").argv[3:]
    assert ours == [
        "--model-path", "/data/models/Kimi-K2.5", "--tp-size", "8", "--trust-remote-code",
        "--host", "127.0.0.1", "--port", "30000", "--enable-metrics", "--decode-log-interval", "40",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/data/eagle3/output_100k_sglang/4",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip
    assert "--speculative-algorithm" not in command_line.profile_command(settings, host, "baseline").argv


def test_extra_flags_and_env_come_last_and_mean_what_they_say():
    settings = builtin_defaults()
    profile = ProfileConfig(
        name="tuned",
        drafter="aq-medai",
        **EAGLE,
        port=30001,
        extra_args=("--mem-fraction-static", "0.85", "--decode-log-interval", "10", "--cuda-graph-max-bs", "16"),
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    )
    cmd = command_line.profile_command(settings, settings.hosts["gpu-box"], profile)
    assert cmd.argv.count("--decode-log-interval") == 1  # the profile's own interval replaces ours
    args = server_args(parse_flags(cmd.argv[3:], "0.5.6"), "0.5.6")  # 0.5.23 has no --cuda-graph-max-bs
    assert (args["mem_fraction_static"], args["decode_log_interval"], args["cuda_graph_max_bs"]) == (0.85, 10, 16)
    assert args["port"] == 30001 and args["speculative_draft_model_path"] == "/data/eagle3/aq_medai_k2"
    assert cmd.env["SGLANG_ENABLE_SPEC_V2"] == "1"
    assert command_line.shell_line(cmd.argv, cmd.env).startswith(
        "SGLANG_LOG_MS=1 SGLANG_ENABLE_SPEC_V2=1 /root/ml-env/bin/python3"
    )
    assert command_line.job_args(settings, profile) == {
        "profile": "tuned",
        "port": 30001,
        "drafter": "aq-medai",
        "drafter_path": "/data/eagle3/aq_medai_k2",
        "model": "/data/models/Kimi-K2.5",
        "algorithm": "EAGLE3",
        "steps": 3,
        "topk": 1,
        "draft_tokens": 4,
        "tp": 8,
    }


def test_the_simulator_runs_only_on_sandbox_hosts_of_this_machine(tmp_path):
    settings = builtin_defaults()
    sandbox = parse_toml_config(environment.config_text(environment.Layout(tmp_path), None))
    host = sandbox.hosts["sandbox"]
    assert command_line.profile_command(sandbox, host, "baseline").argv[:3] == [
        sys.executable,
        "-m",
        "backend.sandbox.sglang_sim",
    ]
    loopback_ssh = HostConfig(name="t", url="ssh://me@127.0.0.1:2222", launcher="simulator", sandbox=True)
    assert command_line.launcher_argv(loopback_ssh)[1:] == ["-m", "backend.sandbox.sglang_sim"]
    for bad in (
        replace(settings.hosts["gpu-box"], launcher="simulator", sandbox=True),  # the real host, even if "sandbox"
        replace(host, sandbox=False),  # local but not a sandbox
    ):
        with pytest.raises(UsageError, match="only runs on a sandbox host on this machine"):
            command_line.profile_command(settings, bad, "baseline")


def parse_toml_config(text: str):
    import tomllib

    return parse(tomllib.loads(text), "sandbox")


@pytest.mark.parametrize(
    "values, check, words",
    [
        ({"drafter": "ours", "algorithm": "EAGLE3", "steps": 3}, "speculative numbers", "set all three"),
        ({"drafter": "ours", **EAGLE, "draft_tokens": 5}, "topk 1", "steps + 1 = 4, not 5"),
        ({"steps": 3, "topk": 1, "draft_tokens": 4}, "speculative numbers", "without a speculative algorithm"),
        ({"drafter": "ours"}, "algorithm", 'set algorithm = "EAGLE3"'),
        ({**EAGLE}, "algorithm", "EAGLE3 needs a drafter"),
        ({"extra_args": ("--tp", "4")}, "flags", "would refuse"),
        ({"extra_args": ("--port", "1")}, "flags", "repeat what the profile sets (--port)"),
        ({"extra_args": ("--not-an-sglang-flag",)}, "flags", "unrecognized arguments"),
    ],
)
def test_profile_checks_refuse_what_sglang_would_not_run(values, check, words):
    profile = ProfileConfig(name="p", **values)
    failed = [c for c in preflight_checks.profile_checks(builtin_defaults(), profile) if c.status == "fail"]
    assert [c.name for c in failed] == [check] and words in failed[0].message
    assert "\n" not in failed[0].message


# --- preflight on a host ----------------------------------------------------------------------------------------


def by_name(result: preflight_checks.Preflight) -> dict:
    return {c.name: c for c in result.checks}


@pytest.mark.slow
async def test_preflight_on_the_host(conn, models, tmp_path):
    settings = make_settings(
        models,
        good={"drafter": "ours", **EAGLE},
        misfit={"drafter": "misfit", **EAGLE},
        trap={"drafter": "aq-medai", **EAGLE, "algorithm": "EAGLE"},
        future={"extra_args": ["--some-future-flag"]},
    )
    good = await preflight_checks.preflight(conn, settings, settings.profiles["good"])
    assert good.ok, good.failures
    checks = by_name(good)
    assert {n: c.status for n, c in checks.items() if n not in ("gpus", "tp")} == dict.fromkeys(
        ("speculative numbers", "flags", "target", "drafter", "algorithm", "window", "sglang", "port"), "ok"
    )
    assert checks["sglang"].message == f"sglang {conn.host.sglang_version}-sim on the host knows every flag"
    assert good.version == f"{conn.host.sglang_version}-sim"  # what a start records in its job's args
    assert checks["gpus"].status in ("ok", "skip", "warn")

    misfit = by_name(await preflight_checks.preflight(conn, settings, settings.profiles["misfit"]))
    assert misfit["drafter"].status == "fail" and "hidden_size is 4096" in misfit["drafter"].message
    forced = await preflight_checks.preflight(conn, settings, settings.profiles["misfit"], force=True)
    assert forced.ok and by_name(forced)["drafter"].status == "warn"

    trap = by_name(await preflight_checks.preflight(conn, settings, settings.profiles["trap"]))
    assert trap["algorithm"].status == "fail" and "accept length 1.00" in trap["algorithm"].message

    future = by_name(await preflight_checks.preflight(conn, settings, settings.profiles["future"]))
    assert future["flags"].status == "fail"
    assert future["sglang"].status == "fail" and "does not know --some-future-flag" in future["sglang"].message

    # What one release dropped is named with the release and its replacement; the other release takes it.
    legacy = make_settings(
        models, p={"extra_args": ["--cuda-graph-max-bs", "16"], "env": {"SGLANG_ENABLE_SPEC_V2": "1"}}
    )
    old = by_name(await preflight_checks.preflight(conn, legacy, legacy.profiles["p"]))
    if conn.host.sglang_version == "0.5.23":
        assert old["flags"].status == "fail" and "use --cuda-graph-max-bs-decode" in old["flags"].message
        assert "--cuda-graph-max-bs was removed after SGLang 0.5.6" in old["sglang"].message
        assert old["env"].status == "warn" and "SGLANG_ENABLE_SPEC_V2 was removed after SGLang 0.5.6" in (
            old["env"].message
        )
    else:
        assert old["flags"].status == "ok" and old["sglang"].status == "ok" and "env" not in old

    # The drafter's trained window against the context the profile allows (ours: K2.5's 262144 positions).
    long = make_settings(models, p={"drafter": "ours", **EAGLE, "extra_args": ["--context-length", "300000"]})
    window = by_name(await preflight_checks.preflight(conn, long, long.profiles["p"]))["window"]
    assert window.status == "warn" and "trained on 262144 positions" in window.message
    assert "--context-length 262144" in window.message and by_name(good)["window"].status == "ok"
    assert by_name(good)["tp"].status == "skip"  # no nvidia-smi here: nothing to count

    missing = make_settings({**models, "ours": str(tmp_path / "nowhere")}, p={"drafter": "ours", **EAGLE})
    gone = by_name(await preflight_checks.preflight(conn, missing, missing.profiles["p"]))
    assert gone["drafter"].status == "fail" and "does not exist on the host" in gone["drafter"].message

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", settings.profiles["good"].port))
        busy.listen()
        port = by_name(await preflight_checks.preflight(conn, settings, settings.profiles["good"]))["port"]
    assert port.status == "fail" and "taken by another program" in port.message


@pytest.mark.slow
async def test_launcher_help_is_cached_per_version_and_a_missing_sglang_refused(conn, models):
    settings = make_settings(models, p={})
    cmd = command_line.profile_command(settings, conn.host, settings.profiles["p"])
    first = await conn.call("serve.help", argv=cmd.argv[:3], version="0.5.6-sim", cwd=cmd.cwd)
    again = await conn.call("serve.help", argv=cmd.argv[:3], version="0.5.6-sim", cwd=cmd.cwd)
    assert (first["cached"], again["cached"]) == (False, True) and first["help"] == again["help"]
    # This interpreter has no sglang: the real launcher is refused with a sentence, before anything starts.
    real = await Connection.open(replace(conn.host, launcher="sglang", sandbox=False))
    try:
        checks = by_name(await preflight_checks.preflight(real, settings, settings.profiles["p"]))
    finally:
        await real.close()
    assert checks["sglang"].status == "fail" and "sglang is not installed" in checks["sglang"].message


# --- the lifecycle ------------------------------------------------------------------------------------------


async def test_start_phases_ready_status_busy_port_stop(conn, models):
    settings = make_settings(models, **{"eagle3-ours": {"drafter": "ours", **EAGLE}})
    profile = settings.profiles["eagle3-ours"]
    other = replace(profile, name="baseline", drafter=None, algorithm=None, steps=None, topk=None, draft_tokens=None)
    started = await serving.start(conn, settings, profile)
    assert started["state"] == "starting" and started["profile"] == "eagle3-ours" and started["preflight"]["ok"]
    seen: list[str] = []
    ready = await serving.wait(conn, started["job"], within=30, on_status=lambda s: seen.append(s["state"]))
    assert ready["state"] == "ready", ready
    assert seen[0] == "starting" and seen[-1] == "ready"
    assert [p["phase"] for p in ready["phases"]] == list(PHASES)
    assert all(p["end"] is not None for p in ready["phases"][:-1])
    assert ready["server_info"]["version"] == f"{conn.host.sglang_version}-sim" and ready["server_info"]["simulated"]
    # Each phase took what SGLang itself timed where its log says so (load, graph capture), else the stamps'
    # difference: millisecond stamps (SGLANG_LOG_MS=1, set by specdeck) make every phase's time real.
    typed = server_status.ServerStatus.from_json(ready)
    rows = {row.phase: row for row in server_status.timeline(typed, time.time())}
    assert all(rows[p].state == "done" and rows[p].seconds > 0 for p in PHASES[1:-1])
    current = conn.host.sglang_version == "0.5.23"  # 0.5.6 times graph captures only, 0.5.23 weight loads too
    timed = ("capturing", "loading") if current else ("capturing",)
    assert all(p["measured"] > 0 for p in ready["phases"] if p["phase"].startswith(timed))
    assert (ready["startup_timings"] is not None) == current
    assert (server_status.startup_text(typed) or "").startswith("SGLang timed load_weight ") == current
    numbers = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    assert [ready["server_info"][k] for k in numbers] == [3, 1, 4] and ready["warnings"] == []

    status = await serving.status(conn)
    assert {"state", "profile", "pid", "port", "since", "phase", "log_path", "error", "hint"} <= set(status)
    assert server_status.STATES == ("none", "starting", "ready", "orphaned", "stopping", "stopped", "crashed")
    assert (status["state"], status["port"], status["phase"], status["error"]) == ("ready", profile.port, "ready", None)
    assert status["args"]["port"] == profile.port and status["args"]["drafter_path"] == models["ours"]
    assert status["args"]["sglang_version"] == f"{conn.host.sglang_version}-sim"  # History's without /server_info
    pid = status["pid"]
    assert not process_gone(pid)
    tail = await serving.tail(conn, status["job"], 5)
    assert any("fired up and ready to roll" in line for line in tail.lines)

    # One server per port: preflight says who holds it, and the host refuses even without preflight.
    with pytest.raises(preflight_checks.PreflightFailed, match=r"port \d+ is held by profile eagle3-ours"):
        await serving.start(conn, settings, other)
    cmd = command_line.profile_command(settings, conn.host, other)
    with pytest.raises(RemoteError, match="held by profile eagle3-ours") as refused:
        await conn.call("serve.start", argv=cmd.argv, args=command_line.job_args(settings, other), cwd=cmd.cwd)
    assert refused.value.kind == "busy" and refused.value.exit_code == 1

    stopped = await serving.stop(conn, grace=10)
    assert stopped["state"] == "stopped" and stopped["was_running"] and stopped["left"] == []
    assert stopped["gpus_freed"] in (True, None)  # None: no nvidia-smi here
    assert process_gone(pid) and process_gone(status["pgid"])
    assert (await serving.status(conn))["state"] == "stopped"
    again = await serving.stop(conn)
    assert not again["was_running"] and again["state"] == "stopped"


@pytest.mark.slow
async def test_reconnect_mid_run_reattaches_without_losing_a_line(sim_host, models, request):
    slow = make_settings(models, p={"drafter": "ours", **EAGLE, "env": {"SPECDECK_SIM_TIME_SCALE": "0.3"}})
    conn = Connection(sim_host)
    conn.supervise()
    try:
        await conn.wait_connected(60)
        started = await serving.start(conn, slow, slow.profiles["p"])
        lines: list[str] = []
        follower = asyncio.create_task(_collect(serving.follow(conn, started["job"], 0), lines))
        deadline = time.monotonic() + 60
        while not any("Load weight begin" in line for line in lines):
            assert time.monotonic() < deadline, lines
            await asyncio.sleep(0.02)
        generation = conn.generation
        if sim_host.is_local:
            conn.agent.pipe.kill()  # the agent dies mid-follow
        else:
            request.getfixturevalue("sshd").drop_connections()  # the network goes away mid-follow
        # A fresh agent (no memory of this server) finds it from the host alone.
        await _reconnected(conn, generation)
        status = await serving.wait(conn, started["job"], within=30)
        assert status["state"] == "ready" and status["job"] == started["job"]
        await serving.stop(conn, grace=10)
        await asyncio.wait_for(follower, 60)  # the follow ends with the server
        log = Path(status["log_path"]).read_text().splitlines()
        assert lines == log  # nothing lost, nothing repeated
    finally:
        await conn.close()


async def _collect(stream, out: list) -> None:
    async for batch in stream:
        out.extend(batch)


async def _reconnected(conn: Connection, generation: int) -> None:
    deadline = time.monotonic() + 60
    while conn.generation == generation or not conn.connected:
        assert time.monotonic() < deadline, conn.state
        await asyncio.sleep(0.02)


async def test_kill_9_of_the_server_is_a_crash(conn, models):
    settings = make_settings(models, baseline={})
    started = await serving.start(conn, settings, settings.profiles["baseline"])
    ready = await serving.wait(conn, started["job"], within=30)
    os.kill(ready["pid"], signal.SIGKILL)
    crashed = await serving.wait(conn, started["job"], within=30, until=("crashed", "stopped"))
    assert crashed["state"] == "crashed" and crashed["error"] == "killed by SIGKILL"
    assert "OOM killer" in crashed["hint"] and crashed["phase"] == "ready"
    await until_gone(ready["pgid"])  # the runner exits right after recording the exit


async def test_broken_drafter_crashes_with_the_shape_mismatch_hint(conn, models):
    settings = make_settings(models, misfit={"drafter": "misfit", **EAGLE})
    with pytest.raises(preflight_checks.PreflightFailed, match="incompatible with the target"):
        await serving.start(conn, settings, settings.profiles["misfit"])
    started = await serving.start(conn, settings, settings.profiles["misfit"], force=True)
    crashed = await serving.wait(conn, started["job"], within=30)
    assert crashed["state"] == "crashed" and crashed["phase"] == "loading draft weights"
    assert crashed["error"] == (
        "AssertionError: Attempted to load weight (torch.Size([4096, 12288])) into parameter "
        "(torch.Size([7168, 21504]))"
    )
    assert "open Compare" in crashed["hint"] and crashed["hint_action"] == "compare"
    assert crashed["error_lines"][-1].endswith(
        "Received sigquit from a child process. It usually means the child failed."
    )
    rows = server_status.timeline(server_status.ServerStatus.from_json(crashed), time.time())
    assert {r.phase: r.state for r in rows}["loading draft weights"] == "failed"


@pytest.mark.parametrize("sim_host", [("local", "0.5.23")], indirect=True)
@pytest.mark.parametrize(
    "failure, words",
    [
        ("oom", "raise --mem-fraction-static"),
        ("cuda_graph", "--cuda-graph-max-bs 16"),
        ("warmup", "warmup request failed"),
        ("unbalanced", "Another process holds memory"),
    ],
)
async def test_failure_signatures_get_their_hints(conn, models, failure, words):
    settings = make_settings(models, p={"drafter": "ours", **EAGLE, "env": {"SPECDECK_SIM_FAIL": failure}})
    started = await serving.start(conn, settings, settings.profiles["p"])
    crashed = await serving.wait(conn, started["job"], within=30)
    assert crashed["state"] == "crashed" and words in crashed["hint"], crashed


@pytest.mark.parametrize("sim_host", [("local", "0.5.23")], indirect=True)
async def test_a_port_taken_after_preflight_is_a_crash_with_a_hint(conn, models):
    settings = make_settings(models, p={})
    profile = settings.profiles["p"]
    cmd = command_line.profile_command(settings, conn.host, profile)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", profile.port))
        squatter.listen()
        started = await conn.call(
            "serve.start",
            argv=cmd.argv,
            env=cmd.env,
            cwd=cmd.cwd,
            args=command_line.job_args(settings, profile),
        )
        crashed = await serving.wait(conn, started["job"], within=30)
    assert crashed["state"] == "crashed" and "[Errno 98]" in crashed["error_lines"][-3]
    assert "Another program listens on the server's port" in crashed["hint"]


@pytest.mark.parametrize("sim_host", [("local", "0.5.23")], indirect=True)
async def test_accept_length_stuck_at_1_gets_the_eagle_hint(conn, models):
    trap = {"drafter": "aq-medai", **EAGLE, "algorithm": "EAGLE", "extra_args": ["--decode-log-interval", "2"]}
    settings = make_settings(models, trap=trap)
    started = await serving.start(conn, settings, settings.profiles["trap"], force=True)
    ready = await serving.wait(conn, started["job"], within=30)
    assert ready["state"] == "ready"
    url = f"http://127.0.0.1:{ready['port']}/generate"
    reply = await conn.call("http.request", url=url, json={"text": "Hi", "sampling_params": {"max_new_tokens": 16}})
    assert reply["status"] == 200
    deadline = time.monotonic() + 30
    while (status := await serving.status(conn))["hint"] is None:
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.05)
    assert status["state"] == "ready" and status["accept_len"] == 1.0
    assert "Accept length is stuck at 1.00" in status["hint"] and "EAGLE3" in status["hint"]


@pytest.mark.parametrize("sim_host", [("local", "0.5.23")], indirect=True)
async def test_resolved_numbers_that_differ_from_the_profile_are_warned(conn, models):
    settings = make_settings(models, p={"drafter": "ours", **EAGLE, "draft_tokens": 5})
    profile = settings.profiles["p"]
    cmd = command_line.profile_command(settings, conn.host, profile)
    # Preflight refuses this profile; straight to the host, SGLang (here simulated) changes draft tokens to 4.
    started = await conn.call(
        "serve.start", argv=cmd.argv, env=cmd.env, cwd=cmd.cwd, args=command_line.job_args(settings, profile)
    )
    ready = await serving.wait(conn, started["job"], within=30)
    assert ready["state"] == "ready"
    assert ready["warnings"] == ["SGLang resolved speculative_num_draft_tokens to 4 but the profile says 5"]


@pytest.mark.parametrize("sim_host", [("local", "0.5.23")], indirect=True)
async def test_a_server_that_sigkills_itself_on_sigterm_counts_as_stopped(conn, tmp_path):
    # Real SGLang ends a graceful stop by SIGKILLing its own process tree: status -9 after our SIGTERM.
    script = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: os.kill(os.getpid(), signal.SIGKILL))\n"
        "print('[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=139.80 GB', flush=True)\n"
        "time.sleep(60)\n"
    )
    started = await conn.call(
        "serve.start", argv=[sys.executable, "-c", script], args={"profile": "fake", "port": free_port()}
    )
    await serving.wait(conn, started["job"], within=60, until=("starting",))
    while (await serving.status(conn, job=started["job"]))["phase"] != "loading weights":
        await asyncio.sleep(0.02)
    stopped = await serving.stop(conn, grace=10)
    assert (stopped["state"], stopped["exit_code"], stopped["error"]) == ("stopped", -9, None)


@pytest.fixture
def gpus(tmp_path, monkeypatch):
    """A fake nvidia-smi (see above) and a process of someone else's holding GPU1; yields that process."""
    other = subprocess.Popen(["sleep", "120"])
    pid_file = tmp_path / "other.pid"
    pid_file.write_text(str(other.pid))
    fake_nvidia_smi(tmp_path / "bin", pid_file)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    yield other
    other.kill()
    other.wait()


@pytest.mark.parametrize("sim_host", [("local", "0.5.23")], indirect=True)
async def test_gpus_name_other_processes_and_stop_waits_for_ours_to_free(gpus, conn, models):
    settings = make_settings(models, p={"tp": 2}, wide={"tp": 8})
    checks = by_name(await preflight_checks.preflight(conn, settings, settings.profiles["p"]))
    assert checks["gpus"].status == "warn" and checks["tp"].status == "ok"
    # More tensor-parallel ranks than GPUs: refused before SGLang gets to crash on it, with both numbers.
    with pytest.raises(preflight_checks.PreflightFailed, match=r"--tp-size 8 but the host has 2 GPUs"):
        await serving.start(conn, settings, settings.profiles["wide"])
    assert f"GPU1 pid {gpus.pid} (sleep, 69000 MiB)" in checks["gpus"].message
    started = await serving.start(conn, settings, settings.profiles["p"])
    ready = await serving.wait(conn, started["job"], within=30)
    listed = await conn.call("serve.gpus")
    assert listed["nvidia_smi"] and [g["index"] for g in listed["gpus"]] == [0, 1]
    ours = [p for p in listed["gpus"][0]["processes"] if p["pid"] == ready["pid"]]
    assert ours and ours[0]["job"] == started["job"]
    assert listed["gpus"][1]["processes"] == [{"pid": gpus.pid, "used_mib": 69000.0, "name": "sleep", "job": None}]
    stopped = await serving.stop(conn, grace=10)
    assert stopped["gpus_freed"] is True and stopped["left"] == []


@pytest.mark.skipif(not PY38.exists(), reason="no Python 3.8 interpreter on this machine")
async def test_the_host_side_runs_on_python_3_8(models, tmp_path):
    host = HostConfig(
        name="py38", url="local", python=str(PY38), workdir=str(tmp_path), launcher="simulator", sandbox=True
    )
    settings = make_settings(models, p={"drafter": "ours", **EAGLE})
    conn = await Connection.open(host)
    try:
        assert conn.hello["python"].startswith("3.8.")
        started = await serving.start(conn, settings, settings.profiles["p"])
        ready = await serving.wait(conn, started["job"], within=30)
        assert ready["state"] == "ready" and ready["server_info"]["speculative_num_draft_tokens"] == 4
        assert set(await conn.call("serve.gpus")) == {"gpus", "nvidia_smi"}
        assert (await conn.call("serve.port", port=ready["port"]))["held_by"]["profile"] == "p"
        stopped = await serving.stop(conn, grace=10)
        assert stopped["state"] == "stopped" and stopped["left"] == []
    finally:
        await conn.close()


# --- the CLI contract -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_contract(models, tmp_path):
    config = write_config(tmp_path / "config.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()})
    try:
        cmd = json.loads(specdeck(config, "serve", "cmd", "eagle3-ours", "--json").stdout)
        assert set(cmd) == {"argv", "env", "cwd", "files"} and cmd["files"] == {}
        assert cmd["argv"][1:3] == ["-m", "backend.sandbox.sglang_sim"]
        text = specdeck(config, "serve", "cmd", "eagle3-ours").stdout
        assert text.startswith("SGLANG_LOG_MS=1 SPECDECK_SIM_SGLANG_VERSION=0.5.23 ")  # ms stamps; the release
        assert f" SPECDECK_SIM_TIME_SCALE={TIME_SCALE} " in text and "--speculative-num-steps 3" in text

        assert json.loads(specdeck(config, "serve", "status", "--json").stdout)["state"] == "none"
        ready = json.loads(specdeck(config, "serve", "start", "eagle3-ours", "--wait-ready", "--json").stdout)
        assert (ready["state"], ready["profile"], ready["phase"]) == ("ready", "eagle3-ours", "ready")

        status = json.loads(specdeck(config, "serve", "status", "--json").stdout)
        assert status["state"] == "ready" and status["pid"] == ready["pid"]
        human = specdeck(config, "serve", "status").stdout
        assert human.startswith("eagle3-ours: ready on port") and "EAGLE3 steps 3, topk 1, draft tokens 4" in human

        refused = specdeck(config, "serve", "start", "baseline", rc=2)
        assert "held by profile eagle3-ours" in refused.stderr and refused.stderr.count("\n") == 1

        logs = specdeck(config, "serve", "logs", "--lines", "3").stdout.splitlines()
        assert len(logs) == 3

        # A ready server is stopped only when asked to: without a terminal that is --yes (issue 33).
        for argv in (("stop",), ("restart", "baseline")):
            kept = specdeck(config, "serve", *argv, rc=2)
            assert "eagle3-ours (ready, port" in kept.stderr and "pass --yes to stop it" in kept.stderr
        assert json.loads(specdeck(config, "serve", "status", "--json").stdout)["pid"] == ready["pid"]
        switched = specdeck(config, "serve", "restart", "baseline", "--yes", "--wait-ready", "--json").stdout
        switched = json.loads(switched)
        assert (switched["state"], switched["profile"]) == ("ready", "baseline")
        assert process_gone(ready["pid"])

        stopped = json.loads(specdeck(config, "serve", "stop", "--yes", "--json").stdout)
        assert stopped["state"] == "stopped" and stopped["left"] == [] and stopped["was_running"]
        assert "no server is running" in specdeck(config, "serve", "stop", "--yes").stdout
        followed = specdeck(config, "serve", "logs", "-f", "--lines", "0").stdout
        assert followed == ""  # the server has ended: -f has nothing more to wait for
    finally:
        specdeck(config, "serve", "stop", "--yes", rc=None)


def test_cli_start_of_a_crashing_profile_exits_1_with_the_hint(models, tmp_path):
    config = write_config(tmp_path / "config.toml", models, tmp_path / "host", {"a": free_port(), "b": free_port()})
    with open(config, "a") as f:
        f.write(f'[drafters.misfit]\npath = "{models["misfit"]}"\n[profiles.misfit]\ndrafter = "misfit"\n')
        f.write('algorithm = "EAGLE3"\nsteps = 3\ntopk = 1\ndraft_tokens = 4\n')
        f.write(f'port = {free_port()}\nenv = {{ SPECDECK_SIM_TIME_SCALE = "{TIME_SCALE}" }}\n')
    refused = specdeck(config, "serve", "start", "misfit", rc=2)
    assert "Compare finds misfit incompatible" in refused.stderr and "--force" in refused.stderr
    crashed = specdeck(config, "serve", "start", "misfit", "--force", "--wait-ready", rc=1)
    assert "crashed while loading draft weights: AssertionError: Attempted to load weight" in crashed.stderr
    assert "open Compare" in crashed.stderr
