/*
 * test_policy.c - config.toml parsing and validation, the reloading store, allowlist
 * matching, host-path checks and the in-place config editor.
 */
#include "test.h"

#include <limits.h>

#include "policy/policy.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/mem.h"

static void
write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static char *
read_text(const char *path)
{
    static char data[65536];
    FILE *f = fopen(path, "r");
    size_t n;

    CHECK_MSG(f != NULL, "cannot read %s", path);
    n = fread(data, 1, sizeof(data) - 1, f);
    data[n] = '\0';
    fclose(f);
    return data;
}

static struct policy *
parse_ok(const char *text)
{
    struct policy *p = NULL;
    struct err err;

    err_clear(&err);
    CHECK_OK(policy_parse(text, strlen(text), "t.toml", &p, &err), &err);
    return p;
}

/* Parses text expecting failure whose message contains every given fragment. */
static void
parse_fails(const char *text, const char *frag1, const char *frag2)
{
    struct policy *p = NULL;
    struct err err;

    err_clear(&err);
    CHECK_MSG(policy_parse(text, strlen(text), "t.toml", &p, &err) < 0, "accepted: %s", text);
    CHECK(p == NULL);
    CHECK_MSG(strstr(err.msg, frag1) != NULL, "'%s' not in '%s'", frag1, err.msg);
    if (frag2 != NULL) {
        CHECK_MSG(strstr(err.msg, frag2) != NULL, "'%s' not in '%s'", frag2, err.msg);
    }
}

TEST(defaults_follow_the_reference)
{
    struct policy *p = policy_defaults();

    CHECK(p != NULL);
    CHECK_EQ_INT(p->domain_allowlist.n, 3);
    CHECK_EQ_STR(p->domain_allowlist.v[2], "pypi.org");
    CHECK_EQ_INT(p->bash_timeout_ms, 30000);
    CHECK_EQ_INT(p->fetch_timeout_ms, 60000);
    CHECK_EQ_INT(p->connect_timeout_ms, 30000);
    CHECK_EQ_INT(p->package_install_timeout_ms, 180000);
    CHECK_EQ_INT(p->max_workspace_mb, 512);
    CHECK_EQ_INT(p->max_sessions, 50);
    CHECK_EQ_INT(p->max_checkpoints, 200);
    CHECK_EQ_INT(p->session_idle_timeout_secs, 3600);
    CHECK_EQ_INT(p->max_output_bytes, 16 << 20);
    CHECK_EQ_INT(p->mount_allowlist.n, 0);
    CHECK_EQ_INT(p->mount_overlay_paths.n, 6);
    CHECK_EQ_INT(p->sqlite_synchronous, POLICY_SYNC_FULL);
    CHECK(p->db_path == NULL);
    CHECK(p->runtime_dir != NULL && p->runtime_dir[0] == '/');
    CHECK(p->source_path == NULL);
    policy_unref(p);
}

