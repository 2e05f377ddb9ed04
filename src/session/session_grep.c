/*
 * session_grep.c - the `pattern` search of session_read_file and
 * checkpoint_read_stdstreams, with PCRE2.
 *
 * An agent's pattern is untrusted input that runs on the daemon's loop thread, so a
 * pattern that backtracks catastrophically ("(a+)+$" on a long line of a's) must not
 * hang the daemon: every match runs with a match limit, a depth limit and a heap
 * limit, and hitting one is reported as invalid_pattern naming the line, at once.
 * Lines are split on '\n'; a trailing '\r' is stripped before matching; byte_offset is
 * from the start of the file (the original counted from the searched range, reference
 * section 14 item 15).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string.h>

#include "session/session_int.h"
#include "util/mem.h"

#define GREP_MATCH_LIMIT 1000000u /* backtracking steps per line */
#define GREP_DEPTH_LIMIT 10000u   /* nested backtracking depth */
#define GREP_HEAP_LIMIT  20000u   /* KiB of heap pcre2_match may use */

void
session_grep_release(struct session_grep *g)
{
    for (size_t i = 0; i < g->n; i++) {
        mem_free(g->matches[i].line);
    }
    mem_free(g->matches);
    g->matches = NULL;
    g->n = 0;
}

static int
add_match(struct session_grep *g, size_t *cap, int64_t line_no, int64_t off, const char *line,
          size_t len, struct session_err *e)
{
    if (g->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        struct session_match *v = mem_realloc(g->matches, ncap * sizeof(*v));
        if (v == NULL) {
            return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        }
        g->matches = v;
        *cap = ncap;
    }
    g->matches[g->n].line = mem_strndup(line, len);
    if (g->matches[g->n].line == NULL) {
        return session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
    }
    g->matches[g->n].line_number = line_no;
    g->matches[g->n].byte_offset = off;
    g->n++;
    return 0;
}

int
session_grep(const char *pattern, const char *data, size_t len, int64_t base,
             struct session_grep *out, struct session_err *e)
{
    pcre2_code *re = NULL;
    pcre2_match_data *md = NULL;
    pcre2_match_context *mc = NULL;
    int errcode = 0;
    PCRE2_SIZE erroff = 0;
    size_t pos = 0, cap = 0, total = 0;
    int64_t line_no = 0;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (!session_is_text(data, len)) {
        return session_fail(e, SESSION_E_BINARY, ERR_INVAL,
                            "pattern search requires UTF-8 text content; read the bytes with "
                            "offset and limit instead");
    }
    re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &errcode, &erroff,
                       NULL);
    if (re == NULL) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        return session_fail(e, SESSION_E_PATTERN, ERR_INVAL,
                            "invalid pattern at offset %zu: %s; fix the regular expression",
                            (size_t)erroff, (const char *)msg);
    }
    md = pcre2_match_data_create_from_pattern(re, NULL);
    mc = pcre2_match_context_create(NULL);
    if (md == NULL || mc == NULL) {
        session_fail(e, SESSION_E_OTHER, ERR_NOMEM, "out of memory");
        goto out;
    }
    pcre2_set_match_limit(mc, GREP_MATCH_LIMIT);
    pcre2_set_depth_limit(mc, GREP_DEPTH_LIMIT);
    pcre2_set_heap_limit(mc, GREP_HEAP_LIMIT);
    while (pos < len) {
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len;
        size_t llen = end - pos;
        int m;

        line_no++;
        if (llen > 0 && data[pos + llen - 1] == '\r') {
            llen--;
        }
        m = pcre2_match(re, (PCRE2_SPTR)(data + pos), llen, 0, PCRE2_NO_UTF_CHECK, md, mc);
        if (m >= 0) {
            total += llen + 64;
            if (total > SESSION_READ_MAX) {
                session_fail(e, SESSION_E_TOO_LARGE, ERR_TOOBIG,
                             "the matches are larger than one result may carry (%zu bytes); "
                             "narrow the pattern or search a smaller range with offset and limit",
                             SESSION_READ_MAX);
                e->d1 = (int64_t)total;
                e->d2 = (int64_t)SESSION_READ_MAX;
                goto out;
            }
            if (add_match(out, &cap, line_no, base + (int64_t)pos, data + pos, llen, e) < 0) {
                goto out;
            }
        } else if (m != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(m, msg, sizeof(msg));
            session_fail(e, SESSION_E_PATTERN, ERR_INVAL,
                         "pattern gave up on line %lld (%s): it backtracks too much; simplify it "
                         "(avoid nested quantifiers such as (a+)+)",
                         (long long)line_no, (const char *)msg);
            goto out;
        }
        if (nl == NULL) {
            break;
        }
        pos = end + 1;
    }
    rc = 0;
out:
    if (rc < 0) {
        session_grep_release(out);
    }
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc;
}
