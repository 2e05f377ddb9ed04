/*
 * tools_files.c - the file tools: session_read_file, session_read_files,
 * session_write_files and session_delete_files.
 *
 * Reads page by byte offset and limit and never split a UTF-8 character in a text
 * slice (tsess_page); every result is capped at SESSION_READ_MAX bytes of content, and
 * past it the agent is told to page. Writes and deletes validate every key first (one
 * bad key rejects the batch, nothing is written) and make one checkpoint per call.
 */
#include "tools/tools_sess.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/mem.h"

/* The image content type for a key's extension, or NULL (reference section 4.3). */
static const char *
image_mime(const char *path)
{
    static const char *const map[][2] = {
        {"png", "image/png"},       {"jpg", "image/jpeg"},  {"jpeg", "image/jpeg"},
        {"gif", "image/gif"},       {"webp", "image/webp"}, {"svg", "image/svg+xml"},
        {"pdf", "application/pdf"},
    };
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');

    if (dot == NULL || (slash != NULL && dot < slash)) {
        return NULL;
    }
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strcasecmp(dot + 1, map[i][0]) == 0) {
            return map[i][1];
        }
    }
    return NULL;
}

static void
read_whole(struct tool_call *call, struct session_mgr *m, const struct ws_entry *ent)
{
    struct buf b, enc;
    struct session_err e;
    const char *mime = image_mime(ent->path);

    buf_init(&b, SESSION_READ_MAX);
    if (session_read_entry(m, ent, &b, &e) < 0) {
        buf_release(&b);
        tsess_fail(call, &e);
        return;
    }
    buf_init(&enc, SESSION_READ_MAX * 2);
    if (mime != NULL) {
        cJSON *content = cJSON_CreateArray(), *img = cJSON_CreateObject();
        tsess_b64_encode(b.data ? b.data : "", b.len, &enc);
        cJSON_AddStringToObject(img, "type", "image");
        cJSON_AddStringToObject(img, "data", buf_cstr(&enc));
        cJSON_AddStringToObject(img, "mimeType", mime);
        cJSON_AddItemToArray(content, img);
        buf_release(&b);
        buf_release(&enc);
        tool_call_done_content(call, content);
        return;
    }
    if (session_is_text(b.data ? b.data : "", b.len)) {
        tool_call_done_text(call, buf_cstr(&b));
    } else {
        buf_puts(&enc, "[Unknown format] ");
        tsess_b64_encode(b.data, b.len, &enc);
        tool_call_done_text(call, buf_cstr(&enc));
    }
    buf_release(&b);
    buf_release(&enc);
}

static void
do_read_file(struct tool_call *call)
{
    struct session *s;
    const char *path = tool_call_arg_str(call, "path");
    const char *pattern = tool_call_arg_str(call, "pattern");
    int64_t offset = tsess_arg_id(call, "offset"), limit = tsess_arg_id(call, "limit");
    const struct ws_entry *ent;
    struct session_err e;
    struct buf b;
    cJSON *o = NULL;

    s = tsess_open_read(call);
    if (s == NULL) {
        return;
    }
    tool_call_set_summary(call, "read '%.150s'", path);
    if (session_lookup(session_manifest(s), path, NULL, &ent, &e) < 0 ||
        session_step(s, -1, "session_read_file", tool_call_arg_str(call, "description"), &e) < 0) {
        session_leave(s, SESSION_READ);
        tsess_fail(call, &e);
        return;
    }
    if (pattern == NULL && offset < 0 && limit < 0) {
        session_leave(s, SESSION_READ);
        read_whole(call, session_owner(s), ent);
        return;
    }
    /* Paging reads the blob whole (the store has no ranged read) but returns a slice. */
    buf_init(&b, (size_t)ent->size + 1);
    if (session_read_entry(session_owner(s), ent, &b, &e) < 0) {
        goto fail;
    }
    o = cJSON_CreateObject();
    if (pattern != NULL) {
        struct session_grep g;
        size_t len = b.len;
        size_t start = offset < 0 ? 0 : (uint64_t)offset > len ? len : (size_t)offset;
        size_t end = limit < 0 || (uint64_t)limit > len - start ? len : start + (size_t)limit;
        cJSON *arr;
        if (session_grep(pattern, b.data ? b.data + start : "", end - start, (int64_t)start, &g,
                         &e) < 0) {
            goto fail;
        }
        cJSON_AddStringToObject(o, "path", ent->path);
        cJSON_AddNumberToObject(o, "total_matches", (double)g.n);
        arr = cJSON_AddArrayToObject(o, "matches");
        for (size_t i = 0; i < g.n; i++) {
            cJSON *mo = cJSON_CreateObject();
            cJSON_AddNumberToObject(mo, "line_number", (double)g.matches[i].line_number);
            cJSON_AddNumberToObject(mo, "byte_offset", (double)g.matches[i].byte_offset);
            cJSON_AddStringToObject(mo, "line", g.matches[i].line);
            cJSON_AddItemToArray(arr, mo);
        }
        session_grep_release(&g);
    } else if (tsess_page(o, b.data ? b.data : "", b.len, offset, limit, &e) < 0) {
        goto fail;
    }
    buf_release(&b);
    session_leave(s, SESSION_READ);
    tool_call_done_json(call, o);
    return;
fail:
    cJSON_Delete(o);
    buf_release(&b);
    session_leave(s, SESSION_READ);
    tsess_fail(call, &e);
}

