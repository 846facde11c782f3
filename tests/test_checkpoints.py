"""Inspect, diff and verdict on real (sparse) drafter checkpoints; the host methods; the host side on 3.8."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from backend.agent.bundle import agent_zip
from backend.agent.host import checkpoint as host_methods  # registers checkpoint.inspect / compare_weights
from backend.agent.host.registry import METHODS, AgentError, Context
from backend.agent.host.shared import checkpoint_scan as host_ck
from backend.agent.host.shared.safetensors_header import CheckpointError
from backend.agent.host.shared.units import human_bytes
from backend.connection import Connection
from backend.drafters import checkpoint_diff, inspection
from backend.drafters import checkpoints as ck
from backend.errors import RemoteError, UsageError
from backend.sandbox import fixtures as fx
from tests.realweights import bf16_bits, write_real
from tests.simhost import PY38

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
K2_TARGET = fx.KIMI_K2_TARGET_CONFIG


def ctx(tmp_path, events=None) -> Context:
    return Context(str(tmp_path / "state"), (events if events is not None else []).append)


# --- inspect ---


def test_inspect_kimi_k2_drafter_folder(tmp_path):
    path = fx.write_drafter(str(tmp_path / "aq"), "aq_medai_k2")
    info = host_ck.inspect_checkpoint(path)
    assert set(info) == {
        "path",
        "config",
        "files",
        "metadata",
        "tensors",
        "total_params",
        "total_bytes",
        "notes",
    }
    assert info["config"]["architectures"] == ["LlamaForCausalLMEagle3"]
    assert len(info["tensors"]) == 15
    assert list(info["tensors"]) == sorted(info["tensors"])
    assert info["total_params"] == fx.KIMI_K2_DRAFTER_PARAMS  # ≈ 1.19 B
    assert info["total_bytes"] == fx.KIMI_K2_DRAFTER_BYTES
    assert round(info["total_bytes"] / 2**30, 2) == 2.22
    assert info["tensors"]["fc.weight"] == {
        "dtype": "BF16",
        "shape": [7168, 21504],
        "bytes": 7168 * 21504 * 2,
        "file": "model.safetensors",
    }
    assert info["tensors"]["t2d"]["dtype"] == "BOOL" and info["tensors"]["d2t"]["dtype"] == "I64"
    [f] = info["files"]
    assert f["name"] == "model.safetensors" and f["tensors"] == 15
    assert f["bytes"] == os.path.getsize(os.path.join(path, "model.safetensors"))
    assert info["metadata"] == {"format": "pt"}
    assert info["notes"] == []
    assert checkpoint_diff.format_params(info["total_params"]) == "1.19 B"
    assert human_bytes(info["total_bytes"]) == "2.22 GiB"


def test_inspect_single_file_and_missing_config(tmp_path):
    path = fx.write_drafter(str(tmp_path / "d"), "ours")
    single = host_ck.inspect_checkpoint(os.path.join(path, "model.safetensors"))
    assert single["config"] is None and len(single["tensors"]) == 15
    assert single["metadata"] == {"format": "pt", "specforge_samples": "37000"}
    assert "no config.json read" in single["notes"][0]
    os.remove(os.path.join(path, "config.json"))
    folder = host_ck.inspect_checkpoint(path)
    assert folder["config"] is None
    assert folder["notes"] == ["no config.json: shapes only, the architecture and the aux layers are unknown"]


def write_sharded(folder: Path, index: dict | None = None) -> Path:
    folder.mkdir()
    fx.write_sparse_safetensors(str(folder / "model-00001-of-00002.safetensors"), {"a": ("F32", [4, 4])})
    fx.write_sparse_safetensors(
        str(folder / "model-00002-of-00002.safetensors"), {"b": ("BF16", [8]), "c": ("I64", [2])}
    )
    weight_map = {
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors",
        "c": "model-00002-of-00002.safetensors",
    }
    body = index if index is not None else {"metadata": {"total_size": 96}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(body))
    (folder / "config.json").write_text(json.dumps({"hidden_size": 4}))
    return folder


def test_inspect_sharded(tmp_path):
    info = host_ck.inspect_checkpoint(str(write_sharded(tmp_path / "s")))
    assert [f["name"] for f in info["files"]] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert info["tensors"]["c"]["file"] == "model-00002-of-00002.safetensors"
    assert info["total_params"] == 16 + 8 + 2 and info["total_bytes"] == 64 + 16 + 16
    assert info["notes"] == []


def test_sharded_index_is_checked(tmp_path):
    folder = write_sharded(tmp_path / "gone")
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError) as err:
        host_ck.inspect_checkpoint(str(folder))
    assert err.value.rule == "index" and "model-00002-of-00002.safetensors" in str(err.value)

    lying = write_sharded(
        tmp_path / "lying",
        {"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}},
    )
    with pytest.raises(CheckpointError) as err:
        host_ck.inspect_checkpoint(str(lying))
    assert err.value.rule == "index" and "'a'" in str(err.value)

    partial = write_sharded(
        tmp_path / "partial",
        {"weight_map": {"a": "model-00001-of-00002.safetensors"}, "metadata": {"total_size": 1}},
    )
    info = host_ck.inspect_checkpoint(str(partial))
    assert set(info["tensors"]) == {"a"}
    assert info["notes"][0] == "not in the index, so not loaded: model-00002-of-00002.safetensors"
    assert "total_size 1" in info["notes"][1]


def test_bad_inputs_are_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; check the path"):
        host_ck.inspect_checkpoint(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError) as err:
        host_ck.inspect_checkpoint(str(tmp_path / "empty"))
    assert err.value.rule == "not_checkpoint"
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CheckpointError, match=r"not a \.safetensors file"):
        host_ck.inspect_checkpoint(str(tmp_path / "notes.txt"))
    bad = fx.write_drafter(str(tmp_path / "badcfg"), "ours")
    Path(bad, "config.json").write_text("{not json")
    with pytest.raises(CheckpointError) as err:
        host_ck.inspect_checkpoint(bad)
    assert err.value.rule == "config"
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    data, _ = fx.CORRUPT_FILES["truncated.safetensors"]
    (corrupt / "model.safetensors").write_bytes(data)
    with pytest.raises(UsageError) as err:
        inspection.inspect_local(str(corrupt))
    assert err.value.exit_code == 2
    assert str(err.value).startswith(str(corrupt / "model.safetensors") + ": ")
    with pytest.raises(UsageError, match="does not exist"):
        inspection.inspect_local(str(tmp_path / "nope"))


PERMISSION_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from specdeck_host.registry import METHODS, AgentError, Context
import specdeck_host.checkpoint
out = []
for path in sys.argv[2:]:
    try:
        METHODS["checkpoint.inspect"]({"path": path}, Context("/tmp", lambda event: None))
    except AgentError as exc:
        out.append([exc.kind, str(exc)])
print(json.dumps(out))
"""


