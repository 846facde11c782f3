"""What a multi-node server needs from each of its hosts: a free rendezvous port on rank 0's, and a stop
announced on every rank before any is signalled (``backend.serve.multinode`` drives them across hosts).

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict

from . import jobs, ports
from .registry import AgentError, Context, method
from .servers import pick

# SGLang derives ZMQ ports from --dist-init-addr's port (+1 … +6: tokenizer, rpc, metrics, scheduler input
# with DP attention, server_args.py PortArgs.init_new), so the whole run must be free, not just the port.
DIST_PORT_SPAN = 7


@method("serve.dist_port")
def dist_port(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """``{span?}`` → ``{"port"}``: a free port with the ``span - 1`` above it free too, for rank 0's
    ``--dist-init-addr`` (its torch.distributed store listens there), below the ephemeral range so that no
    outgoing connection (another node retrying the rendezvous) can take one of them first."""
    span = int(params.get("span") or DIST_PORT_SPAN)
    port = ports.free_run(span)
    if port is None:
        raise AgentError("no run of %d free ports found on this host for --dist-init-addr" % span, "busy")
    return {"port": port}


@method("serve.announce_stop")
def announce_stop(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """``{job}``: record that this rank is being stopped (the ``cancel.json`` ``jobs.cancel`` writes), without
    signalling it. A rank whose peer went first dies of that (SGLang has no clean multi-node exit); marked
    beforehand, it reads as stopped, not crashed."""
    job = pick(ctx.state_dir, params.get("job"))
    if job is None:
        raise AgentError("no server job %s on this host" % params.get("job"), "not_found")
    if job["state"] in jobs.ACTIVE:
        path = os.path.join(job["dir"], "cancel.json")
        if not os.path.exists(path):
            jobs.write_json(path, {"requested": time.time()})
    return {"job": job["id"], "state": job["state"]}
