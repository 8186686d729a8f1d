/* cgroup.c: each rank this node runs in a cgroup v2 of its own, so that
 * everything it starts is found and killed with it, even a child that left
 * the rank's process group with setsid(2), as slurmstepd and
 * systemd track a job's processes.
 *
 * Layout: the daemon's own cgroup (from /proc/self/cgroup, "0::/path")
 * under the cgroup2 mount (from /proc/self/mountinfo: /sys/fs/cgroup on a
 * unified host, /sys/fs/cgroup/unified on a hybrid one such as these
 * machines) holds `parallax-<node>-<key>/`, and that one `<job id>.r<rank>/`
 * per rank. <key> is px_cgroup_key() of the daemon's canonical state
 * directory: two daemons on one host never share a base, even with the same
 * node name (each would otherwise kill the other's ranks of a job with the
 * same id), and a restarted daemon finds the cgroups of the ranks it adopts.
 *
 * Ownership: the daemon holds an flock on its base directory for its life
 * (a second daemon on the same base refuses to start, naming the first from
 * the base's user.parallax.owner xattr; a dead owner's lock is gone with
 * it, so its successor takes the base over). The base and every rank cgroup
 * carry user.parallax.state_dir = the canonical state directory, and no
 * cgroup is signalled or killed unless it lies directly under this daemon's
 * base and carries its state directory (kernels without user xattrs on
 * cgroupfs, before 5.7: the path alone, which the lock makes ours). A clean
 * stop removes the empty rank cgroups and the base.
 *
 * Under systemd the unit says Delegate=yes so the subtree is the daemon's
 * to write; no controller is enabled in it (tracking only), so the
 * no-internal-process rule does not apply and parallaxd stays where it
 * is. Where no writable cgroup2 is found the daemon says so once at start
 * and ranks are tracked by their process group only (a setsid child then
 * escapes, as before).
 *
 * uv_spawn cannot start a child inside a cgroup (clone3's
 * CLONE_INTO_CGROUP), so the rank is spawned through parallaxd itself as a
 * trampoline (`parallaxd --exec-in-cgroup PATH RANK_BIN ARGS`, main.c): it
 * moves into PATH and execs the rank, which is in its cgroup from its first
 * instruction. The daemon writes the pid again after the spawn (a no-op
 * then; it logs when that fails).
 * Killing writes 1 to cgroup.kill (Linux 5.14), or SIGKILLs every pid of
 * cgroup.procs until it is empty where the file is missing; then the
 * cgroup is removed once the kernel reports it unpopulated.
 *
 * Loop thread only (file writes of a few bytes; the drain waits at most
 * PXD_CGROUP_DRAIN_MS for SIGKILLed processes to be reaped). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "px_log.h"

#define PXD_CGROUP_DRAIN_MS 2000
#define XATTR_STATE_DIR "user.parallax.state_dir"
#define XATTR_OWNER "user.parallax.owner"

/* The cgroup2 mount point from /proc/self/mountinfo into buf; 0 if none. */
static int cgroup2_mount(char *buf, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    int found = 0;

    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mountpoint opts ... - fstype src opts */
        char *dash = strstr(line, " - ");
        char root[1024], mnt[1024], fstype[64];
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
            sscanf(dash + 3, "%63s", fstype) != 1)
            continue;
        if (!strcmp(fstype, "cgroup2") && strlen(mnt) < len) {
            snprintf(buf, len, "%s", mnt);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* This process's cgroup v2 path ("0::/a/b" -> "/a/b") into buf. */
static int own_cgroup(char *buf, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];
    int found = 0;

    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = '\0';
            found = (size_t)snprintf(buf, len, "%s", strcmp(line + 3, "/") ? line + 3 : "") <
                    len;
        }
    }
    fclose(f);
    return found;
}

static int write_file(const char *dir, const char *file, const char *text)
{
    char path[PXD_CGROUP_PATH_MAX + 32];
    int fd, ok;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    close(fd);
    return ok ? 0 : -1;
}

/* Sends `sig` to every process in `dir`'s cgroup.procs; returns how many
 * were listed. */
static int signal_procs(const char *dir, int sig)
{
    char path[PXD_CGROUP_PATH_MAX + 32];
    FILE *f;
    long pid;
    int n = 0;

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    f = fopen(path, "re");
    if (!f)
        return 0;
    while (fscanf(f, "%ld", &pid) == 1) {
        if (pid > 0)
            kill((pid_t)pid, sig);
        n++;
    }
    fclose(f);
    return n;
}

