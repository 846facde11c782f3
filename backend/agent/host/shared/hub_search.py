"""The Hub search behind ``drafters find``: list the candidates, read each one's config.json, README.md and
safetensors headers, never a byte of weights. It runs where the Hub can be reached: on this machine, or on the
host as the RPC method ``hub.search`` (``host/hub.py``: the same function, the host's huggingface_hub), so a
client with no route to the Hub still searches. What it returns is raw (what the Hub said, per repo); the
client judges.

Every read goes through the real ``huggingface_hub`` client: ``HfApi.list_models`` (its query parameters,
pages by ``Link`` headers), its session for the small files (``hf_hub_url``, ``build_hf_headers``,
``hf_raise_for_status``) and ``HfApi.get_safetensors_metadata`` (a HEAD and Range GETs of the header). The
candidates are read in parallel threads. The token is the one huggingface_hub finds itself (``HF_TOKEN`` or the
saved login): it is never a parameter, so it is in no argv, no RPC and no log.

Pure (it registers no RPC method, so the client imports it too); stdlib only at import, Python 3.8+:
huggingface_hub is imported by the calls, and a host without it is told so.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

# What the listing asks the Hub for each repo (``expand``: only these properties come back).
LISTING_EXPAND = (
    "author", "baseModels", "cardData", "config", "downloads", "gated", "library_name", "lastModified",
    "pipeline_tag", "safetensors", "sha", "siblings", "tags",
)  # fmt: skip
WORKERS = 16
# A repo holding more parameters than this is a full model (a target or a copy of one), not a drafter: its
# headers (dozens of shards) are not read; the client rejects it from its config.
MAX_DRAFTER_PARAMS = 30_000_000_000
README_MAX = 256_000  # a card longer than this is cut here (tables come early)
PROBE_TIMEOUT_S = 10.0
NO_HUB = "huggingface_hub is not installed for %s%s: install it there (pip install huggingface_hub)"

# Kinds of failure: the client words each one (exit 2 for the first three).
OFFLINE, RATE_LIMITED, GATED = "offline", "rate_limited", "gated"
NOT_FOUND, NO_FILE, CORRUPT, HTTP, NO_LIBRARY = "not_found", "no_file", "corrupt", "http", "no_library"


class HubSearchError(Exception):
    """The search as a whole could not run: ``kind`` is one of the kinds above, the message one sentence."""

    def __init__(self, kind: str, message: str, **data: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.data = data


def _hub() -> Any:
    try:
        import huggingface_hub
        import huggingface_hub.constants
        import huggingface_hub.errors
        import huggingface_hub.utils  # the package loads its parts lazily: these are used by name
    except ImportError:
        import sys

        raise HubSearchError(NO_LIBRARY, NO_HUB % (sys.executable, "")) from None
    return huggingface_hub


def _chain(exc: BaseException) -> List[BaseException]:
    """The exception and its causes: huggingface_hub wraps a HEAD's error in LocalEntryNotFoundError."""
    out = []  # type: List[BaseException]
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return out


def _reset_seconds(response: Any) -> Optional[int]:
    """How long a 429 says to wait: the ``RateLimit`` header's ``t=`` (the Hub's), else ``Retry-After``."""
    headers = getattr(response, "headers", None) or {}
    for part in str(headers.get("RateLimit") or headers.get("ratelimit") or "").split(";"):
        if part.strip().startswith("t="):
            try:
                return int(part.strip()[2:])
            except ValueError:
                pass
    retry_after = headers.get("Retry-After")
    try:
        return int(retry_after) if retry_after is not None else None
    except (TypeError, ValueError):
        return None


