"""Serving: a profile → the exact SGLang command line, the checks before starting it, and the server's lifecycle.

Each operation is one call the CLI (`specdeck serve ...`) and the TUI's Serve tab share:

- ``profile_command(settings, host, profile)`` → ``{"argv", "env", "cwd"}``: ``python -m sglang.launch_server``
  with full flag names only, parsable by SGLang's own parser and meaning exactly the profile.
- ``preflight(conn, settings, profile)`` → ``Preflight``: a list of checks, each ok / warn / fail / skip with
  one sentence; ``start`` refuses on any failure (``force`` lets a drafter verdict through).
- ``start`` / ``wait`` / ``status`` / ``stop`` / ``restart`` / ``tail`` / ``follow``: the server is a detached
  job of kind ``serve`` on the host (args: profile, port, drafter, model, algorithm, steps, topk,
  draft_tokens, tp), so it survives the panel and SSH; its status is computed on the host
  (``backend.agent.host.serve``) from the job folder, the log and /health, so any later client reattaches.

The simulator: a host whose launcher is ``simulator`` runs ``python -m backend.sandbox.sglang_sim`` instead of
SGLang. Config files allow that only on the local sandbox host (``settings.parse``), and ``launcher_argv``
refuses it on any host that is not a sandbox host on this machine (``local``, or SSH to a loopback address).
Tests that drive the simulator through the real sshd build such a ``HostConfig`` in code (``sandbox=True``,
``launcher="simulator"``, an ``ssh://…@127.0.0.1`` url): nothing outside a sandbox can pick it by accident.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from backend import jobs
from backend.agent.client import state_dir as host_state_dir
from backend.agent.host.shared.server_states import DRAFT_PHASES, PHASES
from backend.agent.host.shared.server_states import (
    STATES as STATES,  # computed on the host; re-exported for CLI and TUI
)
from backend.agent.host.shared.units import duration
from backend.connection import Connection
from backend.drafters import checkpoints
from backend.errors import OperationFailed, RemoteError, UsageError
from backend.settings.model import EAGLE_FAMILY, FIELD, PROFILE_FIELDS, HostConfig, ProfileConfig, Settings
from backend.sglang import flags, speculation, versions
from backend.sglang.versions import DEFAULT_SIM_VERSION, SIM_SUFFIX, SIM_VERSION_ENV

RUNNING_STATES = ("starting", "ready", "orphaned", "stopping")
# A stop of a server in these states asks first (the panel's dialog, the CLI's prompt or --yes): it may be
# serving someone (an orphaned one too: its runner died, not its server).
SERVING_STATES = ("ready", "orphaned")
ENDED_STATES = ("ready", "orphaned", "crashed", "stopped", "none")  # what `start --wait-ready` waits for
# How a state reads where one is shown (the CLI and the Serve tab); the others read as they are named.
STATE_LABELS = {"orphaned": "running, orphaned"}
TRUNCATED_LINE = "-- log truncated on the host: following it again from its start --"
SGLANG_MODULE = "sglang.launch_server"
SIMULATOR_MODULE = "backend.sandbox.sglang_sim"
SERVER_HOST = "127.0.0.1"  # the server listens on the host's loopback; the agent (or a forward) reaches it
DECODE_LOG_INTERVAL = 40  # SGLang's default, written out so Live knows the interval
STOP_GRACE_S = 30.0
NEEDS_DRAFTER = ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH")  # DSPARK's may be bundled in the target
# Flags the profile itself sets (by ServerArgs field, so aliases count): extra_args must not repeat them.
_MANAGED = {
    flags.FLAGS[name].field
    for name in ("--host", *(flag for d in PROFILE_FIELDS for flag in d.flags))
    if name in flags.FLAGS
}
_FIRST = ("model", "tp", "port")  # written first, with the flags every server gets
_ARGV_ORDER = sorted(PROFILE_FIELDS, key=lambda d: d.name != "algorithm")  # the algorithm, then the declarations
SPEC_FILES = "spec"  # the folder of the state dir that holds the adaptive configs written for launches
_DEFAULTED = ("--decode-log-interval",)  # written by us unless the profile's extra flags set it


# --- profiles → command lines -----------------------------------------------------------------------------


def get_profile(settings: Settings, name: str) -> ProfileConfig:
    try:
        return settings.profiles[name]
    except KeyError:
        known = ", ".join(sorted(settings.profiles)) or "none"
        raise UsageError(f"no profile named {name!r} (configured: {known})") from None


def target_path(settings: Settings, profile: ProfileConfig) -> str:
    return profile.model or settings.target


def drafter_path(settings: Settings, profile: ProfileConfig) -> str | None:
    if profile.drafter is None:
        return None
    try:
        return settings.drafters[profile.drafter].path
    except KeyError:
        raise UsageError(f"profile {profile.name} names drafter {profile.drafter!r}, which is not configured") from None


def launcher_argv(host: HostConfig) -> list[str]:
    """``[python, -m, sglang.launch_server]``, or the simulator on a sandbox host of this machine."""
    if host.launcher == "simulator":
        if not (host.sandbox and host.on_this_machine):
            raise UsageError(
                f"host {host.name} asks for the SGLang simulator, which only runs on a sandbox host on this "
                'machine; set its launcher = "sglang"'
            )
        return [host.python, "-m", SIMULATOR_MODULE]
    if host.launcher != "sglang":
        raise UsageError(f"host {host.name} has launcher {host.launcher!r}; use sglang")
    return [host.python, "-m", SGLANG_MODULE]


def _extra_dests(profile: ProfileConfig) -> set[str]:
    names = {arg.split("=", 1)[0] for arg in profile.extra_args if arg.startswith("--")}
    return {dest for n in names if n in flags.FLAGS and (dest := flags.FLAGS[n].field) is not None}


def adaptive_file(profile: ProfileConfig, state_dir: str = ".specdeck") -> tuple[str, str] | None:
    """Where ``profile``'s adaptive config goes on the host and its text, or None when SGLang reads no file (no
    adaptive, or SGLang's default ladder). Named by its content, so each config is one file."""
    if not profile.adaptive or profile.adaptive_config is None:
        return None
    import hashlib

    text = json.dumps(profile.adaptive_config, indent=1, sort_keys=True) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{state_dir.rstrip('/')}/{SPEC_FILES}/adaptive-{digest}.json", text


