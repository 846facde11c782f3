"""The prompts the drafter was trained on (issue 32): bench requests through the target's chat template unless
asked not to, prompt sets per domain from Hub datasets read on the host, looped completions flagged and kept out
of the figures, repeats with their spread, and collapse episodes named.

Each promise is a sentence of the issue; the simulator learns the effect that breaks it (test_sim_prompts.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from backend.agent.host import loadgen
from backend.agent.host.shared import chat_template, degenerate
from backend.measure import bench, domains
from backend.measure.collapse import collapses
from backend.measure.metrics import Sample
from backend.sandbox import fixtures, hub_catalog
from backend.sandbox.hub import HubServer
from tests.simhost import TIME_SCALE, specdeck
from tests.sshd import free_port

pytestmark = pytest.mark.e2e

MESSAGES = [{"role": "user", "content": "Name three colours."}]


# --- the chat template -------------------------------------------------------------------------------------


def test_the_sandbox_template_renders_with_jinja2_and_without_it():
    template = fixtures.SANDBOX_CHAT_TEMPLATE
    assert chat_template.family(template) == "kimi"
    text, via = chat_template.render(template, MESSAGES, tokens=fixtures.SANDBOX_TOKENIZER_CONFIG)
    assert via == "jinja2" and text == "<|im_user|>user<|im_middle|>Name three colours.<|im_end|>" + (
        "<|im_assistant|>assistant<|im_middle|>"
    )
    assert chat_template._builtin("kimi", MESSAGES, None, "") == text  # the same turns without jinja2
    assert chat_template.templated(text) and not chat_template.templated("Name three colours.")


@pytest.mark.parametrize(
    ("name", "template", "expected"),
    [
        ("chatml", "{{ '<|im_start|>' }}", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
        ("llama3", "<|start_header_id|>", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"),
        ("mistral", "[INST]", "<s>[INST] hi [/INST]"),
        ("deepseek", "<｜User｜>", "<｜User｜>hi<｜Assistant｜>"),
    ],
)
def test_the_common_families_render_without_jinja2(name, template, expected, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_jinja(module, *args, **kwargs):
        if module.startswith("jinja2"):
            raise ImportError(module)
        return real_import(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_jinja)
    text, via = chat_template.render(template, [{"role": "user", "content": "hi"}])
    assert via == "built-in" and chat_template.family(template) == name and text.startswith(expected)
    with pytest.raises(chat_template.TemplateError, match="--raw-prompts"):
        chat_template.render("{{ messages[0].content }}", [{"role": "user", "content": "hi"}])


# --- loops ---------------------------------------------------------------------------------------------------


def test_a_looping_completion_is_told_from_prose():
    prose = (
        "Speculative decoding drafts a few tokens with a small model and verifies them with the target in one "
        "pass. When the draft agrees with the target, several tokens come out of a single step; when it does "
        "not, the target's own token is kept and the next cycle starts from there, so nothing changes in what "
        "the user reads, only in how fast it arrives."
    )
    loop = "the answer is the answer is " * 20
    assert degenerate.repetition(prose) < 0.2 and not degenerate.degenerate(prose)
    assert degenerate.repetition(loop) > 0.9 and degenerate.degenerate(loop)
    assert degenerate.repetition("too short to judge") == 0.0


# --- collapse ------------------------------------------------------------------------------------------------


def _decode(ts: float, accept: float, running: int, queue: int) -> Sample:
    return Sample(ts, "decode", gen_tps=100.0, accept_len=accept, running_req=running, queue_req=queue)


def test_collapse_episodes_at_a_full_batch_with_a_deep_queue_and_their_share():
    samples = [_decode(t, 2.9, 8, 0) for t in range(0, 10)]
    samples += [_decode(t, 1.0, 8, 12) for t in range(10, 14)]  # full, deep queue, nothing accepted
    samples += [_decode(t, 2.8, 8, 12) for t in range(14, 18)]
    samples += [_decode(t, 1.0, 3, 0) for t in range(18, 20)]  # a lull at accept 1.00: not a collapse
    found = collapses(samples, max_running=8)
    assert len(found.episodes) == 1 and found.episodes[0].lines == 4 and found.episodes[0].queue == 12
    assert found.share == pytest.approx(4 / 19)
    assert "1 episode at accept 1.00 with the batch full (8)" in found.line() and "21% of the time" in found.line()
    assert collapses(samples[:10]).line() is None


# --- domains -----------------------------------------------------------------------------------------------


def test_domains_by_name_from_the_hub_or_the_sandbox():
    assert domains.parse("chat,code", False)["chat"]["dataset"] == "HuggingFaceH4/mt_bench_prompts"
    assert domains.parse("math", True)["math"]["dataset"].startswith("specdeck-sandbox/")
    with pytest.raises(Exception, match="unknown poetry"):
        domains.parse("chat,poetry", True)


# --- end to end on the simulator, through the sandbox Hub's datasets --------------------------------------


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hubroot")
    hub_catalog.write_datasets(root)
    with HubServer(root) as server:
        yield server


def test_the_sets_a_chooser_lists_say_whether_the_hubs_path_was_checked():
    hub = {s.name: s for s in domains.sources(False)}
    assert list(hub) == list(domains.HUB_SETS) and [s.name for s in domains.sources(True)] == list(hub)
    assert hub["chat"].checked is False and hub["chat"].about.endswith(domains.NEVER_CHECKED)
    assert hub["code"].checked and hub["code"].source == "openai/openai_humaneval" and hub["random"].checked is None
    chat = domains.sources(True)[0]  # the sandbox's set, judged by the Hub's it stands for
    assert chat.source == "specdeck-sandbox/mt-bench-like" and chat.checked is False
    assert "stand-in for HuggingFaceH4/mt_bench_prompts raw/question.jsonl" in chat.about


def test_a_set_whose_path_was_never_checked_says_so_when_it_cannot_be_fetched(hub):
    from backend.agent.host import prompts
    from backend.agent.host.registry import AgentError

    assert domains.parse("chat", False)["chat"]["unchecked"] == domains.UNCHECKED
    assert not any("unchecked" in domains.HUB_SETS[name] for name in ("code", "math", "tools"))  # checked
    spec = {"dataset": "specdeck-sandbox/mt-bench-like", "file": "raw/question.jsonl", "unchecked": domains.UNCHECKED}
    with pytest.raises(AgentError) as refused:
        prompts.domain_conversations("chat", spec, hub.url)
    assert str(refused.value) == (
        "the prompt set specdeck-sandbox/mt-bench-like/raw/question.jsonl cannot be fetched: raw/question.jsonl not "
        "found in specdeck-sandbox/mt-bench-like at revision main (specdeck's path for this set was never checked "
        "against the Hub's layout and may be wrong)"
    )


@pytest.fixture
def config(models, tmp_path, hub) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f"""default_host = "sim"
target = {json.dumps(models["target"])}
[hosts.sim]
url = "local"
python = {json.dumps(sys.executable)}
workdir = {json.dumps(str(tmp_path / "host"))}
launcher = "simulator"
sandbox = true
hub_endpoint = {json.dumps(hub.url)}
[drafters.aq-medai]
path = {json.dumps(models["aq-medai"])}
[profiles.eagle3-aq]
port = {free_port()}
env = {{ SPECDECK_SIM_TIME_SCALE = "{TIME_SCALE}" }}
"""
    )
    return path


@pytest.mark.slow
def test_bench_says_its_template_domains_and_loops(config):
    specdeck(config, "serve", "start", "eagle3-aq", "--wait-ready")
    try:
        got = json.loads(
            specdeck(
                config, "bench", "--json", "--requests", "8", "--max-tokens", "48", "--domains", "chat,code,math,tools"
            ).stdout
        )
        assert got["chat_template"] == "kimi" and got["chat_template_via"] == "jinja2"
        assert set(got["domains"]) == {"chat", "code", "math", "tools"}
        assert all(d["requests"] == 2 and d["accept_len"] > 1 and d["tok_s"] > 0 for d in got["domains"].values())
        assert got["degenerate"] == [] and got["prompt_sets"]["tools"] == "specdeck-sandbox/bfcl-like/BFCL_simple.json"
        assert all(r["domain"] in got["domains"] for r in got["per_request"])
        # The per-domain table in the report and on one line for the panel (History, Live).
        out = Path(config).parent / "r.md"
        specdeck(config, "report", got["run"], "--out", str(out), "--no-inspect")
        report = out.read_text()
        assert "## Prompts and domains" in report and "through the target's chat template (kimi" in report
        assert all(f"| {name} | 2 |" in report for name in got["domains"])
        brief = bench.bench_brief(got)
        assert brief.startswith("kimi template · ") and "tools " in brief and "tok/s (2)" in brief

        raw = json.loads(
            specdeck(config, "bench", "--json", "--requests", "2", "--max-tokens", "32", "--raw-prompts").stdout
        )
        assert raw["chat_template"] is False and "as asked (--raw-prompts)" in raw["chat_template_note"]

        text = specdeck(config, "bench", "--requests", "4", "--max-tokens", "32", "--repeat", "2").stdout
        assert "through the target's chat template (kimi, rendered with jinja2)" in text
        assert "2 runs: " in text and "sd (" in text
        repeated = json.loads(
            specdeck(config, "bench", "--json", "--requests", "2", "--max-tokens", "32", "--repeat", "2").stdout
        )
        assert repeated["spread"]["runs"] == 2 and len(repeated["spread"]["tok_s"]["values"]) == 2

        refused = specdeck(config, "bench", "--domains", "poetry", rc=2).stderr
        assert "--domains takes chat, code, math, tools, random" in refused and "unknown poetry" in refused
    finally:
        specdeck(config, "serve", "stop", "--yes")


def _events(config: Path, job: str) -> list[dict]:
    path = Path(config).parent / "host" / ".specdeck" / "jobs" / job / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sweeps_take_domains_and_the_profilers_load_is_templated(config):
    """A sweep's benches send `--domains` as `bench` does; its warm-up and the profiler's load send the bench's
    built-in prompts through the target's chat template, not raw."""
    specdeck(config, "serve", "start", "eagle3-aq", "--wait-ready")
    try:
        specdeck(config, "profile", "--steps", "2")
        (spec,) = (Path(config).parent / "host" / ".specdeck" / "jobs").glob("profile-*/spec.json")
        assert json.loads(spec.read_text())["args"]["chat_template"] == "kimi"
        said = "profile: the bench's built-in prompts, through the target's chat template (kimi, rendered with jinja2)"
        assert said in (spec.parent / "log").read_text().splitlines()

        args = ("--steps", "2", "--requests", "2", "--max-tokens", "16", "--domains", "math,code", "--json")
        done = json.loads(specdeck(config, "sweep", "eagle3-aq", *args).stdout.splitlines()[-1])
        (point,) = done["points"]
        (result,) = [e for e in _events(config, point["bench"]) if e["event"] == "result"]
        assert result["prompt_sets"] == {
            "math": "specdeck-sandbox/gsm8k-like/test.jsonl",
            "code": "specdeck-sandbox/humaneval-like/test.jsonl",
        }
        assert result["chat_template"] == "kimi" and set(result["domains"]) == {"math", "code"}
        refused = specdeck(config, "sweep", "eagle3-aq", "--steps", "2", "--domains", "poetry", rc=2).stderr
        assert "--domains takes chat, code, math, tools, random" in refused
    finally:
        specdeck(config, "serve", "stop", "--yes")


