"""The refusal of a second sweep on a host, one sentence wherever it comes from: the client's check before its
preflight (``backend.tune.sweep.refuse_if_running``: first, so a port the running sweep's server holds is never
the reason given), the Tune tab while it follows a sweep, and the host's ``sweep.start`` (the rule's guard
against two clients at once). Pure, stdlib only, Python 3.8+: the client imports it.
"""

from __future__ import annotations


def busy_text(job_id: str, host: str = "this host") -> str:
    """``sweep ID is running on HOST (one at a time): wait for it to end, or stop it with `specdeck jobs cancel
    ID```: the command works from any shell, the Tune tab's x too once it follows the sweep."""
    stop = "`specdeck jobs cancel %s`" % job_id
    return "sweep %s is running on %s (one at a time): wait for it to end, or stop it with %s" % (job_id, host, stop)
