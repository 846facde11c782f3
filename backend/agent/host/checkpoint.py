"""Checkpoints on the host: inspect a drafter from its headers alone, and compare two drafters' weights.

``inspect_checkpoint`` is pure and shared with the client (local paths and hub repos build the same dict);
the RPC methods ``checkpoint.inspect`` and ``checkpoint.compare_weights`` wrap it for the agent. Stdlib only,
Python 3.8+; the weight comparison imports the host's numpy lazily and refuses clearly without it.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional, Tuple

from .registry import AgentError, Context, method
from .safetensors_header import CheckpointError, read_header

INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
_NOT_CHECKPOINT = "point at a folder with config.json and *.safetensors files, or at one .safetensors file"
_FIX_INDEX = "fix or regenerate " + INDEX
# (file name, file size, parsed header) for each safetensors file of a checkpoint.
Header = Tuple[str, int, dict]


def inspect_checkpoint(path: str) -> dict:
    """Describe the checkpoint at ``path`` (folder or single .safetensors file) from headers only.

    Returns ``{"path", "config", "files": [{"name", "bytes", "tensors"}], "metadata", "tensors": {name:
    {"dtype", "shape", "bytes", "file"}}, "total_params", "total_bytes", "notes"}``. Raises
    ``CheckpointError`` for a corrupt or non-checkpoint path, ``FileNotFoundError`` / ``PermissionError``
    (with a sentence) when the path is missing or unreadable.
    """
    return _scan(path)[0]


def _scan(path: str) -> Tuple[dict, Dict[str, Tuple[str, int]]]:
    """The inspect dict plus where each tensor's data starts (absolute file path, byte offset)."""
    path = os.path.expanduser(path)
    try:
        is_dir = os.path.isdir(path)
        if not is_dir:
            os.stat(path)
        return _scan_dir(path) if is_dir else _scan_file(path)
    except FileNotFoundError as exc:
        missing = exc.filename or path
        raise FileNotFoundError("%s does not exist; check the path" % missing) from None
    except PermissionError as exc:
        denied = exc.filename or path
        raise PermissionError("%s: permission denied; make it readable for this user" % denied) from None
    except IsADirectoryError as exc:
        raise CheckpointError(exc.filename or path, "not_checkpoint", "a folder where a file was expected") from None
    except OSError as exc:
        where = exc.filename or path
        raise CheckpointError(where, "unreadable", "cannot read it (%s)" % exc.strerror, "check the disk") from None


def _scan_file(path: str) -> Tuple[dict, Dict[str, Tuple[str, int]]]:
    if not path.endswith(".safetensors"):
        raise CheckpointError(path, "not_checkpoint", "not a .safetensors file", _NOT_CHECKPOINT)
    headers = [(os.path.basename(path), os.stat(path).st_size, read_header(path))]  # type: List[Header]
    notes = ["a single file: no config.json read; inspect its folder for the config"]
    return build_result(path, None, headers, None, notes), _locations(os.path.dirname(path), headers)


def _scan_dir(path: str) -> Tuple[dict, Dict[str, Tuple[str, int]]]:
    notes = []  # type: List[str]
    # List first, so an unreadable folder is reported as the folder rather than as its config.json.
    present = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    config = _read_json(os.path.join(path, CONFIG), CONFIG)
    if config is None:
        notes.append("no config.json: shapes only, the architecture and the aux layers are unknown")
    index = _read_json(os.path.join(path, INDEX), INDEX)
    weight_map = None
    if index is not None:
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(os.path.join(path, INDEX), "index", "weight_map is not a map of names", _FIX_INDEX)
        names = sorted(set(weight_map.values()))
        for name in names:
            if not os.path.isfile(os.path.join(path, name)):
                raise CheckpointError(
                    os.path.join(path, INDEX),
                    "index",
                    "weight_map names %s, which is not in the folder" % name,
                    _FIX_INDEX,
                )
        unused = [n for n in present if n not in set(names)]
        if unused:
            notes.append("not in the index, so not loaded: " + ", ".join(unused))
    elif present:
        names = present
    else:
        raise CheckpointError(path, "not_checkpoint", "no *.safetensors files in the folder", _NOT_CHECKPOINT)
    headers = []  # type: List[Header]
    for name in names:
        file_path = os.path.join(path, name)
        headers.append((name, os.stat(file_path).st_size, read_header(file_path)))
    index_meta = index.get("metadata") if index is not None else None
    result = build_result(path, config, headers, weight_map, notes, index_meta)
    return result, _locations(path, headers)


