/* calls.c: parallaxd's outgoing peer calls: counted async calls and calls
 * retried until they reach the peer.
 *
 * gRPC channels fail fast while they back off after a refused connection
 * (a peer that started a moment later, or restarted): a RankExited or
 * StopRanks lost that way would leave a job RUNNING forever, so those are
 * sent again until delivered. d->async_inflight counts calls on the wire and
 * retries waiting for their timer; shutdown waits for it to drop to 0.
 * Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "px_log.h"
#include "px_time.h"

typedef struct {
    px_daemon_t *d;
    px_daemon_done_fn done;
    void *arg;
} async_ctx_t;

static void on_async_done(void *arg, grpc_status_code code, const char *message,
                          const ProtobufCMessage *response)
{
    async_ctx_t *ctx = arg;
    ctx->d->async_inflight--;
    ctx->done(ctx->d, ctx->arg, code, message, response);
    free(ctx);
}

px_status_t px_daemon_call_async(px_daemon_t *d, px_rpc_channel_t *channel, const char *path,
                                 const ProtobufCMessage *request,
                                 const ProtobufCMessageDescriptor *response_desc,
                                 int timeout_ms, px_daemon_done_fn done, void *arg)
{
    async_ctx_t *ctx = malloc(sizeof(*ctx));
    px_status_t status;

    if (!ctx)
        return PX_ERR_NO_MEMORY;
    ctx->d = d;
    ctx->done = done;
    ctx->arg = arg;
    status = px_rpc_call_async(d->cq, channel, path, request, response_desc, timeout_ms,
                               on_async_done, ctx);
    if (status != PX_OK) {
        free(ctx);
        return status;
    }
    d->async_inflight++;
    return PX_OK;
}

typedef struct {
    px_daemon_t *d;
    px_rpc_channel_t *channel;          /* owned by the peer table until daemon exit */
    char path[128];
    ProtobufCMessage *request;          /* copy */
    const ProtobufCMessageDescriptor *response_desc;
    int timeout_ms;
    int64_t give_up_mono_ms;
    int idempotent;
    int attempts;
    px_daemon_done_fn done;
    void *arg;
    uv_timer_t timer;
} retry_ctx_t;

static void retry_free(uv_handle_t *h)
{
    retry_ctx_t *r = h->data;
    protobuf_c_message_free_unpacked(r->request, NULL);
    free(r);
}

static void retry_send(retry_ctx_t *r);

static void on_retry_timer(uv_timer_t *t)
{
    retry_ctx_t *r = t->data;
    r->d->async_inflight--;
    retry_send(r);
}

static void on_retry_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                          const ProtobufCMessage *response)
{
    retry_ctx_t *r = arg;
    int retryable = code == GRPC_STATUS_UNAVAILABLE ||
                    (r->idempotent && code == GRPC_STATUS_DEADLINE_EXCEEDED);

    if (retryable && !d->stopping && px_time_mono_ms() < r->give_up_mono_ms) {
        if (r->attempts == 1)
            px_info("%s to %s: %s; retrying", r->path, px_rpc_channel_target(r->channel),
                    message ? message : "unavailable");
        d->async_inflight++; /* the wait counts as in flight */
        uv_timer_start(&r->timer, on_retry_timer, PXD_RETRY_MS, 0);
        return;
    }
    if (code != GRPC_STATUS_OK && r->attempts > 1)
        px_warn("%s to %s: giving up after %d attempts", r->path,
                px_rpc_channel_target(r->channel), r->attempts);
    r->done(d, r->arg, code, message, response);
    uv_close((uv_handle_t *)&r->timer, retry_free);
}

static void retry_send(retry_ctx_t *r)
{
    px_status_t status;

    r->attempts++;
    status = px_daemon_call_async(r->d, r->channel, r->path, r->request, r->response_desc,
                                  r->timeout_ms, on_retry_done, r);
    if (status != PX_OK) {
        r->done(r->d, r->arg, px_rpc_code_from_status(status), px_status_str(status), NULL);
        uv_close((uv_handle_t *)&r->timer, retry_free);
    }
}

px_status_t px_daemon_call_retry(px_daemon_t *d, px_rpc_channel_t *channel, const char *path,
                                 const ProtobufCMessage *request,
                                 const ProtobufCMessageDescriptor *response_desc,
                                 int timeout_ms, int give_up_ms, int idempotent,
                                 px_daemon_done_fn done, void *arg)
{
    retry_ctx_t *r = calloc(1, sizeof(*r));

    if (!r)
        return PX_ERR_NO_MEMORY;
    r->request = px_msg_dup(request);
    if (!r->request) {
        free(r);
        return PX_ERR_NO_MEMORY;
    }
    r->d = d;
    r->channel = channel;
    snprintf(r->path, sizeof(r->path), "%s", path);
    r->response_desc = response_desc;
    r->timeout_ms = timeout_ms;
    r->give_up_mono_ms = px_time_mono_ms() + give_up_ms;
    r->idempotent = idempotent;
    r->done = done;
    r->arg = arg;
    uv_timer_init(d->loop, &r->timer);
    r->timer.data = r;
    r->attempts = 1;
    if (px_daemon_call_async(d, channel, path, r->request, response_desc, timeout_ms,
                             on_retry_done, r) != PX_OK) {
        uv_close((uv_handle_t *)&r->timer, retry_free);
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}

ProtobufCMessage *px_msg_dup(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    ProtobufCMessage *copy;
    if (!buf)
        return NULL;
    protobuf_c_message_pack(msg, buf);
    copy = protobuf_c_message_unpack(msg->descriptor, NULL, len, buf);
    free(buf);
    return copy;
}
