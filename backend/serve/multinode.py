"""Multi-node servers: one SGLang across the hosts a profile's ``nodes`` name, with SGLang's own
``--nnodes N --node-rank R --dist-init-addr HOST:PORT``.

SGLang's model (server_args.py, entrypoints/engine.py ``_launch_subprocesses``): ``--tp-size`` is the whole
server's; node R runs TP ranks tp/N·R … tp/N·(R+1)−1 on its own GPUs. Rank 0 hosts the torch.distributed store
at --dist-init-addr, the tokenizer and the real HTTP API; a node of rank ≥ 1 runs schedulers only, plus
``launch_dummy_health_check_server`` on its --host:--port (/health 200, /generate 404). Nodes may start in any
order: the others' store clients retry until rank 0 listens. When one node dies the others fail in their next
collective (or hang until the watchdog): a node's death is the whole server's.

What specdeck adds:
- ``plan``: ranks in the order ``nodes`` names them; the dist-init address is rank 0's host's address and a
  port its agent finds free (``serve.dist_port``); every rank listens on the profile's port, except where two
  nodes are one machine (the sandbox), where rank R listens on port + R.
- ``preflight``: every node's own checks (``preflight_checks.preflight``), and that the nodes agree: one SGLang
  release, the same GPU model and count, a tp that splits evenly.
- ``start``: the followers first, rank 0 last, each a serve job on its host; rank 0's job names the others'
  (``peers``), so whoever finds the server (rank 0's job, as for one host) finds every rank. A start that fails
  part-way stops what it started.
- ``expand`` (status): rank 0's status with a line per node; a rank that ended ends the server, and expand
  stops the ranks still running: no orphan on any host.
- ``stop``: announces the stop on every rank first (so a rank that dies of its peer's exit reads as stopped,
  not crashed), then stops them all at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from backend import jobs
from backend.connection import Connection
from backend.errors import OperationFailed, SpecdeckError
from backend.serve import command_line, host_facts, preflight_checks, server_status, serving
from backend.settings.model import HostConfig, ProfileConfig, Settings

FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr")
# A rank's error that says a peer went first: gloo's and NCCL's words for a lost connection.
_PEER_DEATH = re.compile(r"Connection closed by peer|Connection reset by peer|ncclRemoteError|remote process exited")
PORT_PLACEHOLDER = "PORT"  # `serve cmd`: the dist-init port is found on rank 0's host when the server starts
POLL_S = 0.25
REAP_GRACE_S = 10.0


def is_multinode(profile: ProfileConfig) -> bool:
    return bool(profile.nodes)


def address(host: HostConfig) -> str:
    """The address other nodes reach ``host`` at: its SSH address (loopback for this machine)."""
    if host.on_this_machine:
        return "127.0.0.1"
    return urlsplit(host.url).hostname or host.url


def _host_port(addr: str, port: int | str) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"  # SGLang's IPv6 form: [addr]:port


@dataclass(frozen=True)
class Rank:
    """One node's part of a multi-node server: its host, its --port and its exact command line."""

    node: str
    rank: int
    host: HostConfig
    port: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    files: dict[str, str] = field(default_factory=dict)  # what the launch reads on the host (serve.start writes)


def rank_ports(profile: ProfileConfig, hosts: list[HostConfig]) -> list[int]:
    """Each rank's --port: the profile's on every node, as SGLang is run across machines; a node on the same
    machine as an earlier rank's (only the sandbox does that) gets port + rank, so each binds its own."""
    seen: set[str] = set()
    ports = []
    for rank, host in enumerate(hosts):
        where = address(host)
        ports.append(profile.port + rank if where in seen else profile.port)
        seen.add(where)
    return ports


def plan(settings: Settings, profile: ProfileConfig, dist_port: int | None = None) -> list[Rank]:
    """Every rank of ``profile`` (rank 0 first) with its command; ``dist_port`` None writes ``PORT``."""
    hosts = [settings.host(name) for name in profile.nodes]
    ports = rank_ports(profile, hosts)
    dist = _host_port(address(hosts[0]), PORT_PLACEHOLDER if dist_port is None else dist_port)
    out = []
    for rank, (host, port) in enumerate(zip(hosts, ports, strict=True)):
        cmd = command_line.profile_command(settings, host, replace(profile, port=port, nodes=()))
        flags = ["--nnodes", str(len(hosts)), "--node-rank", str(rank), "--dist-init-addr", dist]
        out.append(Rank(host.name, rank, host, port, cmd.argv + flags, cmd.env, cmd.cwd, cmd.files))
    return out