TEST(parses_every_field)
{
    struct policy *p = parse_ok(
        "domain_allowlist = [\"Example.COM.\", \"*.foo.org\"]\n"
        "fetch_timeout_ms = 5\nconnect_timeout_ms = 6\nfetch_max_bytes = 7\n"
        "fetch_allow_private = true\nfetch_allow_cidrs = [\"10.0.0.0/8\", \"::1\"]\n"
        "fetch_resolve = [\"a.test:443:127.0.0.1,[::1]\"]\n"
        "bash_timeout_ms = 8\npackage_install_enabled = true\n"
        "package_install_timeout_ms = 9\nbash_command_denylist = [\"rm -rf\"]\n"
        "bash_command_allowlist = [\"ls\"]\nmax_output_bytes = 10\nsandbox_memory_mb = 11\n"
        "sandbox_cpu_secs = 12\nsandbox_file_size_mb = 13\nsandbox_max_processes = 14\n"
        "sandbox_tmp_size_mb = 15\nmax_workspace_mb = 16\nmax_sessions = 17\n"
        "max_checkpoints = 18\nsession_idle_timeout_secs = 19\n"
        "mount_allowlist = [\"/srv//data/\", \"/x/./y\"]\nmount_overlay_paths = "
        "[\"node_modules\"]\n"
        "env_allowlist = [\"HOME\", \"MY_VAR\"]\nsnapshots_dir = \"/snaps\"\n"
        "snapshot_on_close = true\ndb_path = \"/db/drun.db\"\nruntime_dir = \"/run/d\"\n"
        "sqlite_synchronous = \"normal\"\n"
        "[[fetch_credentials]]\ndomain = \"API.example.com\"\nheader = \"Authorization\"\n"
        "env = \"TOKEN\"\n");

    CHECK_EQ_INT(p->domain_allowlist.n, 2);
    CHECK_EQ_STR(p->domain_allowlist.v[0], "example.com");
    CHECK_EQ_STR(p->domain_allowlist.v[1], "*.foo.org");
    CHECK_EQ_INT(p->fetch_timeout_ms, 5);
    CHECK_EQ_INT(p->connect_timeout_ms, 6);
    CHECK_EQ_INT(p->fetch_max_bytes, 7);
    CHECK_EQ_INT(p->fetch_allow_private, 1);
    CHECK_EQ_INT(p->fetch_allow_cidrs.n, 2);
    CHECK_EQ_STR(p->fetch_resolve.v[0], "a.test:443:127.0.0.1,[::1]");
    CHECK_EQ_INT(p->bash_timeout_ms, 8);
    CHECK_EQ_INT(p->package_install_enabled, 1);
    CHECK_EQ_INT(p->package_install_timeout_ms, 9);
    CHECK_EQ_STR(p->bash_command_denylist.v[0], "rm -rf");
    CHECK_EQ_STR(p->bash_command_allowlist.v[0], "ls");
    CHECK_EQ_INT(p->max_output_bytes, 10);
    CHECK_EQ_INT(p->sandbox_memory_mb, 11);
    CHECK_EQ_INT(p->sandbox_cpu_secs, 12);
    CHECK_EQ_INT(p->sandbox_file_size_mb, 13);
    CHECK_EQ_INT(p->sandbox_max_processes, 14);
    CHECK_EQ_INT(p->sandbox_tmp_size_mb, 15);
    CHECK_EQ_INT(p->max_workspace_mb, 16);
    CHECK_EQ_INT(p->max_sessions, 17);
    CHECK_EQ_INT(p->max_checkpoints, 18);
    CHECK_EQ_INT(p->session_idle_timeout_secs, 19);
    CHECK_EQ_STR(p->mount_allowlist.v[0], "/srv/data");
    CHECK_EQ_STR(p->mount_allowlist.v[1], "/x/y");
    CHECK_EQ_INT(p->mount_overlay_paths.n, 1);
    CHECK_EQ_STR(p->env_allowlist.v[1], "MY_VAR");
    CHECK_EQ_STR(p->snapshots_dir, "/snaps");
    CHECK_EQ_INT(p->snapshot_on_close, 1);
    CHECK_EQ_STR(p->db_path, "/db/drun.db");
    CHECK_EQ_STR(p->runtime_dir, "/run/d");
    CHECK_EQ_INT(p->sqlite_synchronous, POLICY_SYNC_NORMAL);
    CHECK_EQ_INT(p->fetch_credentials_n, 1);
    CHECK_EQ_STR(p->fetch_credentials[0].domain, "api.example.com");
    CHECK_EQ_STR(p->fetch_credentials[0].header, "Authorization");
    CHECK_EQ_STR(p->fetch_credentials[0].env, "TOKEN");
    CHECK_EQ_INT(p->warnings.n, 0);
    policy_unref(p);
}

TEST(empty_lists_stay_empty_and_absent_keys_keep_defaults)
{
    struct policy *p = parse_ok("domain_allowlist = []\n");

    CHECK_EQ_INT(p->domain_allowlist.n, 0);
    CHECK_EQ_INT(p->mount_overlay_paths.n, 6);
    policy_unref(p);
    p = parse_ok("");
    CHECK_EQ_INT(p->domain_allowlist.n, 3); /* pypi.org, files.pythonhosted.org, cdn.jsdelivr.net */
    policy_unref(p);
}

TEST(syntax_errors_carry_line_and_column)
{
    parse_fails("bash_timeout_ms = 1\nmount_allowlist = [\"/a\",\n b = 2\n", "line 3, column",
                "t.toml");
    parse_fails("a = 1\na = 2\n", "line 2", NULL);
    parse_fails("x = \"unterminated\n", "line 1", NULL);
}

