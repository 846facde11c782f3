"""DSPARK served by the SIMULATED SGLang and read back by specdeck: its server args as 0.5.23's ``_handle_dspark``
resolves them, each request's verify window (the cap) in the ragged verify modes, the ``cap len`` and ``block
accept len`` decode-line fields, the ``sglang:spec_cap_length`` / ``sglang:spec_block_accept_length`` gauges and
the per-request ``meta_info``; an older release refuses the algorithm with its own words.

The judge of the decode line is SGLang 0.5.23's format string (managers/scheduler_components/
metrics_reporter.py:1005-1009, copied below as it is written): no real DSPARK line with ``cap len`` was found
(research notes of issue 36, real/INDEX.md); the one real DSPARK line (SGLang issue #36081, 0.5.18, static mode)
has none, as the string says it should not.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from backend.agent.host.shared import acceptance
from backend.measure.metrics import parse_line
from backend.measure.prometheus import read_scrape
from backend.sandbox import fixtures as fx
from backend.sandbox.sglang_sim import dspark
from backend.tune.advisor import acceptance_lines
from tests.test_simulator import Sim, sims  # noqa: F401 (the fixture)

pytestmark = pytest.mark.e2e

REAL = Path(__file__).parent / "fixtures" / "real"


def sglang_spec_fields(spec_accept_length, spec_accept_rate, spec_cap_length, spec_block_accept_length) -> str:
    """SGLang 0.5.23's own words (metrics_reporter.py:1005-1009), verbatim but for the indentation."""
    msg = ""
    msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "
    if spec_cap_length > 0:
        msg += f"cap len: {spec_cap_length:.2f}, "
    if spec_block_accept_length > 0:
        msg += f"block accept len: {spec_block_accept_length:.2f}, "
    return msg


class Said:
    """A Log stand-in that keeps what was said."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, ranks: str = "") -> None:
        self.lines.append(message)

    warning = info


def args(**given) -> dict:
    base = {
        "model_path": "/m", "revision": None, "device": "cuda", "dp_size": 1, "pp_size": 1,
        "speculative_draft_model_path": "/nowhere", "speculative_num_steps": None, "speculative_eagle_topk": None,
        "speculative_num_draft_tokens": None, "speculative_dspark_block_size": None, "max_running_requests": None,
    }  # fmt: skip
    return {**base, **given}


def test_server_args_as_handle_dspark_resolves_them(tmp_path, monkeypatch):
    """0.5.23 arg_groups/speculative_hook.py:666-883: steps and topk forced to 1, gamma from the flag, the drafter's
    config or 7, the verify window gamma + 1; SGLang's messages where it refuses."""
    monkeypatch.delenv(dspark.MODE_ENV, raising=False)
    said = Said()
    got = args(speculative_num_steps=3, speculative_eagle_topk=4)
    dspark.resolve(got, {}, said)
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (
        1,
        1,
        8,
    )
    assert "DSpark only supports speculative_num_steps == 1; overriding speculative_num_steps=3 to 1." in said.lines
    assert "DSpark gamma is not set; defaulting to 7." in said.lines and got["max_running_requests"] == 48
    drafter = fx.write_drafter(str(tmp_path / "dspark"), "dspark_k25")
    got = args(speculative_draft_model_path=drafter)
    dspark.resolve(got, {}, Said())
    assert got["speculative_num_draft_tokens"] == 6  # the drafter's gamma 5, nested under dflash_config
    with pytest.raises(dspark.Refused, match=re.escape("must equal gamma + 1 (= 6 for gamma=5), but got spec")):
        dspark.resolve(args(speculative_draft_model_path=drafter, speculative_num_draft_tokens=4), {}, Said())
    with pytest.raises(dspark.Refused, match="requires setting --speculative-draft-model-path"):
        dspark.resolve(args(speculative_draft_model_path=None), {}, Said())
    bundled = args(speculative_draft_model_path=None)  # a DeepSeek-V4 target config that carries its DSpark draft
    dspark.resolve(bundled, {"dspark_block_size": 3}, Said())
    assert (bundled["speculative_draft_model_path"], bundled["speculative_num_draft_tokens"]) == ("/m", 8)
    monkeypatch.setenv(dspark.MODE_ENV, "ragged")
    with pytest.raises(dspark.Refused) as refused:
        dspark.resolve(args(), {}, Said())
    assert str(refused.value) == (
        "invalid SGLANG_RAGGED_VERIFY_MODE='ragged'; expected one of 'static', 'cap-accept', 'compact'"
    )
    monkeypatch.setenv(dspark.MODE_ENV, "static")
    said = Said()
    dspark.resolve(args(speculative_dspark_sps_table_path="/t.json"), {}, said)
    assert any("which is off under SGLANG_RAGGED_VERIFY_MODE=static; it will be a no-op." in x for x in said.lines)


