/* px_log.c: stderr logger. Level read once from PX_LOG_LEVEL; any thread. */
#include "px_log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static char log_tag[64] = "parallax";
static int log_level = -1;

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
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    base = strrchr(file, '/');
    base = base ? base + 1 : file;
    fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s [%s] %s:%d: %s\n", tm.tm_hour, tm.tm_min,
            tm.tm_sec, ts.tv_nsec / 1000000, names[level], log_tag, base, line, msg);
}