TEST(validation_names_the_key)
{
    parse_fails("bash_timeout_ms = -5\n", "'bash_timeout_ms' (line 1", "-5");
    parse_fails("bash_timeout_ms = \"30\"\n", "'bash_timeout_ms'", "not string");
    parse_fails("bash_timeout_ms = 1.5\n", "'bash_timeout_ms'", "not float");
    parse_fails("max_sessions = 0\n", "'max_sessions'", "from 1 to");
    parse_fails("package_install_enabled = 1\n", "'package_install_enabled'", "true or false");
    parse_fails("db_path = \"relative/drun.db\"\n", "'db_path'", "absolute");
    parse_fails("runtime_dir = \"/a/../b\"\n", "'runtime_dir'", "'..'");
    parse_fails("mount_allowlist = \"/a\"\n", "'mount_allowlist'", "array of strings");
    parse_fails("mount_allowlist = [\"/a\", \"b\"]\n", "'mount_allowlist' (line 1, column 26",
                "absolute");
    parse_fails("mount_allowlist = [\"/a\\nb\"]\n", "'mount_allowlist'", "control");
    parse_fails("mount_allowlist = [\"/a\\u0000b\"]\n", "'mount_allowlist'", "NUL");
    parse_fails("mount_allowlist = [1]\n", "'mount_allowlist'", "integer");
    parse_fails("domain_allowlist = [\"https://x.org\"]\n", "'domain_allowlist'", "URL");
    parse_fails("domain_allowlist = [\"a b\"]\n", "'domain_allowlist'", "host name");
    parse_fails("domain_allowlist = [\"\"]\n", "'domain_allowlist'", "empty");
    parse_fails("env_allowlist = [\"A-B\"]\n", "'env_allowlist'", "variable name");
    parse_fails("mount_overlay_paths = [\"a/b\"]\n", "'mount_overlay_paths'", "no '/'");
    parse_fails("bash_command_denylist = [\"\"]\n", "'bash_command_denylist'", "empty pattern");
    parse_fails("fetch_allow_cidrs = [\"10.0.0.0/33\"]\n", "'fetch_allow_cidrs'", NULL);
    parse_fails("fetch_allow_cidrs = [\"nope\"]\n", "'fetch_allow_cidrs'", NULL);
    parse_fails("fetch_resolve = [\"a.test:0:1.2.3.4\"]\n", "'fetch_resolve'", NULL);
    parse_fails("fetch_resolve = [\"a.test:443:notanip\"]\n", "'fetch_resolve'", NULL);
    parse_fails("sqlite_synchronous = \"off\"\n", "'sqlite_synchronous'", "\"full\"");
    parse_fails("[[fetch_credentials]]\ndomain = \"a.org\"\nheader = \"X\"\n",
                "'fetch_credentials'", "exactly");
    parse_fails("[[fetch_credentials]]\ndomain = \"a.org\"\nheader = \"X Y\"\nenv = \"T\"\n",
                "'fetch_credentials'", "header");
    parse_fails("[[fetch_credentials]]\ndomain = \"a.org\"\nheader = \"X\"\nenvv = \"T\"\n",
                "'fetch_credentials'", NULL);
}

TEST(limits_are_enforced_at_and_past_the_edge)
{
    struct policy *p;

    p = parse_ok("bash_timeout_ms = 1\nbash_timeout_ms_x = 0\n");
    CHECK_EQ_INT(p->bash_timeout_ms, 1);
    policy_unref(p);
    p = parse_ok("bash_timeout_ms = 86400000\nmax_output_bytes = 1073741824\n");
    CHECK_EQ_INT(p->bash_timeout_ms, 86400000);
    policy_unref(p);
    parse_fails("bash_timeout_ms = 0\n", "'bash_timeout_ms'", NULL);
    parse_fails("bash_timeout_ms = 86400001\n", "'bash_timeout_ms'", "86400001");
    parse_fails("max_output_bytes = 1073741825\n", "'max_output_bytes'", NULL);
    parse_fails("sandbox_memory_mb = -1\n", "'sandbox_memory_mb'", NULL);
    parse_fails("max_workspace_mb = 9223372036854775807\n", "'max_workspace_mb'", NULL);
    /* The sandbox user: never root (0), never (uid_t)-1 ("unchanged" to set*id calls). */
    p = parse_ok("sandbox_uid = 1\nsandbox_gid = 4294967294\n");
    CHECK_EQ_INT(p->sandbox_uid, 1);
    CHECK_EQ_INT(p->sandbox_gid, 4294967294LL);
    policy_unref(p);
    p = parse_ok("");
    CHECK_EQ_INT(p->sandbox_uid, 65534);
    CHECK_EQ_INT(p->sandbox_gid, 65534);
    policy_unref(p);
    parse_fails("sandbox_uid = 0\n", "'sandbox_uid'", NULL);
    parse_fails("sandbox_gid = 0\n", "'sandbox_gid'", NULL);
    parse_fails("sandbox_uid = 4294967295\n", "'sandbox_uid'", NULL);
    parse_fails("sandbox_uid = -1\n", "'sandbox_uid'", NULL);
}

TEST(unknown_keys_are_warnings)
{
    struct policy *p = parse_ok("bash_timeot_ms = 5\nweb_port = 7274\n[extra]\nx = 1\n");

    CHECK_EQ_INT(p->bash_timeout_ms, 30000);
    CHECK_EQ_INT(p->warnings.n, 3);
    CHECK(strstr(p->warnings.v[0], "'bash_timeot_ms' (line 1)") != NULL);
    CHECK(strstr(p->warnings.v[0], "unknown") != NULL);
    CHECK(strstr(p->warnings.v[1], "'extra'") != NULL);
    CHECK(strstr(p->warnings.v[2], "'web_port'") != NULL);
    CHECK(strstr(p->warnings.v[2], "not used by drun") != NULL);
    policy_unref(p);
}

