/* drain.c: this node's drain state and `pctl node drain/resume/stop`
 * (Control.SetNodeState, relayed to the named node as Peer.SetNodeState).
 *
 * Draining is a fact of the node itself, like its devices: the node keeps
 * it in table node_state (node, draining, since_ms) of its own database, so
 * a restarted daemon is still draining, and sends it to its peers in every
 * heartbeat (NodeInfo.draining). Every daemon's placement (job_place.c)
 * and SubmitJob's device count (nodes.c) leave a draining node out; the
 * ranks already there run on until their jobs end. A change is sent to
 * the peers at once (a heartbeat round), so a coordinator places nothing
 * there after at most one round trip. Stop is the SIGTERM path
 * (px_daemon_stop): the node's ranks first, then the daemon exits 0.
 * Loop thread only. */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "px_log.h"
#include "px_time.h"
#include "store.h"

#define P_PEER "/parallax.v1.Peer/"
/* how long a relayed request may take, retries included: within pctl's
 * default 5 s deadline */
#define PXD_RELAY_TIMEOUT_MS 3000

static sqlite3 *db; /* the store's connection, after the first db_open */

static px_status_t db_open(px_store_t *store)
{
    if (db)
        return PX_OK;
    return px_store_table(store,
                          "CREATE TABLE IF NOT EXISTS node_state (node TEXT PRIMARY KEY, "
                          "draining INTEGER NOT NULL, since_ms INTEGER NOT NULL);",
                          "node state", &db);
}

px_status_t px_drain_load(px_daemon_t *d)
{
    sqlite3_stmt *st;
    int rc;

    PX_CHECK(db_open(d->store));
    if (sqlite3_prepare_v2(db, "SELECT draining FROM node_state WHERE node = ?1", -1, &st,
                           NULL) != SQLITE_OK) {
        px_error("node state: %s", sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    sqlite3_bind_text(st, 1, d->cfg.name, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    d->draining = rc == SQLITE_ROW && sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        px_error("node state: %s", sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    if (d->draining)
        px_warn("node %s is draining (as it was before this restart): no new ranks are placed "
                "here until `pctl node resume %s`", d->cfg.name, d->cfg.name);
    return PX_OK;
}

/* Records `draining` for this node (the row replaced) and applies it. */
static px_status_t drain_set(px_daemon_t *d, int draining)
{
    sqlite3_stmt *st;
    int rc;

    PX_CHECK(db_open(d->store));
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO node_state VALUES (?1, ?2, ?3)", -1, &st,
                           NULL) != SQLITE_OK) {
        px_error("node state: %s", sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    sqlite3_bind_text(st, 1, d->cfg.name, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, draining);
    sqlite3_bind_int64(st, 3, px_time_wall_ms());
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        px_error("node state: cannot record draining=%d: %s", draining, sqlite3_errmsg(db));
        return PX_ERR_IO;
    }
    if (d->draining != draining) {
        int held = 0;
        for (int i = 0; i < d->n_devices; i++)
            held += d->devices[i].job_id[0] != '\0';
        if (draining)
            px_info("node %s draining: no new ranks here; %d device%s still held by running "
                    "jobs", d->cfg.name, held, held == 1 ? "" : "s");
        else
            px_info("node %s resumed: jobs are placed here again", d->cfg.name);
    }
    d->draining = draining;
    px_nodes_beat_now(d);                    /* the peers' placement learns it now */
    px_nodes_emit(d, PXD_NODE_DEVICES, NULL); /* resumed: pending jobs may fit */
    return PX_OK;
}

/* Applies `req` to this node and answers `call` with the node's NodeInfo.
 * STOP begins the stop here (px_daemon_stop), so the answer reads STOPPING;
 * it goes out while the loop still runs (the ranks stop first). */
static void apply_here(px_daemon_t *d, px_rpc_call_t *call,
                       const Parallax__V1__SetNodeStateRequest *req)
{
    Parallax__V1__NodeInfo self;
    px_status_t status = PX_OK;

    if (d->stopping && req->action != PARALLAX__V1__NODE_ACTION__NODE_STOP) {
        px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "node %s is stopping", d->cfg.name);
        return;
    }
    if (req->action == PARALLAX__V1__NODE_ACTION__NODE_DRAIN ||
        req->action == PARALLAX__V1__NODE_ACTION__NODE_RESUME)
        status = drain_set(d, req->action == PARALLAX__V1__NODE_ACTION__NODE_DRAIN);
    if (status != PX_OK) {
        px_rpc_call_fail(call, px_rpc_code_from_status(status),
                         "node %s: cannot record its drain state in its database (%s)",
                         d->cfg.name, px_status_str(status));
        return;
    }
    if (req->action == PARALLAX__V1__NODE_ACTION__NODE_STOP && !d->stopping)
        px_daemon_stop(d, "pctl node stop"); /* the state below reads STOPPING */
    px_nodes_self_info(d, &self);
    self.now_ms = px_time_wall_ms(); /* last_seen_ms's clock, as ListNodes */
    px_rpc_call_reply(call, &self.base);
    px_nodes_info_free(&self);
}

/* INVALID_ARGUMENT (answered) unless `req` names a node and an action. */
static int bad_request(px_rpc_call_t *call, const Parallax__V1__SetNodeStateRequest *req)
{
    if (!req->node || !*req->node) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "node: empty name");
        return 1;
    }
    if (req->action < PARALLAX__V1__NODE_ACTION__NODE_DRAIN ||
        req->action > PARALLAX__V1__NODE_ACTION__NODE_STOP) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "action %d for node %s: expected drain (1), resume (2) or stop (3)",
                         (int)req->action, req->node);
        return 1;
    }
    return 0;
}

