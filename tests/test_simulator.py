"""SGLang's launch flags and the SIMULATED SGLang server, run as a real process on loopback."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from backend.errors import UsageError
from backend.measure.breakeven import chain_accept_len
from backend.measure.metrics import server_info_numbers
from backend.sandbox.sglang_sim.api import spec_meta_info
from backend.sandbox.sglang_sim.timing import crossover_batch, drafter_rates, pass_ms
from backend.sglang.flags import parse_help_flags, table, unknown_flags
from tests.simhost import PY38
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]


def prefix(ranks: str = "") -> str:
    """A regex for SGLang's log prefix ``[YYYY-MM-DD HH:MM:SS{.ms}{ranks}] ``."""
    return r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?" + ranks + r"\] "


# FIELD-NOTES §5's EAGLE-3 launch, as `specdeck serve cmd eagle3-ours` writes it.
EAGLE3_ARGV = [
    "--model-path", "/data/models/Kimi-K2.5", "--tp-size", "8", "--trust-remote-code",
    "--host", "127.0.0.1", "--port", "30000", "--enable-metrics", "--decode-log-interval", "40",
    "--speculative-algorithm", "EAGLE3",
    "--speculative-draft-model-path", "/data/eagle3/output_100k_sglang/4",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


# --- the flag table ---------------------------------------------------------------------------------------


VERSIONS = ("0.5.6", "0.5.23")


@pytest.mark.parametrize("version", VERSIONS)
def test_parser_takes_the_eagle3_launch_and_means_exactly_it(version):
    flags = table(version)
    args = flags.server_args(flags.parse(EAGLE3_ARGV))
    assert args["model_path"] == "/data/models/Kimi-K2.5"
    assert args["tp_size"] == 8 and args["dp_size"] == 1
    assert args["trust_remote_code"] is True and args["enable_metrics"] is True
    assert (args["host"], args["port"], args["decode_log_interval"]) == ("127.0.0.1", 30000, 40)
    assert args["speculative_algorithm"] == "EAGLE3"
    assert args["speculative_draft_model_path"] == "/data/eagle3/output_100k_sglang/4"
    steps = (
        args["speculative_num_steps"],
        args["speculative_eagle_topk"],
        args["speculative_num_draft_tokens"],
    )
    assert steps == (3, 1, 4)
    # Untouched flags keep the release's defaults.
    assert args["mem_fraction_static"] is None and args["disable_cuda_graph"] is False
    assert args["speculative_accept_threshold_single"] == 1.0 and args["watchdog_timeout"] == 300


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "extra",
    [
        ["--tp", "8"],  # only a prefix of --tp-size: SGLang takes it, specdeck never writes it
        ["--speculative-algo", "EAGLE3"],
        ["--enable-metric"],
        ["--not-an-sglang-flag"],
        ["--tp-size", "eight"],
    ],
)
def test_parser_refuses_prefixes_unknown_flags_and_bad_values(extra, version):
    with pytest.raises(UsageError, match=f"SGLang {version}'s launch_server would refuse"):
        table(version).parse(["--model-path", "/m", *extra])


def test_each_release_has_its_own_flags():
    old, new = table("0.5.6"), table("0.5.23")
    # 0.5.6 lists the algorithms; from 0.5.23 the algorithm is a free string (registered plugins).
    with pytest.raises(UsageError, match="invalid choice: 'EAGLE4'"):
        old.parse(["--model-path", "/m", "--speculative-algorithm", "EAGLE4"])
    assert new.server_args(new.parse(["--model-path", "/m", "--speculative-algorithm", "DFLASH"]))
    assert {"--speculative-adaptive", "--speculative-use-rejection-sampling", "--cuda-graph-max-bs-decode"} <= set(
        new.flags
    ) - set(old.flags)
    # A flag 0.5.23 dropped is named with the release and what replaces it.
    for name, instead in (
        ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
        ("--speculative-ngram-branch-length", "--speculative-ngram-max-trie-depth"),
        ("--speculative-ngram-min-match-window-size", "--speculative-ngram-max-trie-depth"),
    ):
        assert name in old.flags and name not in new.flags
        with pytest.raises(UsageError, match=f"{name} was removed after SGLang 0.5.6 .*{instead}"):
            new.parse(["--model-path", "/m", name, "16"])
    # Each flag says where in the wheel it was registered.
    assert old.flags["--tp-size"].source == "sglang/srt/server_args.py:add_cli_args"
    assert new.flags["--speculative-num-steps"].source == (
        "sglang/srt/arg_groups/fields/spec.py:Spec.speculative_num_steps"
    )
    assert all(spec.source for spec in (*old.specs, *new.specs))
    # A host's version picks the nearest known release at or below it; an unknown newer one the newest.
    assert table("0.5.10").version == "0.5.6" and table("0.5.30").version == "0.5.23" and table(None) is new


