/*
 * tools_config.c - the tools that need no session: get_config and get_system_instructions.
 *
 * get_config shows the policy in force. Until the policy module lands it shows the
 * built-in defaults (reference section 7.2) and says so in "source", so an agent never
 * mistakes defaults for an operator's decision. get_system_instructions is the guide an
 * agent reads first; it names only tools and behaviour drun has or is building, and
 * grows with them.
 */
#include "tools/tools.h"

#include <stdio.h>
#include <stdlib.h>

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
    "- session_bash has no network. Use session_fetch for URLs on the allowlist, and "
    "session_package_install for pip or npm packages when the operator enabled it.\n"
    "- session_export writes workspace files back to an allowed host directory; it never "
    "deletes. delete_from_host is the only tool that deletes on the host.\n"
    "- If a mount or fetch is denied, tell the user the exact command to allow it: "
    "`drun-mcp config add-path PATH` or `drun-mcp config add-domain DOMAIN`.\n"
    "\n"
    "## Picking up someone else's session\n"
    "session_tree shows every session and its checkpoints; session_switch to it, then "
    "session_history, get_session_state and checkpoint_read_stdstreams tell you where it "
    "stands.\n";

static void
get_system_instructions(struct tool_call *call)
{
    tool_call_set_summary(call, "get_system_instructions");
    tool_call_done_text(call, instructions);
}

static cJSON *
string_array(const char *const *items, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a != NULL && i < n; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateString(items[i]));
    }
    return a;
}

static void
get_config(struct tool_call *call)
{
    static const char *const domains[] = {"cdn.jsdelivr.net", "files.pythonhosted.org", "pypi.org"};
    static const char *const overlays[] = {"node_modules", ".venv",       "venv",
                                           "target",       "__pycache__", ".git"};
    cJSON *c = cJSON_CreateObject();
    const char *home = getenv("HOME");
    char snapshots[4096];

    if (c == NULL) {
        tool_call_done_error(call, TOOL_ERR_INTERNAL, "out of memory", NULL);
        return;
    }
    snprintf(snapshots, sizeof(snapshots), "%s/.drun/snapshots", home && home[0] ? home : "~");
    cJSON_AddItemToObject(c, "domain_allowlist", string_array(domains, 3));
    cJSON_AddItemToObject(c, "mount_allowlist", cJSON_CreateArray());
    cJSON_AddItemToObject(c, "mount_overlay_paths", string_array(overlays, 6));
    cJSON_AddItemToObject(c, "env_allowlist", cJSON_CreateArray());
    cJSON_AddItemToObject(c, "bash_command_denylist", cJSON_CreateArray());
    cJSON_AddItemToObject(c, "bash_command_allowlist", cJSON_CreateArray());
    cJSON_AddStringToObject(c, "snapshots_dir", snapshots);
    cJSON_AddNumberToObject(c, "max_workspace_mb", 512);
    cJSON_AddNumberToObject(c, "max_sessions", 50);
    cJSON_AddNumberToObject(c, "max_checkpoints", 200);
    cJSON_AddNumberToObject(c, "session_idle_timeout_secs", 3600);
    cJSON_AddNumberToObject(c, "bash_timeout_ms", 30000);
    cJSON_AddNumberToObject(c, "fetch_timeout_ms", 60000);
    cJSON_AddNumberToObject(c, "connect_timeout_ms", 30000);
    cJSON_AddBoolToObject(c, "package_install_enabled", 0);
    cJSON_AddNumberToObject(c, "package_install_timeout_ms", 180000);
    cJSON_AddStringToObject(c, "source", "defaults (no config loaded)");
    tool_call_set_summary(call, "get_config: defaults");
    tool_call_done_json(call, c);
}

static const char no_args_schema[] =
    "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
    "\"properties\":{},\"additionalProperties\":false}";

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
