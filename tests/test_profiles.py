"""Profiles for every SGLang speculative algorithm: each field declared once (settings.ProfileConfig) and read,
range-checked, written as SGLang's flag and checked by preflight from that declaration; the algorithms' rules per
release (backend.sglang.speculation); SGLang's adaptive config and policy (backend.sglang.adaptive).

Judged by SGLang itself: every profile built here is parsed by the flag table generated from the release's own
``ServerArgs.add_cli_args`` (scripts/sglang_flag_tables.py), and, where ``SPECDECK_SGLANG_WHEEL`` names a wheel (and
``SPECDECK_SGLANG_PYTHON`` an interpreter with msgspec), by the parser that wheel's own code builds. The adaptive
policy is replayed against the answers of 0.5.23's own ``AdaptiveSpeculativeParams`` on recorded inputs
(tests/fixtures/sglang/adaptive-0.5.23-trace.json, scripts/sglang_adaptive_trace.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from backend.errors import ConfigError
from backend.sandbox import environment
from backend.serve import command_line, preflight_checks, serving
from backend.settings.config_file import save_profile
from backend.settings.model import ALGORITHMS, FIELD, PROFILE_FIELDS, ProfileConfig, builtin_defaults
from backend.settings.validation import parse
from backend.sglang import adaptive as sglang_adaptive
from backend.sglang import flags

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests" / "fixtures" / "sglang" / "adaptive-0.5.23-trace.json"
LADDER = {"ema_alpha": 0.3, "1": {"candidate_steps": [1, 3, 5]}, "16": {"candidate_steps": [1, 2]}}

# One profile per algorithm with the fields it takes, as an operator writes them.
ALGORITHM_PROFILES = {
    "eagle": ProfileConfig(name="eagle", drafter="ours", algorithm="EAGLE", steps=3, topk=1, draft_tokens=4),
    "eagle3-tree": ProfileConfig(
        name="eagle3-tree", drafter="ours", algorithm="EAGLE3", steps=5, topk=4, draft_tokens=8, draft_window=2048
    ),
    "eagle3-adaptive": ProfileConfig(name="eagle3-adaptive", drafter="ours", algorithm="EAGLE3", adaptive=True),
    "eagle3-ladder": ProfileConfig(
        name="eagle3-ladder", drafter="ours", algorithm="EAGLE3", steps=3, adaptive=True, adaptive_config=LADDER
    ),
    "mtp": ProfileConfig(
        name="mtp", algorithm="NEXTN", steps=3, topk=1, draft_tokens=4, draft_attention_backend="flashinfer"
    ),
    "standalone": ProfileConfig(name="standalone", drafter="ours", algorithm="STANDALONE", moe_runner_backend="triton"),
    "ngram": ProfileConfig(
        name="ngram",
        algorithm="NGRAM",
        draft_tokens=12,
        ngram_min_bfs_breadth=1,
        ngram_max_bfs_breadth=8,
        ngram_match_type="PROB",
        ngram_max_trie_depth=16,
        ngram_capacity=1000000,
        ngram_external_corpus="/data/corpus.jsonl",
        ngram_external_sam_budget=4,
        ngram_external_corpus_max_tokens=500000,
    ),
    "dflash": ProfileConfig(
        name="dflash",
        drafter="ours",
        algorithm="DFLASH",
        dflash_block_size=8,
        draft_window=4096,
        draft_attention_backend="fa3",
    ),
    "dspark": ProfileConfig(
        name="dspark",
        drafter="ours",
        algorithm="DSPARK",
        dspark_block_size=7,
        dspark_ragged_verify="compact",
        dspark_sps_table="/data/sps.json",
        dspark_confidence_sts="/data/sts.json",
        dspark_align_verify=True,
    ),
}


def every_profile() -> list[tuple[object, ProfileConfig]]:
    """(settings, profile) of every profile the tests build: the built-in ones, the sandbox's and the above."""
    settings = builtin_defaults()
    sandbox = parse(tomllib.loads(environment.config_text(environment.Layout(Path("/sandbox")), None)), "sandbox")
    return [
        *((settings, p) for p in settings.profiles.values()),
        *((sandbox, p) for p in sandbox.profiles.values()),
        *((settings, p) for p in ALGORITHM_PROFILES.values()),
    ]


