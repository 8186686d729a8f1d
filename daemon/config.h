/* config.h: parallaxd's effective configuration.
 *
 * Sources, lowest priority first: built-in defaults, the inih file
 * (--config FILE, else /etc/parallax/parallaxd.conf when it exists), the
 * command line. The file's keys are the long option names (listen,
 * peer-listen, state-dir, runtime-dir, devices, peers, name), in any section
 * or none. Main thread only. */
#ifndef PXD_CONFIG_H
#define PXD_CONFIG_H

#include <stdio.h>

#include "px_status.h"

#define PXD_DEFAULT_CONFIG "/etc/parallax/parallaxd.conf"

typedef struct px_daemon_config {
    char *listen;          /* Control host:port */
    char *peer_listen;     /* Peer host:port */
    char *state_dir;       /* holds parallax.db, the lock and jobs/<id>/rank-R.log */
    char *runtime_dir;     /* holds control.sock */
    char *devices;         /* "cpu:N" as given */
    int n_devices;         /* N */
    char **peers;          /* Peer addresses of the other daemons */
    int n_peers;
    char *name;            /* node name */
    char *config_file;     /* file read, or NULL */
    int print_config;      /* --print-config */
} px_daemon_config_t;

/* Parses argv (and the config file it names or the default one). On a bad
 * option or value logs a message naming it and returns
 * PX_ERR_INVALID_ARGUMENT. `cfg` is filled (free with px_daemon_config_free)
 * on PX_OK. --help prints usage and returns PX_ERR_ABORTED. */
px_status_t px_daemon_config_parse(int argc, char **argv, px_daemon_config_t *cfg);

/* Writes the effective configuration, one "key = value" a line. */
void px_daemon_config_print(const px_daemon_config_t *cfg, FILE *out);

void px_daemon_config_free(px_daemon_config_t *cfg);

#endif
