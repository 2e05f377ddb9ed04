/*
 * mcp_json.h - byte-level checks on one incoming JSON-RPC line, before and beside cJSON.
 *
 * cJSON accepts any bytes inside strings and nests up to 1000 levels deep on the C stack;
 * drun checks both itself first, so a hostile line cannot smuggle invalid UTF-8 into the
 * audit log or exhaust the stack. cJSON also keeps numbers as doubles, which would change
 * a large integer request id on the way back; mcp_json_raw_member() finds the id's exact
 * text so it can be echoed byte for byte.
 */
#ifndef DRUN_MCP_JSON_H
#define DRUN_MCP_JSON_H

#include <stddef.h>

/*
 * Returns 1 if p[0..n) is well-formed UTF-8 (no overlong forms, no surrogates, nothing
 * above U+10FFFF), else 0 with *bad_at (if non-NULL) the offset of the first bad byte.
 */
int mcp_utf8_valid(const char *p, size_t n, size_t *bad_at);

/*
 * Returns the deepest nesting of arrays and objects in the JSON text p[0..n), counting
 * only brackets outside strings, or stops and returns max + 1 as soon as it passes max.
 */
int mcp_json_depth(const char *p, size_t n, int max);

/*
 * Finds member `key` of the top-level object in the (already parsed, so well-formed)
 * JSON text p[0..n) and sets *start and *len to its value's exact text. Returns 0, or
 * -1 if the text is not an object or has no such member (the first one wins, as for
 * cJSON). Keys with escapes are compared after decoding.
 */
int mcp_json_raw_member(const char *p, size_t n, const char *key, const char **start, size_t *len);

/*
 * Returns 1 if a string in the JSON text p[0..n) holds the escape \u0000. cJSON would
 * decode it and cut the string there, so "/allowed/a\u0000/../x" would reach a tool as
 * "/allowed/a": a silent change of meaning that the caller must refuse instead.
 */
int mcp_json_has_nul(const char *p, size_t n);

#endif
