/* pipesched.c: the pipeline schedules as per-stage action lists, their
 * checker and printer (pipesched.h).
 *
 * Invariant of every builder: a stage's list holds, for each micro-batch
 * and chunk, exactly one FWD and one BWD, a RECV_ACT right before the FWD
 * (virtual stages > 0), a SEND_ACT right after it (virtual stages < pv-1),
 * a RECV_GRAD right before the BWD (interleaved: right after the
 * SEND_ACT) (virtual stages < pv-1) and a SEND_GRAD right after the BWD
 * (virtual stages > 0); the schedules differ only in the order of the
 * forwards and backwards. With v = 1 the virtual stage is the stage.
 * Pure code; any thread. */
#include "pipesched.h"

#include <stdlib.h>
#include <string.h>

static const char *kind_names[PX_PIPE_NKINDS] = {"gpipe", "1f1b", "zb1", "interleaved"};
static const char *op_names[PX_PIPE_NOPS] = {"F", "B", ">a", "<a", ">g", "<g", "W"};

int px_pipe_schedule_parse(const char *name)
{
    for (int k = 0; name && k < PX_PIPE_NKINDS; k++)
        if (!strcmp(name, kind_names[k]))
            return k;
    return -1;
}

const char *px_pipe_schedule_name(int kind)
{
    return kind >= 0 && kind < PX_PIPE_NKINDS ? kind_names[kind] : "?";
}

const char *px_pipe_op_name(int op) { return op >= 0 && op < PX_PIPE_NOPS ? op_names[op] : "?"; }

static void put_c(px_pipe_list_t *l, int op, int m, int c)
{
    l->a[l->n].op = op;
    l->a[l->n].micro = m;
    l->a[l->n].chunk = c;
    l->n++;
}

static void put(px_pipe_list_t *l, int op, int m) { put_c(l, op, m, 0); }

static void fwd(px_pipe_list_t *l, int s, int p, int m)
{
    if (s > 0)
        put(l, PX_PIPE_RECV_ACT, m);
    put(l, PX_PIPE_FWD, m);
    if (s < p - 1)
        put(l, PX_PIPE_SEND_ACT, m);
}

static void bwd(px_pipe_list_t *l, int s, int p, int m)
{
    if (s < p - 1)
        put(l, PX_PIPE_RECV_GRAD, m);
    put(l, PX_PIPE_BWD, m);
    if (s > 0)
        put(l, PX_PIPE_SEND_GRAD, m);
}

/* GPipe (Huang et al. 2019): every forward, then every backward. */
static void build_gpipe(px_pipe_list_t *l, int s, int p, int M)
{
    for (int m = 0; m < M; m++)
        fwd(l, s, p, m);
    for (int m = 0; m < M; m++)
        bwd(l, s, p, m);
}

/* 1F1B (Narayanan et al. 2021): warm-up forwards, one forward one
 * backward, cool-down backwards. */
static void build_1f1b(px_pipe_list_t *l, int s, int p, int M)
{
    int warm = p - s - 1 < M ? p - s - 1 : M;
    for (int m = 0; m < warm; m++)
        fwd(l, s, p, m);
    for (int i = 0; i < M - warm; i++) {
        fwd(l, s, p, warm + i);
        bwd(l, s, p, i);
    }
    for (int m = M - warm; m < M; m++)
        bwd(l, s, p, m);
}

/* ZB-H1 (Qi et al. 2024): 1F1B's order of F and B (the input pass, whose
 * gradient goes on at once); stage s keeps up to s weight passes pending,
 * running the oldest whenever more are, and the rest at the end: the last
 * stages' B passes come sooner, so the chain of B passes back to stage 0
 * no longer waits for W passes, and the deferred W passes fill the
 * cool-down bubble. In flight per stage: at most p micro-batches (1F1B's
 * stage 0). With F = B = W the bubble is (p-1)(F+B-W) = (p-1) F, a third
 * of 1F1B's (p-1)(F+B+W) (the paper's ZB-H1). */
