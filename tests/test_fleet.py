"""Fleets: the ``[fleets.NAME]`` schema, the status model and its imbalance verdict (pure parts)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.errors import ConfigError
from backend.fleet import fleets, router_metrics
from backend.settings import config_file
from backend.settings.model import RouterConfig, Settings
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

HOSTS = """
[hosts.gpu-a]
url = "ssh://root@10.9.0.1"
[hosts.gpu-b]
url = "ssh://root@10.9.0.2"
[hosts.gpu-a-again]
url = "ssh://admin@10.9.0.1:2222"
"""


def load(tmp_path, text: str) -> Settings:
    path = tmp_path / "c.toml"
    path.write_text(HOSTS + text)
    return config_file.load(path)


def test_fleet_schema_replicas_and_router(tmp_path):
    s = load(
        tmp_path,
        """
[fleets.two]
profile = "eagle3-ours"
replicas = [{host = "gpu-a"}, {host = "gpu-b", port = 30001, profile = "eagle3-aq"}, {host = "gpu-a", port = 30002}]
router = {host = "gpu-a", port = 8000, policy = "round_robin", prometheus_port = 29001}
""",
    )
    f = s.fleets["two"]
    assert [(r.host, r.port, r.profile) for r in f.replicas] == [
        ("gpu-a", 30000, "eagle3-ours"),
        ("gpu-b", 30001, "eagle3-aq"),
        ("gpu-a", 30002, "eagle3-ours"),
    ]
    assert f.router == RouterConfig(host="gpu-a", port=8000, policy="round_robin", prometheus_port=29001)
    # the router reaches a replica on its own machine by loopback, the others at their host's address
    assert [fleets.replica_url(s, f, r) for r in f.replicas] == [
        "http://127.0.0.1:30000",
        "http://10.9.0.2:30001",
        "http://127.0.0.1:30002",
    ]
    assert s.to_json()["fleets"]["two"]["router"]["policy"] == "round_robin"


def test_replica_launch_flags_and_the_routers_command(tmp_path):
    """A second replica on one machine starts past the first's GPUs; one on another machine than the router
    listens beyond loopback (on every interface where its address is not known); the router gets every
    replica's URL, on its loopback."""
    from backend.serve import command_line

    s = load(
        tmp_path,
        """
[fleets.f]
profile = "eagle3-ours"
replicas = [{host = "gpu-a"}, {host = "gpu-a-again", port = 30001}, {host = "gpu-b"}]
router = {host = "gpu-a", policy = "power_of_two"}
""",
    )
    f = s.fleets["f"]
    profiles = [fleets.replica_profile(s, f, r) for r in f.replicas]
    assert [p.extra_args for p in profiles] == [(), ("--base-gpu-id", "8"), ()]
    assert [p.listen for p in profiles] == ["127.0.0.1", "127.0.0.1", "0.0.0.0"]
    argv = command_line.profile_argv(s, fleets.replica_profile(s, f, f.replicas[1]))
    assert argv[argv.index("--port") + 1] == "30001" and argv[-2:] == ["--base-gpu-id", "8"]
    assert fleets.router_argv(s, f, "/opt/py/bin/python") == [
        "/opt/py/bin/python",
        "-m",
        "sglang_router.launch_router",
        "--worker-urls",
        "http://127.0.0.1:30000",
        "http://127.0.0.1:30001",
        "http://10.9.0.2:30000",
        "--policy",
        "power_of_two",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        "29000",
    ]


def test_fleet_router_defaults_to_the_first_replicas_host(tmp_path):
    f = load(tmp_path, '[fleets.f]\nprofile = "baseline"\nreplicas = [{host = "gpu-b"}]\n').fleets["f"]
    assert f.router == RouterConfig(host="gpu-b")  # port 8000, cache_aware, prometheus 29000


