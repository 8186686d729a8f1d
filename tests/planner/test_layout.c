/* test_layout.c: unit tests of the parallel layout (planner/layout.c).
 *
 * Coordinates round-trip for every layout up to 4 along each axis (and a
 * few large ones); every group of every kind partitions the world, holds
 * exactly the ranks its definition in layout.h names (checked from an
 * independent decomposition of the rank, not from px_layout_coord), lists
 * them in axis order, and has a colour no other group of its kind has;
 * hand-computed members for dp=2 x tp=2 x pp=2 and dp=4 x cp=2 x ep=4;
 * px_layout_check's limits (including worlds whose product overflows);
 * px_layout_place keeps tensor groups on one node and names the values when
 * it cannot; px_layout_reporting_rank.
 *
 * Usage: test_layout. Single-threaded, no I/O but stdout/stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "layout_ref.h"

#include "../px_check.h"

static const char *lstr(const px_layout_t *l)
{
    static char buf[96];
    return px_layout_str(l, buf, sizeof(buf));
}

/* Everything about one layout's coordinates and groups. */
static void check_layout(const px_layout_t *l)
{
    int world = px_layout_world(l);
    int *members = malloc(sizeof(int) * (size_t)world);
    int *other = malloc(sizeof(int) * (size_t)world);
    int *owner = malloc(sizeof(int) * (size_t)world); /* colour -> first rank seen with it */
    char err[200];

    CHECK(px_layout_check(l, err, sizeof(err)) == PX_OK, "%s: %s", lstr(l), err);
    for (int r = 0; r < world; r++) {
        px_coord_t c;
        ref_coord_t rc = ref_coord(l, r);
        px_layout_coord(l, r, &c);
        CHECK(c.tp == rc.tp && c.cp == rc.cp && c.dp == rc.dp && c.pp == rc.pp &&
               c.ep == rc.ep && c.edp == rc.edp,
               "%s rank %d: coord tp%d cp%d dp%d pp%d ep%d edp%d", lstr(l), r, c.tp, c.cp, c.dp,
               c.pp, c.ep, c.edp);
        CHECK(px_layout_rank(l, &c) == r, "%s: rank %d round-trips to %d", lstr(l), r,
               px_layout_rank(l, &c));
    }
    for (int k = 0; k < PX_GROUP_NKINDS; k++) {
        int size = px_layout_group_size(l, k), ngroups = 0;
        CHECK(size >= 1 && world % size == 0, "%s %s: size %d", lstr(l), px_group_name(k), size);
        for (int r = 0; r < world; r++)
            owner[r] = -1;
        for (int r = 0; r < world; r++) {
            int index = -1, color = -1, n, cnt = 0;
            n = px_layout_group(l, k, r, members, &index, &color);
            CHECK(n == size, "%s %s rank %d: %d members, size %d", lstr(l), px_group_name(k), r,
                   n, size);
            CHECK(color >= 0 && color < world, "%s %s rank %d: colour %d", lstr(l),
                   px_group_name(k), r, color);
            CHECK(index == ref_index(l, k, r) && members[index] == r,
                   "%s %s rank %d: index %d, want %d", lstr(l), px_group_name(k), r, index,
                   ref_index(l, k, r));
            /* exactly the ranks the definition names, in axis order */
            for (int q = 0; q < world; q++)
                if (ref_same_group(l, k, r, q)) {
                    int j = ref_index(l, k, q);
                    cnt++;
                    CHECK(j >= 0 && j < n && members[j] == q,
                           "%s %s rank %d: member %d is %d, want %d", lstr(l), px_group_name(k),
                           r, j, j >= 0 && j < n ? members[j] : -1, q);
                }
            CHECK(cnt == n, "%s %s rank %d: the definition names %d ranks, the layout %d",
                   lstr(l), px_group_name(k), r, cnt, n);
            /* every member agrees: same members, same colour */
            for (int j = 0; j < n && j < 1 + (n > 1); j++) {
                int oc = -1;
                px_layout_group(l, k, members[n - 1 - j], other, NULL, &oc);
                CHECK(oc == color && !memcmp(other, members, sizeof(int) * (size_t)n),
                       "%s %s: ranks %d and %d disagree", lstr(l), px_group_name(k), r,
                       members[n - 1 - j]);
            }
            if (owner[color] < 0) {
                owner[color] = r;
                ngroups++;
            } else {
                CHECK(ref_same_group(l, k, owner[color], r),
                       "%s %s: colour %d shared by ranks %d and %d of different groups",
                       lstr(l), px_group_name(k), color, owner[color], r);
            }
        }
        /* a partition: world / size groups, each with its own colour */
        CHECK(ngroups * size == world, "%s %s: %d colours of %d ranks for a world of %d",
               lstr(l), px_group_name(k), ngroups, size, world);
    }
    free(members);
    free(other);
    free(owner);
}

