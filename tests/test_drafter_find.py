"""`drafters find` (issue 35): the real huggingface_hub client against the sandbox Hub serving the catalog of real
repos around Kimi-K2.5, no mocks of the client. On a K2.5 target the K2.5-trained EAGLE-3 drafters rank above
AQ-MedAI's K2 one, which is marked trained for Kimi-K2-Instruct; the lookalikes (the target's quantized and
GGUF copies, a LoRA, a repo named "Eagle" that is no drafter, drafters for other models) are refused with the
reason; gated repos, a rate-limited Hub and a client with no route each say so in one sentence (exit 2); the
search runs on the host when only the host can reach the Hub."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from backend.agent.host.shared import hub_search
from backend.drafters import checkpoints
from backend.drafters import find as df
from backend.drafters.sources import Sources
from backend.sandbox import fixtures, hub_catalog
from backend.sandbox.hub import HubServer
from backend.sandbox.hub_repos import parse_front_matter
from backend.settings import config_file
from tests.helpers import Ran, run_cli
from tests.simhost import PY38
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

K25_EAGLE3 = "AQ-MedAI/Kimi-K25-eagle3"
K2_EAGLE3 = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
LOOKALIKES = {
    "daslab-testing/Kimi-K2.5-2bit-GSQ": "target copy",
    "modularai/Kimi-K2.5-MTP": "target copy",
    "moonshotai/Kimi-K2.5": "target copy",
    "unsloth/Kimi-K2.5-GGUF": "gguf",
    "freakyskittle/kimi-k2.5-dflash.gguf": "gguf",
    "Chat-Error/Llama-3-Kimiko-LoRA": "adapter",
    "RWKV/v5-Eagle-7B-HF": "not a drafter",
    "thoughtworks/Qwen3-32B-Eagle3": "drafter",  # a real drafter, for another model: refused by its shapes
}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    hub_catalog.write_catalog(root)
    return root


@pytest.fixture
def hub(root):
    with HubServer(root, models_page=4) as server:  # small pages: every listing is followed by its Link
        yield server


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return Path(fixtures.write_target_config(str(tmp_path_factory.mktemp("models") / "Kimi-K2.5")))


def write_config(tmp_path: Path, hub: HubServer, target: Path, **host: str) -> Path:
    lines = [
        'default_host = "sim"',
        f"target = {json.dumps(str(target))}",
        "[hosts.sim]",
        'url = "local"',
        f"python = {json.dumps(host.get('python', sys.executable))}",
        f"workdir = {json.dumps(str(tmp_path / 'host'))}",
        'launcher = "simulator"',
        "sandbox = true",
        f'sglang_version = "{host.get("sglang_version", "0.5.23")}"',
        f"hub_endpoint = {json.dumps(hub.url)}",
        "",
        "# the operator's own drafter stays as it was written",
        "[drafters.ours]",
        'path = "/data/ours"  # trained here',
    ]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def specdeck(config: Path, *args: str, rc: int | None = 0, env: dict | None = None) -> Ran:
    # huggingface_hub reads HF_HUB_OFFLINE once, when imported: a command with it set is a process of its own.
    return run_cli("--config", str(config), *args, rc=rc, env=env, process=env is not None)


def find(config: Path, *args: str, **kw) -> dict:
    return json.loads(specdeck(config, "drafters", "find", "--json", *args, **kw).stdout)


def run_find(config: Path, target: str) -> df.Found:
    """``drafters find`` in this process (its search in a thread, as the panel runs it), on a target that needs no
    host (a hub repo or a file:// config)."""
    settings = config_file.load(config)
    host = settings.hosts["sim"]

    async def no_host():
        raise AssertionError("this search needs no connection to the host")

    return asyncio.run(df.find(settings, host, Sources(host, no_host, host.hub_endpoint), target))


# --- the sandbox Hub, read by the real client ------------------------------------------------------------------


def test_the_real_client_searches_filters_and_pages_the_sandbox_hub(hub):
    api = HfApi(endpoint=hub.url, token=False)
    found = [m.id for m in api.list_models(search="kimi-k2.5", sort="downloads", limit=100)]
    assert K25_EAGLE3 not in found and "lightseekorg/kimi-k2.5-eagle3" in found  # a substring of the id, any case
    pages = [r for r in hub.requests if r.path == "/api/models"]
    assert len(pages) == 3  # 10 repos, 4 a page: the client followed two Link headers
    children = {m.id for m in api.list_models(filter="base_model:moonshotai/Kimi-K2.5")}
    assert children == {"daslab-testing/Kimi-K2.5-2bit-GSQ", "modularai/Kimi-K2.5-MTP", "unsloth/Kimi-K2.5-GGUF"}
    quantized = [m.id for m in api.list_models(filter="base_model:quantized:lightseekorg/kimi-k2.5-eagle3")]
    assert quantized == ["amd/Kimi-K2.5-Eagle3-FP8"]  # the card's base_model_relation
    assert [m.id for m in api.list_models(search="kimi", filter=["eagle3", "fp8"])] == ["amd/Kimi-K2.5-Eagle3-FP8"]

    [amd] = api.list_models(search="Eagle3-FP8", expand=list(hub_search.LISTING_EXPAND))
    assert amd.card_data.base_model == "lightseekorg/kimi-k2.5-eagle3"
    assert amd.card_data.to_dict()["base_model_relation"] == "quantized"
    assert amd.config == {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}  # the Hub's few keys
    assert "llama" in amd.tags and "quark" in amd.tags  # model_type and the Hub-computed tags kept with the repo
    assert amd.safetensors.total == amd.safetensors.parameters["BF16"] == 2_003_857_408
    assert "model.safetensors" in [s.rfilename for s in amd.siblings]
    gated = api.model_info("meta-llama/Llama-3.2-1B-Instruct", expand=["gated", "cardData"])
    assert gated.gated == "auto" and gated.downloads is None  # only what was expanded comes back


def test_the_catalog_names_its_sources_and_its_digests_are_the_sparse_files(root):
    for item in hub_catalog.entries():
        assert item["_source"], item["repo"]
        if item.get("card"):
            assert item["card"]["front_matter_source"] and item["card"]["source"]
            fm = item["card"]["front_matter"]
            assert parse_front_matter(hub_catalog.front_matter_text(fm)) == fm, item["repo"]
        if item.get("config") is not None:
            assert item["config_source"].startswith(("verbatim: https://", "DERIVED")), item["repo"]
        if item.get("weights"):
            assert item["weights"]["source"].startswith(("DERIVED", "REAL")), item["repo"]
    # The smallest one hashed here as the hub would: the catalog's digest is the file's.
    small = hub_catalog.entry("yuhuili/EAGLE-llama2-chat-7B")
    from backend.sandbox.hub_repos import DigestCache, repo_file

    f = repo_file(root, small["repo"], "model.safetensors")
    assert DigestCache(root / ".fresh")._compute(small["repo"], f) == small["weights"]["sha256"]


# --- the search and the verdicts ---------------------------------------------------------------------------------


def test_on_a_k25_target_the_k25_drafters_rank_above_the_k2_one_and_lookalikes_are_refused(hub, target, tmp_path):
    found = run_find(write_config(tmp_path, hub, target), f"file://{target}")
    assert found.where == "client" and found.target.name == "Kimi-K2.5"
    order = [c.repo for c in found.candidates]
    k25, k2 = found.candidate(K25_EAGLE3), found.candidate(K2_EAGLE3)
    assert order.index(K25_EAGLE3) < order.index(K2_EAGLE3)
    assert (k25.algorithm, k25.compatible, k25.for_target, k25.size_bytes) == ("EAGLE3", True, True, 2_382_317_568)
    assert (k2.trained_for, k2.for_target, k2.compatible) == ("Kimi-K2-Instruct", False, True)
    assert k2.notes[0].startswith("trained for Kimi-K2-Instruct, not Kimi-K2.5 (from the repo's name)")
    # Every drafter trained for the target comes before every one that was not, whatever their cards claim.
    assert all(c.for_target for c in found.candidates[: order.index(K2_EAGLE3)])
    assert k2.headline == 3.372 > (found.candidate("lightseekorg/kimi-k2.5-eagle3-mla").headline or 0)
    # A quantized copy of a drafter is trained for what the drafter it copies was (its base_model's name).
    amd = found.candidate("amd/Kimi-K2.5-Eagle3-FP8")
    assert (amd.trained_for, amd.for_target) == ("kimi-k2.5", True) and "quantized" in amd.trained_for_source
    mla = found.candidate("k-l-lambda/Kimi-K2.5-Eagle3")  # MLA attention: its own rules, and it fits
    assert (mla.algorithm, mla.compatible) == ("EAGLE3", True)
    dflash = found.candidate("z-lab/Kimi-K2.5-DFlash")
    assert (dflash.algorithm, dflash.compatible, dflash.card.claims[0].config_text) == (
        "DFLASH",
        True,
        "block 8 (SGLang)",
    )
    for repo, kind in LOOKALIKES.items():
        c = found.candidate(repo)
        assert c is None or ((c.kind, c.compatible) == (kind, False) and c.problems), repo
    assert "the target's shape" in found.candidate("daslab-testing/Kimi-K2.5-2bit-GSQ").problems[0]
    assert "vocab_size 65536 vs the target's 163840" in found.candidate("RWKV/v5-Eagle-7B-HF").problems[0]
    assert found.break_even == pytest.approx(2.46)


def test_a_hub_target_is_read_by_the_search_and_named_as_base_model(hub, target, tmp_path):
    found = run_find(write_config(tmp_path, hub, target), "hf://moonshotai/Kimi-K2.5")
    assert found.target.repo == "moonshotai/Kimi-K2.5" and found.target.to_json()["architectures"] == [
        "KimiK25ForConditionalGeneration"
    ]
    assert {"filter": ["base_model:moonshotai/Kimi-K2.5"], "sort": "downloads", "limit": 100} in [
        q["query"] for q in found.queries
    ]
    assert found.candidate("moonshotai/Kimi-K2.5") is None  # the target is not its own drafter
    k25 = found.candidate(K25_EAGLE3)  # judged against text_config: hidden 7168, 61 layers
    assert k25.compatible and k25.for_target


def test_verdicts_of_the_new_kinds(root):
    """DFlash by its own rules, a whole model refused or offered as STANDALONE, the MLA rules."""

    def inspect(repo: str) -> dict:
        item = hub_catalog.entry(repo)
        path = str(root / repo)
        from backend.agent.host.shared.checkpoint_scan import inspect_checkpoint

        return inspect_checkpoint(path) if item.get("weights") else {"config": item["config"], "tensors": {}}

    k25 = hub_catalog.entry("moonshotai/Kimi-K2.5")["config"]
    hyze = checkpoints.verdict(inspect("HyzeAI/Hyze1B"), k25)
    assert hyze["algorithm"] == "DFLASH" and not hyze["compatible"]
    assert "num_target_layers is 64 but the target has 61 layers" in " ".join(hyze["problems"])
    llama31 = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "vocab_size": 128256,
    }
    small = checkpoints.verdict(inspect("meta-llama/Llama-3.2-1B-Instruct"), llama31)
    assert (small["algorithm"], small["compatible"], small["kind"]) == ("STANDALONE", True, "language model")
    mla = checkpoints.verdict(inspect("k-l-lambda/Kimi-K2.5-Eagle3"), llama31)
    assert "the target config has no kv_lora_rank" in " ".join(mla["problems"])
    assert df.serve_problem("DFLASH", ["DFlashDraftModel"], "0.5.6", True) == (
        "problem",
        "SGLang 0.5.6 on the host has no --speculative-algorithm DFLASH (it takes EAGLE, EAGLE3, NEXTN, STANDALONE, "
        "NGRAM)",
    )