@pytest.mark.parametrize("version", VERSIONS)
def test_parser_needs_model_path(version):
    with pytest.raises(UsageError, match="--model-path"):
        table(version).parse(["--tp-size", "8"])


@pytest.mark.parametrize("version", VERSIONS)
def test_flag_table_has_the_flags_specdeck_relies_on(version):
    flags = table(version).flags
    graph_bs = "--cuda-graph-max-bs" if version == "0.5.6" else "--cuda-graph-max-bs-decode"
    for name, kind, default in [
        ("--model-path", "str", None),
        ("--tokenizer-path", "str", None),
        ("--host", "str", "127.0.0.1"),
        ("--port", "int", 30000),
        ("--tp-size", "int", 1),
        ("--dp-size", "int", 1),
        ("--ep-size", "int", 1),
        ("--trust-remote-code", "switch", False),
        ("--mem-fraction-static", "float", None),
        ("--max-running-requests", "int", None),
        (graph_bs, "int", None),
        ("--enable-metrics", "switch", False),
        ("--decode-log-interval", "int", 40),
        ("--log-level", "str", "info"),
        ("--served-model-name", "str", None),
        ("--context-length", "int" if version == "0.5.6" else "human_readable_int", None),
        ("--chunked-prefill-size", "int", None),
        ("--speculative-draft-model-path", "str", None),
        ("--speculative-draft-model-revision", "str", None),
        ("--speculative-num-steps", "int", None),
        ("--speculative-eagle-topk", "int", None),
        ("--speculative-num-draft-tokens", "int", None),
        ("--speculative-accept-threshold-single", "float", 1.0),
        ("--speculative-accept-threshold-acc", "float", 1.0),
        ("--speculative-token-map", "str", None),
        ("--random-seed", "int", None),
        ("--watchdog-timeout", "float", 300),
        ("--enable-torch-compile", "switch", False),
    ]:
        assert (flags[name].type, flags[name].default) == (kind, default), name
    assert flags["--disable-cuda-graph"].default is False  # deprecated in 0.5.23, still taken
    if version == "0.5.6":
        assert {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"} <= set(flags["--speculative-algorithm"].choices)
    assert "fa3" in flags["--attention-backend"].choices and "bfloat16" in flags["--dtype"].choices
    assert "fp8_e4m3" in flags["--kv-cache-dtype"].choices and "fp8" in flags["--quantization"].choices
    # Aliases share one flag; the ServerArgs field is what /server_info calls it.
    assert flags["--tp-size"] is flags["--tensor-parallel-size"] and flags["--tp-size"].field == "tp_size"
    assert flags["--ep"] is flags["--ep-size"] and flags["--model"] is flags["--model-path"]
    assert "--tp" not in flags


@pytest.mark.parametrize("version", VERSIONS)
def test_parse_help_flags_reads_option_lines_only(version):
    flags = table(version)
    assert parse_help_flags(flags.build_parser().format_help()) == set(flags.flags) | {"-h", "--help"}
    # Python 3.13's layout names the metavar once; flags quoted inside help prose are not options.
    help_text = (
        "usage: launch_server.py [-h] --model-path MODEL_PATH\n\noptions:\n"
        "  -h, --help            show this help message and exit\n"
        "  --model-path, --model MODEL_PATH\n"
        "                        The path of the model weights, see --prose-flag.\n"
        "  --tp-size TP_SIZE     The tensor parallelism size. Use --also-prose.\n"
        "  --kv-cache-dtype {auto,fp8_e5m2}\n"
    )
    assert parse_help_flags(help_text) == {
        "-h",
        "--help",
        "--model-path",
        "--model",
        "--tp-size",
        "--kv-cache-dtype",
    }
    assert unknown_flags(["--model-path=/m", "--tp-size", "8", "--new-flag"], {"--model-path", "--tp-size"}) == [
        "--new-flag"
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_simulator_parser_accepts_prefixes_like_sglang(version):
    flags = table(version)
    ns = flags.build_parser(allow_abbrev=True).parse_args(["--model-path", "/m", "--tp", "2"])
    assert flags.server_args(ns)["tp_size"] == 2


def test_acceptance_constants_give_the_operators_accept_lengths():
    ours = drafter_rates("/data/eagle3/output_100k_sglang/4", {}, 3)
    aq = drafter_rates("/data/eagle3/aq_medai_k2", {}, 3)
    assert chain_accept_len(ours) == pytest.approx(2.0, abs=1e-9)
    assert chain_accept_len(aq) == pytest.approx(3.3, abs=1e-9)
    for rates in (ours, aq):
        assert rates == sorted(rates, reverse=True) and rates[0] > rates[-1]  # falls with position
    assert drafter_rates("/x", {"specdeck_sim": {"accept_p": 0.5}}, 2) == [0.5, 0.5]
    assert drafter_rates("/x", {"specdeck_sim": {"accept": [0.9, 0.5]}}, 3) == [0.9, 0.5, 0.5]


def _predicted_tok_s(rates_of, steps: int) -> float:
    spec = {"steps": steps, "draft_tokens": steps + 1, "draft_steps": steps}
    return 1000.0 * chain_accept_len(rates_of(steps)) / pass_ms(1, spec)


def test_best_step_count_for_aq_medai_lies_inside_one_to_seven():
    speeds = {k: _predicted_tok_s(lambda n: drafter_rates("/d/aq_medai_k2", {}, n), k) for k in range(1, 8)}
    best = max(speeds, key=speeds.get)
    assert 1 < best < 7, speeds
    assert speeds[3] == pytest.approx(100.0, abs=0.5)  # the operator's 3 steps: 3.3 per 33 ms cycle
    ours = {k: _predicted_tok_s(lambda n: drafter_rates("/d/ours", {}, n), k) for k in range(1, 8)}
    assert ours[3] == pytest.approx(60.6, abs=0.5) and max(ours.values()) < 82  # never beats the baseline


def test_spec_meta_info_by_version():
    from backend.sandbox.sglang_sim.engine import Request

    req = Request(4, 16, steps=3)
    req.verify_ct, req.accepted_drafts, req.histogram = 5, 6, [1, 2, 1, 1]
    new = spec_meta_info("0.5.23", req, 12, 4)
    assert new["spec_correct_drafts_histogram"] == [1, 2, 1, 1] and new["spec_num_proposed_drafts"] == 15
    assert new["spec_num_correct_drafts"] == 6 and new["spec_accept_length"] == pytest.approx(12 / 5)
    old = spec_meta_info("0.5.6", req, 12, 4)
    assert "spec_correct_drafts_histogram" not in old and old["spec_accept_token_num"] == 6


def test_batch_cost_model_has_a_crossover():
    spec = {"steps": 3, "draft_tokens": 4, "draft_steps": 3}
    aggregate = [n * 1000 / pass_ms(n, {}) for n in (1, 2, 4, 8)]
    # Aggregate baseline throughput grows with the batch, but less than in proportion.
    assert aggregate[0] == pytest.approx(82.0) and all(a < b < 2 * a for a, b in itertools.pairwise(aggregate))
    # Verify cost grows with batch x draft tokens, faster than a plain pass.
    assert pass_ms(2, spec) - pass_ms(1, spec) > pass_ms(2, {}) - pass_ms(1, {})
    assert crossover_batch(spec, 3.3) == 6  # AQ-MedAI's drafter pays up to 5 streams
    assert crossover_batch(spec, 2.0) == 1  # the team's own never does
    assert crossover_batch(spec, 4.0, up_to=4) is None


# --- the simulator as a process ---------------------------------------------------------------------------


class Sim:
    """One simulator process on a free loopback port, its output in a file."""

    def __init__(self, tmp: Path, argv: list, env: dict | None = None, python: str = sys.executable) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"sim-{self.port}.log"
        environment = dict(os.environ, SPECDECK_SIM_TIME_SCALE="0.05", **(env or {}))
        cmd = [python, "-m", "backend.sandbox.sglang_sim", *argv, "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=environment, stdout=out, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text()

    def request(self, path: str, body: dict | None = None, timeout: float = 30) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def json(self, path: str, body: dict | None = None) -> dict:
        status, raw = self.request(path, body)
        assert status == 200, raw
        return json.loads(raw)

    def events(self, path: str, body: dict) -> list:
        """(arrival time, payload) of every SSE ``data:`` event of a streaming request."""
        req = urllib.request.Request(self.base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        out = []
        with urllib.request.urlopen(req, timeout=30) as resp:
            for line in resp:
                if line.startswith(b"data: "):
                    payload = line[6:].strip().decode()
                    out.append((time.perf_counter(), payload if payload == "[DONE]" else json.loads(payload)))
        return out

    def wait_ready(self, timeout: float = 60) -> list:
        """Poll /health until 200 and the log says so (the process is another program: short sleeps); the
        statuses seen. /health answers 200 a moment before the 'fired up' line is written."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            try:
                status, _ = self.request("/health", timeout=2)
            except urllib.error.URLError:
                status = None  # not listening yet: SGLang opens the port after loading
            if not seen or seen[-1] != status:
                seen.append(status)
            if status == 200 and "The server is fired up and ready to roll!" in self.log():
                return seen
            time.sleep(0.01)
        raise AssertionError("simulator not ready:\n" + self.log())

    def wait_exit(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def sims(tmp_path):
    started = []

    def start(argv: list, env: dict | None = None, python: str = sys.executable) -> Sim:
        sim = Sim(tmp_path, argv, env, python)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.kill()


@pytest.fixture(scope="module")
def baseline_sim(models, tmp_path_factory) -> Iterator[Sim]:
    """One baseline simulator (no speculation, a log line each 10 decode steps) for the tests that only send
    it requests and read what it answers and logs: started once, not once a test."""
    sim = Sim(tmp_path_factory.mktemp("baseline-sim"), launch(models, None, "--decode-log-interval", "10"))
    sim.wait_ready()
    yield sim
    sim.kill()


def launch(models: dict, drafter: str | None, *extra: str, algorithm: str = "EAGLE3") -> list:
    argv = ["--model-path", models["target"], "--tp-size", "8", "--trust-remote-code", "--random-seed", "7"]
    if drafter:
        argv += ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", models[drafter]]
        argv += ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    return argv + list(extra)


def decode_lines(log: str) -> list:
    return [line for line in log.splitlines() if "Decode batch" in line]


DECODE = re.compile(
    prefix(" TP0") + r"Decode batch(?: \[\d+\])?, #running-req: (\d+), #token: (\d+), token usage: (\d+\.\d\d), "
    r"accept len: (\d+\.\d\d), accept rate: (\d+\.\d\d), cuda graph: True, gen throughput \(token/s\): (\d+\.\d\d), "
    r"#queue-req: (\d+)(, )?$"
)
# What each release logs while it starts, in order (0.5.23 names the target's graph and times each phase).
STARTUP = {
    "0.5.6": [
        "Load weight begin.",
        "Load weight end. type=DeepseekV3ForCausalLM",
        "KV Cache is allocated. #tokens: ",
        "Capture cuda graph begin.",
        "Capture cuda graph end.",
        "Load weight end. type=LlamaForCausalLMEagle3",
        "Capture draft cuda graph begin.",
        "Capture draft cuda graph end.",
        "Capture draft extend cuda graph begin.",
        "Capture draft extend cuda graph end.",
    ],
    "0.5.23": [
        "Load weight begin.",
        "Load weight end. elapsed=",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ",
        "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4",
        "Capture target verify CUDA graph end. bs=[1, 2, 4, 8, 16, 24, 32, 40, 48], elapsed=",
        "s, type=LlamaForCausalLMEagle3, avail mem=",
        "Capture draft decode CUDA graph begin.",
        "Capture draft decode CUDA graph end. elapsed=",
        "Capture draft extend CUDA graph begin.",
        "Capture draft extend CUDA graph end. elapsed=",
        "Engine startup timings (s): load_weight=",
    ],
}
# 0.5.23 runs with millisecond stamps and forward-iteration tags, 0.5.6 with neither.
VERSION_ENV = {
    "0.5.6": {"SPECDECK_SIM_SGLANG_VERSION": "0.5.6"},
    "0.5.23": {"SPECDECK_SIM_SGLANG_VERSION": "0.5.23", "SGLANG_LOG_MS": "1", "SGLANG_LOG_FORWARD_ITERS": "1"},
}


@pytest.mark.parametrize("version", ["0.5.6", "0.5.23"])
def test_eagle3_server_end_to_end(models, sims, version):
    sim = sims(launch(models, "ours", "--enable-metrics", "--decode-log-interval", "5"), VERSION_ENV[version])
    seen = sim.wait_ready()
    assert seen[-2:] == [503, 200]  # 503 during warmup, after the port opened
    current = version == "0.5.23"

    log = sim.log()
    assert "SIMULATED" in log.splitlines()[0] and f"{version}-sim" in log.splitlines()[0]
    phases = [
        *STARTUP[version],
        f"Uvicorn running on http://127.0.0.1:{sim.port}",
        "The server is fired up and ready to roll!",
    ]
    positions = [log.index(phase) for phase in phases]
    assert positions == sorted(positions)
    graph_end = "Capture target verify CUDA graph end" if current else "Capture cuda graph end"
    assert re.search(prefix(" TP7") + graph_end, log)  # every rank logs its phases
    assert re.search(prefix() + "The server is fired up", log)
    assert bool(re.search(r"^\[[^\]]* \d\d:\d\d:\d\d\.\d{3} TP0\] ", log, re.M)) == current  # SGLANG_LOG_MS

    out = sim.json("/generate", {"text": "Explain speculative decoding.", "sampling_params": {"max_new_tokens": 64}})
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 64 and meta["finish_reason"] == {"type": "length", "length": 64}
    assert 1.5 < meta["completion_tokens"] / meta["spec_verify_ct"] < 2.6  # ours: ≈ 2.0
    assert meta["spec_accept_length"] == pytest.approx(64 / meta["spec_verify_ct"])
    if current:
        histogram = meta["spec_correct_drafts_histogram"]
        assert len(histogram) == 4 and sum(histogram) == meta["spec_verify_ct"]  # bins 0..3 drafts, one per verify
        assert sum(k * h for k, h in enumerate(histogram)) == meta["spec_num_correct_drafts"] == 64 - 1 - sum(histogram)
        assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]
    else:
        assert meta["spec_accept_token_num"] == 64 - 1 - meta["spec_verify_ct"]
        assert "spec_correct_drafts_histogram" not in meta
    assert meta["e2e_latency"] > 0 and len(out["output_ids"]) == 64 and out["text"]

    lines = decode_lines(sim.log())
    assert lines and all(DECODE.match(line) for line in lines), lines
    assert all(bool(DECODE.match(line).group(8)) != current for line in lines)  # 0.5.6's trailing comma
    assert all(("Decode batch [" in line) == current for line in lines)  # SGLANG_LOG_FORWARD_ITERS
    lens = [float(DECODE.match(line).group(4)) for line in lines]
    assert 1.4 < sum(lens) / len(lens) < 2.7
    # accept rate: 0.5.6 counts the bonus token, (L) / 4 draft tokens; 0.5.23 drafts only, (L - 1) / 3.
    rate = (lambda length: (length - 1) / 3) if current else (lambda length: length / 4)
    assert all(
        float(DECODE.match(line).group(5)) == pytest.approx(rate(length), abs=0.01)
        for line, length in zip(lines, lens, strict=True)
    )
    prefill = prefix(" TP0") + r"Prefill batch(?: \[\d+\])?, #new-seq: 1, #new-token: \d+, #cached-token: 0, "
    assert re.search(prefill, sim.log())
    assert ("#pending-token: 0, cuda graph: False, input throughput (token/s): " in sim.log()) == current

    info = sim.json("/get_server_info")
    assert info["simulated"] is True and info["version"] == f"{version}-sim"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (
        3,
        1,
        4,
    )
    assert info["tp_size"] == 8 and info["speculative_algorithm"] == "EAGLE3" and info["max_running_requests"] == 48
    state = info["internal_states"][0]
    assert 1.4 < state["avg_spec_accept_length"] < 2.7 and state["last_gen_throughput"] > 0
    assert ("startup_time" in state) == current
    assert sim.json("/server_info")["internal_states"][0]["avg_spec_accept_length"] == state["avg_spec_accept_length"]
    assert sim.json("/get_model_info")["model_path"] == models["target"]

    status, raw = sim.request("/metrics")
    assert status == 200
    families = list(text_string_to_metric_families(raw.decode()))
    samples = {s.name: s for family in families for s in family.samples}
    assert samples["sglang:generation_tokens_total"].value >= 64 + 8  # ours and the warmup's
    last_line = decode_lines(sim.log())[-1]  # read now: the last pass logs after the response went out
    assert samples["sglang:spec_accept_length"].value == float(last_line.split("accept len: ")[1][:4])
    assert samples["sglang:gen_throughput"].labels["tp_rank"] == "0"
    for name in (
        "sglang:spec_accept_rate",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
    ):
        assert samples[name].labels["model_name"] == models["target"]
    assert "sglang:prompt_tokens_total" in samples
    if current:
        assert samples["sglang:spec_num_steps"].value == 3 and samples["sglang:spec_num_draft_tokens"].value == 4
        assert samples["sglang:spec_verify_calls_total"].value >= meta["spec_verify_ct"]
        phases = {
            s.labels["phase"]: s.value for f in families if f.name == "sglang:startup_time_seconds" for s in f.samples
        }
        assert set(phases) == {"load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"}
        graphs = {
            s.labels["phase"]: s.value
            for f in families
            if f.name == "sglang:startup_cuda_graph_time_seconds"
            for s in f.samples
        }
        assert graphs["target_verify"] > 0 and graphs["draft_decode"] > 0 and graphs["draft_extend"] > 0
    else:
        assert not {"sglang:spec_num_steps", "sglang:spec_verify_calls_total"} & set(samples)


@pytest.mark.parametrize("version", VERSIONS)
def test_idle_self_check_rewrites_the_gauges_as_each_release(models, sims, version):
    """After a burst an idle server's gauges go back to 0 running, 0 tok/s (SGLang's idle self-check, sim_idle):
    0.5.23 at its first idle pass (the running gauge disagrees with the batch), 0.5.6 once 30 s (x the time
    scale: 1.5 s here) have passed since the last decode line; the accept length keeps its last value."""
    sim = sims(launch(models, "ours", "--enable-metrics", "--decode-log-interval", "1"), VERSION_ENV[version])
    sim.wait_ready()

    def gauges() -> dict:
        raw = sim.request("/metrics")[1].decode()
        return {s.name: s.value for f in text_string_to_metric_families(raw) for s in f.samples}

    body = {"text": "Explain speculative decoding.", "sampling_params": {"max_new_tokens": 48}}
    threads = [threading.Thread(target=sim.json, args=("/generate", body)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = time.monotonic()
    first = gauges()
    if version == "0.5.6" and time.monotonic() - done < 0.5:  # read well inside the 1.5 s: still the last line's
        assert first["sglang:gen_throughput"] > 0 and first["sglang:num_running_reqs"] >= 1, first
    deadline = time.monotonic() + 30
    while (g := gauges())["sglang:gen_throughput"] != 0 or g["sglang:num_running_reqs"] != 0:
        assert time.monotonic() < deadline, g
        time.sleep(0.05)  # another process's gauges: short polls
    assert g["sglang:num_queue_reqs"] == 0 and g["sglang:token_usage"] == 0
    assert g["sglang:spec_accept_length"] == first["sglang:spec_accept_length"] > 1  # left as it was
    assert sim.json("/server_info")["internal_states"][0]["last_gen_throughput"] > 0  # neither release resets it


def test_data_parallel_server_info_has_one_internal_state_per_rank(models, sims):
    sim = sims(launch(models, "aq-medai", "--dp-size", "2"), {"SGLANG_LOG_MS": "1"})
    sim.wait_ready()
    sim.json("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 16}})
    states = sim.json("/server_info")["internal_states"]
    assert [s["dp_rank"] for s in states] == [0, 1] and all("startup_time" in s for s in states)
    numbers = server_info_numbers(sim.json("/server_info"))
    assert len(numbers.dp_ranks) == 2 and numbers.accept_rate_definition == "drafts"
    assert re.search(prefix(" DP1 TP1") + "Load weight begin", sim.log())  # every rank, ms stamps


@pytest.mark.xdist_group("baseline-sim")
def test_openai_endpoints_with_and_without_streaming(baseline_sim):
    sim = baseline_sim
    completion = sim.json("/v1/completions", {"model": "default", "prompt": "Hello", "max_tokens": 12})
    assert completion["object"] == "text_completion" and completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"]["completion_tokens"] == 12

    events = sim.events(
        "/v1/completions",
        {"prompt": "Hello", "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert events[-1][1] == "[DONE]"
    usage = events[-2][1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    text = "".join(e[1]["choices"][0]["text"] for e in events[:-2])
    assert text == completion["choices"][0]["text"] or len(text.split()) == 12
    assert events[-3][1]["choices"][0]["finish_reason"] == "length"

    chat = sim.json("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8})
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 8

    events = sim.events(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": True},
    )
    chunks = [e[1] for e in events[:-1]]
    assert events[-1][1] == "[DONE]" and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len("".join(c["choices"][0]["delta"]["content"] or "" for c in chunks).split()) == 8

    assert sim.request("/metrics")[0] == 404  # without --enable-metrics, as in SGLang


def stream_speed(sim: Sim, max_tokens: int = 64) -> tuple[float, float]:
    """(decode tok/s after the first token, accept length or 1.0) of one streamed /generate request."""
    events = sim.events(
        "/generate",
        {"text": "Write a poem.", "sampling_params": {"max_new_tokens": max_tokens}, "stream": True},
    )
    chunks = [(t, payload["meta_info"]) for t, payload in events if payload != "[DONE]"]
    (t0, first), (t1, last) = chunks[0], chunks[-1]
    tok_s = (last["completion_tokens"] - first["completion_tokens"]) / (t1 - t0)
    accept = last["completion_tokens"] / last["spec_verify_ct"] if "spec_verify_ct" in last else 1.0
    return tok_s, accept


@pytest.mark.xdist_group("baseline-sim")
def test_speeds_follow_the_operators_measurements(models, sims, baseline_sim):
    baseline, ours, aq = baseline_sim, *(sims(launch(models, drafter)) for drafter in ("ours", "aq-medai"))
    for sim in (ours, aq):
        sim.wait_ready()
    results: dict = {}
    threads = [
        # 160 tokens (~2 s): the speed is timed from the client's first chunk, which a loaded machine may read
        # late; over 64 tokens a 45 ms delay read the 82 tok/s baseline as 87 in a CI rehearsal.
        threading.Thread(target=lambda name=name, sim=sim: results.update({name: stream_speed(sim, 160)}))
        for name, sim in (("baseline", baseline), ("ours", ours), ("aq", aq))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (base_tok_s, _), (ours_tok_s, ours_accept), (aq_tok_s, aq_accept) = (
        results[name] for name in ("baseline", "ours", "aq")
    )
    assert 74 < base_tok_s < 86  # one stream, no speculation: 82 tok/s
    assert ours_tok_s < base_tok_s and ours_accept < 2.46  # below the break-even accept length
    assert aq_tok_s > base_tok_s and aq_accept > 2.46
    assert 45 < ours_tok_s < 75 and 85 < aq_tok_s < 125


@pytest.mark.xdist_group("baseline-sim")
def test_concurrent_streams_each_slow_down_a_little(baseline_sim):
    sim = baseline_sim
    speeds = []
    threads = [threading.Thread(target=lambda: speeds.append(stream_speed(sim, 48)[0])) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Each stream is a little under 82 tok/s (a later admission's prefill can cost an early one more)...
    assert len(speeds) == 4 and all(60 < s < 81.5 for s in speeds), speeds
    # ...while the batch as a whole runs at ≈ 4 x 73 tok/s.
    full = [line for line in decode_lines(sim.log()) if "#running-req: 4," in line]
    assert full and max(float(line.split("(token/s): ")[1].split(",")[0]) for line in full) > 250


def test_eagle_with_an_eagle3_drafter_accepts_nothing(models, sims):
    sim = sims(launch(models, "aq-medai", "--decode-log-interval", "5", algorithm="EAGLE"))
    sim.wait_ready()
    meta = sim.json("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 16}})["meta_info"]
    assert meta["spec_num_correct_drafts"] == 0 and meta["spec_verify_ct"] == 15  # the first token is the prefill's
    assert meta["spec_correct_drafts_histogram"] == [15, 0, 0, 0]
    lines = decode_lines(sim.log())
    assert lines and all("accept len: 1.00, accept rate: 0.00, " in line for line in lines)  # drafts only


def test_misfit_drafter_dies_loading_with_sglangs_message(models, sims):
    sim = sims(launch(models, "misfit"))
    assert sim.wait_exit() == 1
    log = sim.log()
    assert re.search(prefix(" TP0") + "Scheduler hit an exception: Traceback \\(most recent call last\\):", log)
    assert (
        "AssertionError: Attempted to load weight (torch.Size([4096, 12288])) "
        "into parameter (torch.Size([7168, 21504]))" in log
    )
    assert "Received sigquit from a child process" in log and "fired up" not in log


@pytest.mark.parametrize(
    "failure, signature",
    [
        ("oom", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
        ("cuda_graph", "Exception: Capture cuda graph failed: CUDA out of memory."),
        ("warmup", "Initialization failed. warmup error: Traceback (most recent call last):"),
        (
            "unbalanced",
            "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
        ),
    ],
)
def test_forced_failures_die_with_their_signatures(models, sims, failure, signature):
    sim = sims(launch(models, "ours"), env={"SPECDECK_SIM_FAIL": failure})
    assert sim.wait_exit() == 1
    log = sim.log()
    assert signature in log and "fired up" not in log


def test_missing_model_busy_port_and_unknown_flag(models, sims, tmp_path):
    missing = sims(["--model-path", str(tmp_path / "no-such-model")])
    assert missing.wait_exit() == 1
    assert "HFValidationError: Repo id must be in the form" in missing.log()

    with socket.socket() as holder:
        busy = sims(launch(models, None))
        holder.bind(("127.0.0.1", busy.port))
        holder.listen()
        assert busy.wait_exit() == 1
    assert f"[Errno 98] error while attempting to bind on address ('127.0.0.1', {busy.port})" in busy.log()

    unknown = sims(["--model-path", models["target"], "--not-an-sglang-flag"])
    assert unknown.wait_exit() == 2
    assert "unrecognized arguments: --not-an-sglang-flag" in unknown.log()


@pytest.mark.parametrize("python", [sys.executable, str(PY38)], ids=["this-python", "python3.8"])
def test_sigterm_drains_in_flight_requests_and_exits_0(models, sims, python):
    if not Path(python).exists():
        pytest.skip("no Python 3.8 interpreter on this machine")
    sim = sims(launch(models, None), python=python)
    sim.wait_ready()
    events: list = []
    stream = threading.Thread(
        target=lambda: events.extend(
            sim.events("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 40}, "stream": True})
        )
    )
    stream.start()
    while "Prefill batch" not in sim.log().split("fired up")[-1]:
        time.sleep(0.01)
    sim.proc.send_signal(signal.SIGTERM)
    while "SIGTERM received" not in sim.log():
        time.sleep(0.01)
    assert sim.request("/health")[0] == 503
    assert sim.request("/generate", {"text": "late", "sampling_params": {"max_new_tokens": 4}})[0] == 503
    stream.join()
    assert sim.wait_exit() == 0
    assert events[-1][1] == "[DONE]" and events[-2][1]["meta_info"]["completion_tokens"] == 40
    assert "Gracefully exiting... Remaining number of requests 0." in sim.log()
