"""The wire format: one JSON object per line, in both directions.

client → agent  {"id": 7, "method": "jobs.list", "params": {...}}      (``"method": "cancel"`` stops request ``id``)
agent → client  {"id": 7, "result": ...} | {"id": 7, "error": {"message", "kind", "data"}}
agent → client  {"id": 7, "event": {...}}                              (pushed by a streaming method)
agent → client  {"hello": {...}}                                       (once, when the agent is up)
"""

from __future__ import annotations

import json

PROTOCOL_VERSION = 1


def encode(obj: dict) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode()


def decode(line: bytes) -> dict:
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
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
