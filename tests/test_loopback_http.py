"""The host's HTTP to its local server never goes through a proxy (the hub's goes through huggingface_hub, which
honours one)."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request

import pytest

from backend.agent.host import loadgen, probes
from tests.sshd import free_port

pytestmark = pytest.mark.unit


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_a_dead_proxy_does_not_hide_the_local_server(server, monkeypatch):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    url = f"http://127.0.0.1:{server}/health"
    # What urllib's default handlers do here: ask the proxy. A fresh opener, never urlopen(): urlopen builds its
    # global opener once, and one built under this dead proxy would send every later test's requests to it.
    with pytest.raises(urllib.error.URLError):
        urllib.request.build_opener().open(url, timeout=10)
    assert probes.http_request({"url": url}, None)["status"] == 200
    assert loadgen.health(server, timeout=10) == 200
