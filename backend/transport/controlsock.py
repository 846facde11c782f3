"""The control socket without asyncio: where it lives, who may use it, and the frames on it.

Shared by the master (``master.py``), the asyncio client (``control.py``) and the blocking one-shot client
(``blocking.py``), which must answer before asyncio could even be imported.
"""

from __future__ import annotations

import _socket  # not `socket`: it imports selectors and enum, ~10 ms of a one-shot answer on a loaded box
import os
import stat
import struct

TYPE_CHECKING = False  # typing itself only for the checker, likewise
if TYPE_CHECKING:
    from backend.settings.model import HostConfig

DEFAULT_PERSIST_S = 600.0
HELLO_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 5.0  # `disconnect`: SIGTERM, then SIGKILL after this long (systemd's TimeoutStopSec)
MAX_PATH = 107  # bytes of a unix socket's path: sun_path's 108 less the NUL, as OpenSSH counts
# One frame each way after the request line: a kind byte and a length, then the bytes.
FRAME = struct.Struct(">cI")
STDIN, STDIN_EOF = b"i", b"e"  # client → master
STDOUT, STDERR, EXIT = b"o", b"r", b"x"  # master → client


class NoMaster(Exception):
    """No master is listening for this host (none started yet, or a stale socket): connect directly."""


class Unusable(Exception):
    """A socket or folder that must not be used (another user's, open to others): connect directly, say why."""


class Unanswering(Unusable):
    """A master holds the socket's lock but does not answer (stopped, wedged): connect directly, name it."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"the kept connection (master pid {pid}) does not answer")
        self.pid = pid


# Sockets whose master took a request and said nothing in this process: the quick path met it first, so the
# full CLI that follows names it at once instead of waiting for it a second time.
UNANSWERED: set[str] = set()


def persist_s() -> float:
    """How long a master waits idle (``SPECDECK_PERSIST`` seconds, 0 = no masters)."""
    raw = os.environ.get("SPECDECK_PERSIST", "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_PERSIST_S
    except ValueError:
        return DEFAULT_PERSIST_S


def _runtime_path() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(base, "specdeck") if base and os.path.isdir(base) else f"/tmp/specdeck-{os.getuid()}"


def runtime_dir(create: bool = True) -> str:
    """This user's folder for control sockets, checked: a directory (no link), owned by us, closed to others."""
    path = _runtime_path()
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise Unusable(f"cannot create {path}: {exc.strerror}") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NoMaster(path) from None
    if not stat.S_ISDIR(st.st_mode):
        raise Unusable(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise Unusable(f"{path} belongs to uid {st.st_uid}, not to you")
    if st.st_mode & 0o077:
        raise Unusable(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):o})")
    return path


def socket_path(host: HostConfig, create: bool = True) -> str:
    """The control socket of ``host``: one per address, identity and known_hosts (a different --identity or
    --known-hosts is a different connection, with its own checks)."""
    import hashlib  # here: a one-shot answer finds its socket without hashing (cli/resolved.py)

    key = "\0".join([host.url, host.identity or "", host.known_hosts or ""])
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    path = os.path.join(_runtime_path(), f"ssh-{digest}.sock")
    if len(path.encode()) > MAX_PATH:  # the master could not bind it (unseen): said here, before any is left
        raise Unusable(
            f"ControlPath too long for Unix domain socket ({path}: {len(path.encode())} bytes, at most {MAX_PATH}); "
            "set XDG_RUNTIME_DIR to a shorter folder"
        )
    runtime_dir(create)
    return path


def lock_path(path: str) -> str:
    """The lock file a master of socket ``path`` holds for its life, its pid inside."""
    return f"{path}.lock"


def holder(path: str) -> int | None:
    """The pid of the master holding socket ``path``'s lock (None when no process holds it)."""
    import fcntl  # here: only a master that did not answer brings a command this far

    try:
        fd = os.open(lock_path(path), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid != os.getuid():
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: by the master that wrote its pid there
            data = os.read(fd, 32)
            return int(data) if data.strip().isdigit() else None
        return None  # nobody holds it: a master's leftover
    finally:
        os.close(fd)


def check_socket(path: str) -> None:
    """The socket file at ``path`` is a socket and ours (NoMaster where there is none)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NoMaster("none started") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise Unusable(f"{path} is not a socket")
    if st.st_uid != os.getuid():
        raise Unusable(f"{path} belongs to uid {st.st_uid}, not to you")


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of a unix socket."""
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]  # struct ucred: pid, uid, gid
    return uid
