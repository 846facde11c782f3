"""Record SGLang's own adaptive step policy on fixed inputs, for backend.sglang.adaptive's tests.

    pip download --no-deps sglang==0.5.23 -d wheels/                 # the wheel, from PyPI
    python scripts/sglang_adaptive_trace.py wheels/sglang-0.5.23-*.whl

writes ``tests/fixtures/sglang/adaptive-<version>-trace.json``: for a few configs (the shipped default and
custom ones with top-level knobs, hysteresis, a ceiling and a tier-0 slot), with and without CUDA-graph padding,
a seeded sequence of verifies (batch size, accepted drafts per request) and what the wheel's own
``AdaptiveSpeculativeParams`` answered to each: the tier it drafts with before the verify, the switch it decided
after, and the routed slot's EMA. Only ``sglang/srt/speculative/adaptive_spec_params.py`` of the wheel runs, with
its three sglang imports stood in for (a no-op logger, unused views); nothing of the wheel is kept but the answers.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import types
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "sglang"
MODULE = "sglang/srt/speculative/adaptive_spec_params.py"
CONFIGS = {
    "shipped default": None,
    "custom": {
        "ema_alpha": 0.3,
        "update_interval": 3,
        "warmup_batches": 4,
        "ceiling_coeff": 1.5,
        "1": {"candidate_steps": [1, 2, 4, 6], "down_hysteresis": -0.1, "up_hysteresis": 0.2},
        "4": {"candidate_steps": [0, 2, 3]},
        "16": {"candidate_steps": [0, 1], "warmup_batches": 2},
    },
    "one slot": {"1": {"candidate_steps": [1, 3, 5, 7], "down_hysteresis": -0.25}},
}
CUDA_GRAPH_BS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64]


def load_policy(wheel: Path) -> types.ModuleType:
    """The wheel's adaptive_spec_params module, its sglang imports stood in for."""
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(MODULE).decode()
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        version = next(
            line.split(":", 1)[1].strip()
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Version:")
        )
    stubs = {
        "sglang.srt.arg_groups.overrides": {"resolved_view": None, "resolving_view": None},
        "sglang.srt.runtime_context": {"attn_dp_enabled_of": None},
        "sglang.srt.speculative.spec_info": {"SpeculativeAlgorithm": None},
        "sglang.srt.utils": {"log_info_on_rank0": lambda logger, message: None},
    }
    for name in ("sglang", "sglang.srt", "sglang.srt.arg_groups", "sglang.srt.speculative", *stubs):
        module = types.ModuleType(name)
        module.__dict__.update(stubs.get(name, {}))
        sys.modules[name] = module
    policy = types.ModuleType("adaptive_spec_params")
    policy.__file__ = MODULE
    policy.VERSION = version
    exec(compile(source, MODULE, "exec"), policy.__dict__)
    return policy


def trace(policy: types.ModuleType, config: dict | None, steps: int, graphs: list[int] | None, seed: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config if config is not None else policy.DEFAULT_ADAPTIVE_CONFIG, f)
    params = policy.AdaptiveSpeculativeParams(initial_steps=steps, cfg_path=f.name)
    Path(f.name).unlink()
    params.set_cuda_graph_bs(graphs)
    rng = random.Random(seed)
    verifies = []
    skill = rng.uniform(0.5, 5.0)  # the drafter's mean accepted drafts, drifting so the tiers move both ways
    for _ in range(400):
        skill = min(7.0, max(0.0, skill + rng.gauss(0, 0.35)))
        bs = rng.choice([1, 1, 2, 3, 5, 8, 9, 16, 20, 33, 64, 70])
        drafting = params.get_steps_for_batch(bs)
        drafts = [min(drafting, max(0, round(rng.gauss(skill, 1.2)))) for _ in range(bs if bs < 6 else 6)]
        switched = params.on_verify_complete(drafts, bs)
        ema = params._route(bs).ema_accept_len
        verifies.append([bs, drafts, drafting, switched, round(ema, 6)])
    return {"config": config, "initial_steps": steps, "cuda_graph_bs": graphs, "verifies": verifies}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    policy = load_policy(Path(argv[0]))
    cases = []
    for i, (name, config) in enumerate(CONFIGS.items()):
        for graphs in (None, CUDA_GRAPH_BS):
            case = trace(policy, config, 3 if name != "custom" else 2, graphs, seed=100 + i)
            cases.append({"name": name, **case})
    out = {
        "_source": (
            f"SGLang {policy.VERSION}'s own AdaptiveSpeculativeParams ({MODULE} of the PyPI wheel "
            f"{Path(argv[0]).name}), run by scripts/sglang_adaptive_trace.py on seeded inputs"
        ),
        "version": policy.VERSION,
        "default_config": policy.DEFAULT_ADAPTIVE_CONFIG,
        "verify_fields": ["batch size", "accepted drafts per request", "tier drafted with", "switch to", "slot EMA"],
        "cases": cases,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"adaptive-{policy.VERSION}-trace.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"{path}: {sum(len(c['verifies']) for c in cases)} verifies in {len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
