/*
 * policy_edit.c - `drun-mcp config ...`: edit an allowlist in config.toml in place.
 *
 * The operator's file is theirs: comments, blank lines, key order and the layout of
 * every other value must survive an edit byte for byte. So we never re-serialize the
 * document. toml++ tells us where the key's array starts and ends (line and column),
 * and we replace exactly that span with the new array, keeping its one-line or
 * multi-line shape (comments inside that one array are the only thing lost). A key
 * that is absent is added as a new line before the first [table] header, so it stays
 * a root key. The result is re-parsed to prove it says what we meant before it is
 * written, atomically (temp file in the same directory, fsync, rename) with the
 * original file's permissions, so a crash or a concurrent daemon reload never sees
 * half a file.
 */
#include "policy/policy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/policy_int.h"
#include "policy/policy_toml.h"
#include "util/mem.h"

static const char config_template[] =
    "# drun configuration. Every key is optional: a commented line shows the default.\n"
    "# Re-read on the next tool call after it changes; see docs/configuration.md.\n"
    "\n"
    "# Host directories agents may mount from, export to and delete under\n"
    "# (drun-mcp config add-path DIR). Empty: session_mount may read any path, but\n"
    "# session_export and delete_from_host refuse everything.\n"
    "mount_allowlist = []\n"
    "\n"
    "# Hosts session_fetch may reach (drun-mcp config add-domain HOST).\n"
    "# \"*.example.com\" admits subdomains only; \"*\" admits every host; [] admits none.\n"
    "domain_allowlist = [\"cdn.jsdelivr.net\", \"files.pythonhosted.org\", \"pypi.org\"]\n"
    "\n"
    "# db_path = \"/home/me/.drun/drun.db\"\n"
    "# runtime_dir = \"/run/user/1000/drun\"\n"
    "# sqlite_synchronous = \"full\"        # or \"normal\"\n"
    "# snapshots_dir = \"~/.drun/snapshots\"\n"
    "# snapshot_on_close = false\n"
    "# export_vcs_hooks = false\n"
    "# env_allowlist = []\n"
    "# mount_overlay_paths = [\"node_modules\", \".venv\", \"venv\", \"target\", "
    "\"__pycache__\", \".git\"]\n"
    "# mount_git_copy_max_mb = 64\n"
    "# bash_timeout_ms = 30000\n"
    "# bash_command_denylist = []\n"
    "# bash_command_allowlist = []      # empty: every command is allowed\n"
    "# max_output_bytes = 16777216      # per stream\n"
    "# sandbox_memory_mb = 2048\n"
    "# sandbox_cpu_secs = 600\n"
    "# sandbox_file_size_mb = 1024\n"
    "# sandbox_max_processes = 512\n"
    "# sandbox_tmp_size_mb = 512\n"
    "# sandbox_uid = 65534              # a root daemon runs commands as this host user\n"
    "# sandbox_gid = 65534\n"
    "# package_install_enabled = false\n"
    "# package_install_timeout_ms = 180000\n"
    "# max_workspace_mb = 512\n"
    "# max_sessions = 50\n"
    "# max_checkpoints = 200\n"
    "# session_idle_timeout_secs = 3600\n"
    "# fetch_timeout_ms = 60000\n"
    "# connect_timeout_ms = 30000\n"
    "# fetch_max_bytes = 67108864\n"
    "# fetch_allow_private = false\n"
    "# fetch_allow_cidrs = []\n"
    "# fetch_resolve = []               # \"host:port:address\"\n"
    "#\n"
    "# [[fetch_credentials]]            # send a header from the daemon's environment\n"
    "# domain = \"api.example.com\"\n"
    "# header = \"Authorization\"\n"
    "# env = \"EXAMPLE_TOKEN\"\n";

