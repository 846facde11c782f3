"""Inspecting a drafter checkpoint where it lies, without moving its weights: a path on this machine
(``inspect_checkpoint``), or a hub repo (``hf://org/name[@revision]``) read with Range requests (the safetensors
headers, the index, config.json); a hub repo's config alone, for a target. Every refusal is one sentence
(``UsageError`` for bad input, ``OperationFailed`` for a hub that cannot be reached or refuses).
"""

from __future__ import annotations

import json
import re
import tempfile
from typing import Any

from backend.agent.host.shared.checkpoint_scan import CONFIG, CONFIG_ALONE, build_result, inspect_checkpoint
from backend.agent.host.shared.safetensors_header import MAX_HEADER, CheckpointError, validate_header
from backend.errors import OperationFailed, UsageError

HUB_PREFIX = "hf://"
_REPO = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def inspect_local(path: str) -> dict[str, Any]:
    """``inspect_checkpoint`` for a path on this machine; any refusal is a ``UsageError`` (exit 2)."""
    try:
        return inspect_checkpoint(path)
    except (CheckpointError, FileNotFoundError, PermissionError) as exc:
        raise UsageError(str(exc)) from None


def parse_hub_spec(spec: str) -> tuple[str, str | None]:
    """``hf://org/name[@revision]`` → (``org/name``, revision or None)."""
    body = spec[len(HUB_PREFIX) :] if spec.startswith(HUB_PREFIX) else ""
    repo, at, revision = body.partition("@")
    if not _REPO.match(repo) or (at and not revision):
        raise UsageError(f"{spec!r} is not a hub checkpoint: write hf://org/name or hf://org/name@revision")
    return repo, revision or None


def inspect_hub(repo_spec: str, endpoint: str | None = None, token: str | None = None) -> dict[str, Any]:
    """Inspect a hub repo from its config.json and its safetensors headers (Range requests, no weights).

    Returns the ``inspect_checkpoint`` dict with ``path`` = ``repo_spec``. A missing repo, a gated one or an
    unreachable hub is an ``OperationFailed`` (exit 1); a corrupt header a ``UsageError`` (exit 2).
    """
    repo, revision = parse_hub_spec(repo_spec)
    import huggingface_hub  # lazily: importing it costs ~0.3 s and only hub sources need it
    from huggingface_hub import errors as hub_errors

    api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
    notes: list[str] = []
    config = None
    try:
        config = _hub_config(api, repo_spec, endpoint, token)
        if config is None:
            notes.append("no config.json: shapes only, the architecture and the aux layers are unknown")
        meta = api.get_safetensors_metadata(repo, revision=revision, token=token)
        sizes = {
            entry.path: entry.size  # type: ignore[union-attr]  # the paths asked are files, never folders
            for entry in api.get_paths_info(repo, sorted(meta.files_metadata), revision=revision, token=token)
        }
    except hub_errors.NotASafetensorsRepoError:
        if config is None:
            raise OperationFailed(
                f"{repo_spec} has no config.json and no model.safetensors or model.safetensors.index.json; pick a "
                "checkpoint"
            ) from None
        return build_result(repo_spec, config, [], None, [CONFIG_ALONE])  # what the config says, shapes unseen
    except Exception as exc:
        raise _hub_error(exc, repo_spec, endpoint or huggingface_hub.constants.ENDPOINT) from None
    files = []
    for name, file_meta in sorted(meta.files_metadata.items()):
        obj: dict[str, Any] = {"__metadata__": file_meta.metadata or None}
        for tensor, info in file_meta.tensors.items():
            obj[tensor] = {
                "dtype": info.dtype,
                "shape": list(info.shape),
                "data_offsets": list(info.data_offsets),
            }
        files.append((name, sizes.get(name, 0), obj))
    weight_map = meta.weight_map if meta.sharded else None
    return hub_result(repo_spec, config, files, weight_map, notes, meta.metadata)


