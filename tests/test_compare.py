"""`specdeck inspect` / `specdeck diff` end to end: on this machine (file://), through the agent locally and over
the real sshd, and from the local hub (hf://) — the same answer every way; bad input; --weights."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from backend.sandbox import fixtures as fx
from backend.sandbox.hub import HubServer
from tests.helpers import CLI, run_cli
from tests.realweights import write_real

# One worker runs the module: its hub fixture hashes two 2.2 GiB (sparse) checkpoints, once per process.
pytestmark = [pytest.mark.tui, pytest.mark.e2e, pytest.mark.xdist_group("compare-hub")]

AQ_REPO = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
CHANGED_REPO = "org/aq-one-tensor-changed"
TARGET_REPO = "moonshotai/Kimi-K2-Instruct"
GATED_REPO = "org/gated-target"
BARE_REPO = "org/weights-without-config"
CHANGED = "midlayer.hidden_norm.weight"


@pytest.fixture(scope="module")
def hub_root(request, tmp_path_factory) -> Path:
    """Checkpoints under a hub root: the same folders are read as local paths, host paths and hub repos.

    Kept in pytest's cache (keyed by the fixtures' content): the hub's digest sidecars live there too, so the
    sha256 of two 2.2 GiB files is computed on the first run only.
    """
    layout = [fx.DRAFTERS["aq_medai_k2"], CHANGED, fx.KIMI_K2_TARGET_CONFIG]
    key = hashlib.sha1(json.dumps(layout, sort_keys=True).encode()).hexdigest()[:12]
    cache = getattr(request.config, "cache", None)
    root = cache.mkdir(f"specdeck-compare-hub-{key}") if cache else tmp_path_factory.mktemp("hubroot")
    if not (root / TARGET_REPO / "config.json").exists():  # written last: its presence means complete
        fx.write_drafter(str(root / AQ_REPO), "aq_medai_k2")
        fx.write_drafter(str(root / CHANGED_REPO), "aq_medai_k2", tensors={CHANGED: ("F32", [7168])})
        fx.write_target_config(str(root / TARGET_REPO))
    (root / BARE_REPO).mkdir(parents=True, exist_ok=True)
    fx.write_sparse_safetensors(str(root / BARE_REPO / "model.safetensors"), {"w": ("F32", [4, 4])})
    gated = fx.write_target_config(str(root / GATED_REPO))
    Path(gated, ".gated").write_text("hf_secret\n")
    return root


@pytest.fixture(scope="module")
def hub(hub_root: Path):
    with HubServer(hub_root) as server:
        server.warm()  # sha256 of two 2.2 GiB (sparse) files, unless a previous run left the sidecars
        yield server


@pytest.fixture
def llama(tmp_path) -> str:
    return fx.write_drafter(str(tmp_path / "llama"), "llama3_8b")


def run_json(*args: str):
    return json.loads(run_cli(*args, "--json").stdout)


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdeck: "), err
    assert "Traceback" not in err and "internal error" not in err
    return lines[0]


def without_paths(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "paths"}


# --- the same answer every way ---


@pytest.mark.slow
def test_same_diff_locally_over_ssh_and_from_the_hub(tmp_path, hub_root, hub, sshd):
    aq, changed, target = (str(hub_root / r) for r in (AQ_REPO, CHANGED_REPO, TARGET_REPO))
    local = run_json("--host", "local", "diff", f"file://{aq}", f"file://{changed}", "--target", f"file://{target}")
    agent = run_json("--host", "local", "diff", aq, changed, "--target", target)
    ssh = run_json(*sshd.cli_args(str(tmp_path / "sshwork")), "diff", aq, changed, "--target", target)
    from_hub = run_json(
        "--host",
        "local",
        "diff",
        f"hf://{AQ_REPO}",
        f"hf://{CHANGED_REPO}@main",
        "--target",
        f"hf://{TARGET_REPO}",
        "--endpoint",
        hub.url,
    )
    assert without_paths(local) == without_paths(agent) == without_paths(ssh) == without_paths(from_hub)
    assert local["paths"] == {"a": aq, "b": changed, "target": target}
    assert from_hub["paths"] == {
        "a": f"hf://{AQ_REPO}",
        "b": f"hf://{CHANGED_REPO}@main",
        "target": f"hf://{TARGET_REPO}",
    }

    # The shape, and what it says about a Kimi-K2 drafter against itself with one tensor changed.
    assert {"config", "tensors", "summary", "verdict"} <= set(local)
    assert all(row["status"] == "same" for row in local["config"])
    assert [row for row in local["tensors"] if row["status"] != "same"] == [
        {
            "name": CHANGED,
            "a": {"dtype": "BF16", "shape": [7168]},
            "b": {"dtype": "F32", "shape": [7168]},
            "status": "dtype",
        }
    ]
    assert len(local["tensors"]) == 15
    assert local["summary"]["a"] == {
        "params": fx.KIMI_K2_DRAFTER_PARAMS,
        "bytes": fx.KIMI_K2_DRAFTER_BYTES,
        "tensors": 15,
    }
    assert local["summary"]["b"]["bytes"] == fx.KIMI_K2_DRAFTER_BYTES + 7168 * 2
    assert local["verdict"]["compatible"] is True and local["verdict"]["problems"] == []
    assert any("--speculative-algorithm EAGLE3" in n for n in local["verdict"]["notes"])
    # The hub was read with Range requests: nothing near a weight file's size crossed the wire.
    assert max(r.body_bytes for r in hub.requests) <= 100_001


def test_same_inspect_locally_over_ssh_and_from_the_hub(tmp_path, hub_root, hub, sshd):
    aq = str(hub_root / AQ_REPO)
    local = run_json("--host", "local", "inspect", f"file://{aq}")
    ssh = run_json(*sshd.cli_args(str(tmp_path / "sshwork")), "inspect", aq)
    from_hub = run_json("--host", "local", "inspect", f"hf://{AQ_REPO}", "--endpoint", hub.url)
    assert set(local) == {
        *("path", "config", "files", "metadata", "tensors", "total_params", "total_bytes", "notes", "config_facts")
    }
    assert local == ssh
    assert {**from_hub, "path": aq} == local and from_hub["path"] == f"hf://{AQ_REPO}"
    assert local["tensors"]["fc.weight"] == {
        "dtype": "BF16",
        "shape": [7168, 21504],
        "bytes": 7168 * 21504 * 2,
        "file": "model.safetensors",
    }
    assert local["total_params"] == fx.KIMI_K2_DRAFTER_PARAMS

    code, out, _ = run_cli("--host", "local", "inspect", aq, rc=None)
    assert code == 0
    assert out.splitlines()[:2] == [
        f"{aq}  (on local)",
        "config: LlamaForCausalLMEagle3, hidden 7168, layers 1, vocab 163840, draft vocab 32000, "
        "aux layers [2, 30, 58]",
    ]
    assert "15 tensors, 1.19 B params, 2.22 GiB" in out
    assert any(line.split() == ["fc.weight", "BF16", "[7168,", "21504]", "294.00", "MiB"] for line in out.splitlines())


def test_diff_text_is_side_by_side(hub_root):
    aq, changed, target = (str(hub_root / r) for r in (AQ_REPO, CHANGED_REPO, TARGET_REPO))
    code, out, err = run_cli(
        "--host", "local", "diff", f"file://{aq}", f"file://{changed}", "--target", f"file://{target}", rc=None
    )
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert "config: 20 keys, 0 differ" in lines
    assert "tensors: 15 in A, 15 in B, 1 differ" in lines
    row = next(line for line in lines if line.strip().startswith(CHANGED))
    assert row.split() == [CHANGED, "BF16", "[7168]", "F32", "[7168]", "dtype"]
    assert "  norms: A 28.67 K params, 56.00 KiB, 4 tensors; B 28.67 K params, 70.00 KiB, 4 tensors" in lines
    assert "verdict: COMPATIBLE (A needs EAGLE3, B needs EAGLE3)" in lines


@pytest.mark.slow
def test_hub_sources_never_open_the_host(hub):
    """Only host paths need the host: a diff of hub repos works with an unreachable --host."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"ssh://nobody@127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
        d = run_json(
            "--host",
            dead,
            "diff",
            f"hf://{AQ_REPO}",
            f"hf://{AQ_REPO}",
            "--target",
            f"hf://{TARGET_REPO}",
            "--endpoint",
            hub.url,
        )
    assert all(row["status"] == "same" for row in d["tensors"])


