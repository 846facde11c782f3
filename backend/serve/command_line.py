"""A profile as SGLang's command line: ``profile_command(settings, host, profile)`` → ``{"argv", "env", "cwd",
"files"}``: ``python -m sglang.launch_server`` with full flag names only, parsable by SGLang's own parser and
meaning exactly the profile (its adaptive config written beside it), the environment it launches in, and the job
args the host keeps for it (profile, port, drafter, model, algorithm, steps, topk, draft_tokens, tp).

The simulator: a host whose launcher is ``simulator`` runs ``python -m backend.sandbox.sglang_sim`` instead of
SGLang. Config files allow that only on the local sandbox host (``backend.settings.validation.parse``), and
``launcher_argv`` refuses it on any host that is not a sandbox host on this machine (``local``, or SSH to a
loopback address). Tests that drive the simulator through the real sshd build such a ``HostConfig`` in code
(``sandbox=True``, ``launcher="simulator"``, an ``ssh://…@127.0.0.1`` url): nothing outside a sandbox can pick it
by accident.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.agent.client import state_dir as host_state_dir
from backend.errors import UsageError
from backend.settings.model import PROFILE_FIELDS, HostConfig, ProfileConfig, Settings
from backend.sglang import flags
from backend.sglang.versions import DEFAULT_SIM_VERSION, SIM_VERSION_ENV

if TYPE_CHECKING:
    from backend.serve.host_info import HostInfo

SGLANG_MODULE = "sglang.launch_server"
SIMULATOR_MODULE = "backend.sandbox.sglang_sim"
SERVER_HOST = "127.0.0.1"  # the server listens on the host's loopback; the agent (or a forward) reaches it
DECODE_LOG_INTERVAL = 40  # SGLang's default, written out so Live knows the interval
_FIRST = ("model", "tp", "port")  # written first, with the flags every server gets
_ARGV_ORDER = sorted(PROFILE_FIELDS, key=lambda d: d.name != "algorithm")  # the algorithm, then the declarations
SPEC_FILES = "spec"  # the folder of the state dir that holds the adaptive configs written for launches
_DEFAULTED = ("--decode-log-interval",)  # written by us unless the profile's extra flags set it


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


@dataclass(frozen=True)
class LaunchCommand:
    """What starts a server on a host: its argv, environment and working directory, and ``files``, a path in the
    host's state dir → the text the launch reads there (an adaptive config), written by ``serve.start`` before
    the server starts."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """As `serve cmd --json` prints it."""
        return {"argv": self.argv, "env": self.env, "cwd": self.cwd, "files": self.files}


def profile_command(
    settings: Settings, host: HostConfig, profile: ProfileConfig | str, version: str | None = None
) -> LaunchCommand:
    """The command that starts ``profile``'s server on ``host`` (SGLang ``version``: the simulator's on a sandbox
    host, else as given)."""
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
    return LaunchCommand(argv, env, cwd, dict([written]) if written else {})


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


def host_sglang_version(host: HostConfig, info: HostInfo | None) -> str | None:
    """The SGLang release ``host`` runs as far as this client knows: the simulator's, else the version the
    host's ``info`` found installed (None before the first answer)."""
    if host.launcher == "simulator":
        return sim_version(host)
    return info.sglang if info is not None else None


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
            if d.algorithms and d.name not in JOB_FIELDS and getattr(profile, d.name) not in (None, False)
        },
    }


JOB_FIELDS = ("drafter", "steps", "topk", "draft_tokens")


def shell_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """The command as one line a person can paste into a shell on the host."""
    prefix = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items() if k != "PYTHONUNBUFFERED"]
    return " ".join([*prefix, shlex.join(argv)])