def test_permission_denied(tmp_path):
    """As an unprivileged user (root reads everything): an unreadable file, an unlistable folder."""
    if os.geteuid() == 0 and not os.path.exists("/usr/bin/setpriv"):
        pytest.skip("running as root and no setpriv to drop privileges")
    shared = Path(tempfile.mkdtemp())  # pytest's tmp_path is private to root
    try:
        shared.chmod(0o755)
        name, data = agent_zip()
        (shared / name).write_bytes(data)
        (shared / name).chmod(0o644)
        drafter = fx.write_drafter(str(shared / "drafter"), "ours")
        os.chmod(drafter, 0o755)
        os.chmod(os.path.join(drafter, "config.json"), 0o644)
        os.chmod(os.path.join(drafter, "model.safetensors"), 0o600)
        locked = shared / "locked"
        locked.mkdir(mode=0o700)
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        python = "/usr/bin/python3" if drop else sys.executable
        proc = subprocess.run(
            [*drop, python, "-c", PERMISSION_SCRIPT, str(shared / name), drafter, str(locked)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        shutil.rmtree(shared)
    (kind_file, message_file), (kind_dir, message_dir) = json.loads(proc.stdout)
    assert kind_file == kind_dir == "permission"
    model = os.path.join(drafter, "model.safetensors")
    assert message_file == f"{model}: permission denied; make it readable for this user"
    assert message_dir == f"{locked}: permission denied; make it readable for this user"


def test_inspect_rpc_method(tmp_path):
    path = fx.write_drafter(str(tmp_path / "aq"), "aq_medai_k2")
    assert METHODS["checkpoint.inspect"]({"path": path}, ctx(tmp_path)) == inspection.inspect_local(path)
    cases = [({"path": str(tmp_path / "nope")}, "not_found"), ({}, "invalid")]
    corrupt = fx.write_corrupt_corpus(str(tmp_path / "corpus"))
    cases.append(({"path": next(iter(corrupt))}, "checkpoint"))
    for params, kind in cases:
        with pytest.raises(AgentError) as err:
            METHODS["checkpoint.inspect"](params, ctx(tmp_path))
        assert err.value.kind == kind
    assert err.value.data["rule"] == "too_small"


# --- diff and verdict ---


def test_flatten_config():
    cfg = {
        "a": 1,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "x": {"y": None}},
        "e": {},
    }
    assert checkpoint_diff.flatten_config(cfg) == {
        "a": 1,
        "eagle_config.eagle_aux_hidden_state_layer_ids": [2, 30, 58],
        "eagle_config.x.y": None,
        "e": {},
    }
    assert checkpoint_diff.flatten_config(None) == {}


def test_diff_kimi_drafter_against_itself_with_one_changed_tensor(tmp_path):
    a = inspection.inspect_local(fx.write_drafter(str(tmp_path / "a"), "aq_medai_k2"))
    b = inspection.inspect_local(
        fx.write_drafter(str(tmp_path / "b"), "aq_medai_k2", tensors={"midlayer.hidden_norm.weight": ("F32", [7168])})
    )
    d = checkpoint_diff.diff(a, b, K2_TARGET)
    assert set(d.to_json()) >= {"config", "tensors", "summary", "verdict"}
    assert all(row.status == "same" for row in d.config)
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in {row.key for row in d.config}
    changed = [row.to_json() for row in d.tensors if row.status != "same"]
    assert changed == [
        {
            "name": "midlayer.hidden_norm.weight",
            "a": {"dtype": "BF16", "shape": [7168]},
            "b": {"dtype": "F32", "shape": [7168]},
            "status": "dtype",
        }
    ]
    assert [row.name for row in d.tensors] == sorted(a["tensors"])
    summary = d.summary
    assert summary.a == checkpoint_diff.Totals(fx.KIMI_K2_DRAFTER_PARAMS, fx.KIMI_K2_DRAFTER_BYTES, 15)
    assert summary.b.bytes - summary.a.bytes == 7168 * 2
    assert summary.groups["norms"][1].bytes - summary.groups["norms"][0].bytes == 7168 * 2
    groups = summary.groups
    assert list(groups) == list(checkpoint_diff.GROUPS)
    assert {g: groups[g][0].tensors for g in checkpoint_diff.GROUPS} == {
        "attention": 4,
        "mlp": 3,
        "fc": 1,
        "lm_head": 1,
        "norms": 4,
        "vocab maps": 2,
        "other": 0,
    }
    assert sum(groups[g][0].params for g in checkpoint_diff.GROUPS) == summary.a.params
    assert d.verdict.compatible is True
    assert d.verdict.a["algorithm"] == d.verdict.b["algorithm"] == "EAGLE3"
    # Notes both sides share appear once, unprefixed.
    assert sum("--speculative-algorithm EAGLE3" in n for n in d.verdict.notes) == 1


def test_diff_statuses(tmp_path):
    a = inspection.inspect_local(fx.write_drafter(str(tmp_path / "a"), "aq_medai_k2"))
    b = inspection.inspect_local(
        fx.write_drafter(
            str(tmp_path / "b"),
            "ours",
            tensors={
                "t2d": None,
                "embed_tokens.weight": ("BF16", [163840, 7168]),
                "fc.weight": ("BF16", [7168, 14336]),
            },
            rope_theta=1000000.0,
            torch_dtype=None,
            target_model_type="kimi_k25",
        )
    )
    d = checkpoint_diff.diff(a, b, {"config": K2_TARGET, "tensors": {}})  # an inspect dict of the target works too
    statuses = {row.name: row.status for row in d.tensors}
    assert statuses["t2d"] == "only_a" and statuses["embed_tokens.weight"] == "only_b"
    assert statuses["fc.weight"] == "shape"
    assert next(r for r in d.tensors if r.name == "t2d").b is None
    config = {row.key: row for row in d.config}
    assert config["rope_theta"] == checkpoint_diff.ConfigRow("rope_theta", 50000.0, 1000000.0, "changed")
    assert config["torch_dtype"].status == "only_a" and config["torch_dtype"].b is None
    assert config["target_model_type"].status == "only_b"
    assert d.summary.groups["other"][1].params == 163840 * 7168
    v = d.verdict
    assert v.compatible is False and v.a["compatible"] is True
    assert v.problems == ("B: fc.weight takes 14336 inputs but 3 aux layers × the target's hidden_size 7168 = 21504",)
    assert any(
        n.startswith("B: trained for model_type kimi_k25") and "same shapes ≠ same behaviour" in n for n in v.notes
    )
    md = checkpoint_diff.diff_to_markdown(d, "A (AQ-MedAI)", "B (ours)")
    assert md.startswith("# Drafter diff: A (AQ-MedAI) vs B (ours)\n")
    assert "**Verdict:** incompatible" in md
    assert "| t2d | BOOL [163840] | — | only_a |" in md
    assert "| rope_theta | 50000.0 | 1000000.0 | changed |" in md
    assert "| **total** | 1.19 B params, 2.22 GiB, 15 tensors |" in md


def test_verdict_kimi_drafter_on_kimi_target(tmp_path):
    drafter = inspection.inspect_local(fx.write_drafter(str(tmp_path / "aq"), "aq_medai_k2"))
    v = ck.verdict(drafter, K2_TARGET)
    assert v["compatible"] is True and v["problems"] == []
    assert v["algorithm"] == "EAGLE3"
    assert any("--speculative-algorithm EAGLE3" in n and "1.00" in n for n in v["notes"])
    assert any("same shapes ≠ same behaviour" in n for n in v["notes"])
    # A multimodal target that nests its language model (Kimi-K2.5 style) is read through text_config.
    nested = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": K2_TARGET,
    }
    assert ck.verdict(drafter, nested)["compatible"] is True
    without = ck.verdict(drafter, None)
    assert without["compatible"] is True
    assert "no target config: checked against the drafter's own config only" in without["notes"]


