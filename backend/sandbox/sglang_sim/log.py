"""SIMULATED SGLang's log: its ``[YYYY-MM-DD HH:MM:SS{ranks}] message`` lines and uvicorn's, the scheduler
ranks' prefixes, tracebacks with the frames SGLang's own would show (paths under its site-packages), and
``SimExit``, which ends the process once its last lines are written.

Shared by every part of the server (``args``, ``engine``, ``startup``, ``api``, ``server``) and a node of a
multi-node server (``multinode``). Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, List

_SITE = "/usr/local/lib/python3.12/dist-packages/sglang"


def env_flag(name: str) -> bool:
    """An SGLang boolean environment variable (``envs.X.get()``): 1/true/yes/on."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class SimExit(Exception):
    """Ends the simulated server with ``code`` after its last lines were logged."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Log:
    """SGLang's ``[YYYY-MM-DD HH:MM:SS{ranks}] message`` lines on stderr; uvicorn access lines on stdout."""

    def __init__(self, level: str = "info") -> None:
        self._lock = threading.Lock()
        self._quiet = level.lower() in ("warning", "error", "critical")
        self._ms = env_flag("SGLANG_LOG_MS")  # `[2026-10-14 09:16:13.517 TP0]`, as configure_logger writes it

    def stamp(self, ms: bool = True) -> str:
        now = time.time()
        text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        return text + ".%03d" % (int(now * 1000) % 1000) if ms and self._ms else text

    def _write(self, stream: Any, text: str) -> None:
        with self._lock:
            stream.write(text + "\n")
            stream.flush()

    def info(self, message: str, ranks: str = "") -> None:
        if not self._quiet:
            self._write(sys.stderr, "[%s%s] %s" % (self.stamp(), ranks, message))

    def warning(self, message: str, ranks: str = "") -> None:
        self._write(sys.stderr, "[%s%s] %s" % (self.stamp(), ranks, message))

    error = warning

    def uvicorn(self, level: str, message: str) -> None:
        self._write(sys.stderr, "[%s] %-9s %s" % (self.stamp(ms=False), level + ":", message))

    def access(self, client: str, request_line: str, status: int, phrase: str) -> None:
        if not self._quiet:
            line = '[%s] INFO:     %s - "%s" %d %s' % (self.stamp(ms=False), client, request_line, status, phrase)
            self._write(sys.stdout, line)


def rank_prefixes(dp: int, pp: int, tp: int, ep: int) -> List[str]:
    """The log prefix of every scheduler rank, SGLang's order: `` DP0 PP0 TP0 EP0`` (each only when > 1)."""
    out = []
    for d in range(dp):
        for p in range(pp):
            for t in range(tp):
                prefix = " DP%d" % d if dp > 1 else ""
                prefix += " PP%d" % p if pp > 1 else ""
                prefix += " TP%d" % t if tp > 1 else ""
                prefix += " EP%d" % (t // max(1, tp // ep)) if ep > 1 else ""
                out.append(prefix)
    return out


def traceback_text(frames: List[str], error: str) -> str:
    """A Python traceback block; each frame is ``"path-under-sglang:line function | source"`` (``../`` leads to
    another package beside it: ``../transformers/utils/hub.py``)."""
    lines = ["Traceback (most recent call last):"]
    for frame in frames:
        where, source = frame.split(" | ", 1)
        location, func = where.split(" ", 1)
        path, line = location.rsplit(":", 1)
        where = os.path.dirname(_SITE) + path[2:] if path.startswith("../") else "%s/%s" % (_SITE, path)
        lines.append('  File "%s", line %s, in %s' % (where, line, func))
        lines.append("    " + source)
    lines.append(error)
    return "\n".join(lines)


# The frames every scheduler rank's traceback starts with.
SCHEDULER_FRAMES = [
    "srt/managers/scheduler.py:2654 run_scheduler_process | scheduler = Scheduler(",
    "srt/managers/scheduler.py:312 __init__ | self.init_model_worker()",
]
