/* px_blas_core.c: the OpenBLAS core a process runs (px_blas_core.h).
 *
 * Environment protocol between a parent that chooses and the process that
 * runs the choice (all read here and nowhere else):
 *   OPENBLAS_CORETYPE     read by OpenBLAS when it loads
 *   PX_BLAS_CORE_SET      = OPENBLAS_CORETYPE when parallax set it (so the
 *                         process may fall back if the sgemm check fails;
 *                         a user's preset is never dropped)
 *   PX_BLAS_CORE_REJECTED the core a previous exec of this process rejected
 *   PX_BLAS_CORETYPE      the user's override (common/px_env.c table)
 * Runs on the main thread before any other thread starts. */
#include "px_blas_core.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "px_env.h"
#include "px_log.h"

#define ENV_SET PX_BLAS_CORE_SET_ENV
#define ENV_REJECTED "PX_BLAS_CORE_REJECTED"

static const char *own_core(void)
{
    const char *c = openblas_get_corename();
    return c ? c : "";
}

void px_blas_core_decide(const char **core_p, const char **source_p)
{
    const char *px = px_env_str("PX_BLAS_CORETYPE");
    const char *preset = getenv("OPENBLAS_CORETYPE");
    const char *set = getenv(ENV_SET);
    const char *core = NULL, *source;
    px_blas_tier_t best;
    int own;

    /* a core above the CPU's would die of SIGILL: ignored (ensure warns) */
    if (px && *px && px_blas_core_tier(px) > (int)px_blas_cpu_tier())
        px = NULL;
    if (px && *px) {
        if (!strcasecmp(px, "openblas"))
            source = PX_BLAS_SRC_OPENBLAS;
        else {
            core = px;
            source = PX_BLAS_SRC_PX_ENV;
        }
    } else if (preset && *preset && !(set && !strcmp(set, preset))) {
        source = PX_BLAS_SRC_PRESET;
    } else if (getenv(ENV_REJECTED)) {
        source = PX_BLAS_SRC_FALLBACK;
    } else {
        best = px_blas_cpu_tier();
        own = px_blas_core_tier(own_core());
        if (best > PX_BLAS_TIER_BASE && own >= 0 && own < (int)best) {
            core = px_blas_tier_core(best);
            source = PX_BLAS_SRC_CPUID;
        } else {
            source = PX_BLAS_SRC_OPENBLAS;
        }
    }
    *core_p = core;
    if (source_p)
        *source_p = source;
}

const char *px_blas_core_node(const char **source_p)
{
    const char *core;

    px_blas_core_decide(&core, source_p);
    return core ? core : own_core();
}

void px_blas_core_probe(px_blas_probe_t *probe)
{
    const char *core, *source, *node;

    memset(probe, 0, sizeof(*probe));
    px_blas_core_decide(&core, NULL);
    node = px_blas_core_node(&source);
    snprintf(probe->child_core, sizeof(probe->child_core), "%s", core ? core : "");
    snprintf(probe->node_core, sizeof(probe->node_core), "%s", node);
    snprintf(probe->source, sizeof(probe->source), "%s", source);
}

/* C (m x n) = alpha op(A) op(B) + beta C, row-major, in double */
static void sgemm_ref(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, const float *C0, double *C,
                      double *scale)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? A[p * lda + i] : A[i * lda + p];
                double b = tb ? B[j * ldb + p] : B[p * ldb + j];
                s += a * b;
                mag += fabs(a * b);
            }
            C[i * n + j] = alpha * s + (double)beta * C0[i * n + j];
            scale[i * n + j] = fabs(alpha) * mag + fabs((double)beta * C0[i * n + j]);
        }
}

