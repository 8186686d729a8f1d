/* daemon.h: parallaxd's shared state and the internal API between its files.
 *
 * One px_daemon_t owns everything: the libuv loop, the gRPC completion queue
 * (drained from a uv_async), the Control and Peer servers, the store, this
 * node's devices, the peer table, the jobs this node coordinates (job.c)
 * and the rank processes it supervises (supervisor.c). All of it is touched
 * only on the loop thread: gRPC handlers and async completions run there
 * through px_rpc_cq_drain().
 *
 * Files: main.c (start/stop), config.c, store.c (SQLite), validate.c (job
 * spec checks), nodes.c (devices, peers, heartbeats; node events),
 * the coordinator: job.c (state machine), job_place.c (placement),
 * job_launch.c (launch, rendezvous, stop), job_watch.c (WatchJob streams),
 * job_load.c (load at start, adoption), job_restart.c (restart from a
 * checkpoint), jobnames.c (cluster-wide names), drain.c (the node's drain
 * state, pctl node drain/resume/stop); supervisor.c (rank
 * processes), control.c (Control service), peer.c (Peer service),
 * peerc.c (the Peer client, local dispatch, node event delivery), calls.c
 * (counted and retried async calls, message copies), sample.c (pctl
 * sample: a short parallax-rank --sample run on a free device).
 *
 * Layering: control.c and peer.c (services) use everything below; the
 * coordinator (job*.c) may use the supervisor for adoption only; the
 * supervisor never calls the coordinator, nor the coordinator the
 * supervisor's launch/stop: both go through px_peerc_call, which runs this
 * node's handler when the target is this node; nodes.c tells both of node
 * changes through px_nodes_emit. */
#ifndef PXD_DAEMON_H
#define PXD_DAEMON_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "devsel.h"
#include "px_cpu_tier.h"
#include "parallax.pb-c.h"
#include "px_rpc.h"
#include "px_status.h"

#define PXD_NAME_MAX 64
#define PXD_JOB_ID_MAX 96
#define PXD_DEV_MAX 32
#define PXD_ADDR_MAX 256
#define PXD_REASON_MAX 1024
#define PXD_RPC_TIMEOUT_MS 10000
/* After a rank's failure, how long other ranks' exits are gathered to name
 * the root cause (a rank killed by a signal beats ranks that exited non-zero
 * because their peer vanished). */
#define PXD_FAIL_SETTLE_MS 1000
#define PXD_RETRY_MS 300
/* Exit "code" of an adopted rank that did not get to the job's last step:
 * the restarted daemon is not its parent and cannot learn its status. */
#define PXD_EXIT_UNKNOWN 1000

typedef struct px_daemon px_daemon_t;
typedef struct px_store px_store_t;

#define PXD_GPU_MAX_PIDS 64
#define PXD_BLOCKED_MAX 256

/* A device of some node, as this daemon sees it. */
typedef struct px_device {
    char name[PXD_DEV_MAX];         /* "cpu:0", "cuda:1" (K: the GPU's NVML index);
                                     * "cuda:1/S", "sim:0/S": slot S of a GPU that
                                     * --gpu-share offers to several ranks */
    char job_id[PXD_JOB_ID_MAX];    /* "" when free */
    uint64_t memory_bytes;          /* its memory; a cpu device's share of the
                                       host RAM; a GPU slot's share of its GPU's;
                                       0 unknown (memfit.c) */
    uint64_t mem_used;              /* GPUs: bytes in use, from NVML at start; 0 for cpu */
    /* why it is not handed out now, "" when it may be: a process that is
     * not one of this node's ranks holds its GPU (gputelem.c) */
    char blocked[PXD_BLOCKED_MAX];
} px_device_t;

/* One GPU of a node as NVML last showed it (gputelem.c; NodeInfo.gpus). */
typedef struct px_gpu_telem {
    char device[PXD_DEV_MAX];       /* the GPU: "cuda:0" (its slots cuda:0/S), "sim:0" */
    char model[96];                 /* "NVIDIA H200" */
    uint64_t mem_total, mem_used;   /* bytes */
    double utilization;             /* 0..1 of the last sample period; -1 unknown */
    double power_w;                 /* watts; -1 unknown */
    double temperature_c;           /* degrees Celsius; -1 unknown */
    int64_t sampled_ms;             /* wall clock of the sample; 0: never sampled */
    int n_pids;                     /* processes with a compute context on it */
    unsigned pids[PXD_GPU_MAX_PIDS];
    int n_foreign;                  /* those that are not ranks of this node's daemon */
    unsigned foreign[PXD_GPU_MAX_PIDS];
} px_gpu_telem_t;

#define PXD_CGROUP_PATH_MAX 1400 /* a rank's (or the BLAS probe's) cgroup path */

/* blas.c's run of `parallax-rank --blas-core`. */
typedef struct px_blas_run {
    uv_process_t proc;
    uv_pipe_t out;                  /* its stdout */
    uv_timer_t timer;               /* its deadline */
    char buf[256];                  /* what it printed */
    size_t have;
    int handles;                    /* open handles; the answer is read at 0 */
    int64_t exit_status;            /* -signal when killed */
    int exited;
    int timed_out;
    int running;
    char cgroup[PXD_CGROUP_PATH_MAX]; /* its cgroup (cgroup.c), "" if none */
} px_blas_run_t;

/* Another daemon. Created from --peers (name unknown until it answers) or
 * when membership (membership.c, SWIM) learns of it; alive as SWIM counts
 * it (ALIVE or SUSPECT), its facts from its NodeInfo (nodes.c). */
typedef struct px_peer {
    char peer_addr[PXD_ADDR_MAX];   /* its Peer host:port */
    char name[PXD_NAME_MAX];        /* "" until known */
    char control_addr[PXD_ADDR_MAX];
    char version[32];
    char blas_core[32];             /* NodeInfo.blas_core, "" from an older daemon */
    char blas_core_source[24];
    int alive;
    int draining;                   /* NodeInfo.draining: it takes no new ranks (drain.c) */
    int64_t last_seen_ms;           /* wall clock, 0 = never */
    int64_t last_seen_mono_ms;
    px_device_t *devices;
    int n_devices;
    px_gpu_telem_t *gpus;           /* NodeInfo.gpus as last heard (gputelem.c) */
    int n_gpus;
    px_rpc_channel_t *channel;      /* to its Peer service */
    px_rpc_channel_t *control;      /* to its Control service, lazily */
    int joining;                    /* membership.c: a join ping (sync) to it in flight */
    int up_pending;                 /* came up (or restarted): px_jobnames_member_up
                                     * once a call of ours to it succeeds (membership.c) */
    char conflict[2 * PXD_ADDR_MAX + PXD_NAME_MAX + 160]; /* its name collides (nodes.c), "" if not */
} px_peer_t;