def profile_argv(
    settings: Settings, profile: ProfileConfig, version: str | None = None, state_dir: str = ".specdeck"
) -> list[str]:
    """The launch flags of ``profile`` (without the launcher): full names, each declared field's flag as SGLang
    ``version`` names it (None: the newest known release), the profile's extra flags last. ``state_dir``: the
    host's specdeck folder, where an adaptive config file goes (``adaptive_file``)."""
    argv = ["--model-path", target_path(settings, profile), "--tp-size", str(profile.tp), "--trust-remote-code"]
    argv += ["--host", profile.listen, "--port", str(profile.port), "--enable-metrics"]
    extra = _extra_dests(profile)
    if flags.FLAGS["--decode-log-interval"].field not in extra:
        argv += ["--decode-log-interval", str(DECODE_LOG_INTERVAL)]
    if profile.algorithm:
        known = flags.table(version).flags
        for declared in _ARGV_ORDER:
            value = getattr(profile, declared.name)
            if declared.name in _FIRST or not declared.flags or value in (None, False):
                continue
            if declared.name == "drafter":
                value = drafter_path(settings, profile)
            elif declared.name == "adaptive_config":
                written = adaptive_file(profile, state_dir)
                if written is None:
                    continue
                value = written[0]
            flag = next((name for name in declared.flags if name in known), declared.flags[0])
            argv += [flag] if value is True else [flag, str(value)]
    return argv + list(profile.extra_args)


def profile_command(
    settings: Settings, host: HostConfig, profile: ProfileConfig | str, version: str | None = None
) -> dict[str, Any]:
    """``{"argv", "env", "cwd", "files"}`` that starts ``profile``'s server on ``host`` (SGLang ``version``: the
    simulator's on a sandbox host, else as given); ``files`` maps a path in the host's state dir to the text the
    launch reads there (an adaptive config), written by ``serve.start`` before the server starts."""
    if isinstance(profile, str):
        profile = get_profile(settings, profile)
    if profile.nodes:  # backend.serve.multinode plans each rank's command (this one without nodes)
        raise UsageError(
            f"profile {profile.name} runs across nodes {', '.join(profile.nodes)}: `specdeck serve start "
            f"{profile.name}` starts every node's rank; this starts one host's server"
        )
    launcher = launcher_argv(host)
    # The simulator is this checkout's code: run it from here so `-m backend...` imports on any interpreter.
    cwd = str(Path(__file__).resolve().parents[2]) if host.launcher == "simulator" else host.workdir
    env = {"PYTHONUNBUFFERED": "1", **launch_env(host), **_field_env(profile), **profile.env}
    if version is None and host.launcher == "simulator":
        version = sim_version(host)
    state = host_state_dir(host.workdir)
    written = adaptive_file(profile, state)
    argv = launcher + profile_argv(settings, profile, version, state)
    return {"argv": argv, "env": env, "cwd": cwd, "files": dict([written]) if written else {}}


def _field_env(profile: ProfileConfig) -> dict[str, str]:
    """The environment variables declared fields become (DSPARK's ragged verify mode)."""
    if not profile.algorithm:
        return {}
    return {d.env: str(getattr(profile, d.name)) for d in PROFILE_FIELDS if d.env and getattr(profile, d.name)}


def launch_env(host: HostConfig) -> dict[str, str]:
    """What specdeck adds to every server's environment on ``host``: millisecond log stamps (every release
    since 0.5.6 reads ``SGLANG_LOG_MS``; samples within one second no longer stack), and for the simulator
    the SGLang release it speaks and the scenario it was given."""
    env = {"SGLANG_LOG_MS": "1"}
    if host.launcher == "simulator":
        env[SIM_VERSION_ENV] = sim_version(host)
        from backend.sandbox.sglang_sim import scenario as sim_scenario  # here: the client side never loads the sandbox

        chosen = Path(host.workdir) / sim_scenario.FILE_NAME  # `sandbox up --scenario`: the simulator's model
        if host.sandbox and chosen.is_file():
            env[sim_scenario.ENV] = str(chosen)
    return env


def host_sglang_version(host: HostConfig, info: dict[str, Any] | None) -> str | None:
    """The SGLang release ``host`` runs as far as this client knows: the simulator's, else the version the
    host's ``info`` found installed (None before the first answer)."""
    if host.launcher == "simulator":
        return sim_version(host)
    version = ((info or {}).get("versions") or {}).get("sglang")
    return version if isinstance(version, str) else None


def sim_version(host: HostConfig) -> str:
    """The SGLang release a sandbox host's simulator speaks (its ``sglang_version``, else the default)."""
    return host.sglang_version or DEFAULT_SIM_VERSION


