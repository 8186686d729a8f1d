/* supervisor.c: the rank processes this node runs.
 *
 * LaunchRanks spawns one `parallax-rank` per assigned rank with uv_spawn:
 * `--spec-file state-dir/jobs/<id>/spec.pb` (the job's packed JobSpec, mode
 * 0600, the rank converts it with planner/jobspec.h; a dense job without
 * an export path gets this node's default, sample.c) and `--coord --job
 * --rank --world --node` (what adoption recognises a rank by in
 * /proc/PID/cmdline); stdout+stderr appended to
 * state-dir/jobs/<id>/rank-<R>.log, env
 * PX_DEVICE=cpu:K and OPENBLAS_NUM_THREADS=1, own process group). The exit
 * callback (libuv's SIGCHLD handling) frees the device and tells the job's
 * coordinator (RankExited through the Peer client, peerc.c, which runs the
 * coordinator's handler directly when it is this node) with the exit code
 * (-signal when killed) and the log's last line. LaunchRanks and StopRanks
 * reach it the same way (px_supervisor_attach); a dead peer reaches it as a
 * node event. It never calls the coordinator's code. Stopping is
 * SIGTERM, then SIGKILL after PX_KILL_GRACE_MS, sent to the rank's process
 * group and its cgroup (cgroup.c: one per rank, so a child that called
 * setsid goes too), so whatever the rank started goes too; when the rank
 * itself exits its group and cgroup are killed and its device is freed only
 * once the cgroup is empty (nothing it started outlives it).
 *
 * Invariants: a px_local_rank_t stays in d->local_ranks until its process
 * exited and both its handles closed; nothing keeps running after
 * px_supervisor_stop_all() and the loop draining. Loop thread only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchstore.h"
#include "daemon.h"
#include "px_config.h"
#include "px_env.h"
#include "px_log.h"

void px_supervisor_log_path(px_daemon_t *d, const char *job_id, int rank, char *buf, size_t len)
{
    snprintf(buf, len, "%s/jobs/%s/rank-%d.log", d->cfg.state_dir, job_id, rank);
}

static int mkdir_p(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0750) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0750) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

px_status_t px_supervisor_read_log(px_daemon_t *d, const char *job_id, int rank,
                                   size_t tail_bytes, uint8_t **text_p, size_t *len_p)
{
    char path[1024];
    struct stat st;
    uint8_t *buf;
    size_t n, want;
    off_t off = 0;
    int fd;
    ssize_t got;

    if (strchr(job_id, '/') || strstr(job_id, ".."))
        return PX_ERR_INVALID_ARGUMENT;
    px_supervisor_log_path(d, job_id, rank, path, sizeof(path));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return PX_ERR_IO;
    }
    want = (size_t)st.st_size;
    if (want > (16u << 20))
        want = 16u << 20;
    if (tail_bytes && want > tail_bytes)
        want = tail_bytes;
    off = st.st_size - (off_t)want;
    buf = malloc(want ? want : 1);
    if (!buf) {
        close(fd);
        return PX_ERR_NO_MEMORY;
    }
    n = 0;
    while (n < want && (got = pread(fd, buf + n, want - n, off + (off_t)n)) > 0)
        n += (size_t)got;
    close(fd);
    *text_p = buf;
    *len_p = n;
    return PX_OK;
}

/* The line of a rank's log that best explains its failure, for the job's
 * reason: the first ERROR line of the log's last 4 KiB (the root cause is
 * logged first, e.g. "cannot re-cut ...", and the generic "training failed:
 * invalid argument" after it), else the last non-empty line. */
static void failure_line(px_daemon_t *d, const char *job_id, int rank, char *out, size_t len)
{
    uint8_t *text = NULL;
    size_t n = 0, end, start;
    const char *err;

    out[0] = '\0';
    if (px_supervisor_read_log(d, job_id, rank, 4096, &text, &n) != PX_OK)
        return;
    end = n;
    err = memmem(text, n, " ERROR ", 7);
    if (err) {
        start = (size_t)((const uint8_t *)err - text);
        while (start > 0 && text[start - 1] != '\n')
            start--;
        end = start;
        while (end < n && text[end] != '\n')
            end++;
    } else {
        while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' '))
            end--;
        start = end;
        while (start > 0 && text[start - 1] != '\n')
            start--;
    }
    if (end - start >= len)
        end = start + (len - 1);
    memcpy(out, text + start, end - start);
    out[end - start] = '\0';
    free(text);
}

static void on_rank_exited_done(px_daemon_t *d, void *arg, grpc_status_code code,
                                const char *message, const ProtobufCMessage *response)
{
    char *what = arg;
    if (code != GRPC_STATUS_OK)
        px_warn("RankExited for %s: coordinator did not take it: %s", what,
                message ? message : "");
    free(what);
}

