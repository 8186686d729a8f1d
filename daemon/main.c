/* main.c: parallaxd start and stop.
 *
 * Start: config -> state dir + flock -> boot id -> store (jobs of a
 * previous run that were active become FAILED naming the restart or the
 * reboot, except RUNNING ones whose local ranks are still alive) -> loop,
 * gRPC completion queue (notify = uv_async_send; the async callback drains
 * it) -> Control and Peer servers (a used port fails here: exit 1) ->
 * devices, adoption of those ranks (pidfd watches), SIGKILL of any other
 * parallax-rank of this node left by the dead daemon -> heartbeats ->
 * sd_notify READY=1 (both ports bound, database open). While running, a
 * service timer sends STATUS= (jobs running / queued, local ranks) and,
 * when systemd asked for it (WatchdogSec), WATCHDOG=1 at half the watchdog
 * period; it runs on the loop, so a stuck loop stops the pings.
 * Stop (SIGINT/SIGTERM, or `pctl node stop`: px_daemon_stop): sd_notify STOPPING=1, active jobs this node
 * coordinates fail ("coordinator daemon stopped"), every local rank gets
 * SIGTERM (SIGKILL after PX_KILL_GRACE_MS); once they are gone and
 * in-flight peer calls finished (or a deadline passed) the servers, queue,
 * store and loop are closed in that order. Everything runs on the main
 * thread (the loop), except gRPC's queue thread inside px_rpc. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "px_config.h"
#include "px_env.h"
#include "px_log.h"
#include "px_time.h"
#include "store.h"
#include "valstore.h"
#include "metrics.h"

#if PX_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#define notify(s) sd_notify(0, s)
#else
#define notify(s) ((void)0)
#endif

/* STATUS= period when no watchdog is asked for (ms). */
#define PXD_STATUS_MS 5000

static uv_timer_t svc_timer;
static int watchdog_on;

/* ------------------------------------------------------------------ setup */

static int mkdir_p(const char *path, mode_t mode)
{
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, mode) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, mode) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Takes an exclusive flock on `path` (created 0640) and writes `owner`
 * (d->owner: this pid, state dir and addresses) into it; fails naming the
 * holder as it wrote itself there and `what` the file guards. *fd_p: the
 * descriptor, held (and the lock with it) until the daemon exits; a dead
 * holder's lock went with it, so its file is simply taken over. */
static px_status_t lock_file(const char *path, const char *what, const char *owner, int *fd_p)
{
    char buf[1800];
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);

    if (fd < 0) {
        px_error("cannot open lock file %s: %s", path, strerror(errno));
        return PX_ERR_IO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
        /* an older daemon wrote its bare pid */
        px_error("%s is in use by another parallaxd (%s%s): %s", what,
                 n > 0 && strncmp(buf, "pid ", 4) ? "pid " : "",
                 n > 0 ? strtok(buf, "\n") : "pid ?", strerror(errno));
        close(fd);
        return PX_ERR_UNAVAILABLE;
    }
    if (ftruncate(fd, 0) == 0) {
        int len = snprintf(buf, sizeof(buf), "%s\n", owner);
        if (pwrite(fd, buf, (size_t)len, 0) < 0)
            px_warn("cannot write pid to %s", path);
    }
    *fd_p = fd;
    return PX_OK;
}

/* Takes state-dir/parallaxd.lock (flock); fails naming the holder's pid. */
static px_status_t take_lock(px_daemon_t *d)
{
    char path[1100], what[1100];

    snprintf(path, sizeof(path), "%s/parallaxd.lock", d->cfg.state_dir);
    snprintf(what, sizeof(what), "state directory %s", d->cfg.state_dir);
    return lock_file(path, what, d->owner, &d->lock_fd);
}

/* Removes a stale control.sock; fails if a live daemon answers on it. */
static px_status_t prepare_socket(px_daemon_t *d)
{
    struct sockaddr_un sa;
    int fd;

    snprintf(d->sock_path, sizeof(d->sock_path), "%s/control.sock", d->cfg.runtime_dir);
    if (strlen(d->sock_path) >= sizeof(sa.sun_path)) {
        px_error("--runtime-dir %s: socket path too long", d->cfg.runtime_dir);
        return PX_ERR_INVALID_ARGUMENT;
    }
    /* The in-use check below (connect to a live socket) races with a daemon
     * started at the same instant: neither has bound yet, both unlink and
     * bind, and both report ready. control.sock.lock, flocked for the
     * daemon's life, makes the second one fail here. */
    {
        char lpath[sizeof(d->sock_path) + 8], what[sizeof(d->sock_path) + 32];
        snprintf(lpath, sizeof(lpath), "%s.lock", d->sock_path);
        snprintf(what, sizeof(what), "control socket %s", d->sock_path);
        if (lock_file(lpath, what, d->owner, &d->sock_lock_fd) != PX_OK) {
            d->sock_path[0] = '\0';
            return PX_ERR_UNAVAILABLE;
        }
    }
    if (access(d->sock_path, F_OK) != 0)
        return PX_OK;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->sock_path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        close(fd);
        px_error("%s: another parallaxd is listening on it", d->sock_path);
        d->sock_path[0] = '\0';
        return PX_ERR_UNAVAILABLE;
    }
    if (fd >= 0)
        close(fd);
    unlink(d->sock_path);
    return PX_OK;
}

