"""Settings: the config model, TOML loading with strict validation, and the operator's defaults.

One discovery function (`config_path`) decides which file is read: ``--config FILE``, then ``SPECDECK_CONFIG``,
then the platform's user config dir. A missing default file means "built-in defaults"; a missing explicit file
is an error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from backend.errors import ConfigError

DEFAULT_HOST = "gpu-box"

if TYPE_CHECKING:
    from tomlkit import TOMLDocument


@dataclass(frozen=True)
class HostConfig:
    """A host specdeck drives. ``url`` is ``ssh://user@addr[:port]`` or ``local``."""

    name: str
    url: str
    python: str = "python3"
    workdir: str = "/data/eagle3"
    identity: str | None = None
    known_hosts: str | None = None
    # "sglang" runs `python -m sglang.launch_server`; "simulator" only exists in sandbox configs.
    launcher: str = "sglang"
    sandbox: bool = False
    # Local Hub-compatible endpoint the sandbox serves; real hosts use huggingface.co or HF_ENDPOINT.
    hub_endpoint: str | None = None
    # The SGLang release the sandbox's simulator speaks (backend.sglang.versions.SIM_VERSIONS); real hosts
    # are asked for theirs.
    sglang_version: str | None = None

    @property
    def is_local(self) -> bool:
        return self.url == "local"

    @property
    def on_this_machine(self) -> bool:
        """Local, or SSH to a loopback address (the sandbox's host through the loopback sshd)."""
        if self.is_local:
            return True
        from urllib.parse import urlsplit

        name = urlsplit(self.url).hostname or ""
        return name.startswith("127.") or name in ("localhost", "::1")


@dataclass(frozen=True)
class DrafterConfig:
    """An EAGLE-3 drafter: where it lives on the host and, if it comes from the hub, which repo and files."""

    name: str
    path: str
    repo: str | None = None
    revision: str | None = None
    files: tuple[str, ...] = ("config.json", "model.safetensors")


# --- a profile's fields, each declared once -------------------------------------------------------------------
# SGLang declares each launch option once (0.5.23 sglang/srt/arg_groups/fields/*.py) and derives its flag, help
# and checks from that declaration; a profile's fields are declared the same way, on ProfileConfig itself: settings
# parses and range-checks them, serving writes their flags, preflight and the Serve tab's editor check them.

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")  # SGLang's names
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")  # _handle_eagle_family (0.5.23 speculative_hook.py)
ADAPTIVE = ("EAGLE", "EAGLE3", "NEXTN")  # adaptive_unsupported_reason: EAGLE/EAGLE3 only, NEXTN resolves to EAGLE
DRAFTED = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "DFLASH", "DSPARK")  # a draft model (NEXTN: the target's own)
WINDOWED = ("EAGLE", "EAGLE3", "NEXTN", "DFLASH")  # --speculative-draft-window-size has no effect on the others


@dataclass(frozen=True)
class Declared:
    """What one profile field is: its help, the SGLang flag (or environment variable) it becomes, the algorithms
    it applies to (None: any profile), its range or choices, its label in the Serve tab's editor. ``name`` and
    ``kind`` come from the ProfileConfig field it is declared on (``PROFILE_FIELDS``)."""

    help: str
    flags: tuple[str, ...] = ()  # several: the names releases gave it, the newest first (a release takes its own)
    env: str | None = None
    algorithms: tuple[str, ...] | None = None
    low: int | None = None
    high: int | None = None
    why: str = ""  # why the range is what it is, said where a value is refused
    choices: tuple[str, ...] | None = None
    flag_choices: bool = False  # the release's own choices for the flag (its flag table)
    label: str = ""
    editor: bool = False  # one of the Serve tab editor's inputs (when the profile's algorithm takes it)
    saved: bool = True  # written back by save_profile
    name: str = ""
    kind: type = str
    optional: bool = True  # None is a value (unset: SGLang or the drafter decides)

    @property
    def text(self) -> str:
        return self.label or self.name.replace("_", " ")

    def applies(self, algorithm: str | None) -> bool:
        return self.algorithms is None or algorithm in self.algorithms

    def problem(self, value: Any) -> str | None:
        """Why ``value`` cannot be this field's, in one clause naming it (``steps 0: a speculative server drafts
        at least 1 step``); None when it can. Choices read from a flag table are preflight's to check."""
        if value is None or self.kind not in (int, str):
            return None
        if self.choices is not None and value not in self.choices:
            return f"{self.text} {value!r} is not one of {', '.join(self.choices)}"
        if self.kind is int and (
            (self.low is not None and value < self.low) or (self.high is not None and value > self.high)
        ):
            bounds = f"{self.low}-{self.high}" if self.high is not None else f"at least {self.low}"
            return f"{self.text} {value}: {self.why or 'must be ' + bounds}"
        return None

    def read(self, text: str) -> Any:
        """The value typed into the editor (empty: unset); raises ValueError with a sentence on bad text."""
        text = text.strip()
        if not text:
            if self.optional:
                return None
            raise ValueError(f"{self.text} must be set")
        if self.kind is int:
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"{self.text} must be a whole number") from None
        return text