/* A rank of a job this node coordinates. */
typedef struct px_job_rank {
    char node[PXD_NAME_MAX];
    char device[PXD_DEV_MAX];
    int pid;
    char state[16];                 /* "pending", "launching", "running", "exited" */
    int exit_code;                  /* -signal when killed */
    int registered;
    ProtobufCBinaryData ucx_addr;   /* malloc'd copy */
    px_rpc_call_t *held;            /* RegisterRank answer held until all arrive */
    int64_t missing_since_ms;       /* mono ms its node first reported its device
                                     * not held by the job; 0 = held */
} px_job_rank_t;

typedef struct px_watcher {
    px_rpc_call_t *call;            /* NULL once the client went away */
    px_rpc_call_t *cancelled_call;  /* to end (free) at the next sweep */
    struct px_job *job;
    struct px_watcher *next;
} px_watcher_t;

/* A job this node coordinates (every state; finished ones loaded from the
 * store at start so GetJob/ListJobs/GetMetrics answer about them). */
#define PXD_CANCEL_WAITERS 8

typedef struct px_job {
    px_daemon_t *d;
    char id[PXD_JOB_ID_MAX];
    Parallax__V1__JobSpec *spec;    /* unpacked deep copy, owned */
    Parallax__V1__JobState state;
    char reason[PXD_REASON_MAX];
    uint32_t step;
    float loss, grad_norm, lr;
    double tokens_per_second;
    float val_loss;                 /* the last validation loss (0: none) */
    uint32_t val_step;              /* the step it followed (valstore.h) */
    int64_t created_ms, started_ms, finished_ms;
    char coordinator[PXD_NAME_MAX];
    int world;                      /* dp; 0 for jobs never placed */
    px_job_rank_t *ranks;           /* [world] once placed */
    int n_registered;
    int n_exited_ok;
    uv_timer_t rdv_timer;           /* rendezvous deadline, then failure settling */
    int rdv_timer_active;
    int fail_pending;               /* a rank failed; reason chosen when settled */
    int fail_is_signal;             /* cause strength of fail_reason: 2 SIGKILL,
                                     * 1 other signal, 0 exit code */
    char fail_reason[PXD_REASON_MAX];
    px_watcher_t *watchers;
    int adopting;                   /* RUNNING at load with its local ranks alive:
                                     * px_job_adopt_all() takes them over */
    int restart_at_start;           /* FAILED at load (its ranks died with the
                                     * daemon): px_job_adopt_all() restarts it */
    int n_exited_unknown;           /* adopted ranks gone with PXD_EXIT_UNKNOWN */
    int64_t reconcile_ms;           /* mono ms of the last StopRanks sent for a
                                     * node still running ranks of this ended job */
    px_rpc_call_t *cancel_calls[PXD_CANCEL_WAITERS]; /* CancelJob answers held until
                                     * the ranks are gone (px_job_cancel) */
    int n_cancel_calls;
    int ending;                     /* FAILED or CANCELLED decided, ranks stopping:
                                     * end_state once every launched rank has
                                     * exited (px_job_finish) */
    Parallax__V1__JobState end_state;
    struct px_job *next;
} px_job_t;

/* A rank process this node runs (for any coordinator). */
typedef struct px_local_rank {
    px_daemon_t *d;
    char job_id[PXD_JOB_ID_MAX];
    int rank;
    char device[PXD_DEV_MAX];
    char coordinator[PXD_NAME_MAX];
    char coordinator_peer_addr[PXD_ADDR_MAX];
    char log_path[1024];
    uv_process_t proc;
    uv_timer_t kill_timer;
    int handles_open;               /* closes pending before free */
    int pid;
    int exited;
    int exit_code;                  /* -signal when killed */
    int stopping;
    int adopted;                    /* left running by a daemon that died; watched
                                     * through a pidfd (poll), proc unused */
    int pidfd;
    uv_poll_t poll;
    char cgroup[PXD_CGROUP_PATH_MAX]; /* its cgroup v2 (cgroup.c), "" if none */
    int (*at_end)(px_daemon_t *d, const char *job_id); /* adopted: the job reached
                                     * its last step (px_supervisor_adopt) */
    struct px_local_rank *next;
} px_local_rank_t;

/* A node event (nodes.c emits them, px_nodes_emit; the coordinator and the
 * supervisor subscribe, px_nodes_subscribe): */
typedef enum px_node_event {
    PXD_NODE_DEVICES, /* devices of some node may have come free or joined: place jobs */
    PXD_NODE_HEARD,   /* `peer` answered a heartbeat (its devices are fresh) */
    PXD_NODE_DEAD,    /* `peer` declared dead by membership (membership.c) */
} px_node_event_t;
/* `peer` is NULL for PXD_NODE_DEVICES; borrowed for the call. */
typedef void (*px_node_event_fn)(px_daemon_t *d, px_node_event_t ev, const px_peer_t *peer,
                                 void *arg);
/* px_daemon_call_async's completion (calls.c). */
typedef void (*px_daemon_done_fn)(px_daemon_t *d, void *arg, grpc_status_code code,
                                  const char *message, const ProtobufCMessage *response);
/* A Peer method served on this node for the Peer client (peerc.c): handles
 * `request` (its method's request type) and answers through done(d, arg,
 * code, message, response) at most once before returning; done may be
 * NULL. */
typedef void (*px_peerc_local_fn)(px_daemon_t *d, const ProtobufCMessage *request,
                                  px_daemon_done_fn done, void *arg);
#define PXD_PEERC_LOCAL_MAX 8
#define PXD_NODE_SUBS_MAX 8
/* A connection to another daemon's Peer service unused this long is closed
 * (auth.c). Membership probes each member once a round of N periods, so
 * up to N = PXD_PEER_IDLE_MS / period a daemon keeps a connection to every
 * member (reopening one costs more CPU than the probe: 0.15% of a core
 * per daemon kept, 0.30% reopened at each probe, 32 daemons on 2 cores);
 * beyond, the connections it holds stop growing with N. */
