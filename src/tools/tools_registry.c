/*
 * tools_registry.c - the list of tools this binary serves, in drun's fixed order.
 *
 * The order is the original drun's tools/list order (reference section 1.3), because
 * agents and their prompts have seen it; a tool that does not exist yet is simply
 * absent. A tool family adds itself with one line in tools_registry_init(). Tools the
 * order does not name (the test-only ones) come after, in registration order.
 *
 * Test-only tools live outside src/ and are linked only into build/tests/drun-mcp-testing;
 * that binary defines tools_testing_register(), which a normal build leaves undefined
 * (a weak reference), so a normal build cannot serve them.
 */
#include "tools/tools.h"

#include <string.h>

#include "util/log.h"

/* Defined only by the testing binary (tests/support/tools_testing.c). */
int tools_testing_register(struct err *err) __attribute__((weak));

static const char *const tools_order[] = {
    "create_session",
    "session_switch",
    "session_fork",
    "session_list",
    "session_close",
    "session_history",
    "get_session_state",
    "session_bash",
    "session_package_install",
    "session_rollback",
    "session_read_file",
    "session_read_files",
    "session_write_files",
    "session_delete_files",
    "session_mount",
    "session_extract_text",
    "session_diff",
    "session_export",
    "delete_from_host",
    "session_tree",
    "session_fetch",
    "get_config",
    "get_system_instructions",
    "list_snapshots",
    "session_snapshot",
    "session_restore",
    "session_get_env",
    "session_label",
    "session_checkpoint_label",
    "session_checkpoint_squash",
    "session_checkpoint_drop",
    "session_merge",
    "checkpoint_read_stdstreams",
    "session_chat_record",
};

#define ORDER_N (sizeof(tools_order) / sizeof(tools_order[0]))

struct entry {
    const struct tool_def *def;
    cJSON *schema; /* parsed input_schema */
    cJSON *output; /* parsed output_schema, or NULL */
    size_t rank;   /* position in tools_order, or ORDER_N + registration sequence */
};

static struct entry reg[TOOLS_MAX];
static size_t reg_n;
static size_t reg_seq;
static int reg_ready;

static size_t
order_rank(const char *name)
{
    for (size_t i = 0; i < ORDER_N; i++) {
        if (strcmp(tools_order[i], name) == 0) {
            return i;
        }
    }
    return ORDER_N + reg_seq++;
}

static int
check_def(const struct tool_def *d, cJSON **schema_out, struct err *err)
{
    cJSON *s = NULL;
    const cJSON *t, *ap;

    if (d->name == NULL || d->name[0] == '\0' || d->description == NULL ||
        d->input_schema == NULL || d->handler == NULL) {
        return err_set(err, ERR_INTERNAL, "tool '%s' lacks a name, description, schema or handler",
                       d->name ? d->name : "");
    }
    s = cJSON_ParseWithLength(d->input_schema, strlen(d->input_schema));
    if (s == NULL || !cJSON_IsObject(s)) {
        cJSON_Delete(s);
        return err_set(err, ERR_INTERNAL, "tool '%s' has an input schema that is not a JSON object",
                       d->name);
    }
    t = cJSON_GetObjectItemCaseSensitive(s, "type");
    ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "object") != 0 || !cJSON_IsFalse(ap)) {
        cJSON_Delete(s);
        return err_set(err, ERR_INTERNAL,
                       "tool '%s' schema must be type 'object' with additionalProperties false",
                       d->name);
    }
    *schema_out = s;
    return 0;
}

int
tools_register(const struct tool_def *defs, size_t n, struct err *err)
{
    for (size_t i = 0; i < n; i++) {
        cJSON *schema = NULL;
        size_t at;

        if (reg_n == TOOLS_MAX) {
            return err_set(err, ERR_TOOBIG, "more than %d tools registered", TOOLS_MAX);
        }
        if (tools_find(defs[i].name) != NULL) {
            return err_set(err, ERR_EXISTS, "tool '%s' is registered twice", defs[i].name);
        }
        cJSON *output = NULL;
        if (check_def(&defs[i], &schema, err) < 0) {
            return -1;
        }
        if (defs[i].output_schema != NULL) {
            output = cJSON_ParseWithLength(defs[i].output_schema, strlen(defs[i].output_schema));
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(output, "type");
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "object") != 0) {
                cJSON_Delete(output);
                cJSON_Delete(schema);
                return err_set(err, ERR_INTERNAL,
                               "tool '%s' has an output schema that is not an object schema",
                               defs[i].name);
            }
        }
        /* Insertion sort by rank keeps the list in its fixed order. */
        size_t rank = order_rank(defs[i].name);
        for (at = reg_n; at > 0 && reg[at - 1].rank > rank; at--) {
            reg[at] = reg[at - 1];
        }
        reg[at].def = &defs[i];
        reg[at].schema = schema;
        reg[at].output = output;
        reg[at].rank = rank;
        reg_n++;
    }
    return 0;
}

