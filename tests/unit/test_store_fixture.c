/*
 * test_store_fixture.c - builds the small drun database that the schema cookbook
 * (schema/README.md) and tests/integration/t0101-store-cookbook.sh query.
 *
 * Run normally it builds the fixture in a temporary directory and checks it; with
 * DRUN_FIXTURE_OUT=path it writes the fixture there (the shell test does this).
 * Everything goes through the store API, with manifests in the workspace format, so
 * `drun-admin gc` reads them as it would a real database.
 *
 * The fixture: session 'build-demo' (open, client claude-code) with checkpoints
 *   1 session_write_files  adds src/main.c and README
 *   2 session_bash "make"  modifies src/main.c, adds build/app; labelled 'green'
 *   3 session_bash "make test" exits 2, no file changes, writes stderr
 * session 'scratch' (closed) with one checkpoint that removes README; one blob no
 * row refers to; and six audit rows (five calls and one denial event), the
 * write_files one with a 1,250-byte value stored as a blob reference.
 */
#include "test.h"

#include "store/store.h"
#include "tools/tool.h"
#include "util/mem.h"
#include "workspace/workspace.h"

struct fx {
    struct store *st;
    struct ws_manifest *m;
};

static void
put_file(struct fx *f, const char *path, const char *text)
{
    uint8_t h[HASH_LEN];
    struct err err;

    CHECK_OK(store_blob_put(f->st, text, strlen(text), h, &err), &err);
    CHECK_OK(ws_manifest_set(f->m, path, WS_FILE, strlen(text), h, &err), &err);
}

static void
store_manifest(struct fx *f, struct store_checkpoint *cp)
{
    struct buf b;
    struct err err;

    buf_init(&b, 1 << 20);
    CHECK_OK(ws_manifest_encode(f->m, &b, &err), &err);
    CHECK_OK(store_blob_put(f->st, b.data, b.len, cp->manifest_hash, &err), &err);
    cp->file_count = (int64_t)ws_manifest_files(f->m);
    cp->logical_bytes = (int64_t)ws_manifest_bytes(f->m);
    buf_release(&b);
}

static void
audit(struct store *st, const char *session, const char *tool, const char *summary,
      const char *outcome, const char *code, int64_t cp, const char *args)
{
    struct store_audit a = {0};
    struct store_audit_part *parts = NULL;
    char *text = NULL;
    cJSON *j = NULL;
    struct err err;

    a.pid = 4242;
    a.kind = strcmp(outcome, "denied") == 0 ? "event" : "call";
    a.client_name = "claude-code";
    a.client_version = "2.1.0";
    a.session_id = session;
    a.tool = tool;
    a.summary = summary;
    a.outcome = outcome;
    a.error_code = code;
    a.duration_ms = 12;
    a.checkpoint_id = cp;
    if (args != NULL) { /* as tools_call stores them: large strings as blob references */
        j = cJSON_Parse(args);
        CHECK(j != NULL);
        CHECK(tool_audit_args(j, &text, &parts, &a.nparts) == 0);
        a.args = text;
        a.args_len = strlen(text);
        a.parts = parts;
    }
    CHECK_OK(store_audit_append(st, &a, &err), &err);
    cJSON_Delete(j); /* the parts point into it until the append */
    cJSON_free(text);
    mem_free(parts);
}

