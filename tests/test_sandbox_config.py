"""`specdeck demo` / `sandbox up` keep the sandbox's config.toml: only what follows this machine is refreshed."""

from __future__ import annotations

from backend.sandbox import environment
from backend.settings import load


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
