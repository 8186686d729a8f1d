/* bench_rank.c: parallax-rank's bench mode, the rank side of `pctl bench`.
 *
 *   parallax-rank --bench-op OP [--bench-min-bytes N] [--bench-max-bytes N]
 *       [--bench-dtype T] [--bench-redop R] [--bench-iters N] [--bench-warmup N]
 *       [--bench-step-factor F] [--bench-check]
 *       [--coord ADDR --job ID --rank R --world N --node NAME]
 *
 * Any --bench-* flag selects this mode (rank_main.c hands over before its
 * own parsing; training flags are then ignored). With --coord the world
 * comes from the daemon's rendezvous (px_rank_link) and rank 0 reports each
 * size's row to the coordinator with Peer.ReportProgress (bench_rows); a
 * `stop` answer ends the run on every rank. Without --coord, PX_WORLD_SIZE
 * > 1 uses the standalone bootstrap and rank 0 prints the table.
 *
 * Runs on the rank's only thread. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "px_log.h"
#include "px_world.h"

#include "parallax.pb-c.h"
#include "px_rank_link.h"
#include "px_rpc.h"

#define BENCH_REPORT_TIMEOUT_MS 10000

typedef struct {
    px_bench_cfg_t cfg;
    const char *coord, *job, *node;
    int rank, world;
    px_rpc_channel_t *report;
} bench_args_t;

int px_rank_bench_requested(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--bench-", 8))
            return 1;
    return 0;
}

static int parse_num(const char *opt, const char *s, long min, long max, long *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "parallax-rank: %s: invalid value '%s' (want %ld..%ld)\n", opt, s, min,
                max);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, bench_args_t *a)
{
    enum { O_OP = 256, O_MIN, O_MAX, O_DTYPE, O_REDOP, O_ITERS, O_WARMUP, O_STEP, O_CHECK,
           O_COORD, O_JOB, O_RANK, O_WORLD, O_NODE };
    static const struct option opts[] = {
        {"bench-op", 1, 0, O_OP}, {"bench-min-bytes", 1, 0, O_MIN},
        {"bench-max-bytes", 1, 0, O_MAX}, {"bench-dtype", 1, 0, O_DTYPE},
        {"bench-redop", 1, 0, O_REDOP}, {"bench-iters", 1, 0, O_ITERS},
        {"bench-warmup", 1, 0, O_WARMUP}, {"bench-step-factor", 1, 0, O_STEP},
        {"bench-check", 0, 0, O_CHECK}, {"coord", 1, 0, O_COORD}, {"job", 1, 0, O_JOB},
        {"rank", 1, 0, O_RANK}, {"world", 1, 0, O_WORLD}, {"node", 1, 0, O_NODE},
        {0, 0, 0, 0}};
    int c;
    long v;

    px_bench_cfg_init(&a->cfg);
    a->rank = -1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_OP:
            if (px_bench_op_parse(optarg, &a->cfg.op)) {
                fprintf(stderr, "parallax-rank: --bench-op: unknown op '%s'\n", optarg);
                return -1;
            }
            break;
        case O_MIN:
        case O_MAX:
            if (px_bench_parse_bytes(optarg, c == O_MIN ? &a->cfg.min_bytes : &a->cfg.max_bytes)) {
                fprintf(stderr, "parallax-rank: --bench-%s-bytes: invalid size '%s'\n",
                        c == O_MIN ? "min" : "max", optarg);
                return -1;
            }
            break;
        case O_DTYPE:
            if (px_bench_dtype_parse(optarg, &a->cfg.dtype)) {
                fprintf(stderr, "parallax-rank: --bench-dtype: unknown type '%s'\n", optarg);
                return -1;
            }
            break;
        case O_REDOP:
            if (px_bench_redop_parse(optarg, &a->cfg.redop)) {
                fprintf(stderr, "parallax-rank: --bench-redop: unknown op '%s'\n", optarg);
                return -1;
            }
            break;
        case O_ITERS:
            if (parse_num("--bench-iters", optarg, 0, 1000000, &v))
                return -1;
            a->cfg.iters = (int)v;
            break;
        case O_WARMUP:
            if (parse_num("--bench-warmup", optarg, 0, 100000, &v))
                return -1;
            a->cfg.warmup = (int)v;
            break;
        case O_STEP:
            if (parse_num("--bench-step-factor", optarg, 2, 4, &v))
                return -1;
            a->cfg.step_factor = (int)v;
            break;
        case O_CHECK: a->cfg.check = 1; break;
        case O_COORD: a->coord = optarg; break;
        case O_JOB: a->job = optarg; break;
        case O_NODE: a->node = optarg; break;
        case O_RANK:
            if (parse_num("--rank", optarg, 0, 65535, &v))
                return -1;
            a->rank = (int)v;
            break;
        case O_WORLD:
            if (parse_num("--world", optarg, 1, 65536, &v))
                return -1;
            a->world = (int)v;
            break;
        default:
            fprintf(stderr, "parallax-rank: bench mode: unknown option '%s'\n", argv[optind - 1]);
            return -1;
        }
    }
    if (a->coord && (!a->job || a->rank < 0 || a->world < 1 || !a->node)) {
        fprintf(stderr, "parallax-rank: --coord needs --job, --rank, --world and --node\n");
        return -1;
    }
    return 0;
}

/* Peer.ReportProgress with one bench row; *stop_p = the coordinator's stop. */
static px_status_t report_row(bench_args_t *a, const px_bench_row_t *row, int *stop_p)
{
    Parallax__V1__ReportProgressRequest req = PARALLAX__V1__REPORT_PROGRESS_REQUEST__INIT;
    Parallax__V1__BenchRow br = PARALLAX__V1__BENCH_ROW__INIT, *brp = &br;
    Parallax__V1__ReportProgressResponse *resp = NULL;
    px_rpc_result_t result = {0};
    px_status_t status;

    br.size = row->bytes;
    br.count = row->count;
    br.type = (char *)px_bench_dtype_name(row->dtype);
    br.redop = (char *)px_bench_redop_name(row->redop);
    br.time_us = row->time_us;
    br.algbw = row->algbw_gbs;
    br.busbw = row->busbw_gbs;
    br.wrong = row->wrong;
    req.job_id = (char *)a->job;
    req.rank = (uint32_t)a->rank;
    req.n_bench_rows = 1;
    req.bench_rows = &brp;
    status = px_rpc_call_unary(a->report, "/parallax.v1.Peer/ReportProgress", &req.base,
                               &parallax__v1__report_progress_response__descriptor,
                               BENCH_REPORT_TIMEOUT_MS, (ProtobufCMessage **)&resp, &result);
    if (status != PX_OK) {
        px_error("bench: ReportProgress (size %llu) failed: %s (%s)",
                 (unsigned long long)row->bytes, px_status_str(status),
                 result.message ? result.message : "");
    } else {
        *stop_p = resp->stop ? 1 : 0;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    free(result.message);
    return status;
}

static int on_row(void *arg, const px_bench_row_t *row)
{
    bench_args_t *a = arg;
    int stop = 0;

    if (a->rank != 0)
        return 0;
    if (a->coord) {
        /* a lost report loses a row of the table: stop rather than finish
         * a benchmark whose results nobody sees */
        if (report_row(a, row, &stop) != PX_OK)
            return 1;
    }
    px_bench_print_row(stdout, row);
    fflush(stdout);
    return stop;
}

int px_rank_bench_main(int argc, char **argv)
{
    bench_args_t a = {0};
    px_world_t *pw = NULL;
    px_comm_t *comm;
    px_status_t status;
    char err[200], tag[32];
    int ret = 1;
    px_rank_link_t *link = NULL;

    if (parse_args(argc, argv, &a))
        return 2;
    if (!a.coord && px_world_env(&a.rank, &a.world) != PX_OK)
        return 2;
    snprintf(tag, sizeof tag, "rank %d", a.rank);
    px_log_set_tag(tag);
    if (px_bench_cfg_validate(&a.cfg, a.world, err, sizeof err) != PX_OK) {
        fprintf(stderr, "parallax-rank: bench: %s\n", err);
        return 2;
    }

    px_world_opts_t wo = {.rank = a.rank, .size = a.world, .self_when_alone = 1};
    if (a.coord) {
        PX_CHECK_GOTO(px_rank_link_open(a.coord, a.job, a.rank, a.node, &link), status, out);
        wo.rendezvous = px_rank_link_world_rendezvous;
        wo.rendezvous_arg = link;
    }
    PX_CHECK_GOTO(px_world_open(&wo, &pw), status, out);
    comm = px_world_comm(pw);
    if (a.coord && a.rank == 0)
        PX_CHECK_GOTO(px_rank_link_channel_create(a.coord, &a.report), status, out);
    if (a.rank == 0) {
        px_bench_print_header(stdout, &a.cfg, a.world);
        fflush(stdout);
    }
    status = px_bench_run(comm, &a.cfg, on_row, &a);
    if (status == PX_ERR_ABORTED) {
        px_info("bench: stopped by the coordinator");
        ret = 0;
        goto out;
    }
    if (status != PX_OK) {
        px_error("bench: %s (%s)", px_status_str(status), px_comm_last_error(comm));
        goto out;
    }
    px_world_finish(pw);
    ret = 0;
out:
    if (ret && status != PX_OK && status != PX_ERR_ABORTED)
        px_error("bench: rank %d failed: %s", a.rank, px_status_str(status));
    px_world_close(pw, ret == 0);
    px_rpc_channel_destroy(a.report);
    px_rank_link_close(link);
    return ret;
}
