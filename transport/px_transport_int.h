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
 * flight); phase separates the header, reduce-scatter, all-gather,
 * broadcast and recursive-doubling messages of one collective; unit (a pipeline slot index modulo
 * 512) separates the chunks in flight at once, so correctness does not rest
 * on UCX's in-order matching. Receives use the full 64-bit mask. */
#ifndef PX_TRANSPORT_INT_H
#define PX_TRANSPORT_INT_H

#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "px_status.h"
#include "px_transport.h"

#define PX__TAG_KIND_P2P    0u
#define PX__TAG_KIND_COLL   1u
#define PX__TAG_KIND_WIREUP 2u

#define PX__PHASE_HDR   0u
#define PX__PHASE_RS    1u
#define PX__PHASE_AG    2u
#define PX__PHASE_BCAST 3u
#define PX__PHASE_RD    4u

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
    int n_comms;          /* live communicators (destroy order check) */
    void **leftover;      /* op records of destroyed comms whose sends never
                           * completed: freed after ucp_worker_destroy */
    size_t n_leftover;
};

typedef struct px__op {
    struct px__op *next;  /* active / free / orphan list link */
    void *req;            /* UCX request while not done, else NULL */
    int done;
    ucs_status_t status;  /* final status (valid when done) */
    size_t length;        /* received bytes (recv, valid when done) */
    size_t expect;        /* bytes expected (recv) */
    int peer;             /* comm rank of the other side */
    int is_send;
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

struct px_comm {
    px_transport_t *tr;
    int rank;
    int size;
    unsigned id;          /* tag comm id */
    px__peer_t *peers;    /* [size] */
    char **nodes;         /* [size] copies */
    uint32_t coll_seq;    /* next collective sequence number */

    int abort_efd;        /* eventfd written by px_comm_abort */
    atomic_int aborted;
    char abort_reason[128];

    int watch_fd;         /* -1 if none; borrowed */
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
    px__op_t **all_ops;   /* every record ever allocated (freed at destroy) */
    size_t n_all, cap_all;

    struct pollfd *pid_pfds; /* pidfds of same-node peers, for one poll() */
    int *pid_ranks;          /* pid_pfds[i] belongs to rank pid_ranks[i] */
    int n_pid;

    int default_timeout_ms;
    size_t chunk_bytes;   /* PX_ALLREDUCE_CHUNK_BYTES */
    void *scratch;        /* PX__WINDOW * chunk_bytes, allocated on first use */
};

/* Pipeline depth of the ring (chunks in flight per direction). */
#define PX__WINDOW 4

/* --- px_progress.c --- */

/* Absolute deadline (px_time_mono_ms) for `timeout_ms` (< 0: comm default). */
int64_t px__deadline(const px_comm_t *comm, int timeout_ms);
/* Posts a tagged send/recv of `bytes` to/from comm rank `peer`. On success
 * *op_p is linked on comm->active. Fails only on a local UCX error or if the
 * comm has already failed. */
px_status_t px__send_post(px_comm_t *comm, int peer, ucp_tag_t tag, const void *buf,
                          size_t bytes, px__op_t **op_p);
px_status_t px__recv_post(px_comm_t *comm, int peer, ucp_tag_t tag, void *buf, size_t bytes,
                          px__op_t **op_p);
/* Blocks until `op` is done (or, with op == NULL, until every active op is
 * done), progressing the worker and sleeping on its event fd. On success
 * the finished op(s) are returned to the pool. On failure (timeout, abort,
 * watch fd, peer failure, truncation) every active op is cancelled and
 * drained, last_error is set and the status is returned. */
px_status_t px__wait(px_comm_t *comm, px__op_t *op, int64_t deadline);
/* Blocks until at least one of ops[0..nops) is done (reaps none of them;
 * reap each with px__wait, which then returns at once). Same failure
 * handling as px__wait. */
px_status_t px__wait_any(px_comm_t *comm, px__op_t *const *ops, int nops, int64_t deadline);
/* Marks the comm failed with `status` and formats last_error. */
px_status_t px__comm_set_error(px_comm_t *comm, px_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks rank `peer` dead (`why`: static text): force-closes a plain-mode
 * endpoint at once, before the worker is progressed again, so UCX never
 * starts a shared-memory copy from the dead process. Sets no error: a wait
 * that can still complete (the peer exited after sending all we need)
 * succeeds; any wait that cannot then fails with PX_ERR_PEER_FAILURE naming
 * comm->first_dead. */
void px__peer_dead(px_comm_t *comm, int peer, const char *why);
/* Cancels and drains every active op (error path). */
void px__cancel_all(px_comm_t *comm);
/* Nonzero if the abort flag or watch fd says stop; sets the error. */
px_status_t px__check_async(px_comm_t *comm);

/* --- px_coll.c --- */

/* Collective header exchange (mismatch detection): every rank sends its
 * header to every peer and checks theirs. Returns PX_ERR_MISMATCH on every
 * rank when any two ranks disagree. Consumes one sequence number; *seq_p
 * receives it for the data phase. */
px_status_t px__coll_begin(px_comm_t *comm, unsigned kind, unsigned dtype, unsigned op,
                           uint64_t count, int root, int64_t deadline, uint32_t *seq_p);

/* All-reduce algorithm choice: messages up to PX__RD_MAX_BYTES use
 * recursive doubling (latency), larger ones the ring (bandwidth).
 * px__allreduce_algo forces one (tests): 0 auto, 1 ring, 2 recursive
 * doubling (still bounded by the scratch size). */
#define PX__RD_MAX_BYTES (32u * 1024u)
extern int px__allreduce_algo;

/* --- coll/rd.c --- */

/* Recursive-doubling all-reduce of fp32 SUM (scaled by `scale` at the end),
 * count * 4 <= PX__WINDOW * chunk_bytes. */
px_status_t px__rd_allreduce_f32(px_comm_t *comm, uint32_t seq, const float *sendbuf,
                                 float *recvbuf, uint64_t count, float scale, int64_t deadline);

/* --- coll/ring.c --- */

/* Ring all-reduce (reduce-scatter then all-gather) of fp32 data, SUM, with
 * `scale` != 1 applied once to each owned block before the all-gather. */
px_status_t px__ring_allreduce_f32(px_comm_t *comm, uint32_t seq, const float *sendbuf,
                                   float *recvbuf, uint64_t count, float scale,
                                   int64_t deadline);

#endif
