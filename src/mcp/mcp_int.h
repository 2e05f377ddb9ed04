/*
 * mcp_int.h - what the files of the MCP server share; only src/mcp/mcp_server.c and
 * src/mcp/mcp_output.c include it. mcp_server.c holds the transport, lifecycle and dispatch;
 * mcp_output.c the write queue and every answer. Everything else in them is static.
 */
#ifndef DRUN_MCP_MCP_INT_H
#define DRUN_MCP_MCP_INT_H

#include "mcp/mcp.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "mcp/mcp_json.h"
#include "tools/tools.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/mem.h"

#define RPC_PARSE_ERROR       (-32700)
#define RPC_INVALID_REQUEST   (-32600)
#define RPC_METHOD_NOT_FOUND  (-32601)
#define RPC_INVALID_PARAMS    (-32602)
#define RPC_INTERNAL_ERROR    (-32603)
#define RPC_UNSUPPORTED_VER   (-32022)
#define META_PROTOCOL_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CLIENT_INFO      "io.modelcontextprotocol/clientInfo"
#define META_SERVER_INFO      "io.modelcontextprotocol/serverInfo"
#define READ_CHUNK            ((size_t)64 << 10)
#define TOOLS_LIST_TTL_MS     3600000 /* what never changes while the process lives */

struct server;

/* A tools/call in flight. */
struct mcp_req {
    struct mcp_req *next, *prev;
    struct server *srv;
    cJSON *id; /* owned: the id to echo (raw: its exact original text) */
    char *key; /* owned: "s:<string>" or "n:<integer text>", for notifications/cancelled */
    struct tool_call *call;
    int cancelled;
    int modern;
};

struct wreq {
    uv_write_t w;
    struct server *srv;
    size_t len;
    char data[];
};

struct server {
    uv_loop_t loop;
    struct tools_env *env;
    struct mcp_opts opts;

    int in_stream; /* 1: in is a uv stream; 0: read with uv_fs_read (files, /dev/null) */
    union {
        uv_pipe_t pipe;
        uv_tty_t tty;
    } in;
    int in_open;
    uv_fs_t in_fs;
    int in_fs_busy;
    char *rbuf; /* READ_CHUNK bytes */
    struct buf line;
    int skipping; /* discarding the rest of an over-long line */

    int out_stream;
    union {
        uv_pipe_t pipe;
        uv_tty_t tty;
    } out;
    int out_open;
    int out_broken;
    size_t queued;
    int input_paused; /* reading stopped because the output queue is over its bound */
    uv_timer_t stall; /* runs while paused: the client has read nothing for stall_ms */

    uv_signal_t sigterm, sigint, sighup;
    uv_timer_t grace;
    int grace_started;
    int finishing; /* on_final is scheduled */

    int initialized;
    char version[16];
    char client_name[128];
    char client_version[64];
    int shutting_down;
    struct mcp_req *inflight;

    long n_requests, n_notifications, n_protocol_errors;
};

/* mcp_output.c */
/* Closes the stdout stream handle once (nothing to do when output is not a stream). */
void mcp_close_output(struct server *s);
/* Answers request id (its raw JSON text) with a fixed out-of-memory error, or shuts down. */
void mcp_answer_oom_text(struct server *s, const char *id, size_t id_len);
/* mcp_answer_oom_text with id's raw text, or with no id when id is not raw JSON. */
void mcp_answer_oom(struct server *s, const cJSON *id);
/* Sends one message (ownership of msg passes); on no memory, id still gets an error. */
void mcp_send_msg(struct server *s, cJSON *msg, const cJSON *id);
/* Adds item to obj; on failure frees item and returns -1 (cJSON leaves it unowned). */
int mcp_add_item(cJSON *obj, const char *key, cJSON *item);
/* Answers id with result (ownership passes), with the modern revision's fields if asked. */
void mcp_send_result(struct server *s, const cJSON *id, cJSON *result, int modern);
/* Answers id with a JSON-RPC error code, message and optional data (ownership passes). */
void mcp_send_error(struct server *s, const cJSON *id, int code, const char *message, cJSON *data);
/* A protocol-level error: counted, logged once, answered. */
void mcp_protocol_error(struct server *s, const cJSON *id, int code, cJSON *data, const char *fmt,
                        ...) __attribute__((format(printf, 5, 6)));

/* mcp_server.c */
/* This server's {name, title, version, description} (caller owns it). */
cJSON *mcp_server_info(struct server *s);
/* Timer callback: the client has read nothing for stall_ms while input was paused. */
void mcp_on_stall(uv_timer_t *t);
/* After queueing output: past the bound, stop reading input until the client catches up. */
void mcp_input_pressure(struct server *s);
/* After output drained: below half the bound, read input again. */
void mcp_input_resume(struct server *s);
/* Closes everything on the next loop turn once shutdown has nothing left to wait for. */
void mcp_maybe_finish(struct server *s);
/* Starts a clean shutdown once: input stops, calls in flight are cancelled, grace begins. */
void mcp_begin_shutdown(struct server *s, const char *why);

#endif
