/*
 * userpath.h - paths an operator types: "~" expansion and a missing parent directory.
 *
 * An MCP client starts drun-mcp without a shell, so "~/.drun/drun.db" in a client's
 * JSON config (or in DRUN_DB, or in --config) reaches drun with the tilde intact; and a
 * fresh machine has no ~/.drun yet. Both made the README's own example fail with a bare
 * "No such file or directory".
 */
#ifndef DRUN_UTIL_USERPATH_H
#define DRUN_UTIL_USERPATH_H

#include "util/err.h"

/*
 * A copy of path with a leading "~" or "~/" replaced by $HOME (any other path is copied
 * as it is; "~user" is not expanded). Caller frees with mem_free. NULL and err filled
 * (ERR_INVAL) when the path uses "~" and HOME is unset or not absolute.
 */
char *userpath_expand(const char *path, struct err *err);

/*
 * Creates the missing directories above the file `path` (mkdir -p of its parent), each
 * with mode 0700. *created (may be NULL) gets 1 when a directory was made, and made
 * (may be NULL, size made_size) the top-most one made, for the caller to tell the user.
 * A parent that exists is left as it is. Returns 0 or -1 (ERR_IO naming the directory).
 */
int userpath_make_parent(const char *path, int *created, char *made, size_t made_size,
                         struct err *err);

#endif
