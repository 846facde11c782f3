"""How specdeck writes sizes and durations for people: one formatter for the host, the CLI and the panel."""

from __future__ import annotations

from typing import Optional


def human_bytes(n: float) -> str:
    """Bytes as the operator reads them: 2.22 GiB, 512.00 MiB, 8 B."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0
    return "%.2f TiB" % n  # pragma: no cover - the loop returns at TiB


def counted(n: int, one: str, many: Optional[str] = None) -> str:
    """A count with its noun agreeing: ``1 tensor``, ``3 tensors``, ``1 restart saved`` (``many`` when the plural
    is not ``one`` + s)."""
    return "%d %s" % (n, one if n == 1 else (many or one + "s"))


def duration(seconds: Optional[float]) -> str:
    """A short duration: 9s, 3m05s, 2h04m; a dash when unknown."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return "%ds" % s
    if s < 3600:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%dh%02dm" % (s // 3600, s % 3600 // 60)


# One rounding rule per quantity, on every screen, report and log line: a figure printed two ways reads as two.
def tok_s(value: float) -> str:
    """Decode throughput: one decimal (82.0, 109.1; never 82 or 82.014)."""
    return "%.1f" % value


def tok_s_range(low: float, high: float) -> str:
    """A tok/s interval, its ends as tok/s: 92.4–111.0."""
    return "%s–%s" % (tok_s(low), tok_s(high))


def accept_len(value: float) -> str:
    """An accept length (and a break-even one): two decimals (2.46, 3.57)."""
    return "%.2f" % value
