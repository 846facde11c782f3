"""The sandbox: a local host that tells the operator's real story without GPUs or the network.

``<user state dir>/sandbox/`` holds
  host/                         the sandbox host's workdir (agent state, jobs, drafters)
  host/models/Kimi-K2.5/        the target's config.json (no weights: the simulator never loads any)
  host/output_100k_sglang/4/    the team's own drafter, ``ours`` (Kimi-K2 shapes, sparse weights)
  host/kimi_k25_dflash/, host/kimi_k25_dspark/   block drafters for K2.5 (``dflash-k25``, ``dspark-k25``), each
                                served by the profile of its name (DFLASH, DSPARK)
  host/data/k25-hidden/         prepared hidden states for the ``k25-ft`` training (empty sample files) and
                                its vocab mapping
  hub/AQ-MedAI/Kimi-K2-Instruct-eagle3/   AQ-MedAI's drafter, served by the local Hub (a detached job), beside the
                                the catalog of real repos around Kimi-K2.5 (backend/sandbox/hub_catalog.py)
  host-2/, host-3/, …           with ``--hosts N``: the workdirs of hosts ``sandbox-2``, ``sandbox-3``, … (each
                                its own agent, jobs and simulators; target and drafters are the first's files)
  config.toml                   a config whose host ``sandbox`` (and ``sandbox-2``, …) points at all of this
``aq-medai`` is missing on the sandbox host until you download it, exactly as on the real host.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomlkit
import tomlkit.exceptions

from backend.errors import OperationFailed, UsageError
from backend.jobs import JobInfo, get_job, list_jobs
from backend.sandbox.sglang_sim import scenario
from backend.sglang.versions import DEFAULT_SIM_VERSION, SIM_VERSIONS

HOST_NAME = "sandbox"
AQ_REPO = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
DEFAULT_HUB_RATE = "150M"  # bytes/s: a 2.22 GiB download takes ~15 s, long enough to watch
HUB_CHECK_S = 3.0  # a hub that takes longer to list a repo is hung
# A new hub hashes its files first (sha256 of 2.22 GiB: ~3.5 s here, several times that on a loaded machine);
# until then every request that needs a digest waits, and huggingface_hub gives a header read 10 s.
HUB_WARM_S = 120.0

if TYPE_CHECKING:
    from tomlkit import TOMLDocument

    from backend.connection import Connection
    from backend.settings.model import HostConfig


def sandbox_dir() -> Path:
    from platformdirs import user_state_dir

    return Path(user_state_dir("specdeck")) / "sandbox"


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def workdir(self) -> Path:
        return self.root / "host"

    def host_workdir(self, number: int) -> Path:
        """Host ``number``'s workdir (1: the first host's, ``host/``)."""
        return self.workdir if number == 1 else self.root / f"host-{number}"

    @property
    def target(self) -> Path:
        return self.workdir / "models" / "Kimi-K2.5"

    @property
    def ours(self) -> Path:
        return self.workdir / "output_100k_sglang" / "4"

    @property
    def aq(self) -> Path:
        return self.workdir / "aq_medai_k2"

    @property
    def dflash(self) -> Path:
        return self.workdir / "kimi_k25_dflash"

    @property
    def dspark(self) -> Path:
        return self.workdir / "kimi_k25_dspark"

    @property
    def train_data(self) -> Path:
        return self.workdir / "data" / "k25-hidden"

    @property
    def train_output(self) -> Path:
        return self.workdir / "train" / "k25-ft"

    @property
    def hub_root(self) -> Path:
        return self.root / "hub"

    @property
    def hub_url_file(self) -> Path:
        return self.root / "hub.url"

    @property
    def config(self) -> Path:
        return self.root / "config.toml"


def write_fixtures(layout: Layout) -> None:
    """Create what the sandbox host and hub hold (idempotent; sparse files cost no disk)."""
    from backend.sandbox import fixtures, hub_catalog

    if not (layout.target / "config.json").exists():
        fixtures.write_target_config(str(layout.target))
    if not (layout.ours / "model.safetensors").exists():
        fixtures.write_drafter(str(layout.ours), "ours")
    for folder, kind in ((layout.dflash, "dflash_k25"), (layout.dspark, "dspark_k25")):  # block drafters
        if not (folder / "model.safetensors").exists():
            fixtures.write_drafter(str(folder), kind)
    if not (layout.train_data / "vocab_mapping" / "vocab_mapping.pt").exists():
        write_hidden_states(layout.train_data)
    # The hub's repos: AQ-MedAI's (the fixture) and the catalog of real repos around Kimi-K2.5, each sparse file
    # with its digest beside it, so a new hub serves them without hashing gigabytes first.
    hub_catalog.write_catalog(layout.hub_root)
    hub_catalog.write_datasets(layout.hub_root)  # the prompt sets of `bench --domains`


TRAIN_SAMPLES = 1200  # with 8 GPUs and batch 1: 150 steps an epoch


def write_hidden_states(folder: Path) -> None:
    """A prepared hidden-states folder as ``scripts/prepare_hidden_states.py`` lays it out
    (``rows_<k>-<k+2000>/data_<i>.ckpt``, ``vocab_mapping/vocab_mapping.pt``), every file empty: the SIMULATED
    SpecForge counts the samples and reads none."""
    rows = folder / f"rows_0-{TRAIN_SAMPLES}"
    rows.mkdir(parents=True, exist_ok=True)
    for i in range(TRAIN_SAMPLES):
        (rows / f"data_{i}.ckpt").touch()
    (folder / "vocab_mapping").mkdir(exist_ok=True)
    (folder / "vocab_mapping" / "vocab_mapping.pt").touch()


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


@dataclass(frozen=True)
class SshRoute:
    """How one sandbox host reaches this machine through an sshd on loopback (the tests start one)."""

    url: str  # ssh://user@127.0.0.1:PORT
    identity: str | None = None
    known_hosts: str | None = None

    def __post_init__(self) -> None:
        from backend.settings.model import HostConfig
        from backend.settings.validation import ssh_url_problem

        problem = ssh_url_problem(self.url)
        if problem is None and not HostConfig(HOST_NAME, self.url).on_this_machine:
            problem = f"{self.url!r} is not a loopback address: every sandbox host is this machine"
        if problem:
            raise UsageError(f"--ssh {problem}.")


@dataclass(frozen=True)
class SandboxHost:
    """One of the sandbox's hosts: its name, workdir and how it is reached (locally unless ``ssh``)."""

    name: str
    workdir: Path
    ssh: SshRoute | None = None

    def table(self, sglang_version: str, hub_url: str | None) -> str:
        lines = [f"[hosts.{self.name}]", f"url = {_q(self.ssh.url if self.ssh else 'local')}"]
        if self.ssh is not None:
            lines += [f"{k} = {_q(v)}" for k in ("identity", "known_hosts") if (v := getattr(self.ssh, k))]
        lines += [
            f"python = {_q(sys.executable)}",
            f"workdir = {_q(str(self.workdir))}",
            'launcher = "simulator"',
            "sandbox = true",
            f"sglang_version = {_q(sglang_version)}  # the SGLang release the simulator speaks: "
            + " or ".join(SIM_VERSIONS),
        ]
        if hub_url:
            lines.append(f"hub_endpoint = {_q(hub_url)}")
        return "\n".join(lines) + "\n"


