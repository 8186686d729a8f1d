/* jobname.h: the one rule for job names, shared by pctl (rejected before
 * the call) and parallaxd (rejected at SubmitJob, whatever the client).
 *
 * A name is 1..PX_JOB_NAME_MAX bytes of [A-Za-z0-9._-], not starting with
 * '-' or '.': it is printed in tables and terminals, embedded in file names
 * and compared byte for byte across the cluster, so nothing in it can be a
 * control character, an escape sequence, a path separator or a flag. An
 * empty name means "no name" and is accepted (the job id stands for it). */
#ifndef PX_JOBNAME_H
#define PX_JOBNAME_H

#include <stddef.h>

#include "px_status.h"

#define PX_JOB_NAME_MAX 64

/* PX_OK, or PX_ERR_INVALID_ARGUMENT with a message in errbuf naming the
 * first bad character (as \xNN where it is not printable) and its offset,
 * or the length. name NULL or "" is PX_OK. */
px_status_t px_job_name_check(const char *name, char *errbuf, size_t errlen);

#endif
