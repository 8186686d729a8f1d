/* job_watch.c: WatchJob streams of the jobs this node coordinates: each
 * watcher gets the job's state at once, then every change and every step's
 * figures, and its stream ends with the job's final state. A watcher whose
 * client went away is ended at the next sweep, never inside gRPC's cancel
 * callback. Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "job_int.h"
#include "px_log.h"

static void on_watch_cancel(px_rpc_call_t *call, void *arg)
{
    px_watcher_t *w = arg;
    w->call = NULL; /* ended by the next sweep (never inside this callback) */
    (void)call;
    w->cancelled_call = call;
}

void px__job_watchers_notify(px_job_t *job, const Parallax__V1__StepMetrics *metrics)
{
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    Parallax__V1__Job msg;
    int final = !px_job_is_active(job);
    px_watcher_t **pw = &job->watchers;

    px_job_to_msg(job, &msg);
    ev.job = &msg;
    ev.metrics = (Parallax__V1__StepMetrics *)metrics;
    while (*pw) {
        px_watcher_t *w = *pw;
        if (!w->call) {
            px_rpc_call_stream_finish(w->cancelled_call);
            *pw = w->next;
            free(w);
            continue;
        }
        if (px_rpc_call_stream_send(w->call, &ev.base) != PX_OK || final) {
            px_rpc_call_stream_finish(w->call);
            *pw = w->next;
            free(w);
            continue;
        }
        pw = &w->next;
    }
    px_job_msg_free(&msg);
}

void px_job_watch(px_job_t *job, px_rpc_call_t *call)
{
    Parallax__V1__JobEvent ev = PARALLAX__V1__JOB_EVENT__INIT;
    Parallax__V1__Job msg;
    px_watcher_t *w;
    px_status_t status;

    px_job_to_msg(job, &msg);
    ev.job = &msg;
    status = px_rpc_call_stream_send(call, &ev.base);
    px_job_msg_free(&msg);
    if (status != PX_OK || !px_job_is_active(job)) {
        px_rpc_call_stream_finish(call);
        return;
    }
    w = calloc(1, sizeof(*w));
    if (!w) {
        px_rpc_call_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->call = call;
    w->job = job;
    w->next = job->watchers;
    job->watchers = w;
    px_rpc_call_on_cancel(call, on_watch_cancel, w);
}

/* Ends the streams of watchers whose clients went away. */
void px__job_watchers_sweep(px_job_t *job)
{
    px_watcher_t **pw = &job->watchers;
    while (*pw) {
        px_watcher_t *w = *pw;
        if (!w->call) {
            px_rpc_call_stream_finish(w->cancelled_call);
            *pw = w->next;
            free(w);
        } else {
            pw = &w->next;
        }
    }
}
