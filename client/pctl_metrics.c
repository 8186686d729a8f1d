/* pctl_metrics.c: `pctl metrics JOB [JOB...]`: every recorded
 * step of one or more jobs as a table (training and validation loss side by
 * side), --csv, --json, or --plot: the loss curves in the terminal
 * (pctl_plot.h), several jobs overlaid. --from-json FILE reads what
 * `pctl metrics --json` printed instead of asking the daemon (plots of saved
 * runs; the plot's test). Main thread of pctl. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pctl.h"
#include "pctl_plot.h"
#include "px_tb.h"

#define M_METRICS "/parallax.v1.Control/GetMetrics"

/* One recorded step (val_loss NaN: no validation after it; mfu NaN: no
 * known device peak). */
typedef struct row {
    double step, loss, grad_norm, lr, tps, elapsed, val_loss, mfu;
    long long time_ms;
} row_t;

typedef struct job_rows {
    char *id;     /* owned */
    row_t *rows;  /* owned, step order */
    size_t n;
} job_rows_t;

static int rows_from_resp(const Parallax__V1__GetMetricsResponse *resp, job_rows_t *j)
{
    j->rows = calloc(resp->n_steps ? resp->n_steps : 1, sizeof(row_t));
    if (!j->rows)
        return -1;
    for (size_t i = 0; i < resp->n_steps; i++) {
        const Parallax__V1__StepMetrics *m = resp->steps[i];
        j->rows[i] = (row_t){m->step, m->loss, m->grad_norm, m->lr, m->tokens_per_second,
                             m->elapsed_s, m->val_loss > 0.0f ? m->val_loss : NAN,
                             m->mfu > 0 ? m->mfu : NAN, m->time_ms};
    }
    j->n = resp->n_steps;
    return 0;
}

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int rows_from_json(const json_t *a, const char *id, job_rows_t *j)
{
    j->id = strdup(id);
    j->rows = calloc(json_array_size(a) + 1, sizeof(row_t));
    if (!j->id || !j->rows)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *o = json_array_get(a, i);
        double t = num(o, "time_ms");
        j->rows[j->n++] = (row_t){num(o, "step"), num(o, "loss"), num(o, "grad_norm"),
                                  num(o, "lr"), num(o, "tokens_per_second"), num(o, "elapsed_s"),
                                  num(o, "val_loss"), num(o, "mfu"), isfinite(t) ? (long long)t : 0};
    }
    return 0;
}

/* --from-json FILE: an array (one job, named after the file) or an object
 * of arrays by job id. */
static int load_file(const char *path, job_rows_t **jobs_p, size_t *n_p)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    const char *key;
    json_t *val;
    size_t n = 0;

    if (!root) {
        fprintf(stderr, "pctl: metrics: %s:%d: %s\n", path, err.line, err.text);
        return -1;
    }
    job_rows_t *jobs = calloc(json_is_object(root) ? json_object_size(root) + 1 : 1,
                              sizeof(*jobs));
    if (!jobs)
        goto fail;
    if (json_is_array(root)) {
        const char *base = strrchr(path, '/');
        if (rows_from_json(root, base ? base + 1 : path, &jobs[n++]))
            goto fail;
    } else if (json_is_object(root)) {
        json_object_foreach(root, key, val) {
            if (!json_is_array(val) || rows_from_json(val, key, &jobs[n++]))
                goto fail;
        }
    } else {
        goto fail;
    }
    json_decref(root);
    *jobs_p = jobs;
    *n_p = n;
    return 0;
fail:
    fprintf(stderr, "pctl: metrics: %s is not what `pctl metrics --json` prints\n", path);
    json_decref(root);
    for (size_t i = 0; jobs && i < n; i++) {
        free(jobs[i].id);
        free(jobs[i].rows);
    }
    free(jobs);
    return -1;
}

static json_t *rows_json(const job_rows_t *j)
{
    json_t *a = json_array();
    for (size_t i = 0; i < j->n; i++) {
        const row_t *r = &j->rows[i];
        json_array_append_new(a, json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:o}", "step",
                                           (json_int_t)r->step, "loss", r->loss, "grad_norm",
                                           r->grad_norm, "lr", r->lr, "tokens_per_second", r->tps,
                                           "elapsed_s", r->elapsed, "time_ms",
                                           (json_int_t)r->time_ms, "val_loss",
                                           isfinite(r->val_loss) ? json_real(r->val_loss)
                                                                 : json_null()));
        if (isfinite(r->mfu)) /* only where the device's peak was known */
            json_object_set_new(json_array_get(a, i), "mfu", json_real(r->mfu));
    }
    return a;
}

