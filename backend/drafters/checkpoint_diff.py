"""Two drafter checkpoints side by side: every config key and tensor of either, grouped (attention, mlp, fc,
lm_head, norms, vocab maps, other) with its status (same, changed, only in one), parameter totals per group,
each side's verdict against the target, and the diff as Markdown. Works on the dicts ``inspect_checkpoint``
returns, whatever their source.
"""

from __future__ import annotations

import json
from typing import Any

from backend.agent.host.shared.units import counted, human_bytes
from backend.drafters.checkpoints import verdict, verdict_word

GROUPS = ("attention", "mlp", "fc", "lm_head", "norms", "vocab maps", "other")


def flatten_config(cfg: dict[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """Nested keys joined by '.': ``{"eagle_config": {"x": 1}}`` → ``{"eagle_config.x": 1}``; lists stay."""
    out: dict[str, Any] = {}
    for key, value in (cfg or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten_config(value, name + "."))
        else:
            out[name] = value
    return out


def group_of(name: str) -> str:
    """Which summary group a tensor belongs to (see ``GROUPS``)."""
    parts = name.split(".")
    if name in ("d2t", "t2d"):
        return "vocab maps"
    if parts[0] in ("fc", "lm_head"):
        return parts[0]
    if any(part.endswith("norm") for part in parts):
        return "norms"
    if any("attn" in part for part in parts):
        return "attention"
    if "mlp" in parts:
        return "mlp"
    return "other"


def _same(x: Any, y: Any) -> bool:
    # Through JSON so 1, 1.0 and true are three different values, as they are in config.json.
    return json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)


def _status(in_a: bool, in_b: bool, same: bool, changed: str) -> str:
    if not in_b:
        return "only_a"
    if not in_a:
        return "only_b"
    return "same" if same else changed


def _totals(tensors: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "params": sum(_numel(t["shape"]) for t in tensors),
        "bytes": sum(t["bytes"] for t in tensors),
        "tensors": len(tensors),
    }


def _numel(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def diff(a: dict[str, Any], b: dict[str, Any], target: dict[str, Any] | None = None) -> dict[str, Any]:
    """Config rows, tensor rows, sizes per side and per group, and both drafters' verdicts against ``target``.

    ``a`` and ``b`` are inspect dicts; ``target`` is the target's config.json (or its inspect dict).
    """
    ca, cb = flatten_config(a.get("config")), flatten_config(b.get("config"))
    config_rows = [
        {
            "key": key,
            "a": ca.get(key),
            "b": cb.get(key),
            "status": _status(key in ca, key in cb, _same(ca.get(key), cb.get(key)), "changed"),
        }
        for key in sorted(set(ca) | set(cb))
    ]
    ta, tb = a["tensors"], b["tensors"]
    tensor_rows = []
    for name in sorted(set(ta) | set(tb)):
        sa, sb = ta.get(name), tb.get(name)
        status = _status(sa is not None, sb is not None, True, "")
        if status == "same":
            status = "shape" if sa["shape"] != sb["shape"] else "dtype" if sa["dtype"] != sb["dtype"] else "same"
        tensor_rows.append(
            {
                "name": name,
                "a": {"dtype": sa["dtype"], "shape": sa["shape"]} if sa else None,
                "b": {"dtype": sb["dtype"], "shape": sb["shape"]} if sb else None,
                "status": status,
            }
        )
    groups = {
        group: {
            side: _totals([t for n, t in tensors.items() if group_of(n) == group])
            for side, tensors in (("a", ta), ("b", tb))
        }
        for group in GROUPS
    }
    target_config = target.get("config") if target and "tensors" in target else target
    va, vb = verdict(a, target_config), verdict(b, target_config)
    shared = [n for n in va["notes"] if n in vb["notes"]]
    return {
        "paths": {"a": a.get("path"), "b": b.get("path")},
        "config": config_rows,
        "tensors": tensor_rows,
        "summary": {"a": _totals(list(ta.values())), "b": _totals(list(tb.values())), "groups": groups},
        "verdict": {
            "compatible": False
            if False in (va["compatible"], vb["compatible"])
            else va["compatible"] and vb["compatible"],
            "a": va,
            "b": vb,
            "problems": [f"A: {p}" for p in va["problems"]] + [f"B: {p}" for p in vb["problems"]],
            "notes": shared
            + [f"A: {n}" for n in va["notes"] if n not in shared]
            + [f"B: {n}" for n in vb["notes"] if n not in shared],
            "unchecked": [u for u in va["unchecked"] if u in vb["unchecked"]]
            + [f"A: {u}" for u in va["unchecked"] if u not in vb["unchecked"]]
            + [f"B: {u}" for u in vb["unchecked"] if u not in va["unchecked"]],
        },
    }


# --- Markdown export ---


def format_params(n: int) -> str:
    """1191144704 → ``1.19 B``."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return str(n)


def format_value(value: Any) -> str:
    """A config value as diffs show it: strings bare, absent as a dash, anything else as JSON."""
    if value is None:
        return "—"
    return value if isinstance(value, str) else json.dumps(value)


def format_tensor(side: dict[str, Any] | None) -> str:
    """One side of a tensor row: ``BF16 [7168, 21504]``, or a dash when that side lacks the tensor."""
    return "—" if side is None else f"{side['dtype']} {side['shape']}"


def format_totals(totals: dict[str, Any], sep: str = ", ") -> str:
    """A summary entry (``{"params", "bytes", "tensors"}``): ``1.19 B params, 2.22 GiB, 15 tensors``."""
    parts = (
        f"{format_params(totals['params'])} params",
        human_bytes(totals["bytes"]),
        counted(totals["tensors"], "tensor"),
    )
    return sep.join(parts)


def _cell(value: Any) -> str:
    return format_value(value).replace("|", "\\|")


def diff_to_markdown(diff: dict[str, Any], a_label: str, b_label: str) -> str:
    """The diff as a Markdown report: verdict, sizes per group, config rows and tensor rows."""
    v = diff["verdict"]
    lines = [f"# Drafter diff: {a_label} vs {b_label}", ""]
    lines.append(f"**Verdict:** {verdict_word(v)}")
    for side, label in (("a", a_label), ("b", b_label)):
        sv = v[side]
        algo = f", --speculative-algorithm {sv['algorithm']}" if sv["algorithm"] else ""
        lines.append(f"- {label}: {verdict_word(sv)}{algo}")
    lines.append("")
    if v["problems"]:
        lines += ["## Problems", ""] + [f"- {p}" for p in v["problems"]] + [""]
    if v.get("unchecked"):
        lines += ["## Checks not made", ""] + [f"- {u}" for u in v["unchecked"]] + [""]
    if v["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in v["notes"]] + [""]
    summary = diff["summary"]
    lines += ["## Size", "", f"| group | {a_label} | {b_label} |", "|---|---|---|"]

    lines.append(f"| **total** | {format_totals(summary['a'])} | {format_totals(summary['b'])} |")
    for group, sides in summary["groups"].items():
        if sides["a"]["tensors"] or sides["b"]["tensors"]:
            lines.append(f"| {group} | {format_totals(sides['a'])} | {format_totals(sides['b'])} |")
    lines += ["", "## Config", "", f"| key | {a_label} | {b_label} | status |", "|---|---|---|---|"]
    for row in diff["config"]:
        lines.append(f"| {_cell(row['key'])} | {_cell(row['a'])} | {_cell(row['b'])} | {row['status']} |")
    lines += ["", "## Tensors", "", f"| tensor | {a_label} | {b_label} | status |", "|---|---|---|---|"]
    for row in diff["tensors"]:
        cells = (_cell(row["name"]), format_tensor(row["a"]), format_tensor(row["b"]), row["status"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
