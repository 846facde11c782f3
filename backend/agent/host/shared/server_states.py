"""The SGLang server's states and startup phases: the words the host computes a status in and clients show.

Registers no RPC methods, so the client imports it without loading the host's serve methods (``serve.py``,
whose docstring says what each state means). Stdlib only, Python 3.8+.
"""

STATES = ("none", "starting", "ready", "orphaned", "stopping", "stopped", "crashed")

# Startup phases in order, named from SGLang's info lines (rank 0's): the draft ones happen only with a
# drafter, which loads after the target's CUDA graphs. A server that got SIGTERM is "draining".
PHASES = (
    "launching",
    "loading weights",
    "allocating KV cache",
    "capturing CUDA graphs",
    "loading draft weights",
    "capturing draft graphs",
    "warming up",
    "ready",
)
DRAFT_PHASES = ("loading draft weights", "capturing draft graphs")