static void build_zb1(px_pipe_list_t *l, int s, int p, int M)
{
    int warm = p - s - 1 < M ? p - s - 1 : M, defer = s;
    int head = 0, tail = 0; /* pending W: micro-batches [head, tail) */
    for (int m = 0; m < warm; m++)
        fwd(l, s, p, m);
    for (int i = 0; i < M - warm; i++) {
        fwd(l, s, p, warm + i);
        bwd(l, s, p, i);
        if (++tail - head > defer)
            put(l, PX_PIPE_WGT, head++);
    }
    for (int m = M - warm; m < M; m++) {
        bwd(l, s, p, m);
        if (++tail - head > defer)
            put(l, PX_PIPE_WGT, head++);
    }
    while (head < tail)
        put(l, PX_PIPE_WGT, head++);
}

/* Interleaved 1F1B, one (micro-batch, chunk) of the forward (bw = 0) or
 * backward (bw = 1) order: step k of the M*V of a rank. Micro-batches go
 * in groups of p (the last one smaller when p does not divide M); a group
 * runs through every chunk in turn (Megatron-LM's get_model_chunk_id),
 * the backward through the chunks in reverse. */
static void interleaved_step(int p, int M, int V, int k, int bw, int *m_p, int *c_p)
{
    int g = k / (p * V), q = M - g * p < p ? M - g * p : p, in = k - g * p * V;
    *m_p = g * p + in % q;
    *c_p = bw ? V - 1 - in / q : in / q;
}

/* A forward of (m, c) on rank s: its activation comes from virtual stage
 * j-1 and goes on to j+1, whose gradient receive is posted at once. */
static void fwd_v(px_pipe_list_t *l, int s, int p, int V, int m, int c)
{
    int j = c * p + s;
    if (j > 0)
        put_c(l, PX_PIPE_RECV_ACT, m, c);
    put_c(l, PX_PIPE_FWD, m, c);
    if (j < p * V - 1) {
        put_c(l, PX_PIPE_SEND_ACT, m, c);
        put_c(l, PX_PIPE_RECV_GRAD, m, c);
    }
}

static void bwd_v(px_pipe_list_t *l, int s, int p, int m, int c)
{
    put_c(l, PX_PIPE_BWD, m, c);
    if (c * p + s > 0)
        put_c(l, PX_PIPE_SEND_GRAD, m, c);
}

/* Interleaved 1F1B (Narayanan et al. 2021, 2.2.2): warm-up
 * (p-s-1)*2 + (V-1)*p forwards, then one forward one backward, then the
 * remaining backwards (Megatron-LM's num_warmup_microbatches). */
static void build_interleaved(px_pipe_list_t *l, int s, int p, int M, int V)
{
    int total = M * V, warm = (p - s - 1) * 2 + (V - 1) * p, m, c;
    if (warm > total)
        warm = total;
    for (int k = 0; k < warm; k++) {
        interleaved_step(p, M, V, k, 0, &m, &c);
        fwd_v(l, s, p, V, m, c);
    }
    for (int k = 0; k < total - warm; k++) {
        interleaved_step(p, M, V, k + warm, 0, &m, &c);
        fwd_v(l, s, p, V, m, c);
        interleaved_step(p, M, V, k, 1, &m, &c);
        bwd_v(l, s, p, m, c);
    }
    for (int k = total - warm; k < total; k++) {
        interleaved_step(p, M, V, k, 1, &m, &c);
        bwd_v(l, s, p, m, c);
    }
}

px_status_t px_pipe_schedule_create(int kind, int p, int m, px_pipe_schedule_t **sched_p)
{
    return px_pipe_schedule_create_v(kind, p, m, 1, sched_p);
}

