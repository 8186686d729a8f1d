/* px_world.c: a rank's world bring-up and teardown (px_world.h).
 *
 * Invariant: a px_world_t holds either nothing (a world of one without a
 * transport) or a transport and a world communicator, plus the standalone
 * bootstrap when it built the table. The address table lives only during
 * px_world_open (the communicator copies it). The rank's one thread. */
#include "px_world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_bootstrap.h"
#include "px_coll.h"
#include "px_env.h"
#include "px_launcher.h"
#include "px_log.h"

struct px_world {
    int rank, size;
    px_transport_t *transport;
    px_bootstrap_t *bootstrap; /* standalone bootstrap only */
    px_comm_t *comm;
};

px_status_t px_world_env(int *rank_p, int *size_p)
{
    /* srun / mpirun ranks: their launcher's variables (px_launcher.h) */
    PX_CHECK(px_launcher_import(NULL));
    const char *ws = getenv("PX_WORLD_SIZE");

    if (ws && atoi(ws) > 1)
        return px_bootstrap_from_env(rank_p, size_p);
    *rank_p = 0;
    *size_p = 1;
    return PX_OK;
}

/* The table by rendezvous or bootstrap, then the world communicator. */
static px_status_t connect_world(px_world_t *w, const px_world_opts_t *o)
{
    px_addr_table_t table = {0};
    const void *addr;
    size_t len;
    px_status_t status;

    PX_CHECK(px_transport_address(w->transport, &addr, &len));
    if (o->rendezvous) {
        PX_CHECK_GOTO(o->rendezvous(o->rendezvous_arg, addr, len, &table), status, out_table);
        PX_CHECK_GOTO(px_comm_create_world(w->transport, &table, w->rank, -1, &w->comm), status,
                      out_table);
    } else if (w->size > 1) {
        PX_CHECK_GOTO(px_bootstrap_create(w->rank, w->size, addr, len, &w->bootstrap, &table),
                      status, out_table);
        PX_CHECK_GOTO(px_comm_create_world(w->transport, &table, w->rank,
                                           px_bootstrap_watch_fd(w->bootstrap), &w->comm),
                      status, out_table);
    } else {
        PX_CHECK_GOTO(px_comm_create_self(w->transport, NULL, &w->comm), status, out_table);
    }
    status = PX_OK;
out_table:
    px_addr_table_free(&table);
    return status;
}

/* The line of `text` that starts at `p`, without its newline, into out. */
static void line_at(const char *p, char *out, size_t len)
{
    size_t n = strcspn(p, "\n");
    snprintf(out, len, "%.*s", (int)n, p);
}

/* The first line where texts a and b differ, compared key by key (the part
 * before '='): *la / *lb get the two lines ("" for one missing). Returns 0
 * when they are equal. */
static int first_difference(const char *a, const char *b, char *la, char *lb, size_t len)
{
    while (*a || *b) {
        size_t na = strcspn(a, "\n"), nb = strcspn(b, "\n");
        if (na != nb || memcmp(a, b, na)) {
            line_at(a, la, len);
            line_at(b, lb, len);
            return 1;
        }
        a += na + (a[na] == '\n');
        b += nb + (b[nb] == '\n');
    }
    return 0;
}

/* Every rank's `agree` text (an all-gather of fixed slots); every rank
 * finds the same first difference, so every rank fails with the same
 * message. */