static void local_rank_unlink(px_daemon_t *d, px_local_rank_t *lr)
{
    for (px_local_rank_t **p = &d->local_ranks; *p; p = &(*p)->next) {
        if (*p == lr) {
            *p = lr->next;
            return;
        }
    }
}

static void on_handle_closed(uv_handle_t *h)
{
    px_local_rank_t *lr = h->data;
    if (--lr->handles_open == 0) {
        local_rank_unlink(lr->d, lr);
        free(lr);
    }
}

/* The rank's process is gone with `exit_code` (-signal, or
 * PXD_EXIT_UNKNOWN): frees its device, tells the coordinator, closes the
 * handles (lr is freed once they are closed). */
static void rank_gone(px_local_rank_t *lr, int exit_code)
{
    px_daemon_t *d = lr->d;
    char detail[512];
    int still_held = 0;

    lr->exited = 1;
    lr->exit_code = exit_code;
    uv_timer_stop(&lr->kill_timer);
    if (lr->pid > 0)
        kill(-(pid_t)lr->pid, SIGKILL); /* its group: whatever the rank started */
    /* and its cgroup: what left the group (setsid) too; the device is
     * freed below only once no process of the rank is left */
    px_cgroup_kill_remove(d, lr->cgroup);
    if (exit_code == PXD_EXIT_UNKNOWN)
        px_info("job %s rank %d (adopted pid %d, %s) exited; status unknown", lr->job_id,
                lr->rank, lr->pid, lr->device);
    else
        px_info("job %s rank %d (pid %d, %s) %s %d", lr->job_id, lr->rank, lr->pid, lr->device,
                exit_code < 0 ? "killed by signal" : "exited with code",
                exit_code < 0 ? -exit_code : exit_code);
    /* free the device unless another of this job's ranks still holds it */
    for (px_local_rank_t *o = d->local_ranks; o; o = o->next)
        if (o != lr && !o->exited && !strcmp(o->device, lr->device))
            still_held = 1;
    if (!still_held)
        px_nodes_device_set(d, lr->device, "");
    failure_line(d, lr->job_id, lr->rank, detail, sizeof(detail));

    { /* to the coordinator, this node or another (peerc.c) */
        Parallax__V1__RankExitedRequest req = PARALLAX__V1__RANK_EXITED_REQUEST__INIT;
        char *what = malloc(PXD_JOB_ID_MAX + 32);
        req.job_id = lr->job_id;
        req.rank = (uint32_t)lr->rank;
        req.node = d->cfg.name;
        req.exit_code = lr->exit_code;
        req.detail = detail;
        if (what)
            snprintf(what, PXD_JOB_ID_MAX + 32, "%s rank %d", lr->job_id, lr->rank);
        if (!what ||
            px_peerc_call(d, lr->coordinator, "RankExited", &req.base,
                          &parallax__v1__rank_exited_response__descriptor, PXD_RPC_TIMEOUT_MS,
                          (int)px_env_int("PX_PEER_DEAD_MS") * 2, 1, on_rank_exited_done,
                          what) != PX_OK) {
            px_warn("job %s rank %d: cannot tell coordinator %s of its exit", lr->job_id,
                    lr->rank, lr->coordinator);
            free(what);
        }
    }
    if (lr->adopted) {
        uv_close((uv_handle_t *)&lr->poll, on_handle_closed);
        close(lr->pidfd);
        lr->pidfd = -1;
    } else {
        uv_close((uv_handle_t *)&lr->proc, on_handle_closed);
    }
    uv_close((uv_handle_t *)&lr->kill_timer, on_handle_closed);
    if (!d->stopping)
        px_nodes_emit(d, PXD_NODE_DEVICES, NULL); /* its device may take a pending job */
}

static void on_rank_exit(uv_process_t *proc, int64_t exit_status, int term_signal)
{
    rank_gone(proc->data, term_signal ? -term_signal : (int)exit_status);
}

/* An adopted rank's pidfd is readable: it exited. Its status belongs to
 * its new parent (init), so success is judged by the job's progress. */
static void on_adopted_exit(uv_poll_t *h, int status, int events)
{
    px_local_rank_t *lr = h->data;
    int done = lr->at_end && lr->at_end(lr->d, lr->job_id);

    if (lr->exited)
        return;
    uv_poll_stop(h);
    rank_gone(lr, done ? 0 : PXD_EXIT_UNKNOWN);
}

static void on_kill_timer(uv_timer_t *t)
{
    px_local_rank_t *lr = t->data;
    if (lr->exited)
        return;
    px_warn("job %s rank %d (pid %d) ignored SIGTERM for %ld ms: SIGKILL", lr->job_id, lr->rank,
            lr->pid, px_env_int("PX_KILL_GRACE_MS"));
    px_cgroup_signal(lr->d, lr->cgroup, SIGKILL);
    if (kill(-(pid_t)lr->pid, SIGKILL) != 0 && !lr->adopted)
        uv_process_kill(&lr->proc, SIGKILL);
}

