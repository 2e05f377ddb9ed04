/*
 * session_lock.c - calls parked until the DB's write lock is free, on the libuv loop.
 *
 * The store's waiter thread (store_lock.c) waits for the lock with its own connection;
 * this file is its loop side: a list of parked calls with their deadlines, one uv_async
 * handle the thread's notify function wakes, and the flush of rows of read-only calls
 * that the store queued (store_queue.c). The thread runs one attempt at a time; an
 * attempt lasts until the lock is free or the nearest deadline (at most the busy
 * timeout), so a parked call is woken when it can go on or when it must give up, never
 * polled. Everything here runs on the loop thread except notify(), which only calls
 * uv_async_send (thread-safe).
 */
#include "session/session.h"

#include <stdint.h>
#include <string.h>

#include <uv.h>

#include "session/session_int.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timeutil.h"

#define FLUSH_DEADLINE INT64_MAX

struct session_lockwait {
    struct session_lockwait *next;
    int64_t deadline_ms;
    session_lock_fn fn;
    void *arg;
};

struct session_lockstate {
    uv_async_t async;
    struct session_mgr *m;
    struct session_lockwait *list;
    int asked;       /* an attempt is outstanding */
    int flushing;    /* the flush is parked */
    int closed;      /* shut down: nothing more is parked */
    int dispatching; /* on_async is running callbacks: ask() waits until they are done,
                      * so the thread's attempt never takes the lock from under a retry */
};

static void ask(struct session_lockstate *ls);

static void
flush_now(void *arg, int timed_out)
{
    struct session_mgr *m = arg;
    struct session_lockstate *ls = m->lock;
    struct store *st = m->st;
    struct err err;
    int saved = 0;

    (void)timed_out;
    ls->flushing = 0;
    if (store_queue_len(st) == 0) {
        return;
    }
    saved = store_would_block(st);
    store_set_nowait(st, 1);
    if (store_queue_flush(st, &err) < 0 && err.code != ERR_BUSY) {
        log_warn("cannot write the queued rows of read-only calls: %s", err.msg);
    }
    store_set_nowait(st, 0);
    if (!saved) {
        store_clear_would_block(st);
    }
    if (store_queue_len(st) > 0) {
        session_lock_flush_soon(m, ls->async.loop);
    }
}

static void
on_async(uv_async_t *h)
{
    struct session_lockstate *ls = h->data;
    int free_now = store_lock_result(ls->m->st);
    int64_t now = time_mono_ms();
    struct session_lockwait *list, *keep = NULL, **tail = &keep;

    if (free_now < 0) {
        return; /* a wake-up without an outcome (coalesced) */
    }
    ls->asked = 0;
    ls->dispatching = 1;
    list = ls->list;
    ls->list = NULL;
    /* Run the ready ones; callbacks may park again (they append to ls->list). */
    while (list != NULL) {
        struct session_lockwait *w = list;
        list = w->next;
        w->next = NULL;
        if (free_now || now >= w->deadline_ms) {
            session_lock_fn fn = w->fn;
            void *arg = w->arg;
            int timed_out = !free_now;
            mem_free(w);
            fn(arg, timed_out);
        } else {
            *tail = w;
            tail = &w->next;
        }
    }
    *tail = ls->list;
    ls->list = keep;
    ls->dispatching = 0;
    ask(ls);
}

static void
notify(void *arg)
{
    uv_async_send(arg);
}

/* Starts an attempt for the nearest deadline when calls are parked and none runs. */
static void
ask(struct session_lockstate *ls)
{
    int64_t nearest = FLUSH_DEADLINE, now = time_mono_ms(), left;
    int cap = store_busy_timeout_ms(ls->m->st);

    if (ls->asked || ls->dispatching || ls->list == NULL || ls->closed) {
        return;
    }
    for (struct session_lockwait *w = ls->list; w != NULL; w = w->next) {
        if (w->deadline_ms < nearest) {
            nearest = w->deadline_ms;
        }
    }
    left = nearest - now;
    if (left > cap) {
        left = cap;
    }
    if (left < 0) {
        left = 0;
    }
    ls->asked = 1;
    store_lock_request(ls->m->st, (int)left);
}

