"""A checkpoint read from its headers alone: config.json, the safetensors headers, the tensors' table.

Pure and side-effect free (it registers no RPC methods), so the client reads local paths with it and builds
hub results with ``build_result`` exactly as the host's ``checkpoint.inspect`` does. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from .safetensors_header import CheckpointError, read_header

INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
_NOT_CHECKPOINT = "point at a folder with config.json and *.safetensors files, or at one .safetensors file"
# A config read without weights (a folder or hub repo holding config.json alone, or the file itself).
CONFIG_ALONE = "config.json alone: no *.safetensors were read, so no tensor shape could be checked"
_FIX_INDEX = "fix or regenerate " + INDEX
# (file name, file size, parsed header) for each safetensors file of a checkpoint.
Header = Tuple[str, int, Dict[str, Any]]


def inspect_checkpoint(path: str) -> Dict[str, Any]:
    """Describe the checkpoint at ``path`` (folder or single .safetensors file) from headers only.

    Returns ``{"path", "config", "files": [{"name", "bytes", "tensors"}], "metadata", "tensors": {name:
    {"dtype", "shape", "bytes", "file"}}, "total_params", "total_bytes", "notes"}``. A folder with config.json
    and no safetensors, or a config.json itself, gives the config with no files or tensors and says so in
    ``notes`` (what the config says can still be read; the shapes cannot). Raises ``CheckpointError`` for a
    corrupt or non-checkpoint path, ``FileNotFoundError`` / ``PermissionError`` (with a sentence) when the path
    is missing or unreadable.
    """
    return _scan(path)[0]


def _scan(path: str) -> Tuple[Dict[str, Any], Dict[str, Tuple[str, int]]]:
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


def _scan_file(path: str) -> Tuple[Dict[str, Any], Dict[str, Tuple[str, int]]]:
    if os.path.basename(path) == CONFIG:
        config = _read_json(path, CONFIG)
        return build_result(path, config, [], None, [CONFIG_ALONE]), {}
    if not path.endswith(".safetensors"):
        raise CheckpointError(path, "not_checkpoint", "not a .safetensors file", _NOT_CHECKPOINT)
    headers = [(os.path.basename(path), os.stat(path).st_size, read_header(path))]  # type: List[Header]
    notes = ["a single file: no config.json read; inspect its folder for the config"]
    return build_result(path, None, headers, None, notes), _locations(os.path.dirname(path), headers)


def _scan_dir(path: str) -> Tuple[Dict[str, Any], Dict[str, Tuple[str, int]]]:
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
    elif config is not None:
        return build_result(path, config, [], None, [CONFIG_ALONE]), {}
    else:
        raise CheckpointError(path, "not_checkpoint", "no *.safetensors files in the folder", _NOT_CHECKPOINT)
    headers = []  # type: List[Header]
    for name in names:
        file_path = os.path.join(path, name)
        headers.append((name, os.stat(file_path).st_size, read_header(file_path)))
    index_meta = index.get("metadata") if index is not None else None
    result = build_result(path, config, headers, weight_map, notes, index_meta)
    return result, _locations(path, headers)


def _read_json(path: str, what: str) -> Optional[Dict[str, Any]]:
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
    config: Optional[Dict[str, Any]],
    headers: List[Header],
    weight_map: Optional[Dict[str, str]],
    notes: List[str],
    index_meta: Any = None,
) -> Dict[str, Any]:
    """The inspect dict from parsed headers; checks the index's weight_map against the files' tensors.

    Shared by local, host and hub inspection so all three give the same shape.
    """
    tensors = {}  # type: Dict[str, Dict[str, Any]]
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
