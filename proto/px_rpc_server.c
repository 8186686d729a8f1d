/* px_rpc_server.c: the server (px_rpc_server_t) and its calls
 * (px_rpc_call_t): unary and server-streaming handlers, health service,
 * authorisation and observer hooks.
 *
 * Every registered method keeps one request armed and re-arms it as soon as
 * a call arrives; a generic request catches unknown methods (answered
 * UNIMPLEMENTED). Each accepted call keeps a RECV_CLOSE_ON_SERVER batch
 * outstanding, which is how cancellation is seen. A call struct is freed
 * only when the owner has ended it AND no batch is outstanding;
 * `outstanding` counts those batches. Streaming sends are queued and sent
 * one at a time; SEND_STATUS_FROM_SERVER goes after the last queued
 * message. Completions run on the owner thread of its px_rpc_cq. */
#include "px_rpc_int.h"

#define HEALTH_CHECK_PATH "/grpc.health.v1.Health/Check"
#define HEALTH_WATCH_PATH "/grpc.health.v1.Health/Watch"

typedef struct send_item {
    struct send_item *next;
    grpc_byte_buffer *bb;
} send_item_t;

typedef struct server_method {
    px_rpc_method_t m;  /* path strdup'd */
    int builtin;        /* grpc.health.v1: answered without authorization */
    void *registered;   /* grpc_server_register_method handle */
    px_rpc_call_t *armed;
} server_method_t;

struct px_rpc_server {
    px_rpc_cq_t *cq;
    grpc_server *server;
    server_method_t *methods;
    size_t n_methods;
    px_rpc_call_t *generic_armed;
    px_rpc_call_t *calls;      /* accepted calls (doubly linked) */
    int *ports;
    size_t n_addrs;
    int shutting_down;
    int shutdown_done;
    int inflight;              /* armed requests + outstanding batches */
    rpc_tag_t shutdown_tag;
    px_rpc_authorize_fn authorize;
    void *authorize_arg;
    px_rpc_observe_fn observe; /* px_rpc_server_set_observer */
    void *observe_arg;
};

struct px_rpc_call {
    px_rpc_server_t *server;        /* NULL once inert (server destroyed) */
    server_method_t *method;        /* NULL for the generic request */
    grpc_call *call;
    grpc_call_details details;      /* generic only */
    grpc_metadata_array req_md;
    grpc_byte_buffer *payload;
    gpr_timespec deadline;
    char *peer;
    px_rpc_call_t *prev, *next;     /* in server->calls once accepted */

    rpc_tag_t request_tag, close_tag, send_tag, status_tag;
    int close_cancelled;            /* out of RECV_CLOSE_ON_SERVER */
    int outstanding;                /* batches in flight */
    int accepted;
    int cancelled;
    int ended;                      /* owner ended it (reply/fail/finish) */
    int initial_md_sent;
    int sending;
    int finish_requested;           /* status waits for the send queue */
    grpc_status_code final_code;    /* status sent once the queue is empty */
    int cancel_notified;
    int status_started;
    grpc_slice status_details;
    int have_status_details;
    send_item_t *sq_head, *sq_tail;
    void (*on_cancel)(px_rpc_call_t *call, void *arg);
    void *on_cancel_arg;
    double start_s;                 /* accepted at (px_time_mono_s), for the observer */
};

static void call_free(px_rpc_call_t *c)
{
    send_item_t *it;
    while ((it = c->sq_head)) {
        c->sq_head = it->next;
        grpc_byte_buffer_destroy(it->bb);
        free(it);
    }
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->have_status_details)
        grpc_slice_unref(c->status_details);
    grpc_metadata_array_destroy(&c->req_md);
    grpc_call_details_destroy(&c->details);
    if (c->peer)
        gpr_free(c->peer);
    free(c);
}

