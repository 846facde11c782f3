"""`specdeck trust`: accept an unknown host key from the command line, the way ssh's prompt takes a fingerprint.

The key is the one the host presents in a real handshake (through any ProxyJump), recorded only when it
matches the fingerprint the operator typed after checking it on the host: nothing is trusted blindly.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from backend.cli.common import load_settings
from backend.cli.main import command
from backend.errors import ConnectionBlocked, HostKeyUnknown, UsageError

if TYPE_CHECKING:
    from backend.cli.main import Subcommands


def register(sub: Subcommands) -> None:
    p = command(sub, "trust", "Record the host's key in known_hosts if it has the SHA256 fingerprint you checked.")
    p.add_argument("fingerprint", nargs="?", help="SHA256:… as `ssh-keygen -lf` prints it on the host; omit to see it")
    p.set_defaults(run=trust)


async def trust(args: argparse.Namespace) -> int:
    from backend.connection import make_transport, resolve_host
    from backend.transport.hostkeys import trust_host_key
    from backend.transport.sshconfig import MAX_HOPS

    host = resolve_host(load_settings(args), args.host, identity=args.identity, known_hosts=args.known_hosts)
    if host.is_local:
        raise UsageError(f"{host.name} is this machine: there is no host key to trust")
    wanted = args.fingerprint
    for _ in range(MAX_HOPS + 1):  # one key per ProxyJump hop, and the host's own
        transport = make_transport(host)
        try:
            await transport.connect()
        except HostKeyUnknown as err:
            if wanted is None or wanted != err.fingerprint:
                shown = "" if wanted is None else f", not {wanted}: nothing recorded"
                raise ConnectionBlocked(
                    f"{err.name} presents {err.fingerprint}{shown}. Check it on the host "
                    f"(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then `specdeck trust {err.fingerprint}`"
                ) from None
            trust_host_key(err.known_hosts, err.key_line)
            print(f"trusted {err.fingerprint} for {err.name} in {err.known_hosts}")
            wanted = None  # a ProxyJump's next hop has a key of its own: shown, not trusted with this one
            continue
        await transport.close()
        print(f"{host.name}: every host key on the way is trusted")
        return 0
    raise UsageError(f"{host.name}: more than {MAX_HOPS + 1} unknown keys on the way; is ProxyJump a loop?")
