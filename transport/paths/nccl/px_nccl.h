/* px_nccl.h: the NCCL engine of device-buffer collectives (private to
 * paths/nccl; the core reaches it through px__path_nccl, px_path.h). What
 * the engine is and when it runs: px_devmem.h (PX_COLL_BACKEND). The
 * pure parts of its choice are here, for the unit tests. */
#ifndef PX_NCCL_H
#define PX_NCCL_H

#include <stddef.h>

/* PX_COLL_BACKEND's values. */
typedef enum px__coll_backend {
    PX__BACKEND_AUTO = 0, /* NCCL where every rank has its own GPU and NCCL starts */
    PX__BACKEND_NCCL,     /* NCCL, or the collective fails naming why */
    PX__BACKEND_PX,       /* the transport's own paths only */
} px__coll_backend_t;

/* "auto", "nccl" or "px" (case-insensitive; NULL or "" is auto) into
 * *backend_p: 0, or -1 for anything else (*backend_p untouched). */
int px__nccl_backend_parse(const char *value, px__coll_backend_t *backend_p);

/* Whether the `n` ranks' GPUs (ids[r]: rank r's node name and PCI bus id,
 * "node/0000:19:00.0") are all different: 1, else 0 with *a_p < *b_p the
 * lowest pair of ranks sharing one (the first rank by id order, then
 * rank). O(n log n); `ids` is not changed. -1 when out of memory. */
int px__nccl_gpus_distinct(const char *const *ids, int n, int *a_p, int *b_p);

#endif