def job_args(settings: Settings, profile: ProfileConfig) -> dict[str, Any]:
    """What a serve job records about its profile (Live reads ``port``; History the drafter's name and numbers)."""
    return {
        "profile": profile.name,
        "port": profile.port,
        "drafter": profile.drafter,
        "drafter_path": drafter_path(settings, profile),
        "model": target_path(settings, profile),
        "algorithm": profile.algorithm,
        "steps": profile.steps,
        "topk": profile.topk,
        "draft_tokens": profile.draft_tokens,
        "tp": profile.tp,
        # the other speculative fields, where set (an adaptive run, a DFLASH block size…)
        **{
            d.name: getattr(profile, d.name)
            for d in PROFILE_FIELDS
            if d.algorithms and d.name not in _JOB_FIELDS and getattr(profile, d.name) not in (None, False)
        },
    }


_JOB_FIELDS = ("drafter", "steps", "topk", "draft_tokens")


def shell_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """The command as one line a person can paste into a shell on the host."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items() if k != "PYTHONUNBUFFERED"]
    return " ".join([*prefix, shlex.join(argv)])


# --- preflight --------------------------------------------------------------------------------------------


CheckStatus = Literal["ok", "warn", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    """One preflight check: ``status`` is ok, warn, fail or skip; ``message`` one sentence."""

    name: str
    status: CheckStatus
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message}


@dataclass(frozen=True)
class Preflight:
    profile: str
    checks: tuple[Check, ...] = field(default_factory=tuple)
    version: str | None = None  # the SGLang release the host's --help answered (the simulator's: its release)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == "warn"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "ok": self.ok, "checks": [c.to_json() for c in self.checks]}

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> Preflight:
        checks = (Check(c["name"], c["status"], c["message"]) for c in wire.get("checks") or [])
        return cls(wire["profile"], tuple(checks))


class PreflightFailed(UsageError):
    """``start`` refused: the failed checks' sentences, one after the other."""

    def __init__(self, preflight: Preflight) -> None:
        self.preflight = preflight
        reasons = " ".join(_sentence(c.message) for c in preflight.failures)
        super().__init__(f"not starting {preflight.profile}: {reasons}")


def speculative_problem(steps: int | None, topk: int | None, draft_tokens: int | None) -> str | None:
    """Why SGLang cannot run these speculative numbers, in one sentence; None when it can (or none are set).
    The editor refuses them and preflight fails on them, so ``--speculative-num-steps 0`` never reaches a host."""
    for name, value in (("steps", steps), ("topk", topk), ("draft_tokens", draft_tokens)):
        if (problem := FIELD[name].problem(value)) is not None:
            return problem
    if topk == 1 and steps is not None and draft_tokens is not None and draft_tokens < steps + 1:
        return f"draft tokens {draft_tokens} with topk 1 is fewer than steps + 1 = {steps + 1}"
    return None


def running_text(status: ServerStatus, now: float) -> str:
    """The running server as a confirmation names it: ``eagle3-aq (ready for 42m10s, pid 2111)``."""
    parts = [" ".join(filter(None, (state_label(status), since_text(status, now))))]
    parts += [f"pid {status.pid}"] if status.pid else []
    return f"{status.profile or 'a server'} ({', '.join(parts)})"


def _sentence(text: str) -> str:
    return text if text.endswith(".") else text + "."


def profile_checks(settings: Settings, profile: ProfileConfig, version: str | None = None) -> list[Check]:
    """The checks that need no host: the speculative numbers, the algorithm's rules on SGLang ``version``
    (``sglang_speculation``), the command line itself (parsed with the flag table of that release, the host's
    when known, else the newest known release)."""
    numbers = {"steps": profile.steps, "topk": profile.topk, "draft tokens": profile.draft_tokens}
    given = [k for k, v in numbers.items() if v is not None]
    checks = []

    def add(name: str, status: CheckStatus, message: str) -> None:
        checks.append(Check(name, status, message))

    if not profile.algorithm:
        others = [
            d.name
            for d in PROFILE_FIELDS
            if d.algorithms and d.name not in _JOB_FIELDS and getattr(profile, d.name) not in (None, False)
        ]
        if profile.drafter:
            add("algorithm", "fail", f'drafter {profile.drafter} is set but no algorithm: set algorithm = "EAGLE3"')
        elif given or others:
            add(
                "speculative numbers",
                "fail",
                f"{', '.join(given + others)} set without a speculative algorithm: set algorithm or clear them",
            )
        else:
            add("speculative numbers", "ok", "no speculation (baseline)")
    else:
        if profile.algorithm in NEEDS_DRAFTER and not profile.drafter:
            add("algorithm", "fail", f"{profile.algorithm} needs a drafter: set the profile's drafter")
        checks += _number_checks(profile, numbers, given)
    checks.append(_command_check(settings, profile, version))
    args = launch_args(settings, profile, version)
    checks += [Check(r.name, r.status, r.message) for r in speculation.profile_rules(profile, version, args)]
    checks += _env_checks(profile, version)
    return checks


def launch_args(settings: Settings, profile: ProfileConfig, version: str | None = None) -> dict[str, Any]:
    """The launch flags' values by ServerArgs field, as SGLang ``version``'s parser reads the profile's command
    (``{}`` when it would not parse: the flags check says why)."""
    table = flags.table(version)
    try:
        return table.server_args(table.parse(profile_argv(settings, profile, version)))
    except UsageError:
        return {}


