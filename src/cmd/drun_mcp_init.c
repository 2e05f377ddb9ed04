/*
 * drun_mcp_init.c - `drun-mcp init claude|codex|gemini|cursor|vscode`.
 *
 * Each client keeps its MCP servers in its own file: a JSON object of servers under one
 * key (Claude Code's ~/.claude.json "mcpServers", Gemini CLI's ~/.gemini/settings.json
 * "mcpServers", Cursor's ~/.cursor/mcp.json "mcpServers", VS Code's user mcp.json
 * "servers"), or Codex's TOML ~/.codex/config.toml [mcp_servers.NAME]. We add one entry
 * named "drun" that starts this very binary (absolute path) with an absolute --db, and
 * touch nothing else the user has:
 *
 *  - the file is read whole and parsed first; a file that does not parse is refused
 *    with the parser's message and left as it is (we never "repair" a user's config);
 *  - an entry that already says the same is left alone (idempotent: no write, no
 *    backup); one that differs has its command and args replaced, other keys kept;
 *  - before a change the file is copied to FILE.drun-backup, then the new text is
 *    written atomically (temp file, fsync, rename) with the old permissions, through a
 *    symlink to the real file (dotfile managers link these files);
 *  - --dry-run prints the entry and where it would go, and writes nothing.
 *
 * JSON files are re-printed by cJSON (the content and key order are kept, the
 * indentation becomes cJSON's); TOML is edited in place by policy_toml_set_server, so
 * comments and layout survive byte for byte.
 */
#include "cmd/drun_mcp_init.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "policy/policy.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"
#include "util/userpath.h"

#define INIT_FILE_MAX ((size_t)64 << 20) /* ~/.claude.json grows with history */
#define INIT_PATH_MAX 4096
#define SERVER_NAME   "drun"

enum client_format { FMT_JSON, FMT_TOML };

struct client {
    const char *name;
    enum client_format fmt;
    const char *key;  /* the object (JSON) or table (TOML) that maps names to servers */
    int stdio_type;   /* the entry carries "type": "stdio" */
    const char *what; /* for messages */
};

static const struct client clients[] = {
    {"claude", FMT_JSON, "mcpServers", 1, "Claude Code"},
    {"codex", FMT_TOML, "mcp_servers", 0, "Codex"},
    {"gemini", FMT_JSON, "mcpServers", 0, "Gemini CLI"},
    {"cursor", FMT_JSON, "mcpServers", 0, "Cursor"},
    {"vscode", FMT_JSON, "servers", 1, "VS Code"},
};

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: drun-mcp init claude|codex|gemini|cursor|vscode [--db PATH] [--file PATH] "
            "[--dry-run]\n"
            "Adds the MCP server \"drun\" (this drun-mcp, absolute path, with --db) to the\n"
            "client's user configuration file, keeping every other server and setting:\n"
            "  claude  ~/.claude.json (mcpServers; $CLAUDE_CONFIG_DIR/.claude.json if set)\n"
            "  codex   ~/.codex/config.toml ([mcp_servers.drun]; $CODEX_HOME/config.toml)\n"
            "  gemini  ~/.gemini/settings.json (mcpServers)\n"
            "  cursor  ~/.cursor/mcp.json (mcpServers)\n"
            "  vscode  ~/.config/Code/User/mcp.json (servers; macOS: ~/Library/Application\n"
            "          Support/Code/User/mcp.json)\n"
            "--db      the database (default: --db before 'init', $DRUN_DB, else ~/.drun/drun.db)\n"
            "--file    edit this file instead (e.g. a project's .mcp.json or .cursor/mcp.json)\n"
            "--dry-run print the change and write nothing\n"
            "Running it again changes nothing. Before a change the file is copied to\n"
            "FILE.drun-backup. Quit the client first: some rewrite their file while running.\n");
}