def test_names_say_what_a_drafter_was_trained_for():
    assert df.trained_name("AQ-MedAI/Kimi-K2-Instruct-eagle3") == "Kimi-K2-Instruct"
    assert df.trained_name("pratiknarola/Kimi-K25-eagle3-2L-48K") == "Kimi-K25"
    assert df.trained_name("jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B") == "Llama-3.1-Instruct-8B"
    assert df.trained_name("z-lab/Qwen3-8B-DFlash-b16") == "Qwen3-8B"
    assert df.trained_name("HyzeAI/Hyze1B") is None  # nothing in the name says it drafts
    assert df.same_model("Kimi-K25", "Kimi-K2.5") and df.same_model("Kimi-K2.5-Thinking", "Kimi-K2.5")
    assert df.same_model("Kimi-K2.6", "Kimi-K2.5") is False and df.same_model(None, "Kimi-K2.5") is None
    assert df.spellings("Kimi-K2.5") == ["Kimi-K2.5", "Kimi-K25"] and df.family("Kimi-K2.5") == "Kimi-K2"


# --- the CLI's contract and its refusals -------------------------------------------------------------------------


def test_cli_json_contract_text_and_algorithm_filter(hub, target, tmp_path):
    config = write_config(tmp_path, hub, target)
    out = find(config)
    assert set(out) >= {"target", "searched", "candidates"} and out["searched"]["where"] == "client"
    assert all(set(q) == {"query", "found"} for q in out["searched"]["queries"])
    for c in out["candidates"]:
        assert {
            "repo",
            "algorithm",
            "trained_for",
            "for_target",
            "compatible",
            "problems",
            "claims",
            "size_bytes",
        } <= set(c)
        assert all(set(claim) >= {"benchmark", "accept_len", "config"} for claim in c["claims"])
    text = specdeck(config, "drafters", "find").stdout
    assert f"{K2_EAGLE3}: EAGLE3, trained for Kimi-K2-Instruct (NOT the target)" in text
    assert "claims 3.20 on GSM8K at 3/1/4 (Phase 2 (40k steps)): above the break-even 2.46 if the cycle holds" in text
    only = find(config, "--algorithm", "dflash")
    assert {c["algorithm"] for c in only["candidates"]} == {"DFLASH"}
    bad = specdeck(config, "drafters", "find", "--algorithm", "medusa", rc=2)
    assert bad.stderr.count("\n") == 1 and "--algorithm MEDUSA" in bad.stderr


