/* pctl_plantime.c: `pctl plan --cluster` (the predicted step time of the
 * job on a described cluster) and `pctl plan --search` (the layouts of the
 * cluster's devices that fit memory, ranked by predicted tokens/s).
 *
 * Both price a job with planner/steptime.h on a planner/cluster.h
 * cluster; memory per rank is px_plan_job's, the engine's own. The search
 * enumerates dp x tp x pp x cp = the cluster's devices (tp within a node,
 * dividing heads, dim and the padded vocab; cp dividing the sequence into
 * chunk pairs; pp up to the layers), ep (dividing dp x cp and the experts),
 * ZeRO 0-3 (0-1 with pp > 1), sequence parallelism with tp > 1, micro-
 * batches of 1, 2, 4 and 8 sequences (and the whole replica's batch), and
 * with pp > 1 the schedules 1f1b, gpipe, zb1 and interleaved with 2 and 4
 * virtual stages, all within what the pricing engine can run (steptime.h:
 * Megatron-LM's 2021 runs had no ZeRO, sequence or context parallelism);
 * each candidate must pass the one validator
 * (px_job_config_check: with parallax's engine also its rules of what the
 * engine runs today, so a layout found is one pctl submit accepts) and fit
 * the device's memory. Single-threaded; no
 * I/O but stdout and stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "jobcfg.h"
#include "jobplan.h"
#include "layout.h"
#include "pctl.h"
#include "pipesched.h"
#include "steptime.h"

int pctl_plan_engine_parse(const char *name, px_step_engine_t *e, int *parallax_p)
{
    *parallax_p = 0;
    if (!strcmp(name, "parallax"))
        *parallax_p = 1;
    else if (!strcmp(name, "megatron"))
        px_step_engine_megatron(e);
    else if (!strcmp(name, "torchtitan"))
        px_step_engine_torchtitan(e);
    else if (!strcmp(name, "llmc"))
        px_step_engine_llmc(e);
    else
        return -1;
    return 0;
}

static void cost_text(const px_step_time_t *t, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < 3 && n < len; i++) {
        int k = t->top[i];
        if (t->cost[k] <= 0)
            break;
        n += (size_t)snprintf(buf + n, len - n, "%s%s %.3g s", i ? ", " : "",
                              px_step_cost_name(k), t->cost[k]);
    }
}

static json_t *time_json(const px_step_time_t *t)
{
    json_t *costs = json_object(), *top = json_array();
    for (int k = 0; k < PX_STEP_NCOSTS; k++)
        json_object_set_new(costs, px_step_cost_name(k), json_real(t->cost[k]));
    for (int i = 0; i < 3; i++)
        json_array_append_new(top, json_string(px_step_cost_name(t->top[i])));
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:b, s:o, s:o}", "step_s", t->step_s,
                     "tokens_per_s", t->tokens_per_s, "mfu", t->mfu, "model_flops",
                     t->model_flops, "memory_per_rank_bytes", t->mem_bytes, "fits", t->fits,
                     "costs", costs, "largest_costs", top);
}

int pctl_plan_time(const px_job_config_t *cfg, const px_cluster_t *cl,
                   const px_step_engine_t *eng, int dev, json_t *root)
{
    px_step_time_t t;
    char err[512], costs[256];

    if (px_step_predict(cfg, NULL, eng, cl, dev, &t, err, sizeof(err)) != PX_OK) {
        fprintf(stderr, "pctl: plan: --cluster %s: %s\n", cl->name, err);
        return PCTL_EXIT_USAGE;
    }
    if (root) {
        json_t *o = time_json(&t);
        json_object_set_new(o, "cluster", json_string(cl->name));
        json_object_set_new(o, "engine", json_string(eng ? eng->name : "parallax"));
        json_object_set_new(root, "time", o);
        return PCTL_EXIT_OK;
    }
    cost_text(&t, costs, sizeof(costs));
    printf("time on %s (%s, engine %s): step %.4g s, %.4g tokens/s, MFU %.1f%%, memory per "
           "rank %.1f GB of %.0f GB%s; largest costs: %s\n",
           cl->name, cl->dev.name, eng ? eng->name : "parallax", t.step_s, t.tokens_per_s,
           100 * t.mfu, t.mem_bytes / 1e9, cl->dev.mem_bytes / 1e9,
           t.fits ? "" : " (DOES NOT FIT)", costs);
    return PCTL_EXIT_OK;
}

/* One ranked candidate. */
typedef struct {
    px_job_config_t cfg;
    px_step_time_t t;
} cand_t;

typedef struct {
    const px_cluster_t *cl;
    const px_step_engine_t *eng;
    int dev, keep, n;
    cand_t *best; /* [keep], fastest first */
    long tried, valid, fit;
} search_t;

/* Prices c (when the validator takes it and it fits) and keeps it among
 * the fastest. */
