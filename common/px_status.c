/* px_status.c: names of px_status_t values, and px_invalid. Thread-safe. */
#include "px_status.h"

#include <stdarg.h>
#include <stdio.h>

const char *px_status_str(px_status_t status)
{
    switch (status) {
    case PX_OK: return "ok";
    case PX_INPROGRESS: return "in progress";
    case PX_ERR_INVALID_ARGUMENT: return "invalid argument";
    case PX_ERR_NOT_FOUND: return "not found";
    case PX_ERR_TIMEOUT: return "timed out";
    case PX_ERR_PEER_FAILURE: return "peer failure";
    case PX_ERR_MISMATCH: return "mismatch";
    case PX_ERR_NO_MEMORY: return "out of memory";
    case PX_ERR_IO: return "i/o error";
    case PX_ERR_INTERNAL: return "internal error";
    case PX_ERR_ABORTED: return "aborted";
    case PX_ERR_UNAVAILABLE: return "unavailable";
    case PX_ERR_ALREADY_EXISTS: return "already exists";
    }
    return "unknown status";
}

px_status_t px_invalid(char *errbuf, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (errbuf && errlen) {
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return PX_ERR_INVALID_ARGUMENT;
}
