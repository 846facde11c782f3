"""Read and validate a safetensors header without touching the data: 8 bytes, then the JSON; size from stat.

Validation follows the safetensors library (``safetensors/src/tensor.rs``, ``read_metadata`` and
``Metadata::validate``) rule by rule, so a file we accept is a file the library loads, and every refusal is a
``CheckpointError`` naming the file and the rule. Stdlib only, Python 3.8+: the host agent and the client
share it.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Set, Tuple

# Bits per element, in the library's enum order: writers sort by this order (descending), then by name.
DTYPES = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

MAX_HEADER = 100_000_000  # the library's MAX_HEADER_SIZE
_USIZE_MAX = (1 << 64) - 1
_FIXES = "re-download or re-save the file"


class CheckpointError(Exception):
    """A checkpoint that cannot be used as it is; ``rule`` names the broken rule, ``path`` the file."""

    def __init__(self, path: str, rule: str, detail: str, fix: str = _FIXES) -> None:
        super().__init__("%s: %s; %s." % (path, detail, fix))
        self.path = path
        self.rule = rule


if TYPE_CHECKING:
    _JsonObject = Dict[str, Any]
else:
    _JsonObject = dict  # Dict[str, Any] is not a plain dict subclass at run time on Python 3.8


class _Object(_JsonObject):
    """A decoded JSON object that remembers which of its keys were repeated (the library refuses some)."""

    repeated: FrozenSet[str] = frozenset()


def _object(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        seen: Set[str] = set()
        repeated: Set[str] = set()
        for key, _ in pairs:
            if key in seen:
                repeated.add(key)
            seen.add(key)
        obj.repeated = frozenset(repeated)
    return obj


def _no_constant(name: str) -> None:
    raise ValueError("%s is not JSON" % name)


def _is_usize(value: Any) -> bool:
    return type(value) is int and 0 <= value <= _USIZE_MAX


def _is_text(value: Any) -> bool:
    """A string the library's strict UTF-8 decoding accepts (no lone surrogates from ``\\ud800`` escapes)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode_header(text_bytes: bytes, name: str) -> Dict[str, Any]:
    """The header JSON as a dict, or ``CheckpointError`` (rules ``utf8``, ``json``, ``not_object``)."""
    try:
        text = text_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(name, "utf8", "the header is not valid UTF-8 (byte %d)" % exc.start) from None
    try:
        obj = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(
            name, "json", "the header is not valid JSON (%s)" % str(exc).split("\n")[0][:120]
        ) from None
    if not isinstance(obj, dict):
        raise CheckpointError(name, "not_object", "the header is JSON but not an object")
    return obj


def _entry(tensor: str, info: Any, name: str) -> Tuple[str, List[int], int, int]:
    """(dtype, shape, begin, end) of one tensor entry, checked field by field."""
    if not isinstance(info, dict):
        raise CheckpointError(name, "entry", "tensor %r is not an object with dtype, shape and data_offsets" % tensor)
    repeated = getattr(info, "repeated", ())
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise CheckpointError(name, "entry", "tensor %r has no %s" % (tensor, key))
        if key in repeated:
            raise CheckpointError(name, "entry", "tensor %r gives %s twice" % (tensor, key))
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not _is_text(dtype) or dtype not in DTYPES:
        raise CheckpointError(
            name,
            "dtype",
            "tensor %r has unknown dtype %s" % (tensor, json.dumps(dtype, ensure_ascii=True)[:40]),
        )
    if not isinstance(shape, list) or not all(_is_usize(d) for d in shape):
        raise CheckpointError(
            name,
            "shape",
            "tensor %r has shape %s, not a list of non-negative integers" % (tensor, _short(shape)),
        )
    if not (isinstance(offsets, list) and len(offsets) == 2 and _is_usize(offsets[0]) and _is_usize(offsets[1])):
        raise CheckpointError(
            name,
            "offsets",
            "tensor %r has data_offsets %s, not [begin, end] integers" % (tensor, _short(offsets)),
        )
    return dtype, shape, offsets[0], offsets[1]


def _short(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)[:60]