/* Whether the kernel still counts a process in `dir` (cgroup.events). */
static int populated(const char *dir)
{
    char path[PXD_CGROUP_PATH_MAX + 32], line[128];
    FILE *f;
    int pop = 0;

    snprintf(path, sizeof(path), "%s/cgroup.events", dir);
    f = fopen(path, "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "populated ", 10))
            pop = atoi(line + 10);
    fclose(f);
    return pop;
}

uint32_t px_cgroup_key(const char *state_dir)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits, folded to 32 */
    for (const unsigned char *p = (const unsigned char *)state_dir; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* 1 if the cgroup `path` carries this daemon's state directory (or the
 * kernel keeps no user xattrs on cgroupfs, so the locked path is all). */
static int marked_ours(px_daemon_t *d, const char *path)
{
    char val[sizeof(d->state_dir_real)];
    ssize_t n;

    if (!d->cgroup_marked)
        return 1;
    n = getxattr(path, XATTR_STATE_DIR, val, sizeof(val) - 1);
    if (n < 0)
        return 0;
    val[n] = '\0';
    return !strcmp(val, d->state_dir_real);
}

int px_cgroup_owned(px_daemon_t *d, const char *path)
{
    size_t n = strlen(d->cgroup_base);

    if (!path || !path[0] || !n || strncmp(path, d->cgroup_base, n) || path[n] != '/' ||
        !path[n + 1] || strchr(path + n + 1, '/'))
        return 0;
    return marked_ours(d, path);
}

/* Takes `base` for this daemon: flock (held until px_cgroup_fini) and the
 * owner xattrs. PX_ERR_UNAVAILABLE, logged naming the holder, when a live
 * daemon holds it. */
static px_status_t take_base(px_daemon_t *d, const char *base)
{
    char other[sizeof(d->owner)];
    int fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0) {
        px_warn("cannot open cgroup %s: %s: ranks are tracked by process group only", base,
                strerror(errno));
        return PX_ERR_IO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        n = fgetxattr(fd, XATTR_OWNER, other, sizeof(other) - 1);
        other[n > 0 ? n : 0] = '\0';
        px_error("cgroup %s belongs to another running parallaxd (%s): one daemon per state "
                 "directory; give this one its own --state-dir", base,
                 n > 0 ? other : "its owner is not recorded");
        close(fd);
        return PX_ERR_UNAVAILABLE;
    }
    d->cgroup_marked = fsetxattr(fd, XATTR_STATE_DIR, d->state_dir_real,
                                 strlen(d->state_dir_real), 0) == 0;
    if (d->cgroup_marked)
        fsetxattr(fd, XATTR_OWNER, d->owner, strlen(d->owner), 0);
    else
        px_info("cgroup %s: no user xattrs here (%s): its path alone marks it as ours", base,
                strerror(errno));
    d->cgroup_lock_fd = fd;
    return PX_OK;
}

px_status_t px_cgroup_init(px_daemon_t *d)
{
    char mnt[1024], own[2048], base[sizeof(d->cgroup_base)];
    px_status_t status;

    d->cgroup_base[0] = '\0';
    d->cgroup_lock_fd = -1;
    d->cgroup_marked = 0;
    if (!cgroup2_mount(mnt, sizeof(mnt)) || !own_cgroup(own, sizeof(own))) {
        px_warn("no cgroup v2 hierarchy: ranks are tracked by process group only (a process "
                "a rank starts that leaves its group survives a cancel)");
        return PX_OK;
    }
    if ((size_t)snprintf(base, sizeof(base), "%s%s/parallax-%s-%08x", mnt, own, d->cfg.name,
                         px_cgroup_key(d->state_dir_real)) >= sizeof(base)) {
        px_warn("cgroup path %s%s too long: ranks are tracked by process group only", mnt, own);
        return PX_OK;
    }
    if (mkdir(base, 0755) != 0 && errno != EEXIST) {
        px_warn("cannot create cgroup %s (%s; under systemd the unit needs Delegate=yes): ranks "
                "are tracked by process group only (a process a rank starts that leaves its "
                "group survives a cancel)", base, strerror(errno));
        return PX_OK;
    }
    status = take_base(d, base);
    if (status == PX_ERR_UNAVAILABLE)
        return status;
    if (status != PX_OK)
        return PX_OK;
    snprintf(d->cgroup_base, sizeof(d->cgroup_base), "%s", base);
    px_info("ranks are tracked by cgroup v2 under %s", base);
    return PX_OK;
}

void px_cgroup_fini(px_daemon_t *d)
{
    DIR *dir;
    struct dirent *e;

    if (!d->cgroup_base[0])
        return;
    /* rank cgroups left empty (their rmdir raced the last exit): ours only */
    if ((dir = opendir(d->cgroup_base))) {
        while ((e = readdir(dir))) {
            char path[PXD_CGROUP_PATH_MAX];
            if (e->d_type != DT_DIR || e->d_name[0] == '.' ||
                (size_t)snprintf(path, sizeof(path), "%s/%s", d->cgroup_base, e->d_name) >=
                    sizeof(path))
                continue;
            if (px_cgroup_owned(d, path) && rmdir(path) != 0)
                px_warn("cannot remove cgroup %s: %s", path, strerror(errno));
        }
        closedir(dir);
    }
    if (rmdir(d->cgroup_base) != 0 && errno != ENOENT)
        px_warn("cannot remove cgroup %s: %s", d->cgroup_base, strerror(errno));
    if (d->cgroup_lock_fd >= 0)
        close(d->cgroup_lock_fd);
    d->cgroup_lock_fd = -1;
    d->cgroup_base[0] = '\0';
}

