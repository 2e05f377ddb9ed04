/*
 * policy_toml.h - private to src/policy: a small C view of a parsed TOML document.
 *
 * toml++ is C++ (and this project is C), so policy_toml.cpp parses with it and
 * exposes the tree through opaque node handles. Handles are borrowed: valid until
 * ptoml_free() of their document. Positions are toml++'s: 1-based lines, 1-based
 * columns counted in code points, and a value's end is one past its last character.
 */
#ifndef DRUN_POLICY_TOML_H
#define DRUN_POLICY_TOML_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ptoml;      /* a parsed document */
struct ptoml_node; /* a value inside it */

enum ptoml_type {
    PTOML_NONE = 0,
    PTOML_TABLE,
    PTOML_ARRAY,
    PTOML_STRING,
    PTOML_INT,
    PTOML_FLOAT,
    PTOML_BOOL,
    PTOML_DATE,
    PTOML_TIME,
    PTOML_DATETIME
};

struct ptoml_pos {
    unsigned line;
    unsigned col;
};

/*
 * Parses `len` bytes of TOML. On a syntax error returns -1 with ERR_INVAL and a
 * message "cannot parse '<name>' at line L, column C: <what>". Caller frees *out
 * with ptoml_free().
 */
int ptoml_parse(const char *text, size_t len, const char *name, struct ptoml **out,
                struct err *err);
void ptoml_free(struct ptoml *doc);

/* The root table. */
const struct ptoml_node *ptoml_root(const struct ptoml *doc);

/* The node's type (PTOML_NONE for NULL). */
int ptoml_type(const struct ptoml_node *n);

/* "table", "array", "string", "integer", ... for messages. */
const char *ptoml_type_name(int type);

/* 1 for an inline table `{...}` or an array whose tables are inline; 0 otherwise. */
int ptoml_is_inline(const struct ptoml_node *n);

/* Number of entries of a table or elements of an array; 0 for other types. */
size_t ptoml_len(const struct ptoml_node *n);

/* The i-th element of an array, or NULL. */
const struct ptoml_node *ptoml_index(const struct ptoml_node *n, size_t i);

/* The value of `key` in a table, or NULL. */
const struct ptoml_node *ptoml_get(const struct ptoml_node *n, const char *key);

/*
 * Calls fn for each entry of a table in key order; stops at the first non-zero
 * return and returns it. `key` is borrowed for the duration of the call.
 */
int ptoml_each(const struct ptoml_node *n,
               int (*fn)(void *ctx, const char *key, const struct ptoml_node *val), void *ctx);

/* The bytes of a string node (may hold NULs; NUL-terminated) or NULL if not a string. */
const char *ptoml_string(const struct ptoml_node *n, size_t *len);

/* The value of an integer / boolean node (0 if the type differs). */
int64_t ptoml_int(const struct ptoml_node *n);
int ptoml_bool(const struct ptoml_node *n);

/* Where the node starts and where it ends (one past its last character). */
struct ptoml_pos ptoml_begin(const struct ptoml_node *n);
struct ptoml_pos ptoml_end(const struct ptoml_node *n);

#ifdef __cplusplus
}
#endif

#endif
