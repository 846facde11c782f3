"""The config model: hosts, drafters, profiles (each field declared once, on ``ProfileConfig``), trainings,
fleets, the reference numbers and the settings that hold them, with the operator's built-in defaults.

The file they are read from is ``config_file``'s to find, load and save, ``validation``'s to check.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from backend.errors import ConfigError

DEFAULT_HOST = "gpu-box"


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