def _number_checks(profile: ProfileConfig, numbers: dict[str, Any], given: list[str]) -> list[Check]:
    """Steps, topk and draft tokens as the algorithm takes them."""
    if problem := speculative_problem(profile.steps, profile.topk, profile.draft_tokens):
        return [Check("speculative numbers", "fail", f"{problem}: SGLang refuses it")]
    if profile.algorithm not in EAGLE_FAMILY:
        return [Check("speculative numbers", "ok", algorithm_summary(profile))]
    if profile.adaptive:  # SGLang resolves topk and draft tokens from the tier (speculative_hook.py:1392-1427)
        return [Check("speculative numbers", "ok", algorithm_summary(profile))]
    if not given:
        return [Check("speculative numbers", "ok", "none set: SGLang chooses steps, topk and draft tokens")]
    if len(given) < len(numbers):
        missing = ", ".join(k for k, v in numbers.items() if v is None)
        return [
            Check(
                "speculative numbers",
                "fail",
                f"set all three of steps, topk and draft tokens or none ({missing} missing): SGLang refuses a "
                "partial set",
            )
        ]
    out = [Check("speculative numbers", "ok", algorithm_summary(profile))]
    if profile.topk == 1 and profile.steps is not None and profile.draft_tokens != profile.steps + 1:
        out.append(
            Check(
                "topk 1",
                "fail",
                f"with topk 1 draft tokens must be steps + 1 = {profile.steps + 1}, not {profile.draft_tokens} "
                "(SGLang would change it)",
            )
        )
    return out


def algorithm_summary(profile: ProfileConfig) -> str:
    """The profile's speculation in a few words: ``steps 3, topk 1, draft tokens 4``, ``adaptive from steps 3``,
    ``DFLASH block 8``, ``DSPARK gamma from the drafter``."""
    algorithm = profile.algorithm
    if not algorithm:
        return "no speculation"
    if profile.adaptive:
        start = f"from steps {profile.steps}" if profile.steps is not None else "from the ladder's middle tier"
        return f"{algorithm} adaptive {start}"
    if algorithm == "DFLASH":
        block = profile.dflash_block_size or profile.draft_tokens
        return f"DFLASH block {block}" if block else "DFLASH block size from the drafter's config"
    if algorithm == "DSPARK":
        gamma = profile.dspark_block_size or (profile.draft_tokens - 1 if profile.draft_tokens else None)
        return f"DSPARK gamma {gamma}" if gamma else "DSPARK gamma from the drafter's config"
    if algorithm == "NGRAM":
        return f"NGRAM draft tokens {profile.draft_tokens or 12}"
    if profile.steps is None:
        return f"{algorithm}: SGLang chooses steps, topk and draft tokens"
    return f"steps {profile.steps}, topk {profile.topk}, draft tokens {profile.draft_tokens}"


def _env_checks(profile: ProfileConfig, version: str | None) -> list[Check]:
    """Environment variables of the profile that the host's release dropped (a release that ignores one says
    nothing, so the profile must)."""
    table = flags.table(version)
    return [
        Check("env", "warn", flags.removed_env_message(name, version or table.version))
        for name in profile.env
        if name in flags.REMOVED_ENV and table.version != flags.REMOVED_ENV[name][0]
    ]


def _command_check(settings: Settings, profile: ProfileConfig, version: str | None = None) -> Check:
    repeated = sorted(
        arg.split("=", 1)[0]
        for arg in profile.extra_args
        if arg.startswith("--")
        and flags.FLAGS.get(arg.split("=", 1)[0]) is not None
        and flags.FLAGS[arg.split("=", 1)[0]].field in _MANAGED
    )
    if repeated:
        return Check(
            "flags",
            "fail",
            f"extra flags repeat what the profile sets ({', '.join(repeated)}): set those in the profile instead",
        )
    table = flags.table(version)
    try:
        table.parse(profile_argv(settings, profile))
    except UsageError as exc:
        return Check("flags", "fail", str(exc))
    return Check("flags", "ok", f"the command parses with SGLang {table.version}'s flags, full names only")


def _looks_like_path(path: str) -> bool:
    return path.startswith(("/", "~", "."))


async def _quiet(call: Any) -> Any:
    """An RPC's result, or the RemoteError it raised (checks turn it into a sentence)."""
    try:
        return await call
    except RemoteError as exc:
        return exc


async def _target_config(conn: Connection, path: str) -> dict[str, Any] | RemoteError | None:
    if not _looks_like_path(path):
        return None
    out = await _quiet(conn.call("fs.read", path=f"{path.rstrip('/')}/config.json", text=True))
    if isinstance(out, RemoteError):
        return out
    try:
        config = json.loads(out["text"])
    except ValueError:
        return RemoteError(f"{path}/config.json on the host is not valid JSON", "checkpoint")
    return config if isinstance(config, dict) else RemoteError(f"{path}/config.json is not a JSON object", "checkpoint")


async def preflight(conn: Connection, settings: Settings, profile: ProfileConfig, *, force: bool = False) -> Preflight:
    """Every check before starting ``profile`` on ``conn``'s host; the host's answers are fetched together."""
    host = conn.host
    cmd = profile_command(settings, host, profile)
    target = target_path(settings, profile)
    drafter = drafter_path(settings, profile)
    version = sim_version(host) + SIM_SUFFIX if host.launcher == "simulator" else None
    target_cfg, inspected, helped, port, gpus = await asyncio.gather(
        _target_config(conn, target),
        _quiet(conn.call("checkpoint.inspect", path=drafter)) if drafter else asyncio.sleep(0),
        _quiet(
            conn.call("serve.help", argv=cmd["argv"][:3], version=version, cwd=cmd["cwd"], env=cmd["env"], deadline=400)
        ),
        conn.call("serve.port", port=profile.port),
        conn.call("serve.gpus"),
    )
    if isinstance(helped, dict):
        version = helped["version"]
    checks = profile_checks(settings, profile, version)
    checks += _target_checks(target, target_cfg)
    checks += _drafter_checks(profile, drafter, inspected, target_cfg, force)
    checks += _window_checks(profile, inspected, target_cfg)
    drafter_cfg = inspected.get("config") if isinstance(inspected, dict) else None
    target_lang = checkpoints.language_config(target_cfg if isinstance(target_cfg, dict) else None)
    names = [g.get("name") or "" for g in gpus.get("gpus") or []] if gpus.get("nvidia_smi") else None
    rules = speculation.drafter_rules(
        profile, target_lang, checkpoints.language_config(drafter_cfg), launch_args(settings, profile, version), names
    )
    checks += [Check(r.name, r.status, r.message) for r in rules]
    checks = _sglang_checks(checks, profile, helped, settings)
    checks.append(_port_check(port))
    checks.append(_tp_check(profile, gpus))
    checks.append(_gpu_check(gpus))
    return Preflight(profile.name, tuple(checks), version)


