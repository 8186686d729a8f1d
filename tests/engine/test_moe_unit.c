/* test_moe_unit.c: unit tests of the mixture-of-experts layer (engine/moe.h)
 * on one rank, through its public calls:
 *   skew      a router biased to experts 0 and 1 (px_moe_set_router_skew)
 *             with capacity factor 1.0: each keeps exactly its capacity
 *             ceil(N K / E F) of the choices, the first tokens in order; a
 *             token whose choices were all dropped gets an output of exactly
 *             0.0 in every channel (the block adds it to the residual, so
 *             the block's output is its residual input); the token counts;
 *   router    the op table's router: ties go to the lower expert index,
 *             top-2 gates sum to 1, the top-1 gate is the probability;
 *   plan      the bytes the expert group (experts.h) and px_moe_create
 *             allocate per memacct category equal
 *             the plan's (plan.h px_plan_moe_activation_bytes, model.h
 *             px_model_moe_rank_params), dropless and with a capacity;
 *   gradcheck dropless, no skew: the backward (input, router, expert
 *             gradients, the load-balancing loss's included) against
 *             central finite differences of sum(out * R) + aux;
 *   experts   the expert group (experts.h) of a stage holding some MoE
 *             layers: its local layers, its bytes, the canonical re-cut
 *             (set then gather) exact with zeros for the layers not held,
 *             the initial values the whole model's;
 *   simwaits  on the simulated device (kernels/px_kernels_sim.h)
 *             the forward of one MoE layer waits for the device once (the
 *             router's choices and probabilities come back as two copies
 *             without a wait, then one synchronize; it was two waiting
 *             copies), and its output is the CPU table's bit for bit.
 * Usage: test_moe_unit CASE | all. Single-threaded. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "experts.h"
#include "memacct.h"
#include "moe.h"
#include "plan.h"
#include "px_kernels.h"
#include "px_kernels_select.h"
#include "px_kernels_sim.h"

#include "../px_check.h"

static float urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* The expert group (experts.h) and its mixture, one rank, every layer;
 * 0 on success. */
static int make_moe(const px_moe_config_t *mc, const px_kernel_ops_t *ops, int N,
                    px_experts_t **ex, px_moe_t **moe)
{
    *moe = NULL;
    if (px_experts_create(mc, ops, NULL, NULL, NULL, 1, 1, NULL, ex) != PX_OK)
        return -1;
    if (px_moe_create(mc, ops, N, NULL, NULL, 1, *ex, moe) != PX_OK) {
        px_experts_destroy(*ex);
        *ex = NULL;
        return -1;
    }
    return 0;
}

static void test_skew(void)
{
    enum { N = 64, C = 16, E = 8, K = 2 };
    px_moe_config_t mc = {.layers = 1, .dim = C, .experts = E, .top_k = K, .moe_every = 1,
                          .capacity_factor = 1.0f, .aux_loss_coef = 0.01f};
    px_moe_t *moe = NULL;
    px_experts_t *ex = NULL;
    float x[N * C], out[N * C];
    uint64_t seed = 7, rec[E], drop[E];
    if (make_moe(&mc, px_kernels_cpu(), N, &ex, &moe) != 0) {
        CHECK(0, "create");
        return;
    }
    px_experts_init(ex, 1);
    px_moe_set_router_skew(moe, 30.0f); /* every token: expert 0 first, 1 second */
    for (int i = 0; i < N * C; i++)
        x[i] = urand(&seed);
    px_moe_begin_step(moe);
    CHECK(px_moe_forward(moe, 0, x, out, N) == PX_OK, "forward");
    px_moe_token_stats(moe, rec, drop);
    int cap = (int)ceil((double)N * K / E * 1.0); /* 16 */
    CHECK(rec[0] == (uint64_t)cap && drop[0] == (uint64_t)(N - cap), "expert 0: %llu kept "
           "%llu dropped, want %d and %d", (unsigned long long)rec[0],
           (unsigned long long)drop[0], cap, N - cap);
    CHECK(rec[1] == (uint64_t)cap && drop[1] == (uint64_t)(N - cap), "expert 1: %llu kept "
           "%llu dropped", (unsigned long long)rec[1], (unsigned long long)drop[1]);
    for (int e = 2; e < E; e++)
        CHECK(rec[e] == 0 && drop[e] == 0, "expert %d got tokens", e);
    int zero_rows = 0, live_rows = 0;
    for (int t = 0; t < N; t++) {
        int z = 1;
        for (int c = 0; c < C; c++)
            z &= out[t * C + c] == 0.0f;
        if (t >= cap) /* both choices dropped: exactly 0 */
            zero_rows += z;
        else
            live_rows += !z;
    }
    CHECK(zero_rows == N - cap, "%d of the %d dropped tokens have a zero output", zero_rows,
           N - cap);
    CHECK(live_rows == cap, "%d of the %d kept tokens have an output", live_rows, cap);
    /* the residual add of the block: x + 0 is x exactly */
    for (int t = cap; t < N; t++)
        for (int c = 0; c < C; c++)
            CHECK(x[t * C + c] + out[t * C + c] == x[t * C + c], "residual changed");
    float dx[N * C];
    CHECK(px_moe_backward(moe, 0, x, out, dx, N) == PX_OK, "backward");
    printf("skew: capacity %d, expert 0 kept %llu dropped %llu, %d dropped tokens with output "
           "exactly 0\n", cap, (unsigned long long)rec[0], (unsigned long long)drop[0],
           zero_rows);
    px_moe_destroy(moe);
    px_experts_destroy(ex);
}

