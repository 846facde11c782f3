"""The `specdeck` command's entry: a one-shot answer where one question to a host already connected does, else
the full CLI (``main.py``).

`specdeck ping` to a host whose control master runs needs no SSH handshake and no agent start; what it still
paid was Python importing asyncio, argparse and the command machinery (~100 ms of CPU on a loaded 2-core
box, most of a warm command). Here, before any of that is imported, an argv of exactly that shape (``ping``
with host options, ``--count``, ``--json``; any other word, an abbreviation, ``--no-persist`` or ``--debug``
go the full way) is answered through the master with a blocking socket (``transport/blocking.py``), the host
found from what the ordinary path remembered (``resolved.py``). On any doubt it answers nothing and the full
CLI runs, which meets the same fault and answers for it; the two print the same (``pingview.py``).
"""

from __future__ import annotations

import sys
import time

from backend.cli.exits import end, stdout_closed

FLAGS = {f"--{o.replace('_', '-')}": o for o in ("host", "identity", "known_hosts", "python", "workdir", "config")}
# Modules the libraries import with themselves for what few paths use, run on their first use (backend.standin):
# asyncio imports ssl and its TLS protocol for TLS connections, which no command opens but those reaching the Hub
# (its client asks ssl again); Python's own modules import the rest for one function each (shutil the compressors,
# linecache tokenize, urllib.parse ipaddress, Textual mimetypes, …). Pure Python, nothing done at import that
# their users count on. The panel idle on Live: ~1.9 MB less resident (issue 31).
DEFERRED = (
    "ssl",
    "asyncio.sslproto",
    "bz2",
    "lzma",
    "gzip",
    "tokenize",
    "ipaddress",
    "mimetypes",
    "statistics",
    "csv",
    "shlex",
    "pkgutil",
    "textwrap",
    "glob",
    "getpass",
    "pprint",
)
CALL_TIMEOUT_S = 60.0  # info, as Connection.call's default
PING_TIMEOUT_S = 10.0  # each round trip, as Connection.ping's


def parse_ping(argv: list[str]) -> tuple[dict[str, str | None], int, bool] | None:
    """(host options, --count, --json) of a plain `ping` argv; None for anything else (argparse's to judge)."""
    opts: dict[str, str | None] = dict.fromkeys(FLAGS.values())
    count, as_json, command = 5, False, False
    words = iter(argv)
    for word in words:
        flag, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if flag in FLAGS or (command and flag == "--count"):
            if not eq:
                value = next(words, None)  # type: ignore[assignment]
                if value is None or value.startswith("-"):
                    return None
            if flag == "--count":
                try:
                    count = int(value)
                except ValueError:
                    return None
                if count < 1:
                    return None
            else:
                opts[FLAGS[flag]] = value
        elif command and word == "--json":
            as_json = True
        elif not command and word == "ping":
            command = True
        else:
            return None
    return (opts, count, as_json) if command else None


def answer(argv: list[str]) -> int | None:
    """Answer ``argv`` through the host's master; None where the full CLI must (nothing printed then)."""
    parsed = parse_ping(argv)
    if parsed is None:
        return None
    opts, count, as_json = parsed
    from backend.transport.controlsock import persist_s

    if persist_s() <= 0:
        return None
    from backend.cli import resolved

    entry = resolved.lookup(opts)
    if entry is None:
        return None
    from backend.agent.host.shared.quantiles import round_trips
    from backend.cli.pingview import ping_report, render_ping
    from backend.transport.blocking import BlockingAgent, Fallback

    try:
        with BlockingAgent(entry["socket"], entry["command"]) as agent:
            agent.open()
            info = agent.result(agent.send("info"), CALL_TIMEOUT_S)
            times = []
            for _ in range(count):
                t0 = time.perf_counter()
                agent.call("ping", PING_TIMEOUT_S)
                times.append((time.perf_counter() - t0) * 1000)
        text = render_ping(ping_report(entry["name"], info, round_trips(times)), as_json)  # type: ignore[arg-type]
    except (Fallback, KeyError, TypeError, ValueError, AttributeError):
        return None
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        import signal

        stdout_closed()  # the reader went away (`| head`): quiet, as the full CLI
        return 128 + signal.SIGPIPE
    return 0


def main() -> int:
    from backend.hosttext import guarded

    argv = sys.argv[1:]
    with guarded():  # ping's platform and GPU names come from the host (the full CLI guards itself too)
        try:
            code = answer(argv)
        except KeyboardInterrupt:
            return 130
        if code is None:
            from backend.standin import defer

            for name in DEFERRED:
                defer(name)
            from backend.cli.main import main as full

            code = full(argv)
    end(code)
    return code  # where the interpreter lacks what ``end`` needs


if __name__ == "__main__":
    sys.exit(main())
