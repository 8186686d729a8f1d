/* px_transport_int.h: internals shared by the files of the transport library
 * (not public; symbols are px__ prefixed).
 *
 * Pieces:
 *   - px_transport: UCX context + worker + the worker's event fd.
 *   - px_comm: endpoints to every rank, the abort eventfd, the watch fd, the
 *     sticky failure status, and a pool of operation records (px__op_t).
 *   - px__op_t: one outstanding UCX tag request. Records come from a pool the
 *     communicator owns and frees only at destroy, because a request that
 *     cannot be cancelled (a send to a dead peer) may still complete later and
 *     its callback writes into the record.
 *
 * 64-bit UCX tag layout (every message of parallax):
 *
 *   63      52 51 50 49          32 31                                   0
 *   +---------+-----+--------------+-------------------------------------+
 *   | comm id |kind |  src rank    | kind P2P:    user tag (32)         |
 *   |  (12)   | (2) |    (18)      | kind COLL:   seq (20) | phase (3) | |
 *   |         |     |              |              unit (9)              |
 *   +---------+-----+--------------+-------------------------------------+
 *
 * comm id keeps communicators (world = 0, later sub-communicators) apart;
 * src rank makes every receive name its sender (UCX matches tags, not
 * endpoints); the collective sequence number separates consecutive and
 * concurrent collectives (it wraps after 2^20, far beyond what can be in
 * flight); phase separates the header, ring reduce-scatter, ring
 * all-gather and schedule messages of one collective; unit (a pipeline slot
 * index, or a schedule step, modulo 512) separates the messages in flight at
 * once between two ranks, so correctness does not rest on UCX's in-order
 * matching. Receives use the full 64-bit mask. Sub-communicators put their
 * own ranks in `src rank` and their own id in `comm id`. */
#ifndef PX_TRANSPORT_INT_H
#define PX_TRANSPORT_INT_H

#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "px_status.h"
#include "px_transport.h"
#include "px_coll.h"
#include "px_devmem.h"
#include "px_kernels.h"

#define PX__TAG_KIND_P2P    0u
#define PX__TAG_KIND_COLL   1u
#define PX__TAG_KIND_WIREUP 2u
#define PX__TAG_KIND_STAGE  3u /* a staged device collective's chunks (paths/stage) */

#define PX__PHASE_HDR   0u
#define PX__PHASE_RS    1u
#define PX__PHASE_AG    2u
#define PX__PHASE_SCHED 3u /* schedule-based algorithms (tree, rd, pairwise, linear) */

#define PX__MAX_RANKS  (1 << 18)
#define PX__MAX_COMMS  (1 << 12)
#define PX__SEQ_MASK   ((1u << 20) - 1)
#define PX__UNIT_MASK  ((1u << 9) - 1)

static inline ucp_tag_t px__tag(unsigned comm_id, unsigned kind, unsigned src, uint32_t low)
{
    return ((ucp_tag_t)(comm_id & 0xfffu) << 52) | ((ucp_tag_t)(kind & 3u) << 50) |
           ((ucp_tag_t)(src & 0x3ffffu) << 32) | (ucp_tag_t)low;
}

static inline uint32_t px__coll_low(uint32_t seq, unsigned phase, unsigned unit)
{
    return ((seq & PX__SEQ_MASK) << 12) | ((phase & 7u) << 9) | (unit & PX__UNIT_MASK);
}

struct px_transport {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_len;
    int efd;              /* worker event fd (ucp_worker_get_efd) */
    int cuda_memory;      /* UCX reports CUDA memory support (px_transport_cuda_memory) */
    int n_comms;          /* live communicators (destroy order check) */
    void **leftover;      /* op records of destroyed comms whose sends never
                           * completed: freed after ucp_worker_destroy */
    size_t n_leftover;
    struct px_comm *comms; /* every live communicator on this worker (world and
                            * splits), linked by px_comm.tr_next: progress steps
                            * the requests of all of them (px_request.c) */
};

typedef struct px_request px_request_t;

typedef struct px__op {
    struct px__op *next;  /* active / free / orphan list link */
    void *req;            /* UCX request while not done, else NULL */
    px_request_t *owner;  /* the collective request that posted it, or NULL */
    int done;
    ucs_status_t status;  /* final status (valid when done) */
    size_t length;        /* received bytes (recv, valid when done) */
    size_t expect;        /* bytes expected (recv) */
    int peer;             /* comm rank of the other side */
    int is_send;
    int hdr;              /* a collective header message (px_request.c) */
    int inl;              /* a receive whose message starts with the sender's
                           * header (header-in-data, px__inline_check) */
    void *buf;            /* inl: the receive buffer (header, then data) */
} px__op_t;

