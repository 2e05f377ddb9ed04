/*
 * store_queue.c - audit rows and history steps of read-only calls, written when the
 * write lock allows.
 *
 * A read-only call (session_read_file, session_history, a failed call's audit row) must
 * not wait for the write lock another process holds just to record that it happened. Its
 * rows go through store_*_append_soon: when the lock is free (nowait BEGIN) they are
 * written at once, after any rows still queued, in one transaction, so the log keeps its
 * order; when it is held they are copied into an in-memory queue, bounded by
 * STORE_QUEUE_ROWS_MAX rows and STORE_QUEUE_BYTES_MAX bytes, that the caller flushes
 * later (store_queue_flush, from the lock waiter's wake-up) and store_close flushes last.
 * The hash chain is computed when a row is written, inside its transaction, so rows from
 * several processes still chain in the order they reach the file. What a kill -9 loses:
 * the queued rows, i.e. only rows of read-only or failed calls made while another
 * process held the lock; a mutation's audit row is written in the mutation's own
 * transaction and never queued.
 */
#include "store/store_int.h"

#include <string.h>

#include "util/mem.h"

enum { QROW_AUDIT, QROW_STEP };

struct store_qrow {
    struct store_qrow *next;
    int kind;
    size_t bytes;
    struct store_audit a; /* QROW_AUDIT: strings and parts owned below */
    struct store_audit_part *parts;
    char *session, *tool, *description; /* QROW_STEP */
    int64_t checkpoint;
};

static char *
dup_or_null(const char *s, size_t *bytes, int *oom)
{
    char *d;

    if (s == NULL) {
        return NULL;
    }
    d = mem_strdup(s);
    if (d == NULL) {
        *oom = 1;
        return NULL;
    }
    *bytes += strlen(s) + 1;
    return d;
}

static void
qrow_free(struct store_qrow *q)
{
    if (q == NULL) {
        return;
    }
    if (q->kind == QROW_AUDIT) {
        mem_free((char *)q->a.kind);
        mem_free((char *)q->a.client_name);
        mem_free((char *)q->a.client_version);
        mem_free((char *)q->a.session_id);
        mem_free((char *)q->a.tool);
        mem_free((char *)q->a.summary);
        mem_free((char *)q->a.outcome);
        mem_free((char *)q->a.error_code);
        mem_free((char *)q->a.args);
        for (size_t i = 0; q->parts != NULL && i < q->a.nparts; i++) {
            mem_free((void *)q->parts[i].data);
        }
        mem_free(q->parts);
    } else {
        mem_free(q->session);
        mem_free(q->tool);
        mem_free(q->description);
    }
    mem_free(q);
}

static struct store_qrow *
qrow_audit(const struct store_audit *row)
{
    struct store_qrow *q = mem_calloc(1, sizeof(*q));
    int oom = 0;

    if (q == NULL) {
        return NULL;
    }
    q->kind = QROW_AUDIT;
    q->a = *row;
    q->a.kind = dup_or_null(row->kind, &q->bytes, &oom);
    q->a.client_name = dup_or_null(row->client_name, &q->bytes, &oom);
    q->a.client_version = dup_or_null(row->client_version, &q->bytes, &oom);
    q->a.session_id = dup_or_null(row->session_id, &q->bytes, &oom);
    q->a.tool = dup_or_null(row->tool, &q->bytes, &oom);
    q->a.summary = dup_or_null(row->summary, &q->bytes, &oom);
    q->a.outcome = dup_or_null(row->outcome, &q->bytes, &oom);
    q->a.error_code = dup_or_null(row->error_code, &q->bytes, &oom);
    q->a.args = NULL;
    q->a.parts = NULL;
    q->a.nparts = 0;
    if (row->args != NULL) {
        char *a = mem_alloc(row->args_len + 1);
        if (a == NULL) {
            oom = 1;
        } else {
            memcpy(a, row->args, row->args_len);
            a[row->args_len] = '\0';
            q->a.args = a;
            q->bytes += row->args_len + 1;
        }
    }
    if (!oom && row->nparts > 0) {
        q->parts = mem_calloc(row->nparts, sizeof(*q->parts));
        if (q->parts == NULL) {
            oom = 1;
        }
        for (size_t i = 0; !oom && i < row->nparts; i++) {
            void *d = mem_alloc(row->parts[i].len ? row->parts[i].len : 1);
            if (d == NULL) {
                oom = 1;
                break;
            }
            memcpy(d, row->parts[i].data, row->parts[i].len);
            q->parts[i] = row->parts[i];
            q->parts[i].data = d;
            q->a.nparts = i + 1;
            q->bytes += row->parts[i].len;
        }
        q->a.parts = q->parts;
    }
    if (oom) {
        qrow_free(q);
        return NULL;
    }
    q->bytes += sizeof(*q);
    return q;
}

static void
enqueue(struct store *st, struct store_qrow *q)
{
    if (st->q_tail != NULL) {
        st->q_tail->next = q;
    } else {
        st->q_head = q;
    }
    st->q_tail = q;
    st->q_rows++;
    st->q_bytes += q->bytes;
}

size_t
store_queue_len(const struct store *st)
{
    return st->q_rows;
}