@pytest.mark.parametrize(
    "text, key, words",
    [
        ('replicas = [{host = "gpu-a"}]', "replicas[0].profile", "missing"),
        ('profile = "nope"\nreplicas = [{host = "gpu-a"}]', "fleets.f.profile", "no profile named 'nope'"),
        ('profile = "baseline"\nreplicas = [{host = "gpu-z"}]', "replicas[0].host", "no host named 'gpu-z'"),
        ('profile = "baseline"', "fleets.f.replicas", "missing"),
        ('profile = "baseline"\nreplicas = [{host = "gpu-a"}, {host = "gpu-a"}]', "replicas[1].port", "gpu-a:30000"),
        # two names for one machine share its ports
        ('profile = "baseline"\nreplicas = [{host = "gpu-a"}, {host = "gpu-a-again"}]', "replicas[1].port", "30000"),
        ('profile = "baseline"\nreplicas = [{host = "gpu-a", bogus = 1}]', "replicas[0].bogus", "unknown key"),
        ('profile = "baseline"\nreplicas = ["gpu-a"]', "replicas[0]", "must be a table"),
        (
            'profile = "baseline"\nreplicas = [{host = "gpu-a"}]\nrouter = {port = 30000}',
            "router.port",
            "replicas[0]",
        ),
        (
            'profile = "baseline"\nreplicas = [{host = "gpu-a"}]\nrouter = {policy = "fastest"}',
            "router.policy",
            "cache_aware",
        ),
        (
            'profile = "baseline"\nreplicas = [{host = "gpu-a"}]\nrouter = {port = 29000}',
            "router.prometheus_port",
            "router.port",
        ),
        ('profile = "baseline"\nreplicas = [{host = "gpu-a", port = 0}]', "replicas[0].port", "1-65535"),
        (
            'profile = "wide"\nreplicas = [{host = "gpu-a"}]\n[profiles.wide]\nnodes = ["gpu-a", "gpu-b"]',
            "replicas[0].profile",
            "runs across nodes gpu-a, gpu-b",
        ),
        (
            'profile = "baseline"\nreplicas = [{host = "gpu-a"}]\nrouter = {policy = "power_of_two"}',
            "router.policy",
            "at least 2 replicas",
        ),
    ],
)
def test_fleet_bad_input_names_file_and_key(tmp_path, text, key, words):
    with pytest.raises(ConfigError) as err:
        load(tmp_path, "[fleets.f]\n" + text + "\n")
    message = str(err.value)
    assert str(tmp_path / "c.toml") in message and key in message and words in message, message
    assert message.count("\n") == 0


def test_config_show_lists_fleets(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[fleets.pair]\nprofile = "baseline"\nreplicas = [{host = "local"}, {host = "local", port = 30001}]\n'
    )
    run = ["config", "show", "--config", str(path)]
    out = json.loads(run_cli(*run, "--json").stdout)
    assert [r["port"] for r in out["fleets"]["pair"]["replicas"]] == [30000, 30001]
    text = run_cli(*run).stdout
    assert "fleet pair: baseline@local:30000, baseline@local:30001 behind sglang-router cache_aware" in text


def replica(port: int, **kw) -> fleets.ReplicaStatus:
    values = {"tok_s": 40.0, "accept_len": 2.9, "running": 4, "queued": 0, "state": "ready", "healthy": True}
    values.update(kw)
    return fleets.ReplicaStatus(
        host="gpu-a", url=f"http://127.0.0.1:{port}", pid=100 + port, port=port, label=f"gpu-a:{port}", **values
    )


