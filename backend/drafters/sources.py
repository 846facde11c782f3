"""Where a checkpoint comes from, as the user names it, and reading it from there without moving weights.

A source is written one of four ways, the same in the CLI and the TUI:

- a configured drafter name (``ours``): its folder on the host;
- ``hf://org/name[@revision]``: a hub repo, read from this machine with Range requests;
- ``file://PATH``: a path on this machine;
- anything else: a path on the host, read by the agent (``checkpoint.inspect``).

The target (``--target``) is read the same way, but only its config.json: a folder holding one, a ``.json``
file, or a hub repo. ``Sources`` holds the settings, the host and (lazily) the connection, so a diff of two
hub repos never opens an SSH connection at all.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from backend.agent.host.shared.checkpoint_scan import CONFIG
from backend.drafters import checkpoint_diff, inspection
from backend.drafters.checkpoint_diff import CheckpointDiff
from backend.errors import ConnectionFailed, OperationFailed, RemoteError, UsageError
from backend.settings.model import DrafterConfig, HostConfig, Settings

FILE_PREFIX = "file://"
HOST, HUB, LOCAL = "host", "hub", "local"

if TYPE_CHECKING:
    from backend.connection import Connection


@dataclass(frozen=True)
class Source:
    """One checkpoint (or target) as the user named it: ``kind`` says who reads ``location``."""

    kind: str  # host | hub | local
    location: str  # host path, hf:// spec or local path
    label: str  # what the user wrote (a drafter name, a path, a repo)
    drafter: DrafterConfig | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "location": self.location, "label": self.label}


def parse_source(text: str, settings: Settings, host: HostConfig) -> Source:
    """A CLI/TUI argument → a ``Source`` (see the module docstring for the four forms)."""
    text = text.strip()
    if not text:
        raise UsageError("a checkpoint is required: a drafter name, a host path, file://PATH or hf://org/name")
    if text.startswith(inspection.HUB_PREFIX):
        inspection.parse_hub_spec(text)  # refuse a malformed spec before any network
        return Source(HUB, text, text)
    if text.startswith(FILE_PREFIX):
        path = text[len(FILE_PREFIX) :]
        if not path:
            raise UsageError("file:// needs a path: file:///abs/path or file://relative/path")
        return Source(LOCAL, os.path.abspath(os.path.expanduser(path)), text)
    drafter = settings.drafters.get(text)
    if drafter is not None:
        return Source(HOST, drafter.path, text, drafter)
    if not any(mark in text for mark in ("/", "~")) and not text.startswith("."):
        # A bare word is a drafter's name, not a folder: say which names there are (CLI and panel alike).
        known = ", ".join(sorted(settings.drafters)) or "none"
        raise UsageError(
            f"unknown drafter {text!r} (configured: {known}); or give a host path, file://PATH or hf://org/name"
        )
    # The local agent runs in another folder: a relative path means the user's, as anywhere on this machine.
    path = os.path.abspath(text) if host.is_local and not text.startswith("~") else text
    return Source(HOST, path, text)


def hub_copy(drafter: DrafterConfig) -> Source:
    """The hub repo a configured drafter is downloaded from, as a Source (the drafter must have a repo)."""
    spec = inspection.HUB_PREFIX + str(drafter.repo) + (f"@{drafter.revision}" if drafter.revision else "")
    return Source(HUB, spec, spec, drafter)


def target_source(text: str | None, settings: Settings, host: HostConfig) -> Source:
    """``--target`` → a Source; without one, the configured target folder on the host."""
    if text is None:
        return Source(HOST, settings.target, "configured target")
    return parse_source(text, settings, host)


def hub_endpoint(host: HostConfig, explicit: str | None = None) -> str | None:
    """Where hf:// sources are read: ``--endpoint``, the host's configured hub (the sandbox's), else
    huggingface_hub's own default (``HF_ENDPOINT`` or huggingface.co)."""
    return explicit or host.hub_endpoint


Connector = Callable[[], Awaitable["Connection"]]


