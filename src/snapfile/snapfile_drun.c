/*
 * snapfile_drun.c - decode the original drun's .drun JSON and store it as a snapshot.
 *
 * Every key is checked for presence and type before anything is used; the required
 * ones are those the original requires (checkpoint_idx, blobs, checkpoints, chat_log;
 * per checkpoint id, stdout, stderr, files). Blob indexes are bounds-checked, file
 * keys must be valid workspace keys (ws_manifest_set refuses the rest), and the head
 * must name a checkpoint (the original does not check; we refuse). The original
 * keeps only regular files without modes, so every entry becomes WS_FILE. Manifests
 * are stored as deltas of the previous checkpoint's, as live sessions store them.
 */
#include "snapfile/snapfile.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "util/mem.h"
#include "workspace/workspace.h"

/* ---- the budget ----------------------------------------------------------------------- */

/*
 * Counts, on the JSON text, an upper bound of the nodes cJSON would allocate (one per
 * array or object, and one per member: commas + 1 per container) and the deepest
 * nesting, refusing past SNAPFILE_VALUES_MAX or SNAPFILE_DEPTH_MAX before any node
 * exists. Strings are skipped with their escapes; the text's validity is cJSON's job.
 */
static int
json_budget(const char *text, size_t len, struct err *err)
{
    size_t values = 1, depth = 0;

    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '"') {
            for (i++; i < len && text[i] != '"'; i++) {
                i += text[i] == '\\';
            }
        } else if (c == '{' || c == '[') {
            values++;
            if (++depth > SNAPFILE_DEPTH_MAX) {
                return err_set(err, ERR_TOOBIG,
                               "not a valid .drun snapshot: its JSON nests deeper than %d levels",
                               SNAPFILE_DEPTH_MAX);
            }
        } else if (c == '}' || c == ']') {
            depth -= depth > 0;
        } else if (c == ',') {
            values++;
        } else {
            continue;
        }
        if (values > SNAPFILE_VALUES_MAX) {
            return err_set(err, ERR_TOOBIG,
                           "the .drun snapshot holds more than %d JSON values, the most drun "
                           "imports; split the session's history before exporting it",
                           SNAPFILE_VALUES_MAX);
        }
    }
    return 0;
}

/* An optional string member: NULL if absent or null; -1 if present with another type. */
static int
opt_str(const cJSON *o, const char *key, const char **out, const char *where, struct err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    *out = NULL;
    if (v == NULL || cJSON_IsNull(v)) {
        return 0;
    }
    if (!cJSON_IsString(v)) {
        return err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: %s key '%s' is not a string",
                       where, key);
    }
    *out = v->valuestring;
    return 0;
}

static const cJSON *
need(const cJSON *o, const char *key, const char *where, struct err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

    if (v == NULL) {
        err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: %s has no '%s' key", where, key);
    }
    return v;
}

