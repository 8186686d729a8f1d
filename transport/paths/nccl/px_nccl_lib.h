/* px_nccl_lib.h: libnccl.so.2 opened at run time (dlopen/dlsym), the
 * NCCL engine's only door to NCCL (paths/nccl; private to the path). No
 * build or package dependency: the few types and functions used are
 * declared here from NCCL's public API (nccl.h, NCCL 2.x: the enums'
 * values and the functions' C signatures are its stable ABI), so the
 * build needs no nccl.h and CPU nodes never load the library.
 *
 * Runs on the thread using the communicators. */
#ifndef PX_NCCL_LIB_H
#define PX_NCCL_LIB_H

#include <stddef.h>

#include "px_status.h"

/* ncclResult_t values used here (nccl.h) */
#define PX__NCCL_SUCCESS     0
#define PX__NCCL_IN_PROGRESS 7
/* ncclRedOp_t (nccl.h): sum 0, prod 1, max 2, min 3, avg 4 */
#define PX__NCCL_SUM  0
#define PX__NCCL_PROD 1
#define PX__NCCL_MAX  2
#define PX__NCCL_MIN  3
#define PX__NCCL_AVG  4
/* ncclDataType_t (nccl.h) */
#define PX__NCCL_UINT8    1
#define PX__NCCL_INT32    2
#define PX__NCCL_INT64    4
#define PX__NCCL_FLOAT16  6
#define PX__NCCL_FLOAT32  7
#define PX__NCCL_FLOAT64  8
#define PX__NCCL_BFLOAT16 9

/* ncclUniqueId: 128 opaque bytes (NCCL_UNIQUE_ID_BYTES), passed by value. */
typedef struct px__nccl_uid {
    char internal[128];
} px__nccl_uid_t;

typedef struct px__nccl_comm *px__nccl_comm_t; /* ncclComm_t */

/* ncclConfig_t as NCCL 2.14 defined it (the first version with
 * ncclCommInitRankConfig): NCCL reads `size` bytes of it and the fields
 * its `version` had, so this prefix stays valid in later versions. */
typedef struct px__nccl_config {
    size_t size;
    unsigned int magic;   /* 0xcafebeef */
    unsigned int version; /* NCCL_VERSION(2, 14, 3) */
    int blocking;
    int cga_cluster_size;
    int min_ctas;
    int max_ctas;
    const char *net_name;
} px__nccl_config_t;

/* The functions the engine calls; every one but init_rank_config is
 * required (a library without one is refused, naming it). */
typedef struct px__nccl_lib {
    int version; /* ncclGetVersion: 22803 for 2.28.3 */
    int (*get_version)(int *version);
    int (*get_unique_id)(px__nccl_uid_t *uid);
    int (*comm_init_rank)(px__nccl_comm_t *comm, int nranks, px__nccl_uid_t uid, int rank);
    /* NULL before NCCL 2.14 (then the blocking init) */
    int (*comm_init_rank_config)(px__nccl_comm_t *comm, int nranks, px__nccl_uid_t uid,
                                 int rank, px__nccl_config_t *config);
    int (*comm_destroy)(px__nccl_comm_t comm);
    int (*comm_abort)(px__nccl_comm_t comm);
    int (*comm_get_async_error)(px__nccl_comm_t comm, int *result);
    const char *(*get_error_string)(int result);
    int (*all_reduce)(const void *sendbuf, void *recvbuf, size_t count, int dtype, int op,
                      px__nccl_comm_t comm, void *stream);
    int (*reduce_scatter)(const void *sendbuf, void *recvbuf, size_t recvcount, int dtype,
                          int op, px__nccl_comm_t comm, void *stream);
    int (*all_gather)(const void *sendbuf, void *recvbuf, size_t sendcount, int dtype,
                      px__nccl_comm_t comm, void *stream);
    int (*broadcast)(const void *sendbuf, void *recvbuf, size_t count, int dtype, int root,
                     px__nccl_comm_t comm, void *stream);
    int (*send)(const void *sendbuf, size_t count, int dtype, int peer, px__nccl_comm_t comm,
                void *stream);
    int (*recv)(void *recvbuf, size_t count, int dtype, int peer, px__nccl_comm_t comm,
                void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
} px__nccl_lib_t;

/* The process's NCCL: opens PX_NCCL_LIBRARY (default "libnccl.so.2", the
 * dynamic loader's search) at the first call and resolves every function
 * above; later calls return the first call's answer. NULL when it could
 * not: `why` (len bytes) then says what failed (the dlopen error naming
 * the file, or "libX has no symbol ncclY"). Never unloaded. */
const px__nccl_lib_t *px__nccl_lib(char *why, size_t len);

/* The library's text of NCCL result `result` ("unhandled cuda error" ...),
 * or "NCCL error N" where it has none. */
const char *px__nccl_strerror(const px__nccl_lib_t *lib, int result);

#endif
