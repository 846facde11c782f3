"""A fleet's API key: what keeps replicas that listen beyond loopback closed to everyone but its router.

A replica on another machine than the router must listen where the router can reach it, and SGLang then
serves anyone who reaches that port (generation, and admin endpoints: weights from a path, cache flushes,
profiler starts). Jupyter refuses to listen beyond loopback without a token; a fleet does the same with a key
of its own: made once, kept 0600 in this user's state folder, sent to each host's agent (``serve.key``), which
keeps it 0600 where SGLang's ``--config`` file and the router's start read it. It is in no command line,
history, report or log of ours.

How each program takes it (read from their sources, SGLang 0.5.6 and 0.5.23, sglang-router 0.3.2): SGLang
reads ``--config FILE.yaml`` in its own process, so ``api-key`` there never shows in ``ps``; no environment
variable names it. sglang-router takes a worker key only as ``--api-key`` on its command line (no variable, no
file), so specdeck starts it through its Python entry (``launch_router(parse_router_args(...))``) with the key
read from the 0600 file. ``HOW`` says this where a fleet's status is shown.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from backend.errors import UsageError

HOW = (
    "replicas beyond loopback answer only with the fleet's key: SGLang reads it from a 0600 --config file; "
    "sglang-router 0.3.2 takes a worker key only as --api-key on its command line, so specdeck starts it "
    "through launch_router with the key read from a 0600 file (in no command line)"
)


def key_path(fleet: str) -> Path:
    from platformdirs import user_state_dir

    return Path(user_state_dir("specdeck")) / "fleet-keys" / f"{fleet}.key"


def key_for(fleet: str) -> str:
    """The fleet's key, made the first time it is asked for and kept in ``key_path`` (0600, in a 0700 folder)."""
    path = key_path(fleet)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read(path)
    with os.fdopen(fd, "w") as f:
        # Hex, never a leading "-": SGLang's --config puts the key back into argv for argparse
        # (ConfigArgumentMerger), which reads "-x…" as an option ("--api-key: expected one argument"),
        # one urlsafe key in 64.
        key = secrets.token_hex(32)
        f.write(key + "\n")
    return key


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise UsageError(f"cannot read the fleet key {path}: {exc.strerror}") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise UsageError(
                f"the fleet key {path} is open to others (mode {stat.S_IMODE(st.st_mode):o}) or not yours: "
                f"remove it and `specdeck fleet up` makes a new one"
            )
        key = f.read().strip()
    if len(key) < 16 or key.startswith("-"):  # a leading "-" is read by SGLang's parser as an option
        raise UsageError(f"the fleet key {path} is damaged: remove it and `specdeck fleet up` makes a new one")
    return key
