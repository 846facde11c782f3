"""A fleet whose replicas leave loopback gets a key of its own (issue 30, item 2), broken on purpose: a
keyless request to a replica listening beyond loopback is refused as SGLang refuses it (401), the real
sglang-router still registers and routes with the key, and the key is in no command line, log line shown,
history or job record. The SIMULATED SGLang honours --api-key and --config as each release does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from backend.fleet import key as fleet_key
from backend.history import history_path
from tests.simhost import TIME_SCALE, specdeck
from tests.sshd import free_port, start_sshd

pytestmark = [pytest.mark.e2e, pytest.mark.ssh]

KEY = "k3y-" + "x" * 40


def call(url: str, key: str | None = None, body: dict | None = None, scheme: str = "Bearer") -> tuple[int, str]:
    headers = {"Authorization": f"{scheme} {key}"} if key else {}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def cmdlines() -> str:
    """Every process's command line, joined (what `ps` shows any local user)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(out)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.6"])
def test_the_simulator_refuses_a_keyless_request_as_sglang_does(models, tmp_path, version):
    """--api-key from a --config YAML file (read in the process: not in its command line): health, readiness
    (0.5.23) and metrics stay open; the rest answers 401 {"error": "Unauthorized"} without `Bearer KEY`."""
    config = tmp_path / "key.yaml"
    config.write_text(json.dumps({"api-key": KEY}) + "\n")  # JSON is YAML
    port = free_port()
    argv = [sys.executable, "-m", "backend.sandbox.sglang_sim", "--model-path", models["target"], "--port", str(port)]
    argv += ["--enable-metrics", "--config", str(config)]
    env = {**os.environ, "SPECDECK_SIM_TIME_SCALE": TIME_SCALE, "SPECDECK_SIM_SGLANG_VERSION": version}
    server = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:  # the warmup went through with its own key
            if "fired up and ready to roll" in line:
                break
        assert KEY not in Path(f"/proc/{server.pid}/cmdline").read_text()
        base = f"http://127.0.0.1:{port}"
        assert call(base + "/health")[0] == 200 and call(base + "/metrics")[0] == 200
        assert call(base + "/server_info") == (401, '{"error": "Unauthorized"}')
        generate = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
        assert call(base + "/generate", body=generate)[0] == 401
        assert call(base + "/server_info", KEY)[0] == 200 and call(base + "/generate", KEY, generate)[0] == 200
        assert call(base + "/server_info", "wrong")[0] == 401
        lower = call(base + "/server_info", KEY, scheme="bearer")[0]  # 0.5.23 reads the scheme in any case
        assert lower == (200 if version == "0.5.23" else 401)
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture
def far_host(tmp_path):
    """A second host reached at 127.0.0.2 over the real sshd: to the fleet, another machine than the router's
    (127.0.0.1), whose replica must listen beyond loopback."""
    server = start_sshd(tmp_path / "sshd-far", extra=("ListenAddress 127.0.0.2",))
    known = Path(server.known_hosts)
    known.write_text(known.read_text() + f"[127.0.0.2]:{server.port} {server.host_key_pub}\n")
    yield server
    server.stop()