static void test_groups(void)
{
    int n = 0;
    for (int dp = 1; dp <= 4; dp++)
        for (int tp = 1; tp <= 4; tp++)
            for (int pp = 1; pp <= 4; pp++)
                for (int cp = 1; cp <= 4; cp++)
                    for (int ep = 1; ep <= dp * cp; ep++) {
                        if ((dp * cp) % ep)
                            continue;
                        px_layout_t l = {.dp = dp, .tp = tp, .pp = pp, .cp = cp, .ep = ep};
                        check_layout(&l);
                        n++;
                    }
    const px_layout_t big[] = {{8, 8, 4, 2, 16}, {16, 1, 1, 4, 64}, {3, 5, 7, 2, 6}};
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++, n++)
        check_layout(&big[i]);
    printf("groups: %d layouts\n", n);
}

static int members_are(const px_layout_t *l, px_group_kind_t k, int rank, const int *want, int n)
{
    int got[16];
    if (px_layout_group(l, k, rank, got, NULL, NULL) != n)
        return 0;
    return !memcmp(got, want, sizeof(int) * (size_t)n);
}

/* Members worked out by hand from the rank order tp, cp, dp, pp. */
static void test_known(void)
{
    px_layout_t a = {.dp = 2, .tp = 2, .pp = 2, .cp = 1, .ep = 1};
    /* rank 5: tp 1, dp 0, pp 1 */
    CHECK(members_are(&a, PX_GROUP_DP, 5, (int[]){5, 7}, 2), "dp2tp2pp2: dp group of 5");
    CHECK(members_are(&a, PX_GROUP_TP, 5, (int[]){4, 5}, 2), "dp2tp2pp2: tp group of 5");
    CHECK(members_are(&a, PX_GROUP_PP, 5, (int[]){1, 5}, 2), "dp2tp2pp2: pp group of 5");
    CHECK(members_are(&a, PX_GROUP_MP, 2, (int[]){2, 3, 6, 7}, 4), "dp2tp2pp2: mp group of 2");
    CHECK(members_are(&a, PX_GROUP_DPCP, 6, (int[]){4, 6}, 2), "dp2tp2pp2: dpcp group of 6");
    CHECK(members_are(&a, PX_GROUP_CP, 3, (int[]){3}, 1), "dp2tp2pp2: cp group of 3");
    px_layout_t b = {.dp = 4, .tp = 1, .pp = 1, .cp = 2, .ep = 4};
    /* rank = cp + 2 dp; grid i = rank; ep groups i / 4, edp groups i % 4 */
    CHECK(members_are(&b, PX_GROUP_EP, 5, (int[]){4, 5, 6, 7}, 4), "dp4cp2ep4: ep group of 5");
    CHECK(members_are(&b, PX_GROUP_EDP, 5, (int[]){1, 5}, 2), "dp4cp2ep4: edp group of 5");
    CHECK(members_are(&b, PX_GROUP_DP, 5, (int[]){1, 3, 5, 7}, 4), "dp4cp2ep4: dp group of 5");
    CHECK(members_are(&b, PX_GROUP_CP, 5, (int[]){4, 5}, 2), "dp4cp2ep4: cp group of 5");
}

