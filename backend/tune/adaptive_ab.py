"""The A/B of an adaptive proposal (``backend.tune.adaptive_proposal``): the ladder served from a profile and
benched at each concurrency it expects figures for, then the best fixed step count at the same ones, as a sweep
job on the host (``backend.agent.host.sweep``); its result read from the job's done event, and as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared import units
from backend.tune.adaptive_proposal import AdaptiveProposal

if TYPE_CHECKING:
    from backend.tune.sweep import SweepEvent


def ab_profiles(profile: Any, proposal: AdaptiveProposal) -> tuple[Any, Any]:
    """(the adaptive profile serving ``proposal``, the fixed profile at its best fixed step count), both made from
    ``profile`` (its drafter, port, flags), named ``<profile>-adaptive`` and ``<profile>-fixed<k>``."""
    return ab_profiles_of(profile, proposal.config, proposal.steps, int(proposal.fixed["steps"]))


def ab_profiles_of(profile: Any, config: dict[str, Any], start: int, fixed_steps: int) -> tuple[Any, Any]:
    """``ab_profiles`` from the A/B's own numbers (what a running A/B job keeps in its args)."""
    from dataclasses import replace

    adaptive = replace(
        profile, name=f"{profile.name}-adaptive", adaptive=True, adaptive_config=config, steps=start, topk=1,
        draft_tokens=None,
    )  # fmt: skip
    fixed = replace(
        profile, name=f"{profile.name}-fixed{fixed_steps}", adaptive=False, adaptive_config=None, steps=fixed_steps,
        topk=1, draft_tokens=fixed_steps + 1,
    )  # fmt: skip
    return adaptive, fixed


def ab_of(profile: Any, proposal: AdaptiveProposal) -> dict[str, Any]:
    """The A/B's own numbers (what its job keeps in its args, so a later client can follow or resume it): the
    profiles' names, the ladder, the start and fixed step counts, what was expected per concurrency."""
    adaptive, fixed = ab_profiles(profile, proposal)
    return {
        "adaptive": adaptive.name,
        "fixed": fixed.name,
        "config": proposal.config,
        "steps": proposal.steps,
        "fixed_steps": int(proposal.fixed["steps"]),
        "expected": proposal.expected,
    }


async def ab_start(
    conn: Any,
    settings: Any,
    profile: Any,
    ab: dict[str, Any],
    *,
    requests: int = 8,
    max_tokens: int = 256,
    baseline_tok_s: float | None = None,
    resume: str | None = None,
    force: bool = False,
) -> Any:
    """Start the A/B (``ab_of``) on the host as a sweep job (``backend.agent.host.sweep``: it outlives the panel
    and the connection, is followed like a sweep, and ``resume`` takes over an earlier A/B's measured sides): the
    ladder served from ``profile``, benched at each concurrency it expects figures for, then the best fixed step
    count at the same ones; the host left as found. Its job's description; ``ab_result`` reads its done event."""
    from backend.tune import sweep as sweep_mod

    levels = sorted({int(row["concurrency"]) for row in ab.get("expected") or []}) or [1]
    adaptive, fixed = ab_profiles_of(profile, ab["config"], int(ab["steps"]), int(ab["fixed_steps"]))
    params = {
        "requests": max(requests, *levels),
        "max_tokens": max_tokens,
        "levels": levels,
        "ab": ab,
        "smart": False,
        "first": 0,
        "ready_timeout": sweep_mod.READY_TIMEOUT_S,
        "baseline_tok_s": baseline_tok_s or settings.reference.baseline_tok_s,
    }
    return await sweep_mod.start_points(conn, settings, adaptive, [adaptive, fixed], params, resume=resume, force=force)


@dataclass(frozen=True)
class ABRow:
    """One concurrency of an A/B: adaptive and fixed tok/s per stream (None where that side failed), and what the
    proposal expected there (its tok/s with the interval; None where it expected nothing)."""

    concurrency: int
    adaptive_tok_s: float | None
    fixed_tok_s: float | None
    expected: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "adaptive_tok_s": self.adaptive_tok_s,
            "fixed_tok_s": self.fixed_tok_s,
            "expected": self.expected,
        }


@dataclass(frozen=True)
class ABResult:
    """An adaptive A/B judged level by level: the two profiles, the sweep that measured them, a row per
    concurrency, and why a side failed."""

    adaptive: str | None
    fixed: str | None
    sweep: str | None
    rows: tuple[ABRow, ...]
    failed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """As `tune --ab --json` prints it."""
        rows = [r.to_json() for r in self.rows]
        return {"adaptive": self.adaptive, "fixed": self.fixed, "sweep": self.sweep, "rows": rows,
                "failed": list(self.failed)}  # fmt: skip


def ab_result(done: SweepEvent) -> ABResult:
    """The A/B's figures from its job's done event (what was expected, in its ``ab``; each point's levels)."""
    ab = done.wire.get("ab") or {}
    by_name = {p.profile: p.wire for p in done.points if not p.wire.get("separating")}

    def at(name: str | None, level: int) -> float | None:
        point = by_name.get(name) or {}
        if point.get("failed"):
            return None
        levels = point.get("levels") or [{"concurrency": level, "tok_s": point.get("tok_s")}]
        return next((lv.get("tok_s") for lv in levels if lv.get("concurrency") == level), None)

    expected = {int(row["concurrency"]): row for row in ab.get("expected") or []}
    rows = tuple(
        ABRow(level, at(ab.get("adaptive"), level), at(ab.get("fixed"), level), expected.get(level))
        for level in sorted(expected) or [1]
    )
    failed = tuple(f"{p.get('profile')}: {p['failed']}" for p in by_name.values() if p.get("failed"))
    return ABResult(ab.get("adaptive"), ab.get("fixed"), done.sweep, rows, failed)


async def ab_bench(
    conn: Any,
    settings: Any,
    profile: Any,
    proposal: AdaptiveProposal,
    *,
    requests: int = 8,
    max_tokens: int = 256,
    on_event: Any = None,
) -> ABResult:
    """``ab_start`` followed to its end (``sweep.follow``): ``ab_result`` of its done event."""
    from backend.tune import sweep as sweep_mod

    job = await ab_start(conn, settings, profile, ab_of(profile, proposal), requests=requests, max_tokens=max_tokens)
    return ab_result(await sweep_mod.follow(conn, job.id, on_event))


def ab_lines(result: ABResult) -> list[str]:
    """The A/B as text: per concurrency, adaptive against fixed tok/s per stream, and what was expected."""
    sweep = f", sweep {result.sweep}" if result.sweep else ""
    out = [f"{result.adaptive} against {result.fixed} (tok/s per stream{sweep})"]
    out += [f"  failed: {reason}" for reason in result.failed]
    for row in result.rows:
        a, f, e = row.adaptive_tok_s, row.fixed_tok_s, row.expected
        change = f" ({100 * (a / f - 1):+.0f}%)" if a and f else ""
        want = f"; expected {e['tok_s']:.1f} [{e['tok_s_low']:.1f}-{e['tok_s_high']:.1f}]" if e else ""
        out.append(f"  {row.concurrency:>3} streams: adaptive {_tok(a)}, fixed {_tok(f)}{change}{want}")
    return out


def _tok(value: float | None) -> str:
    return "-" if value is None else units.tok_s(value)
