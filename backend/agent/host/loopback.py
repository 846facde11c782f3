"""HTTP to servers on the host's own loopback (the SGLang server), never through a proxy.

urllib's default opener honours ``http_proxy``; on a GPU host behind a corporate proxy with no ``no_proxy``,
``proxy_bypass("127.0.0.1")`` is false and every poll and bench request would go to the proxy (a dead one
makes a healthy server look down). This opener has no proxy handler at all. Downloads from the hub are not
loopback and keep honouring the proxy settings (huggingface_hub reads them). Stdlib only, Python 3.8+.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing only for the checker
if TYPE_CHECKING:
    from http.client import HTTPResponse
    from typing import Any, AnyStr, Dict, List, Optional, Union
    from urllib.request import OpenerDirector, Request

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
_OPENER: List[
    OpenerDirector
] = []  # built at the first request: urllib.request (http.client, email, ssl) is ~50 ms of an agent's start


def _opener() -> OpenerDirector:
    if not _OPENER:
        from urllib import request as urlrequest

        # ProxyHandler({}) replaces the default one, which reads the *_proxy environment variables.
        _OPENER.append(urlrequest.build_opener(urlrequest.ProxyHandler({})))
    return _OPENER[0]


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


def urlopen(req: Union[str, Request], timeout: float) -> HTTPResponse:
    """``urllib.request.urlopen`` for a loopback URL (a string or a Request), with no proxy."""
    response: HTTPResponse = _opener().open(req, timeout=timeout)  # an http:// URL's answer
    return response


def hide(data: AnyStr, key: Optional[str]) -> AnyStr:
    """``data`` (text or bytes) with a server's API key masked where it would be passed on (its log, its
    /server_info): as many ``*``, so byte offsets into a log still hold."""
    if not key:
        return data
    if isinstance(data, bytes):
        return data.replace(key.encode(), b"*" * len(key))
    return data.replace(key, "*" * len(key))


def bearer(key: Optional[str]) -> Dict[str, Any]:
    """The header SGLang's clients send for a server started with ``--api-key`` (none without a key)."""
    return {"Authorization": "Bearer %s" % key} if key else {}


def request(
    url: str, data: Optional[bytes] = None, headers: Optional[Dict[str, Any]] = None, method: Optional[str] = None
) -> Request:
    """A ``urllib.request.Request`` (imported only when one is made)."""
    from urllib import request as urlrequest

    return urlrequest.Request(url, data, headers or {}, method=method)
