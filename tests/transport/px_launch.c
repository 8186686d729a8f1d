/* px_launch.c: fork N local ranks with the standalone bootstrap (see
 * px_launch.h). The parent sleeps in waitpid; children are ordinary rank
 * processes. A free TCP port is found by binding port 0. */
#include "px_launch.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "px_log.h"

/* rank 0 could not listen on the master port: the launch is retried */
#define PX_LAUNCH_EXIT_PORT 75

void *px_launch_shared(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

/* A free TCP port below the ephemeral range (where UCX's tcp listeners and
 * every outgoing connection take theirs), checked by binding it. */
static int free_port(void)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 200; tries++) {
        struct sockaddr_in sa;
        int port = 20000 + (int)(rand_r(&seed) % 12000), ok;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            return 0;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        sa.sin_port = htons((uint16_t)port);
        ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return 0;
}

static int child_main(int rank, int n, px_launch_fn_t fn, void *arg, const px_launch_opts_t *o)
{
    px_launch_rank_t ctx = {.arg = arg};
    px_addr_table_t table;
    const void *addr;
    size_t len;
    char tag[32];
    int ret = 1;

    snprintf(tag, sizeof(tag), "rank %d", rank);
    px_log_set_tag(tag);
    if (px_bootstrap_from_env(&ctx.rank, &ctx.world) != PX_OK)
        return 2;
    if (px_transport_create(&ctx.tr) != PX_OK)
        return 2;
    if (px_transport_address(ctx.tr, &addr, &len) != PX_OK)
        return 2;
    {
        px_status_t st = px_bootstrap_create(ctx.rank, ctx.world, addr, len, &ctx.bs, &table);
        if (st != PX_OK) {
            px_transport_destroy(ctx.tr);
            return ctx.rank == 0 && st == PX_ERR_IO ? PX_LAUNCH_EXIT_PORT : 2;
        }
    }
    if (px_comm_create_world(ctx.tr, &table, ctx.rank,
                             o->use_watch ? px_bootstrap_watch_fd(ctx.bs) : -1,
                             &ctx.comm) != PX_OK) {
        px_addr_table_free(&table);
        px_bootstrap_destroy(ctx.bs);
        px_transport_destroy(ctx.tr);
        return 2;
    }
    px_addr_table_free(&table);
    ret = fn(&ctx);
    /* worker before bootstrap: rank 0 waits in px_bootstrap_destroy for the
     * others' goodbyes, and a worker that lives on without progress there
     * would stall the others' endpoint flush */
    px_comm_destroy(ctx.comm);
    px_transport_destroy(ctx.tr);
    px_bootstrap_destroy(ctx.bs);
    (void)n;
    return ret;
}

static int launch_once(int n, px_launch_fn_t fn, void *arg, const px_launch_opts_t *opts,
                       int *statuses, int *port_busy_p)
{
    px_launch_opts_t o = {.use_watch = 1, .limit_s = 120};
    pid_t *pids = calloc((size_t)n, sizeof(pid_t));
    char buf[32];
    int failed = 0, left = n, port = free_port();
    time_t end;

    if (opts)
        o = *opts;
    if (!o.limit_s)
        o.limit_s = 120;
    if (!pids || !port)
        return n;
    snprintf(buf, sizeof(buf), "%d", port);
    setenv("PX_MASTER_PORT", buf, 1);
    setenv("PX_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(buf, sizeof(buf), "%d", n);
    setenv("PX_WORLD_SIZE", buf, 1);
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            snprintf(buf, sizeof(buf), "%d", r);
            setenv("PX_RANK", buf, 1);
            if (o.ranks_per_node > 0) {
                snprintf(buf, sizeof(buf), "node%d", r / o.ranks_per_node);
                setenv("PX_NODE", buf, 1);
            }
            int rc = child_main(r, n, fn, arg, &o);
            free(pids);
            exit(rc); /* exit, not _exit: leak checkers run */
        }
    }
    if (o.on_started)
        o.on_started(pids, n, arg);
    end = time(NULL) + o.limit_s;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p == 0) {
            if (time(NULL) >= end) {
                fprintf(stderr, "px_launch: ranks still running after %d s, killing them\n",
                        o.limit_s);
                for (int r = 0; r < n; r++)
                    if (pids[r] > 0)
                        kill(pids[r], SIGKILL);
                end = time(NULL) + 3600;
                failed = n;
            }
            {
                struct timespec ts = {0, 20 * 1000 * 1000}; /* the parent only reaps */
                nanosleep(&ts, NULL);
            }
            continue;
        }
        if (p < 0)
            break;
        for (int r = 0; r < n; r++) {
            if (pids[r] != p)
                continue;
            if (statuses)
                statuses[r] = st;
            if (r == 0 && WIFEXITED(st) && WEXITSTATUS(st) == PX_LAUNCH_EXIT_PORT) {
                /* port taken between our check and rank 0's bind: stop the
                 * others (they would wait for the connect deadline) */
                *port_busy_p = 1;
                for (int o = 1; o < n; o++)
                    if (pids[o] > 0)
                        kill(pids[o], SIGKILL);
            }
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                if (WIFSIGNALED(st))
                    fprintf(stderr, "px_launch: rank %d killed by signal %d\n", r, WTERMSIG(st));
                else
                    fprintf(stderr, "px_launch: rank %d exited with %d\n", r, WEXITSTATUS(st));
                failed++;
            }
            pids[r] = -1;
        }
        left--;
    }
    free(pids);
    return failed > n ? n : failed;
}

int px_launch(int n, px_launch_fn_t fn, void *arg, const px_launch_opts_t *opts, int *statuses)
{
    for (int attempt = 0;; attempt++) {
        int busy = 0, failed = launch_once(n, fn, arg, opts, statuses, &busy);
        if (!busy || attempt == 4)
            return failed;
        fprintf(stderr, "px_launch: master port was taken, relaunching\n");
    }
}
