/* pctl_memfmt.c: `pctl mem`'s device-memory figures, apart from
 * the command so that a unit test can check them without a daemon.
 *
 * A rank on a GPU reports cudaMemGetInfo's used (total - free: every
 * context on the device counts, as nvidia-smi shows it) and total with its
 * memory categories (RankMemory.device_used_bytes / device_total_bytes); a
 * CPU rank reports 0 / 0, which reads as "no device" ("-", JSON null), as
 * does the report of a rank from before the fields existed. */
#include <stdio.h>

#include "pctl.h"

const char *pctl_mem_device_cell(const Parallax__V1__RankMemory *m, char *buf, size_t len)
{
    if (!m || !m->device_total_bytes)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.2f/%.2f", (double)m->device_used_bytes / 1e9,
                 (double)m->device_total_bytes / 1e9);
    return buf;
}

json_t *pctl_mem_device_json(const Parallax__V1__RankMemory *m)
{
    if (!m || !m->device_total_bytes)
        return json_null();
    return json_pack("{s:I, s:I}", "used", (json_int_t)m->device_used_bytes, "total",
                     (json_int_t)m->device_total_bytes);
}
