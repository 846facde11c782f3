"""Per-position acceptance from SGLang's per-request histograms (FIELD-NOTES §5b), and the per-request
``meta_info`` keys each release writes them under: shared by the load generator on the host (the bench's
reader), the advisor on the client and the SIMULATED SGLang (the writer), so all read the same numbers the
same way.

SGLang returns, with a finished request's ``meta_info``, a histogram (bin k: verify passes that accepted
exactly k drafts, the bonus token not counted) and ``spec_verify_ct``, for every algorithm it runs (EAGLE,
EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK: the scheduler counts them alike). Over N verifies with K
draft positions, S(i) = (h_i + … + h_K) / N is the share of verifies whose draft reached position i,
a_i = S(i) / S(i−1) the conditional acceptance of draft i (S(0) = 1), and the accept length
1 + Σ_i S(i) = 1 + Σ_k k·h_k / N. SGLang before 0.5.9 gives verify counts only: then the acceptance is
absent (None, with the reason), never zeros.

A pass drafts only as far as its tier (``--speculative-adaptive``: the step count in force for that batch) or
its cap (DSPARK's ragged verify): a pass at tier t that accepted all t drafts says nothing of position t + 1.
The histogram does not say each pass's tier, so a pooled one read as if every pass drafted K positions counts
those passes as rejections at t + 1 and undercounts the deep positions. Given the share of passes at each
tier (``tiers``), ``per_position`` treats positions beyond a pass's tier as unobserved, not rejected, as
SGLang PR #31750 (open: "Treat positions outside the current adaptive draft budget as unobserved instead of
rejected") does per pass: the passes in bin t split between those that stopped at their tier and those
rejected at t + 1 in the proportion the tiers and the rates say, solved to a fixed point (``censored``).

Side-effect free (registers no agent method), stdlib only, Python 3.8+.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

SOURCE = "spec_correct_drafts_histogram"
OLD_SOURCE = "spec_accept_histogram"  # the same histogram's name in SGLang 0.5.9 to 0.5.20 (read from the wheels)

# The per-request meta_info keys of each release: quantity -> the names it writes it under, its own first, then
# the aliases it keeps (``meta_info["..."]`` literals of sglang/srt/managers/tokenizer_manager.py in every wheel
# 0.5.6 to 0.5.23; research notes of issue 36 §4.2). (first release, keys); the newest row not after a release
# applies.
Release = Tuple[int, int, int]
_CORRECT: List[Tuple[Release, Tuple[str, ...]]] = [
    ((0, 5, 0), ("spec_accept_token_num",)),
    ((0, 5, 11), ("spec_accepted_drafts",)),
    ((0, 5, 12), ("spec_num_correct_drafts", "spec_accepted_drafts")),  # "backward-compat aliases"
    ((0, 5, 21), ("spec_num_correct_drafts",)),
]
_PROPOSED: List[Tuple[Release, Tuple[str, ...]]] = [
    ((0, 5, 0), ("spec_draft_token_num",)),
    ((0, 5, 11), ("spec_proposed_drafts",)),
    ((0, 5, 12), ("spec_num_proposed_drafts", "spec_proposed_drafts")),
    ((0, 5, 21), ("spec_num_proposed_drafts",)),
]
_HISTOGRAM: List[Tuple[Release, Tuple[str, ...]]] = [
    ((0, 5, 0), ()),
    ((0, 5, 9), (OLD_SOURCE,)),
    ((0, 5, 12), (SOURCE, OLD_SOURCE)),
    ((0, 5, 21), (SOURCE,)),
]
DSPARK_KEYS_FROM: Release = (0, 5, 16)  # spec_cap_length, spec_block_accept_length, spec_cap_lens_histogram
CAP_LENGTH, BLOCK_ACCEPT_LENGTH, CAP_HISTOGRAM = (
    "spec_cap_length",
    "spec_block_accept_length",
    "spec_cap_lens_histogram",
)


def _row(table: List[Tuple[Release, Tuple[str, ...]]], release: Release) -> Tuple[str, ...]:
    keys: Tuple[str, ...] = ()
    for first, names in table:
        if release >= first:
            keys = names
    return keys


def meta_keys(release: Release) -> Dict[str, Tuple[str, ...]]:
    """The names release ``release`` (``(0, 5, 23)``) writes each per-request figure under: ``correct`` (accepted
    drafts), ``proposed`` (drafts proposed), ``histogram`` (empty before 0.5.9) and ``dspark`` (DSPARK's cap and
    block figures, 0.5.16+)."""
    return {
        "correct": _row(_CORRECT, release),
        "proposed": _row(_PROPOSED, release),
        "histogram": _row(_HISTOGRAM, release),
        "dspark": (CAP_LENGTH, BLOCK_ACCEPT_LENGTH, CAP_HISTOGRAM) if release >= DSPARK_KEYS_FROM else (),
    }


_ANY_CORRECT = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_ANY_PROPOSED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")


def _first(meta: Mapping[str, Any], names: Sequence[str]) -> Any:
    return next((meta[n] for n in names if meta.get(n) is not None), None)


def request_figures(meta: Mapping[str, Any]) -> Dict[str, Any]:
    """A finished request's speculative figures from its ``meta_info``, whichever release wrote it: verify
    passes, accepted drafts, drafts proposed, the histogram (and the key it came under) and DSPARK's cap and block
    accept lengths and cap histogram (None where absent). ``spec_accept_rate`` (accepted / proposed drafts) is
    drafts only in every release's meta_info (0.5.6 already counted ``accept_lens[i] - 1`` per pass,
    scheduler_output_processor_mixin.py:280); the decode line's and the gauge's rate is the one that changed in
    0.5.11 (``backend.sglang.versions``)."""
    source = next((n for n in (SOURCE, OLD_SOURCE) if isinstance(meta.get(n), list)), None)
    return {
        "verify_ct": meta.get("spec_verify_ct"),
        "correct": _first(meta, _ANY_CORRECT),
        "proposed": _first(meta, _ANY_PROPOSED),
        "histogram": meta.get(source) if source else None,
        "source": source,
        "cap_len": meta.get(CAP_LENGTH),
        "block_accept_len": meta.get(BLOCK_ACCEPT_LENGTH),
        "cap_histogram": meta.get(CAP_HISTOGRAM) if isinstance(meta.get(CAP_HISTOGRAM), list) else None,
    }


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


Tiers = Mapping[int, float]  # draft positions a pass at that tier drafts -> its share of the passes


def _padded(histogram: Sequence[int], tiers: Optional[Tiers]) -> List[int]:
    top = max([len(histogram) - 1, *[int(t) for t in (tiers or {})]])
    return [int(h) for h in histogram] + [0] * (top + 1 - len(histogram))


def censored(histogram: Sequence[int], tiers: Tiers, rates: Sequence[Optional[float]]) -> List[float]:
    """Of the passes in each bin k, how many stopped because their tier was k (every draft accepted, position
    k + 1 never drafted) rather than being rejected at k + 1: with w the tiers' shares, the bin's share
    w_k / (w_k + W_{>k} · (1 − a_{k+1})). The deepest bin is all tier-stopped."""
    h = _padded(histogram, tiers)
    total = float(sum(tiers.values())) or 1.0
    shares = [float(tiers.get(k, 0.0)) / total for k in range(len(h))]
    out = []
    for k, count in enumerate(h):
        deeper = sum(shares[k + 1 :])
        rejected = 1.0 - (rates[k] if k < len(rates) and rates[k] is not None else 1.0)  # type: ignore[operator]
        stop = shares[k] / (shares[k] + deeper * rejected) if shares[k] + deeper * rejected > 0 else 0.0
        out.append(count * (1.0 if k == len(h) - 1 else stop))
    return out


def at_risk(
    histogram: Sequence[int], tiers: Optional[Tiers] = None, rates: Sequence[Optional[float]] = ()
) -> Tuple[List[float], List[float]]:
    """(trials, successes) at positions 1..K: passes that reached position i − 1 and drafted position i (less
    those that stopped at their tier, ``censored``), and those that accepted it. Without ``tiers`` every pass
    drafted every position up to the histogram's last."""
    h = _padded(histogram, tiers)
    counts = reach(h)
    stopped = censored(h, tiers, rates) if tiers else [0.0] * len(h)
    trials = [counts[i - 1] - stopped[i - 1] for i in range(1, len(h))]
    return trials, [float(counts[i]) for i in range(1, len(h))]


