/* tp.c: tensor-parallel collectives and the vocab-parallel embedding and
 * cross-entropy (tp.h). The math is in the op table (kernels/px_tp_cpu.c);
 * this file orders it around the tensor group's all-reduces and times
 * them. Runs on the training thread. */
#include "tp.h"

#include "px_coll.h"
#include "px_log.h"
#include "px_time.h"

static int alone(px_comm_t *comm) { return !comm || px_comm_size(comm) < 2; }

static px_status_t allreduce(px_comm_t *comm, void *buf, size_t n, px_dtype_t dtype,
                             px_redop_t op, const char *what, px_tp_times_t *times)
{
    double t0 = px_time_mono_s();
    px_status_t status = px_allreduce(comm, buf, buf, n, dtype, op, -1);
    if (times) {
        times->comm_s += px_time_mono_s() - t0;
        times->colls++;
    }
    if (status != PX_OK)
        px_error("tp: all-reduce of %s (%zu elements) failed: %s (%s)", what, n,
                 px_status_str(status), px_comm_last_error(comm));
    return status;
}

px_status_t px_tp_allreduce(px_comm_t *comm, float *buf, size_t n, const char *what,
                            px_tp_times_t *times)
{
    if (alone(comm))
        return PX_OK;
    return allreduce(comm, buf, n, PX_FLOAT32, PX_SUM, what, times);
}

px_status_t px_tp_allgather(px_comm_t *comm, const float *local, float *full, size_t n,
                            const char *what, px_tp_times_t *times)
{
    double t0 = px_time_mono_s();
    px_status_t status = px_allgather(comm, local, full, n, PX_FLOAT32, NULL);
    if (times) {
        times->comm_s += px_time_mono_s() - t0;
        times->colls++;
    }
    if (status != PX_OK)
        px_error("tp: all-gather of %s (%zu elements per rank) failed: %s (%s)", what, n,
                 px_status_str(status), px_comm_last_error(comm));
    return status;
}

px_status_t px_tp_reduce_scatter(px_comm_t *comm, const float *full, float *local, size_t n,
                                 const char *what, px_tp_times_t *times)
{
    double t0 = px_time_mono_s();
    px_status_t status = px_reduce_scatter(comm, full, local, n, PX_FLOAT32, PX_SUM, NULL);
    if (times) {
        times->comm_s += px_time_mono_s() - t0;
        times->colls++;
    }
    if (status != PX_OK)
        px_error("tp: reduce-scatter of %s (%zu elements per rank) failed: %s (%s)", what, n,
                 px_status_str(status), px_comm_last_error(comm));
    return status;
}

/* the start of a nonblocking collective: common bookkeeping */
static px_status_t started(px_status_t status, double t0, px_comm_t *comm, size_t n,
                           const char *what, const char *kind, px_tp_times_t *times,
                           px_tp_pending_t *p, px_request_t *req)
{
    double t1 = px_time_mono_s();
    if (times) {
        times->comm_s += t1 - t0;
        times->colls++;
        times->overlapped++;
    }
    if (status != PX_OK) {
        px_error("tp: %s of %s (%zu elements) failed to start: %s (%s)", kind, what, n,
                 px_status_str(status), px_comm_last_error(comm));
        return status;
    }
    *p = (px_tp_pending_t){.req = req, .comm = comm, .what = what, .n = n, .t_start = t1,
                           .status = PX_OK, .active = 1};
    return PX_OK;
}

px_status_t px_tp_allreduce_start(px_comm_t *comm, float *buf, size_t n, const char *what,
                                  px_tp_times_t *times, px_tp_pending_t *p)
{
    px_request_t *req = NULL;
    if (alone(comm)) {
        *p = (px_tp_pending_t){.active = 1, .what = what};
        return PX_OK;
    }
    double t0 = px_time_mono_s();
    px_status_t status = px_allreduce_start(comm, buf, buf, n, PX_FLOAT32, PX_SUM, NULL, &req);
    return started(status, t0, comm, n, what, "all-reduce", times, p, req);
}

