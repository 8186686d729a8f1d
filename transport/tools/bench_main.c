/* bench_main.c: px-coll-bench, the collectives benchmark as a standalone
 * program (nccl-tests style), without a daemon.
 *
 *   px-coll-bench [-n RANKS] [--op OP] [-b MIN] [-e MAX] [-f 2|4] [-d TYPE]
 *                 [-o REDOP] [-w WARMUP] [-i ITERS] [-r ROOT] [-c] [--json]
 *
 * With -n RANKS (> 1) it is its own launcher: it picks a free master port,
 * forks RANKS processes with the standalone bootstrap's environment
 * (PX_RANK, PX_WORLD_SIZE, PX_MASTER_ADDR, PX_MASTER_PORT), each runs one
 * rank, and the launcher's exit status is 0 only if every rank passed (and,
 * with -c, no element was wrong). Without -n, PX_WORLD_SIZE > 1 in the
 * environment makes this process one rank of a world launched by someone
 * else (torchrun / srun style); otherwise it runs alone (world 1).
 *
 * Rank 0 prints the nccl-tests table (bench.h) to stdout, or with --json one
 * JSON object {"op":..., "ranks":..., "rows":[...]} at the end. */
#include <errno.h>
#include <getopt.h>
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

#include "bench.h"
#include "px_devmem.h"
#include "px_kernels_select.h"
#include "px_log.h"
#include "px_world.h"

typedef struct {
    px_bench_cfg_t cfg;
    int ranks;      /* -n: launch this many (0: not a launcher) */
    int json;
    int rank, world;
    int64_t wrong;  /* total over sizes (rank 0) */
    double busbw_sum;
    int rows;
    int json_first;
    const char *device; /* --device: buffers in this device's memory */
    uint64_t stage_chunk; /* --stage-chunk: px_transport_set_stage_chunk (0: default) */
} main_args_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: px-coll-bench [-n RANKS] [--op OP] [-b MIN_BYTES] [-e MAX_BYTES] [-f 2|4]\n"
            "                     [-d DTYPE] [-o REDOP] [-w WARMUP] [-i ITERS] [-r ROOT] [-c]\n"
            "                     [--json] [--device cuda|cuda:K|fake] [--stage-chunk N]\n"
            "  -n, --ranks N        fork N local ranks (standalone bootstrap); without it, one\n"
            "                       rank of PX_WORLD_SIZE (PX_RANK, PX_MASTER_ADDR/PORT)\n"
            "  --op OP              all_reduce (default), all_gather, reduce_scatter,\n"
            "                       all_to_all, broadcast, reduce\n"
            "  -b, --min-bytes N    smallest size (default 4K; K/M/G suffixes)\n"
            "  -e, --max-bytes N    largest size (default 64M)\n"
            "  -f, --step-factor F  size multiplier, 2 or 4 (default 4)\n"
            "  -d, --dtype T        float (default), double, half, bfloat16, int32, int64, uint8\n"
            "  -o, --redop OP       sum (default), prod, min, max, avg\n"
            "  -w, --warmup N       untimed iterations per size (default 5)\n"
            "  -i, --iters N        timed iterations per size (default 200 below 1 MiB, 20 above)\n"
            "  -r, --root R         root of broadcast / reduce (default 0)\n"
            "  -c, --check          count elements that differ from the exact result\n"
            "  --json               rank 0 prints JSON instead of the table\n"
            "  --device DEV         buffers in DEV's memory (cuda, cuda:K; default host):\n"
            "                       all_reduce, all_gather, reduce_scatter, broadcast,\n"
            "                       all_to_all;\n"
            "                       fake: host memory the transport stages as it would a\n"
            "                       GPU's (the staging's cost without a GPU)\n"
            "  --stage-chunk N      staging chunk of device buffers (default 4M; K/M/G)\n");
}

/* --device fake: a device backend whose "device memory" is host memory in
 * one reserved arena (so the transport can tell its pointers apart) and
 * whose copies are memcpy: the collectives stage it chunk by chunk exactly
 * as they stage a GPU's memory (px_stage.c), so host vs fake busbw is the
 * staging's overhead (two extra copies per byte and the chunking) without
 * a GPU's copy engines. */