static void call_unlink(px_rpc_call_t *c)
{
    px_rpc_server_t *s = c->server;
    if (!s || !c->accepted)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* Frees the call once the owner ended it and nothing is in flight; during
 * server shutdown releases the grpc_call of an idle call the owner still
 * holds (it becomes inert). */
static void call_maybe_release(px_rpc_call_t *c)
{
    if (c->outstanding > 0)
        return;
    if (c->ended) {
        call_unlink(c);
        if (c->call)
            grpc_call_unref(c->call);
        call_free(c);
        return;
    }
    if (c->server && c->server->shutting_down && c->call) {
        grpc_call_unref(c->call);
        c->call = NULL;
        c->cancelled = 1;
    }
}

static void server_batch_done(px_rpc_call_t *c)
{
    c->outstanding--;
    if (c->server)
        c->server->inflight--;
}

static px_status_t call_start_batch(px_rpc_call_t *c, const grpc_op *ops, size_t n, rpc_tag_t *tag)
{
    grpc_call_error err = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (err != GRPC_CALL_OK) {
        px_error("grpc_call_start_batch: %s", grpc_call_error_to_string(err));
        return PX_ERR_INTERNAL;
    }
    c->outstanding++;
    if (c->server)
        c->server->inflight++;
    return PX_OK;
}

static void call_send_next(px_rpc_call_t *c);

static void on_send_done(rpc_tag_t *tag, int ok)
{
    px_rpc_call_t *c = container_of(tag, px_rpc_call_t, send_tag);
    send_item_t *it = c->sq_head;
    server_batch_done(c);
    c->sending = 0;
    c->sq_head = it->next;
    if (!c->sq_head)
        c->sq_tail = NULL;
    grpc_byte_buffer_destroy(it->bb);
    free(it);
    if (!ok)
        c->cancelled = 1;
    call_send_next(c);
    call_maybe_release(c);
}

static void on_status_done(rpc_tag_t *tag, int ok)
{
    px_rpc_call_t *c = container_of(tag, px_rpc_call_t, status_tag);
    server_batch_done(c);
    call_maybe_release(c);
}

/* Starts SEND_STATUS_FROM_SERVER (with initial metadata if not yet sent and
 * the unary response `bb`, if any). */
static px_status_t call_send_status(px_rpc_call_t *c, grpc_status_code code, grpc_byte_buffer *bb)
{
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!c->initial_md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->initial_md_sent = 1;
    }
    if (bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = bb;
        n++;
    }
    if (c->server && c->server->observe && c->accepted) /* once: the status is sent once */
        c->server->observe(c->server->observe_arg,
                           c->method ? c->method->m.path : "unknown", code,
                           px_time_mono_s() - c->start_s);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details =
        c->have_status_details ? &c->status_details : NULL;
    n++;
    c->status_started = 1;
    return call_start_batch(c, ops, n, &c->status_tag);
}

/* Streaming: sends the head of the queue if nothing is in flight, else the
 * final status once the queue is empty and finish was asked. */
static void call_send_next(px_rpc_call_t *c)
{
    if (c->sending || !c->call)
        return;
    if (c->sq_head && !c->cancelled) {
        grpc_op ops[2];
        size_t n = 0;
        memset(ops, 0, sizeof(ops));
        if (!c->initial_md_sent) {
            ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
            n++;
            c->initial_md_sent = 1;
        }
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->sq_head->bb;
        n++;
        if (call_start_batch(c, ops, n, &c->send_tag) == PX_OK) {
            c->sending = 1;
            return;
        }
        c->cancelled = 1;
    }
    /* Cancelled: drop whatever is still queued. */
    while (c->cancelled && c->sq_head) {
        send_item_t *it = c->sq_head;
        c->sq_head = it->next;
        grpc_byte_buffer_destroy(it->bb);
        free(it);
    }
    if (!c->sq_head)
        c->sq_tail = NULL;
    if (c->finish_requested && !c->status_started && !c->sq_head)
        call_send_status(c, c->final_code, NULL);
}

static void on_close_done(rpc_tag_t *tag, int ok)
{
    px_rpc_call_t *c = container_of(tag, px_rpc_call_t, close_tag);
    server_batch_done(c);
    if (!ok || c->close_cancelled) {
        c->cancelled = 1;
        if (!c->cancel_notified && !c->ended && c->on_cancel) {
            c->cancel_notified = 1;
            /* Hold the call: the callback may end it. */
            c->outstanding++;
            c->on_cancel(c, c->on_cancel_arg);
            c->outstanding--;
        }
    }
    call_maybe_release(c);
}

static px_status_t server_arm(px_rpc_server_t *s, server_method_t *m);

