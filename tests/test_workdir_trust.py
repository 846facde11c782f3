"""A workdir on a GPU host shared with other accounts (issue 20, item 1): the agent starts only from a path no
one else can change (OpenSSH's StrictModes), and its job runners go through the folder it opened, so a folder
swapped in by another uid is never run as us.

The neighbour is a uid with no account (setpriv switches to it): nothing to add to /etc/passwd or clean up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.agent.bundle import agent_name
from backend.agent.host.shared import safepath
from backend.connection import Connection
from backend.errors import ConnectionBlocked, RemoteError
from backend.settings.model import HostConfig

NEIGHBOUR = 54321

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv"),
]


def as_neighbour(script: str) -> None:
    ids = str(NEIGHBOUR)
    subprocess.run(["setpriv", "--reuid", ids, "--regid", ids, "--clear-groups", "sh", "-c", script], check=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the neighbour can reach (tmp_path sits under root's 0700 pytest folder)."""
    path = Path(tempfile.mkdtemp(prefix="specdeck-shared-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def local(workdir: Path) -> HostConfig:
    return HostConfig(name="local", url="local", python=sys.executable, workdir=str(workdir))


def folder(path: Path, mode: int) -> Path:
    path.mkdir()
    path.chmod(mode)  # past the umask
    return path


def test_every_component_is_judged_as_strictmodes_does(shared: Path):
    uid = os.geteuid()
    team = folder(shared / "team", 0o2775)
    assert "team (mode 2775) is writable by its group without the sticky bit" in safepath.unsafe_reason(
        str(team / "ours" / ".specdeck"), uid
    )
    assert "writable by its group and everyone" in safepath.unsafe_reason(str(folder(shared / "open", 0o777)), uid)
    sticky = folder(shared / "sticky", 0o1777)
    assert safepath.unsafe_reason(str(folder(sticky / "mine", 0o755)), uid) is None  # /tmp-like: only we rename it
    theirs = folder(sticky / "theirs", 0o755)
    os.chown(theirs, NEIGHBOUR, NEIGHBOUR)
    assert f"{theirs} belongs to uid {NEIGHBOUR}" in safepath.unsafe_reason(str(theirs / "w"), uid)
    (shared / "link").symlink_to(team)  # a safe link to an unsafe folder is as unsafe as its target
    assert "team (mode 2775)" in safepath.unsafe_reason(str(shared / "link" / "w"), uid)


async def test_a_group_writable_workdir_is_refused_before_the_agent_runs(shared: Path):
    """mode 2775 without the sticky bit: one sentence naming the folder and the fix, and no agent started."""
    team = folder(shared / "team", 0o2775)
    with pytest.raises(ConnectionBlocked) as err:
        await Connection.open(local(team / "work"))
    msg = str(err.value)
    assert f"refusing to run the agent from {team}/work/.specdeck: {team} (mode 2775)" in msg
    assert f"`chmod go-w {team}`" in msg and "\n" not in msg
    # Under a sticky folder, a workdir of our own is fine.
    conn = await Connection.open(local(folder(folder(shared / "tmp", 0o1777) / "mine", 0o755)))
    await conn.close()


async def test_a_state_dir_swapped_by_another_uid_is_never_run(shared: Path):
    """Connected, then the team folder is opened to everyone and the neighbour renames our state dir aside and
    puts a folder with its own agent-<hash>.pyz in its place: the next job start is refused and nothing of
    theirs runs. Runners already go through the descriptor the agent opened, not the path."""
    team = folder(shared / "team", 0o755)
    marker = shared / "ran-as-us"
    conn = await Connection.open(local(team))
    try:
        job = await conn.call("jobs.start", kind="test", argv=["sleep", "30"])
        runner = Path(f"/proc/{job['pid']}/cmdline").read_bytes().split(b"\0")
        assert runner[1].startswith(b"/proc/self/fd/") and runner[1].endswith(agent_name().encode())
        await conn.call("jobs.cancel", id=job["id"], timeout=5)

        team.chmod(0o777)
        shared.chmod(0o777)  # the neighbour's marker goes here
        name = agent_name()
        as_neighbour(
            f"cd {team} && mv .specdeck .specdeck-aside && mkdir .specdeck && "
            f'printf \'open("{marker}", "w").write("pwned")\\n\' > .specdeck/{name}'
        )
        with pytest.raises(RemoteError) as err:
            await conn.call("jobs.start", kind="test", argv=["true"])
        assert err.value.kind == "permission" and "refusing to use the agent state dir" in str(err.value)
        assert not marker.exists()
    finally:
        await conn.close()