def commands(settings: Settings, profile: ProfileConfig) -> list[dict[str, Any]]:
    """``serve cmd``: each rank's ``{"node", "rank", "port", "argv", "env", "cwd"}``."""
    return [
        {"node": r.node, "rank": r.rank, "port": r.port, "argv": r.argv, "env": r.env, "cwd": r.cwd}
        for r in plan(settings, profile)
    ]


# --- connections to every node ------------------------------------------------------------------------------


class Nodes:
    """Connections to the nodes of multi-node servers by host name, opened when first needed; ``close``
    closes those it opened (one handed in with ``adopt`` stays its owner's)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conns: dict[str, Connection] = {}
        self._own: set[str] = set()
        self._opening: dict[str, asyncio.Future[Connection]] = {}

    def adopt(self, name: str, conn: Connection) -> None:
        if name not in self.conns:
            self.conns[name] = conn

    async def get(self, name: str) -> Connection:
        conn = self.conns.get(name)
        if conn is not None and not conn.connected and name in self._own:
            del self.conns[name]  # one of ours that dropped: connect again
            self._own.discard(name)
            await conn.close()
        if name in self.conns:
            return self.conns[name]
        if name not in self._opening:
            self._opening[name] = asyncio.ensure_future(Connection.open(self.settings.host(name)))
        try:
            opened = await asyncio.shield(self._opening[name])
        finally:
            task = self._opening.get(name)
            if task is not None and task.done():
                del self._opening[name]
        if name not in self.conns:
            self.conns[name] = opened
            self._own.add(name)
        return self.conns[name]

    async def all(self, names: list[str]) -> dict[str, Connection]:
        conns = await asyncio.gather(*(self.get(n) for n in names))
        return dict(zip(names, conns, strict=True))

    async def close(self) -> None:
        own = [self.conns.pop(n) for n in list(self._own) if n in self.conns]
        self._own.clear()
        await asyncio.gather(*(c.close() for c in own), return_exceptions=True)


# --- preflight ----------------------------------------------------------------------------------------------


def profile_checks(profile: ProfileConfig) -> list[preflight_checks.Check]:
    """What a multi-node profile must say, before any host is asked."""
    n = len(profile.nodes)
    out = []
    repeated = sorted({a.split("=", 1)[0] for a in profile.extra_args if a.split("=", 1)[0] in FLAGS})
    if repeated:
        out.append(
            preflight_checks.Check(
                "nodes",
                "fail",
                f"extra flags set {', '.join(repeated)}, which specdeck writes for each node: drop them from the "
                "profile",
            )
        )
    if profile.tp % n:
        out.append(
            preflight_checks.Check(
                "tp",
                "fail",
                f"tp {profile.tp} does not split over {n} nodes (SGLang runs tp / nnodes ranks on each): set "
                f"tp to a multiple of {n}",
            )
        )
    return out


async def preflight(
    nodes: Nodes, settings: Settings, profile: ProfileConfig, *, force: bool = False
) -> preflight_checks.Preflight:
    """Every node's own checks (its paths, port, SGLang, GPUs) and that the nodes agree; a check every node
    passed alike is shown once, any other names its node."""
    ranks = plan(settings, profile)
    conns = await nodes.all([r.node for r in ranks])
    per_node = max(1, profile.tp // len(ranks))
    facts, results = await asyncio.gather(
        asyncio.gather(*(host_facts.facts(conns[r.node]) for r in ranks)),
        asyncio.gather(
            *(
                preflight_checks.preflight(
                    conns[r.node], settings, replace(profile, port=r.port, tp=per_node, nodes=()), force=force
                )
                for r in ranks
            )
        ),
    )
    checks = profile_checks(profile)
    per_rank = [[c for c in result.checks if c.name != "tp"] for result in results]
    shared = set.intersection(*({(c.name, c.status, c.message) for c in cs} for cs in per_rank))
    seen: set[tuple[str, preflight_checks.CheckStatus, str]] = set()
    for rank, cs in zip(ranks, per_rank, strict=True):
        for c in cs:
            key = (c.name, c.status, c.message)
            if key in shared:
                if key not in seen:
                    seen.add(key)
                    checks.append(c)
            else:
                checks.append(preflight_checks.Check(c.name, c.status, f"{rank.node}: {c.message}"))
    checks += _agreement(ranks, facts, profile.tp, per_node)
    return preflight_checks.Preflight(profile.name, tuple(checks))


def _agreement(
    ranks: list[Rank], facts: list[host_facts.HostFacts], tp: int, per_node: int
) -> list[preflight_checks.Check]:
    """The nodes of one server run one SGLang release on the same GPUs, each with room for its ranks."""
    problem = host_facts.difference(facts, "the nodes of one server need the same GPUs and one SGLang release")
    if problem:
        return [preflight_checks.Check("nodes", "fail", problem.rstrip("."))]
    out = []
    for rank, seen in zip(ranks, facts, strict=True):
        if seen.gpus and per_node > len(seen.gpus):
            out.append(
                preflight_checks.Check(
                    "tp",
                    "fail",
                    f"tp {tp} over {len(ranks)} nodes puts {per_node} ranks on each but {rank.node} has "
                    f"{len(seen.gpus)} GPUs: lower the profile's tp to {len(seen.gpus) * len(ranks)} or less",
                )
            )
            break
    if not out:
        release = f"sglang {facts[0].sglang}" if facts[0].sglang else "no sglang found"
        out.append(
            preflight_checks.Check(
                "nodes",
                "ok",
                f"{len(ranks)} nodes, {per_node} ranks each, {release} and {facts[0].gpu_text()} on every one",
            )
        )
    return out


# --- lifecycle ----------------------------------------------------------------------------------------------


async def start(
    nodes: Nodes, settings: Settings, profile: ProfileConfig, *, force: bool = False, tags: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Preflight every node, then start every rank as a serve job (followers first, rank 0 last, which
    names the others); returns the whole server's first status (+ preflight). Nothing is left running if a
    rank cannot be started."""
    checks = await preflight(nodes, settings, profile, force=force)
    if not checks.ok:
        raise preflight_checks.PreflightFailed(checks)
    head = profile.nodes[0]
    dist = await (await nodes.get(head)).call("serve.dist_port")
    ranks = plan(settings, profile, int(dist["port"]))
    base = {
        **command_line.job_args(settings, profile),
        **(tags or {}),
        "group": uuid.uuid4().hex[:12],
        "nodes": list(profile.nodes),
        "nnodes": len(ranks),
        "ports": [r.port for r in ranks],
        "dist_init_addr": ranks[0].argv[-1],
    }
    started: list[tuple[Rank, dict[str, Any]]] = []
    try:
        for rank in [*ranks[1:], ranks[0]]:
            args = {**base, "port": rank.port, "node_rank": rank.rank}
            if rank.rank == 0:
                args["peers"] = [{"node": r.node, "rank": r.rank, "job": st["job"]} for r, st in started]
            conn = await nodes.get(rank.node)
            st = await conn.call("serve.start", argv=rank.argv, env=rank.env, cwd=rank.cwd, files=rank.files, args=args)
            started.append((rank, st))
    except BaseException:
        await asyncio.shield(_stop_all(nodes, [(r.node, st["job"]) for r, st in started], REAP_GRACE_S))
        raise
    out = await expand(nodes, started[-1][1])
    out["preflight"] = checks.to_json()
    return out