static void call_dispatch(px_rpc_call_t *c)
{
    server_method_t *m = c->method;
    px_rpc_server_t *s = c->server;
    ProtobufCMessage *req = NULL;
    grpc_op op;

    c->accepted = 1;
    c->start_s = px_time_mono_s();
    c->next = s->calls;
    if (s->calls)
        s->calls->prev = c;
    s->calls = c;
    c->peer = grpc_call_get_peer(c->call);

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    if (call_start_batch(c, &op, 1, &c->close_tag) != PX_OK) {
        px_rpc_call_fail(c, GRPC_STATUS_INTERNAL, "cannot start the call");
        return;
    }

    if (!m) {
        char *method = px__rpc_slice_str(c->details.method);
        px_debug("unknown method %s from %s", method ? method : "?", c->peer);
        px_rpc_call_fail(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method %s",
                         method ? method : "?");
        free(method);
        return;
    }
    if (s->authorize && !m->builtin) {
        char why[512] = "";
        grpc_status_code code = s->authorize(c, m->m.path, s->authorize_arg, why, sizeof(why));
        if (code != GRPC_STATUS_OK) {
            px_debug("%s from %s refused: %s", m->m.path, c->peer, why);
            px_rpc_call_fail(c, code, "%s", why[0] ? why : "not authorized");
            return;
        }
    }
    if (m->m.request) {
        req = px__rpc_unpack(m->m.request, c->payload);
        /* The bytes are no longer needed once unpacked. */
        if (c->payload) {
            grpc_byte_buffer_destroy(c->payload);
            c->payload = NULL;
        }
        if (!req) {
            px_rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "cannot parse the %s request",
                             m->m.path);
            return;
        }
    }
    m->m.handler(c, req, m->m.arg);
    if (req)
        protobuf_c_message_free_unpacked(req, NULL);
}

static void on_request(rpc_tag_t *tag, int ok)
{
    px_rpc_call_t *c = container_of(tag, px_rpc_call_t, request_tag);
    px_rpc_server_t *s = c->server;

    s->inflight--;
    if (c->method)
        c->method->armed = NULL;
    else
        s->generic_armed = NULL;
    if (!ok || s->shutting_down) {
        if (ok && c->call) {
            grpc_call_cancel(c->call, NULL);
            grpc_call_unref(c->call);
        }
        call_free(c);
        return;
    }
    /* Re-arm first, so the next call on this method can arrive. */
    if (server_arm(s, c->method) != PX_OK)
        px_error("cannot re-arm the request for %s", c->method ? c->method->m.path : "*");
    call_dispatch(c);
}

/* Arms one request for method `m` (NULL: the generic request). */
static px_status_t server_arm(px_rpc_server_t *s, server_method_t *m)
{
    px_rpc_call_t *c = calloc(1, sizeof(*c));
    grpc_call_error err;
    if (!c)
        return PX_ERR_NO_MEMORY;
    c->server = s;
    c->method = m;
    c->request_tag.fn = on_request;
    c->close_tag.fn = on_close_done;
    c->send_tag.fn = on_send_done;
    c->status_tag.fn = on_status_done;
    grpc_metadata_array_init(&c->req_md);
    grpc_call_details_init(&c->details);
    if (m) {
        err = grpc_server_request_registered_call(s->server, m->registered, &c->call,
                                                  &c->deadline, &c->req_md, &c->payload,
                                                  s->cq->cq, s->cq->cq, &c->request_tag);
    } else {
        err = grpc_server_request_call(s->server, &c->call, &c->details, &c->req_md, s->cq->cq,
                                       s->cq->cq, &c->request_tag);
    }
    if (err != GRPC_CALL_OK) {
        px_error("requesting a call: %s", grpc_call_error_to_string(err));
        call_free(c);
        return PX_ERR_INTERNAL;
    }
    s->inflight++;
    if (m)
        m->armed = c;
    else
        s->generic_armed = c;
    return PX_OK;
}

static void on_shutdown(rpc_tag_t *tag, int ok)
{
    px_rpc_server_t *s = container_of(tag, px_rpc_server_t, shutdown_tag);
    s->shutdown_done = 1;
}

/* grpc.health.v1.Health: SERVING is field 1 (enum) = 1, i.e. 0x08 0x01. */
static const uint8_t health_serving[2] = {0x08, 0x01};

static void health_check(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    grpc_byte_buffer *bb = px__rpc_bytes_buffer(health_serving, sizeof(health_serving));
    call->ended = 1;
    call_send_status(call, GRPC_STATUS_OK, bb);
    grpc_byte_buffer_destroy(bb);
    call_maybe_release(call);
}

static void health_watch_cancel(px_rpc_call_t *call, void *arg)
{
    px_rpc_call_stream_finish(call);
}