px_status_t px_pipe_schedule_create_v(int kind, int p, int m, int v, px_pipe_schedule_t **sched_p)
{
    if (kind < 0 || kind >= PX_PIPE_NKINDS || p < 1 || m < 1 || v < 1 ||
        (kind == PX_PIPE_INTERLEAVED) != (v > 1) || (kind == PX_PIPE_INTERLEAVED && m % p))
        return PX_ERR_INVALID_ARGUMENT;
    px_pipe_schedule_t *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return PX_ERR_NO_MEMORY;
    sc->kind = kind;
    sc->p = p;
    sc->m = m;
    sc->v = v;
    sc->stage = calloc((size_t)p, sizeof(*sc->stage));
    if (!sc->stage)
        goto err;
    for (int s = 0; s < p; s++) {
        sc->stage[s].a = calloc((size_t)PX_PIPE_NOPS * m * v, sizeof(px_pipe_action_t));
        if (!sc->stage[s].a)
            goto err;
        if (kind == PX_PIPE_GPIPE)
            build_gpipe(&sc->stage[s], s, p, m);
        else if (kind == PX_PIPE_1F1B)
            build_1f1b(&sc->stage[s], s, p, m);
        else if (kind == PX_PIPE_ZB1)
            build_zb1(&sc->stage[s], s, p, m);
        else
            build_interleaved(&sc->stage[s], s, p, m, v);
    }
    *sched_p = sc;
    return PX_OK;
err:
    px_pipe_schedule_destroy(sc);
    return PX_ERR_NO_MEMORY;
}

px_status_t px_pipe_schedule_create_single(int m, px_pipe_schedule_t **sched_p)
{
    return px_pipe_schedule_create_v(PX_PIPE_1F1B, 1, m, 1, sched_p);
}

void px_pipe_schedule_destroy(px_pipe_schedule_t *sched)
{
    if (!sched)
        return;
    for (int s = 0; sched->stage && s < sched->p; s++)
        free(sched->stage[s].a);
    free(sched->stage);
    free(sched);
}

int px_pipe_virtual_stage(const px_pipe_schedule_t *sched, int s, int c)
{
    return c * sched->p + s;
}

/* A micro-batch holds a slot of its chunk from its first touch (RECV_ACT,
 * or FWD on virtual stage 0) to its BWD (split schedules: its W). */
static int takes_slot(const px_pipe_schedule_t *sched, const px_pipe_action_t *a, int s)
{
    return a->op == PX_PIPE_RECV_ACT ||
           (px_pipe_virtual_stage(sched, s, a->chunk) == 0 && a->op == PX_PIPE_FWD);
}

int px_pipe_schedule_split(const px_pipe_schedule_t *sched)
{
    return sched->kind == PX_PIPE_ZB1;
}

/* The action that frees a micro-batch's slot. */
static int frees_op(const px_pipe_schedule_t *sched)
{
    return px_pipe_schedule_split(sched) ? PX_PIPE_WGT : PX_PIPE_BWD;
}

int px_pipe_schedule_chunk_slots(const px_pipe_schedule_t *sched, int s, int c)
{
    const px_pipe_list_t *l = &sched->stage[s];
    int cur = 0, max = 0, fr = frees_op(sched);
    for (int i = 0; i < l->n; i++) {
        if (l->a[i].chunk != c)
            continue;
        if (takes_slot(sched, &l->a[i], s) && ++cur > max)
            max = cur;
        if (l->a[i].op == fr)
            cur--;
    }
    return max;
}

int px_pipe_schedule_slots(const px_pipe_schedule_t *sched, int s)
{
    int sum = 0;
    for (int c = 0; c < sched->v; c++)
        sum += px_pipe_schedule_chunk_slots(sched, s, c);
    return sum;
}

/* Per-(stage, chunk) simulation state; done[op][m] = executed. */
typedef struct sim {
    unsigned char *done; /* [PX_PIPE_NOPS * M] */
    int *slot_of;        /* [M] slot of micro m, -1 none */
    int *occupant;       /* [slots + 1] last micro in the slot, -1 none */
    int *busy;           /* [slots + 1] held now */
    int slots;
} sim_t;

#define DONE(st, op, m) ((st)->done[(size_t)(op) * M + (m)])

