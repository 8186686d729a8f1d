/* cluster.h: a described cluster for the step-time model (steptime.h):
 * nodes, devices per node, one device's rates and the two links.
 *
 * A cluster is `nodes` nodes of `per_node` identical devices. Within a
 * node the devices talk over the intra-node link (NVLink, shared memory),
 * between nodes over the inter-node link (InfiniBand, Ethernet); each
 * device has its own share of each link (the figures are per device, one
 * direction). A group of ranks that the placement (px_layout_place: tensor
 * groups innermost) puts on one node uses the intra-node link, any other
 * the inter-node link.
 *
 * Built-in presets (px_cluster_preset), from the vendors' datasheets (peak
 * dense figures, no sparsity):
 *   a100-sxm-80g  NVIDIA A100 80GB SXM: bf16 tensor 312 TFLOP/s, fp32 (no
 *                 TF32) 19.5 TFLOP/s, HBM2e 2039 GB/s, 80 GB (NVIDIA A100
 *                 Tensor Core GPU datasheet, 2021); NVLink 3: 600 GB/s a
 *                 GPU both directions, 300 one way; HDR InfiniBand 200 Gb/s
 *                 a GPU = 25 GB/s (DGX A100 / Selene: 8 HDR ports a node;
 *                 Narayanan et al. 2021, section 5).
 *   a100-40g      the same with HBM2 1555 GB/s, 40 GB (same datasheet).
 *   h100-sxm      NVIDIA H100 SXM5 80GB: bf16 tensor 989 TFLOP/s (1979 is
 *                 with sparsity), fp32 67 TFLOP/s, HBM3 3.35 TB/s, 80 GB
 *                 (NVIDIA H100 Tensor Core GPU datasheet, 2023); NVLink 4:
 *                 900 GB/s both directions, 450 one way; NDR InfiniBand
 *                 400 Gb/s a GPU = 50 GB/s (DGX H100).
 *   h200-sxm      NVIDIA H200 SXM 141GB: the H100's tensor rates, HBM3e
 *                 4.8 TB/s, 141 GB (NVIDIA H200 datasheet, 2024); links as
 *                 h100-sxm.
 *   cpu           a CPU device of parallax's cpu backend (one rank a core
 *                 group): fp32 GEMM 50 GFLOP/s (OpenBLAS sgemm on a few
 *                 AVX2 cores), bf16 GEMM 12 GFLOP/s (widened to doubles,
 *                 kernels/px_matmul_bf16_cpu.c), 10 GB/s memory, 8 GB; shared
 *                 memory 5 GB/s, 10 us; TCP 1 GB/s, 50 us. Rough orders of
 *                 magnitude: calibrate a real machine with an INI file.
 * On a host whose cores the devices share (host.cores > 0, what
 * `--cluster local` measures for cpu devices) the cpu figures are those of
 * one rank computing alone on threads_per_rank cores; steptime.c divides
 * the cores among the ranks busy at once.
 * The GEMM rates are peaks; what GEMMs reach is `efficiency` x the peak:
 * an achievable fraction, not a vendor figure, CALIBRATED once per
 * hardware over the published runs on it (tests/planner/test_steptime.c):
 * 0.70 on A100 (the eleven Megatron-LM rows), 0.65 on H100 and H200 (the
 * torchtitan and llm.c rows; H200 has H100's tensor cores), inside the
 * 60-80% of the dense peak that large cuBLAS GEMMs sustain; 1.0 on the
 * cpu preset, whose rates are achieved ones. `attention` is an ACHIEVED
 * rate of a fused (flash) attention kernel, forward and backward, not
 * scaled by the efficiency: 200 TFLOP/s on A100 (Dao, "FlashAttention-2",
 * 2023: 187-225 fwd+bwd at head dims 64-128), 335 on H100 / H200 (Shah et
 * al., "FlashAttention-3", 2024: FlashAttention-2 on H100 at 325-370 in
 * bf16). The links' figures are the wire's peak; `efficiency` of a link
 * (presets 0.8: NCCL's all-reduce bus bandwidth in nccl-tests on DGX A100
 * / H100 is about 80% of the NVLink and InfiniBand peaks) scales them.
 * `launch_s`: the fixed cost of one kernel (launch plus tail), 5 us on the
 * GPU presets.
 *
 * The INI file (read with inih, as parallaxd's config):
 *   [cluster]  preset = h100-sxm   (the base, optional; default cpu)
 *              nodes = 2  devices_per_node = 8
 *   [device]   name, gemm_bf16_tflops, gemm_fp32_tflops, attention_tflops,
 *              memory_gbps, memory_gb, efficiency, launch_us, step_us
 *   [intra]    bandwidth_gbps, latency_us, efficiency
 *   [inter]    bandwidth_gbps, latency_us, efficiency
 *   [host]     cores, nodes_per_host, threads_per_rank (px_host_spec_t;
 *              default 0, 1, 1: devices that do not share a host's cores)
 * A key not given keeps the preset's value. Units: TFLOP/s, GB/s (10^9
 * bytes a second, one direction, per device), GB (10^9 bytes), us.
 *
 * Pure code (inih for the file); any thread. */
