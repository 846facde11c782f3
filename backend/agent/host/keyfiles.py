"""The API key files of ours: ``<state>/keys/<name>.yaml``, each an API key a server of ours (or a fleet's router)
reads with SGLang's ``--config``, mode 0600 (``serve.key`` writes them). Below the jobs, the servers and the
probes, which all read them. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

KEYS = "keys"  # <state>/keys/<name>.yaml: an API key a server of ours reads with SGLang's --config, 0600


def keys_dir(state_dir: str) -> str:
    return os.path.join(state_dir, KEYS)


def key_file_of(job: Optional[Dict[str, Any]]) -> Optional[str]:
    """The key file of ours a job was started with: an argument naming a file in the state's keys folder (a
    server's ``--config``, the router's key file)."""
    if job is None or not job.get("dir"):
        return None
    state_dir = os.path.dirname(os.path.dirname(os.path.normpath(job["dir"])))  # <state>/jobs/<id>
    keys = os.path.normpath(keys_dir(state_dir))
    return next((a for a in job.get("argv") or [] if os.path.normpath(os.path.dirname(a)) == keys), None)


def read_key(path: Optional[str]) -> Optional[str]:
    """The API key in a key file (``keep_key``'s), None without one."""
    if not path:
        return None
    try:
        with open(path) as f:
            key: Optional[str] = json.load(f).get("api-key")
            return key
    except (OSError, ValueError, AttributeError):
        return None
