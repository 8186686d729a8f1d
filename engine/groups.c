/* groups.c: a rank's process groups from the job's layout (groups.h).
 *
 * Invariant: comm[k] is the px_comm_split of the world with the colour
 * px_layout_group gives for kind k and the key this rank's index in that
 * group, so communicator rank i is member i of the layout's group; create
 * checks this against px_comm_world_rank before anyone uses a group.
 * Groups are split in kind order on every rank (each split is collective
 * over the world). The rank's training thread. */
#include "groups.h"

#include <stdlib.h>

#include "px_coll.h"
#include "px_log.h"

struct px_groups {
    px_layout_t layout;
    px_coord_t coord;
    px_comm_t *world;
    int rank, size;
    int pp_prev, pp_next;
    px_comm_t *comm[PX_GROUP_NKINDS];
};

/* Checks the new communicator of `kind` against the layout's members. */
static px_status_t check_group(const px_groups_t *g, px_group_kind_t kind, const int *members,
                               int n)
{
    px_comm_t *c = g->comm[kind];

    if (px_comm_size(c) != n) {
        px_error("groups: %s group of rank %d has %d ranks, the layout says %d",
                 px_group_name(kind), g->rank, px_comm_size(c), n);
        return PX_ERR_INVALID_ARGUMENT; /* ranks started with different layouts */
    }
    for (int i = 0; i < n; i++)
        if (px_comm_world_rank(c, i) != members[i]) {
            px_error("groups: %s group of rank %d: member %d is world rank %d, the layout "
                     "says %d", px_group_name(kind), g->rank, i, px_comm_world_rank(c, i),
                     members[i]);
            return PX_ERR_INVALID_ARGUMENT;
        }
    return PX_OK;
}

static px_status_t split_all(px_groups_t *g)
{
    int *members = malloc((size_t)g->size * sizeof(int));
    px_status_t status = PX_OK;

    if (!members)
        return PX_ERR_NO_MEMORY;
    for (int k = 0; k < PX_GROUP_NKINDS && status == PX_OK; k++) {
        int index, color;
        int n = px_layout_group(&g->layout, k, g->rank, members, &index, &color);
        status = px_comm_split(g->world, color, index, &g->comm[k]);
        if (status != PX_OK)
            px_error("groups: splitting the %s groups failed: %s (%s)", px_group_name(k),
                     px_status_str(status), px_comm_last_error(g->world));
        else
            status = check_group(g, k, members, n);
    }
    free(members);
    return status;
}

px_status_t px_groups_create(px_comm_t *world, const px_layout_t *layout, px_groups_t **groups_p)
{
    char err[256], lbuf[96];
    px_groups_t *g;
    px_status_t status;
    int size = world ? px_comm_size(world) : 1;

    if (!layout || !groups_p)
        return PX_ERR_INVALID_ARGUMENT;
    if (px_layout_check(layout, err, sizeof(err)) != PX_OK) {
        px_error("groups: %s", err);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (px_layout_world(layout) != size) {
        px_error("groups: layout %s needs %d ranks, the world has %d",
                 px_layout_str(layout, lbuf, sizeof(lbuf)), px_layout_world(layout), size);
        return PX_ERR_INVALID_ARGUMENT;
    }
    g = calloc(1, sizeof(*g));
    if (!g)
        return PX_ERR_NO_MEMORY;
    g->layout = *layout;
    g->world = world;
    g->size = size;
    g->rank = world ? px_comm_rank(world) : 0;
    px_layout_coord(layout, g->rank, &g->coord);
    {
        px_coord_t c = g->coord;
        c.pp = g->coord.pp - 1;
        g->pp_prev = c.pp >= 0 ? px_layout_rank(layout, &c) : -1;
        c.pp = g->coord.pp + 1;
        g->pp_next = c.pp < layout->pp ? px_layout_rank(layout, &c) : -1;
    }
    if (world) {
        status = split_all(g);
        if (status != PX_OK)
            goto err_destroy;
    }
    *groups_p = g;
    return PX_OK;

err_destroy:
    px_groups_destroy(g);
    return status;
}

void px_groups_destroy(px_groups_t *groups)
{
    if (!groups)
        return;
    for (int k = PX_GROUP_NKINDS - 1; k >= 0; k--)
        px_comm_destroy(groups->comm[k]);
    free(groups);
}

px_comm_t *px_groups_comm(const px_groups_t *groups, px_group_kind_t kind)
{
    return groups && kind >= 0 && kind < PX_GROUP_NKINDS ? groups->comm[kind] : NULL;
}

px_comm_t *px_groups_world(const px_groups_t *groups) { return groups->world; }
int px_groups_rank(const px_groups_t *groups) { return groups->rank; }
int px_groups_size(const px_groups_t *groups) { return groups->size; }
const px_layout_t *px_groups_layout(const px_groups_t *groups) { return &groups->layout; }
const px_coord_t *px_groups_coord(const px_groups_t *groups) { return &groups->coord; }
int px_groups_pp_prev(const px_groups_t *groups) { return groups->pp_prev; }
int px_groups_pp_next(const px_groups_t *groups) { return groups->pp_next; }
