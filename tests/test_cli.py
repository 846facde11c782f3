"""The CLI contract: --help everywhere, --json outputs, exit codes, config validation, the sandbox."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli.main import build_parser
from backend.errors import ConfigError
from backend.sandbox import environment
from backend.sandbox.hub_repos import CACHE_DIR_NAME
from backend.settings import config_file
from tests.helpers import CLI, run_cli
from tests.simhost import process_gone, stop

pytestmark = pytest.mark.e2e


def all_command_paths(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from all_command_paths(sub, (*prefix, name))


def test_help_on_every_command():
    paths = list(all_command_paths(build_parser()))
    assert ("ping",) in paths and ("jobs", "cancel") in paths and ("sandbox", "up") in paths
    for path in paths:
        res = run_cli(*path, "--help")
        assert "usage: specdeck" in res.stdout, path


def test_command_table_names_every_command_and_its_module():
    """main.COMMANDS (which module a command's parser lives in, so a command imports only its own) matches what
    the modules register; a command missing there would still run, after importing every module."""
    from backend.cli.main import COMMANDS, command_modules

    registered = {}
    for module in command_modules():
        parser = build_parser([module])
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        registered.update(dict.fromkeys(sub.choices, module.rsplit(".", 1)[1]))
    assert registered == COMMANDS


def test_command_name_skips_the_host_options_and_their_values():
    from backend.cli.main import command_name, modules_for

    assert command_name(["--host", "ping", "--debug", "jobs", "cancel"]) == "jobs"
    assert command_name(["--config=x.toml", "--workdir", "/w", "ping"]) == "ping"
    assert command_name(["--host", "local"]) is None
    assert modules_for(["--host", "local"]) == []  # the panel needs no command module
    assert modules_for(["--help"]) == modules_for(["no-such-command"]) != ["backend.cli.hostcmds"]


def test_version():
    assert run_cli("--version").stdout.startswith("specdeck ")


def test_config_show_json_defaults():
    out = json.loads(run_cli("config", "show", "--json").stdout)
    assert out["hosts"]["gpu-box"]["url"] == "ssh://root@10.1.230.174"
    assert out["hosts"]["gpu-box"]["python"] == "/root/ml-env/bin/python3"
    assert out["drafters"]["aq-medai"]["repo"] == "AQ-MedAI/Kimi-K2-Instruct-eagle3"
    assert out["profiles"]["eagle3-aq"]["steps"] == 3 and out["profiles"]["eagle3-aq"]["draft_tokens"] == 4
    assert out["reference"] == {
        "baseline_tok_s": 82.0,
        "cycle_ms": 30.0,
        "gpu_hour_usd": None,
        "break_even_accept_len": 2.46,
    }


def test_config_init_round_trips(tmp_path):
    path = tmp_path / "c.toml"
    run_cli("config", "init", "--config", str(path))
    assert config_file.load(path).profiles["eagle3-ours"].drafter == "ours"
    res = run_cli("config", "init", "--config", str(path), rc=2)
    assert "already exists" in res.stderr


@pytest.mark.parametrize(
    "text, key",
    [
        ("bogus = 1", "bogus"),
        ("[profiles.x]\nsteps = 'three'", "profiles.x.steps"),
        ("[profiles.x]\nport = 70000", "profiles.x.port"),
        ("[profiles.x]\ndrafter = 'nobody'", "profiles.x.drafter"),
        ("[hosts.h]\nurl = 'ftp://x'", "hosts.h.url"),
        ("[hosts.h]\nurl = 'ssh://a@b'\nlauncher = 'simulator'", "hosts.h.launcher"),
        ("[reference]\nbaseline_tok_s = true", "reference.baseline_tok_s"),
        ("[drafters.d]\nrepo = 'a/b'", "drafters.d.path"),
    ],
)
def test_config_errors_name_file_and_key(tmp_path, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        config_file.load(path)
    assert str(path) in str(err.value) and key in str(err.value)
    res = run_cli("config", "show", "--config", str(path), rc=2)
    assert key in res.stderr and "Traceback" not in res.stderr


def test_config_env_override(tmp_path, monkeypatch):
    path = tmp_path / "env.toml"
    path.write_text('default_host = "local"\n[reference]\nbaseline_tok_s = 90\n')
    monkeypatch.setenv("SPECDECK_CONFIG", str(path))
    out = json.loads(run_cli("config", "show", "--json").stdout)
    assert out["reference"]["baseline_tok_s"] == 90 and out["default_host"] == "local"


def test_missing_explicit_config_is_usage_error(tmp_path):
    res = run_cli("config", "show", "--config", str(tmp_path / "nope.toml"), rc=2)
    assert "does not exist" in res.stderr


def test_unknown_host_is_usage_error():
    res = run_cli("ping", "--host", "nowhere", rc=2)
    assert "unknown host 'nowhere'" in res.stderr


def test_ping_and_jobs_local_json():
    out = json.loads(run_cli("ping", "--host", "local", "--json", "--count", "3").stdout)
    assert out["host"] == "local" and out["rtt_ms"]["median"] > 0
    assert json.loads(run_cli("jobs", "--host", "local", "--json").stdout) == []
    res = run_cli("jobs", "cancel", "nope-1", "--host", "local", rc=2)
    assert "no job nope-1" in res.stderr


@pytest.mark.slow
def test_sandbox_up_and_down(sshd):
    out = json.loads(run_cli("sandbox", "up", "--json").stdout)
    assert [h["name"] for h in out["hosts"]] == ["sandbox"] and out["fleet"] is None  # one host unless asked
    cfg = config_file.load(out["config"])
    host = cfg.hosts["sandbox"]
    assert host.sandbox and host.launcher == "simulator" and host.hub_endpoint.startswith("http://127.0.0.1:")
    assert cfg.default_host == "sandbox"
    assert (cfg.drafters["ours"].path + "/model.safetensors") and cfg.drafters["aq-medai"].repo
    # The new hub hashed its 2.22 GiB file before `up` returned: the first hub read after it does not wait.
    layout = environment.Layout(environment.sandbox_dir())
    assert (layout.hub_root / CACHE_DIR_NAME / environment.AQ_REPO / "model.safetensors.json").is_file()
    # Two hosts, the second through the loopback sshd (its agent answered before `up` returned): one hub.
    route = ["--ssh", sshd.url, "--identity", sshd.identity, "--known-hosts", sshd.known_hosts]
    again = json.loads(run_cli("sandbox", "up", "--hosts", "2", *route, "--json").stdout)
    assert again["hub"] == out["hub"]
    assert [(h["name"], h["url"]) for h in again["hosts"]] == [("sandbox", "local"), ("sandbox-2", sshd.url)]
    assert (
        again["fleet"]["replicas"] == ["sandbox:30000", "sandbox-2:30010"] and not again["fleet"]["router"]["simulated"]
    )
    second = config_file.load(out["config"]).hosts["sandbox-2"]
    assert second.url == sshd.url and second.workdir != host.workdir and second.hub_endpoint == host.hub_endpoint
    jobs = json.loads(run_cli("jobs", "--config", out["config"], "--json").stdout)
    assert [j["state"] for j in jobs if j["kind"] == "hub"] == ["running"]
    # Reachable by name, no --config: the same jobs through `--host sandbox` (issue 33).
    assert json.loads(run_cli("jobs", "--host", "sandbox", "--json").stdout) == jobs
    assert "specdeck --host sandbox ping" in run_cli("sandbox", "up").stdout
    down = json.loads(run_cli("sandbox", "down", "--json").stdout)
    assert out["hub"]["job"] in down["stopped"]
    bad = run_cli("sandbox", "up", "--hosts", "1", "--ssh", sshd.url, rc=2)  # one host is not one of several
    assert "--hosts 2" in bad.stderr and "Traceback" not in bad.stderr


def test_sandbox_by_name_before_up_and_beside_a_users_own():
    """`--host sandbox` before any `sandbox up` says to run it (exit 2); a user's config that names a host
    `sandbox` keeps it."""
    bad = run_cli("jobs", "--host", "sandbox", rc=2)
    assert "specdeck sandbox up" in bad.stderr and "Traceback" not in bad.stderr
    own = config_file.default_config_path()
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text('[hosts.sandbox]\nurl = "local"\nworkdir = "/nonexistent-own"\n')
    assert config_file.config_path(None, "sandbox") == (own, False)
    assert config_file.load(None, "sandbox").hosts["sandbox"].workdir == "/nonexistent-own"


def test_closed_stdout_pipe_exits_quietly(tmp_path):
    """`specdeck serve status --json | head` with the reader already gone: no "internal error", no traceback,
    the exit status of a process killed by SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before specdeck writes a byte
    try:
        argv = ["serve", "status", "--json", "--host", "local", "--workdir", str(tmp_path)]
        res = subprocess.run(
            [*CLI, *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write_end)
    assert res.stderr == ""
    assert res.returncode == 128 + signal.SIGPIPE


@pytest.mark.slow
def test_sandbox_up_replaces_a_hung_or_lost_hub():
    """A hub whose job still reads "running" but answers nothing (stopped), or whose URL went stale: `sandbox up`
    checks it, says so, and starts one that serves; the hung one is gone, one hub job runs."""
    out = json.loads(run_cli("sandbox", "up", "--json").stdout)
    config = out["config"]
    hub_root = str(Path(config).parent / "hub")
    try:
        [pid] = [int(p) for p in subprocess.run(["pgrep", "-f", f"sandbox.hub --root {hub_root}"], capture_output=True,
                                                 text=True).stdout.split()]  # fmt: skip
        stop(pid)
        hung = json.loads(run_cli("sandbox", "up", "--json").stdout)
        assert hung["hub"]["job"] != out["hub"]["job"] and "did not answer" in hung["hub"]["replaced"]
        assert process_gone(pid)

        url_file = Path(config).parent / "hub.url"
        url_file.write_text("http://127.0.0.1:9\n")  # nothing listens there
        text = run_cli("sandbox", "up").stdout
        assert "did not answer" in text and "http://127.0.0.1:9 " in text
        again = json.loads(run_cli("sandbox", "up", "--json").stdout)
        assert "replaced" not in again["hub"]  # the new one serves: reused as it is
        jobs = json.loads(run_cli("jobs", "--config", config, "--json").stdout)
        assert [j["id"] for j in jobs if j["kind"] == "hub" and j["state"] == "running"] == [again["hub"]["job"]]
    finally:
        run_cli("sandbox", "down", rc=None)


@pytest.mark.parametrize(
    ("args", "rc", "says"),
    [
        (["ping", "--nope"], 2, "specdeck: unrecognized arguments: --nope; see `specdeck --help`"),
        (["jobs", "cancel"], 2, "specdeck jobs cancel: the following arguments are required: id"),
        (["ping", "--host", "ssh://root@[::1"], 2, "'ssh://root@[::1' is not"),
        (["web", "--host", "local", "--bind", "999.1.1.1", "--port", "1"], 2, "check --bind"),
        (["ping", "--host", "local", "--workdir", "/proc/1/nope"], 3, "cannot install the agent in /proc/1/nope"),
    ],
)
def test_bad_input_is_one_line_on_stderr(args, rc, says, tmp_path):
    """Issue 20, item 10: usage errors, a bad --host URL, a bad --bind (no warning before the error) and a
    --workdir that cannot be made are each one line on stderr, no traceback."""
    res = run_cli(*args, rc=rc)
    assert len(res.stderr.splitlines()) == 1 and says in res.stderr, res.stderr
    assert "internal error" not in res.stderr and "WARNING" not in res.stderr


def test_quitting_the_demo_says_how_to_stop_the_sandbox(monkeypatch, capsys):
    """The demo's hub and servers outlive the panel (host jobs): quitting says so and how to stop them."""
    import asyncio

    from backend.cli import panel, sandboxcmds

    async def up(**kw):
        return environment.SandboxUp("/x/config.toml", "0.5.9", "http://127.0.0.1:1", None, None, wire={})

    async def open_tui(args):
        return 0

    monkeypatch.setattr(environment, "up", up)
    monkeypatch.setattr(panel, "open_tui", open_tui)
    args = argparse.Namespace(sglang_version=None, scenario=None, hosts=None)
    assert asyncio.run(sandboxcmds.demo(args)) == 0
    said = capsys.readouterr().out
    assert "specdeck sandbox down" in said and "--host sandbox" in said


def test_serve_cmd_refuses_a_profile_preflight_refuses(tmp_path):
    """`serve cmd` printed a launch line (exit 0) for a profile `serve start` refuses: now exit 2, and why. (Steps 0,
    the issue's case, the config itself refuses now; topk 1 with draft tokens other than steps + 1 reaches here.)"""
    config = tmp_path / "config.toml"
    config.write_text('[profiles.odd]\ndrafter = "ours"\nalgorithm = "EAGLE3"\nsteps = 3\ntopk = 1\ndraft_tokens = 6\n')
    res = run_cli("serve", "cmd", "odd", "--config", str(config), "--host", "local", rc=2)
    assert res.stdout == "" and "profile odd would not start (topk 1:" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1
    assert "--speculative-num-steps 3" in run_cli("serve", "cmd", "eagle3-ours", "--host", "local").stdout


@pytest.mark.parametrize("brief", [True, False])
def test_a_local_commands_agent_is_reaped_before_its_loop_closes(tmp_path, brief):
    """asyncio says "Loop … that handles pid N is closed" on stderr, after a command's answer, for a child of
    ours still unreaped when the loop closed. A local host's agent is reaped as its connection closes (killed
    first, for a command's brief connection): by the time the loop is gone, no child of ours is left."""
    import asyncio

    from backend.connection import Connection
    from backend.settings.model import HostConfig

    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path))

    async def once() -> int:
        conn = await Connection.open(host)
        conn.brief = brief
        await conn.call("jobs.list")
        assert conn.agent is not None
        pid: int = conn.agent.pipe.proc.pid
        await conn.close()
        return pid

    pid = asyncio.run(once())
    with pytest.raises(ChildProcessError):  # reaped already: nobody's child, nothing for asyncio to say
        os.waitpid(pid, os.WNOHANG)
