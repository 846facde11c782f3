"""Per-position acceptance from SGLang's per-request histograms (FIELD-NOTES §5b): shared by the load generator
on the host and the advisor on the client, so both read the same numbers the same way.

SGLang returns, with a finished request's ``meta_info``, ``spec_correct_drafts_histogram`` (0.5.12+; 0.5.9 to
0.5.11 called it ``spec_accept_histogram``; bin k: verify steps that accepted exactly k drafts) and
``spec_verify_ct``. Over N verifies with K draft steps,
S(i) = (h_i + … + h_K) / N is the share of verifies whose draft reached position i, a_i = S(i) / S(i−1) the
conditional acceptance of draft i (S(0) = 1), and the accept length 1 + Σ_i S(i) = 1 + Σ_k k·h_k / N. SGLang
before 0.5.9 gives verify counts only: then the acceptance is absent (None, with the reason), never zeros.

Side-effect free (registers no agent method), stdlib only, Python 3.8+.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

SOURCE = "spec_correct_drafts_histogram"
OLD_SOURCE = "spec_accept_histogram"  # the same histogram's name in SGLang 0.5.9 to 0.5.11 (read from the wheels)


def add_histograms(histograms: Sequence[Sequence[int]]) -> List[int]:
    """Bin-wise sum (shorter histograms count as zeros in the bins they lack)."""
    out: List[int] = []
    for hist in histograms:
        if len(hist) > len(out):
            out.extend([0] * (len(hist) - len(out)))
        for k, count in enumerate(hist):
            out[k] += int(count)
    return out


def reach(histogram: Sequence[int]) -> List[int]:
    """Verifies whose draft reached position i, for i = 0..K (position 0: every verify)."""
    counts = [0] * len(histogram)
    running = 0
    for k in range(len(histogram) - 1, -1, -1):
        running += histogram[k]
        counts[k] = running
    return counts


def per_position(histogram: Sequence[int]) -> List[Optional[float]]:
    """a_1..a_K; None where no verify reached the position before (nothing to measure, not a zero)."""
    counts = reach(histogram)
    return [counts[i] / counts[i - 1] if counts[i - 1] else None for i in range(1, len(counts))]


def histogram_accept_len(histogram: Sequence[int]) -> Optional[float]:
    """1 + Σ k·h_k / N: accepted drafts plus the bonus token per verify."""
    n = sum(histogram)
    return 1.0 + sum(k * h for k, h in enumerate(histogram)) / n if n else None


def absent(reason: str, verify_ct: Optional[int] = None) -> Dict[str, Any]:
    """The acceptance record when there is no histogram to read: nulls and the reason."""
    return {
        "histogram": None,
        "verify_ct": verify_ct,
        "per_position": None,
        "accept_len": None,
        "source": None,
        "reason": reason,
    }


def summarize(metas: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The acceptance of a bench from its requests' final ``meta_info`` dicts (the requests that succeeded)."""
    spec = [m for m in metas if m.get("spec_verify_ct")]
    if not spec:
        return absent("the server runs without speculation (no request had a verify step)")
    verify_ct = sum(int(m["spec_verify_ct"]) for m in spec)
    source = SOURCE if any(SOURCE in m for m in spec) else OLD_SOURCE
    histograms = [m.get(source) for m in spec]
    if any(not isinstance(h, list) for h in histograms):
        return absent(
            "the server's meta_info has no spec_correct_drafts_histogram (SGLang before 0.5.9 gives verify "
            "counts only)",
            verify_ct,
        )
    histogram = add_histograms(histograms)  # type: ignore[arg-type]
    return {
        "histogram": histogram,
        "verify_ct": sum(histogram),
        "per_position": per_position(histogram),
        "accept_len": histogram_accept_len(histogram),
        "source": "%s over %d requests" % (source, len(spec)),
        "reason": None,
    }
