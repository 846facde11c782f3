"""Issue 3 budgets, local part: header-only inspect of a 1 TiB checkpoint, and diffing two 2.2 GiB drafters.

Both checkpoints are sparse files (a real header over a hole), so the numbers prove only the header is read.
The alternatives, measured in the same run: the operator's way without the ssh hop (a ``python -c`` process
per file that opens it with the safetensors library and asks every shape), and that library call in-process.
The SSH budgets of issue 3 are measured where the CLI is wired to the agent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from safetensors import safe_open

from backend.agent.host.checkpoint import inspect_checkpoint
from backend.checkpoints import diff
from backend.sandbox.fixtures import KIMI_K2_TARGET_CONFIG, write_drafter, write_sparse_safetensors
from bench.harness import Row, median_ms, timeit

ISSUE = 3
TIB = 1 << 40
INSPECT_BUDGET_MS = 5.0  # local share of "well under a second over SSH"
DIFF_BUDGET_MS = 5.0  # local share of "≤ 50 ms on a warm connection"


def _library_shapes(path: str) -> dict:
    """In-process, what the ``python -c`` does: open with the library, read every tensor's dtype and shape."""
    with safe_open(path, "np") as f:
        out = {name: (f.get_slice(name).get_dtype(), f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        out["__metadata__"] = f.metadata()
    return out


_SCRIPT = (
    "import sys; from safetensors import safe_open; f = safe_open(sys.argv[1], 'np'); "
    "print(f.metadata(), [(k, f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()])"
)


def _python_c(path: str) -> None:
    subprocess.run([sys.executable, "-c", _SCRIPT, path], check=True, capture_output=True)


def run() -> list[Row]:
    """Inspect a 1 TiB sparse checkpoint; diff two Kimi-K2 drafters; each against the library's safe_open."""
    with tempfile.TemporaryDirectory(prefix="specdeck-bench-") as tmp:
        huge = os.path.join(tmp, "huge")
        os.mkdir(huge)
        huge_file = write_sparse_safetensors(os.path.join(huge, "model.safetensors"), {"w": ("BF16", [TIB // 2])})
        info = inspect_checkpoint(huge)
        assert info["total_bytes"] == TIB
        inspect_ms = median_ms(timeit(lambda: inspect_checkpoint(huge), repeat=50))
        library_huge_ms = median_ms(timeit(lambda: _library_shapes(huge_file), repeat=50))
        process_huge_ms = median_ms(timeit(lambda: _python_c(huge_file), repeat=5))

        a_dir = write_drafter(os.path.join(tmp, "aq"), "aq_medai_k2")
        b_dir = write_drafter(os.path.join(tmp, "ours"), "ours")
        a, b = inspect_checkpoint(a_dir), inspect_checkpoint(b_dir)
        assert diff(a, b, KIMI_K2_TARGET_CONFIG)["verdict"]["compatible"]
        diff_ms = median_ms(timeit(lambda: diff(a, b, KIMI_K2_TARGET_CONFIG), repeat=200))
        whole_ms = median_ms(
            timeit(lambda: diff(inspect_checkpoint(a_dir), inspect_checkpoint(b_dir), KIMI_K2_TARGET_CONFIG), 50)
        )
        files = [os.path.join(d, "model.safetensors") for d in (a_dir, b_dir)]
        library_pair_ms = median_ms(timeit(lambda: [_library_shapes(f) for f in files], repeat=50))
        process_pair_ms = median_ms(timeit(lambda: [_python_c(f) for f in files], repeat=5))
    return [
        Row(
            ISSUE,
            f"inspect a 1 TiB sparse checkpoint locally (header only) ≤ {INSPECT_BUDGET_MS:.0f} ms",
            f"{inspect_ms:.2f} ms",
            f"python -c with safe_open: {process_huge_ms:.0f} ms; in-process: {library_huge_ms:.2f} ms",
            ok=inspect_ms <= INSPECT_BUDGET_MS,
        ),
        Row(
            ISSUE,
            f"diff + verdicts of two inspected 2.2 GiB Kimi-K2 drafters ≤ {DIFF_BUDGET_MS:.0f} ms",
            f"{diff_ms:.2f} ms (inspect both + diff: {whole_ms:.2f} ms)",
            f"python -c with safe_open per file, shapes only: {process_pair_ms:.0f} ms; "
            f"in-process: {library_pair_ms:.2f} ms",
            ok=diff_ms <= DIFF_BUDGET_MS,
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
