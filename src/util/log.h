/*
 * log.h - one-line log messages on stderr.
 *
 * stdout belongs to the protocol, so logs only ever go to stderr (fd 2), one line per
 * message: "drun-mcp: warn: cannot open 'x': No such file or directory". Newlines and
 * control characters inside a message are escaped so one message is always one line.
 * A layer that handles an error logs it once; lower layers return it.
 */
#ifndef DRUN_UTIL_LOG_H
#define DRUN_UTIL_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Sets the program name shown on each line and the most verbose level printed. */
void log_init(const char *prog, int level);

/* Returns the current level. */
int log_level(void);

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
