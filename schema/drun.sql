-- drun.sql: the full current schema of a drun database, as the migrations in
-- migrations/ leave it (schema version 3). Read this file to learn the tables; change
-- the schema only by adding a migration, then update this file to match (a test in
-- tests/unit/test_store.c compares the two).
-- The file also carries PRAGMA application_id = 0x6472756e ('drun') and PRAGMA
-- user_version = the schema version; both are set by store_open().

-- Content-addressed bytes. hash is the SHA-256 of the original bytes; size is their
-- length; codec 0 stores them raw, 1 as one zstd frame (only when that is smaller),
-- 2 as a zstd frame that references the bytes of the blob `base` (a delta, used for
-- manifests, whose consecutive versions differ in a few entries). depth counts the
-- deltas down to a full blob; the writer caps it. A rowid table (not WITHOUT ROWID):
-- its rows keep up to a page of payload in place, where an index-organised table
-- spills anything over ~1 KB to overflow pages and wastes their tails (measured: 13 %
-- of the file on the store benchmark).
CREATE TABLE blobs (
    id    INTEGER PRIMARY KEY,
    hash  BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),
    size  INTEGER NOT NULL CHECK (size >= 0),
    codec INTEGER NOT NULL CHECK (codec IN (0, 1, 2)),
    data  BLOB NOT NULL,
    base  BLOB REFERENCES blobs (hash),
    depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0)
);

-- One row per session. state: 0 open, 1 closed. owner_pid/owner_start name the
-- drun-mcp process holding it live (NULL when nobody does).
CREATE TABLE sessions (
    id                TEXT PRIMARY KEY CHECK (length(id) = 8),
    label             TEXT,
    parent_id         TEXT,
    parent_checkpoint INTEGER,
    created_ms        INTEGER NOT NULL,
    closed_ms         INTEGER,
    last_active_ms    INTEGER NOT NULL,
    head              INTEGER NOT NULL DEFAULT 0,
    state             INTEGER NOT NULL DEFAULT 0 CHECK (state IN (0, 1)),
    owner_pid         INTEGER,
    owner_start       INTEGER,
    heartbeat_ms      INTEGER,
    client            TEXT
) WITHOUT ROWID;
CREATE INDEX sessions_by_state ON sessions (state, created_ms);

-- Checkpoints, keyed (session_id, id); ids are never renumbered. status: 0 live,
-- 1 discarded (by a push after a rollback), 2 dropped, 3 squashed; hidden_ms is when
-- it stopped being live (gc ages hidden rows by it).
CREATE TABLE checkpoints (
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id            INTEGER NOT NULL CHECK (id >= 0),
    parent        INTEGER,
    tool          TEXT,
    command       TEXT,
    description   TEXT,
    label         TEXT,
    exit_code     INTEGER,
    duration_ms   INTEGER NOT NULL DEFAULT 0,
    created_ms    INTEGER NOT NULL,
    stdout_hash   BLOB REFERENCES blobs (hash),
    stdout_bytes  INTEGER NOT NULL DEFAULT 0,
    stderr_hash   BLOB REFERENCES blobs (hash),
    stderr_bytes  INTEGER NOT NULL DEFAULT 0,
    manifest_hash BLOB NOT NULL REFERENCES blobs (hash),
    file_count    INTEGER NOT NULL DEFAULT 0,
    added         INTEGER NOT NULL DEFAULT 0,
    modified      INTEGER NOT NULL DEFAULT 0,
    removed       INTEGER NOT NULL DEFAULT 0,
    logical_bytes INTEGER NOT NULL DEFAULT 0,
    status        INTEGER NOT NULL DEFAULT 0 CHECK (status IN (0, 1, 2, 3)),
    hidden_ms     INTEGER,
    PRIMARY KEY (session_id, id)
) WITHOUT ROWID;
CREATE INDEX checkpoints_by_label ON checkpoints (session_id, label) WHERE label IS NOT NULL;
CREATE INDEX checkpoints_by_manifest ON checkpoints (manifest_hash);
CREATE INDEX checkpoints_by_stdout ON checkpoints (stdout_hash) WHERE stdout_hash IS NOT NULL;
CREATE INDEX checkpoints_by_stderr ON checkpoints (stderr_hash) WHERE stderr_hash IS NOT NULL;

-- One row per path a checkpoint added (A), modified (M) or removed (D).
CREATE TABLE checkpoint_changes (
    session_id    TEXT NOT NULL,
    checkpoint_id INTEGER NOT NULL,
    path          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('A', 'M', 'D')),
    PRIMARY KEY (session_id, checkpoint_id, path),
    FOREIGN KEY (session_id, checkpoint_id) REFERENCES checkpoints (session_id, id)
        ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX checkpoint_changes_by_path ON checkpoint_changes (path);