static void
do_read_files(struct tool_call *call)
{
    struct session *s;
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(tool_call_args(call), "paths");
    const cJSON *p;
    struct session_err e;
    struct buf b, enc;
    cJSON *arr = NULL;
    size_t total = 0;

    s = tsess_open_read(call);
    if (s == NULL) {
        return;
    }
    buf_init(&b, SESSION_READ_MAX);
    buf_init(&enc, SESSION_READ_MAX * 2);
    /* Check every key first: a missing one fails the whole call. */
    cJSON_ArrayForEach(p, paths)
    {
        const struct ws_entry *ent;
        if (session_lookup(session_manifest(s), p->valuestring, NULL, &ent, &e) < 0) {
            goto fail;
        }
        total += ent->size;
    }
    if (total > SESSION_READ_MAX) {
        session_fail(&e, SESSION_E_TOO_LARGE, ERR_TOOBIG,
                     "these files hold %zu bytes, more than one result may carry (%zu); read "
                     "fewer files per call, or page a large one with session_read_file",
                     total, SESSION_READ_MAX);
        e.d1 = (int64_t)total;
        e.d2 = (int64_t)SESSION_READ_MAX;
        goto fail;
    }
    if (session_step(s, -1, "session_read_files", tool_call_arg_str(call, "description"), &e) < 0) {
        goto fail;
    }
    arr = cJSON_CreateArray();
    cJSON_ArrayForEach(p, paths)
    {
        const struct ws_entry *ent;
        cJSON *o = cJSON_CreateObject();
        int text;
        session_lookup(session_manifest(s), p->valuestring, NULL, &ent, &e);
        buf_reset(&b);
        if (session_read_entry(session_owner(s), ent, &b, &e) < 0) {
            cJSON_Delete(o);
            goto fail;
        }
        text = session_is_text(b.data ? b.data : "", b.len);
        cJSON_AddStringToObject(o, "path", ent->path);
        if (text) {
            cJSON_AddStringToObject(o, "content", buf_cstr(&b));
        } else {
            buf_reset(&enc);
            tsess_b64_encode(b.data, b.len, &enc);
            cJSON_AddStringToObject(o, "content", buf_cstr(&enc));
        }
        cJSON_AddStringToObject(o, "encoding", text ? "text" : "base64");
        cJSON_AddItemToArray(arr, o);
    }
    buf_release(&b);
    buf_release(&enc);
    session_leave(s, SESSION_READ);
    tool_call_set_summary(call, "read %d files", cJSON_GetArraySize(arr));
    tool_call_done_json(call, arr);
    return;
fail:
    cJSON_Delete(arr);
    buf_release(&b);
    buf_release(&enc);
    session_leave(s, SESSION_READ);
    tsess_fail(call, &e);
}

