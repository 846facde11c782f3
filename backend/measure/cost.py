"""What output tokens cost: GPU-seconds per million tokens from throughput and GPU count, dollars with a price.

A server holds ``tp × pp`` GPUs whatever it decodes (SGLang's ``--tp-size`` is the whole server's, split
over its ``--nnodes``), so a million output tokens at ``total_tok_s`` (all streams together) cost
``gpus × 1e6 / total_tok_s`` GPU-seconds; with ``[reference] gpu_hour_usd`` that is dollars. The figure
assumes the GPUs are paid for by the hour and do nothing else, and it counts output tokens only (prefill is
part of the cost, not of the count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def gpus_of(args: Mapping[str, Any], argv: Sequence[str]) -> int:
    """A server's GPUs: its profile's tp (``args["tp"]``, else ``--tp-size`` in argv) times ``--pp-size`` (1).
    ``--nnodes`` does not multiply: SGLang runs tp / nnodes ranks on each node (engine.py ``tp_size_per_node``)."""

    def flag(names: tuple[str, ...]) -> int | None:
        for i, word in enumerate(argv):
            for name in names:
                if word == name and i + 1 < len(argv) and argv[i + 1].isdigit():
                    return int(argv[i + 1])
                if word.startswith(name + "=") and word[len(name) + 1 :].isdigit():
                    return int(word[len(name) + 1 :])
        return None

    tp = args.get("tp") if isinstance(args.get("tp"), int) else flag(("--tp-size", "--tp"))
    stages = flag(("--pp-size", "--pipeline-parallel-size"))
    return max(1, tp or 1) * max(1, stages or 1)


@dataclass(frozen=True)
class Cost:
    """A million output tokens' cost: GPU-seconds always, dollars where a price is configured."""

    gpu_s: float
    usd: float | None
    gpus: int

    def text(self) -> str:
        if self.usd is not None:
            return f"${self.usd:.2f} per million tokens"
        return f"{self.gpu_s:,.0f} GPU-s per million tokens"

    def value(self) -> float:
        """The figure compared: dollars where there is a price, else GPU-seconds."""
        return self.gpu_s if self.usd is None else self.usd

    def to_json(self) -> dict[str, Any]:
        return {"usd_per_million": self.usd, "gpu_s_per_million": self.gpu_s, "gpus": self.gpus}


def per_million(total_tok_s: float | None, gpus: int, gpu_hour_usd: float | None) -> Cost | None:
    """A million output tokens at ``total_tok_s`` on ``gpus`` GPUs; None without a positive throughput."""
    if not total_tok_s or total_tok_s <= 0:
        return None
    gpu_s = gpus * 1e6 / total_tok_s
    return Cost(gpu_s, None if gpu_hour_usd is None else gpu_s / 3600 * gpu_hour_usd, gpus)


def drafter_sentence(drafter: str, algorithm: str, mine: Mapping[int, Cost], base: Mapping[int, Cost]) -> str | None:
    """One sentence on a drafter's cost against the baseline at the concurrencies both were measured at:
    "at 1 stream EAGLE3 with aq-medai costs $0.91 per million tokens, 19% less than the baseline; from 6 streams
    it costs more". None without a common level."""
    levels = sorted(set(mine) & set(base))
    if not levels:
        return None
    first = levels[0]
    pct = (mine[first].value() / base[first].value() - 1) * 100
    how = f"{abs(pct):.0f}% {'less' if pct < 0 else 'more'} than the baseline"
    if not round(pct):
        how = "the same as the baseline"
    streams = "stream" if first == 1 else "streams"
    line = f"at {first} {streams} {algorithm} with {drafter} costs {mine[first].text()}, {how}"
    dearer = [n for n in levels if mine[n].value() > base[n].value()]
    cheaper = [n for n in levels if mine[n].value() < base[n].value()]
    if cheaper and dearer and min(dearer) > max(cheaper):
        line += f"; from {min(dearer)} streams it costs more"
    elif cheaper and dearer:
        line += f"; it costs more at {', '.join(map(str, dearer))} streams"
    elif len(levels) > 1:
        line += f"; {'less' if cheaper else 'more'} at every concurrency measured (up to {levels[-1]})"
    return line + "."
