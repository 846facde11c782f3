"""Recompute the sha256 of every sandbox catalog repo's sparse weights and rewrite the catalog files.

The sandbox Hub seeds these digests beside the sparse files it writes (backend/sandbox/hub_catalog.py), so it
never hashes gigabytes of zeros; run this after changing a catalog entry's tensors or metadata:
``.venv/bin/python scripts/sandbox_catalog_digests.py``. It hashes the header and the zeros the hole reads as,
without writing the file (~1 s per GB).
"""

from __future__ import annotations

import hashlib
import json
import sys

from backend.sandbox import fixtures, hub_catalog

ZEROS = bytes(16 << 20)


def sparse_sha256(tensors: dict, metadata: dict | None) -> str:
    head, data_len = fixtures.header_bytes(tensors, metadata)
    digest = hashlib.sha256(head)
    while data_len:
        step = min(data_len, len(ZEROS))
        digest.update(memoryview(ZEROS)[:step])
        data_len -= step
    return digest.hexdigest()


def dump(item: dict) -> str:
    """The entry as JSON, one tensor a line (the files stay short enough to read)."""
    text = json.dumps(item, indent=1, ensure_ascii=False)
    weights = item.get("weights")
    if not weights:
        return text + "\n"
    tensors = weights["tensors"].items()
    lines = ",\n".join(f"   {json.dumps(name)}: {json.dumps(spec, separators=(', ', ': '))}" for name, spec in tensors)
    flat = json.dumps(weights["tensors"], indent=1, ensure_ascii=False).replace("\n", "\n  ")
    return text.replace(flat, "{\n" + lines + "\n  }") + "\n"


def main() -> int:
    for path in sorted(hub_catalog.CATALOG.glob("*.json")):
        item = json.loads(path.read_text())
        if item.get("weights"):
            item["weights"]["sha256"] = sparse_sha256(hub_catalog.weights_layout(item), item["weights"].get("metadata"))
        fixture = item.get("sandbox_fixture")
        if fixture:
            tensors, _, metadata = fixtures.DRAFTERS[fixture["kind"]]
            fixture["sha256"] = sparse_sha256(tensors, metadata)
        path.write_text(dump(item))
        print(path.name, (item.get("weights") or fixture or {}).get("sha256", "-"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
