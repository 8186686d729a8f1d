/* blas.c: the OpenBLAS core this node's ranks run, asked once of
 * parallax-rank.
 *
 * parallaxd links no OpenBLAS, and which core OpenBLAS picks by itself is
 * known only to a process that loads it; so at start the daemon runs
 * `parallax-rank --blas-core` in its own environment (what its ranks
 * inherit: PX_BLAS_CORETYPE, a preset OPENBLAS_CORETYPE) and keeps the
 * answer (px_cpu_tier.h's probe line): the core its ranks' environment
 * gets (OPENBLAS_CORETYPE and PX_BLAS_CORE_SET, as the rank itself would
 * re-execute with) and the core and reason `pctl nodes` shows. The probe
 * runs on the loop, so a rank binary that hangs delays nothing: until the
 * answer (or when it fails, logged) ranks choose their core themselves
 * (px_blas_core_ensure) and `pctl nodes` shows "-". Like a rank, the probe
 * runs in a cgroup of its own where cgroups are on (cgroup.c), killed with
 * whatever it left once it answered: a wrapper given as PX_RANK_BIN may
 * start children that outlive it. Loop thread only. */
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "px_log.h"

/* The probe's deadline (it loads OpenBLAS and runs cpuid: milliseconds). */
#define PXD_BLAS_PROBE_MS 10000

static void probe_closed(uv_handle_t *h)
{
    px_daemon_t *d = h->data;
    px_blas_run_t *r = &d->blas_run;
    px_blas_probe_t p;
    char *nl;

    if (--r->handles > 0)
        return;
    r->running = 0;
    px_cgroup_kill_remove(d, r->cgroup); /* what it left ("" no-op) */
    nl = memchr(r->buf, '\n', r->have);
    if (r->exit_status != 0 || !nl) {
        px_warn("BLAS core of this node's ranks unknown: %s --blas-core %s (ranks choose "
                "their own)", d->rank_bin, r->timed_out ? "gave no answer in time"
                : r->exit_status != 0 ? "failed" : "printed no line");
        return;
    }
    *nl = '\0';
    if (px_blas_probe_parse(r->buf, &p) != PX_OK) {
        px_warn("BLAS core: %s --blas-core printed '%.100s', not a blas-core line", d->rank_bin,
                r->buf);
        return;
    }
    d->blas = p;
    if (p.child_core[0]) {
        snprintf(d->blas_env[0], sizeof(d->blas_env[0]), "OPENBLAS_CORETYPE=%s", p.child_core);
        snprintf(d->blas_env[1], sizeof(d->blas_env[1]), PX_BLAS_CORE_SET_ENV "=%s",
                 p.child_core);
    }
    px_info("ranks run BLAS core %s (%s)", p.node_core[0] ? p.node_core : "?", p.source);
}

static void probe_close(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, probe_closed);
}

/* Once the line is read and the process has exited, the deadline goes. */
static void probe_settle(px_daemon_t *d)
{
    px_blas_run_t *r = &d->blas_run;
    if (r->exited && uv_is_closing((uv_handle_t *)&r->out))
        probe_close((uv_handle_t *)&r->timer);
}

static void on_probe_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    px_daemon_t *d = h->data;
    px_blas_run_t *r = &d->blas_run;
    (void)hint;
    *buf = uv_buf_init(r->buf + r->have, (unsigned)(sizeof(r->buf) - 1 - r->have));
}

/* Reads up to the first newline (a child the rank binary leaves behind may
 * hold the pipe open: no waiting for EOF). */
static void on_probe_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    px_daemon_t *d = s->data;
    px_blas_run_t *r = &d->blas_run;
    (void)buf;
    if (n > 0)
        r->have += (size_t)n;
    if (n < 0 || memchr(r->buf, '\n', r->have) || r->have + 1 >= sizeof(r->buf)) {
        uv_read_stop(s);
        probe_close((uv_handle_t *)s);
        probe_settle(d);
    }
}

