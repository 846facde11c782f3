"""A Chrome-trace JSON file (the torch profiler's ``export_chrome_trace``), read as a stream of events.

SGLang's traces are gzip'd and reach hundreds of MB unpacked; ``json.load`` would hold the whole document and a
dict per event at once (several times the file in memory). Here the top-level object is walked by hand and each
``traceEvents`` element is decoded on its own with ``json.JSONDecoder.raw_decode`` over a sliding text buffer,
so memory stays at one buffer plus whatever the caller keeps of each event. Pure and stdlib only (Python 3.8+):
the host agent reads traces where they were written, and the client reads one an operator was sent.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
import zlib
from typing import IO, Any, Dict, Iterator, Optional, Tuple

CHUNK = 1 << 20  # bytes read at a time
LONGEST = 64 << 20  # characters one value may take: an event is a few hundred, a header value a few thousand
_WS = re.compile(r"[ \t\n\r]*")


class TraceError(Exception):
    """The file is not a readable Chrome trace; the message says what is wrong with it."""


def open_trace(path: str) -> IO[bytes]:
    """The file's bytes, unpacked when it is gzip'd (SGLang writes ``.trace.json.gz``; torch gzips by name)."""
    raw = open(path, "rb")
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


class _Text:
    """A growing window on the file's text: ``buf[pos:]`` is what is left to parse."""

    def __init__(self, stream: IO[bytes], name: str) -> None:
        self.stream = stream
        self.name = name
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Read the next chunk (dropping what was parsed already); False at the end of the file."""
        if self.eof:
            return False
        try:
            chunk = self.stream.read(CHUNK)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceError(
                "%s is cut short or damaged (%s); a trace still being written?" % (self.name, exc)
            ) from None
        if not chunk:
            self.eof = True
            tail = self.decoder.decode(b"", final=True)
        else:
            try:
                tail = self.decoder.decode(chunk)
            except UnicodeDecodeError:
                raise TraceError("%s is not UTF-8 text: not a Chrome trace" % self.name) from None
        self.buf = self.buf[self.pos :] + tail
        self.pos = 0
        return bool(chunk) or bool(tail)

    def skip_ws(self) -> str:
        """The next character that is not white space ('' at the end of the file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # _WS matches '' too
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        got = self.skip_ws()
        if not got or got not in chars:
            raise TraceError("%s is not a Chrome trace: expected %s, found %r" % (self.name, what, got or "the end"))
        self.pos += 1
        return got

    def value(self, decoder: json.JSONDecoder) -> Any:
        """The JSON value that starts here, reading on while it is incomplete."""
        self.skip_ws()
        while True:
            try:
                obj, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                # A value cut by the buffer's end fails too: read on; at the end of the file it is an error.
                if len(self.buf) - self.pos < LONGEST and self.more():
                    continue
                raise TraceError("%s is not valid JSON: %s" % (self.name, exc.msg)) from None
            if end == len(self.buf) and not self.eof and isinstance(obj, (int, float)):
                self.more()  # a number at the buffer's edge may go on in the next chunk
                continue
            self.pos = end
            return obj


def events(path: str, header: Optional[Dict[str, Any]] = None) -> Iterator[Dict[str, Any]]:
    """Each element of the trace's ``traceEvents``, in file order; the other top-level keys go into ``header``.

    Raises TraceError for a file that is not a Chrome trace (with the reason), never a JSON traceback.
    """
    try:
        stream = open_trace(path)
    except OSError as exc:
        raise TraceError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    with stream:
        for item in _walk(_Text(stream, path), header if header is not None else {}):
            yield item


def _walk(text: _Text, header: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    decoder = json.JSONDecoder()
    text.expect("{", "an object")
    seen_events = False
    if text.skip_ws() == "}":
        text.pos += 1
    else:
        while True:
            key = text.value(decoder)
            if not isinstance(key, str):
                raise TraceError("%s is not a Chrome trace: a key that is not a string" % text.name)
            text.expect(":", "':'")
            if key == "traceEvents":
                seen_events = True
                for item in _array(text, decoder):
                    yield item
            else:
                header[key] = text.value(decoder)
            if text.expect(",}", "',' or '}'") == "}":
                break
    if not seen_events:
        raise TraceError("%s holds no traceEvents: not a torch-profiler trace" % text.name)


def _array(text: _Text, decoder: json.JSONDecoder) -> Iterator[Dict[str, Any]]:
    text.expect("[", "the traceEvents list")
    if text.skip_ws() == "]":
        text.pos += 1
        return
    while True:
        item = text.value(decoder)
        if isinstance(item, dict):
            yield item
        if text.expect(",]", "',' or ']'") == "]":
            return


def span(event: Dict[str, Any]) -> Optional[Tuple[float, float]]:
    """(start, end) in µs of a complete (``ph`` X) event, None for any other or a malformed one."""
    if event.get("ph") != "X":
        return None
    ts, dur = event.get("ts"), event.get("dur")
    if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
        return None
    return float(ts), float(ts) + float(dur)