def test_verdict_llama8b_drafter_on_kimi_target(tmp_path):
    drafter = inspection.inspect_local(fx.write_drafter(str(tmp_path / "llama"), "llama3_8b"))
    assert ck.verdict(drafter, None)["compatible"] is True  # fine on its own terms
    v = ck.verdict(drafter, K2_TARGET)
    assert v["compatible"] is False
    assert v["problems"] == [
        "hidden_size is 4096 but the target's hidden_size is 7168",
        "fc.weight takes 12288 inputs but 3 aux layers × the target's hidden_size 7168 = 21504",
        "midlayer.self_attn.q_proj.weight takes 8192 inputs but 2 × the target's hidden_size 7168 = 14336",
        "midlayer.self_attn.k_proj.weight takes 8192 inputs but 2 × the target's hidden_size 7168 = 14336",
        "midlayer.self_attn.v_proj.weight takes 8192 inputs but 2 × the target's hidden_size 7168 = 14336",
        "t2d has 128256 entries but the target's vocab_size is 163840",
    ]


def test_verdict_of_an_eagle1_config_read_without_its_tensors():
    """config.json alone (a Hub listing, a folder still downloading): judged by what it says, no traceback."""
    drafter = {"config": {"architectures": ["LlamaForCausalLMEagle"], "hidden_size": 4096, "vocab_size": 32000}}
    v = ck.verdict({**drafter, "tensors": {}}, {"hidden_size": 4096, "vocab_size": 32000})
    assert v["compatible"] is None and v["problems"] == [] and v["algorithm"] == "EAGLE"
    assert v["unchecked"][0].startswith("tensor shapes: no safetensors were read")


