/*
 * mcp_json_check.c - one pass over an incoming line: RFC 8259 grammar, UTF-8, depth,
 * what drun cannot carry, and where the echoed values are. See mcp_json.h.
 *
 * A recursive descent over the bytes, depth-bounded by max_depth, that allocates
 * nothing. It follows the RFC's grammar and nothing more: whitespace is only space, tab,
 * CR and LF; a string holds no byte below 0x20 and only the nine escapes; a number has no
 * leading zero, no bare '.' or 'e', no '+' sign; the literals are lower-case; exactly one
 * value is on the line. Each of these is a door cJSON leaves open, and each one was seen
 * to change what a request meant (an invalid escape cutting a path short), to answer
 * with text no client can parse (an id of 01), or to drop a second message silently.
 *
 * The roles below follow the path from the top-level object to the four values the
 * server needs as exact text. Only the first member with a given key counts, as in
 * cJSON_GetObjectItemCaseSensitive, so the span found is the value cJSON hands over.
 */
#include "mcp/mcp_json.h"

#include <string.h>

#include "util/utf8.h"

#define NOT_A_VALUE                                                                                \
    "not a JSON value (strings need double quotes; the literals are true, false and null)"

enum role { ROLE_NONE, ROLE_TOP, ROLE_PARAMS, ROLE_META };

struct ck {
    const unsigned char *p;
    size_t n, i;
    int max_depth;
    int seen_params, seen_meta;
    struct mcp_json_scan *sc;
};

static int
fail(struct ck *c, const char *why)
{
    c->sc->bad_at = c->i;
    c->sc->why = why;
    return -1;
}

static void
uncarriable(struct ck *c, size_t at, const char *why)
{
    if (!c->sc->uncarriable) {
        c->sc->uncarriable = 1;
        c->sc->uncarriable_at = at;
        c->sc->uncarriable_why = why;
    }
}

static void
skip_ws(struct ck *c)
{
    while (c->i < c->n &&
           (c->p[c->i] == ' ' || c->p[c->i] == '\t' || c->p[c->i] == '\n' || c->p[c->i] == '\r')) {
        c->i++;
    }
}

static int
hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;

    for (int k = 0; k < 4; k++) {
        unsigned char h = p[k];
        v <<= 4;
        if (h >= '0' && h <= '9') {
            v |= h - '0';
        } else if (h >= 'a' && h <= 'f') {
            v |= h - 'a' + 10;
        } else if (h >= 'A' && h <= 'F') {
            v |= h - 'A' + 10;
        } else {
            return -1;
        }
    }
    *out = v;
    return 0;
}

/*
 * A string starting at p[i] == '"'. If key is non-NULL the decoded text (ASCII only;
 * anything else becomes 0xff, which no key drun looks for contains) is written there,
 * up to key_size - 1 bytes; *key_long says it did not fit.
 */
static int
check_string(struct ck *c, char *key, size_t key_size, int *key_long)
{
    size_t kl = 0;

    c->i++;
    for (;;) {
        unsigned ch;
        size_t at = c->i;

        if (c->i >= c->n) {
            return fail(c, "the line ends inside a string");
        }
        ch = c->p[c->i];
        if (ch == '"') {
            c->i++;
            break;
        }
        if (ch < 0x20) {
            return fail(c, ch == 0 ? "a raw NUL byte inside a string"
                                   : "a raw control character inside a string; escape it (\\n, "
                                     "\\t, \\u001f)");
        }
        if (ch == '\\') {
            unsigned char e;
            if (c->i + 1 >= c->n) {
                return fail(c, "the line ends inside an escape");
            }
            e = c->p[c->i + 1];
            if (e == 'u') {
                unsigned cp, lo;
                if (c->n - c->i < 6 || hex4(c->p + c->i + 2, &cp) < 0) {
                    return fail(c, "an invalid escape: \\u needs four hex digits");
                }
                c->i += 6;
                if (cp >= 0xd800 && cp <= 0xdbff && c->n - c->i >= 6 && c->p[c->i] == '\\' &&
                    c->p[c->i + 1] == 'u' && hex4(c->p + c->i + 2, &lo) == 0 && lo >= 0xdc00 &&
                    lo <= 0xdfff) {
                    c->i += 6; /* a surrogate pair: one code point past U+FFFF */
                    ch = 0xff;
                } else if (cp >= 0xd800 && cp <= 0xdfff) {
                    uncarriable(c, at, "an escaped lone surrogate (not a Unicode character)");
                    ch = 0xff;
                } else if (cp == 0) {
                    uncarriable(c, at, "the escape \\u0000 (NUL)");
                    ch = 0xff;
                } else {
                    ch = cp < 0x80 ? cp : 0xff;
                }
            } else {
                static const char simple[] = "\"\\/bfnrt";
                static const char value[] = "\"\\/\b\f\n\r\t";
                const char *s = e != 0 ? strchr(simple, e) : NULL;
                if (s == NULL) {
                    return fail(c, "an invalid escape; JSON has only \\\" \\\\ \\/ \\b \\f \\n "
                                   "\\r \\t and \\uXXXX");
                }
                ch = (unsigned char)value[s - simple];
                c->i += 2;
            }
        } else if (ch >= 0x80) {
            size_t len = utf8_seq(c->p + c->i, c->n - c->i);
            if (len == 0) {
                return fail(c, "invalid UTF-8");
            }
            c->i += len;
            ch = 0xff;
        } else {
            c->i++;
        }
        if (key != NULL) {
            if (kl + 1 < key_size) {
                key[kl++] = (char)ch;
            } else {
                *key_long = 1;
            }
        }
    }
    if (key != NULL) {
        key[kl] = '\0';
    }
    return 0;
}