static void rank_stop(px_local_rank_t *lr)
{
    if (lr->exited || lr->stopping)
        return;
    lr->stopping = 1;
    px_cgroup_signal(lr->d, lr->cgroup, SIGTERM); /* setsid children too */
    if ((lr->pid <= 0 || kill(-(pid_t)lr->pid, SIGTERM) != 0) && !lr->adopted)
        uv_process_kill(&lr->proc, SIGTERM); /* the rank and what it started */
    uv_timer_start(&lr->kill_timer, on_kill_timer, (uint64_t)px_env_int("PX_KILL_GRACE_MS"), 0);
}

/* Path of the rank binary: PX_RANK_BIN, the build tree next to parallaxd,
 * or libexecdir. */
static px_status_t find_rank_bin(px_daemon_t *d, char *errbuf, size_t errlen)
{
    char exe[PATH_MAX];
    size_t len = sizeof(exe);
    const char *env = px_env_str("PX_RANK_BIN");

    if (d->rank_bin[0])
        return PX_OK;
    if (*env) {
        snprintf(d->rank_bin, sizeof(d->rank_bin), "%s", env);
    } else {
        char cand[PATH_MAX + 64];
        if (uv_exepath(exe, &len) == 0) {
            char *slash = strrchr(exe, '/');
            if (slash)
                *slash = '\0';
            char real[PATH_MAX];
            snprintf(cand, sizeof(cand), "%s/../rank/parallax-rank", exe);
            if (access(cand, X_OK) == 0)
                snprintf(d->rank_bin, sizeof(d->rank_bin), "%s",
                         realpath(cand, real) ? real : cand);
        }
        if (!d->rank_bin[0])
            snprintf(d->rank_bin, sizeof(d->rank_bin), "%s/parallax-rank", PX_LIBEXECDIR);
    }
    if (access(d->rank_bin, X_OK) != 0) {
        snprintf(errbuf, errlen, "rank binary %s: %s (set PX_RANK_BIN)", d->rank_bin,
                 strerror(errno));
        d->rank_bin[0] = '\0';
        return PX_ERR_NOT_FOUND;
    }
    return PX_OK;
}

const char *px_supervisor_rank_bin(px_daemon_t *d, char *errbuf, size_t errlen)
{
    return find_rank_bin(d, errbuf, errlen) == PX_OK ? d->rank_bin : NULL;
}

/* Writes the job's packed JobSpec to <dir>/spec.pb (mode 0600: it names
 * the job's files; written to a temporary name and renamed, so a rank
 * never reads half a spec) and its path into path. The ranks of one job on
 * this node share it; every LaunchRanks rewrites it with the same bytes. */
static px_status_t write_spec_file(px_daemon_t *d, const Parallax__V1__LaunchRanksRequest *req,
                                   const char *dir, char *path, size_t len, char *errbuf,
                                   size_t errlen)
{
    /* a dense job without --export-safetensors exports its final weights
     * here (pctl sample reads them on rank 0's node: sample.c); the path is
     * one of the flags that may differ between nodes (jobflags.h) */
    Parallax__V1__JobSpec spec = *req->spec;
    char weights[1200];
    if ((!spec.export_safetensors || !*spec.export_safetensors) &&
        !(spec.moe && spec.moe->experts)) {
        px_sample_default_weights(d, req->job_id, weights, sizeof(weights));
        spec.export_safetensors = weights;
    }
    size_t n = protobuf_c_message_get_packed_size(&spec.base);
    uint8_t *buf = malloc(n ? n : 1);
    char tmp[1200];
    int fd;
    ssize_t w = -1;

    if (!buf) {
        snprintf(errbuf, errlen, "out of memory packing the job's spec (%zu bytes)", n);
        return PX_ERR_NO_MEMORY;
    }
    protobuf_c_message_pack(&spec.base, buf);
    snprintf(path, len, "%s/spec.pb", dir);
    snprintf(tmp, sizeof(tmp), "%s/.spec.pb.%d", dir, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        w = write(fd, buf, n);
        if (close(fd) != 0)
            w = -1;
    }
    free(buf);
    if (fd < 0 || w != (ssize_t)n || rename(tmp, path) != 0) {
        snprintf(errbuf, errlen, "cannot write the job's spec to %s: %s", path,
                 fd < 0 || w < 0 ? strerror(errno) : "short write");
        unlink(tmp);
        return PX_ERR_IO;
    }
    return PX_OK;
}