px_status_t px_blas_sgemm_error(double *max_rel_err_p)
{
    /* odd sizes: full register blocks and the edge kernels of every core */
    const int m = 37, n = 29, k = 67;
    const float alpha = 0.75f, beta = -0.5f;
    float *A = malloc(sizeof(float) * m * k), *B = malloc(sizeof(float) * k * n);
    float *C0 = malloc(sizeof(float) * m * n), *C = malloc(sizeof(float) * m * n);
    double *R = malloc(sizeof(double) * m * n), *S = malloc(sizeof(double) * m * n);
    double worst = 0;
    unsigned x = 12345;
    px_status_t status = PX_ERR_NO_MEMORY;

    if (!A || !B || !C0 || !C || !R || !S)
        goto out;
#define RND() ((x = x * 1103515245u + 12345u), ((float)((x >> 8) & 0xffff) / 32768.0f - 1.0f))
    for (int i = 0; i < m * k; i++)
        A[i] = RND();
    for (int i = 0; i < k * n; i++)
        B[i] = RND();
    for (int i = 0; i < m * n; i++)
        C0[i] = RND();
#undef RND
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        int lda = ta ? m : k, ldb = tb ? k : n;
        memcpy(C, C0, sizeof(float) * m * n);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, alpha, A, lda, B, ldb, beta, C, n);
        sgemm_ref(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, R, S);
        for (int i = 0; i < m * n; i++) {
            double e = fabs((double)C[i] - R[i]) / (S[i] > 1e-30 ? S[i] : 1e-30);
            if (!(e <= worst)) /* NaN counts as the worst */
                worst = isnan(e) ? INFINITY : e;
        }
    }
    *max_rel_err_p = worst;
    status = PX_OK;
out:
    free(A);
    free(B);
    free(C0);
    free(C);
    free(R);
    free(S);
    return status;
}

static void reexec(char **argv, const char *what)
{
    fflush(NULL);
    execv("/proc/self/exe", argv);
    px_warn("BLAS core: cannot re-execute %s (%s): %s; keeping OpenBLAS's %s", argv[0], what,
            strerror(errno), own_core());
}

void px_blas_core_ensure(char **argv, px_blas_core_info_t *info)
{
    const char *preset = getenv("OPENBLAS_CORETYPE");
    const char *set = getenv(ENV_SET), *rej = getenv(ENV_REJECTED);
    const char *core, *source;
    double err = INFINITY;

    memset(info, 0, sizeof(*info));
    snprintf(info->core, sizeof(info->core), "%s", own_core());
    snprintf(info->cpu_best, sizeof(info->cpu_best), "%s", px_blas_tier_core(px_blas_cpu_tier()));
    info->checked = px_blas_sgemm_error(&err) == PX_OK;
    info->max_rel_err = err;

    if (preset && *preset && set && !strcmp(set, preset)) {
        /* running the core parallax chose: keep it only if it computes right */
        const char *px = px_env_str("PX_BLAS_CORETYPE");
        if (!info->checked || err > PX_BLAS_SGEMM_TOL) {
            snprintf(info->rejected, sizeof(info->rejected), "%s", preset);
            setenv(ENV_REJECTED, info->rejected, 1);
            unsetenv("OPENBLAS_CORETYPE");
            unsetenv(ENV_SET);
            reexec(argv, "to fall back");
            info->source = PX_BLAS_SRC_FALLBACK;
            return;
        }
        info->source = px && !strcasecmp(px, preset) ? PX_BLAS_SRC_PX_ENV : PX_BLAS_SRC_CPUID;
        return;
    }
    if (px_blas_core_tier(px_env_str("PX_BLAS_CORETYPE")) > (int)px_blas_cpu_tier())
        px_warn("PX_BLAS_CORETYPE=%s ignored: this CPU's best is %s", px_env_str("PX_BLAS_CORETYPE"),
                info->cpu_best[0] ? info->cpu_best : "below Haswell");
    if (rej && *rej) {
        snprintf(info->rejected, sizeof(info->rejected), "%s", rej);
        unsetenv(ENV_REJECTED);
        info->source = PX_BLAS_SRC_FALLBACK;
        return;
    }
    px_blas_core_decide(&core, &source);
    info->source = source;
    if (!core || !strcasecmp(core, info->core))
        return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv(ENV_SET, core, 1);
    reexec(argv, core);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(ENV_SET);
    info->source = PX_BLAS_SRC_OPENBLAS;
}

void px_blas_core_log(const px_blas_core_info_t *info)
{
    if (info->rejected[0])
        px_warn("BLAS core %s (fallback: %s failed the sgemm check; CPU best %s)", info->core,
                info->rejected, info->cpu_best[0] ? info->cpu_best : "-");
    else
        px_info("BLAS core %s (%s; CPU best %s; sgemm check %s, max rel err %.1e)", info->core,
                info->source, info->cpu_best[0] ? info->cpu_best : "-",
                !info->checked ? "not run"
                : info->max_rel_err <= PX_BLAS_SGEMM_TOL ? "ok" : "FAILED",
                info->max_rel_err);
}