# --- the verdict ---


def test_llama8b_drafter_on_a_kimi_target_is_incompatible(tmp_path, hub_root, llama):
    aq, target = str(hub_root / AQ_REPO), str(hub_root / TARGET_REPO)
    d = run_json("--host", "local", "diff", aq, llama, "--target", target)
    v = d["verdict"]
    assert v["compatible"] is False and v["a"]["compatible"] is True
    assert "B: hidden_size is 4096 but the target's hidden_size is 7168" in v["problems"]
    assert "B: fc.weight takes 12288 inputs but 3 aux layers × the target's hidden_size 7168 = 21504" in v["problems"]
    assert "B: t2d has 128256 entries but the target's vocab_size is 163840" in v["problems"]
    shapes = {row["name"]: row["status"] for row in d["tensors"]}
    assert shapes["fc.weight"] == "shape" and shapes["d2t"] == "same"
    config = {row["key"]: row for row in d["config"]}
    assert config["hidden_size"] == {"key": "hidden_size", "a": 7168, "b": 4096, "status": "changed"}

    # The verdict is data (exit 0) unless the script asks for a failure.
    code, out, _ = run_cli("--host", "local", "diff", aq, llama, "--target", target, rc=None)
    assert code == 0
    assert "verdict: INCOMPATIBLE (A needs EAGLE3, B needs EAGLE3)" in out
    assert "  problem: B: hidden_size is 4096 but the target's hidden_size is 7168" in out.splitlines()
    assert (
        run_cli("--host", "local", "diff", aq, llama, "--target", target, "--fail-incompatible", rc=None).returncode
        == 1
    )
    assert (
        run_cli("--host", "local", "diff", aq, aq, "--target", target, "--fail-incompatible", rc=None).returncode == 0
    )


