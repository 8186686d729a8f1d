/* test_peerc.c: unit test of the Peer client (peerc.c): a call aimed at
 * this node runs the handler registered for its method at once and hands
 * its answer to `done` before returning; a call to another node goes out
 * as a gRPC call on that peer's channel (retried when asked); an unknown
 * node or a method with no local handler is PX_ERR_NOT_FOUND with `done`
 * not run; node events reach every subscriber, in order. The gRPC side
 * (calls.c) and the peer table (nodes.c) are replaced by the recorders
 * below. */
#include <stdio.h>
#include <string.h>

#include "daemon.h"

static int failures;

#define EXPECT(cond, ...) do { if (!(cond)) { failures++; \
    fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* ---- recorders in place of nodes.c and calls.c */

static px_peer_t peer_b;
static char sent_path[128];
static int sent_retry, sent_give_up;

px_peer_t *px_nodes_peer_by_name(px_daemon_t *d, const char *name)
{
    (void)d;
    return !strcmp(name, "b") ? &peer_b : NULL;
}

px_status_t px_daemon_call_async(px_daemon_t *d, px_rpc_channel_t *channel, const char *path,
                                 const ProtobufCMessage *request,
                                 const ProtobufCMessageDescriptor *response_desc,
                                 int timeout_ms, px_daemon_done_fn done, void *arg)
{
    (void)d, (void)channel, (void)request, (void)response_desc, (void)timeout_ms, (void)done;
    (void)arg;
    snprintf(sent_path, sizeof(sent_path), "%s", path);
    sent_retry = 0;
    return PX_OK;
}

px_status_t px_daemon_call_retry(px_daemon_t *d, px_rpc_channel_t *channel, const char *path,
                                 const ProtobufCMessage *request,
                                 const ProtobufCMessageDescriptor *response_desc,
                                 int timeout_ms, int give_up_ms, int idempotent,
                                 px_daemon_done_fn done, void *arg)
{
    (void)d, (void)channel, (void)request, (void)response_desc, (void)timeout_ms;
    (void)idempotent, (void)done, (void)arg;
    snprintf(sent_path, sizeof(sent_path), "%s", path);
    sent_retry = 1;
    sent_give_up = give_up_ms;
    return PX_OK;
}

/* ---- a local handler and a done function */

static char served_job[64];
static int served, answered;
static grpc_status_code answered_code;

static void serve_stop(px_daemon_t *d, const ProtobufCMessage *request, px_daemon_done_fn done,
                       void *arg)
{
    const Parallax__V1__StopRanksRequest *req = (const void *)request;
    Parallax__V1__StopRanksResponse resp = PARALLAX__V1__STOP_RANKS_RESPONSE__INIT;
    served++;
    snprintf(served_job, sizeof(served_job), "%s", req->job_id);
    if (done)
        done(d, arg, GRPC_STATUS_OK, NULL, &resp.base);
}

static void on_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                    const ProtobufCMessage *response)
{
    (void)d, (void)message;
    answered++;
    answered_code = code;
    EXPECT(arg == (void *)&served, "done got arg %p", arg);
    EXPECT(response && response->descriptor == &parallax__v1__stop_ranks_response__descriptor,
           "done got no StopRanksResponse");
}

static char events[256];

static void sub(px_daemon_t *d, px_node_event_t ev, const px_peer_t *peer, void *arg)
{
    size_t n = strlen(events);
    (void)d;
    if (n < sizeof(events) - 80)
        snprintf(events + n, sizeof(events) - n, "%.8s%d%.64s,", (const char *)arg, (int)ev,
                 peer ? peer->name : "-");
}

int main(void)
{
    static px_daemon_t d;
    Parallax__V1__StopRanksRequest req = PARALLAX__V1__STOP_RANKS_REQUEST__INIT;
    px_status_t status;

    d.cfg.name = "a";
    snprintf(peer_b.name, sizeof(peer_b.name), "b");
    peer_b.channel = (px_rpc_channel_t *)&peer_b; /* never used by the recorders */
    req.job_id = "a-7";
    req.reason = "test";

    /* to this node with no handler yet */
    status = px_peerc_call(&d, "a", "StopRanks", &req.base,
                           &parallax__v1__stop_ranks_response__descriptor, 1000, 0, 0, on_done,
                           &served);
    EXPECT(status == PX_ERR_NOT_FOUND && !answered, "no handler: status %d, answered %d",
           status, answered);

    px_peerc_serve(&d, "StopRanks", serve_stop);
    status = px_peerc_call(&d, "a", "StopRanks", &req.base,
                           &parallax__v1__stop_ranks_response__descriptor, 1000, 5000, 1, on_done,
                           &served);
    EXPECT(status == PX_OK, "local call: status %d", status);
    EXPECT(served == 1 && !strcmp(served_job, "a-7"), "handler ran %d times, job '%s'", served,
           served_job);
    EXPECT(answered == 1 && answered_code == GRPC_STATUS_OK, "done ran %d times, code %d",
           answered, answered_code);
    EXPECT(!sent_path[0], "a local call went out as gRPC: %s", sent_path);

    /* no done: the handler still runs */
    status = px_peerc_call(&d, "a", "StopRanks", &req.base, NULL, 1000, 0, 0, NULL, NULL);
    EXPECT(status == PX_OK && served == 2 && answered == 1, "done-less: %d %d %d", status,
           served, answered);

    /* to another node: gRPC, retried when give_up_ms > 0 */
    status = px_peerc_call(&d, "b", "StopRanks", &req.base,
                           &parallax__v1__stop_ranks_response__descriptor, 1000, 5000, 1, on_done,
                           &served);
    EXPECT(status == PX_OK && sent_retry && sent_give_up == 5000 &&
           !strcmp(sent_path, "/parallax.v1.Peer/StopRanks") && served == 2,
           "remote retried call: status %d path '%s' retry %d", status, sent_path, sent_retry);
    status = px_peerc_call(&d, "b", "LaunchRanks", &req.base,
                           &parallax__v1__stop_ranks_response__descriptor, 1000, 0, 0, on_done,
                           &served);
    EXPECT(status == PX_OK && !sent_retry && !strcmp(sent_path, "/parallax.v1.Peer/LaunchRanks"),
           "remote call: status %d path '%s' retry %d", status, sent_path, sent_retry);

    /* unknown node */
    status = px_peerc_call(&d, "zz", "StopRanks", &req.base,
                           &parallax__v1__stop_ranks_response__descriptor, 1000, 0, 0, on_done,
                           &served);
    EXPECT(status == PX_ERR_NOT_FOUND && answered == 1, "unknown node: status %d", status);

    /* node events: every subscriber, in order */
    px_nodes_subscribe(&d, sub, "x");
    px_nodes_subscribe(&d, sub, "y");
    px_nodes_emit(&d, PXD_NODE_DEAD, &peer_b);
    px_nodes_emit(&d, PXD_NODE_DEVICES, NULL);
    EXPECT(!strcmp(events, "x2b,y2b,x0-,y0-,"), "events delivered as '%s'", events);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("peer client tests passed\n");
    return 0;
}