def _read_json(path: str, what: str) -> Optional[dict]:
    """A JSON object from ``path``; None when the file is absent, CheckpointError when it is not an object."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(
            path, "config", "%s is not valid JSON (%s)" % (what, str(exc)[:80]), "fix the file"
        ) from None
    if not isinstance(obj, dict):
        raise CheckpointError(path, "config", "%s is not a JSON object" % what, "fix the file")
    return obj


def _locations(folder: str, headers: List[Header]) -> Dict[str, Tuple[str, int]]:
    out = {}
    for name, _, header in headers:
        start = 8 + header["header_len"]
        for tensor, info in header["tensors"].items():
            out[tensor] = (os.path.join(folder, name), start + info["data_offsets"][0])
    return out


def build_result(
    path: str,
    config: Optional[dict],
    headers: List[Header],
    weight_map: Optional[Dict[str, str]],
    notes: List[str],
    index_meta: Any = None,
) -> dict:
    """The inspect dict from parsed headers; checks the index's weight_map against the files' tensors.

    Shared by local, host and hub inspection so all three give the same shape.
    """
    tensors = {}  # type: Dict[str, dict]
    metadata = {}  # type: Dict[str, str]
    files = []
    for name, size, header in headers:
        files.append({"name": name, "bytes": size, "tensors": len(header["tensors"])})
        for key, value in header["metadata"].items():
            note = "the files disagree on metadata %r; showing the first value" % key
            if metadata.setdefault(key, value) != value and note not in notes:
                notes.append(note)
        for tensor, info in header["tensors"].items():
            if tensor in tensors:
                raise CheckpointError(
                    path,
                    "duplicate",
                    "tensor %r is in both %s and %s" % (tensor, tensors[tensor]["file"], name),
                    "remove one copy",
                )
            tensors[tensor] = {
                "dtype": info["dtype"],
                "shape": info["shape"],
                "bytes": info["bytes"],
                "file": name,
            }
    if weight_map is not None:
        where = os.path.join(path, INDEX) if not path.startswith("hf://") else path + "/" + INDEX
        for tensor, name in sorted(weight_map.items()):
            if tensors.get(tensor, {}).get("file") != name:
                raise CheckpointError(
                    where,
                    "index",
                    "weight_map puts %r in %s, which has no such tensor" % (tensor, name),
                    _FIX_INDEX,
                )
        unmapped = len(tensors) - len(weight_map)
        if unmapped:
            notes.append("%d tensors in the shards are missing from the index weight_map" % unmapped)
    total_bytes = sum(t["bytes"] for t in tensors.values())
    if isinstance(index_meta, dict) and index_meta.get("total_size") not in (None, total_bytes):
        notes.append(
            "the index says total_size %s but the tensors hold %d bytes" % (index_meta["total_size"], total_bytes)
        )
    return {
        "path": path,
        "config": config,
        "files": files,
        "metadata": metadata,
        "tensors": {name: tensors[name] for name in sorted(tensors)},
        "total_params": sum(_numel(t["shape"]) for t in tensors.values()),
        "total_bytes": total_bytes,
        "notes": notes,
    }


def _numel(shape: List[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _agent_call(fn, *args):
    """Run ``fn`` and turn checkpoint and file errors into AgentErrors the client shows as they are."""
    try:
        return fn(*args)
    except CheckpointError as exc:
        raise AgentError(str(exc), "checkpoint", path=exc.path, rule=exc.rule) from None
    except FileNotFoundError as exc:
        raise AgentError(str(exc), "not_found") from None
    except PermissionError as exc:
        raise AgentError(str(exc), "permission") from None


def _param(params: dict, key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise AgentError("a checkpoint path %r is required" % key, "invalid")
    return value


@method("checkpoint.inspect")
def inspect_method(params: dict, ctx: Context) -> dict:
    """RPC: ``{"path"}`` → the ``inspect_checkpoint`` dict."""
    return _agent_call(inspect_checkpoint, _param(params, "path"))


# How numpy reads each dtype from the file; BF16 is widened by hand (numpy has no bfloat16).
_NUMPY_DTYPES = {
    "BOOL": "u1", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2", "BF16": "<u2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4", "F64": "<f8", "I64": "<i8", "U64": "<u8",
}  # fmt: skip
CHUNK_ELEMENTS = 1 << 22  # 4 Mi elements per read: memory stays bounded far below one big tensor


@method("checkpoint.compare_weights")
def compare_weights(params: dict, ctx: Context) -> dict:
    """RPC: ``{"a", "b"}`` → per-tensor relative L2 distance and cosine similarity of two checkpoints.

    Streams ``{"event": "tensor", "name", "rel_l2", "cosine", "done", "total"}`` per tensor whose dtype and
    shape agree, reading the data spans straight from the files in chunks (numpy on the host, imported here).
    Returns a summary; stops early, with ``"cancelled": true``, when the client cancels.
    """
    try:
        import numpy as np
    except ImportError:
        raise AgentError(
            "comparing weights needs numpy on the host; install it there or compare shapes only",
            "unsupported",
        ) from None
    a_path, b_path = _param(params, "a"), _param(params, "b")
    a, a_loc = _agent_call(_scan, a_path)
    b, b_loc = _agent_call(_scan, b_path)
    names, skipped = [], []
    for name in sorted(set(a["tensors"]) | set(b["tensors"])):
        ta, tb = a["tensors"].get(name), b["tensors"].get(name)
        reason = _skip_reason(ta, tb)
        if reason:
            skipped.append({"name": name, "reason": reason})
        else:
            names.append(name)
    rows = []  # type: List[dict]
    cancelled = False
    for done, name in enumerate(names, 1):
        info = a["tensors"][name]
        numel = _numel(info["shape"])
        sums = _compare_tensor(np, info["dtype"], numel, a_loc[name], b_loc[name], ctx)
        if sums is None:
            cancelled = True
            break
        row = dict(name=name, **_distances(*sums))
        rows.append(row)
        ctx.emit(dict(event="tensor", done=done, total=len(names), **row))
    rel = [r["rel_l2"] for r in rows if r["rel_l2"] is not None]
    cos = [r["cosine"] for r in rows if r["cosine"] is not None]
    return {
        "a": a_path,
        "b": b_path,
        "compared": len(rows),
        "total": len(names),
        "tensors": rows,
        "skipped": skipped,
        "max_rel_l2": max(rel) if rel else None,
        "min_cosine": min(cos) if cos else None,
        "cancelled": cancelled,
    }


def _skip_reason(ta: Optional[dict], tb: Optional[dict]) -> str:
    if ta is None or tb is None:
        return "only in " + ("B" if ta is None else "A")
    if ta["shape"] != tb["shape"]:
        return "shape %s vs %s" % (ta["shape"], tb["shape"])
    if ta["dtype"] != tb["dtype"]:
        return "dtype %s vs %s" % (ta["dtype"], tb["dtype"])
    if ta["dtype"] not in _NUMPY_DTYPES:
        return "dtype %s is not compared" % ta["dtype"]
    return ""


def _compare_tensor(np, dtype: str, numel: int, loc_a, loc_b, ctx: Context):
    """(‖a‖², ‖b‖², a·b, ‖a-b‖²) accumulated in float64 chunk by chunk; None when cancelled."""
    item = np.dtype(_NUMPY_DTYPES[dtype]).itemsize
    aa = bb = ab = dd = 0.0
    with open(loc_a[0], "rb") as fa, open(loc_b[0], "rb") as fb:
        fa.seek(loc_a[1])
        fb.seek(loc_b[1])
        left = numel
        while left:
            if ctx.cancelled.is_set():
                return None
            count = min(left, CHUNK_ELEMENTS)
            xa = _as_float(np, dtype, fa.read(count * item), count)
            xb = _as_float(np, dtype, fb.read(count * item), count)
            diff = xa - xb
            aa += float(np.dot(xa, xa))
            bb += float(np.dot(xb, xb))
            ab += float(np.dot(xa, xb))
            dd += float(np.dot(diff, diff))
            left -= count
    return aa, bb, ab, dd


def _as_float(np, dtype: str, data: bytes, count: int):
    raw = np.frombuffer(data, dtype=_NUMPY_DTYPES[dtype], count=count)
    if dtype == "BF16":  # bf16 is the top half of a float32
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float64)


def _distances(aa: float, bb: float, ab: float, dd: float) -> dict:
    """Relative L2 distance ‖a-b‖/‖a‖ and cosine similarity; None where a norm is zero and it is undefined."""
    rel = math.sqrt(dd / aa) if aa > 0 else (0.0 if dd == 0 else None)
    cosine = ab / math.sqrt(aa * bb) if aa > 0 and bb > 0 else None
    if cosine is not None:
        cosine = max(-1.0, min(1.0, cosine))
    return {"rel_l2": rel, "cosine": cosine}
