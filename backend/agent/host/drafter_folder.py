"""A drafter's folder on the host: its files hashed and checked against the hub's digests, the sidecar
(``.specdeck-verified.json``) that remembers a verified file for as long as it is unchanged, the partial files
huggingface_hub leaves, and the drafter's state from all that (a stat and the sidecar: no hashing). Stdlib only,
Python 3.8+.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import jobs
from .shared.safetensors_header import CheckpointError, read_header

DEFAULT_FILES = ("config.json", "model.safetensors")
SIDECAR = ".specdeck-verified.json"
SIDECAR_VERSION = 2  # records carry ctime, inode and device: version 1 ones no longer count
HF_DOWNLOAD_DIR = os.path.join(".cache", "huggingface", "download")
HASH_CHUNK = 8 << 20


def hf_download_dir(folder: str) -> str:
    """Where huggingface_hub keeps a local_dir download's metadata and partial files."""
    return os.path.join(folder, HF_DOWNLOAD_DIR)


def _size(path: str) -> int:
    """A file's size, 0 once it is gone (a download renames its partial file when done)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def incomplete_files(folder: str) -> List[str]:
    """Every ``*.incomplete`` file huggingface_hub left under ``folder`` (partial downloads)."""
    out: List[str] = []
    for base, _dirs, names in os.walk(hf_download_dir(folder)):
        out.extend(os.path.join(base, n) for n in names if n.endswith(".incomplete"))
    return sorted(out)


def file_digests(
    path: str, progress: Optional[Callable[[int], None]] = None, git: bool = False
) -> Tuple[str, Optional[str], Optional[Dict[str, Any]]]:
    """(sha256, git blob id if ``git``, identity) of a file's bytes, reporting bytes hashed so far to
    ``progress``. The identity (see ``_identity``) is read from the open file before the first byte and
    compared after the last, and with the path's: None when the file changed while it was hashed."""
    with open(path, "rb", buffering=0) as f:
        before = _identity(os.fstat(f.fileno()))
        sha = hashlib.sha256()
        blob = hashlib.sha1(("blob %d\0" % before["bytes"]).encode()) if git else None
        buf = bytearray(HASH_CHUNK)
        view = memoryview(buf)
        done = 0
        while True:
            n = f.readinto(buf)
            if not n:
                break
            sha.update(view[:n])
            if blob is not None:
                blob.update(view[:n])
            done += n
            if progress is not None:
                progress(done)
        after = _identity(os.fstat(f.fileno()))
    try:
        now = _identity(os.stat(path))  # still the file at that path (not renamed over meanwhile)
    except OSError:
        now = None
    same = before == after == now and done == before["bytes"]
    return sha.hexdigest(), blob.hexdigest() if blob is not None else None, before if same else None


def check_file(folder: str, entry: Dict[str, Any], progress: Optional[Callable[[int], None]] = None) -> Dict[str, Any]:
    """Hash one downloaded file and compare it with the hub's digest; validate a safetensors header.

    Returns ``{"path", "bytes", "sha256", "verified", "problem"}``; ``problem`` is a sentence or None.
    """
    local = os.path.join(folder, entry["path"])
    size = os.path.getsize(local)
    problem = None
    if entry.get("size") is not None and size != entry["size"]:
        problem = "%s is %d bytes but the hub says %d" % (entry["path"], size, entry["size"])
    sha, git_oid, identity = file_digests(local, progress, git=bool(entry.get("git_oid")))
    if identity is None:  # another writer: whatever we hashed is no one file's bytes
        problem = (
            "%s changed while it was being verified (something is writing to it); verify again once it is done"
            % (entry["path"])
        )
    if problem is None and entry.get("sha256") and sha != entry["sha256"]:
        problem = "checksum mismatch for %s: sha256 %s but the hub says %s" % (entry["path"], sha, entry["sha256"])
    if problem is None and entry.get("git_oid") and git_oid != entry["git_oid"]:
        problem = "checksum mismatch for %s: git blob id %s but the hub says %s" % (
            entry["path"],
            git_oid,
            entry["git_oid"],
        )
    if problem is None and local.endswith(".safetensors"):
        try:
            read_header(local)
        except CheckpointError as exc:
            problem = str(exc)
    expected = bool(entry.get("sha256") or entry.get("git_oid"))
    verified = expected and problem is None
    return {
        "path": entry["path"],
        "bytes": size,
        "sha256": sha,
        "verified": verified,
        "problem": problem,
        "changed": identity is None,
        "identity": identity,
    }


