"""What the host is: hostname, Python, platform, the ML libraries it can import, its GPUs; HTTP to local servers.

GPUs are read through NVML (the driver's ``libnvidia-ml.so.1``, via ctypes: what nvidia-smi and nvitop use
underneath; loaded once per agent, well under a millisecond per sample) and, where that library is missing
or refuses, from ``nvidia-smi`` (two forks of a heavy tool per sample: tens of ms). Both give the same shape.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time

from . import loopback, ownership
from .registry import AgentError, Context, method

# A cold command's ``info`` waits for this module's imports: typing is for the checker only, and platform,
# socket and urllib are imported where they are used (platform and versions come from the kept facts).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple, Union

LIBRARIES = ("sglang", "huggingface_hub", "safetensors", "torch", "numpy", "hf_xet", "sglang_router")


_VERSIONS: List[
    Tuple[Tuple[Optional[int], ...], Dict[str, Optional[str]]]
] = []  # [(folders' mtimes, versions)]: metadata lookups cost ~40 ms on a loaded host
_VERSIONS_LOCK = threading.Lock()


def _install_key() -> Tuple[Optional[int], ...]:
    """The mtimes of the folders packages install into (sys.path's): a pip install, upgrade or uninstall adds
    or removes a ``*.dist-info`` there, which changes its folder's mtime and so invalidates the cache."""
    key: List[Optional[int]] = []
    for path in sys.path:
        try:
            key.append(os.stat(path or ".").st_mtime_ns)
        except OSError:
            key.append(None)
    return tuple(key)


def library_versions() -> Dict[str, Any]:
    """Versions from package metadata: cheap, and never imports torch or sglang. Computed once per agent (by
    ``warm`` as it starts) and again only after the install folders changed."""
    with _VERSIONS_LOCK:
        key = _install_key()
        if not _VERSIONS or _VERSIONS[0][0] != key:
            _VERSIONS[:] = [(key, _read_versions())]
        return dict(_VERSIONS[0][1])


def _read_versions() -> Dict[str, Optional[str]]:
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return {}
    out: Dict[str, Optional[str]] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def gpus(timeout: float = 5.0) -> List[Dict[str, Any]]:
    """Per-GPU memory (MiB) and utilisation (%) plus the pids using it; [] when there is neither NVML nor
    nvidia-smi. ``[{"index", "name", "memory_used_mib", "memory_total_mib", "utilization",
    "processes": [{"pid", "used_mib"}]}]``."""
    lib = _nvml()
    if lib is not None:
        listed = nvml_gpus(lib)
        if listed is not None:
            return listed
    return smi_gpus(timeout)


def smi_gpus(timeout: float = 5.0) -> List[Dict[str, Any]]:
    """``gpus()`` from nvidia-smi; [] without it."""
    query = "index,uuid,name,memory.used,memory.total,utilization.gpu"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        ).stdout
        apps = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    procs: Dict[str, List[Dict[str, Any]]] = {}
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit():
            procs.setdefault(parts[0], []).append({"pid": int(parts[1]), "used_mib": _num(parts[2])})
    result = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 6:
            continue
        result.append(
            {
                "index": int(parts[0]),
                "name": parts[2],
                "memory_used_mib": _num(parts[3]),
                "memory_total_mib": _num(parts[4]),
                "utilization": _num(parts[5]),
                "processes": procs.get(parts[1], []),
            }
        )
    return result


# --- NVML through ctypes ---------------------------------------------------------------------------------

NVML_LIBRARY = "libnvidia-ml.so.1"
_NVML_INSUFFICIENT_SIZE = 7
_NVML_NOT_AVAILABLE = (1 << 64) - 1  # usedGpuMemory when the driver cannot say (e.g. without privileges)
_MIB = 1 << 20
_NVML: Union[ctypes.CDLL, bool, None] = None  # the loaded and initialised library; False once it proved unavailable
_NVML_LOCK = threading.Lock()


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _MemoryV2(ctypes.Structure):  # used without the driver's reserved memory, as nvidia-smi shows it
    _fields_ = [
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Process(ctypes.Structure):  # nvmlProcessInfo_t of the _v2/_v3 calls
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("used", ctypes.c_ulonglong),
        ("gpu_instance", ctypes.c_uint),
        ("compute_instance", ctypes.c_uint),
    ]


class _ProcessV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong)]