#define PXD_PEER_IDLE_MS 300000

/* auth.c: wrong cluster tokens from one source address (the gRPC peer
 * without its port), for the lockout after cfg.auth_max_wrong of them. */
#define PXD_AUTH_SOURCES 64
#define PXD_AUTH_ADDR_MAX 96

typedef struct px_auth_source {
    char addr[PXD_AUTH_ADDR_MAX];      /* "ipv4:10.0.0.2"; "" = unused slot */
    int wrong;                         /* wrong tokens since first_ms */
    int64_t first_ms, last_ms;         /* mono ms of the first and latest of them */
    int64_t locked_until_ms;           /* mono ms; refused until then */
    long refused;                      /* calls refused in the current lockout */
} px_auth_source_t;

struct px_daemon {
    px_daemon_config_t cfg;
    uv_loop_t *loop;
    uv_async_t cq_async;
    uv_signal_t sigint, sigterm;
    uv_timer_t hb_timer;               /* membership.c: the SWIM protocol period */
    uv_timer_t swim_timer;             /* membership.c: half a period, indirect probes */
    struct px_swim *swim;              /* membership.c: SWIM's state machine (swim.h) */
    struct probe *swim_probe;          /* membership.c: this period's probe, NULL none */
    long swim_periods;                 /* periods since start */
    long swim_synced_at;               /* the period of the last full-state sync, -1 none */
    long swim_join_quiet;              /* membership.c: seed pulls in a row that brought no
                                        * new member (joined: JOIN_QUIET) */
    char swim_seed[PXD_ADDR_MAX];      /* membership.c: the seed that answered the join */
    uv_timer_t swim_expire_timer;      /* membership.c: the next suspicion's end */
    uv_timer_t swim_push_timer;        /* membership.c: the next push of urgent news */
    int64_t swim_push_last_ms;         /* mono ms of the last push, 0 none */
    uv_timer_t stop_timer;
    px_rpc_cq_t *cq;
    px_rpc_server_t *control_srv;
    px_rpc_server_t *peer_srv;
    px_store_t *store;
    int64_t start_mono_ms;             /* px_time_mono_ms() at start (jobnames.c's grace) */
    int lock_fd;                       /* state-dir/parallaxd.lock, flocked; -1 before */
    int sock_lock_fd;                  /* runtime-dir/control.sock.lock, flocked; -1 before */
    char state_dir_real[1024];         /* realpath of cfg.state_dir: what this daemon's
                                        * cgroups, ranks and locks are keyed by */
    char owner[1700];                  /* "pid N, state dir S, listen L, peer P": who
                                        * holds this daemon's locks, for a second one */
    char cgroup_base[PXD_CGROUP_PATH_MAX - 200]; /* cgroup.c: parallax-<node>-<key>/,
                                        * "" = none */
    int cgroup_lock_fd;                /* cgroup_base opened and flocked; -1 = none */
    int cgroup_marked;                 /* its cgroups carry the owner xattr (cgroup.c) */
    char sock_path[1024];
    char control_addr[PXD_ADDR_MAX];   /* advertised host:port */
    char peer_addr[PXD_ADDR_MAX];      /* advertised host:port */
    char rank_bin[4200];
    px_blas_probe_t blas;              /* blas.c: the core this node's ranks run */
    px_blas_run_t blas_run;            /* blas.c: the probe asking it */
    char blas_env[2][64];              /* blas.c: their OPENBLAS_CORETYPE, PX_BLAS_CORE_SET */
    px_device_t *devices;
    int n_devices;
    px_gpu_telem_t *gpus;              /* this node's GPUs (gputelem.c), one per GPU */
    int n_gpus;
    uv_timer_t gpu_timer;              /* gputelem.c: every PX_GPU_SAMPLE_MS */
    px_peer_t *peers;
    int n_peers;
    px_job_t *jobs;                    /* newest first */
    uint64_t next_job_seq;
    px_local_rank_t *local_ranks;
    int async_inflight;                /* px_rpc_call_async not yet completed */
    int stopping;
    int draining;                      /* this node takes no new ranks (drain.c) */
    int rebooted;                      /* boot id differs from the last run's */
    char *token;                       /* cluster token (auth.c), or NULL: none */
    size_t token_len;
    px_auth_source_t auth_sources[PXD_AUTH_SOURCES]; /* auth.c: wrong tokens by address */
    int64_t stop_deadline_ms;
    int exit_code;
    struct px_metrics *metrics;        /* --metrics-listen (metrics.h), or NULL */
    struct {
        const char *method;            /* "LaunchRanks" */
        px_peerc_local_fn fn;
    } peerc_local[PXD_PEERC_LOCAL_MAX]; /* peerc.c: Peer methods served locally */
    int n_peerc_local;
    struct {
        px_node_event_fn fn;
        void *arg;
    } node_subs[PXD_NODE_SUBS_MAX];   /* node event subscribers, in order */
    int n_node_subs;
};

/* ---------------------------------------------------------------- auth.c */

/* Request metadata carrying the cluster token. */
#define PX_AUTH_MD_KEY "x-parallax-token"
/* Environment variable through which a rank gets the token from its daemon. */
#define PX_AUTH_RANK_ENV "PX_CLUSTER_TOKEN"

/* Reads the token from `path` (first line, trimmed; printable ASCII, at most
 * 4096 bytes; the file not readable/writable by others). *token_p is
 * malloc'd. PX_ERR_INVALID_ARGUMENT with the reason logged. */
px_status_t px_auth_load_token(const char *path, char **token_p);
/* px_rpc_authorize_fn for the Peer service: the token on every call. */
grpc_status_code px_auth_peer_call(px_rpc_call_t *call, const char *path, void *arg, char *why,
                                   size_t why_len);
/* px_rpc_authorize_fn for Control: the token unless over the unix socket or
 * loopback. */
grpc_status_code px_auth_control_call(px_rpc_call_t *call, const char *path, void *arg,
                                      char *why, size_t why_len);
/* A channel to another daemon with the token attached; over TLS when
 * `peer_plane` (its Peer service) and TLS is configured (Control stays
 * plain: loopback or unix by default). It retries a refused connection
 * every heartbeat period (PX_HEARTBEAT_MS, at least 10 ms), not after
 * gRPC's backoff of up to 120 s. */
