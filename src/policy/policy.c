/*
 * policy.c - config.toml: defaults, parsing, validation, and the reloading store.
 *
 * Design. Every field is described once in `fields[]` (name, kind, where it lives in
 * struct policy, its allowed range). Parsing starts from the built-in defaults and
 * overwrites a field for each key the file sets, so an absent key always means the
 * default. Anything wrong with a known key (type, range, a relative path, a malformed
 * entry) fails the whole load with a message naming the key and its line: a half-
 * applied policy is never installed. Unknown keys are not errors (a newer or older
 * config must not lock the operator out) but are listed as warnings in the policy,
 * shown by get_config and logged once per load.
 *
 * Invariants. A `struct policy` is immutable once returned; only its reference count
 * changes (atomically). The store replaces its pointer under a mutex, so a caller that
 * holds a reference keeps a consistent policy for its whole call.
 */
#include "policy/policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/policy_int.h"
#include "policy/policy_toml.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"
#include "util/userpath.h"

#define PATH_MAX_LEN 4096
#define DAY_MS       ((int64_t)86400000)

enum field_kind {
    F_INT,
    F_BOOL,
    F_PATH,     /* absolute path, lexically cleaned */
    F_PATHLIST, /* list of those */
    F_DOMAINS,  /* domain patterns */
    F_NAMES,    /* directory names (overlays) */
    F_ENVS,     /* environment variable names */
    F_PATTERNS, /* non-empty command substrings */
    F_CIDRS,    /* "addr/len" */
    F_RESOLVE,  /* "host:port:addr[,addr]" */
    F_CREDS,    /* [[fetch_credentials]] */
    F_SYNC      /* "full" | "normal" */
};

struct field {
    const char *name;
    enum field_kind kind;
    size_t off;
    int64_t min, max;
};

#define OFF(f) offsetof(struct policy, f)

static const struct field fields[] = {
    {"domain_allowlist", F_DOMAINS, OFF(domain_allowlist), 0, 0},
    {"fetch_timeout_ms", F_INT, OFF(fetch_timeout_ms), 1, DAY_MS},
    {"connect_timeout_ms", F_INT, OFF(connect_timeout_ms), 1, DAY_MS},
    {"fetch_max_bytes", F_INT, OFF(fetch_max_bytes), 1, (int64_t)1 << 40},
    {"fetch_allow_private", F_BOOL, OFF(fetch_allow_private), 0, 0},
    {"fetch_allow_cidrs", F_CIDRS, OFF(fetch_allow_cidrs), 0, 0},
    {"fetch_resolve", F_RESOLVE, OFF(fetch_resolve), 0, 0},
    {"fetch_credentials", F_CREDS, OFF(fetch_credentials), 0, 0},
    {"bash_timeout_ms", F_INT, OFF(bash_timeout_ms), 1, DAY_MS},
    {"package_install_enabled", F_BOOL, OFF(package_install_enabled), 0, 0},
    {"package_install_timeout_ms", F_INT, OFF(package_install_timeout_ms), 1, DAY_MS},
    {"bash_command_denylist", F_PATTERNS, OFF(bash_command_denylist), 0, 0},
    {"bash_command_allowlist", F_PATTERNS, OFF(bash_command_allowlist), 0, 0},
    {"max_output_bytes", F_INT, OFF(max_output_bytes), 1, (int64_t)1 << 30},
    {"sandbox_memory_mb", F_INT, OFF(sandbox_memory_mb), 1, (int64_t)1 << 22},
    {"sandbox_cpu_secs", F_INT, OFF(sandbox_cpu_secs), 1, 7 * 86400},
    {"sandbox_file_size_mb", F_INT, OFF(sandbox_file_size_mb), 1, (int64_t)1 << 22},
    {"sandbox_max_processes", F_INT, OFF(sandbox_max_processes), 1, 1000000},
    {"sandbox_tmp_size_mb", F_INT, OFF(sandbox_tmp_size_mb), 1, (int64_t)1 << 22},
    /* Never 0 (root) and never -1 ((uid_t)-1 means "unchanged" to set*id calls). */
    {"sandbox_uid", F_INT, OFF(sandbox_uid), 1, 4294967294LL},
    {"sandbox_gid", F_INT, OFF(sandbox_gid), 1, 4294967294LL},
    {"extract_timeout_ms", F_INT, OFF(extract_timeout_ms), 1, DAY_MS},
    {"extract_max_mb", F_INT, OFF(extract_max_mb), 1, 1024},
    {"max_workspace_mb", F_INT, OFF(max_workspace_mb), 1, (int64_t)1 << 22},
    {"max_sessions", F_INT, OFF(max_sessions), 1, 100000},
    {"max_checkpoints", F_INT, OFF(max_checkpoints), 1, 1000000},
    {"session_idle_timeout_secs", F_INT, OFF(session_idle_timeout_secs), 1, 366 * 86400},
    {"mount_allowlist", F_PATHLIST, OFF(mount_allowlist), 0, 0},
    {"mount_overlay_paths", F_NAMES, OFF(mount_overlay_paths), 0, 0},
    {"mount_git_copy_max_mb", F_INT, OFF(mount_git_copy_max_mb), 0, (int64_t)1 << 22},
    {"env_allowlist", F_ENVS, OFF(env_allowlist), 0, 0},
    {"snapshots_dir", F_PATH, OFF(snapshots_dir), 0, 0},
    {"snapshot_on_close", F_BOOL, OFF(snapshot_on_close), 0, 0},
    {"export_vcs_hooks", F_BOOL, OFF(export_vcs_hooks), 0, 0},
    {"db_path", F_PATH, OFF(db_path), 0, 0},
    {"runtime_dir", F_PATH, OFF(runtime_dir), 0, 0},
    {"sqlite_synchronous", F_SYNC, OFF(sqlite_synchronous), 0, 0},
};

