/* px_rpc.h: protobuf-c messages over gRPC core, for clients and servers.
 *
 * Three users: parallaxd (server for Control and Peer, and an async client to
 * other daemons), pctl (blocking client, unary and server-streaming), and the
 * rank process (blocking client to its coordinator).
 *
 * Threading (see docs/notes/grpc-core-c.md): a px_rpc_cq_t owns one
 * gRPC completion queue and a thread that waits in grpc_completion_queue_next.
 * That thread never runs user code: it queues (tag, ok) pairs and calls the
 * `notify` callback given at creation (the daemon passes uv_async_send). The
 * owner thread then calls px_rpc_cq_drain(), which runs every completion's
 * callback. All server handlers, reply/fail/stream calls and async client
 * completions therefore run on the owner thread only, and must be started
 * from it.
 *
 * Memory: request messages passed to handlers are borrowed until the handler
 * returns; a response message given to px_rpc_call_reply() is packed at once
 * and stays the caller's. Client responses are owned by the caller (free with
 * protobuf_c_message_free_unpacked) except in async callbacks, where they are
 * borrowed until the callback returns.
 *
 * Status codes are gRPC's (grpc_status_code); px_rpc_status_from_code() maps
 * them to px_status_t. */
#ifndef PX_RPC_H
#define PX_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>

#include "px_status.h"

/* ---------------------------------------------------------- completion queue */

typedef struct px_rpc_cq px_rpc_cq_t;

/* Creates a completion queue and starts its thread. `notify(arg)` is called
 * from that thread whenever completions are waiting; it must be cheap and
 * thread-safe (uv_async_send). Calls grpc_init(). */
px_status_t px_rpc_cq_create(void (*notify)(void *arg), void *arg, px_rpc_cq_t **cq_p);

/* Runs the callbacks of all queued completions. Owner thread only. */
void px_rpc_cq_drain(px_rpc_cq_t *cq);

/* Shuts the queue down, joins the thread, calls grpc_shutdown(). All servers
 * and in-flight async calls on it must be destroyed/finished first.
 * NULL is a no-op. */
void px_rpc_cq_destroy(px_rpc_cq_t *cq);

/* ------------------------------------------------------------------- server */

typedef struct px_rpc_server px_rpc_server_t;
typedef struct px_rpc_call px_rpc_call_t;

/* Handler for one incoming call. `request` is unpacked with the method's
 * request descriptor and borrowed until the handler returns. The handler (or
 * later code on the owner thread) must end the call exactly once with
 * px_rpc_call_reply() / px_rpc_call_fail() (unary) or
 * px_rpc_call_stream_finish() (streaming). */
typedef void (*px_rpc_handler_fn)(px_rpc_call_t *call, const ProtobufCMessage *request,
                                  void *arg);

typedef struct px_rpc_method {
    const char *path;                            /* "/parallax.v1.Control/SubmitJob" */
    const ProtobufCMessageDescriptor *request;   /* e.g. &parallax__v1__submit_job_request__descriptor */
    int server_streaming;                        /* 1 for `returns (stream X)` */
    px_rpc_handler_fn handler;
    void *arg;
} px_rpc_method_t;

/* Creates a server on `cq` listening on each of `addrs` ("host:port",
 * "unix:/path"; port 0 picks a free port). SO_REUSEPORT is disabled so a
 * second daemon on a used port fails here: PX_ERR_IO with an error logged
 * naming the address. `methods` is copied. Unknown methods are answered
 * UNIMPLEMENTED. grpc.health.v1.Health/Check is answered SERVING. */
px_status_t px_rpc_server_create(px_rpc_cq_t *cq, const char *const *addrs, size_t n_addrs,
                                 const px_rpc_method_t *methods, size_t n_methods,
                                 px_rpc_server_t **server_p);

/* Default maximum size of a received message, bytes (a larger one is
 * answered RESOURCE_EXHAUSTED by gRPC before any handler runs). */
#define PX_RPC_DEFAULT_MAX_MESSAGE_BYTES (64 * 1024 * 1024)

/* Authorization hook, run on the owner thread for every call to a
 * registered method (not grpc.health.v1, not unknown methods) before its
 * request is parsed. Returns GRPC_STATUS_OK to let the call through, or the
 * status to end it with (UNAUTHENTICATED, PERMISSION_DENIED) after writing a
 * NUL-terminated reason into why[why_len] that the client sees. */
typedef grpc_status_code (*px_rpc_authorize_fn)(px_rpc_call_t *call, const char *path,
                                                void *arg, char *why, size_t why_len);

typedef struct px_rpc_server_opts {
    int max_message_bytes;           /* largest request accepted; 0: the default */
    px_rpc_authorize_fn authorize;   /* NULL: every call is let through */
    void *authorize_arg;
    const char *tls_cert_file;       /* PEM chain and key: TLS on every address */
    const char *tls_key_file;        /* (unix sockets too); both NULL: insecure */
} px_rpc_server_opts_t;

/* px_rpc_server_create with options (NULL: defaults). PX_ERR_INVALID_ARGUMENT
 * for a negative size, only one of the TLS files, or PEM files gRPC cannot
 * read or use (error logged). */