def toml_profile(**values) -> ProfileConfig:
    return parse({"profiles": {"p": values}}, "config.toml").profiles["p"]


# --- declarations -------------------------------------------------------------------------------------------------


def test_every_field_is_declared_once_and_every_flag_is_sglangs():
    names = [d.name for d in PROFILE_FIELDS]
    assert len(names) == len(set(names))
    # Every field a config file sets is declared; name is the table's, listen is set for a fleet's replica.
    assert set(names) == set(ProfileConfig.__dataclass_fields__) - {"name", "listen"}
    for declared in PROFILE_FIELDS:
        assert declared.help and all(flag in flags.FLAGS for flag in declared.flags), declared.name
        assert declared.algorithms is None or set(declared.algorithms) <= set(ALGORITHMS)
    # The newest release's flag for each one: the names only 0.5.11 had come second.
    newest = flags.table("0.5.23").flags
    assert all(d.flags[0] in newest for d in PROFILE_FIELDS if d.flags)
    assert ALGORITHMS == ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")


@pytest.mark.parametrize("name", [d.name for d in PROFILE_FIELDS if d.kind is int])
def test_each_number_is_read_and_range_checked_by_its_declaration(name):
    declared = FIELD[name]
    low = declared.low if declared.low is not None else 1
    assert getattr(toml_profile(**{name: low}), name) == low
    with pytest.raises(ConfigError, match=rf"config.toml: profiles\.p\.{name}: .*{low - 1}"):
        toml_profile(**{name: low - 1})
    with pytest.raises(ConfigError, match=rf"profiles\.p\.{name}: expected an integer, got str"):
        toml_profile(**{name: "3"})
    with pytest.raises(ConfigError, match="expected an integer, got a boolean"):
        toml_profile(**{name: True})


def test_choices_switches_tables_and_strings():
    assert toml_profile(algorithm="DSPARK", dspark_ragged_verify="cap-accept").dspark_ragged_verify == "cap-accept"
    with pytest.raises(ConfigError, match="'MTP' is not one of EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH"):
        toml_profile(algorithm="MTP")  # MTP is NEXTN's name in docs, never SGLang's (spec_info.py:65)
    with pytest.raises(ConfigError, match="expected a boolean, got int 1"):
        toml_profile(adaptive=1)
    ladder = toml_profile(algorithm="EAGLE3", adaptive=True, adaptive_config=LADDER)
    assert ladder.adaptive and ladder.adaptive_config == LADDER
    for bad, words in (
        ({"1": {"candidate_steps": []}}, "candidate_steps must be a non-empty list"),
        ({"1": {"steps": [1, 3]}}, '"1".steps: not a key SGLang reads'),
        ({"8": {"ema_alpha": 0.2}}, 'batch size "8" needs candidate_steps'),
        ({"ema_alpha": 2, "1": {"candidate_steps": [1]}}, "ema_alpha must be in (0, 1]"),
        ({"warmup_batches": 0.5, "1": {"candidate_steps": [1]}}, "warmup_batches must be a whole number"),
    ):
        with pytest.raises(ConfigError, match=r"profiles\.p\.adaptive_config: ") as caught:
            toml_profile(algorithm="EAGLE3", adaptive=True, adaptive_config=bad)
        assert words in str(caught.value)


