/* job_int.h: what the coordinator's job files share (job.c state machine,
 * job_watch.c, job_load.c, job_restart.c, job_place.c, job_launch.c) and
 * no other file uses (px__job_ prefix). Loop thread only. */
#ifndef PXD_JOB_INT_H
#define PXD_JOB_INT_H

#include "daemon.h"

/* "PENDING", "RUNNING", ... */
const char *px__job_state_name(Parallax__V1__JobState s);
/* STARTING or RUNNING: devices placed, ranks may run. */
int px__job_is_placed_active(const px_job_t *job);
/* Logs and stores an event line of `job`. */
void px__job_event(px_job_t *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes `job` (state, figures, ranks) through to the store. */
void px__job_save(px_job_t *job);
/* A zeroed job of `d` with its timer initialised; NULL out of memory.
 * Freed by closing its rdv_timer with px__job_on_closed. */
px_job_t *px__job_alloc(px_daemon_t *d);
void px__job_on_closed(uv_handle_t *h);

/* job_watch.c: sends the job (and `metrics`, may be NULL) to every
 * watcher; ends their streams when the job is final. */
void px__job_watchers_notify(px_job_t *job, const Parallax__V1__StepMetrics *metrics);
/* Ends the streams of watchers whose clients went away. */
void px__job_watchers_sweep(px_job_t *job);

/* job_restart.c: `job` just FAILED after placement: submits it again from
 * its newest complete checkpoint if it has restarts left, and says so (or
 * why not) at the end of its reason. */
void px__job_restart(px_job_t *job);

/* job_launch.c: starts the rendezvous deadline and sends LaunchRanks to
 * each node of a freshly placed (STARTING) job; failures finish it. */
void px__job_launch(px_job_t *job);
/* Sends StopRanks to every node holding ranks of `job`. */
void px__job_stop_ranks(px_job_t *job);

#endif
