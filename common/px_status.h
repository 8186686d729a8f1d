/* px_status.h: the one status type of parallax (see STYLE.md, "From UCX").
 *
 * PX_OK is 0, PX_INPROGRESS is positive, failures are negative and grouped.
 * A function that can fail returns px_status_t; the variable holding it is
 * `status`. Output parameters are written only on PX_OK. */
#ifndef PX_STATUS_H
#define PX_STATUS_H

#include <stddef.h>

typedef enum px_status {
    PX_OK = 0,
    PX_INPROGRESS = 1,              /* nonblocking operation not finished yet */

    PX_ERR_INVALID_ARGUMENT = -1,   /* caller passed a bad value; message names it */
    PX_ERR_NOT_FOUND = -2,          /* job, rank, file, method ... does not exist */
    PX_ERR_TIMEOUT = -3,            /* a deadline passed */
    PX_ERR_PEER_FAILURE = -4,       /* a peer process or daemon died / unreachable */
    PX_ERR_MISMATCH = -5,           /* peers disagree on a collective's arguments */
    PX_ERR_NO_MEMORY = -6,
    PX_ERR_IO = -7,                 /* file, socket or database error */
    PX_ERR_INTERNAL = -8,           /* a bug or an unexpected library failure */
    PX_ERR_ABORTED = -9,            /* operation stopped by an abort / cancel */
    PX_ERR_UNAVAILABLE = -10,       /* resource busy or not enough devices now */
    PX_ERR_ALREADY_EXISTS = -11,
} px_status_t;

/* Static string naming a status ("invalid argument", ...). Never NULL. */
const char *px_status_str(px_status_t status);

/* Writes the printf-formatted message (which names the bad value) into
 * errbuf[errlen] (NULL or 0: nothing written) and returns
 * PX_ERR_INVALID_ARGUMENT: the validators' one way to reject. */
px_status_t px_invalid(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
