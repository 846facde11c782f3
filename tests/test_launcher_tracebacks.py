"""SIMULATED SGLang's launcher tracebacks per release: a ``--config`` file ConfigArgumentMerger refuses, and the
EAGLE family's unguarded checks, each printed with the frames of the release the simulator speaks, exit 1.

Judged by SGLang's wheels: tests/fixtures/sglang/launcher-tracebacks.json holds each release's frames (path,
line, function, source line), read in the PyPI wheels; where ``SPECDECK_SGLANG_WHEEL`` names the 0.5.23 wheel (the
0.5.6 one beside it, ``sglang-0.5.6-py3-none-any.whl``), every frame there, and every frame of
tests/test_spec_refusals.py, is checked against the wheel's own file: the line's text and the function it lies in.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests import test_spec_refusals

pytestmark = pytest.mark.e2e  # runs the SIMULATED SGLang

REPO = Path(__file__).resolve().parents[1]
SITE = "/usr/local/lib/python3.12/dist-packages/sglang"
FRAMES = json.loads((REPO / "tests" / "fixtures" / "sglang" / "launcher-tracebacks.json").read_text())
VERSIONS = ["0.5.6", "0.5.23"]
LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "max_position_embeddings": 8192}
TOPK_NONE = "TypeError: '>' not supported between instances of 'NoneType' and 'int'"


def traceback_block(frames: list, error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, source in frames:
        lines += [f'  File "{SITE}/{path}", line {line}, in {func}', f"    {source}"]
    return "\n".join([*lines, error])


def launch(tmp_path: Path, version: str, flags: list) -> subprocess.CompletedProcess:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(LLAMA))
    env = {**os.environ, "SPECDECK_SIM_SGLANG_VERSION": version}
    argv = [sys.executable, "-m", "backend.sandbox.sglang_sim", "--model-path", str(model), *flags]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def cases(tmp_path: Path) -> dict:
    """Each failure: (its flags, the error line SGLang ends on)."""
    listed = tmp_path / "list.yaml"
    listed.write_text("- tp-size\n- 2\n")
    draft = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(tmp_path / "model")]
    return {
        "config-multiple": (
            ["--config", str(listed), "--config", str(listed)],
            "ValueError: Multiple config files specified! Only one allowed.",
        ),
        "config-no-path": (["--config"], "ValueError: No config file specified after --config flag!"),
        "config-not-yaml": (["--config", "serve.json"], "ValueError: Config file must be YAML format, got: .json"),
        "config-not-found": (
            ["--config", str(tmp_path / "gone.yaml")],
            f"ValueError: Config file not found: {tmp_path / 'gone.yaml'}",
        ),
        "config-not-a-dict": (
            ["--config", str(listed)],
            "ValueError: Config file must contain a dictionary at root level",
        ),
        "eagle-steps-unset": ([*draft, "--speculative-eagle-topk", "1"], "AssertionError"),
        "eagle-topk-unset": ([*draft, "--speculative-num-steps", "3"], TOPK_NONE),
    }


@pytest.mark.parametrize("case", list(FRAMES["0.5.23"]))
@pytest.mark.parametrize("version", VERSIONS)
def test_a_launcher_failure_prints_the_releases_own_traceback(tmp_path, version, case):
    flags, error = cases(tmp_path)[case]
    ended = launch(tmp_path, version, flags)
    assert ("\n" + ended.stderr).endswith("\n" + traceback_block(FRAMES[version][case], error) + "\n"), ended.stderr
    assert ended.returncode == 1


# --- the frames, judged by the wheels ----------------------------------------------------------------------------


def wheel_for(version: str) -> Path | None:
    named = Path(os.environ["SPECDECK_SGLANG_WHEEL"])
    if version in named.name.split("-"):
        return named
    beside = sorted(named.parent.glob(f"sglang-{version}-*.whl"))
    return beside[0] if beside else None


def enclosing_function(tree: ast.Module, line: int) -> str:
    """The innermost def the line lies in, as a traceback names it (``<module>`` at the top level)."""
    defs = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno
    ]
    return max(defs, key=lambda node: node.lineno).name if defs else "<module>"


def spec_refusal_frames() -> list:
    """tests/test_spec_refusals.py's 0.5.23 frames, down to each raise."""
    refusals = test_spec_refusals
    cases = [frames for _, _, frames, _ in refusals.CASES.values()]
    cases += [refusals.RAGGED, [*refusals.ADAPTIVE_FILE, refusals.OPEN, refusals.JSON_LOAD]]
    return [frame for frames in cases for frame in refusals.RESOLVE + frames]


@pytest.mark.skipif(
    not os.environ.get("SPECDECK_SGLANG_WHEEL"), reason="SPECDECK_SGLANG_WHEEL names no wheel (CI has no PyPI)"
)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_frame_is_the_wheels_own_line(version):
    wheel = wheel_for(version)
    if wheel is None:
        pytest.skip(f"no sglang-{version} wheel beside SPECDECK_SGLANG_WHEEL")
    frames = [frame for case in FRAMES[version].values() for frame in case]
    if version == "0.5.23":
        frames += spec_refusal_frames()
    with zipfile.ZipFile(wheel) as whl:
        for path, line, func, source in frames:
            text = whl.read(f"sglang/{path}").decode()
            assert text.splitlines()[line - 1].strip() == source, (path, line)
            assert enclosing_function(ast.parse(text), line) == func, (path, line)
