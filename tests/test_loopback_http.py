"""The host's HTTP to its local server never goes through a proxy (the hub's goes through huggingface_hub, which
honours one)."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import shutil
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


def _job(root, job_id: str, kind: str, port: int, started: float, ended: bool) -> str:
    from backend.agent.host import jobs

    folder = root / job_id
    folder.mkdir(mode=0o700)
    spec = {"id": job_id, "kind": kind, "args": {"port": port}, "argv": ["sglang", "--port", str(port)]}
    (folder / "spec.json").write_text(json.dumps({**spec, "started": started}))
    pid = os.getpid()  # "running": the process it names is still the one that started it
    (folder / "pid.json").write_text(json.dumps({"pid": pid, "start": jobs.proc_start_time(pid)}))
    if ended:
        (folder / "exit.json").write_text(json.dumps({"state": "done", "code": 0, "ended": started + 1}))
    return str(folder)


def test_the_server_on_a_port_is_found_without_reading_ended_jobs_again(tmp_path, monkeypatch):
    """Each http.request asks which job of ours holds its port: among many ended jobs that read what it has not
    read before (a host keeps every job until pruned), and a server that ends stops being the holder."""
    from backend.agent.host import jobs, servers

    state = tmp_path / "state"
    root = state / "jobs"
    root.mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    for i in range(30):
        _job(root, f"serve-20261101-{i:06d}-old", "serve" if i % 2 else "bench", 9, 1000.0 + i, ended=True)
    live = _job(root, "serve-20261205-000000-new", "serve", 9, 2000.0, ended=False)
    router = _job(root, "router-20261205-000001-new", "router", 10, 2001.0, ended=False)
    described = []
    describe = jobs.describe
    monkeypatch.setattr(jobs, "describe", lambda job_dir: described.append(job_dir) or describe(job_dir))

    assert servers.holder(str(state), 9)["id"] == "serve-20261205-000000-new"
    assert servers.server_on(str(state), 10)["id"] == "router-20261205-000001-new"
    assert servers.server_on(str(state), 11) is None
    described.clear()
    assert servers.holder(str(state), 9)["id"] == "serve-20261205-000000-new"
    assert described == [live]  # the ended ones are remembered as ended
    (pathlib.Path(live) / "exit.json").write_text(json.dumps({"state": "done", "code": 0, "ended": 2002.0}))
    assert servers.holder(str(state), 9) is None and servers.server_on(str(state), 10)["id"].startswith("router")
    shutil.rmtree(router)  # pruned: its folder is gone, and so is what was kept of it
    assert servers.server_on(str(state), 10) is None and router not in servers._SPECS
    assert [j["id"] for j in servers.serve_jobs(str(state))][-1] == "serve-20261205-000000-new"