def test_saving_writes_the_declared_fields_back_and_they_load_the_same(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[profiles.base]\nport = 30001\n")
    settings = parse(tomllib.loads(path.read_text()), str(path))
    for profile in ALGORITHM_PROFILES.values():
        settings, _ = save_profile(settings, replace(profile, drafter=None))
    again = parse(tomllib.loads(path.read_text()), str(path))
    for name, profile in ALGORITHM_PROFILES.items():
        assert again.profiles[name] == replace(profile, drafter=None), name
    settings, _ = save_profile(again, replace(again.profiles["eagle3-ladder"], adaptive=False, adaptive_config=None))
    table = tomllib.loads(path.read_text())["profiles"]["eagle3-ladder"]
    assert "adaptive" not in table and "adaptive_config" not in table  # off is the default: the keys go


# --- profile -> SGLang's command line -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ALGORITHM_PROFILES))
def test_each_algorithms_profile_means_exactly_its_fields_to_sglangs_parser(name):
    settings = builtin_defaults()
    profile = ALGORITHM_PROFILES[name]
    argv = command_line.profile_argv(settings, profile)
    table = flags.table("0.5.23")
    args = table.server_args(table.parse(argv))
    assert args["speculative_algorithm"] == profile.algorithm
    for declared in PROFILE_FIELDS:
        value = getattr(profile, declared.name)
        if not declared.flags or declared.name in ("drafter", "model", "adaptive_config"):
            continue
        flag = table.flags[declared.flags[0]]
        assert args[flag.field] == (flag.default if value is None else value), declared.name  # unset: SGLang's
    if profile.adaptive_config is not None:
        path, text = command_line.adaptive_file(profile)
        assert args["speculative_adaptive_config"] == path and json.loads(text) == profile.adaptive_config
        assert path.startswith(".specdeck/spec/adaptive-") and path.endswith(".json")
    else:
        assert args["speculative_adaptive_config"] is None
    if profile.dspark_ragged_verify:
        cmd = command_line.profile_command(settings, settings.hosts["gpu-box"], profile)
        assert cmd.env["SGLANG_RAGGED_VERIFY_MODE"] == profile.dspark_ragged_verify


def test_a_release_gets_the_flag_names_it_knows():
    settings = builtin_defaults()
    dflash = ALGORITHM_PROFILES["dflash"]
    old = command_line.profile_argv(settings, dflash, "0.5.11")
    assert "--speculative-dflash-draft-window-size" in old and "--speculative-draft-window-size" not in old
    # 0.5.12 renamed it (the old name stays a hidden alias to 0.5.19, so 0.5.12 takes either).
    assert "--speculative-draft-window-size" in command_line.profile_argv(settings, dflash, "0.5.13")
    flags.table("0.5.11").parse(old)
    # The feature tables tell releases apart: DSPARK's flags are refused before 0.5.16, adaptive before 0.5.11.
    dspark = command_line.profile_argv(settings, ALGORITHM_PROFILES["dspark"])
    with pytest.raises(Exception, match="unrecognized arguments: --speculative-dspark-block-size"):
        flags.table("0.5.15").parse(dspark)
    flags.table("0.5.16").parse(dspark)
    adaptive = command_line.profile_argv(settings, ALGORITHM_PROFILES["eagle3-adaptive"])
    with pytest.raises(Exception, match="unrecognized arguments: --speculative-adaptive"):
        flags.table("0.5.10").parse(adaptive)


def test_an_adaptive_config_goes_to_a_file_in_the_hosts_state_dir():
    settings = builtin_defaults()
    host = settings.hosts["gpu-box"]
    cmd = command_line.profile_command(settings, host, ALGORITHM_PROFILES["eagle3-ladder"])
    [(path, text)] = cmd.files.items()
    assert path.startswith("/data/eagle3/.specdeck/spec/adaptive-") and json.loads(text) == LADDER
    assert cmd.argv[cmd.argv.index("--speculative-adaptive-config") + 1] == path
    assert "--speculative-adaptive" in cmd.argv
    # SGLang's default ladder: no file; a config without the switch: no flag (SGLang would not read it).
    assert command_line.profile_command(settings, host, ALGORITHM_PROFILES["eagle3-adaptive"]).files == {}
    off = replace(ALGORITHM_PROFILES["eagle3-ladder"], adaptive=False)
    assert "--speculative-adaptive-config" not in command_line.profile_command(settings, host, off).argv


@pytest.mark.skipif(
    not os.environ.get("SPECDECK_SGLANG_WHEEL"), reason="SPECDECK_SGLANG_WHEEL names no wheel (CI has no PyPI)"
)
def test_every_profile_parses_with_the_wheels_own_parser(tmp_path):
    """SGLang's own parser (the one its ServerArgs.add_cli_args builds from the wheel) on every profile built
    here: it takes each command line and reads the same speculative values as our table does."""
    built = [(p.name, command_line.profile_argv(s, p)) for s, p in every_profile()]
    argvs = tmp_path / "argvs.json"
    argvs.write_text(json.dumps([argv for _, argv in built]))
    python = os.environ.get("SPECDECK_SGLANG_PYTHON", "python3")
    wheel = os.environ["SPECDECK_SGLANG_WHEEL"]
    out = subprocess.run(
        [python, str(REPO / "scripts" / "sglang_flag_tables.py"), "--parse", str(argvs), wheel],
        capture_output=True,
        text=True,
        check=True,
    )
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    table = flags.table("0.5.23")
    assert len(answers) == len(built)
    for (name, argv), answer in zip(built, answers, strict=True):
        assert answer["ok"], (name, answer)
        ours = {k: v for k, v in table.server_args(table.parse(argv)).items() if k.startswith("speculative_")}
        assert answer["speculative"] == ours, name


# --- preflight: each algorithm's rules, per release ------------------------------------------------------------------


def failed(profile: ProfileConfig, version: str | None = None) -> dict[str, str]:
    checks = preflight_checks.profile_checks(builtin_defaults(), profile, version)
    return {c.name: c.message for c in checks if c.status == "fail"}


def warned(profile: ProfileConfig, version: str | None = None) -> dict[str, str]:
    checks = preflight_checks.profile_checks(builtin_defaults(), profile, version)
    return {c.name: c.message for c in checks if c.status == "warn"}


@pytest.mark.parametrize("name", list(ALGORITHM_PROFILES))
def test_each_algorithms_profile_passes_its_own_rules_on_the_newest_release(name):
    assert failed(ALGORITHM_PROFILES[name]) == {}


@pytest.mark.parametrize(
    "profile, version, check, words",
    [
        # adaptive: where SGLang quietly serves static steps, or refuses to start (adaptive_spec_params.py:61-99)
        (replace(ALGORITHM_PROFILES["eagle3-adaptive"], topk=2), None, "adaptive", "(only topk=1 is supported)"),
        (
            replace(ALGORITHM_PROFILES["eagle3-adaptive"], extra_args=("--enable-dp-attention", "--dp-size", "2")),
            None,
            "adaptive",
            "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)",
        ),
        (ALGORITHM_PROFILES["eagle3-adaptive"], "0.5.11", "adaptive", "(adaptive is only implemented for EAGLEWorker"),
        (ALGORITHM_PROFILES["eagle3-adaptive"], "0.5.6", "adaptive", "has no --speculative-adaptive"),
        (replace(ALGORITHM_PROFILES["eagle3-ladder"], steps=4), None, "adaptive config", "not in the adaptive config"),
        (
            replace(ALGORITHM_PROFILES["eagle3-ladder"], adaptive_config={"candidate_steps": [1, 3]}),
            None,
            "adaptive config",
            "refuse a flat config",
        ),
        (
            replace(ALGORITHM_PROFILES["eagle3-ladder"], adaptive_config={"1": {"candidate_steps": [0, 3]}}),
            "0.5.13",
            "adaptive config",
            "no tier 0",
        ),
        (replace(ALGORITHM_PROFILES["eagle3-adaptive"], algorithm="STANDALONE"), None, "adaptive", "EAGLE, EAGLE3"),
        # spec v2 and topk (notes §5.1)
        (
            replace(ALGORITHM_PROFILES["eagle3-tree"], env={"SGLANG_ENABLE_SPEC_V2": "1"}),
            "0.5.8",
            "spec v2",
            "Spec v2 currently only supports topk = 1",
        ),
        # DFLASH and DSPARK's own numbers (speculative_hook.py _handle_dflash / _handle_dspark)
        (replace(ALGORITHM_PROFILES["dflash"], draft_tokens=16), None, "block size", "they differ"),
        (replace(ALGORITHM_PROFILES["dflash"], draft_window=4), None, "draft window", "must be >="),
        (ALGORITHM_PROFILES["dflash"], "0.5.10", "algorithm", "has no DFLASH: it first shipped in 0.5.11"),
        (ALGORITHM_PROFILES["dspark"], "0.5.13", "algorithm", "has no DSPARK: it first shipped in 0.5.16"),
        (replace(ALGORITHM_PROFILES["dspark"], draft_tokens=7), None, "gamma", "must equal gamma + 1 (= 8"),
        (replace(ALGORITHM_PROFILES["dflash"], drafter=None), None, "algorithm", "DFLASH needs a drafter"),
        (
            replace(ALGORITHM_PROFILES["dflash"], extra_args=("--enable-dp-attention", "--dp-size", "2")),
            None,
            "dp attention",
            "DFLASH with dp attention requires --enable-dp-lm-head.",
        ),
        # NGRAM and STANDALONE
        (replace(ALGORITHM_PROFILES["ngram"], ngram_external_sam_budget=12), None, "ngram corpus", "(11), got 12"),
        (
            replace(ALGORITHM_PROFILES["ngram"], extra_args=("--enable-dp-attention", "--dp-size", "2")),
            None,
            "dp attention",
            "ngram speculative decoding does not support dp attention",
        ),
        (replace(ALGORITHM_PROFILES["ngram"], drafter="ours"), None, "drafter", "applies to EAGLE, EAGLE3"),
        (replace(ALGORITHM_PROFILES["dflash"], steps=3), None, "steps", "steps applies to EAGLE, EAGLE3, NEXTN"),
        (
            replace(ALGORITHM_PROFILES["standalone"], extra_args=("--enable-dp-attention", "--dp-size", "2")),
            None,
            "dp attention",
            "standalone speculative decoding does not support dp attention",
        ),
        (ProfileConfig(name="p", adaptive=True), None, "speculative numbers", "adaptive set without a speculative"),
    ],
)
def test_preflight_knows_each_algorithms_rules(profile, version, check, words):
    fails = failed(profile, version)
    assert check in fails and words in fails[check], fails
    assert "\n" not in fails[check]


def test_warnings_name_the_issue_that_found_them():
    # The accept-length drop of spec v2 with DP attention (SGLang #16274, fixed by PR #16310 in 0.5.8).
    dp = replace(ALGORITHM_PROFILES["eagle"], extra_args=("--enable-dp-attention", "--dp-size", "2"))
    spec_v2 = replace(dp, env={"SGLANG_ENABLE_SPEC_V2": "1"})
    assert (
        "#16274" in warned(spec_v2, "0.5.7")["dp attention"] and "PR #16310" in warned(spec_v2, "0.5.7")["dp attention"]
    )
    assert "dp attention" not in warned(dp, "0.5.7")  # spec v2 off by default there
    assert "dp attention" not in warned(spec_v2, "0.5.8")
    # topk > 1 on 0.5.11-0.5.12 quietly runs spec v1 (no overlap).
    assert "spec v1" in warned(ALGORITHM_PROFILES["eagle3-tree"], "0.5.12")["spec v2"]
    assert "spec v2" not in warned(ALGORITHM_PROFILES["eagle3-tree"], "0.5.13")
    # Adaptive overrides draft tokens; DSPARK flags that are no-ops in the static ragged mode.
    assert "overridden" in warned(replace(ALGORITHM_PROFILES["eagle3-ladder"], topk=1, draft_tokens=8))["adaptive"]
    static = replace(ALGORITHM_PROFILES["dspark"], dspark_ragged_verify=None)
    assert "no-op" in warned(static)["ragged verify"]


def test_an_mla_target_with_a_non_mla_draft_needs_its_own_attention_backend():
    """SGLang #23490: Kimi-K2.6 (MLA) with a Llama-shaped EAGLE-3 draft died building the draft worker: the draft
    inherited trtllm_mla. The fix is --speculative-draft-attention-backend."""
    from backend.sglang.speculation import drafter_rules

    target = {"kv_lora_rank": 512, "hidden_size": 7168}
    draft = {"hidden_size": 7168, "architectures": ["LlamaForCausalLMEagle3"]}
    profile = ALGORITHM_PROFILES["eagle"]
    [rule] = drafter_rules(profile, target, draft, {"attention_backend": "trtllm_mla"})
    assert rule.status == "fail" and "#23490" in rule.message and "draft_attention_backend" in rule.message
    [rule] = drafter_rules(profile, target, draft, {"attention_backend": None}, ["NVIDIA GB300"])
    assert rule.status == "warn"
    assert drafter_rules(profile, target, draft, {}, ["NVIDIA H200"]) == []  # Hopper's MLA backends serve MHA too
    assert drafter_rules(replace(profile, draft_attention_backend="flashinfer"), target, draft, {}) == []
    assert drafter_rules(profile, target, {**draft, "kv_lora_rank": 512}, {}) == []  # an MLA-shaped draft


# --- SGLang's adaptive policy ---------------------------------------------------------------------------------------


def test_the_adaptive_policy_answers_as_sglangs_own_code_did():
    """0.5.23's AdaptiveSpeculativeParams, run on seeded verifies by scripts/sglang_adaptive_trace.py: the tier
    drafted with before each verify, the switch decided after it and the routed slot's EMA, verify by verify."""
    trace = json.loads(TRACE.read_text())
    assert trace["version"] == "0.5.23" and "PyPI wheel" in trace["_source"]
    assert trace["default_config"] == sglang_adaptive.default_config("0.5.23")
    switches = 0
    for case in trace["cases"]:
        config = case["config"] if case["config"] is not None else trace["default_config"]
        policy = sglang_adaptive.AdaptivePolicy(config, case["initial_steps"], case["cuda_graph_bs"])
        for i, (bs, drafts, steps, switch, ema) in enumerate(case["verifies"]):
            assert policy.steps_for(bs) == steps, (case["name"], i)
            assert policy.feed(bs, drafts) == switch, (case["name"], i)
            assert policy.slot(bs).ema == pytest.approx(ema, abs=1e-6), (case["name"], i)
            switches += switch is not None
    assert switches > 40  # the traces move the tiers both ways, more than once


def test_the_docs_flat_example_runs_on_0_5_12_and_is_refused_from_0_5_13():
    """SGLang's docs page still shows the 0.5.11 flat config; 0.5.13's loader refuses it (no batch-size key)."""
    example = json.loads((REPO / "tests" / "fixtures" / "real" / "adaptive-config-docs-flat-example.json").read_text())
    example.pop("_source")
    assert sglang_adaptive.problem(example, "0.5.12", 3) is None
    refused = sglang_adaptive.problem(example, "0.5.23", 3)
    assert "must contain at least one integer-string BS key" in refused and 'put the ladder under "1"' in refused
    profile = replace(ALGORITHM_PROFILES["eagle3-ladder"], adaptive_config=example)
    assert "at least one integer-string BS key" in failed(profile)["adaptive config"]


def test_the_shipped_ladders_per_release():
    assert sglang_adaptive.default_config("0.5.11") == {"candidate_steps": [1, 3, 7]}
    assert sglang_adaptive.candidate_union(sglang_adaptive.default_config("0.5.13")) == [1, 3, 7]
    assert sglang_adaptive.candidate_union(sglang_adaptive.default_config("0.5.14")) == [0, 1, 3, 7]
    assert sglang_adaptive.candidate_union(sglang_adaptive.default_config("0.5.23")) == [0, 1, 3, 5, 7]
    # No steps given: the server starts on the middle of the union (3 for the shipped default).
    assert sglang_adaptive.initial_steps(sglang_adaptive.default_config("0.5.23"), None) == 3
    # The default routes a batch of 64 or more to tier 0: no drafting at all.
    assert sglang_adaptive.AdaptivePolicy(sglang_adaptive.default_config("0.5.23"), 3).steps_for(70) == 0


# --- an adaptive profile served -----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_an_adaptive_profile_serves_with_its_config_written_on_the_host(models, tmp_path):
    from backend.connection import Connection
    from backend.errors import RemoteError
    from backend.settings.model import HostConfig
    from tests.simhost import make_settings

    host = HostConfig(
        name="sim", url="local", python=sys.executable, workdir=str(tmp_path / "host"), launcher="simulator",
        sandbox=True, sglang_version="0.5.23",
    )  # fmt: skip
    settings = make_settings(
        models, ladder={"drafter": "aq-medai", "algorithm": "EAGLE3", "adaptive": True, "adaptive_config": LADDER}
    )
    profile = settings.profiles["ladder"]
    conn = await Connection.open(host)
    try:
        started = await serving.start(conn, settings, profile)
        assert started["preflight"]["ok"], started["preflight"]
        [(path, text)] = command_line.profile_command(settings, host, profile).files.items()
        assert Path(path).parent == tmp_path / "host" / ".specdeck" / "spec" and Path(path).read_text() == text
        ready = await serving.wait(conn, started["job"], within=60)
        assert ready["state"] == "ready", ready
        assert ready["args"]["adaptive"] is True and ready["args"]["adaptive_config"] == LADDER
        # SIMULATED SGLang runs SGLang's policy on the written ladder: it starts at the middle of the union
        # ([1, 2, 3, 5] -> 3), and AQ-MedAI's drafter (≈0.93 per position) climbs to 5 at one stream.
        log = Path(ready["log_path"]).read_text()
        assert "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5]" in log
        assert all(f"Built adaptive runtime state steps={k}: " in log for k in (1, 2, 3, 5))
        from backend.measure.bench import BenchPlan, run_bench
        from backend.measure.livefeed import find_server

        # 800 tokens: the slot moves up when its EMA (alpha 0.3) of drafts accepted at 3 steps (2.3 on average,
        # each request's acceptance drawn around it) is above 2.5 at a decision (every 5 verifies after 10), so
        # a short request may never climb: 20,000 requests drawn as the engine draws them never reach 5 in
        # 1.7% of 300 tokens, 0.4% of 500, 0.035% of 800.
        await run_bench(conn, await find_server(conn), BenchPlan(requests=1, max_tokens=800))
        log = Path(ready["log_path"]).read_text()
        assert "Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=" in log
        assert "Switch adaptive runtime state: steps 3 -> 5, draft_tokens 4 -> 6" in log
        status = await serving.status(conn)
        answer = await conn.call("http.request", url=f"http://127.0.0.1:{profile.port}/server_info")
        info = json.loads(answer["text"])
        last = [line for line in Path(ready["log_path"]).read_text().splitlines() if "Switch adaptive" in line][-1]
        now = info["internal_states"][0]["speculative_num_steps"]
        assert status["spec_steps_now"] == now and f"-> {now}, draft_tokens" in last  # the log and the server agree
        # The run history keeps its tiers (a sync reads the log's start and switch lines).
        from backend.history import History
        from backend.history.sync import record_run
        from backend.jobs import get_job

        with History.open(tmp_path / "h.sqlite3") as history:
            run = history.run(await record_run(history, conn, await get_job(conn, started["job"])))
        assert {t["steps"] for t in run.tiers} >= {3, 5} and run.tiers_text().startswith("adaptive: 3 steps")
        # The host writes only .json files of its own spec/ folder, whatever a client asks.
        cmd = command_line.profile_command(settings, host, replace(profile, port=profile.port + 1))
        with pytest.raises(RemoteError, match=r"a launch file must be a \.json file in"):
            await conn.call("serve.start", argv=cmd.argv, args={"port": 1}, files={"/tmp/x.json": "{}"})
        await serving.stop(conn, grace=10)
    finally:
        await conn.close()