/* Keys of the original drun that we deliberately do not support (web UI, chat). */
static const char *const retired_keys[] = {
    "web_port",           "default_model",    "anthropic_api_key", "openai_api_key",
    "openrouter_api_key", "deepseek_api_key", "gemini_api_key",
};

/* ---- small helpers ---- */

int
policy_strlist_push(struct policy_strlist *l, const char *s)
{
    char **v;
    char *copy = mem_strdup(s);

    if (copy == NULL) {
        return -1;
    }
    v = mem_realloc(l->v, (l->n + 1) * sizeof(*v));
    if (v == NULL) {
        mem_free(copy);
        return -1;
    }
    v[l->n++] = copy;
    l->v = v;
    return 0;
}

void
policy_strlist_clear(struct policy_strlist *l)
{
    for (size_t i = 0; i < l->n; i++) {
        mem_free(l->v[i]);
    }
    mem_free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int
has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            return 1;
        }
    }
    return 0;
}

int
policy_path_clean(const char *in, char *out, size_t size, struct err *err)
{
    struct buf b;
    const char *p = in;
    int rc = -1;

    buf_init(&b, PATH_MAX_LEN - 1);
    if (has_control(in, strlen(in))) {
        return err_set(err, ERR_INVAL, "must not contain control characters");
    }
    if (in[0] == '~' && (in[1] == '/' || in[1] == '\0')) {
        const char *home = getenv("HOME");
        if (home == NULL || home[0] != '/') {
            return err_set(err, ERR_INVAL, "uses '~' but HOME is not set; write an absolute path");
        }
        buf_puts(&b, home);
        p = in + 1;
    } else if (in[0] != '/') {
        return err_set(err, ERR_INVAL, "must be an absolute path, not '%s'", in);
    }
    buf_puts(&b, p);
    if (buf_failed(&b)) {
        buf_release(&b);
        return err_set(err, ERR_INVAL, "is longer than %d bytes", PATH_MAX_LEN - 1);
    }
    /* Rebuild component by component. */
    {
        const char *s = buf_cstr(&b);
        size_t o = 0;

        while (*s != '\0') {
            const char *e;
            size_t n;

            while (*s == '/') {
                s++;
            }
            e = s;
            while (*e != '\0' && *e != '/') {
                e++;
            }
            n = (size_t)(e - s);
            if (n == 0 || (n == 1 && s[0] == '.')) {
                s = e;
                continue;
            }
            if (n == 2 && s[0] == '.' && s[1] == '.') {
                err_set(err, ERR_INVAL, "must not contain '..' components");
                goto out;
            }
            if (o + 1 + n + 1 > size) {
                err_set(err, ERR_INVAL, "is too long");
                goto out;
            }
            out[o++] = '/';
            memcpy(out + o, s, n);
            o += n;
            s = e;
        }
        if (o == 0) {
            out[o++] = '/';
        }
        out[o] = '\0';
    }
    rc = 0;
out:
    buf_release(&b);
    return rc;
}

static int
is_ip_literal(const char *s)
{
    unsigned char tmp[16];
    char inner[64];
    size_t n = strlen(s);

    if (inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1) {
        return 1;
    }
    if (n > 2 && n < sizeof(inner) && s[0] == '[' && s[n - 1] == ']') {
        memcpy(inner, s + 1, n - 2);
        inner[n - 2] = '\0';
        return inet_pton(AF_INET6, inner, tmp) == 1;
    }
    return 0;
}

