/*
 * ws_rescan.c - benchmark: rescan of an unchanged workspace, 10,000 files vs 100, and
 * of a 10,000-file workspace where one file changed; each with the inotify-assisted
 * rescan (the default) and with full scans (watches disabled through the test hook).
 *
 * Builds two workspaces of small files (10 per directory) through ws_dir_sync, lets
 * the racy window pass with one extra rescan, then times unchanged rescans of each and
 * prints the per-call times and their ratio. The target (DESIGN.md) is that a
 * session_bash call on a 10,000-file workspace costs at most 2x one on a 100-file
 * workspace overall, once the sandbox's own cost (bwrap start-up, several ms) is
 * added; the raw rescan ratio is printed so that the sandbox bench can combine them.
 * Also prints the heap held by a ws_dir per 1,000 files (manifest + keys + cache).
 *
 * Build and run: sh tools/bench/ws_rescan.sh [build-dir]
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/hash.h"
#include "util/timeutil.h"
#include "workspace/workspace.h"
#include "workspace/ws_int.h"

static int
b_put(void *ctx, const void *data, size_t len, uint8_t hash[HASH_LEN], struct err *err)
{
    (void)ctx;
    (void)err;
    hash_sha256(data, len, hash);
    return 0;
}

static int
b_get(void *ctx, const uint8_t hash[HASH_LEN], struct buf *out, struct err *err)
{
    (void)ctx;
    (void)hash;
    /* every file holds the same 64 bytes */
    if (buf_append(out, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n", 64) !=
        0) {
        return buf_err(out, "blob", err);
    }
    return 0;
}

static struct ws_blobs blobs = {.ctx = NULL, .get = b_get, .put = b_put};

static int
build(const char *path, int files, struct ws_dir **out, size_t *heap)
{
    struct ws_manifest *m = NULL;
    struct err err;
    uint8_t h[HASH_LEN];
    char key[64];
    struct mallinfo2 before, after;

    hash_sha256("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n", 64, h);
    if (ws_manifest_new(&m, &err) != 0) {
        goto fail;
    }
    for (int i = 0; i < files; i++) {
        snprintf(key, sizeof(key), "pkg%03d/sub%02d/file_%05d.txt", i / 100, (i / 10) % 10, i);
        if (ws_manifest_set(m, key, WS_FILE, 64, h, &err) != 0) {
            goto fail;
        }
    }
    before = mallinfo2();
    if (ws_dir_open(path, out, &err) != 0 || ws_dir_sync(*out, m, &blobs, &err) != 0) {
        goto fail;
    }
    after = mallinfo2();
    *heap = (after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd);
    ws_manifest_free(m);
    return 0;
fail:
    fprintf(stderr, "ws_rescan: %s\n", err.msg);
    ws_manifest_free(m);
    return -1;
}

/* Rewrites one file (same size, new content), then rescans; us per call. */
static double
time_one_change(struct ws_dir *d, int reps)
{
    struct err err;
    int64_t total = 0;
    char path[8192];

    snprintf(path, sizeof(path), "%s/pkg050/sub05/file_05050.txt", ws_dir_path(d));
    for (int i = 0; i < reps; i++) {
        FILE *f = fopen(path, "w");
        int64_t t0;
        if (f == NULL) {
            fprintf(stderr, "ws_rescan: cannot write '%s'\n", path);
            exit(1);
        }
        fprintf(f, "%063d\n", i);
        fclose(f);
        t0 = time_mono_us();
        if (ws_dir_rescan(d, NULL, &blobs, NULL, &err) != 0) {
            fprintf(stderr, "ws_rescan: %s\n", err.msg);
            exit(1);
        }
        total += time_mono_us() - t0;
    }
    return (double)total / reps;
}

static double
time_rescans(struct ws_dir *d, int reps)
{
    struct err err;
    struct ws_scan_report r;
    int64_t t0;

    /* one untimed scan so racy entries from the sync are cached */
    if (ws_dir_rescan(d, NULL, &blobs, NULL, &err) != 0) {
        fprintf(stderr, "ws_rescan: %s\n", err.msg);
        exit(1);
    }
    t0 = time_mono_us();
    for (int i = 0; i < reps; i++) {
        if (ws_dir_rescan(d, NULL, &blobs, &r, &err) != 0) {
            fprintf(stderr, "ws_rescan: %s\n", err.msg);
            exit(1);
        }
        if (r.files_read != 0 && i == 0) {
            fprintf(stderr, "ws_rescan: note: %zu files re-read (racy window)\n", r.files_read);
        }
        ws_scan_report_release(&r);
    }
    return (double)(time_mono_us() - t0) / reps;
}

static const char *
kind(const struct ws_dir *d)
{
    return d->last_scan == WS_SCAN_NONE    ? "no change seen"
           : d->last_scan == WS_SCAN_DIRTY ? "changed dirs only"
                                           : "full";
}

/* One set of measurements; watched: inotify-assisted, else full scans. */
static void
run(const char *tmp, int watched, struct ws_dir_stats *st_out)
{
    char small[4096], large[4096];
    struct ws_dir *ds = NULL, *dl = NULL;
    size_t heap_s = 0, heap_l = 0;
    struct err err;
    double us_s, us_l, us_1;
    const char *label = watched ? "inotify" : "full   ";

    ws_watch_test_fail(watched ? 0 : 1);
    snprintf(small, sizeof(small), "%s/ws-bench-100-%d", tmp, (int)getpid());
    snprintf(large, sizeof(large), "%s/ws-bench-10000-%d", tmp, (int)getpid());
    if (build(small, 100, &ds, &heap_s) != 0 || build(large, 10000, &dl, &heap_l) != 0) {
        exit(1);
    }
    us_s = time_rescans(ds, watched ? 2000 : 200);
    printf("[%s] rescan unchanged, 100 files:     %10.1f us/call (%s)\n", label, us_s, kind(ds));
    us_l = time_rescans(dl, watched ? 2000 : 5);
    printf("[%s] rescan unchanged, 10,000 files:  %10.1f us/call (%s)\n", label, us_l, kind(dl));
    us_1 = time_one_change(dl, watched ? 50 : 5);
    printf("[%s] 1 file changed, 10,000 files:    %10.1f us/call (%s)\n", label, us_1, kind(dl));
    printf("[%s] ratio unchanged 10,000 / 100:    %10.1f x\n", label, us_l / us_s);
    if (st_out != NULL) {
        ws_dir_stats(dl, st_out);
        printf("heap per 1,000 files (mallinfo2 over open+sync): %zu bytes\n", heap_l / 10);
    }
    ws_dir_destroy(ds, &err);
    ws_dir_destroy(dl, &err);
}

int
main(int argc, char **argv)
{
    const char *tmp = argc > 1 ? argv[1] : "/tmp";
    struct ws_dir_stats st;

    printf("workspace rescan on %s (the 2x target is per session_bash call, sandbox "
           "included)\n",
           tmp);
    run(tmp, 0, NULL);
    run(tmp, 1, &st);
    printf("heap per 1,000 files (ws_dir estimate): %zu bytes\n", st.mem_bytes / 10);
    return 0;
}