def per_position(histogram: Sequence[int], tiers: Optional[Tiers] = None) -> List[Optional[float]]:
    """a_1..a_K; None where no verify drafted the position (nothing to measure, not a zero). ``tiers``: the share
    of passes at each tier (an adaptive run), positions past a pass's tier unobserved (the module's docstring)."""
    # A fixed point: each bin's split needs the rates it gives. From the rates read without tiers (every stop a
    # rejection: too low), which climb to the fixed point below 1 (a rate of 1 is one too, never a stable one).
    trials, successes = at_risk(histogram)
    rates: List[Optional[float]] = [s / t if t > 1e-9 else None for t, s in zip(trials, successes)]
    for _ in range(500 if tiers else 0):
        trials, successes = at_risk(histogram, tiers, rates)
        new = [s / t if t > 1e-9 else None for t, s in zip(trials, successes)]
        settled = len(new) == len(rates) and all(
            a == b or (a is not None and b is not None and abs(a - b) < 1e-12) for a, b in zip(new, rates)
        )
        rates = new
        if settled:
            break
    return rates


def histogram_accept_len(histogram: Sequence[int]) -> Optional[float]:
    """1 + Σ k·h_k / N: accepted drafts plus the bonus token per verify."""
    n = sum(histogram)
    return 1.0 + sum(k * h for k, h in enumerate(histogram)) / n if n else None


