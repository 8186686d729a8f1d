/* px_shm_reg.c: registered buffers of the shared-memory path (px_shm_reg.h).
 *
 * Region: one POSIX shared-memory segment of n * stride bytes (stride =
 * the requested bytes rounded up to pages), created by rank 0 and mapped
 * by every rank of the communicator; rank p's buffer is bytes
 * [p * stride, p * stride + bytes) of it, in every rank's mapping. The name
 * is unlinked before px_shm_alloc returns on every path: the segment is
 * made by px__shm_segment, as px_shm.c's is; nothing is left in /dev/shm. Each rank touches only its own
 * part when it computes (the pages of the others are read, never written,
 * by the collective below), so the node holds n * bytes, as n private
 * buffers would.
 *
 * The registered all-reduce (in place, over a range of a region, from
 * PX__SHM_REG_MIN_BYTES up; driven by px_shm.c's phases and waits, which
 * keep their deadlines, dead-peer checks and futex sleeps):
 *   phase 1  each rank publishes a descriptor (region, offset, seq) in its
 *            staging buffer: "my bytes are final"; after the wait it checks
 *            every peer's descriptor (a mismatch names both offsets), then
 *            reduces part `me` of every rank's buffer, in rank order
 *            0..n-1, into part `me` of its own (px__shm_reg_reduce): the
 *            same additions in the same order as the slot path, so the
 *            same bits;
 *   phase 2  after the wait every part is final: it copies part p of rank
 *            p's buffer into its own for every p != me;
 *   phase 3  after the wait no peer reads this rank's buffer any more: the
 *            request completes and its owner may write the buffer again
 *            (the next step's backward). This is the barrier rule: a
 *            buffer is written by its owner only outside [its phase-1
 *            publish, every rank's phase-3 publish].
 * In-place parts: rank me writes only part me of its own buffer in phase 1,
 * which no peer reads in phase 1 (peer q reads part q); in phase 2 it
 * writes the parts q != me of its own buffer, which no peer reads then
 * (peer q reads part me of ours). A phase-1 reduction whose output is one
 * of its inputs goes through a small cache-resident temporary when n > 2
 * (px__shm_reg_reduce), so every input element is read before it is
 * overwritten.
 *
 * Memory traffic per rank (n ranks, B bytes): phase 1 reads B and writes
 * B/n, phase 2 reads and writes (n-1)/n B. The slot path does the same plus
 * the copy-in (B read, B written into the segment) and the copy of its
 * part into its slot (B/n); and it waits twice per 256 KiB step where this
 * waits three times per collective.
 *
 * Runs on the thread using the communicator (single-threaded, as the rest
 * of the transport); the region list is process-wide. */
#include "px_shm_reg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "px_env.h"
#include "px_log.h"
#include "px_reduce.h"
#include "px_shm.h"
#include "px_transport_int.h"

#define DESC_MAGIC 0x52656731u /* "Reg1" */
/* bytes of the phase-1 temporary where n > 2 (fits L1 with its inputs' lines) */
#define TMP_BYTES 16384

typedef struct region {
    const px_comm_t *comm; /* NULL once the communicator is gone */
    uint32_t id;
    char *base;            /* the whole mapping, n * stride bytes */
    size_t map_bytes, stride, bytes;
    int n, me;
    char **peer;           /* [n]: base + p * stride */
    struct region *next;
} region_t;

static region_t *regions;
static uint32_t next_id;

static size_t page_up(size_t x)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (x + pg - 1) / pg * pg;
}

px_status_t px_shm_alloc(px_comm_t *comm, size_t bytes, int want, void **ptr_p)
{
    size_t stride = page_up(bytes), map_bytes;
    void *base;
    region_t *r;
    px_status_t status;

    *ptr_p = NULL;
    if (bytes == 0 || !comm || comm->size < 2 || !comm->shm) /* comm->shm: agreed at setup */
        return PX_OK;
    map_bytes = stride * (size_t)comm->size;
    r = calloc(1, sizeof(*r));
    if (r && !(r->peer = calloc((size_t)comm->size, sizeof(char *)))) {
        free(r);
        r = NULL;
    }
    status = px__shm_segment(comm, want && px_env_int("PX_SHM_REG") != 0, "px-reg",
                             "buffer not registered", &map_bytes, 0, NULL, 0, r != NULL, &base);
    if (status != PX_OK || !base) {
        if (r)
            free(r->peer);
        free(r);
        return status;
    }
    r->comm = comm;
    r->id = next_id++; /* every rank registers the same regions in the same order */
    r->base = base;
    r->map_bytes = map_bytes;
    r->stride = stride;
    r->bytes = bytes;
    r->n = comm->size;
    r->me = comm->rank;
    for (int p = 0; p < r->n; p++)
        r->peer[p] = (char *)base + (size_t)p * stride;
    r->next = regions;
    regions = r;
    px_debug("comm %u: registered region %u: %zu bytes per rank", comm->id, r->id, bytes);
    *ptr_p = r->peer[r->me];
    return PX_OK;
}

