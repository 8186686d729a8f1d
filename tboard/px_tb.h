/* px_tb.h: TensorBoard event files of scalars, as TensorFlow's summary
 * writer lays them out: a run is a directory holding
 * events.out.tfevents.<seconds>.<host>.<pid>.<n>, a file of TFRecords
 * (TensorFlow's record_writer.cc: length, masked CRC-32C of the length,
 * data, masked CRC-32C of the data) each holding an Event
 * (tensorboard.proto), the first one the file version.
 *
 * Written by `pctl metrics --tensorboard` after the fact and by rank 0
 * while it trains (--tensorboard): a run opened again (a restarted job)
 * gets a new file beside the old ones, and px_tb_last_step says which
 * steps those already hold so the writer does not repeat them. One
 * writer per handle, one thread at a time. */
#ifndef PX_TB_H
#define PX_TB_H

#include <stddef.h>
#include <stdint.h>

typedef struct px_tb px_tb_t;

/* Creates the run directory `rundir` (and its parents, mode 0755) and a new
 * event file in it, after reading the event files already there for the
 * largest step they hold a scalar of (px_tb_last_step; a file cut short by
 * a crash is read up to its last whole record). NULL with a message in err
 * (errlen bytes) naming the path when it cannot. */
px_tb_t *px_tb_open(const char *rundir, char *err, size_t errlen);

/* The largest step of a scalar in the run's files before px_tb_open
 * created its own; -1 when they held none. */
int64_t px_tb_last_step(const px_tb_t *tb);

/* Appends one scalar event: `tag` at `step`, wall_time in seconds since
 * the epoch. 0, or -1 (errno set) when the write failed. Buffered until
 * px_tb_flush or px_tb_close. */
int px_tb_scalar(px_tb_t *tb, const char *tag, int64_t step, double wall_time, float value);

/* Hands the buffered events to the kernel, so a reader (tensorboard
 * --logdir) sees them. 0, or -1 (errno set). */
int px_tb_flush(px_tb_t *tb);

/* Closes the file (NULL: no-op). 0, or -1 when flushing it failed. */
int px_tb_close(px_tb_t *tb);

/* The event file's path (valid until px_tb_close). */
const char *px_tb_path(const px_tb_t *tb);

/* mkdir -p `dir` (mode 0755). 0, or -1 with errno (ENOTDIR: a path part
 * is a file) when it is not a directory afterwards. */
int px_tb_mkdirs(const char *dir);

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes, as
 * TFRecord frames use it before masking. */
uint32_t px_crc32c(const void *data, size_t n);

#endif
