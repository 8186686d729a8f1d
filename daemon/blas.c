/* blas.c: the OpenBLAS core this node's ranks run, asked once of
 * parallax-rank.
 *
 * parallaxd links no OpenBLAS, and which core OpenBLAS picks by itself is
 * known only to a process that loads it; so at start the daemon runs
 * `parallax-rank --blas-core` in its own environment (what its ranks
 * inherit: PX_BLAS_CORETYPE, a preset OPENBLAS_CORETYPE) and keeps the
 * answer (px_cpu_tier.h's probe line): the core its ranks' environment
 * gets (OPENBLAS_CORETYPE and PX_BLAS_CORE_SET, as the rank itself would
 * re-execute with) and the core and reason `pctl nodes` shows. A probe
 * that fails leaves both empty: ranks then choose their core themselves
 * (px_blas_core_ensure) and `pctl nodes` shows "-". Main thread, at start,
 * before the loop runs. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "px_log.h"
#include "px_time.h"

extern char **environ;

/* The probe's deadline (it loads OpenBLAS and runs cpuid: milliseconds). */
#define PXD_BLAS_PROBE_MS 10000

/* Runs `bin --blas-core`; its first output line into buf[len]. */
static px_status_t run_probe(const char *bin, char *buf, size_t len)
{
    char *argv[] = {(char *)bin, "--blas-core", NULL};
    posix_spawn_file_actions_t fa;
    int fds[2], st = 0, rc;
    size_t have = 0;
    pid_t pid;
    int64_t deadline = px_time_mono_ms() + PXD_BLAS_PROBE_MS;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return PX_ERR_IO;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        px_warn("BLAS core: cannot run %s --blas-core: %s", bin, strerror(rc));
        return PX_ERR_IO;
    }
    for (;;) { /* until EOF, a full buffer or the deadline */
        struct pollfd p = {fds[0], POLLIN, 0};
        int64_t left = deadline - px_time_mono_ms();
        ssize_t n;
        if (left <= 0 || have + 1 >= len) {
            if (left <= 0)
                px_warn("BLAS core: %s --blas-core gave no answer within %d ms", bin,
                        PXD_BLAS_PROBE_MS);
            kill(pid, SIGKILL);
            break;
        }
        if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
            break;
        n = read(fds[0], buf + have, len - 1 - have);
        if (n > 0)
            have += (size_t)n;
        else if (n == 0 || errno != EINTR)
            break;
    }
    buf[have] = '\0';
    close(fds[0]);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        px_warn("BLAS core: %s --blas-core failed (status %d)", bin, st);
        return PX_ERR_IO;
    }
    return PX_OK;
}

void px_blas_probe(px_daemon_t *d)
{
    char err[512], out[256];
    const char *bin = px_supervisor_rank_bin(d, err, sizeof(err));

    memset(&d->blas, 0, sizeof(d->blas));
    if (!bin) {
        px_warn("BLAS core of this node's ranks unknown: %s", err);
        return;
    }
    if (run_probe(bin, out, sizeof(out)) != PX_OK)
        return;
    if (px_blas_probe_parse(out, &d->blas) != PX_OK) {
        px_warn("BLAS core: %s --blas-core printed '%.100s', not a blas-core line", bin, out);
        memset(&d->blas, 0, sizeof(d->blas));
        return;
    }
    if (d->blas.child_core[0]) {
        snprintf(d->blas_env[0], sizeof(d->blas_env[0]), "OPENBLAS_CORETYPE=%s",
                 d->blas.child_core);
        snprintf(d->blas_env[1], sizeof(d->blas_env[1]), PX_BLAS_CORE_SET_ENV "=%s",
                 d->blas.child_core);
    }
}

int px_blas_child_env(px_daemon_t *d, const char **env)
{
    if (!d->blas.child_core[0])
        return 0;
    env[0] = d->blas_env[0];
    env[1] = d->blas_env[1];
    return 2;
}
