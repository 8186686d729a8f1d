/* groups.h: a rank's process groups, one communicator per group kind of the
 * job's parallel layout (layout.h: dp, tp, pp, cp, ep, edp, dpcp, mp), split
 * from the world communicator, plus the rank's coordinates and its pipeline
 * neighbours.
 *
 * Every group is a real communicator, a group of one included (px_comm_split
 * gives one), so strategies call collectives on it without special cases
 * (a collective on one rank is a copy). The single exception is a world
 * without a transport (a rank training alone, world NULL): then every group
 * is NULL, and callers treat NULL as a group of one.
 *
 * Member order: a group's communicator ranks its members by their index
 * along the group's axis (px_layout_group), so communicator rank i of the
 * pp group is stage i, of the dp group data-parallel index i.
 *
 * One thread (the rank's training thread), like the communicators. */
#ifndef PX_GROUPS_H
#define PX_GROUPS_H

#include "layout.h"
#include "px_status.h"
#include "px_transport.h"

typedef struct px_groups px_groups_t;

/* Builds the groups of `layout` (copied) for this rank of `world`:
 * PX_GROUP_NKINDS px_comm_split calls, each collective over the world, so
 * every rank of the world must call it with the same layout. Checks each
 * new communicator against the layout (size and members in order).
 * world NULL: a layout of one rank, every group NULL, no communication.
 * Errors: PX_ERR_INVALID_ARGUMENT (the layout fails px_layout_check, or its
 * world is not the communicator's size; logged naming the values), the
 * split's errors (timeout, peer failure, ...), PX_ERR_INTERNAL if a split
 * disagrees with the layout. *groups_p is written on success only; the
 * caller destroys it before the world. */
px_status_t px_groups_create(px_comm_t *world, const px_layout_t *layout, px_groups_t **groups_p);

/* Destroys every group communicator (not the world). NULL is a no-op. */
void px_groups_destroy(px_groups_t *groups);

/* The communicator of `kind` (borrowed until px_groups_destroy); NULL only
 * for a world without a transport, or a kind out of range. */
px_comm_t *px_groups_comm(const px_groups_t *groups, px_group_kind_t kind);

/* The world communicator given to create (borrowed; may be NULL). */
px_comm_t *px_groups_world(const px_groups_t *groups);

/* This rank in the world, and the world's size (1 with a NULL world). */
int px_groups_rank(const px_groups_t *groups);
int px_groups_size(const px_groups_t *groups);

/* The layout (a copy, owned by groups) and this rank's coordinates. */
const px_layout_t *px_groups_layout(const px_groups_t *groups);
const px_coord_t *px_groups_coord(const px_groups_t *groups);

/* World ranks of the previous and next pipeline stage's rank with this
 * rank's dp, tp and cp; -1 at the first (prev) and last (next) stage. */
int px_groups_pp_prev(const px_groups_t *groups);
int px_groups_pp_next(const px_groups_t *groups);

#endif