def write_config(path: Path, target: str, drafters: dict[str, dict]) -> str:
    lines = ['default_host = "local"', f"target = {json.dumps(target)}"]
    for name, fields in drafters.items():
        lines.append(f"[drafters.{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_configured_drafters_and_target(tmp_path, hub_root):
    """Names resolve to the configured host paths; the configured target is the default."""
    config = write_config(
        tmp_path / "config.toml",
        str(hub_root / TARGET_REPO),
        {
            "ours": {"path": str(hub_root / CHANGED_REPO)},
            "aq-medai": {"path": str(tmp_path / "not-yet"), "repo": AQ_REPO},
        },
    )
    d = run_json("--config", config, "--host", "local", "diff", str(hub_root / AQ_REPO), "ours")
    assert d["paths"] == {
        "a": str(hub_root / AQ_REPO),
        "b": str(hub_root / CHANGED_REPO),
        "target": str(hub_root / TARGET_REPO),
    }
    assert d["verdict"]["compatible"] is True

    # A configured drafter not downloaded yet: say so, and how to get it or read the hub's copy.
    code, _, err = run_cli("--config", config, "--host", "local", "diff", "ours", "aq-medai", rc=None)
    assert code == 2
    assert one_line_error(err) == (
        f"specdeck: aq-medai is not on local yet ({tmp_path / 'not-yet'} does not exist): run "
        f"`specdeck download aq-medai`, or compare the hub copy with hf://{AQ_REPO}"
    )
    # A download under way (or stopped): the folder has its config.json but no weights yet.
    (tmp_path / "not-yet").mkdir()
    (tmp_path / "not-yet" / "config.json").write_text((hub_root / AQ_REPO / "config.json").read_text())
    code, _, err = run_cli("--config", config, "--host", "local", "diff", "ours", "aq-medai", rc=None)
    assert code == 2
    assert one_line_error(err) == (
        f"specdeck: aq-medai is not on local yet ({tmp_path / 'not-yet'} holds no *.safetensors file yet): run "
        f"`specdeck download aq-medai`, or compare the hub copy with hf://{AQ_REPO}"
    )

    # The default target missing on the host is a note; a --target that is missing is an error.
    missing = write_config(tmp_path / "missing.toml", str(tmp_path / "no-target"), {})
    d = run_json("--config", missing, "--host", "local", "diff", str(hub_root / AQ_REPO), str(hub_root / AQ_REPO))
    assert d["paths"]["target"] is None
    assert d["verdict"]["notes"][0].startswith("the configured target could not be read: ")
    assert "no target config: checked against the drafter's own config only" in d["verdict"]["notes"]
    code, _, err = run_cli(
        "--config", config, "--host", "local", "diff", "ours", "ours", "--target", str(tmp_path / "nowhere"), rc=None
    )
    assert code == 2
    assert one_line_error(err) == (
        f"specdeck: {tmp_path / 'nowhere'}/config.json does not exist on local; name the target as a model "
        "folder, a config.json or hf://org/name"
    )
    code, _, err = run_cli("--config", config, "--host", "local", "diff", "ours", "no-such-drafter!!", rc=None)
    assert code == 2 and one_line_error(err).startswith(
        "specdeck: unknown drafter 'no-such-drafter!!' (configured: aq-medai, "
    )


# --- bad input ---


def test_corrupt_files_exit_2_with_one_line(tmp_path, sshd):
    corpus = fx.write_corrupt_corpus(str(tmp_path / "corpus"))
    for path, rule in corpus.items():
        code, out, err = run_cli("--host", "local", "inspect", f"file://{path}", rc=None)
        assert code == 2 and out == "", rule
        assert one_line_error(err).startswith(f"specdeck: {path}: "), rule
    # The same through the agent, locally and over SSH, in a folder as a drafter would be.
    folder = tmp_path / "drafter"
    fx.write_drafter(str(folder), "ours")
    data, _ = fx.CORRUPT_FILES["overlapping_offsets.safetensors"]
    (folder / "model.safetensors").write_bytes(data)
    for flags in (["--host", "local"], sshd.cli_args(str(tmp_path / "sshwork"))):
        code, _, err = run_cli(*flags, "diff", str(folder), str(folder), "--target", str(folder), rc=None)
        assert code == 2
        assert one_line_error(err).startswith(f"specdeck: {folder / 'model.safetensors'}: ")
    (tmp_path / "bad-target").mkdir()
    (tmp_path / "bad-target" / "config.json").write_text("[1, 2]")
    code, _, err = run_cli(
        "--host",
        "local",
        "diff",
        f"file://{folder}",
        f"file://{folder}",
        "--target",
        f"file://{tmp_path / 'bad-target'}",
        rc=None,
    )
    assert code == 2 and "is not a JSON object" in one_line_error(err)


def test_missing_paths_exit_2(tmp_path, sshd):
    nope = str(tmp_path / "nope")
    for flags in (["--host", "local"], sshd.cli_args(str(tmp_path / "sshwork"))):
        code, out, err = run_cli(*flags, "inspect", nope, rc=None)
        assert (code, out) == (2, "")
        assert one_line_error(err) == f"specdeck: {nope} does not exist; check the path"
    code, _, err = run_cli("--host", "local", "diff", f"file://{nope}", f"file://{nope}", rc=None)
    assert code == 2 and one_line_error(err) == f"specdeck: {nope} does not exist; check the path"
    for bad in ("hf://", "hf://org/name@", "file://", ""):
        code, _, err = run_cli("--host", "local", "inspect", bad, rc=None)
        assert code == 2, bad
        one_line_error(err)


def test_the_real_process_exits_2_without_a_traceback(tmp_path):
    corrupt = tmp_path / "model.safetensors"
    corrupt.write_bytes(fx.CORRUPT_FILES["header_longer_than_file.safetensors"][0])
    proc = run_cli("--host", "local", "inspect", f"file://{corrupt}", rc=None, process=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line_error(proc.stderr).startswith(f"specdeck: {corrupt}: ")


@pytest.mark.slow
def test_hub_repo_without_config(hub):
    info = run_json("--host", "local", "inspect", f"hf://{BARE_REPO}", "--endpoint", hub.url)
    assert info["config"] is None and list(info["tensors"]) == ["w"]
    assert info["notes"] == ["no config.json: shapes only, the architecture and the aux layers are unknown"]
    bare = f"hf://{BARE_REPO}"
    code, _, err = run_cli("--host", "local", "diff", bare, bare, "--target", bare, "--endpoint", hub.url, rc=None)
    assert code == 2
    assert one_line_error(err) == f"specdeck: {bare} has no config.json; point at the model's repo"


@pytest.mark.slow
def test_hub_failures_exit_1(hub):
    code, _, err = run_cli("--host", "local", "inspect", "hf://org/does-not-exist", "--endpoint", hub.url, rc=None)
    assert code == 1
    assert one_line_error(err) == f"specdeck: hf://org/does-not-exist not found on {hub.url}; check the repo name"
    code, _, err = run_cli("--host", "local", "inspect", f"hf://{AQ_REPO}@v9", "--endpoint", hub.url, rc=None)
    assert code == 1 and "revision not found" in one_line_error(err)
    code, _, err = run_cli(
        "--host",
        "local",
        "diff",
        f"hf://{AQ_REPO}",
        f"hf://{AQ_REPO}",
        "--target",
        "hf://org/gone",
        "--endpoint",
        hub.url,
        rc=None,
    )
    assert code == 1 and "hf://org/gone not found" in one_line_error(err)
    code, _, err = run_cli(
        "--host",
        "local",
        "diff",
        f"hf://{AQ_REPO}",
        f"hf://{AQ_REPO}",
        "--target",
        f"hf://{GATED_REPO}",
        "--endpoint",
        hub.url,
        rc=None,
    )
    assert code == 1
    assert one_line_error(err) == (
        f"specdeck: hf://{GATED_REPO} is gated or private: set HF_TOKEN to a token with access to it, then retry"
    )
    # An unreachable hub fails at once (no retry backoff) with one sentence.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        started = time.monotonic()
        code, _, err = run_cli("--host", "local", "inspect", f"hf://{AQ_REPO}", "--endpoint", dead, rc=None)
        assert time.monotonic() - started < 15  # at once: huggingface_hub's download backoff alone is ~23 s
    assert code == 1 and one_line_error(err).startswith(f"specdeck: cannot reach the hub at {dead}")


# --- weights ---


@pytest.fixture
def small_real(tmp_path) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    f32 = rng.standard_normal((16, 24)).astype(np.float32)
    bf = rng.standard_normal((8, 8)).astype(np.float32)
    write_real(tmp_path / "a", f32, bf, {"only.a": np.ones(3, np.float32)})
    write_real(tmp_path / "b", f32 * 2, bf, {})
    return tmp_path / "a", tmp_path / "b"


def test_weights_over_both_transports(host, small_real):
    a, b = small_real
    flags = ["--host", "local"] if host.is_local else [
        "--host", host.url, "--identity", host.identity, "--known-hosts", host.known_hosts,
        "--python", host.python, "--workdir", host.workdir,
    ]  # fmt: skip
    code, out, err = run_cli(*flags, "diff", str(a), str(b), "--target", str(a), "--weights", "--json", rc=None)
    assert code == 0, err
    *events, last = (json.loads(line) for line in out.splitlines())
    assert [(e["event"], e["name"], e["done"], e["total"]) for e in events] == [
        ("tensor", name, i, 4) for i, name in enumerate(["ids", "mask", "w.bf16", "w.f32"], 1)
    ]
    weights = last["weights"]
    rows = {r["name"]: r for r in weights["tensors"]}
    assert rows["w.f32"]["rel_l2"] == pytest.approx(1.0) and rows["w.f32"]["cosine"] == pytest.approx(1.0)
    assert rows["w.bf16"]["rel_l2"] == 0.0
    assert weights["skipped"] == [{"name": "only.a", "reason": "only in A"}]
    assert {row["name"]: row["status"] for row in last["tensors"]}["only.a"] == "only_a"

    code, out, err = run_cli(*flags, "diff", str(a), str(b), "--target", str(a), "--weights", rc=None)
    assert code == 0 and err == ""  # no progress line when stderr is not a terminal
    lines = out.splitlines()
    assert "weights: 4 of 4 tensors compared" in lines
    table = lines[lines.index("weights: 4 of 4 tensors compared") :]
    assert next(line for line in table if line.strip().startswith("w.f32")).split() == ["w.f32", "1", "1.000000"]
    assert "  skipped only.a: only in A" in lines


def test_weights_progress_on_a_terminal(small_real):
    """On a terminal, stderr carries one self-overwriting progress line, cleared at the end."""
    a, b = small_real
    argv = [*CLI, "--host", "local", "diff", str(a), str(b), "--weights"]
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [*argv, "--target", str(a)],
            stdout=subprocess.PIPE,
            stderr=follower,
            check=False,
            timeout=60,
        )
        os.close(follower)
        follower = -1
        err = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert proc.returncode == 0
    shown = err.decode().split("\r\x1b[K")
    assert shown == ["", "weights: 1/4 ids", "weights: 2/4 mask", "weights: 3/4 w.bf16", "weights: 4/4 w.f32", ""]
    assert b"weights: 4 of 4 tensors compared" in proc.stdout


def test_weights_refusals(hub, small_real, llama):
    a, _ = small_real
    code, _, err = run_cli(
        "--host",
        "local",
        "diff",
        str(a),
        f"hf://{AQ_REPO}",
        "--target",
        str(a),
        "--weights",
        "--endpoint",
        hub.url,
        rc=None,
    )
    assert code == 2
    assert one_line_error(err) == (
        f"specdeck: --weights reads the weights where they are, on the host: B (hf://{AQ_REPO}) is a hub repo; "
        "download it to the host first"
    )
    code, _, err = run_cli("--host", "local", "diff", llama, str(a), "--target", str(a), "--weights", rc=None)
    assert code == 2
    assert one_line_error(err) == (
        "specdeck: A and B share no tensor of the same shape and dtype: there are no weights to compare"
    )


# --- the Compare tab ---


@pytest.fixture
def sandbox_like(tmp_path, hub_root, hub) -> tuple:
    """The sandbox's story: our drafter on the host (one tensor changed here), AQ-MedAI's only on the hub."""
    from backend.settings.validation import parse

    ours = fx.write_drafter(str(tmp_path / "host" / "ours"), "ours", tensors={CHANGED: ("F32", [7168])})
    target = fx.write_target_config(str(tmp_path / "host" / "models" / "Kimi-K2.5"))
    data = {
        "default_host": "sandbox",
        "target": target,
        "hosts": {
            "sandbox": {
                "url": "local",
                "python": sys.executable,
                "workdir": str(tmp_path / "host"),
                "sandbox": True,
                "hub_endpoint": hub.url,
            }
        },
        "drafters": {
            "ours": {"path": ours},
            "aq-medai": {"path": str(tmp_path / "host" / "aq_medai_k2"), "repo": AQ_REPO},
        },
    }
    return parse(data, "test"), ours


@pytest.mark.slow
async def test_compare_tab(sandbox_like, tmp_path, llama, monkeypatch):
    from textual.command import CommandPalette
    from textual.widgets import Static

    from tests.helpers import dialog_input, until
    from tui.app import SpecdeckApp
    from tui.screens.compare import ComparePane
    from tui.screens.prompt import PromptScreen
    from tui.widgets.diff_table import DiffTable

    settings, ours = sandbox_like
    monkeypatch.chdir(tmp_path)
    app = SpecdeckApp(settings, host="sandbox")
    async with app.run_test(size=(130, 40)) as pilot:
        await until(pilot, lambda: app.connection.connected, "connected")
        await pilot.press("2")
        pane = app.query_one(ComparePane)
        tensors = pane.query_one("#compare-tensors", DiffTable)
        config = pane.query_one("#compare-config", DiffTable)
        await until(pilot, lambda: isinstance(app.focused, DiffTable), "a table focused, so the keys work")
        assert pane.picks == {"a": "ours", "b": "aq-medai", "target": ""}

        def text(selector: str) -> str:
            return str(pane.query_one(selector, Static).content)

        await pilot.press("c")
        await until(pilot, lambda: pane.diff is not None, "the diff")
        # aq-medai is not on the host yet: read from the hub, and said so.
        assert text("#compare-status") == (
            f"A ours → {ours} · B aq-medai (not on sandbox yet: the hub copy) → hf://{AQ_REPO} · "
            f"target → {settings.target}"
        )
        assert text("#compare-badge") == "✔ COMPATIBLE"
        assert pane.query_one("#compare-badge").has_class("-compatible")
        assert text("#compare-summary").startswith("A 1.19 B params · 2.22 GiB · 15 tensors")
        assert "--speculative-algorithm EAGLE3" in text("#compare-notes")
        assert tensors.row_count == 15 and config.row_count == 20
        assert text("#compare-tensors-title") == "tensors: 15 in A, 15 in B, 1 differ"

        await pilot.press("x")  # differences only
        # Our config differs from AQ-MedAI's in two keys (K2.5's context, SpecForge's aux layers).
        await until(pilot, lambda: tensors.row_count == 1 and config.row_count == 2, "differences only")
        assert [str(c) for c in tensors.get_row_at(0)] == [CHANGED, "F32 [7168]", "BF16 [7168]", "dtype"]
        assert text("#compare-tensors-title").endswith("differences only (x)")
        # Every key is a palette command too.
        await pilot.press("ctrl+p")
        await dialog_input(pilot, CommandPalette, "the palette")
        await pilot.press(*"only the rows that differ", "enter")
        await until(pilot, lambda: tensors.row_count == 15, "differences only off, from the palette")
        assert not pane.differences_only

        # Markdown export, to the path typed in the dialog.
        await pilot.press("m")
        field = await dialog_input(pilot, PromptScreen, "the export dialog")
        assert field.value == "diff-ours-vs-aq-medai.md"
        field.value = "out/../diff.md"
        await pilot.press("enter")
        written = tmp_path / "diff.md"
        await until(pilot, lambda: any(str(written) in n.message for n in app._notifications), "the notice")
        md = written.read_text()
        assert md.startswith("# Drafter diff: A (ours) vs B (aq-medai)\n") and "**Verdict:** compatible" in md
        assert f"| {CHANGED} | F32 [7168] | BF16 [7168] | dtype |" in md

        # A Llama-8B drafter as B: incompatible, the problems listed with both numbers.
        await pilot.press("b")
        field = await dialog_input(pilot, PromptScreen, "the picker")
        assert field.value == "aq-medai"
        field.value = llama
        await pilot.press("enter")
        await until(pilot, lambda: pane.diff and pane.diff.paths.b == llama, "the Llama diff")
        assert text("#compare-badge").startswith("✕ INCOMPATIBLE · ")
        assert pane.query_one("#compare-badge").has_class("-incompatible")
        assert "✕ B: hidden_size is 4096 but the target's hidden_size is 7168" in text("#compare-problems")
        assert text("#compare-picks").startswith(f"A (a): ours   B (b): {llama}   target (g): ")

        # Another tab opens a drafter here: it becomes B and the compare runs. Its download is under way: the
        # folder holds config.json, no weights yet, so the hub copy is still what is read.
        (tmp_path / "host" / "aq_medai_k2").mkdir()
        (tmp_path / "host" / "aq_medai_k2" / "config.json").write_text("{}")
        pane.open_drafter("aq-medai")  # what the App does with another tab's OpenInCompare
        await until(pilot, lambda: pane.diff and pane.diff.paths.b == f"hf://{AQ_REPO}", "the opened drafter")
        assert pane.picks["a"] == "ours"
        await pilot.press("s")  # swap
        await until(pilot, lambda: pane.diff and pane.diff.paths.a == f"hf://{AQ_REPO}", "the swapped diff")
        assert pane.picks == {"a": "aq-medai", "b": "ours", "target": ""}

        # A compare that fails leaves no verdict behind its error: nothing of the last one stays on screen.
        assert text("#compare-badge") == "✔ COMPATIBLE" and tensors.row_count == 15
        pane.compare_sources("aq-medai", str(tmp_path / "host" / "gone"))
        await until(pilot, lambda: text("#compare-status").startswith("✕ "), "the failed compare's error")
        assert pane.diff is None and text("#compare-badge") == "no verdict yet"
        assert not pane.query_one("#compare-badge").has_class("-compatible")
        assert [text(f"#compare-{id}") for id in ("summary", "problems", "notes")] == ["", "", ""]
        assert tensors.row_count == 0 and config.row_count == 0 and text("#compare-tensors-title") == "tensors"

        # A bad source is one notification, not a traceback.
        await pilot.press("b")
        field = await dialog_input(pilot, PromptScreen, "the picker")
        field.value = "hf://"
        await pilot.press("enter")
        await until(pilot, lambda: any("is not a hub checkpoint" in n.message for n in app._notifications), "error")

        # An unknown drafter's name reads as the CLI says it, not as a missing folder.
        await pilot.press("b")
        field = await dialog_input(pilot, PromptScreen, "the picker")
        field.value = "no-such-drafter!!"
        await pilot.press("enter")
        await until(
            pilot,
            lambda: text("#compare-status").startswith("✕ unknown drafter 'no-such-drafter!!' (configured: "),
            "the unknown drafter",
        )
