"""Issue 10: what OpenSSH-exact host-key checking costs: a connect against `ssh` itself, and a large hashed
known_hosts against asyncssh's own matcher."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.harness import Row, median_ms, timeit
from tests.sshd import start_sshd

ENTRIES = 2000  # a long-lived operator's known_hosts, every line hashed


async def _connects(url: str, identity: str, known_hosts: str, n: int) -> float:
    from backend.transport.ssh import SSHTransport

    times = []
    for _ in range(n):
        transport = SSHTransport(url, identity=identity, known_hosts=known_hosts)
        t0 = time.perf_counter()
        await transport.connect()
        times.append((time.perf_counter() - t0) * 1000)
        await transport.close()
    return statistics.median(times)


def _big_known_hosts(path: Path, last: str) -> None:
    import asyncssh

    from backend.transport.hostkeys import hashed_name

    key = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().split()
    lines = [f"{hashed_name(f'host{i}.example')} {key[0]} {key[1]}" for i in range(ENTRIES - 1)]
    path.write_text("\n".join([*lines, last]) + "\n")


def run() -> list[Row]:
    import asyncssh

    from backend.transport.hostkeys import KnownHosts, hashed_name

    with tempfile.TemporaryDirectory() as tmp:
        sshd = start_sshd(Path(tmp) / "sshd")
        try:
            ours = asyncio.run(_connects(sshd.url, sshd.identity, sshd.known_hosts, 15))
            argv = sshd.ssh_argv("true")
            theirs = median_ms(timeit(lambda: subprocess.run(argv, check=True, capture_output=True), 15))
            big = Path(tmp) / "known_hosts"
            name = f"[127.0.0.1]:{sshd.port}"
            _big_known_hosts(big, f"{hashed_name(name)} {sshd.host_key_pub}")
            big_connect = asyncio.run(_connects(sshd.url, sshd.identity, str(big), 5))
        finally:
            sshd.stop()
        lookup = median_ms(timeit(lambda: KnownHosts.read([str(big)], (name, "127.0.0.1")), 5))
        library = median_ms(timeit(lambda: asyncssh.read_known_hosts(str(big)).match("127.0.0.1", "", sshd.port), 5))
    return [
        Row(
            10,
            "connect with OpenSSH-exact host-key checks (loopback), ≤ 2× a new `ssh` process",
            f"{ours:.0f} ms",
            f"`ssh -o BatchMode=yes true` {theirs:.0f} ms",
            ok=ours <= 2 * theirs,
        ),
        Row(
            10,
            f"known_hosts of {ENTRIES} hashed lines: parse + 2 lookups (in a thread) ≤ 200 ms",
            f"{lookup:.0f} ms (connect {big_connect:.0f} ms)",
            f"asyncssh read_known_hosts + match {library:.0f} ms",
            ok=lookup <= 200,
        ),
    ]