def dspark_summary(requests: Sequence[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """DSPARK's figures over a bench's requests (each with ``spec_verify_ct`` and ``request_figures``' cap_len,
    block_accept_len, cap_histogram): the mean verify window per pass (``cap_len``, its bonus slot counted) and
    the mean uncapped block accept length (cap-accept mode only), both from totals (each request's mean times its
    passes), and the summed histogram of caps (bin c: passes that verified c tokens); None where no request
    reports a cap (not DSPARK, or its static mode)."""
    capped = [r for r in requests if r.get("spec_verify_ct") and r.get("cap_len") is not None]
    if not capped:
        return None
    passes = sum(int(r["spec_verify_ct"]) for r in capped)
    blocks = [r for r in capped if r.get("block_accept_len") is not None]
    block_passes = sum(int(r["spec_verify_ct"]) for r in blocks)
    return {
        "cap_len": sum(float(r["cap_len"]) * int(r["spec_verify_ct"]) for r in capped) / passes,
        "block_accept_len": (
            sum(float(r["block_accept_len"]) * int(r["spec_verify_ct"]) for r in blocks) / block_passes
            if block_passes
            else None
        ),
        "cap_histogram": add_histograms([r["cap_histogram"] for r in capped if r.get("cap_histogram")]) or None,
        "requests": len(capped),
    }


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


def summarize(metas: Sequence[Mapping[str, Any]], tiers: Optional[Tiers] = None) -> Dict[str, Any]:
    """The acceptance of a bench from its requests' final ``meta_info`` dicts (the requests that succeeded), any
    release's keys (``request_figures``); ``tiers``: an adaptive run's share of passes per tier."""
    figures = [request_figures(m) for m in metas]
    spec = [f for f in figures if f["verify_ct"]]
    if not spec:
        return absent("the server runs without speculation (no request had a verify step)")
    verify_ct = sum(int(f["verify_ct"]) for f in spec)
    if any(f["histogram"] is None for f in spec):
        return absent(
            "the server's meta_info has no spec_correct_drafts_histogram (SGLang before 0.5.9 gives verify "
            "counts only)",
            verify_ct,
        )
    histogram = add_histograms([f["histogram"] for f in spec])
    sources = sorted({f["source"] for f in spec})
    out = {
        "histogram": histogram,
        "verify_ct": sum(histogram),
        "per_position": per_position(histogram, tiers),
        "accept_len": histogram_accept_len(histogram),
        "source": "%s over %d requests" % ("/".join(sources), len(spec)),
        "reason": None,
    }
    if tiers:
        total = float(sum(tiers.values())) or 1.0
        out["tiers"] = {str(k): round(float(v) / total, 4) for k, v in sorted(tiers.items())}
    return out