typedef struct px__peer {
    ucp_ep_h ep;
    int peer_mode;        /* endpoint created with UCP_ERR_HANDLING_MODE_PEER */
    int failed;           /* known dead: UCX error callback, pidfd or watch fd */
    const char *why;      /* static text of how we know */
    struct px_comm *comm; /* back pointer for the error callback */
    int rank;
    int pidfd;            /* same-node peer: pidfd_open(pid), readable at exit; else -1 */
} px__peer_t;

/* A cached temporary buffer of a communicator (scratch slots, staging). */
typedef struct px__buf {
    void *ptr;
    size_t bytes;
    int busy;
} px__buf_t;

#define PX__NBUF 4

struct px_comm {
    px_transport_t *tr;
    struct px_comm *tr_next; /* tr->comms link (px__comm_link) */
    int tr_linked;
    int rank;
    int size;
    unsigned id;          /* tag comm id */
    struct px_comm *root; /* the world communicator (itself for the world) */
    int *wrank;           /* sub-communicator: world rank of each rank; NULL for the world */
    px__peer_t *peers;    /* world: [size]; sub: NULL (endpoints are the world's) */
    char **nodes;         /* world: [size] copies */
    uint32_t coll_seq;    /* next collective sequence number */
    unsigned next_id;     /* world: next free sub-communicator id (split) */

    int abort_efd;        /* eventfd written by px_comm_abort */
    atomic_int aborted;
    char abort_reason[128];

    int watch_fd;         /* world: -1 if none; borrowed */
    int watch_hup_rank;   /* rank to blame on hang-up, -1 unknown */
    int watch_closed;     /* hang-up seen */
    unsigned char watch_buf[8];
    size_t watch_have;

    px_status_t failed;   /* sticky failure (PEER_FAILURE, ABORTED, TIMEOUT), 0 if healthy */
    int first_dead;       /* first rank known dead (-1 none): the one errors name */
    char last_error[256];

    px__op_t *active;     /* posted, not yet reaped */
    px__op_t *free_ops;
    px__op_t *orphans;    /* could not be cancelled; completed at destroy */
    int orphaned_sends;   /* world: a destroyed sub-communicator left sends pending on
                           * these endpoints (close them by force) */
    px__op_t **all_ops;   /* every record ever allocated (freed at destroy) */
    size_t n_all, cap_all;

    px_request_t *reqs;   /* pending collective requests, in start order */
    px_request_t *reqs_tail;

    struct pollfd *pid_pfds; /* world: pidfds of same-node peers, for one poll() */
    int *pid_ranks;          /* pid_pfds[i] belongs to rank pid_ranks[i] */
    int n_pid;
    int64_t news_us;         /* world: when the watch fd and pidfds were last read
                              * (px_time_mono_us); 0: read them at the next check */

    int default_timeout_ms;
    size_t chunk_bytes;   /* PX_ALLREDUCE_CHUNK_BYTES */
    px__buf_t bufs[PX__NBUF]; /* cached temporaries, grow-only, freed at destroy */
    /* the paths' state of this communicator (px_path.h), each read only by
     * its own path: */
    struct px__shm *shm;  /* the shared-memory segment (paths/shm), NULL when off */
    struct px__ipc *ipc;  /* the peers' mapped device rings (paths/ipc) */
    int ipc_state;        /* IPC: 0 not set up yet, 1 on, -1 off (device buffers staged) */
    struct px__verdict *verdict; /* world: the peers' failure notices (px_verdict.c) */
    struct px__nccl *nccl; /* the NCCL engine of device buffers (paths/nccl), NULL until
                            * its first device collective decided */
    unsigned paths_used[2]; /* bit i: a collective on host [0] / device [1]
                             * buffers took path i of px_path.c's table,
                             * the bit after the table's: the host
                             * algorithm (px_comm_paths) */
};

/* Pipeline depth of the ring (chunks in flight per direction). */
#define PX__WINDOW 4

/* The world peer record of comm rank `r`. */
static inline px__peer_t *px__wpeer(const px_comm_t *comm, int r)
{
    return comm->wrank ? &comm->root->peers[comm->wrank[r]] : &comm->root->peers[r];
}

/* --- schedules (px_sched.c): rounds of sends/receives and local steps,
 * as libNBC compiles a collective ----------------------------------------- */
