"""The wire format: length-prefixed JSON messages, in both directions, after one hello line.

agent → client  {"hello": {...}}\\n                                     (once, a plain line: shell noise may precede it)
then every message, either way, is a frame: ``#`` + its length as 8 hex digits + ``\\n``, then that many bytes of
JSON. A frame carries any size up to ``MAX_FRAME`` whole (a line-based reader hands back pieces of a long line);
the agent answers a reply that would not fit with an error that says so.

client → agent  {"id": 7, "method": "jobs.list", "params": {...}}      (``"method": "cancel"`` stops request ``id``)
agent → client  {"id": 7, "result": ...} | {"id": 7, "error": {"message", "kind", "data"}}
agent → client  {"id": 7, "event": {...}}                              (pushed by a streaming method)
"""

from __future__ import annotations

import json

# typing only for the checker: importing it cost a one-shot CLI answer ~5 ms (quick.py)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Dict, Optional

    # A message, or a method's params and result, as JSON decodes it: string keys, any JSON value.
    JsonObject = Dict[str, Any]

PROTOCOL_VERSION = 2
MAX_FRAME = 64 << 20  # bytes of one message: a reply this big is a request to narrow, never a thing to wait for
HEADER_LEN = 10  # b"#" + 8 hex digits + b"\n"


class FrameError(ValueError):
    """The peer sent something that is not a frame: the stream is out of step and cannot be trusted on."""


def dumps(obj: JsonObject) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


def frame(payload: bytes) -> bytes:
    """``payload`` (one JSON message) as a frame; callers keep it under MAX_FRAME (see ``oversized``)."""
    return b"#%08x\n" % len(payload) + payload


def encode(obj: JsonObject) -> bytes:
    return frame(dumps(obj))


def encode_line(obj: JsonObject) -> bytes:
    """The hello: a line, so the client can find it among what a login shell prints first."""
    return dumps(obj) + b"\n"


def frame_length(header: bytes) -> int:
    """The payload length a frame header announces; FrameError for anything else or anything too big."""
    if len(header) != HEADER_LEN or header[:1] != b"#" or header[-1:] != b"\n":
        raise FrameError("not a frame header: %r" % header[:HEADER_LEN])
    try:
        size = int(header[1:-1], 16)
    except ValueError:
        raise FrameError("not a frame header: %r" % header) from None
    if size > MAX_FRAME:
        raise FrameError("a message of %s, over the %s one message may carry" % (mib(size), mib(MAX_FRAME)))
    return size


def read_frame(f: IO[bytes]) -> Optional[bytes]:
    """The next frame's payload from a blocking binary file, None at a clean end of input."""
    header = f.read(HEADER_LEN)
    if not header:
        return None
    size = frame_length(header)
    payload = f.read(size)
    if len(payload) != size:
        raise FrameError("the input ended inside a message (%d of %d bytes)" % (len(payload), size))
    return payload


def mib(size: int) -> str:
    return "%.1f MiB" % (size / (1 << 20))


def decode(line: bytes) -> JsonObject:
    """One message; FrameError with the reason for anything that is not one JSON object, however reading it
    fails: bad JSON or UTF-8, nesting deeper than the parser recurses (``[`` x 200,000 raises RecursionError),
    a document too big to hold."""
    try:
        obj = json.loads(line)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise FrameError("a message that is not JSON (%s): %r" % (exc, line[:80])) from None
    except RecursionError:
        raise FrameError("a message nested deeper than JSON can be read here: %r" % line[:80]) from None
    except MemoryError:
        raise FrameError("a message of %s that does not fit in memory once read" % mib(len(line))) from None
    if not isinstance(obj, dict):
        raise FrameError("a message that is not a JSON object: %r" % line[:80])
    return obj


# Bytes that JSON must escape (control characters but the newline, quote, backslash), and the newline.
_ESCAPED = bytes(c for c in range(32) if c != 10) + b'"\\'


def lines_json(block: bytes) -> bytes:
    """The JSON array of the lines in ``block`` (complete lines), exactly as ``json.dumps`` writes
    ``block.decode("utf-8", "replace").splitlines()``, but without a string per line when the block is plain
    ASCII with nothing to escape: a busy log's usual case, where it is most of what following costs."""
    if block.endswith(b"\n") and block.isascii() and len(block.translate(None, _ESCAPED)) == len(block):
        return b'["' + block[:-1].replace(b"\n", b'","') + b'"]'
    return json.dumps(block.decode("utf-8", "replace").splitlines(), separators=(",", ":")).encode()
