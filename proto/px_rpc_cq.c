/* px_rpc_cq.c: the completion queue (px_rpc_cq_t).
 *
 * Threads. A px_rpc_cq_t runs one thread blocked in
 * grpc_completion_queue_next(); it never runs user code, it only appends
 * (tag, ok) to a locked FIFO, signals a condition variable and calls
 * notify(). px_rpc_cq_drain() pops events one at a time on the owner thread
 * and runs their callbacks, so a callback may destroy a server (which drains
 * recursively) without leaving stale events in a local list. Every tag given
 * to gRPC on a px_rpc_cq is a `rpc_tag_t *` embedded in the object it
 * belongs to (px_rpc_int.h). See docs/notes/grpc-core-c.md. */
#include "px_rpc_int.h"


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
void px__rpc_cq_drain_wait(px_rpc_cq_t *cq)
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