/* Spawns one rank; on success lr is linked into d->local_ranks. */
static px_status_t spawn_one(px_daemon_t *d, const Parallax__V1__LaunchRanksRequest *req,
                             const Parallax__V1__RankAssignment *a, px_local_rank_t **lr_p,
                             char *errbuf, size_t errlen)
{
    const Parallax__V1__JobSpec *s = req->spec;
    char num[32][32], bnum[8][32], dir[1024], spec_path[1100], env_dev[64], env_cvd[64],
         env_node_dev[64];
    char env_owner[sizeof(d->state_dir_real) + 32];
    char *env_token = NULL, *env_ca = NULL;
    char env_secret[sizeof(PX_AUTH_JOB_SECRET_ENV "=") + 2 * 32 + 1];
    char *args[64], *env[256], self_exe[PATH_MAX] = "", env_devices[48];
    const char *blas_env[2];
    int n_blas;
    extern char **environ;
    uv_process_options_t opt;
    uv_stdio_container_t stdio[3];
    px_local_rank_t *lr;
    int fd, ret, n = 0, ne = 0;

    lr = calloc(1, sizeof(*lr));
    if (!lr)
        return PX_ERR_NO_MEMORY;
    lr->d = d;
    lr->rank = (int)a->rank;
    snprintf(lr->job_id, sizeof(lr->job_id), "%s", req->job_id);
    snprintf(lr->device, sizeof(lr->device), "%s", a->device);
    snprintf(lr->coordinator, sizeof(lr->coordinator), "%s", req->coordinator);
    snprintf(lr->coordinator_peer_addr, sizeof(lr->coordinator_peer_addr), "%s",
             req->coordinator_peer_addr);
    snprintf(dir, sizeof(dir), "%s/jobs/%s", d->cfg.state_dir, req->job_id);
    if (mkdir_p(dir) != 0) {
        snprintf(errbuf, errlen, "cannot create %s: %s", dir, strerror(errno));
        free(lr);
        return PX_ERR_IO;
    }
    px_supervisor_log_path(d, req->job_id, lr->rank, lr->log_path, sizeof(lr->log_path));
    fd = open(lr->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(errbuf, errlen, "cannot open %s: %s", lr->log_path, strerror(errno));
        free(lr);
        return PX_ERR_IO;
    }

#define ARG(flag, fmt, val) do { args[n++] = (char *)(flag); \
    snprintf(num[n / 2], sizeof(num[0]), fmt, val); args[n] = num[n / 2]; n++; } while (0)
#define SARG(flag, val) do { args[n++] = (char *)(flag); args[n++] = (char *)(val); } while (0)
    args[n++] = d->rank_bin;
    if (px_bench_spec_is(s)) { /* a benchmark job, --bench-* flags instead */
        n = px_bench_spec_args(s, args, n, bnum, 8);
        goto common_args;
    }
    if (write_spec_file(d, req, dir, spec_path, sizeof(spec_path), errbuf, errlen) != PX_OK) {
        close(fd);
        free(lr);
        return PX_ERR_IO;
    }
    SARG("--spec-file", spec_path); /* the job as the coordinator validated it */
common_args:
    SARG("--coord", req->coordinator_peer_addr);
    SARG("--job", req->job_id);
    ARG("--rank", "%u", a->rank);
    ARG("--world", "%u", req->world_size);
    SARG("--node", d->cfg.name);
    args[n] = NULL;