static void print_table(const job_rows_t *j, int header)
{
    if (header)
        printf("== %s\n", j->id);
    printf("%6s %10s %10s %10s %12s %10s %9s\n", "STEP", "LOSS", "VAL_LOSS", "GRAD_NORM", "LR",
           "TOK/S", "ELAPSED");
    for (size_t i = 0; i < j->n; i++) {
        const row_t *r = &j->rows[i];
        char val[32] = "-";
        if (isfinite(r->val_loss))
            snprintf(val, sizeof(val), "%.4f", r->val_loss);
        printf("%6.0f %10.4f %10s %10.4f %12.6g %10.0f %8.1fs\n", r->step, r->loss, val,
               r->grad_norm, r->lr, r->tps, r->elapsed);
    }
}

/* The mfu column only when some step has one (a CPU job's rows keep
 * their eight columns); empty on the steps without. */
static void print_csv(const job_rows_t *jobs, size_t n)
{
    int mfu = 0;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < jobs[k].n; i++)
            mfu |= isfinite(jobs[k].rows[i].mfu);
    printf("job,step,loss,val_loss,grad_norm,lr,tokens_per_second,elapsed_s%s\n",
           mfu ? ",mfu" : "");
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < jobs[k].n; i++) {
            const row_t *r = &jobs[k].rows[i];
            printf("%s,%.0f,%.9g,", jobs[k].id, r->step, r->loss);
            if (isfinite(r->val_loss))
                printf("%.9g", r->val_loss);
            printf(",%.9g,%.9g,%.6g,%.6g", r->grad_norm, r->lr, r->tps, r->elapsed);
            if (mfu) {
                putchar(',');
                if (isfinite(r->mfu))
                    printf("%.9g", r->mfu);
            }
            putchar('\n');
        }
}

/* Two series per job (training line, validation markers where any). */
static int plot(const job_rows_t *jobs, size_t n, const pctl_plot_opts_t *o)
{
    pctl_series_t *s = calloc(2 * n, sizeof(*s));
    double *buf = NULL;
    char (*labels)[160] = calloc(2 * n, sizeof(*labels));
    size_t total = 0, ns = 0, off = 0;
    int rc;

    for (size_t k = 0; k < n; k++)
        total += jobs[k].n;
    buf = malloc((4 * total + 1) * sizeof(double));
    if (!s || !labels || !buf) {
        free(s);
        free(labels);
        free(buf);
        fprintf(stderr, "pctl: metrics: out of memory\n");
        return PCTL_EXIT_FAIL;
    }
    for (size_t k = 0; k < n; k++) {
        double *tx = buf + off, *ty = tx + jobs[k].n, *vx = ty + jobs[k].n, *vy = vx + jobs[k].n;
        size_t nv = 0;
        off += 4 * jobs[k].n;
        for (size_t i = 0; i < jobs[k].n; i++) {
            tx[i] = jobs[k].rows[i].step;
            ty[i] = jobs[k].rows[i].loss;
            if (isfinite(jobs[k].rows[i].val_loss)) {
                vx[nv] = jobs[k].rows[i].step;
                vy[nv++] = jobs[k].rows[i].val_loss;
            }
        }
        snprintf(labels[ns], sizeof(labels[ns]), "%s train", jobs[k].id);
        s[ns] = (pctl_series_t){labels[ns], tx, ty, jobs[k].n, 0};
        ns++;
        if (nv) {
            snprintf(labels[ns], sizeof(labels[ns]), "%s val", jobs[k].id);
            s[ns] = (pctl_series_t){labels[ns], vx, vy, nv, 1};
            ns++;
        }
    }
    rc = pctl_plot(stdout, s, ns, o) ? PCTL_EXIT_FAIL : PCTL_EXIT_OK;
    free(s);
    free(labels);
    free(buf);
    return rc;
}

/* A run name for a job label: '/' would make a directory level of it. */
static void run_name(const char *label, char *buf, size_t len)
{
    snprintf(buf, len, "%s", label);
    for (char *c = buf; *c; c++)
        if (*c == '/')
            *c = '_';
}

/* --tensorboard DIR: one run per job (DIR/<job>/), the scalars train/loss,
 * train/grad_norm, train/lr, train/tokens_per_second and, after the steps
 * that had one, val/loss; train/mfu on the steps with one; each at its
 * step and the time it was recorded. */
static int tensorboard(const job_rows_t *jobs, size_t n, const char *dir)
{
    for (size_t k = 0; k < n; k++) {
        char err[4400], run[256], rundir[4400];
        run_name(jobs[k].id, run, sizeof(run));
        snprintf(rundir, sizeof(rundir), "%s/%s", dir, run);
        px_tb_t *tb = px_tb_open(rundir, err, sizeof(err));
        int bad = !tb;
        for (size_t i = 0; tb && !bad && i < jobs[k].n; i++) {
            const row_t *r = &jobs[k].rows[i];
            int64_t s = (int64_t)r->step;
            double t = r->time_ms > 0 ? r->time_ms / 1e3 : 0.0;
            bad = px_tb_scalar(tb, "train/loss", s, t, (float)r->loss) ||
                  px_tb_scalar(tb, "train/grad_norm", s, t, (float)r->grad_norm) ||
                  px_tb_scalar(tb, "train/lr", s, t, (float)r->lr) ||
                  px_tb_scalar(tb, "train/tokens_per_second", s, t, (float)r->tps) ||
                  (isfinite(r->val_loss) &&
                   px_tb_scalar(tb, "val/loss", s, t, (float)r->val_loss)) ||
                  (isfinite(r->mfu) && px_tb_scalar(tb, "train/mfu", s, t, (float)r->mfu));
        }
        if (tb && !bad)
            printf("%s: %zu steps -> %s\n", pctl_esc(jobs[k].id), jobs[k].n, px_tb_path(tb));
        else if (tb)
            snprintf(err, sizeof(err), "cannot write %s: %s", px_tb_path(tb), strerror(errno));
        if (px_tb_close(tb) || bad) {
            fprintf(stderr, "pctl: metrics: %s\n", err);
            return PCTL_EXIT_FAIL;
        }
    }
    return PCTL_EXIT_OK;
}