class Sources:
    """Reads sources for one command or one Compare screen; connects to the host only when a source needs it.

    ``connect`` returns a ``backend.connection.Connection``: the CLI opens one (and ends with ``aclose``), the
    TUI hands its own (and never calls ``aclose``).
    """

    def __init__(
        self, host: HostConfig, connect: Connector, endpoint: str | None = None, hub_fallback: bool = False
    ) -> None:
        self.host = host
        self.endpoint = endpoint
        # A configured drafter not on the host yet is read from its hub repo instead (the TUI's choice; the
        # CLI says so and stops). Which were: ``fallbacks`` maps the label to the hub Source read.
        self.hub_fallback = hub_fallback
        self.fallbacks: dict[str, Source] = {}
        self._connect = connect
        self._opening: asyncio.Future[Connection] | None = None

    async def connection(self) -> Connection:
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._connect())
        # Shielded: a caller cancelled mid-connect (a sibling failed) must not leave a half-open connection.
        return await asyncio.shield(self._opening)

    async def aclose(self) -> None:
        """Close the connection this opened, waiting for a connect still under way."""
        if self._opening is None:
            return
        try:
            conn = await self._opening
        except Exception:
            return  # it never opened: nothing to close (the caller saw the error)
        await conn.close()

    # --- checkpoints ---

    async def inspect(self, source: Source) -> dict[str, Any]:
        """The inspect dict of ``source``; a missing or corrupt checkpoint is a UsageError (exit 2)."""
        if source.kind == HUB:
            return await asyncio.to_thread(inspection.inspect_hub, source.location, self.endpoint)
        if source.kind == LOCAL:
            return await asyncio.to_thread(inspection.inspect_local, source.location)
        conn = await self.connection()
        drafter = source.drafter
        try:
            info = await conn.call("checkpoint.inspect", path=source.location)
        except RemoteError as exc:
            # Not there yet: no folder, or one without weights (a download writes them last, under way or stopped).
            absent = exc.kind == "not_found" or (exc.kind == "checkpoint" and exc.data.get("rule") == "not_checkpoint")
            if not absent or drafter is None or drafter.repo is None:
                raise
            why = "does not exist" if exc.kind == "not_found" else "holds no *.safetensors file yet"
        else:
            if info.get("files") or drafter is None or drafter.repo is None:
                inspected: dict[str, Any] = info
                return inspected  # a path given by hand with config.json alone reads as that config
            why = "holds no *.safetensors file yet"
        hub = hub_copy(drafter)
        if not self.hub_fallback:
            raise UsageError(
                f"{drafter.name} is not on {self.host.name} yet ({drafter.path} {why}): run "
                f"`specdeck download {drafter.name}`, or compare the hub copy with {hub.location}"
            )
        self.fallbacks[source.label] = hub
        return await self.inspect(hub)

    # --- the target ---

    async def target_config(self, source: Source) -> dict[str, Any]:
        """The target's config.json: from a folder holding one, a .json file, or a hub repo."""
        if source.kind == HUB:
            return await asyncio.to_thread(inspection.hub_config, source.location, self.endpoint)
        path = source.location if source.location.endswith(".json") else source.location.rstrip("/") + "/" + CONFIG
        if source.kind == LOCAL:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                raise UsageError(
                    f"{path} does not exist; name the target as a model folder, a config.json or hf://org/name"
                ) from None
            except OSError as exc:
                raise UsageError(f"{path}: cannot read it ({exc.strerror}); check the path") from None
            return _target_config(data.decode("utf-8", "replace"), path)
        conn = await self.connection()
        try:
            reply = await conn.call("fs.read", path=path, text=True)
        except RemoteError as exc:
            if exc.kind == "not_found":
                raise UsageError(
                    f"{path} does not exist on {self.host.name}; name the target as a model folder, a "
                    "config.json or hf://org/name"
                ) from None
            raise
        return _target_config(reply["text"], path)

    # --- weights ---

    async def compare_weights(
        self, a: Source, b: Source, on_tensor: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Per-tensor relative L2 and cosine of two host checkpoints, computed on the host (numpy there).

        ``on_tensor`` gets each ``{"event": "tensor", ...}`` as it arrives; returns the host's summary.
        """
        check_weights_sources(a, b)
        conn = await self.connection()
        if conn.agent is None:  # dropped since it opened
            raise ConnectionFailed(f"{conn.host.name}: not connected ({conn.state.status})")
        stream = await conn.agent.stream("checkpoint.compare_weights", a=a.location, b=b.location)
        try:
            async for event in stream:
                on_tensor(event)
        except RemoteError as exc:
            if exc.kind == "unsupported":
                raise OperationFailed(str(exc)) from None
            raise
        finally:
            await stream.aclose()
        compared: dict[str, Any] = stream.result
        return compared


def check_weights_sources(a: Source, b: Source) -> None:
    """Weights are compared where they are, on the host: refuse hub repos and local paths up front."""
    for side, source in (("A", a), ("B", b)):
        if source.kind != HOST:
            raise UsageError(
                f"--weights reads the weights where they are, on the host: {side} ({source.label}) is a "
                f"{'hub repo' if source.kind == HUB else 'local path'}; download it to the host first"
            )


def _target_config(text: str, where: str) -> dict[str, Any]:
    return inspection.config_object(text, where, "name the model's config.json as the target")


async def read_diff(
    sources: Sources, a: Source, b: Source, target: Source, *, target_required: bool = True
) -> tuple[CheckpointDiff, dict[str, Any], dict[str, Any]]:
    """Inspect A and B and read the target's config, concurrently; returns ``(diff, a_info, b_info)``.

    The diff is ``checkpoint_diff.diff`` with ``paths.target`` (where the target config came from). When
    ``target_required`` is false (the default target, which a fresh host may not have yet) an unreadable
    target is a verdict note and ``paths.target`` is None.
    """

    async def read_target() -> tuple[dict[str, Any] | None, str | None]:
        try:
            return await sources.target_config(target), None
        except UsageError as exc:
            if target_required:
                raise
            return None, f"the {target.label} could not be read: {exc}"

    # A TaskGroup, so one failing read cancels the others instead of leaving them running; the first error is
    # the one to show (a group of them is not a message).
    try:
        async with asyncio.TaskGroup() as group:
            reads = group.create_task(sources.inspect(a)), group.create_task(sources.inspect(b))
            read = group.create_task(read_target())
    except BaseExceptionGroup as errors:
        raise errors.exceptions[0] from None
    (a_info, b_info), (target_config, unread) = (r.result() for r in reads), read.result()
    result = checkpoint_diff.diff(a_info, b_info, target_config)
    paths = replace(result.paths, target=None if unread else target.location)
    notes = (unread, *result.verdict.notes) if unread else result.verdict.notes
    return replace(result, paths=paths, verdict=replace(result.verdict, notes=notes)), a_info, b_info
