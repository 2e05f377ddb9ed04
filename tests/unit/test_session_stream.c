/*
 * test_session_stream.c - files whose content comes from a store blob writer
 * (session_edit_put_writer, what session_fetch uses): committed with the checkpoint,
 * read back, materialized in
 * the workspace directory; a failed commit or an abort stores nothing.
 */
#include "test.h"
#include "test_db.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "session/session.h"
#include "store/store.h"
#include "util/hash.h"
#include "util/mem.h"
#include "workspace/workspace.h"

#define C STORE_BLOB_CHUNK

static char db_path[4096];

static struct store *
open_store(void)
{
    struct store *st = NULL;
    struct err err;

    CHECK_FMT(db_path, sizeof(db_path), "%s", test_path("t.db"));
    CHECK_OK(store_open(db_path, NULL, &st, &err), &err);
    return st;
}

static struct session_mgr *
open_mgr(struct store *st, int64_t max_mb)
{
    struct session_limits lim = SESSION_LIMITS_DEFAULT;
    struct session_mgr *m = NULL;
    struct err err;

    mkdir(test_path("run"), 0711);
    CHECK_OK(session_mgr_new(st, test_path("run"), &m, &err), &err);
    if (max_mb > 0) {
        lim.max_workspace_mb = max_mb;
    }
    session_mgr_set_limits(m, &lim);
    return m;
}

static int64_t
blob_rows(void)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    int64_t v = -1;

    CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
    CHECK(sqlite3_prepare_v2(db, "SELECT count(*) FROM blobs", -1, &s, NULL) == SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW) {
        v = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static void
fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 7;

    for (size_t i = 0; i < n; i++) {
        if ((i / 8192) % 2 == 0) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            p[i] = (uint8_t)x;
        } else {
            p[i] = (uint8_t)('a' + i % 26);
        }
    }
}

static struct store_blob_writer *
writer_with(struct store *st, const uint8_t *data, size_t len)
{
    struct store_blob_writer *w = NULL;
    struct err err;

    CHECK_OK(store_blob_writer_open(st, &w, &err), &err);
    for (size_t off = 0; off < len; off += 65536) {
        size_t n = len - off < 65536 ? len - off : 65536;
        CHECK_OK(store_blob_writer_write(w, data + off, n, &err), &err);
    }
    return w;
}

TEST(writer_file_commits_reads_back_and_materializes)
{
    struct store *st = open_store();
    struct session_mgr *m = open_mgr(st, 0);
    struct session *s = NULL;
    struct session_edit *ed = NULL;
    struct session_commit_meta meta = {.tool = "test"};
    struct session_delta d;
    struct session_err e;
    size_t len = 3 * C + 99;
    uint8_t *data = mem_alloc(len), want[HASH_LEN];
    const struct ws_entry *ent;
    struct ws_dir *dir = NULL;
    struct buf out;
    char p[8192];
    int fd;

    CHECK(data != NULL);
    fill(data, len, 3);
    hash_sha256(data, len, want);
    CHECK(session_create(m, "t", &s, &e) == 0);
    CHECK(session_enter(s, SESSION_WRITE, &e) == 0);
    CHECK(session_edit_begin(s, &ed, &e) == 0);
    CHECK_MSG(session_edit_put_writer(ed, "dl/big.bin", writer_with(st, data, len), 0, &e) == 0,
              "%s", e.base.msg);
    CHECK_MSG(session_edit_commit(ed, &meta, NULL, &d, &e) == 0, "%s", e.base.msg);
    session_leave(s, SESSION_WRITE);

    ent = ws_manifest_get(session_manifest(s), "dl/big.bin");
    CHECK(ent != NULL && ent->size == len && memcmp(ent->hash, want, HASH_LEN) == 0);
    buf_init(&out, len);
    CHECK(session_read_entry(m, ent, &out, &e) == 0);
    CHECK(out.len == len && memcmp(out.data, data, len) == 0);
    buf_release(&out);

    /* the workspace directory gets the file */
    CHECK(session_enter(s, SESSION_WRITE, &e) == 0);
    CHECK_MSG(session_workspace_prepare(s, &dir, &e) == 0, "%s", e.base.msg);
    snprintf(p, sizeof(p), "%s/dl/big.bin", ws_dir_path(dir));
    fd = open(p, O_RDONLY);
    CHECK(fd >= 0);
    {
        uint8_t *disk = mem_alloc(len + 1);
        CHECK(disk != NULL && read(fd, disk, len + 1) == (ssize_t)len);
        CHECK(memcmp(disk, data, len) == 0);
        mem_free(disk);
    }
    close(fd);
    session_leave(s, SESSION_WRITE);
    session_mgr_free(m);
    store_close(st);
    mem_free(data);
}

TEST(failed_commit_and_abort_store_nothing)
{
    struct store *st = open_store();
    struct session_mgr *m = open_mgr(st, 1); /* 1 MiB workspace */
    struct session *s = NULL;
    struct session_edit *ed = NULL;
    struct session_commit_meta meta = {.tool = "test"};
    struct session_delta d;
    struct session_err e;
    size_t len = 2 * C;
    uint8_t *data = mem_alloc(len);
    int64_t rows;
    int fds;

    CHECK(data != NULL);
    fill(data, len, 5);
    CHECK(session_create(m, "t", &s, &e) == 0);
    rows = blob_rows();
    fds = tdb_count_fds();

    /* past the workspace size limit: the commit fails, the writer's row never appears */
    CHECK(session_enter(s, SESSION_WRITE, &e) == 0);
    CHECK(session_edit_begin(s, &ed, &e) == 0);
    CHECK(session_edit_put_writer(ed, "big", writer_with(st, data, len), 0, &e) == 0);
    CHECK(session_edit_commit(ed, &meta, NULL, &d, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_SIZE);
    session_leave(s, SESSION_WRITE);
    CHECK_EQ_INT(blob_rows(), rows);
    CHECK_EQ_INT(tdb_count_fds(), fds);

    /* an abort drops the writer: no row, no file */
    CHECK(session_enter(s, SESSION_WRITE, &e) == 0);
    CHECK(session_edit_begin(s, &ed, &e) == 0);
    CHECK(session_edit_put_writer(ed, "small", writer_with(st, data, C / 2), 0, &e) == 0);
    CHECK(session_edit_put_writer(ed, "../bad", writer_with(st, data, C + 1), 0, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_BAD_PATH);
    session_edit_abort(ed);
    session_leave(s, SESSION_WRITE);
    CHECK_EQ_INT(blob_rows(), rows);
    CHECK_EQ_INT(tdb_count_fds(), fds);

    session_mgr_free(m);
    store_close(st);
    mem_free(data);
}

TESTS(writer_file_commits_reads_back_and_materializes, failed_commit_and_abort_store_nothing)
