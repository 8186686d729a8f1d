/* px_rpc_int.h: what the files of px_rpc share and nobody else may use
 * (px__ prefix): the tag every gRPC completion carries, the completion
 * queue's insides (the server and the async client post on its grpc queue),
 * and the message <-> byte buffer helpers. See px_rpc.h for the public
 * surface and px_rpc_cq.c for the threads. */
#ifndef PX_RPC_INT_H
#define PX_RPC_INT_H

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

/* Every tag given to gRPC on a px_rpc_cq: embedded in the object it belongs
 * to; fn runs on the owner thread from px_rpc_cq_drain. */
typedef struct rpc_tag {
    void (*fn)(struct rpc_tag *tag, int ok);
} rpc_tag_t;

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

/* An absolute monotonic deadline `timeout_ms` from now (< 0: none). */
gpr_timespec px__rpc_deadline(int timeout_ms);
/* `msg` packed into a new byte buffer (caller destroys), NULL on failure. */
grpc_byte_buffer *px__rpc_pack(const ProtobufCMessage *msg);
/* `len` bytes copied into a new byte buffer (caller destroys). */
grpc_byte_buffer *px__rpc_bytes_buffer(const void *data, size_t len);
/* A byte buffer unpacked as `desc` (caller frees with
 * protobuf_c_message_free_unpacked), NULL if it does not parse or is over
 * the message size limit. */
ProtobufCMessage *px__rpc_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb);
/* A slice's bytes as a malloc'd NUL-terminated string (NULL: no memory). */
char *px__rpc_slice_str(grpc_slice slice);
/* Writes (code, strdup(message)) into *result_p when result_p is set. */
void px__rpc_fill_result(px_rpc_result_t *result_p, grpc_status_code code, const char *message);
/* Runs at least one completion of `cq`, blocking until one arrives. */
void px__rpc_cq_drain_wait(px_rpc_cq_t *cq);

#endif