TEST(config_path_order)
{
    char *path = NULL;
    int expl = -1;
    struct err err;

    setenv("HOME", "/home/tester", 1);
    unsetenv("DRUN_CONFIG");
    CHECK_OK(policy_config_path(NULL, &path, &expl, &err), &err);
    CHECK_EQ_STR(path, "/home/tester/.drun/config.toml");
    CHECK_EQ_INT(expl, 0);
    mem_free(path);
    setenv("DRUN_CONFIG", "/etc/drun.toml", 1);
    CHECK_OK(policy_config_path(NULL, &path, &expl, &err), &err);
    CHECK_EQ_STR(path, "/etc/drun.toml");
    CHECK_EQ_INT(expl, 1);
    mem_free(path);
    CHECK_OK(policy_config_path("/cli.toml", &path, &expl, &err), &err);
    CHECK_EQ_STR(path, "/cli.toml");
    CHECK_EQ_INT(expl, 1);
    mem_free(path);
    unsetenv("DRUN_CONFIG");
    unsetenv("HOME");
    CHECK(policy_config_path(NULL, &path, &expl, &err) < 0);
    CHECK(strstr(err.msg, "--config") != NULL);
}

TEST(store_uses_defaults_only_for_a_missing_default_file)
{
    struct policy_store *st = NULL;
    struct policy *p = NULL;
    struct policy_status s;
    struct err err;

    CHECK_OK(policy_store_open(test_path("none.toml"), 0, &st, &err), &err);
    CHECK_OK(policy_current(st, &p, &err), &err);
    CHECK(p->source_path == NULL);
    policy_store_status(st, &s);
    CHECK_EQ_INT(s.from_defaults, 1);
    policy_unref(p);
    policy_store_free(st);

    CHECK_OK(policy_store_open(test_path("none.toml"), 1, &st, &err), &err);
    CHECK(policy_current(st, &p, &err) < 0);
    CHECK(p == NULL);
    CHECK_EQ_INT(err.code, ERR_NOTFOUND);
    CHECK(strstr(err.msg, "none.toml") != NULL);
    policy_store_free(st);
}

TEST(store_keeps_the_last_good_policy_on_a_bad_edit)
{
    char cfg[PATH_MAX];

    snprintf(cfg, sizeof(cfg), "%s", test_path("config.toml"));
    struct policy_store *st = NULL;
    struct policy *p = NULL, *held = NULL;
    struct policy_status s;
    struct err err;

    write_text(cfg, "bash_timeout_ms = 1111\n");
    CHECK_OK(policy_store_open(cfg, 1, &st, &err), &err);
    CHECK_OK(policy_current(st, &held, &err), &err);
    CHECK_EQ_INT(held->bash_timeout_ms, 1111);
    CHECK_EQ_STR(held->source_path, cfg);

    /* A syntax error: the old policy stays, the error is visible with its position. */
    write_text(cfg, "bash_timeout_ms = 2222\nmount_allowlist = [\n");
    CHECK_EQ_INT(policy_refresh(st, &err), -1);
    CHECK(strstr(err.msg, "line 3") != NULL || strstr(err.msg, "line 2") != NULL);
    CHECK_OK(policy_current(st, &p, &err), &err);
    CHECK_EQ_INT(p->bash_timeout_ms, 1111);
    policy_unref(p);
    policy_store_status(st, &s);
    CHECK_EQ_INT(s.have_policy, 1);
    CHECK_EQ_INT(s.last_error.code, ERR_INVAL);
    CHECK(strstr(s.last_error.msg, "cannot parse") != NULL);

    /* Unchanged file: not re-read. */
    CHECK_EQ_INT(policy_refresh(st, &err), 0);

    /* A validation error is treated the same way. */
    write_text(cfg, "bash_timeout_ms = -1\n");
    CHECK_EQ_INT(policy_refresh(st, &err), -1);
    CHECK(strstr(err.msg, "'bash_timeout_ms'") != NULL);
    CHECK_OK(policy_current(st, &p, &err), &err);
    CHECK_EQ_INT(p->bash_timeout_ms, 1111);
    policy_unref(p);

    /* Removing the file does not revert to defaults either. */
    unlink(cfg);
    CHECK_EQ_INT(policy_refresh(st, &err), -1);
    CHECK_OK(policy_current(st, &p, &err), &err);
    CHECK_EQ_INT(p->bash_timeout_ms, 1111);
    policy_unref(p);

    /* Fixed: the new policy applies on the next call; the held snapshot is unchanged. */
    write_text(cfg, "bash_timeout_ms = 3333\n");
    CHECK_OK(policy_current(st, &p, &err), &err);
    CHECK_EQ_INT(p->bash_timeout_ms, 3333);
    policy_store_status(st, &s);
    CHECK_EQ_INT(s.last_error.code, ERR_OK);
    CHECK_EQ_INT(held->bash_timeout_ms, 1111);
    policy_unref(p);
    policy_unref(held);
    policy_store_free(st);
}