def test_imbalance_verdicts():
    assert fleets.imbalance([replica(1), replica(2), replica(3)]).verdict == "balanced"
    slow = fleets.imbalance([replica(1), replica(2, tok_s=20.0), replica(3)])
    assert slow.lagging == "http://127.0.0.1:2" and "gpu-a:2 lags" in slow.verdict and "20.0" in slow.verdict
    queued = fleets.imbalance([replica(1, queued=9), replica(2)])
    assert queued.lagging == "http://127.0.0.1:1" and "9 queued" in queued.verdict
    gone = fleets.imbalance([replica(1), replica(2, state="crashed", healthy=False, tok_s=None)])
    assert gone.lagging == "http://127.0.0.1:2" and gone.verdict == "gpu-a:2 is gone"
    assert fleets.imbalance([replica(1, state="none", healthy=False)]).verdict == "no replica is running"
    # without a router none is seen healthy: the verdict says the router is down, their own figures judge them
    blind = [replica(1, healthy=False), replica(2, healthy=False, tok_s=20.0), replica(3, healthy=False)]
    down = fleets.imbalance(blind, router_down="not running")
    assert down.lagging == "http://127.0.0.1:2", down
    assert down.verdict.startswith("the router is down (not running); by the replicas' own figures: gpu-a:2 lags")
    fine = fleets.imbalance([replica(1, healthy=False), replica(2, healthy=False)], router_down="not answering")
    assert fine == fleets.Imbalance("the router is down (not answering); by the replicas' own figures: balanced")
    crashed = [replica(1, healthy=False), replica(2, state="crashed", healthy=False)]
    assert fleets.imbalance(crashed, router_down="not running").lagging == "http://127.0.0.1:2"
    stopped = [replica(1, state="stopped", healthy=False)]
    assert fleets.imbalance(stopped, router_down="not running").verdict == (
        "the router is down (not running) and no replica is running"
    )
    assert fleets.imbalance(blind).verdict == "gpu-a:1 is unhealthy as the router sees it"  # a live router's word
    # one stream each is noise: no verdict either way
    idle = fleets.imbalance([replica(1, running=1), replica(2, running=1, tok_s=10.0)])
    assert idle.lagging is None and idle.verdict.startswith("too little load")


def test_status_json_is_the_issues_shape():
    router = fleets.RouterStatus(host="gpu-a", url="http://127.0.0.1:8000", pid=7, healthy=True, policy="cache_aware")
    st = fleets.FleetStatus("f", router, (replica(1),), fleets.Imbalance("balanced"))
    out = st.to_json()
    assert set(out) == {"router", "replicas", "imbalance", "key"} and out["key"] is None  # all on loopback
    assert {"host", "url", "pid", "healthy"} <= set(out["router"])
    assert set(out["replicas"][0]) == {
        "host",
        "url",
        "pid",
        "state",
        "healthy",
        "tok_s",
        "accept_len",
        "running",
        "queued",
    }
    assert out["imbalance"] == {"verdict": "balanced", "lagging": None}


def test_router_view_reads_workers_and_smg_metrics():
    workers = json.dumps(
        {"workers": [{"url": "http://127.0.0.1:1", "is_healthy": True}, {"url": "http://127.0.0.1:2"}]}
    )
    metrics = (
        '# TYPE smg_worker_health gauge\nsmg_worker_health{worker="http://127.0.0.1:1"} 1\n'
        'smg_worker_health{worker="http://127.0.0.1:2"} 0\n'
        '# TYPE smg_worker_requests_active gauge\nsmg_worker_requests_active{worker="http://127.0.0.1:1"} 3\n'
    )
    view = router_metrics.read(workers, metrics)
    assert view.workers == 2 and view.healthy_workers == 1 and view.requests_active == 3
    assert view.health == {"http://127.0.0.1:1": True, "http://127.0.0.1:2": False}
    unread = router_metrics.read("not json", "garbage{")  # an answer nobody can read is not "0 workers"
    assert unread.workers is None and unread.healthy_workers is None
    assert unread.notes == ("the /workers answer is not valid JSON: the workers are unknown",)
    assert router_metrics.read("[]", None) == router_metrics.RouterView(workers=0, healthy_workers=0)


# --- the real sglang-router in front of simulated replicas, on loopback -------------------------------------


