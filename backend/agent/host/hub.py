"""The Hub search on the host: the RPC method ``hub.search`` runs ``shared.hub_search.search`` with the host's own
huggingface_hub and token, for a client with no route to the Hub. Stdlib only at import, Python 3.8+."""

from __future__ import annotations

from typing import Any, Dict

from .registry import AgentError, Context, method
from .shared.hub_search import NO_HUB, NO_LIBRARY, WORKERS, HubSearchError, search


@method("hub.search")
def search_method(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """RPC: ``search(**params)`` with the host's huggingface_hub and token; a search that cannot run is an
    AgentError whose ``reason`` is the kind (the client words it)."""
    import sys

    try:
        import huggingface_hub  # noqa: F401 (a clear refusal before anything else)
    except ImportError:
        raise AgentError(NO_HUB % (sys.executable, " on the host"), "unsupported", reason=NO_LIBRARY) from None
    queries = params.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, dict) for q in queries):
        raise AgentError("queries must be a list of objects", "invalid")
    try:
        return search(queries, params.get("repos"), params.get("endpoint"), int(params.get("workers") or WORKERS))
    except HubSearchError as exc:
        raise AgentError(str(exc), "failed", reason=exc.kind, **exc.data) from None
