/*
 * tools_config.c - the tools that need no session: get_config and get_system_instructions.
 *
 * get_config shows the policy in force (the reference's keys, section 4.4, then ours),
 * where it came from ("source": file or defaults, so an agent never mistakes defaults
 * for an operator's decision), unknown-key warnings, the latest load error and what the
 * mount_allowlist means for each host door. tools_policy() is how every other tool takes
 * the policy for one call, and where a failed reload reaches the audit log. get_system_instructions
 * is the guide an agent reads first; it names only tools and behaviour drun has or is building, and
 * grows with them.
 */
#include "tools/tools.h"
#include "tools/tools_sess.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "policy/policy.h"
#include "store/store.h"
#include "util/log.h"
#include "util/timeutil.h"

#define TOOL_ERR_CONFIG "config_error"

static const char instructions[] =
    "# drun: sandboxed workspaces with history\n"
    "\n"
    "drun gives you a private workspace where every shell command runs in a fresh sandbox "
    "with no network. After each change drun records a checkpoint, so you can look back, "
    "roll back or branch. Work only through drun's tools while it is attached: do not edit "
    "the host's files directly.\n"
    "\n"
    "## Getting started\n"
    "1. create_session: makes an empty workspace and makes it your active session.\n"
    "2. get_config: shows what the operator allows (mount paths, fetch domains, limits).\n"
    "3. session_mount: copies a host file or directory into the workspace (only paths the "
    "operator allows).\n"
    "4. session_bash: runs a command in /workspace. Its result describes the new checkpoint "
    "(exit_code, file counts, output sizes), not the output itself.\n"
    "\n"
    "Every session_* tool acts on your active session; you do not pass its id. "
    "session_switch changes the active session; session_list and session_tree show them "
    "all. Sessions are stored in the database and survive a restart: switch back to one by "
    "its id.\n"
    "\n"
    "## Reading results\n"
    "- Check exit_code, not stderr, to know whether a command worked.\n"
    "- Read a command's output with checkpoint_read_stdstreams (offset, limit and a regex "
    "pattern keep it short).\n"
    "- Read files with session_read_file or session_read_files; write with "
    "session_write_files (several files, one checkpoint).\n"
    "- session_extract_text turns a workspace PDF into a text file (<path>.txt, or save_to) "
    "in one checkpoint, optionally a page range (first_page, last_page) or with the layout "
    "kept; pages end with a form feed. Read the text with session_read_file (pattern finds "
    "lines). The parser runs in a sandbox of its own, with a time and size limit.\n"
    "- Errors come back as JSON {code, message, detail}: the message says what to do next.\n"
    "\n"
    "## History and branching\n"
    "- session_history lists checkpoints; session_diff shows what changed between two.\n"
    "- session_rollback moves the head back; the next change discards what came after it, so "
    "use session_fork first to keep both lines of work.\n"
    "- Labels (session_checkpoint_label) name checkpoints; where a tool takes both a label "
    "and an id, the label wins.\n"
    "\n"
    "## The network and the host\n"
    "- session_bash has no network. Use session_fetch for URLs on the allowlist; there is "
    "no package installer yet, so bring dependencies in with session_mount.\n"
    "- session_export writes workspace files back to an allowed host directory; it never "
    "deletes. delete_from_host is the only tool that deletes on the host.\n"
    "- If a mount or fetch is denied, tell the user the exact command to allow it: "
    "`drun-mcp config add-path PATH` or `drun-mcp config add-domain DOMAIN`.\n"
    "\n"
    "## Picking up someone else's session\n"
    "session_tree shows every session and its checkpoints; session_switch to it, then "
    "session_history, get_session_state and checkpoint_read_stdstreams tell you where it "
    "stands.\n"
    "A session another window (another drun process) is using can still be read without "
    "switching: pass its session_id to get_session_state, session_history, session_diff, "
    "session_read_file, session_read_files or checkpoint_read_stdstreams. Changing it "
    "answers session_busy until that process lets go of it.\n"
    "\n"
    "## Idle sessions\n"
    "A session unused for longer than session_idle_timeout_secs (see get_config) first "
    "refuses changes (session_idle) and is then closed by drun; its history stays until "
    "the operator's gc. Afterwards it answers session_not_found: create_session, or "
    "restore a snapshot of it if one was taken.\n";

static void
get_system_instructions(struct tool_call *call)
{
    tool_call_set_summary(call, "get_system_instructions");
    tool_call_done_text(call, instructions);
}

/* ---- the policy for a call ---------------------------------------------------------- */

/*
 * The last load error written to the audit log, so each distinct error is recorded once
 * however many calls see it. Cleared when a load succeeds, so the same mistake made
 * again later is recorded again. One drun-mcp process serves one connection on one
 * loop thread, so a static is enough.
 */