int pctl_cmd_metrics(pctl_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},   {"csv", no_argument, NULL, 'c'},
        {"plot", no_argument, NULL, 'p'},   {"log", no_argument, NULL, 'l'},
        {"width", required_argument, NULL, 'w'}, {"height", required_argument, NULL, 'H'},
        {"from-json", required_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'},
        {"tensorboard", required_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    int json = 0, csv = 0, do_plot = 0, opt, rc = PCTL_EXIT_FAIL;
    const char *file = NULL, *tbdir = NULL;
    uint64_t v;
    pctl_plot_opts_t po = {.width = 0, .height = 16, .log = 0, .color = 0};
    job_rows_t *jobs = NULL;
    size_t n = 0;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': json = 1; break;
        case 'c': csv = 1; break;
        case 'p': do_plot = 1; break;
        case 'l': po.log = 1; break;
        case 'w':
            if (pctl_parse_u64("metrics", "--width", optarg, 20, 10000, &v))
                return PCTL_EXIT_USAGE;
            po.width = (int)v;
            break;
        case 'H':
            if (pctl_parse_u64("metrics", "--height", optarg, 3, 1000, &v))
                return PCTL_EXIT_USAGE;
            po.height = (int)v;
            break;
        case 'f': file = optarg; break;
        case 't': tbdir = optarg; break;
        case 'h': return pctl_help("metrics");
        case ':': return pctl_usage_error("metrics", "option %s needs a value", argv[optind - 1]);
        default: return pctl_usage_error("metrics", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (json + csv + do_plot + (tbdir != NULL) > 1)
        return pctl_usage_error("metrics",
                                "--json, --csv, --plot and --tensorboard exclude each other");
    if (po.log && !do_plot)
        return pctl_usage_error("metrics", "--log goes with --plot");
    if (!file && optind >= argc)
        return pctl_usage_error("metrics", "missing JOB");
    if (file && optind < argc)
        return pctl_usage_error("metrics", "JOB and --from-json exclude each other");
    if (file) {
        if (load_file(file, &jobs, &n))
            return PCTL_EXIT_FAIL;
    } else {
        jobs = calloc((size_t)(argc - optind), sizeof(*jobs));
        if (!jobs)
            return PCTL_EXIT_FAIL;
        for (; optind < argc; optind++) {
            Parallax__V1__GetMetricsRequest req = PARALLAX__V1__GET_METRICS_REQUEST__INIT;
            Parallax__V1__GetMetricsResponse *resp = NULL;
            char idbuf[256];
            /* an id or a name; the legend shows it as given */
            req.job_id = (char *)pctl_job_id(ctx, argv[optind], idbuf, sizeof(idbuf));
            if (pctl_call(ctx, "metrics", M_METRICS, &req.base,
                          &parallax__v1__get_metrics_response__descriptor,
                          (ProtobufCMessage **)&resp))
                goto out;
            jobs[n].id = strdup(argv[optind]);
            int bad = !jobs[n].id || rows_from_resp(resp, &jobs[n]);
            n++;
            protobuf_c_message_free_unpacked(&resp->base, NULL);
            if (bad)
                goto out;
        }
    }
    if (tbdir) {
        rc = tensorboard(jobs, n, tbdir);
    } else if (json) {
        json_t *o;
        if (n == 1) {
            o = rows_json(&jobs[0]);
        } else {
            o = json_object();
            for (size_t k = 0; k < n; k++)
                json_object_set_new(o, jobs[k].id, rows_json(&jobs[k]));
        }
        rc = pctl_json_print(o);
    } else if (csv) {
        print_csv(jobs, n);
        rc = PCTL_EXIT_OK;
    } else if (do_plot) {
        if (!po.width)
            po.width = pctl_plot_term_width(stdout);
        po.color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
        rc = plot(jobs, n, &po);
    } else {
        for (size_t k = 0; k < n; k++)
            print_table(&jobs[k], n > 1);
        rc = PCTL_EXIT_OK;
    }
out:
    for (size_t k = 0; k < n; k++) {
        free(jobs[k].id);
        free(jobs[k].rows);
    }
    free(jobs);
    return rc;
}
