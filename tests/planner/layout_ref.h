/* layout_ref.h: the parallel layout's definitions (planner/layout.h)
 * written a second time, as plainly as possible, for tests: a slip in
 * px_layout_coord or px_layout_group cannot hide behind a test that asks
 * the same code for its expectations. Used by tests/planner/test_layout.c
 * and tests/engine/test_groups.c. Header-only (static functions). */
#ifndef PX_TEST_LAYOUT_REF_H
#define PX_TEST_LAYOUT_REF_H

#include "layout.h"

/* The rank's coordinates by layout.h's formula, written here again so that
 * a slip in px_layout_coord cannot hide: rank = tp_r + tp * (cp_r + cp *
 * (dp_r + dp * pp_r)); grid i = cp_r + cp * dp_r; ep_r = i % ep, edp = i / ep. */
typedef struct { int tp, cp, dp, pp, i, ep, edp; } ref_coord_t;

static inline ref_coord_t ref_coord(const px_layout_t *l, int r)
{
    ref_coord_t c;
    c.tp = r % l->tp;
    c.cp = (r / l->tp) % l->cp;
    c.dp = (r / (l->tp * l->cp)) % l->dp;
    c.pp = r / (l->tp * l->cp * l->dp);
    c.i = c.cp + l->cp * c.dp;
    c.ep = c.i % l->ep;
    c.edp = c.i / l->ep;
    return c;
}

/* Whether a and b are in one group of `kind`, by layout.h's definitions. */
static inline int ref_same_group(const px_layout_t *l, px_group_kind_t kind, int a, int b)
{
    ref_coord_t x = ref_coord(l, a), y = ref_coord(l, b);
    switch (kind) {
    case PX_GROUP_DP: return x.tp == y.tp && x.pp == y.pp && x.cp == y.cp;
    case PX_GROUP_TP: return x.dp == y.dp && x.pp == y.pp && x.cp == y.cp;
    case PX_GROUP_PP: return x.dp == y.dp && x.tp == y.tp && x.cp == y.cp;
    case PX_GROUP_CP: return x.dp == y.dp && x.tp == y.tp && x.pp == y.pp;
    case PX_GROUP_EP: return x.tp == y.tp && x.pp == y.pp && x.edp == y.edp;
    case PX_GROUP_EDP: return x.tp == y.tp && x.pp == y.pp && x.ep == y.ep;
    case PX_GROUP_DPCP: return x.tp == y.tp && x.pp == y.pp;
    case PX_GROUP_MP: return x.dp == y.dp && x.cp == y.cp;
    default: return 0;
    }
}

/* A member's index along the group's axis (layout.h's member order). */
static inline int ref_index(const px_layout_t *l, px_group_kind_t kind, int r)
{
    ref_coord_t c = ref_coord(l, r);
    switch (kind) {
    case PX_GROUP_DP: return c.dp;
    case PX_GROUP_TP: return c.tp;
    case PX_GROUP_PP: return c.pp;
    case PX_GROUP_CP: return c.cp;
    case PX_GROUP_EP: return c.ep;
    case PX_GROUP_EDP: return c.edp;
    case PX_GROUP_DPCP: return c.i;
    case PX_GROUP_MP: return c.tp + l->tp * c.pp;
    default: return -1;
    }
}

#endif
