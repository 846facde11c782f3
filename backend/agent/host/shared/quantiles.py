"""One percentile rule for every figure specdeck computes from samples: ``statistics.quantiles``' inclusive
method, computed here with its own arithmetic for only the cuts asked for (the same floats; importing
``statistics`` cost a CLI command ~15 ms on a loaded box, and a p95 needs one cut, not 99).

It interpolates linearly between the closest ranks (numpy's default, R's type 7): p95 of five round trips lies
80 % of the way from the 4th to the 5th, where nearest rank would say the 5th. The host uses it (the load
generator's latencies, the advisor's intervals) and so does the client (``ping``, the Live tab's figures).
Prometheus histograms have their own rule, bucket interpolation (``backend/measure/latency.py``). Stdlib only,
Python 3.8+.
"""

from __future__ import annotations

# typing only for the checker: importing it cost a one-shot CLI answer ~5 ms (quick.py)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Iterable, List, Optional, Sequence, Union


def quantiles(values: Iterable[float], qs: Sequence[float]) -> List[Optional[float]]:
    """The ``qs`` quantiles of ``values`` (each q in (0, 1), in steps of 0.001): None for no values, the value
    itself for one."""
    data = sorted(values)
    if not data:
        return [None] * len(qs)
    if len(data) == 1:
        return [float(data[0])] * len(qs)
    n = 100 if all(abs(q * 100 - round(q * 100)) < 1e-9 for q in qs) else 1000
    m = len(data) - 1
    out: List[Optional[float]] = []
    for q in qs:
        k = round(q * n)
        if not 0 < k < n or abs(k - q * n) > 1e-6:
            raise ValueError("quantile %r: give q in (0, 1) in steps of 0.001" % (q,))
        j, delta = divmod(k * m, n)  # statistics.quantiles(data, n=n, method="inclusive")[k - 1], term for term
        out.append((data[j] * (n - delta) + data[j + 1] * delta) / n)
    return out


def quantile(values: Iterable[float], q: float) -> Optional[float]:
    return quantiles(values, [q])[0]


def round_trips(ms: Sequence[float]) -> Dict[str, Union[float, int]]:
    """What a ping reports of its round trips (ms, at least one): median and p95 to 3 decimals, and how many."""
    median, p95 = quantiles(ms, (0.5, 0.95))
    assert median is not None and p95 is not None, "a ping times one round trip or more"
    return {"median": round(median, 3), "p95": round(p95, 3), "samples": len(ms)}