/* The client's default file into out. */
static int
client_file(const struct client *c, struct buf *out, struct err *err)
{
    const char *home = getenv("HOME");
    const char *env;

    buf_reset(out);
    if (strcmp(c->name, "claude") == 0 && (env = getenv("CLAUDE_CONFIG_DIR")) && env[0] == '/') {
        buf_printf(out, "%s/.claude.json", env);
    } else if (strcmp(c->name, "codex") == 0 && (env = getenv("CODEX_HOME")) && env[0] == '/') {
        buf_printf(out, "%s/config.toml", env);
    } else if (home == NULL || home[0] != '/') {
        return err_set(err, ERR_INVAL, "HOME is not set; name the file with --file PATH");
    } else if (strcmp(c->name, "claude") == 0) {
        buf_printf(out, "%s/.claude.json", home);
    } else if (strcmp(c->name, "codex") == 0) {
        buf_printf(out, "%s/.codex/config.toml", home);
    } else if (strcmp(c->name, "gemini") == 0) {
        buf_printf(out, "%s/.gemini/settings.json", home);
    } else if (strcmp(c->name, "cursor") == 0) {
        buf_printf(out, "%s/.cursor/mcp.json", home);
    } else {
#ifdef __APPLE__
        buf_printf(out, "%s/Library/Application Support/Code/User/mcp.json", home);
#else
        env = getenv("XDG_CONFIG_HOME");
        if (env != NULL && env[0] == '/') {
            buf_printf(out, "%s/Code/User/mcp.json", env);
        } else {
            buf_printf(out, "%s/.config/Code/User/mcp.json", home);
        }
#endif
    }
    return buf_failed(out) ? err_set(err, ERR_INVAL, "the config path is too long") : 0;
}

/* An absolute, "~"-expanded copy of path (caller frees). */
static char *
absolute(const char *path, struct err *err)
{
    char *p = userpath_expand(path, err);
    char cwd[INIT_PATH_MAX];
    struct buf b;

    if (p == NULL || p[0] == '/') {
        return p;
    }
    if (getcwd(cwd, sizeof(cwd)) == NULL) {
        err_set(err, ERR_IO, "cannot resolve '%s': %s", path, strerror(errno));
        mem_free(p);
        return NULL;
    }
    buf_init(&b, INIT_PATH_MAX - 1);
    buf_printf(&b, "%s/%s", cwd, p);
    mem_free(p);
    if (buf_failed(&b)) {
        buf_release(&b);
        err_set(err, ERR_INVAL, "'%s' is too long", path);
        return NULL;
    }
    return buf_detach(&b, NULL);
}

/* This program's own absolute path. */
static int
self_path(char *out, size_t size, struct err *err)
{
    ssize_t n = readlink("/proc/self/exe", out, size - 1);

    if (n <= 0 || (size_t)n >= size - 1) {
        return err_set(err, ERR_IO, "cannot find this program's own path (/proc/self/exe): %s",
                       n < 0 ? strerror(errno) : "too long");
    }
    out[n] = '\0';
    return 0;
}

/*
 * Reads the file whole into b. *exists 0 for a missing file (b empty); *mode its mode.
 * A file that is not a regular file, or larger than INIT_FILE_MAX, is refused.
 */
