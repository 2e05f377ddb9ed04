/*
 * test_session.c - the session layer: limits at and one past their edges, the
 * rollback-then-mutate discard, busy/idle gating, squash/drop ids, and that a failed
 * mutation leaves the session and the store exactly as they were.
 */
#include "test.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "session/session.h"
#include "store/store.h"
#include "util/mem.h"

static struct store *
open_store(void)
{
    struct store *st = NULL;
    struct err err;
    CHECK_OK(store_open(test_path("t.db"), NULL, &st, &err), &err);
    return st;
}

static struct session_mgr *
open_mgr(struct store *st, struct session_limits lim)
{
    struct session_mgr *m = NULL;
    struct err err;
    CHECK_OK(session_mgr_new(st, test_path("run"), &m, &err), &err);
    session_mgr_set_limits(m, &lim);
    return m;
}

/* Writes one file as a new checkpoint; returns 0 or -1 with e set. */
static int
write1(struct session *s, const char *key, const void *data, size_t len, struct session_err *e)
{
    struct session_edit *ed = NULL;
    struct session_commit_meta meta = {.tool = "test"};
    struct session_delta d;

    if (session_enter(s, SESSION_WRITE, e) < 0) {
        return -1;
    }
    if (session_edit_begin(s, &ed, e) < 0 || session_edit_write(ed, key, data, len, 0, e) < 0) {
        session_edit_abort(ed);
        session_leave(s, SESSION_WRITE);
        return -1;
    }
    int rc = session_edit_commit(ed, &meta, NULL, &d, e);
    session_leave(s, SESSION_WRITE);
    return rc;
}

static int64_t
live_count(struct store *st, const char *id)
{
    struct store_checkpoint *l = NULL;
    size_t n = 0;
    struct err err;
    CHECK_OK(store_checkpoint_list(st, id, 0, &l, &n, &err), &err);
    store_checkpoint_list_free(l, n);
    return (int64_t)n;
}

