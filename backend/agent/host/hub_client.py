"""The hub, through the host's own huggingface_hub: its endpoint, the few calls a preflight makes (``Hub``), and
its typed refusals as one sentence each, shared by the download preflight, the download job and the prompt
sets. Stdlib only at import (huggingface_hub is imported by the calls that need it); Python 3.8+.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

from .registry import AgentError

DEFAULT_ENDPOINT = "https://huggingface.co"
HTTP_TIMEOUT_S = 30
GATED = "gated or private: set HF_TOKEN on the host or pass --token-env"
NO_HUB = "huggingface_hub is not installed for %s on the host: install it there (pip install huggingface_hub)"


def resolve_endpoint(explicit: Optional[str]) -> str:
    """``--endpoint``, else the host's HF_ENDPOINT, else the Hugging Face Hub."""
    return (explicit or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_refusal(exc: BaseException, repo: str, endpoint: str, what: str, revision: str) -> Optional[str]:
    """The hub's refusal (gated, no such repo, revision or file) as one sentence, by huggingface_hub's typed
    errors; None for anything else. The preflight and the download job say the same."""
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):  # a subclass of RepositoryNotFoundError: test it first
        return "%s is %s" % (repo, GATED)
    if isinstance(exc, RepositoryNotFoundError):
        return "repository %s not found on %s (if it is private: set HF_TOKEN on the host or pass --token-env)" % (
            repo,
            endpoint,
        )
    if isinstance(exc, RevisionNotFoundError):
        return "revision %s not found in %s" % (revision, repo)
    if isinstance(exc, EntryNotFoundError) and not isinstance(exc, LocalEntryNotFoundError):  # local: offline
        return "%s not found in %s at revision %s" % (what, repo, revision)
    return None


class Hub:
    """The few hub calls a preflight needs, made by the host's own huggingface_hub (imported here, lazily: the
    agent stays stdlib at import), so the preflight and the download share one client: the same proxy, CA
    bundle, token lookup (``token`` None: HF_TOKEN, then the token file) and error rules. Its typed errors
    become AgentErrors in the hub's own terms."""

    def __init__(self, endpoint: str, repo: str, token: Optional[str]) -> None:
        try:
            import huggingface_hub
        except ImportError:
            raise AgentError(NO_HUB % sys.executable, "failed") from None
        if not hasattr(huggingface_hub.HfApi, "get_paths_info"):
            raise AgentError(
                "huggingface_hub %s on the host is too old for the preflight (it needs 0.19 or newer): "
                "pip install -U huggingface_hub there" % huggingface_hub.__version__,
                "failed",
            )
        self.hf = huggingface_hub
        self.api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
        self.endpoint = endpoint
        self.repo = repo
        self.token = token

    def error(self, exc: Exception, what: str, revision: str) -> AgentError:
        """The hub's refusal of ``what`` as one sentence, by huggingface_hub's typed errors."""
        from huggingface_hub.utils import HfHubHTTPError

        status = getattr(getattr(exc, "response", None), "status_code", None)
        refusal = hub_refusal(exc, self.repo, self.endpoint, what, revision)
        if refusal is not None:
            return AgentError(refusal, "failed", status=status)
        if isinstance(exc, HfHubHTTPError) and status is not None:
            message = getattr(exc, "server_message", None)
            detail = (": " + message) if message else ""
            return AgentError(
                "the hub at %s answered %d for %s%s" % (self.endpoint, status, what, detail), "failed", status=status
            )
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return AgentError(
            "cannot reach the hub at %s (%s): check the endpoint and the host's network" % (self.endpoint, reason),
            "failed",
        )

    def head(self, revision: str, path: str) -> str:
        """The file's metadata (a HEAD on its resolve URL): checks the repo, the file and our access; returns the
        commit sha."""
        url = self.hf.hf_hub_url(self.repo, path, revision=revision, endpoint=self.endpoint)
        try:
            meta = self.hf.get_hf_file_metadata(url, token=self.token, timeout=HTTP_TIMEOUT_S)
        except Exception as exc:
            raise self.error(exc, path, revision) from None
        return meta.commit_hash or revision

    def list_files(self, revision: str) -> List[str]:
        """Every file of the repo at ``revision`` (the tree, recursively; huggingface_hub follows the pages)."""
        from huggingface_hub.hf_api import RepoFile

        try:
            return [e.path for e in self.api.list_repo_tree(self.repo, revision=revision, recursive=True)
                    if isinstance(e, RepoFile)]  # fmt: skip
        except Exception as exc:
            raise self.error(exc, "the file list", revision) from None

    def paths_info(self, revision: str, paths: List[str]) -> Dict[str, Dict[str, Any]]:
        """``{path: {"size", "sha256" (LFS), "git_oid" (small files)}}`` for the paths that exist."""
        from huggingface_hub.hf_api import RepoFile

        try:
            entries = self.api.get_paths_info(self.repo, paths, revision=revision, expand=False)
        except Exception as exc:
            raise self.error(exc, "the file list", revision) from None
        out = {}
        for e in entries:
            if not isinstance(e, RepoFile):
                continue
            lfs = e.lfs or None
            sha256 = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
            out[e.path] = {"size": int(e.size or 0), "sha256": sha256, "git_oid": None if lfs else e.blob_id}
        return out