def declare(default: Any = None, **declared: Any) -> Any:
    """A ProfileConfig field with its declaration (see ``Declared``)."""
    factory = {"default_factory": default} if callable(default) else {"default": default}
    return field(metadata={"declared": Declared(**declared)}, **factory)


@dataclass(frozen=True)
class ProfileConfig:
    """A way to launch SGLang: the target plus an optional drafter and its speculative settings. Each field is
    declared once, here (``declare``); ``PROFILE_FIELDS`` lists the declarations."""

    name: str
    drafter: str | None = declare(
        help="a configured drafter's name: its path becomes the draft model",
        flags=("--speculative-draft-model-path",),
        algorithms=DRAFTED,
    )
    algorithm: str | None = declare(
        help="SGLang's speculative algorithm (none: serve without speculation)",
        flags=("--speculative-algorithm",),
        choices=ALGORITHMS,
    )
    steps: int | None = declare(
        help="draft steps per verify (adaptive: the tier it starts on)",
        flags=("--speculative-num-steps",),
        algorithms=EAGLE_FAMILY,
        low=1,
        why="a speculative server drafts at least 1 step",
        editor=True,
    )
    topk: int | None = declare(
        help="candidates kept per draft step",
        flags=("--speculative-eagle-topk",),
        algorithms=EAGLE_FAMILY,
        low=1,
        why="each draft step keeps at least 1 candidate",
        editor=True,
    )
    draft_tokens: int | None = declare(
        help="tokens verified per pass, the bonus token included",
        flags=("--speculative-num-draft-tokens",),
        algorithms=ALGORITHMS,
        low=2,
        why="a verify needs at least 2 (the bonus token and one draft)",
        label="draft tok",
        editor=True,
    )
    tp: int = declare(8, help="tensor-parallel GPUs", flags=("--tp-size",), low=1, editor=True)
    port: int = declare(
        30000, help="the server's port on the host", flags=("--port",), low=1, high=65535, why="a TCP port is 1-65535",
        editor=True,
    )  # fmt: skip
    model: str | None = declare(help="the target's path (none: the configured target)", flags=("--model-path",))
    adaptive: bool = declare(
        False,
        help="let SGLang pick the step count per batch (--speculative-adaptive, 0.5.11+)",
        flags=("--speculative-adaptive",),
        algorithms=ADAPTIVE,
    )
    adaptive_config: dict[str, Any] | None = declare(  # noqa: RUF009 (declare is a dataclasses.field)
        help="the adaptive config in SGLang's own JSON keys, written to a file on the host",
        flags=("--speculative-adaptive-config",),
        algorithms=ADAPTIVE,
    )
    dflash_block_size: int | None = declare(
        help="DFLASH's verify window (block size), the bonus position included",
        flags=("--speculative-dflash-block-size",),
        algorithms=("DFLASH",),
        low=1,
        why="a DFLASH block holds at least 1 position",
        label="block",
        editor=True,
    )
    draft_window: int | None = declare(
        help="the draft model's sliding attention window",
        flags=("--speculative-draft-window-size", "--speculative-dflash-draft-window-size"),
        algorithms=WINDOWED,
        low=1,
        label="window",
        editor=True,
    )
    dspark_block_size: int | None = declare(
        help="DSPARK's gamma: drafts proposed per verify (the verify window is gamma + 1)",
        flags=("--speculative-dspark-block-size",),
        algorithms=("DSPARK",),
        low=1,
        why="DSPARK drafts at least 1 token",
        label="gamma",
        editor=True,
    )
    dspark_ragged_verify: str | None = declare(
        help="DSPARK's ragged verify: static, cap-accept or compact (cap len shows in the last two)",
        env="SGLANG_RAGGED_VERIFY_MODE",
        algorithms=("DSPARK",),
        choices=("static", "cap-accept", "compact"),
        label="ragged",
        editor=True,
    )
    dspark_sps_table: str | None = declare(
        help="DSPARK's pre-profiled SPS cost table (JSON) on the host",
        flags=("--speculative-dspark-sps-table-path",),
        algorithms=("DSPARK",),
    )
    dspark_confidence_sts: str | None = declare(
        help="DSPARK's STS calibration (JSON) on the host",
        flags=("--speculative-dspark-confidence-sts-path",),
        algorithms=("DSPARK",),
    )
    dspark_align_verify: bool = declare(
        False,
        help="DSPARK compact mode: align verify tokens to the CUDA-graph tier",
        flags=("--speculative-dspark-align-verify-tokens-to-graph-tier",),
        algorithms=("DSPARK",),
    )
    ngram_min_bfs_breadth: int | None = declare(
        help="NGRAM's minimum BFS breadth", flags=("--speculative-ngram-min-bfs-breadth",), algorithms=("NGRAM",),
        low=1,
    )  # fmt: skip
    ngram_max_bfs_breadth: int | None = declare(
        help="NGRAM's maximum BFS breadth (its topk)",
        flags=("--speculative-ngram-max-bfs-breadth",),
        algorithms=("NGRAM",),
        low=1,
        label="breadth",
        editor=True,
    )
    ngram_match_type: str | None = declare(
        help="NGRAM's cache-tree match type",
        flags=("--speculative-ngram-match-type",),
        algorithms=("NGRAM",),
        flag_choices=True,
    )
    ngram_max_trie_depth: int | None = declare(
        help="NGRAM's trie depth",
        flags=("--speculative-ngram-max-trie-depth",),
        algorithms=("NGRAM",),
        low=1,
        label="trie",
        editor=True,
    )
    ngram_capacity: int | None = declare(
        help="NGRAM's cache capacity", flags=("--speculative-ngram-capacity",), algorithms=("NGRAM",), low=1
    )
    ngram_external_corpus: str | None = declare(
        help="a JSONL corpus on the host pre-loaded into NGRAM's SAM",
        flags=("--speculative-ngram-external-corpus-path",),
        algorithms=("NGRAM",),
    )
    ngram_external_sam_budget: int | None = declare(
        help="draft nodes reserved for the external corpus",
        flags=("--speculative-ngram-external-sam-budget",),
        algorithms=("NGRAM",),
        low=0,
    )
    ngram_external_corpus_max_tokens: int | None = declare(
        help="the external corpus's token limit",
        flags=("--speculative-ngram-external-corpus-max-tokens",),
        algorithms=("NGRAM",),
        low=1,
    )
    draft_attention_backend: str | None = declare(
        help="the draft model's attention backend (an MLA target's non-MLA draft needs one, SGLang #23490)",
        flags=("--speculative-draft-attention-backend",),
        algorithms=DRAFTED,
        label="draft attn",
        editor=True,
    )
    moe_runner_backend: str | None = declare(
        help="the draft model's MoE runner backend",
        flags=("--speculative-moe-runner-backend",),
        algorithms=DRAFTED,
        flag_choices=True,
    )
    extra_args: tuple[str, ...] = declare(tuple, help="more launch flags, full names")
    env: dict[str, str] = declare(dict, help="environment variables of the server", saved=False)  # noqa: RUF009
    # Configured host names of a multi-node server (rank 0 first; backend.serve.multinode); () serves on one host.
    nodes: tuple[str, ...] = declare(tuple, help="hosts of a multi-node server, rank 0 first", saved=False)
    # Where the server listens: its host's loopback. Not configured: a fleet's replica on another machine than
    # the router listens on that machine's address (backend.fleet.fleets.replica_profile).
    listen: str = "127.0.0.1"