static void on_probe_exit(uv_process_t *p, int64_t status, int sig)
{
    px_daemon_t *d = p->data;
    d->blas_run.exit_status = sig ? -sig : status;
    d->blas_run.exited = 1;
    probe_close((uv_handle_t *)p);
    probe_settle(d);
}

static void on_probe_deadline(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    px_blas_run_t *r = &d->blas_run;
    r->timed_out = 1;
    if (!uv_is_closing((uv_handle_t *)&r->proc))
        uv_process_kill(&r->proc, SIGKILL); /* its exit closes the process handle */
    probe_close((uv_handle_t *)&r->out);
    probe_close((uv_handle_t *)t);
}

void px_blas_probe_start(px_daemon_t *d)
{
    px_blas_run_t *r = &d->blas_run;
    char err[512];
    const char *bin = px_supervisor_rank_bin(d, err, sizeof(err));
    char self_exe[PATH_MAX] = "";
    /* room for the cgroup form below (5 arguments) and its NULL */
    char *argv[6] = {(char *)bin, "--blas-core", NULL};
    uv_stdio_container_t stdio[3];
    uv_process_options_t opt;
    int rc;

    memset(&d->blas, 0, sizeof(d->blas));
    memset(r, 0, sizeof(*r));
    if (!bin) {
        px_warn("BLAS core of this node's ranks unknown: %s", err);
        return;
    }
    uv_pipe_init(d->loop, &r->out, 0);
    uv_timer_init(d->loop, &r->timer);
    r->out.data = r->timer.data = r->proc.data = d;
    memset(&opt, 0, sizeof(opt));
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&r->out;
    stdio[2].flags = UV_INHERIT_FD; /* a broken binary says why in the daemon's log */
    stdio[2].data.fd = 2;
    opt.file = bin;
    opt.args = argv;
    /* in a cgroup of its own from its first instruction, as a rank */
    if (px_cgroup_rank_create(d, "blas-probe", 0, r->cgroup, sizeof(r->cgroup)) == PX_OK &&
        r->cgroup[0] && readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1) > 0) {
        argv[0] = self_exe;
        argv[1] = (char *)PXD_EXEC_IN_CGROUP;
        argv[2] = r->cgroup;
        argv[3] = (char *)bin;
        argv[4] = "--blas-core";
        opt.file = PXD_SELF_EXE;
    }
    opt.flags = UV_PROCESS_DETACHED; /* own process group: a ^C to parallaxd is ours */
    opt.stdio = stdio;
    opt.stdio_count = 3;
    opt.exit_cb = on_probe_exit;
    r->handles = 2;
    r->running = 1;
    rc = uv_spawn(d->loop, &r->proc, &opt);
    if (rc != 0) {
        px_warn("BLAS core: cannot run %s --blas-core: %s", bin, uv_strerror(rc));
        r->exit_status = -1;
        px_cgroup_kill_remove(d, r->cgroup);
        r->cgroup[0] = '\0';
        uv_close((uv_handle_t *)&r->proc, NULL); /* uv_spawn's failure still inits it */
        probe_close((uv_handle_t *)&r->out);
        probe_close((uv_handle_t *)&r->timer);
        return;
    }
    r->handles = 3;
    uv_read_start((uv_stream_t *)&r->out, on_probe_alloc, on_probe_read);
    uv_timer_start(&r->timer, on_probe_deadline, PXD_BLAS_PROBE_MS, 0);
}

void px_blas_probe_kill(px_daemon_t *d)
{
    px_blas_run_t *r = &d->blas_run;
    if (!r->running)
        return;
    if (r->cgroup[0]) {
        px_cgroup_kill_remove(d, r->cgroup); /* it and what it started */
        r->cgroup[0] = '\0';
    } else if (!r->exited) {
        uv_process_kill(&r->proc, SIGKILL);
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
