"""Per-position acceptance from SGLang's per-request histograms (hand-computed numbers)."""

from __future__ import annotations

import pytest

from backend.agent.host.shared import acceptance


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