int
tools_registry_init(struct err *err)
{
    if (reg_ready) {
        return 0;
    }
    if (tools_register(tools_config_defs, tools_config_count, err) < 0 ||
        tools_register(tools_session_defs, tools_session_count, err) < 0 ||
        tools_register(tools_files_defs, tools_files_count, err) < 0 ||
        tools_register(tools_extract_defs, tools_extract_count, err) < 0 ||
        tools_register(tools_history_defs, tools_history_count, err) < 0) {
        return -1;
    }
    if (tools_register(tools_host_defs, tools_host_count, err) < 0) {
        return -1;
    }
    if (tools_register(tools_bash_defs, tools_bash_count, err) < 0) {
        return -1;
    }
    if (tools_register(tools_fetch_defs, tools_fetch_count, err) < 0) {
        return -1;
    }
    if (tools_register(tools_snapshot_defs, tools_snapshot_count, err) < 0) {
        return -1;
    }
    if (tools_testing_register != NULL) {
        if (tools_testing_register(err) < 0) {
            return -1;
        }
        log_info("test-only tools registered");
    }
    reg_ready = 1;
    return 0;
}

void
tools_registry_reset(void)
{
    for (size_t i = 0; i < reg_n; i++) {
        cJSON_Delete(reg[i].schema);
        cJSON_Delete(reg[i].output);
    }
    memset(reg, 0, sizeof(reg));
    reg_n = 0;
    reg_seq = 0;
    reg_ready = 0;
}

const struct tool_def *
tools_find(const char *name)
{
    if (name == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < reg_n; i++) {
        if (strcmp(reg[i].def->name, name) == 0) {
            return reg[i].def;
        }
    }
    return NULL;
}

size_t
tools_count(void)
{
    return reg_n;
}

const struct tool_def *
tools_at(size_t i)
{
    return i < reg_n ? reg[i].def : NULL;
}

const cJSON *
tools_schema(const struct tool_def *def)
{
    for (size_t i = 0; i < reg_n; i++) {
        if (reg[i].def == def) {
            return reg[i].schema;
        }
    }
    return NULL;
}

static cJSON *
tool_json(const struct entry *e)
{
    cJSON *t = cJSON_CreateObject();
    cJSON *ann = NULL;
    cJSON *schema = NULL;

    if (t == NULL) {
        return NULL;
    }
    schema = cJSON_Duplicate(e->schema, 1);
    ann = cJSON_CreateObject();
    if (schema == NULL || ann == NULL) {
        cJSON_Delete(schema);
        cJSON_Delete(ann);
        cJSON_Delete(t);
        return NULL;
    }
    cJSON_AddStringToObject(t, "name", e->def->name);
    if (e->def->title != NULL) {
        cJSON_AddStringToObject(t, "title", e->def->title);
        cJSON_AddStringToObject(ann, "title", e->def->title);
    }
    cJSON_AddStringToObject(t, "description", e->def->description);
    cJSON_AddItemToObject(t, "inputSchema", schema);
    if (e->output != NULL) {
        /* Declared only by tools whose every result is an object, sent as
         * structuredContent too; clients check it against this schema. */
        cJSON *out = cJSON_Duplicate(e->output, 1);
        if (out == NULL || !cJSON_AddItemToObject(t, "outputSchema", out)) {
            cJSON_Delete(out);
            cJSON_Delete(ann);
            cJSON_Delete(t);
            return NULL;
        }
    }
    cJSON_AddBoolToObject(ann, "readOnlyHint", e->def->annotations.read_only);
    cJSON_AddBoolToObject(ann, "destructiveHint", e->def->annotations.destructive);
    cJSON_AddBoolToObject(ann, "idempotentHint", e->def->annotations.idempotent);
    cJSON_AddBoolToObject(ann, "openWorldHint", e->def->annotations.open_world);
    cJSON_AddItemToObject(t, "annotations", ann);
    return t;
}

cJSON *
tools_list_json(void)
{
    cJSON *arr = cJSON_CreateArray();

    if (arr == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < reg_n; i++) {
        cJSON *t = tool_json(&reg[i]);
        if (t == NULL || !cJSON_AddItemToArray(arr, t)) {
            cJSON_Delete(t);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}