px_status_t px_auth_channel_create(px_daemon_t *d, const char *target, int peer_plane,
                                   px_rpc_channel_t **channel_p);
/* CA file verifying the other daemons' certificates, or NULL: no TLS. */
const char *px_auth_ca_file(const px_daemon_t *d);
/* Environment variable through which a rank gets its job's secret (the
 * bootstrap's and the wire-up's proof, px_bootstrap.h / px_transport.h). */
#define PX_AUTH_JOB_SECRET_ENV "PX_JOB_SECRET"
/* The secret of job `job_id`: hex(HMAC-SHA256(cluster token, "parallax job
 * secret " job_id)), 64 hex digits into hex (at least 65 bytes). Every
 * daemon of the cluster derives the same one for a job, and it says nothing
 * about the token or another job's secret. Returns 0, or -1 when the
 * daemon has no token (ranks then run without a secret, as before). */
int px_auth_job_secret(const px_daemon_t *d, const char *job_id, char *hex, size_t len);

/* ------------------------------------------------------------ validate.c */

/* Checks a training `spec` at submit: the planner's one validator
 * (px_job_config_check on the spec as jobspec.h reads it, wire zeros as
 * defaults: the token file read, paths absolute), the name (at most 200
 * characters), max_restarts (0..100, needs checkpoint_dir), and that its
 * layout can be placed on the cluster when idle: node_devices[n] devices
 * on each of nnodes nodes (this node first, then the alive peers), the
 * world in all and every tensor group whole on one node; then layouts the
 * engine cannot run yet. On error writes a message naming the values into
 * errbuf and returns PX_ERR_INVALID_ARGUMENT. */
px_status_t px_validate_spec(const Parallax__V1__JobSpec *spec, const int *node_devices,
                             int nnodes, char *errbuf, size_t errlen);

/* --------------------------------------------------------------- nodes.c */

px_status_t px_nodes_init(px_daemon_t *d);
void px_nodes_fini(px_daemon_t *d);
/* Starts membership (membership.c): SWIM's protocol period every
 * PX_HEARTBEAT_MS, the first at once, the seeds asked to join. */
void px_nodes_start(px_daemon_t *d);
/* Devices in the cluster: this node's plus every alive peer's, draining
 * nodes left out. */
int px_nodes_cluster_devices(px_daemon_t *d);
/* Parses a job's device selection `spec` (JobSpec.devices, planner/devsel.h)
 * into *sel_p and checks that some device of the cluster (this node's or an
 * alive peer's) is in it. PX_ERR_INVALID_ARGUMENT with a message in errbuf
 * naming the value (and the kinds of device the cluster offers). */
px_status_t px_nodes_devsel(px_daemon_t *d, const char *spec, px_devsel_t *sel_p, char *errbuf,
                            size_t errlen);
/* Devices of each node, free or not, that the job's selection `sel`
 * (planner/devsel.h; NULL: every device) takes: this node's into
 * counts[0], then each alive peer's, at most `max` nodes; a draining node
 * counts 0 unless `with_draining`. Returns the number of nodes written. */
int px_nodes_device_counts(px_daemon_t *d, const px_devsel_t *sel, int with_draining,
                           int *counts, int max);
/* The draining nodes (this one, then the alive peers) that offer devices
 * in `sel`, as "node B is draining" (or "nodes B, C are draining") into
 * buf[len]; "" when none. For SubmitJob's message when a job fits only
 * with them. */
void px_nodes_draining_note(px_daemon_t *d, const px_devsel_t *sel, char *buf, size_t len);
/* A node's state as `pctl nodes` shows it (NodeInfo.state): `peer`, or
 * this node when NULL: "DOWN" (a peer not alive), "STOPPING" (this
 * daemon stops), "DRAINING" / "DRAINED" (draining, with / without a device
 * held by a job), else "UP". Static string. */
const char *px_nodes_state(px_daemon_t *d, const px_peer_t *peer);
/* Spreads this node's NodeInfo now (a raised incarnation, pinged to every
 * alive member) instead of by gossip alone (a change the peers' placement
 * must see: drain.c). */
void px_nodes_beat_now(px_daemon_t *d);
/* The same nodes in the same order: each one's name (borrowed) and the
 * smallest memory of its devices in `sel` (NULL: all) in bytes (0: not
 * reported). Returns the count. */
int px_nodes_device_memory(px_daemon_t *d, const px_devsel_t *sel, const char **names,
                           uint64_t *mem, int max);
/* The same nodes in the same order (SubmitJob's memory check):
 * cuda[n] = 1 when node n offers at least one device in `sel` (NULL: all)
 * and every such device is a GPU ("cuda:K"), so the job's ranks there run
 * on CUDA devices; else 0. Returns the count. */
int px_nodes_device_cuda(px_daemon_t *d, const px_devsel_t *sel, int *cuda, int max);

/* CancelJob: the job's ranks are stopped on every node and the job
 * becomes CANCELLED only once every launched rank has exited (devices
 * freed, nothing of theirs left: cgroup.c), or after PX_KILL_GRACE_MS +
 * PX_PEER_DEAD_MS at the latest; `call` is answered then, so `pctl nodes`
 * right after `pctl cancel` shows the devices free. A job with no rank
 * running is CANCELLED at once. */
void px_job_cancel(px_job_t *job, px_rpc_call_t *call);
/* A rank of `job_id` on peer `node` exited: its device (held by job_id) is
 * free in this node's view of the peer before the next heartbeat says so. */
void px_nodes_peer_device_release(px_daemon_t *d, const char *node, const char *device,
                                  const char *job_id);

/* A name conflict a peer has with this node's name ("" if none), for
 * this node's NodeInfo.error. */
const char *px_nodes_self_conflict(px_daemon_t *d);

/* cgroup.c: rank tracking by cgroup v2 (see the file comment).
 * px_cgroup_init finds a writable cgroup2 hierarchy, creates this daemon's
 * parallax-<name>-<key>/ in its own cgroup (<key>: px_cgroup_key of
 * d->state_dir_real, so the same after a restart) and takes it (flock, held
 * until px_cgroup_fini; owner xattrs from d->owner), or says at start that
 * ranks are tracked by process group only (PX_OK). PX_ERR_UNAVAILABLE,
 * logged naming the holder (pid, state dir, listen address), when another
 * live parallaxd holds that base: the daemon must not start. */
