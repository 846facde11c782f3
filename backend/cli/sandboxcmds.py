"""`specdeck sandbox up|down` and `specdeck demo`: the built-in sandbox (local host, SIMULATED SGLang, local Hub)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from backend.cli.common import add_json, emit_json
from backend.cli.main import command

if TYPE_CHECKING:
    from backend.cli.main import Subcommands


def register(sub: Subcommands) -> None:
    p = command(sub, "sandbox", "Manage the built-in sandbox: local hosts with the SGLang simulator and a local Hub.")
    ssub = p.add_subparsers(dest="sandbox_command", metavar="ACTION")
    u = command(ssub, "up", "Create or reuse the sandbox and start its local Hub; prints its config path.")
    u.add_argument("--hub-rate", default=None, help="the local Hub's bytes/s per transfer (default 150M)")
    _add_version(u)
    _add_scenario(u)
    _add_hosts(u)
    u.add_argument(
        "--ssh",
        metavar="URL",
        help="take the last of --hosts through this loopback sshd, ssh://user@127.0.0.1:PORT (key: --identity FILE, "
        "its host key: --known-hosts FILE)",
    )
    add_json(u)
    u.set_defaults(run=up)
    d = command(ssub, "down", "Stop everything the sandbox runs (files stay).")
    add_json(d)
    d.set_defaults(run=down)
    demo_p = command(sub, "demo", "Open the panel on the sandbox (SIMULATED SGLang, local Hub, fixture drafters).")
    _add_version(demo_p)
    _add_scenario(demo_p)
    _add_hosts(demo_p)
    demo_p.set_defaults(run=demo)


def _add_hosts(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hosts",
        type=int,
        metavar="N",
        default=None,
        help="N sandbox hosts (sandbox, sandbox-2, …), each its own workdir (default: the sandbox's last, else 1)",
    )


def _add_scenario(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scenario",
        metavar="FILE|default",
        default=None,
        help="the simulator's timing and acceptance model from a JSON file (see README); default: the operator's",
    )


def _add_version(p: argparse.ArgumentParser) -> None:
    from backend.sglang.versions import SIM_VERSIONS

    p.add_argument(
        "--sglang-version",
        choices=SIM_VERSIONS,
        default=None,
        help="the SGLang release the simulator speaks (default: the sandbox's last, else the newest)",
    )


async def up(args: argparse.Namespace) -> int:
    from backend.errors import UsageError
    from backend.sandbox import environment

    if args.ssh is None and (args.identity or args.known_hosts):
        raise UsageError("--identity and --known-hosts go with --ssh URL.")
    route = environment.SshRoute(args.ssh, args.identity, args.known_hosts) if args.ssh else None
    out = await environment.up(
        **({"hub_rate": args.hub_rate} if args.hub_rate else {}),
        sglang_version=args.sglang_version,
        scenario_path=args.scenario,
        hosts=args.hosts,
        ssh=route,
    )
    if args.json:
        emit_json(out.wire)
    else:
        if out.hub_replaced:
            print(f"sandbox: {out.hub_replaced}")
        simulated = f"SIMULATED SGLang {out.sglang_version}"
        hosts = out.wire["hosts"]
        names = ", ".join(f"{h['name']} ({'local' if h['url'] == 'local' else 'via ' + h['url']})" for h in hosts)
        print(f"sandbox up: host{'s' * (len(hosts) > 1)} {names}, {simulated}, hub {out.hub_url}")
        fleet = out.wire["fleet"]
        if fleet:
            router = fleet["router"]
            print(
                f"fleet {fleet['name']}: {', '.join(fleet['replicas'])} (SIMULATED SGLang) behind the real "
                f"sglang-router on {router['host']}:{router['port']} (`specdeck fleet up {fleet['name']}`)"
            )
        print(f"scenario: {out.scenario or 'the operator’s (82 tok/s, 24 + 3k ms cycles)'}")
        print(f"config: {out.config}")
        print(f"try: specdeck --host {hosts[0]['name']} ping   (stop it all: specdeck sandbox down)")
    return 0


async def down(args: argparse.Namespace) -> int:
    from backend.sandbox import environment

    out = await environment.down()
    if args.json:
        emit_json(out)
    else:
        print(f"sandbox down: stopped {len(out['stopped'])} job(s)")
    return 0


async def demo(args: argparse.Namespace) -> int:
    from backend.cli.panel import open_tui
    from backend.sandbox import environment

    out = await environment.up(sglang_version=args.sglang_version, scenario_path=args.scenario, hosts=args.hosts)
    args.config = out.config
    args.host = environment.HOST_NAME
    code = await open_tui(args)
    # The panel's servers and the hub are host jobs: they outlive the panel, as they do on a real host.
    print(
        "specdeck: the sandbox keeps running (its hub and any server you started); "
        f"`specdeck --host {environment.HOST_NAME} …` reaches it, `specdeck sandbox down` stops it."
    )
    return code
