"""What a speculating server's numbers say, per algorithm, for the live views (the Live tab's server line; the
parse-metrics and fleet tables use ``Scrape.run_accept_length`` directly): one place that knows which figure is a
run's and which an interval's.

SGLang's spec gauges and decode-line fields are interval means: what they are made of is zeroed at every
decode-log tick (0.5.23 metrics_reporter.py:1001-1004), so each is the last ``--decode-log-interval`` steps'
figure and is said as such ("last interval"). A run's accept length comes from totals only: ``/server_info``'s
lifetime ``avg_spec_accept_length`` (accepted tokens over verify rows since start, refreshed at the ticks: the
figure the server line shows), else generation tokens over verify calls of the finished requests
(``Scrape.run_accept_length``).

Per algorithm:
- DSPARK (0.5.16+): ``cap len`` (the mean verify window, bonus slot counted) and ``block accept len`` (the
  uncapped accept length, exact in cap-accept mode), from the gauges, else the newest decode line;
  ``sglang:spec_cap_length`` reads 0 in the static mode, where no cap is scheduled: nothing is said then.
- DFLASH: block acceptance, the share of its verify window (``speculative_num_draft_tokens``, the block) a pass
  commits on average: the run's accept length over the block (the interval's where no run figure exists yet).
- Any algorithm: SGLang PR #31750's per-position acceptance where the page has it (not in a release yet: said
  so with it).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.measure.metrics import Sample, ServerNumbers
from backend.measure.prometheus import PR_31750, Scrape


@dataclass(frozen=True)
class SpecFigures:
    """One moment's per-algorithm figures of a server (None where it does not have them)."""

    algorithm: str | None
    window: int | None  # tokens a verify checks: DFLASH's block, DSPARK's gamma + 1, a chain's steps + 1
    run_accept_len: float | None  # from totals (counters), else the server's lifetime figure
    run_basis: str  # what run_accept_len is: "lifetime" (/server_info) or "run" (the finished requests' totals)
    interval_accept_len: float | None  # the last decode-log interval's
    cap_len: float | None  # DSPARK, last interval
    block_accept_len: float | None  # DSPARK cap-accept, last interval
    per_position: tuple[float | None, ...] = ()  # PR #31750's lifetime per-position acceptance

    @classmethod
    def of(cls, info: ServerNumbers | None, scrape: Scrape | None, sample: Sample | None) -> SpecFigures:
        """From ``server_info_numbers`` (``info``), the last /metrics scrape and the newest decode sample."""
        info = info or ServerNumbers()
        engine = scrape.engine if scrape is not None else {}
        # The lifetime figure the server line shows beside it first (one run figure on one line), else the counters'
        run, basis = info.avg_spec_accept_length, "lifetime"
        if run is None and scrape is not None:
            run, basis = scrape.run_accept_length(), "run"

        def gauge_or_line(key: str, field: str) -> float | None:
            value = engine.get(key)
            if value is None and sample is not None:
                value = getattr(sample, field)
            return value if value else None  # 0: none scheduled (static), or not this algorithm

        interval = engine.get("spec_accept_length") if engine.get("spec_accept_length") else None
        if interval is None and sample is not None:
            interval = sample.accept_len
        positions = tuple((scrape.per_position.get("total") or ()) if scrape is not None else ())
        return cls(
            info.speculative_algorithm,
            info.speculative_num_draft_tokens,
            run,
            basis,
            interval,
            gauge_or_line("spec_cap_length", "cap_len"),
            gauge_or_line("spec_block_accept_length", "block_accept_len"),
            positions,
        )

    def block_acceptance(self) -> tuple[float, str] | None:
        """DFLASH: (share of the block a pass commits, which accept length it rests on); None elsewhere."""
        if self.algorithm != "DFLASH" or not self.window:
            return None
        if self.run_accept_len is not None:
            return self.run_accept_len / self.window, self.run_basis
        if self.interval_accept_len is not None:
            return self.interval_accept_len / self.window, "last interval"
        return None

    def parts(self) -> list[str]:
        """The figures as the Live tab's server line says them, each with its window."""
        out = []
        if self.algorithm == "DSPARK" and (self.cap_len is not None or self.block_accept_len is not None):
            said = []
            if self.cap_len is not None:
                said.append(f"cap len {self.cap_len:.2f}" + (f" of {self.window}" if self.window else ""))
            if self.block_accept_len is not None:
                said.append(f"block accept len {self.block_accept_len:.2f}")
            out.append("DSPARK " + ", ".join(said) + " (last interval)")
        block = self.block_acceptance()
        if block is not None:
            share, basis = block
            accept = self.interval_accept_len if basis == "last interval" else self.run_accept_len
            out.append(f"DFLASH block {self.window}: {accept:.2f} accepted per verify, {share:.0%} of it ({basis})")
        if self.per_position:
            rates = " ".join("—" if a is None else f"{a:.2f}" for a in self.per_position)
            out.append(f"a_i {rates} ({PR_31750})")
        return out
