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
