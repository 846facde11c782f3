"""Checkpoints on the host: the RPC methods ``checkpoint.inspect`` (``checkpoint_scan``: headers alone) and
``checkpoint.compare_weights`` (two drafters' weights, tensor by tensor). Stdlib only, Python 3.8+; the weight
comparison imports the host's numpy lazily and refuses clearly without it.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar

from .registry import AgentError, Context, method
from .shared.checkpoint_scan import _numel, _scan, inspect_checkpoint
from .shared.safetensors_header import CheckpointError

if TYPE_CHECKING:
    import numpy
    from numpy.typing import NDArray

T = TypeVar("T")


def _agent_call(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` and turn checkpoint and file errors into AgentErrors the client shows as they are."""
    try:
        return fn(*args)
    except CheckpointError as exc:
        raise AgentError(str(exc), "checkpoint", path=exc.path, rule=exc.rule) from None
    except FileNotFoundError as exc:
        raise AgentError(str(exc), "not_found") from None
    except PermissionError as exc:
        raise AgentError(str(exc), "permission") from None


def _param(params: Dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise AgentError("a checkpoint path %r is required" % key, "invalid")
    return value


@method("checkpoint.inspect")
def inspect_method(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """RPC: ``{"path"}`` → the ``inspect_checkpoint`` dict."""
    return _agent_call(inspect_checkpoint, _param(params, "path"))


# How numpy reads each dtype from the file; BF16 is widened by hand (numpy has no bfloat16).
_NUMPY_DTYPES = {
    "BOOL": "u1", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2", "BF16": "<u2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4", "F64": "<f8", "I64": "<i8", "U64": "<u8",
}  # fmt: skip
CHUNK_ELEMENTS = 1 << 22  # 4 Mi elements per read: memory stays bounded far below one big tensor


@method("checkpoint.compare_weights")
def compare_weights(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
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
    rows: List[Dict[str, Any]] = []
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


def _skip_reason(ta: Optional[Dict[str, Any]], tb: Optional[Dict[str, Any]]) -> str:
    if ta is None or tb is None:
        return "only in " + ("B" if ta is None else "A")
    if ta["shape"] != tb["shape"]:
        return "shape %s vs %s" % (ta["shape"], tb["shape"])
    if ta["dtype"] != tb["dtype"]:
        return "dtype %s vs %s" % (ta["dtype"], tb["dtype"])
    if ta["dtype"] not in _NUMPY_DTYPES:
        return "dtype %s is not compared" % ta["dtype"]
    return ""


def _compare_tensor(
    np: ModuleType, dtype: str, numel: int, loc_a: Tuple[str, int], loc_b: Tuple[str, int], ctx: Context
) -> Optional[Tuple[float, float, float, float]]:
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


def _as_float(np: ModuleType, dtype: str, data: bytes, count: int) -> NDArray[numpy.float64]:
    raw = np.frombuffer(data, dtype=_NUMPY_DTYPES[dtype], count=count)
    if dtype == "BF16":  # bf16 is the top half of a float32
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    out: NDArray[numpy.float64] = raw.astype(np.float64)
    return out


def _distances(aa: float, bb: float, ab: float, dd: float) -> Dict[str, Any]:
    """Relative L2 distance ‖a-b‖/‖a‖ and cosine similarity; None where a norm is zero and it is undefined."""
    rel = math.sqrt(dd / aa) if aa > 0 else (0.0 if dd == 0 else None)
    cosine = ab / math.sqrt(aa * bb) if aa > 0 and bb > 0 else None
    if cosine is not None:
        cosine = max(-1.0, min(1.0, cosine))
    return {"rel_l2": rel, "cosine": cosine}
