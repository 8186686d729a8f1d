/* px_env.c: table of PX_* environment knobs. Values are read at first use
 * and cached; reading is thread-safe after the first call on the main thread. */
#include "px_env.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *def;
    const char *doc;
    const char *value; /* cached; NULL until first read */
} px_knob_t;

static px_knob_t knobs[] = {
    {"PX_RUNTIME_DIR", "/run/parallax", "where pctl looks for parallaxd's control.sock when neither "
     "--server nor PX_SERVER is given (parallaxd's --runtime-dir); then 127.0.0.1:7070", NULL},
    {"PX_LOG_LEVEL", "info", "log level: error, warn, info, debug", NULL},
    {"PX_COMM_TIMEOUT_MS", "60000", "deadline of one blocking collective or send/recv (ms)", NULL},
    {"PX_CONNECT_TIMEOUT_MS", "30000", "deadline of the rank rendezvous and endpoint wire-up (ms)", NULL},
    {"PX_WORLD_CONFIG_CHECK", "1", "1: ranks compare their job flags at world start and name the one that differs; 0: they do not (tests of the collectives' own mismatch checks)", NULL},
    {"PX_ALLREDUCE_CHUNK_BYTES", "1048576", "ring all-reduce pipeline chunk size (bytes)", NULL},
    {"PX_ALGO_ALLREDUCE", "auto", "all-reduce algorithm: auto, ring, rabenseifner, rd (recursive doubling)", NULL},
    {"PX_ALGO_BCAST", "auto", "broadcast algorithm: auto, tree (binomial), ring (scatter + ring all-gather)", NULL},
    {"PX_ALGO_ALLTOALL", "auto", "all-to-all algorithm: auto, linear (all at once), pairwise", NULL},
    {"PX_SHM", "1", "collectives of ranks all on one host go through one shared-memory segment (0: UCX only)", NULL},
    {"PX_SHM_MIN_BYTES", "1024", "smallest collective (bytes of its largest buffer) taking the shared-memory path", NULL},
    {"PX_SHM_SLOT_BYTES", "262144", "bytes one rank stages per shared-memory pipeline step (three such buffers per rank)", NULL},
    {"PX_SHM_A2A_SLOT_BYTES", "0", "bytes one rank stages per shared-memory all-to-all step (1/N of it to each of the N ranks; three such buffers per rank); 0 or less than PX_SHM_SLOT_BYTES: PX_SHM_SLOT_BYTES (measured on the 2-core VM: larger steps cost the 4-rank all-to-all more copy time than the barriers they save)", NULL},
    {"PX_SHM_CMA", "-1", "large shared-memory collectives read the peer's buffer directly (process_vm_readv: one copy instead of two): -1 auto (all-gather and all-to-all on Intel CPUs, where it measured up to 2x faster; never elsewhere: on the AMD VMs it measured no faster than the two copies through the segment); 0 never; 1 all-to-all; 2 all-to-all, all-gather and broadcast", NULL},
    {"PX_SHM_CMA_MIN_BYTES", "-1", "smallest shared-memory all-gather / all-to-all / broadcast (bytes of its largest buffer) taking the single copy; -1: where each peer's block (a broadcast's buffer) is at least 32 KiB", NULL},
    {"PX_SHM_REG", "1", "px_shm_alloc registers buffers with the shared-memory path (the engine's stage-0 gradients): in-place all-reduces over them from 64 KiB read the peers' buffers where they lie instead of staging through the segment (0: plain memory, the slot path)", NULL},
    {"PX_SHM_SPIN_US", "-1", "shared-memory waits poll the peer's counter this long (us) before sleeping on its futex; -1: auto (50 us while the job's ranks on this node are no more than its CPUs and the load average is not above them, and not for the next 16..1024 waits after a spin the peer did not end; else, and after such a spin, the sched_yield window)", NULL},
    {"PX_SHM_YIELD_US", "-1", "where shared-memory waits do not spin (PX_SHM_SPIN_US 0, or auto on an oversubscribed or loaded node), they poll the peer's counter calling sched_yield this long (us) before sleeping on its futex, once per wait; -1: auto (500 us), 0: never", NULL},
    {"PX_SHM_WAIT_STATS", "0", "1: each rank prints to stderr, when a communicator's shared-memory segment is freed, how its blocking waits ended (spin, sched_yield window, futex sleeps): which wait tier ran", NULL},
    {"PX_SPIN_US", "0", "collective waits poll this long (us) before sleeping on the event fd; -1: "
     "auto (200 us while the job's ranks on this node are no more than its CPUs and the load average "
     "is not above them, else 0)", NULL},
    {"PX_ZERO_SHM_SLOT_BYTES", "0", "bytes one rank stages per shared-memory step on the data-parallel communicator of ZeRO stages 2-3 (px_comm_set_shm_slot at px_zero_create; 0: PX_SHM_SLOT_BYTES)", NULL},
    {"PX_ZERO_WAIT_LOG", "0", "1: each ZeRO-3 rank logs, at its end, every all-gather and reduce-scatter wait by place and unit (count, mean wall and CPU ms): where stage 3's blocked time goes", NULL},
    {"PX_COLL_BACKEND", "auto", "engine of collectives on device buffers: auto (NCCL where every rank of the communicator has a GPU of its own and NCCL loads and starts; else parallax's own paths, the rank log saying why), nccl (NCCL, or the collective fails naming why), px (parallax's own paths: CUDA IPC, staging)", NULL},
    {"PX_NCCL_LIBRARY", "", "the NCCL library opened at run time (dlopen: a file name the dynamic loader searches, or a path); empty: libnccl.so.2", NULL},
    {"PX_IPC", "1", "collectives of device buffers between the ranks of one node go through the peers' mapped device memory (CUDA IPC; 0: staged through host memory)", NULL},
    {"PX_CUDA_ATTN", "auto", "kernels of the CUDA bf16 attention: auto (the tensor-core kernels where the head size is a multiple of 16 up to 128 and the device's shared memory holds their tiles, else the CUDA-core ones), tc (the same), simt (the CUDA-core kernels always), cudnn (cuDNN's fused flash attention, libcudnn.so.9 loaded at run time, where the head size is a multiple of 8 up to 128; auto's kernels where cuDNN is missing or refuses the shape, logged once)", NULL},
    {"PX_IPC_PROTOCOL", "sync", "how IPC collectives order device work between ranks: sync (the host synchronizes the device before every doorbell) or event (each rank records a shared CUDA event before its doorbell and its peers' streams wait on it, no host wait inside a collective; reductions in one kernel); event only where every rank of the communicator asks for it", NULL},
    {"PX_IPC_CHUNK_BYTES", "0", "bytes one chunk of an IPC collective moves, at most PX_IPC_SLOT_BYTES (the smallest any rank of the communicator asks for; 0: the staging chunk, 4 MiB): with large slots, few host round trips per large collective", NULL},
    {"PX_IPC_SLOT_BYTES", "4194304", "bytes of one slot of a rank's device scratch ring for IPC collectives (two slots per rank and communicator)", NULL},
    {"PX_BF16_ACTS", "1", "--precision bf16: 1 stores the activations only bf16 GEMMs read (LayerNorm and GELU outputs) as bf16; 0 keeps them fp32 (the same results bit for bit, twice their memory: the check of that claim)", NULL},
    {"PX_SIM_DEVICE", "0", "1: the simulated device (tests: the CPU ops on memory the host cannot touch) may be used: parallax-rank --device sim, parallaxd --devices sim:N", NULL},
    {"PX_SIM_DEVICE_MB", "4096", "MiB of address space a simulated device reserves (its memory total, as parallaxd reports it)", NULL},
    {"PX_UCX_CUDA", "1", "where the UCX in use reports CUDA memory support (ucx_info -d lists cuda_copy), point-to-point transfers of device buffers go to UCX directly (0: staged through host memory)", NULL},
    {"PX_UCX_PEER_ERR_MODE", "auto", "UCX peer error handling: auto (remote nodes only), always, never", NULL},
    {"PX_HEARTBEAT_MS", "1000", "membership (SWIM) protocol period: a daemon probes one peer each (ms)", NULL},
    {"PX_GPU_SAMPLE_MS", "5000", "how often parallaxd samples its GPUs through NVML (memory, utilization, power, temperature, processes) for pctl nodes and /metrics (ms)", NULL},
    {"PX_PEER_DEAD_MS", "10000", "a killed peer daemon is dead to every member about this long after; its jobs fail (ms)", NULL},
    {"PX_RANK_BIN", "", "path of the parallax-rank binary the daemon spawns (default: next to parallaxd)", NULL},
    {"PX_KILL_GRACE_MS", "3000", "SIGTERM to SIGKILL grace when stopping ranks (ms)", NULL},
    {"PX_JOB_DEVICES", "0", "the physical devices a job's ranks run on (set by parallaxd: the slots of one GPU under --gpu-share count once), the number of peaks MFU divides by; 0: the world size", NULL},
    {"PX_PEAK_TFLOPS", "", "a rank's device peak (TFLOP/s, > 0) that MFU divides by: model FLOPs a token (px_step_model_flops_per_token) x tokens/s / (devices x this), devices PX_JOB_DEVICES or the world; unset: the planner's preset dense peak of an H100, H200 or A100 at the job's precision, matched by the CUDA device's name, and no MFU on a CPU or another GPU", NULL},
    {"PX_BLAS_CORETYPE", "", "OpenBLAS core ranks run (e.g. Haswell, SkylakeX; openblas: OpenBLAS's own "
     "choice); unset: the CPU's best (cpuid) unless OPENBLAS_CORETYPE is set", NULL},
};

static px_knob_t *find(const char *name)
{
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
        if (!strcmp(knobs[i].name, name)) {
            if (!knobs[i].value) {
                const char *v = getenv(name);
                knobs[i].value = (v && *v) ? v : knobs[i].def;
            }
            return &knobs[i];
        }
    }
    return NULL;
}

long px_env_int(const char *name)
{
    px_knob_t *k = find(name);
    char *end;
    long v;
    if (!k)
        return 0;
    v = strtol(k->value, &end, 10);
    if (end == k->value || *end)
        v = strtol(k->def, NULL, 10);
    return v;
}

const char *px_env_str(const char *name)
{
    px_knob_t *k = find(name);
    return k ? k->value : "";
}

void px_env_print(FILE *out)
{
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
        px_knob_t *k = find(knobs[i].name);
        fprintf(out, "%s=%s  # %s\n", k->name, k->value, k->doc);
    }
}
