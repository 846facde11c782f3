"""Host-key decisions against OpenSSH itself: every known_hosts state × ssh_config shape gives the decision
`ssh -o BatchMode=yes` gives on the same files, and the line specdeck's trust writes is one `ssh` accepts."""

from __future__ import annotations

import asyncio
import getpass
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.errors import ConnectionBlocked, HostKeyChanged, HostKeyUnknown
from backend.transport.hostkeys import KnownHosts, decide, hashed_name, trust_host_key
from backend.transport.ssh import SSHTransport
from backend.transport.sshconfig import Hop, jump_hops
from tests.helpers import Ran, run_cli
from tests.sshd import Sshd, start_sshd

pytestmark = [pytest.mark.e2e, pytest.mark.ssh]

USER = getpass.getuser()
NAME = "localhost"  # the target by name; 127.0.0.1 is its address
SHAPES = ("plain", "alias", "hostkeyalias", "proxyjump", "ukh-none", "strict-no", "hashknownhosts")
STATES = (
    "absent", "unrelated",
    "trusted-name", "trusted-address", "trusted-alias", "trusted-portless", "trusted-hashed",
    "changed-name", "changed-address", "changed-alias", "changed-portless", "changed-hashed",
)  # fmt: skip
SWITCHED = ("absent", "trusted-name", "trusted-hashed", "changed-name", "changed-hashed")


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> dict:
    """The target and a jump host (both let in one client key), and a key neither of them has."""
    base = tmp_path_factory.mktemp("hostkeys")
    client = base / "client_key"
    other = base / "other_key"
    for key in (client, other):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    ca = base / "host_ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True)
    target = start_sshd(base / "target", str(client))
    jump = start_sshd(base / "jump", str(client))
    certified = start_sshd(base / "certified", str(client), host_ca=str(ca))
    kind, blob = (base / "other_key.pub").read_text().split()[:2]
    ca_kind, ca_blob = (base / "host_ca.pub").read_text().split()[:2]
    yield {"target": target, "jump": jump, "certified": certified, "client": str(client),
           "other": f"{kind} {blob}", "ca": f"{ca_kind} {ca_blob}"}  # fmt: skip
    for server in (target, jump, certified):
        server.stop()


def ssh_config(shape: str, target: Sshd, jump: Sshd, client: str) -> str:
    """The user's ssh_config for ``shape``; the destination is ``gpu`` except in ``plain``."""
    lines = []
    if shape != "plain":
        lines += ["Host gpu", f"  HostName {NAME}", f"  Port {target.port}", f"  User {USER}"]
        lines += {
            "hostkeyalias": ["  HostKeyAlias gpu-key"],
            "proxyjump": ["  ProxyJump jump"],
            "ukh-none": ["  UserKnownHostsFile none"],
            "strict-no": ["  StrictHostKeyChecking no"],
            "hashknownhosts": ["  HashKnownHosts yes"],
        }.get(shape, [])
    lines += ["Host jump", "  HostName 127.0.0.1", f"  Port {jump.port}", f"  User {USER}"]
    lines += ["Host *", f"  IdentityFile {client}", "  IdentitiesOnly yes", "  GlobalKnownHostsFile /dev/null"]
    return "\n".join(lines) + "\n"


def oracle_config(config: str, known_hosts: Path) -> str:
    """The same file as ssh must see it to decide as specdeck does: verification forced on, the same
    known_hosts (ssh expands ~ from the password database, not $HOME), never a prompt."""
    kept = [
        ln for ln in config.splitlines() if ln.split()[:1] not in (["UserKnownHostsFile"], ["StrictHostKeyChecking"])
    ]
    kept += [f"  UserKnownHostsFile {known_hosts}", "  StrictHostKeyChecking yes", "  BatchMode yes"]
    return "\n".join(kept) + "\n"


def write_state(state: str, known: Path, shape: str, servers: dict) -> None:
    target, jump = servers["target"], servers["jump"]
    lines = [f"[127.0.0.1]:{jump.port} {jump.host_key_pub}"] if shape == "proxyjump" else []
    if state == "absent" and not lines:
        return
    good, bad = target.host_key_pub, servers["other"]
    port = target.port
    alias = "gpu-key" if shape == "hostkeyalias" else "gpu"
    names = {"name": f"[{NAME}]:{port}", "address": f"[127.0.0.1]:{port}", "alias": alias, "portless": NAME,
             "hashed": f"[{NAME}]:{port}"}  # fmt: skip
    if state == "unrelated":
        lines.append(f"elsewhere.example {bad}")
    elif state != "absent":
        verdict, where = state.split("-")
        lines.append(f"{names[where]} {good if verdict == 'trusted' else bad}")
    known.write_text("".join(f"{ln}\n" for ln in lines))
    if state.endswith("-hashed"):  # OpenSSH's own hashing, so the test does not check ours against itself
        subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True)


