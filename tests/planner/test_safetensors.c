/* test_safetensors.c: planner/safetensors.h, the one safetensors header
 * reader: a good file's header and entries, then each kind of bad file
 * refused with a message naming the file and what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../px_check.h"
#include "safetensors.h"

static char dir[] = "/tmp/px-safetensors-XXXXXX";

/* Writes a file: the 8-byte length of `hdr` (or `len_override` when not
 * 0), the header, then `data` bytes of zeros. */
static const char *write_st(const char *name, const char *hdr, unsigned long long len_override,
                            size_t data)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    unsigned long long n = len_override ? len_override : strlen(hdr);
    for (int b = 0; b < 8; b++)
        fputc((int)(n >> (8 * b)) & 0xff, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < data; i++)
        fputc(0, f);
    fclose(f);
    return path;
}

/* px_safetensors_entry of `name` in the file `hdr` makes with `data` bytes;
 * its message into err. */
static int entry_of(const char *hdr, size_t data, const char *name, int max_dims, int *nd,
                    long long *shape, char *err, size_t errlen)
{
    json_t *h = NULL;
    uint64_t d0, fb, b, e;
    const char *p = write_st("e.safetensors", hdr, 0, data);
    if (px_safetensors_header(p, &h, &d0, &fb, err, errlen) != PX_OK)
        return -2;
    int r = px_safetensors_entry(h, p, name, max_dims, nd, shape, d0, fb, &b, &e, err, errlen);
    json_decref(h);
    return r;
}

int main(void)
{
    char err[512];
    json_t *h = NULL;
    uint64_t d0 = 0, fb = 0, b = 0, e = 0;
    long long shape[PX_SAFETENSORS_MAX_DIMS];
    int nd = 0;
    if (!mkdtemp(dir))
        return 1;

    /* a good file: a (2, 3) tensor, a vector after it, metadata */
    const char *good = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"v\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}";
    const char *p = write_st("good.safetensors", good, 0, 40);
    CHECK(px_safetensors_header(p, &h, &d0, &fb, err, sizeof(err)) == PX_OK, "good: %s", err);
    CHECK(d0 == 8 + strlen(good) && fb == d0 + 40, "data at %llu, %llu bytes",
          (unsigned long long)d0, (unsigned long long)fb);
    CHECK(px_safetensors_entry(h, p, "w", 2, &nd, shape, d0, fb, &b, &e, err, sizeof(err)) ==
              0 && nd == 2 && shape[0] == 2 && shape[1] == 3 && b == 0 && e == 24,
          "w: %s", err);
    CHECK(px_safetensors_entry(h, p, "v", 2, &nd, shape, d0, fb, &b, &e, err, sizeof(err)) ==
              0 && nd == 1 && shape[0] == 4 && b == 24 && e == 40, "v: %s", err);
    CHECK(px_safetensors_entry(h, p, "x", 2, &nd, shape, d0, fb, &b, &e, err, sizeof(err)) ==
              -1 && strstr(err, "has no tensor x"), "missing: %s", err);
    CHECK(px_safetensors_entry(h, p, "w", 1, &nd, shape, d0, fb, &b, &e, err, sizeof(err)) ==
              -1 && strstr(err, "bad shape"), "2 dims where 1 is allowed: %s", err);
    json_decref(h);

    /* the header */
    char none[256];
    snprintf(none, sizeof(none), "%s/none", dir);
    CHECK(px_safetensors_header(none, &h, &d0, &fb, err, sizeof(err)) == PX_ERR_NOT_FOUND &&
              strstr(err, none), "no file: %s", err);
    p = write_st("long.safetensors", "{}", 1000, 0);
    CHECK(px_safetensors_header(p, &h, &d0, &fb, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
              strstr(err, "header length 1000"), "length past the file: %s", err);
    p = write_st("json.safetensors", "[1,2]", 0, 0);
    CHECK(px_safetensors_header(p, &h, &d0, &fb, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT &&
              strstr(err, "not a JSON object"), "an array: %s", err);

    /* the entries */
    CHECK(entry_of("{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "w",
                   2, &nd, shape, err, sizeof(err)) == -1 && strstr(err, "is F16"),
          "F16: %s", err);
    CHECK(entry_of("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
                   "w", 2, &nd, shape, err, sizeof(err)) == -1 && strstr(err, "[0, 20]"),
          "offsets short of the shape: %s", err);
    CHECK(entry_of("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 20,
                   "w", 2, &nd, shape, err, sizeof(err)) == -1 && strstr(err, "inside the file"),
          "a truncated file: %s", err);
    CHECK(entry_of("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, "w",
                   2, &nd, shape, err, sizeof(err)) == -1 && strstr(err, "bad shape"),
          "a zero dim: %s", err);
    CHECK(entry_of("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,2],\"data_offsets\":[0,8]}}", 8,
                   "w", PX_SAFETENSORS_MAX_DIMS, &nd, shape, err, sizeof(err)) == 0 && nd == 3,
          "3 dims: %s", err);

    static const char *const made[] = {"good", "long", "json", "e"};
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "%s/%s.safetensors", dir, made[i]);
        unlink(path);
    }
    rmdir(dir);
    return fails ? 1 : 0;
}
