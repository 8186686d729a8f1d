/* px_rpc_client.c: the client side: channels (px_rpc_channel_t, plain or
 * TLS, with call metadata), blocking unary calls, server-streaming reads
 * (px_rpc_stream_t) and async unary calls.
 *
 * Blocking client calls use a private pluck queue each, so they work from
 * any thread with no px_rpc_cq. Async client calls run on a px_rpc_cq and
 * complete on its owner thread. */
#include "px_rpc_int.h"

#define PX_RPC_CHANNEL_MAX_MD 8
#define PX_RPC_MIN_CONNECT_MS 2000 /* px_rpc_channel_create_ex's shortest connect timeout */

struct px_rpc_channel {
    grpc_channel *channel;
    char *target;
    grpc_metadata md[PX_RPC_CHANNEL_MAX_MD]; /* sent with every call */
    size_t n_md;
};

px_status_t px_rpc_channel_create(const char *target, px_rpc_channel_t **channel_p)
{
    return px_rpc_channel_create_tls(target, NULL, channel_p);
}

px_status_t px_rpc_channel_create_tls(const char *target, const char *ca_file,
                                      px_rpc_channel_t **channel_p)
{
    return px_rpc_channel_create_ex(target, ca_file, 0, 0, channel_p);
}

px_status_t px_rpc_channel_create_ex(const char *target, const char *ca_file, int reconnect_ms,
                                     int idle_ms, px_rpc_channel_t **channel_p)
{
    px_rpc_channel_t *ch;
    grpc_channel_credentials *creds;
    char *ca = NULL;
    grpc_arg args[6];
    grpc_channel_args chargs;

    if (!target || !*target)
        return PX_ERR_INVALID_ARGUMENT;
    if (ca_file && !(ca = px_rpc_read_file(ca_file, 1 << 20))) {
        px_error("TLS: cannot read the CA file %s: %s", ca_file, strerror(errno));
        return PX_ERR_IO;
    }
    ch = calloc(1, sizeof(*ch));
    if (!ch) {
        free(ca);
        return PX_ERR_NO_MEMORY;
    }
    ch->target = strdup(target);
    if (!ch->target) {
        free(ca);
        free(ch);
        return PX_ERR_NO_MEMORY;
    }
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = PX_RPC_MAX_MSG_BYTES;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = PX_RPC_MAX_MSG_BYTES;
    chargs.num_args = 2;
    if (reconnect_ms > 0) {
        /* every wait between connection attempts (the first, the cap):
         * reconnect_ms, not gRPC's 1 s growing to 120 s; the shortest
         * connect timeout (20 s in gRPC) no less than PX_RPC_MIN_CONNECT_MS,
         * so a TLS handshake on a loaded host still completes */
        static const char *const keys[] = {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                                           GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                                           GRPC_ARG_MIN_RECONNECT_BACKOFF_MS};
        for (int i = 0; i < 3; i++) {
            args[2 + i].type = GRPC_ARG_INTEGER;
            args[2 + i].key = (char *)keys[i];
            args[2 + i].value.integer = reconnect_ms;
        }
        if (reconnect_ms < PX_RPC_MIN_CONNECT_MS)
            args[4].value.integer = PX_RPC_MIN_CONNECT_MS;
        chargs.num_args = 5;
    }
    if (idle_ms > 0) { /* the connection closed when idle, reopened by a call */
        args[chargs.num_args].type = GRPC_ARG_INTEGER;
        args[chargs.num_args].key = (char *)GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS;
        args[chargs.num_args].value.integer = idle_ms;
        chargs.num_args++;
    }
    chargs.args = args;
    grpc_init();
    if (ca) {
        creds = grpc_ssl_credentials_create(ca, NULL, NULL, NULL);
        free(ca);
    } else {
        creds = grpc_insecure_credentials_create();
    }
    ch->channel = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    *channel_p = ch;
    return PX_OK;
}