def host_name(number: int) -> str:
    """``sandbox``, ``sandbox-2``, ``sandbox-3``, …"""
    return HOST_NAME if number == 1 else f"{HOST_NAME}-{number}"


def sandbox_hosts(layout: Layout, count: int = 1, ssh: SshRoute | None = None) -> list[SandboxHost]:
    """The sandbox's ``count`` hosts; with ``ssh``, the last of two or more goes through that sshd."""
    if count < 1:
        raise UsageError(f"--hosts must be at least 1, got {count}.")
    if ssh is not None and count < 2:
        raise UsageError("--ssh takes one host of several through the sshd: give --hosts 2 or more.")
    return [
        SandboxHost(host_name(i), layout.host_workdir(i), ssh if ssh is not None and i == count else None)
        for i in range(1, count + 1)
    ]


def config_text(
    layout: Layout,
    hub_url: str | None,
    sglang_version: str = DEFAULT_SIM_VERSION,
    hosts: list[SandboxHost] | None = None,
) -> str:
    tables = "\n".join(h.table(sglang_version, hub_url) for h in hosts or sandbox_hosts(layout))
    return f"""\
# specdeck sandbox: local hosts with the SGLang SIMULATOR, a local Hub and fixture drafters.
# Written by `specdeck sandbox up`, and kept: later runs refresh only the sandbox's own paths, Python and
# hub address, so profile edits (Serve's editor, Tune's apply best) survive the next `specdeck demo`.
default_host = "{HOST_NAME}"
target = {_q(str(layout.target))}

{tables}
[drafters.ours]
path = {_q(str(layout.ours))}

[drafters.aq-medai]
repo = "{AQ_REPO}"
files = ["config.json", "model.safetensors"]
path = {_q(str(layout.aq))}

# Block drafters for Kimi-K2.5 on the sandbox host: a DFlash one (z-lab/Kimi-K2.5-DFlash's shapes, block 8) and a
# DSpark one (gamma 5; SGLang 0.5.16 and later).
[drafters.{DFLASH_DRAFTER}]
path = {_q(str(layout.dflash))}

[drafters.{DSPARK_DRAFTER}]
path = {_q(str(layout.dspark))}

# AQ-MedAI's drafter with SGLang picking the step count per batch (--speculative-adaptive, its default ladder;
# SGLang 0.5.11 and later). Starts at 3 steps; `specdeck advise --adaptive` proposes a ladder of its own.
[profiles.{ADAPTIVE_PROFILE}]
drafter = "aq-medai"
algorithm = "EAGLE3"
adaptive = true
steps = 3
topk = 1

# The DFlash drafter under DFLASH: one draft pass proposes the block, the block verified at once.
[profiles.{DFLASH_PROFILE}]
drafter = "{DFLASH_DRAFTER}"
algorithm = "DFLASH"
dflash_block_size = 8

# The DSpark drafter under DSPARK with ragged verify: each request's verify window (cap len) of its own.
[profiles.{DSPARK_PROFILE}]
drafter = "{DSPARK_DRAFTER}"
algorithm = "DSPARK"
dspark_block_size = 5
dspark_ragged_verify = "cap-accept"

# Fine-tune AQ-MedAI's drafter for K2.5 with the SIMULATED SpecForge: a one-minute run.
[trainings.k25-ft]
init = "aq-medai"
data = {_q(str(layout.train_data))}
eval_data = {_q(str(layout.train_data))}
vocab_mapping = {_q(str(layout.train_data / "vocab_mapping" / "vocab_mapping.pt"))}
output = {_q(str(layout.train_output))}
epochs = 4
log_interval = 10
save_interval = 100
eval_interval = 100
{fleet_table(hosts or sandbox_hosts(layout))}"""


