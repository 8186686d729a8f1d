/* test_engine.c: unit tests of the engine's pieces (engine/, planner/): the token
 * file loader and its errors, the layout-independent batch, the GPT's
 * counter-based initialisation and batch independence, the learning-rate
 * schedule and the job config check's messages as the engine meets them
 * (px_job_config_check, jobcfg.h; tests/planner covers it in full).
 *
 * Usage: test_engine CASE | all. Writes scratch files under $TMPDIR (or
 * /tmp). Single-threaded. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "gpt.h"
#include "memacct.h"
#include "plan.h"
#include "px_kernels.h"
#include "px_train.h"
#include "zero.h"

#include "../px_check.h"

static char tmpdir[512];

/* Writes a token file: header fields as given, `ntok` tokens (i*7 % 200),
 * then `extra` junk bytes. */
static void write_tokens(const char *path, int magic, int version, int count, int ntok,
                         int extra, int bad_token_at)
{
    int32_t hdr[256] = {0};
    FILE *f = fopen(path, "wb");
    hdr[0] = magic;
    hdr[1] = version;
    hdr[2] = count;
    fwrite(hdr, sizeof(hdr), 1, f);
    for (int i = 0; i < ntok; i++) {
        uint16_t t = (uint16_t)((i * 7) % 200);
        if (i == bad_token_at)
            t = 300;
        fwrite(&t, 2, 1, f);
    }
    for (int i = 0; i < extra; i++)
        fputc(0, f);
    fclose(f);
}

static void test_data(void)
{
    char path[600], err[512];
    px_data_t *d = NULL;
    px_status_t st;

    snprintf(path, sizeof(path), "%s/good.bin", tmpdir);
    write_tokens(path, 20240520, 1, 1000, 1000, 0, -1);
    st = px_data_open(path, 256, err, sizeof(err), &d);
    CHECK(st == PX_OK, "open good file: %s", err);
    if (st != PX_OK)
        return;
    CHECK(px_data_num_tokens(d) == 1000, "token count");
    CHECK(px_data_tokens(d)[3] == 21, "token value");
    /* every offset in [0, ntok - T - 1]; the batch is the same for any split */
    int T = 16, B = 8;
    for (int s = 0; s < 50; s++)
        for (int i = 0; i < B; i++) {
            size_t off = px_data_offset(1, s, i, 1000, T);
            CHECK(off <= 1000 - (size_t)T - 1, "offset %zu out of range", off);
        }
    CHECK(px_data_offset(1, 0, 0, 1000, T) != px_data_offset(1, 0, 1, 1000, T) ||
           px_data_offset(1, 0, 1, 1000, T) != px_data_offset(1, 1, 0, 1000, T),
           "offsets vary with sequence and step");
    CHECK(px_data_offset(1, 3, 2, 1000, T) == px_data_offset(1, 3, 2, 1000, T),
           "offset is a function of its arguments");
    int32_t in1[8 * 16], tg1[8 * 16], in2[8 * 16], tg2[8 * 16];
    px_data_batch(d, 7, 3, 0, B, T, in1, tg1);
    for (int r = 0; r < 4; r++) /* dp = 4: rank r takes [2r, 2r+2) */
        px_data_batch(d, 7, 3, r * 2, 2, T, in2 + r * 2 * T, tg2 + r * 2 * T);
    CHECK(!memcmp(in1, in2, sizeof(in1)) && !memcmp(tg1, tg2, sizeof(tg1)),
           "dp=4 shards concatenate to the dp=1 batch");
    for (int i = 0; i < B * T; i++)
        if (i % T < T - 1)
            CHECK(tg1[i] == in1[i + 1], "targets are inputs shifted by one");
    px_data_close(d);

    const struct { int magic, version, count, ntok, extra, bad; const char *want; } bad[] = {
        {12345, 1, 100, 100, 0, -1, "bad magic 12345"},
        {20240520, 3, 100, 100, 0, -1, "unsupported version 3"},
        /* version 2 holds uint32 tokens: 100 uint16 are half its size */
        {20240520, 2, 100, 100, 0, -1, "does not match header token count 100"},
        {20240520, 1, 200, 100, 0, -1, "does not match header token count 200"},
        {20240520, 1, 100, 100, 3, -1, "does not match header token count 100"},
        {20240520, 1, 0, 0, 0, -1, "token count 0"},
        {20240520, 1, 100, 100, 0, 42, "token 300 >= vocab 256 (largest token 300; the first token "
         ">= vocab is at index 42)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(path, sizeof(path), "%s/bad%zu.bin", tmpdir, i);
        write_tokens(path, bad[i].magic, bad[i].version, bad[i].count, bad[i].ntok,
                     bad[i].extra, bad[i].bad);
        err[0] = 0;
        st = px_data_open(path, 256, err, sizeof(err), &d);
        CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, bad[i].want),
               "bad file %zu: status %d, message '%s' should contain '%s'", i, st, err,
               bad[i].want);
    }
    snprintf(path, sizeof(path), "%s/short.bin", tmpdir);
    FILE *f = fopen(path, "wb");
    fputs("hello", f);
    fclose(f);
    st = px_data_open(path, 256, err, sizeof(err), &d);
    CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "shorter than the 1024-byte header"),
           "short file: %s", err);
    st = px_data_open("/nonexistent/x.bin", 256, err, sizeof(err), &d);
    CHECK(st == PX_ERR_NOT_FOUND && strstr(err, "/nonexistent/x.bin"), "missing file: %s", err);
}

/* The uint32 variant (version 2, a vocab past 65,536) and the tokenizer's
 * vocab in header[3]: the same batches as the uint16 file of the same
 * tokens, ids past 65,535 read whole, and a job vocab below the header's
 * refused naming both. */