def test_a_requests_cap_follows_its_ease_and_the_batch():
    ragged = dspark.Ragged("compact", 5)
    rates = [0.95] * 5
    assert ragged.cap(rates, 1.0, 1) == 6  # alone and easy: the whole window
    assert ragged.cap(rates, 0.8, 1) < ragged.cap(rates, 1.0, 1)  # a harder request verifies less
    assert 2 <= ragged.cap(rates, 1.0, 12) < 6  # a busy batch verifies less
    assert ragged.verified([3, 5]) == 4.0 and dspark.Ragged("cap-accept", 5).verified([3, 5]) == 6.0
    assert dspark.Ragged("static", 5).cap(rates, 0.5, 40) == 6


@pytest.fixture
def dspark_models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("dspark")
    return {
        "target": fx.write_target_config(str(root / "Kimi-K2.5")),
        "dspark": fx.write_drafter(str(root / "kimi-k25-dspark"), "dspark_k25"),
    }


def _generate(sim: Sim, n: int = 4, tokens: int = 96) -> list[dict]:
    """``n`` requests at once (so caps differ by batch), each request's final meta_info."""
    import concurrent.futures

    def one(i: int) -> dict:
        return sim.json(
            "/generate", {"text": f"Explain step {i} of a proof.", "sampling_params": {"max_new_tokens": tokens}}
        )

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return [r["meta_info"] for r in pool.map(one, range(n))]


def _launch(models: dict) -> list[str]:
    return [
        "--model-path", models["target"], "--speculative-algorithm", "DSPARK",
        "--speculative-draft-model-path", models["dspark"], "--enable-metrics", "--decode-log-interval", "4",
        "--random-seed", "3",
    ]  # fmt: skip


def _decode_fields(sim: Sim) -> list[tuple[str, dict]]:
    out = []
    for line in sim.log().splitlines():
        if "Decode batch" in line and "accept len" in line:
            numbers = {
                k: float(v) for k, v in re.findall(r"(accept len|accept rate|cap len|block accept len): ([\d.]+)", line)
            }
            out.append((line, numbers))
    return out