def _declared_fields() -> tuple[Declared, ...]:
    import typing
    from dataclasses import fields

    hints = typing.get_type_hints(ProfileConfig)
    out = []
    for f in fields(ProfileConfig):
        if "declared" not in f.metadata:
            continue
        kind = hints[f.name]
        optional = type(None) in typing.get_args(kind)
        if optional:  # X | None: X
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        declared = f.metadata["declared"]
        out.append(replace(declared, name=f.name, kind=typing.get_origin(kind) or kind, optional=optional))
    return tuple(out)


PROFILE_FIELDS: tuple[Declared, ...] = _declared_fields()  # nodes last: settings checks them against the hosts
FIELD = {d.name: d for d in PROFILE_FIELDS}


@dataclass(frozen=True)
class TrainingConfig:
    """A SpecForge fine-tune (``[trainings.NAME]``): the drafter it starts from (a configured drafter's name
    or a host path; None trains from scratch), the data (a prepared hidden-states folder or a data file),
    the output folder on the host, SpecForge's era and command, the serving profile its checkpoints are
    served with, and the overrides SpecForge takes."""

    name: str
    data: str
    output: str
    init: str | None = None
    target: str | None = None  # None: the configured target
    era: str = "unified"  # "unified" (`specforge train -c`) or "script" (`scripts/train_eagle3.py`)
    command: tuple[str, ...] = ()  # () : `specforge` on the host's Python's PATH, or torchrun for the script
    script: str = "scripts/train_eagle3.py"  # the script era's script, relative to the host's workdir
    profile: str | None = None  # None: the profile serving ``init``, else eagle3-aq
    vocab_mapping: str | None = None
    eval_data: str | None = None
    run_id: str | None = None  # None: the training's name
    epochs: int | None = None
    max_steps: int | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    max_length: int | None = None
    ttt_length: int | None = None
    save_interval: int | None = None
    eval_interval: int | None = None
    log_interval: int | None = None
    gpus: int = 8
    env: dict[str, str] = field(default_factory=dict)


