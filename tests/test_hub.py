"""The sandbox's local Hub against the real huggingface_hub client, on loopback."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors.numpy import save_file

from backend.sandbox.hub import HubServer
from backend.sandbox.hub_repos import CACHE_DIR_NAME, git_blob_oid
from tests.simhost import PY38

pytestmark = pytest.mark.e2e

PROJECT = Path(__file__).resolve().parent.parent
REPO = "acme/drafter"
GATED = "acme/gated"
TOKEN = "hf_sandbox_token"
WEIGHTS = "model.safetensors"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def hf_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Plain HTTP, online, no token, and nothing written to the real HF cache."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    # constants are read at import, so set the already-imported values too
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Two repos: a drafter (config, ~4 MiB safetensors, a sub-folder) and a gated one."""
    root = tmp_path / "hub"
    repo = root / REPO
    (repo / "extra").mkdir(parents=True)
    (repo / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    (repo / "extra" / "notes.txt").write_text("hello\n")
    rng = np.random.default_rng(4)
    save_file(
        {
            "fc.weight": rng.standard_normal((512, 1536)).astype(np.float32),
            "d2t": np.arange(1000, dtype=np.int64),
        },
        str(repo / WEIGHTS),
    )
    gated = root / GATED
    gated.mkdir(parents=True)
    (gated / "config.json").write_text("{}")
    (gated / ".gated").write_text(TOKEN + "\n")
    return root


@pytest.fixture
def hub(root: Path):
    with HubServer(root) as server:
        yield server


def download(hub: HubServer, tmp_path: Path, filename: str, repo_id: str = REPO, **kw: object) -> Path:
    path = hf_hub_download(
        repo_id, filename, local_dir=tmp_path / "out", cache_dir=tmp_path / "cache", endpoint=hub.url, **kw
    )
    return Path(path)


def raw(hub: HubServer, method: str, path: str, headers: dict[str, str] | None = None):
    """One request with http.client: (status, headers, body)."""
    u = urlsplit(hub.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def test_hf_hub_download_gets_exact_bytes_and_advertised_sha256(hub: HubServer, root: Path, tmp_path: Path):
    for name in ("config.json", WEIGHTS, "extra/notes.txt"):
        got = download(hub, tmp_path, name)
        assert got == tmp_path / "out" / name
        assert got.read_bytes() == (root / REPO / name).read_bytes()
    meta = get_hf_file_metadata(hf_hub_url(REPO, WEIGHTS, endpoint=hub.url), token=False)
    assert meta.etag == sha256((root / REPO / WEIGHTS).read_bytes())
    assert meta.size == (root / REPO / WEIGHTS).stat().st_size
    assert meta.xet_file_data is None
    assert len(meta.commit_hash) == 40


def test_resolve_headers_are_hub_shaped_without_xet(hub: HubServer, root: Path):
    data = (root / REPO / WEIGHTS).read_bytes()
    status, headers, body = raw(hub, "HEAD", f"/{REPO}/resolve/main/{WEIGHTS}")
    assert (status, body) == (200, b"")
    assert headers["X-Linked-Etag"] == f'"{sha256(data)}"'
    assert headers["X-Linked-Size"] == headers["Content-Length"] == str(len(data))
    assert headers["Accept-Ranges"] == "bytes"
    assert not [k for k in headers if k.lower().startswith("x-xet") or k.lower() == "link"]

    config = (root / REPO / "config.json").read_bytes()
    status, headers, _ = raw(hub, "HEAD", f"/{REPO}/resolve/main/config.json")
    assert headers["ETag"] == f'"{git_blob_oid(config)}"'  # small files: the git blob oid, no LFS headers
    assert "X-Linked-Etag" not in headers
    commit = headers["X-Repo-Commit"]
    status, _, body = raw(hub, "GET", f"/{REPO}/resolve/{commit}/config.json")
    assert (status, body) == (200, config)


def test_range_requests(hub: HubServer, root: Path):
    data = (root / REPO / WEIGHTS).read_bytes()
    path = f"/{REPO}/resolve/main/{WEIGHTS}"
    status, headers, body = raw(hub, "GET", path, {"Range": "bytes=100-"})
    assert (status, body) == (206, data[100:])
    assert headers["Content-Range"] == f"bytes 100-{len(data) - 1}/{len(data)}"
    assert raw(hub, "GET", path, {"Range": "bytes=10-19"})[2] == data[10:20]
    assert raw(hub, "GET", path, {"Range": "bytes=-8"})[2] == data[-8:]
    status, headers, _ = raw(hub, "GET", path, {"Range": f"bytes={len(data)}-"})
    assert status == 416
    assert headers["Content-Range"] == f"bytes */{len(data)}"


def test_get_safetensors_metadata_reads_the_header_with_ranges(hub: HubServer):
    meta = HfApi(endpoint=hub.url, token=False).get_safetensors_metadata(REPO)
    tensors = meta.files_metadata[WEIGHTS].tensors
    assert tensors["fc.weight"].shape == [512, 1536]
    assert tensors["d2t"].dtype == "I64"
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith(WEIGHTS)]
    assert gets and all(r.status == 206 and r.range for r in gets)


def test_paths_info_model_info_and_tree(hub: HubServer, root: Path):
    api = HfApi(endpoint=hub.url, token=False)
    weights = (root / REPO / WEIGHTS).read_bytes()
    config = (root / REPO / "config.json").read_bytes()

    infos = {i.path: i for i in api.get_paths_info(REPO, [WEIGHTS, "config.json", "extra", "missing.bin"])}
    assert set(infos) == {WEIGHTS, "config.json", "extra"}
    assert infos[WEIGHTS].size == len(weights)
    assert infos[WEIGHTS].lfs.sha256 == sha256(weights)
    assert infos[WEIGHTS].lfs.size == len(weights)
    assert infos["config.json"].lfs is None
    assert infos["config.json"].blob_id == git_blob_oid(config)

    info = api.model_info(REPO, files_metadata=True)
    assert info.id == REPO
    assert len(info.sha) == 40
    siblings = {s.rfilename: s for s in info.siblings}
    assert set(siblings) == {"config.json", WEIGHTS, "extra/notes.txt"}
    assert siblings[WEIGHTS].size == len(weights)
    assert siblings[WEIGHTS].lfs.sha256 == sha256(weights)
    assert api.model_info(REPO, revision=info.sha).sha == info.sha
    assert api.model_info(REPO).siblings[0].size is None  # sizes only with files_metadata, as on the Hub

    top = {e.path for e in api.list_repo_tree(REPO)}
    assert top == {"config.json", WEIGHTS, "extra"}
    assert {e.path for e in api.list_repo_tree(REPO, recursive=True)} == top | {"extra/notes.txt"}
    assert [e.path for e in api.list_repo_tree(REPO, "extra", expand=True)] == ["extra/notes.txt"]


def test_commit_sha_is_stable_and_follows_changes(root: Path):
    with HubServer(root) as a:
        sha = HfApi(endpoint=a.url, token=False).model_info(REPO).sha
    with HubServer(root) as b:
        api = HfApi(endpoint=b.url, token=False)
        assert api.model_info(REPO).sha == sha
        (root / REPO / "extra" / "notes.txt").write_text("changed\n")
        changed = api.model_info(REPO).sha
        assert changed != sha
        with pytest.raises(RevisionNotFoundError):
            api.model_info(REPO, revision=sha)


def test_missing_repo_file_and_revision_raise_the_hub_errors(hub: HubServer, tmp_path: Path):
    api = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError) as e:
        download(hub, tmp_path, "config.json", repo_id="acme/nope")
    assert type(e.value) is RepositoryNotFoundError
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("acme/nope")
    with pytest.raises(RepositoryNotFoundError):
        api.get_paths_info("acme/nope", ["config.json"])

    with pytest.raises(RemoteEntryNotFoundError) as e:
        download(hub, tmp_path, "nope.safetensors")
    assert isinstance(e.value, EntryNotFoundError)
    assert e.value.response.headers["X-Repo-Commit"] == api.model_info(REPO).sha
    assert not api.file_exists(REPO, "nope.safetensors")

    with pytest.raises(RevisionNotFoundError):
        download(hub, tmp_path, "config.json", revision="v2")