ADAPTIVE_PROFILE = "aq-adaptive"
DFLASH_DRAFTER, DFLASH_PROFILE = "dflash-k25", "dflash-k25"
DSPARK_DRAFTER, DSPARK_PROFILE = "dspark-k25", "dspark-k25"
FLEET_NAME = "sandbox"
FLEET_PROFILE = "eagle3-ours"  # its drafter is on the sandbox from the start (aq-medai is downloaded first)
REPLICA_PORT = 30000  # the first host's replica; each next host's 10 ports on (they share this machine's ports)
ROUTER_PORT = 8000


def replica_port(number: int) -> int:
    return REPLICA_PORT + 10 * (number - 1)


def fleet_table(hosts: list[SandboxHost]) -> str:
    """``[fleets.sandbox]`` for two hosts or more: a replica per host behind the real sglang-router (on the
    first host); "" for one."""
    if len(hosts) < 2:
        return ""
    replicas = ", ".join(f'{{host = "{h.name}", port = {replica_port(i)}}}' for i, h in enumerate(hosts, 1))
    return f"""
# The hosts as one fleet: a replica per host (SIMULATED SGLang) behind the real sglang-router (not simulated).
[fleets.{FLEET_NAME}]
profile = "{FLEET_PROFILE}"
replicas = [{replicas}]
router = {{host = "{HOST_NAME}", port = {ROUTER_PORT}}}
"""


# The keys of a sandbox host that follow this machine (its Python, its folders, the hub's port, its route).
_HOST_FACTS = (
    "url", "identity", "known_hosts", "python", "workdir", "launcher", "sandbox", "sglang_version", "hub_endpoint",
)  # fmt: skip


def _is_sandbox_host(name: str, table: object) -> bool:
    """One of the hosts `sandbox up` writes (``sandbox``, ``sandbox-<n>``), not one the operator added."""
    number = name.removeprefix(HOST_NAME + "-")
    ours = name == HOST_NAME or (number != name and number.isdigit())
    return ours and isinstance(table, dict) and bool(table.get("sandbox"))