def test_verdict_catches_each_failure(tmp_path):
    def judge(**kw) -> dict:
        folder = str(tmp_path / f"d{len(os.listdir(tmp_path))}")
        return ck.verdict(inspection.inspect_local(fx.write_drafter(folder, "aq_medai_k2", **kw)), K2_TARGET)

    aux = judge(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 30, 60]})
    assert aux["problems"] == [
        "eagle_config.eagle_aux_hidden_state_layer_ids has 60 but the target has 61 layers: SGLang reads the "
        "input of layer id + 1, so ids must be 0 to 59"
    ]
    four = judge(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 20, 40, 58]})
    assert four["problems"] == ["fc.weight takes 21504 inputs but 4 aux layers × the target's hidden_size 7168 = 28672"]
    vocab = judge(draft_vocab_size=16000)
    assert vocab["problems"] == [
        "lm_head.weight has 32000 rows but draft_vocab_size is 16000",
        "d2t has 32000 entries but draft_vocab_size is 16000",
    ]
    d2t = judge(tensors={"d2t": ("I64", [31000])})
    assert d2t["problems"] == ["d2t has 31000 entries but draft_vocab_size is 32000"]
    no_map = judge(tensors={"d2t": None})
    assert no_map["problems"] == [
        "d2t is missing but draft_vocab_size 32000 differs from the target's vocab_size 163840: "
        "SGLang cannot map draft tokens to target tokens"
    ]
    eagle2 = judge(architectures=["LlamaForCausalLMEagle"])  # an EAGLE-3 drafter's tensors under an EAGLE name
    assert eagle2["algorithm"] == "EAGLE3"
    assert eagle2["problems"] == [
        "architectures is ['LlamaForCausalLMEagle'] (EAGLE-1/2) but the tensors are an EAGLE-3 drafter's: SGLang "
        "would build the wrong model for them; set architectures to ['LlamaForCausalLMEagle3']"
    ]
    default_aux = judge(eagle_config=None)
    assert default_aux["compatible"] and any("default layers" in n for n in default_aux["notes"])
    missing = judge(tensors={"fc.weight": None, "midlayer.self_attn.k_proj.weight": None})
    assert len(missing["problems"]) == 2 and missing["problems"][0].startswith("fc.weight is missing")
    no_config = ck.verdict({"config": None, "tensors": {}}, K2_TARGET)
    assert no_config["problems"][0].startswith("there is no config.json")
    assert no_config["algorithm"] is None