/* sum(out * R) + aux for the current parameters, in double */
static double objective(px_moe_t *moe, const float *x, const float *R, float *out, int N, int C)
{
    px_moe_forward(moe, 0, x, out, N);
    double s = 0.0;
    for (int i = 0; i < N * C; i++)
        s += (double)out[i] * R[i];
    return s + px_moe_aux_loss(moe);
}

static void test_gradcheck(void)
{
    enum { N = 12, C = 8, E = 4, K = 2 };
    px_moe_config_t mc = {.layers = 1, .dim = C, .experts = E, .top_k = K, .moe_every = 1,
                          .dropless = 1, .aux_loss_coef = 0.5f};
    for (int k = 1; k <= 2; k++) {
        mc.top_k = k;
        px_moe_t *moe = NULL;
        px_experts_t *ex = NULL;
        float x[N * C], R[N * C], out[N * C], dx[N * C];
        uint64_t seed = 11;
        if (make_moe(&mc, px_kernels_cpu(), N, &ex, &moe) != 0) {
            CHECK(0, "create");
            return;
        }
        px_experts_init(ex, 3);
        float *P = px_experts_params(ex), *G = px_experts_grads(ex);
        size_t np = (size_t)px_moe_rank_params(&mc, 1);
        for (size_t i = 0; i < np; i++) /* larger weights than the init: visible gradients */
            P[i] = 0.5f * urand(&seed);
        for (int i = 0; i < N * C; i++) {
            x[i] = urand(&seed);
            R[i] = urand(&seed);
        }
        px_moe_begin_step(moe);
        px_experts_zero_grads(ex);
        objective(moe, x, R, out, N, C);
        CHECK(px_moe_backward(moe, 0, x, R, dx, N) == PX_OK, "backward");
        float *g = malloc(np * sizeof(float));
        memcpy(g, G, np * sizeof(float));
        const double eps = 1e-2;
        double worst = 0.0;
        /* the router, expert 1's fcw rows and biases, expert 3's fcprojw */
        size_t probe[] = {0, 5, E * C - 1, E * C + 1 * (8 * C * C + 5 * C) + 3,
                          E * C + 1 * (8 * C * C + 5 * C) + 4 * C * C + 2,
                          E * C + 3 * (8 * C * C + 5 * C) + 4 * C * C + 4 * C + 17,
                          E * C + 3 * (8 * C * C + 5 * C) + 8 * C * C + 4 * C + 1};
        for (size_t q = 0; q < sizeof(probe) / sizeof(probe[0]); q++) {
            size_t i = probe[q];
            float keep = P[i];
            P[i] = keep + (float)eps;
            double lp = objective(moe, x, R, out, N, C);
            P[i] = keep - (float)eps;
            double lm = objective(moe, x, R, out, N, C);
            P[i] = keep;
            double num = (lp - lm) / (2 * eps), err = fabs(num - g[i]) / fmax(fabs(num), 1e-2);
            worst = fmax(worst, err);
            CHECK(err < 2e-2, "top-%d param %zu: analytic %g numeric %g", k, i, g[i], num);
        }
        for (int i = 0; i < N * C; i += 7) {
            float keep = x[i];
            x[i] = keep + (float)eps;
            double lp = objective(moe, x, R, out, N, C);
            x[i] = keep - (float)eps;
            double lm = objective(moe, x, R, out, N, C);
            x[i] = keep;
            double num = (lp - lm) / (2 * eps), err = fabs(num - dx[i]) / fmax(fabs(num), 1e-2);
            worst = fmax(worst, err);
            CHECK(err < 2e-2, "top-%d dx[%d]: analytic %g numeric %g", k, i, dx[i], num);
        }
        printf("gradcheck top-%d: worst relative error %.2e\n", k, worst);
        free(g);
        px_moe_destroy(moe);
        px_experts_destroy(ex);
    }
}

