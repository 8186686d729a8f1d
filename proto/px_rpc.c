/* px_rpc.c: protobuf-c messages over gRPC core 1.51 (see px_rpc.h and
 * ../shared/notes/grpc-core-c.md).
 *
 * Threads. A px_rpc_cq_t runs one thread blocked in
 * grpc_completion_queue_next(); it never runs user code, it only appends
 * (tag, ok) to a locked FIFO, signals a condition variable and calls
 * notify(). px_rpc_cq_drain() pops events one at a time on the owner thread
 * and runs their callbacks, so a callback may destroy a server (which drains
 * recursively) without leaving stale events in a local list. Every tag given
 * to gRPC on a px_rpc_cq is a `rpc_tag_t *` embedded in the object it
 * belongs to.
 *
 * Server calls. Every registered method keeps one request armed and re-arms
 * it as soon as a call arrives; a generic request catches unknown methods
 * (answered UNIMPLEMENTED). Each accepted call keeps a RECV_CLOSE_ON_SERVER
 * batch outstanding, which is how cancellation is seen. A call struct is
 * freed only when the owner has ended it AND no batch is outstanding;
 * `outstanding` counts those batches. Streaming sends are queued and sent one
 * at a time; SEND_STATUS_FROM_SERVER goes after the last queued message.
 *
 * Blocking client calls use a private pluck queue each, so they work from any
 * thread with no px_rpc_cq. Async client calls run on a px_rpc_cq. */
#include "px_rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <grpc/grpc_security.h>
#pragma GCC diagnostic pop
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "px_log.h"
#include "px_time.h"

#define PX_RPC_MAX_MSG_BYTES PX_RPC_DEFAULT_MAX_MESSAGE_BYTES

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* --------------------------------------------------------------- helpers */

typedef struct rpc_tag {
    void (*fn)(struct rpc_tag *tag, int ok);
} rpc_tag_t;

