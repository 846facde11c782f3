"""The bench's prompt sets by domain (``bench --domains chat,code,math,tools``): Hub datasets by id, fetched and
read on the host (``backend/agent/host/prompts.py``).

On a real host: MT-Bench for chat (HuggingFaceH4/mt_bench_prompts, its raw JSON lines), HumanEval for code and
GSM8K for math (parquet on the Hub: read with the host's pyarrow), BFCL's simple set for tool calls. On the
sandbox: its Hub's sets of the same schemas, written for it (``backend/sandbox/datasets``). ``random``: prompts
of random words, made on the host, the prompts that send a model into a loop (lightseekorg/tokenspeed #1305).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.errors import UsageError

RANDOM_PROMPTS = 16

# The code, math and tools files are where public code fetches them with hf_hub_download(repo, file,
# repo_type="dataset") (HumanEval's and GSM8K's parquet conversions, BFCL's v3 JSON lines; checked December
# 2026). MT-Bench's path was written from memory and could not be checked: its set carries the sentence the
# host adds when the file cannot be fetched.
UNCHECKED = "specdeck's path for this set was never checked against the Hub's layout and may be wrong."
HUB_SETS: dict[str, dict[str, Any]] = {
    "chat": {"dataset": "HuggingFaceH4/mt_bench_prompts", "file": "raw/question.jsonl", "unchecked": UNCHECKED},
    "code": {"dataset": "openai/openai_humaneval", "file": "openai_humaneval/test-00000-of-00001.parquet"},
    "math": {"dataset": "openai/gsm8k", "file": "main/test-00000-of-00001.parquet"},
    "tools": {"dataset": "gorilla-llm/Berkeley-Function-Calling-Leaderboard", "file": "BFCL_v3_simple.json"},
    "random": {"random": RANDOM_PROMPTS},
}
SANDBOX_SETS: dict[str, dict[str, Any]] = {
    "chat": {"dataset": "specdeck-sandbox/mt-bench-like", "file": "question.jsonl"},
    "code": {"dataset": "specdeck-sandbox/humaneval-like", "file": "test.jsonl"},
    "math": {"dataset": "specdeck-sandbox/gsm8k-like", "file": "test.jsonl"},
    "tools": {"dataset": "specdeck-sandbox/bfcl-like", "file": "BFCL_simple.json"},
    "random": {"random": RANDOM_PROMPTS},
}


def parse(text: str, sandbox: bool) -> dict[str, dict[str, Any]]:
    """``--domains`` as typed (``chat,code``) → ``{name: its set}`` for the host to fetch; UsageError naming the
    known ones for anything else."""
    sets = SANDBOX_SETS if sandbox else HUB_SETS
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in sets]
    if not names or unknown:
        raise UsageError(
            f"--domains takes {', '.join(sets)} (comma-separated), got {text!r}: "
            f"{'unknown ' + ', '.join(unknown) if unknown else 'no domain named'}."
        )
    return {n: dict(sets[n]) for n in dict.fromkeys(names)}


@dataclass(frozen=True)
class SetSource:
    """Where a domain's prompts come from: ``source`` (a dataset, or what the host makes), whether the Hub's path
    for it was checked (None: no Hub) and ``about``, both said in a sentence."""

    name: str
    source: str
    checked: bool | None
    about: str


CHECKED = "path checked (December 2026) against public code that downloads it from the Hub"
NEVER_CHECKED = "path never checked against the Hub's layout: it may be wrong"


def sources(sandbox: bool) -> list[SetSource]:
    """Every domain ``parse`` takes on this host and where its prompts come from; the sandbox's sets stand for the
    Hub's, whose check is the one that matters. For a chooser (the panel's)."""
    out = []
    for name, spec in (SANDBOX_SETS if sandbox else HUB_SETS).items():
        hub = HUB_SETS[name]
        if "random" in spec:
            out.append(SetSource(name, f"{spec['random']} prompts of random words", None, "made on the host, no Hub"))
            continue
        checked = not hub.get("unchecked")
        about = f"{hub['dataset']} {hub['file']}: {CHECKED if checked else NEVER_CHECKED}"
        if sandbox:
            about = f"{spec['dataset']} {spec['file']}, the sandbox Hub's stand-in for {about}"
        out.append(SetSource(name, spec["dataset"], checked, about))
    return out