static char audited_error[ERR_MSG_MAX];

static void
audit_policy_error(struct tools_env *env)
{
    struct policy_status ps;
    struct store_audit row;
    struct err err;
    char summary[ERR_MSG_MAX + 32];

    if (env->policy == NULL) {
        return;
    }
    policy_store_status(env->policy, &ps);
    if (ps.last_error.code == ERR_OK) {
        audited_error[0] = '\0';
        return;
    }
    if (strcmp(audited_error, ps.last_error.msg) == 0) {
        return;
    }
    snprintf(audited_error, sizeof(audited_error), "%s", ps.last_error.msg);
    if (env->store == NULL) {
        return;
    }
    if ((size_t)snprintf(summary, sizeof(summary), "%s%s", ps.last_error.msg,
                         ps.have_policy ? "; the last good policy stays in force"
                                        : "; no policy in force") >= sizeof(summary)) {
        memcpy(summary + sizeof(summary) - 4, "...", 4); /* say the summary was cut */
    }
    for (char *c = summary; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20) {
            *c = ' ';
        }
    }
    memset(&row, 0, sizeof(row));
    row.time_ms = ps.error_ms;
    row.pid = getpid();
    row.kind = "event";
    row.tool = "config_reload";
    row.summary = summary;
    row.outcome = "error";
    row.error_code = TOOL_ERR_CONFIG;
    row.checkpoint_id = -1;
    if (store_audit_append_soon(env->store, &row, &err) < 0) {
        log_warn("cannot write the config_reload audit row: %s", err.msg);
    }
}

int
tools_policy(struct tool_call *call, struct policy **out)
{
    struct tools_env *env = tool_call_env(call);
    struct err err;
    int rc;

    *out = NULL;
    if (env->policy == NULL) {
        tool_call_done_error(call, TOOL_ERR_CONFIG, "no policy store is open (a bug)", NULL);
        return -1;
    }
    rc = policy_current(env->policy, out, &err);
    audit_policy_error(env);
    if (rc < 0) {
        cJSON *detail = cJSON_CreateObject();
        char msg[ERR_MSG_MAX + 96];

        snprintf(msg, sizeof(msg),
                 "%s; no good policy has been loaded, so this call is refused "
                 "until config.toml is fixed",
                 err.msg);
        if (detail != NULL && env->config_path != NULL) {
            cJSON_AddStringToObject(detail, "config_path", env->config_path);
        }
        tool_call_done_error(call, TOOL_ERR_CONFIG, msg, detail);
        return -1;
    }
    return 0;
}

/* ---- get_config ------------------------------------------------------------------- */

static cJSON *
strlist_json(const struct policy_strlist *l)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a != NULL && i < l->n; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateString(l->v[i]));
    }
    return a;
}

static void
add_time(cJSON *o, const char *key, int64_t ms)
{
    char iso[40];

    if (ms <= 0) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    time_format_iso(ms, iso, sizeof(iso));
    cJSON_AddStringToObject(o, key, iso);
}

/* What an empty or non-empty mount_allowlist means for each door (DESIGN.md, Policy). */
static cJSON *
doors_json(const struct policy *p)
{
    cJSON *d = cJSON_CreateObject();
    int empty = p->mount_allowlist.n == 0;

    if (d == NULL) {
        return NULL;
    }
    cJSON_AddStringToObject(d, "session_mount",
                            empty ? "may read any host path (the list is empty)"
                                  : "may read only inside the listed directories");
    cJSON_AddStringToObject(d, "session_export",
                            empty ? "refused: the list is empty, so nothing may be written"
                                  : "may write only inside the listed directories");
    cJSON_AddStringToObject(d, "delete_from_host",
                            empty ? "refused: the list is empty, so nothing may be deleted"
                                  : "may delete only inside the listed directories, never a "
                                    "listed directory itself");
    return d;
}