int
policy_domain_clean(const char *in, char *out, size_t size, struct err *err)
{
    size_t n = strlen(in);
    const char *name = in;

    if (n == 0) {
        return err_set(err, ERR_INVAL, "has an empty entry");
    }
    if (n >= size || n > 253) {
        return err_set(err, ERR_INVAL, "has an entry longer than 253 characters");
    }
    if (strstr(in, "://") != NULL) {
        return err_set(err, ERR_INVAL, "has '%s', a URL: write the host name only", in);
    }
    for (size_t i = 0; i < n; i++) {
        out[i] = (char)tolower((unsigned char)in[i]);
    }
    out[n] = '\0';
    if (n > 1 && out[n - 1] == '.') {
        out[--n] = '\0';
    }
    if (strcmp(out, "*") == 0 || is_ip_literal(out)) {
        return 0;
    }
    if (strncmp(out, "*.", 2) == 0) {
        name = out + 2;
    } else {
        name = out;
    }
    if (*name == '\0' || *name == '.') {
        return err_set(err, ERR_INVAL, "has '%s', which is not a host name", in);
    }
    for (const char *c = name; *c != '\0'; c++) {
        if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '.' || *c == '_') ||
            (*c == '.' && c[1] == '.')) {
            return err_set(err, ERR_INVAL,
                           "has '%s', which is not a host name or '*.domain' pattern", in);
        }
    }
    return 0;
}

static int
valid_env_name(const char *s)
{
    if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) {
        return 0;
    }
    for (const char *c = s; *c != '\0'; c++) {
        if (!(isalnum((unsigned char)*c) || *c == '_')) {
            return 0;
        }
    }
    return 1;
}

static int
valid_header_name(const char *s)
{
    if (*s == '\0') {
        return 0;
    }
    for (const char *c = s; *c != '\0'; c++) {
        if (!(isalnum((unsigned char)*c) || strchr("!#$%&'*+-.^_`|~", *c) != NULL)) {
            return 0;
        }
    }
    return 1;
}

static int
valid_cidr(const char *s)
{
    char addr[64];
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    unsigned char tmp[16];
    int maxlen;
    char *end;
    long len;

    if (n == 0 || n >= sizeof(addr)) {
        return 0;
    }
    memcpy(addr, s, n);
    addr[n] = '\0';
    if (inet_pton(AF_INET, addr, tmp) == 1) {
        maxlen = 32;
    } else if (inet_pton(AF_INET6, addr, tmp) == 1) {
        maxlen = 128;
    } else {
        return 0;
    }
    if (slash == NULL) {
        return 1;
    }
    if (!isdigit((unsigned char)slash[1])) {
        return 0;
    }
    errno = 0;
    len = strtol(slash + 1, &end, 10);
    return errno == 0 && *end == '\0' && len >= 0 && len <= maxlen;
}

/* "host:port:addr[,addr...]", each addr an IP (IPv6 optionally in brackets). */
static int
valid_resolve(const char *s)
{
    const char *c1 = strchr(s, ':');
    const char *c2;
    char *end;
    long port;
    char addr[64];

    if (c1 == NULL || c1 == s) {
        return 0;
    }
    c2 = strchr(c1 + 1, ':');
    if (c2 == NULL || !isdigit((unsigned char)c1[1])) {
        return 0;
    }
    errno = 0;
    port = strtol(c1 + 1, &end, 10);
    if (errno != 0 || end != c2 || port < 1 || port > 65535) {
        return 0;
    }
    for (const char *a = c2 + 1;;) {
        const char *comma = strchr(a, ',');
        size_t n = comma ? (size_t)(comma - a) : strlen(a);
        if (n == 0 || n >= sizeof(addr)) {
            return 0;
        }
        memcpy(addr, a, n);
        addr[n] = '\0';
        if (!is_ip_literal(addr)) {
            return 0;
        }
        if (comma == NULL) {
            return 1;
        }
        a = comma + 1;
    }
}

