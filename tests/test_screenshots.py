"""`make screenshots` runs end to end: a fresh sandbox, simulated runs, the real app headless, SVGs written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tui, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_screenshot_script_writes_svgs(tmp_path):
    # The story's shared scene (the download, three measured runs) and the shots that read it; the Live, Tune,
    # Train and Fleet shots add a minute and a half of their own, left to `make screenshots` (their tabs'
    # tests drive the same flows).
    shots = ["drafters", "compare", "history"]
    res = subprocess.run(
        [sys.executable, "-m", "tui.screenshots", "--quick", "--out", str(tmp_path), "--only", *shots],
        cwd=REPO, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in tmp_path.glob("*.svg")) == sorted(f"{name}.svg" for name in shots)
    history = (tmp_path / "history.svg").read_text()
    assert history.startswith("<svg") and "Comparing&#160;3&#160;run(s)" in history
    assert "vs&#160;break-even" in history and "eagle3-ours" in history  # the baseline is measured: its figure
