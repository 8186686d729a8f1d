/* pctl.h: shared pieces of the pctl command-line client (internal to
 * client/; not a public header).
 *
 * Exit codes: 0 success, 1 failure (RPC error, job not COMPLETED for
 * --follow/watch, I/O error), 2 usage error. */
#ifndef PCTL_H
#define PCTL_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "jobflags.h"
#include "layout.h"
#include "parallax.pb-c.h"
#include "px_rpc.h"

#define PCTL_EXIT_OK 0
#define PCTL_EXIT_FAIL 1
#define PCTL_EXIT_USAGE 2

/* Global options and the (lazily created) channel. */
typedef struct pctl_ctx {
    const char *server;        /* target, "host:port" or "unix:/path" */
    int timeout_ms;            /* deadline of each unary RPC */
    px_rpc_channel_t *channel; /* created by pctl_channel() */
} pctl_ctx_t;

/* One command: `run(ctx, argc, argv)` gets argv[0] == command name and
 * returns the exit code. */
typedef struct pctl_command {
    const char *name;
    const char *summary;
    const char *usage; /* full help text, printed by --help */
    int (*run)(pctl_ctx_t *ctx, int argc, char **argv);
} pctl_command_t;

/* ---- pctl_main.c */

/* Prints "pctl: <cmd>: <fmt...>" and the command's usage line to stderr;
 * returns PCTL_EXIT_USAGE. */
int pctl_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the full help of `cmd` to stdout; returns 0. */
int pctl_help(const char *cmd);

/* Parses a whole decimal number in [min, max] (usage error naming `flag`
 * otherwise). Returns 0 on success. */
int pctl_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t min, uint64_t max,
                   uint64_t *out_p);
int pctl_parse_float(const char *cmd, const char *flag, const char *s, double min, double max,
                     double *out_p);

/* The job's defaults as pctl submits them: the planner's
 * (px_job_config_defaults) with the quickstart model's size and run length
 * (layers 4, heads 4, dim 128, seq 128, batch 16, steps 300). `pctl submit`
 * and `pctl plan` start from them, so both read the same job. */
void pctl_job_defaults(px_job_config_t *cfg);

/* Applies job flag f (jobflags.h) with `value` (NULL for a flag without
 * one) to cfg, with pctl's parsers: a bad value is a usage error of
 * command `cmd` naming the flag. PCTL_EXIT_OK or PCTL_EXIT_USAGE (printed). */
int pctl_job_flag_apply(const char *cmd, const px_job_flag_t *f, const char *value,
                        px_job_config_t *cfg);

/* pctl plan's usage line (its --help starts with it). */
#define PCTL_PLAN_USAGE                                                                      \
    "usage: pctl plan [JOB FLAGS of pctl submit] [--params N] [--paper]\n"                   \
    "                 [--optimizer-bytes-per-param K] [--device cpu|cuda|sim]\n"             \
    "                 [--nodes N] [--devices-per-node K] [--ranks] [--print-schedule]\n"     \
    "                 [--cluster FILE|PRESET:NODESxGPUS|local [--search] [--top N]\n"       \
    "                  [--save-cluster FILE]\n"                                            \
    "                 [--engine parallax|megatron|torchtitan|llmc]] [--json]\n"

/* pctl plan's --help: its own flags, then the job flags' help generated
 * from the shared table (jobflags.h). */
int pctl_plan_help(void);

/* The channel to ctx->server (created on first use). */
px_rpc_channel_t *pctl_channel(pctl_ctx_t *ctx);

/* Blocking unary call with ctx->timeout_ms. On failure prints
 * "pctl: <cmd>: <STATUS>: <message>" (or "cannot reach parallaxd at ADDR")
 * and returns nonzero. *resp_p is owned by the caller on success. */
int pctl_call(pctl_ctx_t *ctx, const char *cmd, const char *method,
              const ProtobufCMessage *request, const ProtobufCMessageDescriptor *resp_desc,
              ProtobufCMessage **resp_p);

/* The job id a user's JOB argument names: `ref` itself when it is a job's
 * id, else the id of the job whose --name it is (the active one: names are
 * unique among active jobs cluster-wide; else the newest, with a note on
 * stderr when several finished jobs had that name): an id is known by
 * GetJob answering it; a name is looked up in the cluster's job list
 * (ListJobs, which asks every peer) only then. `ref` unchanged when the list cannot be had or
 * nothing matches (the call that follows then names the error). The id is
 * written to buf (len bytes) and returned. */