/* A non-negative integer that a double holds exactly. */
static int
as_index(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740991.0 ||
        (double)(int64_t)v->valuedouble != v->valuedouble) {
        return -1;
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

struct diff_ctx {
    struct store_change *changes;
    size_t n;
};

static int
collect_change(void *ctx, int change, const struct ws_entry *old_entry,
               const struct ws_entry *new_entry, struct err *err)
{
    struct diff_ctx *d = ctx;
    const struct ws_entry *e = new_entry ? new_entry : old_entry;

    d->changes[d->n].path = e->path;
    d->changes[d->n].kind = change == WS_ADDED     ? STORE_ADDED
                            : change == WS_REMOVED ? STORE_REMOVED
                                                   : STORE_MODIFIED;
    d->n++;
    (void)err;
    return 0;
}

/* Everything one checkpoint owns while the import runs. */
struct cp_hold {
    struct ws_manifest *m;
    uint8_t manifest[HASH_LEN], out_hash[HASH_LEN], err_hash[HASH_LEN];
    struct store_step *steps;
    struct store_change *changes;
};

static int
put_text(struct store *st, const char *text, uint8_t hash[HASH_LEN], int64_t *bytes,
         const uint8_t **ref, struct err *err)
{
    size_t n = strlen(text);

    *bytes = (int64_t)n;
    *ref = NULL;
    if (n == 0) {
        return 0;
    }
    if (store_blob_put(st, text, n, hash, err) < 0) {
        return -1;
    }
    *ref = hash;
    return 0;
}

static int
import_json(struct store *st, const cJSON *root, const char *name, const char *source,
            struct snapfile_vet *vet, struct store_snapshot *out, struct err *err)
{
    const cJSON *blobs, *cps, *chat, *head, *v, *item;
    uint8_t(*hashes)[HASH_LEN] = NULL;
    int64_t *sizes = NULL;
    struct cp_hold *hold = NULL;
    struct store_snapshot_cp *scp = NULL;
    struct store_chat_entry *chats = NULL;
    struct store_overlay *ovs = NULL;
    struct store_snapshot_new req;
    size_t nblobs, ncps, nchat, novs = 0, i;
    struct buf bytes;
    char where[64];
    int rc = -1;

    memset(&req, 0, sizeof(req));
    buf_init(&bytes, STORE_BLOB_MAX_DEFAULT);
    if (!cJSON_IsObject(root)) {
        return err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: the JSON is not an object");
    }
    if ((head = need(root, "checkpoint_idx", "the snapshot", err)) == NULL ||
        (blobs = need(root, "blobs", "the snapshot", err)) == NULL ||
        (cps = need(root, "checkpoints", "the snapshot", err)) == NULL ||
        (chat = need(root, "chat_log", "the snapshot", err)) == NULL) {
        return -1;
    }
    if (!cJSON_IsArray(blobs) || !cJSON_IsArray(cps) || !cJSON_IsArray(chat) ||
        as_index(head, &req.head) < 0) {
        return err_set(err, ERR_CORRUPT,
                       "not a valid .drun snapshot: 'blobs', 'checkpoints' and 'chat_log' must "
                       "be arrays and 'checkpoint_idx' a number");
    }
    nblobs = (size_t)cJSON_GetArraySize(blobs);
    ncps = (size_t)cJSON_GetArraySize(cps);
    nchat = (size_t)cJSON_GetArraySize(chat);
    if (ncps == 0) {
        return err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: it has no checkpoints");
    }
    if (ncps > SNAPFILE_CHECKPOINTS_MAX) {
        return err_set(err, ERR_TOOBIG,
                       "the .drun snapshot has %zu checkpoints, more than the %d drun imports",
                       ncps, SNAPFILE_CHECKPOINTS_MAX);
    }
    hashes = mem_calloc(nblobs ? nblobs : 1, sizeof(*hashes));
    sizes = mem_calloc(nblobs ? nblobs : 1, sizeof(*sizes));
    hold = mem_calloc(ncps, sizeof(*hold));
    scp = mem_calloc(ncps, sizeof(*scp));
    chats = mem_calloc(nchat ? nchat : 1, sizeof(*chats));
    if (hashes == NULL || sizes == NULL || hold == NULL || scp == NULL || chats == NULL) {
        err_set(err, ERR_NOMEM, "cannot import the .drun snapshot: out of memory");
        goto out;
    }
    if (store_begin(st, err) < 0) {
        goto out;
    }
    /* Blobs: arrays of byte values. */
    i = 0;
    cJSON_ArrayForEach(item, blobs)
    {
        buf_reset(&bytes);
        if (!cJSON_IsArray(item)) {
            err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: blob %zu is not an array", i);
            goto fail;
        }
        cJSON_ArrayForEach(v, item)
        {
            int64_t b;
            if (as_index(v, &b) < 0 || b > 255) {
                err_set(err, ERR_CORRUPT,
                        "not a valid .drun snapshot: blob %zu holds a value that is not a byte", i);
                goto fail;
            }
            buf_putc(&bytes, (int)b);
        }
        if (buf_failed(&bytes)) {
            buf_err(&bytes, "a .drun blob", err);
            goto fail;
        }
        if (store_blob_put(st, bytes.data ? bytes.data : "", bytes.len, hashes[i], err) < 0) {
            goto fail;
        }
        sizes[i] = (int64_t)bytes.len;
        i++;
    }
    /* Checkpoints, each a tree over the blobs, diffed against the previous one. */
    i = 0;
    cJSON_ArrayForEach(item, cps)
    {
        struct store_snapshot_cp *c = &scp[i];
        struct cp_hold *h = &hold[i];
        const cJSON *files, *steps, *idv;
        const char *text;
        struct ws_diff_counts counts;
        struct diff_ctx dc;
        size_t nsteps;

        snprintf(where, sizeof(where), "checkpoint %zu", i);
        if (!cJSON_IsObject(item)) {
            err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: %s is not an object", where);
            goto fail;
        }
        if ((idv = need(item, "id", where, err)) == NULL ||
            need(item, "stdout", where, err) == NULL || need(item, "stderr", where, err) == NULL ||
            (files = need(item, "files", where, err)) == NULL) {
            goto fail;
        }
        if (as_index(idv, &c->id) < 0 || (size_t)c->id != i || !cJSON_IsObject(files)) {
            err_set(err, ERR_CORRUPT,
                    "not a valid .drun snapshot: %s must have id %zu and a 'files' object", where,
                    i);
            goto fail;
        }
        c->parent = i == 0 ? -1 : (int64_t)i - 1;
        if (opt_str(item, "label", &c->label, where, err) < 0 ||
            opt_str(item, "command", &c->command, where, err) < 0 ||
            opt_str(item, "tool", &c->tool, where, err) < 0 ||
            opt_str(item, "description", &c->description, where, err) < 0) {
            goto fail;
        }
        v = cJSON_GetObjectItemCaseSensitive(item, "exit_code");
        if (v != NULL && !cJSON_IsNull(v)) {
            if (!cJSON_IsNumber(v) || v->valuedouble < -2147483648.0 ||
                v->valuedouble > 2147483647.0) {
                err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: %s exit_code is not an int",
                        where);
                goto fail;
            }
            c->has_exit_code = 1;
            c->exit_code = (int)v->valuedouble;
        }
        if (opt_str(item, "stdout", &text, where, err) < 0 ||
            put_text(st, text ? text : "", h->out_hash, &c->stdout_bytes, &c->stdout_hash, err) <
                0 ||
            opt_str(item, "stderr", &text, where, err) < 0 ||
            put_text(st, text ? text : "", h->err_hash, &c->stderr_bytes, &c->stderr_hash, err) <
                0) {
            goto fail;
        }
        if (ws_manifest_new(&h->m, err) < 0) {
            goto fail;
        }
        cJSON_ArrayForEach(v, files)
        {
            int64_t idx;
            if (as_index(v, &idx) < 0 || (size_t)idx >= nblobs) {
                err_set(err, ERR_CORRUPT,
                        "not a valid .drun snapshot: %s file '%.64s' names blob %.0f, but there "
                        "are %zu blobs",
                        where, v->string, cJSON_IsNumber(v) ? v->valuedouble : -1.0, nblobs);
                goto fail;
            }
            if (ws_manifest_set(h->m, v->string, WS_FILE, (uint64_t)sizes[idx], hashes[idx], err) <
                0) {
                err_wrap(err, "not a valid .drun snapshot: %s", where);
                goto fail;
            }
        }
        buf_reset(&bytes);
        if (ws_manifest_encode(h->m, &bytes, err) < 0) {
            goto fail;
        }
        if (i == 0 ? store_blob_put(st, bytes.data, bytes.len, h->manifest, err)
                   : store_blob_put_delta(st, bytes.data, bytes.len, hold[i - 1].manifest,
                                          h->manifest, err)) {
            goto fail;
        }
        c->manifest_hash = h->manifest;
        c->file_count = (int64_t)ws_manifest_files(h->m);
        c->logical_bytes = (int64_t)ws_manifest_bytes(h->m);
        h->changes =
            mem_calloc(ws_manifest_count(h->m) + (i ? ws_manifest_count(hold[i - 1].m) : 0) + 1,
                       sizeof(*h->changes));
        if (h->changes == NULL) {
            err_set(err, ERR_NOMEM, "cannot import the .drun snapshot: out of memory");
            goto fail;
        }
        dc.changes = h->changes;
        dc.n = 0;
        if (i > 0) {
            if (ws_manifest_diff(hold[i - 1].m, h->m, collect_change, &dc, &counts, err) < 0) {
                goto fail;
            }
            c->added = (int64_t)counts.added;
            c->modified = (int64_t)counts.modified;
            c->removed = (int64_t)counts.removed;
        }
        c->changes = h->changes;
        c->n_changes = dc.n;
        steps = cJSON_GetObjectItemCaseSensitive(item, "steps");
        nsteps = cJSON_IsArray(steps) ? (size_t)cJSON_GetArraySize(steps) : 0;
        if (steps != NULL && !cJSON_IsNull(steps) && !cJSON_IsArray(steps)) {
            err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: %s 'steps' is not an array",
                    where);
            goto fail;
        }
        h->steps = mem_calloc(nsteps ? nsteps : 1, sizeof(*h->steps));
        if (h->steps == NULL) {
            err_set(err, ERR_NOMEM, "cannot import the .drun snapshot: out of memory");
            goto fail;
        }
        for (size_t k = 0; k < nsteps; k++) {
            const cJSON *sv = cJSON_GetArrayItem(steps, (int)k);
            const char *tool = NULL, *desc = NULL;
            if (!cJSON_IsObject(sv) || opt_str(sv, "tool", &tool, where, err) < 0 ||
                opt_str(sv, "description", &desc, where, err) < 0 || tool == NULL) {
                err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: %s step %zu has no tool",
                        where, k);
                goto fail;
            }
            h->steps[k].tool = (char *)tool;
            h->steps[k].description = (char *)(desc ? desc : "");
        }
        c->steps = h->steps;
        c->n_steps = nsteps;
        i++;
    }
    if ((size_t)req.head >= ncps) {
        err_set(err, ERR_CORRUPT,
                "not a valid .drun snapshot: checkpoint_idx %lld is past its %zu checkpoints",
                (long long)req.head, ncps);
        goto fail;
    }
    i = 0;
    cJSON_ArrayForEach(item, chat)
    {
        if (!cJSON_IsObject(item) || opt_str(item, "prompt", &chats[i].prompt, "chat", err) < 0 ||
            opt_str(item, "response", &chats[i].response, "chat", err) < 0 ||
            chats[i].prompt == NULL || chats[i].response == NULL) {
            err_set(err, ERR_CORRUPT,
                    "not a valid .drun snapshot: chat_log entry %zu needs 'prompt' and "
                    "'response' strings",
                    i);
            goto fail;
        }
        i++;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "overlays");
    if (cJSON_IsObject(v)) {
        const cJSON *o;
        size_t nall = (size_t)cJSON_GetArraySize(v);
        if (nall > SNAPFILE_OVERLAYS_MAX) {
            err_set(err, ERR_TOOBIG,
                    "the .drun snapshot has %zu overlays, more than the %d drun imports", nall,
                    SNAPFILE_OVERLAYS_MAX);
            goto fail;
        }
        ovs = mem_calloc(nall ? nall : 1, sizeof(*ovs));
        if (ovs == NULL) {
            err_set(err, ERR_NOMEM, "cannot import the .drun snapshot: out of memory");
            goto fail;
        }
        cJSON_ArrayForEach(o, v)
        {
            if (!cJSON_IsString(o)) {
                err_set(err, ERR_CORRUPT,
                        "not a valid .drun snapshot: overlay '%.64s' is not a "
                        "path string",
                        o->string);
                goto fail;
            }
            /* A snapshot never brings in a host path session_mount would refuse now. */
            if (vet != NULL && !snapfile_overlay_keep(vet, o->string, o->valuestring)) {
                continue;
            }
            ovs[novs].key = o->string;
            ovs[novs].host_path = o->valuestring;
            novs++;
        }
    }
    if (opt_str(root, "label", &req.label, "the snapshot", err) < 0) {
        goto fail;
    }
    req.parent_checkpoint = -1;
    v = cJSON_GetObjectItemCaseSensitive(root, "parent");
    if (cJSON_IsObject(v)) {
        const cJSON *pc = cJSON_GetObjectItemCaseSensitive(v, "checkpoint_id");
        if (opt_str(v, "session_id", &req.parent_id, "parent", err) < 0) {
            goto fail;
        }
        if (req.parent_id != NULL && strlen(req.parent_id) > STORE_SESSION_ID_LEN) {
            req.parent_id = NULL;
        }
        if (pc != NULL && as_index(pc, &req.parent_checkpoint) < 0) {
            req.parent_checkpoint = -1;
        }
    }
    req.name = name;
    req.source = source;
    req.description = "imported from an original drun .drun file";
    req.cps = scp;
    req.n_cps = ncps;
    req.chat = chats;
    req.n_chat = nchat;
    req.overlays = ovs;
    req.n_overlays = novs;
    if (store_snapshot_insert(st, &req, out, err) < 0 || store_commit(st, err) < 0) {
        goto fail;
    }
    rc = 0;
    goto out;
