"""SIMULATED SGLang 0.5.23's speculative refusals at startup (adaptive steps outside the tiers, DFLASH and DSPARK
without a drafter, a bad ragged-verify mode for any algorithm, an adaptive config it cannot read): the launcher's
traceback as 0.5.23 prints it, exit 1, and the server status naming the refusal in SGLang's one sentence.

The expected frames are 0.5.23's own lines, read in the PyPI wheel sglang-0.5.23-cp311-cp311-manylinux_2_34
(``/tmp/sglw/v0.5.23``; the wheel carries no commit id), written here by hand as the oracle. Python 3.12 prints
a multi-line ``raise ValueError(`` as its first line only (checked with CPython 3.12.1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.jobs import get_job
from backend.sandbox.sglang_sim.args import resolve_args
from backend.sandbox.sglang_sim.log import Log, SimExit
from backend.serve import serving
from backend.settings.model import HostConfig
from backend.sglang.flags import table
from tests.simhost import TIME_SCALE
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
SITE = "/usr/local/lib/python3.12/dist-packages/sglang"

# launch_server.py → resolve_once → the resolution pipeline → handle_speculative_decoding (0.5.23)
RESOLVE = [
    ("launch_server.py", 84, "<module>", "run_server(server_args)"),
    ("launch_server.py", 29, "run_server", "server_args.resolve_once()"),
    ("srt/server_args.py", 277, "resolve_once", "run_resolution_pipeline(self)"),
    (
        "srt/arg_groups/pipeline.py",
        306,
        "run_resolution_pipeline",
        "run_hook(handle_speculative_decoding, server_args)",
    ),
    ("srt/arg_groups/resolution_hooks.py", 139, "run_hook", "step(server_args)"),
]
HOOK = "srt/arg_groups/speculative_hook.py"
ADAPTIVE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "DRAFTER", "--speculative-adaptive"]
DISPATCH = (HOOK, 284, "handle_speculative_decoding", "algo.handle_server_args(server_args)")

CASES = {
    "dflash-without-drafter": (
        ["--speculative-algorithm", "DFLASH"],
        {},
        [
            DISPATCH,
            ("srt/speculative/spec_info.py", 256, "handle_server_args", "_handle_dflash(server_args)"),
            (HOOK, 325, "_handle_dflash", "raise ValueError("),
        ],
        "ValueError: DFLASH speculative decoding requires setting --speculative-draft-model-path.",
    ),
    "dspark-without-drafter": (
        ["--speculative-algorithm", "DSPARK"],
        {},
        [
            DISPATCH,
            ("srt/speculative/spec_info.py", 260, "handle_server_args", "_handle_dspark(server_args)"),
            (HOOK, 752, "_handle_dspark", "raise ValueError("),
        ],
        "ValueError: DSpark dense speculative decoding requires setting --speculative-draft-model-path.",
    ),
    "adaptive-steps-outside-the-tiers": (
        [*ADAPTIVE, "--speculative-num-steps", "4"],
        {},
        [
            (HOOK, 264, "handle_speculative_decoding", "_init_adaptive_speculative_params(server_args)"),
            (HOOK, 1417, "_init_adaptive_speculative_params", "raise ValueError("),
        ],
        "ValueError: --speculative-num-steps=4 is not in the adaptive config candidate_steps [0, 1, 3, 5, 7]. "
        "Pass one of those values.",
    ),
    "adaptive-config-without-a-tier": (
        [*ADAPTIVE, "--speculative-adaptive-config", "ADAPTIVE_CONFIG"],
        {},
        [
            (HOOK, 264, "handle_speculative_decoding", "_init_adaptive_speculative_params(server_args)"),
            (HOOK, 1398, "_init_adaptive_speculative_params", "candidate_steps = resolve_candidate_steps_from_config("),
            (
                "srt/speculative/adaptive_spec_params.py",
                146,
                "resolve_candidate_steps_from_config",
                "_, bs_entries = _load_adaptive_config(cfg_path)",
            ),
            ("srt/speculative/adaptive_spec_params.py", 134, "_load_adaptive_config", "raise ValueError("),
        ],
        "ValueError: speculative_adaptive_config must contain at least one integer-string BS key, "
        """e.g. {"1": {"candidate_steps": [1,3,7]}}. Got keys: ['ema_alpha']""",
    ),
    "dspark-ragged-mode-unknown": (
        ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", "DRAFTER"],
        {"SGLANG_RAGGED_VERIFY_MODE": "ragged"},
        [
            DISPATCH,
            ("srt/speculative/spec_info.py", 253, "handle_server_args", "read_ragged_verify_mode()"),
            ("srt/speculative/ragged_verify.py", 24, "read_ragged_verify_mode", "raise ValueError("),
        ],
        "ValueError: invalid SGLANG_RAGGED_VERIFY_MODE='ragged'; expected one of 'static', 'cap-accept', 'compact'",
    ),
}


# The one raise of these on a single line (a traceback shows it whole).
ONE_LINE_RAISE = 'raise ValueError("DSpark with dp attention requires --enable-dp-lm-head.")'


def traceback_block(frames: list, error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, source in frames:
        lines += [f'  File "{SITE}/{path}", line {line}, in {func}', f"    {source}"]
    return "\n".join([*lines, error])


@pytest.mark.parametrize("case", list(CASES))
async def test_a_speculative_refusal_is_sglangs_traceback_and_the_status_names_it(models, tmp_path, case):
    flags, env, frames, error = CASES[case]
    config = tmp_path / "adaptive.json"
    config.write_text(json.dumps({"ema_alpha": 0.3}))  # knobs but no batch-size tier
    flags = [{"DRAFTER": models["ours"], "ADAPTIVE_CONFIG": str(config)}.get(f, f) for f in flags]
    host = HostConfig(
        name="local", url="local", python=sys.executable, workdir=str(tmp_path / "hostwork"),
        launcher="simulator", sandbox=True, sglang_version="0.5.23",
    )  # fmt: skip
    conn = await Connection.open(host)
    try:
        port = free_port()
        argv = [sys.executable, "-m", "backend.sandbox.sglang_sim", "--model-path", models["target"]]
        started = await conn.call(
            "serve.start",
            argv=[*argv, "--host", "127.0.0.1", "--port", str(port), *flags],
            args={"profile": case, "port": port},
            env={"SPECDECK_SIM_SGLANG_VERSION": "0.5.23", "SPECDECK_SIM_TIME_SCALE": TIME_SCALE, **env},
            cwd=str(REPO),
        )
        crashed = await serving.wait(conn, started["job"], within=30)
        job = await get_job(conn, started["job"])
    finally:
        await conn.close()
    log = Path(job.log_path).read_text()
    assert log.endswith("\n" + traceback_block(RESOLVE + frames, error) + "\n"), log
    assert job.exit_code == 1  # SGLang's launcher exits 1 on an exception in resolve_once
    assert crashed["state"] == "crashed" and crashed["error"] == error, crashed


@pytest.mark.parametrize(
    "flags, line, func",
    [
        (["DFLASH", "--speculative-dflash-block-size", "0"], 370, "_handle_dflash"),
        (
            ["DFLASH", "--speculative-dflash-block-size", "8", "--speculative-num-draft-tokens", "16"],
            377,
            "_handle_dflash",
        ),
        (
            ["DFLASH", "--speculative-dflash-block-size", "8", "--speculative-draft-window-size", "4"],
            430,
            "_handle_dflash",
        ),
        (["DSPARK", "--device", "cpu"], 670, "_handle_dspark"),
        (["DSPARK", "--dp-size", "2", "--enable-dp-attention"], 676, "_handle_dspark"),
        (["DSPARK", "--pp-size", "2"], 715, "_handle_dspark"),
        (["DSPARK", "--speculative-dspark-block-size", "0"], 809, "_handle_dspark"),
        (
            ["DSPARK", "--speculative-dspark-block-size", "5", "--speculative-num-draft-tokens", "4"],
            830,
            "_handle_dspark",
        ),
        (["DSPARK", "--speculative-num-draft-tokens", "1"], 847, "_handle_dspark"),
    ],
)
def test_each_block_drafter_refusal_ends_in_its_own_raise(flags, line, func, capsys, monkeypatch):
    """Every other DFLASH and DSPARK check: SGLang's traceback down to the line that raises it, exit 1."""
    monkeypatch.delenv("SGLANG_RAGGED_VERIFY_MODE", raising=False)
    flag_table = table("0.5.23")
    argv = ["--model-path", "/m", "--speculative-draft-model-path", "/nowhere", "--speculative-algorithm", *flags]
    args = flag_table.server_args(flag_table.build_parser(prog="launch_server.py").parse_args(argv))
    with pytest.raises(SimExit) as ended:
        resolve_args(args, {}, Log())
    lines = capsys.readouterr().err.splitlines()
    assert ended.value.code == 1 and lines[-1].startswith("ValueError: ")
    source = ONE_LINE_RAISE if line == 676 else "raise ValueError("
    assert lines[-3:-1] == [f'  File "{SITE}/{HOOK}", line {line}, in {func}', f"    {source}"]