const char *pctl_job_id(pctl_ctx_t *ctx, const char *ref, char *buf, size_t len);

/* Prints an RPC failure in the common format. */
void pctl_print_rpc_error(pctl_ctx_t *ctx, const char *cmd, grpc_status_code code,
                          const char *message);

/* ---- pctl_format.c */

/* A string from the daemon or the user made safe to print to a terminal:
 * control characters (C0, DEL, and C1 both as lone raw bytes and as UTF-8
 * U+0080..U+009F) become \n, \t, \r or \xNN, so no name, reason or
 * message can move the cursor, clear the screen or retitle the terminal;
 * other UTF-8 passes through whole (the continuation bytes 0x80..0x9f of a
 * character such as U+20AC are not C1 controls). NULL gives "". The
 * result is owned by pctl_esc: valid until 16 later calls (enough for one
 * printf's arguments). JSON output needs none of this (jansson escapes). */
const char *pctl_esc(const char *s);
/* Writes `len` bytes of program output (a rank's log) to `f` as pctl_esc
 * shows strings, except that newlines and tabs stay as they are, so the
 * lines read as lines: ESC, CR, other C0/C1 controls and DEL become \xNN
 * (a log cannot clear the screen or retitle the terminal). 0 on success,
 * -1 if a write failed. */
int pctl_esc_write(FILE *f, const uint8_t *p, size_t len);

/* "OK", "NOT_FOUND", ... as grpc names them. */
const char *pctl_code_name(grpc_status_code code);
/* "pending", "running", "completed", ... */
const char *pctl_state_name(Parallax__V1__JobState state);
int pctl_state_is_final(Parallax__V1__JobState state);
/* Human durations/ages/rates into `buf`: "1h02m", "35s"; "12.3k". */
const char *pctl_fmt_duration(double seconds, char *buf, size_t len);
const char *pctl_fmt_rate(double per_second, char *buf, size_t len);

/* The parallel layout of a job's spec (JobSpec.parallel, or dp alone for
 * specs of old clients and bench jobs) into *l. Returns 1 if the job has a
 * spec and the layout is valid (px_layout_check), else 0 (l undefined). */
int pctl_job_layout(const Parallax__V1__Job *job, px_layout_t *l);
/* The job as JSON: its fields, spec (with "parallel": {dp, tp, pp, cp, ep,
 * world}), ranks (each with "coord": {dp, tp, pp, cp, ep} and "reporting":
 * true for the rank whose step figures the job records) and
 * "reporting_rank". Caller owns the result. */
json_t *pctl_json_job(const Parallax__V1__Job *job);
/* Any message as a JSON object with every field of its descriptor
 * (pctl_pbjson.c; nested messages recursively, repeated fields as arrays,
 * enums by name, an unset message as null). Caller owns the result. */
json_t *pctl_json_message(const ProtobufCMessage *m);
/* A float as the shortest decimal that reads back as the same float
 * (null for NaN/inf). */
json_t *pctl_json_float(float f);
json_t *pctl_json_metrics(const Parallax__V1__StepMetrics *m);
json_t *pctl_json_node(const Parallax__V1__NodeInfo *node);
/* The validation file `pctl data prepare --out OUT` writes beside OUT:
 * "dir/x.bin" -> "dir/x_val.bin"; "x" -> "x_val"; ".hidden" -> ".hidden_val".
 * Caller frees; NULL when out of memory. */
char *pctl_val_path(const char *out);

/* Dumps `value` (stolen) to stdout with a newline; returns 0 or 1. */
int pctl_json_print(json_t *value);

/* ---- pctl_memfmt.c: `pctl mem`'s device figures */

/* A rank's device memory as cudaMemGetInfo reported it, "used/total" in GB
 * (10^9 bytes, two decimals: "1.50/80.00"), into `buf`; "-" for a rank
 * without device memory (a CPU rank: device_total_bytes 0, as an old
 * rank's report reads too). Returns buf. */
