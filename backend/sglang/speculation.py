"""What SGLang's speculative algorithms take and refuse, release by release: the rules preflight checks a profile
against, each said in one sentence with SGLang's own words where it has them and the source that found it.

Read from the PyPI wheels 0.5.6-0.5.23 (research notes of issue 36, §2 and §5; citations ``release:path:line``
of the wheel). SGLang refuses some of these at startup (a ValueError or an assert: the server never comes up)
and quietly works around others (adaptive falls back to static steps, spec v1 replaces spec v2, a flag has no
effect): both are failures here when the profile would not run as written, warnings when it runs but not as
well as it could. A rule that needs the drafter's or the target's config runs in ``drafter_rules`` (host
preflight); the others in ``profile_rules`` (no host needed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from backend.settings.model import ADAPTIVE, EAGLE_FAMILY, PROFILE_FIELDS, ProfileConfig
from backend.sglang import adaptive
from backend.sglang.versions import NEWEST
from backend.sglang.versions import parse as parse_version

Status = Literal["ok", "warn", "fail"]

# The first release that takes each algorithm (argparse choices to 0.5.11, the registry after; notes §2.1).
SINCE = {"DFLASH": (0, 5, 11), "DSPARK": (0, 5, 16)}
# Backends a non-MLA draft model cannot run on (draft_utils.py:358-362 raises for trtllm_mla; the others are
# MLA-only kernels as well).
MLA_ONLY_BACKENDS = ("trtllm_mla", "flashmla", "cutlass_mla", "flashinfer_mla")
# SGLANG_ENABLE_SPEC_V2: an opt-in 0.5.6-0.5.10, on by default 0.5.11-0.5.13, removed from 0.5.14 (notes §5.1).
SPEC_V2_DEFAULT_ON = (0, 5, 11)
SPEC_V2_REMOVED = (0, 5, 14)
TOPK_SPEC_V2_ERROR = ((0, 5, 7), (0, 5, 11))  # "Spec v2 currently only supports topk = 1" raised in these
TOPK_SPEC_V1 = ((0, 5, 11), (0, 5, 13))  # topk > 1 quietly runs spec v1 (no overlap) in these
DP_ACCEPT_FIX = (0, 5, 8)  # PR #16310's fix of issue #16274 ships in the 0.5.8 wheel
_OFF = ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Rule:
    """One rule's verdict on a profile: ``name`` is the check's name in preflight."""

    name: str
    status: Status
    message: str


def numbers_of(version: str | None) -> tuple[int, int, int]:
    return parse_version(version or NEWEST) or parse_version(NEWEST)  # type: ignore[return-value]


def _spec_v2(profile: ProfileConfig, numbers: tuple[int, int, int], args: dict[str, Any]) -> bool:
    """Whether the overlap scheduler runs the speculation (spec v2), as the release decides it."""
    if args.get("disable_overlap_schedule"):
        return False
    env = profile.env.get("SGLANG_ENABLE_SPEC_V2")
    if numbers >= SPEC_V2_REMOVED:
        return True
    on_by_default = numbers >= SPEC_V2_DEFAULT_ON
    return on_by_default if env is None else env.strip().lower() not in _OFF


def profile_rules(profile: ProfileConfig, version: str | None, args: dict[str, Any]) -> list[Rule]:
    """The rules of ``profile``'s algorithm on SGLang ``version`` (None: the newest known): ``args`` are the
    launch flags' values by ServerArgs field (``{}`` when the command does not parse: the flags check says why)."""
    algorithm = profile.algorithm
    if not algorithm:
        return []
    numbers = numbers_of(version)
    shown = version or NEWEST
    out: list[Rule] = []
    since = SINCE.get(algorithm)
    if since and numbers < since:
        first = ".".join(map(str, since))
        out.append(Rule("algorithm", "fail", f"sglang {shown} has no {algorithm}: it first shipped in {first}"))
        return out

    out += _applies(profile)
    dp = bool(args.get("enable_dp_attention"))
    if algorithm in EAGLE_FAMILY:
        out += _eagle_rules(profile, numbers, shown, args, dp)
    elif algorithm == "DFLASH":
        out += _dflash_rules(profile, args, dp)
    elif algorithm == "DSPARK":
        out += _dspark_rules(profile, args, dp)
    elif algorithm == "NGRAM":
        out += _ngram_rules(profile, dp)
    out += _adaptive_rules(profile, numbers, shown, args, dp)
    return out


def _blackwell(gpu: str) -> bool:
    """A Blackwell data-centre GPU (B100/B200/B300, GB200/GB300), where SGLang's MLA default is trtllm_mla."""
    return re.search(r"\bG?B[123]00\b", gpu) is not None


def _applies(profile: ProfileConfig) -> list[Rule]:
    """Fields set that the profile's algorithm does not take (SGLang ignores them or refuses them)."""
    out = []
    for declared in PROFILE_FIELDS:
        value = getattr(profile, declared.name)
        if value in (None, False) or declared.applies(profile.algorithm):
            continue
        takers = ", ".join(declared.algorithms or ())
        out.append(
            Rule(
                declared.name.replace("_", " "),
                "fail",
                f"{declared.name} applies to {takers} only, not {profile.algorithm}: clear it",
            )
        )
    return out