TEST(max_sessions_at_and_past_the_edge)
{
    struct store *st = open_store();
    struct session_limits lim = SESSION_LIMITS_DEFAULT;
    lim.max_sessions = 3;
    struct session_mgr *m = open_mgr(st, lim);
    struct session *s = NULL;
    struct session_err e;
    int64_t open = 0;

    for (int i = 0; i < 3; i++) {
        CHECK_MSG(session_create(m, "t", &s, &e) == 0, "create %d: %s", i, e.base.msg);
    }
    CHECK(session_create(m, "t", &s, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_LIMIT);
    CHECK_EQ_INT(e.d1, 3);
    CHECK(strstr(e.base.msg, "session limit of 3 reached") != NULL);
    CHECK_OK(store_session_count_open(st, &open, &e.base), &e.base);
    CHECK_EQ_INT(open, 3);
    /* Closing one makes room again. */
    CHECK_OK(session_close(m, s, &e), &e.base);
    CHECK_OK(session_create(m, "t", &s, &e), &e.base);
    session_mgr_free(m);
    store_close(st);
}

TEST(max_checkpoints_counts_only_what_remains_after_rollback)
{
    struct store *st = open_store();
    struct session_limits lim = SESSION_LIMITS_DEFAULT;
    lim.max_checkpoints = 5;
    struct session_mgr *m = open_mgr(st, lim);
    struct session *s = NULL;
    struct session_err e;
    char v[16];

    CHECK_OK(session_create(m, NULL, &s, &e), &e.base);
    for (int i = 1; i < 5; i++) { /* checkpoints 1..4: five live, the limit */
        snprintf(v, sizeof(v), "%d", i);
        CHECK_OK(write1(s, "f", v, strlen(v), &e), &e.base);
    }
    CHECK_EQ_INT(session_head(s), 4);
    CHECK(write1(s, "f", "x", 1, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_CP_LIMIT);
    CHECK_EQ_INT(e.d1, 5);
    CHECK_EQ_INT(live_count(st, session_id(s)), 5);
    CHECK_EQ_INT(session_head(s), 4);
    /* Roll back to 3: 4 is discarded by the next write, so it fits (ids 0..3, 5). */
    CHECK_OK(session_rollback(s, 3, NULL, &e), &e.base);
    CHECK_OK(write1(s, "f", "y", 1, &e), &e.base);
    CHECK_EQ_INT(session_head(s), 5);
    CHECK_EQ_INT(live_count(st, session_id(s)), 5);
    struct store_checkpoint cp;
    memset(&cp, 0, sizeof(cp));
    CHECK_OK(store_checkpoint_get(st, session_id(s), 4, &cp, &e.base), &e.base);
    CHECK_EQ_INT(cp.status, STORE_CP_DISCARDED);
    store_checkpoint_release(&cp);
    session_mgr_free(m);
    store_close(st);
}

TEST(max_workspace_mb_exactly_at_the_limit_and_one_byte_over)
{
    struct store *st = open_store();
    struct session_limits lim = SESSION_LIMITS_DEFAULT;
    lim.max_workspace_mb = 1;
    struct session_mgr *m = open_mgr(st, lim);
    struct session *s = NULL;
    struct session_err e;
    size_t mib = (size_t)1 << 20;
    char *big = mem_calloc(1, mib + 1);

    CHECK(big != NULL);
    CHECK_OK(session_create(m, NULL, &s, &e), &e.base);
    CHECK_OK(write1(s, "half", big, mib / 2, &e), &e.base);
    /* Exactly 1 MiB in total: allowed. */
    CHECK_OK(write1(s, "rest", big, mib - mib / 2, &e), &e.base);
    CHECK_EQ_INT(ws_manifest_bytes(session_manifest(s)), mib);
    /* One byte more: refused, nothing kept. */
    CHECK(write1(s, "one", "x", 1, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_SIZE);
    CHECK_EQ_INT(e.d1, (int64_t)mib + 1);
    CHECK_EQ_INT(e.d2, (int64_t)mib);
    CHECK_EQ_INT(session_head(s), 2);
    CHECK_EQ_INT(live_count(st, session_id(s)), 3);
    CHECK(ws_manifest_get(session_manifest(s), "one") == NULL);
    /* Shrinking is allowed even when over a lowered limit. */
    lim.max_workspace_mb = 0;
    session_mgr_set_limits(m, &lim);
    CHECK_OK(write1(s, "half", "", 0, &e), &e.base);
    mem_free(big);
    session_mgr_free(m);
    store_close(st);
}

TEST(bad_keys_reject_the_batch)
{
    struct store *st = open_store();
    struct session_mgr *m = open_mgr(st, SESSION_LIMITS_DEFAULT);
    struct session *s = NULL;
    struct session_edit *ed = NULL;
    struct session_err e;
    const char *bad[] = {"", "/abs", "../x", "a/../../b", "a\x01"};

    CHECK_OK(session_create(m, NULL, &s, &e), &e.base);
    CHECK_OK(write1(s, "a", "1", 1, &e), &e.base);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_OK(session_edit_begin(s, &ed, &e), &e.base);
        CHECK(session_edit_write(ed, bad[i], "x", 1, 0, &e) < 0);
        CHECK_EQ_INT(e.kind, SESSION_E_BAD_PATH);
        session_edit_abort(ed);
    }
    CHECK_OK(session_edit_begin(s, &ed, &e), &e.base);
    CHECK(session_edit_write(ed, "a/b", "x", 1, 0, &e) < 0); /* "a" is a file */
    CHECK_EQ_INT(e.kind, SESSION_E_BAD_PATH);
    CHECK(session_edit_remove(ed, "zz", &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_FILE_NOT_FOUND);
    session_edit_abort(ed);
    CHECK_EQ_INT(session_head(s), 1);
    session_mgr_free(m);
    store_close(st);
}

TEST(busy_and_idle_gate)
{
    struct store *st = open_store();
    struct session_limits lim = SESSION_LIMITS_DEFAULT;
    struct session_mgr *m = open_mgr(st, lim);
    struct session *s = NULL;
    struct session_err e;

    CHECK_OK(session_create(m, NULL, &s, &e), &e.base);
    CHECK_OK(session_enter(s, SESSION_WRITE, &e), &e.base);
    CHECK(session_enter(s, SESSION_READ, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_BUSY);
    CHECK(session_close(m, s, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_BUSY);
    session_leave(s, SESSION_WRITE);
    CHECK_OK(session_enter(s, SESSION_READ, &e), &e.base);
    CHECK_OK(session_enter(s, SESSION_READ, &e), &e.base); /* reads run together */
    CHECK(session_enter(s, SESSION_WRITE, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_BUSY);
    session_leave(s, SESSION_READ);
    session_leave(s, SESSION_READ);
    CHECK_OK(session_enter(s, SESSION_WRITE, &e), &e.base);
    session_leave(s, SESSION_WRITE);
    session_mgr_free(m);
    store_close(st);
}

TEST(claims_exclude_a_second_manager_until_released)
{
    struct store *st = open_store();
    struct session_mgr *m1 = open_mgr(st, SESSION_LIMITS_DEFAULT);
    struct session *s = NULL, *s2 = NULL;
    struct session_err e;
    char id[16];
    pid_t child;
    int status;

    CHECK_OK(session_create(m1, NULL, &s, &e), &e.base);
    CHECK_OK(write1(s, "k", "v", 1, &e), &e.base);
    snprintf(id, sizeof(id), "%s", session_id(s));
    fflush(NULL);
    child = fork();
    if (child == 0) {
        /* Another process: the session is held by a live pid. */
        struct store *st2 = open_store();
        struct session_mgr *m2 = open_mgr(st2, SESSION_LIMITS_DEFAULT);
        int rc = session_attach(m2, id, &s2, &e);
        _exit(rc < 0 && e.kind == SESSION_E_BUSY && e.d1 == getppid() ? 0 : 1);
    }
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "second process was not refused");
    session_mgr_free(m1); /* releases the claim */
    struct session_mgr *m3 = open_mgr(st, SESSION_LIMITS_DEFAULT);
    CHECK_OK(session_attach(m3, id, &s2, &e), &e.base);
    CHECK_EQ_INT(session_head(s2), 1);
    CHECK(ws_manifest_get(session_manifest(s2), "k") != NULL);
    session_mgr_free(m3);
    store_close(st);
}

TEST(squash_and_drop_keep_ids)
{
    struct store *st = open_store();
    struct session_mgr *m = open_mgr(st, SESSION_LIMITS_DEFAULT);
    struct session *s = NULL;
    struct session_err e;
    size_t n;
    const int64_t *ids;

    CHECK_OK(session_create(m, NULL, &s, &e), &e.base);
    for (int i = 1; i <= 5; i++) {
        char v[16];
        snprintf(v, sizeof(v), "%d", i);
        CHECK_OK(write1(s, v, v, 1, &e), &e.base);
    }
    CHECK(session_squash(s, 0, 2, NULL, &e) < 0);
    CHECK(session_squash(s, 3, 2, NULL, &e) < 0);
    CHECK_OK(session_squash(s, 2, 3, "sq", &e), &e.base);
    ids = session_live_ids(s, &n);
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(ids[2], 3);
    CHECK(session_drop(s, 5, 5, &e) < 0); /* the head */
    CHECK_OK(session_drop(s, 3, 4, &e), &e.base);
    ids = session_live_ids(s, &n);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 0);
    CHECK_EQ_INT(ids[1], 1);
    CHECK_EQ_INT(ids[2], 5);
    struct store_checkpoint cp;
    memset(&cp, 0, sizeof(cp));
    CHECK_OK(store_checkpoint_get(st, session_id(s), 5, &cp, &e.base), &e.base);
    CHECK_EQ_INT(cp.parent, 1);
    CHECK_EQ_INT(cp.added, 4); /* files 2, 3, 4 and 5, against checkpoint 1 */
    store_checkpoint_release(&cp);
    session_mgr_free(m);
    store_close(st);
}

TEST(utf8_helpers)
{
    CHECK(session_is_text("h\xc3\xa9", 3));
    CHECK(!session_is_text("h\xc3", 2));
    CHECK(!session_is_text("a\0b", 3));
    CHECK(!session_is_text("\xed\xa0\x80", 3)); /* a surrogate */
    CHECK_EQ_INT(session_utf8_floor("a\xe2\x82", 3), 1);
    CHECK_EQ_INT(session_utf8_floor("a\xe2\x82\xac", 4), 4);
    CHECK_EQ_INT(session_utf8_floor("\xf0\x9f\x98", 3), 0);
}

TEST(grep_limits_stop_catastrophic_patterns)
{
    struct session_grep g;
    struct session_err e;
    char line[6000];

    memset(line, 'a', sizeof(line) - 2);
    line[sizeof(line) - 2] = 'b';
    line[sizeof(line) - 1] = '\n';
    CHECK(session_grep("^(a+)+$", line, sizeof(line), 0, &g, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_PATTERN);
    CHECK(session_grep("(", "x", 1, 0, &g, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_PATTERN);
    CHECK_OK(session_grep("(?i)B", "a\nxb\r\nc", 7, 100, &g, &e), &e.base);
    CHECK_EQ_INT(g.n, 1);
    CHECK_EQ_INT(g.matches[0].line_number, 2);
    CHECK_EQ_INT(g.matches[0].byte_offset, 102);
    CHECK_EQ_STR(g.matches[0].line, "xb");
    session_grep_release(&g);
}

/* A message longer than struct err holds is cut to fit, never lost. */
TEST(long_failure_messages_are_cut_not_lost)
{
    struct session_err e;
    char path[600];

    memset(path, 'p', sizeof(path) - 1);
    path[sizeof(path) - 1] = '\0';
    CHECK(session_fail(&e, SESSION_E_OTHER, ERR_DENIED, "'%s' is not allowed", path) < 0);
    CHECK_EQ_INT(e.base.code, ERR_DENIED);
    CHECK_EQ_INT(strlen(e.base.msg), ERR_MSG_MAX - 1);
    CHECK(strncmp(e.base.msg, "'ppp", 4) == 0);
}

/* ---- session_extract_text ---------------------------------------------------------------- */

/* A one-page PDF showing "Hello" (xref offsets computed), into out. */
static void
tiny_pdf(struct buf *out)
{
    static const char *const objs[] = {
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 "
        "R >> >> /Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        "<< /Length 36 >>\nstream\nBT /F1 12 Tf 72 700 Td (Hello) Tj ET\nendstream",
    };
    size_t off[5];

    buf_puts(out, "%PDF-1.4\n");
    for (size_t i = 0; i < 5; i++) {
        off[i] = out->len;
        buf_printf(out, "%zu 0 obj\n%s\nendobj\n", i + 1, objs[i]);
    }
    size_t xref = out->len;
    buf_puts(out, "xref\n0 6\n0000000000 65535 f \n");
    for (size_t i = 0; i < 5; i++) {
        buf_printf(out, "%010zu 00000 n \n", off[i]);
    }
    buf_printf(out, "trailer\n<< /Size 6 /Root 1 0 R >>\nstartxref\n%zu\n%%%%EOF\n", xref);
    CHECK(!buf_failed(out));
}

static int
extract(struct session *s, const char *path, uint64_t max, struct session_extract_result *r,
        struct session_err *e)
{
    struct session_extract_opts o = {.path = path, .timeout_ms = 60000, .max_text_bytes = max};
    int rc;

    if (session_enter(s, SESSION_WRITE, e) < 0) {
        return -1;
    }
    rc = session_extract_text(s, &o, NULL, r, e);
    session_leave(s, SESSION_WRITE);
    return rc;
}

/* Entries of dir whose name starts with "extract-" (the engine's private copies). */
static int
extract_dirs(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    if (d == NULL) {
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        n += strncmp(de->d_name, "extract-", 8) == 0;
    }
    closedir(d);
    return n;
}

TEST(extract_text_bounds_input_and_output_at_their_edges)
{
    struct store *st = open_store();
    struct session_limits lim = SESSION_LIMITS_DEFAULT;
    struct session_mgr *m = open_mgr(st, lim);
    struct session *s = NULL;
    struct session_err e;
    struct session_extract_result r;
    struct buf pdf, text;
    struct sandbox_probe probe;
    struct err err;
    const struct ws_entry *ent;

    if (sandbox_probe(&probe, &err) < 0 || access("/usr/bin/pdftotext", X_OK) != 0) {
        SKIP("needs a working sandbox and pdftotext: %s", err.msg);
    }
    /* A root daemon's parser runs as the sandbox user, who must pass through to the copy. */
    CHECK(chmod(test_tmpdir(), 0711) == 0);
    buf_init(&pdf, 1 << 20);
    buf_init(&text, 1 << 20);
    tiny_pdf(&pdf);
    CHECK_OK(session_create(m, NULL, &s, &e), &e.base);
    CHECK_OK(write1(s, "a.pdf", pdf.data, pdf.len, &e), &e.base);

    /* The whole text is "Hello\n\n\f" (8 bytes): a cap of exactly 8 keeps it all. */
    CHECK_OK(extract(s, "a.pdf", 8, &r, &e), &e.base);
    CHECK_EQ_STR(r.saved_to, "a.pdf.txt");
    CHECK_EQ_INT(r.truncated, 0);
    CHECK_EQ_INT(r.pages, 1);
    CHECK_EQ_INT(r.chars, 8);
    CHECK_EQ_INT(r.checkpoint_id, session_head(s));
    session_extract_result_release(&r);
    ent = ws_manifest_get(session_manifest(s), "a.pdf.txt");
    CHECK(ent != NULL);
    CHECK_OK(session_read_entry(m, ent, &text, &e), &e.base);
    CHECK(text.len == 8 && memcmp(text.data, "Hello\n\n\f", 8) == 0);

    /* One byte less: cut, and said so; the form feed is gone, so no whole page. */
    CHECK_OK(extract(s, "a.pdf", 7, &r, &e), &e.base);
    CHECK_EQ_INT(r.truncated, 1);
    CHECK_EQ_INT(r.pages, 0);
    CHECK_EQ_INT(r.chars, 7);
    CHECK_EQ_INT(r.total_bytes, 8);
    session_extract_result_release(&r);

    /* An input over max_workspace_mb (lowered since it was written) is refused unread. */
    int64_t head = session_head(s);
    lim.max_workspace_mb = 0;
    session_mgr_set_limits(m, &lim);
    CHECK(extract(s, "a.pdf", 0, &r, &e) < 0);
    CHECK_EQ_INT(e.kind, SESSION_E_EXTRACT);
    CHECK(strstr(e.base.msg, "max_workspace_mb") != NULL);
    CHECK_EQ_INT(session_head(s), head);

    /* Nothing of the private copies is left behind, after success or failure. */
    CHECK_EQ_INT(extract_dirs(test_path("run")), 0);
    buf_release(&pdf);
    buf_release(&text);
    session_mgr_free(m);
    store_close(st);
}

TESTS(long_failure_messages_are_cut_not_lost, max_sessions_at_and_past_the_edge,
      max_checkpoints_counts_only_what_remains_after_rollback,
      max_workspace_mb_exactly_at_the_limit_and_one_byte_over, bad_keys_reject_the_batch,
      busy_and_idle_gate, claims_exclude_a_second_manager_until_released, squash_and_drop_keep_ids,
      utf8_helpers, grep_limits_stop_catastrophic_patterns,
      extract_text_bounds_input_and_output_at_their_edges)
