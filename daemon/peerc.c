/* peerc.c: the Peer plane's one client. Every daemon-to-daemon request a
 * node makes (LaunchRanks, StopRanks, RankExited) goes through
 * px_peerc_call with the target node's name: to another node it is a gRPC
 * call on that peer's channel (retried as calls.c does when asked); to
 * this node it is the local handler registered for the method
 * (px_peerc_serve), run at once, its answer handed to the same `done`. So
 * the coordinator (job*.c) and the supervisor never call each other: each
 * registers what it serves here and calls the other through this client,
 * whichever node the other is on.
 *
 * Invariants: a local handler answers through `done` at most once, before
 * it returns (done may be NULL: nobody waits). Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "px_log.h"

#define P_PEER "/parallax.v1.Peer/"

void px_peerc_serve(px_daemon_t *d, const char *method, px_peerc_local_fn fn)
{
    if (d->n_peerc_local >= PXD_PEERC_LOCAL_MAX) {
        px_error("peer client: more than %d local methods (%s)", PXD_PEERC_LOCAL_MAX, method);
        return;
    }
    d->peerc_local[d->n_peerc_local].method = method;
    d->peerc_local[d->n_peerc_local].fn = fn;
    d->n_peerc_local++;
}

px_status_t px_peerc_call(px_daemon_t *d, const char *node, const char *method,
                          const ProtobufCMessage *request,
                          const ProtobufCMessageDescriptor *response_desc, int timeout_ms,
                          int give_up_ms, int idempotent, px_daemon_done_fn done, void *arg)
{
    char path[96];
    px_peer_t *p;

    if (!strcmp(node, d->cfg.name)) {
        for (int i = 0; i < d->n_peerc_local; i++) {
            if (!strcmp(d->peerc_local[i].method, method)) {
                d->peerc_local[i].fn(d, request, done, arg);
                return PX_OK;
            }
        }
        px_error("peer client: no local handler of %s on node %s", method, node);
        return PX_ERR_NOT_FOUND;
    }
    p = px_nodes_peer_by_name(d, node);
    if (!p || !p->channel)
        return PX_ERR_NOT_FOUND;
    snprintf(path, sizeof(path), P_PEER "%s", method);
    if (give_up_ms > 0)
        return px_daemon_call_retry(d, p->channel, path, request, response_desc, timeout_ms,
                                    give_up_ms, idempotent, done ? done : px_peerc_ignore, arg);
    return px_daemon_call_async(d, p->channel, path, request, response_desc, timeout_ms,
                                done ? done : px_peerc_ignore, arg);
}

void px_peerc_ignore(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                     const ProtobufCMessage *response)
{
    (void)d, (void)arg, (void)code, (void)message, (void)response;
}

/* ------------------------------------------------------------ node events */

void px_nodes_subscribe(px_daemon_t *d, px_node_event_fn fn, void *arg)
{
    if (d->n_node_subs >= PXD_NODE_SUBS_MAX) {
        px_error("node events: more than %d subscribers", PXD_NODE_SUBS_MAX);
        return;
    }
    d->node_subs[d->n_node_subs].fn = fn;
    d->node_subs[d->n_node_subs].arg = arg;
    d->n_node_subs++;
}

void px_nodes_emit(px_daemon_t *d, px_node_event_t ev, const px_peer_t *peer)
{
    for (int i = 0; i < d->n_node_subs; i++)
        d->node_subs[i].fn(d, ev, peer, d->node_subs[i].arg);
}