def _ranks_of(head: dict[str, Any]) -> list[tuple[str, int, str | None]]:
    """(node, rank, job) of every rank of the server whose rank 0 status is ``head``."""
    args = head.get("args") or {}
    peers = sorted(args.get("peers") or [], key=lambda p: p["rank"])
    return [(args["nodes"][0], 0, head.get("job")), *((p["node"], p["rank"], p["job"]) for p in peers)]


async def _rank_status(nodes: Nodes, node: str, job: str | None) -> dict[str, Any]:
    try:
        conn = await nodes.get(node)
        answer: dict[str, Any] = await conn.call("serve.status", job=job)
        return answer
    except SpecdeckError as exc:
        return {"state": "unknown", "job": job, "error": f"{node} cannot be asked: {exc}"}


async def _head_of(nodes: Nodes, wire: dict[str, Any]) -> dict[str, Any] | None:
    """Rank 0's status for a status of some rank (itself for rank 0): rank 0's host's server on rank 0's
    port, if it is of the same server."""
    args = wire.get("args") or {}
    if not args.get("node_rank"):
        return wire
    node, port = args["nodes"][0], (args.get("ports") or [args.get("port")])[0]
    try:
        head = await (await nodes.get(node)).call("serve.status", port=port)
    except SpecdeckError:
        return None
    return head if (head.get("args") or {}).get("group") == args.get("group") else None