typedef struct {
    px_rpc_call_t *call;
    char node[PXD_NAME_MAX];
    char peer_addr[PXD_ADDR_MAX];
} relay_t;

static void on_relay_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                          const ProtobufCMessage *response)
{
    relay_t *r = arg;
    px_rpc_call_t *call = r->call;

    if (code == GRPC_STATUS_UNAVAILABLE || code == GRPC_STATUS_DEADLINE_EXCEEDED) {
        /* not gRPC's words: pctl would read them as this daemon unreachable */
        px_rpc_call_fail(call, code, "node %s did not answer at its peer address %s",
                         r->node, r->peer_addr);
        free(r);
        return;
    }
    free(r);
    if (code != GRPC_STATUS_OK) {
        px_rpc_call_fail(call, code, "%s", message ? message : "relayed call failed");
        return;
    }
    px_nodes_heard(d, (const Parallax__V1__NodeInfo *)response); /* this view is fresh too */
    px_rpc_call_reply(call, response);
}

void px_drain_control(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__SetNodeStateRequest *req = (const void *)request;
    px_peer_t *p;
    relay_t *r;

    if (bad_request(call, req))
        return;
    if (!strcmp(req->node, d->cfg.name)) {
        apply_here(d, call, req);
        return;
    }
    p = px_nodes_peer_by_name(d, req->node);
    if (!p) {
        char known[512];
        size_t off = (size_t)snprintf(known, sizeof(known), "%s", d->cfg.name);
        for (int i = 0; i < d->n_peers && off < sizeof(known); i++)
            if (d->peers[i].name[0])
                off += (size_t)snprintf(known + off, sizeof(known) - off, ", %s",
                                        d->peers[i].name);
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND,
                         "no node '%s' in the cluster (nodes: %s; `pctl nodes` lists them)",
                         req->node, known);
        return;
    }
    if (!p->alive) {
        px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE,
                         "node %s is not alive (silent for more than PX_PEER_DEAD_MS); its "
                         "state can be changed only while it runs", req->node);
        return;
    }
    r = malloc(sizeof(*r));
    if (!r) {
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    r->call = call;
    snprintf(r->node, sizeof(r->node), "%s", p->name);
    snprintf(r->peer_addr, sizeof(r->peer_addr), "%s", p->peer_addr);
    /* every action is idempotent: retried while the peer's channel backs
     * off (a daemon restarted a moment ago) */
    if (px_daemon_call_retry(d, p->channel, P_PEER "SetNodeState", request,
                             &parallax__v1__node_info__descriptor, PXD_RELAY_TIMEOUT_MS,
                             PXD_RELAY_TIMEOUT_MS, 1, on_relay_done, r) != PX_OK) {
        free(r);
        px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "cannot reach node %s", req->node);
    }
}

void px_drain_peer(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__SetNodeStateRequest *req = (const void *)request;

    if (bad_request(call, req))
        return;
    if (strcmp(req->node, d->cfg.name)) {
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "this is node %s, not %s", d->cfg.name,
                         req->node);
        return;
    }
    apply_here(d, call, req);
}
