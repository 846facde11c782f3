"""A download's progress: bytes per second over a sliding window, events sent a few times a second whatever
the transfer speed, and the byte counts themselves, from huggingface_hub's own bar (``tqdm_class``) where the
version takes one, else from the size of its newest partial file. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple

from .drafter_folder import incomplete_files

PROGRESS_INTERVAL_S = 0.25  # a few events per second, whatever the transfer speed
SPEED_WINDOW_S = 3.0


class Rate:
    """Bytes per second over the last few seconds, from (time, bytes) samples."""

    def __init__(self) -> None:
        self.samples: List[Tuple[float, int]] = []

    def add(self, now: float, n: int) -> float:
        self.samples.append((now, n))
        while len(self.samples) > 2 and now - self.samples[1][0] >= SPEED_WINDOW_S:
            self.samples.pop(0)
        t0, n0 = self.samples[0]
        return (n - n0) / (now - t0) if now > t0 else 0.0


class Throttle:
    """Calls ``send(bytes, bytes_per_s)`` at most every PROGRESS_INTERVAL_S, and always for the last bytes."""

    def __init__(self, send: Callable[[int, float], None], total: Optional[int]) -> None:
        self.send = send
        self.total = total
        self.rate = Rate()
        self.last_sent = -1.0
        self.bytes = 0

    def update(self, n: int, force: bool = False) -> None:
        now = time.monotonic()
        self.bytes = n
        speed = self.rate.add(now, n)
        if force or now - self.last_sent >= PROGRESS_INTERVAL_S or (self.total is not None and n >= self.total):
            self.last_sent = now
            self.send(n, speed)


def bar_class(on_bytes: Callable[[int], None]) -> type:
    """A ``tqdm_class`` for huggingface_hub that forwards the byte count and draws nothing.

    It accepts whatever huggingface_hub passes (1.1–1.9 add ``name=`` and ``disable=None``, which would make a
    real tqdm hide itself or fail) and ignores every other bar of the same call (Xet opens a transfer bar
    next to its reconstruction bar): the first bar of a file is the one that counts.
    """
    state: Dict[str, object] = {"owner": None}

    class Bar:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.n = int(kwargs.get("initial") or 0)
            self.total = kwargs.get("total")
            if state["owner"] is None:
                state["owner"] = self
                on_bytes(self.n)

        def update(self, n: int = 1) -> None:
            self.n += n
            if state["owner"] is self:
                on_bytes(self.n)

        def close(self) -> None:
            pass

        def __enter__(self) -> "Bar":
            return self

        def __exit__(self, *exc: object) -> Literal[False]:
            return False

        def __getattr__(
            self, name: str
        ) -> Callable[..., None]:  # set_description, set_postfix_str, refresh, ...: nothing to draw
            # update_transfer would make huggingface_hub treat this bar as an aggregating one.
            if name.startswith("__") or name == "update_transfer":
                raise AttributeError(name)
            return lambda *a, **k: None

    return Bar


class IncompletePoller(threading.Thread):
    """For huggingface_hub without ``tqdm_class``: the size of the newest ``*.incomplete`` file is the
    progress of the file being downloaded (works on every version that downloads into ``local_dir``)."""

    def __init__(self, folder: str, on_bytes: Callable[[int], None]) -> None:
        super().__init__(daemon=True)
        self.folder = folder
        self.on_bytes = on_bytes
        self.stop = threading.Event()
        self.before = set(incomplete_files(folder))

    def run(self) -> None:
        while not self.stop.wait(PROGRESS_INTERVAL_S / 2):
            sizes = []
            for path in incomplete_files(self.folder):
                if path in self.before:
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # renamed into place between the listing and the stat
                sizes.append((st.st_mtime, st.st_size))
            if sizes:
                self.on_bytes(max(sizes)[1])