def test_the_load_prompts_are_the_benchs(models, monkeypatch):
    from backend.agent.host import profiler

    templated, info = loadgen.load_prompts(models["target"])
    assert [chat_template.templated(p) for p in templated] == [True] * len(loadgen.PROMPTS)
    assert info["chat_template"] == "kimi"
    raw, info = loadgen.load_prompts(None)  # no target known: raw, as a bench sends them, and said
    assert (
        sorted(raw) == sorted(loadgen.PROMPTS)
        and info["chat_template_note"] == "the server's target is not known: raw prompts"
    )
    sent: list[str] = []

    def request(port: int, prompt: str, max_tokens: int, **_: object) -> dict:
        sent.append(prompt)
        if len(sent) >= 3:
            load.stop.set()
        return {}

    monkeypatch.setattr(loadgen, "one_request", request)
    load = profiler._Load(profiler.Server(1, "127.0.0.1", None), 0, templated)  # no thread: its loop run here
    load._run(0)
    assert sent[:3] == templated[:3]


def test_live_keeps_decode_lines_for_its_collapse_line_and_the_panels_brief():
    from backend.measure.collapse import Tracker

    tracker = Tracker()
    for t in range(20):
        tracker.feed(_decode(1000.0 + t, 1.0 if 5 <= t < 9 else 2.9, 8, 12 if 5 <= t < 9 else 0))
    assert tracker.since().line().startswith("collapse: 1 episode") and tracker.since(1010.0).episodes == ()
    result = {"prompt_sets": {"chat": "built-in"}, "chat_template": False, "degenerate": [2],
              "collapse": {"episodes": [{"start": 1.0, "seconds": 4.0, "lines": 4, "batch": 8, "queue": 12}],
                           "share": 0.25, "full_batch": 8}}  # fmt: skip
    assert bench.bench_brief(result) == "raw prompts · 1 looped (left out) · collapse 25% of the time"
    assert bench.bench_brief({"tok_s": 80.0}) is None  # a bench from before prompts were recorded
    # The History tab's line per run reads the run's newest bench through the same rule.
    from dataclasses import replace

    from tests.test_judge import _run

    run = _run("local/serve-1", [])
    assert bench.run_bench_brief(replace(run, bench={"result": result})) == bench.bench_brief(result)
    assert bench.run_bench_brief(run) is None
