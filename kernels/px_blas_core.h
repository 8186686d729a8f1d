/* px_blas_core.h: which OpenBLAS kernel set ("core") a process runs, and
 * making it the best the CPU supports.
 *
 * Debian's OpenBLAS (DYNAMIC_ARCH) picks its kernels when the library loads,
 * from the CPU model; on a model it does not know (most cloud VMs) it falls
 * back to Prescott (SSE3), 2.8x slower than the Haswell or SkylakeX kernels
 * the CPU can run. The only way to choose is OPENBLAS_CORETYPE in the
 * environment before the library loads, so:
 *   - the daemon's supervisor puts the choice in each rank's environment
 *     (px_blas_core_probe, asked once through `parallax-rank --blas-core`:
 *     the daemon does not load OpenBLAS), and
 *   - a process started otherwise (a standalone parallax-rank, the kernel
 *     tests) calls px_blas_core_ensure first thing in main(), which
 *     re-executes the process once with the variable set.
 * A process running a core parallax chose checks one small sgemm set against
 * a plain C reference and, if it differs, re-executes once more with
 * OpenBLAS's own choice.
 *
 * Precedence: PX_BLAS_CORETYPE (a core name, or "openblas": leave OpenBLAS
 * alone; a core above the CPU's tier is ignored with a warning) > OPENBLAS_CORETYPE already in the environment (kept: some machines
 * set it because OpenBLAS misbehaves there) > cpuid: AVX-512 F/BW/DQ/VL ->
 * SkylakeX, with AVX512-BF16 -> Cooperlake; AVX2 + FMA -> Haswell; chosen
 * only when the core OpenBLAS picked itself is of a lower tier (Zen counts
 * as Haswell: OpenBLAS runs the Haswell kernels on it).
 * Not thread-safe: call before any thread starts. */
#ifndef PX_BLAS_CORE_H
#define PX_BLAS_CORE_H

#include "px_cpu_tier.h" /* the tiers and cpuid (common/, no OpenBLAS) */
#include "px_status.h"

/* How the running core came about (px_blas_core_info_t.source). */
#define PX_BLAS_SRC_OPENBLAS "openblas" /* OpenBLAS's own choice, not below the CPU's best */
#define PX_BLAS_SRC_PRESET "preset"     /* OPENBLAS_CORETYPE set by whoever started us */
#define PX_BLAS_SRC_PX_ENV "PX_BLAS_CORETYPE"
#define PX_BLAS_SRC_CPUID "cpuid"       /* parallax raised it to the CPU's best */
#define PX_BLAS_SRC_FALLBACK "fallback" /* our choice failed the sgemm check */

typedef struct {
    char core[32];     /* openblas_get_corename() of this process, e.g. "SkylakeX" */
    char cpu_best[32]; /* best core cpuid allows: "Cooperlake", "SkylakeX", "Haswell" or "" */
    char rejected[32]; /* with source "fallback": the core that failed the check */
    const char *source; /* one of PX_BLAS_SRC_* (static string) */
    int checked;       /* 1 when the sgemm check ran in this process */
    double max_rel_err; /* with checked: its largest error, relative to sum |a||b| */
} px_blas_core_info_t;

/* The core a child process should get in OPENBLAS_CORETYPE, decided from this
 * process's environment and the core OpenBLAS chose here (same machine):
 * *core_p is a static name, or NULL to leave the child's environment alone
 * (a preset OPENBLAS_CORETYPE, OpenBLAS already at the CPU's best, or
 * PX_BLAS_CORETYPE=openblas). *source_p (optional) says why, PX_BLAS_SRC_*.
 * Never fails. */
void px_blas_core_decide(const char **core_p, const char **source_p);

/* The core the ranks this process starts will run: px_blas_core_decide's
 * choice, else the one OpenBLAS runs here (a preset, or its own choice).
 * *source_p gets PX_BLAS_SRC_*. Both static (or OpenBLAS's own string):
 * borrowed for the process's life. Never fails. */
const char *px_blas_core_node(const char **source_p);

/* px_blas_core_decide's choice and px_blas_core_node's core and source in
 * this process's environment, as `parallax-rank --blas-core` prints them
 * for parallaxd (px_cpu_tier.h). Call before px_blas_core_ensure: it
 * reads the environment the process was started with. Never fails. */
void px_blas_core_probe(px_blas_probe_t *probe);

/* Largest error px_blas_sgemm_error may report for a core to be kept. */
#define PX_BLAS_SGEMM_TOL 1e-5

/* Runs one small sgemm set (row-major, all four transpose pairs, odd sizes
 * that reach the edge kernels, alpha and beta not 1) on the running core and
 * a double-precision plain C reference; *max_rel_err_p gets the largest
 * |c - ref| / (|alpha| sum_k |a||b| + |beta c0|) over every element (fp32
 * rounding gives ~1e-7; a wrong kernel gives ~1). Errors: PX_ERR_NO_MEMORY. */
px_status_t px_blas_sgemm_error(double *max_rel_err_p);

/* First thing in main(): makes this process run the chosen core. When the
 * core must change it re-executes /proc/self/exe with `argv` and the
 * variables set (so it returns only in the final process); in a process
 * running a core parallax chose it runs px_blas_sgemm_error and, above
 * PX_BLAS_SGEMM_TOL, re-executes with OpenBLAS's own choice. Fills *info
 * with what runs. Never fails: an exec that fails is logged (warn) and the
 * process goes on with the core it has. */
void px_blas_core_ensure(char **argv, px_blas_core_info_t *info);

/* One log line (info; warn for a fallback) describing `info`. */
void px_blas_core_log(const px_blas_core_info_t *info);

#endif
