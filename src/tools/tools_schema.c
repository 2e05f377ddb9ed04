/*
 * tools_schema.c - checks tool arguments against the tool's input schema.
 *
 * Only the part of JSON Schema 2020-12 that drun's schemas use is understood (listed in
 * tools.h); a schema keyword outside it is ignored, so a schema must not rely on one for
 * safety. The check runs before any handler, so a handler can trust types, required
 * members and the absence of unknown members. Messages name the argument by its path
 * ("entries[2].path") and say what was expected, because the agent reads them and
 * retries.
 */
#include "tools/tools.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PATH_MAX_LEN 200

static const char *
json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v)) {
        return "a string";
    }
    if (cJSON_IsBool(v)) {
        return "a boolean";
    }
    if (cJSON_IsNumber(v)) {
        return "a number";
    }
    if (cJSON_IsArray(v)) {
        return "an array";
    }
    if (cJSON_IsObject(v)) {
        return "an object";
    }
    if (cJSON_IsNull(v)) {
        return "null";
    }
    return "an unknown value";
}

static int
is_integer(const cJSON *v)
{
    double d;

    if (!cJSON_IsNumber(v)) {
        return 0;
    }
    d = v->valuedouble;
    /* Beyond 2^53 a double no longer names one integer exactly. */
    return isfinite(d) && floor(d) == d && fabs(d) <= 9007199254740992.0;
}

static int
type_matches(const char *type, const cJSON *v)
{
    if (strcmp(type, "object") == 0) {
        return cJSON_IsObject(v);
    }
    if (strcmp(type, "string") == 0) {
        return cJSON_IsString(v);
    }
    if (strcmp(type, "integer") == 0) {
        return is_integer(v);
    }
    if (strcmp(type, "number") == 0) {
        return cJSON_IsNumber(v);
    }
    if (strcmp(type, "boolean") == 0) {
        return cJSON_IsBool(v);
    }
    if (strcmp(type, "array") == 0) {
        return cJSON_IsArray(v);
    }
    if (strcmp(type, "null") == 0) {
        return cJSON_IsNull(v);
    }
    return 0;
}

/* Counts UTF-8 code points (the input was validated as UTF-8 by the transport). */
static size_t
utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s != '\0'; s++) {
        n += ((unsigned char)*s & 0xc0) != 0x80;
    }
    return n;
}

static const char *
article(const char *type)
{
    return (type[0] == 'a' || type[0] == 'i' || type[0] == 'o') ? "an" : "a";
}

static void
subject(struct buf *msg, const char *path)
{
    if (path[0] == '\0') {
        buf_puts(msg, "arguments");
    } else {
        buf_printf(msg, "argument '%s'", path);
    }
}

static int check(const cJSON *schema, const cJSON *v, const char *path, struct buf *msg);

