/* test_sample.c: the token pick and generator of engine/sample.h, alone.
 *   rng:   the generator's first draws for seed 1 (splitmix64 then llm.c's
 *          xorshift64*, computed independently in Python), seeds differ
 *   greedy: the first largest logit; top-k 1 is greedy for any seed
 *   topk:  top-k 2 never picks outside the two best; of three equal best,
 *          the two lower ids
 *   dist:  temperature 1 over logits (0, ln 2, ln 3, -inf-ish) draws ids
 *          1:2:3 within 2% of 60000 draws; temperature 0.5 squares them
 *   opts:  the checks name the bad value */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../px_check.h"
#include "sample.h"

static void test_rng(void)
{
    uint64_t s = px_sample_rng_init(1);
    CHECK(s == 0x910a2dec89025cc1ull, "init(1) = %llx", (unsigned long long)s);
    const uint32_t want[3] = {1262921053u, 3621908801u, 1595206758u};
    for (int i = 0; i < 3; i++) {
        uint32_t v = px_sample_rng_u32(&s);
        CHECK(v == want[i], "draw %d: %u, want %u", i, v, want[i]);
    }
    uint64_t a = px_sample_rng_init(7), b = px_sample_rng_init(8);
    CHECK(px_sample_rng_u32(&a) != px_sample_rng_u32(&b), "seeds 7 and 8 draw alike");
    for (int i = 0; i < 1000; i++) {
        float f = px_sample_rng_f32(&a);
        CHECK(f >= 0.0f && f < 1.0f, "f32 %g outside [0, 1)", (double)f);
    }
}

static void test_greedy(void)
{
    float z[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    void *scratch = malloc(px_sample_scratch_bytes(6));
    uint64_t rng = px_sample_rng_init(3);
    CHECK(px_sample_pick(z, 6, 0.0f, 0, &rng, scratch) == 1, "greedy: the first largest");
    CHECK(px_sample_pick(z, 6, 0.0f, 3, &rng, scratch) == 1, "greedy ignores top-k");
    for (uint64_t seed = 0; seed < 50; seed++) {
        rng = px_sample_rng_init(seed);
        int id = px_sample_pick(z, 6, 1.0f, 1, &rng, scratch);
        CHECK(id == 1, "top-k 1, seed %llu: %d", (unsigned long long)seed, id);
    }
    free(scratch);
}

static void test_topk(void)
{
    float z[5] = {1.0f, 3.0f, 1.0f, 3.0f, 2.9f};
    void *scratch = malloc(px_sample_scratch_bytes(5));
    uint64_t rng = px_sample_rng_init(11);
    int seen[5] = {0};
    for (int i = 0; i < 2000; i++)
        seen[px_sample_pick(z, 5, 1.0f, 2, &rng, scratch)]++;
    CHECK(seen[1] > 800 && seen[3] > 800 && seen[0] + seen[2] + seen[4] == 0,
          "top-k 2 of (1, 3, 1, 3, 2.9): %d %d %d %d %d", seen[0], seen[1], seen[2], seen[3],
          seen[4]);
    /* three equal best logits, top-k 2: the two lower ids */
    float t[4] = {3.0f, 1.0f, 3.0f, 3.0f};
    int tie[4] = {0};
    for (int i = 0; i < 2000; i++)
        tie[px_sample_pick(t, 4, 1.0f, 2, &rng, scratch)]++;
    CHECK(tie[0] > 800 && tie[2] > 800 && tie[1] + tie[3] == 0,
          "top-k 2 of (3, 1, 3, 3): %d %d %d %d (ties go to the lower id)", tie[0], tie[1], tie[2],
          tie[3]);
    free(scratch);
}

static void test_dist(void)
{
    float z[4] = {0.0f, logf(2.0f), logf(3.0f), -30.0f};
    void *scratch = malloc(px_sample_scratch_bytes(4));
    for (int pass = 0; pass < 2; pass++) {
        float temp = pass ? 0.5f : 1.0f;
        double w[3] = {1, 2, 3}, sum = 0;
        for (int i = 0; i < 3; i++)
            sum += (w[i] = pass ? w[i] * w[i] : w[i]);
        uint64_t rng = px_sample_rng_init(5);
        int n = 60000, seen[4] = {0};
        for (int i = 0; i < n; i++)
            seen[px_sample_pick(z, 4, temp, 0, &rng, scratch)]++;
        for (int i = 0; i < 3; i++)
            CHECK(fabs((double)seen[i] / n - w[i] / sum) < 0.02,
                  "temperature %g: id %d drawn %.4f, want %.4f", (double)temp, i,
                  (double)seen[i] / n, w[i] / sum);
        CHECK(seen[3] == 0, "an id of probability e^-30 drawn %d times", seen[3]);
    }
    free(scratch);
}

static void test_opts(void)
{
    char err[256];
    px_sample_opts_t o = {.tokens = 10, .temperature = 1.0f, .top_k = 0, .seed = 1};
    CHECK(px_sample_opts_check(&o, 256, err, sizeof(err)) == PX_OK, "good opts: %s", err);
    o.top_k = -2;
    CHECK(px_sample_opts_check(&o, 256, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
              strstr(err, "top_k=-2"), "top_k -2: %s", err);
    o.top_k = 0;
    o.temperature = NAN;
    CHECK(px_sample_opts_check(&o, 256, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
              strstr(err, "temperature="), "temperature nan: %s", err);
    o.temperature = 0.0f;
    o.tokens = PX_SAMPLE_MAX_TOKENS + 1;
    CHECK(px_sample_opts_check(&o, 256, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
              strstr(err, "tokens=4097"), "tokens past the limit: %s", err);
    px_sample_codec_t c;
    CHECK(px_sample_codec_for(50257, NULL, NULL, &c, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
              strstr(err, "vocab=50257"), "vocab 50257 without a tokenizer: %s", err);
    CHECK(px_sample_codec_for(256, NULL, NULL, &c, err, sizeof(err)) == PX_OK && c.start_id == '\n',
          "bytes codec");
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "all";
    int all = !strcmp(c, "all");
    if (all || !strcmp(c, "rng"))
        test_rng();
    if (all || !strcmp(c, "greedy"))
        test_greedy();
    if (all || !strcmp(c, "topk"))
        test_topk();
    if (all || !strcmp(c, "dist"))
        test_dist();
    if (all || !strcmp(c, "opts"))
        test_opts();
    return fails ? 1 : 0;
}