static void test_data32(void)
{
    char p16[600], p32[600], err[512];
    int32_t hdr[256] = {20240520, 1, 1000, 256};
    px_data_t *d16 = NULL, *d32 = NULL;
    px_status_t st;
    FILE *f;

    snprintf(p16, sizeof(p16), "%s/tok16.bin", tmpdir);
    snprintf(p32, sizeof(p32), "%s/tok32.bin", tmpdir);
    f = fopen(p16, "wb");
    fwrite(hdr, sizeof(hdr), 1, f);
    for (int i = 0; i < 1000; i++) {
        uint16_t t = (uint16_t)((i * 7) % 200);
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
    hdr[1] = 2;
    hdr[3] = 70000;
    f = fopen(p32, "wb");
    fwrite(hdr, sizeof(hdr), 1, f);
    for (int i = 0; i < 1000; i++) {
        uint32_t t = (uint32_t)((i * 7) % 200);
        if (i == 500)
            t = 69999; /* past uint16 */
        fwrite(&t, 4, 1, f);
    }
    fclose(f);

    CHECK(px_data_header_vocab(p32) == 70000 && px_data_header_vocab(p16) == 256,
          "the recorded vocabs: %d, %d", px_data_header_vocab(p32), px_data_header_vocab(p16));
    CHECK(px_data_header_vocab("/nonexistent/x.bin") == 0, "no file: no vocab");
    /* llm.c's own uint32 layout (Llama 3): magic 20240801, version 7 */
    char pl[600];
    px_data_t *dl = NULL;
    snprintf(pl, sizeof(pl), "%s/llmc32.bin", tmpdir);
    f = fopen(pl, "wb");
    int32_t lh[256] = {20240801, 7, 3};
    uint32_t lt[3] = {5, 128000, 7};
    fwrite(lh, sizeof(lh), 1, f);
    fwrite(lt, sizeof(lt), 1, f);
    fclose(f);
    st = px_data_open(pl, 128256, err, sizeof(err), &dl);
    CHECK(st == PX_OK && dl && px_data_token_bytes(dl) == 4 && px_data_tokens32(dl)[1] == 128000,
          "llm.c Llama 3 file: %s", err);
    px_data_close(dl);
    lh[1] = 6;
    f = fopen(pl, "wb");
    fwrite(lh, sizeof(lh), 1, f);
    fwrite(lt, sizeof(lt), 1, f);
    fclose(f);
    st = px_data_open(pl, 128256, err, sizeof(err), &dl);
    CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "unsupported version 6 of llm.c's Llama 3"),
          "llm.c magic, other version: %s", err);
    st = px_data_open(p32, 4096, err, sizeof(err), &d32);
    CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "tokenized with vocab 70000") &&
          strstr(err, "job's vocab 4096") && strstr(err, "tok32.bin"),
          "vocab below the header's: status %d, '%s'", st, err);
    st = px_data_open(p16, 256, err, sizeof(err), &d16);
    CHECK(st == PX_OK, "open uint16: %s", err);
    st = px_data_open(p32, 70000, err, sizeof(err), &d32);
    CHECK(st == PX_OK, "open uint32: %s", err);
    if (!d16 || !d32)
        goto out;
    CHECK(px_data_token_bytes(d16) == 2 && px_data_token_bytes(d32) == 4, "token widths");
    CHECK(px_data_tokens32(d32) && px_data_tokens32(d32)[500] == 69999 && !px_data_tokens(d32),
          "uint32 tokens read whole");
    CHECK(px_data_num_tokens(d32) == 1000, "uint32 token count %zu", px_data_num_tokens(d32));
    /* every batch equal to the uint16 file's, but where token 500 falls */
    int32_t in16[4 * 16], tg16[4 * 16], in32[4 * 16], tg32[4 * 16];
    int seen_big = 0;
    for (int s = 0; s < 200; s++) {
        px_data_batch(d16, 5, s, 0, 4, 16, in16, tg16);
        px_data_batch(d32, 5, s, 0, 4, 16, in32, tg32);
        for (int i = 0; i < 4 * 16; i++) {
            int big_in = in32[i] == 69999, big_tg = tg32[i] == 69999;
            seen_big |= big_in;
            CHECK((big_in || in16[i] == in32[i]) && (big_tg || tg16[i] == tg32[i]),
                  "step %d element %d: uint16 %d/%d, uint32 %d/%d", s, i, in16[i], tg16[i],
                  in32[i], tg32[i]);
        }
    }
    CHECK(seen_big, "token 69999 came into a batch whole");
out:
    px_data_close(d16);
    px_data_close(d32);
}

/* The parameters of a model in canonical (stacked) order; caller frees. */
static float *canonical(px_gpt_t *g)
{
    float *c = malloc(px_gpt_num_params(g) * sizeof(float));
    px_gpt_units_to_canonical(px_gpt_config(g), px_kernels_cpu(), px_gpt_params(g), NULL, c);
    return c;
}

static float *tensor(px_gpt_t *g, float *canon, int i)
{
    px_gpt_tensor_info_t ti;
    px_gpt_tensor_info(g, i, &ti);
    return canon + ti.offset;
}

