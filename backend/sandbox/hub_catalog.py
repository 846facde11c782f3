"""The sandbox Hub's catalog: real public repos around Kimi-K2.5 (drafters, the targets, lookalikes), as files.

``backend/sandbox/catalog/<org>__<name>.json`` holds what was found about one real repo, each with its
``_source``: the card's front matter and its accept-length tables (facts and figures, not the card's prose), its
config.json (verbatim, or DERIVED and saying from what), the safetensors tensor names and shapes (real or
DERIVED, labelled) and the sha256 of the sparse file written from them. ``write_catalog`` lays the repos out
under a hub root as the local Hub serves them: README.md (front matter + tables), config.json, model.safetensors
as a real header over a hole (a 7 GB drafter costs a few kilobytes), files known by name only as empty files,
``.gated`` for gated repos. Each weights file's digest is seeded beside it, so the hub never hashes gigabytes
of zeros (``scripts/sandbox_catalog_digests.py`` recomputes them when a layout changes).

Stdlib only (Python 3.8+), like the hub itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from backend.sandbox import fixtures

CATALOG = Path(__file__).resolve().with_name("catalog")
# The sandbox Hub's dataset repos: a few rows each in the schema of a common benchmark set, written here (each
# folder's README says which), served as ``<org>/<name>`` datasets.
DATASETS = Path(__file__).resolve().with_name("datasets")
WEIGHTS = "model.safetensors"
GATE_TOKEN = "hf_sandbox_gate_token"  # the one token a gated catalog repo accepts


def entries() -> list[dict[str, Any]]:
    """Every catalog entry, by repo id."""
    return [json.loads(p.read_text()) for p in sorted(CATALOG.glob("*.json"))]


def entry(repo: str) -> dict[str, Any]:
    """The catalog entry of ``repo`` (KeyError when the catalog has none)."""
    path = CATALOG / (repo.replace("/", "__") + ".json")
    if not path.is_file():
        raise KeyError(repo)
    entry: dict[str, Any] = json.loads(path.read_text())
    return entry


def weights_layout(item: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """``{name: (dtype, shape)}`` of the entry's weights, as ``fixtures.header_bytes`` takes them."""
    return {name: (dtype, list(shape)) for name, (dtype, shape) in item["weights"]["tensors"].items()}


def yaml_scalar(value: object) -> str:
    """A front-matter value as YAML writes it: JSON's quoting for strings that need any (YAML reads it back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    plain = text and text[0].isalnum() and ": " not in text and " #" not in text and text.strip() == text
    return text if plain and text.lower() not in ("true", "false", "null", "yes", "no") else json.dumps(text)


def front_matter_text(data: dict[str, Any]) -> str:
    """``data`` as a README's YAML front matter block (keys with a scalar or a list of scalars)."""
    lines = ["---"]
    for key, value in data.items():
        if isinstance(value, list):
            lines.append(f"{key}:")
            lines.extend(f"- {yaml_scalar(v)}" for v in value)
        else:
            lines.append(f"{key}: {yaml_scalar(value)}")
    return "\n".join([*lines, "---", ""])


def readme(item: dict[str, Any]) -> str | None:
    """The sandbox's README.md for an entry: its front matter, then each accept-length table with the lines
    that say how it was measured; None when the real repo has no card (or none was captured)."""
    card = item.get("card")
    if card is None:
        return None
    parts = [front_matter_text(card["front_matter"])]
    parts.append(
        f"<!-- SANDBOX: the card's front matter and claim tables as published ({card['source']}); its prose is "
        "not copied -->\n"
    )
    for table in card["tables"]:
        parts.append("\n".join(table["context"] + [""] + table["table"]) + "\n")
    return "\n".join(parts)


def write_repo(root: Path, item: dict[str, Any], gated_token: str = GATE_TOKEN) -> Path:
    """Lay out one entry under ``root`` (idempotent: existing files are kept); returns the repo folder."""
    folder: Path = Path(root) / item["repo"]
    folder.mkdir(parents=True, exist_ok=True)
    text = readme(item)  # (every file is written only when missing: the sandbox's own edits stay)
    if text is not None and not (folder / "README.md").exists():
        (folder / "README.md").write_text(text)
    fixture = item.get("sandbox_fixture")
    if fixture:  # config and weights are the sandbox's own fixture (fixtures.py), as every sandbox test knows it
        if not (folder / WEIGHTS).exists():
            fixtures.write_drafter(str(folder), fixture["kind"])
            _seed(root, item["repo"], fixture["sha256"])
        return folder
    if item.get("config") is not None and not (folder / "config.json").exists():
        (folder / "config.json").write_text(json.dumps(item["config"], indent=2) + "\n")
    for name in item.get("name_only", []):
        path = folder / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    if item.get("hub_tags") and not (folder / ".hub.json").exists():  # what the Hub computes beyond the files
        (folder / ".hub.json").write_text(json.dumps({"tags": item["hub_tags"]}))
    if item.get("gated") and not (folder / ".gated").exists():
        (folder / ".gated").write_text(gated_token)
    weights = item.get("weights")
    if weights is not None and not (folder / WEIGHTS).exists():
        fixtures.write_sparse_safetensors(str(folder / WEIGHTS), weights_layout(item), weights.get("metadata"))
        _seed(root, item["repo"], weights["sha256"])
    return folder


def _seed(root: Path, repo: str, sha256: str) -> None:
    """Keep the hub's digest of a freshly written sparse file beside it (the hub would hash it otherwise)."""
    from backend.sandbox import hub_repos

    cache = hub_repos.DigestCache(Path(root) / hub_repos.CACHE_DIR_NAME)
    cache.store(repo, hub_repos.repo_file(Path(root), repo, WEIGHTS), sha256)


def write_catalog(root: Path) -> list[str]:
    """Write every catalog repo under ``root``; returns their ids."""
    return [str(write_repo(Path(root), item).relative_to(root)).replace(os.sep, "/") for item in entries()]


def write_datasets(hub_root: Path) -> list[str]:
    """Lay the sandbox's dataset repos out under ``hub_root`` as the local Hub serves them; their ids."""
    import shutil

    from backend.sandbox.hub_repos import DATASETS_DIR

    ids = []
    for folder in sorted(p for p in DATASETS.iterdir() if p.is_dir()):
        repo = folder.name.replace("__", "/", 1)
        target = Path(hub_root) / DATASETS_DIR / repo
        target.mkdir(parents=True, exist_ok=True)
        for f in folder.iterdir():
            shutil.copyfile(f, target / f.name)
        ids.append(repo)
    return ids
