"""SIMULATED SGLang's process: ``python -m backend.sandbox.sglang_sim <sglang.launch_server flags>`` parses the
release's flags, resolves them, starts up (``startup``), serves the HTTP API (``api``) once the model is loaded
and warmed up, and drains on SIGTERM. Like SGLang, the HTTP port opens only after the model is loaded
(connections are refused while loading) and ``/health`` answers 503 until warmup is done. Stdlib only,
Python 3.8+.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, List, Optional

from backend.sandbox.sglang_sim import scenario, traces
from backend.sandbox.sglang_sim.api import Handler, Server, bind
from backend.sandbox.sglang_sim.args import ConfigRefused, merge_config, resolve_args
from backend.sandbox.sglang_sim.dialect import dialect_from_env
from backend.sandbox.sglang_sim.engine import Engine
from backend.sandbox.sglang_sim.folders import read_model_config
from backend.sandbox.sglang_sim.histograms import SimHistograms
from backend.sandbox.sglang_sim.launcher import config_refusal, model_config_refusal, post_init_traceback
from backend.sandbox.sglang_sim.log import Log, SimExit
from backend.sandbox.sglang_sim.metrics import Metrics
from backend.sandbox.sglang_sim.startup import FAILURES, Startup, warmup
from backend.sandbox.sglang_sim.timing import DRAFT_STEP_MS, NO_CUDA_GRAPH_FACTOR
from backend.sglang.flags import table
from backend.sglang.versions import SIM_VERSION_ENV, SIM_VERSIONS

if TYPE_CHECKING:
    from backend.sandbox.sglang_sim.multinode import Node


DRAIN_POLL_S = 5.0  # SGLang's sigterm_watchdog polls every 5 s


def serve(argv: List[str]) -> int:
    """Run the simulated server until SIGTERM (0) or a failure (1); bad flags exit 2 from argparse."""
    # SGLang's own parser is a plain ArgumentParser: unique prefixes such as --tp work there too.
    try:
        dialect = dialect_from_env()
    except ValueError as exc:
        sys.stderr.write(
            "SIMULATED: %s=%s is not a release the simulator speaks (%s).\n"
            % (SIM_VERSION_ENV, exc, ", ".join(SIM_VERSIONS))
        )
        return 2
    flags = table(dialect.version)  # the release's own flags: 0.5.23 refuses 0.5.6's --cuda-graph-max-bs
    parser = flags.build_parser(prog="launch_server.py", allow_abbrev=True)
    try:
        argv = merge_config(argv, parser)
    except ConfigRefused as exc:
        sys.stderr.write(config_refusal(dialect.current, exc.check, str(exc)) + "\n")
        return 1
    args = flags.server_args(parser.parse_args(argv))
    log = Log(args["log_level"])
    log.info(
        "SIMULATED SGLang %s server (specdeck sandbox stand-in for python -m sglang.launch_server): "
        "no GPU, no model, timings from the operator's measurements." % dialect.label
    )
    try:
        if scenario.active() is not None:
            log.info("SIMULATED: timing and acceptance from the scenario %s" % os.environ[scenario.ENV])
    except scenario.ScenarioError as exc:
        log.error("SIMULATED: %s=%s cannot be used: %s." % (scenario.ENV, os.environ[scenario.ENV], exc))
        return 2
    if os.environ.get("SPECDECK_SIM_FAIL", "") not in ("", *FAILURES):
        log.error("SIMULATED: SPECDECK_SIM_FAIL must be one of %s." % ", ".join(FAILURES))
        return 2
    target, error = read_model_config(args["model_path"])
    if target is None:
        sys.stderr.write(model_config_refusal(dialect.current, args["model_path"], error) + "\n")
        return 1
    args = resolve_args(args, target, log, dialect.current)
    log.info("server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in args.items()))
    node: Optional[Node] = None
    if args["nnodes"] > 1:
        from backend.sandbox.sglang_sim import multinode  # only a multi-node server loads it

        refused = multinode.check(args)
        if refused:
            sys.stderr.write(post_init_traceback([], "AssertionError: %s" % refused) + "\n")
            return 1
        node = multinode.Node(args, log, dialect)
    startup = Startup(args, target, log, dialect, node)
    spec, tokens, memory = startup.run()
    if node is not None and node.rank:
        return node.follow()  # a node >= 1 serves no API
    metrics = Metrics(args["served_model_name"], args["dp_size"] > 1, dialect)
    metrics.histograms = SimHistograms(dialect.version, args)
    engine = Engine(args, spec, log, metrics, startup.ranks[0], dialect)
    costs = {"draft_step_ms": DRAFT_STEP_MS, "eager_factor": NO_CUDA_GRAPH_FACTOR}
    engine.profiler = traces.Profiler(dialect.version, dialect.current, args["tp_size"], log.info, startup.ranks, costs)
    sim = Server(args, engine, metrics, log, dialect)
    sim.memory_usage = memory
    if dialect.current:
        sim.startup_time = timings = startup.startup_time()
        log.info(
            "Engine startup timings (s): load_weight=%.2f, kv_cache_allocation=%.2f, scheduler_e2e=%.2f, "
            "cuda_graph={%s}, tokenizer_e2e=%.2f"
            % (
                timings["load_weight"],
                timings["kv_cache_allocation"],
                timings["scheduler_e2e"],
                ", ".join("%s=%.2f" % kv for kv in timings["cuda_graph"].items()),
                timings["tokenizer_e2e"],
            )
        )
        metrics.set_phases("startup_time_seconds", {k: v for k, v in timings.items() if k != "cuda_graph"})
        metrics.set_phases("startup_cuda_graph_time_seconds", timings["cuda_graph"])
    sim.scheduler_info = {
        "status": "ready",
        "max_total_num_tokens": tokens,
        "max_req_input_len": args["context_length"] - 1,
    }
    engine.start(tokens)

    host, port = args["host"], args["port"]
    log.uvicorn("INFO", "Started server process [%d]" % os.getpid())
    log.uvicorn("INFO", "Waiting for application startup.")
    log.uvicorn("INFO", "Application startup complete.")
    Handler.sim = sim
    try:
        httpd = bind(host, port)
    except OSError as exc:
        log.uvicorn(
            "ERROR",
            "[Errno %d] error while attempting to bind on address %r: %s"
            % (exc.errno or 0, (host, port), (exc.strerror or "").lower()),
        )
        log.uvicorn("INFO", "Waiting for application shutdown.")
        log.uvicorn("INFO", "Application shutdown complete.")
        return 1
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    log.uvicorn("INFO", "Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (host, port))

    # From here SIGTERM drains instead of killing; the handler only writes to a pipe the main thread reads.
    wake_r, wake_w = os.pipe()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: os.write(wake_w, b"x"))
    if not args["skip_server_warmup"]:
        startup.pause(0.2)
        warmup(sim, host, port, startup.fail == "warmup")
    sim.state = "ready"
    log.info("The server is fired up and ready to roll!")

    os.read(wake_r, 1)
    sim.stop_accepting()
    log.warning("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    while True:
        remaining = sim.remaining()
        log.info(
            "Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=%r."
            % (len(remaining), remaining)
        )
        if not remaining:
            break
        time.sleep(DRAIN_POLL_S * startup.scale)
    httpd.shutdown()
    return 0


def main() -> None:
    try:
        code = serve(sys.argv[1:])
    except SimExit as exc:
        code = exc.code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # daemon threads (scheduler, HTTP) end with the process, as SGLang's children do


if __name__ == "__main__":
    main()