px_status_t px_rpc_server_create_opts(px_rpc_cq_t *cq, const char *const *addrs, size_t n_addrs,
                                      const px_rpc_method_t *methods, size_t n_methods,
                                      const px_rpc_server_opts_t *opts,
                                      px_rpc_server_t **server_p);

/* The port bound for addrs[i] (the real one when 0 was asked), 0 for unix. */
int px_rpc_server_port(const px_rpc_server_t *server, size_t i);

/* Shutdown: cancels all calls (their cancel callbacks run), waits for the
 * shutdown to complete (draining cq on the calling thread, which must be the
 * owner), frees everything. Calls still held by the owner become inert: ending
 * them afterwards is allowed and only frees them. NULL is a no-op. */
void px_rpc_server_destroy(px_rpc_server_t *server);

/* Unary: sends `response` with status OK and frees the call. */
px_status_t px_rpc_call_reply(px_rpc_call_t *call, const ProtobufCMessage *response);

/* Called once per server call as its final status is sent: the method's
 * path ("/parallax.v1.Control/GetJob"; "unknown" for an unregistered one),
 * the status code and the seconds since the call was accepted (for a
 * stream: its whole life). On the thread that ends the call (the one
 * draining the completion queue). */
typedef void (*px_rpc_observe_fn)(void *arg, const char *method, grpc_status_code code,
                                  double seconds);
/* Sets the server's observer (NULL: none); `arg` borrowed. */
void px_rpc_server_set_observer(px_rpc_server_t *server, px_rpc_observe_fn fn, void *arg);

/* Unary or streaming: ends the call with a non-OK status and message
 * (printf format) and frees the call. */
