/*
 * session_timer.c - one periodic callback on the loop for the layers above that may not
 * include libuv (the tools layer's idle reaper). The timer is unreferenced, so it never
 * keeps the loop alive on its own.
 */
#include "session/session_int.h"

#include <uv.h>

#include "util/mem.h"

struct session_timer {
    uv_timer_t timer;
    session_tick_fn fn;
    void *arg;
    int stopped;
};

static void
on_tick(uv_timer_t *t)
{
    struct session_timer *st = t->data;
    int64_t next = st->fn(st->arg);

    if (!st->stopped && next > 0) {
        uv_timer_start(&st->timer, on_tick, (uint64_t)next, 0);
    }
}

static void
on_closed(uv_handle_t *h)
{
    mem_free(h->data);
}

int
session_timer_start(struct session_mgr *m, void *loop, int64_t first_ms, session_tick_fn fn,
                    void *arg)
{
    struct session_timer *st;

    if (m->timer != NULL || loop == NULL || (st = mem_calloc(1, sizeof(*st))) == NULL) {
        return -1;
    }
    st->fn = fn;
    st->arg = arg;
    uv_timer_init(loop, &st->timer);
    st->timer.data = st;
    uv_unref((uv_handle_t *)&st->timer);
    uv_timer_start(&st->timer, on_tick, (uint64_t)first_ms, 0);
    m->timer = st;
    return 0;
}

void
session_timer_stop(struct session_mgr *m)
{
    struct session_timer *st = m != NULL ? m->timer : NULL;

    if (st == NULL) {
        return;
    }
    m->timer = NULL;
    st->stopped = 1;
    uv_timer_stop(&st->timer);
    if (!uv_is_closing((uv_handle_t *)&st->timer)) {
        uv_close((uv_handle_t *)&st->timer, on_closed);
    }
}
