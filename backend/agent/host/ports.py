"""Free ports for servers that other processes of ours will connect to, chosen outside the kernel's ephemeral
range (``net.ipv4.ip_local_port_range``): a port there can be taken at any moment as the source port of an
outgoing connection (a node retrying the rendezvous, a health probe), and a server that binds it after that
fails with EADDRINUSE. ``bind(0)`` hands out exactly those ports.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import random
import socket
from typing import Optional, Tuple

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000  # above the registered services most hosts run
TRIES = 200


def ephemeral_range(path: str = RANGE_FILE) -> Tuple[int, int]:
    """The ports the kernel hands out for outgoing connections (Linux's default 32768-60999)."""
    try:
        with open(path) as f:
            low, high = (int(word) for word in f.read().split()[:2])
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


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


def free_run(span: int = 1, host: str = "") -> Optional[int]:
    """The first of ``span`` consecutive ports that are all free, outside the ephemeral range (below it, or
    above it; anywhere from LOWEST where a host's range leaves neither), or None."""
    low, high = ephemeral_range()
    spans = [(a, b) for a, b in ((LOWEST, low - span), (high + 1, 65536 - span)) if b > a] or [(LOWEST, 65536 - span)]
    rng = random.SystemRandom()
    for _ in range(TRIES):
        a, b = rng.choices(spans, weights=[b - a for a, b in spans])[0]
        port = rng.randrange(a, b)
        if all(bindable(p, host) for p in range(port, port + span)):
            return port
    return None
