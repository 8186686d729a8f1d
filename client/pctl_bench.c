/* pctl_bench.c: `pctl bench`, a collectives benchmark job on the cluster's
 * ranks, printed as nccl-tests prints its table.
 *
 * Submits a JobSpec of kind "bench" (dp = --ranks) with Control.SubmitJob,
 * then polls Control.GetJob (every 200 ms) and prints each new row of
 * Job.bench_rows until the job is final. Names (op, dtype) are checked by
 * the daemon, which answers INVALID_ARGUMENT naming the field; numbers and
 * sizes are checked here (usage error naming the flag).
 *
 * Exit: 0 when the job COMPLETED and no element was wrong; 1 otherwise
 * (failed/cancelled job, RPC error, wrong elements); 2 usage error. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pctl.h"

#define M_SUBMIT "/parallax.v1.Control/SubmitJob"
#define M_GET "/parallax.v1.Control/GetJob"
#define POLL_MS 200

/* "4096", "4K", "64M", "1G" (binary multiples). */
static int parse_size(const char *flag, const char *s, uint64_t *out_p)
{
    char *end;
    unsigned long long v;

    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        goto bad;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        goto bad;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || v < 1 || v > (1ull << 32))
        goto bad;
    *out_p = v;
    return 0;
bad:
    pctl_usage_error("bench", "invalid value '%s' for %s (expected bytes in [1, 4G], "
                     "K/M/G suffixes)", s ? s : "", flag);
    return -1;
}

static void print_row(const Parallax__V1__BenchRow *r)
{
    char wrong[24];
    if (r->wrong < 0)
        snprintf(wrong, sizeof wrong, "N/A");
    else
        snprintf(wrong, sizeof wrong, "%lld", (long long)r->wrong);
    printf(" %12llu %12llu %9s %6s %10.1f %8.2f %8.2f %8s\n", (unsigned long long)r->size,
           (unsigned long long)r->count, r->type, r->redop, r->time_us, r->algbw, r->busbw, wrong);
}

static json_t *json_rows(const Parallax__V1__Job *job)
{
    json_t *a = json_array();
    for (size_t i = 0; i < job->n_bench_rows; i++) {
        const Parallax__V1__BenchRow *r = job->bench_rows[i];
        json_array_append_new(a, json_pack("{s:I, s:I, s:s, s:s, s:f, s:f, s:f, s:I}", "size",
                                           (json_int_t)r->size, "count", (json_int_t)r->count,
                                           "type", r->type, "redop", r->redop, "time_us",
                                           r->time_us, "algbw", r->algbw, "busbw", r->busbw,
                                           "wrong", (json_int_t)r->wrong));
    }
    return a;
}

