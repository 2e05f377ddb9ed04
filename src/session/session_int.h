/*
 * session_int.h - the session module's private declarations: the structs behind the
 * opaque handles and helpers shared by session_*.c. Only the session module includes it.
 */
#ifndef DRUN_SESSION_INT_H
#define DRUN_SESSION_INT_H

#include "session/session.h"

struct session {
    struct session_mgr *mgr;
    struct session *next;
    char id[STORE_SESSION_ID_LEN + 1];
    int64_t head;                 /* head checkpoint id */
    struct ws_manifest *manifest; /* the head's files */
    int64_t *live;                /* live checkpoint ids, ascending */
    size_t n_live, cap_live;
    int busy;             /* a mutating call is in flight */
    int readers;          /* read-only calls in flight */
    int64_t last_mono_ms; /* last activity (monotonic clock): the end of the last call */
    int active;           /* calls in flight that count as activity (not idle at entry) */
    struct ws_dir *dir;   /* opened by the first command */
    int dir_trusted;      /* 0: the next prepare must fully re-sync */
    void *warm;           /* the next command's prepared sandbox (session_exec_warm_put) */
    void (*warm_free)(void *);
    int64_t synced_ms; /* the last_active_ms last written to the DB (session_mgr_heartbeat) */
    int view;          /* a read-only view of a session another process holds */
};

struct session_mgr {
    struct store *st;
    char *runtime_cfg;  /* as configured (NULL: default) */
    char *runtime;      /* this process's directory under the root (pid-N), on first use */
    char *runtime_root; /* the root it sits in */
    pid_t pid;
    int64_t start;
    struct session_limits limits;
    struct ws_blobs blobs;
    struct session *list;
    size_t n;
    struct session *views;          /* read-only views (session_view), not attached */
    struct session_timer *timer;    /* session_timer_start's, or NULL */
    struct session_lockstate *lock; /* the write-lock waiters (session_lock.c), or NULL */
};

/* Frees what session_lock.c holds (the loop must be gone or its handle closed). */
void sess_lock_free(struct session_mgr *m);

/* Puts manifest m's encoding as a blob; its hash goes to hash. Runs in the caller's bracket.
 * base (may be NULL) names a similar manifest (the parent's): the blob is then stored
 * as a delta of it, which costs only the entries that changed. */
int sess_put_manifest(struct session_mgr *m, const struct ws_manifest *man, const uint8_t *base,
                      uint8_t hash[HASH_LEN], struct session_err *e);

/* Reloads s->live from the store (live checkpoints in id order). */
int sess_load_live(struct session *s, struct session_err *e);

/* Index of cp in s->live, or -1. */
long sess_live_index(const struct session *s, int64_t cp);

/* Replaces the in-memory head (takes ownership of man). */
void sess_set_head(struct session *s, int64_t head, struct ws_manifest *man);

/* The change rows from `from` to `to` (paths borrowed from the manifests); caller frees *out. */
int sess_changes(const struct ws_manifest *from, const struct ws_manifest *to,
                 struct store_change **out, size_t *n, struct ws_diff_counts *counts,
                 struct session_err *e);

/* Resolves the runtime root and makes this process's directory in it (m->runtime). */
int session_runtime_init(struct session_mgr *m, struct err *err);

#endif
