/* px_transport.c: the UCX context and worker of a rank process, its worker
 * address, the address table helpers and dtype sizes.
 *
 * One transport per process; used by one thread at a time (UCX thread mode
 * single). The worker is created with the wakeup feature so that progress can
 * block on its event fd (px_progress.c). */
#include "px_transport_int.h"

#include <stdlib.h>
#include <string.h>

#include "px_env.h"
#include "px_log.h"

px_status_t px_addr_table_init(px_addr_table_t *table, int world_size)
{
    if (!table || world_size <= 0) {
        px_error("px_addr_table_init: bad world_size %d", world_size);
        return PX_ERR_INVALID_ARGUMENT;
    }
    memset(table, 0, sizeof(*table));
    table->addrs = calloc((size_t)world_size, sizeof(void *));
    table->addr_lens = calloc((size_t)world_size, sizeof(size_t));
    table->nodes = calloc((size_t)world_size, sizeof(char *));
    if (!table->addrs || !table->addr_lens || !table->nodes) {
        px_addr_table_free(table);
        return PX_ERR_NO_MEMORY;
    }
    table->world_size = world_size;
    return PX_OK;
}

void px_addr_table_free(px_addr_table_t *table)
{
    if (!table)
        return;
    for (int r = 0; r < table->world_size; r++) {
        if (table->addrs)
            free(table->addrs[r]);
        if (table->nodes)
            free(table->nodes[r]);
    }
    free(table->addrs);
    free(table->addr_lens);
    free(table->nodes);
    memset(table, 0, sizeof(*table));
}

/* Whether the UCX in use moves CUDA device memory itself (a UCX built with
 * CUDA: ucp_context_query's memory types include UCS_MEMORY_TYPE_CUDA, so
 * its cuda_copy / cuda_ipc / GPUDirect RDMA transports take device
 * pointers). Debian's UCX is built without CUDA and says no. */
static int ucx_cuda_memory(ucp_context_h context)
{
    ucp_context_attr_t attr;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context, &attr) != UCS_OK)
        return 0;
    return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

int px_transport_cuda_memory(const px_transport_t *transport)
{
    return transport && transport->cuda_memory && px_env_int("PX_UCX_CUDA") != 0;
}

px_status_t px_transport_create(px_transport_t **transport_p)
{
    px_status_t status = PX_ERR_INTERNAL;
    ucp_config_t *config = NULL;
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucs_status_t st;
    px_transport_t *tr = calloc(1, sizeof(*tr));

    if (!tr)
        return PX_ERR_NO_MEMORY;
    tr->efd = -1;

    st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        px_error("ucp_config_read: %s", ucs_status_string(st));
        status = PX_ERR_INTERNAL;
        goto err_free;
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    st = ucp_init(&params, config, &tr->context);
    ucp_config_release(config);
    if (st != UCS_OK) {
        px_error("ucp_init: %s", ucs_status_string(st));
        status = PX_ERR_INTERNAL;
        goto err_free;
    }

    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(tr->context, &wparams, &tr->worker);
    if (st != UCS_OK) {
        px_error("ucp_worker_create: %s", ucs_status_string(st));
        status = PX_ERR_INTERNAL;
        goto err_cleanup_ctx;
    }
    st = ucp_worker_get_efd(tr->worker, &tr->efd);
    if (st != UCS_OK) {
        px_error("ucp_worker_get_efd: %s", ucs_status_string(st));
        status = PX_ERR_INTERNAL;
        goto err_destroy_worker;
    }
    st = ucp_worker_get_address(tr->worker, &tr->address, &tr->address_len);
    if (st != UCS_OK) {
        px_error("ucp_worker_get_address: %s", ucs_status_string(st));
        status = PX_ERR_INTERNAL;
        goto err_destroy_worker;
    }
    tr->cuda_memory = ucx_cuda_memory(tr->context);
    *transport_p = tr;
    return PX_OK;

err_destroy_worker:
    ucp_worker_destroy(tr->worker);
err_cleanup_ctx:
    ucp_cleanup(tr->context);
err_free:
    free(tr);
    return status;
}

void px_transport_destroy(px_transport_t *transport)
{
    if (!transport)
        return;
    if (transport->n_comms)
        px_warn("px_transport_destroy: %d communicator(s) still alive", transport->n_comms);
    if (transport->address)
        ucp_worker_release_address(transport->worker, transport->address);
    ucp_worker_destroy(transport->worker);
    ucp_cleanup(transport->context);
    for (size_t i = 0; i < transport->n_leftover; i++)
        free(transport->leftover[i]);
    free(transport->leftover);
    free(transport);
}

px_status_t px_transport_address(px_transport_t *transport, const void **addr_p, size_t *len_p)
{
    if (!transport || !addr_p || !len_p)
        return PX_ERR_INVALID_ARGUMENT;
    *addr_p = transport->address;
    *len_p = transport->address_len;
    return PX_OK;
}
