/*
 * sandbox_policy.c - the command allow/deny lists of reference section 3.7.
 *
 * This is a convenience filter for operators, not a security boundary: it is not quote-
 * aware (over-splitting gives false denials), it does not look inside $(...) or backticks,
 * and a '#' inside a string ends the segment. The sandbox is what contains a command; the
 * lists only stop commands the operator does not want an agent to run at all. The check
 * runs before anything is started, so a denied command has no effect.
 */
#include "sandbox/sandbox.h"

#include <string.h>

#include "util/buf.h"
#include "util/mem.h"

/* Returns 1 if pattern p (non-empty) occurs in the n bytes at s. */
static int
contains(const char *s, size_t n, const char *p)
{
    size_t m = strlen(p);

    if (m == 0 || m > n) {
        return 0;
    }
    for (size_t i = 0; i + m <= n; i++) {
        if (memcmp(s + i, p, m) == 0) {
            return 1;
        }
    }
    return 0;
}

static int
is_sep(char c)
{
    return c == '\n' || c == ';' || c == '|' || c == '&';
}

static int
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n';
}

/* Checks one trimmed, comment-stripped segment; returns 0 or -1 with err. */
static int
check_segment(const char *s, size_t n, const char *const *deny, size_t n_deny,
              const char *const *allow, size_t n_allow, struct err *err)
{
    int any_allow = 0;

    for (size_t i = 0; i < n_deny; i++) {
        if (deny[i] != NULL && contains(s, n, deny[i])) {
            return err_set(err, ERR_DENIED, "command denied: matches denylist pattern '%s'",
                           deny[i]);
        }
    }
    for (size_t i = 0; i < n_allow; i++) {
        if (allow[i] == NULL || allow[i][0] == '\0') {
            continue;
        }
        any_allow = 1;
        if (contains(s, n, allow[i])) {
            return 0;
        }
    }
    if (any_allow) {
        struct buf list;
        buf_init(&list, 160);
        for (size_t i = 0; i < n_allow; i++) {
            if (allow[i] != NULL && allow[i][0] != '\0') {
                buf_printf(&list, "%s%s", list.len ? ", " : "", allow[i]);
            }
        }
        err_set(err, ERR_DENIED,
                "command denied: '%.*s' is not matched by any allowlist pattern; permitted: %s",
                (int)(n > 80 ? 80 : n), s, buf_cstr(&list));
        buf_release(&list);
        return -1;
    }
    return 0;
}

int
sandbox_policy_check(const char *command, size_t len, const char *const *deny, size_t n_deny,
                     const char *const *allow, size_t n_allow, struct err *err)
{
    size_t i = 0;

    if (command == NULL) {
        return err_set(err, ERR_INVAL, "no command given");
    }
    while (i <= len) {
        size_t start = i, end;
        while (i < len && !is_sep(command[i])) {
            i++;
        }
        end = i;
        /* Everything from the first '#' is a comment (not quote-aware, as the original). */
        for (size_t j = start; j < end; j++) {
            if (command[j] == '#') {
                end = j;
                break;
            }
        }
        while (start < end && is_space(command[start])) {
            start++;
        }
        while (end > start && is_space(command[end - 1])) {
            end--;
        }
        if (end > start &&
            check_segment(command + start, end - start, deny, n_deny, allow, n_allow, err) < 0) {
            return -1;
        }
        i++;
    }
    return 0;
}
