"""GPU readings on the host through both paths, over `local` and the real sshd, with no GPU on this machine.

NVML runs against a stub ``libnvidia-ml.so.1`` compiled here with gcc (skipped, saying so, without a C
compiler); nvidia-smi is a stub script printing the same two GPUs. Both must give the same readings. The
real library was compared with nvidia-smi on an H200 (same readings; 0.02 ms against 54 ms a sample): this
machine has no GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from backend.connection import Connection
from backend.settings.model import HostConfig

pytestmark = pytest.mark.e2e

# Two GPUs; GPU0 has 20 processes (more than a first call makes room for), GPU1 one whose memory the
# driver does not report. Only the calls probes.py makes, with NVML's signatures and return codes.
STUB_C = r"""
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } memv2;
typedef struct { unsigned long long total, free, used; } memv1;
typedef struct { unsigned int gpu, memory; } util;
typedef struct { unsigned int pid; unsigned long long used; unsigned int gi, ci; } proc;
static const unsigned long long MIB = 1ULL << 20;
static int inited = 0;
int nvmlInit_v2(void) { inited = 1; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { if (!inited) return 1; *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) { *h = (void *)(unsigned long)(i + 1); return 0; }
static int idx(void *h) { return (int)(unsigned long)h - 1; }
int nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
  const char *s = "NVIDIA H200"; unsigned int i = 0;
  for (; s[i] && i + 1 < len; i++) buf[i] = s[i];
  buf[i] = 0; return 0;
}
int nvmlDeviceGetMemoryInfo_v2(void *h, memv2 *m) {
  if ((m->version >> 24) != 2 || (m->version & 0xffffff) != sizeof(memv2)) return 3;
  m->total = 143771 * MIB; m->reserved = 512 * MIB;
  m->used = (idx(h) == 0 ? 71000 : 69000) * MIB - MIB / 4;  /* nvidia-smi rounds to whole MiB */
  m->free = m->total - m->used - m->reserved;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void *h, util *u) { u->gpu = idx(h) == 0 ? 35 : 0; u->memory = 0; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned int *count, proc *out) {
  unsigned int n = idx(h) == 0 ? 20 : 1, i;
  if (*count < n) { *count = n; return 7; }
  for (i = 0; i < n; i++) {
    out[i].pid = idx(h) == 0 ? 1000 + i : 4343;
    out[i].used = idx(h) == 0 ? 3500 * MIB : ~0ULL;
    out[i].gi = out[i].ci = 0;
  }
  *count = n; return 0;
}
"""

SMI = """#!/bin/sh
case "$1" in
  --query-gpu=*) echo "0, GPU-a, NVIDIA H200, 71000, 143771, 35"; echo "1, GPU-b, NVIDIA H200, 69000, 143771, 0";;
  --query-compute-apps=*) i=0; while [ $i -lt 20 ]; do echo "GPU-a, $((1000 + i)), 3500"; i=$((i + 1)); done
    echo "GPU-b, 4343, [N/A]";;
esac
"""

EXPECTED = [
    {
        "index": 0,
        "name": "NVIDIA H200",
        "memory_used_mib": 71000.0,
        "memory_total_mib": 143771.0,
        "utilization": 35.0,
        "processes": [{"pid": 1000 + i, "used_mib": 3500.0} for i in range(20)],
    },
    {
        "index": 1,
        "name": "NVIDIA H200",
        "memory_used_mib": 69000.0,
        "memory_total_mib": 143771.0,
        "utilization": 0.0,
        "processes": [{"pid": 4343, "used_mib": None}],
    },
]


def python_with(tmp_path: Path, name: str, env: str) -> str:
    """A host Python that starts with ``env`` set (how the agent, over either transport, gets it)."""
    wrapper = tmp_path / name
    wrapper.write_text(f'#!/bin/sh\n{env} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


async def readings(host: HostConfig) -> list:
    conn = await Connection.open(host)
    try:
        return await conn.call("gpus")
    finally:
        await conn.close()


@pytest.fixture
def nvml_stub(tmp_path) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc here to build the stub libnvidia-ml.so.1: the NVML path is untested on this machine")
    lib_dir = tmp_path / "nvml"
    lib_dir.mkdir()
    (lib_dir / "stub.c").write_text(STUB_C)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(lib_dir / "libnvidia-ml.so.1"), str(lib_dir / "stub.c")], check=True
    )
    return lib_dir


@pytest.mark.slow
async def test_nvml_and_nvidia_smi_give_the_same_readings(host, tmp_path, nvml_stub):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = f"PATH={bin_dir}:{os.environ['PATH']}"
    # nvidia-smi alone (no NVML library on this machine), then NVML with a broken nvidia-smi beside it.
    smi = await readings(replace(host, python=python_with(tmp_path, "py-smi", path), workdir=str(tmp_path / "a")))
    assert smi == EXPECTED
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    nvml_env = f"{path} LD_LIBRARY_PATH={nvml_stub}"
    nvml = await readings(replace(host, python=python_with(tmp_path, "py-nvml", nvml_env), workdir=str(tmp_path / "b")))
    assert nvml == EXPECTED


async def test_no_nvml_and_no_nvidia_smi_is_no_gpus(host, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    py = python_with(tmp_path, "py-none", f"PATH={empty}:/usr/bin:/bin")
    assert await readings(replace(host, python=py, workdir=str(tmp_path / "c"))) == []
