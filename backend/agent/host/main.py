"""The agent's entry point: ``serve`` (the RPC loop on stdin/stdout) and ``job-run`` (a detached job's runner).

Each request runs on its own thread so a slow method (or a long follow) never blocks a ping; one lock
serialises writes to stdout. Messages are frames (see ``protocol``).
"""

from __future__ import annotations

import json
import os
import sys
import threading

from .registry import AgentError, Context, lookup
from .shared.protocol import MAX_FRAME, PROTOCOL_VERSION, FrameError, decode, dumps, encode_line, frame, mib, read_frame

# typing only for the checker: the agent's hello waits for every module imported before it (~5 ms here)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Callable, Dict, List, Optional


class Agent:
    def __init__(self, state_dir: str, out: IO[bytes]) -> None:
        self.state_dir = state_dir
        self.out = out
        self.lock = threading.Lock()
        self.running: Dict[Any, Context] = {}  # by request id, as the client sent it

    def send(self, obj: Dict[str, Any]) -> None:
        self.send_payload(obj.get("id"), dumps(obj))

    def send_payload(self, rid: Any, payload: bytes) -> None:
        """One message as a frame; one too big to carry becomes an error for its request, which is stopped."""
        if len(payload) > MAX_FRAME:
            ctx = self.running.get(rid)
            if ctx is not None:
                ctx.cancel()
            message = "the answer is %s, more than the %s one message may carry; ask for less at a time" % (
                mib(len(payload)),
                mib(MAX_FRAME),
            )
            payload = dumps({"id": rid, "error": {"message": message, "kind": "invalid"}})
        data = frame(payload)
        with self.lock:
            self.out.write(data)
            self.out.flush()

    def handle(self, req: Dict[str, Any]) -> None:
        # As the client sent them: any JSON value (lookup finds no method for what is not a method's name).
        rid: Any = req.get("id")
        name: Any = req.get("method")
        if name == "cancel":
            ctx = self.running.get((req.get("params") or {}).get("id"))
            if ctx is not None:
                ctx.cancel()
            return
        try:
            fn = lookup(name)
        except Exception as exc:  # its module does not import on this host's Python
            message = "agent method %r cannot load: %s" % (name, exc)
            self.send({"id": rid, "error": {"message": message, "kind": "failed"}})
            return
        if fn is None:
            self.send({"id": rid, "error": {"message": "unknown agent method " + repr(name), "kind": "invalid"}})
            return
        head = b'{"id":' + json.dumps(rid).encode() + b',"event":'
        ctx = Context(
            self.state_dir,
            lambda event: self.send({"id": rid, "event": event}),
            lambda raw: self.send_payload(rid, head + raw + b"}"),
        )
        self.running[rid] = ctx
        try:
            threading.Thread(target=self._run, args=(rid, fn, req.get("params") or {}, ctx), daemon=True).start()
        except RuntimeError:  # no thread to be had (the host at its process limit): this request fails, not us
            self.running.pop(rid, None)
            ctx.close()
            message = "the agent cannot start a thread for %s (the host is at its process limit); retry" % name
            self.send({"id": rid, "error": {"message": message, "kind": "busy"}})

    def _run(
        self, rid: Any, fn: Callable[[Dict[str, Any], Context], Any], params: Dict[str, Any], ctx: Context
    ) -> None:
        try:
            result = fn(params, ctx)
            reply = {"id": rid, "result": result}
        except AgentError as exc:
            reply = {"id": rid, "error": {"message": str(exc), "kind": exc.kind, "data": exc.data}}
        except FileNotFoundError as exc:
            reply = {"id": rid, "error": {"message": _os_message(exc, "not found"), "kind": "not_found"}}
        except PermissionError as exc:
            reply = {
                "id": rid,
                "error": {"message": _os_message(exc, "permission denied"), "kind": "permission"},
            }
        except Exception as exc:  # a bug on the host: report it whole rather than hang the client
            import traceback  # here: the agent's hello waits for every module imported at the top

            reply = {
                "id": rid,
                "error": {
                    "message": "agent error in %s: %r" % (fn.__name__, exc),
                    "kind": "failed",
                    "data": {"traceback": traceback.format_exc()},
                },
            }
        finally:
            self.running.pop(rid, None)
            ctx.close()
        try:
            self.send(reply)
        except (BrokenPipeError, ValueError, OSError):
            pass

    def serve(self, inp: IO[bytes]) -> None:
        hello = {"protocol": PROTOCOL_VERSION, "pid": os.getpid(), "python": sys.version.split()[0]}
        with self.lock:
            self.out.write(encode_line({"hello": hello}))
            self.out.flush()
        from . import probes

        # The kept facts first (~0.1 ms), here: a cold command's ``info`` that took the locks before the warm-up
        # thread read the package metadata and the platform itself (~20 ms more, on one start in two).
        kept = probes.load_facts(self.state_dir)
        try:
            threading.Thread(target=probes.warm, args=(self.state_dir, kept), name="warm", daemon=True).start()
        except RuntimeError:  # no thread to be had (the host at its process limit): info computes it itself
            pass
        while True:
            try:
                payload = read_frame(inp)
            except FrameError as exc:  # out of step with the client: nothing after this can be read right
                self.send({"id": None, "error": {"message": "malformed request: %s" % exc, "kind": "invalid"}})
                break
            if payload is None:
                break
            try:
                req = decode(payload)
            except FrameError as exc:  # framed right, so still in step: this request alone is refused
                self.send({"id": None, "error": {"message": "malformed request: %s" % exc, "kind": "invalid"}})
                continue
            self.handle(req)
        # stdin closed: the client (or the SSH channel) is gone. Jobs are detached and carry on.
        for ctx in list(self.running.values()):
            ctx.cancel()


def _os_message(exc: OSError, what: str) -> str:
    return "%s: %s" % (exc.filename, what) if exc.filename else str(exc)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["job-run"]:
        from . import jobs  # here: the agent's hello waits for no module its serving loop does not need

        return jobs.run_job(argv[1])
    if argv[:1] == ["worker"] and len(argv) >= 2:
        # A job's body that needs host code (e.g. a download): ``agent worker MODULE ARGS...``.
        import importlib

        code: int = importlib.import_module("%s.%s" % (__package__, argv[1])).worker_main(argv[2:])
        return code
    if argv[:1] == ["serve"] and len(argv) == 2:
        state_dir = argv[1]
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        os.chmod(state_dir, 0o700)
        Agent(state_dir, sys.stdout.buffer).serve(sys.stdin.buffer)
        return 0
    sys.stderr.write("usage: agent serve STATE_DIR | agent job-run JOB_DIR | agent worker MODULE ARGS...\n")
    return 2