def test_add_writes_the_drafter_and_its_profile_keeping_the_comments_and_refuses_a_misfit(hub, target, tmp_path):
    config = write_config(tmp_path, hub, target)
    refused = specdeck(config, "drafters", "add", "thoughtworks/Qwen3-32B-Eagle3", "--no-download", rc=2)
    assert refused.stderr.count("\n") == 1 and "cannot serve the target: hidden_size is 5120" in refused.stderr
    assert "[drafters.qwen3-32b-eagle3]" not in config.read_text()  # nothing half-written
    out = json.loads(specdeck(config, "drafters", "add", K25_EAGLE3, "--no-download", "--json").stdout)
    assert out["drafter"]["path"] == str(tmp_path / "host" / "drafters" / "kimi-k25-eagle3")
    assert out["profile_note"] == (
        "profile eagle3-kimi-k25-eagle3: EAGLE3, steps 3, topk 1, draft tokens 4 from EAGLE3's usual numbers"
    )
    dflash = json.loads(specdeck(config, "drafters", "add", "z-lab/Kimi-K2.5-DFlash", "--no-download", "--json").stdout)
    assert dflash["profile"]["algorithm"] == "DFLASH" and dflash["profile"]["dflash_block_size"] == 8  # the card's
    assert dflash["profile"]["steps"] is None
    text = config.read_text()
    assert "# the operator's own drafter stays as it was written" in text
    assert 'path = "/data/ours"  # trained here' in text
    # AQ-MedAI's K2 drafter is configured already (the built-in aq-medai, served by eagle3-aq): nothing new.
    out = json.loads(specdeck(config, "drafters", "add", K2_EAGLE3, "--no-download", "--json").stdout)
    assert (out["drafter"]["name"], out["profile"]["name"], out["profile_note"]) == ("aq-medai", "eagle3-aq", None)
    assert out["candidate"]["for_target"] is False  # added on purpose: the finding travels with it
    taken = specdeck(config, "drafters", "add", K25_EAGLE3, "--name", "ours", "--no-download", rc=2)
    assert "drafter ours is configured already for /data/ours: pick another --name" in taken.stderr