static void test_router(void)
{
    const px_kernel_ops_t *k = px_kernels_cpu();
    /* row 0: experts 1 and 3 tie for first, 0 and 2 for third; row 1: all equal */
    float logits[2 * 4] = {0.5f, 2.0f, 0.5f, 2.0f, 1.0f, 1.0f, 1.0f, 1.0f}, probs[8], w[4];
    int32_t idx[4];
    k->moe_router_forward(probs, idx, w, logits, 2, 4, 2);
    CHECK(idx[0] == 1 && idx[1] == 3 && idx[2] == 0 && idx[3] == 1,
           "ties: choices %d %d / %d %d, want 1 3 / 0 1", idx[0], idx[1], idx[2], idx[3]);
    CHECK(fabsf(w[0] + w[1] - 1.0f) < 1e-6f && w[0] == w[1] && w[2] == 0.5f,
           "top-2 gates %g %g %g", w[0], w[1], w[2]);
    k->moe_router_forward(probs, idx, w, logits, 2, 4, 1);
    CHECK(idx[0] == 1 && idx[1] == 0 && w[0] == probs[1] && w[1] == 0.25f,
           "top-1: choice %d gate %g (prob %g)", idx[0], w[0], probs[1]);
    printf("router: ties to the lower index, gates ok\n");
}

static void test_plan(void)
{
    for (int dl = 0; dl <= 1; dl++) {
        px_moe_config_t mc = {.layers = 3, .dim = 24, .experts = 6, .top_k = 2, .moe_every = 2,
                              .dropless = dl, .capacity_factor = dl ? 1.5f : 0.5f};
        px_mem_stats_t a, b;
        px_moe_t *moe = NULL;
        px_experts_t *ex = NULL;
        px_mem_stats(&a);
        if (make_moe(&mc, px_kernels_cpu(), 40, &ex, &moe) != 0) {
            CHECK(0, "create");
            return;
        }
        px_mem_stats(&b);
        uint64_t acts = b.current[PX_MEM_ACTS] - a.current[PX_MEM_ACTS];
        uint64_t want = px_plan_moe_activation_bytes(px_moe_num_layers(&mc), 40, 1, 6, 2, 24, dl,
                                                     mc.capacity_factor);
        uint64_t np = px_moe_rank_params(&mc, 1);
        CHECK(acts == want, "dropless %d: activations %llu bytes, plan %llu", dl,
               (unsigned long long)acts, (unsigned long long)want);
        CHECK(b.current[PX_MEM_PARAMS] - a.current[PX_MEM_PARAMS] == 4 * np &&
               b.current[PX_MEM_GRADS] - a.current[PX_MEM_GRADS] == 4 * np &&
               b.current[PX_MEM_OPTIM] - a.current[PX_MEM_OPTIM] == 8 * np,
               "state bytes differ from 4/4/8 x %llu", (unsigned long long)np);
        CHECK(np == (uint64_t)px_moe_num_layers(&mc) * (6 * 24 + 6 * (8 * 24 * 24 + 5 * 24)),
               "rank params %llu", (unsigned long long)np);
        printf("plan dropless %d: activations %llu bytes (plan %llu), state 16 x %llu\n", dl,
               (unsigned long long)acts, (unsigned long long)want, (unsigned long long)np);
        px_moe_destroy(moe);
        px_experts_destroy(ex);
    }
}

