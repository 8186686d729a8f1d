#ifndef PX_FILE_H
#define PX_FILE_H

#include <stddef.h>

/* Reads the whole file at `path` into *buf_p (malloc'd, the caller frees;
 * NULL for an empty file) and its length in bytes into *len_p. Returns 0,
 * or -1 with errno set (fopen's, or ENOMEM/EIO) and nothing to free. */
int px_read_file(const char *path, char **buf_p, size_t *len_p);

#endif
