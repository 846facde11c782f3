"""Real safetensors checkpoints (written by the safetensors library, bf16 included) for weight comparisons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import safetensors
from safetensors import TensorSpec


def bf16_bits(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def write_real(folder: Path, f32: np.ndarray, bf16: np.ndarray, extra: dict) -> None:
    """A real checkpoint written by the safetensors library, bf16 included (numpy has none: raw bits)."""
    folder.mkdir()
    arrays = {"w.f32": f32, "ids": np.arange(10, dtype=np.int64), "mask": np.array([True, False]), **extra}
    specs = {
        name: TensorSpec(dtype=str(a.dtype), shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
        for name, a in arrays.items()
    }
    bits = bf16_bits(bf16)
    specs["w.bf16"] = TensorSpec(
        dtype="bfloat16", shape=list(bits.shape), data_ptr=bits.ctypes.data, data_len=bits.nbytes
    )
    (folder / "model.safetensors").write_bytes(safetensors.serialize(specs, None))
    (folder / "config.json").write_text("{}")
