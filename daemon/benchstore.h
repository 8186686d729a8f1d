/* benchstore.h: collectives benchmark jobs in parallaxd (`pctl
 * bench`): recognising and validating a bench JobSpec, turning it into
 * parallax-rank's --bench-* flags, and keeping the rows rank 0 reports.
 *
 * A bench job is a JobSpec with kind "bench" and a BenchSpec; its world
 * size is spec.dp (placed like a training job, one device per rank); model,
 * data, batch and steps are unused. Rows are stored in the daemon's SQLite
 * database (table bench_rows, its own connection) on the job's coordinator
 * and returned with Job.bench_rows by GetJob. Loop thread only. */
#ifndef PX_BENCHSTORE_H
#define PX_BENCHSTORE_H

#include <stddef.h>

#include "parallax.pb-c.h"
#include "px_status.h"
#include "store.h"

/* 1 if `spec` is a bench job (kind "bench"). */
int px_bench_spec_is(const Parallax__V1__JobSpec *spec);

/* Checks a bench spec: op, dtype, redop names, sizes (1 <= min <= max <=
 * 4 GiB), step factor (0, 2, 4), iters, warmup, ranks (dp) against the
 * cluster's devices. PX_ERR_INVALID_ARGUMENT with a message naming the bad
 * field ("bench.max_bytes: ...") in errbuf. */
px_status_t px_bench_spec_validate(const Parallax__V1__JobSpec *spec, int cluster_devices,
                                   char *errbuf, size_t errlen);

/* Appends parallax-rank's --bench-* flags for `spec` to args[n..]; values
 * are formatted into bufs (nbufs entries of 32 bytes, borrowed by args).
 * Returns the new n. At most 17 args and 8 bufs are used. */
int px_bench_spec_args(const Parallax__V1__JobSpec *spec, char **args, int n, char (*bufs)[32],
                       int nbufs);

/* Stores rows reported for `job_id` (appended after the ones stored).
 * `store` is the daemon's store (its connection is used). Errors: PX_ERR_IO. */
px_status_t px_benchstore_add(px_store_t *store, const char *job_id,
                              Parallax__V1__BenchRow *const *rows, size_t n);

/* Sets msg->bench_rows / n_bench_rows to the rows stored for msg->id,
 * smallest first (release with px_benchstore_msg_free). No rows: left
 * empty. */
px_status_t px_benchstore_fill(px_store_t *store, Parallax__V1__Job *msg);
void px_benchstore_msg_free(Parallax__V1__Job *msg);

#endif
