"""A host as it reports itself, typed where the agent's answers arrive: ``info`` (``HostInfo``: its name, Python,
library versions and GPUs) and ``serve.gpus`` (``GpuUse``: each GPU's memory with the processes on it, ours or
not). The host side (``backend.agent.host.probes``, ``serve``) is unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.connection import Connection


@dataclass(frozen=True)
class GpuProcess:
    """A process using a GPU; ``name`` and ``job`` (the serve job it belongs to, None: not ours) from
    ``serve.gpus`` only."""

    pid: int
    used_mib: float | None = None
    name: str | None = None
    job: str | None = None

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> GpuProcess:
        return cls(int(wire["pid"]), wire.get("used_mib"), wire.get("name"), wire.get("job"))


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML (else nvidia-smi) reports it: memory in MiB, utilisation in %, the processes on it."""

    index: int
    name: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization: float | None = None
    processes: tuple[GpuProcess, ...] = ()

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> Gpu:
        return cls(
            index=int(wire["index"]),
            name=wire.get("name"),
            memory_used_mib=wire.get("memory_used_mib"),
            memory_total_mib=wire.get("memory_total_mib"),
            utilization=wire.get("utilization"),
            processes=tuple(GpuProcess.from_json(p) for p in wire.get("processes") or ()),
        )


@dataclass(frozen=True)
class HostInfo:
    """The agent's ``info``: the host's name, the Python it runs (``python``: its version), the versions of the
    libraries it has (by name: sglang, sglang_router...; None where not installed) and its GPUs."""

    hostname: str | None = None
    python: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    gpus: tuple[Gpu, ...] = ()
    pid: int | None = None  # the agent's
    state_dir: str | None = None
    wire: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def sglang(self) -> str | None:
        """The SGLang release installed in the agent's Python (None: not installed)."""
        version = self.versions.get("sglang")
        return version if isinstance(version, str) else None

    @classmethod
    def from_json(cls, wire: dict[str, Any]) -> HostInfo:
        return cls(
            hostname=wire.get("hostname"),
            python=wire.get("python"),
            versions=dict(wire.get("versions") or {}),
            gpus=tuple(Gpu.from_json(g) for g in wire.get("gpus") or ()),
            pid=wire.get("pid"),
            state_dir=wire.get("state_dir"),
            wire=wire,
        )


async def host_info(conn: Connection) -> HostInfo:
    """``conn``'s host as it reports itself (the agent's ``info``)."""
    return HostInfo.from_json(await conn.call("info"))


@dataclass(frozen=True)
class GpuUse:
    """``serve.gpus``: each GPU with its processes named and marked ours or not; ``nvidia_smi`` False where the
    host has neither NVML nor nvidia-smi."""

    gpus: tuple[Gpu, ...] = ()
    nvidia_smi: bool = False


async def gpu_use(conn: Connection) -> GpuUse:
    """Who uses the host's GPUs (``serve.gpus``)."""
    wire = await conn.call("serve.gpus")
    return GpuUse(tuple(Gpu.from_json(g) for g in wire.get("gpus") or ()), bool(wire.get("nvidia_smi")))