def test_gated_repo_needs_its_token(hub: HubServer, tmp_path: Path):
    with pytest.raises(GatedRepoError) as e:
        download(hub, tmp_path, "config.json", repo_id=GATED, token=False)
    assert e.value.response.status_code == 401
    with pytest.raises(GatedRepoError):
        download(hub, tmp_path, "config.json", repo_id=GATED, token="hf_wrong")
    assert download(hub, tmp_path, "config.json", repo_id=GATED, token=TOKEN).read_text() == "{}"
    # the listing stays public, as on the Hub: preflight can size a gated repo before asking for a token
    info = HfApi(endpoint=hub.url, token=False).model_info(GATED)
    assert info.gated == "auto"
    assert [s.rfilename for s in info.siblings] == ["config.json"]  # .gated is a control file, never listed
    assert raw(hub, "GET", f"/{GATED}/resolve/main/.gated", {"Authorization": f"Bearer {TOKEN}"})[0] == 404


def test_dropped_transfer_resumes_with_a_range_request(hub: HubServer, root: Path, tmp_path: Path):
    # huggingface_hub 2.4 retries inside the call, from the last whole 10 MiB chunk it received
    chunk = constants.DOWNLOAD_CHUNK_SIZE
    big = root / REPO / "big.bin"
    with big.open("wb") as f:  # sparse, with real bytes around the resume point
        f.truncate(2 * chunk + 12345)
        f.seek(chunk - 4096)
        f.write(os.urandom(8192))
    hub.drop(f"{REPO}/big.bin", after_bytes=chunk + 5000)
    got = download(hub, tmp_path, "big.bin")
    assert sha256(got.read_bytes()) == sha256(big.read_bytes())
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("big.bin")]
    assert [(g.status, g.range, g.body_bytes) for g in gets] == [
        (200, None, chunk + 5000),
        (206, f"bytes={chunk}-", big.stat().st_size - chunk),
    ]