/* "host:port" with the bound port and a reachable host for advertising. */
static void advertise(const char *listen, int port, char *out, size_t len)
{
    const char *colon = strrchr(listen, ':');
    char host[200];
    size_t hl = colon ? (size_t)(colon - listen) : strlen(listen);

    if (hl >= sizeof(host))
        hl = sizeof(host) - 1;
    memcpy(host, listen, hl);
    host[hl] = '\0';
    if (!strcmp(host, "0.0.0.0") || !strcmp(host, "[::]") || !strcmp(host, "::") || !host[0]) {
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "localhost");
    }
    if (port > 0)
        snprintf(out, len, "%s:%d", host, port);
    else
        snprintf(out, len, "%s", listen);
}

/* 1 if host:port names a loopback address (127.0.0.0/8, ::1, localhost). */
static int is_loopback(const char *hostport)
{
    return !strncmp(hostport, "127.", 4) || !strncmp(hostport, "[::1]:", 6) ||
           !strncmp(hostport, "localhost:", 10) || !strncmp(hostport, "unix:", 5);
}

/* control.sock: mode 0660 (set by px_rpc), group cfg.control_group. */
static px_status_t socket_group(px_daemon_t *d)
{
    struct group *g;

    if (!d->cfg.control_group)
        return PX_OK;
    g = getgrnam(d->cfg.control_group);
    if (!g) {
        px_error("control-group %s: no such group", d->cfg.control_group);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (chown(d->sock_path, (uid_t)-1, g->gr_gid) != 0 || chmod(d->sock_path, 0660) != 0) {
        px_error("cannot give %s to group %s: %s", d->sock_path, d->cfg.control_group,
                 strerror(errno));
        return PX_ERR_IO;
    }
    return PX_OK;
}

/* STATUS= line for systemctl status; WATCHDOG=1 when systemd watches. */
static void on_svc_timer(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    int running = 0, starting = 0, pending = 0;
    char buf[160];

    for (px_job_t *j = d->jobs; j; j = j->next) {
        if (j->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING)
            running++;
        else if (j->state == PARALLAX__V1__JOB_STATE__JOB_STARTING)
            starting++;
        else if (j->state == PARALLAX__V1__JOB_STATE__JOB_PENDING)
            pending++;
    }
    snprintf(buf, sizeof(buf), "STATUS=%d jobs running, %d starting, %d queued; %d local ranks",
             running, starting, pending, px_supervisor_count(d));
    notify(buf);
    if (watchdog_on)
        notify("WATCHDOG=1");
}

static void svc_start(px_daemon_t *d)
{
    uint64_t period = PXD_STATUS_MS;
#if PX_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
        period = usec / 2000; /* half of WatchdogSec, in ms */
        if (period < 1)
            period = 1;
        watchdog_on = 1;
        px_info("systemd watchdog: %llu ms, pinging every %llu ms",
                (unsigned long long)(usec / 1000), (unsigned long long)period);
    }
#endif
    uv_timer_init(d->loop, &svc_timer);
    svc_timer.data = d;
    uv_timer_start(&svc_timer, on_svc_timer, period, period);
}

/* Sets d->rebooted when state-dir/boot_id holds another boot's id than
 * /proc/sys/kernel/random/boot_id, then records this boot's. */