@pytest.mark.slow
def test_gated_repos_are_not_read_without_the_token_and_the_token_never_shows(hub, root, target, tmp_path):
    config = write_config(tmp_path, hub, target)
    gate = root / "lightseekorg" / "kimi-k2.5-eagle3" / ".gated"
    gate.write_text("hf_sandbox_secret_token")
    try:
        out = find(config)
        c = next(c for c in out["candidates"] if c["repo"] == "lightseekorg/kimi-k2.5-eagle3")
        assert (c["kind"], c["compatible"]) == ("not read", False) and c["problems"][0].startswith("gated:")
        assert c["for_target"] is None and c["claims"] == []
        res = specdeck(config, "drafters", "find", "--json", env={"HF_TOKEN": "hf_sandbox_secret_token"})
        c = next(c for c in json.loads(res.stdout)["candidates"] if c["repo"] == "lightseekorg/kimi-k2.5-eagle3")
        assert c["compatible"] and c["claims"]
        assert "hf_sandbox_secret_token" not in res.stdout + res.stderr
        refused = specdeck(config, "drafters", "find", "--target", "hf://lightseekorg/kimi-k2.5-eagle3", rc=2)
        assert refused.stderr.count("\n") == 1 and "gated or private: set HF_TOKEN" in refused.stderr
    finally:
        gate.unlink()