-- Read-only calls recorded against a checkpoint ({tool, description}), in order.
CREATE TABLE checkpoint_steps (
    session_id    TEXT NOT NULL,
    checkpoint_id INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    time_ms       INTEGER NOT NULL,
    tool          TEXT NOT NULL,
    description   TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (session_id, checkpoint_id, seq),
    FOREIGN KEY (session_id, checkpoint_id) REFERENCES checkpoints (session_id, id)
        ON DELETE CASCADE
) WITHOUT ROWID;

-- session_chat_record entries, in order.
CREATE TABLE session_chat (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    time_ms    INTEGER NOT NULL,
    prompt     TEXT NOT NULL,
    response   TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Overlays: workspace key -> host directory, session-wide.
CREATE TABLE session_overlays (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    host_path  TEXT NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;

-- Snapshots: named, immutable copies of a session's rows, pointing at the same blobs.
-- (description was added by migration 0002, which is why it sits after the paren.)
CREATE TABLE snapshots (
    id                INTEGER PRIMARY KEY,
    name              TEXT NOT NULL UNIQUE,
    created_ms        INTEGER NOT NULL,
    source_session_id TEXT NOT NULL,
    label             TEXT,
    parent_id         TEXT,
    parent_checkpoint INTEGER,
    head              INTEGER NOT NULL,
    session_created_ms INTEGER NOT NULL,
    client            TEXT
, description TEXT);

CREATE TABLE snapshot_checkpoints (
    snapshot_id   INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    id            INTEGER NOT NULL,
    parent        INTEGER,
    tool          TEXT,
    command       TEXT,
    description   TEXT,
    label         TEXT,
    exit_code     INTEGER,
    duration_ms   INTEGER NOT NULL DEFAULT 0,
    created_ms    INTEGER NOT NULL,
    stdout_hash   BLOB REFERENCES blobs (hash),
    stdout_bytes  INTEGER NOT NULL DEFAULT 0,
    stderr_hash   BLOB REFERENCES blobs (hash),
    stderr_bytes  INTEGER NOT NULL DEFAULT 0,
    manifest_hash BLOB NOT NULL REFERENCES blobs (hash),
    file_count    INTEGER NOT NULL DEFAULT 0,
    added         INTEGER NOT NULL DEFAULT 0,
    modified      INTEGER NOT NULL DEFAULT 0,
    removed       INTEGER NOT NULL DEFAULT 0,
    logical_bytes INTEGER NOT NULL DEFAULT 0,
    status        INTEGER NOT NULL DEFAULT 0 CHECK (status IN (0, 1, 2, 3)),
    PRIMARY KEY (snapshot_id, id)
) WITHOUT ROWID;
CREATE INDEX snapshot_checkpoints_by_manifest ON snapshot_checkpoints (manifest_hash);
CREATE INDEX snapshot_checkpoints_by_stdout ON snapshot_checkpoints (stdout_hash)
    WHERE stdout_hash IS NOT NULL;
CREATE INDEX snapshot_checkpoints_by_stderr ON snapshot_checkpoints (stderr_hash)
    WHERE stderr_hash IS NOT NULL;

CREATE TABLE snapshot_changes (
    snapshot_id   INTEGER NOT NULL,
    checkpoint_id INTEGER NOT NULL,
    path          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('A', 'M', 'D')),
    PRIMARY KEY (snapshot_id, checkpoint_id, path),
    FOREIGN KEY (snapshot_id, checkpoint_id) REFERENCES snapshot_checkpoints (snapshot_id, id)
        ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE snapshot_steps (
    snapshot_id   INTEGER NOT NULL,
    checkpoint_id INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    time_ms       INTEGER NOT NULL,
    tool          TEXT NOT NULL,
    description   TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (snapshot_id, checkpoint_id, seq),
    FOREIGN KEY (snapshot_id, checkpoint_id) REFERENCES snapshot_checkpoints (snapshot_id, id)
        ON DELETE CASCADE
) WITHOUT ROWID;

-- session_chat rows of the snapshotted session, in order.
CREATE TABLE snapshot_chat (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    time_ms     INTEGER NOT NULL,
    prompt      TEXT NOT NULL,
    response    TEXT NOT NULL,
    PRIMARY KEY (snapshot_id, seq)
) WITHOUT ROWID;

-- session_overlays rows of the snapshotted session.
CREATE TABLE snapshot_overlays (
    snapshot_id INTEGER NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    host_path   TEXT NOT NULL,
    PRIMARY KEY (snapshot_id, key)
) WITHOUT ROWID;

-- The audit log: one row per tool call or security event, hash-chained. hash is the
-- SHA-256 of a length-prefixed encoding of every other column (id and prev_hash
-- included); the first row's prev_hash is 32 zero bytes. args holds the call's JSON
-- arguments, zstd-compressed when args_codec is 1.
CREATE TABLE audit (
    id             INTEGER PRIMARY KEY,
    time_ms        INTEGER NOT NULL,
    pid            INTEGER NOT NULL,
    kind           TEXT NOT NULL,
    client_name    TEXT,
    client_version TEXT,
    session_id     TEXT,
    tool           TEXT NOT NULL,
    summary        TEXT NOT NULL,
    outcome        TEXT NOT NULL,
    error_code     TEXT,
    duration_ms    INTEGER NOT NULL DEFAULT 0,
    checkpoint_id  INTEGER,
    args           BLOB,
    args_codec     INTEGER NOT NULL DEFAULT 0 CHECK (args_codec IN (0, 1)),
    prev_hash      BLOB NOT NULL CHECK (length(prev_hash) = 32),
    hash           BLOB NOT NULL CHECK (length(hash) = 32)
);
CREATE INDEX audit_by_time ON audit (time_ms);
CREATE INDEX audit_by_session ON audit (session_id, time_ms) WHERE session_id IS NOT NULL;
CREATE INDEX audit_by_tool ON audit (tool, time_ms);

-- The newest audit row's id and hash, written with each append, so that deleting
-- rows from the end of the chain is caught too.
CREATE TABLE audit_head (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    last_id INTEGER NOT NULL,
    hash    BLOB NOT NULL CHECK (length(hash) = 32)
);

CREATE VIEW audit_log AS
SELECT id,
       strftime('%Y-%m-%dT%H:%M:%fZ', time_ms / 1000.0, 'unixepoch') AS time,
       pid, kind, client_name, client_version, session_id, tool, summary, outcome,
       error_code, duration_ms, checkpoint_id,
       CASE args_codec WHEN 0 THEN CAST(args AS TEXT) ELSE NULL END AS args,
       length(args) AS args_stored_bytes,
       lower(hex(prev_hash)) AS prev_hash,
       lower(hex(hash)) AS hash
  FROM audit;

CREATE VIEW checkpoint_log AS
SELECT session_id, id, parent,
       CASE status WHEN 0 THEN 'live' WHEN 1 THEN 'discarded' WHEN 2 THEN 'dropped'
                   ELSE 'squashed' END AS status,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_ms / 1000.0, 'unixepoch') AS created,
       tool, command, description, label, exit_code, duration_ms,
       added, modified, removed, file_count, logical_bytes,
       stdout_bytes, stderr_bytes,
       lower(hex(manifest_hash)) AS manifest
  FROM checkpoints;

CREATE VIEW session_summary AS
SELECT s.id, s.label,
       CASE s.state WHEN 0 THEN 'open' ELSE 'closed' END AS state,
       strftime('%Y-%m-%dT%H:%M:%fZ', s.created_ms / 1000.0, 'unixepoch') AS created,
       strftime('%Y-%m-%dT%H:%M:%fZ', s.closed_ms / 1000.0, 'unixepoch') AS closed,
       strftime('%Y-%m-%dT%H:%M:%fZ', s.last_active_ms / 1000.0, 'unixepoch') AS last_active,
       s.head, s.owner_pid, s.client, s.parent_id, s.parent_checkpoint,
       (SELECT count(*) FROM checkpoints c WHERE c.session_id = s.id AND c.status = 0)
           AS checkpoints,
       (SELECT count(*) FROM checkpoints c WHERE c.session_id = s.id AND c.status <> 0)
           AS hidden_checkpoints
  FROM sessions s;

-- Snapshots with readable times and their sizes.
CREATE VIEW snapshot_summary AS
SELECT p.id, p.name, p.description, p.source_session_id AS session_id, p.label,
       strftime('%Y-%m-%dT%H:%M:%fZ', p.created_ms / 1000.0, 'unixepoch') AS created,
       p.head, p.client,
       (SELECT count(*) FROM snapshot_checkpoints c WHERE c.snapshot_id = p.id AND c.status = 0)
           AS checkpoints,
       (SELECT c.logical_bytes FROM snapshot_checkpoints c
         WHERE c.snapshot_id = p.id AND c.id = p.head) AS head_bytes
  FROM snapshots p;

-- The blobs each audit row's args reference: long string values are stored as blobs
-- and the args JSON holds {"$blob":"<hex>","bytes":N} in their place (see
-- schema/README.md, "Audit arguments"). gc keeps every blob listed here.
CREATE TABLE audit_refs (
    audit_id INTEGER NOT NULL REFERENCES audit (id),
    hash     BLOB NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (audit_id, hash)
) WITHOUT ROWID;
