"""SIMULATED SGLang: how a prompt changes what the drafter accepts, and the text a response is made of (issue 32),
so that tests can break each promise the bench makes about its prompts.

- Raw or templated. A prompt without a chat template's turn markers (``chat_template.templated``) is not what the
  drafter was trained on: each position accepts ``RAW_FACTOR`` of its rate (a scenario's ``raw_factor``). The
  world's trap, not a measured factor (SemiAnalysis InferenceX PR #1116 review says it lowers acceptance, not by
  how much).
- Domain. A prompt is of the domain of the sandbox dataset whose row it carries (``backend/sandbox/datasets``),
  else code where it asks for Python, else chat. A scenario drafter's ``domains`` (``{"chat": 2.69, ...}``:
  accept lengths at ``DOMAIN_STEPS`` draft steps, as drafter cards publish them) scales that drafter's rates per
  domain so its chain gives those lengths; without one, every domain accepts alike.
- Loops. A prompt of random words (almost none of the commonest English words among many) sends the model into a
  loop: its completion repeats two words and every position accepts ``LOOP_RATE`` (a scenario's ``loop_accept``,
  an accept length at ``DOMAIN_STEPS``): 3.93 accepted per verify on random completions against 1.94 on chat
  (lightseekorg/tokenspeed #1305).
- Collapse. With a scenario's ``"collapse": true``, a decode pass with the batch full and a deep queue (at least
  half the batch waiting) accepts no draft at all (mratsim/sglang-qwen38fn-sm120-turbo #2).

Text: words of ``VOCABULARY`` in a seeded order, so a completion never reads as a loop unless it is one.
Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, Dict, List, NamedTuple, Optional

from backend.agent.host.shared.chat_template import templated
from backend.sandbox.sglang_sim import scenario

RAW_FACTOR = 0.85
LOOP_RATE = 0.99  # ≈ 3.94 at 3 steps
DOMAIN_STEPS = 3  # drafter cards publish accept lengths at 3 steps / topk 1 / 4 draft tokens
_COMMON = (
    "the a an of and to in is are was be it that this for on with as at by from or what how why your you i we "
    "they he she not can will do does which who when where than then there their these those one two"
)
COMMON = frozenset(_COMMON.split())
_VOCABULARY = (
    "time people way water words number sound light river story table garden morning engine letter market "
    "bridge window season signal planet travel reason answer moment corner circle island forest animal doctor "
    "science history music summer winter silver paper stone metal glass bread coffee tower harbor valley field "
    "coast mountain desert village city road train ship wheel motor cable switch button screen memory drawer "
    "ladder pocket basket candle mirror pillow blanket kettle spoon plate bottle cushion carpet curtain "
    "measure follow carry gather repeat answer explain compare observe balance collect deliver improve "
    "quickly slowly gently nearly rarely early later often always never simply finally clearly really "
    "bright quiet heavy narrow gentle simple careful certain distant modern ancient honest fragile steady"
)
VOCABULARY = _VOCABULARY.split()
_TOKEN_BASE_ID = 1000
_DATASETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "datasets")
_FOLDER_DOMAINS = {"mt-bench-like": "chat", "humaneval-like": "code", "gsm8k-like": "math", "bfcl-like": "tools"}


class Traits(NamedTuple):
    templated: bool
    domain: str
    looping: bool


_known: Dict[str, str] = {}


def _dataset_keys() -> Dict[str, str]:
    """The first words of every sandbox dataset row's question → its domain (read once)."""
    if _known:
        return _known
    for folder in sorted(os.listdir(_DATASETS)) if os.path.isdir(_DATASETS) else []:
        domain = _FOLDER_DOMAINS.get(folder.split("__", 1)[-1])
        if domain is None:
            continue
        for name in os.listdir(os.path.join(_DATASETS, folder)):
            if not name.endswith((".json", ".jsonl")):
                continue
            with open(os.path.join(_DATASETS, folder, name), encoding="utf-8") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    q = row.get("question") or row.get("prompt")
                    if isinstance(q, list):
                        q = q[0][0].get("content") if q and isinstance(q[0], list) else q[0]
                    if isinstance(q, str) and q.strip():
                        _known[q.strip()[:40]] = domain
    return _known


def traits(text: str) -> Traits:
    """What the simulated model makes of a prompt's text."""
    words = text.split()
    looping = len(words) >= 32 and sum(w.lower() in COMMON for w in words) < 0.03 * len(words)
    domain = next((d for key, d in _dataset_keys().items() if key in text), None)
    if domain is None:
        lowered = text.lower()
        domain = "code" if "python" in lowered or "def " in text else "chat"
    return Traits(templated(text), domain, looping)


def _chain(rates: List[float]) -> float:
    total, reached = 1.0, 1.0
    for a in rates:
        reached *= min(1.0, a)
        total += reached
    return total


def _factor_for(rates: List[float], length: float) -> float:
    """The factor on ``rates`` whose chain gives ``length`` (bisection; rates capped at 1)."""
    low, high = 0.0, 4.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _chain([a * mid for a in rates]) < length else (low, mid)
    return (low + high) / 2


def _rate_for(length: float, steps: int = DOMAIN_STEPS) -> float:
    """The one rate at every position whose chain gives ``length`` at ``steps``."""
    return min(1.0, _factor_for([1.0] * steps, length))


def ease(t: Traits, spec: Dict[str, Any]) -> float:
    """A request's acceptance factor from its prompt (times its own draw around 1)."""
    chosen = scenario.active()
    raw = chosen.raw_factor if chosen is not None and chosen.raw_factor is not None else RAW_FACTOR
    factor = 1.0 if t.templated else raw
    lengths = chosen.domains(spec.get("drafter") or "") if chosen is not None else None
    if lengths and t.domain in lengths and spec.get("rates"):
        factor *= _factor_for(list(spec["rates"][:DOMAIN_STEPS]), lengths[t.domain])
    return factor


def loop_rate() -> float:
    chosen = scenario.active()
    length = chosen.loop_accept if chosen is not None else None
    return _rate_for(length) if length else LOOP_RATE


def collapsed(running: int, max_running: int, waiting: int) -> bool:
    """Whether a decode pass accepts nothing: a scenario that collapses, the batch full, the queue deep."""
    chosen = scenario.active()
    return bool(chosen is not None and chosen.collapse and running >= max_running and waiting >= (running + 1) // 2)


class Words(object):
    """The words responses are made of: a seeded order over the vocabulary, or a loop of two."""

    def __init__(self, seed: Optional[int]) -> None:
        self.rng = random.Random(seed)

    def ids(self, n: int, looping: bool = False, at: int = 0) -> List[int]:
        if looping:
            return [_TOKEN_BASE_ID + (at + i) % 2 for i in range(n)]
        return [_TOKEN_BASE_ID + self.rng.randrange(len(VOCABULARY)) for _ in range(n)]


def text(ids: List[int]) -> str:
    return "".join(VOCABULARY[(i - _TOKEN_BASE_ID) % len(VOCABULARY)] + " " for i in ids)