static void test_gpt(void)
{
    px_gpt_config_t c = {.layers = 2, .heads = 2, .dim = 16, .max_seq = 8, .vocab = 32};
    px_gpt_t *a, *b, *one;
    CHECK(px_gpt_create(&c, px_kernels_cpu(), 2, 8, &a) == PX_OK, "create");
    CHECK(px_gpt_create(&c, px_kernels_cpu(), 2, 8, &b) == PX_OK, "create");
    CHECK(px_gpt_create(&c, px_kernels_cpu(), 1, 8, &one) == PX_OK, "create");
    size_t n = px_gpt_num_params(a);
    /* Vp*C + T*C + L*(2C + 3C*C + 3C + C*C + C + 2C + 4C*C + 4C + 4C*C + C) + 2C,
     * Vp = vocab 32 padded to 64 */
    size_t C = 16, L = 2;
    size_t want = 64 * C + 8 * C + L * (12 * C * C + 13 * C) + 2 * C;
    CHECK(n == want, "num params %zu, expected %zu", n, want);
    px_gpt_tensor_info_t ti;
    px_gpt_tensor_info(a, 4, &ti);
    CHECK(!strcmp(ti.name, "qkvw") && ti.ndim == 3 && ti.shape[1] == 48 && ti.decay == 1 &&
           ti.offset == 64 * C + 8 * C + 4 * C, "qkvw layout");
    px_gpt_tensor_info(a, 0, &ti);
    CHECK(!strcmp(ti.name, "wte") && ti.shape[0] == 64 && ti.valid == 32 * C &&
           ti.owner == PX_MODEL_OWNER_EMBED && ti.split == PX_MODEL_SPLIT_VOCAB, "wte (Vp, C)");
    px_gpt_tensor_info(a, 15, &ti);
    CHECK(ti.offset + ti.size == n && ti.decay == 0, "lnfb is last");

    px_gpt_init_params(a, 99);
    px_gpt_init_params(b, 99);
    CHECK(!memcmp(px_gpt_params(a), px_gpt_params(b), n * sizeof(float)), "same seed, same init");
    px_gpt_init_params(b, 100);
    CHECK(memcmp(px_gpt_params(a), px_gpt_params(b), n * sizeof(float)), "seed matters");
    /* element e of a tensor depends on (seed, tensor, e) only: the same
     * element in a model with another vocab/max_seq is identical */
    px_gpt_config_t c2 = c;
    c2.vocab = 40;
    px_gpt_t *w;
    CHECK(px_gpt_create(&c2, px_kernels_cpu(), 1, 8, &w) == PX_OK, "create");
    px_gpt_init_params(w, 99);
    float *ca = canonical(a), *cw = canonical(w);
    px_gpt_tensor_info_t qa, qw;
    px_gpt_tensor_info(a, 4, &qa);
    px_gpt_tensor_info(w, 4, &qw);
    CHECK(!memcmp(cw, ca, 32 * C * sizeof(float)) &&
           !memcmp(cw + qw.offset, ca + qa.offset, L * 48 * C * sizeof(float)),
           "init is by global element index");
    free(cw);
    px_gpt_destroy(w);
    float *ln1w = tensor(a, ca, 2), *ln2b = tensor(a, ca, 9), *lnfw = tensor(a, ca, 14);
    float *qkvb = tensor(a, ca, 5), *wte = ca;
    CHECK(ln1w[5] == 1.0f && ln1w[C + 5] == 1.0f && ln2b[3] == 0.0f && lnfw[0] == 1.0f &&
           qkvb[7] == 0.0f, "LN 1/0, biases 0");
    double s2 = 0;
    for (size_t i = 0; i < 32 * C; i++)
        s2 += (double)wte[i] * wte[i];
    double sd = sqrt(s2 / (32 * C));
    CHECK(fabs(sd - 0.02) < 0.002, "wte std %.4f ~ 0.02", sd);
    int pad_nonzero = 0;
    for (size_t i = 32 * C; i < 64 * C; i++)
        pad_nonzero += wte[i] != 0.0f;
    CHECK(!pad_nonzero, "padded wte rows start at 0 (%d nonzero)", pad_nonzero);
    /* unit layout: unit 0 (embedding) starts with wte, unit 1 (layer 0)
     * with ln1w, unit 3 (head) is lnfw, lnfb */
    CHECK(px_gpt_num_units(&c) == 4 && px_gpt_unit_size(&c, 1) == 12 * C * C + 13 * C &&
           px_gpt_unit_size(&c, 0) == 64 * C + 8 * C && px_gpt_unit_size(&c, 3) == 2 * C,
           "unit sizes");
    CHECK(!memcmp(px_gpt_params(a), wte, 32 * C * sizeof(float)) &&
           px_gpt_params(a)[px_gpt_unit_size(&c, 0)] == 1.0f, "unit-major storage");
    /* an init of any range of a unit equals the same range of the whole */
    float part[37];
    px_gpt_init_unit_range(&c, 99, 2, 100, 137, part);
    CHECK(!memcmp(part, px_gpt_params(a) + px_gpt_unit_size(&c, 0) + px_gpt_unit_size(&c, 1) +
                             100, sizeof(part)), "ranged init");
    free(ca);

    /* loss at init ~ ln(V); batch of 2 = mean of the two single sequences */
    int32_t in[16], tg[16];
    for (int i = 0; i < 16; i++) {
        in[i] = (i * 5) % 32;
        tg[i] = (i * 3 + 1) % 32;
    }
    float l2 = 0, la = 0, lb = 0;
    CHECK(px_gpt_forward(a, in, tg, &l2) == PX_OK, "forward");
    CHECK(fabsf(l2 - logf(32)) < 0.05f, "init loss %.4f ~ ln 32", l2);
    px_gpt_init_params(one, 99);
    px_gpt_forward(one, in, tg, &la);
    px_gpt_forward(one, in + 8, tg + 8, &lb);
    CHECK(fabsf(l2 - 0.5f * (la + lb)) < 1e-6f, "batch loss %.7f = mean %.7f", l2,
           0.5f * (la + lb));
    /* backward produces a gradient; one update changes parameters; decay
     * only on matrices (zero-grad ln weights stay exactly 1 with lr small) */
    px_gpt_zero_grad(a);
    CHECK(px_gpt_backward(a) == PX_OK, "backward");
    double g2 = px_kernels_cpu()->sumsq(px_gpt_grads(a), n);
    CHECK(g2 > 0 && isfinite(g2), "gradient norm^2 %g", g2);
    /* the padded rows of wte get no gradient (their logits are masked) */
    double gpad = px_kernels_cpu()->sumsq(px_gpt_grads(a) + 32 * C, 32 * C);
    CHECK(gpad == 0.0, "padded wte rows: gradient norm^2 %g", gpad);
    /* the blocks one by one give the same loss and gradients as the whole
     * pass; a context the model cannot run is refused */
    {
        float lw = 0, lk = 0;
        float *g_whole = malloc(n * sizeof(float));
        memcpy(g_whole, px_gpt_grads(a), n * sizeof(float));
        px_gpt_ctx_t ctx = px_gpt_ctx_default(a);
        CHECK(px_gpt_forward(a, in, tg, &lw) == PX_OK, "forward");
        CHECK(px_gpt_embed_forward(a, &ctx, in) == PX_OK &&
               px_gpt_block_forward(a, &ctx, 0) == PX_OK &&
               px_gpt_block_forward(a, &ctx, 1) == PX_OK &&
               px_gpt_head_forward(a, &ctx, tg, &lk) == PX_OK && lk == lw,
               "blocks forward loss %.7f = %.7f", lk, lw);
        px_gpt_zero_grad(a);
        CHECK(px_gpt_head_backward(a, &ctx) == PX_OK &&
               px_gpt_block_backward(a, &ctx, 1) == PX_OK &&
               px_gpt_block_backward(a, &ctx, 0) == PX_OK &&
               px_gpt_embed_backward(a, &ctx) == PX_OK &&
               !memcmp(g_whole, px_gpt_grads(a), n * sizeof(float)), "blocks backward");
        free(g_whole);
        px_gpt_ctx_t bad = ctx;
        bad.micro = 1;
        CHECK(px_gpt_block_forward(a, &bad, 0) == PX_ERR_INVALID_ARGUMENT, "micro slot 1");
        bad = ctx;
        bad.seq_offset = 1; /* T 8 from position 1 passes max_seq 8 */
        CHECK(px_gpt_embed_forward(a, &bad, in) == PX_ERR_INVALID_ARGUMENT, "seq offset");
        CHECK(px_gpt_block_forward(a, &ctx, 2) == PX_ERR_INVALID_ARGUMENT, "layer 2 of 2");
    }
    float before = px_gpt_params(a)[0];
    px_gpt_update(a, &(px_adamw_t){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                     .weight_decay = 0.1f, .t = 1});
    CHECK(px_gpt_params(a)[0] != before, "update moves parameters");
    px_gpt_destroy(a);
    px_gpt_destroy(b);
    px_gpt_destroy(one);
    px_gpt_destroy(NULL);
    c.dim = 15;
    CHECK(px_gpt_create(&c, px_kernels_cpu(), 1, 8, &a) == PX_ERR_INVALID_ARGUMENT,
           "dim %% heads");
}