def write_config(
    layout: Layout, hub_url: str | None, sglang_version: str, hosts: list[SandboxHost] | None = None
) -> bool:
    """Write the sandbox's config.toml, or keep the one there with only what went stale refreshed (the
    target's and drafters' paths, the hosts' facts; missing tables added, sandbox hosts beyond ``hosts``
    dropped): the operator's edits stay. True if the file was (re)written."""
    hosts = hosts or sandbox_hosts(layout)
    fresh = tomlkit.parse(config_text(layout, hub_url, sglang_version, hosts))
    try:
        text = layout.config.read_text()
        doc = tomlkit.parse(text)
        if not isinstance(doc["hosts"][HOST_NAME], dict):
            raise TypeError(HOST_NAME)
    except (OSError, ValueError, KeyError, TypeError, tomlkit.exceptions.TOMLKitError):
        layout.config.write_text(tomlkit.dumps(fresh))  # missing or beyond repair: a fresh one
        return True
    doc["target"] = fresh["target"]
    mine_hosts = doc["hosts"]
    wanted = {h.name for h in hosts}
    for name in [n for n, t in mine_hosts.items() if _is_sandbox_host(n, t) and n not in wanted]:
        del mine_hosts[name]
    for name, new_host in fresh["hosts"].items():
        host = mine_hosts.get(name)
        if not isinstance(host, dict):
            mine_hosts[name] = new_host
            continue
        for key in _HOST_FACTS:
            if key in new_host:
                host[key] = new_host[key]
            else:
                host.pop(key, None)
    _refresh_fleet(doc, fresh)
    for table in ("drafters", "trainings", "profiles"):
        mine = doc.setdefault(table, tomlkit.table())
        for name, values in fresh[table].items():
            if name not in mine:
                mine[name] = values
            elif table == "drafters":
                mine[name]["path"] = values["path"]
    if tomlkit.dumps(doc) == text:
        return False
    layout.config.write_text(tomlkit.dumps(doc))
    return True


def _refresh_fleet(doc: TOMLDocument, fresh: TOMLDocument) -> None:
    """The sandbox's fleet follows its hosts: added with the second host, its replicas redone when the hosts
    changed (its profile and router as the operator left them), dropped with one host left."""
    want = (fresh.get("fleets") or {}).get(FLEET_NAME)
    fleets = doc.get("fleets")
    have = fleets.get(FLEET_NAME) if isinstance(fleets, dict) else None
    if want is None:
        if have is not None and isinstance(fleets, dict):
            del fleets[FLEET_NAME]
            if not fleets:
                del doc["fleets"]
        return
    if not isinstance(have, dict):
        doc.setdefault("fleets", tomlkit.table(is_super_table=True))[FLEET_NAME] = want
        return
    hosts = [r.get("host") for r in have.get("replicas") or [] if isinstance(r, dict)]
    if hosts != [r["host"] for r in want["replicas"]]:
        have["replicas"] = want["replicas"]