TEST(store_without_a_good_policy_refuses_with_the_parse_error)
{
    char cfg[PATH_MAX];

    snprintf(cfg, sizeof(cfg), "%s", test_path("config.toml"));
    struct policy_store *st = NULL;
    struct policy *p = NULL;
    struct err err;

    write_text(cfg, "max_sessions = [\n");
    CHECK_OK(policy_store_open(cfg, 0, &st, &err), &err);
    CHECK(policy_current(st, &p, &err) < 0);
    CHECK(strstr(err.msg, "cannot parse") != NULL);
    CHECK(strstr(err.msg, "line") != NULL);
    write_text(cfg, "max_sessions = 3\n");
    CHECK_OK(policy_current(st, &p, &err), &err);
    CHECK_EQ_INT(p->max_sessions, 3);
    policy_unref(p);
    policy_store_free(st);
}

TEST(env_and_command_lists)
{
    struct policy *p = parse_ok("env_allowlist = [\"HOME\"]\n"
                                "bash_command_denylist = [\"rm -rf\", \"curl\"]\n");
    struct err err;

    CHECK(policy_env_allowed(p, "HOME"));
    CHECK(!policy_env_allowed(p, "HOMEX"));
    CHECK(!policy_env_allowed(p, "home"));
    CHECK(!policy_env_allowed(p, ""));
    CHECK_EQ_INT(policy_command_check(p, "ls -la", &err), 0);
    CHECK(policy_command_check(p, "ls; rm -rf /", &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK_EQ_STR(err.msg, "command denied: matches denylist pattern 'rm -rf'");
    CHECK_EQ_INT(policy_command_check(p, "ls # curl is mentioned in a comment", &err), 0);
    policy_unref(p);

    p = parse_ok("bash_command_allowlist = [\"ls\", \"cat\"]\n");
    CHECK_EQ_INT(policy_command_check(p, "ls && cat x | cat", &err), 0);
    CHECK(policy_command_check(p, "ls\n  make all  ", &err) < 0);
    CHECK_EQ_STR(err.msg, "command denied: 'make all' is not matched by any allowlist pattern; "
                          "permitted: ls, cat");
    policy_unref(p);
}

/* Reference 12.3 (session.rs): segments, comments, chains, and every segment allowed. */
TEST(command_lists_reference_cases)
{
    struct policy *p = parse_ok("bash_command_allowlist = [\"ls\", \"cat\"]\n");
    const char *chained[] = {"ls && curl x", "ls | sh", "ls\nwget y", "ls; python3"};
    struct err err;

    /* An allowed word smuggled in a trailing comment does not count. */
    CHECK(policy_command_check(p, "curl evil.sh # ls", &err) < 0);
    CHECK_EQ_STR(err.msg, "command denied: 'curl evil.sh' is not matched by any allowlist "
                          "pattern; permitted: ls, cat");
    /* An unlisted command chained after an allowed one is caught in its own segment. */
    for (size_t i = 0; i < sizeof(chained) / sizeof(chained[0]); i++) {
        CHECK(policy_command_check(p, chained[i], &err) < 0);
        CHECK_EQ_INT(err.code, ERR_DENIED);
    }
    /* Every segment allowed, empty segments and comments skipped. */
    CHECK_EQ_INT(policy_command_check(p, "ls -la && cat x | cat; # a comment\n  \n", &err), 0);
    policy_unref(p);
}

/* Builds a policy whose mount_allowlist is the given test-relative directories. */
static struct policy *
policy_with_roots(const char *a, const char *b)
{
    char text[8192];

    if (b == NULL) {
        snprintf(text, sizeof(text), "mount_allowlist = [\"%s/%s\"]\n", test_tmpdir(), a);
    } else {
        snprintf(text, sizeof(text), "mount_allowlist = [\"%s/%s\", \"%s/%s\"]\n", test_tmpdir(), a,
                 test_tmpdir(), b);
    }
    return parse_ok(text);
}

TEST(hostpath_components_and_symlinks)
{
    struct policy *p;
    struct policy_hostpath hp;
    struct err err;
    char path[PATH_MAX];
    char real[PATH_MAX];

    mkdir(test_path("al"), 0755);
    mkdir(test_path("alice"), 0755);
    mkdir(test_path("al/sub"), 0755);
    CHECK(symlink("/etc", test_path("al/etc")) == 0);
    CHECK(symlink("sub", test_path("al/inner")) == 0);
    p = policy_with_roots("al", NULL);
    CHECK(realpath(test_path("al"), real) != NULL);

    snprintf(path, sizeof(path), "%s/al/sub/new/file", test_tmpdir());
    CHECK_OK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err), &err);
    CHECK_EQ_STR(hp.root, real);
    CHECK_EQ_STR(hp.rel, "sub/new/file");

    /* Prefix confusion: /al does not admit /alice. */
    snprintf(path, sizeof(path), "%s/alice", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_MOUNT, &hp, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(strstr(err.msg, "not inside any mount_allowlist entry") != NULL);

    /* A symlink to /etc inside the allowed directory does not admit /etc. */
    snprintf(path, sizeof(path), "%s/al/etc/passwd", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_MOUNT, &hp, &err) < 0);
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);

    /* A link that stays inside resolves to its target. */
    snprintf(path, sizeof(path), "%s/al/inner/x", test_tmpdir());
    CHECK_OK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err), &err);
    CHECK_EQ_STR(hp.rel, "sub/x");

    /* delete_from_host removes a link as a link: /etc is not what is checked. */
    snprintf(path, sizeof(path), "%s/al/etc", test_tmpdir());
    CHECK_OK(policy_hostpath_check(p, path, POLICY_DOOR_DELETE, &hp, &err), &err);
    CHECK_EQ_STR(hp.rel, "etc");

    /* Malformed requests. */
    CHECK(policy_hostpath_check(p, "relative/path", POLICY_DOOR_MOUNT, &hp, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    snprintf(path, sizeof(path), "%s/al/../alice", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_INVAL);
    snprintf(path, sizeof(path), "%s/al/a\nb", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err) < 0);
    CHECK(strstr(err.msg, "control character") != NULL);

    /* The allowlist entry itself and "/" are never deleted. */
    snprintf(path, sizeof(path), "%s/al", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_DELETE, &hp, &err) < 0);
    CHECK(strstr(err.msg, "allowlist entry itself") != NULL);
    snprintf(path, sizeof(path), "%s/al/", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_DELETE, &hp, &err) < 0);
    CHECK(policy_hostpath_check(p, "/", POLICY_DOOR_DELETE, &hp, &err) < 0);
    CHECK(policy_hostpath_check(p, "//", POLICY_DOOR_DELETE, &hp, &err) < 0);
    /* but exporting into the entry itself is fine */
    snprintf(path, sizeof(path), "%s/al", test_tmpdir());
    CHECK_OK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err), &err);
    CHECK_EQ_STR(hp.rel, "");
    policy_unref(p);
}