def classify(exc: BaseException) -> Dict[str, Any]:
    """``{"kind", "message"}`` for an error of a Hub call (the kinds above); the message is huggingface_hub's
    first line, which names the URL but never the token."""
    errors = _hub().errors
    for err in _chain(exc):
        status = getattr(getattr(err, "response", None), "status_code", None)
        line = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        if isinstance(err, errors.OfflineModeIsEnabled):
            return {"kind": OFFLINE, "message": "HF_HUB_OFFLINE is set"}
        if status == 429:
            return {"kind": RATE_LIMITED, "message": line, "retry_after": _reset_seconds(err.response)}  # type: ignore[attr-defined]
        if isinstance(err, errors.GatedRepoError) or status == 403:  # GatedRepoError first: it is a NotFound
            return {"kind": GATED, "message": line}
        if isinstance(err, errors.RepositoryNotFoundError):
            return {"kind": NOT_FOUND, "message": line}  # 401 too: the Hub answers so for private repos
        if isinstance(err, (errors.RemoteEntryNotFoundError, errors.EntryNotFoundError)):
            return {"kind": NO_FILE, "message": line}
        if isinstance(err, errors.NotASafetensorsRepoError):
            return {"kind": NO_FILE, "message": "no model.safetensors or model.safetensors.index.json"}
        if isinstance(err, errors.SafetensorsParsingError):
            return {"kind": CORRUPT, "message": line}
        if isinstance(err, errors.HfHubHTTPError) and status is not None:
            return {"kind": HTTP, "message": line, "status": status}
    first = exc
    if isinstance(first, (OSError, ConnectionError)) or type(first).__module__.split(".")[0] in (
        "httpx", "httpx2", "httpcore", "requests", "urllib3",
    ):  # fmt: skip
        text = str(first).strip().splitlines()[0][:120] if str(first).strip() else type(first).__name__
        return {"kind": OFFLINE, "message": text}
    return {"kind": HTTP, "message": "%s: %s" % (type(first).__name__, str(first)[:200])}


def _endpoint(hub: Any, endpoint: Optional[str]) -> str:
    return (endpoint or hub.constants.ENDPOINT).rstrip("/")


def probe(endpoint: Optional[str] = None) -> None:
    """One request to the Hub's model listing, not retried: a machine with no route (or offline mode, or a
    rate limit) fails here in one round trip, where ``list_models`` would back off for ~23 s first."""
    hub = _hub()
    url = _endpoint(hub, endpoint) + "/api/models"
    try:
        response = hub.utils.get_session().get(
            url, params={"limit": 1}, headers=hub.utils.build_hf_headers(), timeout=PROBE_TIMEOUT_S
        )
        hub.utils.hf_raise_for_status(response)
    except Exception as exc:
        _raise_for_search(exc, _endpoint(hub, endpoint))


def _raise_for_search(exc: BaseException, endpoint: str) -> None:
    why = classify(exc)
    if why["kind"] in (OFFLINE, RATE_LIMITED):
        raise HubSearchError(why["kind"], why["message"], endpoint=endpoint, retry_after=why.get("retry_after"))
    raise HubSearchError(HTTP, why["message"], endpoint=endpoint)


def list_candidates(
    api: Any, queries: List[Dict[str, Any]], endpoint: str
) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Run each query through ``list_models``; returns (what each query found, the repos by id in order)."""
    found = []
    repos = {}  # type: Dict[str, Any]
    for query in queries:
        kwargs = {k: query[k] for k in ("search", "author", "filter", "sort", "limit") if query.get(k)}
        try:
            models = list(api.list_models(expand=list(LISTING_EXPAND), **kwargs))
        except Exception as exc:
            _raise_for_search(exc, endpoint)
        found.append({"query": kwargs, "found": [m.id for m in models]})
        for model in models:
            repos.setdefault(model.id, model)
    return found, repos


def _listing(model: Any) -> Dict[str, Any]:
    """The listing's facts about one repo, as plain JSON."""
    card = getattr(model, "card_data", None)
    st = getattr(model, "safetensors", None)
    return {
        "repo": model.id,
        "sha": getattr(model, "sha", None),
        "tags": list(getattr(model, "tags", None) or []),
        "card_data": card.to_dict() if card is not None else None,
        "library_name": getattr(model, "library_name", None),
        "pipeline_tag": getattr(model, "pipeline_tag", None),
        "gated": getattr(model, "gated", None) or False,
        "downloads": getattr(model, "downloads", None),
        "siblings": [s.rfilename for s in getattr(model, "siblings", None) or []],
        "listing_config": getattr(model, "config", None),
        "parameters": dict(st.parameters) if st is not None else None,
        "parameters_total": st.total if st is not None else None,
    }


def small_file(repo: str, name: str, endpoint: Optional[str], limit: Optional[int] = None) -> bytes:
    """A repo's small file (config.json, README.md) in one GET through huggingface_hub's own session, headers
    and error mapping: no cache to write, and no retry (``hf_hub_download`` retries its HEAD, which on a 429
    waits out the Hub's window, minutes, before the search can say it is rate-limited)."""
    hub = _hub()
    url = hub.hf_hub_url(repo, name, endpoint=endpoint)
    response = hub.utils.get_session().get(url, headers=hub.utils.build_hf_headers(), timeout=PROBE_TIMEOUT_S)
    hub.utils.hf_raise_for_status(response)
    content: bytes = response.content
    return content[:limit] if limit else content