def _extra_value(profile: ProfileConfig, flag: str) -> str | None:
    """The value the profile's extra flags give ``flag`` (``--flag V`` or ``--flag=V``), the last one wins."""
    value = None
    args = list(profile.extra_args)
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _tp_check(profile: ProfileConfig, gpus: dict[str, Any]) -> Check:
    """``--tp-size`` against the host's GPU count: SGLang itself only fails once it tries to use them."""
    if not gpus["nvidia_smi"]:
        return Check("tp", "skip", f"no nvidia-smi on the host: --tp-size {profile.tp} not checked against its GPUs")
    count = len(gpus["gpus"])
    if profile.tp > count:
        return Check(
            "tp",
            "fail",
            f"the profile asks for --tp-size {profile.tp} but the host has {count} GPU{'s' if count != 1 else ''}: "
            f"set the profile's tp to {count} or less",
        )
    return Check("tp", "ok", f"--tp-size {profile.tp} fits the host's {count} GPUs")


def _window_checks(profile: ProfileConfig, inspected: Any, target_cfg: Any) -> list[Check]:
    """The drafter's trained window (max_position_embeddings) against the context the profile allows: past
    it EAGLE-3's acceptance collapses and the server runs below the baseline (sglang issue #6783)."""
    if not profile.drafter or not isinstance(inspected, dict) or not isinstance(inspected.get("config"), dict):
        return []
    window = inspected["config"].get("max_position_embeddings")
    if not isinstance(window, int) or window <= 0:
        return []
    given = _extra_value(profile, "--context-length")
    target = checkpoints.language_config(target_cfg if isinstance(target_cfg, dict) else None) or {}
    try:
        context = int(given) if given is not None else target.get("max_position_embeddings")
    except ValueError:
        return []  # the flags check says what is wrong with it
    if not isinstance(context, int):
        return [Check("window", "skip", f"the target's context is unknown: the drafter's window is {window}")]
    where = "--context-length" if given is not None else "the target's max_position_embeddings"
    if context > window:
        return [
            Check(
                "window",
                "warn",
                f"{profile.drafter} was trained on {window} positions (max_position_embeddings) but the profile "
                f"allows {context} ({where}): past {window} tokens EAGLE-3 falls below the baseline; add "
                f"--context-length {window} to the profile's extra flags to cap it",
            )
        ]
    return [Check("window", "ok", f"{profile.drafter}'s window of {window} covers the {context} allowed ({where})")]


def _target_checks(target: str, config: dict[str, Any] | RemoteError | None) -> list[Check]:
    if config is None:
        return [Check("target", "skip", f"{target} is not a path: SGLang fetches it from the Hub")]
    if isinstance(config, RemoteError):
        if config.kind == "not_found":
            return [
                Check(
                    "target", "fail", f"the target {target} has no config.json on the host: check target in the config"
                )
            ]
        return [Check("target", "fail", str(config))]
    arch = (config.get("architectures") or ["?"])[0]
    return [Check("target", "ok", f"{target}: {arch}, {config.get('num_hidden_layers', '?')} layers")]


def _drafter_checks(profile: ProfileConfig, path: str | None, inspected: Any, target: Any, force: bool) -> list[Check]:
    if path is None:
        return []
    if isinstance(inspected, RemoteError):
        if inspected.kind == "not_found":
            message = (
                f"drafter folder {path} does not exist on the host: download it (Drafters tab) or fix "
                f"drafters.{profile.drafter}.path"
            )
        else:
            message = f"drafter {profile.drafter} at {path} cannot be read: {inspected}"
        return [Check("drafter", "fail", message)]
    judged = checkpoints.verdict(inspected, target if isinstance(target, dict) else None)
    override: CheckStatus = "warn" if force else "fail"
    out = []
    if judged["compatible"]:
        out.append(Check("drafter", "ok", f"{profile.drafter} fits the target (Compare's verdict)"))
    elif not judged["problems"]:  # nothing wrong seen, but its weights were not: nothing for SGLang to load
        out.append(
            Check("drafter", override, f"{profile.drafter} at {path} cannot be judged: {judged['unchecked'][-1]}")
        )
    else:
        more = f" (and {len(judged['problems']) - 1} more)" if len(judged["problems"]) > 1 else ""
        tail = "; starting anyway (--force)" if force else "; see Compare, or --force to start anyway"
        out.append(
            Check(
                "drafter",
                override,
                f"Compare finds {profile.drafter} incompatible with the target: {judged['problems'][0]}{more}{tail}",
            )
        )
    needed = judged["algorithm"]
    aliases = {needed, profile.algorithm} <= {"EAGLE", "NEXTN"}  # SGLang resolves NEXTN to EAGLE
    if needed and profile.algorithm and needed != profile.algorithm and not aliases:
        if needed == "EAGLE3" and profile.algorithm in ("EAGLE", "NEXTN"):
            message = (
                f"{profile.drafter} is an EAGLE-3 drafter ({checkpoints.EAGLE3_ARCH}): use algorithm EAGLE3; "
                f"with {profile.algorithm} it loads and silently accepts nothing (accept length 1.00)"
            )
        elif needed in ("DFLASH", "DSPARK"):
            message = (
                f"{profile.drafter} is a {needed} block drafter, not an EAGLE head: use algorithm {needed}, not "
                f"{profile.algorithm}"
            )
        elif profile.algorithm in ("DFLASH", "DSPARK"):
            message = (
                f"{profile.drafter} is an {needed} drafter, not a {profile.algorithm} block drafter (no dflash_config, "
                f"no mask token): use algorithm {needed}"
            )
        else:
            message = f"{profile.drafter} is an {needed} drafter: use algorithm {needed}, not {profile.algorithm}"
        out.append(Check("algorithm", override, message + ("; starting anyway (--force)" if force else "")))
    elif needed:
        out.append(Check("algorithm", "ok", f"{profile.algorithm} matches the drafter"))
    return out


