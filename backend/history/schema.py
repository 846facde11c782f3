"""The history database's schema: its tables and indexes (``SCHEMA``, a script safe to run on any version) and,
per schema version, the statements that bring the version before it up to date (``MIGRATIONS``). What each
table holds is said in ``store``'s docstring.
"""

from __future__ import annotations

import re

SCHEMA_VERSION = 7

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    job_id TEXT NOT NULL,
    profile TEXT,
    args TEXT NOT NULL DEFAULT '{}',
    argv TEXT NOT NULL DEFAULT '[]',
    server_info TEXT,
    version TEXT,
    drafter_name TEXT,
    drafter_path TEXT,
    drafter_size INTEGER,
    drafter_sha256 TEXT,
    drafter_checked REAL,
    started REAL,
    stopped REAL,
    state TEXT,
    outcome TEXT,
    reason TEXT,
    is_baseline INTEGER NOT NULL DEFAULT 0,
    log_offset INTEGER NOT NULL DEFAULT 0,
    filter_tail TEXT NOT NULL DEFAULT '[]',
    log_head BLOB,
    latency TEXT,
    anatomy TEXT,
    updated REAL
);
CREATE TABLE IF NOT EXISTS samples (
    run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t INTEGER NOT NULL,
    tok_sum REAL NOT NULL DEFAULT 0,
    tok_n INTEGER NOT NULL DEFAULT 0,
    ps_sum REAL NOT NULL DEFAULT 0,
    ps_n INTEGER NOT NULL DEFAULT 0,
    acc_sum REAL NOT NULL DEFAULT 0,
    acc_n INTEGER NOT NULL DEFAULT 0,
    acc_wsum REAL NOT NULL DEFAULT 0,
    acc_w REAL NOT NULL DEFAULT 0,
    accept_rate REAL,
    running_req REAL,
    queue_req REAL,
    token_usage REAL,
    PRIMARY KEY (run, t)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS benches (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    job_id TEXT NOT NULL,
    run TEXT REFERENCES runs(id) ON DELETE CASCADE,
    profile TEXT,
    started REAL,
    ended REAL,
    state TEXT,
    tok_s REAL,
    accept_len REAL,
    cycle_ms REAL,
    ttft_ms REAL,
    requests INTEGER,
    tokens INTEGER,
    result TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS benches_run ON benches(run);
-- Tombstones: runs (and their benches) deleted by the operator, by id, so a sync never imports them again.
CREATE TABLE IF NOT EXISTS deleted (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    profile TEXT,
    started REAL,
    deleted_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS recorders (
    run TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    since REAL NOT NULL
);
-- An adaptive server's step tier from the time its log said it (SGLang's start and switch lines).
CREATE TABLE IF NOT EXISTS tiers (
    run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    t REAL NOT NULL,
    steps INTEGER NOT NULL,
    PRIMARY KEY (run, t)
) WITHOUT ROWID;
"""

# Schema version -> what turns the version before it into it (a fresh database gets SCHEMA whole).
MIGRATIONS = {
    # Per-stream tok/s: older rows knew only the second's last running count, the best split there is.
    2: """
    ALTER TABLE samples ADD COLUMN ps_sum REAL NOT NULL DEFAULT 0;
    ALTER TABLE samples ADD COLUMN ps_n INTEGER NOT NULL DEFAULT 0;
    UPDATE samples SET tok_sum = 0, tok_n = 0 WHERE running_req = 0;
    UPDATE samples SET ps_sum = tok_sum / coalesce(running_req, 1), ps_n = tok_n WHERE coalesce(running_req, 1) > 0;
    """,
    # The log's first bytes (the recorders table comes with the schema script).
    3: "ALTER TABLE runs ADD COLUMN log_head BLOB",
    # The server's latency histograms as last read (backend.measure.latency.summary_json, since the server started).
    4: "ALTER TABLE runs ADD COLUMN latency TEXT",
    # The newest profile of its server: where a cycle's time went (backend.measure.anatomy.CycleAnatomy.to_json).
    5: "ALTER TABLE runs ADD COLUMN anatomy TEXT",
    # An adaptive server's tiers: the table comes with the schema script.
    6: "SELECT 1",
    # The accept length weighted by each decode line's running requests (its verify passes): a run's from totals.
    7: """
    ALTER TABLE samples ADD COLUMN acc_wsum REAL NOT NULL DEFAULT 0;
    ALTER TABLE samples ADD COLUMN acc_w REAL NOT NULL DEFAULT 0;
    """,
}

SCHEMA_NAMES = set(re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", SCHEMA))
