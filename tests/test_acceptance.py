"""Per-position acceptance from SGLang's per-request histograms (hand-computed numbers)."""

from __future__ import annotations

import pytest

from backend.agent.host.shared import acceptance

pytestmark = pytest.mark.unit


def test_histogram_gives_per_position_acceptance_and_accept_length():
    # 10 verifies, 3 steps: 2 accepted nothing, 3 one draft, 4 two, 1 all three.
    hist = [2, 3, 4, 1]
    assert acceptance.reach(hist) == [10, 8, 5, 1]
    assert acceptance.per_position(hist) == pytest.approx([0.8, 5 / 8, 1 / 5])
    assert acceptance.histogram_accept_len(hist) == pytest.approx(1 + (3 + 8 + 3) / 10)  # 2.4 = 1 + Σ S(i)
    assert acceptance.per_position([3, 0, 0]) == [0.0, None]  # nothing reached position 1: a_2 unmeasured


def test_summarize_sums_requests_and_says_why_when_absent():
    metas = [
        {"spec_verify_ct": 4, "spec_correct_drafts_histogram": [1, 1, 2]},
        {"spec_verify_ct": 6, "spec_correct_drafts_histogram": [1, 2, 2, 1]},
    ]
    out = acceptance.summarize(metas)
    assert out["histogram"] == [2, 3, 4, 1] and out["verify_ct"] == 10 and out["reason"] is None
    assert out["source"] == "spec_correct_drafts_histogram over 2 requests"
    assert out["accept_len"] == pytest.approx(2.4)

    # SGLang 0.5.9 to 0.5.11 named the same histogram spec_accept_histogram.
    renamed = acceptance.summarize([{"spec_verify_ct": 4, "spec_accept_histogram": [1, 1, 2]}])
    assert renamed["histogram"] == [1, 1, 2] and renamed["source"] == "spec_accept_histogram over 1 requests"

    old = acceptance.summarize([{"spec_verify_ct": 5, "spec_correct_drafts_histogram": None}])
    assert old["histogram"] is None and old["per_position"] is None and old["verify_ct"] == 5
    assert "before 0.5.9" in old["reason"]
    none = acceptance.summarize([{"spec_verify_ct": None}])
    assert none["verify_ct"] is None and "without speculation" in none["reason"]


# The per-request meta_info keys each release writes: the ``meta_info["spec_…"]`` literals of
# sglang/srt/managers/tokenizer_manager.py in the PyPI wheel of each release (research notes of issue 36 §4.2,
# read again from the wheels for this test). Not specdeck's table: the judge of it.
WHEELS = {
    (0, 5, 6): "spec_accept_length spec_accept_rate spec_accept_token_num spec_draft_token_num spec_verify_ct",
    (0, 5, 8): "spec_accept_length spec_accept_rate spec_accept_token_num spec_draft_token_num spec_verify_ct",
    (0, 5, 9): "spec_accept_histogram spec_accept_length spec_accept_rate spec_accept_token_num "
    "spec_draft_token_num spec_verify_ct",
    (0, 5, 11): "spec_accept_histogram spec_accept_length spec_accept_rate spec_accepted_drafts "
    "spec_proposed_drafts spec_verify_ct",
    (0, 5, 12): "spec_accept_histogram spec_accept_length spec_accept_rate spec_accepted_drafts "
    "spec_correct_drafts_histogram spec_num_correct_drafts spec_num_proposed_drafts spec_proposed_drafts "
    "spec_verify_ct",
    (0, 5, 16): "spec_accept_histogram spec_accept_length spec_accept_rate spec_accepted_drafts "
    "spec_block_accept_length spec_cap_length spec_cap_lens_histogram spec_correct_drafts_histogram "
    "spec_num_correct_drafts spec_num_proposed_drafts spec_proposed_drafts spec_verify_ct",
    (0, 5, 20): "spec_accept_histogram spec_accept_length spec_accept_rate spec_accepted_drafts "
    "spec_block_accept_length spec_cap_length spec_cap_lens_histogram spec_correct_drafts_histogram "
    "spec_num_correct_drafts spec_num_proposed_drafts spec_proposed_drafts spec_verify_ct",
    (0, 5, 21): "spec_accept_length spec_accept_rate spec_block_accept_length spec_cap_length "
    "spec_cap_lens_histogram spec_correct_drafts_histogram spec_num_correct_drafts spec_num_proposed_drafts "
    "spec_verify_ct",
    (0, 5, 23): "spec_accept_length spec_accept_rate spec_block_accept_length spec_cap_length "
    "spec_cap_lens_histogram spec_correct_drafts_histogram spec_num_correct_drafts spec_num_proposed_drafts "
    "spec_verify_ct",
}


