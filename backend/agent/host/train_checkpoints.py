"""A training's checkpoints on the host, both SpecForge eras (FIELD-NOTES-TRAINING-FLEET §A): the unified
era's ``<run_id>-step<N>/training_state.pt`` with ``<run_id>-latest``/``-best`` links, not servable until
``specforge export --to sglang`` (written under ``<output_dir>/specdeck-exports/``); the script era's
``epoch_E_step_S/`` with config.json and model.safetensors, servable as they are. Each said whole or not (a
cut write), servable or not, and trusted or not (a torch pickle runs code when loaded). Stdlib only, 3.8+.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

from .shared.safepath import trust_reason, unsafe_reason
from .shared.safetensors_header import CheckpointError, read_header

EXPORTS = "specdeck-exports"  # <output_dir>/specdeck-exports/<checkpoint>/: what `specforge export` wrote
_UNIFIED_CKPT = re.compile(r"^(.+)-step(\d+)$")
_SCRIPT_CKPT = re.compile(r"^epoch_(\d+)_step_(\d+)$")


def export_dir(output_dir: str, name: str) -> str:
    return os.path.join(output_dir, EXPORTS, name)


def servable(path: str) -> bool:
    names = os.listdir(path) if os.path.isdir(path) else ()
    weights = [n for n in names if n.endswith(".safetensors")]
    return "config.json" in names and bool(weights) and all(_whole(os.path.join(path, n)) for n in weights)


def _whole(path: str) -> bool:
    """Whether a checkpoint file was written to its end (a disk that filled, a killed save leave it cut): a
    ``.safetensors`` holds all its header promises; a torch ``.pt`` (torch.save writes a zip archive, its
    directory last) ends with the zip's end-of-central-directory record."""
    try:
        if path.endswith(".safetensors"):
            read_header(path)
            return True
        with open(path, "rb") as f:
            f.seek(0, 2)
            if f.tell() < 22:
                return False
            f.seek(-22, 2)
            return f.read(4) == b"PK\x05\x06"
    except (OSError, CheckpointError):
        return False


def scan_checkpoints(output_dir: str, run_id: Optional[str] = None) -> List[Dict[str, Any]]:
    """Both eras' checkpoints under ``output_dir``, oldest step first: name, step, epoch, path, servable (and
    the folder SGLang loads), latest/best marks (unified links)."""
    try:
        names = sorted(os.listdir(output_dir))
    except OSError:
        return []
    out: List[Dict[str, Any]] = []
    links = {}
    link_paths: Dict[str, List[str]] = {}  # checkpoint name → the links naming it (judged with it)
    for kind in ("latest", "best"):
        for n in names:
            if n.endswith("-" + kind) and os.path.islink(os.path.join(output_dir, n)):
                links[kind] = os.path.basename(os.path.realpath(os.path.join(output_dir, n)))
                link_paths.setdefault(links[kind], []).append(os.path.join(output_dir, n))
    for n in names:
        path = os.path.join(output_dir, n)
        if os.path.islink(path) or not os.path.isdir(path):
            continue
        m = _SCRIPT_CKPT.match(n)
        if m and (servable(path) or _whole(os.path.join(path, "training_state.pt"))):
            out.append(
                {
                    "name": n,
                    "step": int(m.group(2)),
                    "epoch": int(m.group(1)),
                    "path": path,
                    "era": "script",
                    "servable": servable(path),
                    "serve_path": path if servable(path) else None,
                }
            )
            continue
        m = _UNIFIED_CKPT.match(n)
        if m and (run_id is None or m.group(1) == run_id) and _whole(os.path.join(path, "training_state.pt")):
            exported = export_dir(output_dir, n)
            ok = servable(exported)
            out.append(
                {
                    "name": n,
                    "step": int(m.group(2)),
                    "epoch": None,
                    "path": path,
                    "era": "unified",
                    "servable": ok,
                    "serve_path": exported if ok else None,
                    "latest": links.get("latest") == n,
                    "best": links.get("best") == n,
                    "links": link_paths.get(n, []),
                }
            )
    out.sort(key=lambda c: c["step"])
    if out and "latest" not in links:
        out[-1]["latest"] = True
    return out


def untrusted(path: str) -> Optional[str]:
    """Why ``path`` (and all under it) may hold what another user put there (``safepath.trust_reason``: the
    workdir's StrictModes, every entry); not there yet, why the folders it would be made in are not ours
    alone; None when only we (or root) could have put anything there."""
    if os.path.lexists(path):
        return trust_reason(path, os.geteuid())
    return unsafe_reason(path, os.geteuid())


def checkpoint_untrusted(c: Dict[str, Any]) -> Optional[str]:
    """Why checkpoint ``c`` (its folder, a -latest/-best link to it, the exports folder its export is written
    into and removed from) is not to be used: SpecForge's training_state.pt is a torch pickle, which runs code
    when loaded, and an export rmtrees what its folder leads to."""
    exports = os.path.join(os.path.dirname(c["path"]), EXPORTS) if c["era"] == "unified" else ""
    for path in (c["path"], c.get("serve_path") or "", exports, *c.get("links", ())):
        why = untrusted(path) if path else None
        if why:
            return why
    return None
