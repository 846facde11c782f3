"""The agent's state dir holds code that specdeck runs: one someone else could have planted is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.errors import ConnectionBlocked
from backend.settings.model import HostConfig

pytestmark = pytest.mark.e2e


def planted(tmp_path: Path) -> Path:
    """A directory of someone else's, with a 'newer agent' in it, for the state dir to point at."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    return theirs


async def test_symlinked_state_dir_is_refused(host: HostConfig, tmp_path):
    Path(host.workdir).mkdir(parents=True)
    state = Path(host.workdir) / ".specdeck"
    state.symlink_to(planted(tmp_path))
    with pytest.raises(ConnectionBlocked, match=r"\.specdeck: it is a symbolic link; remove it") as err:
        await Connection.open(host)
    assert "\n" not in str(err.value)
    assert list((tmp_path / "theirs").iterdir()) == []  # nothing uploaded through the link
    assert (tmp_path / "theirs").stat().st_mode & 0o777 != 0o700 or os.getuid() != 0  # and no chmod


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a directory to another user")
async def test_state_dir_of_another_user_is_refused(host: HostConfig, tmp_path):
    state = Path(host.workdir) / ".specdeck"
    state.mkdir(parents=True)
    os.chown(state, 65534, 65534)  # nobody's
    with pytest.raises(ConnectionBlocked, match="it is not a directory owned by"):
        await Connection.open(host)
    assert list(state.iterdir()) == []


async def test_own_state_dir_is_used_and_kept_private(host: HostConfig):
    state = Path(host.workdir) / ".specdeck"
    for _ in range(2):  # installed private; opened up by hand since, made private again at the next start
        conn = await Connection.open(host)
        await conn.close()
        assert state.is_dir() and not state.is_symlink() and state.stat().st_mode & 0o777 == 0o700
        state.chmod(0o777)