#undef ARG
#undef SARG

    /* the rank runs the node's BLAS core (blas.c: as parallax-rank
     * decided it in this environment); a choice of ours replaces an
     * inherited OPENBLAS_CORETYPE only where it says so (PX_BLAS_CORETYPE;
     * a preset is kept) */
    n_blas = px_blas_child_env(d, blas_env);
    /* room after the inherited ones for the entries below (11, the NULL too) */
    for (char **e = environ; *e && ne < 244; e++)
        if (strncmp(*e, "PX_DEVICE=", 10) && strncmp(*e, "OPENBLAS_NUM_THREADS=", 21) &&
            strncmp(*e, "PX_JOB_DEVICES=", 15) &&
            strncmp(*e, "PX_NODE_DEVICE=", 15) &&
            strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) &&
            strncmp(*e, PX_AUTH_RANK_ENV "=", sizeof(PX_AUTH_RANK_ENV)) &&
            strncmp(*e, "PX_TLS_CA_FILE=", 15) && strncmp(*e, "PX_BLAS_CORE_REJECTED=", 22) &&
            strncmp(*e, PXD_RANK_OWNER_ENV "=", sizeof(PXD_RANK_OWNER_ENV)) &&
            strncmp(*e, PX_AUTH_JOB_SECRET_ENV "=", sizeof(PX_AUTH_JOB_SECRET_ENV)) &&
            !(n_blas && (!strncmp(*e, "OPENBLAS_CORETYPE=", 18) ||
                         !strncmp(*e, "PX_BLAS_CORE_SET=", 17))))
            env[ne++] = *e;
    for (int i = 0; i < n_blas; i++)
        env[ne++] = (char *)blas_env[i];
    ne += px_supervisor_device_env(a->device, env_cvd, sizeof(env_cvd), env_dev,
                                   sizeof(env_dev), env_node_dev, sizeof(env_node_dev), env + ne);
    /* auth.c: the token reaches the rank in its environment only (readable
     * by its own user and root via /proc, never shown by ps). */
    if (d->token && asprintf(&env_token, "%s=%s", PX_AUTH_RANK_ENV, d->token) > 0)
        env[ne++] = env_token;
    /* the job's own secret (auth.c), which its ranks prove to each other */
    memcpy(env_secret, PX_AUTH_JOB_SECRET_ENV "=", sizeof(PX_AUTH_JOB_SECRET_ENV));
    if (px_auth_job_secret(d, req->job_id, env_secret + sizeof(PX_AUTH_JOB_SECRET_ENV),
                           sizeof(env_secret) - sizeof(PX_AUTH_JOB_SECRET_ENV)) == 0)
        env[ne++] = env_secret;
    if (px_auth_ca_file(d) && asprintf(&env_ca, "PX_TLS_CA_FILE=%s", px_auth_ca_file(d)) > 0)
        env[ne++] = env_ca;
    if (req->physical_devices) { /* MFU's denominator (rank_main.c) */
        snprintf(env_devices, sizeof(env_devices), "PX_JOB_DEVICES=%u", req->physical_devices);
        env[ne++] = env_devices;
    }
    env[ne++] = (char *)"OPENBLAS_NUM_THREADS=1";
    /* whose rank it is, for this daemon after a restart (adoption, orphans) */
    snprintf(env_owner, sizeof(env_owner), "%s=%s", PXD_RANK_OWNER_ENV, d->state_dir_real);
    env[ne++] = env_owner;
    env[ne] = NULL;

    memset(&opt, 0, sizeof(opt));
    memset(stdio, 0, sizeof(stdio));
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = fd;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = fd;
    opt.file = d->rank_bin;
    opt.args = args;
    /* in its own cgroup from its first instruction: through the trampoline
     * (cgroup.c, px_cgroup_exec) */
    if (px_cgroup_rank_create(d, req->job_id, lr->rank, lr->cgroup, sizeof(lr->cgroup)) ==
            PX_OK &&
        lr->cgroup[0] && n + 3 < (int)(sizeof(args) / sizeof(args[0])) &&
        readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1) > 0) {
        memmove(args + 3, args, (size_t)(n + 1) * sizeof(args[0]));
        args[0] = self_exe; /* what ps shows */
        args[1] = (char *)PXD_EXEC_IN_CGROUP;
        args[2] = lr->cgroup;
        opt.file = PXD_SELF_EXE;
    }
    opt.env = env;
    opt.stdio = stdio;
    opt.stdio_count = 3;
    opt.exit_cb = on_rank_exit;
    opt.flags = UV_PROCESS_DETACHED; /* own process group: a ^C to parallaxd is ours to handle */

    {
        char header[1024];
        int hl = snprintf(header, sizeof(header), "# parallaxd %s: job %s rank %d on %s %s\n",
                          d->cfg.name, req->job_id, lr->rank, d->cfg.name, a->device);
        if (hl > 0 && write(fd, header, (size_t)hl) < 0)
            px_debug("log header write failed");
    }
    lr->proc.data = lr;
    ret = uv_spawn(d->loop, &lr->proc, &opt);
    close(fd);
    if (env_token) {
        explicit_bzero(env_token, strlen(env_token));
        free(env_token);
    }
    explicit_bzero(env_secret, sizeof(env_secret));
    free(env_ca);
    if (ret != 0) {
        snprintf(errbuf, errlen, "spawn of %s%s failed: %s", d->rank_bin,
                 opt.file == d->rank_bin ? "" : " through parallaxd's cgroup trampoline",
                 uv_strerror(ret));
        if (lr->cgroup[0])
            rmdir(lr->cgroup);
        /* uv_spawn failure still initialised the handle: close it */
        lr->handles_open = 1;
        lr->exited = 1;
        uv_close((uv_handle_t *)&lr->proc, on_handle_closed);
        lr->next = d->local_ranks; /* unlinked (and freed) by on_handle_closed */
        d->local_ranks = lr;
        return PX_ERR_IO;
    }
    lr->pid = lr->proc.pid;
    px_cgroup_rank_attach(req->job_id, lr->rank, lr->pid, lr->cgroup);
    uv_timer_init(d->loop, &lr->kill_timer);
    lr->kill_timer.data = lr;
    lr->handles_open = 2;
    lr->next = d->local_ranks;
    d->local_ranks = lr;
    px_nodes_device_set(d, a->device, req->job_id);
    px_info("job %s rank %d spawned: pid %d on %s, log %s", req->job_id, lr->rank, lr->pid,
            a->device, lr->log_path);
    *lr_p = lr;
    return PX_OK;
}