def _configured_hosts(layout: Layout) -> dict[str, Any]:
    try:
        hosts = tomllib.loads(layout.config.read_text())["hosts"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return hosts if isinstance(hosts, dict) else {}


def configured_version(layout: Layout) -> str:
    """The SGLang release the sandbox's simulator was last set to speak (the default without a config)."""
    host = _configured_hosts(layout).get(HOST_NAME)
    version = host.get("sglang_version") if isinstance(host, dict) else None
    return version if version in SIM_VERSIONS else DEFAULT_SIM_VERSION


def configured_count(layout: Layout) -> int:
    """How many hosts the sandbox was last given (1 without a config)."""
    hosts = _configured_hosts(layout)
    count = 1
    while _is_sandbox_host(host_name(count + 1), hosts.get(host_name(count + 1))):
        count += 1
    return count


def check_scenario(path: str | None) -> None:
    """UsageError naming the key when ``path`` (not None or ``"default"``) is no usable scenario."""
    if path in (None, "default"):
        return
    try:
        scenario.load(path)
    except scenario.ScenarioError as exc:
        raise UsageError(f"scenario {path}: {exc}.") from None


def set_scenario(layout: Layout, path: str | None, workdir: Path | None = None) -> str | None:
    """Give the simulator of the host in ``workdir`` (default: the first's) the scenario in ``path`` (checked
    first: UsageError naming the key, nothing written), ``"default"`` for the operator's model; None keeps what
    it had. Returns the scenario in use, None for the default."""
    dest = (workdir or layout.workdir) / scenario.FILE_NAME
    if path == "default":
        dest.unlink(missing_ok=True)
    elif path is not None:
        check_scenario(path)
        tmp = dest.with_suffix(".tmp")
        tmp.write_bytes(Path(path).read_bytes())
        os.replace(tmp, dest)
    return str(dest) if dest.is_file() else None


@dataclass(frozen=True)
class SandboxUp:
    """The sandbox ``up`` made or reused: its config file, the SGLang release its simulator speaks, its Hub
    (and why that was replaced, if it was), the scenario in use; ``wire`` is what `sandbox up --json` prints."""

    config: str
    sglang_version: str
    hub_url: str
    hub_replaced: str | None
    scenario: str | None
    wire: dict[str, Any]


async def up(
    hub_rate: str = DEFAULT_HUB_RATE,
    sglang_version: str | None = None,
    scenario_path: str | None = None,
    hosts: int | None = None,
    ssh: SshRoute | None = None,
) -> SandboxUp:
    """Create (or reuse) the sandbox and make sure its local Hub is serving.

    Reuse is checked: the host's agent must answer and the hub must serve the sandbox's repo, else a hub that
    is dead, hung or lost is replaced (``hub["replaced"]`` says why). ``sglang_version`` picks the release the
    simulator speaks; None keeps the one the sandbox had. ``scenario_path``: see ``set_scenario`` (every
    host's simulator gets it). ``hosts``: how many hosts (None keeps the sandbox's count, 1 when new), each
    with its own workdir; ``ssh`` takes the last of them through an sshd on loopback (its agent must answer)."""
    from backend.connection import Connection

    layout = Layout(sandbox_dir())
    if sglang_version is not None and sglang_version not in SIM_VERSIONS:
        raise UsageError(f"the simulator speaks SGLang {' or '.join(SIM_VERSIONS)}, not {sglang_version}")
    version = sglang_version or configured_version(layout)
    members = sandbox_hosts(layout, hosts or configured_count(layout), ssh)
    check_scenario(scenario_path)  # before anything is written
    for member in members:
        member.workdir.mkdir(parents=True, exist_ok=True)
    in_use = set_scenario(layout, scenario_path)
    for member in members[1:]:  # identical hosts: every simulator times and accepts as the first's
        set_scenario(layout, in_use or "default", member.workdir)
    await asyncio.to_thread(write_fixtures, layout)
    conn = await Connection.open(_host_config(members[0]))
    try:
        hub, *_ = await asyncio.gather(_ensure_hub(conn, layout, hub_rate), *map(_answers, members[1:]))
    finally:
        await conn.close()
    write_config(layout, hub["url"], version, members)
    wire = {
        "config": str(layout.config),
        "host": HOST_NAME,
        "hosts": [{"name": m.name, "url": m.ssh.url if m.ssh else "local", "workdir": str(m.workdir)} for m in members],
        "sglang_version": version,
        "workdir": str(layout.workdir),
        "target": str(layout.target),
        "drafters": {
            "ours": str(layout.ours),
            "aq-medai": str(layout.aq),
            DFLASH_DRAFTER: str(layout.dflash),
            DSPARK_DRAFTER: str(layout.dspark),
        },
        "hub": hub,
        "scenario": in_use,
        "simulated": True,  # the SGLang of every host; the fleet's router is the real one
        "fleet": _fleet_summary(layout),
    }
    return SandboxUp(
        config=str(layout.config),
        sglang_version=version,
        hub_url=hub["url"],
        hub_replaced=hub.get("replaced"),
        scenario=in_use,
        wire=wire,
    )


def _fleet_summary(layout: Layout) -> dict[str, Any] | None:
    """The sandbox's fleet as configured (the operator may have edited it): name, replicas, router; None
    with one host."""
    from backend.settings.config_file import load

    fleet = load(str(layout.config)).fleets.get(FLEET_NAME)
    if fleet is None:
        return None
    return {
        "name": fleet.name,
        "replicas": [f"{r.host}:{r.port}" for r in fleet.replicas],
        "router": {"host": fleet.router.host, "port": fleet.router.port, "simulated": False},
    }


def _host_config(member: SandboxHost) -> HostConfig:
    from backend.settings.model import HostConfig

    route = member.ssh
    return HostConfig(
        name=member.name,
        url=route.url if route else "local",
        python=sys.executable,
        workdir=str(member.workdir),
        identity=route.identity if route else None,
        known_hosts=route.known_hosts if route else None,
        launcher="simulator",
        sandbox=True,
    )


async def _answers(member: SandboxHost) -> None:
    """Start ``member``'s agent once (through its sshd, if it has one): a host that cannot be reached says so
    now (ConnectionFailed, exit 3), not at its first use."""
    from backend.connection import Connection

    await (await Connection.open(_host_config(member))).close()


async def hub_answers(conn: Connection, url: str) -> str | None:
    """None when the hub at ``url`` serves the sandbox's repo, else why not (asked from the host, as a download
    would)."""
    got = await conn.call("http.request", url=f"{url}/api/models/{AQ_REPO}", timeout=HUB_CHECK_S)
    if got.get("status") == 200:
        return None
    return got.get("error") or f"HTTP {got.get('status')}"


async def _ensure_hub(conn: Connection, layout: Layout, rate: str) -> dict[str, Any]:
    running = [j for j in await list_jobs(conn, "hub") if j.state == "running"]
    replaced = None
    if running and layout.hub_url_file.exists():
        url = layout.hub_url_file.read_text().strip()
        why = await hub_answers(conn, url)
        if why is None:
            return {"url": url, "job": running[0].id}
        replaced = f"the hub at {url} did not answer ({why}); started a new one"
    for j in running:  # a hub that is hung, or whose URL file is gone, can't serve anyone: replace it
        await conn.call("jobs.cancel", id=j.id, timeout=5)
    layout.hub_url_file.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "backend.sandbox.hub",
        "--root",
        str(layout.hub_root),
        "--rate",
        rate,
        "--port-file",
        str(layout.hub_url_file),
    ]
    args = {"root": str(layout.hub_root), "rate": rate}
    job = JobInfo.from_json(await conn.call("jobs.start", kind="hub", argv=argv, args=args))
    deadline = time.monotonic() + 15
    while not layout.hub_url_file.exists():
        info = await get_job(conn, job.id)
        if info.state != "running":
            raise OperationFailed(f"the sandbox hub did not start: {info.reason or 'see ' + info.log_path}")
        if time.monotonic() > deadline:
            raise OperationFailed(f"the sandbox hub did not start within 15 s (log: {info.log_path})")
        await asyncio.sleep(0.05)
    url = layout.hub_url_file.read_text().strip()
    why = await hub_answers(conn, url)
    if why is not None:
        raise OperationFailed(f"the sandbox hub started but does not answer at {url} ({why}; log: {job.log_path})")
    # The repo's tree lists each LFS file's sha256: answered once the hub's own warm-up has hashed them (or
    # hashes them now), so the first Compare or download after `up` does not time out waiting for it. The
    # digests are kept next to the hub's files: a later start reads them back at once.
    await conn.call("http.request", url=f"{url}/api/models/{AQ_REPO}/tree/main", timeout=HUB_WARM_S)
    return {"url": url, "job": job.id, **({"replaced": replaced} if replaced else {})}


async def down() -> dict[str, Any]:
    """Stop every job the sandbox's hosts run (hub, servers, downloads); files stay for the next `up`."""
    from backend.connection import Connection

    layout = Layout(sandbox_dir())
    if not layout.workdir.exists():
        return {"stopped": [], "note": "no sandbox here"}
    stopped = []
    count = configured_count(layout)
    while layout.host_workdir(count + 1).exists():  # a host dropped from the config may still run something
        count += 1
    for member in sandbox_hosts(layout, count):
        if not member.workdir.exists():
            continue
        conn = await Connection.open(_host_config(member))  # its workdir is on this machine: no route needed
        try:
            for job in await list_jobs(conn):
                if job.state == "running":
                    await conn.call("jobs.cancel", id=job.id, timeout=10)
                    stopped.append(job.id)
        finally:
            await conn.close()
    layout.hub_url_file.unlink(missing_ok=True)
    return {"stopped": stopped, "config": str(layout.config)}