enum {
    PX__ACT_SEND = 1, /* src, n bytes to peer (tag unit `unit`) */
    PX__ACT_RECV,     /* dst, n bytes from peer */
    PX__ACT_WAIT,     /* every posted message of this request is done */
    PX__ACT_COPY,     /* memcpy(dst, src, n bytes) */
    PX__ACT_REDUCE,   /* dst = dst OP src (swap: src OP dst), n elements */
    PX__ACT_AVG,      /* dst /= comm size, n elements */
    PX__ACT_HSEND,    /* header-in-data: our header then n bytes of src, copied
                       * into dst (staging), sent to peer on the header tag */
    PX__ACT_HRECV,    /* header-in-data: header then n bytes from peer into dst
                       * (capacity PX__INLINE_MAX_BYTES), checked at the WAIT */
    /* device memory through the registered backend (px__dev_ops; paths/ipc) */
    PX__ACT_DEV_COPY,   /* mem_copy(dst, src, n bytes) */
    PX__ACT_DEV_REDUCE, /* dst = src OP dst (swap: dst OP src), n elements */
    PX__ACT_DEV_AVG,    /* dst /= comm size, n elements (AVG only) */
    PX__ACT_DEV_SYNC,   /* synchronize: every device op issued so far is done */
    PX__ACT_DEV_RECORD, /* event_record(dst: an event) */
    PX__ACT_DEV_WAITEV, /* stream_wait_event(src: an event) */
    PX__ACT_DEV_REDUCE_N, /* reduce_multi of m = peer sources, n elements, into dst:
                           * src is an array of m + 1 pointers the caller holds
                           * until the schedule ends, the sources in order and
                           * then the second destination (NULL: none) */
};

typedef struct px__act {
    int kind;
    int peer;
    unsigned unit;
    int swap;
    void *dst;
    const void *src;
    uint64_t n;
} px__act_t;

typedef struct px__sched {
    px__act_t *acts;
    size_t n, cap, pc;
    int waiting;
} px__sched_t;

/* --- the ring machine (coll/ring.c) ---------------------------------------- */
typedef struct px__ring {
    int o;                 /* rank r owns block (r + o) % n after the reduce-scatter */
    int do_rs, do_ag;
    int phase;             /* 0 reduce-scatter, 1 all-gather, 2 done */
    uint64_t base, rem;    /* block b: base + (b < rem) elements */
    uint64_t ce, nc;       /* chunk elements, chunks per block */
    uint64_t next_recv, next_done, next_send, send_head;
    px__op_t *recvs[PX__WINDOW], *sends[PX__WINDOW];
    char *slots;           /* PX__WINDOW chunk receive slots (reduce-scatter) */
    const char *src;       /* reduce-scatter input, full layout */
    char *acc;             /* partial sums (full layout) and the all-gather output */
    char *own_dst;         /* where the owned block's final value goes (NULL: acc) */
} px__ring_t;

/* --- requests (px_request.c) ----------------------------------------------- */
/* A collective header on the wire. Sent alone (the header exchange), or in
 * front of the data (header-in-data, `inl` 1: the small all-reduce, whose
 * every message is the first between its two ranks), or alone with
 * `notice` 1: the sender found a mismatch and tells a rank it has not yet
 * sent to, naming the rank it disagreed with (`bad_rank`, -1 none) and that
 * rank's values (`bad`, magic 0 when unknown: a message too long to read,
 * then bad.count is its length in bytes, 0 unknown; bad.seq holds that
 * rank's `inl`). */
typedef struct px__hdr_vals {
    uint32_t magic;
    uint32_t seq;
    uint32_t kind;
    uint32_t dtype;
    uint32_t op;
    int32_t root;
    uint64_t count;
} px__hdr_vals_t;

typedef struct px__hdr {
    uint32_t magic;
    uint32_t seq;
    uint32_t kind;
    uint32_t dtype;
    uint32_t op;
    int32_t root;
    uint64_t count;
    uint32_t inl;         /* 1: header-in-data mode (what the sender runs) */
    uint32_t notice;      /* 1: a mismatch notice, no data follows */
    int32_t bad_rank;
    int32_t found_by;     /* notice: the rank that found the mismatch (a rank that
                           * received a notice passes it on with the finder's
                           * values in count..inl and its rank here) */
    px__hdr_vals_t bad;
} px__hdr_t;

enum {
    PX__COLL_ALLREDUCE = 1, PX__COLL_BCAST, PX__COLL_BARRIER, PX__COLL_REDUCE,
    PX__COLL_ALLGATHER, PX__COLL_REDUCE_SCATTER, PX__COLL_SCATTER, PX__COLL_GATHER,
    PX__COLL_ALLTOALL, PX__COLL_ALLTOALLV, PX__COLL_SEND, PX__COLL_RECV,
};

