/* cluster.c: the presets and the INI reader of a described cluster
 * (cluster.h). The file is parsed by inih (ini_parse_file); every key is
 * a number checked for range, an unknown section or key is an error that
 * names it and its line. Any thread. */
#include "cluster.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobcfg.h"
#include "px_log.h"

#define T 1e12
#define G 1e9

/* The presets; their sources are in cluster.h. */
static const struct preset {
    const char *name;
    px_device_spec_t dev;
    px_link_spec_t intra, inter;
} presets[] = {
    {"a100-sxm-80g", {"A100-SXM-80GB", 312 * T, 19.5 * T, 200 * T, 2039 * G, 80 * G, 0.70, 5e-6},
     {300 * G, 3e-6, 0.8}, {25 * G, 6e-6, 0.8}},
    {"a100-40g", {"A100-SXM-40GB", 312 * T, 19.5 * T, 200 * T, 1555 * G, 40 * G, 0.70, 5e-6},
     {300 * G, 3e-6, 0.8}, {25 * G, 6e-6, 0.8}},
    {"h100-sxm", {"H100-SXM-80GB", 989 * T, 67 * T, 335 * T, 3350 * G, 80 * G, 0.65, 5e-6},
     {450 * G, 3e-6, 0.8}, {50 * G, 6e-6, 0.8}},
    {"h200-sxm", {"H200-SXM-141GB", 989 * T, 67 * T, 335 * T, 4800 * G, 141 * G, 0.65, 5e-6},
     {450 * G, 3e-6, 0.8}, {50 * G, 6e-6, 0.8}},
    {"cpu", {"cpu", 12e9, 50e9, 12e9, 10 * G, 8 * G, 1.0, 2e-6},
     {5 * G, 10e-6, 1.0}, {1 * G, 50e-6, 1.0}},
};
#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

const char *const *px_cluster_preset_names(void)
{
    static const char *names[NPRESETS + 1];
    for (size_t i = 0; i < NPRESETS; i++)
        names[i] = presets[i].name;
    names[NPRESETS] = NULL;
    return names;
}

static const struct preset *find_preset(const char *name)
{
    for (size_t i = 0; i < NPRESETS; i++)
        if (!strcmp(presets[i].name, name))
            return &presets[i];
    return NULL;
}

double px_cluster_device_peak(const char *device_name, int precision)
{
    static const struct { const char *part, *preset; } by_name[] = {
        {"h200", "h200-sxm"}, {"h100", "h100-sxm"}, {"a100", "a100-sxm-80g"}};
    char lower[128];
    size_t n = 0;
    if (!device_name)
        return 0;
    for (; device_name[n] && n + 1 < sizeof(lower); n++)
        lower[n] = (char)tolower((unsigned char)device_name[n]);
    lower[n] = '\0';
    for (size_t i = 0; i < sizeof(by_name) / sizeof(by_name[0]); i++)
        if (strstr(lower, by_name[i].part)) {
            const struct preset *p = find_preset(by_name[i].preset);
            return precision == PX_PRECISION_BF16 ? p->dev.gemm_bf16 : p->dev.gemm_fp32;
        }
    return 0;
}

static void preset_list(char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NPRESETS && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", presets[i].name);
}

px_status_t px_cluster_preset(const char *name, int nodes, int per_node, px_cluster_t *cluster_p)
{
    const struct preset *p = name ? find_preset(name) : NULL;
    char list[256];
    if (!p) {
        preset_list(list, sizeof(list));
        px_error("cluster preset '%s' is unknown (presets: %s)", name ? name : "", list);
        return PX_ERR_NOT_FOUND;
    }
    if (nodes < 1 || per_node < 1) {
        px_error("cluster %s: %d nodes x %d devices: both must be >= 1", name, nodes, per_node);
        return PX_ERR_INVALID_ARGUMENT;
    }
    memset(cluster_p, 0, sizeof(*cluster_p));
    snprintf(cluster_p->name, sizeof(cluster_p->name), "%s:%dx%d", name, nodes, per_node);
    cluster_p->nodes = nodes;
    cluster_p->per_node = per_node;
    cluster_p->dev = p->dev;
    cluster_p->intra = p->intra;
    cluster_p->inter = p->inter;
    cluster_p->host = (px_host_spec_t){.cores = 0, .nodes = 1, .threads = 1};
    return PX_OK;
}