static void check_boot_id(px_daemon_t *d)
{
    char path[1100], now[64] = "", last[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    if (!f)
        return;
    if (!fgets(now, sizeof(now), f))
        now[0] = '\0';
    fclose(f);
    snprintf(path, sizeof(path), "%s/boot_id", d->cfg.state_dir);
    f = fopen(path, "r");
    if (f) {
        if (!fgets(last, sizeof(last), f))
            last[0] = '\0';
        fclose(f);
        d->rebooted = last[0] && strcmp(last, now) != 0;
        if (d->rebooted)
            px_warn("boot id changed since the last run: the node rebooted");
    }
    f = fopen(path, "w");
    if (f) {
        fputs(now, f);
        fclose(f);
    }
}

static void on_cq_async(uv_async_t *a)
{
    px_daemon_t *d = a->data;
    px_rpc_cq_drain(d->cq);
}

static void cq_notify(void *arg)
{
    px_daemon_t *d = arg;
    uv_async_send(&d->cq_async);
}

/* ------------------------------------------------------------------- stop */

static void on_stop_timer(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    int ranks = px_supervisor_count(d);

    if ((ranks == 0 && d->async_inflight == 0) || px_time_mono_ms() > d->stop_deadline_ms) {
        if (ranks)
            px_warn("%d rank process(es) still not reaped at shutdown", ranks);
        uv_stop(d->loop);
    }
}

void px_daemon_stop(px_daemon_t *d, const char *why)
{
    if (d->stopping) {
        px_warn("%s again: stopping now", why);
        d->stop_deadline_ms = 0;
        return;
    }
    px_info("%s: stopping (ranks first)", why);
    notify("STOPPING=1");
    d->stopping = 1; /* before failing jobs: nothing new is placed */
    px_job_fail_all_active(d, "coordinator daemon stopped");
    uv_timer_stop(&d->hb_timer);
    px_gputelem_stop(d);
    uv_timer_stop(&d->swim_timer);
    uv_timer_stop(&d->swim_expire_timer);
    uv_timer_stop(&d->swim_push_timer);
    px_supervisor_stop_all(d);
    px_sample_stop_all(d);
    d->stop_deadline_ms = px_time_mono_ms() + px_env_int("PX_KILL_GRACE_MS") + 3000;
    d->stop_timer.data = d;
    uv_timer_start(&d->stop_timer, on_stop_timer, 0, 50);
}

static void on_signal(uv_signal_t *s, int signum)
{
    char why[32];
    snprintf(why, sizeof(why), "signal %d", signum);
    px_daemon_stop(s->data, why);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* ------------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    static px_daemon_t daemon;
    px_daemon_t *d = &daemon;
    px_rpc_method_t *cm = NULL, *pm = NULL;
    const char *caddrs[2];
    char unix_addr[1100], dbpath[1100];
    px_status_t status;
    int ret = 1;

    if (argc > 3 && !strcmp(argv[1], PXD_EXEC_IN_CGROUP)) /* a rank's first step: cgroup.c */
        return px_cgroup_exec(argv[2], argv + 3);
    px_log_set_tag("parallaxd");
    signal(SIGPIPE, SIG_IGN);
    d->lock_fd = -1;
    d->sock_lock_fd = -1;
    d->cgroup_lock_fd = -1;
    status = px_daemon_config_parse(argc, argv, &d->cfg);
    if (status == PX_ERR_ABORTED)
        return 0;
    if (status != PX_OK)
        return 2;
    px_daemon_config_export(&d->cfg);
    if (d->cfg.print_config) {
        char err[512];
        const char *bin;
        px_daemon_config_print(&d->cfg, stdout);
        bin = px_supervisor_rank_bin(d, err, sizeof(err));
        printf("rank-bin = %s\n", bin ? bin : err);
        d->loop = uv_default_loop(); /* what the ranks would run (blas.c) */
        px_blas_probe_start(d);
        uv_run(d->loop, UV_RUN_DEFAULT); /* until the probe's handles are closed */
        printf("blas-core = %s (%s; CPU best %s)\n", d->blas.node_core[0] ? d->blas.node_core : "?",
               d->blas.source[0] ? d->blas.source : "parallax-rank --blas-core did not answer",
               px_blas_cpu_tier() ? px_blas_tier_core(px_blas_cpu_tier()) : "below Haswell");
        px_env_print(stdout);
        px_daemon_config_free(&d->cfg);
        return 0;
    }
    px_log_set_tag(d->cfg.name);
    if (!is_loopback(d->cfg.listen) && !d->cfg.control_remote) {
        px_error("listen %s is not a loopback address: Control is loopback-only unless "
                 "control-remote = yes (pctl on this node uses %s/control.sock)",
                 d->cfg.listen, d->cfg.runtime_dir);
        goto out_config;
    }
    if (d->cfg.token_file) {
        if (px_auth_load_token(d->cfg.token_file, &d->token) != PX_OK)
            goto out_config;
        d->token_len = strlen(d->token);
    } else if (d->cfg.control_remote) {
        px_warn("control-remote = yes without token-file: anyone who reaches %s can submit "
                "and cancel jobs", d->cfg.listen);
    }
    if (!d->cfg.tls_cert_file != !d->cfg.tls_key_file) {
        px_error("tls-cert-file and tls-key-file go together (got only %s)",
                 d->cfg.tls_cert_file ? "tls-cert-file" : "tls-key-file");
        goto out_config;
    }

    if (mkdir_p(d->cfg.state_dir, 0750) != 0) {
        px_error("cannot create --state-dir %s: %s", d->cfg.state_dir, strerror(errno));
        goto out_config;
    }
    if (mkdir_p(d->cfg.runtime_dir, 0755) != 0) {
        px_error("cannot create --runtime-dir %s: %s", d->cfg.runtime_dir, strerror(errno));
        goto out_config;
    }
    /* what this daemon's locks, cgroups and ranks are keyed by: the same
     * directory however it is spelled, and the same after a restart */
    {
        char real[PATH_MAX];
        if (!realpath(d->cfg.state_dir, real)) {
            px_error("--state-dir %s: cannot resolve it: %s", d->cfg.state_dir, strerror(errno));
            goto out_config;
        }
        if ((size_t)snprintf(d->state_dir_real, sizeof(d->state_dir_real), "%s", real) >=
            sizeof(d->state_dir_real)) {
            px_error("--state-dir %s: path too long", real);
            goto out_config;
        }
    }
    snprintf(d->owner, sizeof(d->owner), "pid %d, state dir %.1023s, listen %.250s, peer %.250s",
             (int)getpid(), d->state_dir_real, d->cfg.listen, d->cfg.peer_listen);
    if (take_lock(d) != PX_OK)
        goto out_config;
    if (prepare_socket(d) != PX_OK)
        goto out_lock;
    /* refuses when a live daemon owns this cgroup base; says at start when
     * ranks are tracked by process group only */
    if (px_cgroup_init(d) != PX_OK)
        goto out_lock;
    snprintf(dbpath, sizeof(dbpath), "%s/parallax.db", d->cfg.state_dir);
    if (px_store_open(dbpath, &d->store) != PX_OK)
        goto out_lock;

    d->loop = uv_default_loop();
    uv_async_init(d->loop, &d->cq_async, on_cq_async);
    d->cq_async.data = d;
    uv_timer_init(d->loop, &d->hb_timer);
    uv_timer_init(d->loop, &d->swim_timer);
    uv_timer_init(d->loop, &d->swim_expire_timer);
    uv_timer_init(d->loop, &d->swim_push_timer);
    uv_timer_init(d->loop, &d->stop_timer);
    uv_signal_init(d->loop, &d->sigint);
    uv_signal_init(d->loop, &d->sigterm);
    d->sigint.data = d->sigterm.data = d;
    /* caught from here on (handled once the loop runs), so an early SIGTERM
     * still stops the daemon cleanly */
    uv_signal_start(&d->sigint, on_signal, SIGINT);
    uv_signal_start(&d->sigterm, on_signal, SIGTERM);

    check_boot_id(d);
    /* the coordinator and the supervisor meet only through node events and
     * the Peer client (peerc.c): node-dead reaches the jobs before the ranks */
    px_job_attach(d);
    px_supervisor_attach(d);
    if (px_job_load_all(d) != PX_OK)
        goto out_loop;
    for (px_job_t *j = d->jobs; j; j = j->next) /* `pctl status` after a restart */
        px_valstore_load_last(d->store, j);
    if (px_rpc_cq_create(cq_notify, d, &d->cq) != PX_OK)
        goto out_jobs;

    cm = malloc(sizeof(*cm) * px_control_n_methods);
    pm = malloc(sizeof(*pm) * px_peer_n_methods);
    if (!cm || !pm)
        goto out_cq;
    for (size_t i = 0; i < px_control_n_methods; i++) {
        cm[i] = px_control_methods[i];
        cm[i].arg = d;
    }
    for (size_t i = 0; i < px_peer_n_methods; i++) {
        pm[i] = px_peer_methods[i];
        pm[i].arg = d;
    }
    {
        const char *paddrs[1] = {d->cfg.peer_listen};
        px_rpc_server_opts_t popts = {d->cfg.max_message_bytes, px_auth_peer_call, d,
                                      d->cfg.tls_cert_file, d->cfg.tls_key_file};
        if (px_rpc_server_create_opts(d->cq, paddrs, 1, pm, px_peer_n_methods, &popts,
                                      &d->peer_srv) != PX_OK) {
            px_error("cannot listen on --peer-listen %s (in use by another daemon?)",
                     d->cfg.peer_listen);
            goto out_cq;
        }
        advertise(d->cfg.peer_listen, px_rpc_server_port(d->peer_srv, 0), d->peer_addr,
                  sizeof(d->peer_addr));
    }
    snprintf(unix_addr, sizeof(unix_addr), "unix:%s", d->sock_path);
    caddrs[0] = d->cfg.listen;
    caddrs[1] = unix_addr;
    /* Control over TLS on TCP only: the unix socket stays plain (local pctl). */
    {
        px_rpc_server_opts_t copts = {d->cfg.max_message_bytes, px_auth_control_call, d,
                                      NULL, NULL};
        status = px_rpc_server_create_opts(d->cq, caddrs, 2, cm, px_control_n_methods, &copts,
                                           &d->control_srv);
    }
    if (status != PX_OK) {
        px_error("cannot listen on --listen %s / %s (in use by another daemon?)", d->cfg.listen,
                 unix_addr);
        unlink(d->sock_path);
        goto out_servers;
    }
    advertise(d->cfg.listen, px_rpc_server_port(d->control_srv, 0), d->control_addr,
              sizeof(d->control_addr));
    if (socket_group(d) != PX_OK)
        goto out_servers;

    d->start_mono_ms = px_time_mono_ms();
    if (px_nodes_init(d) != PX_OK || px_drain_load(d) != PX_OK)
        goto out_servers;
    /* ranks a dead predecessor left running: those of RUNNING jobs this
     * node coordinates are adopted, every other one is killed */
    px_job_adopt_all(d);
    px_supervisor_kill_orphans(d);
    px_sample_sweep(d);
    px_cgroup_sweep(d); /* and what they started, in their cgroups */
    px_blas_probe_start(d); /* the core our ranks run, asked once (blas.c) */
    px_nodes_start(d);
    if (px_gputelem_start(d) != PX_OK) /* NVML every PX_GPU_SAMPLE_MS */
        goto out_servers;
    if (px_metrics_start(d) != PX_OK) /* --metrics-listen */
        goto out_servers;
    px_info("node %s ready: control %s + %s, peer %s, %d devices (%s), %d peers, state %s",
            d->cfg.name, d->control_addr, unix_addr, d->peer_addr, d->n_devices,
            d->cfg.devices, d->n_peers, d->cfg.state_dir);
    notify("READY=1");
    svc_start(d);
    px_job_schedule(d);

    uv_run(d->loop, UV_RUN_DEFAULT);

    /* stopped: anything still running gets SIGKILL, with its cgroup */
    px_blas_probe_kill(d);
    for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next) {
        if (!lr->exited && lr->adopted)
            kill(-(pid_t)lr->pid, SIGKILL);
        else if (!lr->exited)
            uv_process_kill(&lr->proc, SIGKILL);
        if (!lr->exited)
            px_cgroup_kill_remove(d, lr->cgroup);
    }
    ret = 0;

out_servers:
    px_metrics_stop(d);
    px_rpc_server_destroy(d->control_srv);
    px_rpc_server_destroy(d->peer_srv);
    d->control_srv = d->peer_srv = NULL;
    /* let in-flight client calls finish (their deadlines bound this) */
    {
        int64_t until = px_time_mono_ms() + PXD_RPC_TIMEOUT_MS;
        while (d->async_inflight > 0 && px_time_mono_ms() < until)
            uv_run(d->loop, UV_RUN_ONCE);
    }
    px_control_fini(d);
out_cq:
    px_rpc_cq_destroy(d->cq);
    d->cq = NULL;
    free(cm);
    free(pm);
out_jobs:
    px_job_free_all(d);
out_loop:
    px_nodes_fini(d);
    px_gputelem_free(d);
    uv_walk(d->loop, close_walk, NULL);
    uv_run(d->loop, UV_RUN_DEFAULT);
    uv_loop_close(d->loop);
    px_store_close(d->store);
    if (d->sock_path[0] && ret == 0)
        unlink(d->sock_path);
    if (ret == 0)
        px_info("node %s stopped", d->cfg.name);
out_lock:
    px_cgroup_fini(d); /* its empty cgroups and base: nothing of this daemon left */
    if (d->sock_lock_fd >= 0)
        close(d->sock_lock_fd);
    close(d->lock_fd);
out_config:
    if (d->token) {
        explicit_bzero(d->token, d->token_len);
        free(d->token);
    }
    px_daemon_config_free(&d->cfg);
    return ret;
}
