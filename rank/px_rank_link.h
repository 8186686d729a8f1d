/* px_rank_link.h: a rank process's link to its job's coordinator daemon
 * (daemon mode), over the Peer service (gRPC).
 *
 * The daemon spawns the rank with `--coord ADDR --job ID --rank R --node N`;
 * the rank registers its UCX address and blocks until the coordinator hands
 * back the whole table (rendezvous), then reports every step's figures. */
#ifndef PX_RANK_LINK_H
#define PX_RANK_LINK_H

#include <stddef.h>

#include "px_rpc.h"
#include "px_status.h"
#include "px_train.h"
#include "px_transport.h"

typedef struct px_rank_link px_rank_link_t;

/* Opens a channel to `coord_addr` (host:port of the coordinator's Peer
 * service). Strings are copied. */
px_status_t px_rank_link_open(const char *coord_addr, const char *job_id, int rank,
                              const char *node, px_rank_link_t **link_p);

/* Peer.RegisterRank: sends this rank's UCX address and waits (up to
 * timeout_ms) for the table. Fills `table` (caller frees). */
px_status_t px_rank_link_rendezvous(px_rank_link_t *link, const void *addr, size_t len,
                                    int timeout_ms, px_addr_table_t *table);

/* The same as a px_world_rendezvous_fn_t (px_world.h) for px_world_open:
 * `link` is the px_rank_link_t; deadline PX_CONNECT_TIMEOUT_MS. */
px_status_t px_rank_link_world_rendezvous(void *link, const void *addr, size_t len,
                                          px_addr_table_t *table);

/* Peer.ReportProgress with this step's figures and its MFU (0: none;
 * rank_main.c's step_mfu). *stop_p (optional) is set to
 * 1 when the coordinator says the job is ending. A failed report is logged
 * and returned but training may go on. */
px_status_t px_rank_link_report(px_rank_link_t *link, const px_step_report_t *report,
                                double mfu, int *stop_p);

void px_rank_link_close(px_rank_link_t *link); /* NULL no-op */

/* A channel to the coordinator's Peer service as the link uses: the cluster
 * token from PX_CLUSTER_TOKEN (set by the daemon) or the file PX_TOKEN_FILE
 * attached to every call, TLS when PX_TLS_CA_FILE is set. For other clients
 * of the coordinator in a rank (bench reports). Caller destroys it. */
px_status_t px_rank_link_channel_create(const char *coord_addr, px_rpc_channel_t **channel_p);

#endif