struct px_request {
    px_comm_t *comm;
    px_request_t *next;    /* comm->reqs link */
    int kind;              /* PX__COLL_* */
    uint32_t seq;
    int64_t deadline;
    px_status_t status;    /* PX_INPROGRESS until finished */
    int stage;             /* 0 header exchange pending, 1 header checked */
    int inl;               /* header-in-data: no header exchange; every message
                            * carries the header (px__req_create_inline) */
    unsigned char *sent_to; /* inl: [size] 1 once a message went to that rank */
    int overlap;           /* run the algorithm while the headers travel */
    int algo_done;         /* the algorithm finished */
    px_status_t algo_err;  /* overlap: a data-size mismatch held until the headers say why */
    int linked;            /* on comm->reqs */

    /* header exchange (mismatch detection) */
    px__hdr_t *hdr_out, *hdr_in; /* [size] */
    uint64_t *hdr_expect;  /* alltoallv: count expected from each peer (else NULL) */
    int verdict_posted;    /* alltoallv: second header round (verdicts) posted */
    px_status_t verdict_err; /* alltoallv: our own comparison's result */
    int hdr_posted;

    /* arguments */
    px_dtype_t dtype;      /* the wire dtype (fp32 for staged halves) */
    px_redop_t op;
    int root;
    uint64_t count;
    size_t esz;
    px_algo_t algo;

    /* algorithm */
    px_status_t (*advance)(px_request_t *req, int *progressed_p);
    px__sched_t sched;
    px__ring_t ring;
    px__op_t *ops[2];      /* single point-to-point op (send/recv) */

    /* fp16/bf16 reductions run in fp32: converted back into `half_dst` */
    int half_dtype;        /* -1 none, else PX_FLOAT16 / PX_BFLOAT16 */
    void *half_dst;
    const float *half_src;
    uint64_t half_count;

    /* the path that runs this request (px_path.h), NULL: the host
     * algorithm; the fields below up to `ipc` are the paths' own */
    const struct px__path *path;

    /* a collective on device buffers, run chunk by chunk through pinned
     * host buffers (paths/stage; NULL otherwise). While a chunk runs,
     * stage_tag is set and the request's messages carry kind STAGE with
     * the chunk index (px__req_tag) */
    struct px__stage *staged;
    int stage_tag;
    uint64_t stage_chunk_idx;

    /* point-to-point on a device buffer (paths/stage): chunks of p2p_chunk
     * bytes through slots 0 and 1; p2p_off/len the chunk each slot holds */
    char *p2p_dev;
    int p2p_peer;
    ucp_tag_t p2p_tag;
    size_t p2p_total, p2p_chunk, p2p_next, p2p_done;
    size_t p2p_off[2], p2p_len[2];

    void *shm;             /* shared-memory path state (paths/shm), freed with the request */
    struct px__ipcreq *ipc; /* device buffers through the peers' rings (paths/ipc), or NULL */
    struct px__ncclreq *nccl; /* a collective NCCL runs (paths/nccl), or NULL */
    void *tmp[4];          /* temporaries (comm cache or owned): 0, 1 algorithm, 2 ring
                            * slots, 3 fp16/bf16 or device staging */
};

/* The arguments of one collective, as the public call took them. */
typedef struct px__coll_args {
    int kind;                   /* PX__COLL_* */
    const void *sendbuf;        /* broadcast: the buffer; receive: NULL */
    void *recvbuf;              /* broadcast: the buffer; send: NULL */
    uint64_t count;             /* the header's count: all-reduce, reduce, broadcast,
                                 * scatter, gather elements; reduce-scatter recvcount;
                                 * all-gather sendcount; all-to-all per peer; 0 for
                                 * all-to-all-v and barrier; send / receive bytes */
    const uint64_t *sendcounts; /* all-to-all-v: per peer, elements (else NULL) */
    const uint64_t *sdispls;
    const uint64_t *recvcounts;
    const uint64_t *rdispls;
    px_dtype_t dtype;
    px_redop_t op;              /* PX_SUM where the collective does not reduce */
    int root;                   /* -1 where the collective has none */
    px_algo_t algo;             /* the host algorithm's choice (all-reduce, all-to-all;
                                 * the device paths sum in its order); else AUTO */
    const px_coll_opts_t *opts; /* may be NULL */
    int peer;                   /* send / receive: the other rank */
    ucp_tag_t p2p_tag;          /* send / receive: the messages' UCX tag */
} px__coll_args_t;

