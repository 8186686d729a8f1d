/* config.c: parallaxd's command line and inih config file (see config.h).
 *
 * Runs once on the main thread before the event loop starts. The command
 * line wins over the file, the file over the environment: options are
 * parsed twice, first only to find --config, then the file is applied, then
 * every other option. The file is read whole and fed to inih line by line
 * through ini_parse_stream with a counting reader, so each value knows its
 * line and an unknown key is reported as FILE:LINE. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "px_log.h"

/* Keys: index into cfg->source; option value = OPT_BASE + index. */
enum { K_NAME, K_LISTEN, K_PEER_LISTEN, K_STATE_DIR, K_RUNTIME_DIR, K_DEVICES, K_PEERS,
       K_HEARTBEAT, K_PEER_DEAD, K_COLL_TIMEOUT, K_KILL_GRACE, K_LOG_LEVEL, K_TOKEN_FILE,
       K_CONTROL_GROUP, K_CONTROL_REMOTE, K_MAX_MSG, K_TLS_CERT, K_TLS_KEY, K_TLS_CA, K_METRICS_LISTEN,
       K_AUTH_MAX_WRONG, K_AUTH_LOCKOUT, K_TENSORBOARD_DIR, K_GPU_SHARE, K_COUNT };
_Static_assert(K_COUNT == PXD_CFG_KEYS, "PXD_CFG_KEYS matches the key table");

enum { OPT_BASE = 1000, OPT_CONFIG = 2000, OPT_PRINT_CONFIG, OPT_HELP };

typedef struct {
    const char *key;
    const char *env;        /* PX_* knob this key mirrors, or NULL */
    const char *def;
    const char *help;
} key_t_;

static const key_t_ keys[K_COUNT] = {
    [K_NAME] = {"name", NULL, NULL, "node name (default: hostname); job ids embed it"},
    [K_LISTEN] = {"listen", NULL, "127.0.0.1:7070",
                  "Control service host:port (loopback only unless control-remote)"},
    [K_PEER_LISTEN] = {"peer-listen", NULL, "127.0.0.1:7071", "Peer service host:port"},
    [K_STATE_DIR] = {"state-dir", NULL, "/var/lib/parallax", "database, lock and rank logs"},
    [K_RUNTIME_DIR] = {"runtime-dir", NULL, "/run/parallax", "control.sock"},
    [K_DEVICES] = {"devices", NULL, "cpu:1", "cpu:N: N virtual CPU devices; cuda: every GPU (NVML); "
                   "cuda:0,1: those GPUs; sim:N: N simulated devices (tests; needs PX_SIM_DEVICE=1); "
                   "combined with commas (cuda:0,cpu:2)"},
    [K_PEERS] = {"peers", NULL, "",
                 "seeds, A,B,...: peer-listen addresses of other daemons (the rest of the "
                 "cluster is learned through them)"},
    [K_HEARTBEAT] = {"heartbeat-ms", "PX_HEARTBEAT_MS", "1000",
                     "membership (SWIM) protocol period: one member probed each (ms)"},
    [K_PEER_DEAD] = {"peer-dead-ms", "PX_PEER_DEAD_MS", "10000",
                     "a killed peer is counted down by every member about this long after (ms; "
                     "SWIM's suspicion timeout is derived from it)"},
    [K_COLL_TIMEOUT] = {"collective-timeout-ms", "PX_COMM_TIMEOUT_MS", "60000",
                        "deadline of one collective in the ranks (ms)"},
    [K_KILL_GRACE] = {"kill-grace-ms", "PX_KILL_GRACE_MS", "3000",
                      "SIGTERM to SIGKILL grace when stopping ranks (ms)"},
    [K_LOG_LEVEL] = {"log-level", "PX_LOG_LEVEL", "info", "error, warn, info, debug"},
    [K_TOKEN_FILE] = {"token-file", NULL, "",
                      "file holding the cluster token (empty: no token)"},
    [K_CONTROL_GROUP] = {"control-group", NULL, "", "group owning control.sock (mode 0660)"},
    [K_CONTROL_REMOTE] = {"control-remote", NULL, "no",
                          "yes: --listen may be a non-loopback address"},
    [K_MAX_MSG] = {"max-message-bytes", NULL, "67108864",
                   "largest request accepted (bytes); larger: RESOURCE_EXHAUSTED"},
    [K_TLS_CERT] = {"tls-cert-file", NULL, "", "PEM certificate chain: TLS on both services"},
    [K_TLS_KEY] = {"tls-key-file", NULL, "", "PEM private key of tls-cert-file"},
    [K_TLS_CA] = {"tls-ca-file", NULL, "",
                  "PEM CA bundle that verifies the other daemons (default: tls-cert-file)"},
    [K_METRICS_LISTEN] = {"metrics-listen", NULL, "",
                          "Prometheus metrics over HTTP at host:port or [IPv6]:port (/metrics; "
                          "a bare :port or port: loopback; empty: off)"},
    [K_AUTH_MAX_WRONG] = {"auth-max-wrong", NULL, "10",
                          "wrong cluster tokens from one address within auth-lockout-ms "
                          "before its calls are refused for auth-lockout-ms (0: no limit)"},
    [K_AUTH_LOCKOUT] = {"auth-lockout-ms", NULL, "60000",
                        "how long an address that sent auth-max-wrong wrong tokens is "
                        "refused (ms)"},
    [K_TENSORBOARD_DIR] = {"tensorboard-dir", NULL, "",
                           "TensorBoard event files of jobs submitted without --tensorboard, "
                           "DIR/<job id>/ (empty: state-dir/tensorboard; off: none)"},
    [K_GPU_SHARE] = {"gpu-share", NULL, "1",
                     "each GPU (and sim device) offered as N device slots cuda:I/0..cuda:I/N-1, "
                     "one rank each, sharing its memory (1..64; 1: whole GPUs cuda:I)"},
};

