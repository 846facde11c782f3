"""Card claims (issue 35): accept lengths read from real model cards' tables, with the config each was measured
at where the card says it; cards without such a table say so. The tables are the real cards' (the sandbox
catalog's, each with its source, and tests/fixtures/cards/, each naming its source in its front matter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.drafters.cards import parse_card
from backend.drafters.find import claim_line
from backend.sandbox import hub_catalog

pytestmark = pytest.mark.unit

CARDS = Path(__file__).parent / "fixtures" / "cards"


def card_of(repo: str):
    return parse_card(hub_catalog.readme(hub_catalog.entry(repo)))


def test_aq_medai_k2_card_claims_its_table_at_the_config_its_text_states():
    card = card_of("AQ-MedAI/Kimi-K2-Instruct-eagle3")
    got = {c.benchmark: c.accept_len for c in card.claims}
    assert got == {"HumanEval": 3.372, "GSM8K": 3.165, "Math500": 3.49}  # bold marks and "(Code)" remarks dropped
    claim = card.claims[1]
    assert claim.config == {"steps": 3, "topk": 1, "draft_tokens": 4, "engine": "SGLang"}
    assert claim_line(claim, 2.46) == (
        "claims 3.17 on GSM8K at 3/1/4 (SGLang): above the break-even 2.46 if the cycle holds"
    )
    assert claim_line(claim, 3.5).endswith("below the break-even 3.50, slower than no speculation at this cycle")
    # Issue 32: within the judge's 2% floor a claim is level, not above or below.
    assert claim_line(claim, 3.15).endswith("level with the break-even 3.15 (within 2%), no faster at this cycle")
    assert card.note is None and card.headline == 3.372


def test_columns_named_for_training_phases_are_accept_lengths_when_the_text_says_so():
    card = card_of("lightseekorg/kimi-k2.5-eagle3")
    gsm8k = [c for c in card.claims if c.benchmark == "GSM8K"]
    assert [(c.accept_len, c.config["label"]) for c in gsm8k] == [
        (3.123, "Phase 1 (20k steps)"),
        (3.201, "Phase 2 (40k steps)"),
    ]
    assert gsm8k[1].config_text == "3/1/4 (Phase 2 (40k steps))"  # "20k steps" is no step count
    assert all(c.accept_len != 500 for c in card.claims)  # the "n" column counts prompts
    assert len(card.claims) == 20  # 10 benchmarks × 2 phases, as far as the captured excerpt goes


def test_a_block_drafter_card_claims_at_its_block_size():
    card = card_of("z-lab/Kimi-K2.5-DFlash")
    assert [(c.benchmark, c.accept_len) for c in card.claims][:2] == [("GSM8K", 5.3), ("Math500", 5.5)]
    assert card.claims[0].config_text == "block 8 (SGLang)"
    assert card.headline == 5.3


def test_cards_without_an_accept_length_table_say_so():
    assert card_of("AQ-MedAI/Kimi-K25-eagle3").note == "the card has no table of claims"
    assert card_of("daslab-testing/Kimi-K2.5-2bit-GSQ").note == "the card's tables give no accept length"
    assert parse_card(None).note == "no model card"
    # An acceptance *rate* is not an accept length; tokens per second are neither.
    for name in ("modularai-Kimi-K2.5-MTP.md", "Tengyunw-qwen3_8b_eagle3.md"):
        card = parse_card((CARDS / name).read_text())
        assert card.claims == () and card.note == "the card's tables give no accept length", name


def test_speedups_without_accept_lengths_are_kept_as_such():
    card = parse_card((CARDS / "florianleibert-kimi-k26-dflash-mi300x.md").read_text())
    assert [(c.speedup, c.accept_len, c.config["label"]) for c in card.claims] == [
        (1.4, None, "concurrency 8 users"),
        (1.5, None, "concurrency 12 users"),
        (5.6, None, "concurrency 32 users"),
    ]
    assert card.headline is None
    assert claim_line(card.claims[0], 2.46) == (
        "claims a 1.4× speed-up at config not stated (concurrency 8 users) (no accept length)"
    )