/* fp16 / bf16: reductions of these run in fp32 temporaries on the host. */
static inline int px__is_half(px_dtype_t dtype)
{
    return dtype == PX_FLOAT16 || dtype == PX_BFLOAT16;
}

/* Whether collective kind `kind` reduces (all-reduce, reduce-scatter,
 * reduce): fp16/bf16 reductions run in fp32 on the host algorithms. */
static inline int px__coll_reduces(int kind)
{
    return kind == PX__COLL_ALLREDUCE || kind == PX__COLL_REDUCE_SCATTER ||
           kind == PX__COLL_REDUCE;
}

/* --- px_algo.c: the host algorithms (coll/) chosen and set up ------------ */

/* The algorithm collective `a` runs on the host (all-reduce: by size,
 * PX_ALGO_ALLREDUCE, px__allreduce_algo and the hint; all-to-all(-v):
 * linear or pairwise by PX_ALGO_ALLTOALL, the hint and the ranks); AUTO for
 * the others (their choice is made where they start). The device paths run
 * their chunks in the order of this choice, so it is made first. */
px_algo_t px__algo_choose(const px_comm_t *comm, const px__coll_args_t *a);
/* 1 when all-reduce `a` (algorithm chosen, host buffers) sends its header
 * in its data messages (px__req_create_inline) instead of a header
 * exchange beside them. */
int px__algo_inline(const px_comm_t *comm, const px__coll_args_t *a);
/* Sets up collective `a` on `req` (created, elements to move, more than one
 * rank where the collective needs it, host buffers): fp16/bf16 reductions
 * staged into fp32, the algorithm's schedule or ring state built, req->algo
 * set. PX_ERR_NO_MEMORY; the caller discards req on error. */
px_status_t px__algo_start(px_request_t *req, const px__coll_args_t *a);

/* --- px_coll.c: the registered device memory (px_devmem.h), for the paths --- */

/* The registered device backend (px_transport_set_device_memory), or NULL. */
const px_kernel_ops_t *px__dev_ops(void);
/* 1 when `p` is the registered backend's device memory (0 without one). */
int px__is_device(const void *p);
/* 1 when `a` or `b` (NULL: none) is device memory. */
int px__on_device(const void *a, const void *b);
/* The registered px_comm_device_t (px_transport_set_comm_device), or NULL. */
const px_comm_device_t *px__comm_device(void);
/* The chunk of a device buffer's transfer in bytes (px_transport_set_stage_chunk). */
size_t px__dev_chunk(void);
/* Host memory for temporaries and staging: the registered pinned allocator
 * (px_transport_set_pinned_memory) or malloc/free. */
void *px__host_alloc(size_t bytes);
void px__host_free(void *p);

/* --- px_progress.c --- */

/* Absolute deadline (px_time_mono_ms) for `timeout_ms` (< 0: comm default). */
int64_t px__deadline(const px_comm_t *comm, int timeout_ms);
/* Posts a tagged send/recv of `bytes` to/from comm rank `peer` for `owner`
 * (NULL: none). On success *op_p is linked on comm->active. Fails only on a
 * local UCX error or if the comm has already failed. */
px_status_t px__send_post(px_comm_t *comm, int peer, ucp_tag_t tag, const void *buf,
                          size_t bytes, px__op_t **op_p);
px_status_t px__recv_post(px_comm_t *comm, int peer, ucp_tag_t tag, void *buf, size_t bytes,
                          px__op_t **op_p);
/* Blocks until every active op is done (wire-up), progressing the worker and
 * sleeping on its event fd; reaps them. On failure every active op is
 * cancelled and drained, last_error is set and the status is returned. */
px_status_t px__wait_all_ops(px_comm_t *comm, int64_t deadline);
/* Unlinks a done op from comm->active and returns it to the pool. */
void px__op_reap(px_comm_t *comm, px__op_t *op);
/* The status of a done op: PX_OK, PX_ERR_MISMATCH (size), or the peer
 * failure (naming the rank). Sets last_error on failure. */