/* The policy's fields: the reference's get_config keys (section 4.4) first, then ours. */
static void
policy_json(cJSON *c, const struct policy *p, const char *db_in_use)
{
    cJSON *creds = cJSON_CreateArray();

    cJSON_AddItemToObject(c, "domain_allowlist", strlist_json(&p->domain_allowlist));
    cJSON_AddItemToObject(c, "mount_allowlist", strlist_json(&p->mount_allowlist));
    cJSON_AddItemToObject(c, "mount_overlay_paths", strlist_json(&p->mount_overlay_paths));
    cJSON_AddItemToObject(c, "env_allowlist", strlist_json(&p->env_allowlist));
    cJSON_AddItemToObject(c, "bash_command_denylist", strlist_json(&p->bash_command_denylist));
    cJSON_AddItemToObject(c, "bash_command_allowlist", strlist_json(&p->bash_command_allowlist));
    if (p->snapshots_dir != NULL) {
        cJSON_AddStringToObject(c, "snapshots_dir", p->snapshots_dir);
    } else {
        cJSON_AddNullToObject(c, "snapshots_dir");
    }
    cJSON_AddNumberToObject(c, "max_workspace_mb", (double)p->max_workspace_mb);
    cJSON_AddNumberToObject(c, "max_sessions", (double)p->max_sessions);
    cJSON_AddNumberToObject(c, "max_checkpoints", (double)p->max_checkpoints);
    cJSON_AddNumberToObject(c, "session_idle_timeout_secs", (double)p->session_idle_timeout_secs);
    cJSON_AddNumberToObject(c, "bash_timeout_ms", (double)p->bash_timeout_ms);
    cJSON_AddNumberToObject(c, "fetch_timeout_ms", (double)p->fetch_timeout_ms);
    cJSON_AddNumberToObject(c, "connect_timeout_ms", (double)p->connect_timeout_ms);
    cJSON_AddBoolToObject(c, "package_install_enabled", p->package_install_enabled);
    cJSON_AddNumberToObject(c, "package_install_timeout_ms", (double)p->package_install_timeout_ms);

    cJSON_AddBoolToObject(c, "snapshot_on_close", p->snapshot_on_close);
    cJSON_AddBoolToObject(c, "export_vcs_hooks", p->export_vcs_hooks);
    cJSON_AddNumberToObject(c, "mount_git_copy_max_mb", (double)p->mount_git_copy_max_mb);
    cJSON_AddNumberToObject(c, "fetch_max_bytes", (double)p->fetch_max_bytes);
    cJSON_AddBoolToObject(c, "fetch_allow_private", p->fetch_allow_private);
    cJSON_AddItemToObject(c, "fetch_allow_cidrs", strlist_json(&p->fetch_allow_cidrs));
    cJSON_AddItemToObject(c, "fetch_resolve", strlist_json(&p->fetch_resolve));
    /* Credentials are shown by name only: the values stay in the daemon's environment. */
    for (size_t i = 0; creds != NULL && i < p->fetch_credentials_n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (o == NULL) {
            break;
        }
        cJSON_AddStringToObject(o, "domain", p->fetch_credentials[i].domain);
        cJSON_AddStringToObject(o, "header", p->fetch_credentials[i].header);
        cJSON_AddStringToObject(o, "env", p->fetch_credentials[i].env);
        cJSON_AddItemToArray(creds, o);
    }
    cJSON_AddItemToObject(c, "fetch_credentials", creds);
    cJSON_AddNumberToObject(c, "max_output_bytes", (double)p->max_output_bytes);
    cJSON_AddNumberToObject(c, "sandbox_memory_mb", (double)p->sandbox_memory_mb);
    cJSON_AddNumberToObject(c, "sandbox_cpu_secs", (double)p->sandbox_cpu_secs);
    cJSON_AddNumberToObject(c, "sandbox_file_size_mb", (double)p->sandbox_file_size_mb);
    cJSON_AddNumberToObject(c, "sandbox_max_processes", (double)p->sandbox_max_processes);
    cJSON_AddNumberToObject(c, "sandbox_tmp_size_mb", (double)p->sandbox_tmp_size_mb);
    cJSON_AddNumberToObject(c, "sandbox_uid", (double)p->sandbox_uid);
    cJSON_AddNumberToObject(c, "sandbox_gid", (double)p->sandbox_gid);
    cJSON_AddNumberToObject(c, "extract_timeout_ms", (double)p->extract_timeout_ms);
    cJSON_AddNumberToObject(c, "extract_max_mb", (double)p->extract_max_mb);
    /* db_path is read once at start-up; show the file actually in use. */
    if (db_in_use != NULL) {
        cJSON_AddStringToObject(c, "db_path", db_in_use);
    } else if (p->db_path != NULL) {
        cJSON_AddStringToObject(c, "db_path", p->db_path);
    } else {
        cJSON_AddNullToObject(c, "db_path");
    }
    if (p->runtime_dir != NULL) {
        cJSON_AddStringToObject(c, "runtime_dir", p->runtime_dir);
    } else {
        cJSON_AddNullToObject(c, "runtime_dir");
    }
    cJSON_AddStringToObject(c, "sqlite_synchronous",
                            p->sqlite_synchronous == POLICY_SYNC_NORMAL ? "normal" : "full");
    cJSON_AddItemToObject(c, "mount_allowlist_effect", doors_json(p));
}

