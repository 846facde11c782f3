"""SIMULATED SGLang's HTTP API over http.server: the routes (``/generate``, the OpenAI-compatible completions,
``/health``, ``/server_info``, ``/model_info``, ``/metrics``, the load path, ``/v1/models``), the API key
middleware, JSON bodies and SSE streams in chunked encoding, per-request ``meta_info`` with each release's
speculative figures (each release's keys, ``spec_meta_info``: 0.5.23's ``spec_verify_ct``, ``spec_accept_length``,
``spec_accept_rate``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``, ``spec_correct_drafts_histogram``
— bin k: verifies that accepted exactly k drafts — and DSPARK's ``spec_cap_length`` /
``spec_block_accept_length`` / ``spec_cap_lens_histogram``; 0.5.6's ``spec_accept_token_num`` /
``spec_draft_token_num``), and the server
state the handler reads (starting, ready, stopping: new requests get 503 once SIGTERM arrived). Stdlib only,
Python 3.8+.
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

from backend.agent.host.shared import acceptance
from backend.sandbox.sglang_sim import loads, prompts
from backend.sandbox.sglang_sim.dialect import Dialect
from backend.sandbox.sglang_sim.engine import Engine, Request
from backend.sandbox.sglang_sim.log import Log
from backend.sandbox.sglang_sim.metrics import Metrics
from backend.sglang.versions import parse


def spec_meta_info(
    version: str, req: "Request", completion: int, draft_tokens: int, ragged: Optional[str] = None
) -> Dict[str, Any]:
    """The speculative figures of a finished request's ``meta_info`` as SGLang ``version`` writes them: each
    release's keys and aliases (``acceptance.meta_keys``, read from its wheel), and DSPARK's cap figures where the
    ragged verify mode (``ragged``) scheduled caps (0.5.23 tokenizer_manager.py:3138-3210)."""
    proposed = req.verify_ct * (draft_tokens - 1)
    meta: Dict[str, Any] = {
        "spec_verify_ct": req.verify_ct,
        "spec_accept_length": completion / req.verify_ct if req.verify_ct else 0,
        "spec_accept_rate": req.accepted_drafts / proposed if proposed else 0.0,  # drafts only, in every release
    }
    keys = acceptance.meta_keys(parse(version) or (0, 5, 23))
    meta.update({key: req.accepted_drafts for key in keys["correct"]})
    meta.update({key: proposed for key in keys["proposed"]})
    if req.histogram:  # grown as passes accepted more: non-empty once a pass verified
        meta.update({key: list(req.histogram) for key in keys["histogram"]})
    if keys["dspark"] and req.verify_ct:
        if req.cap_tokens > 0:
            meta[acceptance.CAP_LENGTH] = req.cap_tokens / req.verify_ct
        if ragged == "cap-accept":
            meta[acceptance.BLOCK_ACCEPT_LENGTH] = req.block_tokens / req.verify_ct
        if req.cap_histogram:
            meta[acceptance.CAP_HISTOGRAM] = list(req.cap_histogram)
    return meta


def count_tokens(text: str) -> int:
    """A tokenizer stand-in: about four characters per token."""
    return max(1, len(text) // 4)


class Server:
    """Everything the HTTP handler needs: args, engine, metrics, state ("starting", "ready", "stopping")."""

    def __init__(self, args: Dict[str, Any], engine: Engine, metrics: Metrics, log: Log, dialect: Dialect) -> None:
        self.args, self.engine, self.metrics, self.log, self.dialect = args, engine, metrics, log, dialect
        self.startup_time: Dict[str, Any] = {}
        self.state = "starting"
        self.scheduler_info: Dict[str, Any] = {}
        self.memory_usage: Dict[str, Any] = {}
        self._active: Dict[str, Request] = {}  # requests whose response is still being written
        self._lock = threading.Lock()

    def admit(
        self, prompt_tokens: int, max_new_tokens: int, stream: bool = True, traits: Optional[prompts.Traits] = None
    ) -> Optional[Request]:
        """A new request (``traits``: what its prompt does to acceptance), or None once SIGTERM arrived."""
        with self._lock:
            if self.state == "stopping":
                return None
            req = self.engine.submit(prompt_tokens, max_new_tokens, stream, traits)
            self._active[req.rid] = req
            return req

    def done(self, req: Request) -> None:
        with self._lock:
            self._active.pop(req.rid, None)

    def remaining(self) -> List[str]:
        with self._lock:
            return list(self._active)

    def stop_accepting(self) -> None:
        with self._lock:
            self.state = "stopping"

    def model_info(self) -> Dict[str, Any]:
        return {
            "model_path": self.args["model_path"],
            "tokenizer_path": self.args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": self.args["preferred_sampling_params"],
            "weight_version": self.args["weight_version"],
            "has_image_understanding": False,
            "has_audio_understanding": False,
        }

    def server_info(self) -> Dict[str, Any]:
        """``/server_info``: the resolved args, and ``internal_states`` with one entry per DP rank."""
        internal = dict(self.args)
        internal["last_gen_throughput"] = self.engine.last_gen_throughput
        internal["memory_usage"] = self.memory_usage
        if self.dialect.current:
            internal["startup_time"] = self.startup_time
        avg = self.engine.avg_spec_accept_length()
        if avg is not None:
            internal["avg_spec_accept_length"] = avg
        with self.engine._cv:
            times = self.engine.step_time_dict
            if times is not None:
                internal["step_time_dict"] = {str(k): list(v) for k, v in times.items()}
        if self.engine.spec.get("adaptive") is not None:  # the worker publishes each switch (runtime override)
            internal["speculative_num_steps"] = self.engine.spec["steps"]
            internal["speculative_num_draft_tokens"] = self.engine.spec["draft_tokens"]
        states = [dict(internal, dp_rank=rank) for rank in range(max(1, int(self.args["dp_size"])))]
        info = dict(self.args)
        info.update(self.scheduler_info)
        info.update({"internal_states": states, "version": self.dialect.label, "simulated": True})
        return info

    def meta_info(self, req: Request, ids: List[int], finished: bool) -> Dict[str, Any]:
        """``meta_info`` of a /generate response after ``ids``; the spec figures come with the last one."""
        finish = {"type": "length", "length": req.max_new_tokens} if finished else None
        meta = {
            "id": req.rid,
            "finish_reason": finish,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": self.args["weight_version"],
            "total_retractions": 0,
            "completion_tokens": len(ids),
            "cached_tokens": 0,
        }
        if finished:
            spec = self.engine.spec
            if spec and req.verify_ct:
                # The tokenizer process knows the startup config only: under adaptive every pass counts as the
                # first tier's (0.5.23 tokenizer_manager.py:3138-3210; PR #34814 says the same).
                tokens = spec.get("initial_draft_tokens", spec["draft_tokens"])
                meta.update(spec_meta_info(self.dialect.version, req, len(ids), tokens, spec.get("ragged")))
            meta["e2e_latency"] = req.finished_time - req.created
        return meta


class Handler(BaseHTTPRequestHandler):
    """SGLang's HTTP API over http.server: JSON bodies, SSE streams in chunked encoding."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    sim: Server

    # -- plumbing ---------------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: access lines are written by ``_access`` in uvicorn's format."""

    def _access(self, status: int) -> None:
        client = "%s:%d" % self.client_address[:2]
        self.sim.log.access(client, self.requestline, status, self.responses.get(status, ("",))[0])

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response_only(status)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        self.send_header("content-type", content_type)
        self.end_headers()
        self.wfile.write(body)
        self._access(status)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, message: str) -> None:
        error_type = {400: "BadRequestError", 503: "ServiceUnavailableError"}.get(status, "InternalServerError")
        self._json(status, {"object": "error", "message": message, "type": error_type, "param": None, "code": status})

    def _body(self) -> Optional[Dict[str, Any]]:
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._error(400, "The request body is not a JSON object.")
            return None
        return body

    def _stream(self, chunks: Any) -> None:
        """Send ``data: ...`` events with chunked transfer encoding, as they are produced."""
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)
        for chunk in chunks:
            data = ("data: %s\n\n" % chunk).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _run(
        self,
        prompt_tokens: int,
        max_new_tokens: int,
        respond: Callable[[Request], None],
        stream: bool = False,
        traits: Optional[prompts.Traits] = None,
    ) -> None:
        """Admit a request and write its response; a client that leaves aborts it."""
        req = self.sim.admit(prompt_tokens, max_new_tokens, stream, traits)
        if req is None:
            self._error(503, "The server is shutting down.")
            return
        try:
            respond(req)
        except (BrokenPipeError, ConnectionResetError):
            self.sim.engine.abort(req)
            self.close_connection = True
        finally:
            self.sim.done(req)

    # -- routes -----------------------------------------------------------------------------------------

    def _authorized(self, path: str) -> bool:
        """SGLang's API key middleware (0.5.6 ``add_api_key_middleware``; 0.5.23 ``utils/auth.py``): with
        --api-key every endpoint but the health, readiness (0.5.23) and metrics ones wants ``Authorization:
        Bearer KEY``; otherwise 401 ``{"error": "Unauthorized"}``."""
        key = self.sim.args.get("api_key")
        open_paths = ("/health", "/ready", "/metrics") if self.sim.dialect.current else ("/health", "/metrics")
        if not key or path.startswith(open_paths):
            return True
        header = self.headers.get("Authorization") or ""
        if self.sim.dialect.current:  # the scheme in any case, the token compared in constant time
            scheme, _, token = header.partition(" ")
            allowed = scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode())
        else:
            allowed = header == "Bearer " + key
        if not allowed:
            self._json(401, {"error": "Unauthorized"})
        return allowed

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        sim = self.sim
        if not self._authorized(path):
            return
        if path in ("/health", "/health_generate"):
            if sim.state == "stopping":
                sim.log.info("Health check request received during shutdown. Returning 503.")
            self._send(200 if sim.state == "ready" else 503, b"", "text/plain")
        elif path in ("/get_server_info", "/server_info"):
            if path == "/get_server_info":
                sim.log.warning(
                    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                    "Please use '/server_info' instead."
                )
            self._json(200, sim.server_info())
        elif path in ("/get_model_info", "/model_info"):
            if path == "/get_model_info":
                sim.log.warning(
                    "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                    "Please use '/model_info' instead."
                )
            self._json(200, sim.model_info())
        elif path == "/metrics" and sim.args["enable_metrics"]:
            self._send(200, sim.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/models":
            name = sim.args["served_model_name"]
            card = {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang"}
            card.update({"root": name, "parent": None, "max_model_len": sim.args["context_length"]})
            self._json(200, {"object": "list", "data": [card]})
        elif path in ("/generate", "/v1/completions", "/v1/chat/completions"):
            self._json(405, {"detail": "Method Not Allowed"})
        elif path in ("/start_profile", "/stop_profile"):
            self._profile(None)
        elif path == loads.path_for(sim.dialect.current):
            body, kind = loads.answer(sim, self.path.partition("?")[2])
            self._send(200, body.encode(), kind)
        else:
            self._json(404, {"detail": "Not Found"})

    def _profile(self, body: Optional[Dict[str, Any]]) -> None:
        """``/start_profile`` and ``/stop_profile`` (GET or POST): plain-text answers, as SGLang's."""
        profiler = self.sim.engine.profiler
        assert profiler is not None
        path = self.path.split("?", 1)[0]
        status, text = profiler.start(body) if path == "/start_profile" else profiler.stop()
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return
        routes = {
            "/generate": self._generate,
            "/v1/completions": self._completions,
            "/v1/chat/completions": self._chat,
            "/start_profile": self._profile,
            "/stop_profile": self._profile,
        }
        if path not in routes:
            self._json(404, {"detail": "Not Found"})
            return
        body = self._body()
        if body is not None:
            routes[path](body)

    def _generate(self, body: Dict[str, Any]) -> None:
        """SGLang's native ``/generate``: ``text`` or ``input_ids``, ``sampling_params``, ``stream``."""
        prompt = body.get("text")
        if prompt is None and body.get("input_ids") is None:
            self._error(400, "Either text or input_ids should be provided.")
            return
        if isinstance(prompt, list):
            self._error(400, "The simulator serves one prompt per /generate request.")
            return
        prompt_tokens = len(body["input_ids"]) if prompt is None else count_tokens(str(prompt))
        params = body.get("sampling_params") or {}
        engine, sim = self.sim.engine, self.sim

        def out(req: Request, ids: List[int], finished: bool) -> Dict[str, Any]:
            return {
                "text": engine.text(ids),
                "output_ids": ids,
                "meta_info": sim.meta_info(req, ids, finished),
            }

        def chunks(req: Request) -> Any:
            for ids, finished in req.updates():
                yield json.dumps(out(req, ids, finished))
            yield "[DONE]"

        def respond(req: Request) -> None:
            if body.get("stream"):
                self._stream(chunks(req))
            else:
                self._json(200, out(req, req.result(), True))

        traits = None if prompt is None else prompts.traits(str(prompt))
        self._run(prompt_tokens, int(params.get("max_new_tokens", 128)), respond, bool(body.get("stream")), traits)

    def _completions(self, body: Dict[str, Any]) -> None:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and not all(isinstance(token, int) for token in prompt):
            if len(prompt) != 1:  # a batch of prompts
                self._error(400, "The simulator serves one prompt per completion request.")
                return
            prompt = prompt[0]
        prompt_tokens = len(prompt) if isinstance(prompt, list) else count_tokens(str(prompt))
        traits = None if isinstance(prompt, list) else prompts.traits(str(prompt))
        self._openai(body, prompt_tokens, int(body.get("max_tokens") or 16), chat=False, traits=traits)

    def _chat(self, body: Dict[str, Any]) -> None:
        text = ""
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else ""
            parts = content if isinstance(content, list) else [{"text": content or ""}]
            text += " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) + " <|im_end|> "
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 128
        traits = prompts.traits(text)._replace(templated=True)  # the server applies the template
        self._openai(body, count_tokens(text), int(limit), chat=True, traits=traits)

    def _openai(
        self,
        body: Dict[str, Any],
        prompt_tokens: int,
        max_tokens: int,
        chat: bool,
        traits: Optional[prompts.Traits] = None,
    ) -> None:
        """``/v1/completions`` and ``/v1/chat/completions`` in SGLang's OpenAI-compatible shapes."""
        self._run(
            prompt_tokens,
            max_tokens,
            lambda req: self._openai_respond(req, body, prompt_tokens, chat),
            bool(body.get("stream")),
            traits,
        )

    def _openai_respond(self, req: Request, body: Dict[str, Any], prompt_tokens: int, chat: bool) -> None:
        engine = self.sim.engine
        model = body.get("model") or "default"
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def usage(with_details: bool) -> Dict[str, Any]:
            n = len(req.output_ids)
            out: Dict[str, Any] = {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + n,
                "completion_tokens": n,
            }
            if with_details:
                out["prompt_tokens_details"] = None
            out["reasoning_tokens"] = 0
            return out

        def envelope(choices: List[Dict[str, Any]], suffix: str = "") -> Dict[str, Any]:
            return {
                "id": req.rid,
                "object": obj + suffix,
                "created": created,
                "model": model,
                "choices": choices,
            }

        if not body.get("stream"):
            text = engine.text(req.result())
            if chat:
                message = {
                    "role": "assistant",
                    "content": text,
                    "reasoning_content": None,
                    "tool_calls": None,
                }
                choice = {"index": 0, "message": message, "logprobs": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None}
            choice.update({"finish_reason": "length", "matched_stop": None})
            response = envelope([choice])
            response.update({"usage": usage(True), "metadata": {"weight_version": self.sim.args["weight_version"]}})
            self._json(200, response)
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._stream(self._openai_chunks(req, chat, envelope, usage, include_usage))

    def _openai_chunks(
        self,
        req: Request,
        chat: bool,
        envelope: Callable[..., Dict[str, Any]],
        usage: Callable[[bool], Dict[str, Any]],
        include: bool,
    ) -> Any:
        """The SSE events of an OpenAI-style stream, produced as the scheduler releases tokens."""
        empty_delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
        sent = 0
        if chat:
            first = dict(empty_delta, role="assistant", content="")
            yield json.dumps(dict(envelope([self._choice(first, None, chat)], ".chunk"), usage=None))
        for ids, finished in req.updates():
            delta_text = self.sim.engine.text(ids[sent:])
            sent = len(ids)
            last = finished and not chat
            delta = dict(empty_delta, content=delta_text) if chat else delta_text
            choice = self._choice(delta, "length" if last else None, chat)
            yield json.dumps(dict(envelope([choice], ".chunk" if chat else ""), usage=None))
        if chat:
            yield json.dumps(dict(envelope([self._choice(empty_delta, "length", chat)], ".chunk"), usage=None))
        if include:
            final = dict(envelope([], ".chunk" if chat else ""), usage=usage(chat))
            yield json.dumps(final)
        yield "[DONE]"

    @staticmethod
    def _choice(delta: Any, finish: Optional[str], chat: bool) -> Dict[str, Any]:
        choice: Dict[str, Any] = {"index": 0}
        choice.update({"delta": delta} if chat else {"text": delta})
        choice.update({"logprobs": None, "finish_reason": finish, "matched_stop": None})
        return choice


def bind(host: str, port: int) -> ThreadingHTTPServer:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class _HTTPServer(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True
        # uvicorn's backlog: socketserver's 5 drops a burst of connects while the accept thread waits for a
        # CPU, and a dropped SYN starts its stream a second late (the kernel's first retransmit).
        request_queue_size = 2048

    return _HTTPServer((host, port), Handler)
