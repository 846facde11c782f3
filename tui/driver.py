"""The terminal driver: Textual's Linux driver with an input thread that sleeps until there is input.

Textual 8.2.8's ``LinuxDriver`` waits for keys with ``select(0.1)`` in a loop, so a panel left open wakes ten
times a second with nothing to read (about a third of an idle screen's cost). Its loop exists for two things:
noticing ``exit_event`` (the app stopping or suspending) and the parser's timeout (a lone ESC is a key only
once no sequence follows it). Here the thread waits on the terminal and on a wake-up pipe with no timeout,
except while the parser holds such a pending sequence; stopping input writes to the pipe first.
"""

from __future__ import annotations

import contextlib
import os
import selectors
from codecs import getincrementaldecoder
from typing import Any

from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class QuietLinuxDriver(LinuxDriver):
    """``LinuxDriver`` whose input thread blocks until a key, a mouse event, a parser timeout or the end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)  # a second wake-up while one is unread is no wait; draining never waits

    def disable_input(self) -> None:
        # The byte stays unread until the thread has ended (it keeps the pipe readable, so the thread cannot
        # block again before Textual sets exit_event, a few lines on); then it is drained for the next start.
        if not self.exit_event.is_set() and self._wake_w >= 0:
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"x")
        super().disable_input()
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self._wake_r, 64)

    def close(self) -> None:
        super().close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1  # closed: never written again (the number may be another file's now)

    def run_input_thread(self) -> None:
        """Textual's loop (same parser, decoding and events), waiting only as long as something can happen."""
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def process(events: list[tuple[selectors.SelectorKey, int]]) -> None:
            for key, _ in events:
                if key.fd == self._wake_r:
                    continue  # stopping: the loop's test sees exit_event
                data = decode(os.read(self.fileno, 1024 * 4))
                if not data:  # the end of a piped stdin: nothing more to wait for there
                    selector.unregister(self.fileno)
                for event in parser.feed(data) if data else ():
                    self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        def timeout() -> float | None:
            due = parser._timeout_time  # set while a sequence (a lone ESC) waits for its next byte
            return None if due is None else max(0.0, due - get_time())

        try:
            while not self.exit_event.is_set():
                process(selector.select(timeout()))
            for event in parser.tick():
                self.process_message(event)
        finally:
            selector.close()
            with contextlib.suppress(EOFError, ParseError):
                for _ in parser.feed(""):
                    pass