px_status_t px_supervisor_launch(px_daemon_t *d, const Parallax__V1__LaunchRanksRequest *req,
                                 Parallax__V1__LaunchRanksResponse *resp, char *errbuf,
                                 size_t errlen)
{
    px_local_rank_t **spawned;
    px_status_t status = PX_OK;
    size_t n_spawned = 0;

    parallax__v1__launch_ranks_response__init(resp);
    if (!req->job_id || !*req->job_id || strchr(req->job_id, '/') || !req->spec ||
        (!req->spec->model && !px_bench_spec_is(req->spec)) || !req->coordinator ||
        !req->coordinator_peer_addr) {
        snprintf(errbuf, errlen, "malformed LaunchRanks request");
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (d->stopping) {
        snprintf(errbuf, errlen, "node %s is stopping", d->cfg.name);
        return PX_ERR_UNAVAILABLE;
    }
    for (size_t i = 0; i < req->n_ranks; i++) {
        int known = 0;
        for (int k = 0; k < d->n_devices; k++)
            if (!strcmp(d->devices[k].name, req->ranks[i]->device))
                known = 1;
        if (!known) {
            snprintf(errbuf, errlen, "node %s has no device %s", d->cfg.name,
                     req->ranks[i]->device);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    PX_CHECK(find_rank_bin(d, errbuf, errlen));
    spawned = calloc(req->n_ranks ? req->n_ranks : 1, sizeof(*spawned));
    resp->ranks = calloc(req->n_ranks ? req->n_ranks : 1, sizeof(*resp->ranks));
    if (!spawned || !resp->ranks) {
        free(spawned);
        free(resp->ranks);
        resp->ranks = NULL;
        return PX_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < req->n_ranks; i++) {
        px_local_rank_t *lr;
        Parallax__V1__RankInfo *ri;
        status = spawn_one(d, req, req->ranks[i], &lr, errbuf, errlen);
        if (status != PX_OK)
            break;
        spawned[n_spawned++] = lr;
        ri = malloc(sizeof(*ri));
        if (!ri) {
            status = PX_ERR_NO_MEMORY;
            break;
        }
        parallax__v1__rank_info__init(ri);
        ri->rank = (uint32_t)lr->rank;
        ri->node = d->cfg.name;
        ri->device = lr->device;
        ri->pid = lr->pid;
        ri->state = (char *)"launching";
        resp->ranks[resp->n_ranks++] = ri;
    }
    if (status != PX_OK) {
        px_error("job %s: launch on %s failed: %s", req->job_id, d->cfg.name, errbuf);
        for (size_t i = 0; i < n_spawned; i++)
            rank_stop(spawned[i]);
        px_supervisor_resp_free(resp);
    }
    free(spawned);
    return status;
}

void px_supervisor_resp_free(Parallax__V1__LaunchRanksResponse *resp)
{
    for (size_t i = 0; i < resp->n_ranks; i++)
        free(resp->ranks[i]);
    free(resp->ranks);
    resp->ranks = NULL;
    resp->n_ranks = 0;
}

void px_supervisor_stop_job(px_daemon_t *d, const char *job_id, const char *reason)
{
    for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next) {
        if (!strcmp(lr->job_id, job_id) && !lr->exited && !lr->stopping) {
            px_info("job %s: stopping rank %d (pid %d): %s", job_id, lr->rank, lr->pid,
                    reason && *reason ? reason : "stop requested");
            rank_stop(lr);
        }
    }
}

void px_supervisor_stop_coordinated_by(px_daemon_t *d, const char *coordinator)
{
    for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next)
        if (!strcmp(lr->coordinator, coordinator) && !lr->exited) {
            px_warn("job %s: coordinator %s is dead; stopping rank %d", lr->job_id, coordinator,
                    lr->rank);
            rank_stop(lr);
        }
}

void px_supervisor_stop_all(px_daemon_t *d)
{
    for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next)
        rank_stop(lr);
}

int px_supervisor_count(px_daemon_t *d)
{
    int n = 0;
    for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next)
        n++;
    return n;
}

/* Reads /proc/<pid>/<file> into buf (NUL-terminated); the bytes read, 0 if
 * the process or file is gone or empty. */
static size_t proc_read(long pid, const char *file, char *buf, size_t len)
{
    char path[64];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%ld/%s", pid, file);
    buf[0] = '\0';
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return (size_t)n;
}