ROUTER_POLICIES = ("cache_aware", "round_robin", "random", "power_of_two", "manual")  # sglang-router 0.3.2's


@dataclass(frozen=True)
class ReplicaConfig:
    """One SGLang server of a fleet: a profile served on a host, on the profile's port unless it names one."""

    host: str
    profile: str
    port: int


@dataclass(frozen=True)
class RouterConfig:
    """The sglang-router in front of a fleet's replicas, run on ``host``'s Python (defaults as the router's,
    but port 8000: its own default 30000 is SGLang's)."""

    host: str
    port: int = 8000
    policy: str = "cache_aware"
    prometheus_port: int = 29000


@dataclass(frozen=True)
class FleetConfig:
    """``[fleets.NAME]``: replicas (profile × hosts, or several on one host by port) behind one router."""

    name: str
    replicas: tuple[ReplicaConfig, ...]
    router: RouterConfig


@dataclass(frozen=True)
class Reference:
    """The operator's measured numbers every chart and verdict is judged against."""

    baseline_tok_s: float = 82.0
    cycle_ms: float = 30.0
    gpu_hour_usd: float | None = None  # one GPU's price per hour: costs in dollars, else in GPU-seconds


@dataclass(frozen=True)
class Settings:
    default_host: str
    hosts: dict[str, HostConfig]
    target: str
    drafters: dict[str, DrafterConfig]
    profiles: dict[str, ProfileConfig]
    reference: Reference
    source: str  # the file these came from, or "built-in defaults"
    trainings: dict[str, TrainingConfig] = field(default_factory=dict)
    fleets: dict[str, FleetConfig] = field(default_factory=dict)

    def host(self, name: str) -> HostConfig:
        try:
            return self.hosts[name]
        except KeyError:
            known = ", ".join(sorted(self.hosts)) or "none"
            raise ConfigError(f"unknown host {name!r} (configured: {known}; or use local or ssh://user@addr)") from None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def builtin_defaults() -> Settings:
    """The operator's set-up: Kimi-K2.5 on gpu-box, their own drafter and AQ-MedAI's, three profiles."""
    eagle: dict[str, Any] = {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4}
    return Settings(
        default_host=DEFAULT_HOST,
        hosts={
            DEFAULT_HOST: HostConfig(
                name=DEFAULT_HOST,
                url="ssh://root@10.1.230.174",
                python="/root/ml-env/bin/python3",
                workdir="/data/eagle3",
            )
        },
        target="/data/models/Kimi-K2.5",
        drafters={
            "ours": DrafterConfig(name="ours", path="/data/eagle3/output_100k_sglang/4"),
            "aq-medai": DrafterConfig(
                name="aq-medai", path="/data/eagle3/aq_medai_k2", repo="AQ-MedAI/Kimi-K2-Instruct-eagle3"
            ),
        },
        profiles={
            "baseline": ProfileConfig(name="baseline"),
            "eagle3-ours": ProfileConfig(name="eagle3-ours", drafter="ours", **eagle),
            "eagle3-aq": ProfileConfig(name="eagle3-aq", drafter="aq-medai", **eagle),
        },
        reference=Reference(),
        source="built-in defaults",
    )


