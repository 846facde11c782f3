"""Where SGLang's record starts on a log line: the one rule every reader of a server log follows.

SGLang writes ``[YYYY-MM-DD HH:MM:SS{.mmm}{ ranks}] message`` (``.mmm`` with SGLANG_LOG_MS=1; ranks such as
``DP0 TP0 EP0``). What operators paste often has something before it: ANSI colour codes, a Ray actor's
``(CommandActor pid=123)`` when SGLang runs under Ray, ``docker compose logs``' ``sglang-1  | ``, or a
notebook's own output on the same line
(``1. Country:[2025-01-23 19:35:34 TP0] Decode batch. …``). The record starts at the prefix wherever it is on
the line; a line without one is read from after any colour codes, whitespace and actor prefix. Deployments
that give SGLang's loggers a format of their own write ``YYYY-MM-DD HH:MM:SS LEVEL PID [ranks file.py:N] ``
(SGLang PR 11854's runbook); that prefix is read the same way.

Used by the phases scan here on the host and by ``backend.measure.metrics`` (parse-log, the Live feed, history
imports) on the client. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

# SGLang's prefix: stamp, optional milliseconds, then rank names (DP PP ATTN_CP MOE_DP TP EP with a number).
PREFIX = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d{3}))?((?: [A-Z][A-Z_]*\d+)*)\] ?")
# A logging format of the deployment's own: stamp, level, pid, then the ranks and the source line in brackets.
CUSTOM = re.compile(
    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d{3}))? [A-Z]+ \d+ \[((?:[A-Z][A-Z_]*\d+ )*)[\w.-]+\.py:\d+\] "
)
# What may stand before a record without a prefix: colour codes, whitespace, one or more ``(Actor pid=N)``,
# docker compose's ``service-1  | ``.
LEAD = re.compile(r"(?:\x1b\[[0-9;?]*[A-Za-z]|\s|\([^()\n]*\)|[\w.-]+[-_]\d+ +\|)*")


class Record(NamedTuple):
    """Where one line's record starts, and what its prefix says (None and "" without one)."""

    stamp: Optional[str]  # "2025-01-23 19:35:34"
    millis: Optional[str]  # "118" with SGLANG_LOG_MS=1
    ranks: str  # "DP0 TP0", "" without ranks
    start: int  # index of the message on the line


def record(line: str) -> Record:
    """The record in one log line: its prefix wherever it is, else the text after colour codes and actors."""
    found = PREFIX.search(line)
    if found is None:
        found = CUSTOM.search(line)
    if found is not None:
        return Record(found.group(1), found.group(2), found.group(3).strip(), found.end())
    return Record(None, None, "", LEAD.match(line).end())  # type: ignore[union-attr]  # LEAD matches '' too


# SGLang's adaptive step count (--speculative-adaptive) as its log says it, format strings read from the 0.5.23
# wheel: the tier the worker swaps to ("Switch adaptive runtime state: steps A -> B, draft_tokens …",
# speculative/eagle_worker_v2.py:1866-1872; 0.5.12+), and a batch-size slot's decision ("Adaptive spec params
# updated: steps A -> B (ema_accept_len=…)", speculative/adaptive_spec_params.py:266-270; 0.5.11's v1 worker
# switched on it directly).
TIER_SWITCH = re.compile(r"Switch adaptive runtime state: steps (\d+) -> (\d+)")
TIER_DECIDED = re.compile(r"Adaptive spec params updated: steps (\d+) -> (\d+)")
# The tier it starts on, said once when the worker is built (adaptive_spec_params.py:298-303).
TIER_START = re.compile(r"AdaptiveSpeculativeParams initialized: steps=(\d+)")


class Tier(NamedTuple):
    steps: int  # the tier now in force (or decided, for a slot's line)
    switch: bool  # the worker's own switch line (else a slot's decision, or the start)
    start: bool = False  # the tier the server starts on


def tier_line(message: str) -> Optional[Tier]:
    """The adaptive tier a log message announces, or None for any other message."""
    if "daptive" not in message:  # "Switch adaptive …", "Adaptive spec …", "AdaptiveSpec…": a quick no otherwise
        return None
    found = TIER_SWITCH.search(message)
    if found:
        return Tier(int(found.group(2)), True)
    found = TIER_DECIDED.search(message)
    if found:
        return Tier(int(found.group(2)), False)
    found = TIER_START.search(message)
    return Tier(int(found.group(1)), False, True) if found else None
