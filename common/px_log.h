/* px_log.h: logging and check macros shared by every layer.
 *
 * Lines go to stderr as "LEVEL [tag] file:line: message". The level comes from
 * PX_LOG_LEVEL (error|warn|info|debug, default info), read once. The tag is
 * the process role set by px_log_set_tag() ("parallaxd", "rank 3", ...).
 * Thread-safe: each line is written with one fprintf. */
#ifndef PX_LOG_H
#define PX_LOG_H

#include <stddef.h>
#include <stdio.h>
#include "px_status.h"

typedef enum { PX_LOG_ERROR = 0, PX_LOG_WARN, PX_LOG_INFO, PX_LOG_DEBUG } px_log_level_t;

/* Sets the tag printed on every line; the string is copied (max 63 bytes). */
void px_log_set_tag(const char *tag);
int px_log_enabled(px_log_level_t level);
void px_log_write(px_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Longest first-error text kept (bytes, with the NUL). */
#define PX_LOG_FIRST_ERROR_MAX 512
/* Copies the first ERROR message logged since the start (or the last
 * px_log_first_error_reset) into buf (`len` bytes, NUL-terminated,
 * truncated; "" if none). The first function that sees an error logs it
 * with context, so this is the root cause a failing rank reports to its
 * peers; the PX_CHECK lines that follow it are not. Any thread. Messages
 * below the PX_LOG_LEVEL are not seen. */
void px_log_first_error(char *buf, size_t len);
/* Forgets the first error (an error that was handled, not fatal). */
void px_log_first_error_reset(void);

#define px_error(...) px_log_write(PX_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define px_warn(...)  px_log_write(PX_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define px_info(...)  px_log_write(PX_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define px_debug(...) do { if (px_log_enabled(PX_LOG_DEBUG)) \
    px_log_write(PX_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__); } while (0)

/* 1 while an ERROR line written on this thread has not been followed by a
 * PX_CHECK that passed: the error on its way up was logged where it was
 * made. */
extern __thread int px__log_error_pending;

/* A PX_CHECK that failed at file:line. An error is logged once, where it is
 * made (px_error there, with what only that frame knows); the frames it
 * passes on the way up add a DEBUG line "call -> status" each
 * (PX_LOG_LEVEL=debug shows its path). An error whose origin said nothing
 * is logged at ERROR by the first PX_CHECK that sees it. */
void px__check_failed(const char *file, int line, const char *call, px_status_t status);

/* Evaluates a px_status_t expression; on failure (px__check_failed) returns
 * it from the enclosing function. */
#define PX_CHECK(call) do { px_status_t px__s = (call); if (px__s < 0) { \
    px__check_failed(__FILE__, __LINE__, #call, px__s); return px__s; } \
    px__log_error_pending = 0; } while (0)

/* Same, but store into `status` and jump to `label` (cleanup with goto). */
#define PX_CHECK_GOTO(call, status, label) do { (status) = (call); if ((status) < 0) { \
    px__check_failed(__FILE__, __LINE__, #call, (status)); goto label; } \
    px__log_error_pending = 0; } while (0)

#endif
