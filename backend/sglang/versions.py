"""Which SGLang releases specdeck knows, and what a version number says about the server.

Two releases are read from their PyPI wheels and tested end to end (``KNOWN``): 0.5.6, the version AQ-MedAI's
drafter card recommends, and 0.5.23, the current release. Everything between them is parsed field by field
and works; a newer release still works (the host's ``--help`` decides flags, unknown log fields are ignored)
but is labelled "untested version".

A development or local build with no release number (``0.0.0.dev1+g70df09b83``, what ``pip install -e`` of
SGLang's git tree reports) is not 0.0.0: it is newer than any release we know, so it is read as untested, with
the drafts-only accept rate and the newest flag table, and the host's ``--help`` decides its flags; every
header that names its version says so.

``accept rate`` changed meaning between them (FIELD-NOTES §5b): up to 0.5.10 it counted the bonus token,
``(accepted drafts + bs) / (bs × draft tokens)``; from 0.5.11 on it counts drafts only,
``correct drafts / (bs × (draft tokens − 1))`` (read from each release's wheel). Accept length is the same
quantity in every version. A number is never shown or compared without its definition.

Stdlib only, Python 3.8+: the simulator imports this on the host side.
"""

from __future__ import annotations

import re

KNOWN = ("0.5.6", "0.5.23")  # read from the wheels, tested end to end
OLDEST, NEWEST = KNOWN[0], KNOWN[-1]
# Flag tables read from the wheels: the known releases, and those that tell speculation's features apart
# (0.5.11: adaptive and DFLASH; 0.5.13: --speculative-draft-window-size; 0.5.16: DSPARK).
TABLES = ("0.5.6", "0.5.11", "0.5.13", "0.5.16", "0.5.23")
SIM_VERSIONS = KNOWN  # what the sandbox simulator can speak
DEFAULT_SIM_VERSION = NEWEST
SIM_SUFFIX = "-sim"
SIM_VERSION_ENV = "SPECDECK_SIM_SGLANG_VERSION"  # how a launch tells the simulator which release to speak
DRAFTS_ONLY_FROM = (0, 5, 11)  # the first release whose decode line and gauge count drafts only

# accept-rate definitions: the key stored with every run and sample, and its label wherever a rate is shown.
DRAFTS_ONLY = "drafts"
BONUS_COUNTED = "bonus"
DEFINITION_LABELS = {DRAFTS_ONLY: "drafts only", BONUS_COUNTED: "bonus counted"}

_NUMBERS = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
# A build with no release number: 0.0.0 (what setuptools-scm gives a tree without tags) as a dev release or
# with a local part (``+g<commit>``).
_UNRELEASED = re.compile(r"^v?0\.0(?:\.0)?(?:\.dev\d*|\+)")
UNRELEASED = (99999, 0, 0)  # sorts after every release: newest table, drafts only


def is_unreleased(version: str | None) -> bool:
    """True for a development or local build without a release number (``0.0.0.dev1+g70df09b83``)."""
    return bool(_UNRELEASED.match((version or "").strip()))


def parse(version: str | None) -> tuple[int, int, int] | None:
    """``(0, 5, 6)`` for ``"0.5.6"``, ``"0.5.6.post2"``, ``"0.5.23-sim"``; ``UNRELEASED`` for a build with no
    release number; None when it is not a version."""
    text = (version or "").strip()
    if _UNRELEASED.match(text):
        return UNRELEASED
    match = _NUMBERS.match(text)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _parsed(version: str) -> tuple[int, int, int]:
    numbers = parse(version)
    assert numbers is not None, f"not a release: {version}"
    return numbers


_KNOWN_NUMBERS = [_parsed(known) for known in KNOWN]
_TABLE_NUMBERS = [_parsed(table) for table in TABLES]


def accept_rate_definition(version: str | None) -> str | None:
    """``DRAFTS_ONLY`` or ``BONUS_COUNTED`` for a server version; None when the version is unknown."""
    numbers = parse(version)
    if numbers is None:
        return None
    return DRAFTS_ONLY if numbers >= DRAFTS_ONLY_FROM else BONUS_COUNTED


def definition_label(definition: str | None) -> str:
    """``drafts only`` / ``bonus counted`` / ``definition unknown`` (for headers and legends)."""
    return DEFINITION_LABELS.get(definition or "", "definition unknown")


def accept_rate_label(version: str | None) -> str:
    """``accept rate (drafts only)`` for a server of ``version``: the name every view gives the number."""
    return f"accept rate ({definition_label(accept_rate_definition(version))})"


def support(version: str | None) -> str:
    """``known`` (read and tested), ``between`` (older than the newest known, parsed field by field),
    ``untested`` (newer than any known release) or ``unknown`` (no version to judge)."""
    numbers = parse(version)
    if numbers is None:
        return "unknown"
    if numbers in _KNOWN_NUMBERS:
        return "known"
    return "untested" if numbers > _KNOWN_NUMBERS[-1] else "between"


def flag_table_version(version: str | None) -> str:
    """The release whose flag table fits ``version`` best: the newest table not newer than it."""
    numbers = parse(version)
    if numbers is None:
        return NEWEST
    fits = [table for i, table in enumerate(TABLES) if _TABLE_NUMBERS[i] <= numbers]
    return fits[-1] if fits else OLDEST


def version_text(version: str | None, simulated: bool = False) -> str:
    """``sglang 0.5.23``, ``sglang 0.5.24 (untested version)``, ``sglang 0.5.23-sim SIMULATED``, and for a build
    without a release number ``sglang 0.0.0.dev1+g70df09b83 (development build: untested)``."""
    if not version:
        return "sglang not installed"
    if simulated:
        shown = version if version.endswith(SIM_SUFFIX) else version + SIM_SUFFIX
        return f"sglang {shown} SIMULATED"
    if is_unreleased(version):  # no release number: newest flag table, --help decides, drafts-only rate
        return f"sglang {version} (development build: untested)"
    if support(version) == "untested":
        return f"sglang {version} (untested version)"
    return f"sglang {version}"