/* Reads /proc/<pid>/cmdline into buf; its length if the program is
 * parallax-rank, else 0. */
static size_t rank_cmdline(long pid, char *buf, size_t len)
{
    size_t n = proc_read(pid, "cmdline", buf, len), argv0 = strlen(buf);
    return n && argv0 >= 13 && !strcmp(buf + argv0 - 13, "parallax-rank") ? n : 0;
}

/* 1 if some `flag` in the cmdline buf[0..n) is followed by `value`. */
static int cmdline_has(const char *buf, size_t n, const char *flag, const char *value)
{
    const char *end = buf + n;
    for (const char *p = buf; p < end; p += strlen(p) + 1) {
        const char *v = p + strlen(p) + 1;
        if (v >= end)
            break;
        if (!strcmp(p, flag) && !strcmp(v, value))
            return 1;
    }
    return 0;
}

/* 1 if process `pid` was started by the daemon of state directory
 * `state_dir` (canonical): its environment has PXD_RANK_OWNER_ENV=state_dir,
 * which the supervisor gives every rank. Another daemon's rank, even of the
 * same node name and job id, is not. */
static int rank_owned_by(long pid, const char *state_dir)
{
    char path[64], buf[8192], want[1100];
    size_t want_len, have = 0;
    ssize_t n;
    int fd, found = 0;

    want_len = (size_t)snprintf(want, sizeof(want), "%s=%s", PXD_RANK_OWNER_ENV, state_dir) + 1;
    if (want_len > sizeof(want))
        return 0;
    snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* NUL-separated entries, read in pieces; buf keeps the unfinished tail */
    while (!found && (n = read(fd, buf + have, sizeof(buf) - have)) > 0) {
        char *p = buf, *end = buf + have + (size_t)n, *z;
        while (!found && (z = memchr(p, '\0', (size_t)(end - p)))) {
            found = (size_t)(z - p) + 1 == want_len && !memcmp(p, want, want_len);
            p = z + 1;
        }
        have = (size_t)(end - p);
        if (have == sizeof(buf)) /* one entry longer than buf: not ours, skip it */
            have = 0;
        memmove(buf, p, have);
    }
    close(fd);
    return found;
}

int px_supervisor_owns_pid(px_daemon_t *d, int pid)
{
    if (pid <= 0)
        return 0;
    if (pid == (int)getpid())
        return 1;
    for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next)
        if (lr->pid == pid)
            return 1;
    return rank_owned_by(pid, d->state_dir_real);
}

/* 1 if /proc/<pid> is a parallax-rank started by this daemon (its node
 * name in "--node", its state directory in its environment) whose parent is
 * not a live process of ours. */
static int is_orphan_rank(px_daemon_t *d, const char *pid)
{
    char buf[8192], stat[512], *rp;
    size_t n = rank_cmdline(atol(pid), buf, sizeof(buf));
    long ppid;

    if (!n || !cmdline_has(buf, n, "--node", d->cfg.name) ||
        !rank_owned_by(atol(pid), d->state_dir_real))
        return 0;
    if (!proc_read(atol(pid), "stat", stat, sizeof(stat)))
        return 0;
    rp = strrchr(stat, ')');
    if (!rp || sscanf(rp + 2, "%*c %ld", &ppid) != 1)
        return 0;
    /* ranks are spawned by parallaxd; one whose parent is gone was reparented */
    proc_read(ppid, "cmdline", buf, sizeof(buf));
    return strstr(buf, "parallaxd") == NULL;
}

void px_supervisor_kill_orphans(px_daemon_t *d)
{
    DIR *dir = opendir("/proc");
    struct dirent *e;

    if (!dir)
        return;
    while ((e = readdir(dir))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int adopted = 0;
        for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next)
            if (lr->adopted && lr->pid == atoi(e->d_name))
                adopted = 1;
        if (!adopted && is_orphan_rank(d, e->d_name)) {
            px_warn("killing parallax-rank pid %s of node %s left by a previous parallaxd",
                    e->d_name, d->cfg.name);
            kill((pid_t)atoi(e->d_name), SIGKILL);
        }
    }
    closedir(dir);
}

/* ------------------------------------------------------------- adoption */

int px_supervisor_is_rank(px_daemon_t *d, int pid, const char *job_id, int rank)
{
    char buf[8192], want_rank[16];
    size_t n;

    if (pid <= 0 || !(n = rank_cmdline(pid, buf, sizeof(buf))))
        return 0;
    snprintf(want_rank, sizeof(want_rank), "%d", rank);
    return cmdline_has(buf, n, "--job", job_id) && cmdline_has(buf, n, "--rank", want_rank) &&
           cmdline_has(buf, n, "--node", d->cfg.name) && rank_owned_by(pid, d->state_dir_real);
}