RAGGED = [
    DISPATCH,
    ("srt/speculative/spec_info.py", 253, "handle_server_args", "read_ragged_verify_mode()"),
    ("srt/speculative/ragged_verify.py", 24, "read_ragged_verify_mode", "raise ValueError("),
]


@pytest.mark.parametrize("algorithm", ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK"])
def test_every_algorithm_refuses_an_unknown_ragged_verify_mode(algorithm, capsys, monkeypatch):
    """0.5.23's SpeculativeAlgorithm.handle_server_args reads SGLANG_RAGGED_VERIFY_MODE for every in-tree algorithm
    before its own hook (spec_info.py:249-253); without one, or speaking 0.5.6, nothing reads it."""
    monkeypatch.setenv("SGLANG_RAGGED_VERIFY_MODE", "ragged")
    argv = ["--model-path", "/m", "--speculative-draft-model-path", "/nowhere", "--speculative-algorithm", algorithm]
    with pytest.raises(SimExit) as ended:
        resolve_args(parsed("0.5.23", argv), {}, Log())
    error = "ValueError: invalid SGLANG_RAGGED_VERIFY_MODE='ragged'; expected one of 'static', 'cap-accept', 'compact'"
    assert ended.value.code == 1
    assert capsys.readouterr().err == traceback_block(RESOLVE + RAGGED, error) + "\n"
    resolve_args(parsed("0.5.23", ["--model-path", "/m"]), {}, Log())  # no speculative algorithm
    if algorithm in ("EAGLE", "EAGLE3", "NGRAM"):  # 0.5.6 speaks these and reads no such variable
        speaking_056 = parsed("0.5.6", [*argv, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"])
        resolve_args(speaking_056, {}, Log(), False)


def parsed(version: str, argv: list) -> dict:
    flag_table = table(version)
    return flag_table.server_args(flag_table.build_parser(prog="launch_server.py").parse_args(argv))


# _init_adaptive_speculative_params reading --speculative-adaptive-config, down to the line that reads the file
ADAPTIVE_FILE = [
    (HOOK, 264, "handle_speculative_decoding", "_init_adaptive_speculative_params(server_args)"),
    (HOOK, 1398, "_init_adaptive_speculative_params", "candidate_steps = resolve_candidate_steps_from_config("),
    (
        "srt/speculative/adaptive_spec_params.py",
        146,
        "resolve_candidate_steps_from_config",
        "_, bs_entries = _load_adaptive_config(cfg_path)",
    ),
]
OPEN = ("srt/speculative/adaptive_spec_params.py", 111, "_load_adaptive_config", "with open(cfg_path) as f:")
JSON_LOAD = ("srt/speculative/adaptive_spec_params.py", 112, "_load_adaptive_config", "cfg = json.load(f)")


@pytest.mark.parametrize(
    "written, frame, error",
    [
        (None, OPEN, "FileNotFoundError: [Errno 2] No such file or directory: '{path}'"),
        ("{", JSON_LOAD, "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1 "
         "column 2 (char 1)"),
    ],
    ids=["missing", "not-json"],
)  # fmt: skip
def test_an_adaptive_config_sglang_cannot_read_fails_where_it_reads_it(written, frame, error, tmp_path, capsys):
    """0.5.23 opens and json.loads --speculative-adaptive-config in _load_adaptive_config (adaptive_spec_params.py
    :110-112) and lets what they raise through; its frames, then Python's own error line (the stdlib's frames below
    SGLang's are not simulated)."""
    path = tmp_path / "adaptive.json"
    if written is not None:
        path.write_text(written)
    argv = [*(f if f != "DRAFTER" else "/nowhere" for f in ADAPTIVE), "--speculative-adaptive-config", str(path)]
    with pytest.raises(SimExit) as ended:
        resolve_args(parsed("0.5.23", ["--model-path", "/m", *argv]), {}, Log())
    assert ended.value.code == 1
    expected = traceback_block([*RESOLVE, *ADAPTIVE_FILE, frame], error.format(path=path))
    assert capsys.readouterr().err == expected + "\n"
