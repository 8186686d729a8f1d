/* test_jobplan.c: px_plan_job (planner/jobplan.h), the one recipe from a job
 * config to a rank's plan, on a hand-sized pipeline: 4 layers of dim 8 (2
 * heads, vocab 16 padded to 64, seq 4) on pp 2 with stages of 3 and 1
 * layers, 1F1B over 4 micro-batches of one sequence, ZeRO 1 over dp 2:
 *   - each stage holds its own units only (the first the embedding and 3
 *     layers, the last the tied embedding copy, 1 layer and the head), the
 *     others kept at size 0 (px_pipe_stage_units);
 *   - activations: the stage's table times the slots 1F1B keeps (stage 0:
 *     min(pp - 0, M) = 2, stage 1: 1);
 *   - stage -1 is the stage with the larger total;
 *   - --paper's repricing halves the params bytes (4 -> 2 a parameter);
 *   - IPC scratch only on cuda: dp 2 on one node is 1 communicator;
 *   - a stage out of range is refused. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "jobplan.h"
#include "pipesched.h"

#include "../px_check.h"

static void config(px_job_config_t *c)
{
    px_job_config_defaults(c);
    c->layers = 4;
    c->heads = 2;
    c->dim = 8;
    c->vocab = 16;
    c->seq = 4;
    c->batch = 8;
    c->steps = 1;
    c->layout.dp = 2;
    c->layout.pp = 2;
    c->micro_batches = 4;
    c->stage_layers = "3,1";
    c->zero = 1;
    c->data_path = "unused";
}

int main(void)
{
    px_job_config_t c;
    px_job_plan_t s0, s1, worst, cuda;
    px_plan_gpt_acts_t a;
    char err[256];

    config(&c);
    CHECK(px_job_config_check(&c, 0, err, sizeof(err)) == PX_OK, "config: %s", err);
    CHECK(px_plan_job(&c, PX_PLAN_DEV_CPU, 0, &s0) == PX_OK, "stage 0");
    CHECK(px_plan_job(&c, PX_PLAN_DEV_CPU, 1, &s1) == PX_OK, "stage 1");
    CHECK(s0.units[0] && s0.units[1] && s0.units[3] && !s0.units[4] && !s0.units[5] &&
              s0.layers == 3,
          "stage 0 units %llu %llu %llu %llu %llu %llu", (unsigned long long)s0.units[0],
          (unsigned long long)s0.units[1], (unsigned long long)s0.units[2],
          (unsigned long long)s0.units[3], (unsigned long long)s0.units[4],
          (unsigned long long)s0.units[5]);
    CHECK(s1.units[0] && !s1.units[1] && !s1.units[3] && s1.units[4] && s1.units[5] &&
              s1.layers == 1,
          "stage 1 units");
    CHECK(s0.dense_params == s0.units[0] + 3 * s0.units[1] && s0.state->params == s0.dense_params,
          "stage 0: %llu parameters", (unsigned long long)s0.dense_params);
    /* micro-batch: 8 / (dp 2 x 4 micro-batches) = 1 sequence */
    CHECK(s0.micro_batch == 1 && s0.seq_local == 4 && s0.slots == 2 && s1.slots == 1,
          "micro-batch %d x %d, slots %d / %d", s0.micro_batch, s0.seq_local, s0.slots,
          s1.slots);
    CHECK(px_plan_gpt_activations_dev(3, 2, 8, 64, 1, 4, 1, 0, 1, 0, 0, &a) == PX_OK &&
              s0.act_bytes == 2 * a.bytes && s0.stash_bytes == 0,
          "stage 0 activations %llu, want 2 x %llu", (unsigned long long)s0.act_bytes,
          (unsigned long long)a.bytes);
    CHECK(px_plan_gpt_activations_dev(1, 2, 8, 64, 1, 4, 1, 0, 1, 0, 0, &a) == PX_OK &&
              s1.act_bytes == a.bytes,
          "stage 1 activations %llu, want %llu", (unsigned long long)s1.act_bytes,
          (unsigned long long)a.bytes);
    CHECK(s0.total == px_plan_state_bytes(s0.state) + (double)s0.act_bytes, "stage 0 total");
    CHECK(px_plan_job(&c, PX_PLAN_DEV_CPU, -1, &worst) == PX_OK &&
              worst.total == (s0.total > s1.total ? s0.total : s1.total) &&
              worst.stage == (s0.total > s1.total ? 0 : 1),
          "stage -1: stage %d, %.0f bytes (stages %.0f, %.0f)", worst.stage, worst.total,
          s0.total, s1.total);
    /* the ZeRO paper's accounting: 2-byte params */
    double p4 = s0.state->bytes[PX_MEM_PARAMS];
    px_plan_precision_t mixed;
    px_plan_precision_mixed(&mixed, 12);
    CHECK(px_job_plan_reprice(&s0, &c, &mixed) == PX_OK &&
              s0.state->bytes[PX_MEM_PARAMS] * 2 == p4,
          "repriced params %.0f, fp32 %.0f", s0.state->bytes[PX_MEM_PARAMS], p4);
    /* IPC: cuda only; the dp group of 2 on one node */
    px_plan_job_add_ipc(&s1, &c, NULL, 0, 4096);
    CHECK(s1.ipc_bytes == 0, "IPC on cpu");
    CHECK(px_plan_job(&c, PX_PLAN_DEV_CUDA, 1, &cuda) == PX_OK, "cuda");
    double before = cuda.total;
    px_plan_job_add_ipc(&cuda, &c, NULL, 0, 4096);
    CHECK(cuda.ipc_comms == 1 && cuda.ipc_bytes == 3 * 4096 && cuda.total == before + 3 * 4096,
          "cuda IPC: %d comms, %llu bytes", cuda.ipc_comms, (unsigned long long)cuda.ipc_bytes);
    CHECK(px_plan_job(&c, PX_PLAN_DEV_CPU, 2, &cuda) == PX_ERR_INVALID_ARGUMENT, "stage 2 of 2");
    CHECK(px_plan_dev_parse("cuda:1") == PX_PLAN_DEV_CUDA && px_plan_dev_parse("sim") ==
              PX_PLAN_DEV_SIM && px_plan_dev_parse("") == PX_PLAN_DEV_CPU &&
              px_plan_dev_parse("tpu") == -1,
          "device names");
    px_job_plan_free(&s0);
    px_job_plan_free(&s1);
    px_job_plan_free(&worst);
    px_job_plan_free(&cuda);
    px_job_plan_free(NULL);
    printf(fails ? "FAIL (%d)\n" : "PASS\n", fails);
    return fails ? 1 : 0;
}