def test_drop_before_the_first_chunk_restarts_from_zero(hub: HubServer, root: Path, tmp_path: Path):
    hub.drop(f"{REPO}/{WEIGHTS}", after_bytes=1_000_000)
    got = download(hub, tmp_path, WEIGHTS)
    assert got.read_bytes() == (root / REPO / WEIGHTS).read_bytes()
    gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith(WEIGHTS)]
    assert [(g.status, g.range, g.body_bytes) for g in gets] == [
        (200, None, 1_000_000),
        (200, None, got.stat().st_size),
    ]


def test_drop_then_raw_range_completes_the_file(hub: HubServer, root: Path):
    """What an old client (≤ 1.17) does across two calls: keep the partial file, ask for the rest."""
    data = (root / REPO / WEIGHTS).read_bytes()
    hub.drop(f"{REPO}/{WEIGHTS}", after_bytes=4096)
    u = urlsplit(hub.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", f"/{REPO}/resolve/main/{WEIGHTS}")
    resp = conn.getresponse()
    with pytest.raises(http.client.IncompleteRead) as e:
        resp.read()
    conn.close()
    partial = e.value.partial
    assert partial == data[:4096]
    status, _, rest = raw(hub, "GET", f"/{REPO}/resolve/main/{WEIGHTS}", {"Range": f"bytes={len(partial)}-"})
    assert status == 206
    assert partial + rest == data


def test_corrupt_file_serves_wrong_bytes_under_the_right_sha256(hub: HubServer, root: Path, tmp_path: Path):
    source = (root / REPO / WEIGHTS).read_bytes()
    hub.corrupt.add(f"{REPO}/{WEIGHTS}")
    got = download(hub, tmp_path, WEIGHTS).read_bytes()
    assert len(got) == len(source)
    assert got != source
    assert got[:-1] == source[:-1]  # the header still parses: only the checksum can catch it
    advertised = HfApi(endpoint=hub.url, token=False).get_paths_info(REPO, [WEIGHTS])[0].lfs.sha256
    assert advertised == sha256(source) != sha256(got)


def test_rate_limit_is_roughly_honoured(root: Path):
    (root / REPO / "blob.bin").write_bytes(os.urandom(1_000_000))
    with HubServer(root, rate_bps=4_000_000) as hub:
        t0 = time.monotonic()
        status, _, body = raw(hub, "GET", f"/{REPO}/resolve/main/blob.bin")
        elapsed = time.monotonic() - t0
    assert (status, len(body)) == (200, 1_000_000)
    assert elapsed >= 0.2


def test_sha256_is_cached_in_a_sidecar_keyed_by_size_and_mtime(root: Path):
    weights = root / REPO / WEIGHTS
    with HubServer(root) as hub:
        hub.warm()
    sidecar = root / CACHE_DIR_NAME / REPO / (WEIGHTS + ".json")
    record = json.loads(sidecar.read_text())
    assert record["digest"] == sha256(weights.read_bytes())

    sidecar.write_text(json.dumps(dict(record, digest="f" * 64)))  # a restarted server trusts its sidecar...
    with HubServer(root) as hub:
        assert raw(hub, "HEAD", f"/{REPO}/resolve/main/{WEIGHTS}")[1]["X-Linked-Etag"] == '"' + "f" * 64 + '"'
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # ...until the file changes
    with HubServer(root) as hub:
        etag = raw(hub, "HEAD", f"/{REPO}/resolve/main/{WEIGHTS}")[1]["X-Linked-Etag"]
        assert etag == f'"{sha256(weights.read_bytes())}"'


def test_path_traversal_is_not_served(hub: HubServer):
    assert raw(hub, "GET", f"/{REPO}/resolve/main/..%2F..%2F{GATED}%2F.gated")[0] == 404
    assert raw(hub, "GET", f"/{REPO}/resolve/main/../gated/config.json")[0] == 404
    assert raw(hub, "GET", "/.hubcache/x/resolve/main/y")[0] == 404


def test_stop_cuts_idle_connections_and_frees_the_port(root: Path):
    hub = HubServer(root)
    url = hub.start()
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", f"/api/models/{REPO}")
    assert conn.getresponse().read()  # keep-alive: the connection stays open
    hub.stop()
    with pytest.raises(OSError):
        http.client.HTTPConnection(u.hostname, u.port, timeout=2).request("GET", "/")
    conn.close()


@pytest.mark.parametrize("python", [sys.executable, str(PY38)], ids=["venv", "py38"])
def test_cli_serves_until_sigterm(python: str, root: Path, tmp_path: Path):
    if not Path(python).exists():
        pytest.skip(f"{python} is not installed")
    port_file = tmp_path / "hub.url"
    proc = subprocess.Popen(
        [
            python,
            "-m",
            "backend.sandbox.hub",
            "--root",
            str(root),
            "--port-file",
            str(port_file),
            "--rate",
            "50M",
        ],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()  # printed once listening
        assert port_file.read_text().strip() == url
        u = urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request("GET", f"/{REPO}/resolve/main/config.json")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, (root / REPO / "config.json").read_bytes())
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
