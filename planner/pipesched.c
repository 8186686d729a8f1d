/* pipesched.c: the pipeline schedules as per-stage action lists, their
 * checker and printer (pipesched.h).
 *
 * Invariant of every builder: a stage's list holds, for each micro-batch,
 * exactly one FWD and one BWD, a RECV_ACT right before the FWD (stages >
 * 0), a SEND_ACT right after it (stages < p-1), a RECV_GRAD right before
 * the BWD (stages < p-1) and a SEND_GRAD right after it (stages > 0); the
 * schedules differ only in the order of the forwards and backwards.
 * Pure code; any thread. */
#include "pipesched.h"

#include <stdlib.h>
#include <string.h>

static const char *kind_names[PX_PIPE_NKINDS] = {"gpipe", "1f1b", "zb1"};
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

static void put(px_pipe_list_t *l, int op, int m)
{
    l->a[l->n].op = op;
    l->a[l->n].micro = m;
    l->n++;
}

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

px_status_t px_pipe_schedule_create(int kind, int p, int m, px_pipe_schedule_t **sched_p)
{
    if (kind < 0 || kind >= PX_PIPE_NKINDS || p < 1 || m < 1)
        return PX_ERR_INVALID_ARGUMENT;
    px_pipe_schedule_t *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return PX_ERR_NO_MEMORY;
    sc->kind = kind;
    sc->p = p;
    sc->m = m;
    sc->stage = calloc((size_t)p, sizeof(*sc->stage));
    if (!sc->stage)
        goto err;
    for (int s = 0; s < p; s++) {
        sc->stage[s].a = calloc((size_t)PX_PIPE_NOPS * m, sizeof(px_pipe_action_t));
        if (!sc->stage[s].a)
            goto err;
        if (kind == PX_PIPE_GPIPE)
            build_gpipe(&sc->stage[s], s, p, m);
        else if (kind == PX_PIPE_1F1B)
            build_1f1b(&sc->stage[s], s, p, m);
        else
            build_zb1(&sc->stage[s], s, p, m);
    }
    *sched_p = sc;
    return PX_OK;
err:
    px_pipe_schedule_destroy(sc);
    return PX_ERR_NO_MEMORY;
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

/* A micro-batch holds a slot from its first touch (RECV_ACT, or FWD on
 * stage 0) to its BWD. */
static int takes_slot(const px_pipe_action_t *a, int s)
{
    return a->op == PX_PIPE_RECV_ACT || (s == 0 && a->op == PX_PIPE_FWD);
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

int px_pipe_schedule_slots(const px_pipe_schedule_t *sched, int s)
{
    const px_pipe_list_t *l = &sched->stage[s];
    int cur = 0, max = 0, fr = frees_op(sched);
    for (int i = 0; i < l->n; i++) {
        if (takes_slot(&l->a[i], s) && ++cur > max)
            max = cur;
        if (l->a[i].op == fr)
            cur--;
    }
    return max;
}

/* Per-stage simulation state; flags[op][m] = executed. */
typedef struct sim {
    int pc;
    unsigned char *done; /* [PX_PIPE_NOPS * M] */
    int *slot_of;        /* [M] slot of micro m, -1 none */
    int *occupant;       /* [slots] last micro in the slot, -1 none */
    int *busy;           /* [slots] held now */
    int slots;
} sim_t;

#define DONE(st, op, m) ((st)->done[(size_t)(op) * M + (m)])

px_status_t px_pipe_schedule_check(const px_pipe_schedule_t *sched, char *errbuf, size_t errlen)
{
    const int p = sched->p, M = sched->m, split = px_pipe_schedule_split(sched);
    sim_t *st = calloc((size_t)p, sizeof(*st));
    px_status_t status = PX_OK;
    if (!st)
        return PX_ERR_NO_MEMORY;
    for (int s = 0; s < p; s++) {
        st[s].slots = px_pipe_schedule_slots(sched, s);
        st[s].done = calloc((size_t)PX_PIPE_NOPS * M, 1);
        st[s].slot_of = malloc((size_t)M * sizeof(int));
        st[s].occupant = malloc((size_t)(st[s].slots + 1) * sizeof(int));
        st[s].busy = calloc((size_t)st[s].slots + 1, sizeof(int));
        if (!st[s].done || !st[s].slot_of || !st[s].occupant || !st[s].busy) {
            status = PX_ERR_NO_MEMORY;
            goto out;
        }
        for (int m = 0; m < M; m++)
            st[s].slot_of[m] = -1;
        for (int k = 0; k <= st[s].slots; k++)
            st[s].occupant[k] = -1;
    }
    for (;;) {
        int progressed = 0, finished = 0;
        for (int s = 0; s < p; s++) {
            sim_t *me = &st[s];
            if (me->pc == sched->stage[s].n) {
                finished++;
                continue;
            }
            const px_pipe_action_t *a = &sched->stage[s].a[me->pc];
            int m = a->micro, op = a->op;
            if (m < 0 || m >= M || op < 0 || op >= PX_PIPE_NOPS) {
                status = px_invalid(errbuf, errlen, "stage %d action %d: op %d micro-batch %d out of "
                              "range (0..%d)", s, me->pc, op, m, M - 1);
                goto out;
            }
            if (DONE(me, op, m)) {
                status = px_invalid(errbuf, errlen, "stage %d: %s%d twice", s, px_pipe_op_name(op), m);
                goto out;
            }
            if ((op == PX_PIPE_RECV_ACT || op == PX_PIPE_SEND_GRAD) && s == 0) {
                status = px_invalid(errbuf, errlen, "stage 0: %s%d has no previous stage",
                              px_pipe_op_name(op), m);
                goto out;
            }
            if ((op == PX_PIPE_SEND_ACT || op == PX_PIPE_RECV_GRAD) && s == p - 1) {
                status = px_invalid(errbuf, errlen, "stage %d (last): %s%d has no next stage", s,
                              px_pipe_op_name(op), m);
                goto out;
            }
            /* a slot for m, at its first touch */
            if (takes_slot(a, s)) {
                int k = 0;
                while (k < me->slots && me->busy[k])
                    k++;
                if (k == me->slots) {
                    status = px_invalid(errbuf, errlen, "stage %d: no free slot for micro-batch %d", s, m);
                    goto out;
                }
                int q = me->occupant[k];
                /* the previous occupant's gradient send must have completed */
                if (q >= 0 && s > 0 && !DONE(&st[s - 1], PX_PIPE_RECV_GRAD, q))
                    continue;
                me->busy[k] = 1;
                me->occupant[k] = m;
                me->slot_of[m] = k;
            }
            switch (op) {
            case PX_PIPE_FWD:
                if (s > 0 && !DONE(me, PX_PIPE_RECV_ACT, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d: F%d before its receive", s, m);
                    goto out;
                }
                if (s > 0 && !DONE(&st[s - 1], PX_PIPE_SEND_ACT, m))
                    continue; /* waits for the activation */
                break;
            case PX_PIPE_BWD:
                if (!DONE(me, PX_PIPE_FWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d: B%d before F%d", s, m, m);
                    goto out;
                }
                if (s < p - 1 && !DONE(me, PX_PIPE_RECV_GRAD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d: B%d before its receive", s, m);
                    goto out;
                }
                if (s < p - 1 && !DONE(&st[s + 1], PX_PIPE_SEND_GRAD, m))
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
                    status = px_invalid(errbuf, errlen, "stage %d: >a%d before F%d", s, m, m);
                    goto out;
                }
                break;
            case PX_PIPE_SEND_GRAD:
                if (!DONE(me, PX_PIPE_BWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d: >g%d before B%d", s, m, m);
                    goto out;
                }
                break;
            case PX_PIPE_RECV_GRAD:
                if (me->slot_of[m] < 0 || !DONE(me, PX_PIPE_FWD, m)) {
                    status = px_invalid(errbuf, errlen, "stage %d: <g%d before F%d", s, m, m);
                    goto out;
                }
                break;
            default:
                break;
            }
            DONE(me, op, m) = 1;
            me->pc++;
            progressed = 1;
        }
        if (finished == p)
            break;
        if (!progressed) {
            int n = 0;
            char *b = errbuf;
            size_t left = errlen;
            n = snprintf(b, left, "deadlock (%s p=%d m=%d):", px_pipe_schedule_name(sched->kind),
                         p, M);
            for (int s = 0; s < p && b && n >= 0 && (size_t)n < left; s++) {
                b += n;
                left -= (size_t)n;
                const px_pipe_action_t *a = st[s].pc < sched->stage[s].n
                                                ? &sched->stage[s].a[st[s].pc] : NULL;
                n = a ? snprintf(b, left, " stage %d at %s%d", s, px_pipe_op_name(a->op), a->micro)
                      : snprintf(b, left, " stage %d done", s);
            }
            status = PX_ERR_INVALID_ARGUMENT;
            goto out;
        }
    }
    /* every micro-batch once each way, every message received */
    for (int s = 0; s < p; s++)
        for (int m = 0; m < M; m++) {
            if (split && !DONE(&st[s], PX_PIPE_WGT, m)) {
                status = px_invalid(errbuf, errlen, "stage %d: micro-batch %d lacks its W", s, m);
                goto out;
            }
            if (!DONE(&st[s], PX_PIPE_FWD, m) || !DONE(&st[s], PX_PIPE_BWD, m)) {
                status = px_invalid(errbuf, errlen, "stage %d: micro-batch %d lacks its %s", s, m,
                              DONE(&st[s], PX_PIPE_FWD, m) ? "backward" : "forward");
                goto out;
            }
            if (s < p - 1 && (DONE(&st[s], PX_PIPE_SEND_ACT, m) != DONE(&st[s + 1], PX_PIPE_RECV_ACT, m) ||
                              !DONE(&st[s], PX_PIPE_SEND_ACT, m))) {
                status = px_invalid(errbuf, errlen, "stages %d->%d: activation %d unmatched", s, s + 1, m);
                goto out;
            }
            if (s < p - 1 && (DONE(&st[s + 1], PX_PIPE_SEND_GRAD, m) != DONE(&st[s], PX_PIPE_RECV_GRAD, m) ||
                              !DONE(&st[s], PX_PIPE_RECV_GRAD, m))) {
                status = px_invalid(errbuf, errlen, "stages %d->%d: gradient %d unmatched", s + 1, s, m);
                goto out;
            }
        }
out:
    for (int s = 0; s < p; s++) {
        free(st[s].done);
        free(st[s].slot_of);
        free(st[s].occupant);
        free(st[s].busy);
    }
    free(st);
    return status;
}

void px_pipe_schedule_print(const px_pipe_schedule_t *sched, FILE *out)
{
    fprintf(out, "schedule %s: %d stages, %d micro-batches\n", px_pipe_schedule_name(sched->kind),
            sched->p, sched->m);
    for (int s = 0; s < sched->p; s++) {
        fprintf(out, "stage %d (%d slots):", s, px_pipe_schedule_slots(sched, s));
        for (int i = 0; i < sched->stage[s].n; i++)
            fprintf(out, " %s%d", px_pipe_op_name(sched->stage[s].a[i].op),
                    sched->stage[s].a[i].micro);
        fputc('\n', out);
    }
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