TEST(hostpath_empty_allowlist_reads_anywhere_writes_nowhere)
{
    struct policy *p = parse_ok("mount_allowlist = []\n");
    struct policy_hostpath hp;
    struct err err;

    CHECK_OK(policy_hostpath_check(p, "/etc/hostname", POLICY_DOOR_MOUNT, &hp, &err), &err);
    CHECK_EQ_STR(hp.root, "");
    CHECK(policy_hostpath_check(p, test_path("x"), POLICY_DOOR_EXPORT, &hp, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    CHECK(strstr(err.msg, "mount_allowlist is empty") != NULL);
    CHECK(policy_hostpath_check(p, test_path("x"), POLICY_DOOR_DELETE, &hp, &err) < 0);
    CHECK_EQ_INT(err.code, ERR_DENIED);
    policy_unref(p);
}

TEST(hostpath_entry_that_is_a_symlink_or_missing)
{
    struct policy *p;
    struct policy_hostpath hp;
    struct err err;
    char path[PATH_MAX];

    char target[PATH_MAX];

    mkdir(test_path("real"), 0755);
    snprintf(target, sizeof(target), "%s", test_path("real"));
    CHECK(symlink(target, test_path("link")) == 0);
    p = policy_with_roots("link", "missing");
    /* An entry that is a link admits its target's contents. */
    snprintf(path, sizeof(path), "%s/real/f", test_tmpdir());
    CHECK_OK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err), &err);
    CHECK_EQ_STR(hp.rel, "f");
    /* An entry that does not exist admits nothing. */
    snprintf(path, sizeof(path), "%s/missing/f", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_EXPORT, &hp, &err) < 0);
    /* Deleting the entry (by its link name) is refused. */
    snprintf(path, sizeof(path), "%s/link", test_tmpdir());
    CHECK(policy_hostpath_check(p, path, POLICY_DOOR_DELETE, &hp, &err) < 0);
    policy_unref(p);
}

static const char commented[] = "# my drun config\n"
                                "\n"
                                "bash_timeout_ms = 45000   # longer builds\n"
                                "\n"
                                "# where agents may write\n"
                                "mount_allowlist = [\n"
                                "    \"/srv/one\",  # first\n"
                                "]\n"
                                "domain_allowlist = [\"pypi.org\"] # trailing comment\n"
                                "\n"
                                "[[fetch_credentials]]\n"
                                "domain = \"api.example.com\"  # creds\n"
                                "header = \"Authorization\"\n"
                                "env = \"TOKEN\"\n";