px_status_t px_cluster_parse(const char *spec, px_cluster_t *cluster_p, char *errbuf, size_t errlen)
{
    char name[64];
    const char *colon;
    int nodes = 1, per_node = 1;
    size_t n, sl = spec ? strlen(spec) : 0;

    if (!spec || !*spec) {
        snprintf(errbuf, errlen, "--cluster needs FILE or PRESET:NODESxGPUS");
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (strchr(spec, '/') || (sl > 4 && !strcmp(spec + sl - 4, ".ini")))
        return px_cluster_load(spec, cluster_p, errbuf, errlen);
    colon = strchr(spec, ':');
    n = colon ? (size_t)(colon - spec) : sl;
    if (n >= sizeof(name)) {
        snprintf(errbuf, errlen, "cluster '%s': preset name too long", spec);
        return PX_ERR_INVALID_ARGUMENT;
    }
    memcpy(name, spec, n);
    name[n] = '\0';
    if (colon) {
        char tail;
        if (sscanf(colon + 1, "%dx%d%c", &nodes, &per_node, &tail) != 2 || nodes < 1 ||
            per_node < 1 || nodes > 1000000 || per_node > 4096) {
            snprintf(errbuf, errlen, "cluster '%s': expected PRESET:NODESxGPUS, e.g. h100-sxm:64x8",
                     spec);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    if (!find_preset(name)) {
        char list[256];
        preset_list(list, sizeof(list));
        snprintf(errbuf, errlen, "cluster '%s': unknown preset '%s' (presets: %s; or an .ini file)",
                 spec, name, list);
        return PX_ERR_NOT_FOUND;
    }
    return px_cluster_preset(name, nodes, per_node, cluster_p);
}

/* ------------------------------------------------------------- the file */

typedef struct {
    px_cluster_t c;
    int have_preset;    /* a preset key was seen (it must come first) */
    int keys;           /* keys applied so far */
    char err[200];
} ini_ctx_t;

/* A number key: its field, scale from the file's unit to the struct's, and
 * range in the file's unit. */
typedef struct {
    const char *section, *key;
    size_t offset;
    double scale, lo, hi;
} num_key_t;

#define DEV(f) offsetof(px_cluster_t, dev) + offsetof(px_device_spec_t, f)
#define LNK(l, f) offsetof(px_cluster_t, l) + offsetof(px_link_spec_t, f)
#define HOST(f) offsetof(px_cluster_t, host) + offsetof(px_host_spec_t, f)
static const num_key_t num_keys[] = {
    {"device", "gemm_bf16_tflops", DEV(gemm_bf16), T, 1e-6, 1e6},
    {"device", "gemm_fp32_tflops", DEV(gemm_fp32), T, 1e-6, 1e6},
    {"device", "attention_tflops", DEV(attention), T, 1e-6, 1e6},
    {"device", "memory_gbps", DEV(mem_bw), G, 1e-3, 1e6},
    {"device", "memory_gb", DEV(mem_bytes), G, 1e-3, 1e6},
    {"device", "efficiency", DEV(efficiency), 1, 1e-3, 1},
    {"device", "launch_us", DEV(launch_s), 1e-6, 0, 1e6},
    {"device", "step_us", DEV(step_s), 1e-6, 0, 1e9},
    {"intra", "bandwidth_gbps", LNK(intra, bw), G, 1e-3, 1e6},
    {"intra", "latency_us", LNK(intra, latency), 1e-6, 0, 1e6},
    {"intra", "efficiency", LNK(intra, efficiency), 1, 1e-3, 1},
    {"inter", "bandwidth_gbps", LNK(inter, bw), G, 1e-3, 1e6},
    {"inter", "latency_us", LNK(inter, latency), 1e-6, 0, 1e6},
    {"inter", "efficiency", LNK(inter, efficiency), 1, 1e-3, 1},
    {"host", "cores", HOST(cores), 1, 0, 1e6},
    {"host", "nodes_per_host", HOST(nodes), 1, 1, 1e6},
    {"host", "threads_per_rank", HOST(threads), 1, 1, 1e6},
};
#define NNUM (sizeof(num_keys) / sizeof(num_keys[0]))

static int parse_num(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    if (errno || end == v || *end || !isfinite(d) || d < lo || d > hi)
        return -1;
    *out = d;
    return 0;
}

static int on_key(void *user, const char *section, const char *key, const char *value)
{
    ini_ctx_t *ctx = user;
    double d;

    if (ctx->err[0])
        return 0;
    value = value ? value : "";
    if (!strcmp(section, "cluster")) {
        if (!strcmp(key, "preset")) {
            const struct preset *p = find_preset(value);
            if (!p) {
                char list[128];
                preset_list(list, sizeof(list));
                snprintf(ctx->err, sizeof(ctx->err), "preset '%.40s' is unknown (presets: %s)",
                         value, list);
                return 0;
            }
            if (ctx->keys) {
                snprintf(ctx->err, sizeof(ctx->err), "preset must be the first key");
                return 0;
            }
            ctx->c.dev = p->dev;
            ctx->c.intra = p->intra;
            ctx->c.inter = p->inter;
            ctx->have_preset = 1;
            ctx->keys++;
            return 1;
        }
        if (!strcmp(key, "nodes") || !strcmp(key, "devices_per_node")) {
            if (parse_num(value, 1, 1e6, &d) || d != floor(d)) {
                snprintf(ctx->err, sizeof(ctx->err), "%s = '%s': a whole number >= 1", key,
                         value);
                return 0;
            }
            *(!strcmp(key, "nodes") ? &ctx->c.nodes : &ctx->c.per_node) = (int)d;
            ctx->keys++;
            return 1;
        }
    } else if (!strcmp(section, "device") && !strcmp(key, "name")) {
        snprintf(ctx->c.dev.name, sizeof(ctx->c.dev.name), "%s", value);
        ctx->keys++;
        return 1;
    }
    for (size_t i = 0; i < NNUM; i++) {
        const num_key_t *k = &num_keys[i];
        if (strcmp(k->section, section) || strcmp(k->key, key))
            continue;
        if (parse_num(value, k->lo, k->hi, &d)) {
            snprintf(ctx->err, sizeof(ctx->err), "[%s] %s = '%s': a number in [%g, %g]", section,
                     key, value, k->lo, k->hi);
            return 0;
        }
        *(double *)((char *)&ctx->c + k->offset) = d * k->scale;
        ctx->keys++;
        return 1;
    }
    snprintf(ctx->err, sizeof(ctx->err), "unknown key '%s' in section [%s]", key, section);
    return 0;
}

px_status_t px_cluster_load(const char *path, px_cluster_t *cluster_p, char *errbuf,
                            size_t errlen)
{
    ini_ctx_t ctx;
    FILE *f = fopen(path, "r");
    int ret;

    if (!f) {
        snprintf(errbuf, errlen, "cluster file %s: cannot open: %s", path, strerror(errno));
        return PX_ERR_NOT_FOUND;
    }
    memset(&ctx, 0, sizeof(ctx));
    if (px_cluster_preset("cpu", 1, 1, &ctx.c) != PX_OK) {
        fclose(f);
        return PX_ERR_INTERNAL;
    }
    ret = ini_parse_file(f, on_key, &ctx);
    fclose(f);
    if (ctx.err[0] || ret != 0) {
        snprintf(errbuf, errlen, "cluster file %s:%d: %s", path, ret,
                 ctx.err[0] ? ctx.err : "syntax error (expected key = value or [section])");
        return PX_ERR_INVALID_ARGUMENT;
    }
    snprintf(ctx.c.name, sizeof(ctx.c.name), "%s", path);
    *cluster_p = ctx.c;
    return PX_OK;
}

const px_link_spec_t *px_cluster_link(const px_cluster_t *c, int one_node)
{
    return one_node ? &c->intra : &c->inter;
}
