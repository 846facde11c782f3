"""Adaptive runs seen: the step tier SGLang holds now (``serve status``'s ``spec_steps_now``), read from the log
lines SGLang writes when it switches and from ``/server_info``'s ``internal_states``.

No real log of an adaptive switch was found (research notes of issue 36, real/INDEX.md); the lines here are
made from SGLang 0.5.23's own format strings, quoted with their place in the wheel:
- ``"Switch adaptive runtime state: " f"steps {old} -> {new}, " f"draft_tokens {old+1} -> {new+1}"``
  (speculative/eagle_worker_v2.py:1866-1872), the worker's swap;
- ``f"Adaptive spec params updated: steps {old_steps} -> {target} " f"(ema_accept_len={ema:.2f})"``
  (speculative/adaptive_spec_params.py:266-270), a batch-size slot's decision.
"""

from __future__ import annotations

from backend.agent.host.serve import LogScan, _steps_now
from backend.agent.host.shared.logline import tier_line

STAMP = "[2026-10-30 12:00:0{}.{:03d} TP0] "


def line(i: int, message: str) -> str:
    return STAMP.format(i % 10, i) + message


def switch(old: int, new: int) -> str:
    return f"Switch adaptive runtime state: steps {old} -> {new}, draft_tokens {old + 1} -> {new + 1}"


def decided(old: int, new: int, ema: float) -> str:
    return f"Adaptive spec params updated: steps {old} -> {new} (ema_accept_len={ema:.2f})"


def test_the_tier_lines_of_sglangs_log():
    assert tier_line(switch(3, 5)) == (5, True)
    assert tier_line(decided(5, 1, 0.12)) == (1, False)
    assert tier_line("Decode batch, #running-req: 1, accept len: 2.00") is None


def test_the_tier_in_force_is_the_workers_last_switch():
    scan = LogScan()
    args = {"algorithm": "EAGLE3", "adaptive": True, "steps": 3}
    assert _steps_now(scan, args) == 3  # nothing said yet: the steps it was launched with
    scan.feed(line(1, decided(3, 5, 4.61)))  # 0.5.11's worker switched on the decision itself
    assert _steps_now(scan, args) == 5
    scan.feed(line(2, switch(5, 7)))
    scan.feed(line(3, decided(7, 5, 4.2)))  # a slot's decision: the worker's switch line comes with the next batch
    assert _steps_now(scan, args) == 7
    scan.feed(line(4, switch(7, 5)))
    scan.feed("[2026-10-30 12:00:05 TP1] " + switch(5, 1))  # another rank's line: rank 0 speaks
    assert _steps_now(scan, args) == 5
    assert _steps_now(LogScan(), {"algorithm": None}) is None  # no speculation: no steps at all
    fixed = LogScan()
    fixed.server_info = {"speculative_num_steps": 4}
    assert _steps_now(fixed, {"algorithm": "EAGLE3"}) == 4  # as resolved
