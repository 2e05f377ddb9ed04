/*
 * fetch_int.h - what fetch.c and fetch_io.c share; only src/fetch/ includes it: the fetch
 * state and the callbacks that tie curl's multi interface to the libuv loop.
 */
#ifndef DRUN_FETCH_FETCH_INT_H
#define DRUN_FETCH_FETCH_INT_H

#include <arpa/inet.h>
#include <curl/curl.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <uv.h>

#include "fetch/fetch.h"
#include "util/mem.h"

enum why {
    WHY_NONE = 0,
    WHY_ADDR,    /* the open-socket callback refused the address */
    WHY_BODY,    /* the body passed its cap */
    WHY_HEADERS, /* the headers passed their cap */
    WHY_CANCEL,  /* fetch_cancel */
    WHY_SINK,    /* the caller's sink asked to stop */
    WHY_NOMEM,
};

enum state { ST_RUNNING = 0, ST_CLOSING };

struct sock_ctx {
    struct fetch *f;
    uv_poll_t poll;
    curl_socket_t fd;
    struct sock_ctx *next, *prev;
};

struct fetch {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    struct fetch_policy pol;
    struct fetch_callbacks cb;
    char method[40];
    const struct fetch_header *headers;
    size_t n_headers;
    const void *body;
    size_t body_len;
    int collect_assets;
    fetch_sink_fn sink;
    void *sink_ud;
    fetch_asset_sink_fn asset_sink;
    struct curl_slist *resolve;

    /* the transfer in flight */
    CURL *easy;
    struct curl_slist *hdrs;
    char *cur_url;
    char *cur_host;
    char *first_host; /* host of the first hop of the current request */
    char cur_method[40];
    int cur_send_body;
    int cur_asset; /* -1 main */
    int redirects;
    int creds_ok; /* 0 once the chain dropped from https to http */
    /* per credential: 1 once a hop of the current chain went to a host it does not
     * match, so a chain that leaves a credential's domain never gets it again */
    unsigned char *cred_left;
    uint64_t cur_bytes;
    uint64_t cur_cap;
    size_t cur_hdr_bytes;
    struct buf *cur_body;
    int why;
    struct err why_err;
    char errbuf[CURL_ERROR_SIZE];

    /* assets */
    char **asset_urls;
    size_t n_asset_urls;
    size_t next_asset;

    struct fetch_result *res;
    int state;
    int cancelled;
    int open_handles;
    int paused;      /* a sink answered FETCH_SINK_PAUSE: the easy handle is paused */
    int cur_encoded; /* the current response has a Content-Encoding curl decodes */
    int sock_failed; /* sock_cb could not watch a socket */
    struct sock_ctx *socks;
};

/* fetch_io.c */
/* uv close callback of the multi timer: one handle fewer open. */
void fetch_timer_closed(uv_handle_t *h);
/* Unlinks a watched socket from f and closes its poll handle. */
void fetch_sock_unlink_close(struct fetch *f, struct sock_ctx *c);
/* CURLMOPT_SOCKETFUNCTION: starts, changes or stops watching a socket with uv_poll. */
int fetch_sock_cb(CURL *e, curl_socket_t s, int action, void *userp, void *socketp);
/* uv timer callback: tells curl its timeout passed. */
void fetch_timer_cb(uv_timer_t *t);
/* CURLMOPT_TIMERFUNCTION: (re)arms or stops the uv timer. */
int fetch_timerfn_cb(CURLM *m, long timeout_ms, void *userp);
/* CURLOPT_OPENSOCKETFUNCTION: checks the address before connecting; refuses a bad one. */
curl_socket_t fetch_open_cb(void *ud, curlsocktype purpose, struct curl_sockaddr *a);
/* CURLOPT_HEADERFUNCTION: counts header bytes against their cap. */
size_t fetch_header_cb(char *p, size_t size, size_t n, void *ud);
/* CURLOPT_WRITEFUNCTION: the body, capped, to the buffer or the caller's sink. */
size_t fetch_write_cb(char *p, size_t size, size_t n, void *ud);

/* fetch.c */
/* Ends the whole fetch with outcome (and e when it failed): results to the caller. */
void fetch_finish_transfer(struct fetch *f, int outcome, const struct err *e);
/* Reads curl's finished transfers and moves on: next hop, next asset, or finish. */
void fetch_check_multi(struct fetch *f);

#endif
