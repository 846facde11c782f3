"""Opening the TUI: `specdeck` with no command (the default host) and `specdeck demo` (the sandbox)."""

from __future__ import annotations

import argparse
from typing import Any

from backend.cli.common import load_settings


async def open_tui(args: argparse.Namespace) -> int:
    from tui.app import SpecdeckApp

    settings = load_settings(args)
    app = SpecdeckApp(settings, host=args.host, overrides=_overrides(args))
    await app.run_async()
    return app.return_code or 0


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("identity", "known_hosts", "python", "workdir")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None)}
