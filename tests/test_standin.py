"""backend/standin.py's ``defer``: a module in sys.modules at once, its code run on the first use of a name of it
(what the `specdeck` entry does to ssl and asyncio's TLS protocol, issue 31). In a fresh interpreter: this one
imported both long ago."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

PROBE = textwrap.dedent(
    """
    import importlib.util, sys
    from backend.standin import defer

    defer("ssl")
    defer("asyncio.sslproto")
    import asyncio
    import ssl

    print("idle", "_ssl" in sys.modules, importlib.util.find_spec("ssl").name)
    from ssl import SSLContext

    print("used", "_ssl" in sys.modules, SSLContext.__module__, repr(ssl.create_default_context().verify_mode))
    from asyncio import sslproto

    print("tls", sslproto.SSLProtocol.__module__)
    defer("json")  # a package: its code imports its submodules
    import json

    print("json", json.dumps([1]), json.loads("[2]"))
    defer("_csv")  # an extension module makes its own module object: imported as usual, when it is
    print("extension", "_csv" in sys.modules, __import__("_csv").QUOTE_ALL)
    """
)


def test_a_deferred_module_runs_on_its_first_use():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "idle False ssl"  # asyncio imported, ssl not run
    assert out[1] == "used True ssl <VerifyMode.CERT_REQUIRED: 2>"
    assert out[2] == "tls asyncio.sslproto"
    assert out[3] == "json [1] [2]"
    assert out[4] == "extension False 1"


def test_a_module_imported_already_stays_as_it_is():
    import ssl

    from backend.standin import defer

    defer("ssl")
    assert sys.modules["ssl"] is ssl