static int
check_object(const cJSON *schema, const cJSON *v, const char *path, struct buf *msg)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(schema, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
    const cJSON *r, *m;
    char sub[PATH_MAX_LEN];

    cJSON_ArrayForEach(r, req)
    {
        if (cJSON_IsString(r) && cJSON_GetObjectItemCaseSensitive(v, r->valuestring) == NULL) {
            if (path[0] == '\0') {
                buf_printf(msg, "missing required argument '%s'", r->valuestring);
            } else {
                buf_printf(msg, "missing required member '%s' in argument '%s'", r->valuestring,
                           path);
            }
            return -1;
        }
    }
    cJSON_ArrayForEach(m, v)
    {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, m->string);

        snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", m->string);
        if (ps == NULL) {
            if (cJSON_IsFalse(ap)) {
                const cJSON *p;
                int first = 1;

                buf_printf(msg, "unknown argument '%s'", sub);
                if (cJSON_GetArraySize(props) == 0) {
                    buf_puts(msg, "; this takes no arguments, send {}");
                } else {
                    buf_puts(msg, "; expected one of: ");
                    cJSON_ArrayForEach(p, props)
                    {
                        buf_printf(msg, "%s%s", first ? "" : ", ", p->string);
                        first = 0;
                    }
                }
                return -1;
            }
            continue;
        }
        if (check(ps, m, sub, msg) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
check(const cJSON *schema, const cJSON *v, const char *path, struct buf *msg)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    const cJSON *k;

    if (cJSON_IsString(type) && !type_matches(type->valuestring, v)) {
        subject(msg, path);
        buf_printf(msg, " must be %s %s, not %s", article(type->valuestring), type->valuestring,
                   cJSON_IsNumber(v) && strcmp(type->valuestring, "integer") == 0
                       ? "a fraction or an out-of-range number"
                       : json_type_name(v));
        return -1;
    }
    if (cJSON_IsArray(en)) {
        const cJSON *e;
        int found = 0, first = 1;

        cJSON_ArrayForEach(e, en)
        {
            found |= cJSON_Compare(e, v, 1);
        }
        if (!found) {
            subject(msg, path);
            buf_puts(msg, " must be one of: ");
            cJSON_ArrayForEach(e, en)
            {
                char *t = cJSON_PrintUnformatted(e);
                buf_printf(msg, "%s%s", first ? "" : ", ", t ? t : "?");
                cJSON_free(t);
                first = 0;
            }
            return -1;
        }
    }
    if (cJSON_IsNumber(v)) {
        if ((k = cJSON_GetObjectItemCaseSensitive(schema, "minimum")) != NULL &&
            cJSON_IsNumber(k) && v->valuedouble < k->valuedouble) {
            subject(msg, path);
            buf_printf(msg, " must be at least %.17g", k->valuedouble);
            return -1;
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(schema, "maximum")) != NULL &&
            cJSON_IsNumber(k) && v->valuedouble > k->valuedouble) {
            subject(msg, path);
            buf_printf(msg, " must be at most %.17g", k->valuedouble);
            return -1;
        }
    }
    if (cJSON_IsString(v)) {
        size_t n = utf8_chars(v->valuestring);
        if ((k = cJSON_GetObjectItemCaseSensitive(schema, "maxLength")) != NULL &&
            cJSON_IsNumber(k) && (double)n > k->valuedouble) {
            subject(msg, path);
            buf_printf(msg, " is %zu characters long; the limit is %.17g", n, k->valuedouble);
            return -1;
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(schema, "minLength")) != NULL &&
            cJSON_IsNumber(k) && (double)n < k->valuedouble) {
            subject(msg, path);
            buf_printf(msg, " must be at least %.17g characters long", k->valuedouble);
            return -1;
        }
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v), i = 0;
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
        const cJSON *e;
        char sub[PATH_MAX_LEN];

        if ((k = cJSON_GetObjectItemCaseSensitive(schema, "maxItems")) != NULL &&
            cJSON_IsNumber(k) && (double)n > k->valuedouble) {
            subject(msg, path);
            buf_printf(msg, " has %d items; the limit is %.17g", n, k->valuedouble);
            return -1;
        }
        if ((k = cJSON_GetObjectItemCaseSensitive(schema, "minItems")) != NULL &&
            cJSON_IsNumber(k) && (double)n < k->valuedouble) {
            subject(msg, path);
            buf_printf(msg, " must have at least %.17g items", k->valuedouble);
            return -1;
        }
        if (cJSON_IsObject(items)) {
            cJSON_ArrayForEach(e, v)
            {
                snprintf(sub, sizeof(sub), "%s[%d]", path, i++);
                if (check(items, e, sub, msg) < 0) {
                    return -1;
                }
            }
        }
    }
    if (cJSON_IsObject(v)) {
        return check_object(schema, v, path, msg);
    }
    return 0;
}

int
tools_schema_check(const cJSON *schema, const cJSON *value, struct buf *msg)
{
    return check(schema, value, "", msg);
}
