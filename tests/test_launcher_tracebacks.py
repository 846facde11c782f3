"""SIMULATED SGLang's launcher tracebacks per release: a ``--config`` file ConfigArgumentMerger refuses, the
EAGLE family's unguarded checks, and a model whose config cannot be read, each printed with the frames of the
release the simulator speaks (0.5.23's model-config failures as the chained tracebacks it prints), exit 1.

Judged by the wheels: tests/fixtures/sglang/launcher-tracebacks.json holds each release's frames (path, line,
function, source line), read in the PyPI wheels; where ``SPECDECK_SGLANG_WHEEL`` names the 0.5.23 wheel (the 0.5.6
one beside it, ``sglang-0.5.6-py3-none-any.whl``), every SGLang frame there, and every frame of
tests/test_spec_refusals.py, is checked against the wheel's own file: the line's text and the function it lies in;
transformers' frames likewise where ``SPECDECK_TRANSFORMERS_WHEEL`` names transformers 5.19.0's wheel.
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
LINKS = {
    "cause": "The above exception was the direct cause of the following exception:",
    "context": "During handling of the above exception, another exception occurred:",
}
TOPK_NONE = "TypeError: '>' not supported between instances of 'NoneType' and 'int'"


def traceback_block(frames: list, error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, source in frames:
        where = f"{os.path.dirname(SITE)}/{path[3:]}" if path.startswith("../") else f"{SITE}/{path}"
        lines += [f'  File "{where}", line {line}, in {func}', f"    {source}"]
    return "\n".join([*lines, error])


def chained(sections: list, errors: list, joints: list) -> str:
    """Python's print of a chained exception: each section's traceback, joined by what links them."""
    text = traceback_block(sections[0], errors[0])
    for frames, error, joint in zip(sections[1:], errors[1:], joints, strict=True):
        text += f"\n\n{LINKS[joint]}\n\n" + traceback_block(frames, error)
    return text


def launch(model: Path, version: str, flags: list) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECDECK_SIM_SGLANG_VERSION": version}
    argv = [sys.executable, "-m", "backend.sandbox.sglang_sim", "--model-path", str(model), *flags]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def cases(tmp_path: Path, version: str) -> dict:
    """Each failure: (the model folder, its flags, the error line of each section, what links each to the next)."""
    model, bad_json, empty = tmp_path / "model", tmp_path / "bad-json", tmp_path / "empty"
    for folder in (model, bad_json, empty):
        folder.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(LLAMA))
    (bad_json / "config.json").write_text("{")
    listed, gone = tmp_path / "list.yaml", tmp_path / "gone"
    listed.write_text("- tp-size\n- 2\n")
    draft = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(model)]
    not_a_repo_id = f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{gone}'. Use `repo_type` "
    not_a_repo_id += "argument if needed."
    not_json = (
        "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    found = {
        "config-multiple": (
            model,
            ["--config", str(listed), "--config", str(listed)],
            ["ValueError: Multiple config files specified! Only one allowed."],
            [],
        ),
        "config-no-path": (model, ["--config"], ["ValueError: No config file specified after --config flag!"], []),
        "config-not-yaml": (
            model,
            ["--config", "serve.json"],
            ["ValueError: Config file must be YAML format, got: .json"],
            [],
        ),
        "config-not-found": (
            model,
            ["--config", str(tmp_path / "gone.yaml")],
            [f"ValueError: Config file not found: {tmp_path / 'gone.yaml'}"],
            [],
        ),
        "config-not-a-dict": (
            model,
            ["--config", str(listed)],
            ["ValueError: Config file must contain a dictionary at root level"],
            [],
        ),
        "eagle-steps-unset": (model, [*draft, "--speculative-eagle-topk", "1"], ["AssertionError"], []),
        "eagle-topk-unset": (model, [*draft, "--speculative-num-steps", "3"], [TOPK_NONE], []),
    }
    validation = "huggingface_hub.errors.HFValidationError: " + not_a_repo_id
    if version == "0.5.6":  # transformers 4.57.1 lets huggingface_hub's error through; the others as before
        found["hf-not-a-folder"] = (gone, [], [validation], [])
        found["hf-no-config"] = (empty, [], [f"OSError: {empty} does not appear to have a file named config.json."], [])
        found["hf-bad-json"] = (bad_json, [], [not_json], [])
    else:  # transformers 5.19.0, and SGLang's second try of the path as a pointer adapter
        os_error = "OSError: " + not_a_repo_id
        found["hf-not-a-folder"] = (
            gone,
            [],
            [validation, os_error, validation, os_error],
            ["cause", "context", "cause"],
        )
        found["hf-no-config"] = (
            empty,
            [],
            [f"ValueError: Unrecognized model in {empty}. Should have a `model_type` key in its config.json."],
            [],
        )
        found["hf-bad-json"] = (
            bad_json,
            [],
            [not_json, f"OSError: It looks like the config file at '{bad_json}/config.json' is not a valid JSON file."],
            ["context"],
        )
    return found


@pytest.mark.parametrize("case", list(FRAMES["0.5.23"]))
@pytest.mark.parametrize("version", VERSIONS)
def test_a_launcher_failure_prints_the_releases_own_traceback(tmp_path, version, case):
    model, flags, errors, joints = cases(tmp_path, version)[case]
    ended = launch(model, version, flags)
    expected = chained(FRAMES[version][case], errors, joints)
    assert ("\n" + ended.stderr).endswith("\n" + expected + "\n"), ended.stderr
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
    frames = [frame for case in FRAMES[version].values() for section in case for frame in section]
    if version == "0.5.23":
        frames += spec_refusal_frames()
    check_frames(wheel, "sglang/", [f for f in frames if not f[0].startswith("../")])


@pytest.mark.skipif(
    not os.environ.get("SPECDECK_TRANSFORMERS_WHEEL"),
    reason="SPECDECK_TRANSFORMERS_WHEEL names no transformers wheel (CI has no PyPI)",
)
def test_every_transformers_frame_is_the_wheels_own_line():
    frames = [frame for case in FRAMES["0.5.23"].values() for section in case for frame in section]
    theirs = [(path[len("../transformers/") :], *rest) for path, *rest in frames if path.startswith("../")]
    assert theirs
    check_frames(Path(os.environ["SPECDECK_TRANSFORMERS_WHEEL"]), "transformers/", theirs)


def check_frames(wheel: Path, package: str, frames: list) -> None:
    with zipfile.ZipFile(wheel) as whl:
        for path, line, func, source in frames:
            text = whl.read(package + path).decode()
            assert text.splitlines()[line - 1].strip() == source, (path, line)
            assert enclosing_function(ast.parse(text), line) == func, (path, line)