def default_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("specdeck")) / "config.toml"


def sandbox_config_path() -> Path:
    """The config `specdeck sandbox up` writes (backend/sandbox/environment.py keeps its sandbox beside it)."""
    from platformdirs import user_state_dir

    return Path(user_state_dir("specdeck")) / "sandbox" / "config.toml"


def is_sandbox_name(name: str | None) -> TypeGuard[str]:
    """``sandbox``, ``sandbox-2``, …: the names `sandbox up` gives its hosts."""
    return name is not None and (name == "sandbox" or (name.startswith("sandbox-") and name[8:].isdigit()))


def config_path(explicit: str | os.PathLike[str] | None = None, host: str | None = None) -> tuple[Path, bool]:
    """The config file to read and whether it must exist: ``--config``, ``SPECDECK_CONFIG``, else the user's
    file, except that ``--host sandbox`` (or ``sandbox-N``) reads the sandbox's own config unless the user's
    file names such a host itself: the sandbox is reachable by name after `sandbox up`, no path to copy."""
    if explicit:
        return Path(explicit).expanduser(), True
    if env := os.environ.get("SPECDECK_CONFIG"):
        return Path(env).expanduser(), True
    default = default_config_path()
    if is_sandbox_name(host) and not _names_host(default, host):
        return sandbox_config_path(), True
    return default, False


def _names_host(path: Path, name: str) -> bool:
    """Whether the config file at ``path`` has a ``[hosts.NAME]`` table (False when it cannot be read)."""
    import tomllib

    try:
        return name in tomllib.loads(path.read_text()).get("hosts", {})
    except (OSError, tomllib.TOMLDecodeError, AttributeError):
        return False


def load(explicit: str | os.PathLike[str] | None = None, host: str | None = None) -> Settings:
    """Read and validate the effective settings (defaults overlaid by the config file); ``host`` is the
    ``--host`` asked for (see ``config_path``)."""
    path, required = config_path(explicit, host)
    if not path.exists():
        if path == sandbox_config_path() and not explicit:
            raise ConfigError(f"there is no sandbox yet: run `specdeck sandbox up` first (it writes {path})")
        if required:
            raise ConfigError(f"config file {path} does not exist (run `specdeck config init --config {path}`)")
        return builtin_defaults()
    import tomllib  # here, not at the top: a command with no config file to read skips its ~5 ms import

    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    return parse(data, str(path))


# --- writing profiles back ---------------------------------------------------------------------------------

_SAVED = tuple(d.name for d in PROFILE_FIELDS if d.saved)


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


def save_profile(settings: Settings, profile: ProfileConfig) -> tuple[Settings, Path]:
    """Write ``profile`` into the config file ``settings`` came from (the default file, created from the init
    template, when they are the built-in defaults), keeping the file's comments and layout; returns the
    settings with the profile in them and the file written. Only keys that change are written (keys set to None
    are removed); env is left alone.

    Raises ConfigError when the file cannot be read or written, or the result would not validate."""
    import tomlkit

    def edit(doc: TOMLDocument) -> None:
        profiles = doc.setdefault("profiles", tomlkit.table(is_super_table=True))
        if profile.name not in profiles:
            profiles[profile.name] = tomlkit.table()
        table = profiles[profile.name]
        before = settings.profiles.get(profile.name) or ProfileConfig(name=profile.name)
        for key in _SAVED:
            value = getattr(profile, key)
            if key not in table and value == getattr(before, key):
                continue  # what the file leaves to the defaults stays left to them
            if key == "extra_args":
                value = list(value) or None
            elif isinstance(value, bool) and not value:
                value = None  # a switch left off is the default: the key goes
            if value is None:
                table.pop(key, None)
            elif table.get(key) != value:
                table[key] = value

    saved, path = _edit_config(settings, edit)
    return replace(settings, profiles={**settings.profiles, profile.name: saved.profiles[profile.name]}), path


