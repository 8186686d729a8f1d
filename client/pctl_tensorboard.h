/* pctl_tensorboard.h: TensorBoard event files of scalars (`pctl metrics
 * --tensorboard DIR`), as TensorFlow's summary writer lays them out: one
 * directory per run holding events.out.tfevents.<seconds>.<host>, a file of
 * TFRecords (TensorFlow's record_writer.cc: length, masked CRC-32C of the
 * length, data, masked CRC-32C of the data) each holding an Event
 * (tensorboard.proto), the first one the file version. Main thread of
 * pctl. */
#ifndef PCTL_TENSORBOARD_H
#define PCTL_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

typedef struct pctl_tb pctl_tb_t;

/* Creates dir/run/ (and dir) and its event file. NULL with a message in
 * err (errlen bytes) naming the path when it cannot. */
pctl_tb_t *pctl_tb_open(const char *dir, const char *run, char *err, size_t errlen);

/* Appends one scalar event: `tag` at `step`, wall_time in seconds since
 * the epoch. 0, or -1 when the write failed. */
int pctl_tb_scalar(pctl_tb_t *tb, const char *tag, int64_t step, double wall_time, float value);

/* Closes the file (NULL: no-op). 0, or -1 when flushing it failed. */
int pctl_tb_close(pctl_tb_t *tb);

/* The event file's path (valid until pctl_tb_close). */
const char *pctl_tb_path(const pctl_tb_t *tb);

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes, as
 * TFRecord frames use it before masking. */
uint32_t pctl_crc32c(const void *data, size_t n);

#endif
