"""Multi-node profiles: one SIMULATED SGLang over two configured hosts (both this machine, each with its own
workdir; one of them through the real sshd), with SGLang's --nnodes/--node-rank/--dist-init-addr; the
preflight that compares nodes, and a rank's death failing the whole server with no rank left on any host."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from backend.errors import ConfigError, UsageError
from backend.measure.cost import gpus_of
from backend.serve import command_line, multinode, preflight_checks, serving
from backend.serve.host_facts import HostFacts
from backend.serve.server import Server
from backend.settings.config_file import load
from backend.settings.model import HostConfig, Settings
from backend.settings.validation import parse
from backend.sglang.flags import parse as parse_flags
from backend.sglang.flags import server_args
from backend.tune import sweep
from tests.leftover_jobs import stop_jobs
from tests.simhost import EAGLE, TIME_SCALE, process_gone, specdeck, until_gone, until_stopped
from tests.sshd import free_port

pytestmark = [pytest.mark.tui, pytest.mark.e2e]


def _local(name: str, root: Path, **kw) -> dict:
    return {"url": "local", "python": sys.executable, "workdir": str(root / name), "launcher": "simulator",
            "sandbox": True, **kw}  # fmt: skip


def two_node_settings(models: dict, root: Path, *, b: dict | None = None, **profile) -> Settings:
    """Hosts a and b (local sandbox hosts, own workdirs) and profile ``duo`` over both, tp 16."""
    data = {
        "target": models["target"],
        "hosts": {"a": _local("a", root), "b": _local("b", root, **(b or {}))},
        "drafters": {"aq-medai": {"path": models["aq-medai"]}},
        "profiles": {
            "duo": {
                "drafter": "aq-medai",
                **EAGLE,
                "tp": 16,
                "port": free_port(),
                "nodes": ["a", "b"],
                "env": {"SPECDECK_SIM_TIME_SCALE": TIME_SCALE},
                **profile,
            }
        },
    }
    return parse(data, "test.toml")


def through_sshd(settings: Settings, sshd, root: Path) -> Settings:
    """Node b reached through the real sshd (a sandbox host built in code, as the serving tests do)."""
    b = HostConfig(
        name="b",
        url=sshd.url,
        python=sys.executable,
        workdir=str(root / "b-ssh"),
        identity=sshd.identity,
        known_hosts=sshd.known_hosts,
        launcher="simulator",
        sandbox=True,
    )
    return replace(settings, hosts={**settings.hosts, "b": b})


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Iterator[Path]:
    """The hosts' workdirs, shared by this module's tests: each host's cached launcher --help is reused. Any
    job left running there is stopped once the module is done."""
    path = tmp_path_factory.mktemp("nodes")
    yield path
    stop_jobs(path)


@pytest.fixture
async def nodes():
    made: list[multinode.Nodes] = []

    def make(settings: Settings) -> multinode.Nodes:
        made.append(multinode.Nodes(settings))
        return made[-1]

    yield make
    for n in made:
        for conn in n.conns.values():
            for job in await conn.call("jobs.list", kind="serve"):
                if job["state"] == "running":
                    await conn.call("serve.stop", job=job["id"], timeout=5)
        await n.close()


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as res:
            return res.status
    except urllib.error.HTTPError as exc:
        return exc.code


# --- configuration and command lines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("named", "words"),
    [
        (["a", "gpu-c"], "test.toml: profiles.duo.nodes: no host named 'gpu-c'"),
        (["a", "a"], "test.toml: profiles.duo.nodes: host a is listed twice"),
        (["a"], "test.toml: profiles.duo.nodes: a multi-node profile names two hosts or more"),
        (["a", 3], "test.toml: profiles.duo.nodes: must be a list of configured host names"),
    ],
)
def test_nodes_are_configured_hosts_each_named_once(models, tmp_path, named, words):
    with pytest.raises(ConfigError, match=words):
        two_node_settings(models, tmp_path, nodes=named)


def test_each_rank_gets_sglangs_flags_and_rank_0s_address(models, tmp_path):
    settings = two_node_settings(models, tmp_path)
    profile = settings.profiles["duo"]
    ranks = multinode.plan(settings, profile, 41000)
    assert [(r.node, r.rank) for r in ranks] == [("a", 0), ("b", 1)]
    for r in ranks:
        args = server_args(parse_flags(r.argv[3:]))
        assert (args["nnodes"], args["node_rank"], args["dist_init_addr"]) == (2, r.rank, "127.0.0.1:41000")
        assert args["tp_size"] == 16 and args["port"] == r.port
    # Two nodes on one machine (only the sandbox does that) cannot share a port: rank 1 takes port + 1.
    assert [r.port for r in ranks] == [profile.port, profile.port + 1]
    # The server holds tp GPUs in all (8 on each node), not tp x nodes.
    assert gpus_of({}, ranks[0].argv) == 16
    # Real hosts: rank 0's SSH address, and every rank on the profile's port.
    real = replace(
        settings,
        hosts={
            "a": HostConfig(name="a", url="ssh://root@10.0.0.1"),
            "b": HostConfig(name="b", url="ssh://root@10.0.0.2:2222"),
        },
    )
    argvs = [r.argv for r in multinode.plan(real, profile)]
    assert argvs[1][-6:] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:PORT"]
    assert argvs[0][:3] == ["python3", "-m", "sglang.launch_server"]
    assert [r.port for r in multinode.plan(real, profile)] == [profile.port] * 2
    # One host's start (a sweep's, a training's) refuses it rather than start one rank of it.
    with pytest.raises(UsageError, match="profile duo runs across nodes a, b: `specdeck serve start duo`"):
        command_line.profile_command(settings, settings.hosts["a"], profile)
    bad = replace(profile, tp=9, extra_args=("--nnodes", "3"))
    assert [c.name for c in multinode.profile_checks(bad)] == ["nodes", "tp"]


def test_cli_names_the_file_and_key_of_an_unknown_node(models, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(
        f'target = {json.dumps(models["target"])}\n[hosts.a]\nurl = "local"\n[profiles.duo]\nnodes = ["a", "gpu-c"]\n'
    )
    res = specdeck(config, "serve", "cmd", "duo", rc=2)
    assert f"{config}: profiles.duo.nodes: no host named 'gpu-c'" in res.stderr and "Traceback" not in res.stderr


# --- preflight ---------------------------------------------------------------------------------------------


def test_nodes_must_agree_on_gpus_and_sglang_and_fit_their_ranks(models, tmp_path):
    settings = two_node_settings(models, tmp_path)
    ranks = multinode.plan(settings, settings.profiles["duo"])

    def agree(a: tuple, b: tuple, a_version: str = "0.5.23", b_version: str = "0.5.23") -> list[str]:
        facts = [HostFacts("a", a, a_version), HostFacts("b", b, b_version)]
        return [c.message for c in multinode._agreement(ranks, facts, 16, 8) if c.status == "fail"]

    h200, a100 = ("NVIDIA H200",) * 8, ("NVIDIA A100-SXM4-80GB",) * 8
    assert agree(h200, h200) == []
    assert agree(h200, a100) == [
        "hosts a and b differ in GPUs (8× NVIDIA H200 vs 8× NVIDIA A100-SXM4-80GB): the nodes of one server need "
        "the same GPUs and one SGLang release"
    ]
    assert agree(h200, h200[:4])[0].startswith("hosts a and b differ in GPUs (8× NVIDIA H200 vs 4× NVIDIA H200)")
    assert agree(h200[:4], h200[:4]) == [
        "tp 16 over 2 nodes puts 8 ranks on each but a has 4 GPUs: lower the profile's tp to 8 or less"
    ]


@pytest.mark.slow
async def test_preflight_names_the_node_that_differs_and_starts_nothing(models, root, nodes):
    settings = two_node_settings(models, root, b={"sglang_version": "0.5.6"})
    profile = settings.profiles["duo"]
    mn = nodes(settings)
    with pytest.raises(preflight_checks.PreflightFailed) as refused:
        await multinode.start(mn, settings, profile)
    assert "hosts a and b run different SGLang releases (0.5.23 vs 0.5.6): the nodes of one" in str(refused.value)
    assert refused.value.exit_code == 2
    for conn in mn.conns.values():
        jobs = await conn.call("jobs.list", kind="serve")
        assert not [j for j in jobs if j["state"] == "running" and j["args"].get("port") == profile.port]
    # A port taken on one node: that node is named, the checks every node passed alike stand once.
    holder = socket.socket()
    holder.bind(("127.0.0.1", profile.port + 1))
    holder.listen(1)
    try:
        same = two_node_settings(models, root, port=profile.port)
        result = await multinode.preflight(nodes(same), same, same.profiles["duo"])
    finally:
        holder.close()
    taken = "on the host is taken by another program: give the profile another port"
    assert [c.message for c in result.failures] == [f"b: port {profile.port + 1} {taken}"]
    assert [c.message for c in result.checks].count("sglang 0.5.23-sim on the host knows every flag") == 1


# --- lifecycle ---------------------------------------------------------------------------------------------


async def _ready(mn: multinode.Nodes, settings: Settings) -> dict:
    started = await multinode.start(mn, settings, settings.profiles["duo"])
    assert started["preflight"]["ok"] and [e["rank"] for e in started["nodes"]] == [0, 1]
    ready = await multinode.wait(mn, started, within=60)
    assert ready["state"] == "ready", (
        ready.get("error"),
        [(e["node"], e["state"], e["error"]) for e in ready["nodes"]],
    )
    return ready


@pytest.mark.slow
async def test_serves_through_rank_0_and_stop_stops_every_rank(models, root, sshd, nodes):
    settings = through_sshd(two_node_settings(models, root), sshd, root)
    mn = nodes(settings)
    ready = await _ready(mn, settings)
    head, follower = ready["nodes"]
    assert [e["state"] for e in ready["nodes"]] == ["ready", "ready"] and ready["port"] == head["port"]
    # Every node logs its own phases (node b speaks for its TP ranks 8-15).
    assert "loading weights" in [p["phase"] for p in follower["phases"]]
    assert ready["args"]["dist_init_addr"].startswith("127.0.0.1:") and ready["server_info"]["tp_size"] == 16
    # Rank 0 serves the API; rank 1 only SGLang's dummy health server.
    assert _get(f"http://127.0.0.1:{head['port']}/get_model_info") == 200
    assert [_get(f"http://127.0.0.1:{follower['port']}{p}") for p in ("/health", "/ping", "/generate")] == [
        200,
        200,
        404,
    ]
    log = await serving.tail(await mn.get("b"), follower["job"], 200)
    assert any("Starting dummy health check server at 127.0.0.1:" in line for line in log.lines)
    assert not any("fired up" in line for line in log.lines)
    # A status asked of a follower's host is the whole server's too.
    from_b = await multinode.expand(mn, await serving.status(await mn.get("b")))
    assert from_b["job"] == ready["job"] and [e["state"] for e in from_b["nodes"]] == ["ready", "ready"]

    # A sweep on a node's host would stop one rank and restore one host's server: refused, nothing touched.
    solo = replace(settings.profiles["duo"], name="solo", nodes=(), tp=8, port=free_port())
    with pytest.raises(UsageError, match=r"a serves rank 0 of duo, a multi-node server on a, b: stop it with"):
        await sweep.start(
            await mn.get("a"),
            replace(settings, profiles={**settings.profiles, "solo": solo}),
            "solo",
            sweep.SweepPlan(steps=(2,)),
            baseline_tok_s=82.0,
        )
    stopped = await multinode.stop(mn, from_b, grace=10)
    assert stopped["was_running"] and stopped["state"] == "stopped"
    assert [e["state"] for e in stopped["nodes"]] == ["stopped", "stopped"]
    assert all(process_gone(e["pid"]) for e in ready["nodes"])


@pytest.mark.slow
async def test_the_server_face_watches_and_replaces_a_multinode_server_whole(models, root, nodes):
    """``Server`` (the CLI's and the Serve tab's one face): watched from a follower's host, the status is the
    whole server's and the log followed is that host's own rank's; a one-host profile restarted on a node
    stops every rank of the multi-node server it replaces, not only that host's."""
    settings = two_node_settings(models, root)
    solo = replace(settings.profiles["duo"], name="solo", nodes=(), tp=8, port=free_port())
    settings = replace(settings, profiles={**settings.profiles, "solo": solo})
    mn = nodes(settings)
    ready = await _ready(mn, settings)
    head, follower = ready["nodes"]
    from_b = Server(settings, await mn.get("b"), nodes=mn)
    watching = from_b.watch(every=0.1)
    seen = await anext(watching)
    await watching.aclose()
    assert seen.status.job == ready["job"] and seen.log_job == follower["job"]
    assert [(n.node, n.state) for n in seen.status.nodes] == [("a", "ready"), ("b", "ready")]

    on_a = Server(settings, await mn.get("a"), nodes=mn)
    launched = await on_a.restart(solo)
    assert launched.replaced is not None and launched.replaced.profile == "duo" and len(launched.replaced.nodes) == 2
    assert launched.status.profile == "solo" and not launched.status.nodes and launched.preflight.ok
    await until_gone(follower["pid"], timeout=15)
    assert process_gone(head["pid"])
    stopped = await on_a.stop(grace=10)
    assert stopped.was_running and stopped.status.profile == "solo"


