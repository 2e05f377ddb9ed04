/*
 * store_blob_stream.c - blobs streamed in and out: the streaming writer (a fetch body
 * stored as it arrives, zstd-compressed through an unlinked temporary file, on a thread
 * of its own) and the streaming reader (a blob written to an fd without holding it whole).
 * The blob format and its checks are described in store_blob.c.
 */
#include "store/store_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "util/hash.h"
#include "util/log.h"
#include "util/mem.h"

/* ---- the streaming writer ---------------------------------------------------------- */

/*
 * Until more than STORE_BLOB_HEAD bytes arrive, the writer only buffers them, and a
 * small blob goes through store_blob_put_row (so it is stored exactly as store_blob_put stores it:
 * codec 0 when zstd does not help). Past that the writer streams into an unlinked
 * temporary file, and the work moves to a thread of its own.
 *
 * Threads. The caller (session_fetch's sink, on the daemon's loop) only copies bytes into
 * one of WRITER_SLOTS slots of WRITER_SLOT bytes and queues each full slot; the writer's
 * worker thread hashes it, compresses it (or not, below) and writes it to the temporary
 * file, so hashing and compressing overlap the download and run on the other core. A
 * caller that fills every slot waits for the worker to free one: that back-pressure
 * bounds memory, and it holds the caller for at most one slot's work (about 1 ms). A
 * caller that must never wait (session_fetch, on the loop) uses try_write, which takes
 * nothing when the bytes do not fit the free slots and asks the worker to call the
 * caller's notify function when one frees (want_space, set under mu, so a slot freed in
 * between is never missed); the caller pauses its source meanwhile. end (and abort) wait
 * for the worker to drain the queue and join it: no thread outlives an ended writer.
 * store_bg instead lets the worker finish alone and then store the row itself on a
 * connection of its own (writer_store_bg), notifying the caller when it is done.
 *
 * Incompressible content (archives, images, random bytes) is stored raw. The worker
 * decides on the first slot: it compresses a sample of up to WRITER_SAMPLE bytes at
 * zstd's fastest level and, if that saves less than 1/16, the whole blob goes to the
 * temporary file uncompressed and is stored as codec 0. This costs one sample
 * compression (~0.3 ms) instead of zstd's work on every byte. A body whose first
 * chunk is random but whose rest is text is stored raw: a missed saving, never a loss.
 *
 * zstd cannot declare the content size of a frame whose size was unknown when it began,
 * and reads insist on it (store_zstd_decompress). So the stream is written without one,
 * and finish rewrites the frame header as it copies the frame into the row: the 6-byte
 * header zstd wrote (magic, descriptor, window byte) becomes 14 bytes with the same
 * window and an 8-byte Frame_Content_Size (RFC 8878 section 3.1.1.1).
 */
/*
 * Memory. A compressing stream holds one compressor whose window is capped at
 * 2^STREAM_WINDOW_LOG (the level's own would be 2 MiB), with its match tables capped to
 * suit, plus the slots (WRITER_SLOTS * WRITER_SLOT) and an output buffer of
 * ZSTD_CStreamOutSize(). A raw stream holds only the slots. The reader
 * (store_blob_write_fd) and the copy into the row work in STREAM_IO pieces. Smaller
 * windows cost little here: the big bodies a fetch brings (archives, wheels, images) are
 * already compressed, and a document's repeats sit mostly within 512 KiB.
 */
#define STREAM_WINDOW_LOG 19
#define STREAM_HASH_LOG   16
#define STREAM_CHAIN_LOG  15
#define STREAM_IO         ((size_t)256 << 10)
#define STREAM_LEVEL      1 /* at most: zstd's fastest, so compression keeps up with a download */
#define WRITER_SLOTS      2
#define WRITER_SLOT       ((size_t)128 << 10)
#define WRITER_SAMPLE     ((size_t)128 << 10)

#define ZFRAME_MAGIC  0xFD2FB528u
#define ZHDR_STREAMED 6  /* magic + descriptor + window descriptor */
#define ZHDR_DECLARED 14 /* the same + 8-byte content size */

enum writer_codec { WCODEC_UNDECIDED = -1, WCODEC_RAW = 0, WCODEC_ZSTD = 1 };

struct store_blob_writer {
    struct store *st;
    struct buf head; /* the first STORE_BLOB_HEAD bytes, until the writer streams */
    uint64_t raw;    /* bytes written */
    int streaming, ended, failed;
    int thread_up;
    pthread_t thr;

    /* Shared with the worker, under mu. The q_count slots from q_head are the worker's;
     * slot `fill`, always (q_head + q_count) % WRITER_SLOTS, is the caller's, which keeps
     * its own index so that it never reads q_head and q_count without the lock. */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* a slot was queued, or done */
    pthread_cond_t cv_space; /* a slot was freed, or the worker stopped */
    char *slot[WRITER_SLOTS];
    size_t slot_len[WRITER_SLOTS];
    size_t q_head, q_count;
    size_t fill, fill_len; /* the caller's slot and its bytes (the caller's own) */
    int done;              /* no more slots will come */
    int discard;           /* abort: drop what is queued */
    int wfailed;           /* the worker failed: werr says why */
    struct err werr;
    int want_space; /* try_write found no room: notify when a slot frees */
    int bg;         /* store_bg: the worker stores the row itself once drained */
    int finished;   /* the worker is done with everything (it may be joined) */
    int bg_busy;    /* store_bg found the write lock held past the busy timeout */
    void (*notify)(void *ud);
    void *notify_ud;

