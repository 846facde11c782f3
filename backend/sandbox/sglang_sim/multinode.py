"""SIMULATED SGLang across nodes: what ``--nnodes N --node-rank R --dist-init-addr HOST:PORT`` does to the
simulator (``backend.sandbox.sglang_sim``), as SGLang's engine does it (entrypoints/engine.py
``_launch_subprocesses``, utils ``launch_dummy_health_check_server``). Not SGLang: no GPU, no NCCL.

- Rendezvous: rank 0 listens on the dist-init address, where SGLang's torch.distributed store lives; every
  other rank connects to it (retrying until rank 0 listens, as the store's clients do) and keeps that
  connection open. It stands in for the gloo and NCCL links between the nodes' schedulers: a closed
  connection is a peer's death, which real ranks learn from their next collective (the schedulers broadcast
  each loop's requests over gloo, so at once).
- Rank 0 waits in "Init torch distributed" until every node joined, then starts as on one node and serves
  the HTTP API; its log speaks for TP ranks 0 … tp/N − 1.
- A node of rank R ≥ 1 logs its own TP ranks' startup (tp/N·R …), then runs only the dummy health server on
  --host:--port: 200 on /health and /health_generate (0.5.23 also /ping, and /metrics with --enable-metrics),
  404 on everything else, /generate included; no access log (it runs uvicorn at log level warning). It logs
  "Starting dummy health check server at HOST:PORT" and nothing more while it lives.
- A peer's death: each local scheduler rank logs "Scheduler hit an exception" with gloo's
  ``Connection closed by peer [addr]:port``; rank 0 then logs the launcher's SIGQUIT line, a node ≥ 1 the
  engine's ``Scheduler or DataParallelController <pid> terminated with <code>``, and it exits 1 (SGLang kills
  its own process tree; the simulator's crashes all exit 1).

Which of /ping and /metrics 0.5.6's dummy server has is inferred (0.5.23's utils/common.py has both; the
older form has /health and /health_generate only). Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

from backend.sandbox.sglang_sim.dialect import Dialect
from backend.sandbox.sglang_sim.log import SCHEDULER_FRAMES, Log, traceback_text

CONNECT_RETRY_S = 0.1
HELLO_TIMEOUT_S = 10.0
_PEER_FRAMES = [
    "srt/managers/scheduler.py:2714 run_scheduler_process | scheduler.event_loop_overlap()",
    "srt/managers/scheduler.py:1041 event_loop_overlap | recv_reqs = self.recv_requests()",
    "srt/managers/scheduler.py:1236 recv_requests | recv_reqs = broadcast_pyobj(",
    "srt/utils/common.py:1173 broadcast_pyobj | dist.broadcast(tensor_size, src=src, group=dist_group)",
]
_CLOSED = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [%s]:%d"


def split_addr(addr: str) -> Tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` (SGLang's forms) → (host, port)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class Node:
    """One node of the server, for its launch sequence (``startup.Startup``): its TP ranks, the rendezvous with
    the others, a peer's death and, on a node of rank >= 1, the dummy health server."""

    def __init__(self, args: Dict[str, Any], log: Log, dialect: Dialect) -> None:
        self.args, self.log, self.dialect = args, log, dialect
        self.nnodes, self.rank = int(args["nnodes"]), int(args["node_rank"])
        self.ranks: List[str] = []
        self.dist = split_addr(args["dist_init_addr"])
        self.links: List[Tuple[socket.socket, Tuple[str, int]]] = []  # (connection, the peer's address)
        self._dying = threading.Lock()

    def local_ranks(self, ranks: List[str]) -> List[str]:
        """This node's share of every scheduler rank's log prefix (``ranks``, the whole server's)."""
        per_node = max(1, len(ranks) // self.nnodes)
        self.ranks = ranks[per_node * self.rank : per_node * (self.rank + 1)] or ranks[:1]
        return self.ranks

    def join(self) -> None:
        """Rank 0 accepts every other node; a node ≥ 1 connects to rank 0, retrying until it listens."""
        if self.rank == 0:
            family = socket.AF_INET6 if ":" in self.dist[0] else socket.AF_INET
            server = socket.create_server(self.dist, family=family)
            server.listen(self.nnodes)
            while len(self.links) < self.nnodes - 1:
                conn, peer = server.accept()
                conn.settimeout(HELLO_TIMEOUT_S)
                try:
                    hello = conn.recv(64)
                except OSError:
                    hello = b""
                if not hello.startswith(b"rank "):
                    conn.close()  # not one of ours (a port probe): the store ignores it too
                    continue
                conn.settimeout(None)
                self.links.append((conn, peer[:2]))
            server.close()
        else:
            while True:
                try:
                    conn = socket.create_connection(self.dist, timeout=5)
                    break
                except OSError:
                    time.sleep(CONNECT_RETRY_S)
            conn.settimeout(None)
            conn.sendall(b"rank %d\n" % self.rank)
            self.links.append((conn, self.dist))
        for conn, peer in self.links:
            threading.Thread(target=self._watch, args=(conn, peer), name="peer-link", daemon=True).start()

    def _watch(self, conn: socket.socket, peer: Tuple[str, int]) -> None:
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        self.peer_lost(peer)

    def peer_lost(self, peer: Tuple[str, int]) -> None:
        """A peer's death, as this node's schedulers meet it in their next collective; ends this node."""
        if not self._dying.acquire(blocking=False):
            return
        text = traceback_text([*SCHEDULER_FRAMES[:1], *_PEER_FRAMES], _CLOSED % peer)
        for ranks in self.ranks:
            self.log.error("Scheduler hit an exception: %s" % text, ranks)
        if self.rank == 0:
            self.log.error("Received sigquit from a child process. It usually means the child failed.")
        else:
            self.log.error("Scheduler or DataParallelController %d terminated with 1" % os.getpid())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # SGLang's kill_process_tree takes the whole node down at once

    def follow(self) -> int:
        """A node ≥ 1 once its schedulers are up: the dummy health server until SIGTERM (0) or a peer's death."""
        host, port = self.args["host"], int(self.args["port"])
        _HealthHandler.paths = _health_paths(self.dialect, bool(self.args["enable_metrics"]))
        try:
            httpd = _bind(host, port)
        except OSError as exc:
            self.log.uvicorn(
                "ERROR",
                "[Errno %d] error while attempting to bind on address %r: %s"
                % (exc.errno or 0, (host, port), (exc.strerror or "").lower()),
            )
            return 1
        threading.Thread(target=httpd.serve_forever, name="health", daemon=True).start()
        self.log.info("Starting dummy health check server at %s:%s" % (host, port))
        wake_r, wake_w = os.pipe()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: os.write(wake_w, b"x"))
        os.read(wake_r, 1)
        httpd.shutdown()
        return 0


