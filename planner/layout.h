/* layout.h: the parallel layout of a job: how its world of ranks is cut into
 * data-, tensor-, pipeline-, context- and expert-parallel groups.
 *
 * world = dp x tp x pp x cp. Rank order (Megatron-LM's): tp innermost, then
 * cp, then dp, pp outermost:
 *     rank = tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r))
 * so the ranks of one tensor group are consecutive (the daemon keeps them on
 * one node) and a pipeline stage is a contiguous block of dp x cp x tp ranks.
 *
 * Expert parallelism follows Megatron's expert grid: ep divides dp x cp; the
 * dp x cp ranks of one (tp, pp) position, numbered i = cp_r + cp * dp_r, form
 * dp x cp / ep expert groups of ep consecutive members: ep_r = i % ep,
 * edp_r = i / ep (the expert-data-parallel index: ranks with the same ep_r
 * hold replicas of the same experts). ep does not multiply the world size.
 *
 * Pure arithmetic: no transport, no daemon. Any thread. */
#ifndef PX_LAYOUT_H
#define PX_LAYOUT_H

#include <stddef.h>

#include "px_status.h"

#define PX_LAYOUT_MAX_WORLD 65536

/* Degrees of parallelism, each >= 1. */
typedef struct px_layout {
    int dp, tp, pp, cp, ep;
} px_layout_t;

/* A rank's position along every axis, each 0-based. */
typedef struct px_coord {
    int dp, tp, pp, cp;
    int ep;  /* index within its expert-parallel group */
    int edp; /* index of its expert-parallel group within the dp x cp grid */
} px_coord_t;

/* The process groups every rank derives from the layout (each one a
 * communicator split from the world in the engine, engine/groups.h). */
typedef enum px_group_kind {
    PX_GROUP_DP = 0, /* same tp, pp, cp; varies dp: gradient averaging, ZeRO shards */
    PX_GROUP_TP,     /* same dp, pp, cp; varies tp: tensor parallel */
    PX_GROUP_PP,     /* same dp, tp, cp; varies pp: the pipeline, stage order */
    PX_GROUP_CP,     /* same dp, tp, pp; varies cp: the context-parallel ring */
    PX_GROUP_EP,     /* same tp, pp, edp; varies ep: experts split across it */
    PX_GROUP_EDP,    /* same tp, pp, ep; varies edp: replicas of the same experts */
    PX_GROUP_DPCP,   /* same tp, pp; varies dp and cp: replicas of the dense
                        parameters (their gradients are averaged over it) */
    PX_GROUP_MP,     /* same dp, cp; varies tp and pp: the ranks that together
                        hold one copy of the model (global grad norm) */
    PX_GROUP_NKINDS
} px_group_kind_t;

/* "dp", "tp", "pp", "cp", "ep", "edp", "dpcp", "mp". */
const char *px_group_name(px_group_kind_t kind);

/* dp = tp = pp = cp = ep = 1. */
void px_layout_init(px_layout_t *l);

/* dp * tp * pp * cp (ep does not add ranks). */
int px_layout_world(const px_layout_t *l);

/* Checks the layout alone: every degree in 1..PX_LAYOUT_MAX_WORLD, the world
 * at most PX_LAYOUT_MAX_WORLD, ep divides dp * cp. On error writes a message
 * naming the values (e.g. "ep=3 does not divide dp x cp = 4") into errbuf
 * and returns PX_ERR_INVALID_ARGUMENT. */
px_status_t px_layout_check(const px_layout_t *l, char *errbuf, size_t errlen);

/* Coordinates of `rank` (0 <= rank < world) into *c. */
void px_layout_coord(const px_layout_t *l, int rank, px_coord_t *c);

/* The rank at c->dp, tp, pp, cp (c->ep / edp are ignored). */
int px_layout_rank(const px_layout_t *l, const px_coord_t *c);

/* Number of ranks in every group of `kind`. */
int px_layout_group_size(const px_layout_t *l, px_group_kind_t kind);

/* The group of `kind` that holds `rank`: writes its members (world ranks in
 * group order: the index of a member is its coordinate along the group's
 * axis, e.g. the stage for PP, i = cp_r + cp * dp_r for DPCP, tp_r + tp *
 * pp_r for MP) into members[group size] (may be NULL), this rank's index
 * into *index_p and a colour into *color_p (equal for exactly the members of
 * this group, distinct between groups of one kind, >= 0; for px_comm_split).
 * index_p / color_p may be NULL. Returns the group size. */
int px_layout_group(const px_layout_t *l, px_group_kind_t kind, int rank, int *members,
                    int *index_p, int *color_p);

/* The rank that reports a step's figures: the one that has them after the
 * step, the last pipeline stage's first tensor rank (dp = cp = tp = 0,
 * pp = pp - 1). */
int px_layout_reporting_rank(const px_layout_t *l);

/* Places the world's ranks on nodes: node_free[n] devices are free on node
 * n (0 <= n < nnodes, the preferred node first). Tensor groups are placed
 * whole, in rank order, each on the first node with room for all tp of its
 * ranks, so a tensor group never spans nodes. Writes node_of_rank[world].
 * Errors (PX_ERR_INVALID_ARGUMENT, message naming the values into errbuf):
 * tp larger than the largest node's free devices ("tp=4 needs 4 devices on
 * one node; the largest node has 2 free"), or not enough free devices in
 * all ("world=8 (dp=2 x tp=2 x pp=2 x cp=1) needs 8 devices; the cluster
 * has 6 free"). */
px_status_t px_layout_place(const px_layout_t *l, const int *node_free, int nnodes,
                            int *node_of_rank, char *errbuf, size_t errlen);

/* "dp=2 tp=2 pp=2 cp=1 ep=1 (world 8)" into buf; returns buf. */
const char *px_layout_str(const px_layout_t *l, char *buf, size_t len);

#endif