px_status_t px_rpc_call_fail(px_rpc_call_t *call, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Streaming: queues one message (packed at once; sent in order, one in
 * flight at a time as gRPC requires). PX_ERR_ABORTED if the client is gone. */
px_status_t px_rpc_call_stream_send(px_rpc_call_t *call, const ProtobufCMessage *msg);

/* Streaming: ends the stream with OK after queued messages are sent; frees
 * the call once gRPC reports completion. */
px_status_t px_rpc_call_stream_finish(px_rpc_call_t *call);

/* 1 once the client went away / the call was cancelled (deadline, shutdown). */
int px_rpc_call_is_cancelled(const px_rpc_call_t *call);

/* Registers `cb(call, arg)`, run on the owner thread when the call is
 * cancelled (client gone, deadline, server shutdown). The owner must still
 * end the call once (reply/fail/finish), which then only frees it; ending it
 * inside `cb` is allowed. `cb` never runs after the call was ended, nor when
 * the cancellation was already seen before registering (check
 * px_rpc_call_is_cancelled() then). */
void px_rpc_call_on_cancel(px_rpc_call_t *call, void (*cb)(px_rpc_call_t *call, void *arg),
                           void *arg);

/* Peer address as gRPC gives it ("ipv4:127.0.0.1:5432"); borrowed. */
const char *px_rpc_call_peer(const px_rpc_call_t *call);

/* 1 if the call came over a unix socket or from a loopback address
 * (127.0.0.0/8, ::1, ::ffff:127.x), judged from gRPC's peer string. */
int px_rpc_call_peer_is_local(const px_rpc_call_t *call);

/* Looks up request metadata `key` (case-insensitive, e.g. "x-parallax-token").
 * Returns 1 and sets *value_p / *len_p (optional) to the first value's bytes,
 * NOT NUL-terminated, borrowed until the call is ended; 0 if absent. */
int px_rpc_call_metadata(const px_rpc_call_t *call, const char *key, const char **value_p,
                         size_t *len_p);

/* Constant-time comparison of two secrets: the time depends on the lengths
 * only, never on where the bytes differ. 1 if equal (same length and bytes). */
int px_rpc_secret_equal(const void *a, size_t alen, const void *b, size_t blen);

/* Reads a whole file of at most `max_bytes` into a NUL-terminated malloc'd
 * buffer (caller frees). NULL with errno set when it cannot be opened or read
 * (EFBIG when larger). */
char *px_rpc_read_file(const char *path, size_t max_bytes);

/* ------------------------------------------------------------------- client */

typedef struct px_rpc_channel px_rpc_channel_t;

/* Insecure channel to `target` ("host:port" or "unix:/path"). Connects
 * lazily. Never fails for a well-formed target. */
px_status_t px_rpc_channel_create(const char *target, px_rpc_channel_t **channel_p);
/* TLS channel: the server's certificate must chain to the PEM CA bundle in
 * `ca_file` (NULL: an insecure channel, as px_rpc_channel_create).
 * PX_ERR_IO when the CA file cannot be read. */
px_status_t px_rpc_channel_create_tls(const char *target, const char *ca_file,
                                      px_rpc_channel_t **channel_p);
/* As px_rpc_channel_create_tls, with `reconnect_ms` > 0 the wait between
 * connection attempts after a failed one (initial and maximum backoff, ms;
 * the shortest connect timeout is then reconnect_ms but at least 2 s);
 * 0 keeps gRPC's defaults (1 s growing 1.6x to 120 s; 20 s). For a peer that may come back at any
 * moment: it is retried every reconnect_ms, not after up to two minutes.
 * `idle_ms` > 0: the connection is closed after that long without a call
 * (GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS; at least 1000) and opened again by the
 * next call; 0 keeps gRPC's 30 minutes. */
px_status_t px_rpc_channel_create_ex(const char *target, const char *ca_file, int reconnect_ms,
                                     int idle_ms, px_rpc_channel_t **channel_p);
/* Ends the channel's wait before its next connection attempt and starts
 * one now (grpc_channel_reset_connect_backoff): for a peer just heard from
 * while our channel to it was backing off. NULL: nothing. */
void px_rpc_channel_reconnect_now(px_rpc_channel_t *channel);
/* Adds (or replaces) request metadata sent with every later call on the
 * channel: `key` lowercase letters, digits, '-', '_', '.' (HTTP/2 header
 * names; "-bin" suffixes are not supported), `value` a printable string.
 * Both are copied. At most 8 keys (PX_ERR_NO_MEMORY past that);
 * PX_ERR_INVALID_ARGUMENT for a bad key. Not thread-safe with calls in
 * flight on the channel: set metadata before the first call. */
px_status_t px_rpc_channel_set_metadata(px_rpc_channel_t *channel, const char *key,
                                        const char *value);
void px_rpc_channel_destroy(px_rpc_channel_t *channel);
const char *px_rpc_channel_target(const px_rpc_channel_t *channel);
/* 1 if the channel has a live connection now (GRPC_CHANNEL_READY), else 0.
 * Lets a client tell "nothing answered" from "the server was slow" after a
 * DEADLINE_EXCEEDED. Never starts a connection. */
int px_rpc_channel_is_connected(px_rpc_channel_t *channel);

/* Result of a finished client call. `message` is malloc'd (caller frees with
 * free()) or NULL; `code` is GRPC_STATUS_OK on success. */
typedef struct px_rpc_result {
    grpc_status_code code;
    char *message;
} px_rpc_result_t;

/* Blocking unary call with a deadline of `timeout_ms` from now, on a private
 * queue (any thread). On GRPC_STATUS_OK, *response_p is the unpacked
 * response, owned by the caller. Returns px_rpc_status_from_code(code);
 * `result_p` (optional) receives code and message either way. */
px_status_t px_rpc_call_unary(px_rpc_channel_t *channel, const char *path,
                              const ProtobufCMessage *request,
                              const ProtobufCMessageDescriptor *response_desc, int timeout_ms,
                              ProtobufCMessage **response_p, px_rpc_result_t *result_p);

/* Blocking server-streaming call. Open sends the request; next returns PX_OK
 * with the next message (caller owns it), or PX_ERR_NOT_FOUND at a clean end
 * of stream (status OK), or the mapped error with `result_p` filled.
 * `timeout_ms` of open is the whole call's deadline (-1: none).
 * A server's NOT_FOUND status also maps to PX_ERR_NOT_FOUND: tell them
 * apart by result_p->code (GRPC_STATUS_OK only at a clean end). */
typedef struct px_rpc_stream px_rpc_stream_t;
px_status_t px_rpc_stream_open(px_rpc_channel_t *channel, const char *path,
                               const ProtobufCMessage *request, int timeout_ms,
                               px_rpc_stream_t **stream_p);
px_status_t px_rpc_stream_next(px_rpc_stream_t *stream,
                               const ProtobufCMessageDescriptor *response_desc,
                               ProtobufCMessage **message_p, px_rpc_result_t *result_p);
void px_rpc_stream_close(px_rpc_stream_t *stream); /* cancels if not ended; NULL no-op */

/* Async unary call on `cq` (owner thread). `done` runs on the owner thread
 * from px_rpc_cq_drain() exactly once; `response` is NULL unless code is OK
 * and is borrowed until `done` returns; `message` likewise borrowed. */
typedef void (*px_rpc_done_fn)(void *arg, grpc_status_code code, const char *message,
                               const ProtobufCMessage *response);
px_status_t px_rpc_call_async(px_rpc_cq_t *cq, px_rpc_channel_t *channel, const char *path,
                              const ProtobufCMessage *request,
                              const ProtobufCMessageDescriptor *response_desc, int timeout_ms,
                              px_rpc_done_fn done, void *arg);

/* Maps a gRPC status code to px_status_t (OK->PX_OK, INVALID_ARGUMENT->
 * PX_ERR_INVALID_ARGUMENT, NOT_FOUND, DEADLINE_EXCEEDED->TIMEOUT,
 * UNAVAILABLE, RESOURCE_EXHAUSTED->UNAVAILABLE, CANCELLED->ABORTED,
 * ALREADY_EXISTS, FAILED_PRECONDITION, UNAUTHENTICATED and PERMISSION_DENIED
 * ->INVALID_ARGUMENT, else INTERNAL). */
px_status_t px_rpc_status_from_code(grpc_status_code code);
/* The reverse, for servers answering with a px_status_t. */
grpc_status_code px_rpc_code_from_status(px_status_t status);

#endif
