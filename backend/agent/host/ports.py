"""Free ports for servers that other processes of ours will connect to, chosen below the kernel's ephemeral
range (``net.ipv4.ip_local_port_range``): a port there can be taken at any moment as the source port of an
outgoing connection (a node retrying the rendezvous, a health probe), and a server that binds it after that
fails with EADDRINUSE. ``bind(0)`` hands out exactly those ports.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import random
import socket
from typing import Optional

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000  # above the registered services most hosts run
TRIES = 200


def ephemeral_low(path: str = RANGE_FILE) -> int:
    """The first port the kernel hands out for outgoing connections (Linux's default 32768)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def bindable(port: int, host: str = "") -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR, as uvicorn and SGLang's store bind)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def free_run(span: int = 1, host: str = "", rng: Optional[random.Random] = None) -> Optional[int]:
    """The first of ``span`` consecutive ports that are all free and below the ephemeral range, or None."""
    rng = rng or random.SystemRandom()
    top = ephemeral_low() - span
    if top <= LOWEST:
        return None
    for _ in range(TRIES):
        port = rng.randrange(LOWEST, top)
        if all(bindable(p, host) for p in range(port, port + span)):
            return port
    return None