    /* The worker's own (the caller reads them only after joining it). */
    struct hash_ctx *hash; /* over the raw bytes */
    ZSTD_CCtx *cctx;       /* while compressing */
    void *zout;            /* the compressor's output buffer */
    size_t zout_len;
    int codec;                /* enum writer_codec */
    int fd;                   /* the temporary file, -1 before streaming */
    uint64_t packed;          /* bytes in the temporary file */
    uint8_t digest[HASH_LEN]; /* the SHA-256, once ended */
};

static int
writer_fail(struct store_blob_writer *w, struct err *err)
{
    w->failed = 1;
    (void)err;
    return -1;
}

/* The temporary file: beside the database (same file system as the WAL that takes the
 * copy), else $TMPDIR or /tmp for an in-memory store. */
static int
writer_tmpfile(struct store_blob_writer *w, struct err *err)
{
    const char *path = w->st->path;
    char dir[4096], tmpl[4200];
    const char *slash = path != NULL ? strrchr(path, '/') : NULL;
    const char *env = getenv("TMPDIR");

    if (path != NULL && strcmp(path, ":memory:") != 0 && path[0] != '\0') {
        if (slash == NULL) {
            snprintf(dir, sizeof(dir), ".");
        } else if (slash == path) {
            snprintf(dir, sizeof(dir), "/");
        } else {
            snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
        }
    } else {
        snprintf(dir, sizeof(dir), "%s", env != NULL && env[0] == '/' ? env : "/tmp");
    }
#ifdef O_TMPFILE
    w->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (w->fd >= 0) {
        return 0;
    }
#endif
    snprintf(tmpl, sizeof(tmpl), "%s/.drun-blob-XXXXXX", dir);
    w->fd = mkostemp(tmpl, O_CLOEXEC);
    if (w->fd < 0) {
        return err_set(err, ERR_IO,
                       "cannot make a temporary file for a blob in '%s': %s; check that the "
                       "database's directory is writable",
                       dir, strerror(errno));
    }
    unlink(tmpl);
    return 0;
}

static int
writer_pwrite(struct store_blob_writer *w, const void *p, size_t n, struct err *err)
{
    const char *c = p;

    while (n > 0) {
        ssize_t k = pwrite(w->fd, c, n, (off_t)w->packed);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return err_set(err, ERR_IO,
                           "cannot write the temporary file of a blob beside '%s': %s; free "
                           "disk space and try again",
                           w->st->path ? w->st->path : "the database",
                           k < 0 ? strerror(errno) : "no space written");
        }
        c += k;
        n -= (size_t)k;
        w->packed += (uint64_t)k;
    }
    return 0;
}

/* Compresses `len` bytes (mode ZSTD_e_continue or ZSTD_e_end) into the temporary file. */
static int
writer_compress(struct store_blob_writer *w, const void *data, size_t len, ZSTD_EndDirective mode,
                struct err *err)
{
    ZSTD_inBuffer in = {data, len, 0};

    for (;;) {
        ZSTD_outBuffer out = {w->zout, w->zout_len, 0};
        size_t left = ZSTD_compressStream2(w->cctx, &out, &in, mode);

        if (ZSTD_isError(left)) {
            return err_set(err, ERR_INTERNAL, "cannot compress a blob: %s",
                           ZSTD_getErrorName(left));
        }
        if (out.pos > 0 && writer_pwrite(w, w->zout, out.pos, err) < 0) {
            return -1;
        }
        if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) {
            return 0;
        }
    }
}

/* Sets up the compressor (worker thread). */
static int
writer_start_zstd(struct store_blob_writer *w, struct err *err)
{
    size_t n;

    w->cctx = ZSTD_createCCtx();
    w->zout_len = ZSTD_CStreamOutSize();
    w->zout = mem_alloc(w->zout_len);
    if (w->cctx == NULL || w->zout == NULL) {
        return err_set(err, ERR_NOMEM, "cannot compress a blob: out of memory");
    }
    n = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel,
                               w->st->zstd_level < STREAM_LEVEL ? w->st->zstd_level : STREAM_LEVEL);
    if (!ZSTD_isError(n)) {
        n = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 0);
    }
    if (!ZSTD_isError(n)) {
        n = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_windowLog, STREAM_WINDOW_LOG);
    }
    if (!ZSTD_isError(n)) {
        n = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_hashLog, STREAM_HASH_LOG);
    }
    if (!ZSTD_isError(n)) {
        n = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_chainLog, STREAM_CHAIN_LOG);
    }
    if (ZSTD_isError(n)) {
        return err_set(err, ERR_INTERNAL, "cannot compress a blob: %s", ZSTD_getErrorName(n));
    }
    w->codec = WCODEC_ZSTD;
    return 0;
}

