"""How the `specdeck` process ends, the quick answer and the full CLI alike: without the interpreter's teardown
(``end``), and quietly when stdout's reader went away (``stdout_closed``). Below both entries (``quick.py``,
``main.py``); stdlib only, so the quick path stays light.
"""

from __future__ import annotations

import atexit
import os
import select
import sys
import threading


def end(code: int) -> None:
    """End the process as the interpreter's own exit would, without its teardown of every module and object:
    after a command over SSH (asyncssh, cryptography, asyncio loaded) that teardown alone took ~30 ms of a
    ~400 ms cold `specdeck ping`. What an exit must still do is done here first: non-daemon threads joined
    (``threading._shutdown``, which wakes idle executor workers first), atexit functions run (logging's flush,
    weakref finalizers such as a TemporaryDirectory's), stdout and stderr flushed. Returns (and the normal exit
    follows) where either private function is missing."""
    shutdown = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exitfuncs is None:
        return
    shutdown()
    run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = code or 141  # the reader went away (`| head`): quietly, as a SIGPIPE'd Unix tool
    except (OSError, ValueError):
        code = code or 120  # what the interpreter's exit returns when it cannot flush stdout
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def stdout_closed() -> bool:
    """Whether stdout's reader is gone (a pipe with no reader polls as an error); if so, stdout points at
    /dev/null from now on, so the flush at exit cannot complain about the same broken pipe."""
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        if not any(ev & select.POLLERR for _, ev in poll.poll(0)):
            return False
    except (OSError, ValueError):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return True
