"""What an SGLang server's log says, read incrementally (``LogScan``): its phases and startup timings, whether
it is ready (rank 0's "fired up", a follower node's dummy health check) or was sent SIGTERM, the failure
signatures of FIELD-NOTES §5 with their hints, accept lengths stuck at 1.00, and the line that says what
failed (``error_line``). Lines of ranks other than the node's lead are read for failures only.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import collections
import os
import re
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from .shared.logline import record, tier_line

READY_LINE = "The server is fired up and ready to roll!"
# A node of rank >= 1 serves no API: once its schedulers are up it runs launch_dummy_health_check_server and
# logs this (utils/common.py), and nothing more; that is its ready.
FOLLOWER_READY = ("Starting dummy health check server at", "Dummy health check server scheduled")
SIGTERM_LINE = "SIGTERM received"
STUCK_DECODE_LINES = 3  # this many decode lines in a row at accept len 1.00 means nothing is accepted

# Failure signatures (FIELD-NOTES §5), most specific first: (key, text in the log, hint, action).
SIGNATURES = (
    (
        "shape_mismatch",
        "Attempted to load weight (",
        "The drafter's weights do not fit this target (it was trained for another model's shapes): open "
        "Compare to see which tensor differs, and use a drafter built for this target.",
        "compare",
    ),
    (
        "oom",
        "Not enough memory. Please try to increase --mem-fraction-static",
        "The KV cache did not fit: raise --mem-fraction-static (e.g. 0.9) in the profile's extra flags, or "
        "lower --context-length / --max-running-requests; check no other process holds GPU memory.",
        None,
    ),
    (
        "cuda_graph",
        "Capture cuda graph failed",
        "CUDA graph capture ran out of memory: add --cuda-graph-max-bs 16 (SGLang 0.5.23: "
        "--cuda-graph-max-bs-decode 16) or a lower --mem-fraction-static (e.g. 0.8) to the profile's extra flags "
        "(--disable-cuda-graph works but is much slower).",
        None,
    ),
    (
        "unbalanced",
        "The memory capacity is unbalanced",
        "Another process holds memory on some GPUs: see the GPU list (nvidia-smi) and stop it, or pick other "
        "GPUs with --base-gpu-id.",
        None,
    ),
    (
        "warmup",
        "Initialization failed. warmup error",
        "The server loaded but its warmup request failed: read the traceback above; --skip-server-warmup "
        "gets it up for a request by hand.",
        None,
    ),
    (
        "port",
        "error while attempting to bind on address",
        "Another program listens on the server's port: stop it, or give the profile another port.",
        None,
    ),
    (
        "model_missing",
        "HFValidationError",
        "The model path is neither a folder on the host nor a Hub repo id: check the config's target (or the "
        "profile's model).",
        None,
    ),
    (
        "cuda_oom",
        "CUDA out of memory",
        "A GPU ran out of memory: lower --mem-fraction-static or the CUDA graphs' batch size (--cuda-graph-max-bs, "
        "0.5.23: --cuda-graph-max-bs-decode), and check nvidia-smi "
        "for other processes.",
        None,
    ),
    (
        "flags",
        "launch_server.py: error: ",
        "SGLang refused its command line: the host's sglang does not know a flag or value; compare the "
        "profile's extra flags with `python -m sglang.launch_server --help` on the host.",
        None,
    ),
    (
        "import",
        "ModuleNotFoundError",
        "The host's Python cannot import something SGLang needs: check the host's python in the config and "
        "the sglang install there.",
        None,
    ),
    (
        "scheduler",
        "Scheduler hit an exception",
        "A scheduler process failed: the last error line says what; the traceback is in the log.",
        None,
    ),
)

_OTHER_RANK = re.compile(r"(?:DP|PP|CP|TP)[1-9]")  # any rank but 0 (ATTN_CP1, MOE_DP1 too)
_ACCEPT = re.compile(r"accept len: (\d+(?:\.\d+)?)")
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


# Startup milestones, matched in lower case (0.5.6 writes "cuda graph", 0.5.23 "CUDA graph"): the graph
# captures of the target (0.5.6 "Capture cuda graph", 0.5.23 "Capture target verify|decode CUDA graph") and
# of the drafter (0.5.6 "Capture draft [extend ]cuda graph", 0.5.23 "Capture draft decode|extend CUDA graph").
_TARGET_GRAPH = re.compile(r"capture (?:target \w+ )?cuda graph begin")
_DRAFT_GRAPH = re.compile(r"capture draft (?:\w+ )?cuda graph begin")
# How long a step took, as the line ending it says: 0.5.23 "elapsed=1.23 s", 0.5.6 "Time elapsed: 1.23 s".
_ELAPSED = re.compile(r"elapsed(?:=|: )(\d+(?:\.\d+)?) s")
_TIMINGS = re.compile(r"(\w+)=(\d+(?:\.\d+)?)")
# The KV pool's size, on the line after the graphs: "max_total_num_tokens=444500, max_prefill_tokens=…".
_KV_TOKENS = re.compile(r"\bmax_total_num_tokens=(\d+)")


def _timestamp(text: str, millis: Optional[str] = None) -> Optional[float]:
    try:
        ts = time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S"))
    except ValueError:
        return None
    return ts + int(millis) / 1000.0 if millis else ts


class LogScan(object):
    """What the server's log has said so far, read incrementally from ``offset``."""

    def __init__(self, lead: int = 0) -> None:
        # The TP rank that speaks for this node: 0, or on node R of a multi-node server tp / nnodes * R.
        self.lead = lead
        self.offset = 0
        self.inode: Optional[Tuple[int, int]] = None
        self.phases: List[Dict[str, Any]] = []
        self.target_loaded = False
        self.ready_at: Optional[float] = None
        self.sigterm_at: Optional[float] = None
        self.found: Dict[str, str] = {}
        self.found_ranks: Dict[str, str] = {}  # signature -> the ranks of the line that showed it ("TP7")
        self.accept: Deque[float] = collections.deque(maxlen=STUCK_DECODE_LINES)
        self.last_ts: Optional[float] = None
        self.health: Optional[int] = None
        self.health_at = 0.0
        self.server_info: Optional[Dict[str, Any]] = None
        self.elapsed: Dict[str, float] = {}  # phase -> seconds the log itself measured (load, capture)
        self.startup_timings: Optional[Dict[str, Any]] = None  # 0.5.23's "Engine startup timings (s): …"
        self.kv_tokens: Optional[int] = None  # max_total_num_tokens: what the KV cache holds, in tokens
        self.tier: Optional[int] = None  # the adaptive step count in force, as the last switch line said
        self.switch_lines = False  # the worker logs its switches (0.5.12+): a slot's decision is not one

    @property
    def phase(self) -> str:
        return self.phases[-1]["phase"] if self.phases else "launching"

    def _enter(self, phase: str, ts: Optional[float]) -> None:
        if phase != self.phase or not self.phases:
            self.phases.append({"phase": phase, "start": ts})

    def update(self, path: str) -> None:
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                inode = (st.st_dev, st.st_ino)
                if st.st_size < self.offset or (self.inode is not None and inode != self.inode):
                    self.__init__(self.lead)  # type: ignore[misc]  # truncated or replaced: what it said before no longer stands
                self.inode = inode
                f.seek(self.offset)
                while True:
                    data = f.read(1 << 20)
                    end = data.rfind(b"\n")
                    if end < 0:
                        return
                    self.offset += end + 1
                    for line in data[: end + 1].decode("utf-8", "replace").splitlines():
                        self.feed(line)
                    f.seek(self.offset)
        except FileNotFoundError:
            return

    def feed(self, line: str) -> None:
        found = record(line)  # the rule every log reader follows (after colour codes, actor prefixes)
        ts = None
        other_rank = False
        if found.stamp:
            ts = _timestamp(found.stamp, found.millis)
            self.last_ts = ts or self.last_ts
            other_rank = _other_rank(found.ranks, self.lead)
        message = line[found.start :]
        for key, text, _, _ in SIGNATURES:
            if key not in self.found and text in message:
                self.found[key] = message.strip()
                self.found_ranks[key] = found.ranks
        if other_rank:
            return  # every rank logs its phases; rank 0 speaks for them
        if "accept len: " in message and "Decode batch" in message:
            accept = _ACCEPT.search(message)
            if accept:
                self.accept.append(float(accept.group(1)))
            return
        tier = tier_line(message)
        if tier is not None:
            self.switch_lines = self.switch_lines or tier.switch
            if tier.switch or tier.start or not self.switch_lines:  # with switch lines, a slot's line is none
                self.tier = tier.steps
            return
        ts = ts or self.last_ts
        lowered = message.lower()
        if "load weight begin" in lowered:
            self._enter("loading draft weights" if self.target_loaded else "loading weights", ts)
        elif "load weight end" in lowered:
            self._measured(lowered)
            if not self.target_loaded:
                self.target_loaded = True
                self._enter("allocating KV cache", ts)
        elif _TARGET_GRAPH.search(lowered):
            self._enter("capturing CUDA graphs", ts)
        elif _DRAFT_GRAPH.search(lowered):
            self._enter("capturing draft graphs", ts)
        elif "cuda graph end" in lowered:
            self._measured(lowered)
        elif "max_total_num_tokens=" in message:
            tokens = _KV_TOKENS.search(message)
            if tokens:
                self.kv_tokens = int(tokens.group(1))
        elif message.startswith("Engine startup timings (s): "):
            self.startup_timings = _startup_timings(message)
        elif "Uvicorn running on" in message:
            self._enter("warming up", ts)
        elif READY_LINE in message or message.startswith(FOLLOWER_READY):
            self.ready_at = ts
            self._enter("ready", ts)
        elif SIGTERM_LINE in message:
            self.sigterm_at = ts
            self._enter("draining", ts)

    def _measured(self, lowered: str) -> None:
        """Add the seconds a ``… end. elapsed=…`` line states to the current phase's measured time."""
        found = _ELAPSED.search(lowered)
        if found:
            self.elapsed[self.phase] = self.elapsed.get(self.phase, 0.0) + float(found.group(1))

    def failure(self) -> Tuple[Optional[str], Optional[str], Optional[str], Optional[str]]:
        """(key, the error line, hint, action) of the most specific signature the log showed."""
        for key, _, hint, action in SIGNATURES:
            if key in self.found:
                return key, self.found[key], hint, action
        return None, None, None, None

    def accept_stuck(self) -> bool:
        return len(self.accept) == STUCK_DECODE_LINES and all(a <= 1.0 for a in self.accept)