static void test_schedule(void)
{
    px_train_config_t cfg;
    px_job_config_defaults(&cfg);
    cfg.steps = 100;
    cfg.lr = 1e-3f;
    cfg.warmup_steps = 10;
    cfg.min_lr_ratio = 0.1f;
    CHECK(fabsf(px_train_lr(&cfg, 0) - 1e-4f) < 1e-9f, "warm-up step 0");
    CHECK(fabsf(px_train_lr(&cfg, 9) - 1e-3f) < 1e-9f, "warm-up end");
    CHECK(fabsf(px_train_lr(&cfg, 10) - 1e-3f) < 1e-9f, "cosine start");
    CHECK(fabsf(px_train_lr(&cfg, 55) - 5.5e-4f) < 1e-8f, "cosine half way: %g",
           px_train_lr(&cfg, 55));
    CHECK(px_train_lr(&cfg, 99) > 1e-4f && px_train_lr(&cfg, 99) < 1.01e-4f, "near the floor");
    cfg.warmup_steps = -1; /* steps/20 = 5 */
    CHECK(fabsf(px_train_lr(&cfg, 0) - 2e-4f) < 1e-9f, "default warm-up steps/20");
}

/* What a rank checks before training: the layout it runs on `world` ranks
 * (px_train_layout), then the one validator (jobcfg.h) on that layout. */
static px_status_t check_on_world(const px_train_config_t *c, int world, char *err, size_t len)
{
    px_layout_t l;
    px_status_t st = px_train_layout(c, world, &l, err, len);
    if (st != PX_OK)
        return st;
    px_train_config_t checked = *c;
    checked.layout = l;
    return px_job_config_check(&checked, PX_JOBCFG_CHECK_DATA, err, len);
}

