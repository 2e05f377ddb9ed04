-- 0002_snapshot_extras: what a snapshot needs besides its checkpoint, change and step
-- rows: the session's chat log and overlays, and a description. Forward-only; applied
-- in one transaction by store_open(). schema/drun.sql shows the result (ALTER TABLE
-- appends the new column to the stored CREATE TABLE text, which drun.sql repeats).
ALTER TABLE snapshots ADD COLUMN description TEXT;

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
