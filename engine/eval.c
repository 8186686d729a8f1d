/* eval.c: the validation loss (eval.h). Forward passes over fixed batches
 * of the validation file, summed in double on each rank, then one
 * all-reduce of the sum over the data-parallel group. Runs on the rank's
 * training thread, between steps. */
#include "eval.h"

#include "px_log.h"

int px_eval_due(int every, int s, int steps)
{
    return s + 1 == steps || (every > 0 && (s + 1) % every == 0);
}

px_status_t px_eval_loss(const px_eval_t *ev, float *loss_p)
{
    px_status_t status;
    double sum = 0.0;
    const int per_piece = ev->batch / ev->accum; /* sequences of one piece, all dp ranks */

    for (int k = 0; k < ev->batches; k++) {
        for (int a = 0; a < ev->accum; a++) {
            float l = 0.0f;
            int first = a * per_piece + ev->dp_rank * ev->Bm;
            px_data_batch(ev->val, ev->seed, k, first, ev->Bm, ev->T, ev->inputs, ev->targets);
            status = px_gpt_forward_ctx(ev->gpt, ev->ctx, ev->inputs, ev->targets, &l);
            if (status == PX_OK)
                status = px_gpt_forward_end(ev->gpt);
            if (status != PX_OK) {
                px_error("eval: validation batch %d: forward failed: %s", k,
                         px_status_str(status));
                return status;
            }
            sum += l; /* the mean over this piece's Bm x T tokens */
        }
    }
    if (ev->dp > 1) {
        status = px_allreduce(ev->dp_comm, &sum, &sum, 1, PX_FLOAT64, PX_SUM, -1);
        if (status != PX_OK) {
            px_error("eval: the validation loss all-reduce failed: %s", px_status_str(status));
            return status;
        }
    }
    /* every piece holds the same number of tokens: the mean of the means */
    *loss_p = (float)(sum / ((double)ev->batches * ev->accum * ev->dp));
    return PX_OK;
}
