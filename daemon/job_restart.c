/* job_restart.c: --max-restarts: a failed job with restarts left
 * is submitted again from its newest complete checkpoint, under a new id.
 * Loop thread only. */
#include <dirent.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "job_int.h"
#include "px_log.h"

/* Newest complete checkpoint (DIR/step_<N>/ with meta.json, written last)
 * in `dir` into out; its step, or -1 if none. */
static long newest_checkpoint(const char *dir, char *out, size_t len)
{
    DIR *dh = dir && *dir ? opendir(dir) : NULL;
    struct dirent *e;
    long best = -1;

    if (!dh)
        return -1;
    while ((e = readdir(dh))) {
        char meta[1400], *end;
        long n;
        if (strncmp(e->d_name, "step_", 5))
            continue;
        n = strtol(e->d_name + 5, &end, 10);
        if (*end || end == e->d_name + 5 || n <= best)
            continue;
        snprintf(meta, sizeof(meta), "%s/%s/meta.json", dir, e->d_name);
        if (access(meta, R_OK) != 0)
            continue;
        best = n;
        snprintf(out, len, "%s/%s", dir, e->d_name);
    }
    closedir(dh);
    return best;
}

/* --max-restarts: `job` just FAILED after placement; if it has
 * restarts left and a complete checkpoint, submit it again (a new id, same
 * spec, resume_dir = the checkpoint) and say so in its reason. A new id
 * keeps late reports of the failed attempt's ranks from touching the new
 * one (torchrun restarts its worker group the same way, from the last
 * checkpoint the script saved). */
void px__job_restart(px_job_t *job)
{
    Parallax__V1__JobSpec *spec = job->spec, *copy;
    char ckpt[1200];
    size_t len = strlen(job->reason);
    long step;
    px_job_t *next;

    if (!spec || spec->max_restarts == 0)
        return;
    if (spec->restart >= spec->max_restarts) {
        snprintf(job->reason + len, sizeof(job->reason) - len, "; no restart left (%u of %u used)",
                 spec->restart, spec->max_restarts);
        return;
    }
    step = newest_checkpoint(spec->checkpoint_dir, ckpt, sizeof(ckpt));
    if (step < 0) {
        snprintf(job->reason + len, sizeof(job->reason) - len,
                 "; not restarted: no complete checkpoint in '%s'",
                 spec->checkpoint_dir ? spec->checkpoint_dir : "");
        return;
    }
    copy = (Parallax__V1__JobSpec *)px_msg_dup(&spec->base);
    if (!copy)
        return;
    if (copy->resume_dir != protobuf_c_empty_string)
        free(copy->resume_dir);
    copy->resume_dir = strdup(ckpt);
    /* the checkpoint holds the weights now: not the Hugging Face ones the
     * first attempt started from (a run starts from one of them) */
    if (copy->init_from != protobuf_c_empty_string)
        free(copy->init_from);
    copy->init_from = (char *)protobuf_c_empty_string; /* protobuf-c's own "unset" */
    if (copy->restarted_from != protobuf_c_empty_string)
        free(copy->restarted_from);
    copy->restarted_from = strdup(job->id);
    copy->restart = spec->restart + 1;
    if (copy->resume_dir && copy->restarted_from && px_job_submit(job->d, copy, &next) == PX_OK)
        snprintf(job->reason + len, sizeof(job->reason) - len,
                 "; restarted as %s (restart %u of %u) from %s (step %ld)", next->id,
                 copy->restart, copy->max_restarts, ckpt, step);
    protobuf_c_message_free_unpacked(&copy->base, NULL);
}