/* Byte offset of (line, col) in text; cols count code points. -1 if out of range. */
static long
offset_of(const char *text, size_t len, struct ptoml_pos pos)
{
    size_t i = 0;
    unsigned line = 1, col = 1;

    if (pos.line == 0 || pos.col == 0) {
        return -1;
    }
    while (line < pos.line) {
        const char *nl = memchr(text + i, '\n', len - i);
        if (nl == NULL) {
            return -1;
        }
        i = (size_t)(nl - text) + 1;
        line++;
    }
    while (col < pos.col) {
        if (i >= len || text[i] == '\n') {
            return col + 1 == pos.col || i >= len ? (long)i : -1;
        }
        i++;
        while (i < len && ((unsigned char)text[i] & 0xc0) == 0x80) {
            i++; /* a continuation byte: same code point */
        }
        col++;
    }
    return (long)i;
}

/* Appends s as a TOML basic string. */
static void
put_toml_string(struct buf *b, const char *s)
{
    buf_putc(b, '"');
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf_putc(b, '\\');
            buf_putc(b, c);
        } else if (c < 0x20 || c == 0x7f) {
            buf_printf(b, "\\u%04x", c);
        } else {
            buf_putc(b, c);
        }
    }
    buf_putc(b, '"');
}

static void
put_array(struct buf *b, const struct policy_strlist *l, int multiline)
{
    buf_putc(b, '[');
    for (size_t i = 0; i < l->n; i++) {
        if (multiline) {
            buf_puts(b, "\n    ");
        } else if (i > 0) {
            buf_puts(b, ", ");
        }
        put_toml_string(b, l->v[i]);
        if (multiline) {
            buf_putc(b, ',');
        }
    }
    if (multiline && l->n > 0) {
        buf_putc(b, '\n');
    }
    buf_putc(b, ']');
}

/* The first line of a [table] or [[array]] header at the root, or 0 if none. */
struct header_scan {
    unsigned first;
};

static int
scan_header(void *ctx, const char *key, const struct ptoml_node *v)
{
    struct header_scan *h = ctx;
    int t = ptoml_type(v);
    struct ptoml_pos at = {0, 0};

    (void)key;
    if (t == PTOML_TABLE && !ptoml_is_inline(v)) {
        at = ptoml_begin(v);
    } else if (t == PTOML_ARRAY && !ptoml_is_inline(v) && ptoml_len(v) > 0) {
        at = ptoml_begin(ptoml_index(v, 0));
    }
    if (at.line > 0 && (h->first == 0 || at.line < h->first)) {
        h->first = at.line;
    }
    return 0;
}

/* Reads the strings of root array `key` into l. 0 (absent is fine: *node = NULL) or -1. */
static int
read_list(const struct ptoml *doc, const char *path, const char *key,
          const struct ptoml_node **node, struct policy_strlist *l, struct err *err)
{
    const struct ptoml_node *v = ptoml_get(ptoml_root(doc), key);

    *node = v;
    if (v == NULL) {
        return 0;
    }
    if (ptoml_type(v) != PTOML_ARRAY) {
        return err_set(err, ERR_INVAL, "'%s' in '%s' is %s, not an array; fix it by hand", key,
                       path, ptoml_type_name(ptoml_type(v)));
    }
    for (size_t i = 0; i < ptoml_len(v); i++) {
        const char *s = ptoml_string(ptoml_index(v, i), NULL);
        if (s == NULL) {
            return err_set(err, ERR_INVAL, "'%s' in '%s' holds a non-string; fix it by hand", key,
                           path);
        }
        if (policy_strlist_push(l, s) < 0) {
            return err_set(err, ERR_NOMEM, "out of memory");
        }
    }
    return 0;
}