#ifndef PX_CLUSTER_H
#define PX_CLUSTER_H

#include <stddef.h>

#include "px_status.h"

/* One device's rates (per second) and memory. */
typedef struct px_device_spec {
    char name[32];
    double gemm_bf16;  /* FLOP/s, dense bf16 GEMM peak */
    double gemm_fp32;  /* FLOP/s, fp32 GEMM peak (no TF32) */
    double attention;  /* FLOP/s a fused attention kernel reaches (achieved,
                          bf16); the unfused path runs them as GEMMs */
    double mem_bw;     /* bytes/s, device memory */
    double mem_bytes;  /* bytes of device memory */
    double efficiency; /* fraction of the GEMM peaks the GEMMs reach */
    double launch_s;   /* seconds: fixed cost of one kernel */
    double step_s;     /* seconds: fixed cost of one optimizer step that no
                          piece of the model counts (the engine's per-step
                          bookkeeping: the batch's cut, the step report and
                          its metrics, the loss's logging); 0 on the presets,
                          --cluster local measures it */
} px_device_spec_t;

/* The host a node's devices compute on, where they share it (the cpu
 * backend: a rank's kernels run on the host's cores, so ranks that compute
 * at the same time divide them). cores 0: every device computes on its own
 * (a GPU; its host's cores only launch kernels) and the rest is unused. */
typedef struct px_host_spec {
    double cores;    /* CPUs the ranks of one host share (the affinity mask,
                        capped by the cgroup's CPU quota); 0: not shared */
    double nodes;    /* nodes (daemons) on one host: nodes i, i + 1, ..
                        i + nodes - 1 share one (local test clusters) */
    double threads;  /* cores one rank's kernels use while it computes
                        (OPENBLAS_NUM_THREADS, 1 as the supervisor sets it) */
} px_host_spec_t;

/* One link, per device and direction. */
typedef struct px_link_spec {
    double bw;         /* bytes/s, peak */
    double latency;    /* seconds per message (alpha) */
    double efficiency; /* fraction of bw a collective reaches */
} px_link_spec_t;

typedef struct px_cluster {
    char name[64];     /* the preset or file it came from */
    int nodes, per_node;
    px_device_spec_t dev;
    px_link_spec_t intra, inter;
    px_host_spec_t host;
} px_cluster_t;

/* The preset `name` (above) with `nodes` x `per_node` devices into
 * *cluster_p (written only on success).
 * PX_ERR_NOT_FOUND for an unknown name (logged, listing the presets),
 * PX_ERR_INVALID_ARGUMENT for a count < 1. */
px_status_t px_cluster_preset(const char *name, int nodes, int per_node, px_cluster_t *cluster_p);

/* The presets' names, NULL-terminated (static). */
const char *const *px_cluster_preset_names(void);

/* "PRESET:NODESxGPUS" (e.g. "h100-sxm:64x8"; "PRESET" alone: 1x1) or a
 * path to an INI file (anything with a '/' or ending in ".ini") into
 * *cluster_p.
 * Errors: PX_ERR_INVALID_ARGUMENT or PX_ERR_NOT_FOUND with the reason in
 * errbuf (naming the bad value, the file and line). */
px_status_t px_cluster_parse(const char *spec, px_cluster_t *cluster_p, char *errbuf,
                             size_t errlen);

/* Reads the INI file at `path` (format above) into *cluster_p. Errors as
 * px_cluster_parse. */
px_status_t px_cluster_load(const char *path, px_cluster_t *cluster_p, char *errbuf,
                            size_t errlen);

/* The dense GEMM peak in FLOP/s at `precision` (jobcfg.h: bf16 or fp32)
 * of the preset a CUDA device named `device_name` (cudaDeviceProp.name,
 * NVML's name: "NVIDIA H200", "NVIDIA A100-SXM4-80GB") is: "H200" ->
 * h200-sxm, "H100" -> h100-sxm, "A100" -> a100-sxm-80g (the 40 GB part
 * has the same rates), case-insensitive substrings. 0 for any other name
 * (a CPU, an unknown GPU): there is no honest peak to divide by. */
double px_cluster_device_peak(const char *device_name, int precision);

/* The link a group of `size` ranks uses when all of them are on one node
 * (`one_node` 1): intra, else inter. */
const px_link_spec_t *px_cluster_link(const px_cluster_t *c, int one_node);

#endif
