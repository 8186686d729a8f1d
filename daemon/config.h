/* config.h: parallaxd's effective configuration.
 *
 * Sources, lowest priority first: built-in defaults, the environment (only
 * for the keys that mirror a PX_* knob), the inih file (--config FILE, else
 * /etc/parallax/parallaxd.conf when it exists), the command line. Every key
 * of the file is also a long option of the same name (listen, peer-listen,
 * state-dir, runtime-dir, devices, peers, name, heartbeat-ms, peer-dead-ms,
 * collective-timeout-ms, kill-grace-ms, log-level, token-file,
 * control-group, control-remote, max-message-bytes, tls-cert-file,
 * tls-key-file, tls-ca-file, metrics-listen, auth-max-wrong,
 * auth-lockout-ms), in any section or none; an unknown key is
 * an error naming the key and its line. Each value remembers where it came
 * from, for --print-config. Main thread only. */
#ifndef PXD_CONFIG_H
#define PXD_CONFIG_H

#include <stdio.h>

#include "px_status.h"

#define PXD_DEFAULT_CONFIG "/etc/parallax/parallaxd.conf"
#define PXD_CFG_SOURCE_MAX 1100
#define PXD_CFG_KEYS 24

typedef struct px_daemon_config {
    char *listen;          /* Control host:port */
    char *peer_listen;     /* Peer host:port */
    char *state_dir;       /* holds parallax.db, the lock and jobs/<id>/rank-R.log */
    char *runtime_dir;     /* holds control.sock */
    char *devices;         /* as given: "cpu:N", "cuda", "cuda:0,1", "cuda:0,cpu:2", "cpu:2,sim:2" */
    int n_devices;         /* N of cpu:N (0 when the node offers GPUs only) */
    int cuda_all;          /* "cuda": every GPU NVML finds (nodes.c) */
    int n_cuda;            /* "cuda:I,J,...": these GPUs */
    int cuda_ids[64];
    int n_sim;             /* "sim:N": N simulated devices (tests; nodes.c) */
    int gpu_share;         /* each GPU (and sim device) offered as this many slots, 1..64 */
    char **peers;          /* Peer addresses of seed daemons (the rest is learned) */
    int n_peers;
    char *name;            /* node name */
    long heartbeat_ms;     /* PX_HEARTBEAT_MS */
    long peer_dead_ms;     /* PX_PEER_DEAD_MS: heartbeat timeout */
    long coll_timeout_ms;  /* PX_COMM_TIMEOUT_MS, passed to the ranks */
    long kill_grace_ms;    /* PX_KILL_GRACE_MS */
    char *log_level;       /* PX_LOG_LEVEL: error, warn, info, debug */
    char *token_file;      /* cluster token file, or NULL: no token */
    char *control_group;   /* group owning control.sock, or NULL */
    int control_remote;    /* 1: --listen may be a non-loopback address */
    int max_message_bytes; /* largest request the servers accept (bytes) */
    char *tls_cert_file;   /* PEM chain: TLS on Control and Peer, or NULL */
    char *tls_key_file;    /* its PEM key, or NULL */
    char *tls_ca_file;     /* CA verifying peers (NULL: tls_cert_file) */
    char *metrics_listen;  /* Prometheus HTTP host:port (metrics.h), or NULL: off */
    /* where a job without --tensorboard gets its TensorBoard run,
     * <this>/<job id>/ (tboard/px_tb.h): "" for state_dir/tensorboard
     * (px_daemon_config_tensorboard_dir), "off" for none */
    char *tensorboard_dir;
    int auth_max_wrong;    /* wrong tokens from one address before it is refused (auth.c) */
    long auth_lockout_ms;  /* ... for this long (ms); also the window they are counted in */
    char *config_file;     /* file read, or NULL */
    int print_config;      /* --print-config */
    /* where each key's value came from, indexed like the key table:
     * "default", "env PX_X", "FILE:LINE", "command line" */
    char source[PXD_CFG_KEYS][PXD_CFG_SOURCE_MAX];
} px_daemon_config_t;

/* Parses argv (and the config file it names or the default one). On a bad
 * option or value logs a message naming it (and the file and line for the
 * file's keys) and returns PX_ERR_INVALID_ARGUMENT. `cfg` is filled (free
 * with px_daemon_config_free) on PX_OK. --help prints usage and returns
 * PX_ERR_ABORTED. Does not touch the environment: see
 * px_daemon_config_export. */
px_status_t px_daemon_config_parse(int argc, char **argv, px_daemon_config_t *cfg);

/* Applies inih text `text` (`len` bytes, need not be NUL-terminated) named
 * `origin` in messages on top of `cfg`, which must hold defaults (from
 * px_daemon_config_defaults). PX_ERR_INVALID_ARGUMENT naming key and line on
 * an unknown key or a bad value or a syntax error. Used by the parser and by
 * the config fuzz target. */
px_status_t px_daemon_config_apply_ini(px_daemon_config_t *cfg, const char *origin,
                                       const char *text, size_t len);

/* Fills `cfg` with the built-in defaults and the PX_* environment. */
px_status_t px_daemon_config_defaults(px_daemon_config_t *cfg);

/* Sets the PX_* variables mirrored by config keys (heartbeat, peer timeout,
 * collective timeout, kill grace, log level) to their effective values, so
 * the daemon's knobs and the ranks it spawns see them. Call before the first
 * px_env_int() of those names. */
void px_daemon_config_export(const px_daemon_config_t *cfg);

/* Writes the effective configuration, one "key = value  # source" a line. */
void px_daemon_config_print(const px_daemon_config_t *cfg, FILE *out);

void px_daemon_config_free(px_daemon_config_t *cfg);

/* The directory jobs without --tensorboard write their TensorBoard runs
 * under (into buf, len bytes): tensorboard-dir, or <state>/tensorboard
 * when it is empty (state: the state directory as the daemon resolved it,
 * absolute, since the ranks run elsewhere; NULL: cfg->state_dir as
 * given). 0, or -1 when the key is "off" (buf ""). */
int px_daemon_config_tensorboard_dir(const px_daemon_config_t *cfg, const char *state, char *buf,
                                     size_t len);

#endif