#define FAKE_ARENA_BYTES ((size_t)8 << 30) /* reserved, not committed */
static char *fake_arena;
static size_t fake_used;

static int fake_is_device(const void *p)
{
    return fake_arena && (const char *)p >= fake_arena &&
           (const char *)p < fake_arena + FAKE_ARENA_BYTES;
}

static void *fake_alloc(size_t bytes)
{
    size_t b = (bytes + 4095) & ~(size_t)4095;
    if (!fake_arena) {
        fake_arena = mmap(NULL, FAKE_ARENA_BYTES, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (fake_arena == MAP_FAILED) {
            fake_arena = NULL;
            return NULL;
        }
    }
    if (fake_used + b > FAKE_ARENA_BYTES)
        return NULL;
    fake_used += b;
    return fake_arena + fake_used - b;
}

static void fake_free(void *p) { (void)p; /* the arena goes with the process */ }
static void fake_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void fake_set(void *dst, int byte, size_t bytes) { memset(dst, byte, bytes); }
static void fake_sync(void) {}

static const px_kernel_ops_t fake_ops = {
    .name = "fake",
    .mem_alloc = fake_alloc,
    .mem_free = fake_free,
    .mem_set = fake_set,
    .mem_copy = fake_copy,
    .mem_copy_to_host = fake_copy,
    .mem_copy_from_host = fake_copy,
    .synchronize = fake_sync,
};

static int parse_int(const char *opt, const char *s, int min, int max, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "px-coll-bench: %s: invalid value '%s' (want %d..%d)\n", opt, s, min, max);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, main_args_t *a)
{
    static const struct option opts[] = {
        {"ranks", required_argument, NULL, 'n'},  {"op", required_argument, NULL, 'O'},
        {"min-bytes", required_argument, NULL, 'b'}, {"max-bytes", required_argument, NULL, 'e'},
        {"step-factor", required_argument, NULL, 'f'}, {"dtype", required_argument, NULL, 'd'},
        {"redop", required_argument, NULL, 'o'},  {"warmup", required_argument, NULL, 'w'},
        {"iters", required_argument, NULL, 'i'},  {"root", required_argument, NULL, 'r'},
        {"check", no_argument, NULL, 'c'},        {"json", no_argument, NULL, 'J'},
        {"help", no_argument, NULL, 'h'},         {"device", required_argument, NULL, 'D'},
        {"stage-chunk", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
    int c;

    px_bench_cfg_init(&a->cfg);
    while ((c = getopt_long(argc, argv, "n:b:e:f:d:o:w:i:r:ch", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (parse_int("--ranks", optarg, 1, 1024, &a->ranks))
                return -1;
            break;
        case 'O':
            if (px_bench_op_parse(optarg, &a->cfg.op) != PX_OK) {
                fprintf(stderr, "px-coll-bench: --op: unknown op '%s'\n", optarg);
                return -1;
            }
            break;
        case 'b':
        case 'e':
            if (px_bench_parse_bytes(optarg, c == 'b' ? &a->cfg.min_bytes : &a->cfg.max_bytes)) {
                fprintf(stderr, "px-coll-bench: %s: invalid size '%s'\n",
                        c == 'b' ? "--min-bytes" : "--max-bytes", optarg);
                return -1;
            }
            break;
        case 'f':
            if (parse_int("--step-factor", optarg, 2, 4, &a->cfg.step_factor))
                return -1;
            break;
        case 'd':
            if (px_bench_dtype_parse(optarg, &a->cfg.dtype) != PX_OK) {
                fprintf(stderr, "px-coll-bench: --dtype: unknown type '%s'\n", optarg);
                return -1;
            }
            break;
        case 'o':
            if (px_bench_redop_parse(optarg, &a->cfg.redop) != PX_OK) {
                fprintf(stderr, "px-coll-bench: --redop: unknown op '%s'\n", optarg);
                return -1;
            }
            break;
        case 'w':
            if (parse_int("--warmup", optarg, 0, 100000, &a->cfg.warmup))
                return -1;
            break;
        case 'i':
            if (parse_int("--iters", optarg, 1, 1000000, &a->cfg.iters))
                return -1;
            break;
        case 'r':
            if (parse_int("--root", optarg, 0, 1023, &a->cfg.root))
                return -1;
            break;
        case 'c': a->cfg.check = 1; break;
        case 'J': a->json = 1; break;
        case 'D': a->device = optarg; break;
        case 'S':
            if (px_bench_parse_bytes(optarg, &a->stage_chunk) || !a->stage_chunk) {
                fprintf(stderr, "px-coll-bench: --stage-chunk: invalid size '%s'\n", optarg);
                return -1;
            }
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "px-coll-bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

static int on_row(void *arg, const px_bench_row_t *row)
{
    main_args_t *a = arg;
    if (a->rank != 0)
        return 0;
    a->rows++;
    a->busbw_sum += row->busbw_gbs;
    if (row->wrong > 0)
        a->wrong += row->wrong;
    if (!a->json) {
        px_bench_print_row(stdout, row);
    } else {
        printf("%s{\"size\":%llu,\"count\":%llu,\"type\":\"%s\",\"redop\":\"%s\","
               "\"time_us\":%.6f,\"algbw\":%.6f,\"busbw\":%.6f,\"wrong\":%lld}",
               a->json_first ? "" : ",", (unsigned long long)row->bytes,
               (unsigned long long)row->count, px_bench_dtype_name(row->dtype),
               px_bench_redop_name(row->redop), row->time_us, row->algbw_gbs, row->busbw_gbs,
               (long long)row->wrong);
        a->json_first = 0;
    }
    fflush(stdout);
    return 0;
}

/* One rank: the world (px_world.h), the loop. Returns the process exit
 * status. */
static int run_rank(main_args_t *a)
{
    px_world_t *pw = NULL;
    px_comm_t *comm;
    px_status_t status;
    char err[200], tag[32];
    int ret = 1;

    if (px_world_env(&a->rank, &a->world) != PX_OK)
        return 2;
    snprintf(tag, sizeof tag, "rank %d", a->rank);
    px_log_set_tag(tag);
    if (px_bench_cfg_validate(&a->cfg, a->world, err, sizeof err) != PX_OK) {
        if (a->rank == 0)
            fprintf(stderr, "px-coll-bench: %s\n", err);
        return 2;
    }
    px_transport_set_stage_chunk((size_t)a->stage_chunk); /* every rank the same */
    if (a->device && !strcmp(a->device, "fake")) {
        px_transport_set_device_memory(&fake_ops, fake_is_device);
        a->cfg.device_ops = &fake_ops;
    } else if (a->device) { /* in the rank process: CUDA must start after the fork */
        const px_kernel_ops_t *ops;
        if (px_kernels_select(a->device, &ops, err, sizeof err) != PX_OK) {
            fprintf(stderr, "px-coll-bench: rank %d: %s\n", a->rank, err);
            return 2;
        }
        if (ops != px_kernels_cpu()) {
            px_transport_set_device_memory(ops, px_kernels_is_device_ptr);
            /* staging through pinned memory, as a training rank does (train.c):
             * pageable buffers would make the copies slower and synchronous */
            px_transport_set_pinned_memory(px_kernels_host_alloc, px_kernels_host_free);
            /* NCCL may run them (PX_COLL_BACKEND), as in a training rank */
            px_transport_set_comm_device(px_kernels_comm_device());
            a->cfg.device_ops = ops;
        }
        if (px_bench_cfg_validate(&a->cfg, a->world, err, sizeof err) != PX_OK) {
            if (a->rank == 0)
                fprintf(stderr, "px-coll-bench: %s\n", err);
            return 2;
        }
    }
    px_world_opts_t wo = {.rank = a->rank, .size = a->world, .self_when_alone = 1};
    PX_CHECK_GOTO(px_world_open(&wo, &pw), status, out);
    comm = px_world_comm(pw);
    if (a->rank == 0) {
        if (a->json)
            printf("{\"op\":\"%s\",\"ranks\":%d,\"rows\":[", px_bench_op_name(a->cfg.op), a->world);
        else
            px_bench_print_header(stdout, &a->cfg, a->world);
        fflush(stdout);
    }
    a->json_first = 1;
    status = px_bench_run(comm, &a->cfg, on_row, a);
    if (status != PX_OK) {
        px_error("benchmark failed: %s (%s)", px_status_str(status), px_comm_last_error(comm));
        goto out;
    }
    px_world_finish(pw);
    if (a->rank == 0) {
        if (a->json)
            printf("],\"avg_busbw\":%.4f,\"wrong\":%lld}\n", a->rows ? a->busbw_sum / a->rows : 0.0,
                   (long long)a->wrong);
        else
            printf("# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %.4f\n",
                   (long long)a->wrong, a->wrong ? "ERROR" : "OK",
                   a->rows ? a->busbw_sum / a->rows : 0.0);
        fflush(stdout);
    }
    ret = a->wrong ? 3 : 0;
out:
    /* a clean close only for a finished rank; otherwise our exit reports the failure */
    px_world_close(pw, ret == 0);
    return ret;
}

/* A free TCP port in 20000..31999 (below the ephemeral range, where UCX's
 * own listeners land), found by binding it; 0 if none. */
static int free_port(void)
{
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 64; tries++) {
        int port = 20000 + (int)(rand_r(&seed) % 12000), fd, ok;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        sa.sin_port = htons((uint16_t)port);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            return 0;
        ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return 0;
}

/* The launcher: forks a->ranks ranks and waits for them. When one fails the
 * others get 10 s (their communicators report the peer failure) before they
 * are killed. */
static int launch(main_args_t *a)
{
    pid_t *pids = calloc((size_t)a->ranks, sizeof *pids);
    int port = free_port(), left = a->ranks, failed = 0, worst = 0;
    char buf[32];
    time_t kill_at = 0;

    if (!pids || !port) {
        fprintf(stderr, "px-coll-bench: %s\n", pids ? "no free master port" : "out of memory");
        free(pids);
        return 1;
    }
    fflush(stdout);
    for (int r = 0; r < a->ranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "px-coll-bench: fork: %s\n", strerror(errno));
            for (int k = 0; k < r; k++)
                kill(pids[k], SIGKILL);
            a->ranks = r;
            left = r;
            failed = 1;
            worst = 1;
            break;
        }
        if (pid == 0) {
            snprintf(buf, sizeof buf, "%d", r);
            setenv("PX_RANK", buf, 1);
            snprintf(buf, sizeof buf, "%d", a->ranks);
            setenv("PX_WORLD_SIZE", buf, 1);
            snprintf(buf, sizeof buf, "%d", port);
            setenv("PX_MASTER_PORT", buf, 1);
            if (!getenv("PX_MASTER_ADDR"))
                setenv("PX_MASTER_ADDR", "127.0.0.1", 1);
            free(pids);
            exit(run_rank(a));
        }
        pids[r] = pid;
    }
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, kill_at ? WNOHANG : 0);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0)
            break;
        if (pid == 0) {
            if (time(NULL) >= kill_at) {
                for (int r = 0; r < a->ranks; r++)
                    if (pids[r])
                        kill(pids[r], SIGKILL);
            }
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        for (int r = 0; r < a->ranks; r++)
            if (pids[r] == pid) {
                int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                pids[r] = 0;
                left--;
                if (code) {
                    if (WIFSIGNALED(st))
                        fprintf(stderr, "px-coll-bench: rank %d killed by signal %d\n", r,
                                WTERMSIG(st));
                    failed++;
                    worst = code > worst ? code : worst;
                    if (!kill_at)
                        kill_at = time(NULL) + 10;
                }
            }
    }
    free(pids);
    return failed ? (worst ? worst : 1) : 0;
}

int main(int argc, char **argv)
{
    main_args_t a = {0};

    if (parse_args(argc, argv, &a)) {
        return 2;
    }
    if (a.ranks > 1) {
        if (getenv("PX_WORLD_SIZE") && atoi(getenv("PX_WORLD_SIZE")) > 1) {
            fprintf(stderr, "px-coll-bench: -n given inside a launched world (PX_WORLD_SIZE)\n");
            return 2;
        }
        return launch(&a);
    }
    if (a.ranks == 1) {
        unsetenv("PX_WORLD_SIZE");
        unsetenv("PX_RANK");
    }
    return run_rank(&a);
}