/*
 * Decides, from the first slot, whether the blob is worth compressing (worker thread):
 * zstd's fastest level on a sample; less than 1/16 saved means raw.
 */
static int
writer_decide(struct store_blob_writer *w, const char *data, size_t len, struct err *err)
{
    size_t n = len < WRITER_SAMPLE ? len : WRITER_SAMPLE;
    size_t cap = ZSTD_compressBound(n);
    void *tmp = mem_alloc(cap);
    size_t z;

    if (tmp == NULL) {
        return err_set(err, ERR_NOMEM, "cannot compress a blob: out of memory");
    }
    z = ZSTD_compress(tmp, cap, data, n, 1);
    mem_free(tmp);
    if (!ZSTD_isError(z) && z * 16 > n * 15) {
        w->codec = WCODEC_RAW;
        return 0;
    }
    return writer_start_zstd(w, err);
}

/* One slot's work (worker thread): hash, then compress or copy into the temporary file. */
static int
writer_process(struct store_blob_writer *w, const char *data, size_t len, struct err *err)
{
    hash_update(w->hash, data, len);
    if (w->codec == WCODEC_UNDECIDED && writer_decide(w, data, len, err) < 0) {
        return -1;
    }
    if (w->codec == WCODEC_RAW) {
        return writer_pwrite(w, data, len, err);
    }
    return writer_compress(w, data, len, ZSTD_e_continue, err);
}

/* Calls the caller's notify function, under mu (so that set_notify(NULL) is final). */
static void
writer_wake(struct store_blob_writer *w)
{
    if (w->notify != NULL) {
        w->notify(w->notify_ud);
    }
}

static void writer_store_bg(struct store_blob_writer *w);