async def openssh_decides(config: Path, destination: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "ssh", "-F", str(config), destination, "true",
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    stderr = (await asyncio.wait_for(proc.communicate(), 60))[1].decode(errors="replace")
    if proc.returncode == 0:
        return "trusted"
    if "IDENTIFICATION HAS CHANGED" in stderr or "DNS SPOOFING" in stderr:
        return "changed"
    if "host key is known" in stderr or "Host key verification failed" in stderr:
        return "unknown"
    raise AssertionError(f"ssh failed for another reason: {stderr}")


async def specdeck_decides(url: str) -> tuple[str, Exception | None]:
    transport = SSHTransport(url)
    try:
        await transport.connect()
    except HostKeyUnknown as exc:
        return "unknown", exc
    except HostKeyChanged as exc:
        return "changed", exc
    await transport.close()
    return "trusted", None


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A HOME of the test's own: ~/.ssh/config and ~/.ssh/known_hosts are the test's files."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    (tmp_path / ".ssh").mkdir(mode=0o700)
    return tmp_path


# The shapes that differ from "alias" by one switch-off line need only the states that line could change.
CASES = [(shape, state) for shape in SHAPES for state in STATES if shape in SHAPES[:4] or state in SWITCHED]


@pytest.mark.parametrize(("shape", "state"), CASES)
async def test_decision_matches_openssh_and_trusting_satisfies_it(shape, state, servers, home):
    target, jump = servers["target"], servers["jump"]
    config = ssh_config(shape, target, jump, servers["client"])
    (home / ".ssh" / "config").write_text(config)
    known = home / ".ssh" / "known_hosts"
    write_state(state, known, shape, servers)
    oracle = home / "oracle_config"
    oracle.write_text(oracle_config(config, known))
    destination, url = ("gpu", "ssh://gpu") if shape != "plain" else (
        f"{USER}@{NAME}", f"ssh://{USER}@{NAME}:{target.port}")  # fmt: skip
    if shape == "plain":
        oracle.write_text(oracle.read_text() + f"Host {NAME}\n  Port {target.port}\n")

    (ours, err), theirs = await asyncio.gather(specdeck_decides(url), openssh_decides(oracle, destination))
    assert ours == theirs, err
    if ours != "unknown":
        return
    # What the panel's trust dialog does on "y": append the offered line. ssh then accepts the key too.
    assert isinstance(err, HostKeyUnknown) and err.known_hosts == str(known)
    before = known.read_text() if known.exists() else ""
    trust_host_key(err.known_hosts, err.key_line)
    assert known.read_text() == before + err.key_line + "\n"
    assert err.key_line.startswith("|1|") == (shape == "hashknownhosts")
    (ours, _), theirs = await asyncio.gather(specdeck_decides(url), openssh_decides(oracle, destination))
    assert ours == theirs == "trusted"


def test_hashed_name_is_what_ssh_keygen_finds(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"{hashed_name('[gpu.example]:2222')} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummy\n")
    found = subprocess.run(["ssh-keygen", "-F", "[gpu.example]:2222", "-f", str(known)], capture_output=True)
    assert found.returncode == 0 and b"|1|" in found.stdout
    assert subprocess.run(["ssh-keygen", "-F", "gpu.example", "-f", str(known)], capture_output=True).returncode


def test_trust_write_starts_a_new_line_and_keeps_the_file_private(tmp_path):
    known = tmp_path / "new" / "known_hosts"
    trust_host_key(str(known), "a ssh-ed25519 AAAA")
    assert known.read_text() == "a ssh-ed25519 AAAA\n" and known.stat().st_mode & 0o777 == 0o600
    assert known.parent.stat().st_mode & 0o777 == 0o700
    known.write_text("b ssh-ed25519 BBBB")  # a last line without its newline (hand-edited)
    trust_host_key(str(known), "c ssh-ed25519 CCCC\n")
    assert known.read_text() == "b ssh-ed25519 BBBB\nc ssh-ed25519 CCCC\n"
    with pytest.raises(ValueError):
        trust_host_key(str(known), "d ssh-ed25519 DDDD\ne ssh-ed25519 EEEE")


async def test_malformed_known_hosts_line_is_a_one_line_refusal(servers, home):
    target = servers["target"]
    known = home / ".ssh" / "known_hosts"
    known.write_text(f"[127.0.0.1]:{target.port} {target.host_key_pub}\njunk\n")
    with pytest.raises(ConnectionBlocked, match=r"known_hosts line 2 is not a known_hosts entry") as err:
        await SSHTransport(target.url, identity=target.identity).connect()
    assert "\n" not in str(err.value)


async def test_encrypted_identity_without_agent_is_a_one_line_refusal(servers, home, tmp_path):
    key = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(key)], check=True)
    with pytest.raises(ConnectionBlocked, match="passphrase-protected and no ssh agent"):
        await SSHTransport(servers["target"].url, identity=str(key)).connect()