static void test_check(void)
{
    char err[200];
    const struct { px_layout_t l; const char *want; } bad[] = {
        {{2, 1, 1, 2, 3}, "ep=3 does not divide dp x cp = 4"},
        {{0, 1, 1, 1, 1}, "dp=0 is out of range"},
        {{1, 1, 1, 1, 70000}, "ep=70000 is out of range"},
        {{256, 256, 2, 1, 1}, "world=131072 (dp=256 x tp=256 x pp=2 x cp=1) exceeds 65536"},
        /* products past 2^63 must not wrap around into an accepted world */
        {{65536, 65536, 65536, 65536, 1}, "world=18446744073709551616 (dp=65536 x tp=65536 "
                                          "x pp=65536 x cp=65536) exceeds 65536"},
        {{65536, 1, 1, 65536, 1}, "world=4294967296 (dp=65536"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        px_status_t st = px_layout_check(&bad[i].l, err, sizeof(err));
        CHECK(st == PX_ERR_INVALID_ARGUMENT && strstr(err, bad[i].want),
               "case %zu: status %d '%s' wants '%s'", i, st, err, bad[i].want);
    }
    px_layout_t ok = {65536, 1, 1, 1, 65536};
    CHECK(px_layout_check(&ok, err, sizeof(err)) == PX_OK, "dp=ep=65536: %s", err);
    px_layout_t one;
    px_layout_init(&one);
    CHECK(px_layout_world(&one) == 1 && one.ep == 1, "px_layout_init");
    px_layout_t s = {2, 2, 2, 1, 1};
    CHECK(!strcmp(lstr(&s), "dp=2 tp=2 pp=2 cp=1 ep=1 (world 8)"), "str: %s", lstr(&s));
    CHECK(!strcmp(px_group_name(PX_GROUP_DPCP), "dpcp") && !strcmp(px_group_name(PX_GROUP_MP),
           "mp") && !strcmp(px_group_name(PX_GROUP_NKINDS), "?"), "group names");
}

static void test_place(void)
{
    char err[256];
    int node[64];
    px_layout_t l = {.dp = 2, .tp = 2, .pp = 2, .cp = 1, .ep = 1};
    /* 4 + 2 + 2 free: two tensor groups on node 0, one on each other */
    int free1[] = {4, 2, 2};
    CHECK(px_layout_place(&l, free1, 3, node, err, sizeof(err)) == PX_OK, "4+2+2: %s", err);
    const int want1[] = {0, 0, 0, 0, 1, 1, 2, 2};
    CHECK(!memcmp(node, want1, sizeof(want1)), "4+2+2: %d %d %d %d %d %d %d %d", node[0],
           node[1], node[2], node[3], node[4], node[5], node[6], node[7]);
    /* 3 + 3 + 2 = 8 free, but one device of each 3-node is left over: only 3
     * whole tensor groups of 2 fit */
    int frag[] = {3, 3, 2};
    err[0] = 0;
    CHECK(px_layout_place(&l, frag, 3, node, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "only 3 whole tensor groups of 4 fit"), "3+3+2: %s", err);
    int free2[] = {4, 4};
    CHECK(px_layout_place(&l, free2, 2, node, err, sizeof(err)) == PX_OK, "4+4: %s", err);
    const int want2[] = {0, 0, 0, 0, 1, 1, 1, 1};
    CHECK(!memcmp(node, want2, sizeof(want2)), "4+4: rank order fills node 0 first");
    px_layout_t t4 = {.dp = 1, .tp = 4, .pp = 1, .cp = 1, .ep = 1};
    int free3[] = {2, 2, 2};
    err[0] = 0;
    CHECK(px_layout_place(&t4, free3, 3, node, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "tp=4 needs 4 devices on one node") && strstr(err, "largest node has 2"),
           "tp too large: %s", err);
    int free4[] = {2, 2, 2};
    err[0] = 0;
    CHECK(px_layout_place(&l, free4, 3, node, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "world=8 (dp=2 x tp=2 x pp=2 x cp=1) needs 8 devices; the cluster has 6 "
                  "free"), "too few: %s", err);
    px_layout_t d3 = {.dp = 3, .tp = 2, .pp = 1, .cp = 1, .ep = 1};
    int free5[] = {3, 3};
    err[0] = 0;
    CHECK(px_layout_place(&d3, free5, 2, node, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
           strstr(err, "only 2 whole tensor groups of 3 fit"), "fragmented: %s", err);
}

static void test_reporting(void)
{
    const struct { px_layout_t l; int want; } c[] = {
        {{2, 2, 2, 1, 1}, 4}, /* pp 1, dp cp tp 0: 2 * 1 * 2 */
        {{4, 1, 1, 2, 4}, 0},
        {{1, 1, 4, 1, 1}, 3},
        {{2, 4, 3, 2, 1}, 32}, /* 4 * 2 * 2 * 2 */
        {{1, 1, 1, 1, 1}, 0},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        int r = px_layout_reporting_rank(&c[i].l);
        px_coord_t co;
        px_layout_coord(&c[i].l, r, &co);
        CHECK(r == c[i].want && co.pp == c[i].l.pp - 1 && co.dp == 0 && co.tp == 0 &&
               co.cp == 0, "%s: reporting rank %d, want %d", lstr(&c[i].l), r, c[i].want);
    }
}

int main(void)
{
    test_groups();
    test_known();
    test_check();
    test_place();
    test_reporting();
    printf(fails ? "FAILED (%d)\n" : "OK\n", fails);
    return fails ? 1 : 0;
}