# --- weight comparison on the host ---


@pytest.fixture
def two_real_drafters(tmp_path):
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((37, 53)).astype(np.float32)
    bf = rng.standard_normal((11, 29)).astype(np.float32)
    write_real(tmp_path / "a", f32, bf, {"only.a": np.zeros(2, np.float32), "shape": np.zeros((2, 3), np.float16)})
    f32_b = f32 * 1.5  # same direction: cosine 1, relative distance 0.5
    bf_b = bf + rng.standard_normal(bf.shape).astype(np.float32) * 0.1
    write_real(tmp_path / "b", f32_b, bf_b, {"shape": np.zeros((3, 2), np.float16)})
    return tmp_path / "a", tmp_path / "b", (f32, f32_b), (bf, bf_b)


def test_compare_weights(tmp_path, two_real_drafters, monkeypatch):
    a, b, _, (bf, bf_b) = two_real_drafters
    monkeypatch.setattr(host_methods, "CHUNK_ELEMENTS", 100)  # many chunks per tensor
    events: list[dict] = []
    result = METHODS["checkpoint.compare_weights"]({"a": str(a), "b": str(b)}, ctx(tmp_path, events))
    assert [e["name"] for e in events] == ["ids", "mask", "w.bf16", "w.f32"]
    assert [(e["event"], e["done"], e["total"]) for e in events] == [("tensor", i, 4) for i in range(1, 5)]
    rows = {r["name"]: r for r in result["tensors"]}
    assert rows["ids"] == {"name": "ids", "rel_l2": 0.0, "cosine": 1.0}
    assert rows["w.f32"]["cosine"] == pytest.approx(1.0) and rows["w.f32"]["rel_l2"] == pytest.approx(0.5)
    # bf16: compared as the values the file holds (float32 truncated to bf16), read back by bit-shifting.
    xa = (bf16_bits(bf).astype(np.uint32) << 16).view(np.float32).astype(np.float64).ravel()
    xb = (bf16_bits(bf_b).astype(np.uint32) << 16).view(np.float32).astype(np.float64).ravel()
    assert rows["w.bf16"]["rel_l2"] == pytest.approx(np.linalg.norm(xa - xb) / np.linalg.norm(xa), rel=1e-9)
    assert rows["w.bf16"]["cosine"] == pytest.approx(xa @ xb / np.linalg.norm(xa) / np.linalg.norm(xb), rel=1e-9)
    assert result["skipped"] == [
        {"name": "only.a", "reason": "only in A"},
        {"name": "shape", "reason": "shape [2, 3] vs [3, 2]"},
    ]
    assert result["compared"] == result["total"] == 4 and result["cancelled"] is False
    assert result["max_rel_l2"] == pytest.approx(0.5)