static void
get_config(struct tool_call *call)
{
    struct tools_env *env = tool_call_env(call);
    struct policy *p = NULL;
    struct policy_status ps;
    struct err err;
    cJSON *c = NULL;

    if (env->policy == NULL) {
        tool_call_done_error(call, TOOL_ERR_CONFIG, "no policy store is open (a bug)", NULL);
        return;
    }
    /*
     * Unlike other tools, get_config answers even when no good policy was ever loaded:
     * it is how the agent (and the operator) sees the load error.
     */
    if (policy_current(env->policy, &p, &err) < 0) {
        p = NULL;
    }
    audit_policy_error(env);
    policy_store_status(env->policy, &ps);
    c = cJSON_CreateObject();
    if (c == NULL) {
        policy_unref(p);
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    if (p != NULL) {
        policy_json(c, p, env->db_path);
    }
    cJSON_AddBoolToObject(c, "policy_in_force", p != NULL);
    cJSON_AddStringToObject(c, "source",
                            p == NULL          ? "none"
                            : ps.from_defaults ? "defaults"
                                               : "file");
    cJSON_AddStringToObject(c, "config_path", ps.path);
    add_time(c, "config_mtime", p != NULL && !ps.from_defaults ? ps.mtime_ms : 0);
    add_time(c, "loaded_at", p != NULL ? ps.loaded_ms : 0);
    cJSON_AddItemToObject(c, "warnings",
                          p != NULL ? strlist_json(&p->warnings) : cJSON_CreateArray());
    if (ps.last_error.code != ERR_OK) {
        cJSON *le = cJSON_CreateObject();
        if (le != NULL) {
            cJSON_AddStringToObject(le, "message", ps.last_error.msg);
            add_time(le, "at", ps.error_ms);
            cJSON_AddStringToObject(le, "effect",
                                    p != NULL ? "the last good policy (shown here) stays in force"
                                              : "no policy is in force: tools that need it are "
                                                "refused until the file is fixed");
        }
        cJSON_AddItemToObject(c, "load_error", le);
    } else {
        cJSON_AddNullToObject(c, "load_error");
    }
    tool_call_set_summary(call, "get_config: %s%s",
                          p == NULL          ? "no policy"
                          : ps.from_defaults ? "defaults"
                                             : ps.path,
                          ps.last_error.code != ERR_OK ? " (load error)" : "");
    policy_unref(p);
    tool_call_done_json(call, c);
}

static const char no_args_schema[] =
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
    "\"properties\":{},\"additionalProperties\":false}";

/* Output schemas: what a successful result holds (docs/tools.md). */
static const char config_out[] = TSESS_OUT_OBJECT(
    "\"domain_allowlist\":" J_STRS ",\"mount_allowlist\":" J_STRS ",\"mount_overlay_paths\":" J_STRS
    ",\"env_allowlist\":" J_STRS ",\"bash_command_denylist\":" J_STRS
    ",\"bash_command_allowlist\":" J_STRS ",\"snapshots_dir\":" J_STR_NULL
    ",\"max_workspace_mb\":" J_INT ",\"max_sessions\":" J_INT ",\"max_checkpoints\":" J_INT
    ",\"session_idle_timeout_secs\":" J_INT ",\"bash_timeout_ms\":" J_INT
    ",\"fetch_timeout_ms\":" J_INT ",\"connect_timeout_ms\":" J_INT
    ",\"package_install_enabled\":" J_BOOL ",\"snapshot_on_close\":" J_BOOL
    ",\"db_path\":" J_STR_NULL ",\"runtime_dir\":" J_STR_NULL ",\"policy_in_force\":" J_BOOL
    ",\"source\":" J_STR ",\"config_path\":" J_STR_NULL ",\"warnings\":" J_STRS
    ",\"load_error\":{\"type\":[\"object\",\"null\"]}",
    "\"domain_allowlist\",\"mount_allowlist\",\"env_allowlist\",\"source\"");

const struct tool_def tools_config_defs[] = {
    {
        .name = "get_config",
        .title = "Show the policy",
        .description = "Show the policy in force: allowed mount paths and fetch domains, "
                       "limits, timeouts. Call before mount, fetch or package install. An "
                       "empty domain_allowlist permits no domains; an empty mount_allowlist "
                       "lets mount read any host path.",
        .input_schema = no_args_schema,
        .annotations = {.read_only = 1, .destructive = 0, .idempotent = 1, .open_world = 0},
        .output_schema = config_out,
        .handler = get_config,
    },
    {
        .name = "get_system_instructions",
        .title = "How to use drun",
        .description = "The guide to drun's tools. Read it once before your first session.",
        .input_schema = no_args_schema,
        .annotations = {.read_only = 1, .destructive = 0, .idempotent = 1, .open_world = 0},
        .handler = get_system_instructions,
    },
};

const size_t tools_config_count = sizeof(tools_config_defs) / sizeof(tools_config_defs[0]);
