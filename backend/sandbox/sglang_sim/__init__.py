"""SIMULATED SGLang server for the specdeck sandbox: not SGLang, no GPU, no model weights read.

Run as ``python -m backend.sandbox.sglang_sim <sglang.launch_server flags>``: the sandbox host's launcher is
this instead of ``python -m sglang.launch_server``. It speaks one SGLang release, 0.5.23 (the default) or
0.5.6, named by env ``SPECDECK_SIM_SGLANG_VERSION`` (the sandbox host's ``sglang_version``): it parses the
flags with that release's flag table (``backend.sglang.flags``), logs what that release logs (rank prefixes,
startup milestones, ``Prefill batch`` and ``Decode batch`` lines and what their accept rate counts, failure
signatures; ``SGLANG_LOG_MS`` and ``SGLANG_LOG_FORWARD_ITERS`` honoured), and serves its HTTP endpoints,
Prometheus names and per-request ``meta_info``, so the panel cannot tell it from the real server except where
it says so: the first log line says SIMULATED, ``/server_info`` has ``"simulated": true`` and ``version``
``0.5.23-sim``.

Where things live (a module per part; each says more in its own docstring):
- ``server``: the process: flags, startup, HTTP, ready, SIGTERM drain (``main``, what ``__main__`` runs).
- ``dialect``: what the release changes (its label, 0.5.23's names and counts).
- ``args``: ``--config`` and the defaults and checks ServerArgs fills (``resolve_args``); ``launcher``: the
  tracebacks the launcher process prints when one refuses, per release.
- ``folders``: model folders: config.json, weight files, the EAGLE-3 drafter's shapes.
- ``startup``: the launch sequence (weights, KV cache, CUDA graphs, the drafter), its failures, the warmup; it
  returns the speculative model the engine decodes with (a dict: steps, draft tokens, rates per position).
- ``timing``: the timing and acceptance model (``pass_ms``, ``drafter_rates``); ``scenario``: a scenario file
  that replaces it.
- ``spec``: adaptive speculation (``--speculative-adaptive``): its arg hooks and the tiers a decode batch is
  routed to.
- ``engine``: the scheduler: requests, prefill and decode passes, their log lines and gauges.
- ``idle``: the idle scheduler's self-check of the gauges.
- ``metrics``: the ``/metrics`` page; ``histograms``: its latency histograms.
- ``api``: the HTTP routes, the server state they read, ``meta_info``; ``loads``: the load endpoint's answer.
- ``log``: log lines, rank prefixes, tracebacks, ``SimExit``.
- ``multinode``: ``--nnodes`` > 1: the rendezvous, rank ≥ 1's dummy health server, a peer's death.
- ``traces``: the profiler's traces.

A new speculative algorithm touches, in order: ``args.resolve_args`` (its defaults and checks; a policy of its
own in a module beside them, as ``spec`` is adaptive's), ``startup.Startup.run`` (loading its drafter and the
speculative model it returns), ``timing`` (what its cycle costs and what it accepts), ``engine`` (``_decode`` and
``_log_decode``: where a cycle's acceptance is drawn and logged) and ``api.spec_meta_info`` (what its requests
report).

Where it differs from SGLang 0.5.6, on purpose: a crash exits with status 1 and a drained SIGTERM with 0
(SGLang SIGKILLs its own process tree in both cases); one scheduler serves every DP rank; memory figures and
resolved defaults are invented but follow SGLang's arithmetic. Stdlib only (PyYAML for --config, as SGLang),
Python 3.8+.
"""