def hub_result(
    spec: str,
    config: dict[str, Any] | None,
    files: list[tuple[str, int | None, dict[str, Any]]],
    weight_map: dict[str, Any] | None,
    notes: list[str],
    index_meta: Any = None,
) -> dict[str, Any]:
    """The inspect dict of a hub repo from its safetensors headers as JSON objects (``(name, file size or None,
    header)``): each header validated as a local one is; with a size, the header must describe exactly the
    file. Without one (a search reads no sizes) a file counts its tensors' bytes. Corrupt: a UsageError."""
    headers = []
    for name, size, obj in files:
        where = f"{spec}/{name}"
        try:
            checked = validate_header(obj, where)
            if size is not None:
                header_len = size - 8 - checked["data_len"]
                if not 2 <= header_len <= MAX_HEADER:
                    raise CheckpointError(
                        where,
                        "file_size",
                        f"the header describes {checked['data_len']} bytes of data in a {size}-byte file",
                    )
        except CheckpointError as exc:
            raise UsageError(str(exc)) from None
        parsed = {"metadata": checked["metadata"], "tensors": checked["tensors"]}
        headers.append((name, checked["data_len"] if size is None else size, parsed))
    try:
        return build_result(spec, config, headers, weight_map, notes, index_meta)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None


def hub_config(repo_spec: str, endpoint: str | None = None, token: str | None = None) -> dict[str, Any]:
    """The config.json of a hub repo (a target model's, say); errors as ``inspect_hub``'s."""
    import huggingface_hub

    api = huggingface_hub.HfApi(endpoint=endpoint, token=token)
    try:
        config = _hub_config(api, repo_spec, endpoint, token)
    except Exception as exc:
        raise _hub_error(exc, repo_spec, endpoint or huggingface_hub.constants.ENDPOINT) from None
    if config is None:
        raise UsageError(f"{repo_spec} has no config.json; point at the model's repo")
    return config


def _hub_config(api: Any, repo_spec: str, endpoint: str | None, token: str | None) -> dict[str, Any] | None:
    """config.json of ``repo_spec``, None when the repo has none.

    It first asks paths-info, which huggingface_hub does not retry: a missing repo or an unreachable hub fails
    in one round trip instead of after the download's backoff (~23 s).
    """
    import huggingface_hub

    repo, revision = parse_hub_spec(repo_spec)
    if not api.get_paths_info(repo, [CONFIG], revision=revision, token=token):
        return None
    with tempfile.TemporaryDirectory(prefix="specdeck-hub-") as tmp:
        local = huggingface_hub.hf_hub_download(
            repo, CONFIG, revision=revision, local_dir=tmp, endpoint=endpoint, token=token
        )
        with open(local, "rb") as f:
            return config_object(f.read(), f"{repo_spec}/{CONFIG}")


def config_object(data: bytes | str, where: str, fix: str = "fix the config on the hub") -> dict[str, Any]:
    """A config.json's content as a dict, or a UsageError naming ``where`` and what to do."""
    try:
        config = json.loads(data)
    except ValueError:
        config = None
    if not isinstance(config, dict):
        raise UsageError(f"{where} is not a JSON object; {fix}")
    return config


def _hub_error(exc: Exception, spec: str, endpoint: str) -> Exception:
    """One sentence for each way the hub can refuse; anything unexpected is re-raised as it is."""
    from huggingface_hub import errors as hub_errors

    status = getattr(getattr(exc, "response", None), "status_code", None)
    gated = f"{spec} is gated or private: set HF_TOKEN to a token with access to it, then retry"
    if isinstance(exc, hub_errors.GatedRepoError) or status in (401, 403):
        return OperationFailed(gated)
    if isinstance(exc, hub_errors.RevisionNotFoundError):
        return OperationFailed(f"{spec}: revision not found on {endpoint}; check the branch, tag or commit")
    if isinstance(exc, hub_errors.RepositoryNotFoundError) or status == 404:
        return OperationFailed(f"{spec} not found on {endpoint}; check the repo name")
    if isinstance(exc, hub_errors.NotASafetensorsRepoError):
        return OperationFailed(f"{spec} has no model.safetensors or model.safetensors.index.json; pick a checkpoint")
    if isinstance(exc, hub_errors.SafetensorsParsingError):
        return UsageError(f"{spec}: a safetensors header on the hub is corrupt ({exc}); ask the repo owner")
    if isinstance(exc, hub_errors.HfHubHTTPError):
        return OperationFailed(f"the hub at {endpoint} refused {spec} (HTTP {status}); retry later")
    if isinstance(exc, OSError) or type(exc).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")):
        detail = f" ({exc})" if len(str(exc)) <= 80 else ""  # keep "timed out", drop paragraphs
        return OperationFailed(f"cannot reach the hub at {endpoint}{detail}; check the network or HF_ENDPOINT")
    return exc
