/*
 * tools_reap.c - the idle reaper: a libuv timer in every drun-mcp that closes sessions
 * idle longer than session_idle_timeout_secs, whichever process notices first.
 *
 * Each tick (every timeout/2, between 1 s and 30 s) does, with the store in nowait mode
 * (a tick that finds the write lock held simply waits for the next one):
 *   1. the heartbeat of the sessions held here, and their last activity (the end of
 *      their last call) into last_active_ms (session_mgr_heartbeat);
 *   2. the sessions held here that are idle by this process's clock, not in use;
 *   3. one indexed query for open sessions whose stored activity is older than the
 *      timeout; of these, a session that a live process holds with a fresh heartbeat is
 *      that process's to reap and is skipped; the others (no holder, a dead holder, a
 *      holder whose heartbeat stopped) are closed.
 * Every close is store_session_reap: one conditional UPDATE, and in the same
 * transaction the snapshot (snapshot_on_close) and the `reap` audit row, so two
 * processes never both close or snapshot a session. History stays until gc.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "policy/policy.h"
#include "session/session.h"
#include "store/store.h"
#include "tools/tools.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/proc.h"
#include "util/timeutil.h"

#define REAP_MIN_MS 1000LL
#define REAP_MAX_MS 30000LL
/* A heartbeat older than this many ticks (and at least a minute) means its holder
 * stopped: the session is reaped as if no one held it. */
#define STALE_TICKS  4
#define STALE_MIN_MS 60000LL

static int64_t
period_ms(int64_t timeout_secs)
{
    int64_t p = timeout_secs * 1000 / 2;

    return p < REAP_MIN_MS ? REAP_MIN_MS : p > REAP_MAX_MS ? REAP_MAX_MS : p;
}

static void
snap_name(const char *id, char *out, size_t size)
{
    char iso[32], t[32];
    size_t k = 0;

    time_format_iso(time_now_ms(), iso, sizeof(iso));
    for (const char *c = iso; *c != '\0' && k + 1 < sizeof(t); c++) {
        if (*c != '-' && *c != ':' && *c != '.') {
            t[k++] = *c;
        }
    }
    t[k] = '\0';
    snprintf(out, size, "%s-close-%s", id, t);
}

/* Closes one session; 1 if this process closed it, 0 if not (someone else did, or it
 * is no longer idle), -1 on an error (logged; ERR_BUSY ends the tick quietly). */
static int
reap_one(struct tools_env *env, struct store_reap *r, int64_t idle_secs, int64_t limit,
         int snapshot)
{
    struct store_audit row;
    char summary[200], name[STORE_SNAPSHOT_NAME_MAX + 1];
    struct err err;
    int won = 0;

    if (snapshot) {
        snap_name(r->id, name, sizeof(name));
        r->snapshot = name;
        snprintf(summary, sizeof(summary),
                 "closed idle session %s (idle %llds, limit %llds), snapshot '%s'", r->id,
                 (long long)idle_secs, (long long)limit, name);
    } else {
        snprintf(summary, sizeof(summary), "closed idle session %s (idle %llds, limit %llds)",
                 r->id, (long long)idle_secs, (long long)limit);
    }
    memset(&row, 0, sizeof(row));
    row.pid = getpid();
    row.kind = "event";
    row.session_id = r->id;
    row.tool = "reap";
    row.summary = summary;
    row.outcome = "ok";
    row.checkpoint_id = -1;
    r->row = &row;
    if (store_session_reap(env->store, r, &won, &err) < 0) {
        if (err.code != ERR_BUSY) {
            log_warn("idle reaper: cannot close session '%s'%s: %s; it stays open", r->id,
                     snapshot ? " (snapshot_on_close)" : "", err.msg);
        }
        return err.code == ERR_BUSY ? -2 : -1;
    }
    if (won) {
        log_info("%s", summary);
    }
    return won;
}

/* One tick; returns the delay to the next. */
static int64_t
tick(void *arg)
{
    struct tools_env *env = arg;
    struct session_mgr *m = env->sessions;
    struct policy *p = NULL;
    struct store_idle *idle = NULL;
    size_t n = 0;
    struct err err;
    int64_t limit, now, per;
    int snapshot, prev;

    if (env->policy == NULL || policy_current(env->policy, &p, &err) < 0) {
        return REAP_MAX_MS; /* no good policy yet */
    }
    limit = p->session_idle_timeout_secs;
    snapshot = p->snapshot_on_close != 0;
    policy_unref(p);
    per = period_ms(limit);
    prev = store_set_nowait(env->store, 1);

    /* 1. our heartbeat and our sessions' last activity */
    if (session_mgr_heartbeat(m, &err) < 0) {
        if (err.code != ERR_BUSY) {
            log_warn("idle reaper: cannot refresh the heartbeat: %s", err.msg);
        }
        goto out;
    }
    now = time_now_ms();

    /* 2. the sessions held here, by this process's clock */
    for (struct session *s = session_mgr_first(m), *next; s != NULL; s = next) {
        int64_t ms = session_idle_ms(s);
        next = session_next(s);
        if (ms < 0 || ms / 1000 <= limit) {
            continue;
        }
        struct store_reap r = {session_id(s),        0,    0,   session_mgr_pid(m),
                               session_mgr_start(m), NULL, NULL};
        int rc = reap_one(env, &r, ms / 1000, limit, snapshot);
        if (rc == -2) {
            goto out;
        }
        if (rc == 1) {
            session_forget(m, s); /* workspace and prepared sandbox freed */
        }
    }

    /* 3. everyone else's, from the DB */
    if (store_session_idle_list(env->store, now - limit * 1000, &idle, &n, &err) < 0) {
        log_warn("idle reaper: cannot list idle sessions: %s", err.msg);
        goto out;
    }
    int64_t stale_ms = STALE_TICKS * per > STALE_MIN_MS ? STALE_TICKS * per : STALE_MIN_MS;
    for (size_t i = 0; i < n; i++) {
        struct store_idle *c = &idle[i];
        struct store_reap r = {c->id, now - limit * 1000, now - stale_ms, 0, 0, NULL, NULL};

        if (session_mgr_find(m, c->id) != NULL ||
            (c->owner_pid == session_mgr_pid(m) && c->owner_start == session_mgr_start(m))) {
            continue; /* ours: step 2 decides by our clock */
        }
        if (c->owner_pid > 0) {
            int fresh = c->heartbeat_ms >= now - stale_ms;
            if (fresh && proc_alive(c->owner_pid, c->owner_start)) {
                continue; /* held live elsewhere: that process reaps it */
            }
            if (fresh) { /* the holder is gone: name it, so the UPDATE may take it */
                r.owner_pid = c->owner_pid;
                r.owner_start = c->owner_start;
            }
        }
        if (reap_one(env, &r, (now - c->last_active_ms) / 1000, limit, snapshot) == -2) {
            break;
        }
    }
    mem_free(idle);
out:
    store_set_nowait(env->store, prev);
    return per;
}

void
tools_reaper_start(struct tools_env *env)
{
    if (env != NULL && env->loop != NULL && env->store != NULL && env->sessions != NULL) {
        session_timer_start(env->sessions, env->loop, REAP_MIN_MS, tick, env);
    }
}

void
tools_reaper_stop(struct tools_env *env)
{
    if (env != NULL && env->sessions != NULL) {
        session_timer_stop(env->sessions);
    }
}