static void test_config(void)
{
    char path[600], err[512];
    px_train_config_t cfg;
    snprintf(path, sizeof(path), "%s/cfg.bin", tmpdir);
    write_tokens(path, 20240520, 1, 100, 100, 0, -1);
    px_job_config_defaults(&cfg);
    cfg.layers = 2; cfg.heads = 4; cfg.dim = 64; cfg.seq = 32; cfg.batch = 8; cfg.steps = 5;
    cfg.layout.dp = 4;
    cfg.data_path = path;
    CHECK(px_job_config_check(&cfg, PX_JOBCFG_CHECK_DATA, err, sizeof(err)) == PX_OK,
           "good config: %s", err);
    const struct { int field, value, dp; const char *want; px_status_t st; } cases[] = {
        {0, 130, 1, "dim=130 is not divisible by heads=4", PX_ERR_INVALID_ARGUMENT},
        {1, 10, 4, "batch=10 is not divisible by dp=4 x grad_accum=1", PX_ERR_INVALID_ARGUMENT},
        {2, 100, 1, "seq=100 needs 101 tokens but data file", PX_ERR_INVALID_ARGUMENT},
        {3, 0, 1, "layers=0 is out of range (1..1024)", PX_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        px_train_config_t c = cfg;
        if (cases[i].field == 0) c.dim = cases[i].value;
        if (cases[i].field == 1) c.batch = cases[i].value;
        if (cases[i].field == 2) c.seq = cases[i].value;
        if (cases[i].field == 3) c.layers = cases[i].value;
        c.layout.dp = cases[i].dp;
        err[0] = 0;
        px_status_t st = px_job_config_check(&c, PX_JOBCFG_CHECK_DATA, err, sizeof(err));
        CHECK(st == cases[i].st && strstr(err, cases[i].want), "case %zu: '%s' wants '%s'", i,
               err, cases[i].want);
    }
    /* the layout: all zeros is dp = world; it must fit the world, and the
     * engine runs expert parallelism with experts only */
    const struct { px_layout_t l; int world; const char *want; } lc[] = {
        {{2, 1, 1, 1, 1}, 4, "layout dp=2 tp=1 pp=1 cp=1 ep=1 (world 2) needs 2 ranks, the "
                             "world has 4"},
        {{2, 1, 2, 1, 1}, 4, "batch=8 is not divisible by dp=2 x grad_accum=2 x "
                             "micro_batches=3"},
        {{4, 1, 1, 1, 3}, 4, "ep=3 does not divide dp x cp = 4"},
        {{2, 1, 1, 1, 2}, 2, "ep=2 needs experts (--experts E, a multiple of ep)"},
        {{8, 1, 1, 1, 1}, 8, "batch=8 is not divisible by dp=8 x grad_accum=2"},
    };
    for (size_t i = 0; i < sizeof(lc) / sizeof(lc[0]); i++) {
        px_train_config_t c = cfg;
        c.layout = lc[i].l;
        c.grad_accum = 2;
        c.micro_batches = lc[i].l.pp > 1 ? 3 : 1;
        err[0] = 0;
        px_status_t st = check_on_world(&c, lc[i].world, err, sizeof(err));
        CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, lc[i].want),
               "layout case %zu: '%s' wants '%s'", i, err, lc[i].want);
    }
    {
        px_train_config_t c = cfg;
        px_layout_t got;
        c.layout = (px_layout_t){4, 1, 1, 1, 1};
        CHECK(check_on_world(&c, 4, err, sizeof(err)) == PX_OK, "dp 4: %s", err);
        c.layout = (px_layout_t){0, 0, 0, 0, 0};
        CHECK(px_train_layout(&c, 4, &got, err, sizeof(err)) == PX_OK && got.dp == 4 &&
               got.tp == 1 && got.pp == 1 && got.cp == 1 && got.ep == 1, "zeros: dp = world");
    }
    px_train_config_t c = cfg;
    c.data_path = "/nonexistent/tokens.bin";
    CHECK(px_job_config_check(&c, PX_JOBCFG_CHECK_DATA, err, sizeof(err)) == PX_ERR_NOT_FOUND &&
           strstr(err, "/nonexistent/tokens.bin"), "missing file: %s", err);
}

/* plan.h: padding, offsets, the ZeRO paper's figures, and the GPT units */
/* A MoE layer's unit holds no dense MLP (model.h): 4 layers, moe_every 2
 * (layers 1 and 3), dim 32: those units are 8C^2 + 5C elements smaller
 * (tp 2: fcw, fcb, fcprojw split, fcprojb whole); the canonical buffer
 * keeps the tensors, their MoE slices 0. */
static void test_plan_moe_units(void)
{
    const uint64_t C = 32, mlp = 8 * C * C + 5 * C, mlp2 = (8 * C * C + 4 * C) / 2 + C;
    uint64_t *d = NULL, *m = NULL, *d2 = NULL, *m2 = NULL;
    uint64_t td = px_plan_gpt_units_tp(4, (int)C, 256, 32, 1, &d);
    uint64_t tm = px_plan_gpt_units_moe(4, (int)C, 256, 32, 1, 8, 2, &m);
    uint64_t td2 = px_plan_gpt_units_tp(4, (int)C, 256, 32, 2, &d2);
    uint64_t tm2 = px_plan_gpt_units_moe(4, (int)C, 256, 32, 2, 8, 2, &m2);
    CHECK(td && tm && td2 && tm2, "units");
    if (!td || !tm || !td2 || !tm2)
        return;
    CHECK(td - tm == 2 * mlp && td2 - tm2 == 2 * mlp2, "moe units: %llu %llu fewer",
          (unsigned long long)(td - tm), (unsigned long long)(td2 - tm2));
    for (int u = 0; u < 6; u++) {
        int moe = u == 2 || u == 4;
        CHECK(d[u] - m[u] == (moe ? mlp : 0) && d2[u] - m2[u] == (moe ? mlp2 : 0),
              "moe unit %d: %llu vs %llu", u, (unsigned long long)m[u], (unsigned long long)d[u]);
    }
    free(d);
    free(m);
    free(d2);
    free(m2);
    px_gpt_config_t mc = {.layers = 4, .heads = 2, .dim = (int)C, .max_seq = 32, .vocab = 256,
                          .experts = 8, .moe_every = 2};
    px_model_unit_tensor_t t[PX_MODEL_MAX_UNIT_TENSORS];
    CHECK(px_model_unit_tensors(&mc, 2, t) == 8 && t[7].tensor == 9 &&
          px_model_unit_tensors(&mc, 1, t) == 12, "moe unit tensors");
    CHECK(px_model_num_params(&mc) == td, "the canonical buffer keeps every tensor");
    /* the model lays out the smaller units; its canonical copy has 0 in the
     * MoE layers' dense MLP slices, the dense layers' initial values */
    px_gpt_t *g = NULL;
    CHECK(px_gpt_create(&mc, px_kernels_cpu(), 1, 4, &g) == PX_OK, "moe create");
    if (!g)
        return;
    CHECK(px_gpt_num_params(g) == tm, "moe model params %zu", px_gpt_num_params(g));
    px_gpt_init_params(g, 1);
    size_t n = (size_t)td;
    float *canon = malloc(n * sizeof(float));
    for (size_t i = 0; canon && i < n; i++)
        canon[i] = 9.0f;
    if (canon)
        px_gpt_units_to_canonical(&mc, px_kernels_cpu(), px_gpt_params(g), NULL, canon);
    px_gpt_tensor_info_t fcw;
    px_gpt_tensor_info_of(&mc, 10, &fcw);
    size_t per = fcw.size / 4, zero1 = 0, set0 = 0;
    for (size_t i = 0; canon && i < per; i++) {
        zero1 += canon[fcw.offset + per + i] == 0.0f;
        set0 += canon[fcw.offset + i] != 0.0f && canon[fcw.offset + i] != 9.0f;
    }
    CHECK(canon && zero1 == per && set0 > per / 2, "canonical fcw: layer 1 zeros %zu of %zu, "
          "layer 0 initialised %zu", zero1, per, set0);
    free(canon);
    px_gpt_destroy(g);
}

