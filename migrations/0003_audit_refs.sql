-- 0003_audit_refs: audit arguments keep long string values as content blobs.
-- A string value over 1024 bytes in a call's arguments (or over 128 bytes whose blob is
-- already stored, such as a file the call wrote) is a blob (the same content-addressed
-- zstd blobs as files, so content equal to a file costs nothing more) and the args JSON
-- holds {"$blob":"<hex>","bytes":N} in its place (schema/README.md, "Audit arguments"). This table lists the blobs
-- each audit row references, so that gc keeps them; audit rows are never deleted.
CREATE TABLE audit_refs (
    audit_id INTEGER NOT NULL REFERENCES audit (id),
    hash     BLOB NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (audit_id, hash)
) WITHOUT ROWID;