int pctl_cmd_bench(pctl_ctx_t *ctx, int argc, char **argv)
{
    enum { O_OP = 256, O_RANKS, O_MIN, O_MAX, O_DTYPE, O_REDOP, O_ITERS, O_WARMUP, O_STEP,
           O_CHECK, O_JSON, O_NAME, O_HELP };
    static const struct option opts[] = {
        {"op", 1, 0, O_OP}, {"ranks", 1, 0, O_RANKS}, {"min-bytes", 1, 0, O_MIN},
        {"max-bytes", 1, 0, O_MAX}, {"dtype", 1, 0, O_DTYPE}, {"redop", 1, 0, O_REDOP},
        {"iters", 1, 0, O_ITERS}, {"warmup", 1, 0, O_WARMUP}, {"step-factor", 1, 0, O_STEP},
        {"check", 0, 0, O_CHECK}, {"json", 0, 0, O_JSON}, {"name", 1, 0, O_NAME},
        {"help", 0, 0, O_HELP}, {0, 0, 0, 0}};
    Parallax__V1__SubmitJobRequest req = PARALLAX__V1__SUBMIT_JOB_REQUEST__INIT;
    Parallax__V1__JobSpec spec = PARALLAX__V1__JOB_SPEC__INIT;
    Parallax__V1__BenchSpec bench = PARALLAX__V1__BENCH_SPEC__INIT;
    Parallax__V1__SubmitJobResponse *resp = NULL;
    Parallax__V1__Job *job = NULL;
    const char *op = "all_reduce";
    char name[64];
    uint64_t v, ranks = 2;
    int c, json = 0, rc = PCTL_EXIT_FAIL;
    size_t printed = 0;
    int64_t wrong = 0;

    bench.min_bytes = 4096;
    bench.max_bytes = 64ull << 20;
    bench.dtype = (char *)"float";
    bench.redop = (char *)"sum";
    bench.step_factor = 2;
    name[0] = '\0';
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_OP: op = optarg; break;
        case O_DTYPE: bench.dtype = optarg; break;
        case O_REDOP: bench.redop = optarg; break;
        case O_NAME: snprintf(name, sizeof name, "%s", optarg); break;
        case O_RANKS:
            if (pctl_parse_u64("bench", "--ranks", optarg, 1, 65536, &ranks))
                return PCTL_EXIT_USAGE;
            break;
        case O_MIN:
            if (parse_size("--min-bytes", optarg, &bench.min_bytes))
                return PCTL_EXIT_USAGE;
            break;
        case O_MAX:
            if (parse_size("--max-bytes", optarg, &bench.max_bytes))
                return PCTL_EXIT_USAGE;
            break;
        case O_ITERS:
            if (pctl_parse_u64("bench", "--iters", optarg, 1, 1000000, &v))
                return PCTL_EXIT_USAGE;
            bench.iters = (uint32_t)v;
            break;
        case O_WARMUP:
            if (pctl_parse_u64("bench", "--warmup", optarg, 0, 100000, &v))
                return PCTL_EXIT_USAGE;
            bench.warmup = (uint32_t)v; /* 0 means the default (5) */
            break;
        case O_STEP:
            if (pctl_parse_u64("bench", "--step-factor", optarg, 2, 4, &v) || v == 3)
                return v == 3 ? pctl_usage_error("bench", "invalid value '3' for "
                                                 "--step-factor (expected 2 or 4)")
                              : PCTL_EXIT_USAGE;
            bench.step_factor = (uint32_t)v;
            break;
        case O_CHECK: bench.check = 1; break;
        case O_JSON: json = 1; break;
        case O_HELP: return pctl_help("bench");
        default:
            return pctl_usage_error("bench", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return pctl_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    if (bench.max_bytes < bench.min_bytes)
        return pctl_usage_error("bench", "--max-bytes %llu is below --min-bytes %llu",
                                (unsigned long long)bench.max_bytes,
                                (unsigned long long)bench.min_bytes);
    if (!name[0])
        snprintf(name, sizeof name, "bench-%s-%llu", op, (unsigned long long)ranks);
    bench.op = (char *)op;
    spec.name = name;
    spec.kind = (char *)"bench";
    spec.bench = &bench;
    spec.dp = (uint32_t)ranks;
    spec.batch = (uint32_t)ranks;
    spec.steps = 1;
    req.spec = &spec;

    if (pctl_call(ctx, "bench", M_SUBMIT, &req.base, &parallax__v1__submit_job_response__descriptor,
                  (ProtobufCMessage **)&resp))
        goto out;
    if (!json) {
        printf("# job %s: %s on %llu ranks\n", resp->job_id, op, (unsigned long long)ranks);
        printf("#%12s %12s %9s %6s %10s %8s %8s %8s\n", "size", "count", "type", "redop", "time",
               "algbw", "busbw", "#wrong");
        printf("#%12s %12s %9s %6s %10s %8s %8s %8s\n", "(B)", "(elements)", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }
    for (;;) {
        Parallax__V1__GetJobRequest get = PARALLAX__V1__GET_JOB_REQUEST__INIT;
        struct timespec ts = {0, POLL_MS * 1000000L};

        if (job)
            protobuf_c_message_free_unpacked(&job->base, NULL);
        job = NULL;
        get.job_id = resp->job_id;
        if (pctl_call(ctx, "bench", M_GET, &get.base, &parallax__v1__job__descriptor,
                      (ProtobufCMessage **)&job))
            goto out;
        for (; printed < job->n_bench_rows; printed++) {
            if (job->bench_rows[printed]->wrong > 0)
                wrong += job->bench_rows[printed]->wrong;
            if (!json)
                print_row(job->bench_rows[printed]);
        }
        fflush(stdout);
        if (pctl_state_is_final(job->state))
            break;
        nanosleep(&ts, NULL);
    }
    if (json) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:I}", "job_id", resp->job_id, "op",
                              op, "ranks", (json_int_t)ranks, "state",
                              pctl_state_name(job->state), "reason",
                              job->reason ? job->reason : "", "rows", json_rows(job), "wrong",
                              (json_int_t)wrong);
        pctl_json_print(o);
    } else {
        double sum = 0;
        for (size_t i = 0; i < job->n_bench_rows; i++)
            sum += job->bench_rows[i]->busbw;
        printf("# Out of bounds values : %lld %s\n", (long long)wrong, wrong ? "ERROR" : "OK");
        if (job->n_bench_rows)
            printf("# Avg bus bandwidth    : %.4f\n", sum / (double)job->n_bench_rows);
    }
    if (job->state != PARALLAX__V1__JOB_STATE__JOB_COMPLETED) {
        fprintf(stderr, "pctl: bench: job %s %s%s%s\n", resp->job_id, pctl_state_name(job->state),
                job->reason && *job->reason ? ": " : "", job->reason ? job->reason : "");
        goto out;
    }
    rc = wrong ? PCTL_EXIT_FAIL : PCTL_EXIT_OK;
out:
    if (job)
        protobuf_c_message_free_unpacked(&job->base, NULL);
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}