def _eagle_rules(
    profile: ProfileConfig, numbers: tuple[int, int, int], shown: str, args: dict[str, Any], dp: bool
) -> list[Rule]:
    out = []
    if profile.algorithm == "STANDALONE" and dp:  # 0.5.23 speculative_hook.py:1078-1084
        out.append(
            Rule("dp attention", "fail", "Currently standalone speculative decoding does not support dp attention.")
        )
    topk = profile.topk
    spec_v2 = _spec_v2(profile, numbers, args)
    if topk is not None and topk > 1 and not profile.adaptive and spec_v2:
        if TOPK_SPEC_V2_ERROR[0] <= numbers < TOPK_SPEC_V2_ERROR[1]:  # 0.5.7 server_args.py:2000-2020
            out.append(
                Rule(
                    "spec v2",
                    "fail",
                    f"sglang {shown} refuses topk {topk} with SGLANG_ENABLE_SPEC_V2 on ('Spec v2 currently only "
                    "supports topk = 1 for speculative decoding.'): set topk 1 or drop the variable",
                )
            )
        elif TOPK_SPEC_V1[0] <= numbers < TOPK_SPEC_V1[1]:  # 0.5.11 server_args.py:3460-3480
            out.append(
                Rule(
                    "spec v2",
                    "warn",
                    f"sglang {shown} runs topk {topk} on spec v1 without the overlap scheduler ('spec v2 currently "
                    "only supports topk = 1'): topk 1 keeps the overlap",
                )
            )
    if dp and spec_v2 and numbers < DP_ACCEPT_FIX:
        out.append(
            Rule(
                "dp attention",
                "warn",
                f"sglang {shown} with spec v2 and DP attention accepts ~37% fewer tokens (accept length 2.35 -> 1.48 "
                "in SGLang #16274; fixed in 0.5.8 by PR #16310): upgrade, or run without --enable-dp-attention",
            )
        )
    return out


def _dflash_rules(profile: ProfileConfig, args: dict[str, Any], dp: bool) -> list[Rule]:
    out = []
    block, tokens = profile.dflash_block_size, profile.draft_tokens
    if block is not None and tokens is not None and block != tokens:  # 0.5.23 speculative_hook.py:_handle_dflash
        out.append(
            Rule(
                "block size",
                "fail",
                "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ: "
                f"for DFLASH they must match ({tokens} vs {block}); set only dflash_block_size",
            )
        )
    size = block or tokens
    if profile.draft_window is not None and size is not None and profile.draft_window < size:
        out.append(
            Rule(
                "draft window",
                "fail",
                f"--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size): window "
                f"{profile.draft_window} < block {size}",
            )
        )
    if dp and not args.get("enable_dp_lm_head"):
        out.append(Rule("dp attention", "fail", "DFLASH with dp attention requires --enable-dp-lm-head."))
    if (args.get("pp_size") or 1) > 1:
        out.append(Rule("pp", "fail", "Currently DFLASH speculative decoding only supports pp_size == 1."))
    return out


def _dspark_rules(profile: ProfileConfig, args: dict[str, Any], dp: bool) -> list[Rule]:
    out = []
    gamma, tokens = profile.dspark_block_size, profile.draft_tokens
    if gamma is not None and tokens is not None and tokens != gamma + 1:  # 0.5.23 _handle_dspark
        out.append(
            Rule(
                "gamma",
                "fail",
                f"DSpark speculative_num_draft_tokens must equal gamma + 1 (= {gamma + 1} for gamma={gamma}), but "
                f"got speculative_num_draft_tokens={tokens}: set only dspark_block_size",
            )
        )
    mode = profile.dspark_ragged_verify or profile.env.get("SGLANG_RAGGED_VERIFY_MODE") or "static"
    if profile.dspark_align_verify and mode != "compact":
        out.append(
            Rule(
                "ragged verify",
                "warn",
                "--speculative-dspark-align-verify-tokens-to-graph-tier only takes effect with "
                f"SGLANG_RAGGED_VERIFY_MODE=compact (got {mode!r}); it will be a no-op",
            )
        )
    if profile.dspark_sps_table and mode == "static":
        out.append(
            Rule(
                "ragged verify",
                "warn",
                "--speculative-dspark-sps-table-path feeds the ragged-verify budget scheduler, which is off under "
                "SGLANG_RAGGED_VERIFY_MODE=static; it will be a no-op",
            )
        )
    if dp and not args.get("enable_dp_lm_head"):
        out.append(Rule("dp attention", "fail", "DSpark with dp attention requires --enable-dp-lm-head."))
    return out


