/* cgroup.c: each rank this node runs in a cgroup v2 of its own, so that
 * everything it starts is found and killed with it, even a child that left
 * the rank's process group with setsid(2) (issue 16), as slurmstepd and
 * systemd track a job's processes.
 *
 * Layout: the daemon's own cgroup (from /proc/self/cgroup, "0::/path")
 * under the cgroup2 mount (from /proc/self/mountinfo: /sys/fs/cgroup on a
 * unified host, /sys/fs/cgroup/unified on a hybrid one such as these
 * machines) holds `parallax-<node>/`, and that one `<job id>.r<rank>/` per
 * rank. Under systemd the unit says Delegate=yes so the subtree is the
 * daemon's to write; no controller is enabled in it (tracking only), so
 * the no-internal-process rule does not apply and parallaxd stays where it
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
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "px_log.h"

#define PXD_CGROUP_DRAIN_MS 2000

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

px_status_t px_cgroup_init(px_daemon_t *d)
{
    char mnt[1024], own[2048], base[sizeof(d->cgroup_base)];

    d->cgroup_base[0] = '\0';
    if (!cgroup2_mount(mnt, sizeof(mnt)) || !own_cgroup(own, sizeof(own))) {
        px_warn("no cgroup v2 hierarchy: ranks are tracked by process group only (a process "
                "a rank starts that leaves its group survives a cancel)");
        return PX_OK;
    }
    if ((size_t)snprintf(base, sizeof(base), "%s%s/parallax-%s", mnt, own, d->cfg.name) >=
        sizeof(base)) {
        px_warn("cgroup path %s%s too long: ranks are tracked by process group only", mnt, own);
        return PX_OK;
    }
    if (mkdir(base, 0755) != 0 && errno != EEXIST) {
        px_warn("cannot create cgroup %s (%s; under systemd the unit needs Delegate=yes): ranks "
                "are tracked by process group only (a process a rank starts that leaves its "
                "group survives a cancel)", base, strerror(errno));
        return PX_OK;
    }
    snprintf(d->cgroup_base, sizeof(d->cgroup_base), "%s", base);
    px_info("ranks are tracked by cgroup v2 under %s", base);
    return PX_OK;
}

void px_cgroup_fini(px_daemon_t *d)
{
    if (d->cgroup_base[0] && rmdir(d->cgroup_base) != 0 && errno != ENOENT && errno != EBUSY)
        px_warn("cannot remove cgroup %s: %s", d->cgroup_base, strerror(errno));
}

px_status_t px_cgroup_rank_create(px_daemon_t *d, const char *job_id, int rank, char *path,
                                  size_t len)
{
    path[0] = '\0';
    if (!d->cgroup_base[0])
        return PX_OK;
    if ((size_t)snprintf(path, len, "%s/%s.r%d", d->cgroup_base, job_id, rank) >= len) {
        path[0] = '\0';
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        px_warn("job %s rank %d: cannot create cgroup %s: %s (tracked by process group only)",
                job_id, rank, path, strerror(errno));
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

void px_cgroup_signal(const char *path, int sig)
{
    if (path && path[0])
        signal_procs(path, sig);
}

void px_cgroup_kill_remove(const char *path)
{
    struct timespec ts = {0, 2 * 1000 * 1000};
    int waited = 0;

    if (!path || !path[0])
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