static void test_plan(void)
{
    px_plan_precision_t mixed, fp32;
    px_plan_precision_mixed(&mixed, 12);
    px_plan_precision_fp32(&fp32);
    uint64_t psi = 7500000000ull;
    const double want[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};
    for (int z = 0; z < 4; z++) {
        px_plan_t *p;
        CHECK(px_plan_create(&psi, 1, 0, 64, z, &mixed, &p) == PX_OK, "plan");
        double tot = p->bytes[PX_MEM_PARAMS] + p->bytes[PX_MEM_GRADS] + p->bytes[PX_MEM_OPTIM];
        CHECK(fabs(tot - want[z]) < 1.0 && fabs(px_plan_state_bytes(p) - want[z]) < 1.0,
               "ZeRO-%d of 7.5B on 64: %.6g bytes, paper %.6g", z, tot, want[z]);
        px_plan_destroy(p);
    }
    /* units 10, 7, 5 on dp 4: padded 12, 8, 8; shard 3, 2, 2 */
    uint64_t u[3] = {10, 7, 5};
    px_plan_t *p;
    /* as a GPT: embedding 10, one layer 7, head 5 (E 12, M 8, H 8, L 1) */
    CHECK(px_plan_create(u, 3, 1, 4, 3, &fp32, &p) == PX_OK, "plan units");
    CHECK(p->padded == 28 && p->shard == 7 && p->unit_offset[2] == 20 &&
           p->shard_offset[2] == 5 && p->max_layer == 8 && p->work_params == 12 + 2 * 8 &&
           p->work_grads == 12 + 8, "padding and offsets");
    /* stage 3 (plan.h): params (S + W) * 4 with W = E + M + H (one layer),
     * grads (S + E + max(H, M)) * 4, optimizer S * 8 */
    CHECK(p->bytes[PX_MEM_PARAMS] == (7 + 28) * 4.0 && p->bytes[PX_MEM_GRADS] == (7 + 20) * 4.0 &&
           p->bytes[PX_MEM_OPTIM] == 7 * 8.0, "stage 3 bytes");
    /* at once: the head's backward (S+E+H+M)p + (S+E+H)g + S o = 140 + 108
     * + 56 beats the forward (S+W)p + S g + S o = 140 + 28 + 56 and the
     * layer's backward (S+M)p + (S+E+max(H,M))g + S o = 60 + 108 + 56 */
    CHECK(p->state_peak == 140 + 108 + 56.0, "stage 3 state peak %g", p->state_peak);
    px_plan_destroy(p);
    CHECK(px_plan_create(u, 3, 1, 0, 1, &fp32, &p) == PX_ERR_INVALID_ARGUMENT, "dp 0");
    CHECK(px_plan_create(u, 3, 1, 2, 4, &fp32, &p) == PX_ERR_INVALID_ARGUMENT, "zero 4");
    /* GPT units = the model's */
    uint64_t *gs;
    px_gpt_config_t c = {.layers = 3, .heads = 3, .dim = 33, .max_seq = 32, .vocab = 256};
    uint64_t total = px_plan_gpt_units(3, 33, 256, 32, &gs);
    px_gpt_t *g;
    CHECK(px_gpt_create(&c, px_kernels_cpu(), 1, 4, &g) == PX_OK, "create");
    CHECK(total == px_gpt_num_params(g) && total == 50061, "GPT params %llu",
           (unsigned long long)total);
    for (int i = 0; i < 5; i++)
        CHECK(gs[i] == px_gpt_unit_size(&c, i), "unit %d", i);
    free(gs);
    test_plan_moe_units();
    /* memacct: the model's state is tagged */
    px_mem_stats_t ms;
    px_mem_stats(&ms);
    CHECK(ms.current[PX_MEM_PARAMS] >= total * 4 && ms.current[PX_MEM_OPTIM] >= total * 8 &&
           ms.current[PX_MEM_ACTS] == px_gpt_activation_bytes(g), "memacct tags");
    px_gpt_destroy(g);
    px_mem_stats(&ms);
    CHECK(ms.current[PX_MEM_PARAMS] == 0 && ms.current[PX_MEM_ACTS] == 0 &&
           ms.peak[PX_MEM_OPTIM] >= total * 8, "memacct frees, keeps peaks");
    /* activations (plan.h), by hand: L 1, NH 2, C 4, Vp 64, B 1, T 4 (N 4).
     * tp 1: R 4: residual stream and LayerNorms 16*8 + 4*6 = 152, split
     * qkv 48 atty 16 att 32 fch, gelu 64*2 d4a, d4b 64*2 logits 256
     * (probs and dlogits in place over it: 0), whole losses 4 tmp 16 dbtc
     * 16 scratch 16: 796 floats. tp 2 + SP: R 2, Cl 2, NHl 1, Vl 32: 76 +
     * 24+8+16+32*4+128 + 4+16+16+16 + rowmax 4 + spbuf 16 + dln 16 = 460
     * floats and 8 doubles; tp 2 without SP: R 4: 496 floats, 8 doubles */
    px_plan_gpt_acts_t pa;
    CHECK(px_plan_gpt_activations(1, 2, 4, 64, 1, 4, 1, 0, &pa) == PX_OK && pa.floats == 796 &&
           pa.doubles == 0 && pa.bytes == 3184 && pa.count[18] == 0 && pa.count[25] == 0, "activations tp 1: %llu floats",
           (unsigned long long)pa.floats);
    CHECK(px_plan_gpt_activations(1, 2, 4, 64, 1, 4, 2, 1, &pa) == PX_OK && pa.floats == 460 &&
           pa.doubles == 8 && pa.bytes == 460 * 4 + 64, "activations tp 2 SP: %llu floats",
           (unsigned long long)pa.floats);
    CHECK(px_plan_gpt_activations(1, 2, 4, 64, 1, 4, 2, 0, &pa) == PX_OK && pa.floats == 496 &&
           pa.bytes == 496 * 4 + 64, "activations tp 2: %llu floats",
           (unsigned long long)pa.floats);
    CHECK(px_plan_gpt_activations(1, 2, 4, 64, 1, 3, 2, 1, &pa) == PX_ERR_INVALID_ARGUMENT,
           "B*T = 3 with SP on tp 2");
    /* context parallelism (ring_attn.h), local T 4 of cp 2: att (T,T) per
     * head, 32 floats, becomes the log-sum-exp, 8; the ring's five (B,T,2C)
     * blocks and delta (B,NH,T): 5*4*8 + 8 = 168: 796 - 32 + 8 + 168 */
    CHECK(px_plan_gpt_activations_cp(1, 2, 4, 64, 1, 4, 1, 0, 2, &pa) == PX_OK &&
           pa.floats == 940 && pa.ring == 168 && pa.count[6] == 8 && pa.bytes == 940 * 4,
           "activations cp 2: %llu floats", (unsigned long long)pa.floats);
    CHECK(px_plan_gpt_activations_cp(1, 2, 4, 64, 1, 4, 1, 0, 1, &pa) == PX_OK &&
           pa.floats == 796 && pa.ring == 0, "activations cp 1 = without cp");
    CHECK(px_plan_gpt_activations_cp(1, 2, 4, 64, 1, 3, 1, 0, 2, &pa) ==
           PX_ERR_INVALID_ARGUMENT, "local T 3 (odd) with cp 2");
    /* bf16 storage: ln1, ln2, lnf (16 each) and fch_gelu (64)
     * halve: 796 - 8 - 8 - 8 - 32 = 740; tp 2 + SP: only fch_gelu (32):
     * 444; tp 2: 496 - 8 - 8 - 8 - 16 = 456; bf16 0 is the fp32 table */
    CHECK(px_plan_gpt_activations_prec(1, 2, 4, 64, 1, 4, 1, 0, 1, 1, &pa) == PX_OK &&
           pa.floats == 740 && pa.count[1] == 8 && pa.bf16[1] && pa.bf16[8] && pa.bf16[12] &&
           pa.bf16[14] && !pa.bf16[0] && !pa.bf16[11] && pa.bytes == 740 * 4,
           "activations bf16: %llu floats", (unsigned long long)pa.floats);
    CHECK(px_plan_gpt_activations_prec(1, 2, 4, 64, 1, 4, 2, 1, 1, 1, &pa) == PX_OK &&
           pa.floats == 444 && !pa.bf16[1] && pa.bf16[12], "activations bf16 tp 2 SP: %llu",
           (unsigned long long)pa.floats);
    CHECK(px_plan_gpt_activations_prec(1, 2, 4, 64, 1, 4, 2, 0, 1, 1, &pa) == PX_OK &&
           pa.floats == 456, "activations bf16 tp 2: %llu", (unsigned long long)pa.floats);
    CHECK(px_plan_gpt_activations_prec(1, 2, 4, 64, 1, 4, 1, 0, 1, 0, &pa) == PX_OK &&
           pa.floats == 796 && !pa.bf16[1], "activations bf16 0: the fp32 table");
    /* precision=bf16: the largest linear layer's rounded operands (plan.h);
     * dim 64, Vp 64, 16 tokens: fc and fc-proj (16*256 + 256*64 + 16*64);
     * GPT-2 124M, 8192 tokens: the head (N*Vp + Vp*C + N*C), halved by tp 2 */
    CHECK(px_plan_bf16_gemm_elems(64, 64, 16, 1) == 21504, "bf16 scratch, MLP-bound: %llu",
           (unsigned long long)px_plan_bf16_gemm_elems(64, 64, 16, 1));
    CHECK(px_plan_bf16_gemm_elems(768, 50304, 8192, 1) ==
           8192ull * 50304 + 50304ull * 768 + 8192ull * 768, "bf16 scratch, head-bound");
    CHECK(px_plan_bf16_gemm_elems(768, 50304, 8192, 2) ==
           8192ull * 25152 + 25152ull * 768 + 8192ull * 768, "bf16 scratch, tp 2");
    CHECK(px_plan_bf16_gemm_elems(0, 64, 16, 1) == 0, "bf16 scratch, bad dim");
    /* the model allocates exactly the plan's bytes (memacct) */
    px_gpt_config_t c2 = {.layers = 1, .heads = 2, .dim = 4, .max_seq = 4, .vocab = 50,
                          .padded_vocab = 64, .tp = 2, .tp_rank = 1, .sequence_parallel = 1};
    CHECK(px_gpt_create(&c2, px_kernels_cpu(), 1, 4, &g) == PX_OK, "create tp 2 SP");
    px_mem_stats(&ms);
    CHECK(ms.current[PX_MEM_ACTS] == 460 * 4 + 64 && px_gpt_activation_bytes(g) == 460 * 4 + 64,
           "tp 2 SP model's activations %llu bytes", (unsigned long long)ms.current[PX_MEM_ACTS]);
    px_gpt_destroy(g);
}