px_status_t px_cgroup_init(px_daemon_t *d);
/* The 32-bit key of a canonical state directory (FNV-1a folded), printed
 * as %08x in the base's name. */
uint32_t px_cgroup_key(const char *state_dir);
/* At exit: removes this daemon's empty rank cgroups, then its base when
 * empty (logged when not), and lets the base's lock go. No-op without one. */
void px_cgroup_fini(px_daemon_t *d);
/* At start, after adoption: kills and removes every rank cgroup of this
 * daemon that no adopted rank holds (what its previous run left: an orphan
 * rank, or a child a dead rank started that left its group), so nothing of
 * a dead predecessor outlives the restart. */
void px_cgroup_sweep(px_daemon_t *d);
/* Path of rank `rank` of `job_id`'s cgroup under this daemon's base into
 * path[len], whether or not it exists; PX_ERR_NOT_FOUND ("") when cgroups
 * are off. */
px_status_t px_cgroup_rank_path(px_daemon_t *d, const char *job_id, int rank, char *path,
                                size_t len);
/* Creates <base>/<job_id>.r<rank>, marked as this daemon's; its path into
 * path[len] ("" when cgroups are off or this failed: logged, the rank is
 * then tracked by its process group). */
px_status_t px_cgroup_rank_create(px_daemon_t *d, const char *job_id, int rank, char *path,
                                  size_t len);
/* 1 if `path` is a rank cgroup of this daemon: directly under its base and
 * marked with its state directory. */
int px_cgroup_owned(px_daemon_t *d, const char *path);
/* Moves `pid` into the cgroup at `path` ("" no-op); on failure logs, and
 * removes the cgroup and clears path. */
void px_cgroup_rank_attach(const char *job_id, int rank, int pid, char *path);
/* The rank's trampoline: `parallaxd --exec-in-cgroup PATH RANK_BIN ARGS...`
 * (uv_spawn has no way to start a child inside a cgroup) moves itself
 * into PATH, then execs RANK_BIN with ARGS: the rank is in its cgroup before
 * its first instruction, so nothing it forks escapes. Returns (127) only
 * when the exec failed. */
#define PXD_EXEC_IN_CGROUP "--exec-in-cgroup"
int px_cgroup_exec(const char *path, char **argv);
/* The file the trampoline is exec'd from: the running daemon's own image,
 * which /proc/self/exe still opens once its path names another file or
 * none (a package upgrade under a running service), where exec of the
 * path (readlink of /proc/self/exe: "... (deleted)") failed every rank
 * launch until the daemon restarted. argv[0] stays the path, for ps. */
#define PXD_SELF_EXE "/proc/self/exe"
/* Sends `sig` to every process of the cgroup at `path` ("" no-op); only
 * when px_cgroup_owned (else logged, nothing sent). */
void px_cgroup_signal(px_daemon_t *d, const char *path, int sig);
/* Kills every process of the cgroup at `path` (cgroup.kill), waits until
 * the kernel reports it empty (at most 2 s), removes it. "" no-op; a
 * cgroup that is not px_cgroup_owned is logged and left alone. */
void px_cgroup_kill_remove(px_daemon_t *d, const char *path);

/* memfit.c: the host's RAM in bytes (0 if unknown). */
uint64_t px_memfit_host_ram(void);
/* SubmitJob's memory check: the plan's bytes per rank (training state by
 * ZeRO stage + one micro-batch's activations, planner/plan.h; on a node
 * whose node_cuda entry is 1, + the CUDA IPC scratch of the rank's
 * communicators that stay on that node, plan.h px_plan_ipc_node_bytes
 * with PX_IPC_SLOT_BYTES as the daemon's environment sets it, which its
 * ranks inherit) against the device memory of every node the layout is
 * placed on (node_devices, node_names, node_dev_mem, node_cuda: nnodes
 * entries as px_nodes_device_counts / px_nodes_device_memory /
 * px_nodes_device_cuda give them; node_cuda NULL: no node is).
 * PX_ERR_INVALID_ARGUMENT with every figure in errbuf when a rank cannot
 * fit. */
px_status_t px_memfit_check(const Parallax__V1__JobSpec *spec, const int *node_devices,
                            const char *const *node_names, const uint64_t *node_dev_mem,
                            const int *node_cuda, int nnodes, char *errbuf, size_t errlen);
/* Peer by node name (alive or not), NULL if unknown. */
px_peer_t *px_nodes_peer_by_name(px_daemon_t *d, const char *name);
/* Fills `info` (caller frees with px_nodes_info_free) with this node. */
void px_nodes_self_info(px_daemon_t *d, Parallax__V1__NodeInfo *info);
void px_nodes_info_free(Parallax__V1__NodeInfo *info);
/* Applies a node's NodeInfo (a probe, an ack, a relayed answer) to its
 * peer's facts, creating the peer if new; the peer (NULL: this node, no
 * name, out of memory). Does not change whether it is alive. */
px_peer_t *px_nodes_heard(px_daemon_t *d, const Parallax__V1__NodeInfo *info);
/* Adds a peer at `peer_addr` (its channel created, not connected: gRPC
 * connects on the first call); NULL out of memory. Moves d->peers. */
px_peer_t *px_nodes_peer_add(px_daemon_t *d, const char *peer_addr);
px_peer_t *px_nodes_peer_by_addr(px_daemon_t *d, const char *addr);
/* Sets whether `p` is alive (a conflicting name never is), with the
 * events of a change: alive, its devices join the cluster's count, its
 * channel reconnects at once and up_pending is set; dead, PXD_NODE_DEAD
 * (its jobs fail). */
void px_nodes_peer_alive(px_daemon_t *d, px_peer_t *p, int alive);
/* `p` was heard from now (last_seen_ms, last_seen_mono_ms). */
void px_nodes_peer_seen(px_peer_t *p);

/* ---------------------------------------------------------- membership.c */

/* Peer.Heartbeat (a SWIM ping): takes the sender's facts and rumours,
 * answers with this node's and its own rumours (all members when asked). */