int
policy_write_atomic(const char *path, const char *text, size_t len, mode_t mode, struct err *err)
{
    struct buf tmp;
    int fd = -1, dirfd = -1, rc = -1;
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    size_t dn = slash && slash != path ? (size_t)(slash - path) : 1;

    if (dn >= sizeof(dir)) {
        return err_set(err, ERR_INVAL, "config path '%s' is too long", path);
    }
    memcpy(dir, path, dn);
    dir[dn] = '\0';
    buf_init(&tmp, PATH_MAX);
    buf_printf(&tmp, "%s.drun-tmp-%ld", path, (long)getpid());
    if (buf_failed(&tmp)) {
        buf_release(&tmp);
        return err_set(err, ERR_INVAL, "config path '%s' is too long", path);
    }
    fd = open(buf_cstr(&tmp), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        err_set(err, ERR_IO, "cannot create '%s': %s", buf_cstr(&tmp), strerror(errno));
        goto out;
    }
    for (size_t off = 0; off < len;) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            err_set(err, ERR_IO, "cannot write '%s': %s", buf_cstr(&tmp), strerror(errno));
            goto out;
        }
        off += (size_t)n;
    }
    if (fchmod(fd, mode & 07777) < 0 || fsync(fd) < 0 || close(fd) < 0) {
        fd = -1;
        err_set(err, ERR_IO, "cannot finish '%s': %s", buf_cstr(&tmp), strerror(errno));
        goto out;
    }
    fd = -1;
    if (rename(buf_cstr(&tmp), path) < 0) {
        err_set(err, ERR_IO, "cannot replace '%s': %s", path, strerror(errno));
        goto out;
    }
    dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd >= 0) {
        fsync(dirfd); /* best effort: the rename is already visible */
        close(dirfd);
    }
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
    }
    if (rc < 0) {
        unlink(buf_cstr(&tmp));
    }
    buf_release(&tmp);
    return rc;
}

/* Makes the directory that will hold a new config (one level, 0700). */
static int
make_parent(const char *path, struct err *err)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;

    if (n == 0 || n >= sizeof(dir)) {
        return 0;
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        return err_set(err, ERR_IO, "cannot make '%s' for the config: %s", dir, strerror(errno));
    }
    return 0;
}

int
policy_edit_list(const char *path, const char *key, const char *value, int add, struct buf *msg,
                 struct err *err)
{
    struct buf text, out;
    struct ptoml *doc = NULL, *check = NULL;
    const struct ptoml_node *node = NULL;
    struct policy_strlist list = {NULL, 0}, fresh = {NULL, 0}, after = {NULL, 0};
    struct policy *pol = NULL;
    struct err perr;
    struct stat sb;
    mode_t mode = 0644;
    int created = 0, found = 0, rc = -1;