def read_repo(api: Any, listing: Dict[str, Any], endpoint: Optional[str], stop: threading.Event) -> Dict[str, Any]:
    """Read one candidate's config.json, README.md and safetensors headers (each only when the listing shows
    the file); every failure is kept as ``errors`` on the candidate, except a rate limit, which stops all."""
    out = dict(listing, config=None, readme=None, headers=None, weight_map=None, index_metadata=None)
    out["errors"] = []
    out["skipped"] = None
    repo, siblings = listing["repo"], set(listing["siblings"])

    def failed(what: str, exc: BaseException) -> bool:
        why = classify(exc)
        if why["kind"] == RATE_LIMITED:
            stop.set()
            raise HubSearchError(RATE_LIMITED, why["message"], endpoint=endpoint, retry_after=why.get("retry_after"))
        out["errors"].append(dict(why, what=what))
        return bool(why["kind"] == GATED)  # a gated repo refuses every file: stop asking

    for name, key in (("config.json", "config"), ("README.md", "readme")):
        if stop.is_set() or name not in siblings:
            continue
        try:
            data = small_file(repo, name, endpoint, README_MAX if key == "readme" else None)
        except Exception as exc:
            if failed(name, exc):
                return out
            continue
        if key == "readme":
            out["readme"] = data.decode("utf-8", "replace")
            continue
        try:
            config = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            out["errors"].append({"kind": CORRUPT, "what": name, "message": "not JSON (%s)" % str(exc)[:80]})
            continue
        if isinstance(config, dict):
            out["config"] = config
        else:
            out["errors"].append({"kind": CORRUPT, "what": name, "message": "not a JSON object"})
    if stop.is_set() or not any(n.endswith(".safetensors") for n in siblings):
        return out
    total = listing.get("parameters_total")
    if total and total > MAX_DRAFTER_PARAMS:
        out["skipped"] = "%d parameters: a full model, not a drafter (headers not read)" % total
        return out
    try:
        meta = api.get_safetensors_metadata(repo)
    except Exception as exc:
        failed("safetensors headers", exc)
        return out
    headers = []
    for name, file_meta in sorted(meta.files_metadata.items()):
        tensors = {
            t: {"dtype": info.dtype, "shape": list(info.shape), "data_offsets": list(info.data_offsets)}
            for t, info in file_meta.tensors.items()
        }
        headers.append({"name": name, "metadata": file_meta.metadata or None, "tensors": tensors})
    out["headers"] = headers
    out["weight_map"] = dict(meta.weight_map) if meta.sharded else None
    out["index_metadata"] = meta.metadata
    return out


def search(
    queries: List[Dict[str, Any]],
    repos: Optional[List[str]] = None,
    endpoint: Optional[str] = None,
    workers: int = WORKERS,
    max_candidates: int = 200,
) -> Dict[str, Any]:
    """List the candidates the ``queries`` find (each ``{"search", "filter", "author", "sort", "limit"}``) and
    the ``repos`` named outright, then read them all in parallel. Returns ``{"endpoint", "queries": [{"query",
    "found"}], "candidates": [raw], "seconds", "where_python"}``. Raises ``HubSearchError``: ``offline`` (no
    route, or offline mode), ``rate_limited`` (a 429 anywhere), ``no_library``, ``http``."""
    import sys

    hub = _hub()
    hub.utils.disable_progress_bars()  # a few small files: bars would only write over the caller's terminal
    started = time.monotonic()
    base = _endpoint(hub, endpoint)
    probe(endpoint)
    api = hub.HfApi(endpoint=endpoint)
    found, listed = list_candidates(api, queries, base)
    listings = [_listing(m) for m in listed.values()][:max_candidates]
    for repo in repos or []:
        if repo not in listed:
            try:
                info = api.model_info(repo, expand=list(LISTING_EXPAND))
            except Exception as exc:
                why = classify(exc)
                if why["kind"] in (OFFLINE, RATE_LIMITED):
                    _raise_for_search(exc, base)
                listings.append({"repo": repo, "siblings": [], "tags": [], "errors": [dict(why, what="repo")]})
                continue
            listings.append(_listing(info))
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(listings) or 1))) as pool:
        futures = [
            pool.submit(read_repo, api, item, endpoint, stop) if "errors" not in item else None for item in listings
        ]
        candidates = [item if future is None else future.result() for item, future in zip(listings, futures)]
    return {
        "endpoint": base,
        "queries": found,
        "candidates": candidates,
        "seconds": round(time.monotonic() - started, 3),
        "python": sys.executable,
    }