fail:
    store_rollback(st);
out:
    for (i = 0; hold != NULL && i < ncps; i++) {
        ws_manifest_free(hold[i].m);
        mem_free(hold[i].steps);
        mem_free(hold[i].changes);
    }
    mem_free(hold);
    mem_free(scp);
    mem_free(hashes);
    mem_free(sizes);
    mem_free(chats);
    mem_free(ovs);
    buf_release(&bytes);
    return rc;
}

/* Unpacks, checks the budget, parses and imports; json is released before the import. */
int
snapfile_import(struct store *st, const void *data, size_t len, const char *name,
                const char *source, struct snapfile_vet *vet, struct store_snapshot *out,
                struct err *err)
{
    struct buf json;
    cJSON *root;
    int rc;

    if (out != NULL) {
        memset(out, 0, sizeof(*out));
    }
    if (store_snapshot_name_check(name, err) < 0) {
        return -1;
    }
    buf_init(&json, SNAPFILE_JSON_MAX);
    if (store_drun_unpack(data, len, &json, err) < 0) {
        buf_release(&json);
        if (err->code == ERR_TOOBIG) {
            return err_set(err, ERR_TOOBIG,
                           "the .drun snapshot expands to more than %zu MiB of JSON, the most "
                           "drun imports; nothing was stored",
                           SNAPFILE_JSON_MAX >> 20);
        }
        return -1;
    }
    if (json_budget(json.data ? json.data : "", json.len, err) < 0) {
        buf_release(&json);
        return err_wrap(err, "nothing was stored");
    }
    root = cJSON_ParseWithLength(json.data ? json.data : "", json.len);
    buf_release(&json);
    if (root == NULL) {
        return err_set(err, ERR_CORRUPT, "not a valid .drun snapshot: its JSON does not parse");
    }
    rc = import_json(st, root, name, source, vet, out, err);
    cJSON_Delete(root);
    return rc;
}