@pytest.mark.parametrize("release", sorted(WHEELS))
def test_each_release_writes_the_keys_its_wheel_writes(release):
    keys = acceptance.meta_keys(release)
    ours = {k for names in keys.values() for k in names}
    ours |= {"spec_accept_length", "spec_accept_rate", "spec_verify_ct"}
    assert ours == set(WHEELS[release].split())


@pytest.mark.parametrize("release", sorted(WHEELS))
def test_the_bench_reads_every_releases_meta_info(release):
    """The same request as each release writes it: 5 verifies at 3 drafts each, 6 accepted."""
    keys = acceptance.meta_keys(release)
    meta = {"spec_verify_ct": 5, "spec_accept_length": 12 / 5, "spec_accept_rate": 6 / 15}
    meta.update({k: 6 for k in keys["correct"]})
    meta.update({k: 15 for k in keys["proposed"]})
    meta.update({k: [1, 2, 1, 1] for k in keys["histogram"]})
    got = acceptance.request_figures(meta)
    assert (got["verify_ct"], got["correct"], got["proposed"]) == (5, 6, 15)
    assert got["histogram"] == ([1, 2, 1, 1] if keys["histogram"] else None)
    summary = acceptance.summarize([meta])
    if release < (0, 5, 9):
        assert summary["histogram"] is None and "before 0.5.9" in summary["reason"]
    else:
        assert summary["accept_len"] == pytest.approx(1 + (2 + 2 + 3) / 5)


def test_positions_past_a_passs_tier_are_unobserved_not_rejected():
    """Under --speculative-adaptive half the passes draft 1 position, half 3 (a_1 0.9, a_2 0.8, a_3 0.7): bin 1
    holds the tier-1 passes that accepted their one draft and the tier-3 passes rejected at 2. Read as if every
    pass drafted 3 positions, a_2 is 0.4; with the tiers' shares the tier-1 passes are unobserved at 2, as SGLang
    PR #31750 (open) counts per pass: a_2 is 0.8."""
    # 1000 passes: tier 1 gives [50, 450]; tier 3 gives [50, 90, 108, 252] (expected counts, exact)
    hist = [100, 540, 108, 252]
    assert acceptance.per_position(hist) == pytest.approx([0.9, 0.4, 0.7])
    assert acceptance.per_position(hist, {1: 0.5, 3: 0.5}) == pytest.approx([0.9, 0.8, 0.7])
    # Tier 0 drafts nothing: its passes are unobserved at position 1 too (a_1 0.6, a_2 0.5; tier 0 gives [500],
    # tier 2 gives [200, 150, 150])
    assert acceptance.per_position([700, 150, 150]) == pytest.approx([0.3, 0.5])
    assert acceptance.per_position([700, 150, 150], {0: 1, 2: 1}) == pytest.approx([0.6, 0.5])
    assert acceptance.per_position([10, 90], {1: 1.0}) == pytest.approx([0.9])
    summary = acceptance.summarize([{"spec_verify_ct": 1000, "spec_correct_drafts_histogram": hist}], {1: 1, 3: 1})
    assert summary["per_position"] == pytest.approx([0.9, 0.8, 0.7]) and summary["tiers"] == {"1": 0.5, "3": 0.5}