px_status_t px_pipe_schedule_check(const px_pipe_schedule_t *sched, char *errbuf, size_t errlen)
{
    const int p = sched->p, M = sched->m, V = sched->v, J = p * V;
    const int split = px_pipe_schedule_split(sched);
    /* st[j]: virtual stage j = chunk j / p of stage j % p */
    sim_t *st = calloc((size_t)J, sizeof(*st));
    int *pc = calloc((size_t)p, sizeof(int));
    px_status_t status = PX_OK;
    if (!st || !pc) {
        status = PX_ERR_NO_MEMORY;
        goto out;
    }
    for (int j = 0; j < J; j++) {
        st[j].slots = px_pipe_schedule_chunk_slots(sched, j % p, j / p);
        st[j].done = calloc((size_t)PX_PIPE_NOPS * M, 1);
        st[j].slot_of = malloc((size_t)M * sizeof(int));
        st[j].occupant = malloc((size_t)(st[j].slots + 1) * sizeof(int));
        st[j].busy = calloc((size_t)st[j].slots + 1, sizeof(int));
        if (!st[j].done || !st[j].slot_of || !st[j].occupant || !st[j].busy) {
            status = PX_ERR_NO_MEMORY;
            goto out;
        }
        for (int m = 0; m < M; m++)
            st[j].slot_of[m] = -1;
        for (int k = 0; k <= st[j].slots; k++)
            st[j].occupant[k] = -1;
    }
    for (;;) {
        int progressed = 0, finished = 0;
        for (int s = 0; s < p; s++) {
            if (pc[s] == sched->stage[s].n) {
                finished++;
                continue;
            }
            const px_pipe_action_t *a = &sched->stage[s].a[pc[s]];
            int m = a->micro, op = a->op, c = a->chunk;
            if (m < 0 || m >= M || op < 0 || op >= PX_PIPE_NOPS || c < 0 || c >= V) {
                status = px_invalid(errbuf, errlen, "stage %d action %d: op %d micro-batch %d "
                                    "chunk %d out of range (0..%d, 0..%d)", s, pc[s], op, m, c,
                                    M - 1, V - 1);
                goto out;
            }
            const int j = c * p + s;
            sim_t *me = &st[j], *prev = j > 0 ? &st[j - 1] : NULL,
                  *next = j < J - 1 ? &st[j + 1] : NULL;
            if (DONE(me, op, m)) {
                status = px_invalid(errbuf, errlen, "stage %d chunk %d: %s%d twice", s, c,
                                    px_pipe_op_name(op), m);
                goto out;
            }
            if ((op == PX_PIPE_RECV_ACT || op == PX_PIPE_SEND_GRAD) && !prev) {
                status = px_invalid(errbuf, errlen, "stage %d chunk %d: %s%d has no previous "
                                    "stage", s, c, px_pipe_op_name(op), m);
                goto out;
            }
            if ((op == PX_PIPE_SEND_ACT || op == PX_PIPE_RECV_GRAD) && !next) {
                status = px_invalid(errbuf, errlen, "stage %d chunk %d (last): %s%d has no next "
                                    "stage", s, c, px_pipe_op_name(op), m);
                goto out;
            }
            /* a slot for m, at its first touch */
            if (takes_slot(sched, a, s)) {
                int k = 0;
                while (k < me->slots && me->busy[k])
                    k++;
                if (k == me->slots) {
                    status = px_invalid(errbuf, errlen, "stage %d chunk %d: no free slot for "
                                        "micro-batch %d", s, c, m);
                    goto out;
                }
                int q = me->occupant[k];
                /* the previous occupant's sends must have completed: their
                 * receives posted on the neighbours */
                if (q >= 0 && prev && !DONE(prev, PX_PIPE_RECV_GRAD, q))
                    continue;
                if (q >= 0 && next && !DONE(next, PX_PIPE_RECV_ACT, q))
                    continue;
                me->busy[k] = 1;
                me->occupant[k] = m;
                me->slot_of[m] = k;
            }
            switch (op) {
            case PX_PIPE_FWD:
                if (prev && !DONE(me, PX_PIPE_RECV_ACT, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d chunk %d: F%d before its "
                                        "receive", s, c, m);
                    goto out;
                }
                if (prev && !DONE(prev, PX_PIPE_SEND_ACT, m))
                    continue; /* waits for the activation */
                break;
            case PX_PIPE_BWD:
                if (!DONE(me, PX_PIPE_FWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d chunk %d: B%d before F%d", s, c,
                                        m, m);
                    goto out;
                }
                if (next && !DONE(me, PX_PIPE_RECV_GRAD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d chunk %d: B%d before its "
                                        "receive", s, c, m);
                    goto out;
                }
                if (next && !DONE(next, PX_PIPE_SEND_GRAD, m))
                    continue; /* waits for the gradient */
                if (!split)
                    me->busy[me->slot_of[m]] = 0;
                break;
            case PX_PIPE_WGT:
                if (!split || !DONE(me, PX_PIPE_BWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d: W%d %s", s, m,
                                        split ? "before B" : "in a schedule without split backward");
                    goto out;
                }
                me->busy[me->slot_of[m]] = 0;
                break;
            case PX_PIPE_SEND_ACT:
                if (!DONE(me, PX_PIPE_FWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d chunk %d: >a%d before F%d", s,
                                        c, m, m);
                    goto out;
                }
                break;
            case PX_PIPE_SEND_GRAD:
                if (!DONE(me, PX_PIPE_BWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d chunk %d: >g%d before B%d", s,
                                        c, m, m);
                    goto out;
                }
                break;
            case PX_PIPE_RECV_GRAD:
                /* the gradient lands in the slot's buffer: m must hold one */
                if (me->slot_of[m] < 0 || !DONE(me, PX_PIPE_FWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d chunk %d: <g%d before F%d", s,
                                        c, m, m);
                    goto out;
                }
                break;
            default:
                break;
            }
            DONE(me, op, m) = 1;
            pc[s]++;
            progressed = 1;
        }
        if (finished == p)
            break;
        if (!progressed) {
            int n = 0;
            char *b = errbuf;
            size_t left = errlen;
            n = snprintf(b, left, "deadlock (%s p=%d m=%d v=%d):",
                         px_pipe_schedule_name(sched->kind), p, M, V);
            for (int s = 0; s < p && b && n >= 0 && (size_t)n < left; s++) {
                b += n;
                left -= (size_t)n;
                const px_pipe_action_t *a = pc[s] < sched->stage[s].n
                                                ? &sched->stage[s].a[pc[s]] : NULL;
                n = a ? snprintf(b, left, " stage %d at %s%d.%d", s, px_pipe_op_name(a->op),
                                 a->micro, a->chunk)
                      : snprintf(b, left, " stage %d done", s);
            }
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
    }
    /* every micro-batch once each way through every chunk, every message
     * received */
    for (int j = 0; j < J; j++)
        for (int m = 0; m < M; m++) {
            const int s = j % p, c = j / p;
            if (split && !DONE(&st[j], PX_PIPE_WGT, m)) {
                status = px_invalid(errbuf, errlen, "stage %d: micro-batch %d lacks its W", s, m);
                goto out;
            }
            if (!DONE(&st[j], PX_PIPE_FWD, m) || !DONE(&st[j], PX_PIPE_BWD, m)) {
                status = px_invalid(errbuf, errlen, "stage %d chunk %d: micro-batch %d lacks its "
                                    "%s", s, c, m, DONE(&st[j], PX_PIPE_FWD, m) ? "backward"
                                                                               : "forward");
                goto out;
            }
            if (j < J - 1 && (DONE(&st[j], PX_PIPE_SEND_ACT, m) != DONE(&st[j + 1], PX_PIPE_RECV_ACT, m) ||
                              !DONE(&st[j], PX_PIPE_SEND_ACT, m))) {
                status = px_invalid(errbuf, errlen, "virtual stages %d->%d: activation %d "
                                    "unmatched", j, j + 1, m);
                goto out;
            }
            if (j < J - 1 && (DONE(&st[j + 1], PX_PIPE_SEND_GRAD, m) != DONE(&st[j], PX_PIPE_RECV_GRAD, m) ||
                              !DONE(&st[j], PX_PIPE_RECV_GRAD, m))) {
                status = px_invalid(errbuf, errlen, "virtual stages %d->%d: gradient %d "
                                    "unmatched", j + 1, j, m);
                goto out;
            }
        }
out:
    for (int j = 0; st && j < J; j++) {
        free(st[j].done);
        free(st[j].slot_of);
        free(st[j].occupant);
        free(st[j].busy);
    }
    free(st);
    free(pc);
    return status;
}

void px_pipe_schedule_print(const px_pipe_schedule_t *sched, FILE *out)
{
    fprintf(out, "schedule %s: %d stages, %d micro-batches", px_pipe_schedule_name(sched->kind),
            sched->p, sched->m);
    if (sched->v > 1)
        fprintf(out, ", %d chunks per stage (Fm.c: micro-batch m through chunk c)", sched->v);
    fputc('\n', out);
    for (int s = 0; s < sched->p; s++) {
        fprintf(out, "stage %d (%d slots):", s, px_pipe_schedule_slots(sched, s));
        for (int i = 0; i < sched->stage[s].n; i++) {
            const px_pipe_action_t *a = &sched->stage[s].a[i];
            if (sched->v > 1)
                fprintf(out, " %s%d.%d", px_pipe_op_name(a->op), a->micro, a->chunk);
            else
                fprintf(out, " %s%d", px_pipe_op_name(a->op), a->micro);
        }
        fputc('\n', out);
    }
}

px_status_t px_pipe_interleaved_check(int layers, int p, int v, int m, char *errbuf,
                                      size_t errlen)
{
    if (v < 2)
        return px_invalid(errbuf, errlen, "schedule interleaved with virtual_stages=%d: it needs "
                          "at least 2 model chunks per stage", v);
    if (p < 2)
        return px_invalid(errbuf, errlen, "schedule interleaved with pp=%d: it needs at least 2 "
                          "pipeline stages", p);
    if (layers % (p * v))
        return px_invalid(errbuf, errlen, "layers=%d is not divisible by pp=%d x "
                          "virtual_stages=%d (interleaved: every chunk the same layers)", layers,
                          p, v);
    if (m % p)
        return px_invalid(errbuf, errlen, "micro_batches=%d is not a multiple of pp=%d "
                          "(interleaved: micro-batches go round the stages in groups of pp)", m,
                          p);
    return PX_OK;
}

px_status_t px_pipe_stage_layers(int layers, int p, const char *spec, int *out, char *errbuf,
                                 size_t errlen)
{
    if (p < 1 || layers < p)
        return px_invalid(errbuf, errlen, "layers=%d is fewer than pp=%d pipeline stages", layers, p);
    if (!spec || !*spec) {
        for (int s = 0; s < p; s++)
            out[s] = layers / p + (s < layers % p);
        return PX_OK;
    }
    const char *c = spec;
    int sum = 0, n = 0;
    while (*c) {
        char *end;
        long v = strtol(c, &end, 10);
        if (end == c || v < 1 || v > layers)
            return px_invalid(errbuf, errlen, "stage_layers='%s': each entry must be a count 1..%d",
                        spec, layers);
        if (n == p)
            return px_invalid(errbuf, errlen, "stage_layers='%s' has more than pp=%d entries", spec, p);
        out[n++] = (int)v;
        sum += (int)v;
        c = end;
        if (*c == ',')
            c++;
        else if (*c)
            return px_invalid(errbuf, errlen, "stage_layers='%s': expected a comma list", spec);
    }
    if (n != p)
        return px_invalid(errbuf, errlen, "stage_layers='%s' has %d entries, pp=%d", spec, n, p);
    if (sum != layers)
        return px_invalid(errbuf, errlen, "stage_layers='%s' sums to %d, layers=%d", spec, sum, layers);
    return PX_OK;
}

void px_pipe_stage_units(int layers, int p, int v, const int *sl, int s, unsigned char *held)
{
    memset(held, 0, (size_t)layers + 2);
    held[0] = s == 0 || s == p - 1;
    held[layers + 1] = s == p - 1;
    for (int c = 0; c < v; c++) {
        int j = c * p + s, l0 = 0;
        for (int i = 0; i < j; i++)
            l0 += sl[i];
        for (int l = l0; l < l0 + sl[j]; l++)
            held[1 + l] = 1;
    }
}