TEST(edit_keeps_comments_and_layout)
{
    char cfg[PATH_MAX];

    snprintf(cfg, sizeof(cfg), "%s", test_path("config.toml"));
    struct buf msg;
    struct err err;
    char *after;
    const char *tail = "\ndomain_allowlist = [\"pypi.org\"] # trailing comment\n";

    mkdir(test_path("data"), 0755);
    write_text(cfg, commented);
    chmod(cfg, 0640);
    buf_init(&msg, 4096);
    CHECK_OK(policy_edit_list(cfg, "mount_allowlist", "/srv/two", 1, &msg, &err), &err);
    CHECK(strstr(buf_cstr(&msg), "added '/srv/two'") != NULL);
    after = read_text(cfg);
    /* Everything before and after the array is byte for byte the same. */
    CHECK(strncmp(after, commented, strstr(commented, "mount_allowlist = [") - commented + 18) ==
          0);
    CHECK(strstr(after, "[\n    \"/srv/one\",\n    \"/srv/two\",\n]") != NULL);
    CHECK(strstr(after, tail) != NULL);
    CHECK(strcmp(strstr(after, tail), strstr(commented, tail)) == 0);
    {
        struct stat sb;
        CHECK(stat(cfg, &sb) == 0);
        CHECK_EQ_INT(sb.st_mode & 0777, 0640);
    }

    /* Idempotent, with a clear message and no write. */
    buf_reset(&msg);
    CHECK_OK(policy_edit_list(cfg, "mount_allowlist", "/srv/two", 1, &msg, &err), &err);
    CHECK_EQ_STR(buf_cstr(&msg), "'/srv/two' is already in mount_allowlist; nothing to do\n");

    /* Removing both entries leaves an empty multi-line array, the rest intact. */
    CHECK_OK(policy_edit_list(cfg, "mount_allowlist", "/srv/two", 0, &msg, &err), &err);
    CHECK_OK(policy_edit_list(cfg, "mount_allowlist", "/srv/one", 0, &msg, &err), &err);
    buf_reset(&msg);
    CHECK_OK(policy_edit_list(cfg, "mount_allowlist", "/srv/one", 0, &msg, &err), &err);
    CHECK_EQ_STR(buf_cstr(&msg), "'/srv/one' is not in mount_allowlist; nothing to do\n");
    after = read_text(cfg);
    CHECK(strstr(after, "mount_allowlist = []\ndomain_allowlist") != NULL);

    /* A one-line array stays one line; comments after it survive. */
    CHECK_OK(policy_edit_list(cfg, "domain_allowlist", "*.example.org", 1, &msg, &err), &err);
    after = read_text(cfg);
    CHECK(strstr(after,
                 "domain_allowlist = [\"pypi.org\", \"*.example.org\"] # trailing comment\n") !=
          NULL);
    CHECK(strstr(after, "# my drun config\n\nbash_timeout_ms = 45000   # longer builds\n") ==
          after);
    buf_release(&msg);
}

TEST(edit_adds_an_absent_key_at_the_root)
{
    char cfg[PATH_MAX];

    snprintf(cfg, sizeof(cfg), "%s", test_path("config.toml"));
    struct policy *p = NULL;
    struct buf msg;
    struct err err;

    write_text(cfg, "# top\nmax_sessions = 4\n\n[[fetch_credentials]]\ndomain = \"a.org\"\n"
                    "header = \"X\"\nenv = \"T\"\n");
    buf_init(&msg, 4096);
    CHECK_OK(policy_edit_list(cfg, "mount_allowlist", "/srv/q\"x", 1, &msg, &err), &err);
    CHECK_OK(policy_load_file(cfg, &p, &err), &err);
    CHECK_EQ_INT(p->mount_allowlist.n, 1);
    CHECK_EQ_STR(p->mount_allowlist.v[0], "/srv/q\"x");
    CHECK_EQ_INT(p->fetch_credentials_n, 1);
    CHECK_EQ_INT(p->max_sessions, 4);
    CHECK(strstr(read_text(cfg), "# top\nmax_sessions = 4\n\n") != NULL);
    policy_unref(p);
    buf_release(&msg);
}

TEST(edit_creates_a_commented_file_and_refuses_a_broken_one)
{
    char cfg[PATH_MAX];

    snprintf(cfg, sizeof(cfg), "%s", test_path("sub/config.toml"));
    struct policy *p = NULL;
    struct buf msg;
    struct err err;
    char before[4096];

    buf_init(&msg, 4096);
    CHECK_OK(policy_edit_list(cfg, "mount_allowlist", "/srv/a", 1, &msg, &err), &err);
    CHECK(strstr(buf_cstr(&msg), "created") != NULL);
    CHECK(strstr(read_text(cfg), "# bash_timeout_ms = 30000") != NULL);
    CHECK_OK(policy_load_file(cfg, &p, &err), &err);
    CHECK_EQ_INT(p->mount_allowlist.n, 1);
    CHECK_EQ_INT(p->domain_allowlist.n, 3);
    CHECK_EQ_INT(p->warnings.n, 0);
    policy_unref(p);

    /* A removal from a missing file creates nothing. */
    CHECK_OK(policy_edit_list(test_path("nofile.toml"), "mount_allowlist", "/a", 0, &msg, &err),
             &err);
    CHECK(access(test_path("nofile.toml"), F_OK) < 0);

    write_text(cfg, "mount_allowlist = [\"/a\"\n# broken\n");
    snprintf(before, sizeof(before), "%s", read_text(cfg));
    CHECK(policy_edit_list(cfg, "mount_allowlist", "/b", 1, &msg, &err) < 0);
    CHECK(strstr(err.msg, "fix the file first") != NULL);
    CHECK(strstr(err.msg, "line") != NULL);
    CHECK_EQ_STR(read_text(cfg), before);

    write_text(cfg, "mount_allowlist = \"/a\"\n");
    CHECK(policy_edit_list(cfg, "mount_allowlist", "/b", 1, &msg, &err) < 0);
    CHECK(strstr(err.msg, "not an array") != NULL);
    CHECK_EQ_STR(read_text(cfg), "mount_allowlist = \"/a\"\n");
    buf_release(&msg);
}