def save_drafter(settings: Settings, drafter: DrafterConfig) -> tuple[Settings, Path]:
    """Write ``[drafters.NAME]`` (its repo, folder, revision and files: the defaults left out) into the config
    file as ``save_profile`` writes a profile; returns the settings with the drafter in them and the file."""
    import tomlkit

    def edit(doc: TOMLDocument) -> None:
        drafters = doc.setdefault("drafters", tomlkit.table(is_super_table=True))
        if drafter.name not in drafters:
            drafters[drafter.name] = tomlkit.table()
        table = drafters[drafter.name]
        for key, value in (("repo", drafter.repo), ("revision", drafter.revision), ("path", drafter.path)):
            if value is None:
                table.pop(key, None)
            elif table.get(key) != value:
                table[key] = value
        if drafter.files != DrafterConfig.files:
            table["files"] = list(drafter.files)
        else:
            table.pop("files", None)

    saved, path = _edit_config(settings, edit)
    return replace(settings, drafters={**settings.drafters, drafter.name: saved.drafters[drafter.name]}), path


def save_host(settings: Settings, name: str, url: str) -> tuple[Settings, Path]:
    """Add host ``name`` at ``url`` (an ssh:// address typed in the panel's host switcher) to the config file, as
    ``save_profile`` writes a profile; returns the settings with the host in them and the file written."""
    import tomlkit

    if problem := ssh_url_problem(url):
        raise ConfigError(problem)

    def edit(doc: TOMLDocument) -> None:
        hosts = doc.setdefault("hosts", tomlkit.table(is_super_table=True))
        if name in hosts:
            raise ConfigError(f"a host {name} is configured already: pick it in the host switcher")
        table = tomlkit.table()
        table["url"] = url
        hosts[name] = table

    saved, path = _edit_config(settings, edit)
    return replace(settings, hosts={**settings.hosts, name: saved.hosts[name]}), path


def _edit_config(settings: Settings, edit: Callable[[Any], None]) -> tuple[Settings, Path]:
    """Apply ``edit`` to the tomlkit document of ``settings``' config file and write it back (atomically, only
    if the result loads); returns the file's new settings and its path."""
    import tomlkit

    if settings.source == "built-in defaults":
        path = default_config_path()
    elif Path(settings.source).is_file():
        path = Path(settings.source)
    else:
        raise ConfigError(f"these settings were not read from a config file ({settings.source}): nothing to save to")
    try:
        text = path.read_text() if path.exists() else INIT_TEMPLATE
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from None
    doc = tomlkit.parse(text)
    edit(doc)
    new_text = tomlkit.dumps(doc)
    import tomllib

    saved = parse(tomllib.loads(new_text), str(path))  # never write a file that would not load
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(new_text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write it: {exc.strerror}") from None
    return saved, path


# --- validation -------------------------------------------------------------------------------------------


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


INIT_TEMPLATE = """\
# specdeck configuration. Every key is optional: what you leave out keeps the built-in default.
# Validate with `specdeck config show`.

# The host `specdeck` (and the TUI) uses when --host is not given.
default_host = "gpu-box"

# The target model's folder on the host.
target = "/data/models/Kimi-K2.5"

[hosts.gpu-box]
url = "ssh://root@10.1.230.174"        # ssh://user@addr[:port]; ~/.ssh/config (ProxyJump, IdentityFile) applies
python = "/root/ml-env/bin/python3"    # the host's interpreter (runs the agent, sglang, huggingface_hub)
workdir = "/data/eagle3"               # specdeck keeps its state under <workdir>/.specdeck
# identity = "~/.ssh/id_ed25519"
# known_hosts = "~/.ssh/known_hosts"

[drafters.ours]
path = "/data/eagle3/output_100k_sglang/4"

[drafters.aq-medai]
repo = "AQ-MedAI/Kimi-K2-Instruct-eagle3"
files = ["config.json", "model.safetensors"]
path = "/data/eagle3/aq_medai_k2"

[profiles.baseline]
tp = 8
port = 30000

[profiles.eagle3-ours]
drafter = "ours"
algorithm = "EAGLE3"
steps = 3
topk = 1
draft_tokens = 4

[profiles.eagle3-aq]
drafter = "aq-medai"
algorithm = "EAGLE3"
steps = 3
topk = 1
draft_tokens = 4
# extra_args = ["--mem-fraction-static", "0.85"]
# env = { SGLANG_ENABLE_SPEC_V2 = "1" }   # SGLang 0.5.6 only: 0.5.23 overlaps by default and ignores it

[reference]
baseline_tok_s = 82   # measured tok/s without speculation, one stream
cycle_ms = 30         # one verify cycle; break-even accept length = cycle × baseline = 2.46
# gpu_hour_usd = 3.5  # one GPU's price per hour: costs per million tokens in dollars (else GPU-seconds)
"""