static int
read_whole(const char *path, struct buf *b, int *exists, mode_t *mode, struct err *err)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    int rc = -1;

    *exists = 0;
    *mode = 0600;
    if (fd < 0) {
        return errno == ENOENT
                   ? 0
                   : err_set(err, ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        err_set(err, ERR_INVAL, "'%s' is not a regular file", path);
        goto out;
    }
    if ((size_t)sb.st_size > INIT_FILE_MAX) {
        err_set(err, ERR_TOOBIG, "'%s' is larger than %zu MiB; edit it by hand", path,
                INIT_FILE_MAX >> 20);
        goto out;
    }
    *exists = 1;
    *mode = sb.st_mode & 07777;
    for (;;) {
        char chunk[65536];
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
        if (buf_append(b, chunk, (size_t)n) < 0) {
            err_set(err, ERR_TOOBIG, "'%s' is larger than %zu MiB; edit it by hand", path,
                    INIT_FILE_MAX >> 20);
            goto out;
        }
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

/* The line and column of byte offset off in text, for a parse error. */
static void
line_col(const char *text, size_t off, unsigned *line, unsigned *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

/* The JSON entry for drun. */
static cJSON *
json_entry(const struct client *c, const char *command, const char *const *args, size_t n)
{
    cJSON *e = cJSON_CreateObject();
    cJSON *a = cJSON_CreateArray();

    if (e == NULL || a == NULL) {
        cJSON_Delete(e);
        cJSON_Delete(a);
        return NULL;
    }
    if (c->stdio_type) {
        cJSON_AddStringToObject(e, "type", "stdio");
    }
    cJSON_AddStringToObject(e, "command", command);
    for (size_t i = 0; i < n; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateString(args[i]));
    }
    cJSON_AddItemToObject(e, "args", a);
    return e;
}

/* 1 if the existing entry already starts drun this way. */
static int
json_same(const cJSON *old, const char *command, const char *const *args, size_t n)
{
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(old, "command");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(old, "args");
    size_t i = 0;
    const cJSON *it;

    if (!cJSON_IsString(cmd) || strcmp(cmd->valuestring, command) != 0 || !cJSON_IsArray(a) ||
        (size_t)cJSON_GetArraySize(a) != n) {
        return 0;
    }
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsString(it) || strcmp(it->valuestring, args[i++]) != 0) {
            return 0;
        }
    }
    return 1;
}

/* The JSON edit: out gets the new file text, *changed whether it differs. */
static int
edit_json(const struct client *c, const char *path, const struct buf *text, const char *command,
          const char *const *args, size_t n, struct buf *out, int *changed, struct err *err)
{
    cJSON *root = NULL, *servers, *old, *entry = NULL;
    char *printed = NULL;
    int rc = -1;

    *changed = 0;
    if (text->len == 0) {
        root = cJSON_CreateObject();
    } else {
        const char *end = NULL;
        root = cJSON_ParseWithLengthOpts(text->data, text->len, &end, 0);
        if (root == NULL) {
            unsigned line, col;
            size_t off = end != NULL && end >= text->data ? (size_t)(end - text->data) : 0;
            line_col(text->data, off, &line, &col);
            err_set(err, ERR_INVAL,
                    "'%s' is not valid JSON (near line %u, column %u%s); fix it or move it "
                    "aside, then run this again: nothing was changed",
                    path, line, col,
                    strcmp(c->name, "vscode") == 0 ? "; comments are not supported" : "");
            goto out;
        }
        if (!cJSON_IsObject(root)) {
            err_set(err, ERR_INVAL, "'%s' holds JSON that is not an object; nothing was changed",
                    path);
            goto out;
        }
    }
    servers = cJSON_GetObjectItemCaseSensitive(root, c->key);
    if (servers == NULL) {
        servers = cJSON_AddObjectToObject(root, c->key);
    } else if (!cJSON_IsObject(servers)) {
        err_set(err, ERR_INVAL, "'%s': \"%s\" is not an object; nothing was changed", path, c->key);
        goto out;
    }
    old = cJSON_GetObjectItemCaseSensitive(servers, SERVER_NAME);
    if (old != NULL && cJSON_IsObject(old) && json_same(old, command, args, n)) {
        buf_append(out, text->data, text->len);
        rc = 0;
        goto out;
    }
    entry = json_entry(c, command, args, n);
    if (entry == NULL || servers == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
        goto out;
    }
    if (old != NULL && cJSON_IsObject(old)) {
        /* keep what the user added (env, timeout, ...); replace what starts drun */
        cJSON *k;
        cJSON_ArrayForEach(k, entry)
        {
            cJSON *dup = cJSON_Duplicate(k, 1);
            if (dup == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(old, k->string, dup)) {
                if (dup != NULL && !cJSON_AddItemToObject(old, k->string, dup)) {
                    cJSON_Delete(dup);
                }
            }
        }
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(servers, SERVER_NAME);
        cJSON_AddItemToObject(servers, SERVER_NAME, entry);
        entry = NULL;
    }
    printed = cJSON_Print(root);
    if (printed == NULL) {
        err_set(err, ERR_NOMEM, "out of memory");
        goto out;
    }
    buf_puts(out, printed);
    buf_putc(out, '\n');
    *changed = 1;
    rc = buf_failed(out) ? err_set(err, ERR_NOMEM, "out of memory") : 0;
out:
    cJSON_free(printed);
    cJSON_Delete(entry);
    cJSON_Delete(root);
    return rc;
}