static void health_watch(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    send_item_t *it = calloc(1, sizeof(*it));
    if (!it) {
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* One SERVING, then the stream stays open until the client leaves or the
     * server shuts down. */
    it->bb = px__rpc_bytes_buffer(health_serving, sizeof(health_serving));
    call->sq_head = call->sq_tail = it;
    call_send_next(call);
    px_rpc_call_on_cancel(call, health_watch_cancel, NULL);
}

static void server_free(px_rpc_server_t *s)
{
    for (size_t i = 0; i < s->n_methods; i++)
        free((char *)s->methods[i].m.path);
    free(s->methods);
    free(s->ports);
    free(s);
}

px_status_t px_rpc_server_create(px_rpc_cq_t *cq, const char *const *addrs, size_t n_addrs,
                                 const px_rpc_method_t *methods, size_t n_methods,
                                 px_rpc_server_t **server_p)
{
    return px_rpc_server_create_opts(cq, addrs, n_addrs, methods, n_methods, NULL, server_p);
}

/* Server credentials: TLS from PEM files when both are given, else insecure.
 * NULL (error logged) when a file cannot be read. */
static grpc_server_credentials *server_creds(const px_rpc_server_opts_t *opts)
{
    grpc_ssl_pem_key_cert_pair pair;
    grpc_server_credentials *creds;
    char *cert, *key;

    if (!opts || !opts->tls_cert_file || !opts->tls_key_file)
        return grpc_insecure_server_credentials_create();
    cert = px_rpc_read_file(opts->tls_cert_file, 1 << 20);
    key = px_rpc_read_file(opts->tls_key_file, 1 << 20);
    if (!cert || !key) {
        px_error("TLS: cannot read %s", !cert ? opts->tls_cert_file : opts->tls_key_file);
        free(cert);
        free(key);
        return NULL;
    }
    pair.private_key = key;
    pair.cert_chain = cert;
    creds = grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL);
    /* gRPC copies the PEM strings. Wipe the key from our heap. */
    explicit_bzero(key, strlen(key));
    free(key);
    free(cert);
    if (!creds)
        px_error("TLS: gRPC refused the certificate %s / key %s", opts->tls_cert_file,
                 opts->tls_key_file);
    return creds;
}

