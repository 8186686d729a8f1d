/* px_blas_core.h: which OpenBLAS kernel set ("core") a process runs, and
 * making it the best the CPU supports.
 *
 * Debian's OpenBLAS (DYNAMIC_ARCH) picks its kernels when the library loads,
 * from the CPU model; on a model it does not know (most cloud VMs) it falls
 * back to Prescott (SSE3), 2.8x slower than the Haswell or SkylakeX kernels
 * the CPU can run. The only way to choose is OPENBLAS_CORETYPE in the
 * environment before the library loads, so:
 *   - the daemon's supervisor puts the choice in each rank's environment
 *     (px_blas_core_child_env), and
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

#include "px_status.h"

/* Kernel tiers, lowest first. */
typedef enum {
    PX_BLAS_TIER_BASE = 0,       /* SSE-class kernels (Prescott, Nehalem, ...) */
    PX_BLAS_TIER_HASWELL = 1,    /* AVX2 + FMA: Haswell, Zen */
    PX_BLAS_TIER_SKYLAKEX = 2,   /* AVX-512 F/BW/DQ/VL */
    PX_BLAS_TIER_COOPERLAKE = 3, /* + AVX512-BF16 (Sapphirerapids counts here too) */
} px_blas_tier_t;

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

/* The best tier this CPU and OS support, from cpuid (and XGETBV: the OS must
 * save the AVX / AVX-512 registers). PX_BLAS_TIER_BASE off x86-64. */
px_blas_tier_t px_blas_cpu_tier(void);

/* The OpenBLAS core name for `tier` ("Haswell", ...; "" for BASE). Static. */
const char *px_blas_tier_core(px_blas_tier_t tier);

/* The tier of an OpenBLAS core name (case-insensitive); -1 for a name this
 * file does not know (never raised: it may be newer than our table). */
int px_blas_core_tier(const char *core);

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

/* Fills `env` (at least 2 slots) with the "NAME=value" strings a child
 * should get so that it runs px_blas_core_decide's core and knows that
 * parallax chose it (so its own check may fall back): OPENBLAS_CORETYPE and
 * PX_BLAS_CORE_SET. Strings are static (valid for the process's life).
 * Returns how many it wrote (0 or 2). The caller drops any inherited
 * OPENBLAS_CORETYPE / PX_BLAS_CORE_SET when it writes 2. */
int px_blas_core_child_env(const char **env);

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
