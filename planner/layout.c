/* layout.c: rank order, coordinates, groups and placement of a parallel
 * layout (layout.h).
 *
 * Invariant: every function is a pure function of the layout and its other
 * arguments; groups are enumerated from coordinates, never stored, so any
 * process (pctl, the daemon, a rank) derives the same groups. Any thread. */
#include "layout.h"

#include <stdarg.h>
#include <stdio.h>

static const char *group_names[PX_GROUP_NKINDS] = {"dp", "tp", "pp", "cp", "ep", "edp", "dpcp",
                                                   "mp"};

const char *px_group_name(px_group_kind_t kind)
{
    return kind >= 0 && kind < PX_GROUP_NKINDS ? group_names[kind] : "?";
}

void px_layout_init(px_layout_t *l)
{
    l->dp = l->tp = l->pp = l->cp = l->ep = 1;
}

int px_layout_world(const px_layout_t *l)
{
    return l->dp * l->tp * l->pp * l->cp;
}

px_status_t px_layout_check(const px_layout_t *l, char *errbuf, size_t errlen)
{
    const struct { const char *name; int v; } deg[] = {
        {"dp", l->dp}, {"tp", l->tp}, {"pp", l->pp}, {"cp", l->cp}, {"ep", l->ep}};
    /* in double: four degrees of 65536 make 2^64, which wraps a long long
     * (to 0, an accepted world); exact wherever the world is accepted */
    double world = 1;
    for (size_t i = 0; i < sizeof(deg) / sizeof(deg[0]); i++) {
        if (deg[i].v < 1 || deg[i].v > PX_LAYOUT_MAX_WORLD)
            return px_invalid(errbuf, errlen, "%s=%d is out of range (1..%d)", deg[i].name, deg[i].v,
                        PX_LAYOUT_MAX_WORLD);
        if (i < 4)
            world *= deg[i].v;
    }
    if (world > PX_LAYOUT_MAX_WORLD)
        return px_invalid(errbuf, errlen, "world=%.0f (dp=%d x tp=%d x pp=%d x cp=%d) exceeds %d ranks",
                    world, l->dp, l->tp, l->pp, l->cp, PX_LAYOUT_MAX_WORLD);
    if ((l->dp * l->cp) % l->ep)
        return px_invalid(errbuf, errlen, "ep=%d does not divide dp x cp = %d (dp=%d, cp=%d)", l->ep,
                    l->dp * l->cp, l->dp, l->cp);
    return PX_OK;
}

void px_layout_coord(const px_layout_t *l, int rank, px_coord_t *c)
{
    c->tp = rank % l->tp;
    rank /= l->tp;
    c->cp = rank % l->cp;
    rank /= l->cp;
    c->dp = rank % l->dp;
    c->pp = rank / l->dp;
    int i = c->cp + l->cp * c->dp; /* position in the dp x cp grid */
    c->ep = i % l->ep;
    c->edp = i / l->ep;
}

int px_layout_rank(const px_layout_t *l, const px_coord_t *c)
{
    return c->tp + l->tp * (c->cp + l->cp * (c->dp + l->dp * c->pp));
}

int px_layout_group_size(const px_layout_t *l, px_group_kind_t kind)
{
    switch (kind) {
    case PX_GROUP_DP: return l->dp;
    case PX_GROUP_TP: return l->tp;
    case PX_GROUP_PP: return l->pp;
    case PX_GROUP_CP: return l->cp;
    case PX_GROUP_EP: return l->ep;
    case PX_GROUP_EDP: return l->dp * l->cp / l->ep;
    case PX_GROUP_DPCP: return l->dp * l->cp;
    case PX_GROUP_MP: return l->tp * l->pp;
    default: return 0;
    }
}

/* The rank with coordinates `c` except that member j of the group of `kind`
 * replaces the coordinates along the group's axes. */
static int member_rank(const px_layout_t *l, px_group_kind_t kind, const px_coord_t *c, int j)
{
    px_coord_t m = *c;
    int i;
    switch (kind) {
    case PX_GROUP_DP: m.dp = j; break;
    case PX_GROUP_TP: m.tp = j; break;
    case PX_GROUP_PP: m.pp = j; break;
    case PX_GROUP_CP: m.cp = j; break;
    case PX_GROUP_EP: /* same edp: grid positions edp*ep .. edp*ep + ep-1 */
        i = c->edp * l->ep + j;
        m.cp = i % l->cp;
        m.dp = i / l->cp;
        break;
    case PX_GROUP_EDP: /* same ep: grid positions ep, ep + EP, ... */
        i = j * l->ep + c->ep;
        m.cp = i % l->cp;
        m.dp = i / l->cp;
        break;
    case PX_GROUP_DPCP:
        m.cp = j % l->cp;
        m.dp = j / l->cp;
        break;
    case PX_GROUP_MP:
        m.tp = j % l->tp;
        m.pp = j / l->tp;
        break;
    default: break;
    }
    return px_layout_rank(l, &m);
}

int px_layout_group(const px_layout_t *l, px_group_kind_t kind, int rank, int *members,
                    int *index_p, int *color_p)
{
    px_coord_t c;
    int n = px_layout_group_size(l, kind), index = 0, color = 0;

    px_layout_coord(l, rank, &c);
    for (int j = 0; j < n; j++) {
        int r = member_rank(l, kind, &c, j);
        if (members)
            members[j] = r;
        if (r == rank)
            index = j;
    }
    /* colour: the member-0 rank is unique per group of a kind */
    color = member_rank(l, kind, &c, 0);
    if (index_p)
        *index_p = index;
    if (color_p)
        *color_p = color;
    return n;
}

int px_layout_reporting_rank(const px_layout_t *l)
{
    px_coord_t c = {.pp = l->pp - 1};
    return px_layout_rank(l, &c);
}

px_status_t px_layout_place(const px_layout_t *l, const int *node_free, int nnodes,
                            int *node_of_rank, char *errbuf, size_t errlen)
{
    int world = px_layout_world(l), total = 0, largest = 0;
    int used[nnodes > 0 ? nnodes : 1];

    for (int n = 0; n < nnodes; n++) {
        used[n] = 0;
        total += node_free[n] > 0 ? node_free[n] : 0;
        if (node_free[n] > largest)
            largest = node_free[n];
    }
    if (l->tp > largest)
        return px_invalid(errbuf, errlen,
                    "tp=%d needs %d devices on one node (a tensor group stays on one node); the "
                    "largest node has %d free", l->tp, l->tp, largest);
    if (world > total)
        return px_invalid(errbuf, errlen,
                    "world=%d (dp=%d x tp=%d x pp=%d x cp=%d) needs %d devices; the cluster has "
                    "%d free", world, l->dp, l->tp, l->pp, l->cp, world, total);
    for (int g = 0; g < world / l->tp; g++) {
        int n = 0;
        while (n < nnodes && node_free[n] - used[n] < l->tp)
            n++;
        if (n == nnodes)
            return px_invalid(errbuf, errlen,
                        "world=%d with tp=%d: only %d whole tensor groups of %d fit on the free "
                        "devices of the %d nodes", world, l->tp, g, world / l->tp, nnodes);
        for (int t = 0; t < l->tp; t++)
            node_of_rank[g * l->tp + t] = n;
        used[n] += l->tp;
    }
    return PX_OK;
}

const char *px_layout_str(const px_layout_t *l, char *buf, size_t len)
{
    snprintf(buf, len, "dp=%d tp=%d pp=%d cp=%d ep=%d (world %d)", l->dp, l->tp, l->pp, l->cp,
             l->ep, px_layout_world(l));
    return buf;
}
