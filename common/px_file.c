#include "px_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int px_read_file(const char *path, char **buf_p, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    if (!f)
        return -1;
    do {
        if (len == cap) {
            char *nb = realloc(buf, cap = cap ? 2 * cap : 4096);
            if (!nb) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return -1;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    if (ferror(f)) {
        free(buf);
        fclose(f);
        errno = EIO;
        return -1;
    }
    fclose(f);
    if (!len) {
        free(buf);
        buf = NULL;
    }
    *buf_p = buf;
    *len_p = len;
    return 0;
}
