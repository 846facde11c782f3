"""Which sweep point to measure next, and which measured point is best: the smart order and its stop rule over
the points measured so far, shared by the host's sweep job (one point at a time) and the client's fleet sweep
(one point per host at a time, each next point chosen as the serial sweep would choose its next). Pure:
registers nothing, so the client imports it. Stdlib only, Python 3.8+.

``smart``: the profile's own point first, then the rest in the order the advisor (``advice.py``) ranks them
from what was measured so far, until its stop rule holds: at least two distinct step counts measured, the
per-step cost fitted (never assumed), and the measured best's lower bound above the upper end of every
remaining prediction. ``best`` is ``advice.best``'s: the fastest measured point, with those it is not separated
from and the requests per point that would separate them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from . import advice
from .measured_points import Point


def chains_of(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Like with like: the points the advisor models (topk 1, draft tokens = steps + 1)."""
    return [r for r in records if (r.get("topk") or 1) == 1 and r.get("draft_tokens") in (None, r["steps"] + 1)]


class Order:
    """A sweep's grid (``params["points"]``: each with ``args`` steps/topk/draft_tokens) and its results by
    point index; ``params`` also holds ``smart``, ``first``, ``baseline_tok_s`` and ``plain_step_ms``."""

    def __init__(self, params: Dict[str, Any]) -> None:
        self.params = params
        self.points: List[Dict[str, Any]] = params["points"]
        self.results: Dict[int, Dict[str, Any]] = {}
        self.extra: List[Dict[str, Any]] = []  # a separating round's second measurements of points (``separation``)

    def measured(self) -> List[Dict[str, Any]]:
        return [r for r in list(self.results.values()) + self.extra if r.get("tok_s") is not None]

    def steps_of(self, index: int) -> int:
        return int(self.points[index]["args"]["steps"])

    def first_order(self, finished: Dict[int, Dict[str, Any]]) -> List[int]:
        """The points not ``finished``, the profile's own first when smart (nothing is ranked before a point is
        measured)."""
        todo = [i for i in range(len(self.points)) if i not in finished]
        if self.params.get("smart") and todo:
            first = self.params.get("first")
            todo.sort(key=lambda i: 0 if i == first else 1)
        return todo

    def assess(self, todo: List[int]) -> Dict[str, Any]:
        """The advisor over the points measured so far (``advice.assess``): rows, the one best, the stop rule
        for the step counts in ``todo``."""
        done = self.measured()
        baseline = float(self.params["baseline_tok_s"])
        plain = self.params.get("plain_step_ms") or 1000.0 / baseline
        points = [Point.from_bench(int(r["steps"]), r) for r in chains_of(done)]
        candidates = sorted({self.steps_of(i) for i in todo})
        top = max([self.steps_of(i) for i in range(len(self.points))] + [1])
        return advice.assess(points, plain, baseline, top, candidates=candidates)

    def ranked(self, todo: List[int], assessed: Dict[str, Any]) -> List[Dict[str, Any]]:
        """The points in ``todo`` in the order to measure them: the stop rule's next first, then by prediction."""
        rows = {r["steps"]: r for r in assessed["rows"]}
        nxt = assessed["stop"]["next"]
        out = [dict(rows[self.steps_of(i)], index=i) for i in todo]
        return sorted(out, key=lambda r: (r["steps"] != nxt, -(r["tok_s"] or 0)))

    def reorder(self, todo: List[int]) -> Tuple[List[int], Optional[Dict[str, Any]], Optional[Dict[str, Any]]]:
        """(``todo`` in the order to measure it, the ``plan`` event saying why or None, the ``stopped_early``
        record when the stop rule holds and nothing in ``todo`` can win); unchanged unless smart with a point
        measured."""
        if not (self.params.get("smart") and todo and self.measured()):
            return todo, None, None
        assessed = self.assess(todo)
        ranked = self.ranked(todo, assessed)
        stop = assessed["stop"]
        if stop["can_stop"]:
            best = assessed["best"] or {}
            return (
                [],
                None,
                {
                    "best_steps": best.get("steps"),
                    "best_tok_s_low": best.get("measured_low"),
                    "why": stop["why"],
                    "remaining": [r["index"] for r in ranked],
                    "predicted": [{"steps": r["steps"], "tok_s_high": r["tok_s_high"]} for r in ranked],
                },
            )
        public = [{k: v for k, v in r.items() if k != "notes"} for r in ranked]
        order = [r["index"] for r in ranked]
        return order, {"event": "plan", "order": order, "predicted": public, "why": stop["why"]}, None

    def separation(self) -> Optional[Dict[str, Any]]:
        """The separating round of a smart sweep: where the best is not separated from other points and
        ``requests_to_separate`` more requests each would part them within the budget (``separate_requests``
        more a point, default twice the sweep's requests), the ``plan`` event for it (the points, the requests,
        why); None where they are parted, cannot be, or would cost more."""
        best = self.best()
        if self.extra or not best or not best.get("not_separated_from") or best.get("index") is None:
            return None  # one round: the requests it projected are spent
        more = best.get("requests_to_separate")
        budget = int(self.params.get("separate_requests") or 2 * int(self.params["requests"]))
        if more is None or more > budget:
            return None
        order = [int(best["index"])]
        for steps in best["not_separated_from"]:
            same = [r for r in chains_of(self.measured()) if int(r["steps"]) == steps and r.get("index") is not None]
            if same:
                order.append(int(max(same, key=lambda r: r["tok_s"])["index"]))
        why = "steps %s measured fastest, not separated from %s at %s requests a point: %d more each" % (
            best["steps"],
            ", ".join(str(k) for k in best["not_separated_from"]),
            best.get("requests"),
            more,
        )
        return {
            "event": "plan",
            "phase": "separating",
            "order": order,
            "requests": more,
            "steps": [best["steps"], *best["not_separated_from"]],
            "why": why,
        }

    def best(self) -> Optional[Dict[str, Any]]:
        """The best measured point: the fastest (``advice.best``), with the points its interval does not separate
        it from and the requests per point that would (``not_separated_from``, ``requests_to_separate``)."""
        measured = self.measured()
        if not measured:
            return None
        if not chains_of(measured):  # trees (topk > 1): no model to judge noise by, the fastest
            top = max(measured, key=lambda r: r["tok_s"])
            return dict(top, not_separated_from=[], requests_to_separate=None, requests=_requests(top))
        top = self.assess([])["best"]
        if top is None:
            return None
        same = [r for r in chains_of(measured) if int(r["steps"]) == top["steps"]]
        pick = max(same, key=lambda r: r["tok_s"]) if same else max(measured, key=lambda r: r["tok_s"])
        keys = ("not_separated_from", "requests_to_separate", "requests", "measured_low", "measured_high")
        out = dict(pick, **{k: top.get(k) for k in keys})
        if len(same) > 1:  # measured again (a separating round): the pooled figure, as the advisor's table has it
            out.update(tok_s=top["measured_tok_s"], runs=[r.get("run") for r in same])
        return out


def _requests(record: Dict[str, Any]) -> Optional[int]:
    return len(record.get("per_request") or []) or None
