/* data.c: llm.c-layout token file (mmap, validated once) and the
 * layout-independent global batch (see data.h). The mapping is read-only
 * and may be shared by any number of readers; one px_data_t per rank. */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "px_log.h"

struct px_data {
    void *map;
    size_t map_len;
    const uint16_t *tokens;   /* version 1, else NULL */
    const uint32_t *tokens32; /* version 2, else NULL */
    size_t ntok;
};

static void set_err(char *errbuf, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!errbuf || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

px_status_t px_data_open(const char *path, int vocab, char *errbuf, size_t errlen,
                         px_data_t **data_p)
{
    px_status_t status = PX_OK;
    struct stat st;
    void *map = MAP_FAILED;
    px_data_t *data = NULL;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(errbuf, errlen, "data file %s: %s", path, strerror(errno));
        return errno == ENOENT ? PX_ERR_NOT_FOUND : PX_ERR_IO;
    }
    if (fstat(fd, &st) < 0) {
        set_err(errbuf, errlen, "data file %s: %s", path, strerror(errno));
        status = PX_ERR_IO;
        goto out_close;
    }
    if ((size_t)st.st_size < PX_DATA_HEADER_INTS * sizeof(int32_t)) {
        set_err(errbuf, errlen, "data file %s: %lld bytes, shorter than the 1024-byte header",
                path, (long long)st.st_size);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_close;
    }
    map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        set_err(errbuf, errlen, "data file %s: mmap: %s", path, strerror(errno));
        status = PX_ERR_IO;
        goto out_close;
    }
    const int32_t *hdr = map;
    int llmc32 = hdr[0] == PX_DATA_MAGIC_LLMC_U32;
    if (hdr[0] != PX_DATA_MAGIC && !llmc32) {
        set_err(errbuf, errlen, "data file %s: bad magic %d (expected %d, llm.c token layout, or "
                "%d, llm.c's Llama 3 layout)", path, hdr[0], PX_DATA_MAGIC,
                PX_DATA_MAGIC_LLMC_U32);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_unmap;
    }
    if (llmc32 && hdr[1] != PX_DATA_VERSION_LLMC_U32) {
        set_err(errbuf, errlen, "data file %s: unsupported version %d of llm.c's Llama 3 "
                "layout (magic %d; expected version %d)", path, hdr[1], PX_DATA_MAGIC_LLMC_U32,
                PX_DATA_VERSION_LLMC_U32);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_unmap;
    }
    if (!llmc32 && hdr[1] != PX_DATA_VERSION && hdr[1] != PX_DATA_VERSION_U32) {
        set_err(errbuf, errlen, "data file %s: unsupported version %d (expected %d: uint16 "
                "tokens, or %d: uint32 tokens)", path, hdr[1], PX_DATA_VERSION,
                PX_DATA_VERSION_U32);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_unmap;
    }
    size_t width = !llmc32 && hdr[1] == PX_DATA_VERSION ? sizeof(uint16_t) : sizeof(uint32_t);
    if (hdr[2] <= 0) {
        set_err(errbuf, errlen, "data file %s: token count %d in header is not positive", path,
                hdr[2]);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_unmap;
    }
    size_t ntok = (size_t)(uint32_t)hdr[2];
    size_t want = PX_DATA_HEADER_INTS * sizeof(int32_t) + ntok * width;
    if ((size_t)st.st_size != want) {
        set_err(errbuf, errlen,
                "data file %s: size %lld bytes does not match header token count %zu "
                "(expected %zu bytes)", path, (long long)st.st_size, ntok, want);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_unmap;
    }
    if (hdr[3] > vocab) {
        /* the tokenizer's vocab, which pctl data prepare records */
        set_err(errbuf, errlen,
                "data file %s: tokenized with vocab %d (header), larger than the job's vocab %d "
                "(submit with --vocab %d or more)", path, hdr[3], vocab, hdr[3]);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_unmap;
    }
    const uint16_t *tok = (const uint16_t *)((const char *)map + 1024);
    const uint32_t *tok32 = (const uint32_t *)((const char *)map + 1024);
    uint32_t largest = 0;
    if (width == sizeof(uint16_t)) {
        for (size_t i = 0; i < ntok; i++)
            largest = tok[i] > largest ? tok[i] : largest;
    } else {
        for (size_t i = 0; i < ntok; i++)
            largest = tok32[i] > largest ? tok32[i] : largest;
    }
    if (largest >= (uint32_t)vocab) {
        /* the largest token tells the user which vocab the file needs */
        size_t first = 0;
        while ((width == sizeof(uint16_t) ? tok[first] : tok32[first]) < (uint32_t)vocab)
            first++;
        set_err(errbuf, errlen,
                "data file %s: token %u >= vocab %d (largest token %u; the first token >= vocab "
                "is at index %zu)", path,
                width == sizeof(uint16_t) ? tok[first] : tok32[first], vocab, largest, first);
        status = PX_ERR_INVALID_ARGUMENT;
        goto out_unmap;
    }
    data = calloc(1, sizeof(*data));
    if (!data) {
        status = PX_ERR_NO_MEMORY;
        goto out_unmap;
    }
    data->map = map;
    data->map_len = st.st_size;
    data->tokens = width == sizeof(uint16_t) ? tok : NULL;
    data->tokens32 = width == sizeof(uint16_t) ? NULL : tok32;
    data->ntok = ntok;
    close(fd);
    *data_p = data;
    return PX_OK;