static void
build(const char *path)
{
    struct fx f = {0};
    struct store_session s, scratch;
    struct store_session_new req = {0};
    struct store_checkpoint cp;
    uint8_t h[HASH_LEN];
    struct err err;
    const char *err_text = "FAIL: test_parse (expected 3, got 4)\n";

    CHECK_OK(store_open(path, NULL, &f.st, &err), &err);
    CHECK_OK(ws_manifest_new(&f.m, &err), &err);
    memset(&cp, 0, sizeof(cp));
    store_manifest(&f, &cp);
    req.label = "build-demo";
    req.parent_checkpoint = -1;
    req.manifest_hash = cp.manifest_hash;
    req.owner_pid = 0;
    req.client = "claude-code";
    req.tool = "session_create";
    CHECK_OK(store_session_create(f.st, &req, &s, &err), &err);
    audit(f.st, s.id, "session_create", "new session", "ok", NULL, 0, "{}");

    /* 1: write two files */
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", s.id);
    put_file(&f, "src/main.c", "int main(void) { return 0; }\n");
    put_file(&f, "README", "demo\n");
    store_manifest(&f, &cp);
    cp.tool = "session_write_files";
    cp.description = "first version";
    cp.added = 2;
    {
        struct store_change ch[2] = {{"src/main.c", STORE_ADDED}, {"README", STORE_ADDED}};
        CHECK_OK(store_checkpoint_append(f.st, &cp, ch, 2, &err), &err);
    }
    {
        /* NOTES (1,250 bytes) is over the inline limit: the row holds a reference. */
        char args[2048] = "{\"files\":{\"src/main.c\":\"...\",\"README\":\"demo\",\"NOTES\":\"";
        for (int i = 0; i < 250; i++) {
            strcat(args, "line\\n");
        }
        strcat(args, "\"}}");
        audit(f.st, s.id, "session_write_files", "2 files", "ok", NULL, cp.id, args);
    }

    /* 2: make */
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", s.id);
    put_file(&f, "src/main.c", "int main(void) { return 1 - 1; }\n");
    put_file(&f, "build/app", "\177ELF...\n");
    store_manifest(&f, &cp);
    cp.tool = "session_bash";
    cp.command = "make";
    cp.has_exit_code = 1;
    cp.exit_code = 0;
    cp.duration_ms = 840;
    cp.label = "green";
    cp.added = 1;
    cp.modified = 1;
    CHECK_OK(store_blob_put(f.st, "cc -o build/app src/main.c\n", 27, cp.stdout_hash, &err), &err);
    cp.stdout_bytes = 27;
    {
        struct store_change ch[2] = {{"src/main.c", STORE_MODIFIED}, {"build/app", STORE_ADDED}};
        CHECK_OK(store_checkpoint_append(f.st, &cp, ch, 2, &err), &err);
    }
    audit(f.st, s.id, "session_bash", "make", "ok", NULL, cp.id, "{\"command\":\"make\"}");

    /* 3: make test fails */
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", s.id);
    store_manifest(&f, &cp);
    cp.tool = "session_bash";
    cp.command = "make test";
    cp.has_exit_code = 1;
    cp.exit_code = 2;
    cp.duration_ms = 1500;
    CHECK_OK(store_blob_put(f.st, err_text, strlen(err_text), cp.stderr_hash, &err), &err);
    cp.stderr_bytes = (int64_t)strlen(err_text);
    CHECK_OK(store_checkpoint_append(f.st, &cp, NULL, 0, &err), &err);
    audit(f.st, s.id, "session_bash", "make test", "error", "command_failed", cp.id,
          "{\"command\":\"make test\"}");
    audit(f.st, s.id, "session_fetch", "example.org not in allowlist", "denied",
          "domain_not_allowed", -1, "{\"url\":\"https://example.org/\"}");

    /* a second session, closed, whose checkpoint removed README */
    req.label = "scratch";
    CHECK_OK(store_session_create(f.st, &req, &scratch, &err), &err);
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.session_id, sizeof(cp.session_id), "%s", scratch.id);
    CHECK_OK(ws_manifest_remove(f.m, "README", &err), &err);
    store_manifest(&f, &cp);
    cp.tool = "session_delete_files";
    cp.removed = 1;
    {
        struct store_change ch = {"README", STORE_REMOVED};
        CHECK_OK(store_checkpoint_append(f.st, &cp, &ch, 1, &err), &err);
    }
    CHECK_OK(store_session_close(f.st, scratch.id, &err), &err);
    audit(f.st, scratch.id, "session_close", "closed", "ok", NULL, -1, NULL);

    /* one blob nothing refers to, for gc */
    CHECK_OK(store_blob_put(f.st, "orphaned output\n", 16, h, &err), &err);

    store_session_release(&s);
    store_session_release(&scratch);
    ws_manifest_free(f.m);
    store_close(f.st);
}

TEST(fixture_builds_and_checks)
{
    const char *out = getenv("DRUN_FIXTURE_OUT");
    const char *path = out && *out ? out : test_path("fixture.db");
    struct store *st = NULL;
    struct store_stats stats;
    struct store_gc_opts gopts = {1, -1, -1};
    struct store_gc_result res;
    struct err err;
    int ok;
    int64_t bad, rows;

    build(path);
    CHECK_OK(store_open(path, NULL, &st, &err), &err);
    CHECK_OK(store_stats(st, &stats, &err), &err);
    CHECK_EQ_INT(stats.sessions_open, 1);
    CHECK_EQ_INT(stats.sessions_closed, 1);
    CHECK_EQ_INT(stats.checkpoints, 6);
    CHECK_EQ_INT(stats.audit_rows, 6);
    CHECK_OK(store_audit_verify(st, &ok, &bad, &rows, &err), &err);
    CHECK(ok && rows == 6);
    CHECK_OK(store_gc(st, &gopts, ws_manifest_refs, NULL, &res, &err), &err);
    CHECK_EQ_INT(res.blobs_deleted, 1); /* only the orphan: manifests are read */
    store_close(st);
}

TESTS(fixture_builds_and_checks)