static struct option long_opts[K_COUNT + 4];

static void init_opts(void)
{
    for (int i = 0; i < K_COUNT; i++)
        long_opts[i] = (struct option){keys[i].key, required_argument, NULL, OPT_BASE + i};
    long_opts[K_COUNT] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
    long_opts[K_COUNT + 1] = (struct option){"print-config", no_argument, NULL, OPT_PRINT_CONFIG};
    long_opts[K_COUNT + 2] = (struct option){"help", no_argument, NULL, OPT_HELP};
    long_opts[K_COUNT + 3] = (struct option){NULL, 0, NULL, 0};
}

static void usage(FILE *out)
{
    fprintf(out, "usage: parallaxd [options]   (each option is also a key of the config file)\n");
    for (int i = 0; i < K_COUNT; i++) {
        char opt[64];
        snprintf(opt, sizeof(opt), "--%s V", keys[i].key);
        fprintf(out, "  %-26s %s", opt, keys[i].help);
        if (keys[i].def && *keys[i].def)
            fprintf(out, " (default %s)", keys[i].def);
        if (keys[i].env)
            fprintf(out, " [env %s]", keys[i].env);
        fputc('\n', out);
    }
    fprintf(out, "  %-26s inih file (default " PXD_DEFAULT_CONFIG " if present)\n",
            "--config FILE");
    fprintf(out, "  %-26s print the effective configuration with sources, exit\n",
            "--print-config");
}

static int set_str(char **dst, const char *v)
{
    char *s = strdup(v);
    if (!s)
        return -1;
    free(*dst);
    *dst = s;
    return 0;
}

/* a non-negative integer below `max` spelled by all of s in decimal digits
 * (no sign, no blanks: strtol alone would take "+1" and " 1" and so accept
 * cuda:+1 while refusing cuda:-1); -1 otherwise */
static long parse_index(const char *s, long max)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    long n = strtol(s, &end, 10);
    return errno || end == s || *end || n < 0 || n >= max ? -1 : n;
}

/* A comma-separated list of: cpu:N (N virtual CPU devices, 1..4096), cuda
 * (every GPU of the node), cuda:I (GPU I; further bare indices continue
 * the list: cuda:0,1), sim:N (N simulated devices, 1..64, offered only
 * where PX_SIM_DEVICE=1: nodes.c checks). Written to cfg only when all of
 * it parses. */
