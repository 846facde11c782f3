"""The host's library versions: read once per agent, read again after a pip install changed a folder."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time

import pytest

from backend.agent.host import main as agent_main
from backend.agent.host import probes
from backend.agent.host.shared import protocol

pytestmark = pytest.mark.unit


def _dist(folder, version: str) -> None:
    meta = folder / f"specdeck_fake_lib-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: specdeck-fake-lib\nVersion: {version}\n")


def test_cached_until_the_install_folders_change(tmp_path, monkeypatch):
    _dist(tmp_path, "1.0")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setattr(probes, "LIBRARIES", ("specdeck-fake-lib", "numpy"))
    monkeypatch.setattr(probes, "_VERSIONS", [])
    reads = []
    real = probes._read_versions
    monkeypatch.setattr(probes, "_read_versions", lambda: reads.append(1) or real())
    probes.warm()  # as the agent starts
    assert probes.library_versions()["specdeck-fake-lib"] == "1.0" and len(reads) == 1  # the second is cached
    # `pip install -U`: the old dist-info goes, the new one comes. The folder's mtime is set past the first
    # reading's, as any later install's is (a filesystem's clock tick can be coarser than this test is fast).
    before = os.stat(tmp_path).st_mtime_ns
    shutil.rmtree(tmp_path / "specdeck_fake_lib-1.0.dist-info")
    _dist(tmp_path, "2.0")
    os.utime(tmp_path, ns=(before + 10**9, before + 10**9))
    assert probes.library_versions()["specdeck-fake-lib"] == "2.0" and len(reads) == 2
    shutil.rmtree(tmp_path / "specdeck_fake_lib-2.0.dist-info")  # uninstalled
    os.utime(tmp_path, ns=(before + 2 * 10**9, before + 2 * 10**9))
    assert probes.library_versions()["specdeck-fake-lib"] is None


def test_the_next_agent_takes_the_kept_versions_until_an_install(tmp_path, monkeypatch):
    """warm(STATE_DIR) keeps the platform text and versions for the next agent (host-facts.json); a new agent
    (fresh module caches) takes them without reading metadata, and reads again once an install folder
    changed."""
    site, state = tmp_path / "site", tmp_path / "state"
    site.mkdir()
    state.mkdir()
    _dist(site, "1.0")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.setattr(probes, "LIBRARIES", ("specdeck-fake-lib",))
    reads = []
    real = probes._read_versions
    monkeypatch.setattr(probes, "_read_versions", lambda: reads.append(1) or real())

    def new_agent() -> dict:
        monkeypatch.setattr(probes, "_VERSIONS", [])
        monkeypatch.setattr(probes, "_PLATFORM", [])
        probes.warm(str(state))
        return probes.library_versions()

    assert new_agent() == {"specdeck-fake-lib": "1.0"} and len(reads) == 1
    assert (state / probes.FACTS_FILE).exists()
    assert new_agent() == {"specdeck-fake-lib": "1.0"} and len(reads) == 1  # kept: no metadata read
    before = os.stat(site).st_mtime_ns
    shutil.rmtree(site / "specdeck_fake_lib-1.0.dist-info")
    _dist(site, "2.0")
    os.utime(site, ns=(before + 10**9, before + 10**9))
    assert new_agent() == {"specdeck-fake-lib": "2.0"} and len(reads) == 2
    (state / probes.FACTS_FILE).write_text("{not json")  # damaged: read again, kept anew
    assert new_agent() == {"specdeck-fake-lib": "2.0"} and len(reads) == 3
    assert new_agent() == {"specdeck-fake-lib": "2.0"} and len(reads) == 3


def test_an_info_sent_on_the_hello_takes_the_kept_versions(tmp_path, monkeypatch):
    """A cold command sends info as soon as the hello comes, often before the warm-up thread has run: the
    serving thread takes the kept facts before its first request, so that info reads no metadata either."""
    site, state = tmp_path / "site", tmp_path / "state"
    site.mkdir()
    state.mkdir()
    _dist(site, "1.0")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.setattr(probes, "LIBRARIES", ("specdeck-fake-lib",))
    monkeypatch.setattr(probes, "_VERSIONS", [])
    monkeypatch.setattr(probes, "_PLATFORM", [])
    probes.warm(str(state))  # an earlier agent kept them
    monkeypatch.setattr(probes, "_VERSIONS", [])  # a new agent
    monkeypatch.setattr(probes, "_PLATFORM", [])
    monkeypatch.setattr(probes, "warm", lambda *args: None)  # its warm-up thread not run yet
    reads = []
    monkeypatch.setattr(probes, "_read_versions", lambda: reads.append(1) or {})
    out = io.BytesIO()
    agent_main.Agent(str(state), out).serve(io.BytesIO(protocol.encode({"id": 1, "method": "info", "params": {}})))

    def reply() -> dict | None:
        frames = out.getvalue().split(b"\n", 1)[1]  # after the hello line
        return json.loads(frames[10:]) if frames else None  # one frame: its 10-byte header, then the message

    deadline = time.monotonic() + 30
    while reply() is None:  # handled on a thread of its own
        assert time.monotonic() < deadline, out.getvalue()[:400]
        time.sleep(0.01)
    assert reply()["result"]["versions"] == {"specdeck-fake-lib": "1.0"} and not reads