static gpr_timespec deadline_from_ms(int timeout_ms)
{
    if (timeout_ms < 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* Packs `msg` into a new byte buffer (caller destroys it). NULL on OOM. */
static grpc_byte_buffer *pack_message(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice = grpc_slice_malloc(len);
    grpc_byte_buffer *bb;
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

static grpc_byte_buffer *bytes_buffer(const void *data, size_t len)
{
    grpc_slice slice = grpc_slice_from_copied_buffer(data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* Unpacks a received buffer (NULL reads as an empty message). NULL when the
 * bytes do not parse as `desc`. */
static ProtobufCMessage *unpack_message(const ProtobufCMessageDescriptor *desc,
                                        grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader reader;
    grpc_slice slice;
    ProtobufCMessage *msg;

    if (!bb)
        return protobuf_c_message_unpack(desc, NULL, 0, (const uint8_t *)"");
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return NULL;
    slice = grpc_byte_buffer_reader_readall(&reader);
    msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(slice),
                                    GRPC_SLICE_START_PTR(slice));
    grpc_slice_unref(slice);
    grpc_byte_buffer_reader_destroy(&reader);
    return msg;
}

static char *slice_to_str(grpc_slice slice)
{
    size_t len = GRPC_SLICE_LENGTH(slice);
    char *s = malloc(len + 1);
    if (!s)
        return NULL;
    memcpy(s, GRPC_SLICE_START_PTR(slice), len);
    s[len] = '\0';
    return s;
}

static void fill_result(px_rpc_result_t *result_p, grpc_status_code code, const char *message)
{
    if (!result_p)
        return;
    result_p->code = code;
    result_p->message = message ? strdup(message) : NULL;
}

px_status_t px_rpc_status_from_code(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_OK: return PX_OK;
    case GRPC_STATUS_INVALID_ARGUMENT: return PX_ERR_INVALID_ARGUMENT;
    case GRPC_STATUS_NOT_FOUND: return PX_ERR_NOT_FOUND;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return PX_ERR_TIMEOUT;
    case GRPC_STATUS_UNAVAILABLE: return PX_ERR_UNAVAILABLE;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return PX_ERR_UNAVAILABLE;
    case GRPC_STATUS_CANCELLED: return PX_ERR_ABORTED;
    case GRPC_STATUS_ALREADY_EXISTS: return PX_ERR_ALREADY_EXISTS;
    case GRPC_STATUS_FAILED_PRECONDITION: return PX_ERR_INVALID_ARGUMENT;
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED: return PX_ERR_INVALID_ARGUMENT;
    default: return PX_ERR_INTERNAL;
    }
}

grpc_status_code px_rpc_code_from_status(px_status_t status)
{
    switch (status) {
    case PX_OK:
    case PX_INPROGRESS: return GRPC_STATUS_OK;
    case PX_ERR_INVALID_ARGUMENT: return GRPC_STATUS_INVALID_ARGUMENT;
    case PX_ERR_NOT_FOUND: return GRPC_STATUS_NOT_FOUND;
    case PX_ERR_TIMEOUT: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case PX_ERR_PEER_FAILURE: return GRPC_STATUS_UNAVAILABLE;
    case PX_ERR_UNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case PX_ERR_ABORTED: return GRPC_STATUS_CANCELLED;
    case PX_ERR_ALREADY_EXISTS: return GRPC_STATUS_ALREADY_EXISTS;
    case PX_ERR_MISMATCH: return GRPC_STATUS_FAILED_PRECONDITION;
    case PX_ERR_NO_MEMORY: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case PX_ERR_IO:
    case PX_ERR_INTERNAL: return GRPC_STATUS_INTERNAL;
    }
    return GRPC_STATUS_UNKNOWN;
}

/* ---------------------------------------------------------- completion queue */

typedef struct cq_event {
    struct cq_event *next;
    rpc_tag_t *tag;
    int ok;
} cq_event_t;

struct px_rpc_cq {
    grpc_completion_queue *cq;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    cq_event_t *head, *tail; /* FIFO, under lock */
    int thread_done;         /* queue reported GRPC_QUEUE_SHUTDOWN */
    void (*notify)(void *arg);
    void *notify_arg;
};

static void *cq_thread_main(void *arg)
{
    px_rpc_cq_t *cq = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                   NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            pthread_mutex_lock(&cq->lock);
            cq->thread_done = 1;
            pthread_cond_broadcast(&cq->cond);
            pthread_mutex_unlock(&cq->lock);
            return NULL;
        }
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        cq_event_t *e = malloc(sizeof(*e));
        if (!e) {
            /* Losing a completion would leak a call forever; nothing sane is left. */
            px_error("out of memory queueing a gRPC completion");
            abort();
        }
        e->next = NULL;
        e->tag = ev.tag;
        e->ok = ev.success;
        pthread_mutex_lock(&cq->lock);
        if (cq->tail)
            cq->tail->next = e;
        else
            cq->head = e;
        cq->tail = e;
        pthread_cond_broadcast(&cq->cond);
        pthread_mutex_unlock(&cq->lock);
        if (cq->notify)
            cq->notify(cq->notify_arg);
    }
}

px_status_t px_rpc_cq_create(void (*notify)(void *arg), void *arg, px_rpc_cq_t **cq_p)
{
    px_rpc_cq_t *cq = calloc(1, sizeof(*cq));
    if (!cq)
        return PX_ERR_NO_MEMORY;
    grpc_init();
    cq->notify = notify;
    cq->notify_arg = arg;
    pthread_mutex_init(&cq->lock, NULL);
    pthread_cond_init(&cq->cond, NULL);
    cq->cq = grpc_completion_queue_create_for_next(NULL);
    if (pthread_create(&cq->thread, NULL, cq_thread_main, cq) != 0) {
        px_error("cannot start the gRPC completion queue thread");
        grpc_completion_queue_shutdown(cq->cq);
        while (grpc_completion_queue_next(cq->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type
               != GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(cq->cq);
        pthread_cond_destroy(&cq->cond);
        pthread_mutex_destroy(&cq->lock);
        free(cq);
        grpc_shutdown();
        return PX_ERR_INTERNAL;
    }
    *cq_p = cq;
    return PX_OK;
}

/* Pops one event; with `wait`, blocks until there is one. 0 when none. */
static int cq_pop(px_rpc_cq_t *cq, int wait, rpc_tag_t **tag_p, int *ok_p)
{
    cq_event_t *e;
    pthread_mutex_lock(&cq->lock);
    while (wait && !cq->head && !cq->thread_done)
        pthread_cond_wait(&cq->cond, &cq->lock);
    e = cq->head;
    if (e) {
        cq->head = e->next;
        if (!cq->head)
            cq->tail = NULL;
    }
    pthread_mutex_unlock(&cq->lock);
    if (!e)
        return 0;
    *tag_p = e->tag;
    *ok_p = e->ok;
    free(e);
    return 1;
}

void px_rpc_cq_drain(px_rpc_cq_t *cq)
{
    rpc_tag_t *tag;
    int ok;
    while (cq_pop(cq, 0, &tag, &ok))
        tag->fn(tag, ok);
}

/* Runs at least one completion, blocking until one arrives. */
static void cq_drain_wait(px_rpc_cq_t *cq)
{
    rpc_tag_t *tag;
    int ok;
    if (cq_pop(cq, 1, &tag, &ok))
        tag->fn(tag, ok);
    px_rpc_cq_drain(cq);
}

void px_rpc_cq_destroy(px_rpc_cq_t *cq)
{
    cq_event_t *e;
    if (!cq)
        return;
    grpc_completion_queue_shutdown(cq->cq);
    pthread_join(cq->thread, NULL);
    while ((e = cq->head)) {
        cq->head = e->next;
        px_warn("dropping a gRPC completion left at queue shutdown");
        free(e);
    }
    grpc_completion_queue_destroy(cq->cq);
    pthread_cond_destroy(&cq->cond);
    pthread_mutex_destroy(&cq->lock);
    free(cq);
    grpc_shutdown();
}

/* ------------------------------------------------------------------- server */

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
        char *method = slice_to_str(c->details.method);
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
        req = unpack_message(m->m.request, c->payload);
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
    grpc_byte_buffer *bb = bytes_buffer(health_serving, sizeof(health_serving));
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
    it->bb = bytes_buffer(health_serving, sizeof(health_serving));
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
        cq_drain_wait(s->cq);
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
    bb = pack_message(response);
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
    it->bb = pack_message(msg);
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

int px_rpc_secret_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    const unsigned char *x = a, *y = b;
    unsigned char diff = 0;
    size_t n = alen > blen ? alen : blen;
    /* Touches max(alen, blen) bytes whatever the contents: the time depends
     * on the lengths only (which are not secret: a token's length leaks
     * nothing useful). */
    for (size_t i = 0; i < n; i++) {
        unsigned char cx = i < alen ? x[i] : 0;
        unsigned char cy = i < blen ? y[i] : 0;
        diff |= (unsigned char)(cx ^ cy);
    }
    return (diff == 0) & (alen == blen);
}

char *px_rpc_read_file(const char *path, size_t max_bytes)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;
    if (!f)
        return NULL;
    buf = malloc(max_bytes + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    n = fread(buf, 1, max_bytes + 1, f);
    if (ferror(f) || n > max_bytes) {
        int err = ferror(f) ? EIO : EFBIG;
        fclose(f);
        explicit_bzero(buf, n);
        free(buf);
        errno = err;
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* ------------------------------------------------------------------- client */

#define PX_RPC_CHANNEL_MAX_MD 8

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
    px_rpc_channel_t *ch;
    grpc_channel_credentials *creds;
    char *ca = NULL;
    grpc_arg args[2];
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
        *resp_p = unpack_message(desc, u->recv_bb);
        if (!*resp_p) {
            code = GRPC_STATUS_INTERNAL;
            if (asprintf(msg_p, "cannot parse the %s response", path) < 0)
                *msg_p = NULL;
            return code;
        }
    }
    *msg_p = slice_to_str(u->details);
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
    call = client_call_create(channel, cq, path, deadline_from_ms(timeout_ms));
    unary_ops_init(&u, channel, pack_message(request));
    err = grpc_call_start_batch(call, u.ops, 6, &u, NULL);
    if (err != GRPC_CALL_OK) {
        px_error("%s: grpc_call_start_batch: %s", path, grpc_call_error_to_string(err));
        grpc_call_unref(call);
        unary_ops_destroy(&u);
        pluck_queue_destroy(cq);
        fill_result(result_p, GRPC_STATUS_INTERNAL, "cannot start the call");
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
    st->call = client_call_create(channel, st->cq, path, deadline_from_ms(timeout_ms));

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &st->trailing_md;
    ops[0].data.recv_status_on_client.status = &st->code;
    ops[0].data.recv_status_on_client.status_details = &st->details;
    err = grpc_call_start_batch(st->call, ops, 1, &st->code, NULL);
    if (err != GRPC_CALL_OK)
        goto err_call;
    st->status_pending = 1;

    bb = pack_message(request);
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
        fill_result(result_p, st->code, "stream already ended");
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
        fill_result(result_p, GRPC_STATUS_INTERNAL, "cannot read the stream");
        return PX_ERR_INTERNAL;
    }
    ok = pluck(st->cq, &st->recv_bb);
    if (ok && st->recv_bb) {
        msg = unpack_message(desc, st->recv_bb);
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
        fill_result(result_p, GRPC_STATUS_INTERNAL, "cannot parse a stream message");
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
        text = slice_to_str(st->details);
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
    a->call = client_call_create(channel, cq->cq, path, deadline_from_ms(timeout_ms));
    unary_ops_init(&a->u, channel, pack_message(request));
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