/* The default data-parallel bucket (zero.h px_zero_bucket_bytes): DDP's
 * 25 MiB cap spread evenly over the fewest buckets; an explicit size as
 * given. */
static void test_buckets(void)
{
    const uint64_t MiB = 1u << 20;
    CHECK(px_zero_bucket_bytes(2.0, 100 * MiB) == 2 * MiB, "explicit 2 MiB");
    CHECK(px_zero_bucket_bytes(0.01, 100 * MiB) == (uint64_t)(0.01 * MiB), "explicit 0.01 MiB");
    /* up to the cap: one bucket of everything */
    CHECK(px_zero_bucket_bytes(0, 3 * MiB) == 3 * MiB, "3 MiB model: one bucket");
    CHECK(px_zero_bucket_bytes(0, 25 * MiB) == 25 * MiB, "25 MiB model: one bucket");
    CHECK(px_zero_bucket_bytes(0, 100) == 100, "tiny model: one bucket");
    CHECK(px_zero_bucket_bytes(0, 0) == 1, "empty: 1 byte, never 0");
    /* above it: ceil(g / 25 MiB) equal buckets, no small remainder
     * (the big bench model: 10844160 floats, 2 buckets) */
    CHECK(px_zero_bucket_bytes(0, 25 * MiB + 1) == (25 * MiB + 1) / 2, "just over: 2 halves");
    CHECK(px_zero_bucket_bytes(0, 10844160ull * 4) == 10844160ull * 2, "big model: 2 halves");
    CHECK(px_zero_bucket_bytes(0, 60 * MiB) == 20 * MiB, "60 MiB: 3 of 20 MiB");
    CHECK(px_zero_bucket_bytes(0, 1000 * MiB) == 25 * MiB, "1000 MiB: 40 of 25 MiB");
}