px_status_t px__op_status(px_comm_t *comm, px__op_t *op);
/* Text "2, 3" of the ranks with pending ops of `owner` (NULL: any). */
void px__pending_ranks(px_comm_t *comm, px_request_t *owner, char *buf, size_t len);
/* Marks the comm failed with `status` and formats last_error. */
px_status_t px__comm_set_error(px_comm_t *comm, px_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks world rank `peer` dead (`why`: static text): force-closes a
 * plain-mode endpoint at once, before the worker is progressed again, so UCX
 * never starts a shared-memory copy from the dead process. `comm` is the
 * world. Sets no error: a request that can still complete succeeds; one
 * that cannot fails with PX_ERR_PEER_FAILURE naming the first dead rank. */
void px__peer_dead(px_comm_t *comm, int peer, const char *why);
/* Cancels and drains the active ops of `owner` (NULL: every active op). */
void px__cancel_ops(px_comm_t *comm, px_request_t *owner);
static inline void px__cancel_all(px_comm_t *comm)
{
    px__cancel_ops(comm, NULL);
}
/* Reads the world's watch fd and pidfds, checks the abort flags; returns an
 * error status (and sets it on `comm`) when the comm must stop or has lost
 * a rank. */
px_status_t px__check_async(px_comm_t *comm);
/* The same, except that a dead rank is only recorded (and its plain-mode
 * endpoint dropped), not an error: progress may still complete what does
 * not need it (its last messages may already be here). */
px_status_t px__poll_async(px_comm_t *comm);
/* Progresses the worker until it has nothing to do. */
void px__progress_worker(px_comm_t *comm);
/* Sleeps on the worker efd, the abort efds, the watch fd and the pidfds
 * until one fires or `timeout_ms` passes. */
void px__sleep(px_comm_t *comm, int timeout_ms);
/* The same without asking the paths' sleep hooks, and with `extra_fd`
 * (>= 0; -1: none) among the descriptors polled for POLLIN: a path's
 * sleep hook that waits on a descriptor of its own (paths/nccl: a device
 * fence) as well as on what every wait watches. */
void px__sleep_fd(px_comm_t *comm, int extra_fd, int timeout_ms);

/* --- px_verdict.c: which rank died first when several look dead --- */

/* World `w` (no-op otherwise): posts one receive per peer for the notice a
 * failing peer sends before it exits. PX_ERR_NO_MEMORY / PX_ERR_INTERNAL;
 * px__verdict_close undoes it (also after a failure). */
px_status_t px__verdict_listen(px_comm_t *w);
/* Before w->first_dead is named: takes in the notices that arrived and, if
 * that rank told us it saw another rank die, makes the other one (marked
 * dead if it was not) w->first_dead, following the chain. */
void px__verdict_settle(px_comm_t *w);
/* A failed world (first_dead >= 0) tells every reachable peer whom it saw
 * die, once, waiting at most 200 ms for the sends; call before its
 * endpoints are closed. */
void px__verdict_tell(px_comm_t *w);
/* Longest abort reason a notice carries (bytes, with the NUL). */
#define PX__ABORT_REASON_MAX 248
/* Takes in the notices that arrived (no progress); when one is a peer's
 * abort, fails `w` (sticky) with PX_ERR_PEER_FAILURE naming that peer and
 * its reason and returns it, else PX_OK. Cheap: one status check per peer
 * with a notice outstanding. */
px_status_t px__verdict_poll(px_comm_t *w);
/* This rank aborts: sends every live peer of world `w` an abort notice
 * carrying `reason` (copied, truncated to PX__ABORT_REASON_MAX - 1),
 * waiting at most 200 ms for the sends. Once per communicator, and not
 * after px__verdict_tell; returns 1 if the notices went out, 0 if not
 * (no peers, or already told). */
int px__verdict_abort(px_comm_t *w, const char *reason);
/* Cancels the posted receives and frees the state; after the endpoints
 * are closed (a pending notice send reads it until then). */
void px__verdict_close(px_comm_t *w);

/* --- px_request.c --- */

/* Links `comm` on its transport's list of communicators, so that progress
 * made on any communicator of the worker steps its requests too (a no-op
 * when linked). */
void px__comm_link(px_comm_t *comm);
/* Unlinks `comm` (destroy); a no-op when not linked. */
void px__comm_unlink(px_comm_t *comm);

/* Allocates a request (calloc) with the fields every kind sets: comm, kind,
 * dtype, op, root, count, element size, deadline (opts' timeout or the
 * communicator's), algorithm hint; in progress, no sequence number, not
 * linked anywhere. NULL when out of memory. The caller owns it until it
 * links it (px__req_create, px__req_create_inline, a path's enqueue). */
px_request_t *px__req_alloc(px_comm_t *comm, int kind, px_dtype_t dtype, px_redop_t op,
                            uint64_t count, int root, const px_coll_opts_t *opts);
/* px__req_alloc's field setup on memory the caller provides (zeroed here):
 * the shared-memory path reuses one request per communicator. */
void px__req_init(px_request_t *req, px_comm_t *comm, int kind, px_dtype_t dtype,
                  px_redop_t op, uint64_t count, int root, const px_coll_opts_t *opts);
/* Whether a waiting rank may spin before it sleeps: 1 while the job's
 * ranks on this node are no more than the CPUs this process may run on
 * (checked once, from `comm`'s world) and the 1-minute load average is not
 * above them (read at most once a second); Open MPI's rule (it yields only
 * when oversubscribed), plus the load, because a spinner on a loaded
 * machine holds its peer off the CPU. */
int px__spin_allowed(const px_comm_t *comm);
/* 1 when every rank of `comm` runs on one node (the world's node names,
 * from the bootstrap, are equal), else 0 (0 too when the world has no
 * names). The same answer on every rank: the shared-memory segment and
 * the CUDA IPC rings are set up only then. */
int px__comm_one_node(const px_comm_t *comm);
/* Appends `req` to `comm`'s list of pending requests (the list progress
 * steps, in start order) and marks it linked; the communicator owns it from
 * then until it completes and its caller frees it. */
void px__req_link(px_comm_t *comm, px_request_t *req);
/* "all-reduce", "broadcast", ... for a PX__COLL_* kind ("unknown collective"
 * otherwise); static string, for error messages. */
const char *px__coll_kind_name(int kind);
/* Allocates a request of `kind` on comm: takes the next sequence number,
 * posts the header exchange (header count `count`, and with `expect` (or
 * NULL) the per-peer counts of alltoallv) and links it on comm->reqs.
 * The caller then sets the algorithm (advance, sched, ring). */
px_status_t px__req_create(px_comm_t *comm, int kind, px_dtype_t dtype, px_redop_t op,
                           uint64_t count, int root, const uint64_t *send_counts,
                           const uint64_t *expect, const px_coll_opts_t *opts,
                           px_request_t **req_p);
/* Releases temporary slot i of `req` (back to the comm's cache, or freed);
 * a no-op when the slot is empty. */
void px__req_tmp_release(px_request_t *req, int i);
/* Allocates a request in header-in-data mode: like px__req_create (no
 * send counts, no expect), but posts no header exchange: the algorithm
 * sends its header in front of every message (PX__ACT_HSEND) and checks
 * the peer's in every receive (px__inline_check), so a rank checks the
 * ranks it exchanges data with, and a rank that finds a mismatch tells
 * every rank it has not sent to yet (px__inline_fail). Only for
 * algorithms in which each rank sends at most one message to each other
 * rank (recursive doubling). */
px_status_t px__req_create_inline(px_comm_t *comm, int kind, px_dtype_t dtype, px_redop_t op,
                                  uint64_t count, int root, const px_coll_opts_t *opts,
                                  px_request_t **req_p);
/* Checks a done header-in-data receive `o` of `req` (length, the peer's
 * header, a notice): PX_OK, or PX_ERR_MISMATCH naming both ranks' values
 * after telling the ranks not yet sent to (px__inline_fail). */
px_status_t px__inline_check(px_request_t *req, px__op_t *o);
/* Our header for a header-in-data message (into `h`). */
void px__inline_header(const px_request_t *req, px__hdr_t *h);
/* Cancels and frees every pending request of `comm` (destroy). */
void px__comm_drop_requests(px_comm_t *comm);
/* Frees a request that never ran (argument error after create). */
void px__req_discard(px_request_t *req);
/* A temporary of `bytes` for `req` (slot i < 4), from the comm's cache
 * when one is free. NULL on out of memory. Released when the request ends. */
void *px__req_tmp(px_request_t *req, int i, size_t bytes);
/* The tag of this request's message from comm rank `src`. */
static inline ucp_tag_t px__req_tag(const px_request_t *req, int src, unsigned phase,
                                    unsigned unit)
{
    if (req->stage_tag) /* a staged chunk: seq (12 bits) | chunk (8) | phase | unit */
        return px__tag(req->comm->id, PX__TAG_KIND_STAGE, (unsigned)src,
                       ((req->seq & 0xfffu) << 20) |
                           ((uint32_t)(req->stage_chunk_idx & 0xffu) << 12) |
                           ((phase & 7u) << 9) | (unit & PX__UNIT_MASK));
    return px__tag(req->comm->id, PX__TAG_KIND_COLL, (unsigned)src,
                   px__coll_low(req->seq, phase, unit & PX__UNIT_MASK));
}
/* Posts on behalf of `req` (owner set). */
px_status_t px__req_send(px_request_t *req, int peer, ucp_tag_t tag, const void *buf,
                         size_t bytes, px__op_t **op_p);
px_status_t px__req_recv(px_request_t *req, int peer, ucp_tag_t tag, void *buf, size_t bytes,
                         px__op_t **op_p);

/* --- px_sched.c --- */

/* Appends an action; PX_ERR_NO_MEMORY. */
px_status_t px__sched_add(px__sched_t *s, int kind, int peer, unsigned unit, void *dst,
                          const void *src, uint64_t n, int swap);
/* The schedule's advance function (steps req->sched). */
px_status_t px__sched_advance(px_request_t *req, int *progressed_p);
void px__sched_free(px__sched_t *s);

/* --- algorithms (coll/ files): each builds req's schedule or ring state ---- */
px_status_t px__ring_setup(px_request_t *req, int o, int do_rs, int do_ag, const void *src,
                           void *acc, void *own_dst, uint64_t base, uint64_t rem);
px_status_t px__ring_advance(px_request_t *req, int *progressed_p);
px_status_t px__rd_allreduce_build(px_request_t *req, const void *sendbuf, void *recvbuf);
px_status_t px__rabenseifner_allreduce_build(px_request_t *req, const void *sendbuf,
                                             void *recvbuf);
px_status_t px__tree_bcast_build(px_request_t *req, void *buf, uint64_t bytes);
px_status_t px__tree_reduce_build(px_request_t *req, const void *sendbuf, void *recvbuf);
px_status_t px__linear_scatter_build(px_request_t *req, const void *sendbuf, void *recvbuf);
px_status_t px__linear_gather_build(px_request_t *req, const void *sendbuf, void *recvbuf);
px_status_t px__pairwise_alltoallv_build(px_request_t *req, const void *sendbuf,
                                         const uint64_t *sendcounts, const uint64_t *sdispls,
                                         void *recvbuf, const uint64_t *recvcounts,
                                         const uint64_t *rdispls, int wait_each_step);
/* The same, empty blocks neither sent nor received (coll/pairwise.c). */
px_status_t px__pairwise_alltoallv_sparse_build(px_request_t *req, const void *sendbuf,
                                                const uint64_t *sendcounts,
                                                const uint64_t *sdispls, void *recvbuf,
                                                const uint64_t *recvcounts,
                                                const uint64_t *rdispls, int wait_each_step);

/* All-reduce algorithm forced by tests (0 auto, 1 ring, 2 recursive
 * doubling); per-call hints and PX_ALGO_ALLREDUCE do the same. */
extern int px__allreduce_algo;
/* Messages up to this many bytes use recursive doubling in auto. */
#define PX__RD_MAX_BYTES (32u * 1024u)
/* All-reduces of at most this many bytes run recursive doubling with the
 * header in the data messages (px__req_create_inline): one message per
 * exchange instead of a header exchange beside it. A receive is posted
 * with room for a header and this many bytes, so a peer's longer message
 * (another count) is still read whole and named, never truncated. */
#define PX__INLINE_MAX_BYTES PX__RD_MAX_BYTES
/* UCX's default eager/rendezvous threshold between processes of one node
 * (tag_send: egr/bcopy up to 8192 bytes, then rndv: RTS, a CMA get by the
 * receiver, ATS). Data of (8192 - header, 8192] bytes would cross it only
 * because of the header and pay a rendezvous round trip: such all-reduces
 * keep the header exchange (bench-small-lat, 2 ranks, 8 KiB: minimum 6 us
 * with the header exchange, 32 us with the header in data). */
#define PX__EAGER_GUESS_BYTES 8192u
/* 1: small all-reduces run the header exchange instead of the header in
 * their data (what they did before communication overlapped compute); set by benchmarks comparing
 * the two in one binary (tests/bench/bench_small_lat.c), 0 otherwise. */
extern int px__inline_disable;
/* Auto spin bound (PX_SPIN_US=-1) on a node that is not oversubscribed (us). */
#define PX__AUTO_SPIN_US 200
/* Collectives of at most this many bytes per rank run their data phase
 * while the header exchange is in flight (one round trip less). Every size
 * does (measured, best of 10: 4 ranks 256 KiB-4 MiB 0.7-0.95x the time,
 * 2 ranks 0.9-1.0x): receives are
 * posted with our own sizes, so a mismatch never writes past a buffer. */
#define PX__OVERLAP_MAX_BYTES UINT64_MAX

#endif
