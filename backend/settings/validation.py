"""The config's strict validation: a TOML mapping checked key by key over the built-in defaults (unknown keys,
types, ranges and choices, names that must exist), every refusal one sentence naming the file and the dotted
key: hosts (their ssh:// addresses), drafters, profiles (by their fields' declarations), the reference numbers,
trainings and fleets (replicas and router, no two on one port of one machine).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from backend.errors import ConfigError
from backend.settings.model import (
    PROFILE_FIELDS,
    ROUTER_POLICIES,
    Declared,
    DrafterConfig,
    FleetConfig,
    HostConfig,
    ProfileConfig,
    Reference,
    ReplicaConfig,
    RouterConfig,
    Settings,
    TrainingConfig,
    builtin_defaults,
)


def ssh_url_problem(url: str) -> str | None:
    """Why ``url`` is not an ``ssh://[user@]addr[:port]`` address, in words a person can act on; None if it is.
    Checked before any connection, so a typo is bad input (exit 2), never a failed lookup."""
    from urllib.parse import urlsplit

    form = "ssh://user@addr[:port]"
    if not url.startswith("ssh://"):
        return f"must be {form} or local, got {url!r}"
    if any(ch.isspace() for ch in url):
        return f"{url!r} has a space in it: write it as {form}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"{url!r} is not {form}: {exc}"
    if not parts.hostname:
        return f"{url!r} names no host: write it as {form}"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return f"{url!r} has more than an address: write it as {form}"
    if port is not None and not 1 <= port <= 65535:
        return f"{url!r}: the port must be 1-65535"
    return None


class _Check:
    """Typed reads from a TOML table; every message names the file and the dotted key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}: {msg}")

    def table(self, data: dict[str, Any], key: str, allowed: set[str], prefix: str = "") -> dict[str, Any]:
        value = data.get(key, {})
        full = prefix + key
        if not isinstance(value, dict):
            raise self.fail(full, "must be a table")
        for sub in value:
            if allowed and sub not in allowed:
                raise self.fail(f"{full}.{sub}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return value

    def get(self, data: dict[str, Any], key: str, kind: type | tuple[type, ...], full: str, default: Any = None) -> Any:
        if key not in data:
            return default
        value = data[key]
        # TOML booleans are ints in Python; keep them apart.
        if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else ()):
            raise self.fail(full, f"expected {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise self.fail(full, f"expected {_kind_name(kind)}, got {type(value).__name__} {value!r}")
        return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


_TOP = {"default_host", "target", "hosts", "drafters", "profiles", "reference", "trainings", "fleets"}
_HOST = {"url", "python", "workdir", "identity", "known_hosts", "launcher", "sandbox", "hub_endpoint", "sglang_version"}
_DRAFTER = {"path", "repo", "revision", "files"}
_PROFILE = {d.name for d in PROFILE_FIELDS}
_REFERENCE = {"baseline_tok_s", "cycle_ms", "gpu_hour_usd"}
_TRAINING_STR = ("data", "output", "init", "target", "era", "script", "profile", "vocab_mapping", "eval_data", "run_id")
_TRAINING_INT: tuple[str, ...] = (
    "epochs",
    "max_steps",
    "batch_size",
    "max_length",
    "ttt_length",
    "save_interval",
    "eval_interval",
)
_TRAINING_INT += ("log_interval", "gpus")
_TRAINING = {*_TRAINING_STR, *_TRAINING_INT, "command", "learning_rate", "env"}
ERAS = ("unified", "script")


def parse(data: dict[str, Any], source: str) -> Settings:
    """Validate a config mapping (as read from TOML) over the built-in defaults."""
    c = _Check(source)
    base = builtin_defaults()
    for key in data:
        if key not in _TOP:
            raise c.fail(key, f"unknown key (allowed: {', '.join(sorted(_TOP))})")

    hosts = dict(base.hosts)
    for name, raw in c.table(data, "hosts", set()).items():
        key = f"hosts.{name}"
        c.table({name: raw}, name, _HOST, "hosts.")
        prev = hosts.get(name)
        url = c.get(raw, "url", str, f"{key}.url", prev.url if prev else None)
        if url is None:
            raise c.fail(f"{key}.url", "missing (ssh://user@addr[:port] or local)")
        if url != "local" and (problem := ssh_url_problem(url)):
            raise c.fail(f"{key}.url", problem)
        launcher = c.get(raw, "launcher", str, f"{key}.launcher", "sglang")
        if launcher not in ("sglang", "simulator"):
            raise c.fail(f"{key}.launcher", f"must be sglang or simulator, got {launcher!r}")
        sandbox = c.get(raw, "sandbox", bool, f"{key}.sandbox", False)
        if launcher == "simulator" and not (sandbox and HostConfig(name, url).on_this_machine):
            # The simulator must never stand in for SGLang on a real host.
            raise c.fail(f"{key}.launcher", "simulator is only allowed on a sandbox host of this machine")
        fields = {k: c.get(raw, k, str, f"{key}.{k}") for k in ("python", "workdir", "identity", "known_hosts")}
        fields = {k: v for k, v in fields.items() if v is not None}
        hub = c.get(raw, "hub_endpoint", str, f"{key}.hub_endpoint")
        sim_version = c.get(raw, "sglang_version", str, f"{key}.sglang_version")
        if sim_version is not None:
            from backend.sglang.versions import SIM_VERSIONS

            if launcher != "simulator":
                raise c.fail(f"{key}.sglang_version", "only the simulator takes a version; SGLang hosts are asked")
            if sim_version not in SIM_VERSIONS:
                raise c.fail(f"{key}.sglang_version", f"must be one of {', '.join(SIM_VERSIONS)}, got {sim_version!r}")
        template = prev or HostConfig(name=name, url=url)
        hosts[name] = replace(
            template,
            name=name,
            url=url,
            launcher=launcher,
            sandbox=sandbox,
            hub_endpoint=hub,
            sglang_version=sim_version,
            **fields,
        )

    drafters = dict(base.drafters)
    for name, raw in c.table(data, "drafters", set()).items():
        key = f"drafters.{name}"
        c.table({name: raw}, name, _DRAFTER, "drafters.")
        prev_drafter = drafters.get(name)
        path = c.get(raw, "path", str, f"{key}.path", prev_drafter.path if prev_drafter else None)
        if not path:
            raise c.fail(f"{key}.path", "missing (the drafter's folder on the host)")
        files = c.get(raw, "files", list, f"{key}.files", list(prev_drafter.files) if prev_drafter else None)
        if files is not None and not all(isinstance(f, str) for f in files):
            raise c.fail(f"{key}.files", "must be a list of strings")
        drafters[name] = DrafterConfig(
            name=name,
            path=path,
            repo=c.get(raw, "repo", str, f"{key}.repo", prev_drafter.repo if prev_drafter else None),
            revision=c.get(raw, "revision", str, f"{key}.revision", prev_drafter.revision if prev_drafter else None),
            files=tuple(files) if files is not None else DrafterConfig.files,
        )

    profiles = dict(base.profiles)
    for name, raw in c.table(data, "profiles", set()).items():
        key = f"profiles.{name}"
        c.table({name: raw}, name, _PROFILE, "profiles.")
        prev_profile = profiles.get(name) or ProfileConfig(name=name)
        values = {d.name: _profile_value(c, raw, d, f"{key}.{d.name}", prev_profile) for d in PROFILE_FIELDS[:-1]}
        profiles[name] = ProfileConfig(name=name, nodes=_nodes(c, key, raw, prev_profile, hosts), **values)

    for pname, prof in profiles.items():
        if prof.drafter is not None and prof.drafter not in drafters:
            raise c.fail(
                f"profiles.{pname}.drafter",
                f"no drafter named {prof.drafter!r} (have: {', '.join(drafters)})",
            )

    ref_raw = c.table(data, "reference", _REFERENCE)
    number = (int, float)
    reference = Reference(
        baseline_tok_s=float(
            c.get(ref_raw, "baseline_tok_s", number, "reference.baseline_tok_s", Reference.baseline_tok_s)
        ),
        cycle_ms=float(c.get(ref_raw, "cycle_ms", number, "reference.cycle_ms", Reference.cycle_ms)),
    )
    price = c.get(ref_raw, "gpu_hour_usd", number, "reference.gpu_hour_usd", None)
    reference = replace(reference, gpu_hour_usd=None if price is None else float(price))
    if reference.baseline_tok_s <= 0 or reference.cycle_ms <= 0:
        raise c.fail("reference", "baseline_tok_s and cycle_ms must be positive")
    if reference.gpu_hour_usd is not None and not 0 < reference.gpu_hour_usd < float("inf"):
        raise c.fail("reference.gpu_hour_usd", "a GPU-hour price must be above 0 dollars")

    trainings = {}
    for name, raw in c.table(data, "trainings", set()).items():
        trainings[name] = _training(c, name, raw, drafters, profiles)

    fleets = {}
    for name, raw in c.table(data, "fleets", set()).items():
        fleets[name] = _fleet(c, name, raw, hosts, profiles)

    default_host = c.get(data, "default_host", str, "default_host", base.default_host)
    if default_host not in hosts and default_host != "local":
        raise c.fail("default_host", f"no host named {default_host!r} (have: {', '.join(hosts)})")
    return Settings(
        default_host=default_host,
        hosts=hosts,
        target=c.get(data, "target", str, "target", base.target),
        drafters=drafters,
        profiles=profiles,
        reference=reference,
        source=source,
        trainings=trainings,
        fleets=fleets,
    )


def _profile_value(c: _Check, raw: dict[str, Any], declared: Declared, full: str, prev: ProfileConfig) -> Any:
    """One profile field read by its declaration: its type, range or choices (``Declared.problem``)."""
    before = getattr(prev, declared.name)
    if declared.kind is tuple:
        value = c.get(raw, declared.name, list, full, list(before))
        if not all(isinstance(a, str) for a in value):
            raise c.fail(full, "must be a list of strings")
        return tuple(value)
    if declared.kind is dict and declared.name == "env":
        value = c.get(raw, declared.name, dict, full, dict(before))
        if not all(isinstance(v, str) for v in value.values()):
            raise c.fail(full, "values must be strings")
        return value
    if declared.kind is dict:
        value = c.get(raw, declared.name, dict, full, before)
        if value is not None:
            from backend.sglang.adaptive import format_problem

            if (why := format_problem(value)) is not None:
                raise c.fail(full, why)
            value = _plain_table(value)
        return value
    value = c.get(raw, declared.name, declared.kind, full, before)
    if (why := declared.problem(value)) is not None:
        raise c.fail(full, why)
    return value


def _plain_table(value: dict[str, Any]) -> dict[str, Any]:
    """A TOML table as plain dicts and lists (what json.dumps and equality take)."""
    return {
        str(k): _plain_table(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v
        for k, v in value.items()
    }


def _nodes(
    c: _Check, key: str, raw: dict[str, Any], prev: ProfileConfig, hosts: dict[str, HostConfig]
) -> tuple[str, ...]:
    """A profile's ``nodes``: two or more configured hosts, each once (rank 0 first)."""
    nodes = c.get(raw, "nodes", list, f"{key}.nodes", list(prev.nodes))
    if not nodes:
        return ()
    if not all(isinstance(n, str) for n in nodes):
        raise c.fail(f"{key}.nodes", "must be a list of configured host names")
    for node in nodes:
        if node not in hosts:
            known = ", ".join(hosts)
            raise c.fail(f"{key}.nodes", f"no host named {node!r} (have: {known}): configure it under [hosts]")
        if nodes.count(node) > 1:
            raise c.fail(f"{key}.nodes", f"host {node} is listed twice: a node serves one rank")
    if len(nodes) < 2:
        raise c.fail(f"{key}.nodes", "a multi-node profile names two hosts or more (leave nodes out for one host)")
    return tuple(nodes)


def _training(
    c: _Check, name: str, raw: Any, drafters: dict[str, DrafterConfig], profiles: dict[str, ProfileConfig]
) -> TrainingConfig:
    key = f"trainings.{name}"
    c.table({name: raw}, name, _TRAINING, "trainings.")
    values: dict[str, Any] = {k: c.get(raw, k, str, f"{key}.{k}") for k in _TRAINING_STR}
    values = {k: v for k, v in values.items() if v is not None}
    for k in _TRAINING_INT:
        if (v := c.get(raw, k, int, f"{key}.{k}")) is not None:
            if v < (0 if k.endswith("_interval") else 1):
                raise c.fail(f"{key}.{k}", f"must be positive, got {v}")
            values[k] = v
    if (lr := c.get(raw, "learning_rate", (int, float), f"{key}.learning_rate")) is not None:
        if lr <= 0:
            raise c.fail(f"{key}.learning_rate", f"must be positive, got {lr}")
        values["learning_rate"] = float(lr)
    for k in ("data", "output"):
        if not values.get(k):
            what = "a prepared hidden-states folder or a data file" if k == "data" else "the output folder"
            raise c.fail(f"{key}.{k}", f"missing ({what} on the host)")
    if values.get("era", "unified") not in ERAS:
        raise c.fail(f"{key}.era", f"must be one of {', '.join(ERAS)}, got {values['era']!r}")
    init = values.get("init")
    if init is not None and init not in drafters and not init.startswith("/"):
        raise c.fail(f"{key}.init", f"no drafter named {init!r} (have: {', '.join(drafters)}) and not a host path")
    if values.get("profile") is not None and values["profile"] not in profiles:
        raise c.fail(f"{key}.profile", f"no profile named {values['profile']!r} (have: {', '.join(profiles)})")
    command = c.get(raw, "command", list, f"{key}.command", [])
    if not all(isinstance(a, str) for a in command):
        raise c.fail(f"{key}.command", "must be a list of strings")
    env = c.get(raw, "env", dict, f"{key}.env", {})
    if not all(isinstance(v, str) for v in env.values()):
        raise c.fail(f"{key}.env", "values must be strings")
    return TrainingConfig(name=name, command=tuple(command), env=env, **values)


_FLEET = {"profile", "replicas", "router"}
_REPLICA = {"host", "port", "profile"}
_ROUTER = {"host", "port", "policy", "prometheus_port"}


def host_address(host: HostConfig | None) -> str:
    """The machine a host's url names (``local`` is this one's loopback), so two host names for one machine
    are seen to share its ports."""
    if host is None or host.url == "local":
        return "127.0.0.1"
    from urllib.parse import urlsplit

    return urlsplit(host.url).hostname or host.url


def _port(c: _Check, raw: dict[str, Any], k: str, full: str, default: int) -> int:
    value: int = c.get(raw, k, int, full, default)
    if not 1 <= value <= 65535:
        raise c.fail(full, f"must be a TCP port (1-65535), got {value}")
    return value


def _fleet(
    c: _Check, name: str, raw: Any, hosts: dict[str, HostConfig], profiles: dict[str, ProfileConfig]
) -> FleetConfig:
    key = f"fleets.{name}"
    c.table({name: raw}, name, _FLEET, "fleets.")

    def host_of(raw: dict[str, Any], full: str) -> str:
        host: str | None = c.get(raw, "host", str, full)
        if host is None:
            raise c.fail(full, "missing (a configured host, or local)")
        if host not in hosts and host != "local":
            raise c.fail(full, f"no host named {host!r} (have: {', '.join(sorted(hosts))}, or local)")
        return host

    default_profile = c.get(raw, "profile", str, f"{key}.profile")
    if default_profile is not None and default_profile not in profiles:
        raise c.fail(f"{key}.profile", f"no profile named {default_profile!r} (have: {', '.join(profiles)})")
    items = c.get(raw, "replicas", list, f"{key}.replicas", [])
    if not items:
        raise c.fail(f"{key}.replicas", 'missing (a list like [{host = "gpu-a"}, {host = "gpu-b"}])')
    replicas: list[ReplicaConfig] = []
    taken: dict[tuple[str, int], str] = {}  # (address, port) → who listens there
    for i, item in enumerate(items):
        rkey = f"{key}.replicas[{i}]"
        if not isinstance(item, dict):
            raise c.fail(rkey, f'must be a table like {{host = "gpu-a"}}, got {item!r}')
        for sub in item:
            if sub not in _REPLICA:
                raise c.fail(f"{rkey}.{sub}", f"unknown key (allowed: {', '.join(sorted(_REPLICA))})")
        host = host_of(item, f"{rkey}.host")
        profile = c.get(item, "profile", str, f"{rkey}.profile", default_profile)
        if profile is None:
            raise c.fail(f"{rkey}.profile", f"missing (name one here or as {key}.profile)")
        if profile not in profiles:
            raise c.fail(f"{rkey}.profile", f"no profile named {profile!r} (have: {', '.join(profiles)})")
        if profiles[profile].nodes:
            raise c.fail(
                f"{rkey}.profile",
                f"profile {profile} runs across nodes {', '.join(profiles[profile].nodes)}; a fleet's replicas are "
                "one-host servers: name a profile without nodes",
            )
        port = _port(c, item, "port", f"{rkey}.port", profiles[profile].port)
        spot = (host_address(hosts.get(host)), port)
        if spot in taken:
            raise c.fail(f"{rkey}.port", f"{host}:{port} is already {taken[spot]}'s: give one of them another port")
        taken[spot] = f"replicas[{i}]"
        replicas.append(ReplicaConfig(host=host, profile=profile, port=port))

    rraw = c.get(raw, "router", dict, f"{key}.router", {})
    for sub in rraw:
        if sub not in _ROUTER:
            raise c.fail(f"{key}.router.{sub}", f"unknown key (allowed: {', '.join(sorted(_ROUTER))})")
    rhost = host_of(rraw, f"{key}.router.host") if "host" in rraw else replicas[0].host
    policy = c.get(rraw, "policy", str, f"{key}.router.policy", RouterConfig.policy)
    if policy not in ROUTER_POLICIES:
        raise c.fail(f"{key}.router.policy", f"must be one of {', '.join(ROUTER_POLICIES)}, got {policy!r}")
    if policy == "power_of_two" and len(replicas) < 2:  # the router's own rule: it exits at start otherwise
        raise c.fail(f"{key}.router.policy", "power_of_two needs at least 2 replicas: pick another policy")
    router = RouterConfig(
        host=rhost,
        port=_port(c, rraw, "port", f"{key}.router.port", RouterConfig.port),
        policy=policy,
        prometheus_port=_port(
            c, rraw, "prometheus_port", f"{key}.router.prometheus_port", RouterConfig.prometheus_port
        ),
    )
    address = host_address(hosts.get(rhost))
    for k in ("port", "prometheus_port"):
        spot = (address, getattr(router, k))
        if spot in taken:
            raise c.fail(
                f"{key}.router.{k}", f"{rhost}:{spot[1]} is already {taken[spot]}'s: give one of them another port"
            )
        taken[spot] = f"router.{k}"
    return FleetConfig(name=name, replicas=tuple(replicas), router=router)