def node_line(node: server_status.NodeStatus) -> str:
    """One node of a multi-node server as the CLI and the Serve tab show it:
    ``gpu-b  rank 1  starting: loading weights  port 30000  pid 2113``."""
    state = node.state
    what = state
    if node.phase and state in ("starting", "crashed"):
        what = f"{state}: {node.phase}" if state == "starting" else f"crashed while {node.phase}"
    parts = [node.node, f"rank {node.rank}", what]
    parts += [f"port {node.port}"] if node.port else []
    parts += [f"pid {node.pid}"] if node.pid and state in server_status.RUNNING_STATES else []
    line = "  ".join(parts)
    return f"{line}  ({node.error})" if node.error and state != "ready" else line


async def expand(nodes: Nodes, wire: dict[str, Any], *, reap: bool = True) -> dict[str, Any]:
    """A server's status as its host reported it, made the whole server's when it is one rank of a multi-node
    server: rank 0's status with ``nodes`` (a line each: node, rank, state, phase, port, pid, error); when a
    rank has ended while others run, the server has failed, and with ``reap`` those others are stopped here.
    A status of one host passes through as it is."""
    args = wire.get("args") or {}
    if not args.get("nodes"):
        return wire
    me = args["nodes"][args.get("node_rank") or 0]
    head = await _head_of(nodes, wire)
    if head is None:
        out = dict(wire, nodes=[_entry(me, args.get("node_rank") or 0, wire)])
        out["warnings"] = [*(wire.get("warnings") or []), f"rank 0 of this server ({args['nodes'][0]}) is not found"]
        return out
    ranks = _ranks_of(head)
    statuses = [head, *await asyncio.gather(*(_rank_status(nodes, n, j) for n, _, j in ranks[1:]))]
    if reap and _failed(statuses) and any(s["state"] in server_status.RUNNING_STATES for s in statuses):
        running = [
            (n, j) for (n, _, j), s in zip(ranks, statuses, strict=True) if s["state"] in server_status.RUNNING_STATES
        ]
        await _stop_all(nodes, running, REAP_GRACE_S)
        statuses = [*await asyncio.gather(*(_rank_status(nodes, n, j) for n, _, j in ranks))]
    return _merge(ranks, statuses)


def _failed(statuses: list[dict[str, Any]]) -> bool:
    """A rank has ended while the server was not being stopped: every other rank is lost with it. A rank
    whose host cannot be asked now (``unknown``) is not known to have ended: nothing is stopped for it."""
    ended = [s for s in statuses if s["state"] in ("crashed", "stopped", "none")]
    return bool(ended) and not all(s["state"] in ("stopping", "stopped", "unknown") for s in statuses)


def _entry(node: str, rank: int, st: dict[str, Any]) -> dict[str, Any]:
    return {
        "node": node,
        "rank": rank,
        "job": st.get("job"),
        "state": st["state"],
        "phase": st.get("phase"),
        "phases": st.get("phases") or [],
        "port": st.get("port"),
        "pid": st.get("pid"),
        "since": st.get("since"),
        "ended": st.get("ended"),
        "error": st.get("error"),
        "log_path": st.get("log_path"),
    }


def _merge(ranks: list[tuple[str, int, str | None]], statuses: list[dict[str, Any]]) -> dict[str, Any]:
    entries = [_entry(node, rank, st) for (node, rank, _), st in zip(ranks, statuses, strict=True)]
    out = dict(statuses[0], nodes=entries)
    unasked = [e["error"] for e in entries if e["state"] == "unknown"]
    if unasked:
        out["warnings"] = [*(out.get("warnings") or []), *unasked]
    crashed = [e for e in entries if e["state"] in ("crashed", "none")]
    if crashed:
        # The cause: the first to end of those that did not die of a peer's death (the others' errors say so).
        causes = [e for e in crashed if not _PEER_DEATH.search(e["error"] or "")] or crashed
        first = min(causes, key=lambda e: e["ended"] or e["since"] or float("inf"))
        out["state"] = "crashed" if all(e["state"] not in server_status.RUNNING_STATES for e in entries) else "stopping"
        if first["rank"] != 0:
            detail = statuses[entries.index(first)]
            out["error"] = f"{first['node']} (rank {first['rank']}) {first['state']}: {first['error'] or 'ended'}"
            out["hint"] = detail.get("hint") or (
                "A node's death ends a multi-node SGLang server: the other ranks were stopped; read that node's "
                f"log ({first['log_path']}) and start the profile again."
            )
            out["hint_action"] = detail.get("hint_action")
        out["since"] = first["ended"] or out.get("since")
    elif out["state"] in ("stopped", "stopping") or any(e["state"] == "stopping" for e in entries):
        running = any(e["state"] in server_status.RUNNING_STATES for e in entries)
        out["state"] = "stopping" if running else "stopped"
    elif out["state"] == "ready" and any(e["state"] != "ready" for e in entries):
        out["state"], out["phase"] = "starting", "waiting for nodes"
    return out


