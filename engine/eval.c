/* eval.c: the validation loss (eval.h). Forward passes of the runner
 * over fixed batches of the validation file, summed in double on each
 * rank, then all-reduces of the sum: over the pipeline group (only the
 * last stage holds losses)
 * and over the data-parallel group (dp x cp with context parallelism).
 * Runs on the rank's training thread, between steps. */
#include "eval.h"

#include "px_log.h"

int px_eval_due(int every, int s, int steps)
{
    return s + 1 == steps || (every > 0 && (s + 1) % every == 0);
}

/* Adapts the pipeline's loader (micro-batch m of the current round) to the
 * evaluation's (batch k, piece `round`, micro-batch m). */
typedef struct eval_pipe_arg {
    const px_eval_t *ev;
    int k, round;
} eval_pipe_arg_t;

static void eval_pipe_load(void *arg, int m, int32_t *inputs, int32_t *targets)
{
    const eval_pipe_arg_t *pa = arg;
    pa->ev->load(pa->ev->load_arg, pa->k, pa->round, m, inputs, targets);
}

static px_status_t sum_over(px_comm_t *comm, double *sum, const char *what)
{
    if (!comm || px_comm_size(comm) < 2)
        return PX_OK;
    px_status_t status = px_allreduce(comm, sum, sum, 1, PX_FLOAT64, PX_SUM, -1);
    if (status != PX_OK)
        px_error("eval: the validation loss all-reduce over the %s group failed: %s", what,
                 px_status_str(status));
    return status;
}

px_status_t px_eval_loss(const px_eval_t *ev, float *loss_p)
{
    px_status_t status;
    double sum = 0.0;

    for (int k = 0; k < ev->batches; k++) {
        for (int a = 0; a < ev->accum; a++) {
            /* M micro-batches through the stages, forward only */
            float l = 0.0f;
            eval_pipe_arg_t pa = {.ev = ev, .k = k, .round = a};
            status = px_pipe_eval_round(ev->pipe, eval_pipe_load, &pa, &l);
            if (status != PX_OK) {
                px_error("eval: validation batch %d: forward failed: %s", k,
                         px_status_str(status));
                return status;
            }
            /* the mean over this piece's Bm x Tl tokens (the sum of M such
             * means on the last stage; 0 on the other stages); the MoE
             * load-balancing loss is a training regulariser, not part of
             * the language-model loss, and is left out */
            sum += l;
        }
    }
    PX_CHECK(sum_over(ev->dp_comm, &sum, "data-parallel"));
    PX_CHECK(sum_over(ev->pp_comm, &sum, "pipeline"));
    /* every piece holds the same number of tokens: the mean of the means */
    *loss_p = (float)(sum / ((double)ev->batches * ev->accum * ev->M * ev->dp * ev->cp));
    return PX_OK;
}