out_unmap:
    munmap(map, st.st_size);
out_close:
    close(fd);
    return status;
}

int px_data_header_vocab(const char *path)
{
    int32_t hdr[4];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t got;
    if (fd < 0)
        return 0;
    got = read(fd, hdr, sizeof(hdr));
    close(fd);
    if (got != (ssize_t)sizeof(hdr) || hdr[0] != PX_DATA_MAGIC ||
        (hdr[1] != PX_DATA_VERSION && hdr[1] != PX_DATA_VERSION_U32) || hdr[3] < 0)
        return 0; /* llm.c's Llama 3 files record no vocab either */
    return hdr[3];
}

void px_data_close(px_data_t *data)
{
    if (!data)
        return;
    munmap(data->map, data->map_len);
    free(data);
}

size_t px_data_num_tokens(const px_data_t *data) { return data->ntok; }
const uint16_t *px_data_tokens(const px_data_t *data) { return data->tokens; }
const uint32_t *px_data_tokens32(const px_data_t *data) { return data->tokens32; }
int px_data_token_bytes(const px_data_t *data) { return data->tokens ? 2 : 4; }

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

size_t px_data_offset(uint64_t seed, int step, int i, size_t ntok, int T)
{
    uint64_t key = splitmix64(seed ^ 0x6A09E667F3BCC909ull);
    uint64_t ctr = ((uint64_t)(uint32_t)step << 32) | (uint32_t)i;
    uint64_t h = splitmix64(key ^ splitmix64(ctr));
    return (size_t)(h % (uint64_t)(ntok - (size_t)T)); /* [0, ntok - T - 1] */
}

void px_data_batch(const px_data_t *data, uint64_t seed, int step, int first, int count, int T,
                   int32_t *inputs, int32_t *targets)
{
    for (int j = 0; j < count; j++) {
        size_t off = px_data_offset(seed, step, first + j, data->ntok, T);
        if (data->tokens) {
            const uint16_t *t = data->tokens + off;
            for (int k = 0; k < T; k++) {
                inputs[(size_t)j * T + k] = t[k];
                targets[(size_t)j * T + k] = t[k + 1];
            }
        } else { /* ids < vocab <= INT32_MAX: checked at open */
            const uint32_t *t = data->tokens32 + off;
            for (int k = 0; k < T; k++) {
                inputs[(size_t)j * T + k] = (int32_t)t[k];
                targets[(size_t)j * T + k] = (int32_t)t[k + 1];
            }
        }
    }
}