void px_cgroup_sweep(px_daemon_t *d)
{
    DIR *dir;
    struct dirent *e;

    if (!d->cgroup_base[0] || !(dir = opendir(d->cgroup_base)))
        return;
    while ((e = readdir(dir))) {
        char path[PXD_CGROUP_PATH_MAX];
        int adopted = 0;
        if (e->d_type != DT_DIR || e->d_name[0] == '.' ||
            (size_t)snprintf(path, sizeof(path), "%s/%s", d->cgroup_base, e->d_name) >=
                sizeof(path) ||
            !px_cgroup_owned(d, path))
            continue;
        for (px_local_rank_t *lr = d->local_ranks; lr; lr = lr->next)
            adopted |= !strcmp(lr->cgroup, path);
        if (adopted)
            continue;
        if (populated(path))
            px_warn("killing what is left in cgroup %s by the previous parallaxd", path);
        px_cgroup_kill_remove(d, path);
    }
    closedir(dir);
}

px_status_t px_cgroup_rank_path(px_daemon_t *d, const char *job_id, int rank, char *path,
                                size_t len)
{
    path[0] = '\0';
    if (!d->cgroup_base[0])
        return PX_ERR_NOT_FOUND;
    if ((size_t)snprintf(path, len, "%s/%s.r%d", d->cgroup_base, job_id, rank) >= len) {
        path[0] = '\0';
        return PX_ERR_INVALID_ARGUMENT;
    }
    return PX_OK;
}

px_status_t px_cgroup_rank_create(px_daemon_t *d, const char *job_id, int rank, char *path,
                                  size_t len)
{
    px_status_t status = px_cgroup_rank_path(d, job_id, rank, path, len);

    if (status == PX_ERR_NOT_FOUND)
        return PX_OK;
    if (status != PX_OK)
        return status;
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        px_warn("job %s rank %d: cannot create cgroup %s: %s (tracked by process group only)",
                job_id, rank, path, strerror(errno));
        path[0] = '\0';
        return PX_ERR_IO;
    }
    if (d->cgroup_marked &&
        setxattr(path, XATTR_STATE_DIR, d->state_dir_real, strlen(d->state_dir_real), 0) != 0) {
        px_warn("job %s rank %d: cannot mark cgroup %s as ours: %s (tracked by process group "
                "only)", job_id, rank, path, strerror(errno));
        rmdir(path);
        path[0] = '\0';
        return PX_ERR_IO;
    }
    return PX_OK;
}

void px_cgroup_rank_attach(const char *job_id, int rank, int pid, char *path)
{
    char num[32];

    if (!path[0])
        return;
    snprintf(num, sizeof(num), "%d", pid);
    if (write_file(path, "cgroup.procs", num) != 0) {
        px_warn("job %s rank %d: cannot move pid %d into %s: %s (tracked by process group "
                "only)", job_id, rank, pid, path, strerror(errno));
        rmdir(path);
        path[0] = '\0';
    }
}

int px_cgroup_exec(const char *path, char **argv)
{
    char num[32];

    snprintf(num, sizeof(num), "%d", (int)getpid());
    if (write_file(path, "cgroup.procs", num) != 0) /* the daemon writes it again, and logs */
        fprintf(stderr, "parallaxd: cannot enter cgroup %s: %s\n", path, strerror(errno));
    execv(argv[0], argv);
    fprintf(stderr, "parallaxd: cannot run %s: %s\n", argv[0], strerror(errno));
    return 127;
}

/* 1 if `path` may be signalled by this daemon; logs when it may not. */
static int may_signal(px_daemon_t *d, const char *path)
{
    if (!path || !path[0])
        return 0;
    if (px_cgroup_owned(d, path))
        return 1;
    px_warn("cgroup %s is not this daemon's (state dir %s): not signalled", path,
            d->state_dir_real);
    return 0;
}

void px_cgroup_signal(px_daemon_t *d, const char *path, int sig)
{
    if (may_signal(d, path))
        signal_procs(path, sig);
}

void px_cgroup_kill_remove(px_daemon_t *d, const char *path)
{
    struct timespec ts = {0, 2 * 1000 * 1000};
    int waited = 0;

    if (!may_signal(d, path))
        return;
    if (write_file(path, "cgroup.kill", "1") != 0)
        signal_procs(path, SIGKILL); /* before Linux 5.14: one by one */
    while (populated(path) && waited < PXD_CGROUP_DRAIN_MS) {
        nanosleep(&ts, NULL);
        waited += 2;
        if (waited % 100 == 0)
            signal_procs(path, SIGKILL); /* forked since the last pass */
    }
    if (rmdir(path) != 0 && errno != ENOENT)
        px_warn("cgroup %s: still has processes %d ms after SIGKILL (%s)", path, waited,
                strerror(errno));
}