@pytest.mark.slow
async def test_a_follower_killed_fails_the_server_and_no_rank_is_left(models, root, nodes):
    settings = two_node_settings(models, root)
    mn = nodes(settings)
    ready = await _ready(mn, settings)
    head, follower = ready["nodes"]
    os.kill(follower["pid"], signal.SIGKILL)
    await until_gone(head["pid"])  # rank 0 dies of it, as SGLang does
    crashed = await multinode.wait(mn, ready, within=30, until=("crashed",))
    assert crashed["error"] == "b (rank 1) crashed: killed by SIGKILL", crashed["nodes"]
    assert [e["state"] for e in crashed["nodes"]] == ["crashed", "crashed"]
    assert "Connection closed by peer [127.0.0.1]:" in crashed["nodes"][0]["error"]
    log = await serving.tail(await mn.get("a"), head["job"], 40)
    assert any("Received sigquit from a child process" in line for line in log.lines)


def _nodes_told(out: dict, stopped: dict) -> str:
    """A failure's evidence: each node's state, pid and error, the pid that was stopped, the follower's log end."""
    nodes = [(e["node"], e["state"], e["pid"], e["error"]) for e in out["nodes"]]
    log = Path(stopped["log_path"]).read_text(errors="replace").splitlines()[-6:]
    return f"nodes {nodes}; stopped pid {stopped['pid']}; its log ends:\n" + "\n".join(log)