def _ngram_rules(profile: ProfileConfig, dp: bool) -> list[Rule]:
    out = []
    if dp:  # 0.5.23 _handle_ngram
        out.append(Rule("dp attention", "fail", "Currently ngram speculative decoding does not support dp attention."))
    budget = profile.ngram_external_sam_budget
    if profile.ngram_external_corpus and not budget:
        out.append(
            Rule(
                "ngram corpus",
                "fail",
                "--speculative-ngram-external-sam-budget must be positive when "
                "--speculative-ngram-external-corpus-path is set",
            )
        )
    tokens = profile.draft_tokens or 12  # SGLang's NGRAM default
    if budget and budget > tokens - 1:
        out.append(
            Rule(
                "ngram corpus",
                "fail",
                "speculative_ngram_external_sam_budget must be less than or equal to speculative_num_draft_tokens - 1 "
                f"({tokens - 1}), got {budget}",
            )
        )
    return out


def _adaptive_rules(
    profile: ProfileConfig, numbers: tuple[int, int, int], shown: str, args: dict[str, Any], dp: bool
) -> list[Rule]:
    """--speculative-adaptive: where SGLang would refuse it, or quietly serve static steps instead."""
    if not profile.adaptive:
        if profile.adaptive_config is not None:
            return [Rule("adaptive", "warn", "adaptive_config is set but adaptive is off: SGLang would not read it")]
        return []
    if numbers < adaptive.FIRST:
        return [Rule("adaptive", "fail", f"sglang {shown} has no --speculative-adaptive (first in 0.5.11)")]
    if profile.algorithm not in ADAPTIVE:
        return []  # _applies said it
    fallback = "SGLang would log 'speculative_adaptive disabled: {}' and serve static steps"
    reasons = []
    if profile.topk is not None and profile.topk != 1:  # adaptive_spec_params.py:61-99
        reasons.append(f"speculative_eagle_topk={profile.topk} (only topk=1 is supported)")
    if dp:
        reasons.append("attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)")
    for field, what in (
        ("enable_multi_layer_eagle", "MultiLayerEagleWorkerV2 does not implement adaptive"),
        ("enable_two_batch_overlap", "adaptive state swap would discard the TboAttnBackend wrapper"),
        ("enable_pdmux", "adaptive state swap does not update decode_attn_backend_group"),
    ):
        if args.get(field):
            reasons.append(f"{field}=True is not supported ({what})")
    if numbers < adaptive.OVERLAP_FROM and _spec_v2(profile, numbers, args):
        reasons.append("the overlap scheduler (spec v2) is enabled (adaptive is only implemented for EAGLEWorker v1)")
    out = [Rule("adaptive", "fail", fallback.format(reason) + ": fix the profile") for reason in reasons]
    if args.get("lora_paths") or args.get("enable_lora"):  # lora_hook.py:277-301: a ValueError at startup
        out.append(
            Rule("adaptive", "fail", "LoRA with EAGLE/NEXTN/EAGLE3 speculative decoding does not support adaptive")
        )
    config = profile.adaptive_config
    problem = adaptive.problem(config if config is not None else adaptive.default_config(shown), shown, profile.steps)
    if problem:
        out.append(Rule("adaptive config", "fail", problem))
    elif not out:
        tiers = adaptive.candidate_union(config or adaptive.default_config(shown))
        whose = "the profile's ladder" if config is not None else f"sglang {shown}'s default ladder"
        out.append(Rule("adaptive", "ok", f"SGLang picks the steps per batch among tiers {tiers} ({whose})"))
    if profile.draft_tokens is not None and profile.steps is not None and profile.draft_tokens != profile.steps + 1:
        out.append(
            Rule(
                "adaptive",
                "warn",
                f"adaptive sets draft tokens to steps + 1 at every tier: draft_tokens {profile.draft_tokens} is "
                "overridden (clear it)",
            )
        )
    return out


def drafter_rules(
    profile: ProfileConfig,
    target: dict[str, Any] | None,
    drafter: dict[str, Any] | None,
    args: dict[str, Any],
    gpus: list[str] | None = None,
) -> list[Rule]:
    """Rules that need the target's and the drafter's config.json (``checkpoints.language_config`` of each) and
    the host's GPU names (None: unknown)."""
    out = []
    if profile.algorithm in EAGLE_FAMILY and target and drafter is not None:
        target_mla = target.get("kv_lora_rank") is not None
        draft_mla = drafter.get("kv_lora_rank") is not None
        if target_mla and not draft_mla and not profile.draft_attention_backend:
            backend = args.get("attention_backend")
            # SGLang #23490: the draft inherits the target's backend (model_runner.py:306-320)
            if backend in MLA_ONLY_BACKENDS:
                out.append(
                    Rule(
                        "draft attention",
                        "fail",
                        f"the target is MLA but {profile.drafter} is not, and its draft would inherit {backend} "
                        f"('{backend} backend requires MLA model'; SGLang #23490): set draft_attention_backend "
                        '= "flashinfer" (or "trtllm_mha")',
                    )
                )
            elif backend is None and any(_blackwell(name) for name in gpus or ()):
                out.append(
                    Rule(
                        "draft attention",
                        "warn",
                        f"the target is MLA but {profile.drafter} is not: on Blackwell SGLang may pick trtllm_mla "
                        "for the target and the draft inherits it and fails to start (SGLang #23490, GB300); set "
                        'draft_attention_backend = "flashinfer" to be safe',
                    )
                )
    return out