px_status_t px_tp_reduce_scatter_start(px_comm_t *comm, const float *full, float *local,
                                       size_t n, const char *what, px_tp_times_t *times,
                                       px_tp_pending_t *p)
{
    px_request_t *req = NULL;
    double t0 = px_time_mono_s();
    px_status_t status =
        px_reduce_scatter_start(comm, full, local, n, PX_FLOAT32, PX_SUM, NULL, &req);
    return started(status, t0, comm, n, what, "reduce-scatter", times, p, req);
}

px_status_t px_tp_allgather_start(px_comm_t *comm, const float *local, float *full, size_t n,
                                  const char *what, px_tp_times_t *times, px_tp_pending_t *p)
{
    px_request_t *req = NULL;
    double t0 = px_time_mono_s();
    px_status_t status = px_allgather_start(comm, local, full, n, PX_FLOAT32, NULL, &req);
    return started(status, t0, comm, n, what, "all-gather", times, p, req);
}

void px_tp_poke(px_tp_pending_t *p, px_tp_times_t *times)
{
    int done = 0;
    if (!p->active || !p->req)
        return;
    double t0 = px_time_mono_s();
    px_status_t status = px_test(p->req, &done);
    double t1 = px_time_mono_s();
    p->test_s += t1 - t0;
    if (times)
        times->comm_s += t1 - t0;
    if (status != PX_OK || done) {
        p->req = NULL; /* freed by px_test */
        p->t_done = t1;
        p->status = status;
    }
}

px_status_t px_tp_finish(px_tp_pending_t *p, px_tp_times_t *times)
{
    px_status_t status = p->status;
    if (!p->active)
        return PX_OK;
    if (p->req) {
        double t0 = px_time_mono_s();
        status = px_wait(p->req, -1);
        double t1 = px_time_mono_s();
        p->req = NULL;
        if (times) {
            times->comm_s += t1 - t0;
            times->wait_s += t1 - t0;
        }
        p->t_done = t0; /* compute ended here: the rest was waited for */
    }
    if (times && p->comm && p->t_done > p->t_start) {
        double hidden = p->t_done - p->t_start - p->test_s;
        times->hidden_s += hidden > 0 ? hidden : 0;
    }
    if (status != PX_OK)
        px_error("tp: collective on %s (%zu elements) failed: %s (%s)", p->what, p->n,
                 px_status_str(status), p->comm ? px_comm_last_error(p->comm) : "");
    *p = (px_tp_pending_t){0};
    return status;
}

px_status_t px_tp_embed_forward(const px_kernel_ops_t *ops, px_comm_t *comm, float *out,
                                const int32_t *inp, const float *wte, const float *wpe, int B,
                                int T, int C, int v0, int Vl, px_tp_times_t *times)
{
    size_t tc = (size_t)T * C;
    ops->encoder_vp_forward(out, inp, wte, NULL, B, T, C, v0, Vl);
    PX_CHECK(px_tp_allreduce(comm, out, (size_t)B * tc, "the embedding lookup", times));
    for (int b = 0; b < B; b++) /* + wpe[t], once, after the sum */
        ops->residual_forward(out + b * tc, out + b * tc, wpe, tc);
    return PX_OK;
}

px_status_t px_tp_crossentropy_forward(const px_kernel_ops_t *ops, px_comm_t *comm,
                                       float *losses, float *probs, const float *logits,
                                       const int32_t *targets, float *rowmax, double *stats,
                                       int N, int V, int v0, int Vl, px_tp_times_t *times)
{
    ops->crossentropy_vp_max(rowmax, logits, N, Vl, v0, V);
    if (!alone(comm))
        PX_CHECK(allreduce(comm, rowmax, (size_t)N, PX_FLOAT32, PX_MAX, "the logits' row max",
                           times));
    ops->crossentropy_vp_exp(stats, probs, logits, rowmax, targets, N, Vl, v0, V);
    if (!alone(comm))
        PX_CHECK(allreduce(comm, stats, 2 * (size_t)N, PX_FLOAT64, PX_SUM,
                           "the softmax sums and target logits", times));
    ops->crossentropy_vp_finish(losses, probs, stats, rowmax, N, Vl, v0, V);
    return PX_OK;
}

px_status_t px_tp_combine_canonical(px_comm_t *comm, float *dst, size_t n)
{
    if (alone(comm))
        return PX_OK;
    return allreduce(comm, dst, n, PX_FLOAT32, PX_SUM, "the canonical gather", NULL);
}