/* Copies the old text to path.drun-backup (replacing an older backup). */
static int
backup(const char *path, const struct buf *text, mode_t mode, struct buf *bak, struct err *err)
{
    buf_reset(bak);
    buf_printf(bak, "%s.drun-backup", path);
    if (buf_failed(bak)) {
        return err_set(err, ERR_INVAL, "'%s' is too long", path);
    }
    return policy_write_atomic(buf_cstr(bak), text->data ? text->data : "", text->len, mode, err);
}

/* The entry as it would read in the client's file (dry run). */
static void
print_entry(const struct client *c, const char *command, const char *const *args, size_t n)
{
    if (c->fmt == FMT_TOML) {
        struct buf b;
        struct err err;
        int changed;

        buf_init(&b, 1 << 20);
        if (policy_toml_set_server("", 0, "(entry)", c->key, SERVER_NAME, command, args, n, &b,
                                   &changed, &err) == 0) {
            fputs(buf_cstr(&b), stdout);
        }
        buf_release(&b);
    } else {
        cJSON *e = json_entry(c, command, args, n);
        char *text = e != NULL ? cJSON_Print(e) : NULL;
        if (text != NULL) {
            printf("\"%s\": { \"%s\": %s }\n", c->key, SERVER_NAME, text);
        }
        cJSON_free(text);
        cJSON_Delete(e);
    }
}

