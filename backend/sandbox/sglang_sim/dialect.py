"""What differs between the SGLang releases the simulator speaks, and the one this run speaks.

Stdlib only (and specdeck's own release table), Python 3.8+.
"""

from __future__ import annotations

import os

from backend.sglang.versions import (
    DEFAULT_SIM_VERSION,
    DRAFTS_ONLY,
    SIM_SUFFIX,
    SIM_VERSION_ENV,
    SIM_VERSIONS,
    accept_rate_definition,
    parse,
)


class Dialect(object):
    """What differs between the SGLang releases the simulator speaks (FIELD-NOTES §5b)."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.label = version + SIM_SUFFIX  # what /server_info's ``version`` says
        # 0.5.23's log lines, startup milestones, Prometheus names and per-request meta_info.
        self.current = parse(version) >= (0, 5, 23)  # type: ignore[operator]
        # The decode line's and gauge's accept rate: drafts only, or (0.5.6) the bonus token counted too.
        self.drafts_only = accept_rate_definition(version) == DRAFTS_ONLY


def dialect_from_env() -> Dialect:
    """The release named by ``SPECDECK_SIM_SGLANG_VERSION`` (default 0.5.23); ValueError for another one."""
    version = os.environ.get(SIM_VERSION_ENV) or DEFAULT_SIM_VERSION
    if version not in SIM_VERSIONS:
        raise ValueError(version)
    return Dialect(version)
