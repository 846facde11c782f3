"""``python -m backend.sandbox.sglang_sim <sglang.launch_server flags>``: the SIMULATED SGLang server."""

import sys

from backend.sandbox.sglang_sim.server import main

main()
sys.exit(0)
