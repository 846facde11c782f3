"""What makes hosts interchangeable for measuring: their GPUs (model of each, so model and count) and the
SGLang release, as each host reports them. A sweep spread over a fleet's hosts compares points measured on
different machines, which is only fair when these agree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backend.connection import Connection
from backend.serve import command_line
from backend.serve.host_info import host_info


@dataclass(frozen=True)
class HostFacts:
    host: str
    gpus: tuple[str, ...]  # the model of each GPU the host sees, by index; () without NVML or nvidia-smi
    sglang: str | None  # the release it serves (the simulator's on a sandbox host); None: not installed

    def gpu_text(self) -> str:
        if not self.gpus:
            return "no GPUs seen"
        models = sorted(set(self.gpus))
        return ", ".join(f"{self.gpus.count(m)}× {m}" for m in models)


async def facts(conn: Connection) -> HostFacts:
    """``conn``'s host as it reports itself (the agent's ``info``)."""
    info = await host_info(conn)
    gpus = tuple(g.name or "?" for g in info.gpus)
    return HostFacts(conn.host.name, gpus, command_line.host_sglang_version(conn.host, info))


def difference(hosts: Sequence[HostFacts], remedy: str = "spread a sweep over identical hosts only") -> str | None:
    """One sentence naming the first two hosts that differ in GPUs or SGLang release (ending in ``remedy``),
    else None."""
    first = hosts[0]
    for other in hosts[1:]:
        if sorted(other.gpus) != sorted(first.gpus):
            return (
                f"hosts {first.host} and {other.host} differ in GPUs ({first.gpu_text()} vs {other.gpu_text()}): "
                f"{remedy}."
            )
        if other.sglang != first.sglang:
            return (
                f"hosts {first.host} and {other.host} run different SGLang releases ({first.sglang or 'none'} vs "
                f"{other.sglang or 'none'}): {remedy}."
            )
    return None
