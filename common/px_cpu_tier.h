/* px_cpu_tier.h: the OpenBLAS kernel tier this CPU supports, from cpuid,
 * and the one line in which parallax-rank reports the BLAS core a node's
 * ranks run, without OpenBLAS.
 *
 * The tier needs only cpuid, so every program may ask it (parallaxd's
 * --print-config, the ranks through kernels/px_blas_core.h). Which core
 * OpenBLAS itself would pick is known only to a process that loads it:
 * parallaxd, which does not, asks `parallax-rank --blas-core` once at start
 * (px_blas_probe_t below) and keeps the answer: what its ranks' environment
 * gets and what `pctl nodes` shows. Tiers follow OpenBLAS 0.3.21's
 * driver/others/dynamic.c core table. */
#ifndef PX_CPU_TIER_H
#define PX_CPU_TIER_H

#include <stddef.h>

#include "px_status.h"

/* Kernel tiers, lowest first. */
typedef enum {
    PX_BLAS_TIER_BASE = 0,       /* SSE-class kernels (Prescott, Nehalem, ...) */
    PX_BLAS_TIER_HASWELL = 1,    /* AVX2 + FMA: Haswell, Zen */
    PX_BLAS_TIER_SKYLAKEX = 2,   /* AVX-512 F/BW/DQ/VL */
    PX_BLAS_TIER_COOPERLAKE = 3, /* + AVX512-BF16 (Sapphirerapids counts here too) */
} px_blas_tier_t;

/* The best tier this CPU and OS support, from cpuid (and XGETBV: the OS must
 * save the AVX / AVX-512 registers). PX_BLAS_TIER_BASE off x86-64. */
px_blas_tier_t px_blas_cpu_tier(void);

/* The OpenBLAS core name for `tier` ("Haswell", ...; "" for BASE). Static. */
const char *px_blas_tier_core(px_blas_tier_t tier);

/* The tier of an OpenBLAS core name (case-insensitive); -1 for a name this
 * file does not know (never raised: it may be newer than our table). */
int px_blas_core_tier(const char *core);

/* Set beside OPENBLAS_CORETYPE (to the same core) by whoever chose it for
 * the process it starts, so that process's sgemm check may fall back to
 * OpenBLAS's own choice (kernels/px_blas_core.c); a user's preset, without
 * it, is never dropped. */
#define PX_BLAS_CORE_SET_ENV "PX_BLAS_CORE_SET"

/* What `parallax-rank --blas-core` prints, decided in its environment
 * before it loads a core of its own (kernels/px_blas_core.h): the core a
 * child should get in OPENBLAS_CORETYPE ("" to leave the environment
 * alone), the core the node's ranks will run, and why (PX_BLAS_SRC_*). */
typedef struct {
    char child_core[32];
    char node_core[32];
    char source[24];
} px_blas_probe_t;

/* The probe as one line "blas-core CHILD NODE SOURCE\n" (CHILD "-" when
 * empty) into buf[len]. */
void px_blas_probe_format(const px_blas_probe_t *probe, char *buf, size_t len);

/* Parses px_blas_probe_format's line (trailing text ignored) into *probe.
 * PX_ERR_INVALID_ARGUMENT when `line` is not one. */
px_status_t px_blas_probe_parse(const char *line, px_blas_probe_t *probe);

#endif
