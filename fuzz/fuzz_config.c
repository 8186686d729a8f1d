/* fuzz_config.c: libFuzzer target for parallaxd's config file parser
 * (px_daemon_config_apply_ini in daemon/config.c: inih, then every key's
 * value checks). The input is the file's text; the parser must accept it or
 * reject it with PX_ERR_INVALID_ARGUMENT, never crash or leak, and an
 * accepted configuration must still hold valid values (at least one device
 * of some kind: cpu:N, sim:N, cuda or cuda:I with I in 0..63 and no GPU
 * twice; heartbeat >= 10 ms, a name). Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "px_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    px_daemon_config_t cfg;
    px_status_t status;
    static int quiet;

    if (!quiet) {
        setenv("PX_LOG_LEVEL", "error", 0);
        quiet = 1;
    }
    if (px_daemon_config_defaults(&cfg) != PX_OK)
        abort();
    status = px_daemon_config_apply_ini(&cfg, "fuzz.conf", (const char *)data, size);
    if (status != PX_OK && status != PX_ERR_INVALID_ARGUMENT && status != PX_ERR_NO_MEMORY)
        abort();
    if (status == PX_OK) {
        /* a GPU-only node (devices = cuda, cuda:1) has no cpu devices */
        if (cfg.n_devices < 0 || cfg.n_sim < 0 || cfg.n_cuda < 0 || cfg.n_cuda > 64 ||
            cfg.n_devices + cfg.n_sim + cfg.n_cuda + cfg.cuda_all < 1)
            abort();
        for (int i = 0; i < cfg.n_cuda; i++) {
            if (cfg.cuda_ids[i] < 0 || cfg.cuda_ids[i] > 63)
                abort();
            for (int j = 0; j < i; j++)
                if (cfg.cuda_ids[j] == cfg.cuda_ids[i])
                    abort();
        }
        if (cfg.heartbeat_ms < 10 || !cfg.name || !*cfg.name || !cfg.listen || !cfg.log_level)
            abort();
        for (int i = 0; i < cfg.n_peers; i++)
            if (!strchr(cfg.peers[i], ':'))
                abort();
    }
    px_daemon_config_free(&cfg);
    return 0;
}
