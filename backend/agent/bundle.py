"""Pack the host side (``backend/agent/host``) into a zipapp, named by its sources' hash.

The client uploads it once to ``<workdir>/.specdeck/agent-<hash>.pyz``; a new specdeck version has a new
hash, so the host never runs a stale agent and never needs a cleanup step to stay correct. The zip unpacks
itself beside it (``agent-<hash>/``) on its first run and runs from there: Python caches compiled modules for a
folder but never for a zip, and compiling the agent anew cost ~100 ms at every start. It is started by
:func:`boot_program` (``python -c``), which checks the folder before anything in the zipapp runs.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

HOST_DIR = Path(__file__).parent / "host"
PACKAGE = "specdeck_host"
# Python 2/3.7 can still parse this, so an old interpreter gets a sentence instead of a SyntaxError.
MAIN = """\
import os, sys
if sys.version_info < (3, 8):
    sys.stderr.write("specdeck agent needs Python 3.8+, this is %s\\n" % sys.version.split()[0])
    sys.exit(95)


def unpacked(pyz):
    # The folder beside the zip, unpacked once (to a temporary name, then renamed: two first starts at once
    # both succeed); None (run from the zip) where it cannot be written or is not this user's own folder.
    if not pyz.endswith(".pyz"):
        return None
    folder = os.path.abspath(pyz[:-4])
    if not os.path.isdir(os.path.join(folder, "PACKAGE")):
        import shutil, zipfile
        tmp = "%s.%d.tmp" % (folder, os.getpid())
        try:
            with zipfile.ZipFile(pyz) as zf:
                zf.extractall(tmp)
            os.rename(tmp, folder)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    import stat
    return folder if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() else None


folder = unpacked(sys.path[0])
if folder is not None:
    sys.path[0] = folder
from PACKAGE.main import main
sys.exit(main())
""".replace("PACKAGE", PACKAGE)


def _sources() -> list[tuple[str, bytes]]:
    """Every ``.py`` under host/, subfolders too (``shared/``), by relative path: the same order everywhere."""
    files = sorted((p.relative_to(HOST_DIR).as_posix(), p) for p in HOST_DIR.rglob("*.py"))
    return [(f"{PACKAGE}/{rel}", p.read_bytes()) for rel, p in files]


@functools.cache
def agent_name() -> str:
    """The agent's file name on the host, from its sources' hash (cheap: the zip is built only to upload it)."""
    digest = hashlib.sha256(MAIN.encode())
    for name, data in _sources():
        digest.update(b"\0%s\0%d\0" % (name.encode(), len(data)))
        digest.update(data)
    return f"agent-{digest.hexdigest()[:16]}.pyz"


# The start program: the version check first (any Python parses it), then safepath.py's text and its boot().
BOOT = """\
import sys
if sys.version_info < (3, 8):
    sys.stderr.write("specdeck agent needs Python 3.8+, this is %s\\n" % sys.version.split()[0])
    sys.exit(95)
exec(compile(SOURCE, "specdeck-boot", "exec"))
"""


@functools.cache
def boot_program() -> str:
    """``python -c`` text that runs ``boot(PYZ, STATE_DIR)`` of ``host/shared/safepath.py`` (see there)."""
    source = (HOST_DIR / "shared" / "safepath.py").read_text() + "\nsys.exit(boot(sys.argv[1:]))\n"
    return BOOT.replace("SOURCE", repr(source))


@functools.cache
def agent_zip() -> tuple[str, bytes]:
    """(file name, bytes) of the agent zipapp; deterministic for the same sources."""
    import io
    import zipfile  # here: only an upload needs the zip, and a command's start need not import it

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        entries = [("__main__.py", MAIN.encode()), *_sources()]
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return agent_name(), buf.getvalue()
