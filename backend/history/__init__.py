"""Run history: every server run and bench, kept in SQLite so runs can be compared, reported and exported.

``store`` holds the database (open or refuse, queries), ``schema`` its tables and migrations, ``summary`` what
it reads back (runs, the yardstick), ``samples`` how log samples are kept, ``recorder`` live recording,
``service`` the history on a thread of its own (``HistoryThread``, one per app) and ``sync`` importing from a
host. Writers: ``LiveRecorder`` batches what a live view follows and commits at most once a second
(``HistoryThread`` runs it, and any reads, off an event loop); ``sync_from_host`` imports a host's serve and
bench jobs from their logs and events, so runs are recorded even when no panel was open.
"""

from backend.history.recorder import LiveRecorder
from backend.history.samples import filter_tail, primed_filter
from backend.history.service import HistoryThread
from backend.history.store import (
    History,
    HistoryUnavailable,
    history_path,
    load_yardstick,
    measured_baseline,
    run_id_of,
    unusable,
)
from backend.history.summary import RunSummary, Yardstick
from backend.history.sync import parse_server_args, read_lines, record_run, sync_from_host

__all__ = [
    "History",
    "HistoryThread",
    "HistoryUnavailable",
    "LiveRecorder",
    "RunSummary",
    "Yardstick",
    "filter_tail",
    "history_path",
    "load_yardstick",
    "measured_baseline",
    "parse_server_args",
    "primed_filter",
    "read_lines",
    "record_run",
    "run_id_of",
    "sync_from_host",
    "unusable",
]