async def test_rank_0_killed_has_the_others_stopped_even_one_that_hangs(models, root, nodes):
    """kill -9 of rank 0: specdeck's own reaping, apart from the simulator's (its followers die of it as they
    do of a follower's death above): a rank that would hang on (SGLang's ranks can sit in a collective until
    the watchdog) is stopped once a status sees rank 0 gone."""
    settings = two_node_settings(models, root)
    mn = nodes(settings)
    ready = await _ready(mn, settings)
    head, follower = ready["nodes"]
    os.kill(follower["pid"], signal.SIGSTOP)  # it can neither notice rank 0's death nor exit of itself...
    try:
        # ...once every thread of it has stopped: until then its peer-link thread, woken by rank 0's death, can
        # end it (under `make test-stress` it did, before the thread told to stop got a CPU).
        await until_stopped(follower["pid"])
        os.kill(head["pid"], signal.SIGKILL)
        crashed = await serving.wait(await mn.get("a"), ready["job"], within=30, until=("crashed",))
        assert crashed["state"] == "crashed"
        looked = asyncio.ensure_future(multinode.expand(mn, crashed))
        announced = Path(follower["log_path"]).parent / "cancel.json"
        deadline = time.monotonic() + 30
        # The status announces the stop on the follower, then stops it (SIGTERM, SIGKILL after the grace):
        # let it go once announced rather than wait the grace out.
        while not announced.exists() and not looked.done():
            assert time.monotonic() < deadline, "no stop announced on the follower within 30 s"
            await asyncio.sleep(0.02)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(follower["pid"], signal.SIGCONT)
    out = await looked
    assert announced.exists(), _nodes_told(out, follower)
    assert out["state"] == "crashed" and out["error"] == "killed by SIGKILL", _nodes_told(out, follower)
    assert out["nodes"][1]["state"] == "stopped", _nodes_told(out, follower)
    await until_gone(follower["pid"], timeout=15)