def test_cli_exits_3_on_a_malformed_known_hosts_and_an_encrypted_identity(servers, home, tmp_path):
    target = servers["target"]
    bad = home / "bad_known_hosts"
    bad.write_text("junk\n")
    key = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(key)], check=True)
    for args in (target.cli_args(str(tmp_path), known_hosts=str(bad)), target.cli_args(str(tmp_path), str(key))):
        res = run_cli("ping", *args, rc=None)
        assert res.returncode == 3, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "internal error" not in res.stderr


async def test_panel_waits_on_a_malformed_known_hosts_then_connects_once_fixed(servers, home):
    """No reconnect loop against a file only the user can fix: "lost" with the reason, then "r" (retry_now)."""
    from backend.connection import Connection
    from backend.settings.model import HostConfig

    target = servers["target"]
    known = home / "known_hosts"
    known.write_text("junk\n")
    host = HostConfig(name="t", url=target.url, python=sys.executable, workdir=str(home / "w"),
                      identity=target.identity, known_hosts=str(known))  # fmt: skip
    conn = Connection(host)
    lost = asyncio.Event()
    conn.on_state(lambda s: lost.set() if s.status == "lost" else None)
    conn.supervise()
    try:
        await asyncio.wait_for(lost.wait(), 30)
        assert "line 1 is not a known_hosts entry" in conn.state.reason and conn.state.retry_at is None
        known.write_text(f"[127.0.0.1]:{target.port} {target.host_key_pub}\n")
        conn.retry_now()
        await conn.wait_connected(60)
    finally:
        await conn.close()


async def test_the_agent_runs_through_a_proxyjump(servers, home):
    """Not only the handshake: the panel's whole connection (agent upload, calls) goes through the jump host."""
    from backend.connection import Connection
    from backend.settings.model import HostConfig

    target, jump = servers["target"], servers["jump"]
    (home / ".ssh" / "config").write_text(ssh_config("proxyjump", target, jump, servers["client"]))
    (home / ".ssh" / "known_hosts").write_text(
        f"[127.0.0.1]:{jump.port} {jump.host_key_pub}\n[{NAME}]:{target.port} {target.host_key_pub}\n"
    )
    host = HostConfig(name="gpu", url="ssh://gpu", python=sys.executable, workdir=str(home / "w"))
    conn = await Connection.open(host)
    try:
        assert (await conn.ping(1)).samples == 1
        # The target saw the connection come from the jump host's forwarding, not straight from us.
        assert jump.session_pids()
    finally:
        await conn.close()


def test_check_host_ip_makes_a_differing_address_key_a_changed_key(tmp_path, servers):
    """Only reachable off loopback, so judged without a server: with CheckHostIP, a key that differs from the
    one filed for the address is refused as changed, even when the name is unknown or trusts it."""
    import asyncssh

    good = asyncssh.import_public_key(servers["target"].host_key_pub)
    known = tmp_path / "known_hosts"
    known.write_text(f"10.1.2.3 {servers['other']}\n")
    hosts = KnownHosts.read([str(known)])
    judged = decide(hosts, good, hostname="gpu.example", port=22, alias=None, address="10.1.2.3")
    assert judged.status == "changed" and judged.by_address and judged.offending == f"{known}:1"
    assert decide(hosts, good, hostname="gpu.example", port=22, alias=None, address=None).status == "unknown"
    known.write_text(f"gpu.example {servers['target'].host_key_pub}\n10.1.2.3 {servers['other']}\n")
    hosts = KnownHosts.read([str(known)])
    assert decide(hosts, good, hostname="gpu.example", port=22, alias=None, address="10.1.2.3").status == "changed"
    assert decide(hosts, good, hostname="gpu.example", port=22, alias=None, address=None).trusted


