"""A drafter repo on the local hub for download tests, and one download run to its end."""

from __future__ import annotations

import json
from pathlib import Path

from backend.connection import Connection
from backend.drafters import downloads
from backend.sandbox import fixtures

REPO = "org/drafter"
MODEL_BYTES = 48 << 20  # five 10 MiB chunks: several progress events at the test rate
RATE = 40_000_000  # bytes/s: ~1.3 s per download, long enough to see progress and to interrupt


def write_repo(root: Path, repo: str = REPO, model_bytes: int = MODEL_BYTES) -> Path:
    folder = root / repo
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    data = model_bytes
    for _ in range(2):  # the header's length depends on the number it holds
        data = model_bytes - len(fixtures.header_bytes({"w": ("U8", [data])})[0])
    fixtures.write_sparse_safetensors(str(folder / "model.safetensors"), {"w": ("U8", [data])})
    return folder


async def run_job(conn: Connection, req: downloads.Request, progress: str = "auto") -> tuple[dict, list[dict]]:
    started, _ = await downloads.start(conn, req, progress)
    events = [ev async for _, ev in downloads.follow(conn, started.id)]
    job = await conn.call("jobs.wait", id=started.id, timeout=30)
    return job, events