static void consider(search_t *s, const px_job_config_t *c)
{
    char err[512];
    px_job_plan_t jp;
    px_step_time_t t;

    /* parallax's own engine: what pctl submit accepts; another engine's
     * layouts are priced whether parallax runs them yet or not */
    s->tried++;
    if (px_job_config_check(c, s->eng ? PX_JOBCFG_LAYOUT_ONLY : 0, err, sizeof(err)) != PX_OK)
        return;
    s->valid++;
    /* the first stage alone first (the embedding's, and the most micro-
     * batches in flight in 1F1B and interleaved): a layout one stage of
     * which does not fit is out without planning the others; the
     * prediction checks every stage */
    if (px_plan_job(c, s->dev, 0, &jp) != PX_OK)
        return;
    double mem = jp.total;
    px_job_plan_free(&jp);
    if (mem > s->cl->dev.mem_bytes)
        return;
    if (px_step_predict(c, NULL, s->eng, s->cl, s->dev, &t, err, sizeof(err)) != PX_OK ||
        !t.fits)
        return;
    s->fit++;
    int at = s->n;
    while (at > 0 && s->best[at - 1].t.tokens_per_s < t.tokens_per_s)
        at--;
    if (at >= s->keep)
        return;
    int last = s->n < s->keep ? s->n : s->keep - 1;
    memmove(&s->best[at + 1], &s->best[at], sizeof(cand_t) * (size_t)(last - at));
    s->best[at].cfg = *c;
    s->best[at].t = t;
    if (s->n < s->keep)
        s->n++;
}

/* The micro-batch and schedule choices of one layout. */
static void vary_batching(search_t *s, px_job_config_t c)
{
    static const int sizes[] = {1, 2, 4, 8};
    const int per = c.batch / c.layout.dp; /* a replica's sequences */
    for (int i = 0; i <= 4; i++) {
        int b = i < 4 ? sizes[i] : per;
        if (b > per || per % b || (i == 4 && b <= 8))
            continue;
        if (c.layout.pp == 1) {
            c.grad_accum = per / b;
            c.micro_batches = 1;
            consider(s, &c);
            continue;
        }
        c.grad_accum = 1;
        c.micro_batches = per / b;
        for (int k = 0; k < PX_PIPE_NKINDS; k++) {
            if (s->eng && !(s->eng->schedules & 1u << k))
                continue;
            c.schedule = k;
            if (k != PX_PIPE_INTERLEAVED) {
                c.virtual_stages = 1;
                consider(s, &c);
                continue;
            }
            for (int v = 2; v <= 4; v += 2) {
                c.virtual_stages = v;
                consider(s, &c);
            }
        }
    }
}

/* Every layout of base's model and batch over cl's devices into s (the
 * s->keep fastest kept). */
static void search_run(search_t *s, const px_job_config_t *base)
{
    const px_cluster_t *cl = s->cl;
    const px_step_engine_t *eng = s->eng;
    const int world = cl->nodes * cl->per_node;
    const int Vp = px_job_config_padded_vocab(base->vocab);
    const int max_zero = eng ? eng->max_zero : 3, max_cp = eng && !eng->context_parallel ? 1 : 8;
    const int can_sp = !eng || eng->sequence_parallel;

    for (int tp = 1; tp <= cl->per_node && tp <= world; tp++) {
        if (world % tp || base->heads % tp || base->dim % tp || Vp % tp)
            continue;
        for (int cp = 1; cp <= max_cp; cp *= 2) {
            if ((world / tp) % cp || base->seq % (2 * cp) || (cp > 1 && base->seq / cp < 2))
                continue;
            for (int pp = 1; pp <= base->layers && pp <= world / (tp * cp); pp++) {
                if ((world / (tp * cp)) % pp)
                    continue;
                int dp = world / (tp * cp * pp);
                if (base->batch % dp)
                    continue;
                for (int ep = 1; ep <= dp * cp; ep++) {
                    if ((dp * cp) % ep || (ep > 1 && (!base->experts || base->experts % ep)))
                        continue;
                    for (int z = 0; z <= (pp > 1 ? 1 : 3) && z <= max_zero; z++)
                        for (int sp = 0; sp <= (tp > 1 && can_sp); sp++) {
                            px_job_config_t c = *base;
                            c.layout = (px_layout_t){.dp = dp, .tp = tp, .pp = pp, .cp = cp,
                                                     .ep = ep};
                            c.zero = z;
                            c.sequence_parallel = sp;
                            c.stage_layers = NULL;
                            vary_batching(s, c);
                        }
                }
            }
        }
    }
}