int
store_queue_full(const struct store *st)
{
    return st->q_rows >= STORE_QUEUE_ROWS_MAX || st->q_bytes >= STORE_QUEUE_BYTES_MAX;
}

size_t
store_queue_drop(struct store *st)
{
    size_t n = st->q_rows;

    while (st->q_head != NULL) {
        struct store_qrow *q = st->q_head;
        st->q_head = q->next;
        qrow_free(q);
    }
    st->q_tail = NULL;
    st->q_rows = 0;
    st->q_bytes = 0;
    return n;
}

static int
write_row(struct store *st, struct store_qrow *q, struct err *err)
{
    if (q->kind == QROW_AUDIT) {
        return store_audit_append(st, &q->a, err);
    }
    return store_step_append(st, q->session, q->checkpoint, q->tool, q->description, err);
}

/* After a batch failed for the rows themselves: each row on its own, dropping those the
 * store refuses (a step of a session gc removed meanwhile), so one cannot block the rest. */
static int
write_one_by_one(struct store *st, struct err *err)
{
    size_t dropped = 0;
    struct err first;

    err_clear(&first);
    while (st->q_head != NULL) {
        struct store_qrow *q = st->q_head;
        if (store_begin(st, err) < 0) {
            return -1; /* the lock again: keep the rest */
        }
        if (write_row(st, q, err) < 0) {
            store_rollback(st);
            if (err->code == ERR_BUSY || err->code == ERR_STALE) {
                return -1;
            }
            if (dropped++ == 0) {
                first = *err;
            }
        } else if (store_commit(st, err) < 0) {
            return -1;
        }
        st->q_head = q->next;
        if (st->q_head == NULL) {
            st->q_tail = NULL;
        }
        st->q_rows--;
        st->q_bytes -= q->bytes;
        qrow_free(q);
    }
    if (dropped > 0) {
        return err_set(err, first.code, "%zu queued rows could not be written: %s", dropped,
                       first.msg);
    }
    return 0;
}

int
store_queue_write(struct store *st, struct err *err)
{
    int rc = 0;

    if (st->q_head == NULL) {
        return 0;
    }
    if (store_begin(st, err) < 0) {
        if (err->code == ERR_STALE) {
            store_queue_drop(st); /* there is no file left to write them to */
        }
        return -1;
    }
    for (struct store_qrow *q = st->q_head; q != NULL && rc == 0; q = q->next) {
        rc = write_row(st, q, err);
    }
    if (rc < 0) {
        store_rollback(st);
        if (err->code == ERR_BUSY) {
            return -1; /* kept for the next try */
        }
        if (err->code == ERR_STALE) {
            store_queue_drop(st); /* there is no file left to write them to */
            return -1;
        }
        return write_one_by_one(st, err);
    }
    if (store_commit(st, err) < 0) {
        return -1;
    }
    store_queue_drop(st);
    return 0;
}

int
store_queue_flush(struct store *st, struct err *err)
{
    if (st->in_bracket) {
        return 0;
    }
    return store_queue_write(st, err);
}

/* Queues q (taking it) unless the queue is full; then writes the queue if it can. */
static int
append_soon(struct store *st, struct store_qrow *q, struct err *err)
{
    int saved = st->nowait, saved_wb = st->would_block, rc;

    if (q == NULL) {
        return err_set(err, ERR_NOMEM, "cannot record a read-only call: out of memory");
    }
    if (store_queue_full(st)) {
        qrow_free(q);
        return err_set(err, ERR_BUSY,
                       "%zu rows of read-only calls are waiting for the write lock of '%s', "
                       "another process holds it; this one was not recorded",
                       st->q_rows, st->path);
    }
    enqueue(st, q);
    st->nowait = 1;
    rc = store_queue_write(st, err);
    st->nowait = saved;
    st->would_block = saved_wb; /* a queued row is not a failed call */
    if (rc < 0 && err->code == ERR_BUSY) {
        return 0; /* kept in the queue; the caller flushes it when the lock is free */
    }
    return rc;
}

int
store_audit_append_soon(struct store *st, struct store_audit *row, struct err *err)
{
    if (st->in_bracket) {
        return store_audit_append(st, row, err);
    }
    return append_soon(st, qrow_audit(row), err);
}

int
store_step_append_soon(struct store *st, const char *session, int64_t checkpoint, const char *tool,
                       const char *description, struct err *err)
{
    struct store_qrow *q;
    int oom = 0;

    if (st->in_bracket) {
        return store_step_append(st, session, checkpoint, tool, description, err);
    }
    if (store_check_text(tool, STORE_LABEL_MAX, 1, "step tool", err) < 0 ||
        store_check_text(description, STORE_TEXT_MAX, 0, "step description", err) < 0) {
        return -1;
    }
    q = mem_calloc(1, sizeof(*q));
    if (q != NULL) {
        q->kind = QROW_STEP;
        q->checkpoint = checkpoint;
        q->session = dup_or_null(session, &q->bytes, &oom);
        q->tool = dup_or_null(tool, &q->bytes, &oom);
        q->description = dup_or_null(description ? description : "", &q->bytes, &oom);
        q->bytes += sizeof(*q);
        if (oom) {
            qrow_free(q);
            q = NULL;
        }
    }
    return append_soon(st, q, err);
}