const char *pctl_mem_device_cell(const Parallax__V1__RankMemory *m, char *buf, size_t len);
/* The same as JSON: {"used": bytes, "total": bytes}, or null for a CPU
 * rank. Caller owns the result. */
json_t *pctl_mem_device_json(const Parallax__V1__RankMemory *m);

/* ---- pctl_data.c */

/* `pctl data prepare`: see pctl_data.c. */
int pctl_cmd_data(pctl_ctx_t *ctx, int argc, char **argv);

/* ---- pctl_plan.c, pctl_mem.c */
int pctl_cmd_plan(pctl_ctx_t *ctx, int argc, char **argv);

/* ---- pctl_calib.c (the daemon's cluster as a planner/cluster.h one) */
struct px_cluster;
/* The alive nodes' free devices (those `devices`, a --devices value or
 * NULL, admits): *nodes_p nodes with any, *per_node_p the fewest a node has,
 * *dev_p their kind (px_plan_dev_t), *mem_p the smallest device memory
 * reported (0: none). PCTL_EXIT_OK or an exit code (printed, as `cmd`). */
int pctl_cluster_topology(pctl_ctx_t *ctx, const char *cmd, const char *devices, int *nodes_p,
                          int *per_node_p, int *dev_p, double *mem_p);
/* `--cluster local`: that topology with its links measured by two bench
 * jobs and the device's GEMM efficiency and kernel cost fitted to two
 * short training jobs of cfg's model (cfg->data_path absolute) over every
 * free device (pctl_calib.c says how). Prints the figures on stderr.
 * PCTL_EXIT_OK or an exit code (printed). */
int pctl_cluster_local(pctl_ctx_t *ctx, const px_job_config_t *cfg, const char *devices,
                       struct px_cluster *cl, int *dev_p);
/* Writes cl as an INI file planner/cluster.h reads. PCTL_EXIT_OK or FAIL. */
int pctl_cluster_save(const struct px_cluster *cl, const char *path);

/* ---- pctl_plantime.c (pctl plan --cluster / --search) */
struct px_cluster;
struct px_step_engine;
/* "parallax" (*parallax_p = 1: the engine by device and precision),
 * "megatron", "torchtitan", "llmc" into *e; -1 for another name. */
int pctl_plan_engine_parse(const char *name, struct px_step_engine *e, int *parallax_p);
/* The predicted step of cfg on cl run by eng (NULL: parallax) with memory
 * of device kind dev: a line, or root's "time" object (root not NULL).
 * PCTL_EXIT_OK or PCTL_EXIT_USAGE (the layout does not place; printed). */
int pctl_plan_time(const px_job_config_t *cfg, const struct px_cluster *cl,
                   const struct px_step_engine *eng, int dev, json_t *root);
/* The `keep` fastest layouts of cfg's model and batch over all of cl's
 * devices that fit memory, printed (or as root's "search" array, printed
 * as JSON). PCTL_EXIT_FAIL when none fits. */
int pctl_plan_search(const px_job_config_t *cfg, const struct px_cluster *cl,
                     const struct px_step_engine *eng, int dev, int keep, json_t *root);
/* The search's fastest layout: cfg with its layout, ZeRO stage, sequence
 * parallelism, grad_accum, micro_batches, schedule and virtual stages into
 * *best, its prediction into *t_p, the layouts that fit into *fit_p.
 * PCTL_EXIT_OK, or PCTL_EXIT_FAIL when none fits (nothing printed). */
struct px_step_time;
int pctl_plan_search_best(const px_job_config_t *cfg, const struct px_cluster *cl,
                          const struct px_step_engine *eng, int dev, px_job_config_t *best,
                          struct px_step_time *t_p, long *fit_p);
int pctl_cmd_mem(pctl_ctx_t *ctx, int argc, char **argv);

/* ---- pctl_jobs.c */

int pctl_cmd_submit(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_list(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_status(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_watch(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_metrics(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_logs(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_cancel(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_nodes(pctl_ctx_t *ctx, int argc, char **argv);
/* ---- pctl_sample.c */
int pctl_cmd_sample(pctl_ctx_t *ctx, int argc, char **argv);
int pctl_cmd_node(pctl_ctx_t *ctx, int argc, char **argv);
/* ---- pctl_bench.c */
int pctl_cmd_bench(pctl_ctx_t *ctx, int argc, char **argv);

#endif
