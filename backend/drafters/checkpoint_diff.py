"""Two drafter checkpoints side by side: every config key and tensor of either, grouped (attention, mlp, fc,
lm_head, norms, vocab maps, other) with its status (same, changed, only in one), parameter totals per group,
each side's verdict against the target, and the diff as Markdown. Works on the dicts ``inspect_checkpoint``
returns, whatever their source; the diff itself is typed (``CheckpointDiff``), its ``to_json`` what `specdeck
diff --json` prints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

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


# A row's status: same, changed (a config value), shape or dtype (a tensor), or present on one side only.
RowStatus = Literal["same", "changed", "shape", "dtype", "only_a", "only_b"]


@dataclass(frozen=True)
class ConfigRow:
    """One config key (nested keys joined by '.') with A's and B's value (None where absent)."""

    key: str
    a: Any
    b: Any
    status: RowStatus

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "a": self.a, "b": self.b, "status": self.status}


@dataclass(frozen=True)
class TensorSide:
    """One side's tensor: its safetensors dtype and shape."""

    dtype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class TensorRow:
    """One tensor name with A's and B's dtype and shape (None where that side lacks it)."""

    name: str
    a: TensorSide | None
    b: TensorSide | None
    status: RowStatus

    def to_json(self) -> dict[str, Any]:
        side = (None if s is None else s.to_json() for s in (self.a, self.b))
        return {"name": self.name, "a": next(side), "b": next(side), "status": self.status}


@dataclass(frozen=True)
class Totals:
    """Parameters, bytes and tensors of one side (or of one group of it)."""

    params: int
    bytes: int
    tensors: int

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "bytes": self.bytes, "tensors": self.tensors}


@dataclass(frozen=True)
class DiffSummary:
    """Each side's totals, and per group (``GROUPS``, in order) A's and B's."""

    a: Totals
    b: Totals
    groups: dict[str, tuple[Totals, Totals]]

    def to_json(self) -> dict[str, Any]:
        groups = {g: {"a": a.to_json(), "b": b.to_json()} for g, (a, b) in self.groups.items()}
        return {"a": self.a.to_json(), "b": self.b.to_json(), "groups": groups}


@dataclass(frozen=True)
class DiffVerdict:
    """Both drafters against the target: compatible only if both are (None: no problem found, but a check could
    not be made), the problems and unchecked checks prefixed A:/B:, the notes both share once. ``a`` and ``b``
    are each side's ``checkpoints.verdict``."""

    compatible: bool | None
    a: dict[str, Any]
    b: dict[str, Any]
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()

    @property
    def word(self) -> str:
        return verdict_word({"compatible": self.compatible})

    def to_json(self) -> dict[str, Any]:
        return {
            "compatible": self.compatible,
            "a": self.a,
            "b": self.b,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "unchecked": list(self.unchecked),
        }


@dataclass(frozen=True)
class DiffPaths:
    """Where A, B and the target config were read (``target`` None: not read, or no target given)."""

    a: str | None
    b: str | None
    target: str | None = None


@dataclass(frozen=True)
class CheckpointDiff:
    """Two drafters side by side (``diff``): every config key and tensor of either, the sizes, the verdict."""

    paths: DiffPaths
    config: tuple[ConfigRow, ...]
    tensors: tuple[TensorRow, ...]
    summary: DiffSummary
    verdict: DiffVerdict

    def to_json(self) -> dict[str, Any]:
        """As `specdeck diff --json` prints it."""
        return {
            "paths": {"a": self.paths.a, "b": self.paths.b, "target": self.paths.target},
            "config": [r.to_json() for r in self.config],
            "tensors": [r.to_json() for r in self.tensors],
            "summary": self.summary.to_json(),
            "verdict": self.verdict.to_json(),
        }


def _status(in_a: bool, in_b: bool, same: bool, changed: RowStatus) -> RowStatus:
    if not in_b:
        return "only_a"
    if not in_a:
        return "only_b"
    return "same" if same else changed


def _totals(tensors: list[dict[str, Any]]) -> Totals:
    return Totals(sum(_numel(t["shape"]) for t in tensors), sum(t["bytes"] for t in tensors), len(tensors))