def fleet_config(tmp_path, models, ports: dict[str, int], extra: str = "") -> Path:
    """Two sandbox hosts on this machine (own workdirs, so own agents and jobs), a replica on each, the router on
    the first; ``extra`` is more TOML."""
    scale = '{ SPECDECK_SIM_TIME_SCALE = "0.02" }'
    hosts = ""
    for name in ("sim-a", "sim-b"):
        workdir = tmp_path / name
        workdir.mkdir()
        hosts += (
            f'[hosts.{name}]\nurl = "local"\npython = {json.dumps(sys.executable)}\n'
            f'workdir = {json.dumps(str(workdir))}\nlauncher = "simulator"\nsandbox = true\n'
        )
    path = tmp_path / "fleet.toml"
    path.write_text(
        f"""default_host = "sim-a"
target = {json.dumps(models["target"])}
{hosts}
[drafters.ours]
path = {json.dumps(models["ours"])}
[profiles.eagle3-ours]
env = {scale}
extra_args = ["--decode-log-interval", "4"]  # a short bench still sets the accept-length gauge
[fleets.pair]
profile = "eagle3-ours"
replicas = [{{host = "sim-a", port = {ports["a"]}}}, {{host = "sim-b", port = {ports["b"]}}}]
router = {{host = "sim-a", port = {ports["router"]}, policy = "round_robin", prometheus_port = {ports["prom"]}}}
{extra}"""
    )
    return path


@pytest.fixture
def fleet_ports() -> dict[str, int]:
    from tests.sshd import free_port

    return {k: free_port() for k in ("a", "b", "router", "prom")}


SIM_PORTS = (("sim-a", "a"), ("sim-b", "b"))


@pytest.mark.slow
async def test_fleet_up_status_bench_kill_down(tmp_path, models, fleet_ports):
    """The real router (PyPI sglang-router 0.3.2) registers both simulated replicas and routes a bench; a replica
    killed with SIGKILL reads as gone (unhealthy, named by the verdict), a killed router as not running, until
    the fleet is stopped. The CLI benches, shows and asks before stopping; the rest are the backend calls it makes."""
    import os
    import signal
    import time

    from tests.simhost import process_gone, specdeck

    async def until(links, done, what: str) -> dict:
        deadline = time.monotonic() + 60
        while not done(st := (await fleets.status(links)).to_json()):
            assert time.monotonic() < deadline, (what, st)
            await asyncio.sleep(0.02)
        return st

    config = fleet_config(tmp_path, models, fleet_ports)
    links = await fleets.FleetLinks.open(config_file.load(config), "pair")
    try:
        up = json.loads(specdeck(config, "fleet", "up", "pair", "--json").stdout)
        assert up["router"]["healthy"] is True and up["router"]["workers"] == 2, up
        assert [r["state"] for r in up["replicas"]] == ["ready", "ready"]
        assert [r["healthy"] for r in up["replicas"]] == [True, True]
        router_pid = up["router"]["pid"]
        bench_args = ("--requests", "4", "--max-tokens", "24", "--concurrency", "2", "--json")
        bench = json.loads(specdeck(config, "fleet", "bench", "pair", *bench_args).stdout)
        assert bench["requests"] == 4 and bench["tok_s"] > 0, bench
        assert bench["chat_template"] == "kimi"  # the replicas' target's template, though the router records none
        kept = json.loads(specdeck(config, "history", "--json").stdout)  # up and bench recorded, no sync needed
        servers = [(await links.conn(h).call("serve.status", port=fleet_ports[k]))["job"] for h, k in SIM_PORTS]
        assert {f"{h}/{j}" for (h, _), j in zip(SIM_PORTS, servers, strict=True)} <= {r["id"] for r in kept["runs"]}
        assert any(b["job_id"] == bench["job"] and b["host"] == "sim-a" for b in kept["benches"]), kept["benches"]
        st = (await fleets.status(links)).to_json()
        assert st["router"]["requests_total"] >= 4  # the bench went through the router
        assert all(r["accept_len"] is not None for r in st["replicas"]), st  # each replica served some of it

        victim = st["replicas"][1]
        os.kill(victim["pid"], signal.SIGKILL)
        st = await until(links, lambda st: st["replicas"][1]["state"] not in ("ready", "starting"), "replica gone")
        gone = st["replicas"][1]
        assert gone["healthy"] is False and gone["pid"] is None, gone
        assert st["imbalance"] == {"verdict": f"sim-b:{fleet_ports['b']} is gone", "lagging": victim["url"]}
        assert st["router"]["healthy"] is True  # the router itself lives on
        text = specdeck(config, "fleet", "status", "pair").stdout
        assert f"imbalance: sim-b:{fleet_ports['b']} is gone" in text
        assert f"sim-a:{fleet_ports['a']} SIMULATED" in text  # the replicas are; the router never is

        asked = specdeck(config, "fleet", "down", "pair", rc=2)  # a live fleet, no terminal to ask on
        assert "pass --yes" in asked.stderr and not process_gone(router_pid)

        os.kill(router_pid, signal.SIGKILL)  # the router itself: not healthy, no pid; the replica lives on, unseen
        st = await until(links, lambda st: st["router"]["pid"] is None, "router gone")
        assert st["router"]["healthy"] is False and "not running" in st["router"]["error"]
        assert st["replicas"][0]["state"] == "ready" and st["replicas"][0]["healthy"] is False
        # the verdict says the router is down, and judges the replicas by their own figures (one is gone)
        assert st["imbalance"] == {
            "verdict": f"the router is down (not running); by the replicas' own figures: sim-b:{fleet_ports['b']} "
            "is gone",
            "lagging": victim["url"],
        }
        text = specdeck(config, "fleet", "status", "pair").stdout
        assert "imbalance: the router is down (not running)" in text and " unhealthy " not in text, text
    finally:
        await fleets.down(links)
        after = (await fleets.status(links)).to_json()
        await links.close()
    assert process_gone(router_pid)
    assert after["router"]["healthy"] is False and after["router"]["pid"] is None
    assert [r["state"] for r in after["replicas"]] == ["stopped", "crashed"]


