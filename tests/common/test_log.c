/* test_log: an error is logged once, where it is made; PX_CHECK frames on
 * its way up add DEBUG lines, not more ERROR lines. stderr is read back
 * from a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_log.h"

#include "../px_check.h"

static px_status_t origin_logs(void)
{
    px_error("origin: the disk is full");
    return PX_ERR_IO;
}
static px_status_t origin_silent(void) { return PX_ERR_NO_MEMORY; }
static px_status_t ok(void) { return PX_OK; }

static px_status_t middle(px_status_t (*f)(void))
{
    PX_CHECK(f());
    return PX_OK;
}

static px_status_t top(px_status_t (*f)(void))
{
    px_status_t status;
    PX_CHECK_GOTO(middle(f), status, out);
    status = PX_OK;
out:
    return status;
}

/* Runs top(f) with stderr in a file; the number of lines with `what`. */
static int lines_with(px_status_t (*f)(void), const char *what, px_status_t *st)
{
    char path[] = "/tmp/px_test_log_XXXXXX", line[4096];
    int fd = mkstemp(path), saved = dup(2), n = 0;
    px_status_t after;
    fflush(stderr);
    dup2(fd, 2);
    *st = top(f);
    PX_CHECK_GOTO(ok(), after, done); /* a check that passes ends the chain */
done:
    (void)after;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *in = fdopen(fd, "r");
    rewind(in);
    while (fgets(line, sizeof(line), in))
        n += strstr(line, what) != NULL;
    fclose(in);
    unlink(path);
    return n;
}

int main(void)
{
    px_status_t st;
    setenv("PX_LOG_LEVEL", "info", 1);
    CHECK(lines_with(origin_logs, "ERROR", &st) == 1 && st == PX_ERR_IO,
          "a logged error: one ERROR line (its origin's)");
    CHECK(lines_with(origin_silent, "ERROR", &st) == 1 && st == PX_ERR_NO_MEMORY,
          "a silent origin: one ERROR line, the first check's");
    CHECK(lines_with(origin_silent, "f() failed", &st) == 1,
          "the silent origin's ERROR names the innermost call");
    CHECK(lines_with(origin_logs, "ERROR", &st) == 1, "a second chain logs its own error again");
    printf(fails ? "FAILED (%d)\n" : "OK\n", fails);
    return fails ? 1 : 0;
}