def _other_rank(ranks: str, lead: int) -> bool:
    """Whether a line's rank prefix (`` DP0 TP3``) is another rank than the node's ``lead`` TP rank."""
    if not lead or not ranks.split():
        return bool(_OTHER_RANK.search(ranks))
    return bool(re.search(r"(?:DP|PP|CP)[1-9]", ranks)) or ("TP%d" % lead) not in ranks.split()


def _startup_timings(message: str) -> Dict[str, Any]:
    """``Engine startup timings (s): load_weight=F, …, cuda_graph={target_verify=F, …}, tokenizer_e2e=F``
    → ``{"load_weight": F, …, "cuda_graph": {"target_verify": F, …}}`` (fields it lacks are left out)."""
    text = message.split(": ", 1)[1]
    head, _, rest = text.partition("cuda_graph={")
    graphs, _, tail = rest.partition("}")
    out: Dict[str, Any] = {k: float(v) for k, v in _TIMINGS.findall(head + tail)}
    if rest:
        out["cuda_graph"] = {k: float(v) for k, v in _TIMINGS.findall(graphs)}
    return out


def error_line(found: Optional[str], tail: List[str], ranks: Optional[str] = None) -> Optional[str]:
    """The line that says what failed: the signature's own, or else the last exception line of the log. A
    traceback that ends without one (the log was cut, or the process died inside it) says so, with its last
    frame; ``ranks``: the rank that wrote the signature when it is not rank 0's (``TP7``)."""
    if found and _EXCEPTION.match(found):
        return found
    for line in reversed(tail):
        text = line[record(line).start :].strip()
        if _EXCEPTION.match(text):
            return text
    if found is None:
        return None
    where = " (on %s)" % ranks if ranks and _OTHER_RANK.search(ranks) else ""
    frame = None
    for line in reversed(tail):
        frame = _FRAME.search(line)
        if frame:
            break
    if "Traceback" not in found or frame is None:
        return found + where
    return "%s%s; the traceback ends without its exception line (cut?), last frame %s:%s in %s" % (
        found.split(": Traceback")[0],
        where,
        os.path.basename(frame.group(1)),
        frame.group(2),
        frame.group(3),
    )
