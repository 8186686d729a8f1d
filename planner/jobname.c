/* jobname.c: the job name rule (jobname.h). Pure; any thread. */
#include "jobname.h"

#include <string.h>

static int name_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

px_status_t px_job_name_check(const char *name, char *errbuf, size_t errlen)
{
    size_t n;

    if (!name || !*name)
        return PX_OK;
    n = strlen(name);
    if (n > PX_JOB_NAME_MAX)
        return px_invalid(errbuf, errlen, "name: %zu characters (at most %d)", n,
                          PX_JOB_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!name_char_ok(c)) {
            if (c > 0x20 && c < 0x7f)
                return px_invalid(errbuf, errlen, "name: character '%c' at offset %zu is not "
                                  "allowed (letters, digits, '.', '_', '-')", c, i);
            return px_invalid(errbuf, errlen, "name: byte \\x%02x at offset %zu is not allowed "
                              "(letters, digits, '.', '_', '-')", c, i);
        }
    }
    if (name[0] == '-' || name[0] == '.')
        return px_invalid(errbuf, errlen, "name: may not start with '%c'", name[0]);
    return PX_OK;
}