def test_proxyjump_values():
    assert jump_hops("bastion, ops@jump:2222,ssh://me@[::1]:22") == [
        Hop("bastion", None, None), Hop("jump", 2222, "ops"), Hop("::1", 22, "me"),
    ]  # fmt: skip
    with pytest.raises(ConnectionBlocked, match="not \\[user@\\]host"):
        jump_hops("ops@:22")


@pytest.mark.parametrize("state", ["no-ca", "ca", "other-ca", "other-ca-trusted-key"])
async def test_host_certificates_as_openssh_judges_them(state, servers, home):
    """A host that presents a certificate: trusted through a @cert-authority line; with no CA, or another CA,
    judged by its plain key (unknown unless that key is recorded), as ssh does."""
    server = servers["certified"]
    config = ssh_config("plain", server, servers["jump"], servers["client"])
    (home / ".ssh" / "config").write_text(config)
    known = home / ".ssh" / "known_hosts"
    ca = {"ca": servers["ca"], "other-ca": servers["other"], "other-ca-trusted-key": servers["other"]}.get(state)
    lines = [f"@cert-authority * {ca}"] if ca else []
    if state == "other-ca-trusted-key":
        lines.append(f"[{NAME}]:{server.port} {server.host_key_pub}")
    known.write_text("".join(f"{ln}\n" for ln in lines))
    oracle = home / "oracle_config"
    oracle.write_text(oracle_config(config, known) + f"Host {NAME}\n  Port {server.port}\n")
    url, destination = f"ssh://{USER}@{NAME}:{server.port}", f"{USER}@{NAME}"

    (ours, err), theirs = await asyncio.gather(specdeck_decides(url), openssh_decides(oracle, destination))
    assert ours == theirs == ("trusted" if state in ("ca", "other-ca-trusted-key") else "unknown"), err
    if ours == "unknown":
        trust_host_key(err.known_hosts, err.key_line)
        (ours, _), theirs = await asyncio.gather(specdeck_decides(url), openssh_decides(oracle, destination))
        assert ours == theirs == "trusted"


def test_host_switcher_shows_where_an_alias_leads(servers, home):
    from backend.settings.model import HostConfig
    from tui.screens.hosts import host_choices

    target = servers["target"]
    (home / ".ssh" / "config").write_text(ssh_config("proxyjump", target, servers["jump"], servers["client"]))
    hosts = {n: HostConfig(name=n, url=u, python="python3", workdir=".") for n, u in
             (("gpu", "ssh://gpu"), ("plain", "ssh://root@10.9.9.9"))}  # fmt: skip
    assert host_choices(hosts)[:2] == [
        ("gpu", f"ssh://gpu → {USER}@{NAME}:{target.port} via jump"), ("plain", "ssh://root@10.9.9.9"),
    ]  # fmt: skip


def fingerprint_of(pub: str) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", "-"], input=pub, capture_output=True, text=True)
    return out.stdout.split()[1]


@pytest.mark.slow
def test_cli_trust_records_only_the_fingerprint_the_operator_checked(servers, home):
    """`specdeck trust` shows the key of each unknown hop, and records one only for its exact fingerprint."""
    target, jump = servers["target"], servers["jump"]
    (home / ".ssh" / "config").write_text(ssh_config("proxyjump", target, jump, servers["client"]))
    known = home / ".ssh" / "known_hosts"
    known.write_text("")
    jump_fp, target_fp = fingerprint_of(jump.host_key_pub), fingerprint_of(target.host_key_pub)

    def cli(*args: str) -> Ran:
        return run_cli(*args, "--host", "ssh://gpu", "--python", sys.executable, env={"HOME": str(home)}, rc=None)

    res = cli("ping")  # what an operator meets first: the key, and the command that trusts it
    assert res.returncode == 3 and f"`specdeck trust {jump_fp}`" in res.stderr, res.stderr
    for wrong in ([], [target_fp]):  # no fingerprint, or another host's: shown, nothing written
        res = cli("trust", *wrong)
        assert res.returncode == 3 and jump_fp in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert known.read_text() == ""
    res = cli("trust", jump_fp)  # the jump host's key recorded; the target's is next, shown but not taken
    assert res.returncode == 3 and f"trusted {jump_fp}" in res.stdout and target_fp in res.stderr
    res = cli("trust", target_fp)
    assert res.returncode == 0, res.stderr
    assert cli("ping").returncode == 0
    oracle = home / "oracle_config"
    oracle.write_text(oracle_config((home / ".ssh" / "config").read_text(), known))
    assert asyncio.run(openssh_decides(oracle, "gpu")) == "trusted"


