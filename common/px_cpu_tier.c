/* px_cpu_tier.c: the CPU's OpenBLAS tier from cpuid, and the probe line
 * (px_cpu_tier.h). */
#include "px_cpu_tier.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HAVE_X86 1
#endif

/* OpenBLAS 0.3.21 driver/others/dynamic.c corename table, by tier. */
static const struct {
    const char *name;
    int tier;
} core_tiers[] = {
    {"Prescott", 0},    {"Core2", 0},      {"Penryn", 0},       {"Dunnington", 0},
    {"Nehalem", 0},     {"Atom", 0},       {"Athlon", 0},       {"Opteron", 0},
    {"Opteron_SSE3", 0}, {"Barcelona", 0}, {"Nano", 0},         {"Sandybridge", 0},
    {"Bobcat", 0},      {"Bulldozer", 0},  {"Piledriver", 0},   {"Steamroller", 0},
    {"Excavator", 0},   {"Katmai", 0},     {"Coppermine", 0},   {"Northwood", 0},
    {"Banias", 0},      {"Haswell", 1},    {"Zen", 1},          {"SkylakeX", 2},
    {"Cooperlake", 3},  {"Sapphirerapids", 3},
};

const char *px_blas_tier_core(px_blas_tier_t tier)
{
    switch (tier) {
    case PX_BLAS_TIER_HASWELL: return "Haswell";
    case PX_BLAS_TIER_SKYLAKEX: return "SkylakeX";
    case PX_BLAS_TIER_COOPERLAKE: return "Cooperlake";
    default: return "";
    }
}

int px_blas_core_tier(const char *core)
{
    if (!core)
        return -1;
    for (size_t i = 0; i < sizeof(core_tiers) / sizeof(core_tiers[0]); i++)
        if (!strcasecmp(core, core_tiers[i].name))
            return core_tiers[i].tier;
    return -1;
}

px_blas_tier_t px_blas_cpu_tier(void)
{
#ifdef HAVE_X86
    unsigned a, b, c, d, xcr0_lo, xcr0_hi;
    int avx2, fma, avx512, bf16;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return PX_BLAS_TIER_BASE;
    fma = (c >> 12) & 1;
    if (!((c >> 27) & 1) || !((c >> 28) & 1)) /* OSXSAVE, AVX */
        return PX_BLAS_TIER_BASE;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6) != 0x6) /* the OS saves XMM and YMM state */
        return PX_BLAS_TIER_BASE;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return PX_BLAS_TIER_BASE;
    avx2 = (b >> 5) & 1;
    /* AVX512 F (16), DQ (17), BW (30), VL (31); opmask, ZMM_Hi256, Hi16_ZMM saved */
    avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) &&
             (xcr0_lo & 0xe6) == 0xe6;
    if (avx512) {
        bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
        return bf16 ? PX_BLAS_TIER_COOPERLAKE : PX_BLAS_TIER_SKYLAKEX;
    }
    return avx2 && fma ? PX_BLAS_TIER_HASWELL : PX_BLAS_TIER_BASE;
#else
    return PX_BLAS_TIER_BASE;
#endif
}

void px_blas_probe_format(const px_blas_probe_t *probe, char *buf, size_t len)
{
    snprintf(buf, len, "blas-core %s %s %s\n", probe->child_core[0] ? probe->child_core : "-",
             probe->node_core[0] ? probe->node_core : "-", probe->source);
}

px_status_t px_blas_probe_parse(const char *line, px_blas_probe_t *probe)
{
    px_blas_probe_t p;

    memset(&p, 0, sizeof(p));
    /* widths: the fields' sizes - 1 */
    if (sscanf(line, "blas-core %31s %31s %23s", p.child_core, p.node_core, p.source) != 3)
        return PX_ERR_INVALID_ARGUMENT;
    if (!strcmp(p.child_core, "-"))
        p.child_core[0] = '\0';
    if (!strcmp(p.node_core, "-"))
        p.node_core[0] = '\0';
    *probe = p;
    return PX_OK;
}
