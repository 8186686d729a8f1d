/* px_log.c: stderr logger. Level read once from PX_LOG_LEVEL; any thread. */
#include "px_log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static char log_tag[64] = "parallax";
static int log_level = -1;
/* the first ERROR message since start or px_log_first_error_reset (no
 * prefix), what a failing rank tells its peers; any thread may set it */
static char first_error[PX_LOG_FIRST_ERROR_MAX];
static pthread_mutex_t first_lock = PTHREAD_MUTEX_INITIALIZER;

void px_log_set_tag(const char *tag)
{
    snprintf(log_tag, sizeof(log_tag), "%s", tag);
}

int px_log_enabled(px_log_level_t level)
{
    if (log_level < 0) {
        const char *s = getenv("PX_LOG_LEVEL");
        log_level = PX_LOG_INFO;
        if (s && !strcasecmp(s, "error")) log_level = PX_LOG_ERROR;
        else if (s && !strcasecmp(s, "warn")) log_level = PX_LOG_WARN;
        else if (s && !strcasecmp(s, "debug")) log_level = PX_LOG_DEBUG;
    }
    return (int)level <= log_level;
}

void px_log_write(px_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    char msg[2048];
    va_list ap;
    struct timespec ts;
    struct tm tm;
    const char *base;

    if (!px_log_enabled(level))
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == PX_LOG_ERROR) {
        px__log_error_pending = 1;
        pthread_mutex_lock(&first_lock);
        if (!first_error[0]) { /* truncated to its size on purpose */
            size_t n = strnlen(msg, sizeof(first_error) - 1);
            memcpy(first_error, msg, n);
            first_error[n] = '\0';
        }
        pthread_mutex_unlock(&first_lock);
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    base = strrchr(file, '/');
    base = base ? base + 1 : file;
    fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s [%s] %s:%d: %s\n", tm.tm_hour, tm.tm_min,
            tm.tm_sec, ts.tv_nsec / 1000000, names[level], log_tag, base, line, msg);
}

__thread int px__log_error_pending;

void px__check_failed(const char *file, int line, const char *call, px_status_t status)
{
    if (px__log_error_pending) {
        if (px_log_enabled(PX_LOG_DEBUG))
            px_log_write(PX_LOG_DEBUG, file, line, "%s -> %s", call, px_status_str(status));
        return;
    }
    px_log_write(PX_LOG_ERROR, file, line, "%s failed: %s", call, px_status_str(status));
}

void px_log_first_error(char *buf, size_t len)
{
    if (!buf || !len)
        return;
    pthread_mutex_lock(&first_lock);
    snprintf(buf, len, "%s", first_error);
    pthread_mutex_unlock(&first_lock);
}

void px_log_first_error_reset(void)
{
    pthread_mutex_lock(&first_lock);
    first_error[0] = '\0';
    pthread_mutex_unlock(&first_lock);
}