void px_membership_ping(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg);
/* Peer.IndirectProbe: pings the target for the caller, answers its ack. */
void px_membership_indirect(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg);
/* Frees the state machine (px_nodes_fini). */
void px_membership_fini(px_daemon_t *d);

/* Marks a local device as held by job_id ("" frees it). */
void px_nodes_device_set(px_daemon_t *d, const char *device, const char *job_id);
/* Control channel of node `name` (self excluded), NULL if unknown/dead. */
px_rpc_channel_t *px_nodes_control_channel(px_daemon_t *d, const char *name);

/* --------------------------------------------------------------- drain.c */

/* At start (store open, cfg.name set): d->draining from this node's row of
 * table node_state (none: not draining). PX_ERR_IO, logged. */
px_status_t px_drain_load(px_daemon_t *d);
/* Handler of Control.SetNodeState (arg: the daemon): applies it here when
 * it names this node, else relays it to the named alive peer
 * (Peer.SetNodeState) and answers with its answer; NOT_FOUND naming the
 * node (and the cluster's nodes) when no node has that name, UNAVAILABLE
 * when it is not alive, INVALID_ARGUMENT for an empty name or an unknown
 * action. */
void px_drain_control(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg);
/* Handler of Peer.SetNodeState (arg: the daemon): applies it to this node
 * (NOT_FOUND when it names another). */
void px_drain_peer(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg);

/* ---------------------------------------------------------------- blas.c */

/* Starts `parallax-rank --blas-core` (the rank binary
 * px_supervisor_rank_bin finds) on d->loop in this daemon's environment,
 * killed after 10 s; its answer goes into d->blas (and the ranks' BLAS
 * environment) when it exits 0 with a blas-core line, else d->blas stays
 * empty (logged). Never fails; runs while the loop does. */
void px_blas_probe_start(px_daemon_t *d);
/* At shutdown: a probe still running is SIGKILLed, with its cgroup. */
void px_blas_probe_kill(px_daemon_t *d);
/* The "NAME=value" strings (0 or 2, into env[0..1], owned by d) that make a
 * rank run d->blas's core: OPENBLAS_CORETYPE and PX_BLAS_CORE_SET; 0 when
 * the rank's environment is left as it is. */
int px_blas_child_env(px_daemon_t *d, const char **env);

/* ---------------------------------------------------------------- main.c */

/* Stops the daemon as SIGTERM does (`why` logged): STOPPING=1, active jobs
 * this node coordinates fail, every local rank gets SIGTERM (SIGKILL after
 * PX_KILL_GRACE_MS), and once they are gone and in-flight peer calls
 * finished the loop ends and main exits 0. A second call stops at once. */
void px_daemon_stop(px_daemon_t *d, const char *why);

/* ----------------------------------------------------------------- job.c */

px_status_t px_job_load_all(px_daemon_t *d);
void px_job_free_all(px_daemon_t *d);
px_job_t *px_job_find(px_daemon_t *d, const char *id);
/* Node name embedded in a job id ("a-3" -> "a"); writes "" if malformed. */
void px_job_id_node(const char *id, char *node, size_t len);
/* Stores a validated spec as a new PENDING job; *job_p borrowed. */
px_status_t px_job_submit(px_daemon_t *d, const Parallax__V1__JobSpec *spec, px_job_t **job_p);
/* Places PENDING jobs on free devices, oldest first. */
void px_job_schedule(px_daemon_t *d);
/* Moves an active job to a final state, stops its ranks, releases devices,
 * tells watchers and schedules the next job. No-op if already final. A
 * placed job with launched ranks not yet gone reads FAILED or CANCELLED
 * only once each of them has reported its exit (its devices are then free
 * on its node) or was lost with its node, or PX_KILL_GRACE_MS +
 * PX_PEER_DEAD_MS after the stop went out at the latest; until then it
 * keeps its state with `reason` set, and a second call is a no-op. */