/* The experts case (see the file comment): a stage holding layers 0 and 2
 * of three MoE layers. */
static void test_experts(void)
{
    px_moe_config_t mc = {.layers = 3, .dim = 8, .experts = 4, .top_k = 2, .moe_every = 1,
                          .dropless = 1};
    const unsigned char held[3] = {1, 0, 1};
    const px_kernel_ops_t *cpu = px_kernels_cpu();
    px_experts_t *ex = NULL, *whole = NULL;
    px_mem_stats_t a, b;
    px_mem_stats(&a);
    if (px_experts_create(&mc, cpu, NULL, NULL, NULL, 1, 1, held, &ex) != PX_OK ||
        px_experts_create(&mc, cpu, NULL, NULL, NULL, 1, 1, NULL, &whole) != PX_OK) {
        CHECK(0, "create");
        px_experts_destroy(ex);
        return;
    }
    px_mem_stats(&b);
    CHECK(px_experts_layers(ex) == 2 && px_experts_local(ex, 0) == 0 &&
              px_experts_local(ex, 1) == -1 && px_experts_local(ex, 2) == 1 &&
              px_experts_local(ex, 3) == -1 && px_experts_layers(whole) == 3,
          "held layers: %d (local of 0, 1, 2: %d %d %d)", px_experts_layers(ex),
          px_experts_local(ex, 0), px_experts_local(ex, 1), px_experts_local(ex, 2));
    /* the stage's and the whole model's parameters: 2 + 3 layers' worth */
    uint64_t per_layer = px_moe_rank_params(&mc, 1) / 3;
    CHECK(b.current[PX_MEM_PARAMS] - a.current[PX_MEM_PARAMS] == 4 * 5 * per_layer,
          "params %llu bytes, want %llu", (unsigned long long)(b.current[PX_MEM_PARAMS] -
                                                              a.current[PX_MEM_PARAMS]),
          (unsigned long long)(4 * 5 * per_layer));
    size_t n = (size_t)px_moe_num_params(&mc), nl = n / 3;
    float *src = malloc(n * sizeof(float)), *dst = malloc(n * sizeof(float));
    float *ref = malloc(n * sizeof(float));
    if (!src || !dst || !ref) {
        CHECK(0, "memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        src[i] = 0.001f * (float)(i + 1);
    /* a re-cut: canonical -> the stage's layers -> canonical; the layer
     * not held comes back as zeros */
    for (int which = 0; which <= 3; which += 2) {
        px_experts_set_canonical(ex, which, src);
        CHECK(px_experts_gather_canonical(ex, which, dst) == PX_OK, "gather %d", which);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += dst[i] != (i / nl == 1 ? 0.0f : src[i]);
        CHECK(bad == 0, "buffer %d: %zu elements differ after set + gather", which, bad);
    }
    CHECK(px_experts_gather_canonical(ex, 4, dst) == PX_ERR_INVALID_ARGUMENT, "buffer 4");
    /* the initial values are the canonical element's, whichever layers a
     * stage holds */
    px_experts_init(ex, 9);
    px_experts_init(whole, 9);
    CHECK(px_experts_gather_canonical(ex, 0, dst) == PX_OK &&
              px_experts_gather_canonical(whole, 0, ref) == PX_OK, "gather after init");
    CHECK(!memcmp(dst, ref, nl * sizeof(float)) &&
              !memcmp(dst + 2 * nl, ref + 2 * nl, nl * sizeof(float)),
          "the stage's initial experts differ from the whole model's");
    printf("experts: a stage of 2 of 3 MoE layers holds %llu parameters, re-cuts the "
           "canonical buffer exactly, initialises as the whole model\n",
           (unsigned long long)(2 * per_layer));
out:
    free(src);
    free(dst);
    free(ref);
    px_experts_destroy(ex);
    px_experts_destroy(whole);
}

/* The simwaits case (see the file comment): one MoE layer, top-2 of 4
 * experts with a capacity, forward on "sim" and on "cpu" from the same
 * parameters and input. */
static void test_simwaits(void)
{
    enum { N = 32, C = 8, E = 4, K = 2 };
    px_moe_config_t mc = {.layers = 1, .dim = C, .experts = E, .top_k = K, .moe_every = 1,
                          .capacity_factor = 1.25f, .aux_loss_coef = 0.01f};
    const px_kernel_ops_t *sim = NULL, *cpu = px_kernels_cpu();
    char err[256];
    setenv("PX_SIM_DEVICE", "1", 1);
    setenv("PX_SIM_DEVICE_MB", "64", 1);
    if (px_kernels_select("sim", &sim, err, sizeof err) != PX_OK) {
        CHECK(0, "sim device: %s", err);
        return;
    }
    px_moe_t *ms = NULL, *mc_ = NULL;
    px_experts_t *exs = NULL, *exc = NULL;
    if (make_moe(&mc, sim, N, &exs, &ms) != 0 || make_moe(&mc, cpu, N, &exc, &mc_) != 0) {
        CHECK(0, "create");
        px_moe_destroy(ms);
        px_experts_destroy(exs);
        return;
    }
    px_experts_init(exs, 3);
    px_experts_init(exc, 3);
    float x[N * C], out_cpu[N * C], out_sim[N * C];
    uint64_t seed = 11;
    for (int i = 0; i < N * C; i++)
        x[i] = urand(&seed);
    float *dx = sim->mem_alloc(sizeof x), *dout = sim->mem_alloc(sizeof x);
    CHECK(dx && dout, "device buffers");
    if (!dx || !dout)
        return;
    sim->mem_copy_from_host(dx, x, sizeof x);
    px_moe_begin_step(ms);
    px_moe_begin_step(mc_);
    px_kernels_sim_counts_t a, b;
    px_kernels_sim_counts(&a);
    CHECK(px_moe_forward(ms, 0, dx, dout, N) == PX_OK, "sim forward");
    px_kernels_sim_counts(&b);
    uint64_t waits = (b.synchronize - a.synchronize) + (b.to_host - a.to_host);
    CHECK(waits == 1, "one MoE layer's forward waited for the device %llu times (synchronize "
           "%llu, waiting copies to host %llu), want 1", (unsigned long long)waits,
           (unsigned long long)(b.synchronize - a.synchronize),
           (unsigned long long)(b.to_host - a.to_host));
    CHECK(b.to_host_async - a.to_host_async == 2, "%llu copies to host without a wait, want 2",
           (unsigned long long)(b.to_host_async - a.to_host_async));
    sim->mem_copy_to_host(out_sim, dout, sizeof out_sim);
    CHECK(px_moe_forward(mc_, 0, x, out_cpu, N) == PX_OK, "cpu forward");
    CHECK(!memcmp(out_sim, out_cpu, sizeof out_cpu), "sim output differs from cpu's");
    printf("simwaits: one MoE layer's forward on sim: %llu wait(s) for the device "
           "(synchronize %llu, waiting copies %llu), %llu copies without a wait, "
           "%llu copies from host; output equals cpu's bit for bit: %s\n",
           (unsigned long long)waits, (unsigned long long)(b.synchronize - a.synchronize),
           (unsigned long long)(b.to_host - a.to_host),
           (unsigned long long)(b.to_host_async - a.to_host_async),
           (unsigned long long)(b.from_host - a.from_host),
           memcmp(out_sim, out_cpu, sizeof out_cpu) ? "no" : "yes");
    sim->mem_free(dx);
    sim->mem_free(dout);
    px_moe_destroy(ms);
    px_moe_destroy(mc_);
    px_experts_destroy(exs);
    px_experts_destroy(exc);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "all";
    int all = !strcmp(c, "all");
    if (all || !strcmp(c, "skew"))
        test_skew();
    if (all || !strcmp(c, "router"))
        test_router();
    if (all || !strcmp(c, "plan"))
        test_plan();
    if (all || !strcmp(c, "gradcheck"))
        test_gradcheck();
    if (all || !strcmp(c, "simwaits"))
        test_simwaits();
    if (all || !strcmp(c, "experts"))
        test_experts();
    printf(fails ? "FAIL (%d)\n" : "PASS\n", fails);
    return fails ? 1 : 0;
}
