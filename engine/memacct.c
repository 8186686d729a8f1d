/* memacct.c: tagged allocations and their counters (memacct.h).
 *
 * Each block carries a 64-byte header (category and size) in front of the
 * pointer handed out, so px_mem_free knows what to subtract and the payload
 * stays 64-byte aligned for the vector kernels. Single training thread. */
#include "memacct.h"

#include <stdlib.h>
#include <string.h>

#define HDR 64

static px_mem_stats_t g;

static void note_peaks(void)
{
    for (int c = 0; c < PX_MEM_NCAT; c++)
        if (g.current[c] > g.peak[c])
            g.peak[c] = g.current[c];
    uint64_t st = g.current[PX_MEM_PARAMS] + g.current[PX_MEM_GRADS] + g.current[PX_MEM_OPTIM];
    if (st > g.state_peak)
        g.state_peak = st;
}

void *px_mem_calloc(px_mem_cat_t cat, size_t n, size_t size)
{
    if (cat < 0 || cat >= PX_MEM_NCAT || (size && n > (SIZE_MAX - HDR) / size))
        return NULL;
    size_t bytes = n * size;
    char *b = NULL;
    if (posix_memalign((void **)&b, HDR, HDR + bytes))
        return NULL;
    memset(b + HDR, 0, bytes);
    ((uint64_t *)b)[0] = (uint64_t)cat;
    ((uint64_t *)b)[1] = bytes;
    g.current[cat] += bytes;
    note_peaks();
    return b + HDR;
}

void px_mem_free(void *ptr)
{
    if (!ptr)
        return;
    char *b = (char *)ptr - HDR;
    uint64_t cat = ((uint64_t *)b)[0], bytes = ((uint64_t *)b)[1];
    g.current[cat] -= bytes;
    free(b);
}

void px_mem_stats(px_mem_stats_t *out) { *out = g; }

void px_mem_reset_peaks(void)
{
    for (int c = 0; c < PX_MEM_NCAT; c++)
        g.peak[c] = g.current[c];
    g.state_peak = g.current[PX_MEM_PARAMS] + g.current[PX_MEM_GRADS] + g.current[PX_MEM_OPTIM];
}