def _nvml() -> Optional[ctypes.CDLL]:
    """The NVML library, loaded and initialised once per agent; None where there is none."""
    global _NVML
    with _NVML_LOCK:
        if _NVML is None:
            try:
                lib = ctypes.CDLL(NVML_LIBRARY)
                init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
                _NVML = lib if init() == 0 else False
            except (OSError, AttributeError):
                _NVML = False
        return _NVML if isinstance(_NVML, ctypes.CDLL) else None


def _call(lib: ctypes.CDLL, *names: str) -> Callable[..., int]:
    """The first of ``names`` the library exports (newest first)."""
    for name in names:
        fn: Optional[Callable[..., int]] = getattr(lib, name, None)
        if fn is not None:
            return fn
    raise AttributeError(names[-1])


def nvml_gpus(lib: ctypes.CDLL) -> Optional[List[Dict[str, Any]]]:
    """``gpus()`` read through NVML; None if the library fails (the caller falls back to nvidia-smi)."""
    try:
        count = ctypes.c_uint()
        if _call(lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount")(ctypes.byref(count)) != 0:
            return None
        out = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            get = _call(lib, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex")
            if get(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
                return None
            name = ctypes.create_string_buffer(96)
            if lib.nvmlDeviceGetName(handle, name, ctypes.c_uint(len(name))) != 0:
                return None
            used, total = _nvml_memory(lib, handle)
            util = _Utilization()
            busy = lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) == 0
            out.append(
                {
                    "index": index,
                    "name": name.value.decode("utf-8", "replace"),
                    "memory_used_mib": used,
                    "memory_total_mib": total,
                    "utilization": float(util.gpu) if busy else None,
                    "processes": _nvml_processes(lib, handle),
                }
            )
        return out
    except AttributeError:  # a library without the calls we need
        return None


def _nvml_memory(lib: ctypes.CDLL, handle: ctypes.c_void_p) -> Tuple[Optional[float], Optional[float]]:
    """(used, total) in whole MiB, as nvidia-smi prints them (used without the driver's reserved memory)."""
    fn = getattr(lib, "nvmlDeviceGetMemoryInfo_v2", None)
    if fn is not None:
        mem = _MemoryV2(version=ctypes.sizeof(_MemoryV2) | (2 << 24))
        if fn(handle, ctypes.byref(mem)) == 0:
            return _mib(mem.used), _mib(mem.total)
    mem1 = _Memory()
    if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem1)) != 0:
        return None, None
    return _mib(mem1.used), _mib(mem1.total)


def _mib(n: int) -> float:
    return float(round(n / _MIB))  # nvidia-smi rounds to the nearest MiB


def _nvml_processes(lib: ctypes.CDLL, handle: ctypes.c_void_p) -> List[Dict[str, Any]]:
    for name, struct in (
        ("nvmlDeviceGetComputeRunningProcesses_v3", _Process),
        ("nvmlDeviceGetComputeRunningProcesses_v2", _Process),
        ("nvmlDeviceGetComputeRunningProcesses", _ProcessV1),
    ):
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        size = 16
        for _ in range(4):  # processes may come and go between the calls
            count = ctypes.c_uint(size)
            infos = (struct * size)()
            rc = fn(handle, ctypes.byref(count), infos)
            if rc == 0:
                return [
                    {
                        "pid": int(p.pid),
                        "used_mib": None if p.used == _NVML_NOT_AVAILABLE else _mib(p.used),
                    }
                    for p in infos[: count.value]
                ]
            if rc != _NVML_INSUFFICIENT_SIZE:
                break
            size = count.value + 8
        return []
    return []