def fleet_config(tmp_path: Path, models: dict, far, ports: dict[str, int], extra_args: str = "") -> Path:
    hosts = ""
    for name, url, more in (
        ("sim-a", "local", ""),
        ("sim-b", far.url.replace("127.0.0.1", "127.0.0.2"), f"identity = {json.dumps(far.identity)}\n"),
    ):
        workdir = tmp_path / name
        workdir.mkdir(exist_ok=True)
        hosts += (
            f'[hosts.{name}]\nurl = "{url}"\npython = {json.dumps(sys.executable)}\n{more}'
            f"known_hosts = {json.dumps(far.known_hosts)}\n"
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
env = {{ SPECDECK_SIM_TIME_SCALE = "{TIME_SCALE}" }}
extra_args = ["--decode-log-interval", "4"{extra_args}]
[fleets.pair]
profile = "eagle3-ours"
replicas = [{{host = "sim-a", port = {ports["a"]}}}, {{host = "sim-b", port = {ports["b"]}}}]
router = {{host = "sim-a", port = {ports["router"]}, policy = "round_robin", prometheus_port = {ports["prom"]}}}
"""
    )
    return path


@pytest.mark.slow
def test_a_replica_beyond_loopback_takes_only_the_fleets_key_and_the_router_still_routes(models, tmp_path, far_host):
    ports = {k: free_port() for k in ("a", "b", "router", "prom")}
    config = fleet_config(tmp_path, models, far_host, ports)
    try:
        up = specdeck(config, "fleet", "up", "pair")
        said = [line for line in up.stderr.splitlines() if "beyond loopback" in line]
        b = ports["b"]
        assert said == [f"pair: listening beyond loopback, with the fleet's key: sim-b:{b} on 127.0.0.2:{b}"]
        key_file = fleet_key.key_path("pair")
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
        key = key_file.read_text().strip()

        far = f"http://127.0.0.2:{ports['b']}"
        assert call(far + "/health")[0] == 200  # SGLang leaves health open, for probes
        assert call(far + "/server_info") == (401, '{"error": "Unauthorized"}')
        assert call(far + "/generate", body={"text": "hi", "sampling_params": {"max_new_tokens": 2}})[0] == 401
        assert call(far + "/server_info", key)[0] == 200

        bench = specdeck(config, "fleet", "bench", "pair", "--requests", "6", "--max-tokens", "32", "--json")
        assert json.loads(bench.stdout)["requests"] == 6  # through the router, which sends the key to sim-b
        status = specdeck(config, "fleet", "status", "pair")
        assert f"key: {fleet_key.HOW}" in status.stdout and "2/2 workers healthy" in status.stdout
        assert "Unauthorized" not in specdeck(config, "serve", "status", "--host", "sim-b").stdout

        logs = specdeck(config, "serve", "logs", "--host", "sim-b", "--lines", "400").stdout
        assert f"api_key='{'*' * len(key)}'" in logs  # SGLang logs its server_args, key and all: masked
        assert key not in cmdlines() and key not in logs
        assert key not in specdeck(config, "jobs", "--json", "--host", "sim-b").stdout
        assert key not in specdeck(config, "jobs", "--json").stdout
        history = history_path()
        assert history.exists() and key.encode() not in history.read_bytes()
    finally:
        specdeck(config, "fleet", "down", "pair", "--yes", rc=None)


@pytest.mark.slow
def test_a_profile_with_a_key_of_its_own_is_refused_for_a_fleet_beyond_loopback(models, tmp_path, far_host):
    ports = {k: free_port() for k in ("a", "b", "router", "prom")}
    config = fleet_config(tmp_path, models, far_host, ports, extra_args=', "--api-key", "mine"')
    err = specdeck(config, "fleet", "up", "pair", rc=2).stderr
    assert "profile eagle3-ours sets --api-key in its extra arguments" in err and err.count("\n") == 1
    assert not fleet_key.key_path("pair").exists()


def test_a_fleets_key_never_starts_with_a_dash_that_sglangs_parser_reads_as_an_option(tmp_path, monkeypatch):
    # A clean-clone CI run failed once: "launch_server.py: error: argument --api-key: expected one argument".
    # SGLang's --config puts the key back into argv for argparse, so a urlsafe key starting with "-" (1 in 64)
    # could never start a replica.
    import argparse

    from backend.errors import UsageError
    from backend.sandbox.sglang_sim.args import merge_config

    monkeypatch.setattr(fleet_key, "key_path", lambda fleet: tmp_path / "keys" / f"{fleet}.key")
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key")
    for n in range(200):
        key = fleet_key.key_for(f"f{n}")
        assert not key.startswith("-")
        config = tmp_path / f"f{n}.yaml"
        config.write_text(f"api-key: '{key}'\n")
        assert parser.parse_args(merge_config(["--config", str(config)], parser)).api_key == key
    dashed = tmp_path / "keys" / "old.key"
    dashed.write_text("-" + "a" * 42 + "\n")
    dashed.chmod(0o600)
    with pytest.raises(UsageError, match="damaged: remove it"):
        fleet_key.key_for("old")
