"""Pack the host side (``backend/agent/host``) into a zipapp, named by its content hash.

The client uploads it once to ``<workdir>/.specdeck/agent-<hash>.pyz``; a new specdeck version has a new
hash, so the host never runs a stale agent and never needs a cleanup step to stay correct.
"""

from __future__ import annotations

import functools
import hashlib
import io
import zipfile
from pathlib import Path

HOST_DIR = Path(__file__).parent / "host"
PACKAGE = "specdeck_host"
# Python 2/3.7 can still parse this, so an old interpreter gets a sentence instead of a SyntaxError.
MAIN = """\
import sys
if sys.version_info < (3, 8):
    sys.stderr.write("specdeck agent needs Python 3.8+, this is %s\\n" % sys.version.split()[0])
    sys.exit(95)
from specdeck_host.main import main
sys.exit(main())
"""


@functools.cache
def agent_zip() -> tuple[str, bytes]:
    """(file name, bytes) of the agent zipapp; deterministic for the same sources."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        entries = [("__main__.py", MAIN.encode())]
        for path in sorted(HOST_DIR.glob("*.py")):
            entries.append((f"{PACKAGE}/{path.name}", path.read_bytes()))
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    data = buf.getvalue()
    digest = hashlib.sha256(data).hexdigest()[:16]
    return f"agent-{digest}.pyz", data
