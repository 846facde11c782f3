"""Profile edits written back to the config file with tomlkit: comments and layout kept, only changes written."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.errors import ConfigError
from backend.settings.config_file import load, save_profile
from backend.settings.template import INIT_TEMPLATE

pytestmark = pytest.mark.unit


def test_save_profile_keeps_comments_and_writes_only_changes(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(INIT_TEMPLATE + "\n# a note of the user's at the end\n")
    settings = load(str(path))
    saved, written = save_profile(settings, replace(settings.profiles["eagle3-aq"], steps=4, draft_tokens=5))
    assert written == path and saved.profiles["eagle3-aq"].steps == 4
    text = path.read_text()
    before, after = INIT_TEMPLATE.splitlines(), text.splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=False) if a != b]
    assert changed == [("steps = 3", "steps = 4"), ("draft_tokens = 4", "draft_tokens = 5")]
    assert "# a note of the user's at the end" in text and "# extra_args = [" in text
    assert load(str(path)).profiles["eagle3-aq"].draft_tokens == 5

    # A new profile gets its own table; None removes a key; extra flags become a list.
    saved, _ = save_profile(saved, replace(saved.profiles["eagle3-aq"], name="aq-4", extra_args=("--x", "1")))
    again = load(str(path))
    assert again.profiles["aq-4"].extra_args == ("--x", "1") and again.profiles["aq-4"].steps == 4
    save_profile(again, replace(again.profiles["aq-4"], algorithm=None, steps=None, topk=None, draft_tokens=None))
    section = path.read_text().split("[profiles.aq-4]")[1]
    assert "steps" not in section and load(str(path)).profiles["aq-4"].draft_tokens is None


def test_built_in_defaults_write_the_default_file_and_bad_values_write_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    settings = load()
    assert settings.source == "built-in defaults"
    _, written = save_profile(settings, replace(settings.profiles["eagle3-ours"], steps=2, draft_tokens=3))
    assert written.exists() and "steps = 2" in written.read_text() and "[hosts.gpu-box]" in written.read_text()
    text = written.read_text()
    with pytest.raises(ConfigError, match="port"):
        save_profile(load(str(written)), replace(settings.profiles["eagle3-ours"], port=70000))
    assert written.read_text() == text