static void
do_write_files(struct tool_call *call)
{
    struct session *s;
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(tool_call_args(call), "entries");
    const cJSON *it;
    struct session_edit *ed = NULL;
    struct session_err e;
    struct session_commit_meta meta;
    struct buf *decoded = NULL;
    size_t n = 0, nd = 0;

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    n = (size_t)cJSON_GetArraySize(entries);
    decoded = mem_calloc(n ? n : 1, sizeof(*decoded));
    if (decoded == NULL) {
        session_fail(&e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (session_edit_begin(s, &ed, &e) < 0) {
        goto fail;
    }
    cJSON_ArrayForEach(it, entries)
    {
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(it, "path");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(it, "is_base64");
        const char *data = content->valuestring;
        size_t len = strlen(data);
        if (cJSON_IsTrue(b64)) {
            struct buf *d = &decoded[nd++];
            buf_init(d, BUF_MAX_DEFAULT);
            if (tsess_b64_decode(data, len, d, &e.base) < 0) {
                session_fail_err(&e, SESSION_E_OTHER, &e.base);
                goto fail;
            }
            data = d->data ? d->data : "";
            len = d->len;
        }
        if (session_edit_write(ed, path->valuestring, data, len, 0, &e) < 0) {
            goto fail;
        }
    }
    memset(&meta, 0, sizeof(meta));
    meta.tool = "session_write_files";
    meta.description = tool_call_arg_str(call, "description");
    tool_call_set_summary(call, "wrote %zu files", n);
    tsess_commit(call, s, ed, &meta);
    for (size_t i = 0; i < nd; i++) {
        buf_release(&decoded[i]);
    }
    mem_free(decoded);
    return;
fail:
    session_edit_abort(ed);
    for (size_t i = 0; i < nd; i++) {
        buf_release(&decoded[i]);
    }
    mem_free(decoded);
    session_leave(s, SESSION_WRITE);
    tsess_fail(call, &e);
}

static void
do_delete_files(struct tool_call *call)
{
    struct session *s;
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(tool_call_args(call), "paths");
    const cJSON *p;
    struct session_edit *ed = NULL;
    struct session_err e;
    struct session_commit_meta meta;

    s = tsess_open(call, SESSION_WRITE);
    if (s == NULL) {
        return;
    }
    if (session_edit_begin(s, &ed, &e) < 0) {
        goto fail;
    }
    cJSON_ArrayForEach(p, paths)
    {
        if (session_edit_remove(ed, p->valuestring, &e) < 0) {
            goto fail;
        }
    }
    memset(&meta, 0, sizeof(meta));
    meta.tool = "session_delete_files";
    meta.description = tool_call_arg_str(call, "description");
    tool_call_set_summary(call, "deleted %d files", cJSON_GetArraySize(paths));
    tsess_commit(call, s, ed, &meta);
    return;
fail:
    session_edit_abort(ed);
    session_leave(s, SESSION_WRITE);
    tsess_fail(call, &e);
}

#define SCHEMA_HEAD                                                                                \
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
#define DESC_PROP                                                                                  \
    "\"description\":{\"type\":\"string\",\"description\":\"Why you are doing this (recorded "     \
    "in the history).\"}"

static const char read_file_schema[] =
    SCHEMA_HEAD "\"properties\":{\"path\":{\"type\":\"string\",\"description\":\"Workspace "
                "key, e.g. src/main.c.\"},\"offset\":{\"type\":\"integer\",\"minimum\":0,"
                "\"description\":\"Byte offset to start at.\"},\"limit\":{\"type\":\"integer\","
                "\"minimum\":0,\"description\":\"Most bytes to return.\"},\"pattern\":{\"type\":"
                "\"string\",\"maxLength\":4096,\"description\":\"Regular expression (PCRE; (?i) "
                "for case-insensitive): return matching lines with line_number and byte_offset "
                "(from the start of the file).\"}," DESC_PROP "," TSESS_ID_PROP
                "},\"required\":[\"path\",\"description\"],\"additionalProperties\":false}";

static const char read_files_schema[] =
    SCHEMA_HEAD "\"properties\":{\"paths\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
                "\"minItems\":1,\"maxItems\":10000}," DESC_PROP "," TSESS_ID_PROP
                "},\"required\":[\"paths\",\"description\"],\"additionalProperties\":false}";

static const char write_files_schema[] =
    SCHEMA_HEAD "\"properties\":{\"entries\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":"
                "10000,\"items\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":"
                "\"string\"},\"content\":{\"type\":\"string\"},\"is_base64\":{\"type\":"
                "\"boolean\",\"description\":\"content is standard base64 (for binary "
                "files).\"}},\"required\":[\"path\",\"content\"],\"additionalProperties\":"
                "false}}," DESC_PROP "," TSESS_ID_PROP
                "},\"required\":[\"entries\",\"description\"],\"additionalProperties\":false}";

static const char delete_files_schema[] =
    SCHEMA_HEAD "\"properties\":{\"paths\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
                "\"minItems\":1,\"maxItems\":10000}," DESC_PROP "," TSESS_ID_PROP
                "},\"required\":[\"paths\",\"description\"],\"additionalProperties\":false}";

const struct tool_def tools_files_defs[] = {
    {
        .name = "session_read_file",
        .title = "Read a file",
        .description = "Read a workspace file: whole (images as image content), a byte range "
                       "(offset/limit; text never splits a character, else base64), or the "
                       "lines matching pattern.",
        .input_schema = read_file_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_read_file,
    },
    {
        .name = "session_read_files",
        .title = "Read files",
        .description = "Read several workspace files at once: [{path, content, encoding}] in "
                       "request order.",
        .input_schema = read_files_schema,
        .annotations = {1, 0, 1, 0},
        .handler = do_read_files,
    },
    {
        .name = "session_write_files",
        .title = "Write files",
        .description = "Write files into the workspace as one checkpoint. Paths are relative "
                       "keys; parent directories are implied.",
        .input_schema = write_files_schema,
        .annotations = {0, 0, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_write_files,
    },
    {
        .name = "session_delete_files",
        .title = "Delete files",
        .description = "Delete files (exact keys) from the workspace as one checkpoint.",
        .input_schema = delete_files_schema,
        .annotations = {0, 1, 0, 0},
        .output_schema = TSESS_OUT_STATE,
        .handler = do_delete_files,
    },
};

const size_t tools_files_count = sizeof(tools_files_defs) / sizeof(tools_files_defs[0]);
