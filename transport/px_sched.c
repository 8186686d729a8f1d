/* px_sched.c: collective schedules, as libNBC compiles them (Hoefler,
 * Lumsdaine & Rehm, "Implementation and performance analysis of
 * non-blocking collective operations for MPI", SC07).
 *
 * A schedule is a list of actions run in order: sends and receives are
 * posted and not waited for; a WAIT action (and the end of the schedule)
 * holds until every message the request posted so far is done; copies,
 * reductions and the AVG division run when reached. So a round is "post
 * these messages, WAIT, then combine what arrived". px__sched_advance never
 * blocks: it returns PX_INPROGRESS at a WAIT whose messages are not done,
 * and the next progress call resumes there.
 *
 * Runs on the thread using the communicator. */
#include "px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_reduce.h"

px_status_t px__sched_add(px__sched_t *s, int kind, int peer, unsigned unit, void *dst,
                          const void *src, uint64_t n, int swap)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        px__act_t *a = realloc(s->acts, cap * sizeof(*a));
        if (!a)
            return PX_ERR_NO_MEMORY;
        s->acts = a;
        s->cap = cap;
    }
    s->acts[s->n++] = (px__act_t){kind, peer, unit, swap, dst, src, n};
    return PX_OK;
}

void px__sched_free(px__sched_t *s)
{
    free(s->acts);
    memset(s, 0, sizeof(*s));
}

/* Every data op of `req` done (header messages aside)? Reaps them; error of
 * the first failed one. */
static px_status_t round_done(px_request_t *req, int *done_p)
{
    px_comm_t *comm = req->comm;

    for (px__op_t *o = comm->active; o; o = o->next) {
        if (o->owner != req || o->hdr)
            continue;
        if (!o->done) {
            *done_p = 0;
            return PX_OK;
        }
        {
            px_status_t status = o->inl ? px__inline_check(req, o) : px__op_status(comm, o);
            if (status != PX_OK)
                return status;
        }
    }
    for (px__op_t *o = comm->active, *next; o; o = next) {
        next = o->next;
        if (o->owner == req && !o->hdr)
            px__op_reap(comm, o);
    }
    *done_p = 1;
    return PX_OK;
}

px_status_t px__sched_advance(px_request_t *req, int *progressed_p)
{
    px__sched_t *s = &req->sched;
    px_status_t status;

    for (;;) {
        const px__act_t *a;

        if (s->waiting) {
            int done;
            status = round_done(req, &done);
            if (status != PX_OK)
                return status;
            if (!done)
                return PX_INPROGRESS;
            s->waiting = 0;
            *progressed_p = 1;
        }
        if (s->pc == s->n) {
            int done;
            status = round_done(req, &done);
            if (status != PX_OK)
                return status;
            return done ? PX_OK : PX_INPROGRESS;
        }
        a = &s->acts[s->pc++];
        *progressed_p = 1;
        switch (a->kind) {
        case PX__ACT_SEND:
            status = px__req_send(req, a->peer, px__req_tag(req, req->comm->rank, PX__PHASE_SCHED,
                                                            a->unit),
                                  a->src, (size_t)a->n, NULL);
            if (status != PX_OK)
                return status;
            break;
        case PX__ACT_RECV:
            status = px__req_recv(req, a->peer, px__req_tag(req, a->peer, PX__PHASE_SCHED, a->unit),
                                  a->dst, (size_t)a->n, NULL);
            if (status != PX_OK)
                return status;
            break;
        case PX__ACT_HSEND: {
            char *m = a->dst;
            px__inline_header(req, (px__hdr_t *)m);
            if (a->n)
                memcpy(m + sizeof(px__hdr_t), a->src, (size_t)a->n);
            req->sent_to[a->peer] = 1;
            status = px__req_send(req, a->peer, px__req_tag(req, req->comm->rank, PX__PHASE_HDR, 0),
                                  m, sizeof(px__hdr_t) + (size_t)a->n, NULL);
            if (status != PX_OK)
                return status;
            break;
        }
        case PX__ACT_HRECV: {
            px__op_t *op;
            /* room for the longest header-in-data message, so that a peer
             * with another count is read and named, not truncated */
            status = px__req_recv(req, a->peer, px__req_tag(req, a->peer, PX__PHASE_HDR, 0), a->dst,
                                  sizeof(px__hdr_t) + PX__INLINE_MAX_BYTES, &op);
            if (status != PX_OK)
                return status;
            op->inl = 1;
            op->buf = a->dst;
            break;
        }
        case PX__ACT_WAIT:
            s->waiting = 1;
            break;
        case PX__ACT_COPY:
            if (a->n && a->dst != a->src)
                memmove(a->dst, a->src, (size_t)a->n);
            break;
        case PX__ACT_REDUCE:
            if (a->swap)
                px_reduce_apply((int)req->dtype, (int)req->op, a->dst, a->src, a->dst, (size_t)a->n);
            else
                px_reduce_apply((int)req->dtype, (int)req->op, a->dst, a->dst, a->src, (size_t)a->n);
            break;
        case PX__ACT_AVG:
            if (req->op == PX_AVG)
                px_reduce_avg_finish((int)req->dtype, a->dst, (size_t)a->n, req->comm->size);
            break;
        case PX__ACT_DEV_COPY:
            if (a->n && a->dst != a->src)
                px__dev_ops()->mem_copy(a->dst, a->src, (size_t)a->n);
            break;
        case PX__ACT_DEV_REDUCE:
            status = a->swap ? px__dev_ops()->reduce(a->dst, a->dst, a->src, (size_t)a->n,
                                                     (int)req->dtype, (int)req->op)
                             : px__dev_ops()->reduce(a->dst, a->src, a->dst, (size_t)a->n,
                                                     (int)req->dtype, (int)req->op);
            if (status != PX_OK)
                return px__comm_set_error(req->comm, status, "%s #%u: device reduction of "
                                          "%llu elements failed", px__coll_kind_name(req->kind),
                                          req->seq, (unsigned long long)a->n);
            break;
        case PX__ACT_DEV_AVG:
            if (req->op == PX_AVG)
                px__dev_ops()->reduce_avg_finish(a->dst, (size_t)a->n, (int)req->dtype,
                                                 req->comm->size);
            break;
        case PX__ACT_DEV_SYNC:
            px__dev_ops()->synchronize();
            break;
        case PX__ACT_DEV_RECORD:
        case PX__ACT_DEV_WAITEV:
            status = a->kind == PX__ACT_DEV_RECORD ? px__dev_ops()->event_record(a->dst)
                                                   : px__dev_ops()->stream_wait_event((void *)a->src);
            if (status != PX_OK)
                return px__comm_set_error(req->comm, status, "%s #%u: device event %s failed",
                                          px__coll_kind_name(req->kind), req->seq,
                                          a->kind == PX__ACT_DEV_RECORD ? "record" : "wait");
            break;
        case PX__ACT_DEV_REDUCE_N: {
            const void *const *srcs = a->src;
            status = px__dev_ops()->reduce_multi(a->dst, (void *)srcs[a->peer], srcs, a->peer,
                                                 (size_t)a->n, (int)req->dtype, (int)req->op);
            if (status != PX_OK)
                return px__comm_set_error(req->comm, status, "%s #%u: device reduction of %d "
                                          "sources, %llu elements failed",
                                          px__coll_kind_name(req->kind), req->seq, a->peer,
                                          (unsigned long long)a->n);
            break;
        }
        default:
            return PX_ERR_INTERNAL;
        }
    }
}