static px_status_t set_devices(px_daemon_config_t *cfg, const char *v)
{
    char buf[512], *save = NULL;
    int ncpu = 0, cuda_all = 0, n_cuda = 0, ids[64], in_cuda = 0, nsim = 0;

    if (strlen(v) >= sizeof(buf)) {
        px_error("devices: value too long");
        return PX_ERR_INVALID_ARGUMENT;
    }
    snprintf(buf, sizeof(buf), "%s", v);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        long k;
        if (!strncmp(t, "cpu:", 4)) {
            k = parse_index(t + 4, 4097);
            if (k < 1 || ncpu) {
                px_error("devices %s: '%s': cpu:N once, N an integer in 1..4096", v, t);
                return PX_ERR_INVALID_ARGUMENT;
            }
            ncpu = (int)k;
            in_cuda = 0;
            continue;
        }
        if (!strncmp(t, "sim:", 4)) { /* simulated devices for tests */
            k = parse_index(t + 4, 65);
            if (k < 1 || nsim) {
                px_error("devices %s: '%s': sim:N once, N an integer in 1..64", v, t);
                return PX_ERR_INVALID_ARGUMENT;
            }
            nsim = (int)k;
            in_cuda = 0;
            continue;
        }
        if (!strcmp(t, "cuda")) {
            cuda_all = 1;
            in_cuda = 0;
            continue;
        }
        const char *idx = !strncmp(t, "cuda:", 5) ? t + 5 : in_cuda ? t : NULL;
        k = idx ? parse_index(idx, 64) : -1;
        for (int i = 0; k >= 0 && i < n_cuda; i++)
            if (ids[i] == k)
                k = -2;
        if (k < 0) {
            px_error("devices %s: '%s': %s", v, t,
                     k == -2 ? "GPU given twice"
                             : "expected cpu:N, sim:N, cuda or cuda:I[,J...] (I a GPU index 0..63)");
            return PX_ERR_INVALID_ARGUMENT;
        }
        ids[n_cuda++] = (int)k;
        in_cuda = 1;
    }
    if (cuda_all && n_cuda) {
        px_error("devices %s: cuda (every GPU) and cuda:I together", v);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!ncpu && !cuda_all && !n_cuda && !nsim) {
        px_error("devices '%s': no device (cpu:N, sim:N, cuda or cuda:I[,J...])", v);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (set_str(&cfg->devices, v))
        return PX_ERR_NO_MEMORY;
    cfg->n_devices = ncpu;
    cfg->n_sim = nsim;
    cfg->cuda_all = cuda_all;
    cfg->n_cuda = n_cuda;
    memcpy(cfg->cuda_ids, ids, sizeof(int) * (size_t)n_cuda);
    return PX_OK;
}

static px_status_t set_peers(px_daemon_config_t *cfg, const char *v)
{
    char *copy = strdup(v), *save = NULL, *tok;

    if (!copy)
        return PX_ERR_NO_MEMORY;
    for (int i = 0; i < cfg->n_peers; i++)
        free(cfg->peers[i]);
    free(cfg->peers);
    cfg->peers = NULL;
    cfg->n_peers = 0;
    for (tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        char **p;
        if (!strchr(tok, ':') || strlen(tok) > 255) {
            px_error("peers: '%s' is not host:port", tok);
            free(copy);
            return PX_ERR_INVALID_ARGUMENT;
        }
        p = realloc(cfg->peers, sizeof(*p) * (size_t)(cfg->n_peers + 1));
        if (!p) {
            free(copy);
            return PX_ERR_NO_MEMORY;
        }
        cfg->peers = p;
        cfg->peers[cfg->n_peers] = strdup(tok);
        if (!cfg->peers[cfg->n_peers]) {
            free(copy);
            return PX_ERR_NO_MEMORY;
        }
        cfg->n_peers++;
    }
    free(copy);
    return PX_OK;
}

static px_status_t set_ms(long *dst, const char *key, const char *v, long lo, long hi)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi) {
        px_error("%s %s: must be an integer in %ld..%ld (ms)", key, v, lo, hi);
        return PX_ERR_INVALID_ARGUMENT;
    }
    *dst = n;
    return PX_OK;
}

/* Empty means "unset" for the optional paths. */
static px_status_t set_opt_str(char **dst, const char *v)
{
    if (!*v) {
        free(*dst);
        *dst = NULL;
        return PX_OK;
    }
    return set_str(dst, v) ? PX_ERR_NO_MEMORY : PX_OK;
}

