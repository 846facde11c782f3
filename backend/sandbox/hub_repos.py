"""The repos under a local Hub's root as the Hub sees them: a repo folder's snapshot (its files, a commit sha
derived from the file list, sizes and mtimes, the ``.gated`` token), which files the Hub keeps in LFS, git blob
ids and LFS pointers, the content digests cached beside the repos (``.hubcache``), and a README's front matter
read as card data. The server that serves them is ``hub``. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LFS_MIN_SIZE = 1 << 20  # files this big are stored in LFS, like the Hub's default
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx", ".msgpack", ".h5")
CACHE_DIR_NAME = ".hubcache"  # sha256 sidecars, inside root (a dot-name is never a repo)
DATASETS_DIR = ".datasets"  # dataset repos, inside root
_READ_CHUNK = 8 << 20


def is_lfs(path: str, size: int) -> bool:
    """Whether the Hub would store this file in LFS (and so advertise its sha256)."""
    return size >= LFS_MIN_SIZE or path.endswith(LFS_SUFFIXES)


def git_blob_oid(data: bytes) -> str:
    """The git object id of a blob with this content (what the Hub calls ``oid``/``blobId``)."""
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file that stands for an LFS file in the git tree."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def parse_front_matter(text: str) -> dict[str, Any]:
    """A README's YAML front matter as card data: ``key: scalar``, ``key: [a, b]`` and ``key:`` followed by
    ``- item`` lines (what model cards use); nested maps are skipped. Stdlib only, so a subset of YAML."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    out: dict[str, Any] = {}
    key: str | None = None
    for line in lines[1:]:
        if line.strip() == "---":
            break
        items = out.get(key) if key is not None else None
        if line.startswith(("- ", "  - ")) and isinstance(items, list):
            items.append(_yaml_scalar(line.split("- ", 1)[1]))
            continue
        if not line or line[0] in " #\t" or ":" not in line:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not value:
            out[key] = []
        elif value.startswith("[") and value.endswith("]"):
            out[key] = [_yaml_scalar(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            out[key] = _yaml_scalar(value)
    return {k: v for k, v in out.items() if v != []}


def _yaml_scalar(text: str) -> object:
    text = text.split(" #", 1)[0].strip()
    if text[:1] in ('"', "'"):
        try:
            return json.loads(text) if text[0] == '"' else text[1:-1]
        except ValueError:
            return text.strip("\"'")
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclass(frozen=True)
class RepoFile:
    """One served file: its path in the repo and the stat fields the commit sha and caches are keyed by."""

    path: str
    abspath: Path
    size: int
    mtime_ns: int

    @property
    def lfs(self) -> bool:
        return is_lfs(self.path, self.size)


@dataclass(frozen=True)
class Repo:
    """A snapshot of one repo folder, taken per request."""

    repo_id: str
    folder: Path
    files: dict[str, RepoFile]
    dirs: tuple[str, ...]
    commit: str
    gate_token: str | None
    last_modified: float


class HubError(Exception):
    """A Hub error response: status, ``X-Error-Code`` and ``X-Error-Message`` as huggingface_hub maps them."""

    def __init__(
        self, status: int, code: str | None, message: str, commit: str | None = None, ratelimit: int | None = None
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.commit = commit
        self.ratelimit = ratelimit  # a 429's seconds until the window resets


def scan_repo(root: Path, repo_id: str) -> Repo:
    parts = repo_id.split("/")
    if len(parts) != 2 or any(not p or p.startswith(".") for p in parts):
        raise HubError(404, "RepoNotFound", "Repository not found")
    folder = root / parts[0] / parts[1]
    if not folder.is_dir():
        raise HubError(404, "RepoNotFound", "Repository not found")
    files: dict[str, RepoFile] = {}
    dirs: list[str] = []
    for base, dirnames, filenames in os.walk(str(folder), followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel_base = os.path.relpath(base, str(folder))
        prefix = "" if rel_base == "." else rel_base.replace(os.sep, "/") + "/"
        dirs.extend(prefix + d for d in dirnames)
        for name in filenames:
            if name.startswith("."):
                continue
            abspath = Path(base) / name
            try:
                st = abspath.stat()
            except OSError:
                continue  # dangling symlink or a file removed under us
            files[prefix + name] = RepoFile(prefix + name, abspath, st.st_size, st.st_mtime_ns)
    ordered = dict(sorted(files.items()))
    fingerprint = hashlib.sha1()
    for f in ordered.values():
        fingerprint.update(f"{f.path}\t{f.size}\t{f.mtime_ns}\n".encode())
    gate = folder / ".gated"
    gate_token = gate.read_text().strip() if gate.is_file() else None
    last = max((f.mtime_ns for f in ordered.values()), default=0) / 1e9
    return Repo(repo_id, folder, ordered, tuple(sorted(dirs)), fingerprint.hexdigest(), gate_token, last)


class DigestCache:
    """Content digests (sha256 for LFS files, git blob sha1 for the rest), computed once per size+mtime.

    Kept in memory and in a JSON sidecar per file under ``root/.hubcache/`` so a restarted server does not
    re-hash multi-GiB files; a file whose size or mtime changed is hashed again.
    """

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self._memo: dict[tuple[str, int, int], str] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def digest(self, repo_id: str, f: RepoFile) -> str:
        """sha256 hex of an LFS file's bytes, or the git blob oid of a small file."""
        key = (str(f.abspath), f.size, f.mtime_ns)
        found = self._memo.get(key)
        if found is not None:
            return found
        with self._guard:
            lock = self._locks.setdefault(str(f.abspath), threading.Lock())
        with lock:  # one hash per file even when requests race
            found = self._memo.get(key)
            if found is None:
                found = self._load(repo_id, f) or self._compute(repo_id, f)
                self._memo[key] = found
        return found

    def _sidecar(self, repo_id: str, f: RepoFile) -> Path:
        return self.cache_dir / repo_id / (f.path + ".json")

    def _load(self, repo_id: str, f: RepoFile) -> str | None:
        try:
            data = json.loads(self._sidecar(repo_id, f).read_text())
        except (OSError, ValueError):
            return None
        if data.get("size") == f.size and data.get("mtime_ns") == f.mtime_ns and data.get("lfs") == f.lfs:
            digest: str | None = data.get("digest")
            return digest
        return None

    def _compute(self, repo_id: str, f: RepoFile) -> str:
        if f.lfs:
            h = hashlib.sha256()
            buf = bytearray(_READ_CHUNK)
            view = memoryview(buf)
            with open(str(f.abspath), "rb", buffering=0) as fh:
                while True:
                    n = fh.readinto(buf)
                    if not n:
                        break
                    h.update(view[:n])
            digest = h.hexdigest()
        else:
            digest = git_blob_oid(f.abspath.read_bytes())
        self.store(repo_id, f, digest)
        return digest

    def store(self, repo_id: str, f: RepoFile, digest: str) -> None:
        """Keep ``digest`` as ``f``'s in its sidecar (size and mtime as they are now)."""
        sidecar = self._sidecar(repo_id, f)
        record = {"size": f.size, "mtime_ns": f.mtime_ns, "lfs": f.lfs, "digest": digest}
        try:
            sidecar.parent.mkdir(parents=True, exist_ok=True)
            tmp = sidecar.with_name(f"{sidecar.name}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(record))
            os.replace(str(tmp), str(sidecar))
        except OSError as e:  # a read-only root still serves, it just hashes again after a restart
            log.debug("cannot write digest sidecar %s: %s", sidecar, e)


def repo_file(root: Path, repo_id: str, path: str) -> RepoFile:
    """``root/repo_id/path`` as the hub serves it."""
    abspath = root / repo_id / path
    st = abspath.stat()
    return RepoFile(path, abspath, st.st_size, st.st_mtime_ns)