def test_a_rate_limited_hub_is_one_sentence_and_exit_2(hub, target, tmp_path):
    config = write_config(tmp_path, hub, target)
    hub.rate_limit(times=-1, reset_s=55)
    started = time.monotonic()
    res = specdeck(config, "drafters", "find", rc=2)
    assert time.monotonic() - started < 30  # one round trip, no backoff of 5 × 56 s
    assert res.stderr.count("\n") == 1
    assert "is rate-limiting this machine (HTTP 429, retry after 55 s)" in res.stderr and "HF_TOKEN" in res.stderr
    hub.rate_limit(times=-1, reset_s=0, scope="AQ-MedAI")  # a candidate's files, midway through the search
    res = specdeck(config, "drafters", "find", "--json", rc=2)
    assert res.stdout == "" and "rate-limiting" in res.stderr and res.stderr.count("\n") == 1
    hub.rate_limit(times=0)


def test_no_route_from_the_client_is_one_sentence_and_exit_2(hub, target, tmp_path):
    config = write_config(tmp_path, hub, target)
    res = specdeck(config, "drafters", "find", "--where", "client", rc=2, env={"HF_HUB_OFFLINE": "1"})
    assert res.stderr == f"specdeck: this machine cannot reach the hub at {hub.url} (HF_HUB_OFFLINE is set); " \
        "check the network and HF_ENDPOINT\n"  # fmt: skip
    closed = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    res = specdeck(config, "drafters", "find", "--where", "client", "--endpoint", closed, rc=2)
    assert time.monotonic() - started < 20 and f"cannot reach the hub at {closed}" in res.stderr
    assert res.stderr.count("\n") == 1


