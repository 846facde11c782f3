"""`specdeck inspect` and `specdeck diff`: a checkpoint from its headers, two drafters side by side, the verdict."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared.units import counted, human_bytes
from backend.cli.common import add_json, connect, emit_json, emit_json_line, load_settings
from backend.cli.main import command
from backend.connection import resolve_host
from backend.drafters import checkpoints as ck
from backend.drafters.checkpoint_diff import CheckpointDiff, format_params, format_tensor, format_totals, format_value
from backend.drafters.sources import (
    HOST,
    HUB,
    Source,
    Sources,
    check_weights_sources,
    hub_endpoint,
    parse_source,
    read_diff,
    target_source,
)
from backend.errors import UsageError
from backend.hosttext import unguarded, visible
from backend.settings.model import HostConfig, Settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from backend.cli.main import Subcommands

SOURCE_HELP = "a configured drafter name, a path on the host, file://PATH on this machine, or hf://org/name[@revision]"
DIFF_EPILOG = """\
The verdict judges A and B against the target's config.json (--target: a model folder or config.json on the
host, file://PATH, hf://org/name; default the configured target). It is data, not an error: the exit code is 0
whether the drafters are compatible or not, unless --fail-incompatible is given (then 1 when either is not).
Exit 2: a checkpoint is missing, unreadable or corrupt, or the --target given cannot be read (when the default
target is not on the host yet, the verdict says so in a note). Exit 1: the hub refused or could not be reached,
or --weights could not run on the host. Exit 3: the host could not be reached.