static int
digits(struct ck *c)
{
    size_t from = c->i;

    while (c->i < c->n && c->p[c->i] >= '0' && c->p[c->i] <= '9') {
        c->i++;
    }
    return c->i > from ? 0 : -1;
}

static int
check_number(struct ck *c, enum mcp_json_kind *kind)
{
    *kind = MCP_JSON_INTEGER;
    if (c->p[c->i] == '-') {
        c->i++;
    }
    if (c->i < c->n && c->p[c->i] == '0') {
        c->i++;
        if (c->i < c->n && c->p[c->i] >= '0' && c->p[c->i] <= '9') {
            return fail(c, "a number with a leading zero");
        }
    } else if (digits(c) < 0) {
        return fail(c, "a number needs a digit here");
    }
    if (c->i < c->n && c->p[c->i] == '.') {
        c->i++;
        *kind = MCP_JSON_NUMBER;
        if (digits(c) < 0) {
            return fail(c, "a number needs a digit after '.'");
        }
    }
    if (c->i < c->n && (c->p[c->i] == 'e' || c->p[c->i] == 'E')) {
        c->i++;
        *kind = MCP_JSON_NUMBER;
        if (c->i < c->n && (c->p[c->i] == '+' || c->p[c->i] == '-')) {
            c->i++;
        }
        if (digits(c) < 0) {
            return fail(c, "a number needs a digit in its exponent");
        }
    }
    return 0;
}

static int check_value(struct ck *c, int depth, enum role role, int slot);

/* The role and slot of member `key` of an object with role `role`. */
static void
member_role(struct ck *c, enum role role, const char *key, enum role *child, int *slot)
{
    *child = ROLE_NONE;
    *slot = -1;
    if (role == ROLE_TOP) {
        if (strcmp(key, "id") == 0) {
            *slot = MCP_SLOT_ID;
        } else if (strcmp(key, "params") == 0 && !c->seen_params) {
            c->seen_params = 1;
            *child = ROLE_PARAMS;
        }
    } else if (role == ROLE_PARAMS) {
        if (strcmp(key, "arguments") == 0) {
            *slot = MCP_SLOT_ARGUMENTS;
        } else if (strcmp(key, "requestId") == 0) {
            *slot = MCP_SLOT_REQUEST_ID;
        } else if (strcmp(key, "_meta") == 0 && !c->seen_meta) {
            c->seen_meta = 1;
            *child = ROLE_META;
        }
    } else if (role == ROLE_META) {
        if (strcmp(key, "progressToken") == 0) {
            *slot = MCP_SLOT_TOKEN;
        }
    }
}

static int
check_object(struct ck *c, int depth, enum role role)
{
    c->i++;
    skip_ws(c);
    if (c->i < c->n && c->p[c->i] == '}') {
        c->i++;
        return 0;
    }
    for (;;) {
        char key[16];
        int key_long = 0, slot;
        enum role child;

        if (c->i >= c->n || c->p[c->i] != '"') {
            return fail(c, "an object member needs a key in double quotes");
        }
        if (check_string(c, key, sizeof(key), &key_long) < 0) {
            return -1;
        }
        skip_ws(c);
        if (c->i >= c->n || c->p[c->i] != ':') {
            return fail(c, "expected ':' after an object key");
        }
        c->i++;
        skip_ws(c);
        child = ROLE_NONE;
        slot = -1;
        if (!key_long && role != ROLE_NONE) {
            member_role(c, role, key, &child, &slot);
        }
        if (check_value(c, depth, child, slot) < 0) {
            return -1;
        }
        skip_ws(c);
        if (c->i < c->n && c->p[c->i] == ',') {
            c->i++;
            skip_ws(c);
            continue;
        }
        if (c->i < c->n && c->p[c->i] == '}') {
            c->i++;
            return 0;
        }
        return fail(c, "expected ',' or '}' in an object");
    }
}