async def _stop_all(nodes: Nodes, ranks: list[tuple[str, str | None]], grace: float) -> list[dict[str, Any]]:
    """Announce the stop on every rank, then stop them all at once (see ``serve.announce_stop``)."""

    async def announce(node: str, job: str | None) -> None:
        with contextlib.suppress(SpecdeckError):
            await (await nodes.get(node)).call("serve.announce_stop", job=job)

    async def stop_one(node: str, job: str | None) -> dict[str, Any]:
        try:
            conn = await nodes.get(node)
            out: dict[str, Any] = await conn.call("serve.stop", job=job, timeout=grace)
            if out["left"]:  # killed, and the kernel not done with them: wait, then say what they do
                _, left = await jobs.outlast(conn, out["job"], out["left_states"])
                out["left_sentence"] = jobs.left_sentence(left, "the server", f"on {node}") if left else ""
            return out
        except SpecdeckError as exc:
            return {"node": node, "job": job, "left": [], "error": str(exc)}

    await asyncio.gather(*(announce(n, j) for n, j in ranks))
    return list(await asyncio.gather(*(stop_one(n, j) for n, j in ranks)))


async def stop(nodes: Nodes, wire: dict[str, Any], *, grace: float = serving.STOP_GRACE_S) -> dict[str, Any]:
    """Stop every rank of the multi-node server ``wire`` is a rank of; raises ``OperationFailed`` naming the
    node where a process survived or a host could not be asked. Returns the whole server's status with
    ``left``, ``stopped`` and ``gpus_freed`` over every node."""
    head = await _head_of(nodes, wire)
    if head is None:  # rank 0 is gone: stop the rank at hand
        args = wire["args"]
        ranks = [(args["nodes"][args["node_rank"]], args["node_rank"], wire.get("job"))]
    else:
        ranks = _ranks_of(head)
    was_running = any(
        s["state"] in server_status.RUNNING_STATES
        for s in await asyncio.gather(*(_rank_status(nodes, n, j) for n, _, j in ranks))
    )
    results = await _stop_all(nodes, [(n, j) for n, _, j in ranks], grace)
    for (node, _, _), res in zip(ranks, results, strict=True):
        if res.get("error"):
            raise OperationFailed(f"{node}: {res['error']}; the server's other ranks were stopped")
        if res.get("left_sentence"):
            raise OperationFailed(res["left_sentence"])
    node, _, job = ranks[0]
    out = await expand(nodes, await _rank_status(nodes, node, job), reap=False)
    freed = [r.get("gpus_freed") for r in results]
    out.update(
        was_running=was_running,
        left=[],
        stopped=[p for r in results for p in r.get("stopped") or []],
        gpus_freed=None if all(f is None for f in freed) else all(f is not False for f in freed),
    )
    if out["gpus_freed"] is False:
        node = ranks[freed.index(False)][0]
        raise OperationFailed(f"the server's processes are gone but nvidia-smi on {node} still lists them on a GPU")
    return out


async def wait(
    nodes: Nodes,
    wire: dict[str, Any],
    *,
    until: tuple[str, ...] = server_status.ENDED_STATES,
    within: float | None = None,
    on_status: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Follow the whole server (every rank, ``expand``) until its state is in ``until`` or ``within``
    seconds pass; ``on_status`` sees each look. Returns the last status."""
    deadline = None if within is None else time.monotonic() + within
    head_job = wire.get("job")
    head_node = (wire.get("args") or {})["nodes"][0]
    while True:
        head = await (await nodes.get(head_node)).call("serve.status", job=head_job)
        out = await expand(nodes, head)
        if on_status is not None:
            on_status(out)
        if out["state"] in until or (deadline is not None and time.monotonic() >= deadline):
            return out
        await asyncio.sleep(POLL_S)