def _num(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


@method("ping")
def ping(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    return {"t": time.time()}


_PLATFORM: List[str] = []  # platform.platform(), once: it reads the interpreter's binary for the libc version
_PLATFORM_LOCK = threading.Lock()


def platform_text() -> str:
    with _PLATFORM_LOCK:
        if not _PLATFORM:
            import platform

            _PLATFORM.append(platform.platform())
        return _PLATFORM[0]


FACTS_FILE = "host-facts.json"


def _facts_key() -> List[Any]:
    """What the kept platform text and library versions depend on: the kernel, the interpreter's binary and
    the folders packages install into (``_install_key``)."""
    try:
        st = os.stat(sys.executable)
        exe: List[Any] = [sys.executable, st.st_mtime_ns, st.st_size]
    except OSError:
        exe = [sys.executable]
    return [list(os.uname()), exe, list(_install_key())]


def load_facts(state_dir: str) -> bool:
    """Take the platform text and versions an earlier agent kept in ``state_dir``, if nothing they depend on
    changed since (a cold command's ``info`` then waits ~1 ms, not the ~15-40 ms of reading package metadata)."""
    try:
        with open(os.path.join(state_dir, FACTS_FILE)) as f:
            kept = json.load(f)
        key, text, versions = kept["key"], kept["platform"], kept["versions"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if key != _facts_key() or not isinstance(text, str) or not isinstance(versions, dict):
        return False
    with _PLATFORM_LOCK, _VERSIONS_LOCK:
        _PLATFORM[:] = [text]
        _VERSIONS[:] = [(tuple(key[2]), versions)]
    return True


def _keep_facts(state_dir: str) -> None:
    from . import jobs  # only when there is something to keep: a cold ``info`` waits for this thread

    facts = {"key": _facts_key(), "platform": platform_text(), "versions": library_versions()}
    try:
        jobs.write_json(os.path.join(state_dir, FACTS_FILE), facts)
    except OSError:  # a full disk or a read-only state dir: the next agent reads the metadata again
        pass


def warm(state_dir: Optional[str] = None, kept: Optional[bool] = None) -> None:
    """What the first ``info`` would wait for (10-70 ms each), done as the agent starts: a kept connection's
    next agent (backend/transport/master.py) has it ready before a command asks, and the platform text and
    versions are kept in ``state_dir`` for the next agent. The GPU figures themselves are read when asked;
    only the library is loaded here. ``kept``: what ``load_facts`` returned, where the caller took the kept
    facts already."""
    if kept is None:
        kept = state_dir is not None and load_facts(state_dir)
    platform_text()
    library_versions()
    if state_dir is not None and not kept:
        _keep_facts(state_dir)
    _nvml()
    job_ownership()


_OWNERSHIP_LOCK = threading.Lock()


def job_ownership() -> str:
    """``ownership.method_in_use``, one caller at a time: its cgroup probe (a throwaway process) runs once and
    is remembered, so an ``info`` that arrives during the warm-up waits for it instead of probing again."""
    with _OWNERSHIP_LOCK:
        return ownership.method_in_use()


@method("info")
def info(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    return {
        "hostname": os.uname().nodename,  # gethostname(2) itself: socket's import is ~3 ms of a cold info
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform_text(),
        "versions": library_versions(),
        "gpus": gpus(),
        "job_ownership": job_ownership(),
        "pid": os.getpid(),
        "state_dir": ctx.state_dir,
    }


@method("gpus")
def gpu_status(params: Dict[str, Any], ctx: Context) -> List[Dict[str, Any]]:
    return gpus()


@method("http.request")
def http_request(params: Dict[str, Any], ctx: Context) -> Dict[str, Any]:
    """An HTTP request to a server on the host's loopback (the SGLang server); never elsewhere, never through a
    proxy. A server of ours on that port that listens on this machine's address instead (a fleet's replica)
    is asked there, and sent its API key where it has one."""
    from urllib import parse as urlparse

    url = params.get("url", "")
    parts = urlparse.urlsplit(url)
    if not loopback.is_loopback(parts.hostname or ""):
        raise AgentError("http.request only reaches the host's loopback, not %r" % (parts.hostname or ""), "invalid")
    key = None
    if ctx is not None and parts.port:
        from .servers import reach  # here: it loads jobs, which a cold ``info`` goes without

        address, key = reach(ctx.state_dir, parts.port)
        if address != parts.hostname:  # a fleet's replica listens on its machine's address, not on loopback
            url = urlparse.urlunsplit(parts._replace(netloc="%s:%d" % (address, parts.port)))
    out = fetch(url, float(params.get("timeout") or 5), params.get("json"), params.get("method"), key)
    if out.get("text"):  # SGLang's /server_info lists its own api_key: it goes no further than here
        out["text"] = loopback.hide(out["text"], key)
    return out


def fetch(
    url: str, timeout: float, body: Any = None, method: Optional[str] = None, key: Optional[str] = None
) -> Dict[str, Any]:
    """``{status, text, elapsed}`` of one request to a loopback ``url`` (``{status: None, error}`` when nothing
    answers); ``key``: the server's API key."""
    from urllib import error as urlerror  # loaded with loopback's urllib.request by now

    data = json.dumps(body).encode() if body is not None else None
    req = loopback.request(url, data, loopback.bearer(key), method=method or ("POST" if data else "GET"))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    t0 = time.time()
    try:
        with loopback.urlopen(req, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode("utf-8", "replace")
    except urlerror.HTTPError as exc:
        status, text = exc.code, exc.read().decode("utf-8", "replace")
    except (urlerror.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"status": None, "error": str(reason), "elapsed": time.time() - t0}
    return {"status": status, "text": text, "elapsed": time.time() - t0}