@pytest.fixture(scope="module")
def on_port_22(servers, tmp_path_factory):
    """An sshd on port 22, where ssh files keys under the bare name: only in the loopback-only namespace."""
    if os.environ.get("SPECDECK_NETNS") != "loopback-only" or os.geteuid() != 0:
        pytest.skip("port 22 needs root in scripts/netns-run's own network namespace")
    server = start_sshd(tmp_path_factory.mktemp("port22"), servers["client"], port=22)
    yield server
    server.stop()


@pytest.mark.parametrize("state", ["absent", "trusted-plain", "changed-plain", "trusted-bracketed"])
async def test_port_22_is_filed_under_the_bare_name(state, on_port_22, servers, home):
    config = ssh_config("plain", on_port_22, servers["jump"], servers["client"])
    (home / ".ssh" / "config").write_text(config)
    known = home / ".ssh" / "known_hosts"
    key = servers["other"] if state == "changed-plain" else on_port_22.host_key_pub
    name = f"[{NAME}]:22" if state == "trusted-bracketed" else NAME
    known.write_text("" if state == "absent" else f"{name} {key}\n")
    oracle = home / "oracle_config"
    oracle.write_text(oracle_config(config, known))
    url, destination = f"ssh://{USER}@{NAME}", f"{USER}@{NAME}"

    (ours, err), theirs = await asyncio.gather(specdeck_decides(url), openssh_decides(oracle, destination))
    assert ours == theirs == {"trusted-plain": "trusted", "changed-plain": "changed"}.get(state, "unknown"), err
    if ours == "unknown":
        assert err.key_line.startswith(f"{NAME} ssh-ed25519 ")