void px_job_finish(px_job_t *job, Parallax__V1__JobState state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int px_job_is_active(const px_job_t *job);
/* Fills `out` (free with px_job_msg_free) from `job`. */
void px_job_to_msg(const px_job_t *job, Parallax__V1__Job *out);
void px_job_msg_free(Parallax__V1__Job *msg);
/* Peer handlers' work, coordinator side. */
void px_job_register_rank(px_daemon_t *d, px_rpc_call_t *call,
                          const Parallax__V1__RegisterRankRequest *req);
int px_job_progress(px_daemon_t *d, const Parallax__V1__ReportProgressRequest *req);
void px_job_rank_exited(px_daemon_t *d, const char *job_id, int rank, const char *node,
                        int exit_code, const char *detail);
/* A heartbeat answer from `peer`: a launched rank whose device the node no
 * longer shows held by the job for PX_PEER_DEAD_MS vanished without an exit
 * report (its daemon crashed and restarted quickly): its job fails. */
void px_job_check_peer(px_daemon_t *d, const px_peer_t *peer);
/* A node was declared dead: fail the jobs with ranks there. */
void px_job_node_dead(px_daemon_t *d, const char *node);
/* WatchJob on a local job: sends its state now, then every change. */
void px_job_watch(px_job_t *job, px_rpc_call_t *call);
/* Daemon shutdown: fail every placed (STARTING/RUNNING) job this node
 * coordinates; PENDING jobs stay and are placed after a restart. */
void px_job_fail_all_active(px_daemon_t *d, const char *reason);
/* After a restart (devices known): takes over the still-running local
 * ranks of RUNNING jobs this node coordinates (px_supervisor_adopt); a job
 * any of whose local ranks is gone or cannot be watched FAILs naming it. */
void px_job_adopt_all(px_daemon_t *d);

/* ------------------------------------------------------------ gputelem.c */

/* Finds the node's GPUs among d->devices (cuda:I and its slots cuda:I/S;
 * sim:K, sampled as NVML GPU K), samples them once and then every
 * PX_GPU_SAMPLE_MS into d->gpus; a GPU held by a process that is not this
 * daemon's gets every slot blocked (px_device_t.blocked) until it leaves.
 * A GPU NVML cannot sample is logged and left unsampled (sampled_ms 0);
 * where NVML cannot be loaded at all (sim devices without a driver or a
 * test's fake) the timer is not started. PX_ERR_NO_MEMORY only. Call
 * after px_nodes_init. */
px_status_t px_gputelem_start(px_daemon_t *d);
/* Stops the sampling (the daemon is stopping). */
void px_gputelem_stop(px_daemon_t *d);
/* Frees d->gpus. */
void px_gputelem_free(px_daemon_t *d);
/* Sets info->gpus to messages for gpus[0, n), borrowing their strings;
 * free with px_gputelem_info_free. PX_ERR_NO_MEMORY (none set). */
px_status_t px_gputelem_to_info(const px_gpu_telem_t *gpus, int n, Parallax__V1__NodeInfo *info);
void px_gputelem_info_free(Parallax__V1__NodeInfo *info);
/* Replaces p->gpus with a copy of info->gpus (a peer's ping or answer);
 * a GPU without a sample (sampled_ms 0: gossiped facts, made by
 * px_gputelem_facts_only) keeps the samples last heard from the node. */
void px_gputelem_from_info(px_peer_t *p, const Parallax__V1__NodeInfo *info);
/* Clears g's per-sample fields (memory used, utilization, power,
 * temperature, sampled_ms, our ranks' pids; g->pids is borrowed and only
 * unset), keeping the GPU's name, model, memory total and foreign pids:
 * what a node gossips of its GPUs as facts, so that a sample does not
 * change them (membership.c). */
void px_gputelem_facts_only(Parallax__V1__GpuStats *g);

/* ---------------------------------------------------------- supervisor.c */

/* Spawns the ranks of a LaunchRanks request on this node. On error nothing
 * stays running and errbuf names the cause. Fills resp->ranks (caller frees
 * with px_supervisor_resp_free). */
px_status_t px_supervisor_launch(px_daemon_t *d, const Parallax__V1__LaunchRanksRequest *req,
                                 Parallax__V1__LaunchRanksResponse *resp, char *errbuf,
                                 size_t errlen);
void px_supervisor_resp_free(Parallax__V1__LaunchRanksResponse *resp);
/* SIGTERM (then SIGKILL after PX_KILL_GRACE_MS) to the job's local ranks. */
void px_supervisor_stop_job(px_daemon_t *d, const char *job_id, const char *reason);
/* Stops every rank coordinated by node `coordinator` (it died). */
void px_supervisor_stop_coordinated_by(px_daemon_t *d, const char *coordinator);
void px_supervisor_stop_all(px_daemon_t *d);
int px_supervisor_count(px_daemon_t *d);
/* At start: SIGKILLs parallax-rank processes this daemon started (its node
 * name in their argv and its state directory in PXD_RANK_OWNER_ENV) left
 * running by its previous run that died (their parent is gone), so a
 * restarted node starts with its devices really free. Another daemon's
 * ranks are never touched, whatever their node name. */
void px_supervisor_kill_orphans(px_daemon_t *d);

/* The environment that gives a rank its device `device` (a node's device
 * name: "cpu:1", "sim:0", "cuda:2", or slot "cuda:2/1" of --gpu-share),
 * written into the caller's buffers and appended to env[] (at most 3
 * entries; returns how many): CUDA_VISIBLE_DEVICES=2 and PX_DEVICE=cuda:0
 * for GPU 2 or any slot of it (so ranks sharing a GPU open the same CUDA
 * device), PX_DEVICE=KIND:K for the others (a sim slot's device sim:K),
 * and PX_NODE_DEVICE=<device> as the node names it (ranks of one node
 * whose names agree up to '/' share one GPU). Pure; any thread. */
int px_supervisor_device_env(const char *device, char *cvd, size_t cvd_len, char *dev,
                             size_t dev_len, char *node_dev, size_t node_dev_len, char **env);

/* The physical devices n ranks run on, rank r on node nodes[r]'s device
 * devices[r]: the distinct (node, device) pairs, a device's name counted up
 * to its '/' (slots "cuda:0/0" and "cuda:0/1" of --gpu-share are GPU
 * "cuda:0"; "cpu:0" and "cpu:1" are two devices). What MFU divides the
 * peak by (PX_JOB_DEVICES). 0 for n <= 0. Pure; any thread. */
int px_supervisor_physical_devices(const char *const *nodes, const char *const *devices, int n);

/* 1 if process `pid` is this daemon or one it started (a rank or a
 * sample run, adopted ones included: PXD_RANK_OWNER_ENV names our state
 * directory in its environment), else 0: what gputelem.c counts as not
 * ours on a GPU. Reads /proc. */
int px_supervisor_owns_pid(px_daemon_t *d, int pid);
/* Every rank's environment holds PXD_RANK_OWNER_ENV=<the canonical state
 * directory of the daemon that started it>, read back through
 * /proc/PID/environ: a pid is only ever adopted or killed as a rank by the
 * daemon whose marker it carries. */
#define PXD_RANK_OWNER_ENV "PX_RANK_OWNER"
/* 1 if `pid` is a live parallax-rank of job `job_id`, rank `rank` of this
 * daemon: its node name (from /proc/<pid>/cmdline) and its state directory
 * (PXD_RANK_OWNER_ENV). */
int px_supervisor_is_rank(px_daemon_t *d, int pid, const char *job_id, int rank);
/* Watches rank `rank` (process `pid`, on `device`) of job `job_id` (this
 * node coordinates it), left running by a daemon that died, through
 * pidfd_open(2): marks its device held; its exit is reported like a
 * child's, with PXD_EXIT_UNKNOWN unless at_end(d, job_id) says the job had
 * reached its last step (then 0). Stopping signals its process group.
 * px_supervisor_kill_orphans() spares adopted ranks. */
typedef int (*px_supervisor_at_end_fn)(px_daemon_t *d, const char *job_id);
px_status_t px_supervisor_adopt(px_daemon_t *d, const char *job_id, int rank, int pid,
                                const char *device, px_supervisor_at_end_fn at_end);
/* The parallax-rank binary ranks are spawned from (PX_RANK_BIN, else
 * <dir of parallaxd>/../rank/parallax-rank in a build tree, else
 * <libexecdir>/parallax-rank); NULL with errbuf set if not executable. */
const char *px_supervisor_rank_bin(px_daemon_t *d, char *errbuf, size_t errlen);
/* Path of a local rank log (state-dir/jobs/<id>/rank-R.log). */
void px_supervisor_log_path(px_daemon_t *d, const char *job_id, int rank, char *buf,
                            size_t len);
/* Reads the last `tail_bytes` (0: all, capped at 16 MiB) of a local rank log
 * into *text_p (malloc'd, caller frees). PX_ERR_NOT_FOUND if absent. */
px_status_t px_supervisor_read_log(px_daemon_t *d, const char *job_id, int rank,
                                   size_t tail_bytes, uint8_t **text_p, size_t *len_p);

/* ------------------------------------------------------- control.c/peer.c */

extern const px_rpc_method_t px_control_methods[];
/* Ends the WatchJob streams relayed from other coordinators (shutdown,
 * after the servers are destroyed and in-flight calls finished). */
void px_control_fini(px_daemon_t *d);
extern const size_t px_control_n_methods;
/* Handler of Peer.ListJobs (arg: the daemon): answers with the jobs this
 * node coordinates, oldest first; a cluster-wide Control.ListJobs merges
 * these from every alive peer. */
void px_control_list_local(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg);
/* jobnames.c: SubmitJob of a spec that passed every other check: the name
 * reserved with its owner (the alive member ranked first for the name by
 * px_jobnames_rank; the next one when it does not answer), then the job
 * stored and `call` answered with its id; ALREADY_EXISTS naming the holder
 * when the name is active or being submitted anywhere reachable. */
void px_jobnames_submit(px_daemon_t *d, px_rpc_call_t *call,
                        const Parallax__V1__SubmitJobRequest *req);
/* The rank of `member` for job name `name`: rendezvous (highest random
 * weight) hashing, Thaler & Ravishankar 1998: the owner of a name is the
 * member with the largest rank. The hash is 64-bit FNV-1a (Fowler, Noll,
 * Vo; www.isthe.com/chongo/tech/comp/fnv) of name, a 0 byte and member,
 * passed through splitmix64's finaliser (Steele, Lea, Flood, OOPSLA 2014)
 * so that names differing in a last byte spread over all members. */
uint64_t px_jobnames_rank(const char *name, const char *member);
/* A peer just became alive: this node's active named jobs whose owner it
 * now is are registered with it (Peer.ReserveName with held), so a node
 * that joins or restarts learns the names it owns. */
void px_jobnames_member_up(px_daemon_t *d, const px_peer_t *peer);
void px_jobnames_reserve(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg);
extern const px_rpc_method_t px_peer_methods[];
extern const size_t px_peer_n_methods;

/* -------------------------------------------------------------- sample.c */

/* Handler of Control.Sample (arg: the daemon): `pctl sample`, see sample.c. */
void px_sample_handle(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg);
/* Daemon shutdown: SIGKILL to the sample runs of this node (their calls are
 * answered as they exit). */
void px_sample_stop_all(px_daemon_t *d);
/* At start, after the orphans are killed: removes what sample runs of a
 * previous parallaxd left in state-dir/samples/. */
void px_sample_sweep(px_daemon_t *d);
/* Where this node's ranks of job `job_id` export its final weights when the
 * job names no --export-safetensors: state-dir/jobs/<id>/weights.safetensors. */
void px_sample_default_weights(px_daemon_t *d, const char *job_id, char *buf, size_t len);

/* --------------------------------------------------------------- calls.c */

/* px_rpc_call_async wrapper that counts in-flight calls (shutdown waits).
 * `done` runs exactly once on the loop thread; `response` is borrowed. */
px_status_t px_daemon_call_async(px_daemon_t *d, px_rpc_channel_t *channel, const char *path,
                                 const ProtobufCMessage *request,
                                 const ProtobufCMessageDescriptor *response_desc,
                                 int timeout_ms, px_daemon_done_fn done, void *arg);

/* Like px_daemon_call_async, but a call that could not reach the peer
 * (UNAVAILABLE; with `idempotent` also DEADLINE_EXCEEDED) is sent again every
 * PXD_RETRY_MS until `give_up_ms` from now has passed or the daemon stops;
 * `done` then gets the last result. The request is copied. For messages
 * that must arrive (RankExited, StopRanks) and LaunchRanks to a peer whose
 * channel is still backing off. */
px_status_t px_daemon_call_retry(px_daemon_t *d, px_rpc_channel_t *channel, const char *path,
                                 const ProtobufCMessage *request,
                                 const ProtobufCMessageDescriptor *response_desc,
                                 int timeout_ms, int give_up_ms, int idempotent,
                                 px_daemon_done_fn done, void *arg);

/* Deep copy of a protobuf-c message (pack + unpack); NULL on failure. */
ProtobufCMessage *px_msg_dup(const ProtobufCMessage *msg);

/* --------------------------------------------------------------- peerc.c */

/* Registers `fn` as this node's handler of Peer method `method` ("StopRanks",
 * a string literal) for px_peerc_call aimed at this node. At start only. */
void px_peerc_serve(px_daemon_t *d, const char *method, px_peerc_local_fn fn);
/* Calls Peer method `method` on node `node`: this node's registered handler
 * at once (done, if any, runs before this returns), else an async gRPC call
 * to the peer, retried for `give_up_ms` (> 0) as px_daemon_call_retry does,
 * `done` (NULL: px_peerc_ignore) runs once on the loop thread. The request
 * is borrowed for the call. PX_ERR_NOT_FOUND: unknown node or no handler;
 * done is then not run. */
px_status_t px_peerc_call(px_daemon_t *d, const char *node, const char *method,
                          const ProtobufCMessage *request,
                          const ProtobufCMessageDescriptor *response_desc, int timeout_ms,
                          int give_up_ms, int idempotent, px_daemon_done_fn done, void *arg);
/* A done function that ignores the answer. */
void px_peerc_ignore(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                     const ProtobufCMessage *response);
/* Node events: `fn` is called with every event emitted, subscribers in the
 * order they subscribed. At start only. */
void px_nodes_subscribe(px_daemon_t *d, px_node_event_fn fn, void *arg);
/* Delivers `ev` about `peer` (NULL for PXD_NODE_DEVICES) to every
 * subscriber. */
void px_nodes_emit(px_daemon_t *d, px_node_event_t ev, const px_peer_t *peer);
/* Subscribes the coordinator to node events and serves RankExited locally
 * (job.c). */
void px_job_attach(px_daemon_t *d);
/* Subscribes the supervisor to node events and serves LaunchRanks and
 * StopRanks locally (supervisor.c). */
void px_supervisor_attach(px_daemon_t *d);

#endif