def validate_header(obj: Dict[str, Any], name: str) -> Dict[str, Any]:
    """Check a decoded header object; returns ``{"metadata", "tensors", "data_len"}``.

    ``tensors`` maps name → ``{"dtype", "shape", "bytes", "data_offsets"}`` in data order. Rules:
    ``metadata``, ``entry``, ``dtype``, ``shape``, ``offsets``, ``contiguous``, ``misaligned``, ``span``.
    """
    repeated = getattr(obj, "repeated", ())
    if "__metadata__" in repeated:
        raise CheckpointError(name, "metadata", "the header gives __metadata__ twice")
    metadata = obj.get("__metadata__")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict) or not all(_is_text(k) and _is_text(v) for k, v in metadata.items()):
        raise CheckpointError(name, "metadata", "__metadata__ is not a map of strings to strings")
    entries = []
    for tensor, info in obj.items():
        if tensor == "__metadata__":
            continue
        if not _is_text(tensor):
            raise CheckpointError(name, "entry", "a tensor name is not valid UTF-8 text")
        dtype, shape, begin, end = _entry(tensor, info, name)
        entries.append(((begin, end), tensor, dtype, shape))
    # Like the library: sort by offsets, then demand one contiguous run from 0 with exact spans.
    entries.sort(key=lambda e: e[0])
    tensors = {}  # type: Dict[str, Dict[str, Any]]
    position = 0
    for (begin, end), tensor, dtype, shape in entries:
        if begin != position or end < begin:
            raise CheckpointError(
                name,
                "contiguous",
                "tensor %r has data_offsets [%d, %d]; the data must continue from %d with no gap or overlap"
                % (tensor, begin, end, position),
            )
        position = end
        numel = 1
        for dim in shape:
            numel *= dim
        bits = numel * DTYPES[dtype]
        if bits % 8:
            raise CheckpointError(
                name,
                "misaligned",
                "tensor %r (%s %s) does not fill a whole number of bytes" % (tensor, dtype, shape),
            )
        if bits // 8 != end - begin:
            raise CheckpointError(
                name,
                "span",
                "tensor %r is %s %s = %d bytes but its data_offsets span %d bytes"
                % (tensor, dtype, shape, bits // 8, end - begin),
            )
        tensors[tensor] = {"dtype": dtype, "shape": shape, "bytes": end - begin, "data_offsets": [begin, end]}
    return {"metadata": dict(metadata), "tensors": tensors, "data_len": position}


def parse_header(raw: bytes, file_size: int, name: str) -> Dict[str, Any]:
    """Validate a safetensors file from its first bytes (the 8-byte length and the header; more is ignored).

    Returns ``{"metadata": {...}, "tensors": {name: {"dtype", "shape", "bytes", "data_offsets"}},
    "header_len": N}``; raises ``CheckpointError`` for every way the safetensors library would refuse it.
    """
    if file_size < 8 or len(raw) < 8:
        raise CheckpointError(name, "too_small", "the file is %d bytes, too small for a safetensors header" % file_size)
    n = int.from_bytes(raw[:8], "little")
    if n > MAX_HEADER:
        raise CheckpointError(
            name, "header_too_large", "the header claims %d bytes, over the 100 MB safetensors limit" % n
        )
    if 8 + n > file_size or 8 + n > len(raw):
        raise CheckpointError(
            name,
            "header_length",
            "the header claims %d bytes but the file has only %d after the length" % (n, file_size - 8),
        )
    header = validate_header(decode_header(raw[8 : 8 + n], name), name)
    if 8 + n + header["data_len"] != file_size:
        raise CheckpointError(
            name,
            "file_size",
            "the header describes %d bytes of data but the file holds %d (truncated or padded)"
            % (header["data_len"], file_size - 8 - n),
        )
    return {"metadata": header["metadata"], "tensors": header["tensors"], "header_len": n}


def read_header(path: str) -> Dict[str, Any]:
    """``parse_header`` of a file on disk, reading only the 8-byte length and the header itself."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) == 8:
            n = int.from_bytes(head, "little")
            # Read the header only when it can be valid, so a bogus length never costs memory.
            if n <= MAX_HEADER and 8 + n <= size:
                head += f.read(n)
    return parse_header(head, size, path)