int pctl_plan_search_best(const px_job_config_t *base, const px_cluster_t *cl,
                          const px_step_engine_t *eng, int dev, px_job_config_t *best,
                          px_step_time_t *t_p, long *fit_p)
{
    cand_t one;
    search_t s = {.cl = cl, .eng = eng, .dev = dev, .keep = 1, .best = &one};
    search_run(&s, base);
    *fit_p = s.fit;
    if (!s.n)
        return PCTL_EXIT_FAIL;
    *best = *base;
    best->layout = one.cfg.layout;
    best->zero = one.cfg.zero;
    best->sequence_parallel = one.cfg.sequence_parallel;
    best->grad_accum = one.cfg.grad_accum;
    best->micro_batches = one.cfg.micro_batches;
    best->schedule = one.cfg.schedule;
    best->virtual_stages = one.cfg.virtual_stages;
    best->stage_layers = NULL;
    *t_p = one.t;
    return PCTL_EXIT_OK;
}

int pctl_plan_search(const px_job_config_t *base, const px_cluster_t *cl,
                     const px_step_engine_t *eng, int dev, int keep, json_t *root)
{
    const int world = cl->nodes * cl->per_node;
    search_t s = {.cl = cl, .eng = eng, .dev = dev, .keep = keep};
    s.best = calloc((size_t)keep, sizeof(cand_t));
    if (!s.best) {
        fprintf(stderr, "pctl: plan: out of memory\n");
        return PCTL_EXIT_FAIL;
    }
    search_run(&s, base);
    if (root) {
        json_t *arr = json_array();
        for (int i = 0; i < s.n; i++) {
            const px_job_config_t *c = &s.best[i].cfg;
            json_t *o = time_json(&s.best[i].t);
            json_object_set_new(o, "layout",
                                json_pack("{s:i, s:i, s:i, s:i, s:i}", "dp", c->layout.dp, "tp",
                                          c->layout.tp, "pp", c->layout.pp, "cp", c->layout.cp,
                                          "ep", c->layout.ep));
            json_object_set_new(o, "zero", json_integer(c->zero));
            json_object_set_new(o, "sequence_parallel", json_boolean(c->sequence_parallel));
            json_object_set_new(o, "grad_accum", json_integer(c->grad_accum));
            json_object_set_new(o, "micro_batches", json_integer(c->micro_batches));
            json_object_set_new(o, "schedule", json_string(px_pipe_schedule_name(c->schedule)));
            json_object_set_new(o, "virtual_stages", json_integer(c->virtual_stages));
            json_array_append_new(arr, o);
        }
        json_object_set_new(root, "search", arr);
        json_object_set_new(root, "cluster", json_string(cl->name));
        json_object_set_new(root, "devices", json_integer(world));
        json_object_set_new(root, "engine", json_string(eng ? eng->name : "parallax"));
        json_object_set_new(root, "tried", json_integer(s.tried));
        json_object_set_new(root, "valid", json_integer(s.valid));
        json_object_set_new(root, "fit", json_integer(s.fit));
        free(s.best);
        return pctl_json_print(root) ? PCTL_EXIT_FAIL : PCTL_EXIT_OK;
    }
    printf("search: %d devices (%s, %s, %.0f GB), engine %s: %ld layouts tried, %ld valid, %ld "
           "fit memory; the %d fastest by predicted tokens/s:\n",
           world, cl->name, cl->dev.name, cl->dev.mem_bytes / 1e9, eng ? eng->name : "parallax",
           s.tried, s.valid, s.fit, s.n);
    printf("%2s %4s %3s %3s %3s %3s %4s %2s %5s %4s %-14s %9s %10s %6s %8s  %s\n", "#", "dp",
           "tp", "pp", "cp", "ep", "zero", "sp", "accum", "m", "schedule", "step s", "tokens/s",
           "MFU", "mem/rank", "largest costs");
    for (int i = 0; i < s.n; i++) {
        const px_job_config_t *c = &s.best[i].cfg;
        const px_step_time_t *t = &s.best[i].t;
        char sched[32], costs[256];
        if (c->layout.pp == 1)
            snprintf(sched, sizeof(sched), "-");
        else if (c->schedule == PX_PIPE_INTERLEAVED)
            snprintf(sched, sizeof(sched), "interleaved:%d", c->virtual_stages);
        else
            snprintf(sched, sizeof(sched), "%s", px_pipe_schedule_name(c->schedule));
        cost_text(t, costs, sizeof(costs));
        printf("%2d %4d %3d %3d %3d %3d %4d %2d %5d %4d %-14s %9.4g %10.4g %5.1f%% %5.1f GB  %s\n",
               i + 1, c->layout.dp, c->layout.tp, c->layout.pp, c->layout.cp, c->layout.ep,
               c->zero, c->sequence_parallel && c->layout.tp > 1, c->grad_accum,
               c->layout.pp > 1 ? c->micro_batches : 1, sched, t->step_s, t->tokens_per_s,
               100 * t->mfu, t->mem_bytes / 1e9, costs);
    }
    if (!s.n)
        printf("(no layout fits: a larger cluster, devices with more memory, or a smaller "
               "batch or model)\n");
    free(s.best);
    return s.n ? PCTL_EXIT_OK : PCTL_EXIT_FAIL;
}