@pytest.mark.slow
def test_the_host_searches_when_only_the_host_can_reach_the_hub(hub, target, tmp_path, sshd):
    config = write_config(tmp_path, hub, target)
    via = sshd.cli_args(str(tmp_path / "sshwork"))
    here = find(config)
    there = find(config, *via, "--endpoint", hub.url, env={"HF_HUB_OFFLINE": "1"})
    assert there["searched"]["where"] == "host" and here["searched"]["where"] == "client"
    assert [c["repo"] for c in there["candidates"]] and {c["repo"] for c in there["candidates"]} == {
        c["repo"] for c in here["candidates"]
    }
    k2 = next(c for c in there["candidates"] if c["repo"] == K2_EAGLE3)
    assert k2["trained_for"] == "Kimi-K2-Instruct" and k2["for_target"] is False
    # A host whose Python has no huggingface_hub says so (the agent imports it only for the search).
    res = specdeck(config, "drafters", "find", "--where", "host", "--python", str(PY38), rc=2)
    assert res.stderr == (
        f"specdeck: huggingface_hub is not installed for {PY38} on the host: install it there (pip install "
        "huggingface_hub)\n"
    )


# --- from a found drafter to a served one, in the sandbox ------------------------------------------------------------


@pytest.mark.slow
def test_in_the_sandbox_the_k25_drafter_is_found_added_downloaded_and_served():
    up = json.loads(run_cli("sandbox", "up", "--hub-rate", "8G", "--json").stdout)
    config = Path(up["config"])
    before = config.read_text()
    try:
        found = find(config)  # the configured target: the sandbox host's Kimi-K2.5 folder
        order = [c["repo"] for c in found["candidates"]]
        assert order.index(K25_EAGLE3) < order.index(K2_EAGLE3)
        chosen = found["candidates"][order.index(K25_EAGLE3)]
        assert chosen["compatible"] and chosen["for_target"] and chosen["algorithm"] == "EAGLE3"
        k2 = found["candidates"][order.index(K2_EAGLE3)]
        assert k2["trained_for"] == "Kimi-K2-Instruct" and k2["for_target"] is False

        added = json.loads(specdeck(config, "drafters", "add", K25_EAGLE3, "--json").stdout)
        assert added["download"]["state"] == "done"
        assert added["drafter"]["name"] == "kimi-k25-eagle3" and added["drafter"]["repo"] == K25_EAGLE3
        profile = added["profile"]
        assert (profile["name"], profile["algorithm"], profile["steps"], profile["topk"], profile["draft_tokens"]) == (
            "eagle3-kimi-k25-eagle3", "EAGLE3", 3, 1, 4,
        )  # fmt: skip
        text = config.read_text()
        assert text.startswith(before.split("\n[", 1)[0])  # the sandbox's comments and keys as they were
        assert '[drafters.kimi-k25-eagle3]\nrepo = "AQ-MedAI/Kimi-K25-eagle3"' in text
        settings = config_file.load(config)
        assert settings.profiles["eagle3-kimi-k25-eagle3"].drafter == "kimi-k25-eagle3"
        again = specdeck(config, "drafters", "add", K25_EAGLE3, "--no-download").stdout
        assert "profile eagle3-kimi-k25-eagle3 serves it already" in again  # nothing written twice

        ready = json.loads(specdeck(config, "serve", "start", profile["name"], "--wait-ready", "--json").stdout)
        assert (ready["state"], ready["profile"]) == ("ready", profile["name"])
        status = json.loads(specdeck(config, "serve", "status", "--json").stdout)
        assert status["state"] == "ready" and status["args"]["drafter"] == "kimi-k25-eagle3"
        assert status["args"]["drafter_path"].endswith("/drafters/kimi-k25-eagle3")
    finally:
        specdeck(config, "serve", "stop", "--yes", rc=None)
        run_cli("sandbox", "down")