int
policy_read_file(const char *path, size_t max, struct buf *b, struct err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    int rc = -1;

    if (fd < 0) {
        return err_set(err, errno == ENOENT ? ERR_NOTFOUND : ERR_IO, "cannot open '%s': %s", path,
                       strerror(errno));
    }
    if (fstat(fd, &st) < 0) {
        err_set(err, ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        err_set(err, ERR_INVAL, "'%s' is not a regular file", path);
        goto out;
    }
    for (;;) {
        char chunk[8192];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            err_set(err, ERR_IO, "cannot read '%s': %s", path, strerror(errno));
            goto out;
        }
        if (n == 0) {
            break;
        }
        if (b->len + (size_t)n > max) {
            err_set(err, ERR_TOOBIG, "'%s' is larger than %zu bytes; is it the right file?", path,
                    max);
            goto out;
        }
        if (buf_append(b, chunk, (size_t)n) < 0) {
            buf_err(b, path, err);
            goto out;
        }
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

/* ---- building a policy ---- */

static int
set_str(char **slot, const char *value)
{
    char *copy = value ? mem_strdup(value) : NULL;

    if (value != NULL && copy == NULL) {
        return -1;
    }
    mem_free(*slot);
    *slot = copy;
    return 0;
}

static int
default_runtime_dir(char *out, size_t size)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    const char *tmp = getenv("TMPDIR");
    int n;

    if (xdg != NULL && xdg[0] == '/') {
        n = snprintf(out, size, "%s/drun", xdg);
    } else {
        n = snprintf(out, size, "%s/drun-%u", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp",
                     (unsigned)getuid());
    }
    return n > 0 && (size_t)n < size ? 0 : -1;
}

struct policy *
policy_defaults(void)
{
    static const char *const domains[] = {"cdn.jsdelivr.net", "files.pythonhosted.org", "pypi.org"};
    static const char *const overlays[] = {"node_modules", ".venv",       "venv",
                                           "target",       "__pycache__", ".git"};
    struct policy *p = mem_calloc(1, sizeof(*p));
    char path[PATH_MAX_LEN];
    const char *home = getenv("HOME");
    int bad = 0;

    if (p == NULL) {
        return NULL;
    }
    p->refs_ = 1;
    p->fetch_timeout_ms = 60000;
    p->connect_timeout_ms = 30000;
    p->fetch_max_bytes = (int64_t)64 << 20;
    p->bash_timeout_ms = 30000;
    p->package_install_timeout_ms = 180000;
    p->max_output_bytes = (int64_t)16 << 20;
    p->sandbox_memory_mb = 2048;
    p->sandbox_cpu_secs = 600;
    p->sandbox_file_size_mb = 1024;
    p->sandbox_max_processes = 512;
    p->sandbox_tmp_size_mb = 512;
    p->sandbox_uid = 65534;
    p->sandbox_gid = 65534;
    p->max_workspace_mb = 512;
    p->extract_timeout_ms = 30000;
    p->extract_max_mb = 4;
    p->mount_git_copy_max_mb = 64;
    p->max_sessions = 50;
    p->max_checkpoints = 200;
    p->session_idle_timeout_secs = 3600;
    p->sqlite_synchronous = POLICY_SYNC_FULL;
    for (size_t i = 0; i < sizeof(domains) / sizeof(domains[0]); i++) {
        bad |= policy_strlist_push(&p->domain_allowlist, domains[i]);
    }
    for (size_t i = 0; i < sizeof(overlays) / sizeof(overlays[0]); i++) {
        bad |= policy_strlist_push(&p->mount_overlay_paths, overlays[i]);
    }
    if (home != NULL && home[0] == '/' &&
        (size_t)snprintf(path, sizeof(path), "%s/.drun/snapshots", home) < sizeof(path)) {
        bad |= set_str(&p->snapshots_dir, path);
    }
    if (default_runtime_dir(path, sizeof(path)) == 0) {
        bad |= set_str(&p->runtime_dir, path);
    }
    if (bad) {
        policy_unref(p);
        return NULL;
    }
    return p;
}

static void
policy_free(struct policy *p)
{
    policy_strlist_clear(&p->domain_allowlist);
    policy_strlist_clear(&p->fetch_allow_cidrs);
    policy_strlist_clear(&p->fetch_resolve);
    for (size_t i = 0; i < p->fetch_credentials_n; i++) {
        mem_free(p->fetch_credentials[i].domain);
        mem_free(p->fetch_credentials[i].header);
        mem_free(p->fetch_credentials[i].env);
    }
    mem_free(p->fetch_credentials);
    policy_strlist_clear(&p->bash_command_denylist);
    policy_strlist_clear(&p->bash_command_allowlist);
    policy_strlist_clear(&p->mount_allowlist);
    policy_strlist_clear(&p->mount_overlay_paths);
    policy_strlist_clear(&p->env_allowlist);
    policy_strlist_clear(&p->warnings);
    mem_free(p->snapshots_dir);
    mem_free(p->db_path);
    mem_free(p->runtime_dir);
    mem_free(p->source_path);
    mem_free(p);
}

struct policy *
policy_ref(struct policy *p)
{
    __atomic_add_fetch(&p->refs_, 1, __ATOMIC_RELAXED);
    return p;
}

void
policy_unref(struct policy *p)
{
    if (p != NULL && __atomic_sub_fetch(&p->refs_, 1, __ATOMIC_ACQ_REL) == 0) {
        policy_free(p);
    }
}

/* ---- parsing ---- */

struct parse_ctx {
    struct policy *p;
    const char *name; /* the source, for messages */
    struct err *err;
};

/* Sets err to "invalid config 'name': 'key' (line L) <what>"; returns -1. */
static int
key_error(struct parse_ctx *c, const char *key, const struct ptoml_node *n, const char *what)
{
    struct ptoml_pos at = ptoml_begin(n);

    return err_set(c->err, ERR_INVAL, "invalid config '%s': '%s' (line %u, column %u) %s", c->name,
                   key, at.line, at.col, what);
}

/* Runs a validator that fills c->err with a subject-less message, then prefixes it. */
static int
key_error_from(struct parse_ctx *c, const char *key, const struct ptoml_node *n)
{
    char what[ERR_MSG_MAX];

    memcpy(what, c->err->msg, sizeof(what));
    return key_error(c, key, n, what);
}

static int
type_error(struct parse_ctx *c, const char *key, const struct ptoml_node *n, const char *want)
{
    char what[128];

    snprintf(what, sizeof(what), "must be %s, not %s", want, ptoml_type_name(ptoml_type(n)));
    return key_error(c, key, n, what);
}

static int
nomem(struct parse_ctx *c)
{
    return err_set(c->err, ERR_NOMEM, "out of memory loading '%s'", c->name);
}

/* Fetches element i of a string array as a C string, rejecting NULs. */
static const char *
array_string(struct parse_ctx *c, const char *key, const struct ptoml_node *arr, size_t i)
{
    const struct ptoml_node *e = ptoml_index(arr, i);
    size_t len = 0;
    const char *s = ptoml_string(e, &len);

    if (s == NULL) {
        type_error(c, key, e, "an array of strings, with an element that is a string");
        return NULL;
    }
    if (strlen(s) != len) {
        key_error(c, key, e, "has an entry containing a NUL character");
        return NULL;
    }
    return s;
}

static int
parse_list(struct parse_ctx *c, const struct field *f, const char *key, const struct ptoml_node *v)
{
    struct policy_strlist *l = (struct policy_strlist *)(void *)((char *)c->p + f->off);
    struct policy_strlist fresh = {NULL, 0};
    char clean[PATH_MAX_LEN];
    size_t n = ptoml_len(v);

    if (ptoml_type(v) != PTOML_ARRAY) {
        return type_error(c, key, v, "an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        const char *s = array_string(c, key, v, i);
        const char *keep = s;
        char what[ERR_MSG_MAX];

        if (s == NULL) {
            goto fail;
        }
        what[0] = '\0';
        switch (f->kind) {
        case F_PATHLIST:
            if (policy_path_clean(s, clean, sizeof(clean), c->err) < 0) {
                key_error_from(c, key, ptoml_index(v, i));
                goto fail;
            }
            keep = clean;
            break;
        case F_DOMAINS:
            if (policy_domain_clean(s, clean, 256, c->err) < 0) {
                key_error_from(c, key, ptoml_index(v, i));
                goto fail;
            }
            keep = clean;
            break;
        case F_NAMES:
            if (s[0] == '\0' || strchr(s, '/') != NULL || strcmp(s, ".") == 0 ||
                strcmp(s, "..") == 0 || has_control(s, strlen(s))) {
                snprintf(what, sizeof(what),
                         "has '%s': entries are single directory names (no '/')", s);
            }
            break;
        case F_ENVS:
            if (!valid_env_name(s)) {
                snprintf(what, sizeof(what), "has '%s', which is not an environment variable name",
                         s);
            }
            break;
        case F_PATTERNS:
            if (s[0] == '\0') {
                snprintf(what, sizeof(what), "has an empty pattern, which would match anything");
            }
            break;
        case F_CIDRS:
            if (!valid_cidr(s)) {
                snprintf(what, sizeof(what), "has '%s', which is not an address or 'addr/len'", s);
            }
            break;
        case F_RESOLVE:
            if (!valid_resolve(s)) {
                snprintf(what, sizeof(what), "has '%s', which is not 'host:port:address'", s);
            }
            break;
        case F_INT:
        case F_BOOL:
        case F_PATH:
        case F_CREDS:
        case F_SYNC:
            break;
        }
        if (what[0] != '\0') {
            key_error(c, key, ptoml_index(v, i), what);
            goto fail;
        }
        if (policy_strlist_push(&fresh, keep) < 0) {
            nomem(c);
            goto fail;
        }
    }
    policy_strlist_clear(l);
    *l = fresh;
    return 0;
fail:
    policy_strlist_clear(&fresh);
    return -1;
}

static int
parse_creds(struct parse_ctx *c, const char *key, const struct ptoml_node *v)
{
    size_t n = ptoml_len(v);
    struct policy_credential *creds = NULL;

    if (ptoml_type(v) != PTOML_ARRAY) {
        return type_error(c, key, v, "an array of tables ([[fetch_credentials]])");
    }
    if (n > 0 && (creds = mem_calloc(n, sizeof(*creds))) == NULL) {
        return nomem(c);
    }
    for (size_t i = 0; i < n; i++) {
        const struct ptoml_node *t = ptoml_index(v, i);
        static const char *const parts[] = {"domain", "header", "env"};
        char *vals[3] = {NULL, NULL, NULL};
        char clean[256];

        if (ptoml_type(t) != PTOML_TABLE) {
            type_error(c, key, t, "an array of tables with domain, header and env");
            goto fail;
        }
        if (ptoml_len(t) != 3) {
            key_error(c, key, t, "entries take exactly the keys domain, header and env");
            goto fail;
        }
        for (int k = 0; k < 3; k++) {
            const struct ptoml_node *e = ptoml_get(t, parts[k]);
            size_t len = 0;
            const char *s = ptoml_string(e, &len);
            char what[128];

            if (s == NULL || strlen(s) != len) {
                snprintf(what, sizeof(what), "entries need '%s' as a string", parts[k]);
                key_error(c, key, e ? e : t, what);
                goto fail;
            }
            if (k == 0 && policy_domain_clean(s, clean, sizeof(clean), c->err) < 0) {
                key_error_from(c, key, e);
                goto fail;
            }
            if ((k == 1 && !valid_header_name(s)) || (k == 2 && !valid_env_name(s))) {
                snprintf(what, sizeof(what), "has %s '%s', which is not valid", parts[k], s);
                key_error(c, key, e, what);
                goto fail;
            }
            vals[k] = mem_strdup(k == 0 ? clean : s);
            if (vals[k] == NULL) {
                mem_free(vals[0]);
                mem_free(vals[1]);
                nomem(c);
                goto fail;
            }
        }
        creds[i].domain = vals[0];
        creds[i].header = vals[1];
        creds[i].env = vals[2];
    }
    for (size_t i = 0; i < c->p->fetch_credentials_n; i++) {
        mem_free(c->p->fetch_credentials[i].domain);
        mem_free(c->p->fetch_credentials[i].header);
        mem_free(c->p->fetch_credentials[i].env);
    }
    mem_free(c->p->fetch_credentials);
    c->p->fetch_credentials = creds;
    c->p->fetch_credentials_n = n;
    return 0;
fail:
    for (size_t i = 0; i < n && creds != NULL; i++) {
        mem_free(creds[i].domain);
        mem_free(creds[i].header);
        mem_free(creds[i].env);
    }
    mem_free(creds);
    return -1;
}

static int
warn_key(struct parse_ctx *c, int retired, const char *key, const struct ptoml_node *v)
{
    char line[512];
    struct ptoml_pos at = ptoml_begin(v);

    if (retired) {
        snprintf(line, sizeof(line), "key '%s' (line %u) is not used by drun and is ignored", key,
                 at.line);
    } else {
        snprintf(line, sizeof(line), "unknown key '%s' (line %u) is ignored; check its spelling",
                 key, at.line);
    }
    if (policy_strlist_push(&c->p->warnings, line) < 0) {
        return nomem(c);
    }
    return 0;
}

static int
parse_entry(void *ctx, const char *key, const struct ptoml_node *v)
{
    struct parse_ctx *c = ctx;
    const struct field *f = NULL;
    char clean[PATH_MAX_LEN];
    char what[160];

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (strcmp(fields[i].name, key) == 0) {
            f = &fields[i];
            break;
        }
    }
    if (f == NULL) {
        for (size_t i = 0; i < sizeof(retired_keys) / sizeof(retired_keys[0]); i++) {
            if (strcmp(retired_keys[i], key) == 0) {
                return warn_key(c, 1, key, v);
            }
        }
        return warn_key(c, 0, key, v);
    }
    switch (f->kind) {
    case F_INT: {
        int64_t x;
        if (ptoml_type(v) != PTOML_INT) {
            return type_error(c, key, v, "an integer");
        }
        x = ptoml_int(v);
        if (x < f->min || x > f->max) {
            snprintf(what, sizeof(what), "must be from %lld to %lld, not %lld", (long long)f->min,
                     (long long)f->max, (long long)x);
            return key_error(c, key, v, what);
        }
        *(int64_t *)(void *)((char *)c->p + f->off) = x;
        return 0;
    }
    case F_BOOL:
        if (ptoml_type(v) != PTOML_BOOL) {
            return type_error(c, key, v, "true or false");
        }
        *(int *)(void *)((char *)c->p + f->off) = ptoml_bool(v);
        return 0;
    case F_SYNC: {
        const char *s = ptoml_string(v, NULL);
        if (s == NULL) {
            return type_error(c, key, v, "\"full\" or \"normal\"");
        }
        if (strcmp(s, "full") != 0 && strcmp(s, "normal") != 0) {
            return key_error(c, key, v, "must be \"full\" or \"normal\"");
        }
        c->p->sqlite_synchronous = strcmp(s, "full") == 0 ? POLICY_SYNC_FULL : POLICY_SYNC_NORMAL;
        return 0;
    }
    case F_PATH: {
        size_t len = 0;
        const char *s = ptoml_string(v, &len);
        if (s == NULL) {
            return type_error(c, key, v, "a string (an absolute path)");
        }
        if (strlen(s) != len) {
            return key_error(c, key, v, "contains a NUL character");
        }
        if (policy_path_clean(s, clean, sizeof(clean), c->err) < 0) {
            return key_error_from(c, key, v);
        }
        if (set_str((char **)(void *)((char *)c->p + f->off), clean) < 0) {
            return nomem(c);
        }
        return 0;
    }
    case F_CREDS:
        return parse_creds(c, key, v);
    case F_PATHLIST:
    case F_DOMAINS:
    case F_NAMES:
    case F_ENVS:
    case F_PATTERNS:
    case F_CIDRS:
    case F_RESOLVE:
        return parse_list(c, f, key, v);
    }
    return 0;
}

int
policy_parse(const char *text, size_t len, const char *name, struct policy **out, struct err *err)
{
    struct ptoml *doc = NULL;
    struct policy *p = NULL;
    struct parse_ctx c;

    *out = NULL;
    if (ptoml_parse(text, len, name, &doc, err) < 0) {
        return -1;
    }
    p = policy_defaults();
    if (p == NULL) {
        ptoml_free(doc);
        return err_set(err, ERR_NOMEM, "out of memory loading '%s'", name);
    }
    c.p = p;
    c.name = name;
    c.err = err;
    if (ptoml_each(ptoml_root(doc), parse_entry, &c) != 0) {
        ptoml_free(doc);
        policy_unref(p);
        return -1;
    }
    ptoml_free(doc);
    *out = p;
    return 0;
}

int
policy_load_file(const char *path, struct policy **out, struct err *err)
{
    struct buf b;
    struct stat st;
    int rc;

    *out = NULL;
    buf_init(&b, POLICY_FILE_MAX);
    if (policy_read_file(path, POLICY_FILE_MAX, &b, err) < 0) {
        buf_release(&b);
        return -1;
    }
    rc = policy_parse(buf_cstr(&b), b.len, path, out, err);
    buf_release(&b);
    if (rc == 0) {
        if (set_str(&(*out)->source_path, path) < 0) {
            policy_unref(*out);
            *out = NULL;
            return err_set(err, ERR_NOMEM, "out of memory loading '%s'", path);
        }
        if (stat(path, &st) == 0) {
            (*out)->source_mtime_ms =
                (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        }
    }
    return rc;
}

int
policy_config_path(const char *cli, char **path_out, int *explicit_out, struct err *err)
{
    const char *env = getenv("DRUN_CONFIG");
    const char *home = getenv("HOME");
    const char *chosen = NULL;
    const char *from = NULL;
    struct buf b;

    *path_out = NULL;
    *explicit_out = 1;
    if (cli != NULL) {
        chosen = cli;
        from = "--config";
    } else if (env != NULL && env[0] != '\0') {
        chosen = env;
        from = "DRUN_CONFIG";
    }
    if (chosen != NULL) {
        if (chosen[0] == '\0' || has_control(chosen, strlen(chosen))) {
            return err_set(err, ERR_INVAL, "%s names an empty or malformed path", from);
        }
        if (chosen[0] == '~' && (chosen[1] == '/' || chosen[1] == '\0')) {
            /* a client's JSON config passes "~/..." without a shell to expand it */
            *path_out = userpath_expand(chosen, err);
            return *path_out != NULL ? 0 : -1;
        }
        if (chosen[0] != '/') {
            char cwd[PATH_MAX_LEN];
            if (getcwd(cwd, sizeof(cwd)) == NULL) {
                return err_set(err, ERR_IO, "cannot resolve %s '%s': %s", from, chosen,
                               strerror(errno));
            }
            buf_init(&b, PATH_MAX_LEN - 1);
            buf_printf(&b, "%s/%s", cwd, chosen);
            if (buf_failed(&b)) {
                buf_release(&b);
                return err_set(err, ERR_INVAL, "%s '%s' is too long", from, chosen);
            }
            *path_out = buf_detach(&b, NULL);
        } else {
            *path_out = mem_strdup(chosen);
        }
        return *path_out ? 0 : err_set(err, ERR_NOMEM, "out of memory");
    }
    *explicit_out = 0;
    if (home == NULL || home[0] != '/') {
        return err_set(err, ERR_INVAL,
                       "HOME is not set, so there is no default config path; pass --config "
                       "PATH or set DRUN_CONFIG");
    }
    buf_init(&b, PATH_MAX_LEN - 1);
    buf_printf(&b, "%s/.drun/config.toml", home);
    if (buf_failed(&b)) {
        buf_release(&b);
        return err_set(err, ERR_INVAL, "HOME '%s' is too long", home);
    }
    *path_out = buf_detach(&b, NULL);
    return *path_out ? 0 : err_set(err, ERR_NOMEM, "out of memory");
}

/* ---- the store ---- */

struct policy_store {
    pthread_mutex_t mu;
    char *path;
    int explicit_path;
    struct policy *cur; /* NULL until a good policy was loaded */
    int attempted;      /* a load was attempted */
    int last_missing;   /* the last attempt found no file */
    int last_errno;     /* the last attempt could not stat the file (not ENOENT) */
    struct stat last;   /* the stat of the last attempt, when the file existed */
    struct policy_status status;
};

static int
same_stat(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static void
install(struct policy_store *st, struct policy *p, int from_defaults)
{
    policy_unref(st->cur);
    st->cur = p;
    st->status.have_policy = 1;
    st->status.from_defaults = from_defaults;
    st->status.mtime_ms = p->source_mtime_ms;
    st->status.loaded_ms = time_now_ms();
    err_clear(&st->status.last_error);
    st->status.error_ms = 0;
    for (size_t i = 0; i < p->warnings.n; i++) {
        log_warn("config '%s': %s", st->path, p->warnings.v[i]);
    }
}

static int
fail_load(struct policy_store *st, const struct err *e, struct err *err)
{
    st->status.last_error = *e;
    st->status.error_ms = time_now_ms();
    if (st->cur != NULL) {
        log_error("%s; the last good policy stays in force", e->msg);
    } else {
        log_error("%s; calls that need policy are refused until it is fixed", e->msg);
    }
    if (err != NULL) {
        *err = *e;
    }
    return -1;
}

/* Called with st->mu held. */
static int
refresh_locked(struct policy_store *st, struct err *err)
{
    struct stat sb;
    struct policy *p = NULL;
    struct err e;

    err_clear(&e);
    if (stat(st->path, &sb) < 0) {
        if (errno != ENOENT) {
            int code = errno;
            if (st->attempted && st->last_errno == code) {
                return 0; /* the same failure as last time, already reported */
            }
            st->attempted = 1;
            st->last_missing = 0;
            st->last_errno = code;
            memset(&st->last, 0, sizeof(st->last));
            err_set(&e, ERR_IO, "cannot stat config '%s': %s", st->path, strerror(code));
            return fail_load(st, &e, err);
        }
        if (st->attempted && st->last_missing) {
            return 0;
        }
        st->attempted = 1;
        st->last_missing = 1;
        st->last_errno = 0;
        if (!st->explicit_path && (st->cur == NULL || st->status.from_defaults)) {
            if (st->cur != NULL) {
                return 0;
            }
            p = policy_defaults();
            if (p == NULL) {
                err_set(&e, ERR_NOMEM, "out of memory making the default policy");
                st->last_missing = 0; /* try again next time */
                return fail_load(st, &e, err);
            }
            install(st, p, 1);
            return 1;
        }
        if (st->cur != NULL) {
            err_set(&e, ERR_NOTFOUND, "config '%s' was removed; put it back to change policy",
                    st->path);
        } else {
            err_set(&e, ERR_NOTFOUND,
                    "config '%s' does not exist; create it (drun-mcp config add-path DIR creates "
                    "one) or name another with --config",
                    st->path);
        }
        return fail_load(st, &e, err);
    }
    if (st->attempted && !st->last_missing && same_stat(&sb, &st->last)) {
        return 0;
    }
    st->attempted = 1;
    st->last_missing = 0;
    st->last_errno = 0;
    st->last = sb;
    if (policy_load_file(st->path, &p, &e) < 0) {
        return fail_load(st, &e, err);
    }
    install(st, p, 0);
    log_info("loaded config '%s'", st->path);
    return 1;
}

int
policy_store_open(const char *path, int explicit_path, struct policy_store **out, struct err *err)
{
    struct policy_store *st = mem_calloc(1, sizeof(*st));

    *out = NULL;
    if (st == NULL || (st->path = mem_strdup(path)) == NULL) {
        mem_free(st);
        return err_set(err, ERR_NOMEM, "out of memory opening the policy");
    }
    pthread_mutex_init(&st->mu, NULL);
    st->explicit_path = explicit_path;
    snprintf(st->status.path, sizeof(st->status.path), "%s", path);
    pthread_mutex_lock(&st->mu);
    refresh_locked(st, NULL);
    pthread_mutex_unlock(&st->mu);
    *out = st;
    return 0;
}

void
policy_store_free(struct policy_store *st)
{
    if (st == NULL) {
        return;
    }
    policy_unref(st->cur);
    pthread_mutex_destroy(&st->mu);
    mem_free(st->path);
    mem_free(st);
}

int
policy_refresh(struct policy_store *st, struct err *err)
{
    int rc;

    pthread_mutex_lock(&st->mu);
    rc = refresh_locked(st, err);
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int
policy_current(struct policy_store *st, struct policy **out, struct err *err)
{
    int rc = 0;

    *out = NULL;
    pthread_mutex_lock(&st->mu);
    refresh_locked(st, NULL);
    if (st->cur == NULL) {
        if (st->status.last_error.code != ERR_OK) {
            *err = st->status.last_error;
        } else {
            err_set(err, ERR_INTERNAL, "no policy is loaded from '%s'", st->path);
        }
        rc = -1;
    } else {
        *out = policy_ref(st->cur);
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

void
policy_store_status(struct policy_store *st, struct policy_status *out)
{
    pthread_mutex_lock(&st->mu);
    *out = st->status;
    pthread_mutex_unlock(&st->mu);
}