/* A device whose kernels are still queued when the gradient reduction
 * starts (as a GPU's backward is): `queued` set, the first operation that
 * waits for the device - synchronize, a copy to the host, a sum read back -
 * waits QUEUE_MS and clears it. */
#define QUEUE_MS 60
static int queued;
static px_kernel_ops_t queued_ops;

static void queue_drain(void)
{
    if (queued)
        usleep(QUEUE_MS * 1000);
    queued = 0;
}
static void queued_sync(void) { queue_drain(); }
static void queued_to_host(void *dst, const void *src, size_t bytes)
{
    queue_drain();
    px_kernels_cpu()->mem_copy_to_host(dst, src, bytes);
}
static double queued_sumsq(const float *x, size_t n)
{
    queue_drain();
    return px_kernels_cpu()->sumsq(x, n);
}

/* The rank log's collective figures count collectives only: the wait for
 * the device's queued backward before the gradient reduction is its own
 * figure (device_wait_s), not "other collectives" (on an H200 at dp 1 the
 * log said 90-170 ms of other collectives a step). */
static void test_device_wait(void)
{
    px_gpt_config_t c = {.layers = 1, .heads = 2, .dim = 16, .max_seq = 8, .vocab = 32};
    px_plan_precision_t fp32;
    px_plan_t *plan = NULL;
    px_zero_t *z = NULL;
    uint64_t *units = NULL;
    queued_ops = *px_kernels_cpu();
    queued_ops.synchronize = queued_sync;
    queued_ops.mem_copy_to_host = queued_to_host;
    queued_ops.sumsq = queued_sumsq;
    px_plan_precision_fp32(&fp32);
    CHECK(px_plan_gpt_units(c.layers, c.dim, c.vocab, c.max_seq, &units) > 0, "units");
    for (int stage = 0; stage <= 3; stage++) {
        CHECK(px_plan_create(units, px_gpt_num_units(&c), 1, 1, stage, &fp32, &plan) == PX_OK,
              "plan zero %d", stage);
        CHECK(plan && px_zero_create(&c, plan, NULL, &queued_ops, 1, 1, &z) == PX_OK,
              "zero %d", stage);
        if (!z)
            break;
        px_zero_begin_step(z);
        float loss = 0.0f, norm = 0.0f;
        queued = 1;
        CHECK(px_zero_reduce(z, 2.5f, &loss, &norm) == PX_OK, "reduce, zero %d", stage);
        px_zero_times_t t;
        px_zero_times(z, &t);
        CHECK(loss == 2.5f, "zero %d: loss %g", stage, loss);
        CHECK(t.comm_other_s < 0.5 * QUEUE_MS / 1e3,
              "zero %d: %.1f ms of other collectives at dp 1 (the device's queue is %d ms)",
              stage, 1e3 * t.comm_other_s, QUEUE_MS);
        CHECK(t.device_wait_s >= 0.9 * QUEUE_MS / 1e3, "zero %d: device wait %.1f ms", stage,
              1e3 * t.device_wait_s);
        px_zero_destroy(z);
        px_plan_destroy(plan);
        z = NULL;
        plan = NULL;
    }
    free(units);
}

int main(int argc, char **argv)
{
    static const struct { const char *name; void (*fn)(void); } cases[] = {
        {"data", test_data}, {"data32", test_data32}, {"gpt", test_gpt}, {"schedule", test_schedule},
        {"config", test_config}, {"plan", test_plan}, {"buckets", test_buckets},
        {"device_wait", test_device_wait}};
    const char *which = argc > 1 ? argv[1] : "all";
    const char *t = getenv("TMPDIR");
    int ran = 0;
    snprintf(tmpdir, sizeof(tmpdir), "%s/px_test_engine_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(which, "all") && strcmp(which, cases[i].name))
            continue;
        printf("%s\n", cases[i].name);
        cases[i].fn();
        ran++;
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    if (!ran)
        return 2;
    printf(fails ? "FAILED (%d)\n" : "OK\n", fails);
    return fails ? 1 : 0;
}