def test_compare_weights_cancel_and_errors(tmp_path, two_real_drafters):
    a, b, *_ = two_real_drafters
    c = ctx(tmp_path)
    c.cancelled.set()
    result = METHODS["checkpoint.compare_weights"]({"a": str(a), "b": str(b)}, c)
    assert result["cancelled"] is True and result["compared"] == 0
    with pytest.raises(AgentError) as err:
        METHODS["checkpoint.compare_weights"]({"a": str(a), "b": str(tmp_path / "nope")}, ctx(tmp_path))
    assert err.value.kind == "not_found"


async def test_through_the_agent(host, tmp_path, two_real_drafters):
    """The registered methods through the real agent, locally and over the real sshd."""
    drafter = fx.write_drafter(str(tmp_path / "aq"), "aq_medai_k2")
    a, b, *_ = two_real_drafters
    conn = await Connection.open(host)
    try:
        assert await conn.call("checkpoint.inspect", path=drafter) == inspection.inspect_local(drafter)
        with pytest.raises(RemoteError) as err:
            await conn.call("checkpoint.inspect", path=str(tmp_path / "nope"))
        assert (err.value.kind, err.value.exit_code) == ("not_found", 2)
        assert str(err.value) == f"{tmp_path / 'nope'} does not exist; check the path"
        events = [ev async for ev in conn.stream("checkpoint.compare_weights", a=str(a), b=str(b))]
        assert [ev["done"] for ev in events] == [1, 2, 3, 4]
        summary = await conn.call("checkpoint.compare_weights", a=str(a), b=str(b))
        assert summary["compared"] == 4 and summary["tensors"] == [
            {k: ev[k] for k in ("name", "rel_l2", "cosine")} for ev in events
        ]
    finally:
        await conn.close()


# --- the host side on Python 3.8 ---

PY38_SCRIPT = """
import importlib.util, json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]  # the agent zipapp, then the repo (for the sandbox fixtures)
from backend.sandbox.fixtures import write_drafter
from specdeck_host.registry import METHODS, AgentError, Context
import specdeck_host.checkpoint  # registers checkpoint.inspect / checkpoint.compare_weights
folder = write_drafter(sys.argv[3], "llama3_8b")
ctx = Context(sys.argv[3], lambda event: None)
out = {"inspect": METHODS["checkpoint.inspect"]({"path": folder}, ctx)}
out["numpy"] = importlib.util.find_spec("numpy") is not None
for key, params in (("missing", {"path": folder + "/nope"}), ("compare", {"a": folder, "b": folder})):
    try:
        METHODS["checkpoint.inspect" if key == "missing" else "checkpoint.compare_weights"](params, ctx)
    except AgentError as exc:
        out[key] = [exc.kind, str(exc)]
print(json.dumps(out))
"""


@pytest.mark.skipif(not PY38.exists(), reason="no Python 3.8 interpreter in this image")
def test_host_modules_run_on_python_38(tmp_path):
    name, data = agent_zip()
    pyz = tmp_path / name
    pyz.write_bytes(data)
    proc = subprocess.run(
        [str(PY38), "-c", PY38_SCRIPT, str(pyz), str(ROOT), str(tmp_path / "llama")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["inspect"] == inspection.inspect_local(str(tmp_path / "llama"))
    assert out["missing"][0] == "not_found"
    if not out["numpy"]:
        kind, message = out["compare"]
        assert kind == "unsupported" and "needs numpy on the host" in message
    assert sys.version_info >= (3, 11)  # and the client side ran the same code on 3.11 above
