"""Text a host supplied, made safe to show in a terminal.

A log line, an error or hint quoted from a log, a GPU name or a job's arguments come from the host, where
anything that writes to a server's output can put bytes in them. Written as they are, ``ESC]52;c;…`` writes the
operator's clipboard, ``ESC]0;…`` the window title, ``ESC[2J`` clears what came before. ``visible`` shows every
C0 and C1 control but newline and tab as a visible escape (``\\x1b``), as OpenSSH's scp came to print remote
names (CVE-2019-6109) and journalctl shows such entries; valid UTF-8 stays as it is, undecodable bytes (and
the lone surrogates they leave behind) become U+FFFD.

One place in each layer applies it: the CLI's entry wraps stdout and stderr in ``VisibleStream`` (``guarded``),
so every print passes through it; the panel applies it to every line any widget draws (``tui/visiblefilter.py``).
"""

from __future__ import annotations

import re
import sys

TYPE_CHECKING = False  # typing only for the checker: the quick `ping` path imports this (see cli/quick.py)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, TextIO

# C0 but tab and newline, DEL, C1; lone surrogates (a surrogateescape'd byte) cannot be written as UTF-8.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    return "\ufffd" if char >= "\ud800" else f"\\x{ord(char):02x}"


def visible(text: str | bytes) -> str:
    """``text`` as a terminal may show it: controls but newline and tab as ``\\xNN``, bad bytes as U+FFFD."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return _UNSAFE.sub(_shown, text)


def unsafe(text: str) -> bool:
    """Whether ``visible`` would change ``text``."""
    return _UNSAFE.search(text) is not None


class VisibleStream:
    """A text stream whose writes pass through ``visible``; everything else is the stream beneath (``inner``)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(visible(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class guarded:
    """``with guarded():`` stdout and stderr are ``VisibleStream``s for the block (already guarded: as they are)."""

    def __enter__(self) -> None:
        self.saved = sys.stdout, sys.stderr
        if not isinstance(sys.stdout, VisibleStream):
            sys.stdout = VisibleStream(sys.stdout)
        if not isinstance(sys.stderr, VisibleStream):
            sys.stderr = VisibleStream(sys.stderr)

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self.saved


def unguarded(stream: TextIO) -> TextIO:
    """The stream beneath a ``VisibleStream``: for the CLI's own control sequences and `logs --raw`."""
    return stream.inner if isinstance(stream, VisibleStream) else stream
