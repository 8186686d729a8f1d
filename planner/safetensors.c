/* safetensors.c: a safetensors file's header, read and checked
 * (safetensors.h). */
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The largest header read (the hub's GPT-2 XL has ~60 KB). */
#define MAX_HEADER ((uint64_t)64 << 20)

px_status_t px_safetensors_header(const char *path, json_t **hdr_p, uint64_t *data_p,
                                  uint64_t *file_bytes_p, char *err, size_t errlen)
{
    unsigned char len8[8];
    uint64_t n = 0;
    struct stat st;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        px_invalid(err, errlen, "%s: %s", path, strerror(e));
        return e == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
    }
    if (fstat(fileno(f), &st) < 0 || fread(len8, 1, 8, f) != 8) {
        fclose(f);
        return px_invalid(err, errlen, "%s: too short for a safetensors file", path);
    }
    for (int b = 7; b >= 0; b--)
        n = n << 8 | len8[b];
    *file_bytes_p = (uint64_t)st.st_size;
    if (n < 2 || n > MAX_HEADER || 8 + n > *file_bytes_p) {
        fclose(f);
        return px_invalid(err, errlen, "%s: header length %llu does not fit the file (%llu "
                          "bytes): not a safetensors file", path, (unsigned long long)n,
                          (unsigned long long)*file_bytes_p);
    }
    char *buf = malloc(n);
    if (!buf) {
        fclose(f);
        return PX_ERR_NO_MEMORY;
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    json_error_t jerr;
    json_t *hdr = got == n ? json_loadb(buf, n, 0, &jerr) : NULL;
    free(buf);
    if (!json_is_object(hdr)) {
        json_decref(hdr);
        return px_invalid(err, errlen, "%s: the safetensors header is not a JSON object", path);
    }
    *hdr_p = hdr;
    *data_p = 8 + n;
    return PX_OK;
}

int px_safetensors_entry(json_t *hdr, const char *file, const char *name, int max_dims,
                         int *ndim, long long shape[PX_SAFETENSORS_MAX_DIMS], uint64_t data,
                         uint64_t file_bytes, uint64_t *begin, uint64_t *end, char *err,
                         size_t errlen)
{
    json_t *e = json_object_get(hdr, name), *sh = json_object_get(e, "shape");
    json_t *off = json_object_get(e, "data_offsets");
    const char *dtype = json_string_value(json_object_get(e, "dtype"));
    if (!e) {
        px_invalid(err, errlen, "%s has no tensor %s", file, name);
        return -1;
    }
    if (!dtype || strcmp(dtype, "F32")) {
        px_invalid(err, errlen, "%s: tensor %s is %s; only F32 is read (save the model in "
                   "float32)", file, name, dtype ? dtype : "of no dtype");
        return -1;
    }
    if (max_dims > PX_SAFETENSORS_MAX_DIMS)
        max_dims = PX_SAFETENSORS_MAX_DIMS;
    *ndim = json_is_array(sh) ? (int)json_array_size(sh) : 0;
    if (*ndim < 1 || *ndim > max_dims || !json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1))) {
        px_invalid(err, errlen, "%s: tensor %s has a bad shape or data_offsets", file, name);
        return -1;
    }
    uint64_t elems = 1;
    for (int d = 0; d < *ndim; d++) {
        json_t *v = json_array_get(sh, (size_t)d);
        shape[d] = json_is_integer(v) ? json_integer_value(v) : -1;
        if (shape[d] < 1 || shape[d] > (1 << 30)) {
            px_invalid(err, errlen, "%s: tensor %s has a bad shape", file, name);
            return -1;
        }
        elems *= (uint64_t)shape[d];
    }
    long long b = json_integer_value(json_array_get(off, 0));
    long long e2 = json_integer_value(json_array_get(off, 1));
    if (b < 0 || e2 < b || (uint64_t)(e2 - b) != elems * 4 ||
        data + (uint64_t)e2 > file_bytes) {
        px_invalid(err, errlen, "%s: tensor %s: data_offsets [%lld, %lld] do not hold its "
                   "%llu floats inside the file", file, name, b, e2, (unsigned long long)elems);
        return -1;
    }
    *begin = (uint64_t)b;
    *end = (uint64_t)e2;
    return 0;
}
