"""SIMULATED SGLang's scheduler: requests admitted in batches (a prefill pass each), decode passes timed by
``timing.pass_ms`` with each running request's drafts accepted along its chain of rates, the ``Prefill batch``
and ``Decode batch`` lines (and what their accept rate counts, per release), the gauges they set, and the text
every response is made of (``prompts``: what a prompt does to acceptance, the words, loops and collapse).
Randomness comes from one ``random.Random(--random-seed)`` (the words from another of the same seed): a seeded
single stream is deterministic. Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from backend.sandbox.sglang_sim import idle, prompts, scenario, traces
from backend.sandbox.sglang_sim.args import UNLIMITED_MAX_RUNNING
from backend.sandbox.sglang_sim.dialect import Dialect
from backend.sandbox.sglang_sim.log import Log, env_flag
from backend.sandbox.sglang_sim.metrics import Metrics
from backend.sandbox.sglang_sim.timing import (
    DRAFT_STEP_MS,
    NO_CUDA_GRAPH_FACTOR,
    PREFILL_MS,
    PREFILL_MS_PER_TOKEN,
    REQUEST_SPREAD,
    pass_ms,
    time_scale,
)

STALL_S = 1.0  # lateness the decode clock catches up; longer is a stall, not load


class Request:
    """One generation request as the scheduler and the HTTP handler share it."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int, steps: int = 0, ease: float = 1.0) -> None:
        self.rid = uuid.uuid4().hex
        self.ease = ease  # this request's acceptance factor (how predictable its text is)
        self.looping = False  # its prompt sent the model into a loop (``prompts``)
        self.histogram = [0] * (steps + 1)  # verifies that accepted exactly k drafts
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.created = time.time()
        self.output_ids: List[int] = []
        self.verify_ct = 0
        self.accepted_drafts = 0
        # DSPARK's ragged verify: tokens verified (the caps, bonus slot counted), uncapped accept lengths, caps seen
        self.cap_tokens = self.block_tokens = 0
        self.cap_histogram: List[int] = []
        self.finished = False
        self.finished_time = 0.0
        self.aborted = False
        self._unsent = 0
        self._sent = 0
        self._cv = threading.Condition()
        # Told (rid, completion tokens so far, finished) at each release: what reaches SGLang's tokenizer.
        self.on_release: Optional[Callable[[str, int, bool], None]] = None

    def push(self, token_ids: List[int], finished: bool, stream_interval: int) -> None:
        """Append tokens; wake the handler every ``stream_interval`` tokens and at the end."""
        with self._cv:
            self.output_ids.extend(token_ids)
            self._unsent += len(token_ids)
            if finished:
                self.finished = True
                self.finished_time = time.time()
            if finished or self._unsent >= stream_interval:
                self._unsent = 0
                self._cv.notify_all()
                if self.on_release is not None:
                    self.on_release(self.rid, len(self.output_ids), finished)

    def updates(self) -> Any:
        """Yield (all output ids so far, finished) each time new tokens were released, until finished."""
        while True:
            with self._cv:
                while len(self.output_ids) == self._sent and not self.finished:
                    self._cv.wait()
                self._sent = len(self.output_ids)
                ids, finished = list(self.output_ids), self.finished
            yield ids, finished
            if finished:
                return

    def result(self) -> List[int]:
        """Wait until the request finishes; its output ids."""
        with self._cv:
            while not self.finished:
                self._cv.wait()
            return list(self.output_ids)


