/*
 * mcp.h - drun's MCP server on stdio: newline-delimited JSON-RPC 2.0 on a libuv loop.
 *
 * mcp_serve() owns the loop for the life of the connection: it reads one JSON message
 * per line from in_fd, answers on out_fd, runs each tools/call as its own task through
 * the tool registry, and returns when the input ends, SIGTERM, SIGINT or SIGHUP arrives,
 * or the output goes away. Every input is bounded (line length, nesting depth); over a
 * bound the peer gets a JSON-RPC error, never a crash or unbounded growth. Output that
 * the client does not read applies back-pressure (no more input is read) instead of
 * growing; a client that reads nothing for stall_ms is dropped with a log line.
 * docs/protocol.md describes the methods, versions and error codes.
 */
#ifndef DRUN_MCP_H
#define DRUN_MCP_H

#include <stddef.h>

#include "tools/tool.h"
#include "util/err.h"

#define MCP_MAX_LINE_DEFAULT  ((size_t)16 << 20) /* bytes in one incoming message */
#define MCP_MAX_QUEUE_DEFAULT ((size_t)64 << 20) /* output waiting before input pauses */
#define MCP_STALL_MS_DEFAULT  (10 * 60 * 1000)   /* a paused client reading nothing */
#define MCP_MAX_DEPTH_DEFAULT 64                 /* nesting of arrays and objects */

struct mcp_opts {
    int in_fd;              /* protocol input (normally 0) */
    int out_fd;             /* protocol output (the private copy of fd 1) */
    size_t max_line_bytes;  /* 0: MCP_MAX_LINE_DEFAULT */
    size_t max_queue_bytes; /* output bound that pauses input; 0: MCP_MAX_QUEUE_DEFAULT */
    int stall_ms;           /* drop a paused client that reads nothing this long; 0: default */
    int max_depth;          /* 0: MCP_MAX_DEPTH_DEFAULT */
    int shutdown_grace_ms;  /* how long cancelled calls get to end; 0: 2000 */
};

/* The protocol revisions drun speaks, newest first, NULL-terminated. */
extern const char *const mcp_versions[];

/*
 * Serves until the input ends, a signal asks it to stop, or the output breaks; then
 * cancels calls in flight, flushes what it can and returns 0. Sets env->loop while it
 * runs. Returns -1 only if the loop cannot be set up (err says why).
 */
int mcp_serve(struct tools_env *env, const struct mcp_opts *opts, struct err *err);

#endif
