"""Runs put straight into the run history, for tests that read them back."""

from __future__ import annotations

from backend.history import History, filter_tail
from backend.jobs import JobInfo
from backend.measure.metrics import Sample

T0 = 1_800_000_000.0
AQ = "/data/eagle3/aq_medai_k2"


def add_run(
    history: History, models: dict, job_id: str, drafter: str | None, tok: float, acc: float | None, streams: int = 1
) -> str:
    """A finished run of 30 one-second decode samples at ``streams`` running requests averaging ``tok`` tok/s per
    stream (SGLang logs ``streams`` times that) and ``acc`` accept length."""
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", models["target"], "--tp-size", "8"]
    if drafter:
        argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", models[drafter]]
    profile = {None: "baseline", "ours": "eagle3-ours", "aq-medai": "eagle3-aq"}[drafter]
    args = {"profile": profile, "drafter": drafter, "algorithm": "EAGLE3" if drafter else None, "port": 30000}
    job = JobInfo(job_id, state="cancelled", started=T0, ended=T0 + 40, args=args, argv=tuple(argv))
    run = history.upsert_run("local", job)
    samples = [
        Sample(ts=T0 + 5 + i, kind="decode", gen_tps=(tok + (i % 3 - 1)) * streams, accept_len=acc, running_req=streams)
        for i in range(30)
    ]
    assert history.import_chunk(run, 0, 1000, samples, filter_tail([], samples))
    return run


def add_benched_run(
    history: History, n: int, steps: int, cycle: float, tok_s: float, histogram: list | None, sweep: str | None = None
) -> str:
    """Run ``serve-<n>`` of AQ-MedAI's drafter at ``steps`` draft steps on host ``box``, with a bench measuring
    ``cycle`` ms and ``tok_s`` (and the acceptance ``histogram``, when given)."""
    argv = ["python", "-m", "sglang.launch_server", "--speculative-draft-model-path", AQ]
    argv += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1"]
    args = {"profile": "eagle3-aq", "drafter": "aq-medai", "algorithm": "EAGLE3", "sweep": sweep, "point": n}
    job = JobInfo(f"serve-{n}", args=args, argv=tuple(argv), state="done", started=1000.0 + n)
    run_id = history.upsert_run("box", job)
    acceptance = {"histogram": histogram, "verify_ct": sum(histogram)} if histogram else None
    result = {"tok_s": tok_s, "accept_len": 2.0, "cycle_ms": cycle, "server_job": job.id, "acceptance": acceptance}
    history.record_bench("box", JobInfo(f"bench-{n}", state="done", ended=2000.0 + n), result)
    return run_id


def record_run(
    job_id: str,
    profile: str,
    tok_s: float,
    accept: float | None,
    baseline: bool = False,
    started: float = 0.0,
    host: str = "local",
    streams: int = 1,
) -> str:
    """A finished run of ``host`` in the history: 30 one-second samples at ``streams`` running requests averaging
    ``tok_s`` per stream and ``accept``."""
    t0 = 1_800_000_000.0 + started
    job = JobInfo(job_id, state="done", started=t0, ended=t0 + 40, args={"profile": profile})
    samples = [
        Sample(t0 + i, "decode", gen_tps=(tok_s + (i % 3 - 1)) * streams, accept_len=accept, running_req=streams)
        for i in range(30)
    ]
    with History.open() as history:
        run = history.upsert_run(host, job)
        assert history.import_chunk(run, 0, 1000, samples, filter_tail([], samples))
        if baseline:
            history.set_baseline(run)
    return run
