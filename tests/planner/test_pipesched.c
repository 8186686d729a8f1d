/* test_pipesched.c: the pipeline schedules' checker over p = 1..8 stages and
 * m = 1..16 micro-batches (pipesched.h): every schedule's lists are
 * deadlock-free under the runner's semantics, forward precedes backward
 * (and the weight pass its input pass), every message is matched; 1F1B
 * holds min(p - s, m) micro-batches per stage, GPipe m, ZB1 min(p, m); the stage split is even; broken lists are caught.
 * Interleaved 1F1B for p = 1..8, m = 1..16, v = 2..4 chunks: the same
 * checks per chunk (every (micro-batch, chunk) forwarded and backwarded
 * once, forward first, messages between virtual stages matched, no
 * deadlock) where m is a multiple of p (Megatron-LM's rule; other m are
 * refused), each gradient receive posted right after its activation send. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipesched.h"

#include "../px_check.h"

int main(void)
{
    char err[512];
    int checked = 0;
    for (int k = 0; k < PX_PIPE_NKINDS; k++)
        for (int p = 1; p <= 8 && k != PX_PIPE_INTERLEAVED; p++)
            for (int m = 1; m <= 16; m++) {
                px_pipe_schedule_t *sc = NULL;
                CHECK(px_pipe_schedule_create(k, p, m, &sc) == PX_OK, "create %d %d %d", k, p, m);
                if (!sc)
                    continue;
                px_status_t st = px_pipe_schedule_check(sc, err, sizeof(err));
                CHECK(st == PX_OK, "%s p=%d m=%d: %s", px_pipe_schedule_name(k), p, m, err);
                for (int s = 0; s < p; s++) {
                    /* ZB1: a micro-batch holds its slot until its W;
                     * p-s-1 warm-up forwards + 1 + s pending W = p */
                    int cap = k == PX_PIPE_GPIPE ? m : k == PX_PIPE_1F1B ? p - s : p;
                    int want = cap < m ? cap : m;
                    CHECK(px_pipe_schedule_slots(sc, s) == want, "%s p=%d m=%d stage %d: %d slots, "
                           "want %d", px_pipe_schedule_name(k), p, m, s,
                           px_pipe_schedule_slots(sc, s), want);
                    int fwd = 0, bwd = 0, wgt = 0;
                    for (int i = 0; i < sc->stage[s].n; i++) {
                        fwd += sc->stage[s].a[i].op == PX_PIPE_FWD;
                        bwd += sc->stage[s].a[i].op == PX_PIPE_BWD;
                        wgt += sc->stage[s].a[i].op == PX_PIPE_WGT;
                    }
                    CHECK(fwd == m && bwd == m && wgt == (k == PX_PIPE_ZB1 ? m : 0),
                           "stage %d: %d forwards %d backwards %d weight passes", s, fwd, bwd, wgt);
                }
                px_pipe_schedule_destroy(sc);
                checked++;
            }
    CHECK(checked == (PX_PIPE_NKINDS - 1) * 8 * 16, "checked %d", checked);

    /* interleaved 1F1B */
    int ichecked = 0;
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 16; m++)
            for (int v = 2; v <= 4; v++) {
                px_pipe_schedule_t *sc = NULL;
                px_status_t cs = px_pipe_schedule_create_v(PX_PIPE_INTERLEAVED, p, m, v, &sc);
                /* Megatron-LM's rule: micro-batches a multiple of the stages
                 * (the groups-of-p order deadlocks otherwise, e.g. p=4 m=5) */
                CHECK(cs == (m % p ? PX_ERR_INVALID_ARGUMENT : PX_OK),
                       "create interleaved %d %d %d: %d", p, m, v, cs);
                if (!sc)
                    continue;
                px_status_t st = px_pipe_schedule_check(sc, err, sizeof(err));
                CHECK(st == PX_OK, "interleaved p=%d m=%d v=%d: %s", p, m, v, err);
                for (int s = 0; s < p; s++) {
                    int per[4][PX_PIPE_NOPS] = {{0}};
                    for (int i = 0; i < sc->stage[s].n; i++)
                        per[sc->stage[s].a[i].chunk][sc->stage[s].a[i].op]++;
                    for (int c = 0; c < v; c++) {
                        int j = c * p + s;
                        CHECK(per[c][PX_PIPE_FWD] == m && per[c][PX_PIPE_BWD] == m &&
                               per[c][PX_PIPE_WGT] == 0 &&
                               per[c][PX_PIPE_RECV_ACT] == (j > 0 ? m : 0) &&
                               per[c][PX_PIPE_SEND_ACT] == (j < p * v - 1 ? m : 0),
                               "interleaved p=%d m=%d v=%d stage %d chunk %d: %d F %d B", p, m,
                               v, s, c, per[c][PX_PIPE_FWD], per[c][PX_PIPE_BWD]);
                        int ns = px_pipe_schedule_chunk_slots(sc, s, c);
                        CHECK(ns >= 1 && ns <= m, "interleaved p=%d m=%d v=%d stage %d chunk "
                               "%d: %d slots", p, m, v, s, c, ns);
                    }
                }
                /* the gradient receive right after the activation send */
                for (int s = 0; s < p; s++)
                    for (int i = 0; i < sc->stage[s].n; i++)
                        if (sc->stage[s].a[i].op == PX_PIPE_RECV_GRAD)
                            CHECK(i > 0 && sc->stage[s].a[i - 1].op == PX_PIPE_SEND_ACT &&
                                   sc->stage[s].a[i - 1].micro == sc->stage[s].a[i].micro &&
                                   sc->stage[s].a[i - 1].chunk == sc->stage[s].a[i].chunk,
                                   "interleaved p=%d m=%d v=%d stage %d: <g at %d not after its "
                                   ">a", p, m, v, s, i);
                px_pipe_schedule_destroy(sc);
                ichecked++;
            }
    CHECK(ichecked == (16 + 8 + 5 + 4 + 3 + 2 + 2 + 2) * 3, "checked %d interleaved", ichecked);
    /* p=4 m=8 v=2 (the bench's shape): stage 0 holds all 8 micro-batches of
     * chunk 0 (its 10 warm-up forwards reach B0.0 only after the 8th) and 4
     * of chunk 1; the last stage 5 and 1 */
    px_pipe_schedule_t *is = NULL;
    CHECK(px_pipe_schedule_create_v(PX_PIPE_INTERLEAVED, 4, 8, 2, &is) == PX_OK, "create");
    CHECK(is && px_pipe_schedule_chunk_slots(is, 0, 0) == 8 &&
           px_pipe_schedule_chunk_slots(is, 0, 1) == 4 && px_pipe_schedule_slots(is, 3) == 6,
           "p=4 m=8 v=2 slots");
    px_pipe_schedule_destroy(is);
    /* a chunk index V or more is caught; so is V with the other schedules */
    px_pipe_schedule_t *bad = NULL;
    CHECK(px_pipe_schedule_create_v(PX_PIPE_1F1B, 2, 4, 2, &bad) == PX_ERR_INVALID_ARGUMENT,
           "1f1b with v 2");
    CHECK(px_pipe_schedule_create_v(PX_PIPE_INTERLEAVED, 2, 4, 1, &bad) ==
           PX_ERR_INVALID_ARGUMENT, "interleaved with v 1");
    CHECK(px_pipe_interleaved_check(6, 2, 2, 4, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "layers=6") && strstr(err, "pp=2") && strstr(err, "virtual_stages=2"),
           "layers not divisible: %s", err);
    CHECK(px_pipe_interleaved_check(8, 2, 2, 4, err, sizeof(err)) == PX_OK, "8 on 2x2");
    CHECK(px_pipe_interleaved_check(8, 2, 2, 3, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "micro_batches=3") && strstr(err, "pp=2"), "m 3: %s", err);
    CHECK(px_pipe_interleaved_check(8, 2, 1, 4, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "virtual_stages=1"), "v 1: %s", err);

    /* broken lists are caught: a backward moved before its forward, and a
     * deadlock (stage 1 waits for a gradient before sending its activation) */
    px_pipe_schedule_t *sc = NULL;
    CHECK(px_pipe_schedule_create(PX_PIPE_GPIPE, 2, 2, &sc) == PX_OK, "create");
    px_pipe_action_t save = sc->stage[0].a[0];
    sc->stage[0].a[0] = sc->stage[0].a[sc->stage[0].n - 1];
    sc->stage[0].a[sc->stage[0].n - 1] = save;
    CHECK(px_pipe_schedule_check(sc, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "before"), "swapped: %s", err);
    px_pipe_schedule_destroy(sc);
    CHECK(px_pipe_schedule_create(PX_PIPE_1F1B, 2, 2, &sc) == PX_OK, "create");
    /* stage 0: <g0 first (before F0): a receive for a micro-batch without a slot */
    sc->stage[0].a[0] = (px_pipe_action_t){PX_PIPE_RECV_GRAD, 0};
    CHECK(px_pipe_schedule_check(sc, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT, "early recv");
    px_pipe_schedule_destroy(sc);
    /* a real deadlock: stage 0 of GPipe p=2 m=1 is F0 >a0 <g0 B0; as
     * F0 <g0 B0 >a0 its B0 waits for a gradient stage 1 cannot make before
     * the activation stage 0 sends only after B0 */
    CHECK(px_pipe_schedule_create(PX_PIPE_GPIPE, 2, 1, &sc) == PX_OK, "create");
    sc->stage[0].a[1] = (px_pipe_action_t){PX_PIPE_RECV_GRAD, 0};
    sc->stage[0].a[2] = (px_pipe_action_t){PX_PIPE_BWD, 0};
    sc->stage[0].a[3] = (px_pipe_action_t){PX_PIPE_SEND_ACT, 0};
    CHECK(px_pipe_schedule_check(sc, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "deadlock"), "deadlock: %s", err);
    px_pipe_schedule_destroy(sc);

    /* the one-stage list (no pipelining): F0 B0 F1 B1 F2 B2, one slot */
    CHECK(px_pipe_schedule_create_single(3, &sc) == PX_OK && sc->p == 1 && sc->v == 1,
          "create single");
    if (sc) {
        CHECK(px_pipe_schedule_check(sc, err, sizeof(err)) == PX_OK, "single: %s", err);
        CHECK(sc->stage[0].n == 6 && px_pipe_schedule_slots(sc, 0) == 1 &&
                  !px_pipe_schedule_split(sc),
              "single: %d actions, %d slots", sc->stage[0].n, px_pipe_schedule_slots(sc, 0));
        for (int i = 0; i < sc->stage[0].n; i++)
            CHECK(sc->stage[0].a[i].op == (i % 2 ? PX_PIPE_BWD : PX_PIPE_FWD) &&
                      sc->stage[0].a[i].micro == i / 2,
                  "single: action %d is %s %d", i, px_pipe_op_name(sc->stage[0].a[i].op),
                  sc->stage[0].a[i].micro);
        px_pipe_schedule_destroy(sc);
    }
    sc = NULL;
    CHECK(px_pipe_schedule_create_single(0, &sc) == PX_ERR_INVALID_ARGUMENT && !sc,
          "single with 0 micro-batches");

    int sl[4];
    CHECK(px_pipe_stage_layers(6, 4, NULL, sl, err, sizeof(err)) == PX_OK && sl[0] == 2 &&
           sl[1] == 2 && sl[2] == 1 && sl[3] == 1, "6 on 4");
    CHECK(px_pipe_stage_layers(6, 4, "1,1,2,2", sl, err, sizeof(err)) == PX_OK && sl[3] == 2,
           "spec");
    CHECK(px_pipe_stage_layers(6, 4, "1,1,2", sl, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "3 entries"), "short spec: %s", err);
    CHECK(px_pipe_stage_layers(6, 4, "2,2,2,2", sl, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "sums to 8"), "sum: %s", err);
    CHECK(px_pipe_stage_layers(3, 4, NULL, sl, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT,
           "too few layers");
    if (fails)
        return 1;
    printf("pipesched: %d schedules and %d interleaved checked\n", checked, ichecked);
    return 0;
}