static px_status_t apply(px_daemon_config_t *cfg, int k, const char *v)
{
    switch (k) {
    case K_LISTEN:
    case K_PEER_LISTEN:
        if (!*v || strlen(v) > 255) {
            px_error("%s '%s': expected host:port", keys[k].key, v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        return set_str(k == K_LISTEN ? &cfg->listen : &cfg->peer_listen, v) ? PX_ERR_NO_MEMORY
                                                                             : PX_OK;
    case K_STATE_DIR:
    case K_RUNTIME_DIR:
        if (!*v || strlen(v) > 900) {
            px_error("%s '%s': expected a directory path (at most 900 bytes)", keys[k].key, v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        return set_str(k == K_STATE_DIR ? &cfg->state_dir : &cfg->runtime_dir, v)
                   ? PX_ERR_NO_MEMORY
                   : PX_OK;
    case K_DEVICES: return set_devices(cfg, v);
    case K_PEERS: return set_peers(cfg, v);
    case K_NAME:
        if (!*v || strlen(v) > 63 || strchr(v, '/') || strchr(v, ' ')) {
            px_error("name '%s': must be 1..63 characters without '/' or ' '", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        return set_str(&cfg->name, v) ? PX_ERR_NO_MEMORY : PX_OK;
    case K_HEARTBEAT: return set_ms(&cfg->heartbeat_ms, keys[k].key, v, 10, 600000);
    case K_PEER_DEAD: return set_ms(&cfg->peer_dead_ms, keys[k].key, v, 100, 86400000);
    case K_COLL_TIMEOUT: return set_ms(&cfg->coll_timeout_ms, keys[k].key, v, 100, 86400000);
    case K_KILL_GRACE: return set_ms(&cfg->kill_grace_ms, keys[k].key, v, 0, 600000);
    case K_AUTH_LOCKOUT: return set_ms(&cfg->auth_lockout_ms, keys[k].key, v, 1, 86400000);
    case K_AUTH_MAX_WRONG: {
        char *end;
        long n;
        errno = 0;
        n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < 0 || n > 1000000) {
            px_error("auth-max-wrong '%s': expected an integer in 0..1000000", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        cfg->auth_max_wrong = (int)n;
        return PX_OK;
    }
    case K_LOG_LEVEL:
        if (strcasecmp(v, "error") && strcasecmp(v, "warn") && strcasecmp(v, "info") &&
            strcasecmp(v, "debug")) {
            px_error("log-level '%s': expected error, warn, info or debug", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        return set_str(&cfg->log_level, v) ? PX_ERR_NO_MEMORY : PX_OK;
    case K_TOKEN_FILE: return set_opt_str(&cfg->token_file, v);
    case K_TLS_CERT: return set_opt_str(&cfg->tls_cert_file, v);
    case K_TLS_KEY: return set_opt_str(&cfg->tls_key_file, v);
    case K_TLS_CA: return set_opt_str(&cfg->tls_ca_file, v);
    case K_METRICS_LISTEN: return set_opt_str(&cfg->metrics_listen, v); /* checked by metrics.c */
    case K_TENSORBOARD_DIR:
        if (strlen(v) > 900 || (*v && strcmp(v, "off") && v[0] != '/')) {
            px_error("tensorboard-dir '%s': expected an absolute directory path (at most 900 "
                     "bytes), off, or empty (state-dir/tensorboard)", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        return set_opt_str(&cfg->tensorboard_dir, v);
    case K_MAX_MSG: {
        char *end;
        long long n;
        errno = 0;
        n = strtoll(v, &end, 10);
        if (errno || end == v || *end || n < 1024 || n > 2147483647LL) {
            px_error("max-message-bytes '%s': expected an integer in 1024..2147483647", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        cfg->max_message_bytes = (int)n;
        return PX_OK;
    }
    case K_GPU_SHARE: {
        long n = parse_index(v, 65);
        if (n < 1) {
            px_error("gpu-share '%s': expected an integer in 1..64 (ranks a GPU is shared by)", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        cfg->gpu_share = (int)n;
        return PX_OK;
    }
    case K_CONTROL_GROUP: return set_opt_str(&cfg->control_group, v);
    case K_CONTROL_REMOTE:
        if (!strcasecmp(v, "yes") || !strcasecmp(v, "true") || !strcmp(v, "1") ||
            !strcasecmp(v, "on"))
            cfg->control_remote = 1;
        else if (!strcasecmp(v, "no") || !strcasecmp(v, "false") || !strcmp(v, "0") ||
                 !strcasecmp(v, "off"))
            cfg->control_remote = 0;
        else {
            px_error("control-remote '%s': expected yes or no", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        return PX_OK;
    }
    return PX_ERR_INVALID_ARGUMENT;
}

px_status_t px_daemon_config_defaults(px_daemon_config_t *cfg)
{
    char host[256];
    px_status_t status;

    memset(cfg, 0, sizeof(*cfg));
    for (int k = 0; k < K_COUNT; k++) {
        const char *v = keys[k].def;
        const char *env = keys[k].env ? getenv(keys[k].env) : NULL;
        snprintf(cfg->source[k], sizeof(cfg->source[k]), "default");
        if (k == K_NAME) {
            if (gethostname(host, sizeof(host)) != 0)
                snprintf(host, sizeof(host), "localhost");
            host[63] = '\0';
            for (char *p = host; *p; p++)
                if (*p == '/' || *p == ' ')
                    *p = '-';
            v = host;
        }
        if (env && *env) {
            if (apply(cfg, k, env) == PX_OK) {
                snprintf(cfg->source[k], sizeof(cfg->source[k]), "env %s", keys[k].env);
                continue;
            }
            px_warn("ignoring %s=%s", keys[k].env, env);
        }
        status = apply(cfg, k, v);
        if (status != PX_OK) {
            px_daemon_config_free(cfg);
            return status;
        }
    }
    return PX_OK;
}

/* ------------------------------------------------------------- the file */

typedef struct {
    px_daemon_config_t *cfg;
    const char *origin;
    const char *text;
    size_t len, pos;
    int line;                 /* of the line inih is handling */
    px_status_t status;
} ini_ctx_t;

/* ini_reader over a memory buffer: one line (with its '\n') per call. */
static char *read_line(char *str, int num, void *stream)
{
    ini_ctx_t *ctx = stream;
    size_t n = 0;

    if (ctx->pos >= ctx->len || num < 2)
        return NULL;
    while (ctx->pos < ctx->len && n < (size_t)num - 1) {
        char c = ctx->text[ctx->pos++];
        str[n++] = c == '\0' ? ' ' : c;
        if (c == '\n')
            break;
    }
    str[n] = '\0';
    ctx->line++;
    return str;
}

static int on_ini_key(void *user, const char *section, const char *key, const char *value)
{
    ini_ctx_t *ctx = user;
    px_status_t s;

    if (ctx->status != PX_OK)
        return 0;
    for (int k = 0; k < K_COUNT; k++) {
        if (strcmp(keys[k].key, key))
            continue;
        s = apply(ctx->cfg, k, value ? value : "");
        if (s != PX_OK) {
            px_error("%s:%d: bad value for key '%s'", ctx->origin, ctx->line, key);
            ctx->status = s;
            return 0;
        }
        snprintf(ctx->cfg->source[k], sizeof(ctx->cfg->source[k]), "%s:%d", ctx->origin,
                 ctx->line);
        return 1;
    }
    px_error("%s:%d: unknown key '%s'%s%s%s", ctx->origin, ctx->line, key,
             section && *section ? " in section [" : "", section ? section : "",
             section && *section ? "]" : "");
    ctx->status = PX_ERR_INVALID_ARGUMENT;
    return 0;
}

px_status_t px_daemon_config_apply_ini(px_daemon_config_t *cfg, const char *origin,
                                       const char *text, size_t len)
{
    ini_ctx_t ctx = {cfg, origin, text, len, 0, 0, PX_OK};
    int ret = ini_parse_stream(read_line, &ctx, on_ini_key, &ctx);

    if (ctx.status != PX_OK)
        return ctx.status;
    if (ret != 0) {
        px_error("%s:%d: syntax error (expected key = value or [section])", origin, ret);
        return PX_ERR_INVALID_ARGUMENT;
    }
    return PX_OK;
}

static px_status_t apply_file(px_daemon_config_t *cfg, const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    px_status_t status;

    if (!f) {
        px_error("config file %s: cannot open: %s", path, strerror(errno));
        return PX_ERR_INVALID_ARGUMENT;
    }
    do {
        if (len + 4096 > cap) {
            char *t;
            cap = cap ? cap * 2 : 8192;
            if (cap > (16u << 20) || !(t = realloc(text, cap))) {
                px_error("config file %s: too large", path);
                free(text);
                fclose(f);
                return PX_ERR_INVALID_ARGUMENT;
            }
            text = t;
        }
        got = fread(text + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    status = px_daemon_config_apply_ini(cfg, path, text ? text : "", len);
    free(text);
    return status;
}

/* ------------------------------------------------------------- argv */

px_status_t px_daemon_config_parse(int argc, char **argv, px_daemon_config_t *cfg)
{
    px_daemon_config_t c;
    const char *config_file = NULL;
    int explicit_config = 0, opt, print = 0;
    px_status_t status;

    init_opts();
    /* pass 1: --config and --help */
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        if (opt == OPT_CONFIG) {
            config_file = optarg;
            explicit_config = 1;
        } else if (opt == OPT_HELP) {
            usage(stdout);
            return PX_ERR_ABORTED;
        } else if (opt == '?') {
            px_error("unknown or incomplete option '%s'", argv[optind - 1]);
            usage(stderr);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    if (optind < argc) {
        px_error("unexpected argument '%s'", argv[optind]);
        return PX_ERR_INVALID_ARGUMENT;
    }

    PX_CHECK(px_daemon_config_defaults(&c));
    if (!config_file && access(PXD_DEFAULT_CONFIG, R_OK) == 0)
        config_file = PXD_DEFAULT_CONFIG;
    if (config_file) {
        if (set_str(&c.config_file, config_file)) {
            status = PX_ERR_NO_MEMORY;
            goto err;
        }
        if (explicit_config || access(config_file, F_OK) == 0)
            PX_CHECK_GOTO(apply_file(&c, config_file), status, err);
    }

    /* pass 2: everything else; the command line wins */
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        int k = opt - OPT_BASE;
        if (opt == OPT_CONFIG || opt == OPT_HELP)
            continue;
        if (opt == OPT_PRINT_CONFIG) {
            print = 1;
            continue;
        }
        if (k < 0 || k >= K_COUNT) {
            status = PX_ERR_INVALID_ARGUMENT;
            goto err;
        }
        status = apply(&c, k, optarg);
        if (status != PX_OK) {
            px_error("option --%s: bad value", keys[k].key);
            goto err;
        }
        snprintf(c.source[k], sizeof(c.source[k]), "command line");
    }
    c.print_config = print;
    *cfg = c;
    return PX_OK;

err:
    px_daemon_config_free(&c);
    return status;
}

void px_daemon_config_export(const px_daemon_config_t *cfg)
{
    char buf[32];
    const long *ms[K_COUNT] = {[K_HEARTBEAT] = &cfg->heartbeat_ms,
                               [K_PEER_DEAD] = &cfg->peer_dead_ms,
                               [K_COLL_TIMEOUT] = &cfg->coll_timeout_ms,
                               [K_KILL_GRACE] = &cfg->kill_grace_ms};

    for (int k = 0; k < K_COUNT; k++) {
        if (!ms[k])
            continue;
        snprintf(buf, sizeof(buf), "%ld", *ms[k]);
        setenv(keys[k].env, buf, 1);
    }
    setenv(keys[K_LOG_LEVEL].env, cfg->log_level, 1);
}

static void print_kv(FILE *out, const px_daemon_config_t *cfg, int k, const char *v)
{
    fprintf(out, "%-22s = %-30s # %s\n", keys[k].key, v, cfg->source[k]);
}

void px_daemon_config_print(const px_daemon_config_t *cfg, FILE *out)
{
    char buf[64], *peers;
    size_t plen = 1;

    fprintf(out, "%-22s = %s\n", "config-file", cfg->config_file ? cfg->config_file : "(none)");
    print_kv(out, cfg, K_NAME, cfg->name);
    print_kv(out, cfg, K_LISTEN, cfg->listen);
    print_kv(out, cfg, K_PEER_LISTEN, cfg->peer_listen);
    print_kv(out, cfg, K_STATE_DIR, cfg->state_dir);
    print_kv(out, cfg, K_RUNTIME_DIR, cfg->runtime_dir);
    print_kv(out, cfg, K_DEVICES, cfg->devices);
    snprintf(buf, sizeof(buf), "%d", cfg->gpu_share);
    print_kv(out, cfg, K_GPU_SHARE, buf);
    for (int i = 0; i < cfg->n_peers; i++)
        plen += strlen(cfg->peers[i]) + 1;
    peers = calloc(1, plen);
    for (int i = 0; peers && i < cfg->n_peers; i++) {
        if (i)
            strcat(peers, ",");
        strcat(peers, cfg->peers[i]);
    }
    print_kv(out, cfg, K_PEERS, peers ? peers : "?");
    free(peers);
    snprintf(buf, sizeof(buf), "%ld", cfg->heartbeat_ms);
    print_kv(out, cfg, K_HEARTBEAT, buf);
    snprintf(buf, sizeof(buf), "%ld", cfg->peer_dead_ms);
    print_kv(out, cfg, K_PEER_DEAD, buf);
    snprintf(buf, sizeof(buf), "%ld", cfg->coll_timeout_ms);
    print_kv(out, cfg, K_COLL_TIMEOUT, buf);
    snprintf(buf, sizeof(buf), "%ld", cfg->kill_grace_ms);
    print_kv(out, cfg, K_KILL_GRACE, buf);
    print_kv(out, cfg, K_LOG_LEVEL, cfg->log_level);
    print_kv(out, cfg, K_TOKEN_FILE, cfg->token_file ? cfg->token_file : "");
    print_kv(out, cfg, K_CONTROL_GROUP, cfg->control_group ? cfg->control_group : "");
    print_kv(out, cfg, K_CONTROL_REMOTE, cfg->control_remote ? "yes" : "no");
    snprintf(buf, sizeof(buf), "%d", cfg->max_message_bytes);
    print_kv(out, cfg, K_MAX_MSG, buf);
    print_kv(out, cfg, K_TLS_CERT, cfg->tls_cert_file ? cfg->tls_cert_file : "");
    print_kv(out, cfg, K_TLS_KEY, cfg->tls_key_file ? cfg->tls_key_file : "");
    print_kv(out, cfg, K_TLS_CA, cfg->tls_ca_file ? cfg->tls_ca_file : "");
    print_kv(out, cfg, K_METRICS_LISTEN, cfg->metrics_listen ? cfg->metrics_listen : "");
    snprintf(buf, sizeof(buf), "%d", cfg->auth_max_wrong);
    print_kv(out, cfg, K_AUTH_MAX_WRONG, buf);
    snprintf(buf, sizeof(buf), "%ld", cfg->auth_lockout_ms);
    print_kv(out, cfg, K_AUTH_LOCKOUT, buf);
    char tb[1100];
    print_kv(out, cfg, K_TENSORBOARD_DIR,
             px_daemon_config_tensorboard_dir(cfg, NULL, tb, sizeof(tb)) ? "off" : tb);
}

int px_daemon_config_tensorboard_dir(const px_daemon_config_t *cfg, const char *state, char *buf,
                                     size_t len)
{
    const char *v = cfg->tensorboard_dir;
    if (v && !strcmp(v, "off")) {
        if (len)
            buf[0] = '\0';
        return -1;
    }
    if (v && *v)
        snprintf(buf, len, "%s", v);
    else
        snprintf(buf, len, "%s/tensorboard", state ? state : cfg->state_dir);
    return 0;
}

void px_daemon_config_free(px_daemon_config_t *cfg)
{
    free(cfg->listen);
    free(cfg->peer_listen);
    free(cfg->state_dir);
    free(cfg->runtime_dir);
    free(cfg->devices);
    for (int i = 0; i < cfg->n_peers; i++)
        free(cfg->peers[i]);
    free(cfg->peers);
    free(cfg->name);
    free(cfg->log_level);
    free(cfg->token_file);
    free(cfg->control_group);
    free(cfg->tls_cert_file);
    free(cfg->tls_key_file);
    free(cfg->tls_ca_file);
    free(cfg->metrics_listen);
    free(cfg->tensorboard_dir);
    free(cfg->config_file);
    memset(cfg, 0, sizeof(*cfg));
}
