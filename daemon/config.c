/* config.c: parallaxd's command line and inih config file (see config.h).
 *
 * Runs once on the main thread before the event loop starts. The command
 * line wins over the file: options are parsed twice, first only to find
 * --config, then the file is applied, then every other option. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_log.h"

enum { OPT_LISTEN = 1000, OPT_PEER_LISTEN, OPT_STATE_DIR, OPT_RUNTIME_DIR, OPT_DEVICES,
       OPT_PEERS, OPT_NAME, OPT_CONFIG, OPT_PRINT_CONFIG, OPT_HELP };

static const struct option long_opts[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"peer-listen", required_argument, NULL, OPT_PEER_LISTEN},
    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
    {"runtime-dir", required_argument, NULL, OPT_RUNTIME_DIR},
    {"devices", required_argument, NULL, OPT_DEVICES},
    {"peers", required_argument, NULL, OPT_PEERS},
    {"name", required_argument, NULL, OPT_NAME},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"print-config", no_argument, NULL, OPT_PRINT_CONFIG},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: parallaxd [options]\n"
            "  --listen ADDR        Control service host:port (default 127.0.0.1:7070)\n"
            "  --peer-listen ADDR   Peer service host:port (default 127.0.0.1:7071)\n"
            "  --state-dir DIR      database, lock and rank logs (default /var/lib/parallax)\n"
            "  --runtime-dir DIR    control.sock (default /run/parallax)\n"
            "  --devices cpu:N      N virtual CPU devices (default cpu:1)\n"
            "  --peers A,B,...      Peer addresses of the other daemons\n"
            "  --name NODE          node name (default: hostname)\n"
            "  --config FILE        inih file (default " PXD_DEFAULT_CONFIG " if present)\n"
            "  --print-config       print the effective configuration and PX_* knobs, exit\n");
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

static px_status_t set_devices(px_daemon_config_t *cfg, const char *v)
{
    char *end;
    long n;

    if (strncmp(v, "cpu:", 4) != 0) {
        px_error("--devices %s: expected cpu:N (CUDA devices are not supported yet)", v);
        return PX_ERR_INVALID_ARGUMENT;
    }
    errno = 0;
    n = strtol(v + 4, &end, 10);
    if (errno || end == v + 4 || *end || n < 1 || n > 4096) {
        px_error("--devices %s: N must be an integer in 1..4096", v);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (set_str(&cfg->devices, v))
        return PX_ERR_NO_MEMORY;
    cfg->n_devices = (int)n;
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
        if (!strchr(tok, ':')) {
            px_error("--peers: '%s' is not host:port", tok);
            free(copy);
            return PX_ERR_INVALID_ARGUMENT;
        }
        p = realloc(cfg->peers, sizeof(*p) * (size_t)(cfg->n_peers + 1));
        if (!p) {
            free(copy);
            return PX_ERR_NO_MEMORY;
        }
        cfg->peers = p;
        cfg->peers[cfg->n_peers++] = strdup(tok);
    }
    free(copy);
    return PX_OK;
}

static px_status_t apply(px_daemon_config_t *cfg, int opt, const char *v)
{
    switch (opt) {
    case OPT_LISTEN: return set_str(&cfg->listen, v) ? PX_ERR_NO_MEMORY : PX_OK;
    case OPT_PEER_LISTEN: return set_str(&cfg->peer_listen, v) ? PX_ERR_NO_MEMORY : PX_OK;
    case OPT_STATE_DIR: return set_str(&cfg->state_dir, v) ? PX_ERR_NO_MEMORY : PX_OK;
    case OPT_RUNTIME_DIR: return set_str(&cfg->runtime_dir, v) ? PX_ERR_NO_MEMORY : PX_OK;
    case OPT_DEVICES: return set_devices(cfg, v);
    case OPT_PEERS: return set_peers(cfg, v);
    case OPT_NAME:
        if (!*v || strlen(v) > 63 || strchr(v, '/')) {
            px_error("--name '%s': must be 1..63 characters without '/'", v);
            return PX_ERR_INVALID_ARGUMENT;
        }
        return set_str(&cfg->name, v) ? PX_ERR_NO_MEMORY : PX_OK;
    }
    return PX_ERR_INVALID_ARGUMENT;
}

typedef struct {
    px_daemon_config_t *cfg;
    px_status_t status;
} ini_ctx_t;

static int on_ini_key(void *user, const char *section, const char *key, const char *value)
{
    ini_ctx_t *ctx = user;
    for (const struct option *o = long_opts; o->name; o++) {
        if (!strcmp(o->name, key) && o->has_arg == required_argument && o->val != OPT_CONFIG) {
            px_status_t s = apply(ctx->cfg, o->val, value);
            if (s != PX_OK && ctx->status == PX_OK)
                ctx->status = s;
            return s == PX_OK;
        }
    }
    px_error("%s: unknown key '%s' in section [%s]", ctx->cfg->config_file, key, section);
    ctx->status = PX_ERR_INVALID_ARGUMENT;
    return 0;
}

px_status_t px_daemon_config_parse(int argc, char **argv, px_daemon_config_t *cfg)
{
    px_daemon_config_t c = {0};
    const char *config_file = NULL;
    int explicit_config = 0, opt;
    char host[256];
    px_status_t status;

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

    if (set_str(&c.listen, "127.0.0.1:7070") || set_str(&c.peer_listen, "127.0.0.1:7071") ||
        set_str(&c.state_dir, "/var/lib/parallax") || set_str(&c.runtime_dir, "/run/parallax")) {
        status = PX_ERR_NO_MEMORY;
        goto err;
    }
    PX_CHECK_GOTO(set_devices(&c, "cpu:1"), status, err);
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    host[63] = '\0';
    if (set_str(&c.name, host)) {
        status = PX_ERR_NO_MEMORY;
        goto err;
    }

    if (!config_file && access(PXD_DEFAULT_CONFIG, R_OK) == 0)
        config_file = PXD_DEFAULT_CONFIG;
    if (config_file) {
        ini_ctx_t ctx = {&c, PX_OK};
        int ret;
        set_str(&c.config_file, config_file);
        ret = ini_parse(config_file, on_ini_key, &ctx);
        if (ret < 0 && (explicit_config || access(config_file, F_OK) == 0)) {
            px_error("config file %s: cannot open: %s", config_file, strerror(errno));
            status = PX_ERR_INVALID_ARGUMENT;
            goto err;
        }
        if (ret > 0 || ctx.status != PX_OK) {
            px_error("config file %s: error at line %d", config_file, ret);
            status = ctx.status != PX_OK ? ctx.status : PX_ERR_INVALID_ARGUMENT;
            goto err;
        }
    }

    /* pass 2: everything else; the command line wins */
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", long_opts, NULL)) != -1) {
        if (opt == OPT_CONFIG || opt == OPT_HELP)
            continue;
        if (opt == OPT_PRINT_CONFIG) {
            c.print_config = 1;
            continue;
        }
        PX_CHECK_GOTO(apply(&c, opt, optarg), status, err);
    }
    *cfg = c;
    return PX_OK;

err:
    px_daemon_config_free(&c);
    return status;
}

void px_daemon_config_print(const px_daemon_config_t *cfg, FILE *out)
{
    fprintf(out, "config-file = %s\n", cfg->config_file ? cfg->config_file : "(none)");
    fprintf(out, "name = %s\n", cfg->name);
    fprintf(out, "listen = %s\n", cfg->listen);
    fprintf(out, "peer-listen = %s\n", cfg->peer_listen);
    fprintf(out, "state-dir = %s\n", cfg->state_dir);
    fprintf(out, "runtime-dir = %s\n", cfg->runtime_dir);
    fprintf(out, "devices = %s\n", cfg->devices);
    fprintf(out, "peers = ");
    for (int i = 0; i < cfg->n_peers; i++)
        fprintf(out, "%s%s", i ? "," : "", cfg->peers[i]);
    fprintf(out, "\n");
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
    free(cfg->config_file);
    memset(cfg, 0, sizeof(*cfg));
}
