"""`specdeck demo` / `sandbox up` keep the sandbox's config.toml: only what follows this machine is refreshed."""

from __future__ import annotations

import pytest

from backend.errors import UsageError
from backend.sandbox import environment
from backend.settings.config_file import load

pytestmark = pytest.mark.unit


def test_an_existing_sandbox_config_keeps_the_operators_edits(tmp_path):
    layout = environment.Layout(tmp_path)
    assert environment.write_config(layout, "http://127.0.0.1:1111", "0.5.23")  # none yet: written
    edited = layout.config.read_text() + "\n[profiles.eagle3-aq]  # applied in Tune\nsteps = 5\ndraft_tokens = 6\n"
    layout.config.write_text(edited)
    assert not environment.write_config(layout, "http://127.0.0.1:1111", "0.5.23")  # nothing stale: untouched
    assert layout.config.read_text() == edited

    # The hub came back on another port and the simulator speaks another release: those change, the edit stays.
    assert environment.write_config(layout, "http://127.0.0.1:2222", "0.5.6")
    settings = load(str(layout.config))
    assert (settings.profiles["eagle3-aq"].steps, settings.profiles["eagle3-aq"].draft_tokens) == (5, 6)
    assert settings.hosts["sandbox"].sglang_version == "0.5.6" and "applied in Tune" in layout.config.read_text()
    assert "2222" in layout.config.read_text() and "1111" not in layout.config.read_text()

    layout.config.write_text("not [ toml")  # beyond repair: a fresh one
    assert environment.write_config(layout, None, "0.5.23") and "sandbox" in load(str(layout.config)).hosts


def test_hosts_each_get_a_workdir_and_the_config_follows_their_count(tmp_path):
    layout = environment.Layout(tmp_path)
    route = environment.SshRoute("ssh://me@127.0.0.1:2222", "/k/id", "/k/known")
    three = environment.sandbox_hosts(layout, 3, route)
    assert [(h.name, h.workdir.name, h.ssh) for h in three] == [
        ("sandbox", "host", None), ("sandbox-2", "host-2", None), ("sandbox-3", "host-3", route),
    ]  # fmt: skip
    assert environment.write_config(layout, "http://127.0.0.1:1111", "0.5.23", three)
    hosts = load(str(layout.config)).hosts
    assert hosts["sandbox-3"].url == route.url and hosts["sandbox-3"].identity == "/k/id"
    assert hosts["sandbox-3"].launcher == "simulator" and hosts["sandbox-2"].workdir == str(tmp_path / "host-2")
    assert environment.configured_count(layout) == 3
    # Two hosts or more are a fleet of their own: a replica per host on its own port, the real router in front.
    fleet = load(str(layout.config)).fleets["sandbox"]
    assert [(r.host, r.port) for r in fleet.replicas] == [
        ("sandbox", 30000),
        ("sandbox-2", 30010),
        ("sandbox-3", 30020),
    ]
    assert fleet.router.host == "sandbox" and load(str(layout.config)).to_json()["fleets"]["sandbox"]
    edited = layout.config.read_text().replace("port = 8000", "port = 8100")  # the operator moved the router
    layout.config.write_text(edited)
    assert environment.write_config(layout, "http://127.0.0.1:1111", "0.5.23", three[:2])
    fleet = load(str(layout.config)).fleets["sandbox"]
    assert [r.host for r in fleet.replicas] == ["sandbox", "sandbox-2"] and fleet.router.port == 8100

    # The operator's own host stays when the sandbox shrinks; its own extra hosts go.
    layout.config.write_text(layout.config.read_text() + '\n[hosts.sandbox-gpu]\nurl = "local"\nsandbox = true\n')
    assert environment.write_config(layout, "http://127.0.0.1:1111", "0.5.23", environment.sandbox_hosts(layout, 1))
    assert set(load(str(layout.config)).hosts) >= {"sandbox", "sandbox-gpu"}
    assert "sandbox-2" not in load(str(layout.config)).hosts and environment.configured_count(layout) == 1
    assert load(str(layout.config)).fleets == {}  # one host: no fleet

    for bad, why in ((lambda: environment.sandbox_hosts(layout, 0), "at least 1"),
                     (lambda: environment.sandbox_hosts(layout, 1, route), "--hosts 2"),
                     (lambda: environment.SshRoute("ssh://me@10.1.230.174"), "not a loopback")):  # fmt: skip
        with pytest.raises(UsageError, match=why):
            bad()