static px_status_t check_agree(px_world_t *w, const char *agree)
{
    size_t len = strlen(agree);
    char *all, la[256], lb[256];
    int bad = -1, ndiff = 0;
    px_coll_opts_t co = {.timeout_ms = (int)px_env_int("PX_CONNECT_TIMEOUT_MS")};
    px_status_t status;

    if (len >= PX_WORLD_AGREE_MAX) {
        px_error("world: the job config text has %zu bytes, more than %d", len,
                 PX_WORLD_AGREE_MAX - 1);
        return PX_ERR_INVALID_ARGUMENT;
    }
    all = calloc((size_t)w->size + 1, PX_WORLD_AGREE_MAX);
    if (!all)
        return PX_ERR_NO_MEMORY;
    memcpy(all + (size_t)w->size * PX_WORLD_AGREE_MAX, agree, len); /* the send slot */
    status = px_allgather(w->comm, all + (size_t)w->size * PX_WORLD_AGREE_MAX, all,
                          PX_WORLD_AGREE_MAX, PX_UINT8, &co);
    if (status != PX_OK) {
        px_error("world: exchanging the job config failed: %s (%s)", px_status_str(status),
                 px_comm_last_error(w->comm));
        goto out;
    }
    for (int r = 1; r < w->size; r++) {
        char *t = all + (size_t)r * PX_WORLD_AGREE_MAX;
        t[PX_WORLD_AGREE_MAX - 1] = '\0';
        if (bad >= 0) {
            ndiff += strcmp(all, t) != 0;
        } else if (first_difference(all, t, la, lb, sizeof(la))) {
            ndiff++;
            bad = r;
        }
    }
    if (bad >= 0) {
        px_error("world: ranks were started with different job configs: rank 0 has %s, rank %d "
                 "has %s%s", la[0] ? la : "(nothing)", bad, lb[0] ? lb : "(nothing)",
                 ndiff > 1 ? " (more ranks differ from rank 0)" : "");
        status = PX_ERR_MISMATCH;
    }
out:
    free(all);
    return status;
}

px_status_t px_world_open(const px_world_opts_t *opts, px_world_t **world_p)
{
    px_world_t *w;
    px_status_t status;

    if (!opts || !world_p || opts->size < 1 || opts->rank < 0 || opts->rank >= opts->size) {
        px_error("world: bad arguments (rank %d, size %d)", opts ? opts->rank : -1,
                 opts ? opts->size : -1);
        return PX_ERR_INVALID_ARGUMENT;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return PX_ERR_NO_MEMORY;
    w->rank = opts->rank;
    w->size = opts->size;
    if (!opts->rendezvous && opts->size == 1 && !opts->self_when_alone)
        goto out_ok; /* alone, without a transport */
    PX_CHECK_GOTO(px_transport_create(&w->transport), status, err_destroy);
    PX_CHECK_GOTO(connect_world(w, opts), status, err_destroy);
    if (px_comm_size(w->comm) != w->size) {
        px_error("world: communicator has %d ranks, expected %d", px_comm_size(w->comm),
                 w->size);
        status = PX_ERR_MISMATCH;
        goto err_destroy;
    }
    if (opts->agree && w->size > 1 && px_env_int("PX_WORLD_CONFIG_CHECK"))
        PX_CHECK_GOTO(check_agree(w, opts->agree), status, err_destroy);
out_ok:
    *world_p = w;
    return PX_OK;

err_destroy:
    px_error("rank %d: world setup failed: %s", w->rank, px_status_str(status));
    px_world_close(w, 0);
    return status;
}

px_comm_t *px_world_comm(const px_world_t *world)
{
    return world ? world->comm : NULL;
}

int px_world_rank(const px_world_t *world)
{
    return world ? world->rank : 0;
}

int px_world_size(const px_world_t *world)
{
    return world ? world->size : 1;
}

px_status_t px_world_finish(px_world_t *world)
{
    px_status_t status;

    if (!world || !world->comm || px_comm_size(world->comm) < 2)
        return PX_OK;
    status = px_barrier(world->comm, -1);
    if (status != PX_OK)
        px_warn("final barrier: %s (%s)", px_status_str(status),
                px_comm_last_error(world->comm));
    return status;
}

void px_world_close(px_world_t *world, int success)
{
    if (!world)
        return;
    if (!success && world->comm && px_comm_size(world->comm) > 1) {
        /* abort the world: the peers fail now, naming us and our first
         * error, instead of waiting for us until their deadline (and we for
         * their goodbyes) */
        char reason[PX_LOG_FIRST_ERROR_MAX];
        px_log_first_error(reason, sizeof(reason));
        px_comm_abort_peers(world->comm, reason);
    }
    px_comm_destroy(world->comm);
    /* the worker goes first: rank 0 waits in px_bootstrap_destroy for every
     * goodbye, and a worker kept alive there without progress stalls the
     * other ranks' endpoint flush (px_bootstrap.h) */
    px_transport_destroy(world->transport);
    /* a clean bootstrap close only when this rank finished; otherwise the
     * process exit tells rank 0 (and so every peer) that this rank died */
    if (success)
        px_bootstrap_destroy(world->bootstrap);
    free(world);
}