static struct session_lockstate *
state(struct session_mgr *m, void *loop, struct err *err)
{
    struct session_lockstate *ls = m->lock;

    if (ls != NULL) {
        if (ls->closed) {
            err_set(err, ERR_CANCELLED, "shutting down");
            return NULL;
        }
        return ls;
    }
    if (loop == NULL) {
        err_set(err, ERR_INTERNAL, "no event loop to wait for the database lock on");
        return NULL;
    }
    ls = mem_calloc(1, sizeof(*ls));
    if (ls == NULL) {
        err_set(err, ERR_NOMEM, "cannot wait for the database lock: out of memory");
        return NULL;
    }
    ls->m = m;
    ls->async.data = ls;
    if (uv_async_init(loop, &ls->async, on_async) != 0) {
        mem_free(ls);
        err_set(err, ERR_IO, "cannot wait for the database lock: no loop handle");
        return NULL;
    }
    uv_unref((uv_handle_t *)&ls->async); /* parked work never keeps the loop alive alone */
    if (store_lock_start(m->st, notify, &ls->async, err) < 0) {
        ls->closed = 1;
        uv_close((uv_handle_t *)&ls->async, NULL);
        m->lock = ls; /* freed by sess_lock_free after the loop is gone */
        return NULL;
    }
    m->lock = ls;
    return ls;
}

struct session_lockwait *
session_lock_wait(struct session_mgr *m, void *loop, int64_t deadline_ms, session_lock_fn fn,
                  void *arg, struct err *err)
{
    struct session_lockstate *ls = state(m, loop, err);
    struct session_lockwait *w, **p;

    if (ls == NULL) {
        return NULL;
    }
    w = mem_calloc(1, sizeof(*w));
    if (w == NULL) {
        err_set(err, ERR_NOMEM, "cannot wait for the database lock: out of memory");
        return NULL;
    }
    w->deadline_ms = deadline_ms;
    w->fn = fn;
    w->arg = arg;
    for (p = &ls->list; *p != NULL; p = &(*p)->next) {
    }
    *p = w;
    ask(ls);
    return w;
}

void
session_lock_cancel(struct session_mgr *m, struct session_lockwait *w)
{
    struct session_lockstate *ls = m->lock;

    if (ls == NULL || w == NULL) {
        return;
    }
    for (struct session_lockwait **p = &ls->list; *p != NULL; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            mem_free(w);
            return;
        }
    }
}

void
session_lock_flush_soon(struct session_mgr *m, void *loop)
{
    struct err err;

    if (store_queue_len(m->st) == 0 || (m->lock != NULL && m->lock->flushing)) {
        return;
    }
    if (session_lock_wait(m, loop, FLUSH_DEADLINE, flush_now, m, &err) == NULL) {
        return; /* store_close writes what is left */
    }
    m->lock->flushing = 1;
}

void
session_lock_shutdown(struct session_mgr *m)
{
    struct session_lockstate *ls = m->lock;

    if (ls == NULL || ls->closed) {
        return;
    }
    ls->closed = 1;
    store_lock_stop(m->st); /* joined: notify is never called again */
    while (ls->list != NULL) {
        struct session_lockwait *w = ls->list;
        ls->list = w->next;
        mem_free(w);
    }
    if (!uv_is_closing((uv_handle_t *)&ls->async)) {
        uv_close((uv_handle_t *)&ls->async, NULL);
    }
}

void
sess_lock_free(struct session_mgr *m)
{
    struct session_lockstate *ls = m->lock;

    if (ls == NULL) {
        return;
    }
    store_lock_stop(m->st);
    while (ls->list != NULL) {
        struct session_lockwait *w = ls->list;
        ls->list = w->next;
        mem_free(w);
    }
    m->lock = NULL;
    mem_free(ls); /* the loop is closed by now, so is the handle */
}