static int
check_array(struct ck *c, int depth)
{
    c->i++;
    skip_ws(c);
    if (c->i < c->n && c->p[c->i] == ']') {
        c->i++;
        return 0;
    }
    for (;;) {
        if (check_value(c, depth, ROLE_NONE, -1) < 0) {
            return -1;
        }
        skip_ws(c);
        if (c->i < c->n && c->p[c->i] == ',') {
            c->i++;
            skip_ws(c);
            continue;
        }
        if (c->i < c->n && c->p[c->i] == ']') {
            c->i++;
            return 0;
        }
        return fail(c, "expected ',' or ']' in an array");
    }
}

static int
check_literal(struct ck *c, const char *word)
{
    size_t len = strlen(word);

    if (c->n - c->i < len || memcmp(c->p + c->i, word, len) != 0) {
        return fail(c, NOT_A_VALUE);
    }
    c->i += len;
    return 0;
}

/* One value at p[i] (whitespace already skipped); depth counts the enclosing containers. */
static int
check_value(struct ck *c, int depth, enum role role, int slot)
{
    size_t start = c->i;
    enum mcp_json_kind kind = MCP_JSON_NONE;
    int rc;

    if (c->i >= c->n) {
        return fail(c, "the line ends where a value should be");
    }
    switch (c->p[c->i]) {
    case '{':
    case '[':
        if (depth + 1 > c->max_depth) {
            c->sc->too_deep = 1;
            return fail(c, "arrays and objects nested too deeply");
        }
        kind = c->p[c->i] == '{' ? MCP_JSON_OBJECT : MCP_JSON_ARRAY;
        rc = kind == MCP_JSON_OBJECT ? check_object(c, depth + 1, role) : check_array(c, depth + 1);
        break;
    case '"':
        kind = MCP_JSON_STRING;
        rc = check_string(c, NULL, 0, NULL);
        break;
    case 't':
        kind = MCP_JSON_LITERAL;
        rc = check_literal(c, "true");
        break;
    case 'f':
        kind = MCP_JSON_LITERAL;
        rc = check_literal(c, "false");
        break;
    case 'n':
        kind = MCP_JSON_LITERAL;
        rc = check_literal(c, "null");
        break;
    default:
        if (c->p[c->i] == '-' || (c->p[c->i] >= '0' && c->p[c->i] <= '9')) {
            rc = check_number(c, &kind);
        } else {
            rc = fail(c, NOT_A_VALUE);
        }
        break;
    }
    if (rc == 0 && slot >= 0 && !c->sc->slot[slot].found) {
        c->sc->slot[slot].found = 1;
        c->sc->slot[slot].start = start;
        c->sc->slot[slot].len = c->i - start;
        c->sc->slot[slot].kind = kind;
    }
    return rc;
}

int
mcp_json_check(const char *p, size_t n, int max_depth, struct mcp_json_scan *sc)
{
    struct ck c;

    memset(sc, 0, sizeof(*sc));
    memset(&c, 0, sizeof(c));
    c.p = (const unsigned char *)p;
    c.n = n;
    c.max_depth = max_depth;
    c.sc = sc;
    if (n >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) {
        return fail(&c, "a byte order mark (U+FEFF) before the JSON; send UTF-8 without one");
    }
    skip_ws(&c);
    if (check_value(&c, 0, ROLE_TOP, -1) < 0) {
        return -1;
    }
    skip_ws(&c);
    if (c.i < n) {
        return fail(&c, "text after the JSON value; send exactly one message per line");
    }
    return 0;
}

void
mcp_json_neutralize(char *p, size_t n)
{
    int in_str = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned cp, lo;

        if (!in_str) {
            in_str = p[i] == '"';
            continue;
        }
        if (p[i] == '"') {
            in_str = 0;
            continue;
        }
        if (p[i] != '\\') {
            continue;
        }
        if (i + 1 >= n || p[i + 1] != 'u' || n - i < 6 ||
            hex4((unsigned char *)p + i + 2, &cp) < 0) {
            i++; /* a one-character escape, such as \" which does not end the string */
            continue;
        }
        if (cp >= 0xd800 && cp <= 0xdbff && n - i >= 12 && p[i + 6] == '\\' && p[i + 7] == 'u' &&
            hex4((unsigned char *)p + i + 8, &lo) == 0 && lo >= 0xdc00 && lo <= 0xdfff) {
            i += 11; /* a valid pair */
            continue;
        }
        if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff)) {
            memcpy(p + i + 2, "fffd", 4);
        }
        i += 5;
    }
}

int
mcp_json_span_holds(const struct mcp_json_span *outer, size_t at)
{
    return outer->found && at >= outer->start && at < outer->start + outer->len;
}