def _config_file(tmp_path: Path, root: Path, models: dict, port: int) -> Path:
    """A config file with hosts a and b (local sandbox hosts) and profile duo over both."""
    config = tmp_path / "config.toml"
    hosts = "".join(
        f'[hosts.{n}]\nurl = "local"\npython = {json.dumps(sys.executable)}\n'
        f'workdir = {json.dumps(str(root / n))}\nlauncher = "simulator"\nsandbox = true\n'
        for n in ("a", "b")
    )
    config.write_text(
        f'default_host = "a"\ntarget = {json.dumps(models["target"])}\n{hosts}'
        f'[profiles.duo]\ntp = 16\nport = {port}\nnodes = ["a", "b"]\n'
        f'env = {{ SPECDECK_SIM_TIME_SCALE = "{TIME_SCALE}" }}\n'
    )
    return config


@pytest.mark.slow
def test_cli_start_status_stop_show_every_node(models, tmp_path, root):
    port = free_port()
    config = _config_file(tmp_path, root, models, port)
    shown = specdeck(config, "serve", "cmd", "duo").stdout
    assert "# b: rank 1 of 2" in shown and "--node-rank 1 --dist-init-addr 127.0.0.1:PORT" in shown
    started = specdeck(config, "serve", "start", "duo", "--wait-ready").stdout
    assert "duo: started on 2 nodes" in started and "b (rank 1): " in started
    # Asked of the follower's host, the status is still the whole server's, a line per node.
    status = specdeck(config, "serve", "status", "--host", "b").stdout
    assert f"node a  rank 0  ready  port {port}" in status and f"node b  rank 1  ready  port {port + 1}" in status
    pids = [int(line.rsplit("pid ", 1)[1]) for line in status.splitlines() if line.startswith("  node ")]
    stopped = specdeck(config, "serve", "stop", "--yes").stdout
    assert "duo: stopped on 2 nodes; no process left" in stopped
    deadline = time.monotonic() + 10
    while not all(process_gone(pid) for pid in pids):
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.slow
async def test_serve_tab_shows_a_line_per_node_and_stops_every_rank(models, tmp_path, root):
    from tests.helpers import until
    from tests.test_serve_tab import open_serve_tab, select, state, state_text, text
    from tui.app import SpecdeckApp
    from tui.screens.confirm import ConfirmScreen

    port = free_port()
    app = SpecdeckApp(load(str(_config_file(tmp_path, root, models, port))), host="a")
    async with app.run_test(size=(160, 45)) as pilot:
        pane = await open_serve_tab(app, pilot)
        await select(pilot, pane, "duo")
        assert "# b, rank 1" in text(app, "#preview") and "--node-rank 1 --dist-init-addr 127.0.0.1:PORT" in text(
            app, "#preview"
        )
        pane.query_one("#profiles").focus()
        await pilot.press("s")

        def every_node_ready() -> bool:
            st = pane.status
            return st is not None and st.state == "ready" and [e.state for e in st.nodes] == ["ready"] * 2

        await until(pilot, every_node_ready, "every node ready")
        shown = state_text(app)
        assert f"a  rank 0  ready  port {port}" in shown and f"b  rank 1  ready  port {port + 1}" in shown
        pids = [e.pid for e in pane.status.nodes]
        await pilot.press("x")  # a ready server: asks first (issue 33)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the stop question")
        await pilot.press("y")
        await until(pilot, lambda: state(app) == "stopped", "stopped")
        assert "b  rank 1  stopped" in state_text(app)
        await until(pilot, lambda: all(process_gone(pid) for pid in pids), "no rank left")