@pytest.mark.parametrize("mode", ["cap-accept", "compact", "static"])
def test_dspark_served_in_each_ragged_verify_mode(dspark_models, sims, mode):  # noqa: F811
    sim = sims(_launch(dspark_models), {"SPECDECK_SIM_SGLANG_VERSION": "0.5.23", dspark.MODE_ENV: mode})
    sim.wait_ready()
    metas = _generate(sim)
    info = sim.json("/server_info")
    assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (1, 6)  # gamma 5 from the drafter
    lines = _decode_fields(sim)
    assert lines
    for line, n in lines:
        # The line's spec fields are SGLang's format string filled with the line's own numbers: nothing else.
        expected = sglang_spec_fields(
            n["accept len"], n["accept rate"], n.get("cap len", 0), n.get("block accept len", 0)
        )
        assert expected in line and line.index(expected) < line.index("cuda graph: ")
        sample = parse_line(line)
        assert (sample.cap_len, sample.block_accept_len) == (n.get("cap len"), n.get("block accept len"))
        assert sample.accept_len == n["accept len"]
    capped = mode != "static"
    assert all(("cap len" in n) == capped and ("block accept len" in n) == (mode == "cap-accept") for _, n in lines)
    if capped:
        assert all(2.0 <= n["cap len"] <= 6.0 for _, n in lines)
    if mode == "cap-accept":  # the uncapped length is at least what was committed
        assert all(n["block accept len"] >= n["accept len"] for _, n in lines)
    scrape = read_scrape(urllib.request.urlopen(sim.base + "/metrics", timeout=10).read().decode())
    page = urllib.request.urlopen(sim.base + "/metrics", timeout=10).read().decode()
    assert (
        "# HELP sglang:spec_cap_length Mean DSpark confidence-scheduled verify window per verify step, incl the bonus "
        "slot (0 when no cap is scheduled)." in page
    )
    assert (scrape.engine["spec_cap_length"] > 0) == capped
    assert (scrape.engine["spec_block_accept_length"] > 0) == (mode == "cap-accept")
    for meta in metas:
        assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 5  # gamma drafts per verify
        # 0.5.21 dropped the aliases (spec_accept_histogram, spec_accepted_drafts, spec_proposed_drafts)
        assert not {"spec_accept_histogram", "spec_accepted_drafts", "spec_proposed_drafts"} & set(meta)
        assert ("spec_cap_length" in meta) == capped and ("spec_cap_lens_histogram" in meta) == capped
        assert ("spec_block_accept_length" in meta) == (mode == "cap-accept")
        if capped:
            caps = meta["spec_cap_lens_histogram"]
            assert sum(caps) == meta["spec_verify_ct"]
            assert meta["spec_cap_length"] == pytest.approx(sum(c * k for k, c in enumerate(caps)) / sum(caps))
            # no pass commits past its cap: accepted drafts per pass below cap - 1
            assert len(meta["spec_correct_drafts_histogram"]) <= max(k for k, c in enumerate(caps) if c)
    # The bench's reader: each request's figures, the bench's DSPARK line from their totals
    requests = [{**acceptance.request_figures(m), "spec_verify_ct": m["spec_verify_ct"]} for m in metas]
    summary = acceptance.dspark_summary(requests)
    if not capped:
        assert summary is None
    else:
        passes = sum(m["spec_verify_ct"] for m in metas)
        assert summary["cap_len"] == pytest.approx(
            sum(m["spec_cap_length"] * m["spec_verify_ct"] for m in metas) / passes
        )
        pooled = acceptance.summarize(metas)
        lines = acceptance_lines(pooled, "dspark", dspark=summary)
        assert lines[-1].startswith(f"DSPARK: verify window (cap len) {summary['cap_len']:.2f} per pass")
        assert ("uncapped block accept len" in lines[-1]) == (mode == "cap-accept")
        assert lines[-2].startswith("a_i ")  # per-position acceptance pooled from DSPARK's requests too


def test_an_older_release_refuses_dspark_with_its_own_words(dspark_models, sims):  # noqa: F811
    """SGLang 0.5.6 lists its algorithms as argparse choices (server_args.py:2921): DSPARK shipped in 0.5.16."""
    sim = sims(_launch(dspark_models), {"SPECDECK_SIM_SGLANG_VERSION": "0.5.6"})
    assert sim.wait_exit() == 2
    assert (
        "error: argument --speculative-algorithm: invalid choice: 'DSPARK' (choose from 'EAGLE', 'EAGLE3', 'NEXTN', "
        "'STANDALONE', 'NGRAM')" in sim.log()
    )


def test_the_real_dspark_lines_read_without_cap_fields():
    """SGLang issue #36081 (DeepSeek-V4-Flash, 0.5.18, static verify: accept len 5.30, accept rate 0.86, SWA pools)
    and PR #31047 (GLM-5.2, every draft rejected): DSPARK lines in the default static mode carry no cap len or
    block accept len, as the format string says; the reader reads them as any other."""
    lines = (REAL / "log-dspark-static-dsv4-flash-0.5.18-36081.log").read_text().splitlines()
    [decode] = [parse_line(x) for x in lines if "Decode batch" in x]
    assert (decode.accept_len, decode.accept_rate, decode.gen_tps) == (5.3, 0.86, 167.04)
    assert (decode.cap_len, decode.block_accept_len, decode.token_usage, decode.ranks) == (None, None, 0.02, "TP0 EP0")
    assert json.dumps(decode.to_json()) and "cap_len" not in decode.to_json()  # the parse-log contract holds
    [collapse] = [parse_line(x) for x in (REAL / "log-dspark-glm52-collapse-pr31047.log").read_text().splitlines()
                  if "Decode batch" in x]  # fmt: skip
    assert (collapse.accept_len, collapse.accept_rate, collapse.cap_len) == (1.0, 0.0, None)
