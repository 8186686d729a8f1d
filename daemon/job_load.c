/* job_load.c: the jobs of the store at start, and adoption.
 *
 * Every job is loaded so GetJob/ListJobs/GetMetrics answer about it. A job
 * this node coordinates that was placed when the daemon stopped is FAILED,
 * unless it was RUNNING and every one of its local ranks outlived the
 * daemon (and the host did not reboot): it is then adopted once devices are
 * known (px_job_adopt_all), its ranks watched through pidfds by the
 * supervisor. A job FAILED so is restarted from its newest checkpoint when
 * it has restarts left (--max-restarts), as a job whose rank died is: a
 * coordinator killed with its ranks must not lose the job. That waits for
 * px_job_adopt_all too, so the restart is placed once devices are known.
 * Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "job_int.h"
#include "px_log.h"
#include "px_time.h"
#include "store.h"

static void note_seq(px_daemon_t *d, const char *id)
{
    char node[PXD_NAME_MAX];
    const char *dash = strrchr(id, '-');
    px_job_id_node(id, node, sizeof(node));
    if (dash && !strcmp(node, d->cfg.name)) {
        uint64_t n = strtoull(dash + 1, NULL, 10);
        if (n + 1 > d->next_job_seq)
            d->next_job_seq = n + 1;
    }
}

static void on_load(void *arg, px_job_t *t, Parallax__V1__JobSpec *spec)
{
    px_daemon_t *d = arg;
    px_job_t *job = px__job_alloc(d);
    uv_timer_t timer;

    if (!job) {
        protobuf_c_message_free_unpacked(&spec->base, NULL);
        return;
    }
    timer = job->rdv_timer;
    *job = *t;
    job->d = d;
    job->rdv_timer = timer;
    job->spec = spec;
    job->next = NULL;
    if (job->world > 0) {
        job->ranks = calloc((size_t)job->world, sizeof(*job->ranks));
        if (job->ranks)
            px_store_ranks_load(d->store, job);
    }
    job->next = d->jobs;
    d->jobs = job;
    note_seq(d, job->id);
    if (px__job_is_placed_active(job) && !strcmp(job->coordinator, d->cfg.name) && !d->rebooted &&
        job->state == PARALLAX__V1__JOB_STATE__JOB_RUNNING && job->ranks) {
        /* a RUNNING job whose local ranks outlived the daemon is
         * adopted (px_job_adopt_all, once devices are known) */
        int alive = 1;
        for (int r = 0; r < job->world; r++)
            if (!strcmp(job->ranks[r].node, d->cfg.name) &&
                strcmp(job->ranks[r].state, "exited") &&
                !px_supervisor_is_rank(d, job->ranks[r].pid, job->id, r))
                alive = 0;
        job->adopting = alive;
    }
    if (px__job_is_placed_active(job) && !strcmp(job->coordinator, d->cfg.name) && !job->adopting) {
        job->state = PARALLAX__V1__JOB_STATE__JOB_FAILED;
        snprintf(job->reason, sizeof(job->reason), "%s",
                 d->rebooted ? "node rebooted (boot id changed) while the job was active"
                             : "coordinator daemon restarted (crashed or killed) while the "
                               "job was active; its ranks were stopped");
        job->finished_ms = px_time_wall_ms();
        job->restart_at_start = 1;
    }
}

/* px_supervisor_at_end_fn: whether job `id` reached its last step. */
static int job_at_end(px_daemon_t *d, const char *id)
{
    px_job_t *job = px_job_find(d, id);
    return job && job->spec && job->step >= job->spec->steps;
}

void px_job_adopt_all(px_daemon_t *d)
{
    for (px_job_t *j = d->jobs; j; j = j->next) {
        int n_local = 0, lost = -1;
        if (j->restart_at_start) {
            j->restart_at_start = 0;
            px__job_restart(j); /* appends "; restarted as ..." to the reason */
            px__job_save(j);
            px__job_event(j, "FAILED: %s", j->reason);
            continue;
        }
        if (!j->adopting)
            continue;
        j->adopting = 0;
        j->n_registered = j->world;
        j->n_exited_ok = j->n_exited_unknown = 0;
        for (int r = 0; r < j->world; r++) {
            px_job_rank_t *jr = &j->ranks[r];
            jr->registered = 1;
            if (!strcmp(jr->state, "exited")) {
                j->n_exited_ok += jr->exit_code == 0;
                j->n_exited_unknown += jr->exit_code == PXD_EXIT_UNKNOWN;
                continue;
            }
            if (strcmp(jr->node, d->cfg.name))
                continue;
            if (px_supervisor_adopt(d, j->id, r, jr->pid, jr->device, job_at_end) != PX_OK &&
                lost < 0)
                lost = r;
            else
                n_local++;
        }
        if (lost >= 0) {
            px_job_finish(j, PARALLAX__V1__JOB_STATE__JOB_FAILED,
                          "coordinator daemon restarted and could not adopt rank %d (pid %d) "
                          "of node %s: it is gone", lost, j->ranks[lost].pid, d->cfg.name);
            continue;
        }
        px__job_event(j, "coordinator daemon restarted: adopted %d running local rank(s); "
                  "ranks on other nodes are checked by heartbeat", n_local);
        px_info("job %s adopted after a restart (%d local ranks)", j->id, n_local);
    }
}

px_status_t px_job_load_all(px_daemon_t *d)
{
    if (d->next_job_seq == 0)
        d->next_job_seq = 1;
    return px_store_jobs_load(d->store, on_load, d);
}
