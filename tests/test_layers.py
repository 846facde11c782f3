"""The client side never loads the host's RPC methods or the sandbox: the words both sides share (protocol,
units, server states, checkpoint reading) live in side-effect-free modules."""

from __future__ import annotations

import json
import subprocess
import sys

CLIENT = """
import json, sys
import backend.agent.client, backend.connection, backend.serve.serving, backend.measure.livefeed, backend.measure.bench
from backend.cli.main import build_parser
import tui.app
build_parser()  # imports every command module
registry = sys.modules.get("backend.agent.host.registry")
print(json.dumps({
    "methods": sorted(registry.METHODS) if registry else [],
    "sandbox": sorted(m for m in sys.modules if m.startswith("backend.sandbox")),
}))
"""


def test_client_cli_and_tui_register_no_host_methods_and_load_no_sandbox():
    out = subprocess.run([sys.executable, "-c", CLIENT], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert loaded == {"methods": [], "sandbox": []}
