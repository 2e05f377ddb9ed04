/*
 * mcp_json.h - the strict RFC 8259 check of one incoming JSON-RPC line, before cJSON.
 *
 * cJSON is lenient: it accepts control characters and any bytes inside strings, decodes
 * an invalid escape such as \uqqqq to U+0000 (so "/tmp/A/victim\uqqqq.bak" would reach
 * a tool as "/tmp/A/victim"), accepts leading zeros, ignores what follows the first value
 * on a line, nests up to 1000 levels on the C stack, and keeps numbers as doubles (so a
 * large integer id would come back as another number). drun therefore checks every line
 * itself first, in one pass, and hands cJSON only text that is JSON by the RFC and that
 * drun can carry. The same pass records where the values the server echoes (the id, a
 * progress token, a cancelled request's id) start and end, so they go back to the client
 * as their exact original text, and where the tool arguments are.
 */
#ifndef DRUN_MCP_JSON_H
#define DRUN_MCP_JSON_H

#include <stddef.h>

/* The kinds of JSON value; an INTEGER is a number without a fraction or exponent. */
enum mcp_json_kind {
    MCP_JSON_NONE = 0,
    MCP_JSON_OBJECT,
    MCP_JSON_ARRAY,
    MCP_JSON_STRING,
    MCP_JSON_INTEGER,
    MCP_JSON_NUMBER,
    MCP_JSON_LITERAL, /* true, false or null */
};

/* The values whose place the check records (the first occurrence, as cJSON looks up). */
enum mcp_json_slot {
    MCP_SLOT_ID,         /* top-level "id" */
    MCP_SLOT_REQUEST_ID, /* params.requestId (notifications/cancelled) */
    MCP_SLOT_TOKEN,      /* params._meta.progressToken */
    MCP_SLOT_ARGUMENTS,  /* params.arguments (tools/call) */
    MCP_SLOT__COUNT
};

struct mcp_json_span {
    size_t start, len; /* the value's exact text is p[start .. start + len) */
    enum mcp_json_kind kind;
    int found;
};

struct mcp_json_scan {
    /* Not JSON (the check returned -1): where and why, or too_deep. */
    size_t bad_at;
    const char *why;
    int too_deep;
    /* JSON, but holding what drun cannot carry: \u0000 or a lone surrogate escape. */
    int uncarriable;
    size_t uncarriable_at;
    const char *uncarriable_why;
    struct mcp_json_span slot[MCP_SLOT__COUNT];
};

/*
 * Checks that p[0..n) is exactly one JSON value by RFC 8259 (optional whitespace around
 * it), in UTF-8 with no byte order mark, nested at most max_depth arrays and objects
 * deep. Returns 0 if it is (then sc->uncarriable says whether it holds \u0000 or a lone
 * surrogate, and sc->slot the places of the echoed values), or -1 with sc->bad_at and
 * sc->why (a lower-case phrase) or sc->too_deep set. Never allocates; recursion is
 * bounded by max_depth.
 */
int mcp_json_check(const char *p, size_t n, int max_depth, struct mcp_json_scan *sc);

/*
 * Rewrites, in place, every \u0000 escape and every escape of a lone surrogate in the
 * (checked, valid) JSON text p[0..n) as \ufffd, which has the same length: cJSON can
 * then parse a message that is to be refused, so the refusal can carry its id.
 */
void mcp_json_neutralize(char *p, size_t n);

/* Returns 1 if offset `at` lies inside the recorded span `outer`, else 0. */
int mcp_json_span_holds(const struct mcp_json_span *outer, size_t at);

#endif