static void *
writer_main(void *arg)
{
    struct store_blob_writer *w = arg;
    struct err e = {0};
    int failed = 0, discard = 0, bg = 0;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->q_count == 0 && !w->done) {
            pthread_cond_wait(&w->cv_work, &w->mu);
        }
        if (w->q_count == 0 || w->discard) {
            discard = w->discard;
            bg = w->bg;
            break;
        }
        size_t i = w->q_head;
        pthread_mutex_unlock(&w->mu);
        if (!failed && writer_process(w, w->slot[i], w->slot_len[i], &e) < 0) {
            failed = 1;
        }
        pthread_mutex_lock(&w->mu);
        if (failed && !w->wfailed) {
            w->wfailed = 1;
            w->werr = e;
        }
        w->q_head = (w->q_head + 1) % WRITER_SLOTS;
        w->q_count--;
        pthread_cond_signal(&w->cv_space);
        if (w->want_space || failed) {
            w->want_space = 0;
            writer_wake(w);
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (!failed && !discard && w->codec == WCODEC_ZSTD) {
        failed = writer_compress(w, "", 0, ZSTD_e_end, &e) < 0;
    }
    if (w->codec == WCODEC_UNDECIDED) {
        w->codec = WCODEC_RAW; /* nothing came: cannot happen past the head, but be exact */
    }
    ZSTD_freeCCtx(w->cctx);
    w->cctx = NULL;
    mem_free(w->zout);
    w->zout = NULL;
    if (!failed && !discard) {
        hash_final(w->hash, w->digest);
        w->hash = NULL;
        if (bg) {
            writer_store_bg(w);
        }
    }
    pthread_mutex_lock(&w->mu);
    if (failed && !w->wfailed) {
        w->wfailed = 1;
        w->werr = e;
    }
    w->finished = 1;
    pthread_cond_signal(&w->cv_space);
    writer_wake(w);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Queues the caller's slot (fill_len bytes) without waiting: the next slot may still be
 * the worker's, which writer_feed checks before it copies into it. */
static int
writer_push(struct store_blob_writer *w, struct err *err)
{
    int rc = 0;

    pthread_mutex_lock(&w->mu);
    w->slot_len[w->fill] = w->fill_len;
    w->q_count++;
    w->fill = (w->fill + 1) % WRITER_SLOTS;
    w->fill_len = 0;
    pthread_cond_signal(&w->cv_work);
    if (w->wfailed) {
        *err = w->werr;
        rc = -1;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* Waits until the caller's slot is free of the worker (every slot queued: wait for one). */
static int
writer_wait_slot(struct store_blob_writer *w, struct err *err)
{
    int rc = 0;

    pthread_mutex_lock(&w->mu);
    while (w->q_count == WRITER_SLOTS && !w->wfailed) {
        pthread_cond_wait(&w->cv_space, &w->mu);
    }
    if (w->wfailed) {
        *err = w->werr;
        rc = -1;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* Copies caller bytes into slots, queueing each full one; waits for a slot only when
 * every slot is queued (try_write checks there is room first, so it never waits). */
static int
writer_feed(struct store_blob_writer *w, const char *data, size_t len, struct err *err)
{
    while (len > 0) {
        size_t k = WRITER_SLOT - w->fill_len;
        char *dst;

        if (w->fill_len == 0 && writer_wait_slot(w, err) < 0) {
            return -1;
        }
        dst = w->slot[w->fill];

        if (k > len) {
            k = len;
        }
        memcpy(dst + w->fill_len, data, k);
        w->fill_len += k;
        data += k;
        len -= k;
        if (w->fill_len == WRITER_SLOT && writer_push(w, err) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Stops the worker (after it drains the queue, unless discarding) and joins it. */
static void
writer_join(struct store_blob_writer *w, int discard)
{
    if (!w->thread_up) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    w->discard = discard;
    pthread_cond_signal(&w->cv_work);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thr, NULL);
    w->thread_up = 0;
}

static int
writer_start_stream(struct store_blob_writer *w, struct err *err)
{
    sigset_t all, old;
    int rc;

    if (writer_tmpfile(w, err) < 0) {
        return -1;
    }
    for (size_t i = 0; i < WRITER_SLOTS; i++) {
        w->slot[i] = mem_alloc(WRITER_SLOT);
        if (w->slot[i] == NULL) {
            return err_set(err, ERR_NOMEM, "out of memory streaming a blob");
        }
    }
    w->hash = hash_new();
    if (w->hash == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory streaming a blob");
    }
    /* The thread inherits this mask: every signal stays with the loop thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thr, NULL, writer_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        return err_set(err, ERR_NOMEM, "cannot start a thread to store a blob: %s", strerror(rc));
    }
    w->thread_up = 1;
    w->streaming = 1;
    if (writer_feed(w, w->head.data ? w->head.data : "", w->head.len, err) < 0) {
        return -1;
    }
    buf_release(&w->head);
    return 0;
}

int
store_blob_writer_open(struct store *st, struct store_blob_writer **out, struct err *err)
{
    struct store_blob_writer *w = mem_calloc(1, sizeof(*w));

    *out = NULL;
    if (w == NULL) {
        return err_set(err, ERR_NOMEM, "out of memory opening a blob writer");
    }
    w->st = st;
    w->fd = -1;
    w->codec = WCODEC_UNDECIDED;
    buf_init(&w->head, STORE_BLOB_HEAD);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv_work, NULL);
    pthread_cond_init(&w->cv_space, NULL);
    *out = w;
    return 0;
}

uint64_t
store_blob_writer_size(const struct store_blob_writer *w)
{
    return w->raw;
}

int
store_blob_writer_hash(const struct store_blob_writer *w, uint8_t hash[HASH_LEN], struct err *err)
{
    if (!w->ended || w->failed) {
        return err_set(err, ERR_INVAL, "the blob writer has not ended; call store_blob_writer_end");
    }
    memcpy(hash, w->digest, HASH_LEN);
    return 0;
}

int
store_blob_writer_write(struct store_blob_writer *w, const void *data, size_t len, struct err *err)
{
    if (w->failed || w->ended) {
        return err_set(err, ERR_INVAL, "the blob writer is %s; start a new one",
                       w->failed ? "in a failed state" : "already ended");
    }
    if (len == 0) {
        return 0;
    }
    if (data == NULL) {
        return err_set(err, ERR_INVAL, "blob data is missing");
    }
    if (len > w->st->blob_max || w->raw > w->st->blob_max - len) {
        err_set(err, ERR_TOOBIG,
                "blob of more than %zu bytes is over the limit; store smaller files",
                w->st->blob_max);
        return writer_fail(w, err);
    }
    w->raw += len;
    if (!w->streaming) {
        if (w->head.len + len <= STORE_BLOB_HEAD) {
            if (buf_append(&w->head, data, len) < 0) {
                buf_err(&w->head, "a blob", err);
                return writer_fail(w, err);
            }
            return 0;
        }
        if (writer_start_stream(w, err) < 0) {
            return writer_fail(w, err);
        }
    }
    if (writer_feed(w, data, len, err) < 0) {
        return writer_fail(w, err);
    }
    return 0;
}

int
store_blob_writer_try_write(struct store_blob_writer *w, const void *data, size_t len,
                            struct err *err)
{
    size_t room;

    if (w->streaming && !w->failed && !w->ended && len > 0) {
        pthread_mutex_lock(&w->mu);
        room = (WRITER_SLOTS - w->q_count) * WRITER_SLOT;
        room = room > w->fill_len ? room - w->fill_len : 0;
        if (room < len && !w->wfailed) {
            w->want_space = 1;
            pthread_mutex_unlock(&w->mu);
            return 1;
        }
        pthread_mutex_unlock(&w->mu);
    }
    return store_blob_writer_write(w, data, len, err);
}

void
store_blob_writer_set_notify(struct store_blob_writer *w, void (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&w->mu);
    w->notify = fn;
    w->notify_ud = ud;
    pthread_mutex_unlock(&w->mu);
}

int
store_blob_writer_store_bg(struct store_blob_writer *w, struct err *err)
{
    if (w->failed) {
        return err_set(err, ERR_INVAL, "the blob writer is in a failed state; start a new one");
    }
    if (!w->streaming || w->ended || w->bg) {
        return 0; /* a small blob is stored at finish from memory, in the caller's transaction */
    }
    if (w->fill_len > 0 && writer_push(w, err) < 0) {
        writer_join(w, 1);
        return writer_fail(w, err);
    }
    pthread_mutex_lock(&w->mu);
    w->bg = 1;
    w->done = 1;
    pthread_cond_signal(&w->cv_work);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

int
store_blob_writer_busy(struct store_blob_writer *w)
{
    int busy;

    if (!w->thread_up) {
        return 0;
    }
    pthread_mutex_lock(&w->mu);
    busy = !w->finished;
    pthread_mutex_unlock(&w->mu);
    return busy;
}

int
store_blob_writer_bg_busy(struct store_blob_writer *w)
{
    int busy;

    pthread_mutex_lock(&w->mu);
    busy = w->bg_busy;
    pthread_mutex_unlock(&w->mu);
    return busy;
}

int
store_blob_writer_end(struct store_blob_writer *w, struct err *err)
{
    if (w->failed) {
        return err_set(err, ERR_INVAL, "the blob writer is in a failed state; start a new one");
    }
    if (w->ended) {
        return 0;
    }
    if (w->streaming) {
        if (!w->bg && w->fill_len > 0 && writer_push(w, err) < 0) {
            writer_join(w, 1);
            return writer_fail(w, err);
        }
        writer_join(w, 0);
        for (size_t i = 0; i < WRITER_SLOTS; i++) {
            mem_free(w->slot[i]);
            w->slot[i] = NULL;
        }
        if (w->wfailed) {
            *err = w->werr;
            return writer_fail(w, err);
        }
    } else {
        hash_sha256(w->head.data ? w->head.data : "", w->head.len, w->digest);
    }
    w->ended = 1;
    return 0;
}

static void
writer_free(struct store_blob_writer *w)
{
    writer_join(w, 1);
    if (w->fd >= 0) {
        close(w->fd);
    }
    for (size_t i = 0; i < WRITER_SLOTS; i++) {
        mem_free(w->slot[i]);
    }
    ZSTD_freeCCtx(w->cctx);
    mem_free(w->zout);
    hash_free(w->hash);
    buf_release(&w->head);
    pthread_cond_destroy(&w->cv_space);
    pthread_cond_destroy(&w->cv_work);
    pthread_mutex_destroy(&w->mu);
    mem_free(w);
}

void
store_blob_writer_abort(struct store_blob_writer *w)
{
    if (w != NULL) {
        writer_free(w);
    }
}

static const char SQL_PUT_ZERO[] = "INSERT INTO blobs (hash, size, codec, data, base, depth) "
                                   "VALUES (?1, ?2, ?4, zeroblob(?3), NULL, 0)";

/*
 * Copies the ended stream from the temporary file into a new row: a zstd frame with its
 * header rewritten to declare the size (codec 1), or the raw bytes as they are (codec 0).
 */
static int
writer_copy(struct store_blob_writer *w, sqlite3 *db, sqlite3_stmt *s, const uint8_t hash[HASH_LEN],
            struct err *err)
{
    struct store *st = w->st;
    uint8_t hdr[ZHDR_DECLARED];
    int is_raw = w->codec == WCODEC_RAW;
    uint64_t stored = is_raw ? w->packed : w->packed - ZHDR_STREAMED + ZHDR_DECLARED;
    uint64_t off = is_raw ? 0 : ZHDR_STREAMED;
    sqlite3_blob *b = NULL;
    char *chunk = NULL;
    int rc, pos, lim;

    if (is_raw && w->packed != w->raw) {
        return err_set(err, ERR_INTERNAL,
                       "the streamed blob's temporary file has %llu bytes "
                       "of %llu",
                       (unsigned long long)w->packed, (unsigned long long)w->raw);
    }
    if (!is_raw &&
        (w->packed < ZHDR_STREAMED + 3 ||
         pread(w->fd, hdr, ZHDR_STREAMED, 0) != (ssize_t)ZHDR_STREAMED ||
         (uint32_t)(hdr[0] | hdr[1] << 8 | hdr[2] << 16 | (uint32_t)hdr[3] << 24) != ZFRAME_MAGIC ||
         (hdr[4] & 0xE3) != 0)) {
        return err_set(err, ERR_INTERNAL,
                       "the streamed blob's zstd frame header is not the expected one");
    }
    /* Incompressible content grows a little in zstd (about 3 bytes per 128 KiB block),
     * so content just under the blob cap can still be over SQLite's own limit. */
    lim = sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1);
    if (stored > (uint64_t)INT32_MAX || (lim > 0 && stored > (uint64_t)lim)) {
        return err_set(err, ERR_TOOBIG,
                       "a blob of %llu bytes compresses to %llu bytes, over SQLite's limit of "
                       "%d bytes for one value; store smaller files",
                       (unsigned long long)w->raw, (unsigned long long)stored, lim);
    }
    if (!is_raw) {
        hdr[4] |= 0xC0; /* Frame_Content_Size_flag 3: 8 bytes; window descriptor kept */
        for (int i = 0; i < 8; i++) {
            hdr[ZHDR_STREAMED + i] = (uint8_t)(w->raw >> (8 * i));
        }
    }
    store_bind_hash(s, 1, hash);
    sqlite3_bind_int64(s, 2, (sqlite3_int64)w->raw);
    sqlite3_bind_int64(s, 3, (sqlite3_int64)stored);
    sqlite3_bind_int(s, 4, is_raw ? 0 : 1);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        return db == st->db ? store_sqlerr(st, rc, "store a blob", err)
                            : err_set(err, ERR_DB, "cannot store a blob: %s", sqlite3_errmsg(db));
    }
    rc = sqlite3_blob_open(db, "main", "blobs", "data", sqlite3_last_insert_rowid(db), 1, &b);
    if (rc == SQLITE_OK && !is_raw) {
        rc = sqlite3_blob_write(b, hdr, ZHDR_DECLARED, 0);
    }
    chunk = mem_alloc(STREAM_IO);
    if (chunk == NULL) {
        sqlite3_blob_close(b);
        return err_set(err, ERR_NOMEM, "out of memory storing a blob");
    }
    pos = is_raw ? 0 : ZHDR_DECLARED;
    while (rc == SQLITE_OK && off < w->packed) {
        size_t want = w->packed - off < STREAM_IO ? (size_t)(w->packed - off) : STREAM_IO;
        ssize_t got = pread(w->fd, chunk, want, (off_t)off);

        if (got <= 0) {
            if (got < 0 && errno == EINTR) {
                continue;
            }
            mem_free(chunk);
            sqlite3_blob_close(b);
            return err_set(err, ERR_IO, "cannot read back the temporary file of a blob: %s",
                           got < 0 ? strerror(errno) : "it is shorter than written");
        }
        rc = sqlite3_blob_write(b, chunk, (int)got, pos);
        pos += (int)got;
        off += (uint64_t)got;
    }
    mem_free(chunk);
    if (rc == SQLITE_OK) {
        rc = sqlite3_blob_close(b);
        b = NULL;
    }
    if (rc != SQLITE_OK) {
        sqlite3_blob_close(b);
        return db == st->db ? store_sqlerr(st, rc, "write a blob", err)
                            : err_set(err, ERR_DB, "cannot write a blob: %s", sqlite3_errmsg(db));
    }
    return 0;
}

/* Copies the ended stream into a new row on the caller's connection (in its transaction). */
static int
writer_store(struct store_blob_writer *w, const uint8_t hash[HASH_LEN], struct err *err)
{
    sqlite3_stmt *s = store_stmt(w->st, SQL_PUT_ZERO, err);

    return s == NULL ? -1 : writer_copy(w, w->st->db, s, hash, err);
}

/*
 * The worker's own insert of the finished row (store_blob_writer_store_bg), so that the
 * copy of a big body and the fsync of its WAL frames happen off the caller's thread: a
 * connection of its own (SQLite connections are never shared between threads here) with
 * a small page cache, one short transaction that waits for the write lock with the
 * store's busy timeout. The row is content-addressed, so storing it before the
 * checkpoint that names it harms nothing if that checkpoint never comes (gc removes it).
 * gc may also remove it before the checkpoint commits: finish checks again inside the
 * checkpoint's transaction and copies it from the temporary file if it is gone. Any
 * failure here is only logged (at debug): finish then does the copy as before.
 */
static void
writer_store_bg(struct store_blob_writer *w)
{
    static const char SQL_HAS_BG[] = "SELECT 1 FROM blobs WHERE hash = ?1";
    struct store *st = w->st;
    sqlite3 *db = NULL;
    sqlite3_stmt *has = NULL, *ins = NULL;
    struct err e = {0};
    struct stat sb;
    int rc, in_tx = 0;

    if (st->path == NULL || st->path[0] == '\0' || strcmp(st->path, ":memory:") == 0 ||
        st->read_only) {
        return;
    }
    /* Never into a file other than the one the store opened (a replaced DB). */
    if (st->ident_fd >= 0 &&
        (stat(st->path, &sb) != 0 || sb.st_dev != st->db_dev || sb.st_ino != st->db_ino)) {
        return;
    }
    rc = sqlite3_open_v2(st->path, &db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_extended_result_codes(db, 1);
        sqlite3_busy_timeout(db, st->busy_timeout_ms);
        /* A small cache (the frame goes straight to the WAL as pages fill), and no
         * automatic checkpoint: the store's thread does that. */
        rc =
            sqlite3_exec(db,
                         st->sync_normal ? "PRAGMA synchronous = NORMAL; PRAGMA cache_size = -256; "
                                           "PRAGMA wal_autocheckpoint = 0"
                                         : "PRAGMA synchronous = FULL; PRAGMA cache_size = -256; "
                                           "PRAGMA wal_autocheckpoint = 0",
                         NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        in_tx = rc == SQLITE_OK;
        if ((rc & 0xff) == SQLITE_BUSY) {
            pthread_mutex_lock(&w->mu);
            w->bg_busy = 1;
            pthread_mutex_unlock(&w->mu);
        }
    }
    if (rc == SQLITE_OK) {
        rc = sqlite3_prepare_v2(db, SQL_HAS_BG, -1, &has, NULL);
    }
    if (rc == SQLITE_OK) {
        store_bind_hash(has, 1, w->digest);
        rc = sqlite3_step(has);
        if (rc == SQLITE_DONE) {
            rc = sqlite3_prepare_v2(db, SQL_PUT_ZERO, -1, &ins, NULL);
            if (rc == SQLITE_OK && writer_copy(w, db, ins, w->digest, &e) < 0) {
                rc = SQLITE_ERROR;
            }
        } else if (rc == SQLITE_ROW) {
            rc = SQLITE_OK; /* already stored */
        }
    }
    sqlite3_finalize(has);
    sqlite3_finalize(ins);
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        in_tx = rc != SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        log_debug("storing a streamed blob ahead of its checkpoint failed (%s); it is stored "
                  "with the checkpoint instead",
                  e.msg[0] ? e.msg
                  : db     ? sqlite3_errmsg(db)
                           : sqlite3_errstr(rc));
        if (in_tx) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        }
    }
    sqlite3_close(db);
}

int
store_blob_writer_finish(struct store_blob_writer *w, uint8_t hash[HASH_LEN], int64_t *size,
                         struct err *err)
{
    int own = 0, exists = 0, rc = -1;

    if (w->failed) {
        err_set(err, ERR_INVAL, "the blob writer is in a failed state; nothing was stored");
        writer_free(w);
        return -1;
    }
    if (store_blob_writer_end(w, err) < 0) {
        writer_free(w);
        return -1;
    }
    memcpy(hash, w->digest, HASH_LEN);
    if (size != NULL) {
        *size = (int64_t)w->raw;
    }
    if (!w->streaming) {
        rc = store_blob_put_row(w->st, w->head.data ? w->head.data : "", w->head.len, NULL, hash,
                                err);
        writer_free(w);
        return rc;
    }
    if (store_tx_begin(w->st, &own, err) < 0) {
        writer_free(w);
        return -1;
    }
    if (store_blob_has(w->st, hash, &exists, NULL, err) < 0) {
        goto out;
    }
    rc = exists ? 0 : writer_store(w, hash, err);
out:
    rc = store_tx_end(w->st, own, rc, err);
    writer_free(w);
    return rc;
}

/* ---- the streaming reader ---------------------------------------------------------- */

static const char SQL_ROW[] = "SELECT id, size, codec FROM blobs WHERE hash = ?1";

static int
fd_write_all(int fd, const void *p, size_t n, struct err *err)
{
    const char *c = p;

    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return err_set(err, ERR_IO, "cannot write a blob's bytes out: %s",
                           k < 0 ? strerror(errno) : "nothing written");
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* store_blob_write_fd, and with expect >= 0 the row must say exactly that size. */
static int
blob_write_fd(struct store *st, const uint8_t hash[HASH_LEN], int64_t expect, int fd,
              struct err *err)
{
    char hex[HASH_HEX_LEN + 1], what[96];
    sqlite3_stmt *s = store_stmt(st, SQL_ROW, err);
    sqlite3_blob *b = NULL;
    ZSTD_DCtx *dctx = NULL;
    struct hash_ctx *h = NULL;
    char *in = NULL, *out = NULL;
    uint8_t got[HASH_LEN];
    int64_t id, size;
    uint64_t done = 0;
    int codec, rc, stored, pos = 0, ret = -1;

    if (s == NULL) {
        return -1;
    }
    hex_encode(hash, HASH_LEN, hex);
    snprintf(what, sizeof(what), "blob '%.16s'", hex);
    store_bind_hash(s, 1, hash);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        if (rc == SQLITE_DONE) {
            return err_set(err, ERR_NOTFOUND, "blob '%s' is not in the database", hex);
        }
        return store_sqlerr(st, rc, "read a blob", err);
    }
    id = sqlite3_column_int64(s, 0);
    size = sqlite3_column_int64(s, 1);
    codec = sqlite3_column_int(s, 2);
    sqlite3_reset(s);
    if (size < 0 || (uint64_t)size > st->blob_max) {
        return err_set(err, ERR_CORRUPT,
                       "%s is corrupt: stored size %lld is outside 0..%zu; restore the database "
                       "from a backup",
                       what, (long long)size, st->blob_max);
    }
    if (expect >= 0 && size != expect) {
        return err_set(err, ERR_CORRUPT,
                       "%s is corrupt: it holds %lld bytes where %lld are expected; restore the "
                       "database from a backup",
                       what, (long long)size, (long long)expect);
    }
    if (codec == 2) {
        /* A delta needs its base whole: these are manifests, never large files. */
        struct buf all;
        buf_init(&all, (size_t)size);
        ret = store_blob_read(st, hash, &all, err);
        if (ret == 0) {
            ret = fd_write_all(fd, all.data ? all.data : "", all.len, err);
        }
        buf_release(&all);
        return ret;
    }
    if (codec != 0 && codec != 1) {
        return err_set(err, ERR_CORRUPT,
                       "%s is corrupt: unknown codec %d; restore the database from a backup", what,
                       codec);
    }
    rc = sqlite3_blob_open(st->db, "main", "blobs", "data", id, 0, &b);
    if (rc != SQLITE_OK) {
        return store_sqlerr(st, rc, "read a blob", err);
    }
    stored = sqlite3_blob_bytes(b);
    h = hash_new();
    in = mem_alloc(STREAM_IO);
    out = codec == 1 ? mem_alloc(STREAM_IO) : NULL;
    dctx = codec == 1 ? ZSTD_createDCtx() : NULL;
    if (h == NULL || in == NULL || (codec == 1 && (out == NULL || dctx == NULL))) {
        err_set(err, ERR_NOMEM, "cannot read %s: out of memory", what);
        goto out;
    }
    if (codec == 0 && stored != size) {
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: %d bytes stored for size %lld; restore the database from a "
                "backup",
                what, stored, (long long)size);
        goto out;
    }
    while (pos < stored) {
        int n = stored - pos < (int)STREAM_IO ? stored - pos : (int)STREAM_IO;

        rc = sqlite3_blob_read(b, in, n, pos);
        if (rc != SQLITE_OK) {
            store_sqlerr(st, rc, "read a blob", err);
            goto out;
        }
        if (codec == 0) {
            hash_update(h, in, (size_t)n);
            if (fd_write_all(fd, in, (size_t)n, err) < 0) {
                goto out;
            }
            done += (uint64_t)n;
        } else {
            ZSTD_inBuffer zi = {in, (size_t)n, 0};
            if (pos == 0) {
                /* The frame must declare exactly the stored size (as store_blob_get). */
                unsigned long long content = ZSTD_getFrameContentSize(in, (size_t)n);
                if (content != (unsigned long long)size) {
                    err_set(err, ERR_CORRUPT,
                            "%s is corrupt: its zstd frame does not declare the stored size "
                            "%lld; restore the database from a backup",
                            what, (long long)size);
                    goto out;
                }
            }
            while (zi.pos < zi.size) {
                ZSTD_outBuffer zo = {out, STREAM_IO, 0};
                size_t z = ZSTD_decompressStream(dctx, &zo, &zi);
                if (ZSTD_isError(z) || done + zo.pos > (uint64_t)size) {
                    err_set(err, ERR_CORRUPT,
                            "%s is corrupt: %s; restore the database from a backup", what,
                            ZSTD_isError(z) ? ZSTD_getErrorName(z) : "more bytes than its size");
                    goto out;
                }
                hash_update(h, out, zo.pos);
                if (fd_write_all(fd, out, zo.pos, err) < 0) {
                    goto out;
                }
                done += zo.pos;
            }
        }
        pos += n;
    }
    if (codec == 1) {
        /* flush whatever the decoder still holds */
        for (;;) {
            ZSTD_inBuffer zi = {"", 0, 0};
            ZSTD_outBuffer zo = {out, STREAM_IO, 0};
            size_t z = ZSTD_decompressStream(dctx, &zo, &zi);
            if (ZSTD_isError(z) || done + zo.pos > (uint64_t)size) {
                err_set(err, ERR_CORRUPT, "%s is corrupt: %s; restore the database from a backup",
                        what, ZSTD_isError(z) ? ZSTD_getErrorName(z) : "more bytes than its size");
                goto out;
            }
            hash_update(h, out, zo.pos);
            if (fd_write_all(fd, out, zo.pos, err) < 0) {
                goto out;
            }
            done += zo.pos;
            if (zo.pos == 0) {
                break;
            }
        }
    }
    hash_final(h, got);
    h = NULL;
    if (done != (uint64_t)size) {
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: it holds %llu bytes for size %lld; restore the database from a "
                "backup",
                what, (unsigned long long)done, (long long)size);
        goto out;
    }
    if (memcmp(got, hash, HASH_LEN) != 0) {
        /* the words store_blob_get uses, so both paths report a damaged blob alike */
        err_set(err, ERR_CORRUPT,
                "%s is corrupt: its bytes do not match its hash; restore the database from a "
                "backup",
                what);
        goto out;
    }
    ret = 0;
out:
    sqlite3_blob_close(b);
    hash_free(h);
    ZSTD_freeDCtx(dctx);
    mem_free(in);
    mem_free(out);
    return ret;
}

int
store_blob_write_fd(struct store *st, const uint8_t hash[HASH_LEN], int fd, struct err *err)
{
    return blob_write_fd(st, hash, -1, fd, err);
}

int
store_blob_write_fd_size(struct store *st, const uint8_t hash[HASH_LEN], uint64_t size, int fd,
                         struct err *err)
{
    if (size > (uint64_t)INT64_MAX) {
        return err_set(err, ERR_INVAL, "a blob size of %llu bytes is out of range",
                       (unsigned long long)size);
    }
    return blob_write_fd(st, hash, (int64_t)size, fd, err);
}
