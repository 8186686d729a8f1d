/* memacct.c: tagged allocations and their counters (memacct.h).
 *
 * Blocks come from the kernel backend's mem_alloc (host memory on the CPU
 * backend, device memory on CUDA), so nothing may be written in front of the
 * payload: each live block has a host-side record (pointer, category,
 * bytes) in a list, newest first (the engine frees mostly what it allocated
 * last: ZeRO-3's gathered units). Live blocks number in the tens, so the
 * linear search on free costs nothing next to the free itself. Single
 * training thread. */
#include "memacct.h"

#include <stdlib.h>

#include "px_devmem.h"

typedef struct block {
    struct block *next;
    void *ptr;
    px_mem_cat_t cat;
    uint64_t bytes;
    int host; /* px_mem_calloc_host: calloc'd */
    void (*release)(void *); /* px_mem_adopt: frees ptr (NULL otherwise) */
} block_t;

static px_mem_stats_t g;
static block_t *live;
static const px_kernel_ops_t *backend;

static const px_kernel_ops_t *ops(void)
{
    if (!backend)
        backend = px_kernels_cpu();
    return backend;
}

void px_mem_set_backend(const px_kernel_ops_t *k)
{
    backend = k;
}

static void note_peaks(void)
{
    for (int c = 0; c < PX_MEM_NCAT; c++)
        if (g.current[c] > g.peak[c])
            g.peak[c] = g.current[c];
    uint64_t st = g.current[PX_MEM_PARAMS] + g.current[PX_MEM_GRADS] + g.current[PX_MEM_OPTIM];
    if (st > g.state_peak)
        g.state_peak = st;
}

static void *tagged_calloc(px_mem_cat_t cat, size_t n, size_t size, int host);

void *px_mem_calloc(px_mem_cat_t cat, size_t n, size_t size)
{
    return tagged_calloc(cat, n, size, 0);
}

void *px_mem_calloc_host(px_mem_cat_t cat, size_t n, size_t size)
{
    return tagged_calloc(cat, n, size, 1);
}

/* Puts block b (ptr set) on the live list as `bytes` of `cat` and updates
 * the counters and peaks; returns b->ptr. */
static void *track(block_t *b, px_mem_cat_t cat, uint64_t bytes)
{
    b->cat = cat;
    b->bytes = bytes;
    b->next = live;
    live = b;
    g.current[cat] += bytes;
    note_peaks();
    return b->ptr;
}

/* a block of the backend's memory, or (host) of the C library's */
static void *tagged_calloc(px_mem_cat_t cat, size_t n, size_t size, int host)
{
    if (cat < 0 || cat >= PX_MEM_NCAT || (size && n > SIZE_MAX / size))
        return NULL;
    size_t bytes = n * size;
    block_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    /* a distinct pointer even for 0 */
    b->ptr = host ? calloc(1, bytes ? bytes : 1) : ops()->mem_alloc(bytes ? bytes : 1);
    b->host = host;
    if (!b->ptr) {
        free(b);
        return NULL;
    }
    return track(b, cat, bytes);
}

void *px_mem_adopt(px_mem_cat_t cat, void *ptr, size_t bytes, void (*release)(void *))
{
    block_t *b;
    if (!ptr || cat < 0 || cat >= PX_MEM_NCAT || !release || !(b = calloc(1, sizeof(*b))))
        return NULL;
    b->ptr = ptr;
    b->release = release;
    return track(b, cat, bytes);
}

void px_mem_free(void *ptr)
{
    if (!ptr)
        return;
    for (block_t **pp = &live; *pp; pp = &(*pp)->next) {
        block_t *b = *pp;
        if (b->ptr != ptr)
            continue;
        *pp = b->next;
        g.current[b->cat] -= b->bytes;
        if (b->release)
            b->release(b->ptr);
        else if (b->host)
            free(b->ptr);
        else
            ops()->mem_free(b->ptr);
        free(b);
        return;
    }
    abort(); /* not a px_mem_calloc block: a double free or a foreign pointer */
}

void px_mem_stats(px_mem_stats_t *out)
{
    uint64_t scratch, scratch_peak;
    *out = g;
    /* the transport's device scratch (CUDA IPC rings) is the "comm"
     * category: no engine allocation is tagged comm */
    px_transport_device_scratch(&scratch, &scratch_peak);
    out->current[PX_MEM_COMM] += scratch;
    out->peak[PX_MEM_COMM] += scratch_peak;
    out->device_used = out->device_total = 0;
    if (ops()->mem_info &&
        ops()->mem_info(&out->device_used, &out->device_total) != PX_OK)
        out->device_used = out->device_total = 0;
}

void px_mem_reset_peaks(void)
{
    for (int c = 0; c < PX_MEM_NCAT; c++)
        g.peak[c] = g.current[c];
    g.state_peak = g.current[PX_MEM_PARAMS] + g.current[PX_MEM_GRADS] + g.current[PX_MEM_OPTIM];
}