def _sglang_checks(checks: list[Check], profile: ProfileConfig, helped: Any, settings: Settings) -> list[Check]:
    """The host's launcher runs and knows every flag; its --help is the truth where our table differs."""
    if isinstance(helped, RemoteError):
        return [*checks, Check("sglang", "fail", str(helped))]
    known = flags.parse_help_flags(helped["help"])
    unknown = flags.unknown_flags(profile_argv(settings, profile), known)
    version = helped["version"]
    removed = [name for name in unknown if name in flags.REMOVED_FLAGS]
    if removed:
        message = " ".join(_sentence(flags.removed_flag_message(name, version)) for name in removed)
        return [*checks, Check("sglang", "fail", message.rstrip("."))]
    if unknown:
        return [
            *checks,
            Check(
                "sglang",
                "fail",
                f"sglang {version} on the host does not know {', '.join(unknown)}: drop them from the profile or "
                "upgrade sglang there",
            ),
        ]
    if versions.support(version) != "known":
        # Our table is the nearest known release's; this one may accept what the table refuses.
        checks = [
            Check(c.name, "warn", f"{c.message} (the host runs sglang {version} and knows every flag)")
            if c.name == "flags" and c.status == "fail" and "refuse" in c.message
            else c
            for c in checks
        ]
    return [*checks, Check("sglang", "ok", f"sglang {version} on the host knows every flag")]


def _port_check(port: dict[str, Any]) -> Check:
    held = port["held_by"]
    if held:
        return Check(
            "port",
            "fail",
            f"port {port['port']} is held by profile {held['profile']} (job {held['job']}): stop it first "
            "or use another port",
        )
    if not port["free"]:
        return Check(
            "port",
            "fail",
            f"port {port['port']} on the host is taken by another program: give the profile another port",
        )
    return Check("port", "ok", f"port {port['port']} is free")


def _gpu_check(gpus: dict[str, Any]) -> Check:
    if not gpus["nvidia_smi"]:
        return Check("gpus", "skip", "no nvidia-smi on the host: GPU use not checked")
    others = [
        f"GPU{g['index']} pid {p['pid']} ({p.get('name') or '?'}, {p.get('used_mib') or 0:.0f} MiB)"
        for g in gpus["gpus"]
        for p in g.get("processes", [])
        if not p.get("job")
    ]
    if others:
        return Check("gpus", "warn", f"GPUs busy with other processes: {', '.join(others)}")
    return Check("gpus", "ok", f"{len(gpus['gpus'])} GPUs, none used by other processes")


# --- lifecycle --------------------------------------------------------------------------------------------


