"""The checks before a server starts: ``preflight(conn, settings, profile)`` → ``Preflight``, a list of checks,
each ok / warn / fail / skip with one sentence (the profile's numbers and command line on the host's SGLang
release, the target, the drafter against it, SGLang's own rules, the port and the GPUs); ``start`` refuses on any
failure (``PreflightFailed``; ``force`` lets a drafter verdict through).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from backend.connection import Connection
from backend.drafters import checkpoints
from backend.errors import RemoteError, UsageError
from backend.serve.command_line import JOB_FIELDS, drafter_path, profile_argv, profile_command, sim_version, target_path
from backend.serve.host_info import GpuUse, gpu_use
from backend.settings.model import EAGLE_FAMILY, FIELD, PROFILE_FIELDS, ProfileConfig, Settings
from backend.sglang import flags, speculation, versions
from backend.sglang.versions import SIM_SUFFIX

NEEDS_DRAFTER = ("EAGLE", "EAGLE3", "STANDALONE", "DFLASH")  # DSPARK's may be bundled in the target
# Flags the profile itself sets (by ServerArgs field, so aliases count): extra_args must not repeat them.
_MANAGED = {
    flags.FLAGS[name].field
    for name in ("--host", *(flag for d in PROFILE_FIELDS for flag in d.flags))
    if name in flags.FLAGS
}


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
            if d.algorithms and d.name not in JOB_FIELDS and getattr(profile, d.name) not in (None, False)
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
        _quiet(conn.call("serve.help", argv=cmd.argv[:3], version=version, cwd=cmd.cwd, env=cmd.env, deadline=400)),
        conn.call("serve.port", port=profile.port),
        gpu_use(conn),
    )
    if isinstance(helped, dict):
        version = helped["version"]
    checks = profile_checks(settings, profile, version)
    checks += _target_checks(target, target_cfg)
    checks += _drafter_checks(profile, drafter, inspected, target_cfg, force)
    checks += _window_checks(profile, inspected, target_cfg)
    drafter_cfg = inspected.get("config") if isinstance(inspected, dict) else None
    target_lang = checkpoints.language_config(target_cfg if isinstance(target_cfg, dict) else None)
    names = [g.name or "" for g in gpus.gpus] if gpus.nvidia_smi else None
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


def _tp_check(profile: ProfileConfig, gpus: GpuUse) -> Check:
    """``--tp-size`` against the host's GPU count: SGLang itself only fails once it tries to use them."""
    if not gpus.nvidia_smi:
        return Check("tp", "skip", f"no nvidia-smi on the host: --tp-size {profile.tp} not checked against its GPUs")
    count = len(gpus.gpus)
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


def _gpu_check(gpus: GpuUse) -> Check:
    if not gpus.nvidia_smi:
        return Check("gpus", "skip", "no nvidia-smi on the host: GPU use not checked")
    others = [
        f"GPU{g.index} pid {p.pid} ({p.name or '?'}, {p.used_mib or 0:.0f} MiB)"
        for g in gpus.gpus
        for p in g.processes
        if not p.job
    ]
    if others:
        return Check("gpus", "warn", f"GPUs busy with other processes: {', '.join(others)}")
    return Check("gpus", "ok", f"{len(gpus.gpus)} GPUs, none used by other processes")