async def test_a_passphrase_protected_identity_signs_through_the_agent(servers, home, tmp_path, monkeypatch):
    """The everyday case the refusal above must not break: a locked --identity whose key the agent holds."""
    target = servers["target"]
    key = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(key)], check=True)
    with open(target.dir / "authorized_keys", "a") as f:
        f.write((tmp_path / "locked.pub").read_text())
    agent = subprocess.run(["ssh-agent", "-s", "-a", str(tmp_path / "agent.sock")], capture_output=True, text=True)
    pid = int(agent.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        askpass = tmp_path / "askpass"
        askpass.write_text("#!/bin/sh\necho secret\n")
        askpass.chmod(0o700)
        env = {**os.environ, "SSH_AUTH_SOCK": str(tmp_path / "agent.sock"), "SSH_ASKPASS": str(askpass),
               "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"}  # fmt: skip
        subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
        known = home / "known_hosts"
        known.write_text(f"[127.0.0.1]:{target.port} {target.host_key_pub}\n")
        transport = SSHTransport(target.url, identity=str(key), known_hosts=str(known))
        await transport.connect()
        assert (await transport.run(["true"])).code == 0
        await transport.close()
    finally:
        os.kill(pid, 15)


async def test_the_configs_own_known_hosts_file_is_read_and_written(servers, home):
    target = servers["target"]
    mine = home / "work_known_hosts"
    config = ssh_config("alias", target, servers["jump"], servers["client"])
    (home / ".ssh" / "config").write_text(config.replace("Host jump", f"  UserKnownHostsFile {mine}\nHost jump"))
    (home / ".ssh" / "known_hosts").write_text(f"[{NAME}]:{target.port} {target.host_key_pub}\n")  # not this one
    ours, err = await specdeck_decides("ssh://gpu")
    assert ours == "unknown" and err.known_hosts == str(mine)
    trust_host_key(err.known_hosts, err.key_line)
    assert (await specdeck_decides("ssh://gpu"))[0] == "trusted"


async def both_decide(home: Path, config: str, destination: str, url: str, oracle_text: str | None = None):
    """(specdeck's, ssh's) decision on the same ssh_config; the oracle forces checking on unless given."""
    (home / ".ssh" / "config").write_text(config)
    oracle = home / "oracle_config"
    oracle.write_text(oracle_text or oracle_config(config, home / ".ssh" / "known_hosts"))
    (ours, err), theirs = await asyncio.gather(specdeck_decides(url), openssh_decides(oracle, destination))
    return ours, theirs, err


@pytest.mark.parametrize(
    ("line", "address", "want"),
    [
        ("127.0.0.0/8 {good}", "127.0.0.1", "unknown"),  # ssh has no CIDR patterns in known_hosts (asyncssh has)
        ("[LOCALHOST]:{port} {bad}", NAME, "changed"),  # names match case-insensitively
        ("[LocalHost]:{port} {good}", NAME, "trusted"),
        ("[l?calh*]:{port},!other {good}", NAME, "trusted"),  # wildcards and negation, as match.c
        ("[l?calh*]:{port},![LOCALHOST]:{port} {good}", NAME, "unknown"),  # a negated match: the line is out
    ],
)
async def test_known_hosts_patterns_match_as_openssh_does(line, address, want, servers, home):
    """Issue 20, item 5: known_hosts lines ssh reads differently from asyncssh, with ssh as the oracle."""
    target = servers["target"]
    host = address
    text = line.format(good=target.host_key_pub, bad=servers["other"], port=target.port)
    (home / ".ssh" / "known_hosts").write_text(text + "\n")
    config = ssh_config("plain", target, servers["jump"], servers["client"]) + f"Host {host}\n  Port {target.port}\n"
    ours, theirs, err = await both_decide(home, config, f"{USER}@{host}", f"ssh://{USER}@{host}:{target.port}")
    assert ours == theirs == want, err


async def test_a_ca_under_the_bare_name_signs_for_any_port(servers, home):
    """ssh's port fallback holds for @cert-authority lines: one under `localhost` covers [localhost]:PORT."""
    certified = servers["certified"]
    (home / ".ssh" / "known_hosts").write_text(f"@cert-authority {NAME} {servers['ca']}\n")
    config = ssh_config("plain", certified, servers["jump"], servers["client"])
    config += f"Host {NAME}\n  Port {certified.port}\n"
    ours, theirs, err = await both_decide(home, config, f"{USER}@{NAME}", f"ssh://{USER}@{NAME}:{certified.port}")
    assert ours == theirs == "trusted", err


async def test_user_known_hosts_file_expands_percent_tokens(servers, home):
    """`UserKnownHostsFile ~/.ssh/kh_%u_%h_%p%%`: ssh expands the tokens, so must specdeck."""
    target = servers["target"]
    (home / ".ssh" / f"kh_{USER}_{NAME}_{target.port}%").write_text(f"[{NAME}]:{target.port} {target.host_key_pub}\n")
    config = ssh_config("plain", target, servers["jump"], servers["client"])
    config = f"Host {NAME}\n  Port {target.port}\n  UserKnownHostsFile {home}/.ssh/kh_%u_%h_%p%%\n" + config
    oracle = config + "Host *\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
    ours, theirs, err = await both_decide(home, config, f"{USER}@{NAME}", f"ssh://{USER}@{NAME}:{target.port}", oracle)
    assert ours == theirs == "trusted", err


async def test_a_host_signing_only_with_sha1_rsa_is_refused_unless_asked_for(servers, home, tmp_path):
    """A server whose only host key algorithm is ssh-rsa (SHA-1): ssh 9.x finds no matching host key type and so
    does specdeck, in one sentence; `HostKeyAlgorithms +ssh-rsa` lets both in."""
    old = start_sshd(tmp_path / "old", servers["client"], host_key_type="rsa", extra=("HostKeyAlgorithms ssh-rsa",))
    try:
        (home / ".ssh" / "known_hosts").write_text(f"[{NAME}]:{old.port} {old.host_key_pub}\n")
        base = ssh_config("plain", old, servers["jump"], servers["client"]) + f"Host {NAME}\n  Port {old.port}\n"
        url, destination = f"ssh://{USER}@{NAME}:{old.port}", f"{USER}@{NAME}"
        (home / ".ssh" / "config").write_text(base)
        oracle = home / "oracle_config"
        oracle.write_text(oracle_config(base, home / ".ssh" / "known_hosts"))
        ssh = subprocess.run(["ssh", "-F", str(oracle), destination, "true"], capture_output=True, text=True)
        assert ssh.returncode != 0 and "no matching host key type found" in ssh.stderr
        with pytest.raises(ConnectionBlocked, match=r"no matching host key type: the host signs only with ssh-rsa"):
            await SSHTransport(url).connect()
        allowed = base + "Host *\n  HostKeyAlgorithms +ssh-rsa\n"
        ours, theirs, err = await both_decide(home, allowed, destination, url)
        assert ours == theirs == "trusted", err
    finally:
        old.stop()