void px_shm_free(void *ptr)
{
    if (!ptr)
        return;
    for (region_t **pp = &regions; *pp; pp = &(*pp)->next) {
        region_t *r = *pp;
        if (r->peer[r->me] != ptr)
            continue;
        *pp = r->next;
        munmap(r->base, r->map_bytes);
        free(r->peer);
        free(r);
        return;
    }
    abort(); /* not a px_shm_alloc buffer: a double free or a foreign pointer */
}

void px__shm_reg_detach(const px_comm_t *comm)
{
    for (region_t *r = regions; r; r = r->next)
        if (r->comm == comm)
            r->comm = NULL;
}

int px__shm_reg_lookup(const px_comm_t *comm, const void *buf, uint64_t bytes,
                       px__shm_reg_view_t *v)
{
    const char *b = buf;

    for (region_t *r = regions; r; r = r->next) {
        const char *mine = r->peer[r->me];
        if (r->comm != comm || b < mine || b >= mine + r->bytes ||
            bytes > (uint64_t)(mine + r->bytes - b))
            continue;
        v->region = r->id;
        v->offset = (uint64_t)(b - mine);
        v->peer = r->peer;
        return 1;
    }
    return 0;
}

/* --- the descriptor ------------------------------------------------------------------ */

typedef struct desc {
    uint32_t magic, seq, region, pad;
    uint64_t offset;
} desc_t;

_Static_assert(sizeof(desc_t) == PX__SHM_REG_DESC_BYTES, "descriptor size");

void px__shm_reg_post(void *desc, uint32_t seq, const px__shm_reg_view_t *v)
{
    desc_t d = {DESC_MAGIC, seq, v->region, 0, v->offset};
    memcpy(desc, &d, sizeof(d));
}

px_status_t px__shm_reg_check(px_comm_t *comm, int p, uint32_t seq, const void *desc,
                              const px__shm_reg_view_t *v)
{
    desc_t d;

    memcpy(&d, desc, sizeof(d));
    if (d.magic != DESC_MAGIC || d.seq != seq)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: all-reduce #%u mismatch: its buffer is not a "
                                  "registered one, ours is (region %u offset %llu)", p, seq,
                                  v->region, (unsigned long long)v->offset);
    if (d.region != v->region || d.offset != v->offset)
        return px__comm_set_error(comm, PX_ERR_MISMATCH,
                                  "rank %d: all-reduce #%u mismatch: it passed registered region "
                                  "%u offset %llu, we passed region %u offset %llu", p, seq,
                                  d.region, (unsigned long long)d.offset, v->region,
                                  (unsigned long long)v->offset);
    return PX_OK;
}

/* --- the reductions ------------------------------------------------------------------ */

/* Elements [*start_p, *start_p + *len_p) of part j of c elements in n parts. */
static void part(uint64_t c, int n, int j, uint64_t *start_p, uint64_t *len_p)
{
    uint64_t base = c / (uint64_t)n, rem = c % (uint64_t)n, uj = (uint64_t)j;
    *start_p = uj * base + (uj < rem ? uj : rem);
    *len_p = base + (uj < rem ? 1 : 0);
}

void px__shm_reg_reduce(const px__shm_reg_view_t *v, int n, int me, px_dtype_t dtype,
                        px_redop_t op, uint64_t count)
{
    size_t esz = px_dtype_size(dtype);
    uint64_t st, len;
    char *dst;

    part(count, n, me, &st, &len);
    if (!len)
        return;
#define IN(p, at) (v->peer[(p)] + v->offset + (size_t)(st + (at)) * esz)
    dst = IN(me, 0);
    if (n == 2) {
        px_reduce_apply(dtype, op, dst, IN(0, 0), IN(1, 0), (size_t)len);
    } else {
        /* dst is input `me`: accumulate ranks 0..n-2 in a temporary, the
         * last addition writes dst (reading input me before) */
        _Alignas(64) char tmp[TMP_BYTES];
        uint64_t chunk = TMP_BYTES / esz;
        for (uint64_t at = 0; at < len; at += chunk) {
            size_t c = (size_t)(len - at < chunk ? len - at : chunk);
            px_reduce_apply(dtype, op, tmp, IN(0, at), IN(1, at), c);
            for (int p = 2; p < n - 1; p++)
                px_reduce_apply(dtype, op, tmp, tmp, IN(p, at), c);
            px_reduce_apply(dtype, op, dst + (size_t)at * esz, tmp, IN(n - 1, at), c);
        }
    }
#undef IN
    if (op == PX_AVG)
        px_reduce_avg_finish(dtype, dst, (size_t)len, n);
}

void px__shm_reg_gather(const px__shm_reg_view_t *v, int n, int me, uint64_t count, size_t esz)
{
    char *mine = v->peer[me] + v->offset;

    for (int i = 1; i < n; i++) {
        int p = (me + i) % n; /* each rank starts on a different peer */
        uint64_t st, len;
        part(count, n, p, &st, &len);
        if (len)
            memcpy(mine + (size_t)st * esz, v->peer[p] + v->offset + (size_t)st * esz,
                   (size_t)len * esz);
    }
}
