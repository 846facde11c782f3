"""Issue 18 budgets: the advisor over a 10,000-request history (every request's histogram and decode rate
resampled into every row's interval), and what its interval costs against a bootstrap over requests.

The history: five runs of one drafter at 1..5 draft steps, 2,000 requests each, eight prompts. The advisor's
interval is cluster-robust (a sandwich over the requests, then 400 normal draws of the rates and the cost
line); the alternative measured in the same run is a bootstrap that resamples whole requests and recomputes
the per-position rates from each resample (40 resamples timed, scaled to 400).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from backend.agent.host.shared.acceptance import reach
from backend.agent.host.shared.acceptance_model import Acceptance
from backend.agent.host.shared.advice import REPLICATES
from backend.history import History, Yardstick
from backend.jobs import JobInfo
from backend.tune import advisor
from bench.harness import Row, median_ms, timeit

ISSUE = 18
ADVISE_BUDGET_MS = 200.0
REQUESTS = 2000  # per run, five runs
RATES = [0.86, 0.81, 0.74, 0.7, 0.66]
AQ = "/data/eagle3/aq_medai_k2"


def _requests(steps: int, rng: random.Random) -> list[dict]:
    out = []
    for i in range(REQUESTS):
        ease = rng.gauss(1.0, 0.06)
        h = [0] * (steps + 1)
        for _ in range(40):
            k = 0
            while k < steps and rng.random() < RATES[k] * ease:
                k += 1
            h[k] += 1
        length = 1 + sum(j * c for j, c in enumerate(h)) / 40
        out.append({"spec_histogram": h, "decode_tok_s": 1000 * length / (24 + 3 * steps), "spec_verify_ct": 40,
                    "spec_proposed": 40 * steps, "prompt": i % 8})  # fmt: skip
    return out


def _history(path: Path) -> list:
    rng = random.Random(18)
    with History.open(path) as history:
        for n, steps in enumerate(range(1, 6), 1):
            argv = ("python", "-m", "sglang.launch_server", "--speculative-draft-model-path", AQ,
                    "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1")  # fmt: skip
            args = {"profile": "eagle3-aq", "drafter": "aq-medai", "algorithm": "EAGLE3"}
            job = JobInfo(f"serve-{n}", args=args, argv=argv, state="done", started=1000.0 + n)
            history.upsert_run("box", job)
            per_request = _requests(steps, rng)
            total = [sum(col) for col in zip(*(r["spec_histogram"] for r in per_request), strict=True)]
            tok_s = sum(r["decode_tok_s"] for r in per_request) / REQUESTS
            result = {"tok_s": tok_s, "accept_len": 1 + sum(j * c for j, c in enumerate(total)) / sum(total),
                      "server_job": job.id, "acceptance": {"histogram": total, "verify_ct": sum(total)},
                      "per_request": per_request}  # fmt: skip
            result["cycle_ms"] = 1000 * result["accept_len"] / tok_s
            history.record_bench("box", JobInfo(f"bench-{n}", state="done", ended=2000.0 + n), result)
        return history.runs()


def _bootstrap(histograms: list[list[int]], replicates: int = REPLICATES) -> list[list[float]]:
    """The alternative: resample whole requests, recompute a_i from each resample."""
    rng = random.Random(0)
    reached = [reach(h) for h in histograms]
    out = []
    for _ in range(replicates):
        picks = [reached[rng.randrange(len(reached))] for _ in reached]
        width = max(len(r) for r in picks)
        t = [sum(r[i] for r in picks if len(r) > i + 1) for i in range(width - 1)]
        s = [sum(r[i + 1] for r in picks if len(r) > i + 1) for i in range(width - 1)]
        out.append([si / ti for si, ti in zip(s, t, strict=True) if ti])
    return out


def run() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="specdeck-bench-advisor-") as tmp:
        runs = _history(Path(tmp) / "h.sqlite3")
    yardstick = Yardstick(82.0, 30.0)
    advise_ms = median_ms(timeit(lambda: advisor.advise(runs, yardstick), 5))
    requests = [(n, r) for n, run in enumerate(runs) for r in run.bench["result"]["per_request"]]
    hists = [r["spec_histogram"] for _, r in requests]
    clusters = [(n, r["prompt"]) for n, r in requests]  # the advisor's clusters: a run's prompt
    sandwich_ms = median_ms(timeit(lambda: Acceptance(hists, clusters).draws(random.Random(0), REPLICATES), 5))
    # The bootstrap takes seconds a resample over 10,000 requests: 40 of them, scaled to 400.
    bootstrap_ms = median_ms(timeit(lambda: _bootstrap(hists, REPLICATES // 10), 1)) * 10
    advice = advisor.advise(runs, yardstick)
    widths = [r.tok_s_high - r.tok_s_low for r in advice.rows if r.tok_s_high is not None and r.tok_s_low is not None]
    return [
        Row(
            ISSUE,
            f"advise over {len(hists):,} requests (5 runs), median ≤ {ADVISE_BUDGET_MS:.0f} ms",
            f"{advise_ms:.0f} ms",
            f"rows' 95% width {min(widths):.1f}-{max(widths):.1f} tok/s",
            advise_ms <= ADVISE_BUDGET_MS,
        ),
        Row(
            ISSUE,
            f"its interval: sandwich + {REPLICATES} draws, ≤ bootstrap over requests",
            f"{sandwich_ms:.1f} ms",
            f"bootstrap, {REPLICATES} resamples: {bootstrap_ms:.0f} ms ({bootstrap_ms / max(sandwich_ms, 1e-3):.0f}×)",
            sandwich_ms <= bootstrap_ms,
        ),
    ]