@pytest.mark.slow
async def test_fleet_up_refuses_before_starting_anything(tmp_path, models, fleet_ports):
    """A replica's port taken by another program, or a router host whose Python lacks sglang-router: one
    sentence naming the replica (or saying how to install the router), exit 2, nothing started."""
    import socket
    from dataclasses import replace

    from backend.serve import serving
    from tests.simhost import specdeck

    bare = tmp_path / "bare"  # a Python without sglang-router (the agent needs the standard library only)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    (tmp_path / "bare-host").mkdir()
    extra = f"""[hosts.bare]
url = "local"
python = {json.dumps(str(bare / "bin" / "python"))}
workdir = {json.dumps(str(tmp_path / "bare-host"))}
[fleets.unrouted]
profile = "eagle3-ours"
replicas = [{{host = "sim-a", port = {fleet_ports["a"]}}}]
router = {{host = "bare"}}
[hosts.far]
url = "ssh://root@127.0.0.1:1"
[fleets.far]
profile = "eagle3-ours"
replicas = [{{host = "sim-a", port = {fleet_ports["a"]}}}, {{host = "far"}}]
"""
    config = fleet_config(tmp_path, models, fleet_ports, extra)
    settings = config_file.load(config)
    async with await fleets.FleetLinks.open(settings, "unrouted") as links:
        with pytest.raises(fleets.FleetPreflightFailed) as err:  # what the CLI prints, exit 2
            await fleets.up(links)
        st = (await fleets.status(links)).to_json()
    assert "router: sglang-router is not installed in bare's Python" in str(err.value)
    assert str(err.value).endswith("run `pip install sglang-router==0.3.2` there")
    assert st["router"]["pid"] is None and [r["state"] for r in st["replicas"]] == ["none"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", fleet_ports["b"]))
        squatter.listen()
        res = specdeck(config, "fleet", "up", "pair", rc=2)
    assert f"sim-b:{fleet_ports['b']}: port {fleet_ports['b']} on the host is taken" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    async with await fleets.FleetLinks.open(settings, "pair") as links:
        st = (await fleets.status(links)).to_json()
        assert st["router"]["pid"] is None and [r["state"] for r in st["replicas"]] == ["none", "none"]
        # another profile's server on a replica's port is not taken for the fleet's
        other = replace(settings.profiles["baseline"], port=fleet_ports["a"], env={"SPECDECK_SIM_TIME_SCALE": "0.02"})
        job = (await serving.start(links.conn("sim-a"), settings, other))["job"]
        try:
            with pytest.raises(fleets.FleetPreflightFailed) as err:
                await fleets.up(links)
            assert f"sim-a:{fleet_ports['a']}: port {fleet_ports['a']} serves profile baseline (job {job})" in str(
                err.value
            )
            assert [r["state"] for r in (await fleets.status(links)).to_json()["replicas"]][1] == "none"
        finally:
            await serving.stop(links.conn("sim-a"), job=job)
    assert specdeck(config, "fleet", "up", "nope", rc=2).stderr.startswith("specdeck: no fleet named 'nope'")
    # a host that cannot be reached: `up` cannot start (exit 3), `status` shows it so beside the rest
    with pytest.raises(fleets.ConnectionFailed, match=r"cannot reach root@127\.0\.0\.1:1"):
        await fleets.FleetLinks.open(settings, "far")
    far = json.loads(specdeck(config, "fleet", "status", "far", "--json").stdout)
    assert [(r["host"], r["state"], r["healthy"]) for r in far["replicas"]] == [
        ("sim-a", "stopped", False),  # the other profile's server, stopped above
        ("far", "unreachable", False),
    ]
    assert far["imbalance"] == {  # its router, never started, is down too
        "verdict": "the router is down (not running); by the replicas' own figures: far:30000 cannot be reached",
        "lagging": "http://127.0.0.1:30000",
    }


@pytest.mark.parametrize("version", ["0.5.6", "0.5.23"])
def test_simulator_serves_the_load_path_of_its_release(tmp_path, models, version):
    """What sglang-router polls: 0.5.6's /get_load (a list of GetLoadReqOutput), 0.5.23's /v1/loads (the
    LoadSnapshot document, or Prometheus gauges); each release answers the other's path 404."""
    from tests.test_simulator import VERSION_ENV, Sim, launch

    sim = Sim(tmp_path, launch(models, "ours", "--enable-metrics", "--decode-log-interval", "2"), VERSION_ENV[version])
    try:
        sim.wait_ready()
        sim.json("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 16}})
        old, new = sim.request("/get_load"), sim.request("/v1/loads")
        if version == "0.5.6":
            assert new[0] == 404 and old[0] == 200
            [load] = json.loads(old[1])
            assert load == {
                "rid": None,
                "http_worker_ipc": None,
                "dp_rank": 0,
                "num_reqs": 0,
                "num_waiting_reqs": 0,
                "num_tokens": 0,
            }
        else:
            assert old[0] == 404 and new[0] == 200
            body = json.loads(new[1])
            assert body["version"].startswith("0.5.23") and body["num_accelerators"] == 8
            [load] = body["loads"]
            assert load["dp_rank"] == 0 and load["num_running_reqs"] == 0 and load["speculative"]["accept_length"] > 1
            status, text = sim.request("/v1/loads?format=prometheus")
            assert status == 200 and 'sglang_num_running_reqs{dp_rank="0"} 0' in text.decode()
            assert "sglang_spec_accept_length" in text.decode()
    finally:
        sim.kill()


async def test_a_router_that_exits_at_start_says_its_last_line(tmp_path):
    """The router's start is waited on its job: one that exits says so with its last log line, colour codes
    gone (a stand-in program prints it: the real router exits so on a bad start, e.g. a port taken)."""
    from backend.connection import Connection
    from backend.jobs import JobInfo
    from backend.settings.model import HostConfig

    host = HostConfig(name="local", url="local", python=sys.executable, workdir=str(tmp_path))
    conn = await Connection.open(host)
    try:
        line = "\x1b[2m2026-12-01\x1b[0m \x1b[31mERROR\x1b[0m smg::server: Failed to bind 127.0.0.1:8000"
        argv = [sys.executable, "-c", f"print({line!r}); raise SystemExit(1)"]
        wire = await conn.call("jobs.start", kind=fleets.ROUTER_KIND, argv=argv, args={"fleet": "f", "port": 1})
        with pytest.raises(fleets.OperationFailed) as err:
            await fleets._router_ready(conn, JobInfo.from_json(wire), 2)
        assert str(err.value).endswith("2026-12-01 ERROR smg::server: Failed to bind 127.0.0.1:8000"), err.value
        assert str(err.value).startswith("sglang-router exited (")
    finally:
        await conn.close()