def _numel(shape: list[int]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def diff(a: dict[str, Any], b: dict[str, Any], target: dict[str, Any] | None = None) -> CheckpointDiff:
    """Config rows, tensor rows, sizes per side and per group, and both drafters' verdicts against ``target``.

    ``a`` and ``b`` are inspect dicts; ``target`` is the target's config.json (or its inspect dict).
    """
    ca, cb = flatten_config(a.get("config")), flatten_config(b.get("config"))
    config_rows = tuple(
        ConfigRow(
            key, ca.get(key), cb.get(key), _status(key in ca, key in cb, _same(ca.get(key), cb.get(key)), "changed")
        )
        for key in sorted(set(ca) | set(cb))
    )
    ta, tb = a["tensors"], b["tensors"]
    tensor_rows = []
    for name in sorted(set(ta) | set(tb)):
        sa, sb = ta.get(name), tb.get(name)
        status = _status(sa is not None, sb is not None, True, "same")
        if status == "same":
            status = "shape" if sa["shape"] != sb["shape"] else "dtype" if sa["dtype"] != sb["dtype"] else "same"
        side_a = TensorSide(sa["dtype"], tuple(sa["shape"])) if sa else None
        side_b = TensorSide(sb["dtype"], tuple(sb["shape"])) if sb else None
        tensor_rows.append(TensorRow(name, side_a, side_b, status))
    groups = {
        group: (
            _totals([t for n, t in ta.items() if group_of(n) == group]),
            _totals([t for n, t in tb.items() if group_of(n) == group]),
        )
        for group in GROUPS
    }
    target_config = target.get("config") if target and "tensors" in target else target
    va, vb = verdict(a, target_config), verdict(b, target_config)
    shared = [n for n in va["notes"] if n in vb["notes"]]
    judged = DiffVerdict(
        compatible=False if False in (va["compatible"], vb["compatible"]) else va["compatible"] and vb["compatible"],
        a=va,
        b=vb,
        problems=(*(f"A: {p}" for p in va["problems"]), *(f"B: {p}" for p in vb["problems"])),
        notes=(
            *shared,
            *(f"A: {n}" for n in va["notes"] if n not in shared),
            *(f"B: {n}" for n in vb["notes"] if n not in shared),
        ),
        unchecked=(
            *(u for u in va["unchecked"] if u in vb["unchecked"]),
            *(f"A: {u}" for u in va["unchecked"] if u not in vb["unchecked"]),
            *(f"B: {u}" for u in vb["unchecked"] if u not in va["unchecked"]),
        ),
    )
    summary = DiffSummary(_totals(list(ta.values())), _totals(list(tb.values())), groups)
    return CheckpointDiff(DiffPaths(a.get("path"), b.get("path")), config_rows, tuple(tensor_rows), summary, judged)


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


def format_tensor(side: TensorSide | None) -> str:
    """One side of a tensor row: ``BF16 [7168, 21504]``, or a dash when that side lacks the tensor."""
    return "—" if side is None else f"{side.dtype} {list(side.shape)}"


def format_totals(totals: Totals, sep: str = ", ") -> str:
    """A summary entry: ``1.19 B params, 2.22 GiB, 15 tensors``."""
    return sep.join(
        (f"{format_params(totals.params)} params", human_bytes(totals.bytes), counted(totals.tensors, "tensor"))
    )


def _cell(value: Any) -> str:
    return format_value(value).replace("|", "\\|")


def diff_to_markdown(diff: CheckpointDiff, a_label: str, b_label: str) -> str:
    """The diff as a Markdown report: verdict, sizes per group, config rows and tensor rows."""
    v = diff.verdict
    lines = [f"# Drafter diff: {a_label} vs {b_label}", ""]
    lines.append(f"**Verdict:** {v.word}")
    for sv, label in ((v.a, a_label), (v.b, b_label)):
        algo = f", --speculative-algorithm {sv['algorithm']}" if sv["algorithm"] else ""
        lines.append(f"- {label}: {verdict_word(sv)}{algo}")
    lines.append("")
    if v.problems:
        lines += ["## Problems", ""] + [f"- {p}" for p in v.problems] + [""]
    if v.unchecked:
        lines += ["## Checks not made", ""] + [f"- {u}" for u in v.unchecked] + [""]
    if v.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in v.notes] + [""]
    summary = diff.summary
    lines += ["## Size", "", f"| group | {a_label} | {b_label} |", "|---|---|---|"]

    lines.append(f"| **total** | {format_totals(summary.a)} | {format_totals(summary.b)} |")
    for group, (a, b) in summary.groups.items():
        if a.tensors or b.tensors:
            lines.append(f"| {group} | {format_totals(a)} | {format_totals(b)} |")
    lines += ["", "## Config", "", f"| key | {a_label} | {b_label} | status |", "|---|---|---|---|"]
    for row in diff.config:
        lines.append(f"| {_cell(row.key)} | {_cell(row.a)} | {_cell(row.b)} | {row.status} |")
    lines += ["", "## Tensors", "", f"| tensor | {a_label} | {b_label} | status |", "|---|---|---|---|"]
    for t in diff.tensors:
        cells = (_cell(t.name), format_tensor(t.a), format_tensor(t.b), t.status)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
