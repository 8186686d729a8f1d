/* test_groups.c: the engine's process groups (engine/groups.h) on real
 * communicators: N local ranks on the standalone bootstrap (px_launch).
 *
 *   test_groups LAYOUT      LAYOUT: dp2tp2pp2 (8 ranks) or dp4cp2ep4 (8 ranks)
 *
 * Every rank builds the groups and, on each group kind, all-reduces
 * (1 << world rank) as int64 and (world rank + 1) as double. The sums must
 * be exactly those of the members px_layout_group lists, AND of the members
 * an independent decomposition of the rank names (layout.h's definitions
 * written again in tests/planner/layout_ref.h), so a bug in px_layout_group cannot hide; the
 * communicator's rank must be the member's index along the group's axis;
 * the pipeline neighbours must be the ranks one stage away. Exit 0 when
 * every rank passed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "groups.h"
#include "layout.h"
#include "layout_ref.h"
#include "px_launch.h"
#include "px_log.h"

#define FAIL(...) do { fprintf(stderr, "FAIL rank %d: ", ctx->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); failures++; } while (0)

static int rank_fn(px_launch_rank_t *ctx)
{
    const px_layout_t *l = ctx->arg;
    px_groups_t *g = NULL;
    int failures = 0, world = ctx->world, members[64];
    px_status_t st;

    if (px_layout_world(l) != world) {
        FAIL("layout needs %d ranks, launched %d", px_layout_world(l), world);
        return 1;
    }
    st = px_groups_create(ctx->comm, l, &g);
    if (st != PX_OK) {
        FAIL("px_groups_create: %s", px_status_str(st));
        return 1;
    }
    for (int k = 0; k < PX_GROUP_NKINDS; k++) {
        px_comm_t *c = px_groups_comm(g, k);
        int64_t mask = (int64_t)1 << ctx->rank, want_mask = 0, ref_mask = 0;
        double val = ctx->rank + 1, want_sum = 0;
        int index = -1, n = px_layout_group(l, k, ctx->rank, members, &index, NULL), ref_n = 0;

        for (int j = 0; j < n; j++) {
            want_mask |= (int64_t)1 << members[j];
            want_sum += members[j] + 1;
        }
        for (int q = 0; q < world; q++)
            if (ref_same_group(l, k, ctx->rank, q)) {
                ref_mask |= (int64_t)1 << q;
                ref_n++;
            }
        if (want_mask != ref_mask || n != ref_n)
            FAIL("%s: px_layout_group lists %d ranks (mask %#llx), the coordinates name %d "
                 "(mask %#llx)", px_group_name(k), n, (long long)want_mask, ref_n,
                 (long long)ref_mask);
        if (!c) {
            FAIL("%s: no communicator", px_group_name(k));
            continue;
        }
        if (px_comm_size(c) != n || px_comm_rank(c) != index ||
            index != ref_index(l, k, ctx->rank))
            FAIL("%s: communicator rank %d of %d, the layout says %d of %d (axis index %d)",
                 px_group_name(k), px_comm_rank(c), px_comm_size(c), index, n,
                 ref_index(l, k, ctx->rank));
        st = px_allreduce(c, &mask, &mask, 1, PX_INT64, PX_SUM, -1);
        if (st == PX_OK)
            st = px_allreduce(c, &val, &val, 1, PX_FLOAT64, PX_SUM, -1);
        if (st != PX_OK) {
            FAIL("%s: all-reduce: %s (%s)", px_group_name(k), px_status_str(st),
                 px_comm_last_error(c));
            continue;
        }
        if (mask != ref_mask || val != want_sum)
            FAIL("%s: all-reduce gave mask %#llx sum %g, members are %#llx (sum %g)",
                 px_group_name(k), (long long)mask, val, (long long)ref_mask, want_sum);
    }
    /* pipeline neighbours: one stage (tp * cp * dp ranks) away */
    {
        int stride = l->tp * l->cp * l->dp, pp = ref_coord(l, ctx->rank).pp;
        int prev = pp > 0 ? ctx->rank - stride : -1;
        int next = pp + 1 < l->pp ? ctx->rank + stride : -1;
        if (px_groups_pp_prev(g) != prev || px_groups_pp_next(g) != next)
            FAIL("pipeline neighbours %d/%d, want %d/%d", px_groups_pp_prev(g),
                 px_groups_pp_next(g), prev, next);
        const px_coord_t *co = px_groups_coord(g);
        ref_coord_t rc = ref_coord(l, ctx->rank);
        if (co->dp != rc.dp || co->tp != rc.tp || co->pp != rc.pp || co->cp != rc.cp ||
            co->ep != rc.ep || co->edp != rc.edp || px_groups_rank(g) != ctx->rank ||
            px_groups_size(g) != world)
            FAIL("coordinates dp%d tp%d pp%d cp%d ep%d edp%d", co->dp, co->tp, co->pp, co->cp,
                 co->ep, co->edp);
    }
    /* nobody destroys its groups while a peer may still use them */
    st = px_barrier(ctx->comm, -1);
    if (st != PX_OK)
        FAIL("barrier: %s", px_status_str(st));
    px_groups_destroy(g);
    if (!failures)
        printf("rank %d: %d groups ok\n", ctx->rank, PX_GROUP_NKINDS);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    static const struct { const char *name; px_layout_t l; } layouts[] = {
        {"dp2tp2pp2", {.dp = 2, .tp = 2, .pp = 2, .cp = 1, .ep = 1}},
        {"dp4cp2ep4", {.dp = 4, .tp = 1, .pp = 1, .cp = 2, .ep = 4}},
        {"dp2tp2", {.dp = 2, .tp = 2, .pp = 1, .cp = 1, .ep = 2}},
    };
    px_launch_opts_t opts = {.use_watch = 1, .limit_s = 110};

    for (size_t i = 0; argc > 1 && i < sizeof(layouts) / sizeof(layouts[0]); i++) {
        if (strcmp(argv[1], layouts[i].name))
            continue;
        int n = px_layout_world(&layouts[i].l);
        int failed = px_launch(n, rank_fn, (void *)&layouts[i].l, &opts, NULL);
        printf("%s (%d ranks): %s\n", layouts[i].name, n, failed ? "FAILED" : "OK");
        return failed ? 1 : 0;
    }
    fprintf(stderr, "usage: test_groups dp2tp2pp2 | dp4cp2ep4 | dp2tp2\n");
    return 2;
}