class Engine:
    """The scheduler: admits requests (a prefill pass each batch), runs decode passes, logs and counts."""

    def __init__(
        self, args: Dict[str, Any], spec: Dict[str, Any], log: Log, metrics: Metrics, ranks: str, dialect: Dialect
    ) -> None:
        self.log, self.metrics, self.ranks, self.dialect = log, metrics, ranks, dialect
        self.forward_iters = env_flag("SGLANG_LOG_FORWARD_ITERS")  # `Decode batch [5521], …`
        self.step_time_dict: Optional[Dict[int, List[float]]] = {} if env_flag("SGLANG_RECORD_STEP_TIME") else None
        self.spec = spec  # {} without speculation, else steps, draft_tokens, rates (per position), draft_steps
        self.interval = max(1, int(args["decode_log_interval"]))
        self.stream_interval = max(1, int(args["stream_interval"]))
        self.max_running = int(args["max_running_requests"] or UNLIMITED_MAX_RUNNING)
        self.graph_max_bs = 0 if args["disable_cuda_graph"] else int(args["cuda_graph_max_bs"])
        self.max_total_tokens = 1
        self.rng = random.Random(args["random_seed"])
        self._cv = threading.Condition()
        self.waiting: List[Request] = []
        self.running: List[Request] = []
        self.forward_ct = self.forward_ct_decode = 0
        self.generated_since_log = 0
        self.last_decode_log = time.perf_counter()
        self.spec_tokens = self.spec_ct = self.spec_correct = 0  # since the last decode line
        self.spec_cap_tokens = self.spec_block_tokens = 0  # DSPARK's verify windows and uncapped accepts, likewise
        self.spec_total_tokens = self.spec_total_ct = 0
        self.last_gen_throughput = 0.0
        self.idle = idle.IdleCheck(bool(args["enable_metrics"]), dialect.current, time_scale())
        self._clock = 0.0
        self.words = prompts.Words(args["random_seed"])
        self.profiler: Optional[traces.Profiler] = None  # /start_profile's, told of every forward

    def start(self, max_total_tokens: int) -> None:
        self.max_total_tokens = max(1, max_total_tokens)
        threading.Thread(target=self._loop, name="scheduler", daemon=True).start()

    def submit(
        self, prompt_tokens: int, max_new_tokens: int, stream: bool = True, traits: Optional[prompts.Traits] = None
    ) -> Request:
        """Queue a request; ``traits``: what its prompt does to acceptance (``prompts.traits``), None for none."""
        with self._cv:
            spread = self.spec.get("spread")
            if spread is None:
                ease = min(1.2, max(0.8, self.rng.gauss(1.0, REQUEST_SPREAD)))
            else:
                ease = min(scenario.MAX_EASE, max(0.0, self.rng.gauss(1.0, spread)))
            # SGLang grows a request's histogram as passes accept more (batch_result_processor.py:829-842): sized for
            # the fixed steps here, from one bin under adaptive (no pass shows positions past its tier)
            bins = 0 if "adaptive" in self.spec else self.spec.get("steps", 0)
            if traits is not None:
                ease *= prompts.ease(traits, self.spec)
            req = Request(prompt_tokens, max_new_tokens, bins, ease)
            req.looping = traits is not None and traits.looping
            histograms = self.metrics.histograms
            if histograms is not None:
                histograms.arrived(req.rid, req.created, stream)
                req.on_release = histograms.released
            self.waiting.append(req)
            self._cv.notify()
        return req

    def abort(self, req: Request) -> None:
        with self._cv:
            req.aborted = True
            if self.metrics.histograms is not None:
                self.metrics.histograms.forget(req.rid)
            if req in self.waiting:
                self.waiting.remove(req)

    def avg_spec_accept_length(self) -> Optional[float]:
        with self._cv:
            return self.spec_total_tokens / self.spec_total_ct if self.spec_total_ct else None

    # -- the loop ---------------------------------------------------------------------------------------

    def _sleep(self, ms: float) -> None:
        """Advance the simulated clock by ``ms`` and sleep until it: any lateness (sleep overshoot, the process
        preempted beside a CPU hog) is caught up by the next passes, so rates hold; only a stall past
        ``STALL_S`` (a stopped process) restarts the clock instead of bursting. ``_loop`` restarts it after idle."""
        now = time.perf_counter()
        if self._clock < now - STALL_S:
            self._clock = now
        self._clock += ms / 1000.0
        time.sleep(max(0.0, self._clock - now))

    def _loop(self) -> None:
        while True:
            with self._cv:
                if not self.waiting and not self.running:
                    while not self.waiting and not self.running:
                        self._cv.wait(self.idle.run(self))  # SGLang's idle self-check rewrites the gauges
                    self._clock = time.perf_counter()  # the simulated GPU was idle, not late
                self.running = [r for r in self.running if not r.aborted]
                room = self.max_running - len(self.running)
                admitted, self.waiting = self.waiting[:room], self.waiting[room:]
            if admitted:
                self._prefill(admitted)
            elif self.running:
                self._decode()

    def _tokens(self, n: int, req: Optional[Request] = None) -> List[int]:
        looping = req is not None and req.looping
        return self.words.ids(n, looping, len(req.output_ids) if req is not None else 0)

    def _used_tokens(self) -> int:
        return sum(r.prompt_tokens + len(r.output_ids) for r in self.running)

    def _finish(self, req: Request, ids: List[int]) -> None:
        req.push(ids, True, self.stream_interval)
        self.metrics.count(req.prompt_tokens, len(req.output_ids), req.verify_ct)

    def _batch(self, kind: str) -> str:
        """``Decode batch,`` or, with SGLANG_LOG_FORWARD_ITERS, ``Decode batch [iteration],``."""
        return "%s batch%s, " % (kind, " [%d]" % self.forward_ct if self.forward_iters else "")

    def _prefill(self, admitted: List[Request]) -> None:
        new_tokens = sum(r.prompt_tokens for r in admitted)
        ms = PREFILL_MS + PREFILL_MS_PER_TOKEN * new_tokens
        self._sleep(ms)
        self.forward_ct += 1
        if self.profiler is not None:
            self.profiler.on_pass(False, len(admitted), False, ms, self.spec)
        with self._cv:
            running_bs = len(self.running)
            for req in admitted:
                if req.aborted:
                    continue
                if self.metrics.histograms is not None:
                    self.metrics.histograms.admitted(req.rid, req.created)
                if req.max_new_tokens <= 0:
                    self._finish(req, [])
                    continue
                if req.max_new_tokens == 1:
                    self._finish(req, self._tokens(1, req))
                else:
                    req.push(self._tokens(1, req), False, self.stream_interval)
                    self.running.append(req)
            used, queued = self._used_tokens(), len(self.waiting)
        usage = used / self.max_total_tokens
        msg = self._batch("Prefill") + "#new-seq: %d, #new-token: %d, #cached-token: 0, token usage: %.2f, " % (
            len(admitted),
            new_tokens,
            usage,
        )
        msg += "#running-req: %d, #queue-req: %d, " % (running_bs, queued)
        if self.dialect.current:
            msg += "#pending-token: 0, cuda graph: False, input throughput (token/s): %.2f" % (
                new_tokens / (ms / 1000.0)
            )
        self.log.info(msg, self.ranks)
        self.metrics.set(
            {
                "num_running_reqs": running_bs,
                "num_used_tokens": used,
                "token_usage": usage,
                "num_queue_reqs": queued,
                "cache_hit_rate": 0.0,
                "max_total_num_tokens": self.max_total_tokens,
            }
        )

    def _decode(self) -> None:
        with self._cv:
            batch = list(self.running)
        n = len(batch)
        graph = n <= self.graph_max_bs
        tiers = self.spec.get("adaptive")
        if tiers is not None:  # SGLang routes the batch to its slot's tier before drafting (activate_step_by_batch)
            steps = tiers.route(n)
            self.spec.update(steps=steps, draft_tokens=steps + 1, draft_steps=steps)
        ragged = self.spec.get("dspark")  # DSPARK: each request's verify window (cap) this pass
        caps = [ragged.cap(self.spec["rates"], r.ease, n) for r in batch] if ragged is not None else []
        cost = dict(self.spec, draft_tokens=ragged.verified(caps)) if ragged is not None else self.spec
        ms = pass_ms(n, cost, graph)
        if traces.verify_graph():  # SPECDECK_SIM_VERIFY=graph: verify replays as a graph, its gaps go
            ms -= traces.verify_graph_saving(ms, self.spec, graph, DRAFT_STEP_MS, NO_CUDA_GRAPH_FACTOR)
        self._sleep(ms)
        if self.profiler is not None:
            self.profiler.on_pass(True, n, graph, ms, dict(self.spec))
        accepted_drafts: List[int] = []
        with self._cv:
            collapsed = bool(self.spec) and prompts.collapsed(n, self.max_running, len(self.waiting))
            loop_rate = prompts.loop_rate()
            for i, req in enumerate(batch):
                if req.aborted:
                    continue
                count = 1
                if self.spec:
                    rates = self.spec["rates"][: self.spec.get("positions", self.spec["steps"])]
                    accepted = 0
                    while not collapsed and accepted < len(rates):
                        rate = loop_rate if req.looping else rates[accepted] * req.ease
                        if self.rng.random() >= rate:
                            break
                        accepted += 1
                    if ragged is not None:  # the pass commits no more than its cap; the rest were cap-trimmed
                        self._ragged(req, caps[i], accepted, ragged)
                        accepted = min(accepted, caps[i] - 1)
                    count += accepted
                    accepted_drafts.append(accepted)
                    req.verify_ct += 1
                    self.spec_tokens += count
                    self.spec_correct += accepted
                    self.spec_ct += 1
                count = min(count, req.max_new_tokens - len(req.output_ids))
                req.accepted_drafts += count - 1
                if self.spec:
                    req.histogram += [0] * (count - len(req.histogram))
                    req.histogram[count - 1] += 1
                self.generated_since_log += count
                ids = self._tokens(count, req)
                if len(req.output_ids) + count >= req.max_new_tokens:
                    self._finish(req, ids)
                else:
                    req.push(ids, False, self.stream_interval)
            self.running = [r for r in self.running if not r.finished and not r.aborted]
            if tiers is not None:  # on_verify_complete: the slot's EMA, and its decision
                tiers.feed(n, accepted_drafts)
            self.forward_ct += 1
            self.forward_ct_decode += 1
            if self.forward_ct_decode % self.interval == 0:
                self._log_decode(n, graph)

    def _ragged(self, req: Request, cap: int, uncapped: int, ragged: Any) -> None:
        """A DSPARK pass's verify window and block accept length (committed + cap-trimmed: ``uncapped`` drafts and
        the bonus), counted for the request and the decode line as SGLang's batch_result_processor.py:790-842
        does: caps only in the ragged modes, the block accept length shown only in cap-accept."""
        if ragged.capped:
            req.cap_tokens += cap
            req.cap_histogram += [0] * (cap + 1 - len(req.cap_histogram))
            req.cap_histogram[cap] += 1
            self.spec_cap_tokens += cap
        if ragged.mode == "cap-accept":
            req.block_tokens += 1 + uncapped
            self.spec_block_tokens += 1 + uncapped

    def _log_decode(self, n: int, graph: bool) -> None:
        """The decode line (0.5.6: scheduler_metrics_mixin.log_decode_stats; 0.5.23:
        metrics_reporter.report_decode_stats), called with ``_cv`` held."""
        now = time.perf_counter()
        if self.step_time_dict is not None:  # SGLANG_RECORD_STEP_TIME: seconds per decode step, by batch size
            self.step_time_dict.setdefault(n, []).append((now - self.last_decode_log) / self.interval)
        self.last_gen_throughput = self.generated_since_log / max(1e-9, now - self.last_decode_log)
        self.last_decode_log, self.generated_since_log = now, 0
        used = self._used_tokens()
        usage = used / self.max_total_tokens
        msg = self._batch("Decode") + "#running-req: %d, #token: %d, token usage: %.2f, " % (n, used, usage)
        accept_len = accept_rate = 0.0
        spec: Dict[str, float] = {"spec_accept_length": 0.0, "spec_accept_rate": 0.0}
        if self.spec:
            accept_len = self.spec_tokens / self.spec_ct if self.spec_ct else 0.0
            if self.dialect.drafts_only:  # correct drafts / proposed drafts
                drafted = self.spec_ct * (self.spec["draft_tokens"] - 1)
                accept_rate = self.spec_correct / drafted if drafted else 0.0
            else:  # (correct drafts + bonus tokens) / (verifies x draft tokens)
                drafted = self.spec_ct * self.spec["draft_tokens"]
                accept_rate = self.spec_tokens / drafted if drafted else 0.0
            # DSPARK's ragged verify (0 otherwise): the mean verify window and uncapped block accept length
            cap_len = self.spec_cap_tokens / self.spec_ct if self.spec_ct else 0.0
            block_len = self.spec_block_tokens / self.spec_ct if self.spec_ct else 0.0
            self.spec_total_tokens += self.spec_tokens
            self.spec_total_ct += self.spec_ct
            self.spec_tokens = self.spec_ct = self.spec_correct = 0
            self.spec_cap_tokens = self.spec_block_tokens = 0
            # 0.5.23 metrics_reporter.py:1005-1009, verbatim: f"accept len: {spec_accept_length:.2f}, accept rate:
            # {spec_accept_rate:.2f}, ", then f"cap len: {spec_cap_length:.2f}, " if > 0, then f"block accept len:
            # {spec_block_accept_length:.2f}, " if > 0
            msg += "accept len: %.2f, accept rate: %.2f, " % (accept_len, accept_rate)
            if cap_len > 0:
                msg += "cap len: %.2f, " % cap_len
            if block_len > 0:
                msg += "block accept len: %.2f, " % block_len
            spec = {"spec_accept_length": accept_len, "spec_accept_rate": accept_rate}
            if self.dialect.current:
                spec.update(spec_num_steps=self.spec["steps"], spec_num_draft_tokens=self.spec["draft_tokens"])
                spec.update(spec_cap_length=cap_len, spec_block_accept_length=block_len)
        msg += "cuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d" % (
            graph,
            self.last_gen_throughput,
            len(self.waiting),
        )
        self.log.info(msg if self.dialect.current else msg + ", ", self.ranks)
        self.metrics.set(
            {
                **spec,
                "num_running_reqs": n,
                "num_used_tokens": used,
                "token_usage": usage,
                "gen_throughput": self.last_gen_throughput,
                "num_queue_reqs": len(self.waiting),
                "cache_hit_rate": 0.0,
                "max_total_num_tokens": self.max_total_tokens,
            }
        )

    def text(self, ids: List[int]) -> str:
        return prompts.text(ids)