def _health_paths(dialect: Dialect, metrics: bool) -> Dict[str, Tuple[str, bytes]]:
    """What launch_dummy_health_check_server answers with 200: path → (content type, body)."""
    paths = {"/health": ("text/plain", b""), "/health_generate": ("text/plain", b"")}
    if dialect.current:
        paths["/ping"] = ("text/plain", b"")
        if metrics:
            # SGLang's schedulers export metrics from attn-TP rank 0 only, which lives on node 0.
            body = b"# SIMULATED: a node of rank >= 1 exports no scheduler metrics\n"
            paths["/metrics"] = ("text/plain; version=0.0.4; charset=utf-8", body)
    return paths


class _HealthHandler(BaseHTTPRequestHandler):
    paths: Dict[str, Tuple[str, bytes]] = {}
    server_version = "uvicorn"
    sys_version = ""

    def _answer(self) -> None:
        path = self.path.split("?", 1)[0]
        if self.command == "GET" and path in self.paths:
            kind, body = self.paths[path]
            self._send(200, kind, body)
        else:
            self._send(404, "application/json", json.dumps({"detail": "Not Found"}).encode())

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # uvicorn runs at log level warning here: no access lines


def _bind(host: str, port: int) -> ThreadingHTTPServer:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class _Server(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

    return _Server((host, port), _HealthHandler)


def check(args: Dict[str, Any]) -> Optional[str]:
    """SGLang's own refusals of the multi-node flags (server_args.py), or None."""
    if not args.get("dist_init_addr"):
        return "please provide --dist-init-addr as host:port of head node"
    if not 0 <= int(args["node_rank"]) < int(args["nnodes"]):
        return "--node-rank %s is not below --nnodes %s" % (args["node_rank"], args["nnodes"])
    try:
        split_addr(args["dist_init_addr"])
    except ValueError:
        return "please provide --dist-init-addr as host:port of head node"
    return None