px_status_t px_supervisor_adopt(px_daemon_t *d, const char *job_id, int rank, int pid,
                                const char *device, px_supervisor_at_end_fn at_end)
{
    px_local_rank_t *lr;
    int fd, ret;

    if (!px_supervisor_is_rank(d, pid, job_id, rank))
        return PX_ERR_NOT_FOUND;
    fd = pidfd_open((pid_t)pid, 0);
    if (fd < 0) {
        px_warn("job %s rank %d: pidfd_open(%d): %s", job_id, rank, pid, strerror(errno));
        return errno == ESRCH ? PX_ERR_NOT_FOUND : PX_ERR_IO;
    }
    lr = calloc(1, sizeof(*lr));
    if (!lr) {
        close(fd);
        return PX_ERR_NO_MEMORY;
    }
    lr->d = d;
    lr->rank = rank;
    lr->pid = pid;
    lr->pidfd = fd;
    lr->adopted = 1;
    lr->at_end = at_end;
    snprintf(lr->job_id, sizeof(lr->job_id), "%s", job_id);
    snprintf(lr->device, sizeof(lr->device), "%s", device);
    snprintf(lr->coordinator, sizeof(lr->coordinator), "%s", d->cfg.name);
    snprintf(lr->coordinator_peer_addr, sizeof(lr->coordinator_peer_addr), "%s", d->peer_addr);
    px_supervisor_log_path(d, job_id, rank, lr->log_path, sizeof(lr->log_path));
    /* the cgroup its first daemon (this one, before the restart) made for it */
    if (px_cgroup_rank_path(d, job_id, rank, lr->cgroup, sizeof(lr->cgroup)) != PX_OK ||
        access(lr->cgroup, F_OK) != 0 || !px_cgroup_owned(d, lr->cgroup))
        lr->cgroup[0] = '\0';
    ret = uv_poll_init(d->loop, &lr->poll, fd);
    if (ret != 0) {
        px_warn("job %s rank %d: cannot watch pidfd: %s", job_id, rank, uv_strerror(ret));
        close(fd);
        free(lr);
        return PX_ERR_IO;
    }
    lr->poll.data = lr;
    uv_timer_init(d->loop, &lr->kill_timer);
    lr->kill_timer.data = lr;
    lr->handles_open = 2;
    lr->next = d->local_ranks;
    d->local_ranks = lr;
    px_nodes_device_set(d, lr->device, job_id);
    uv_poll_start(&lr->poll, UV_READABLE, on_adopted_exit);
    px_info("job %s rank %d: adopted pid %d on %s (left running by the previous parallaxd)",
            job_id, rank, lr->pid, lr->device);
    return PX_OK;
}

/* ------------------------------------------------------ local Peer calls */

/* LaunchRanks aimed at this node (peerc.c), or arriving (peer.c). */
static void serve_launch(px_daemon_t *d, const ProtobufCMessage *request, px_daemon_done_fn done,
                         void *arg)
{
    const Parallax__V1__LaunchRanksRequest *req = (const void *)request;
    Parallax__V1__LaunchRanksResponse resp = PARALLAX__V1__LAUNCH_RANKS_RESPONSE__INIT;
    char err[512] = "";
    px_status_t status = px_supervisor_launch(d, req, &resp, err, sizeof(err));

    if (status != PX_OK) {
        if (done)
            done(d, arg, px_rpc_code_from_status(status), err, NULL);
        return;
    }
    if (done)
        done(d, arg, GRPC_STATUS_OK, NULL, &resp.base);
    px_supervisor_resp_free(&resp);
}

/* StopRanks aimed at this node, or arriving. */
static void serve_stop(px_daemon_t *d, const ProtobufCMessage *request, px_daemon_done_fn done,
                       void *arg)
{
    const Parallax__V1__StopRanksRequest *req = (const void *)request;
    Parallax__V1__StopRanksResponse resp = PARALLAX__V1__STOP_RANKS_RESPONSE__INIT;

    px_supervisor_stop_job(d, req->job_id, req->reason);
    if (done)
        done(d, arg, GRPC_STATUS_OK, NULL, &resp.base);
}

static void on_node_event(px_daemon_t *d, px_node_event_t ev, const px_peer_t *peer, void *arg)
{
    (void)arg;
    if (ev == PXD_NODE_DEAD && peer)
        px_supervisor_stop_coordinated_by(d, peer->name);
}

void px_supervisor_attach(px_daemon_t *d)
{
    px_peerc_serve(d, "LaunchRanks", serve_launch);
    px_peerc_serve(d, "StopRanks", serve_stop);
    px_nodes_subscribe(d, on_node_event, NULL);
}