    buf_init(&text, POLICY_FILE_MAX);
    buf_init(&out, POLICY_FILE_MAX);
    if (policy_read_file(path, POLICY_FILE_MAX, &text, err) < 0) {
        if (err->code != ERR_NOTFOUND) {
            goto done;
        }
        err_clear(err);
        created = 1;
        buf_reset(&text);
        buf_puts(&text, config_template);
    } else if (stat(path, &sb) == 0) {
        mode = sb.st_mode & 07777;
    }
    if (ptoml_parse(buf_cstr(&text), text.len, path, &doc, err) < 0) {
        err_wrap(err, "cannot edit '%s'; fix the file first", path);
        goto done;
    }
    if (read_list(doc, path, key, &node, &list, err) < 0) {
        goto done;
    }
    for (size_t i = 0; i < list.n; i++) {
        if (strcmp(list.v[i], value) == 0) {
            found = 1;
        } else if (policy_strlist_push(&fresh, list.v[i]) < 0) {
            err_set(err, ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    if (add == found && !(created && add)) {
        buf_printf(msg,
                   add ? "'%s' is already in %s; nothing to do\n"
                       : "'%s' is not in %s; nothing to do\n",
                   value, key);
        rc = 0;
        goto done;
    }
    if (add) {
        /* Keep the existing order; the new entry goes last. */
        policy_strlist_clear(&fresh);
        for (size_t i = 0; i < list.n; i++) {
            if (policy_strlist_push(&fresh, list.v[i]) < 0) {
                err_set(err, ERR_NOMEM, "out of memory");
                goto done;
            }
        }
        if (!found && policy_strlist_push(&fresh, value) < 0) {
            err_set(err, ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    if (node != NULL) {
        long b = offset_of(buf_cstr(&text), text.len, ptoml_begin(node));
        long e = offset_of(buf_cstr(&text), text.len, ptoml_end(node));
        const char *t = buf_cstr(&text);

        if (b < 0 || e <= b || t[b] != '[' || t[e - 1] != ']') {
            err_set(err, ERR_INTERNAL, "cannot locate the array '%s' in '%s'", key, path);
            goto done;
        }
        buf_append(&out, t, (size_t)b);
        put_array(&out, &fresh, memchr(t + b, '\n', (size_t)(e - b)) != NULL);
        buf_append(&out, t + e, text.len - (size_t)e);
    } else {
        struct header_scan hs = {0};
        struct ptoml_pos at;
        long off;

        ptoml_each(ptoml_root(doc), scan_header, &hs);
        at.line = hs.first;
        at.col = 1;
        off = hs.first ? offset_of(buf_cstr(&text), text.len, at) : (long)text.len;
        if (off < 0) {
            off = (long)text.len;
        }
        buf_append(&out, buf_cstr(&text), (size_t)off);
        if (off > 0 && buf_cstr(&text)[off - 1] != '\n') {
            buf_putc(&out, '\n');
        }
        buf_printf(&out, "%s = ", key);
        put_array(&out, &fresh, 0);
        buf_puts(&out, hs.first ? "\n\n" : "\n");
        buf_append(&out, buf_cstr(&text) + off, text.len - (size_t)off);
    }
    if (buf_failed(&out)) {
        buf_err(&out, path, err);
        goto done;
    }
    /* Prove the new text says exactly what we meant before writing it. */
    if (ptoml_parse(buf_cstr(&out), out.len, path, &check, err) < 0 ||
        read_list(check, path, key, &node, &after, err) < 0) {
        err_wrap(err, "internal error: the edited config would not parse; '%s' is unchanged", path);
        err->code = ERR_INTERNAL;
        goto done;
    }
    if (after.n != fresh.n) {
        err_set(err, ERR_INTERNAL, "internal error: the edit of '%s' did not apply", path);
        goto done;
    }
    for (size_t i = 0; i < after.n; i++) {
        if (strcmp(after.v[i], fresh.v[i]) != 0) {
            err_set(err, ERR_INTERNAL, "internal error: the edit of '%s' did not apply", path);
            goto done;
        }
    }
    if (created && make_parent(path, err) < 0) {
        goto done;
    }
    if (policy_write_atomic(path, buf_cstr(&out), out.len, mode, err) < 0) {
        goto done;
    }
    if (created) {
        buf_printf(msg, "created '%s' with commented defaults\n", path);
    }
    if (add && found) {
        buf_printf(msg, "'%s' is already in %s\n", value, key);
    } else {
        buf_printf(msg, add ? "added '%s' to %s in '%s'\n" : "removed '%s' from %s in '%s'\n",
                   value, key, path);
    }
    if (policy_parse(buf_cstr(&out), out.len, path, &pol, &perr) < 0) {
        buf_printf(msg,
                   "note: the config still has an error, so drun keeps its last good "
                   "policy: %s\n",
                   perr.msg);
    }
    rc = 0;
done:
    policy_unref(pol);
    policy_strlist_clear(&list);
    policy_strlist_clear(&fresh);
    policy_strlist_clear(&after);
    ptoml_free(doc);
    ptoml_free(check);
    buf_release(&text);
    buf_release(&out);
    return rc;
}

/* ---- the command line ---- */

static const char usage[] =
    "usage: drun-mcp config add-path DIR | remove-path DIR | add-domain HOST | "
    "remove-domain HOST | list [--config PATH]";

static void
print_list(FILE *out, const char *key, const struct policy_strlist *l, const char *empty)
{
    fprintf(out, "%s:\n", key);
    if (l->n == 0) {
        fprintf(out, "  (empty: %s)\n", empty);
    }
    for (size_t i = 0; i < l->n; i++) {
        fprintf(out, "  %s\n", l->v[i]);
    }
}

static int
config_list(const char *path, FILE *out, struct err *err)
{
    struct policy *p = NULL;

    if (policy_load_file(path, &p, err) < 0) {
        if (err->code != ERR_NOTFOUND) {
            return -1;
        }
        err_clear(err);
        fprintf(out, "config: '%s' does not exist; built-in defaults apply\n", path);
        p = policy_defaults();
        if (p == NULL) {
            return err_set(err, ERR_NOMEM, "out of memory");
        }
    } else {
        fprintf(out, "config: '%s'\n", path);
    }
    print_list(out, "mount_allowlist", &p->mount_allowlist,
               "session_mount may read any path; session_export and delete_from_host are "
               "refused");
    print_list(out, "domain_allowlist", &p->domain_allowlist, "session_fetch may reach no host");
    for (size_t i = 0; i < p->warnings.n; i++) {
        fprintf(out, "warning: %s\n", p->warnings.v[i]);
    }
    policy_unref(p);
    return 0;
}

int
policy_config_cli(int argc, char **argv, const char *config_cli, FILE *out, struct err *err)
{
    const char *cmd = argc > 0 ? argv[0] : NULL;
    const char *arg = NULL;
    const char *cfg = config_cli;
    char *path = NULL;
    char value[PATH_MAX];
    struct buf msg;
    int explicit_path, rc = -1;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) {
                return err_set(err, ERR_INVAL, "%s", usage);
            }
            cfg = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            cfg = argv[i] + 9;
        } else if (arg == NULL && (argv[i][0] != '-' || argv[i][1] == '\0')) {
            arg = argv[i];
        } else {
            return err_set(err, ERR_INVAL, "unexpected argument '%s'; %s", argv[i], usage);
        }
    }
    if (cmd == NULL) {
        return err_set(err, ERR_INVAL, "%s", usage);
    }
    if (strcmp(cmd, "list") == 0) {
        if (arg != NULL) {
            return err_set(err, ERR_INVAL, "unexpected argument '%s'; %s", arg, usage);
        }
    } else if (strcmp(cmd, "add-path") != 0 && strcmp(cmd, "remove-path") != 0 &&
               strcmp(cmd, "add-domain") != 0 && strcmp(cmd, "remove-domain") != 0) {
        return err_set(err, ERR_INVAL, "unknown config command '%s'; %s", cmd, usage);
    } else if (arg == NULL || arg[0] == '\0') {
        return err_set(err, ERR_INVAL, "'%s' needs an argument; %s", cmd, usage);
    }
    if (policy_config_path(cfg, &path, &explicit_path, err) < 0) {
        return -1;
    }
    if (strcmp(cmd, "list") == 0) {
        rc = config_list(path, out, err);
        mem_free(path);
        return rc;
    }
    buf_init(&msg, 8192);
    if (strcmp(cmd, "add-path") == 0 || strcmp(cmd, "remove-path") == 0) {
        char *real = realpath(arg, NULL);
        if (real == NULL && strcmp(cmd, "add-path") == 0) {
            err_set(err, errno == ENOENT ? ERR_NOTFOUND : ERR_IO,
                    "cannot add '%s': %s; name an existing directory", arg, strerror(errno));
            goto out;
        }
        if (real != NULL) {
            int n = snprintf(value, sizeof(value), "%s", real);
            free(real); /* realpath allocates with malloc */
            if (n < 0 || (size_t)n >= sizeof(value)) {
                err_set(err, ERR_INVAL, "path '%s' is too long", arg);
                goto out;
            }
        } else if (arg[0] != '/' || policy_path_clean(arg, value, sizeof(value), err) < 0) {
            /* remove-path of a path that no longer exists: compare its clean form. */
            err_set(err, ERR_INVAL, "cannot remove '%s': name it by its absolute path", arg);
            goto out;
        }
        for (const char *c = value; *c != '\0'; c++) {
            if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                err_set(err, ERR_INVAL, "path '%s' contains a control character; rename it", arg);
                goto out;
            }
        }
        if (strcmp(value, "/") == 0 && strcmp(cmd, "add-path") == 0) {
            err_set(err, ERR_DENIED,
                    "refusing to add '/': that would let agents write anywhere on the host");
            goto out;
        }
        rc = policy_edit_list(path, "mount_allowlist", value, cmd[0] == 'a', &msg, err);
    } else {
        if (policy_domain_clean(arg, value, 256, err) < 0) {
            err_wrap(err, "domain '%s'", arg);
            goto out;
        }
        rc = policy_edit_list(path, "domain_allowlist", value, cmd[0] == 'a', &msg, err);
    }
    if (rc == 0) {
        fputs(buf_cstr(&msg), out);
    }
out:
    buf_release(&msg);
    mem_free(path);
    return rc;
}

/* ---- MCP client registration in a TOML file ---------------------------------------- */

/* 1 if the node is a string array equal to args. */
static int
same_args(const struct ptoml_node *n, const char *const *args, size_t n_args)
{
    if (ptoml_type(n) != PTOML_ARRAY || ptoml_len(n) != n_args) {
        return 0;
    }
    for (size_t i = 0; i < n_args; i++) {
        const char *s = ptoml_string(ptoml_index(n, i), NULL);
        if (s == NULL || strcmp(s, args[i]) != 0) {
            return 0;
        }
    }
    return 1;
}

static void
put_args(struct buf *b, const char *const *args, size_t n_args)
{
    buf_putc(b, '[');
    for (size_t i = 0; i < n_args; i++) {
        if (i > 0) {
            buf_puts(b, ", ");
        }
        put_toml_string(b, args[i]);
    }
    buf_putc(b, ']');
}

/* The byte span [*from, *to) of node n in text, or -1. */
static int
node_span(const char *text, size_t len, const struct ptoml_node *n, long *from, long *to)
{
    *from = offset_of(text, len, ptoml_begin(n));
    *to = offset_of(text, len, ptoml_end(n));
    return *from < 0 || *to < *from ? -1 : 0;
}

/* The server table in doc, or NULL; -1 for a shape we do not edit. */
static int
find_server(const struct ptoml *doc, const char *shown, const char *table, const char *name,
            const struct ptoml_node **out, struct err *err)
{
    const struct ptoml_node *t = ptoml_get(ptoml_root(doc), table);
    const struct ptoml_node *s;

    *out = NULL;
    if (t == NULL) {
        return 0;
    }
    if (ptoml_type(t) != PTOML_TABLE || ptoml_is_inline(t)) {
        return err_set(
            err, ERR_INVAL, "'%s': '%s' at line %u is %s, not a [%s.NAME] table; edit it by hand",
            shown, table, ptoml_begin(t).line,
            ptoml_type(t) == PTOML_TABLE ? "an inline table" : ptoml_type_name(ptoml_type(t)),
            table);
    }
    s = ptoml_get(t, name);
    if (s != NULL && (ptoml_type(s) != PTOML_TABLE || ptoml_is_inline(s))) {
        return err_set(
            err, ERR_INVAL, "'%s': '%s.%s' at line %u is %s, not a [%s.%s] table; edit it by hand",
            shown, table, name, ptoml_begin(s).line,
            ptoml_type(s) == PTOML_TABLE ? "an inline table" : ptoml_type_name(ptoml_type(s)),
            table, name);
    }
    *out = s;
    return 0;
}

int
policy_toml_set_server(const char *text, size_t len, const char *shown, const char *table,
                       const char *name, const char *command, const char *const *args,
                       size_t n_args, struct buf *out, int *changed, struct err *err)
{
    struct ptoml *doc = NULL, *check = NULL;
    const struct ptoml_node *srv = NULL, *cmd = NULL, *arr = NULL;
    int rc = -1;

    *changed = 0;
    buf_reset(out);
    if (ptoml_parse(text, len, shown, &doc, err) < 0 ||
        find_server(doc, shown, table, name, &srv, err) < 0) {
        goto out;
    }
    if (srv != NULL) {
        const char *c;
        long c_from, c_to, a_from, a_to;

        cmd = ptoml_get(srv, "command");
        arr = ptoml_get(srv, "args");
        c = ptoml_string(cmd, NULL);
        if (c != NULL && strcmp(c, command) == 0 && same_args(arr, args, n_args)) {
            buf_append(out, text, len);
            rc = buf_failed(out) ? err_set(err, ERR_NOMEM, "out of memory") : 0;
            goto out;
        }
        if (cmd == NULL || arr == NULL || ptoml_type(cmd) != PTOML_STRING ||
            ptoml_type(arr) != PTOML_ARRAY || node_span(text, len, cmd, &c_from, &c_to) < 0 ||
            node_span(text, len, arr, &a_from, &a_to) < 0) {
            err_set(err, ERR_INVAL,
                    "'%s': [%s.%s] at line %u has no string 'command' and array 'args' to "
                    "update; edit it by hand",
                    shown, table, name, ptoml_begin(srv).line);
            goto out;
        }
        /* Replace the two value spans, in file order. */
        {
            int cmd_first = c_from < a_from;
            long f1 = cmd_first ? c_from : a_from, t1 = cmd_first ? c_to : a_to;
            long f2 = cmd_first ? a_from : c_from, t2 = cmd_first ? a_to : c_to;

            buf_append(out, text, (size_t)f1);
            if (cmd_first) {
                put_toml_string(out, command);
            } else {
                put_args(out, args, n_args);
            }
            buf_append(out, text + t1, (size_t)(f2 - t1));
            if (cmd_first) {
                put_args(out, args, n_args);
            } else {
                put_toml_string(out, command);
            }
            buf_append(out, text + t2, len - (size_t)t2);
        }
    } else {
        buf_append(out, text, len);
        if (len > 0 && text[len - 1] != '\n') {
            buf_putc(out, '\n');
        }
        if (len > 0) {
            buf_putc(out, '\n');
        }
        buf_printf(out, "[%s.%s]\ncommand = ", table, name);
        put_toml_string(out, command);
        buf_puts(out, "\nargs = ");
        put_args(out, args, n_args);
        buf_putc(out, '\n');
    }
    if (buf_failed(out)) {
        err_set(err, ERR_NOMEM, "'%s' would be too large", shown);
        goto out;
    }
    /* Prove the result says what we meant before anyone writes it. */
    if (ptoml_parse(buf_cstr(out), out->len, shown, &check, err) < 0) {
        err->code = ERR_INVAL;
        goto out;
    }
    if (find_server(check, shown, table, name, &srv, err) < 0) {
        goto out;
    }
    {
        const char *c = srv ? ptoml_string(ptoml_get(srv, "command"), NULL) : NULL;
        if (c == NULL || strcmp(c, command) != 0 ||
            !same_args(ptoml_get(srv, "args"), args, n_args)) {
            err_set(err, ERR_INVAL,
                    "'%s': cannot add [%s.%s] without changing its meaning; "
                    "edit it by hand",
                    shown, table, name);
            goto out;
        }
    }
    *changed = 1;
    rc = 0;
out:
    ptoml_free(doc);
    ptoml_free(check);
    return rc;
}