px_status_t px_rpc_server_create_opts(px_rpc_cq_t *cq, const char *const *addrs, size_t n_addrs,
                                      const px_rpc_method_t *methods, size_t n_methods,
                                      const px_rpc_server_opts_t *opts,
                                      px_rpc_server_t **server_p)
{
    px_rpc_server_t *s;
    grpc_server_credentials *creds;
    grpc_arg args[3];
    grpc_channel_args chargs;
    px_status_t status = PX_OK;
    size_t i;

    int max_msg = opts && opts->max_message_bytes > 0 ? opts->max_message_bytes
                                                      : PX_RPC_MAX_MSG_BYTES;

    if (!cq || !addrs || n_addrs == 0 || (n_methods && !methods))
        return PX_ERR_INVALID_ARGUMENT;
    if (opts && opts->max_message_bytes < 0)
        return PX_ERR_INVALID_ARGUMENT;
    if (opts && (!opts->tls_cert_file != !opts->tls_key_file)) {
        px_error("TLS needs both a certificate and a key file");
        return PX_ERR_INVALID_ARGUMENT;
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        return PX_ERR_NO_MEMORY;
    s->cq = cq;
    if (opts) {
        s->authorize = opts->authorize;
        s->authorize_arg = opts->authorize_arg;
    }
    s->shutdown_tag.fn = on_shutdown;
    s->n_addrs = n_addrs;
    s->ports = calloc(n_addrs, sizeof(int));
    s->n_methods = n_methods + 2;
    s->methods = calloc(s->n_methods, sizeof(*s->methods));
    if (!s->ports || !s->methods) {
        server_free(s);
        return PX_ERR_NO_MEMORY;
    }
    for (i = 0; i < n_methods; i++) {
        if (!methods[i].path || !methods[i].handler) {
            px_error("method %zu has no path or handler", i);
            server_free(s);
            return PX_ERR_INVALID_ARGUMENT;
        }
        s->methods[i].m = methods[i];
        s->methods[i].m.path = strdup(methods[i].path);
    }
    s->methods[i].m = (px_rpc_method_t){strdup(HEALTH_CHECK_PATH), NULL, 0, health_check, NULL};
    s->methods[i].builtin = 1;
    s->methods[i + 1].m = (px_rpc_method_t){strdup(HEALTH_WATCH_PATH), NULL, 1, health_watch, NULL};
    s->methods[i + 1].builtin = 1;

    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[0].value.integer = 0;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[1].value.integer = max_msg;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[2].value.integer = PX_RPC_MAX_MSG_BYTES;
    chargs.num_args = 3;
    chargs.args = args;

    grpc_init();
    s->server = grpc_server_create(&chargs, NULL);
    grpc_server_register_completion_queue(s->server, cq->cq, NULL);
    for (i = 0; i < s->n_methods; i++) {
        s->methods[i].registered = grpc_server_register_method(
            s->server, s->methods[i].m.path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!s->methods[i].registered) {
            px_error("cannot register method %s (duplicate?)", s->methods[i].m.path);
            status = PX_ERR_INVALID_ARGUMENT;
            goto err_destroy_server;
        }
    }
    creds = server_creds(opts);
    if (!creds) {
        status = PX_ERR_INVALID_ARGUMENT;
        goto err_destroy_server;
    }
    for (i = 0; i < n_addrs; i++) {
        int port = grpc_server_add_http2_port(s->server, addrs[i], creds);
        if (port == 0) {
            px_error("cannot listen on %s (address in use or not valid)", addrs[i]);
            status = PX_ERR_IO;
            break;
        }
        s->ports[i] = strncmp(addrs[i], "unix:", 5) ? port : 0;
    }
    grpc_server_credentials_release(creds);
    if (status != PX_OK)
        goto err_destroy_server;

    grpc_server_start(s->server);
    for (i = 0; i < n_addrs; i++) {
        if (!strncmp(addrs[i], "unix:", 5)) {
            const char *path = addrs[i] + 5;
            if (!strncmp(path, "//", 2))
                path += 2; /* unix://abs/path form */
            if (chmod(path, 0660) != 0)
                px_warn("cannot chmod 0660 %s: %m", path);
        }
    }
    for (i = 0; i < s->n_methods; i++)
        PX_CHECK_GOTO(server_arm(s, &s->methods[i]), status, err_shutdown);
    PX_CHECK_GOTO(server_arm(s, NULL), status, err_shutdown);
    *server_p = s;
    return PX_OK;

err_shutdown:
    px_rpc_server_destroy(s); /* balances grpc_init() itself */
    return status;
err_destroy_server:
    /* Never started: no call or request exists yet. */
    grpc_server_destroy(s->server);
    server_free(s);
    grpc_shutdown();
    return status;
}

int px_rpc_server_port(const px_rpc_server_t *server, size_t i)
{
    if (!server || i >= server->n_addrs)
        return 0;
    return server->ports[i];
}

void px_rpc_server_destroy(px_rpc_server_t *s)
{
    px_rpc_call_t *c, *next;
    if (!s)
        return;
    s->shutting_down = 1;
    grpc_server_shutdown_and_notify(s->server, s->cq->cq, &s->shutdown_tag);
    grpc_server_cancel_all_calls(s->server);
    /* Idle calls the owner still holds: release their grpc_call now. */
    for (c = s->calls; c; c = next) {
        next = c->next;
        call_maybe_release(c);
    }
    while (!s->shutdown_done || s->inflight > 0)
        px__rpc_cq_drain_wait(s->cq);
    for (c = s->calls; c; c = next) {
        next = c->next;
        call_maybe_release(c);
        c->server = NULL; /* inert: ending it later only frees it */
        c->prev = c->next = NULL;
    }
    grpc_server_destroy(s->server);
    server_free(s);
    grpc_shutdown();
}

void px_rpc_server_set_observer(px_rpc_server_t *server, px_rpc_observe_fn fn, void *arg)
{
    server->observe = fn;
    server->observe_arg = arg;
}

px_status_t px_rpc_call_reply(px_rpc_call_t *call, const ProtobufCMessage *response)
{
    grpc_byte_buffer *bb;
    px_status_t status;

    if (!call || !response)
        return PX_ERR_INVALID_ARGUMENT;
    if (call->ended) {
        px_error("call ended twice");
        return PX_ERR_INVALID_ARGUMENT;
    }
    call->ended = 1;
    if (!call->call || call->cancelled || call->status_started || call->sq_head) {
        call_maybe_release(call);
        return PX_ERR_ABORTED;
    }
    bb = px__rpc_pack(response);
    status = call_send_status(call, GRPC_STATUS_OK, bb);
    grpc_byte_buffer_destroy(bb);
    call_maybe_release(call);
    return status;
}

/* Ends the call with `code` after the message in flight (if any). */
static px_status_t call_end(px_rpc_call_t *call, grpc_status_code code)
{
    call->ended = 1;
    if (!call->call || call->status_started) {
        call_maybe_release(call);
        return call->call ? PX_OK : PX_ERR_ABORTED;
    }
    call->finish_requested = 1;
    call->final_code = code;
    call_send_next(call);
    call_maybe_release(call);
    return PX_OK;
}

px_status_t px_rpc_call_fail(px_rpc_call_t *call, grpc_status_code code, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    send_item_t *it, *keep;

    if (!call)
        return PX_ERR_INVALID_ARGUMENT;
    if (call->ended) {
        px_error("call ended twice");
        return PX_ERR_INVALID_ARGUMENT;
    }
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (code == GRPC_STATUS_OK)
        code = GRPC_STATUS_UNKNOWN;
    call->status_details = grpc_slice_from_copied_string(buf);
    call->have_status_details = 1;
    /* The error ends the stream now: drop queued messages except the one in
     * flight, which gRPC still owns until it completes. */
    keep = call->sending ? call->sq_head : NULL;
    it = keep ? keep->next : call->sq_head;
    while (it) {
        send_item_t *n = it->next;
        grpc_byte_buffer_destroy(it->bb);
        free(it);
        it = n;
    }
    if (keep)
        keep->next = NULL;
    call->sq_head = call->sq_tail = keep;
    return call_end(call, code);
}

px_status_t px_rpc_call_stream_send(px_rpc_call_t *call, const ProtobufCMessage *msg)
{
    send_item_t *it;
    if (!call || !msg)
        return PX_ERR_INVALID_ARGUMENT;
    if (call->ended || call->finish_requested) {
        px_error("stream_send after the call ended");
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!call->call || call->cancelled)
        return PX_ERR_ABORTED;
    it = calloc(1, sizeof(*it));
    if (!it)
        return PX_ERR_NO_MEMORY;
    it->bb = px__rpc_pack(msg);
    if (call->sq_tail)
        call->sq_tail->next = it;
    else
        call->sq_head = it;
    call->sq_tail = it;
    call_send_next(call);
    return call->cancelled ? PX_ERR_ABORTED : PX_OK;
}

px_status_t px_rpc_call_stream_finish(px_rpc_call_t *call)
{
    if (!call)
        return PX_ERR_INVALID_ARGUMENT;
    if (call->ended) {
        px_error("call ended twice");
        return PX_ERR_INVALID_ARGUMENT;
    }
    return call_end(call, GRPC_STATUS_OK);
}

int px_rpc_call_is_cancelled(const px_rpc_call_t *call)
{
    return call->cancelled || !call->call;
}

void px_rpc_call_on_cancel(px_rpc_call_t *call, void (*cb)(px_rpc_call_t *call, void *arg),
                           void *arg)
{
    call->on_cancel = cb;
    call->on_cancel_arg = arg;
}

const char *px_rpc_call_peer(const px_rpc_call_t *call)
{
    return call->peer ? call->peer : "";
}

int px_rpc_call_peer_is_local(const px_rpc_call_t *call)
{
    const char *p = call->peer ? call->peer : "";
    /* gRPC 1.51 peer strings: "unix:/path" (or "unix:" for an unnamed client
     * socket), "ipv4:127.0.0.1:port", "ipv6:[::1]:port", and IPv4-mapped
     * loopback "ipv6:[::ffff:127.0.0.1]:port". */
    return !strncmp(p, "unix:", 5) || !strncmp(p, "ipv4:127.", 9) ||
           !strncmp(p, "ipv6:[::1]:", 11) || !strncmp(p, "ipv6:[::ffff:127.", 17) ||
           !strncmp(p, "ipv6:%5B::1%5D:", 15) || !strncmp(p, "ipv6:%5B::ffff:127.", 19);
}

int px_rpc_call_metadata(const px_rpc_call_t *call, const char *key, const char **value_p,
                         size_t *len_p)
{
    size_t klen;
    if (!call || !key)
        return 0;
    klen = strlen(key);
    for (size_t i = 0; i < call->req_md.count; i++) {
        const grpc_metadata *md = &call->req_md.metadata[i];
        if (GRPC_SLICE_LENGTH(md->key) == klen &&
            !strncasecmp((const char *)GRPC_SLICE_START_PTR(md->key), key, klen)) {
            if (value_p)
                *value_p = (const char *)GRPC_SLICE_START_PTR(md->value);
            if (len_p)
                *len_p = GRPC_SLICE_LENGTH(md->value);
            return 1;
        }
    }
    return 0;
}
