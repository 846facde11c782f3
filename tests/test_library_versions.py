"""The host's library versions: read once per agent, read again after a pip install changed a folder."""

from __future__ import annotations

import os
import shutil
import sys

from backend.agent.host import probes


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
