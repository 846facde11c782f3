"""A local Hugging Face Hub-compatible HTTP server: folders under a root served as model repos.

Each ``root/<org>/<name>/`` is the model repo ``org/name`` with one revision, ``main``, whose commit sha is
derived from the file list, sizes and mtimes. It speaks enough of the Hub protocol for the real
``huggingface_hub`` client: ``HEAD/GET /{repo}/resolve/{rev}/{path}`` (``X-Repo-Commit``, ``ETag``,
``X-Linked-Etag``/``X-Linked-Size`` for LFS files, ``Range``), ``/api/models/{repo}[/revision/{rev}]``,
``/api/models/{repo}/tree/{rev}[/{path}]``, ``POST /api/models/{repo}/paths-info/{rev}`` and the search
``GET /api/models`` (``search``, ``author``, ``filter`` repeated, ``sort``, ``limit``, ``full``, ``cardData``,
``config``, ``expand`` repeated; pages linked by ``Link: <…>; rel="next"``, as ``list_models`` follows them).
Card data is read from README.md's front matter; tags are computed as the Hub computes them (the card's tags,
its library, the config's model_type, ``base_model:<relation>:<repo>``, ``safetensors``/``gguf``…); the
``safetensors`` summary is counted from the headers. It never sends Xet headers, so clients always download
from it over plain HTTP.

Dataset repos live under ``root/.datasets/<org>/<name>/`` and are read as the Hub serves them to
``hf_hub_download(..., repo_type="dataset")``: ``HEAD/GET /datasets/{repo}/resolve/{rev}/{path}``.

Dotfiles are control files, never served: ``.gated`` (its content is the one accepted token) makes ``resolve``
answer 401 ``GatedRepo`` unless the request carries ``Authorization: Bearer <token>``; ``.hub.json`` holds what
the Hub computes beyond the files (``{"tags": [...], "downloads": N}``). Tests inject faults through
:attr:`HubServer.corrupt` (serve wrong bytes, advertise the right sha256), :meth:`HubServer.drop` (close the
connection after K body bytes) and :meth:`HubServer.rate_limit` (answer 429 with the Hub's ``ratelimit``
headers).

Stdlib only, Python 3.8+. CLI (foreground, clean exit on SIGTERM):
``python -m backend.sandbox.hub --root DIR [--port P] [--rate BPS] [--port-file F]``. The repos it serves, as
read from their folders: ``hub_repos``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from backend.sandbox.hub_repos import (
    CACHE_DIR_NAME,
    DATASETS_DIR,
    DigestCache,
    HubError,
    Repo,
    RepoFile,
    git_blob_oid,
    lfs_pointer,
    parse_front_matter,
    scan_repo,
)

log = logging.getLogger(__name__)


def _iso(ts: float) -> str:
    utc = timezone.utc  # noqa: UP017 (datetime.UTC is 3.11+)
    return datetime.fromtimestamp(ts, utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


_REPO_REST = ("folder", "files", "dirs", "commit", "gate_token", "last_modified")


@dataclass(frozen=True)
class RequestRecord:
    """One answered request, kept in :attr:`HubServer.requests` so tests can see Range use and drops."""

    method: str
    path: str
    range: str | None
    status: int
    body_bytes: int


@dataclass
class _Drop:
    after: int
    times: int


@dataclass
class _Limit:
    times: int
    reset_s: int
    scope: str


class HubServer:
    """Serves ``root/<org>/<name>/`` folders as Hub model repos on ``host:port`` (0 = a free port).

    ``rate_bps`` limits each file body to that many bytes per second (None = unlimited). ``corrupt`` holds
    ``"org/name/path"`` keys whose bodies are served with one byte flipped (the last one) while the headers
    and APIs still advertise the true sha256; it may be changed while serving.
    """

    def __init__(
        self,
        root: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        rate_bps: int | None = None,
        corrupt: Iterable[str] = (),
        tree_page: int = 1000,
        models_page: int = 100,
    ):
        self.root = Path(root)
        # Tree listings come in pages of this many entries, each with a ``Link: <URL>; rel="next"`` naming this
        # server's own URL (as the Hub names huggingface.co, whatever endpoint the client was given).
        self.tree_page = tree_page
        self.models_page = models_page  # /api/models answers in pages of this many, linked the same way
        self.host = host
        self.port = port
        self.rate_bps = rate_bps
        self.corrupt = set(corrupt)
        self.digests = DigestCache(self.root / CACHE_DIR_NAME)
        self.requests: list[RequestRecord] = []
        self._drops: dict[str, _Drop] = {}
        self._drops_lock = threading.Lock()
        self._limited: _Limit | None = None
        self._facts: dict[str, tuple[str, dict[str, Any]]] = {}  # repo id → (commit, what the Hub computes for it)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The endpoint to pass to huggingface_hub (``endpoint=`` / ``HF_ENDPOINT``)."""
        if self._httpd is None:
            raise RuntimeError("the hub server is not running; call start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://[{host!s}]:{port}" if ":" in str(host) else f"http://{host!s}:{port}"

    def start(self) -> str:
        """Bind and serve on a background thread; returns the URL."""
        if self._httpd is not None:
            raise RuntimeError("the hub server is already running")
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hub-server", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving and cut open connections (a transfer in flight ends early)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> HubServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- fault injection -------------------------------------------------------------------------------------

    def drop(self, key: str, after_bytes: int, times: int = 1) -> None:
        """Cut the next ``times`` GETs of ``org/name/path`` after ``after_bytes`` body bytes (a clean EOF)."""
        with self._drops_lock:
            self._drops[key] = _Drop(after_bytes, times)

    def _take_drop(self, key: str, length: int) -> int | None:
        with self._drops_lock:
            drop = self._drops.get(key)
            if drop is None or drop.after >= length:
                return None
            drop.times -= 1
            if drop.times <= 0:
                del self._drops[key]
            return drop.after

    def rate_limit(self, times: int = 1, reset_s: int = 0, scope: str = "") -> None:
        """Answer the next ``times`` requests (-1: all until cleared with ``times=0``) whose path starts with
        ``/{scope}`` with 429 and the Hub's ``ratelimit`` headers: none left, the window resets in ``reset_s``."""
        with self._drops_lock:
            self._limited = _Limit(times, reset_s, "/" + scope.lstrip("/")) if times else None

    def _take_limit(self, path: str) -> int | None:
        """The reset time to send with a 429 for this request, or None to answer it."""
        with self._drops_lock:
            limit = self._limited
            if limit is None or not path.startswith(limit.scope):
                return None
            if limit.times > 0:
                limit.times -= 1
                if limit.times == 0:
                    self._limited = None
            return limit.reset_s

    # -- repos -----------------------------------------------------------------------------------------------

    def repo(self, repo_id: str, revision: str | None = None, dataset: bool = False) -> Repo:
        """Scan ``repo_id`` (a dataset's with ``dataset``); with ``revision``, also check it is ``main`` or the
        current commit sha."""
        repo = scan_repo(self.root / DATASETS_DIR, repo_id) if dataset else scan_repo(self.root, repo_id)
        if dataset:  # its digests kept apart from a model repo of the same name
            repo = Repo("datasets/" + repo.repo_id, *(getattr(repo, k) for k in _REPO_REST))
        if revision is not None and revision not in ("main", repo.commit):
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo

    def repo_ids(self) -> list[str]:
        """Every ``org/name`` under root."""
        out: list[str] = []
        for org in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if org.is_dir() and not org.name.startswith("."):
                out.extend(
                    f"{org.name}/{d.name}" for d in sorted(org.iterdir()) if d.is_dir() and not d.name.startswith(".")
                )
        return out

    def warm(self) -> None:
        """Hash every file now, so the first HEAD of a multi-GiB file does not wait for it."""
        for repo_id in self.repo_ids():
            for f in scan_repo(self.root, repo_id).files.values():
                self.digests.digest(repo_id, f)

    def lfs_info(self, repo: Repo, f: RepoFile) -> dict[str, object] | None:
        """``{sha256, size, pointer_size}`` for an LFS file, else None."""
        if not f.lfs:
            return None
        sha = self.digests.digest(repo.repo_id, f)
        return {"sha256": sha, "size": f.size, "pointer_size": len(lfs_pointer(sha, f.size))}

    def blob_oid(self, repo: Repo, f: RepoFile) -> str:
        """The git oid of the file's blob (of its LFS pointer for LFS files)."""
        digest = self.digests.digest(repo.repo_id, f)
        return git_blob_oid(lfs_pointer(digest, f.size)) if f.lfs else digest

    def file_entry(self, repo: Repo, f: RepoFile) -> dict[str, object]:
        """A tree / paths-info entry as the Hub returns it."""
        entry: dict[str, object] = {
            "type": "file",
            "oid": self.blob_oid(repo, f),
            "size": f.size,
            "path": f.path,
        }
        lfs = self.lfs_info(repo, f)
        if lfs is not None:
            entry["lfs"] = {"oid": lfs["sha256"], "size": lfs["size"], "pointerSize": lfs["pointer_size"]}
        return entry

    def dir_entry(self, repo: Repo, path: str) -> dict[str, object]:
        oid = hashlib.sha1(f"tree {repo.commit} {path}".encode()).hexdigest()
        return {"type": "directory", "oid": oid, "size": 0, "path": path}

    def model_info(self, repo: Repo, blobs: bool, expand: list[str] | None = None) -> dict[str, object]:
        """``/api/models/{repo}`` JSON; sibling sizes and LFS sha256 only with ``blobs`` (files_metadata); with
        ``expand``, only those properties (and the id), as the Hub answers."""
        siblings = []
        for f in repo.files.values():
            sibling: dict[str, object] = {"rfilename": f.path}
            if blobs:
                sibling["size"] = f.size
                sibling["blobId"] = self.blob_oid(repo, f)
                lfs = self.lfs_info(repo, f)
                if lfs is not None:
                    sibling["lfs"] = {
                        "sha256": lfs["sha256"],
                        "size": lfs["size"],
                        "pointerSize": lfs["pointer_size"],
                    }
            siblings.append(sibling)
        org = repo.repo_id.split("/")[0]
        facts = self.facts(repo)
        full: dict[str, object] = {
            "_id": repo.commit[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": org,
            "sha": repo.commit,
            "lastModified": _iso(repo.last_modified),
            "createdAt": _iso(repo.last_modified),
            "private": False,
            "gated": "auto" if repo.gate_token is not None else False,
            "disabled": False,
            "downloads": facts["downloads"],
            "likes": 0,
            "tags": facts["tags"],
            "siblings": siblings,
            "usedStorage": sum(f.size for f in repo.files.values()),
        }
        for key in ("library_name", "pipeline_tag", "cardData", "config", "safetensors", "baseModels"):
            if facts.get(key) is not None:
                full[key] = facts[key]
        if expand:
            return {k: v for k, v in full.items() if k in ("_id", "id") or k in expand}
        return full

    def facts(self, repo: Repo) -> dict[str, Any]:
        """What the Hub computes for a repo from its files (kept per commit): card data from README.md's front
        matter, tags, library, the config's top keys, the safetensors parameter counts, the base models."""
        cached = self._facts.get(repo.repo_id)
        if cached is not None and cached[0] == repo.commit:
            return cached[1]
        card: dict[str, Any] = {}
        readme = repo.files.get("README.md")
        if readme is not None:
            card = parse_front_matter(readme.abspath.read_text(errors="replace"))
        config = None
        if "config.json" in repo.files:
            try:
                config = json.loads(repo.files["config.json"].abspath.read_text())
            except ValueError:
                config = None
        config = config if isinstance(config, dict) else None
        extra: dict[str, Any] = {}
        try:
            extra = json.loads((repo.folder / ".hub.json").read_text())
        except (OSError, ValueError):
            pass
        names = list(repo.files)
        tags = [str(t) for t in card.get("tags") or [] if isinstance(card.get("tags"), list)]
        library = card.get("library_name")
        if "adapter_config.json" in names:
            library = library or "peft"
        computed = [library] if library else []
        if any(n.endswith(".safetensors") for n in names):
            computed.append("safetensors")
        if any(n.endswith(".gguf") for n in names):
            computed.append("gguf")
        if config and isinstance(config.get("model_type"), str):
            computed.append(config["model_type"])
        if config and config.get("auto_map"):
            computed.append("custom_code")
        if card.get("pipeline_tag"):
            computed.append(str(card["pipeline_tag"]))
        bases = card.get("base_model")
        bases = [bases] if isinstance(bases, str) else [b for b in bases or [] if isinstance(b, str)]
        relation = card.get("base_model_relation")
        if not isinstance(relation, str):  # the Hub infers it from the files when the card does not say
            quantized = any(n.endswith(".gguf") for n in names) or bool((config or {}).get("quantization_config"))
            relation = "adapter" if "adapter_config.json" in names else "quantized" if quantized else "finetune"
        for base in bases:
            computed += [f"base_model:{base}", f"base_model:{relation}:{base}"]
        if card.get("license"):
            computed.append(f"license:{card['license']}")
        tags += [t for t in computed + list(extra.get("tags") or []) if t not in tags]
        facts: dict[str, Any] = {
            "tags": tags,
            "downloads": int(extra.get("downloads") or 0),
            "library_name": library,
            "pipeline_tag": card.get("pipeline_tag"),
            "cardData": card or None,
            # The Hub's listing keeps a few top keys of config.json, not the whole file.
            "config": {k: config[k] for k in ("architectures", "model_type") if k in config} if config else None,
            "safetensors": self._parameters(repo),
            "baseModels": {"relation": relation, "models": [{"id": b} for b in bases]} if bases else None,
        }
        self._facts[repo.repo_id] = (repo.commit, facts)
        return facts

    def _parameters(self, repo: Repo) -> dict[str, object] | None:
        """``{"parameters": {dtype: count}, "total": n}`` counted from the safetensors headers; None without any."""
        from backend.agent.host.shared.safetensors_header import CheckpointError, read_header

        counts: dict[str, int] = {}
        for f in repo.files.values():
            if not f.path.endswith(".safetensors"):
                continue
            try:
                header = read_header(str(f.abspath))
            except (CheckpointError, OSError):
                return None  # a corrupt or empty file: the Hub shows no summary either
            for info in header["tensors"].values():
                numel = 1
                for dim in info["shape"]:
                    numel *= dim
                counts[info["dtype"]] = counts.get(info["dtype"], 0) + numel
        return {"parameters": counts, "total": sum(counts.values())} if counts else None

    def search(self, query: dict[str, list[str]]) -> list[dict[str, object]]:
        """``/api/models`` items for a query, before paging: ``search`` (a substring of the id, any case),
        ``author``, every ``filter`` among the tags, ``gated``; sorted by ``sort`` (descending, as the Hub)."""
        text = query.get("search", [""])[-1].lower()
        author = query.get("author", [None])[-1]
        filters = query.get("filter", [])
        gated = query.get("gated", [None])[-1]
        items = []
        for repo_id in self.repo_ids():
            if text not in repo_id.lower() or (author and repo_id.split("/")[0] != author):
                continue
            repo = scan_repo(self.root, repo_id)
            facts = self.facts(repo)
            if any(f not in facts["tags"] for f in filters):
                continue
            if gated is not None and (repo.gate_token is not None) != (gated.lower() == "true"):
                continue
            items.append((repo, facts))
        key = {"lastModified": "lastModified", "createdAt": "createdAt", "downloads": "downloads"}
        sort = query.get("sort", [None])[-1]
        if sort in key:
            by_downloads = sort == "downloads"
            items.sort(key=lambda rf: rf[1]["downloads"] if by_downloads else rf[0].last_modified, reverse=True)
        flag = {name: query.get(name, ["false"])[-1].lower() == "true" for name in ("full", "cardData", "config")}
        expand = query.get("expand")
        out = []
        for repo, _ in items:
            info = self.model_info(repo, False)
            if expand:
                out.append({k: v for k, v in info.items() if k in ("_id", "id") or k in expand})
                continue
            wanted = ["_id", "id", "modelId", "likes", "downloads", "tags", "pipeline_tag", "library_name"]
            wanted += ["createdAt", "private"]
            if flag["full"]:
                wanted += ["author", "sha", "lastModified", "gated", "disabled", "siblings"]
            if flag["cardData"] or flag["full"]:
                wanted.append("cardData")
            if flag["config"]:
                wanted.append("config")
            out.append({k: info[k] for k in wanted if k in info})
        return out

    def tree(self, repo: Repo, path: str, recursive: bool, expand: bool) -> list[dict[str, object]]:
        """``tree/{rev}/{path}`` entries: the folder's children (all its descendants if ``recursive``)."""
        if path and path not in repo.dirs:
            raise HubError(404, "EntryNotFound", "Entry not found", repo.commit)
        prefix = path + "/" if path else ""

        def wanted(p: str) -> bool:
            return p.startswith(prefix) and (recursive or "/" not in p[len(prefix) :])

        out = [self.dir_entry(repo, d) for d in repo.dirs if wanted(d)]
        out.extend(self.file_entry(repo, f) for f in repo.files.values() if wanted(f.path))
        if expand:
            for entry in out:
                entry["lastCommit"] = {
                    "id": repo.commit,
                    "title": "sandbox snapshot",
                    "date": _iso(repo.last_modified),
                }
        return out

    def paths_info(self, repo: Repo, paths: Iterable[str]) -> list[dict[str, object]]:
        """``paths-info`` entries for the paths that exist (missing ones are left out, as on the Hub)."""
        out = []
        for p in paths:
            p = p.strip("/")
            if p in repo.files:
                out.append(self.file_entry(repo, repo.files[p]))
            elif p in repo.dirs:
                out.append(self.dir_entry(repo, p))
        return out


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hub: HubServer):
        if ":" in hub.host:
            self.address_family = socket.AF_INET6
        self.hub = hub
        self._live: set[socket.socket] = set()
        self._live_lock = threading.Lock()
        super().__init__((hub.host, hub.port), _Handler)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # skips HTTPServer's reverse DNS lookup of the host
        host, self.server_port = self.server_address[:2]
        self.server_name = str(host)  # a TCP server's address: (host, port)

    def process_request_thread(self, request, client_address):  # type: ignore[no-untyped-def]
        with self._live_lock:
            self._live.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._live_lock:
                self._live.discard(request)

    def close_connections(self) -> None:
        with self._live_lock:
            live = list(self._live)
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end_exclusive)`` of a single ``bytes=`` range; None to serve the whole file.

    Raises ValueError when the range cannot be satisfied (answered with 416).
    """
    if not header or not header.strip().startswith("bytes=") or "," in header:
        return None
    spec = header.strip()[len("bytes=") :].strip()
    first, _, last = spec.partition("-")
    try:
        if first == "":
            start, end = max(size - int(last), 0), size  # suffix range: the last N bytes
        else:
            start = int(first)
            end = min(int(last) + 1, size) if last else size
    except ValueError:
        return None
    if start >= size or start >= end:
        raise ValueError(header)
    return start, end


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "specdeck-hub/1"
    timeout = 300  # idle keep-alive connections go away eventually
    server: _HTTPServer

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    # -- plumbing --------------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        self._status = 0
        self._sent = 0
        body = b""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length)  # always drained, so keep-alive stays in step
        url = urlsplit(self.path)
        segs = [unquote(s) for s in url.path.split("/")[1:]]
        try:
            reset = self.server.hub._take_limit(url.path)
            if reset is not None:
                raise HubError(429, None, "You have exceeded our rate limit.", ratelimit=reset)
            if self.command == "GET" and [s for s in segs if s] == ["api", "models"]:
                self._list_models(url.path, parse_qs(url.query))
            elif self.command in ("GET", "HEAD") and len(segs) >= 6 and segs[0] == "datasets" and segs[3] == "resolve":
                self._resolve("/".join(segs[1:3]), segs[4], "/".join(segs[5:]), dataset=True)
            elif self.command in ("GET", "HEAD") and len(segs) >= 5 and segs[2] == "resolve":
                self._resolve("/".join(segs[:2]), segs[3], "/".join(segs[4:]))
            elif len(segs) >= 4 and segs[0] == "api" and segs[1] == "models":
                self._api("/".join(segs[2:4]), segs[4:], parse_qs(url.query), body)
            elif len(segs) >= 2 and segs[0] == "api":
                raise HubError(404, "RepoNotFound", "Repository not found")
            else:
                raise HubError(404, None, "Not found")
        except HubError as e:
            self._send_error(e)
        except (socket.timeout, ConnectionError):  # noqa: UP041 (socket.timeout is not TimeoutError on 3.8)
            self.close_connection = True  # the client went away mid-answer
        finally:
            hub = self.server.hub
            hub.requests.append(
                RequestRecord(self.command, url.path, self.headers.get("Range"), self._status, self._sent)
            )

    def _start(self, status: int, headers: dict[str, str]) -> None:
        self._status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _send_bytes(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        self._start(status, dict(headers, **{"Content-Length": str(len(data))}))
        if self.command != "HEAD":
            self.wfile.write(data)
            self._sent = len(data)

    def _send_json(self, obj: object) -> None:
        self._send_bytes(200, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def _send_error(self, e: HubError) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": e.message}
        if e.code:
            headers["X-Error-Code"] = e.code
        if e.commit:
            headers["X-Repo-Commit"] = e.commit
        if e.ratelimit is not None:  # the IETF draft headers the Hub sends (huggingface_hub reads them)
            headers["RateLimit"] = f'"api";r=0;t={e.ratelimit}'
            headers["RateLimit-Policy"] = '"fixed window";"api";q=500;w=300'
        self._send_bytes(e.status, json.dumps({"error": e.message}).encode(), headers)

    # -- endpoints -------------------------------------------------------------------------------------------

    def _api(self, repo_id: str, rest: list[str], query: dict[str, list[str]], body: bytes) -> None:
        hub = self.server.hub

        def flag(name: str) -> bool:
            return query.get(name, ["false"])[-1].lower() in ("1", "true")

        expand = query.get("expand")
        if not rest and self.command == "GET":
            self._send_json(hub.model_info(hub.repo(repo_id), flag("blobs"), expand))
        elif len(rest) == 2 and rest[0] == "revision" and self.command == "GET":
            self._send_json(hub.model_info(hub.repo(repo_id, rest[1]), flag("blobs"), expand))
        elif len(rest) >= 2 and rest[0] == "tree" and self.command == "GET":
            repo = hub.repo(repo_id, rest[1])
            entries = hub.tree(repo, "/".join(rest[2:]).strip("/"), flag("recursive"), flag("expand"))
            start = int(query.get("cursor", ["0"])[-1] or 0)
            page, headers = entries[start : start + hub.tree_page], {}
            if start + hub.tree_page < len(entries):
                rest_query = {k: v[-1] for k, v in query.items() if k != "cursor"}
                nxt = urlencode(dict(rest_query, cursor=start + hub.tree_page))
                headers["Link"] = f'<{hub.url}{urlsplit(self.path).path}?{nxt}>; rel="next"'
            self._send_bytes(200, json.dumps(page).encode(), {"Content-Type": "application/json", **headers})
        elif len(rest) == 2 and rest[0] == "paths-info" and self.command == "POST":
            repo = hub.repo(repo_id, rest[1])
            self._send_json(hub.paths_info(repo, self._posted_paths(body)))
        else:
            hub.repo(repo_id)  # an unknown repo says so before the route does
            raise HubError(404, None, "Not found")

    def _list_models(self, path: str, query: dict[str, list[str]]) -> None:
        """``GET /api/models``: the search's items a page at a time, the next page's URL in ``Link``."""
        hub = self.server.hub
        items = hub.search(query)
        limit = int(query.get("limit", ["0"])[-1] or 0)
        if limit:
            items = items[:limit]
        start = int(query.get("cursor", ["0"])[-1] or 0)
        page, headers = items[start : start + hub.models_page], {}
        if start + hub.models_page < len(items):
            rest = [(k, v) for k, values in query.items() if k != "cursor" for v in values]
            nxt = urlencode([*rest, ("cursor", str(start + hub.models_page))])
            headers["Link"] = f'<{hub.url}{path}?{nxt}>; rel="next"'
        self._send_bytes(200, json.dumps(page).encode(), {"Content-Type": "application/json", **headers})

    def _posted_paths(self, body: bytes) -> list[str]:
        if "json" in (self.headers.get("Content-Type") or ""):
            try:
                paths = json.loads(body.decode() or "{}").get("paths", [])
            except (ValueError, AttributeError):
                raise HubError(400, None, "Body must be a JSON object with a 'paths' list") from None
            return [paths] if isinstance(paths, str) else list(paths)
        form = parse_qs(body.decode(), keep_blank_values=True)
        return form.get("paths", []) + form.get("paths[]", [])

    def _resolve(self, repo_id: str, revision: str, path: str, dataset: bool = False) -> None:
        hub = self.server.hub
        repo = hub.repo(repo_id, revision, dataset)
        if repo.gate_token is not None and self.headers.get("Authorization") != "Bearer " + repo.gate_token:
            raise HubError(
                401,
                "GatedRepo",
                f"Access to model {repo_id} is restricted. You must have access to it and be authenticated"
                " to access it. Please log in.",
            )
        f = repo.files.get(path)
        if f is None:
            raise HubError(404, "EntryNotFound", "Entry not found", repo.commit)
        name = path.rsplit("/", 1)[-1].replace('"', "")
        headers = {
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{hub.blob_oid(repo, f)}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f"inline; filename*=UTF-8''{name}; filename=\"{name}\";",
        }
        lfs = hub.lfs_info(repo, f)
        if lfs is not None:
            headers["X-Linked-Etag"] = f'"{lfs["sha256"]}"'
            headers["X-Linked-Size"] = str(f.size)
        try:
            span = _parse_range(self.headers.get("Range"), f.size)
        except ValueError:
            headers["Content-Range"] = f"bytes */{f.size}"
            self._send_bytes(416, b"", headers)
            return
        start, end = span if span is not None else (0, f.size)
        if span is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        headers["Content-Length"] = str(end - start)
        self._start(206 if span is not None else 200, headers)
        if self.command == "GET":
            self._send_file(repo_id + "/" + path, f, start, end - start)

    def _send_file(self, key: str, f: RepoFile, start: int, length: int) -> None:
        hub = self.server.hub
        drop_at = hub._take_drop(key, length)
        rate = hub.rate_bps
        flip = f.size - 1 if key in hub.corrupt else -1
        with open(str(f.abspath), "rb") as fh:
            if drop_at is None and rate is None and flip < 0:
                self._sent = self.connection.sendfile(fh, start, length)  # zero-copy; sparse holes are cheap
                return
            limit = length if drop_at is None else drop_at
            chunk = max(4096, min(1 << 20, rate // 20)) if rate else 1 << 20
            t0 = time.monotonic()
            while self._sent < limit:
                pos = start + self._sent
                data = os.pread(fh.fileno(), min(chunk, limit - self._sent), pos)
                if not data:
                    break  # the file shrank under us: the client sees a short body
                if pos <= flip < pos + len(data):
                    flipped = bytearray(data)
                    flipped[flip - pos] ^= 0xFF
                    data = bytes(flipped)
                self.connection.sendall(data)
                self._sent += len(data)
                if rate:
                    time.sleep(max(0.0, t0 + self._sent / rate - time.monotonic()))
        if drop_at is not None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_WR)  # clean EOF mid-body: the client sees a short read


# -- CLI ---------------------------------------------------------------------------------------------------


def _rate(text: str) -> int:
    """``40M`` → 40_000_000 bytes/s (K, M, G are powers of 1000)."""
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:].upper(), 1)
    try:
        value = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError("rate must be bytes per second, e.g. 40M") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("rate must be positive")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    """Serve in the foreground until SIGTERM/SIGINT; prints the URL and writes it to ``--port-file``."""
    ap = argparse.ArgumentParser(prog="python -m backend.sandbox.hub", description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True, help="folder holding <org>/<name>/ repos")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--rate", type=_rate, default=None, help="bytes/s per transfer, e.g. 40M")
    ap.add_argument("--port-file", type=Path, help="write the URL here once listening")
    ap.add_argument("--corrupt", action="append", default=[], metavar="ORG/NAME/PATH", help="serve wrong bytes")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        ap.error(f"--root {args.root} is not a folder")

    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    hub = HubServer(args.root, args.host, args.port, args.rate, args.corrupt)
    url = hub.start()
    threading.Thread(target=hub.warm, name="hub-warm", daemon=True).start()
    if args.port_file:
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(url + "\n")
        os.replace(str(tmp), str(args.port_file))  # readers never see half a URL
    print(url, flush=True)
    while not stopping.wait(1.0):
        pass
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