px_status_t px_rpc_channel_set_metadata(px_rpc_channel_t *ch, const char *key, const char *value)
{
    size_t i;
    if (!ch || !key || !*key || !value)
        return PX_ERR_INVALID_ARGUMENT;
    for (const char *k = key; *k; k++) {
        /* HTTP/2 header names: lowercase, digits, '-', '_', '.' */
        if (!((*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || *k == '-' || *k == '_' ||
              *k == '.')) {
            px_error("metadata key %s: only lowercase letters, digits, '-', '_' and '.'", key);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    for (i = 0; i < ch->n_md; i++) {
        if (GRPC_SLICE_LENGTH(ch->md[i].key) == strlen(key) &&
            !memcmp(GRPC_SLICE_START_PTR(ch->md[i].key), key, strlen(key)))
            break;
    }
    if (i == PX_RPC_CHANNEL_MAX_MD)
        return PX_ERR_NO_MEMORY;
    if (i < ch->n_md) {
        grpc_slice_unref(ch->md[i].value);
    } else {
        memset(&ch->md[i], 0, sizeof(ch->md[i]));
        ch->md[i].key = grpc_slice_from_copied_string(key);
        ch->n_md++;
    }
    ch->md[i].value = grpc_slice_from_copied_string(value);
    return PX_OK;
}

void px_rpc_channel_destroy(px_rpc_channel_t *ch)
{
    if (!ch)
        return;
    for (size_t i = 0; i < ch->n_md; i++) {
        grpc_slice_unref(ch->md[i].key);
        grpc_slice_unref(ch->md[i].value);
    }
    grpc_channel_destroy(ch->channel);
    free(ch->target);
    free(ch);
    grpc_shutdown();
}

const char *px_rpc_channel_target(const px_rpc_channel_t *ch)
{
    return ch->target;
}

void px_rpc_channel_reconnect_now(px_rpc_channel_t *ch)
{
    if (!ch)
        return;
    grpc_channel_reset_connect_backoff(ch->channel);
    (void)grpc_channel_check_connectivity_state(ch->channel, 1);
}

int px_rpc_channel_is_connected(px_rpc_channel_t *ch)
{
    return ch && grpc_channel_check_connectivity_state(ch->channel, 0) == GRPC_CHANNEL_READY;
}

static grpc_call *client_call_create(px_rpc_channel_t *ch, grpc_completion_queue *cq,
                                     const char *path, gpr_timespec deadline)
{
    grpc_slice method = grpc_slice_from_copied_string(path);
    grpc_call *call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               method, NULL, deadline, NULL);
    grpc_slice_unref(method);
    return call;
}

/* Shuts a private pluck queue down and destroys it. Every batch on it has
 * been plucked already, so the shutdown completes at once. */
static void pluck_queue_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
}

static int pluck(grpc_completion_queue *cq, void *tag)
{
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

/* The state of one client unary call's single batch. */
typedef struct unary_ops {
    grpc_metadata_array initial_md, trailing_md;
    grpc_byte_buffer *send_bb, *recv_bb;
    grpc_status_code code;
    grpc_slice details;
    grpc_op ops[6];
} unary_ops_t;

static void unary_ops_init(unary_ops_t *u, const px_rpc_channel_t *ch, grpc_byte_buffer *send_bb)
{
    memset(u, 0, sizeof(*u));
    grpc_metadata_array_init(&u->initial_md);
    grpc_metadata_array_init(&u->trailing_md);
    u->send_bb = send_bb;
    u->code = GRPC_STATUS_UNKNOWN;
    u->details = grpc_empty_slice();
    u->ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    /* gRPC copies (refs) the metadata when the batch starts. */
    u->ops[0].data.send_initial_metadata.count = ch->n_md;
    u->ops[0].data.send_initial_metadata.metadata = (grpc_metadata *)ch->md;
    u->ops[1].op = GRPC_OP_SEND_MESSAGE;
    u->ops[1].data.send_message.send_message = send_bb;
    u->ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    u->ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    u->ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->initial_md;
    u->ops[4].op = GRPC_OP_RECV_MESSAGE;
    u->ops[4].data.recv_message.recv_message = &u->recv_bb;
    u->ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    u->ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing_md;
    u->ops[5].data.recv_status_on_client.status = &u->code;
    u->ops[5].data.recv_status_on_client.status_details = &u->details;
}

static void unary_ops_destroy(unary_ops_t *u)
{
    grpc_metadata_array_destroy(&u->initial_md);
    grpc_metadata_array_destroy(&u->trailing_md);
    if (u->send_bb)
        grpc_byte_buffer_destroy(u->send_bb);
    if (u->recv_bb)
        grpc_byte_buffer_destroy(u->recv_bb);
    grpc_slice_unref(u->details);
}

/* After the batch: unpacks the response when the status is OK (a response
 * that does not parse turns into INTERNAL). Returns the final code and sets
 * *msg_p (malloc'd details) and *resp_p. */
static grpc_status_code unary_ops_finish(unary_ops_t *u, int ok, const char *path,
                                         const ProtobufCMessageDescriptor *desc,
                                         ProtobufCMessage **resp_p, char **msg_p)
{
    grpc_status_code code = u->code;
    *resp_p = NULL;
    *msg_p = NULL;
    if (!ok && code == GRPC_STATUS_OK)
        code = GRPC_STATUS_INTERNAL;
    if (code == GRPC_STATUS_OK) {
        *resp_p = px__rpc_unpack(desc, u->recv_bb);
        if (!*resp_p) {
            code = GRPC_STATUS_INTERNAL;
            if (asprintf(msg_p, "cannot parse the %s response", path) < 0)
                *msg_p = NULL;
            return code;
        }
    }
    *msg_p = px__rpc_slice_str(u->details);
    return code;
}

px_status_t px_rpc_call_unary(px_rpc_channel_t *channel, const char *path,
                              const ProtobufCMessage *request,
                              const ProtobufCMessageDescriptor *response_desc, int timeout_ms,
                              ProtobufCMessage **response_p, px_rpc_result_t *result_p)
{
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_call_error err;
    unary_ops_t u;
    ProtobufCMessage *resp = NULL;
    char *msg = NULL;
    grpc_status_code code;
    int ok;

    if (!channel || !path || !request || !response_desc)
        return PX_ERR_INVALID_ARGUMENT;
    cq = grpc_completion_queue_create_for_pluck(NULL);
    call = client_call_create(channel, cq, path, px__rpc_deadline(timeout_ms));
    unary_ops_init(&u, channel, px__rpc_pack(request));
    err = grpc_call_start_batch(call, u.ops, 6, &u, NULL);
    if (err != GRPC_CALL_OK) {
        px_error("%s: grpc_call_start_batch: %s", path, grpc_call_error_to_string(err));
        grpc_call_unref(call);
        unary_ops_destroy(&u);
        pluck_queue_destroy(cq);
        px__rpc_fill_result(result_p, GRPC_STATUS_INTERNAL, "cannot start the call");
        return PX_ERR_INTERNAL;
    }
    ok = pluck(cq, &u);
    code = unary_ops_finish(&u, ok, path, response_desc, &resp, &msg);
    grpc_call_unref(call);
    unary_ops_destroy(&u);
    pluck_queue_destroy(cq);
    if (result_p) {
        result_p->code = code;
        result_p->message = msg;
    } else {
        free(msg);
    }
    if (code != GRPC_STATUS_OK)
        return px_rpc_status_from_code(code);
    if (response_p)
        *response_p = resp;
    else
        protobuf_c_message_free_unpacked(resp, NULL);
    return PX_OK;
}

/* ----------------------------------------------------- client streaming */

struct px_rpc_stream {
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code code;
    grpc_slice details;
    grpc_byte_buffer *recv_bb;
    int status_pending;  /* RECV_STATUS_ON_CLIENT outstanding (tag: &code) */
    int status_done;
    int got_initial_md;
    int ended;           /* end of stream or error returned to the caller */
};

px_status_t px_rpc_stream_open(px_rpc_channel_t *channel, const char *path,
                               const ProtobufCMessage *request, int timeout_ms,
                               px_rpc_stream_t **stream_p)
{
    px_rpc_stream_t *st;
    grpc_op ops[3];
    grpc_byte_buffer *bb;
    grpc_call_error err;

    if (!channel || !path || !request)
        return PX_ERR_INVALID_ARGUMENT;
    st = calloc(1, sizeof(*st));
    if (!st)
        return PX_ERR_NO_MEMORY;
    grpc_metadata_array_init(&st->initial_md);
    grpc_metadata_array_init(&st->trailing_md);
    st->details = grpc_empty_slice();
    st->code = GRPC_STATUS_UNKNOWN;
    st->cq = grpc_completion_queue_create_for_pluck(NULL);
    st->call = client_call_create(channel, st->cq, path, px__rpc_deadline(timeout_ms));

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &st->trailing_md;
    ops[0].data.recv_status_on_client.status = &st->code;
    ops[0].data.recv_status_on_client.status_details = &st->details;
    err = grpc_call_start_batch(st->call, ops, 1, &st->code, NULL);
    if (err != GRPC_CALL_OK)
        goto err_call;
    st->status_pending = 1;

    bb = px__rpc_pack(request);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = channel->n_md;
    ops[0].data.send_initial_metadata.metadata = channel->md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    err = grpc_call_start_batch(st->call, ops, 3, st, NULL);
    if (err != GRPC_CALL_OK) {
        grpc_byte_buffer_destroy(bb);
        goto err_call;
    }
    /* The send batch completes once written or once the call failed; a
     * failure shows up as the status in px_rpc_stream_next. */
    pluck(st->cq, st);
    grpc_byte_buffer_destroy(bb);
    *stream_p = st;
    return PX_OK;

err_call:
    px_error("%s: grpc_call_start_batch: %s", path, grpc_call_error_to_string(err));
    px_rpc_stream_close(st);
    return PX_ERR_INTERNAL;
}

px_status_t px_rpc_stream_next(px_rpc_stream_t *st, const ProtobufCMessageDescriptor *desc,
                               ProtobufCMessage **message_p, px_rpc_result_t *result_p)
{
    grpc_op ops[2];
    size_t n = 0;
    grpc_call_error err;
    ProtobufCMessage *msg;
    char *text;
    int ok;

    if (!st || !desc)
        return PX_ERR_INVALID_ARGUMENT;
    if (st->ended) {
        px__rpc_fill_result(result_p, st->code, "stream already ended");
        return st->code == GRPC_STATUS_OK ? PX_ERR_NOT_FOUND : px_rpc_status_from_code(st->code);
    }
    memset(ops, 0, sizeof(ops));
    if (!st->got_initial_md) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n].data.recv_initial_metadata.recv_initial_metadata = &st->initial_md;
        n++;
        st->got_initial_md = 1;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = &st->recv_bb;
    n++;
    st->recv_bb = NULL;
    err = grpc_call_start_batch(st->call, ops, n, &st->recv_bb, NULL);
    if (err != GRPC_CALL_OK) {
        px_error("stream recv: grpc_call_start_batch: %s", grpc_call_error_to_string(err));
        px__rpc_fill_result(result_p, GRPC_STATUS_INTERNAL, "cannot read the stream");
        return PX_ERR_INTERNAL;
    }
    ok = pluck(st->cq, &st->recv_bb);
    if (ok && st->recv_bb) {
        msg = px__rpc_unpack(desc, st->recv_bb);
        grpc_byte_buffer_destroy(st->recv_bb);
        st->recv_bb = NULL;
        if (msg) {
            *message_p = msg;
            return PX_OK;
        }
        /* A message we cannot parse: end the call, report INTERNAL. */
        grpc_call_cancel(st->call, NULL);
        pluck(st->cq, &st->code);
        st->status_pending = 0;
        st->status_done = 1;
        st->ended = 1;
        st->code = GRPC_STATUS_INTERNAL;
        px__rpc_fill_result(result_p, GRPC_STATUS_INTERNAL, "cannot parse a stream message");
        return PX_ERR_INTERNAL;
    }
    if (st->recv_bb) {
        grpc_byte_buffer_destroy(st->recv_bb);
        st->recv_bb = NULL;
    }
    /* End of stream or failure: the status tells which. */
    pluck(st->cq, &st->code);
    st->status_pending = 0;
    st->status_done = 1;
    st->ended = 1;
    if (result_p) {
        text = px__rpc_slice_str(st->details);
        result_p->code = st->code;
        result_p->message = text;
    }
    return st->code == GRPC_STATUS_OK ? PX_ERR_NOT_FOUND : px_rpc_status_from_code(st->code);
}

void px_rpc_stream_close(px_rpc_stream_t *st)
{
    if (!st)
        return;
    if (st->status_pending) {
        grpc_call_cancel(st->call, NULL);
        pluck(st->cq, &st->code);
    }
    grpc_call_unref(st->call);
    pluck_queue_destroy(st->cq);
    grpc_metadata_array_destroy(&st->initial_md);
    grpc_metadata_array_destroy(&st->trailing_md);
    grpc_slice_unref(st->details);
    free(st);
}

/* ------------------------------------------------------- client async */

typedef struct async_call {
    rpc_tag_t tag;
    grpc_call *call;
    unary_ops_t u;
    char *path;
    const ProtobufCMessageDescriptor *desc;
    px_rpc_done_fn done;
    void *arg;
} async_call_t;

static void on_async_done(rpc_tag_t *tag, int ok)
{
    async_call_t *a = container_of(tag, async_call_t, tag);
    ProtobufCMessage *resp = NULL;
    char *msg = NULL;
    grpc_status_code code = unary_ops_finish(&a->u, ok, a->path, a->desc, &resp, &msg);
    a->done(a->arg, code, msg ? msg : "", code == GRPC_STATUS_OK ? resp : NULL);
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    free(msg);
    grpc_call_unref(a->call);
    unary_ops_destroy(&a->u);
    free(a->path);
    free(a);
}

px_status_t px_rpc_call_async(px_rpc_cq_t *cq, px_rpc_channel_t *channel, const char *path,
                              const ProtobufCMessage *request,
                              const ProtobufCMessageDescriptor *response_desc, int timeout_ms,
                              px_rpc_done_fn done, void *arg)
{
    async_call_t *a;
    grpc_call_error err;

    if (!cq || !channel || !path || !request || !response_desc || !done)
        return PX_ERR_INVALID_ARGUMENT;
    a = calloc(1, sizeof(*a));
    if (!a)
        return PX_ERR_NO_MEMORY;
    a->path = strdup(path);
    if (!a->path) {
        free(a);
        return PX_ERR_NO_MEMORY;
    }
    a->tag.fn = on_async_done;
    a->desc = response_desc;
    a->done = done;
    a->arg = arg;
    a->call = client_call_create(channel, cq->cq, path, px__rpc_deadline(timeout_ms));
    unary_ops_init(&a->u, channel, px__rpc_pack(request));
    err = grpc_call_start_batch(a->call, a->u.ops, 6, &a->tag, NULL);
    if (err != GRPC_CALL_OK) {
        px_error("%s: grpc_call_start_batch: %s", path, grpc_call_error_to_string(err));
        grpc_call_unref(a->call);
        unary_ops_destroy(&a->u);
        free(a->path);
        free(a);
        return PX_ERR_INTERNAL;
    }
    return PX_OK;
}