With --weights and --json, stdout is JSON lines: one {"event": "tensor", ...} per compared tensor as it is
done, then the diff (with a "weights" key) as the last line.
"""
SHOW_ALL_TENSORS = 30  # up to this many tensor rows are listed in full; more, and only differences


def register(sub: Subcommands) -> None:
    p = command(sub, "inspect", "Read a checkpoint's config.json and safetensors headers (never the weights).")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help=SOURCE_HELP)
    _add_endpoint(p)
    add_json(p)
    p.set_defaults(run=inspect_cmd)

    p = command(
        sub,
        "diff",
        "Compare two drafters' configs and tensor shapes side by side and judge both against the target.",
        epilog=DIFF_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the drafter you have: " + SOURCE_HELP)
    p.add_argument("b", metavar="B", help="the drafter to compare with it (same forms as A)")
    p.add_argument("--target", metavar="T", help="the target model: folder or config.json on the host, file://, hf://")
    p.add_argument(
        "--weights",
        action="store_true",
        help="also compare the weights on the host (relative L2, cosine per tensor; needs numpy there)",
    )
    p.add_argument("--all", action="store_true", help="list every config key and tensor, not only the differences")
    p.add_argument("--fail-incompatible", action="store_true", help="exit 1 when the verdict is incompatible")
    _add_endpoint(p)
    add_json(p)
    p.set_defaults(run=diff_cmd)


def _add_endpoint(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="hub for hf:// sources (default: the host's hub_endpoint, HF_ENDPOINT, or huggingface.co)",
    )


def _sources(args: argparse.Namespace) -> tuple[Sources, Settings, HostConfig]:
    """The sources reader for this command: the host resolved now, connected only if a source needs it."""
    settings = load_settings(args)
    overrides = {k: getattr(args, k) for k in ("identity", "known_hosts", "python", "workdir")}
    host = resolve_host(settings, args.host, **overrides)
    return Sources(host, lambda: connect(args, settings), hub_endpoint(host, args.endpoint)), settings, host


# --- inspect ---


async def inspect_cmd(args: argparse.Namespace) -> int:
    sources, settings, host = _sources(args)
    source = parse_source(args.checkpoint, settings, host)
    try:
        info = await sources.inspect(source)
    finally:
        await sources.aclose()
    if args.json:
        emit_json({**info, "config_facts": ck.config_facts(info["config"])})
    else:
        print("\n".join(render_inspect(info, _where(source, host.name))))
    return 0


def _where(source: Source, host: str) -> str:
    return {HOST: f"on {host}", HUB: "on the hub"}.get(source.kind, "on this machine")


def _config_line(cfg: dict[str, Any] | None) -> str:
    if cfg is None:
        return "config: none (no config.json)"
    parts = [", ".join(a for a in cfg.get("architectures") or [] if isinstance(a, str)) or "no architectures"]
    for key, label in (("hidden_size", "hidden"), ("num_hidden_layers", "layers"), ("vocab_size", "vocab")):
        if key in cfg:
            parts.append(f"{label} {cfg[key]}")
    if "draft_vocab_size" in cfg:
        parts.append(f"draft vocab {cfg['draft_vocab_size']}")
    aux = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if aux is not None:
        parts.append(f"aux layers {aux}")
    return "config: " + ", ".join(parts)


def render_inspect(info: dict[str, Any], where: str) -> list[str]:
    """``specdeck inspect`` without --json: config line, files, metadata, the tensor table, notes."""
    lines = [f"{info['path']}  ({where})", _config_line(info["config"])]
    for f in info["files"]:
        lines.append(f"file: {f['name']}  {human_bytes(f['bytes'])}, {counted(f['tensors'], 'tensor')}")
    if info["metadata"]:
        lines.append("metadata: " + ", ".join(f"{k}={v}" for k, v in sorted(info["metadata"].items())))
    tensors = info["tensors"]
    if info["files"]:
        params, size = format_params(info["total_params"]), human_bytes(info["total_bytes"])
        lines.append(f"{counted(len(tensors), 'tensor')}, {params} params, {size}")
        rows: list[tuple[str, ...]] = [("tensor", "dtype", "shape", "size")]
        rows += [(n, t["dtype"], str(t["shape"]), human_bytes(t["bytes"])) for n, t in tensors.items()]
        lines += _table(rows)
    else:
        lines.append("tensors: none read (no safetensors file): the shapes are unchecked, not missing")
    kind = ck.drafter_kind(info)
    if kind == "EAGLE":
        lines.append("drafter: EAGLE-1/2 (not EAGLE-3): --speculative-algorithm EAGLE")
    elif kind:
        lines.append(f"drafter: {kind}: --speculative-algorithm {kind}")
    nested = ck.drafter_config(info["config"])[1]
    if nested:
        lines.append(f"nested config: read from {nested}")
    lines += [f"config says: {fact}" for fact in ck.config_facts(info["config"])]
    lines += [f"note: {n}" for n in info.get("notes") or []]
    return lines


def _table(rows: Sequence[tuple[str, ...]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))).rstrip() for r in rows]


# --- diff ---


async def diff_cmd(args: argparse.Namespace) -> int:
    sources, settings, host = _sources(args)
    a = parse_source(args.a, settings, host)
    b = parse_source(args.b, settings, host)
    target = target_source(args.target, settings, host)
    if args.weights:
        check_weights_sources(a, b)
    try:
        result, _, _ = await read_diff(sources, a, b, target, target_required=args.target is not None)
        weights = None
        if args.weights:
            if not any(row.status == "same" for row in result.tensors):
                raise UsageError("A and B share no tensor of the same shape and dtype: there are no weights to compare")
            on_tensor = emit_json_line if args.json else _progress
            try:
                weights = await sources.compare_weights(a, b, on_tensor)
            finally:
                _progress(None)
    finally:
        await sources.aclose()
    if args.json:
        out = result.to_json() if weights is None else {**result.to_json(), "weights": weights}
        (emit_json_line if args.weights else emit_json)(out)
    else:
        print("\n".join(render_diff(result, a, b, show_all=args.all, weights=weights)))
    return 1 if args.fail_incompatible and result.verdict.compatible is False else 0


def _progress(event: dict[str, Any] | None) -> None:
    """One self-overwriting stderr line while the host compares weights (only on a terminal)."""
    if not sys.stderr.isatty():
        return
    text = "" if event is None else f"weights: {event['done']}/{event['total']} {visible(event['name'])}"
    stderr = unguarded(sys.stderr)  # our own line redraw; the tensor's name (the host's) made visible
    stderr.write("\r\x1b[K" + text)
    stderr.flush()


def render_diff(
    d: CheckpointDiff, a: Source, b: Source, show_all: bool = False, weights: dict[str, Any] | None = None
) -> list[str]:
    """``specdeck diff`` without --json: sources, config and tensor rows side by side, sizes, verdict (and the
    ``--weights`` table)."""
    sides = [("A", a.label, d.paths.a), ("B", b.label, d.paths.b)]
    rows = [(side, label, "" if path == label else path or "") for side, label, path in sides]
    lines = _table([*rows, ("target", "", d.paths.target or "none")], indent="")
    config_diff = [r for r in d.config if r.status != "same"]
    lines += ["", f"config: {len(d.config)} keys, {len(config_diff)} differ"]
    shown_keys = d.config if show_all else config_diff
    if shown_keys:
        lines += _table(
            [("key", "A", "B", "")] + [(r.key, format_value(r.a), format_value(r.b), r.status) for r in shown_keys]
        )
    hidden = len(d.config) - len(shown_keys)
    if hidden and config_diff:
        lines.append(f"  ({hidden} same keys not shown; --all lists them)")

    tensor_diff = [r for r in d.tensors if r.status != "same"]
    summary = d.summary
    lines += ["", f"tensors: {summary.a.tensors} in A, {summary.b.tensors} in B, {len(tensor_diff)} differ"]
    everything = show_all or len(d.tensors) <= SHOW_ALL_TENSORS
    shown = d.tensors if everything else tensor_diff
    if shown:
        lines += _table(
            [("tensor", "A", "B", "")] + [(r.name, format_tensor(r.a), format_tensor(r.b), r.status) for r in shown]
        )
    if not everything and len(shown) < len(d.tensors):
        lines.append(f"  ({len(d.tensors) - len(shown)} same tensors not shown; --all lists them)")

    lines += ["", f"size: A {format_totals(summary.a)}; B {format_totals(summary.b)}"]
    for group, (ga, gb) in summary.groups.items():
        if ga != gb:
            lines.append(f"  {group}: A {format_totals(ga)}; B {format_totals(gb)}")

    if weights is not None:
        lines += ["", *render_weights(weights)]

    v = d.verdict
    algos = ", ".join(f"{s} needs {sv['algorithm'] or 'an unknown algorithm'}" for s, sv in (("A", v.a), ("B", v.b)))
    lines += ["", f"verdict: {v.word.upper()} ({algos})"]
    lines += [f"  problem: {p}" for p in v.problems]
    lines += [f"  not checked: {u}" for u in v.unchecked]
    lines += [f"  note: {n}" for n in v.notes]
    return lines


def render_weights(w: dict[str, Any]) -> list[str]:
    """The --weights table: relative L2 distance ‖B−A‖/‖A‖ and cosine per tensor, then what was skipped."""

    def num(x: float | None, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    lines = [f"weights: {w['compared']} of {w['total']} tensors compared" + (" (cancelled)" if w["cancelled"] else "")]
    rows: list[tuple[str, ...]] = [("tensor", "rel L2", "cosine")]
    rows += [(r["name"], num(r["rel_l2"], ".4g"), num(r["cosine"], ".6f")) for r in w["tensors"]]
    lines += _table(rows)
    lines += [f"  skipped {s['name']}: {s['reason']}" for s in w["skipped"]]
    return lines