int
drun_mcp_init_main(int argc, char **argv, const char *db, const char *config)
{
    static const struct option longopts[] = {
        {"db", required_argument, NULL, 'd'},   {"config", required_argument, NULL, 'c'},
        {"file", required_argument, NULL, 'f'}, {"dry-run", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0}};
    const struct client *c = NULL;
    const char *file = NULL;
    char *db_abs = NULL, *config_abs = NULL, *file_abs = NULL;
    char self[INIT_PATH_MAX], real[PATH_MAX];
    const char *args[4];
    size_t n_args = 0;
    struct buf path, text, out, bak;
    int dry = 0, exists = 0, changed = 0, rc = 1, opt;
    mode_t mode = 0600;
    struct err err;

    buf_init(&path, INIT_PATH_MAX);
    buf_init(&text, INIT_FILE_MAX);
    buf_init(&out, INIT_FILE_MAX + 4096);
    buf_init(&bak, INIT_PATH_MAX + 16);
    /* argv[0] is the client (or an option); getopt permutes, so options may come first */
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc + 1, argv - 1, ":h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd':
            db = optarg;
            break;
        case 'c':
            config = optarg;
            break;
        case 'f':
            file = optarg;
            break;
        case 'n':
            dry = 1;
            break;
        case 'h':
            usage(stdout);
            rc = 0;
            goto done;
        default:
            fprintf(stderr, "drun-mcp init: unknown option or missing value '%s'\n",
                    argv[optind - 2]);
            usage(stderr);
            rc = 2;
            goto done;
        }
    }
    if (optind - 1 != argc - 1) {
        fprintf(stderr,
                "drun-mcp init: name one client: claude, codex, gemini, cursor or vscode\n");
        usage(stderr);
        rc = 2;
        goto done;
    }
    for (size_t i = 0; i < sizeof(clients) / sizeof(clients[0]); i++) {
        if (strcmp(argv[optind - 1], clients[i].name) == 0) {
            c = &clients[i];
        }
    }
    if (c == NULL) {
        fprintf(stderr,
                "drun-mcp init: unknown client '%s'; use claude, codex, gemini, cursor or vscode\n",
                argv[optind - 1]);
        rc = 2;
        goto done;
    }
    if (db == NULL || db[0] == '\0') {
        db = getenv("DRUN_DB");
    }
    if (db == NULL || db[0] == '\0') {
        db = "~/.drun/drun.db";
    }
    if ((db_abs = absolute(db, &err)) == NULL ||
        (config != NULL && (config_abs = absolute(config, &err)) == NULL) ||
        (file != NULL && (file_abs = absolute(file, &err)) == NULL) ||
        self_path(self, sizeof(self), &err) < 0 ||
        (file_abs == NULL && client_file(c, &path, &err) < 0)) {
        fprintf(stderr, "drun-mcp init: %s\n", err.msg);
        goto done;
    }
    if (file_abs != NULL) {
        buf_puts(&path, file_abs);
    }
    /* A linked dotfile is edited where it lives, and stays a link. */
    if (realpath(buf_cstr(&path), real) != NULL) {
        buf_reset(&path);
        buf_puts(&path, real);
    }
    args[n_args++] = "--db";
    args[n_args++] = db_abs;
    if (config_abs != NULL) {
        args[n_args++] = "--config";
        args[n_args++] = config_abs;
    }
    if (read_whole(buf_cstr(&path), &text, &exists, &mode, &err) < 0) {
        fprintf(stderr, "drun-mcp init: %s; nothing was changed\n", err.msg);
        goto done;
    }
    if (c->fmt == FMT_TOML) {
        if (policy_toml_set_server(text.data ? text.data : "", text.len, buf_cstr(&path), c->key,
                                   SERVER_NAME, self, args, n_args, &out, &changed, &err) < 0) {
            fprintf(stderr, "drun-mcp init: %s; nothing was changed\n", err.msg);
            goto done;
        }
    } else if (edit_json(c, buf_cstr(&path), &text, self, args, n_args, &out, &changed, &err) < 0) {
        fprintf(stderr, "drun-mcp init: %s\n", err.msg);
        goto done;
    }
    if (!changed) {
        printf("%s already starts drun as '%s --db %s' in '%s'; nothing to do\n", c->what, self,
               db_abs, buf_cstr(&path));
        rc = 0;
        goto done;
    }
    if (dry) {
        /* the entry, not the whole file: ~/.claude.json holds the client's history too */
        printf("would %s the MCP server '%s' in '%s' (%s)%s:\n",
               exists ? "set" : "create the file with", SERVER_NAME, buf_cstr(&path), c->what,
               exists ? ", keeping everything else, after copying it to FILE.drun-backup" : "");
        print_entry(c, self, args, n_args);
        printf("(dry run: nothing was written)\n");
        rc = 0;
        goto done;
    }
    if (exists && backup(buf_cstr(&path), &text, mode, &bak, &err) < 0) {
        fprintf(stderr, "drun-mcp init: cannot back up '%s': %s; nothing was changed\n",
                buf_cstr(&path), err.msg);
        goto done;
    }
    if (!exists) {
        int made = 0;
        char top[INIT_PATH_MAX];
        if (userpath_make_parent(buf_cstr(&path), &made, top, sizeof(top), &err) < 0) {
            fprintf(stderr, "drun-mcp init: %s\n", err.msg);
            goto done;
        }
    }
    if (policy_write_atomic(buf_cstr(&path), buf_cstr(&out), out.len, mode, &err) < 0) {
        fprintf(stderr, "drun-mcp init: %s\n", err.msg);
        goto done;
    }
    printf("added the MCP server '%s' to '%s' (%s): %s --db %s\n", SERVER_NAME, buf_cstr(&path),
           c->what, self, db_abs);
    if (exists) {
        printf("the previous file is in '%s'\n", buf_cstr(&bak));
    }
    printf("restart %s to pick it up\n", c->what);
    rc = 0;
done:
    fflush(stdout);
    mem_free(db_abs);
    mem_free(config_abs);
    mem_free(file_abs);
    buf_release(&path);
    buf_release(&text);
    buf_release(&out);
    buf_release(&bak);
    return rc;
}
