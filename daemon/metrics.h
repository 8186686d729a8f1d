/* metrics.h: parallaxd's Prometheus endpoint.
 *
 * `parallaxd --metrics-listen ADDR` (config key metrics-listen; empty, the
 * default: off) serves GET /metrics in the Prometheus text exposition format
 * (version 0.0.4) over HTTP with libmicrohttpd. ADDR is host:port with
 * an IPv4 host, [host]:port with an IPv6 one (e.g. [::1]:9100, [::]:9100:
 * every IPv6 address), or a bare port or ":port": 127.0.0.1 (loopback
 * unless configured).
 *
 * The HTTP server runs inside the daemon's libuv loop (libmicrohttpd's
 * epoll mode, its epoll fd watched by a uv_poll, plus a timer for its
 * connection timeouts), so the page is built on the loop thread from the
 * live state without locks. Families (all prefixed parallax_):
 *   jobs{state}                         gauge   jobs this node coordinates
 *   job_step, job_steps, job_loss, job_val_loss, job_grad_norm,
 *   job_tokens_per_second, job_step_seconds, job_ranks{job,name}
 *                                       gauges  each running job
 *   job_restarts_total                  counter jobs this node started as
 *                                               restarts of failed ones
 *   device_busy{node,device,job}        gauge   1 held by `job`, 0 free
 *   rank_memory_bytes{job,rank,node,device,category,kind="current"|"peak"}
 *                                       gauge   running jobs' last reports
 *   rpc_requests_total{service,method,code}     counter
 *   rpc_duration_seconds{service,method,code}   histogram (server side)
 *   peer_up{peer}, peer_heartbeat_age_seconds{peer}  gauges
 *   build_info{node,version}            gauge 1
 * Loop thread only. */
#ifndef PXD_METRICS_H
#define PXD_METRICS_H

#include "daemon.h"

typedef struct px_metrics px_metrics_t;

/* Starts the endpoint when d->cfg.metrics_listen is set (else a no-op) and
 * hooks the RPC observer into both servers (created before this call).
 * PX_ERR_INVALID_ARGUMENT (logged) for a bad address, PX_ERR_IO when the
 * port cannot be bound or the daemon was built without libmicrohttpd. */
px_status_t px_metrics_start(px_daemon_t *d);

/* Stops the endpoint (after the loop stopped; before its handles are
 * closed). NULL-safe, idempotent. */
void px_metrics_stop(px_daemon_t *d);

/* The page (test hook and the handler's body): a malloc'd NUL-terminated
 * string in *text_p (caller frees), *len_p bytes. */
px_status_t px_metrics_render(px_daemon_t *d, char **text_p, size_t *len_p);

#endif