TEST(config_cli)
{
    char cfg[PATH_MAX];

    snprintf(cfg, sizeof(cfg), "%s", test_path("c.toml"));
    char *dir = NULL;
    char real[PATH_MAX];
    char buf[8192];
    FILE *out;
    struct err err;
    struct policy *p = NULL;

    mkdir(test_path("proj"), 0755);
    CHECK(realpath(test_path("proj"), real) != NULL);
    dir = mem_strdup(test_path("proj/."));
    {
        char *argv[] = {"add-path", dir, "--config", (char *)cfg};
        out = fmemopen(buf, sizeof(buf), "w");
        CHECK_OK(policy_config_cli(4, argv, NULL, out, &err), &err);
        fclose(out);
        CHECK(strstr(buf, "added") != NULL);
    }
    CHECK_OK(policy_load_file(cfg, &p, &err), &err);
    CHECK_EQ_STR(p->mount_allowlist.v[0], real);
    policy_unref(p);
    {
        char *argv[] = {"add-domain", "Example.ORG."};
        out = fmemopen(buf, sizeof(buf), "w");
        CHECK_OK(policy_config_cli(2, argv, cfg, out, &err), &err);
        fclose(out);
    }
    {
        char *argv[] = {"list"};
        out = fmemopen(buf, sizeof(buf), "w");
        CHECK_OK(policy_config_cli(1, argv, cfg, out, &err), &err);
        fclose(out);
        CHECK(strstr(buf, real) != NULL);
        CHECK(strstr(buf, "  example.org\n") != NULL);
    }
    {
        char *argv[] = {"add-path", "/definitely/not/here"};
        CHECK(policy_config_cli(2, argv, cfg, stdout, &err) < 0);
        CHECK(strstr(err.msg, "'/definitely/not/here'") != NULL);
    }
    {
        char *argv[] = {"add-path", "/"};
        CHECK(policy_config_cli(2, argv, cfg, stdout, &err) < 0);
        CHECK_EQ_INT(err.code, ERR_DENIED);
    }
    {
        char *argv[] = {"add-domain", "https://x.org/"};
        CHECK(policy_config_cli(2, argv, cfg, stdout, &err) < 0);
        CHECK(strstr(err.msg, "URL") != NULL);
    }
    {
        char *argv[] = {"add-path"};
        CHECK(policy_config_cli(1, argv, cfg, stdout, &err) < 0);
        CHECK(strstr(err.msg, "usage: ") != NULL);
    }
    {
        char *argv[] = {"frobnicate", "x"};
        CHECK(policy_config_cli(2, argv, cfg, stdout, &err) < 0);
        CHECK(strstr(err.msg, "'frobnicate'") != NULL);
    }
    {
        char *argv[] = {"remove-path", real};
        out = fmemopen(buf, sizeof(buf), "w");
        CHECK_OK(policy_config_cli(2, argv, cfg, out, &err), &err);
        fclose(out);
        CHECK(strstr(buf, "removed") != NULL);
    }
    {
        char *argv[] = {"list", "--config", (char *)test_path("absent.toml")};
        out = fmemopen(buf, sizeof(buf), "w");
        CHECK_OK(policy_config_cli(3, argv, NULL, out, &err), &err);
        fclose(out);
        CHECK(strstr(buf, "does not exist") != NULL);
        CHECK(strstr(buf, "session_export and delete_from_host are refused") != NULL);
    }
    mem_free(dir);
}

TESTS(defaults_follow_the_reference, parses_every_field,
      empty_lists_stay_empty_and_absent_keys_keep_defaults, syntax_errors_carry_line_and_column,
      validation_names_the_key, limits_are_enforced_at_and_past_the_edge, unknown_keys_are_warnings,
      config_path_order, store_uses_defaults_only_for_a_missing_default_file,
      store_keeps_the_last_good_policy_on_a_bad_edit,
      store_without_a_good_policy_refuses_with_the_parse_error, env_and_command_lists,
      command_lists_reference_cases, hostpath_components_and_symlinks,
      hostpath_empty_allowlist_reads_anywhere_writes_nowhere,
      hostpath_entry_that_is_a_symlink_or_missing, edit_keeps_comments_and_layout,
      edit_adds_an_absent_key_at_the_root, edit_creates_a_commented_file_and_refuses_a_broken_one,
      config_cli)
