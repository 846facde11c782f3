"""A completion that fell into a loop: n-gram repetition in its text.

Random prompts can send a model into a loop (a two-token cycle), and a drafter predicts a loop almost perfectly:
3.93 tokens accepted per verify against 1.94 on real chat for the same drafter (lightseekorg/tokenspeed #1305).
A bench that keeps such requests reports acceptance no user will see, so each request is flagged and left out of
the bench's figures, the best and the advisor.

The measure: of the completion's word ``N``-grams after its first ``WARMUP`` words, the share that already
occurred earlier in it. Prose repeats a few (``of the``), a loop repeats nearly all. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

from typing import List

N = 4
WARMUP = 8  # a loop needs room to show itself: the first words' n-grams are never repeats
MIN_WORDS = 24  # fewer words than this: too short to judge
THRESHOLD = 0.5  # more than half the n-grams repeats: a loop


def _words(text: str) -> List[str]:
    words = text.split()
    if len(words) < MIN_WORDS and len(text) >= MIN_WORDS * 4:  # text without spaces (code, CJK): characters
        return list(text)
    return words


def repetition(text: str) -> float:
    """The share of the completion's word 4-grams (after the first few) seen before in it; 0.0 for short text."""
    words = _words(text or "")
    if len(words) < MIN_WORDS:
        return 0.0
    seen = set()
    repeats = total = 0
    for i in range(len(words) - N + 1):
        gram = tuple(words[i : i + N])
        if i >= WARMUP:
            total += 1
            repeats += gram in seen
        seen.add(gram)
    return repeats / total if total else 0.0


def degenerate(text: str) -> bool:
    """Whether the completion looped."""
    return repetition(text) > THRESHOLD