def read_sidecar(folder: str) -> Dict[str, Dict[str, Any]]:
    try:
        with open(os.path.join(folder, SIDECAR)) as f:
            data = json.load(f)
        return data.get("files") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def record_verified(
    folder: str, result: Dict[str, Any], repo: Optional[str], revision: Optional[str], commit: Optional[str] = None
) -> None:
    """Remember a file's digest with the identity it had (size, mtime, ctime, inode, device) and where it was
    checked against (repo, revision as asked, commit), so any later change voids the record: a same-size
    replacement with its mtime kept (``cp -p``, ``rsync -a``) still gets a new ctime or inode. The identity is
    the one read before hashing (``check_file``): a change after it voids the record."""
    files = read_sidecar(folder)
    files[result["path"]] = dict(
        result["identity"],
        sha256=result["sha256"],
        verified=result["verified"],
        repo=repo,
        revision=revision,
        commit=commit,
        checked=time.time(),
    )
    jobs.write_json(os.path.join(folder, SIDECAR), {"version": SIDECAR_VERSION, "files": files})


def _identity(st: os.stat_result) -> Dict[str, Any]:
    return {
        "bytes": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
        "device": st.st_dev,
    }


def forget(folder: str, path: str) -> None:
    """Drop what we and huggingface_hub remember about a file (after it was found wrong or removed)."""
    files = read_sidecar(folder)
    if files.pop(path, None) is not None:
        jobs.write_json(os.path.join(folder, SIDECAR), {"version": SIDECAR_VERSION, "files": files})
    meta = os.path.join(hf_download_dir(folder), path + ".metadata")
    if os.path.exists(meta):
        os.remove(meta)


def sidecar_entry(
    folder: str,
    path: str,
    records: Dict[str, Dict[str, Any]],
    repo: Optional[str] = None,
    revision: Optional[str] = None,
) -> Optional[Dict[str, Any]]:
    """The sidecar's record of ``path`` if the file is still exactly the one that was hashed, and was checked
    against ``repo`` at ``revision`` (each when given)."""
    rec = records.get(path)
    try:
        st = os.stat(os.path.join(folder, path))
    except OSError:
        return None
    if not rec or any(rec.get(k) != v for k, v in _identity(st).items()):
        return None
    if repo and rec.get("repo") != repo:
        return None
    if revision and revision not in (rec.get("revision"), rec.get("commit")):
        return None
    return rec


def drafter_state(drafter: Dict[str, Any], downloading: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """One configured drafter as the Drafters tab shows it: state, size, sha256 prefix, the job if any.

    States: ``downloading`` (a running job writes into its folder), ``missing`` (no file, no partial),
    ``partial`` (some files, leftovers or a truncated safetensors file), ``verified`` (every file matched
    the hub and is unchanged since), ``present`` (everything there, not verified).
    """
    folder = os.path.abspath(os.path.expanduser(drafter.get("path") or ""))
    names = list(drafter.get("files") or DEFAULT_FILES)
    records = read_sidecar(folder)
    files = []
    problem = None
    for name in names:
        local = os.path.join(folder, name)
        exists = os.path.isfile(local)
        rec = sidecar_entry(folder, name, records, drafter.get("repo"), drafter.get("revision")) if exists else None
        if exists and rec is None and name.endswith(".safetensors") and problem is None:
            try:
                read_header(local)  # two small reads: catches a truncated or foreign file cheaply
            except (CheckpointError, OSError) as exc:
                problem = str(exc)
        files.append(
            {
                "path": name,
                "exists": exists,
                "bytes": os.path.getsize(local) if exists else 0,
                "sha256": rec.get("sha256") if rec else None,
                "verified": bool(rec and rec.get("verified")),
            }
        )
    leftovers = incomplete_files(folder) if os.path.isdir(folder) else []
    # A running download's *.incomplete files are its own, not an earlier run's: counted in its size.
    moving = sum(_size(p) for p in leftovers) if downloading is not None else 0
    leftovers = leftovers if downloading is None else []
    present = [f for f in files if f["exists"]]
    if downloading is not None:
        state = "downloading"
    elif not present and not leftovers:
        state = "missing"
    elif len(present) < len(files) or leftovers or problem:
        state = "partial"
    elif all(f["verified"] for f in files):
        state = "verified"
    else:
        state = "present"
    main = next((f for f in files if f["path"].endswith(".safetensors")), files[-1] if files else None)
    return {
        "name": drafter.get("name"),
        "path": folder,
        "repo": drafter.get("repo"),
        "state": state,
        "bytes": sum(f["bytes"] for f in files) + moving,
        "sha256": main["sha256"] if main else None,
        "files": files,
        "leftovers": leftovers,
        "problem": problem,
        "job": downloading,
    }