async def start(
    conn: Connection,
    settings: Settings,
    profile: ProfileConfig,
    *,
    force: bool = False,
    tags: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Preflight, then start ``profile``'s server as a detached job; returns its first status (+ preflight).
    ``tags`` go into the job's args beside the profile's (history keeps them: a training checkpoint's).

    Raises ``PreflightFailed`` (exit 2) listing the failed checks, or the host's refusal when another server
    holds the port (exit 1)."""
    checks = await preflight(conn, settings, profile, force=force)
    if not checks.ok:
        raise PreflightFailed(checks)
    cmd = profile_command(settings, conn.host, profile)
    status = await conn.call(
        "serve.start",
        argv=cmd["argv"],
        env=cmd["env"],
        cwd=cmd["cwd"],
        files=cmd["files"],
        # The release it launched with: History's for a run whose server never answered /server_info.
        args={**job_args(settings, profile), "sglang_version": checks.version, **(tags or {})},
    )
    status["preflight"] = checks.to_json()
    started: dict[str, Any] = status
    return started


async def wait(
    conn: Connection,
    job: str | None = None,
    *,
    until: tuple[str, ...] = ENDED_STATES,
    within: float | None = None,
    on_status: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Follow the server's status (pushed by the host on every change) until its state is in ``until`` or
    ``within`` seconds pass; ``on_status`` sees each change. Returns the last status."""
    last: dict[str, Any] = {}
    async for status in conn.stream("serve.wait", job=job, until=list(until), timeout=within):
        last = status
        if on_status is not None:
            on_status(status)
    return last


async def status(conn: Connection, *, job: str | None = None, port: int | None = None) -> dict[str, Any]:
    """The server's status: ``job``, else the newest running server (on ``port``), else the newest."""
    answer: dict[str, Any] = await conn.call("serve.status", job=job, port=port)
    return answer


async def stop(
    conn: Connection, *, job: str | None = None, port: int | None = None, grace: float = STOP_GRACE_S
) -> dict[str, Any]:
    """SIGTERM the server's group, SIGKILL after ``grace`` s, then confirm nothing of it is left and its GPU
    memory is free. Killed processes the kernel has not let go yet (still exiting, in uninterruptible sleep) are
    waited for (``lingered`` names them); ``OperationFailed`` if one is still there after that, saying what it
    is doing, or if the GPUs stay held."""
    out: dict[str, Any] = await conn.call("serve.stop", job=job, port=port, timeout=grace)
    if out["left"]:
        waited, left = await jobs.outlast(conn, out["job"], out["left_states"])
        if left:
            raise OperationFailed(jobs.left_sentence(left, "the server", "on the host"))
        out = {**out, "left": [], "lingered": [p.line for p in waited]}  # gone once the kernel let them go
    if out["gpus_freed"] is False:
        raise OperationFailed(
            "the server's processes are gone but nvidia-smi still lists them on a GPU; check nvidia-smi on the host"
        )
    return out


async def restart(
    conn: Connection,
    settings: Settings,
    profile: ProfileConfig,
    *,
    force: bool = False,
    grace: float = STOP_GRACE_S,
    tags: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stop the current server (if one runs), then start ``profile``: also how the panel switches profiles."""
    current = await status(conn)
    if current["state"] in RUNNING_STATES:
        await stop(conn, job=current["job"], grace=grace)
    return await start(conn, settings, profile, force=force, tags=tags)


async def tail(conn: Connection, job: str, lines: int = 50) -> dict[str, Any]:
    """``{"lines", "offset"}``: the log's last ``lines`` lines and the offset to follow from."""
    tail: dict[str, Any] = await conn.call("jobs.tail", id=job, lines=lines)
    return tail


async def follow(conn: Connection, job: str, offset: int) -> AsyncIterator[list[str]]:
    """The log's new lines from byte ``offset`` until the server ends; survives reconnects without losing or
    repeating a line (the stream resumes at the last offset). A log truncated or rotated on the host reads as
    one ``TRUNCATED_LINE``, then the new file's lines from its start."""

    def resume(params: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
        return {**params, "offset": event["offset"]}

    params = {"id": job, "offset": offset, "stream": "log"}
    async for event in conn.subscribe("jobs.follow", params, resume):
        yield [TRUNCATED_LINE] if event.get("truncated") else event["lines"]


async def watch(conn: Connection, *, interval: float = 0.5) -> AsyncIterator[ServerStatus]:
    """The current server's status on every change, until cancelled; survives reconnects (the TUI's feed)."""
    async for event in conn.subscribe("serve.wait", {"until": [], "interval": interval}, lambda params, _: params):
        yield ServerStatus.from_json(event)


# --- the server's status, typed where it arrives ---------------------------------------------------------

ServerState = Literal["none", "starting", "ready", "orphaned", "stopping", "stopped", "crashed"]


@dataclass(frozen=True)
class Phase:
    """One startup phase the host saw: when it started and ended (epoch seconds), and what SGLang timed."""

    name: str
    start: float | None
    end: float | None
    measured: float | None = None


@dataclass(frozen=True)
class NodeStatus:
    """One node of a multi-node server as ``multinode.expand`` reports it: its host, rank, job and state."""

    node: str
    rank: int
    state: str  # a server state, or ``unknown`` where its host cannot be asked now
    job: str | None = None
    phase: str | None = None
    port: int | None = None
    pid: int | None = None
    since: float | None = None
    ended: float | None = None
    error: str | None = None
    log_path: str | None = None

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> NodeStatus:
        keys = ("job", "phase", "port", "pid", "since", "ended", "error", "log_path")
        return cls(wire["node"], wire["rank"], wire["state"], **{k: wire.get(k) for k in keys})


@dataclass(frozen=True)
class ServerStatus:
    """The host's word on its server (``serve.status`` / ``serve.wait``), parsed once where it arrives; ``wire``
    keeps it as the host said it (what ``--json`` prints)."""

    state: ServerState
    profile: str | None = None
    port: int | None = None
    pid: int | None = None
    job: str | None = None
    phase: str | None = None
    since: float | None = None
    args: dict[str, Any] = field(default_factory=dict)
    phases: tuple[Phase, ...] = ()
    server_info: dict[str, Any] | None = None
    startup_timings: dict[str, Any] | None = None
    kv_tokens: int | None = None  # max_total_num_tokens as the log stated it
    warnings: tuple[str, ...] = ()
    error: str | None = None
    hint: str | None = None
    hint_action: str | None = None
    log_path: str | None = None
    nodes: tuple[NodeStatus, ...] = ()  # a multi-node server's line per node (backend.serve.multinode.expand)
    spec_steps_now: int | None = None  # the draft steps in force (an adaptive server's tier); None without speculation
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> ServerStatus:
        if wire.get("state") not in STATES:
            raise RemoteError(f"the host reported an unknown server state {wire.get('state')!r}")
        phases = tuple(
            Phase(p["phase"], p.get("start"), p.get("end"), p.get("measured")) for p in wire.get("phases") or []
        )
        return cls(
            state=cast(ServerState, wire["state"]),
            profile=wire.get("profile"),
            port=wire.get("port"),
            pid=wire.get("pid"),
            job=wire.get("job"),
            phase=wire.get("phase"),
            since=wire.get("since"),
            args=wire.get("args") or {},
            phases=phases,
            server_info=wire.get("server_info"),
            startup_timings=wire.get("startup_timings"),
            kv_tokens=wire.get("kv_tokens"),
            warnings=tuple(wire.get("warnings") or ()),
            error=wire.get("error"),
            hint=wire.get("hint"),
            hint_action=wire.get("hint_action"),
            log_path=wire.get("log_path"),
            nodes=tuple(NodeStatus.from_json(n) for n in wire.get("nodes") or ()),
            spec_steps_now=wire.get("spec_steps_now"),
            wire=wire,
        )

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def drafter(self) -> str | None:
        return self.args.get("drafter")


# --- presentation helpers shared by the CLI and the TUI ---------------------------------------------------

_ERROR_LINE = re.compile(
    r"Traceback \(most recent|^\s+File \"|(?:Error|Exception)\b|\bERROR\b|hit an exception|sigquit|[Ff]ailed\b"
)
_WARNING_LINE = re.compile(r"\bWARNING\b|\bwarning\b|deprecated|SIGTERM received")


# A uvicorn access-log line of a GET from the host itself of what specdeck polls: the Live tab's numbers
# (/server_info or /get_server_info and /metrics, every second) and the agent's /health probe.
_POLL_LINE = re.compile(
    r'INFO:\s+127\.0\.0\.1:\d+ - "GET /(?:metrics|server_info|get_server_info|health)(?:\?[^ "]*)? HTTP/[\d.]+" \d{3}'
)


def is_poll_line(line: str) -> bool:
    """True for the access-log line of one of specdeck's own polls of the server (a person's own GET of those
    paths from the host reads the same)."""
    return _POLL_LINE.search(line) is not None


def line_level(line: str) -> str | None:
    """``error``, ``warning`` or None for one server log line (what the log pane highlights)."""
    if _ERROR_LINE.search(line):
        return "error"
    if _WARNING_LINE.search(line):
        return "warning"
    return None


def expected_phases(args: dict[str, Any] | None) -> tuple[str, ...]:
    """The startup phases a server with these job args goes through (no draft phases without a drafter)."""
    if args and args.get("drafter"):
        return PHASES
    return tuple(p for p in PHASES if p not in DRAFT_PHASES)


def timeline(status: ServerStatus, now: float) -> list[dict[str, Any]]:
    """Rows for a phase timeline: every phase this server goes through, each ``done``, ``current``,
    ``failed`` (where it crashed) or ``pending``, with its duration in seconds (so far, for the current one)."""
    seen = {entry.name: entry for entry in status.phases}
    names = list(expected_phases(status.args))
    names += [name for name in seen if name not in names]
    last = status.phases[-1].name if status.phases else None
    rows: list[dict[str, Any]] = []
    for name in names:
        entry = seen.get(name)
        if entry is None:
            rows.append({"phase": name, "state": "pending", "seconds": None})
            continue
        start, end = entry.start, entry.end
        if name == last and status.state == "crashed":
            state = "failed"
        elif end is None and status.running and name != "ready":
            state = "current"
        else:
            state = "done"
        seconds = None if start is None else max(0.0, (end if end is not None else now) - start)
        if state == "done" and entry.measured is not None:
            seconds = entry.measured  # what SGLang itself timed (load, graph capture): finer than log stamps
        rows.append({"phase": name, "state": state, "seconds": seconds})
    return rows


def state_label(status: ServerStatus) -> str:
    """The words for the server's state: ``ready``, ``running, orphaned``, ..."""
    return STATE_LABELS.get(status.state, status.state)


def startup_text(status: ServerStatus) -> str | None:
    """SGLang's own startup timings (0.5.23's ``Engine startup timings`` line): ``SGLang timed load_weight
    151.8s, kv_cache_allocation 0.6s, scheduler_e2e 210.1s, graphs target_verify 42.4s, draft_decode 8.2s``."""
    timings = status.startup_timings
    pool = f"KV pool {status.kv_tokens:,} tokens (max_total_num_tokens)" if status.kv_tokens else None
    if not timings:
        return pool
    parts = [f"{k} {v:.1f}s" for k, v in timings.items() if isinstance(v, int | float) and k != "tokenizer_e2e"]
    graphs = [f"{k} {v:.1f}s" for k, v in (timings.get("cuda_graph") or {}).items() if v]
    text = "SGLang timed " + ", ".join(parts + (["graphs " + ", ".join(graphs)] if graphs else []))
    return f"{text}; {pool}" if pool else text


def phase_took(seconds: float | None) -> str:
    """How long a phase took, as the timeline shows it: tenths under ten seconds (what millisecond stamps and
    SGLang's own timings resolve), else ``duration``'s 3m05s."""
    if seconds is None:
        return ""
    return f"{seconds:.1f}s" if seconds < 10 else duration(seconds)


def since_text(status: ServerStatus, now: float, minutes: bool = False) -> str:
    """How long the server has been in its state: ``for 3m05s`` while it runs, ``12s ago`` once it ended;
    ``minutes``: whole minutes past the first one (``for 3m``), for a screen that should not redraw every second
    while nothing happens."""
    if not status.since:
        return ""
    age = max(0.0, now - status.since)
    text = f"{int(age // 60)}m" if minutes and 60 <= age < 3600 else duration(age)
    return f"for {text}" if status.running else f"{text} ago"


def steps_now_text(status: ServerStatus) -> str | None:
    """``adaptive: 5 steps now`` for an adaptive server (SGLang picks the tier per batch); None otherwise."""
    if not status.args.get("adaptive") or status.spec_steps_now is None:
        return None
    return f"adaptive: {status.spec_steps_now} steps now (SGLang picks the tier per batch)"


def speculative_summary(info: dict[str, Any] | None) -> str | None:
    """``sglang 0.5.6: EAGLE3 steps 3, topk 1, draft tokens 4`` from the server's resolved args."""
    if not info:
        return None
    version = info.get("version") if isinstance(info.get("version"), str) else "?"
    # A real server past the newest known release reads "(untested version)".
    text = f"sglang {version} (SIMULATED)" if info.get("simulated") else versions.version_text(version)
    if info.get("speculative_algorithm"):
        text += (
            f": {info['speculative_algorithm']} steps {info.get('speculative_num_steps')}, "
            f"topk {info.get('speculative_eagle_topk')}, draft tokens {info.get('speculative_num_draft_tokens')}"
        )
    else:
        text += ": no speculation"
    return text
