/* pctl_tensorboard.c: TensorBoard scalar event files (pctl_tensorboard.h). */
#include "pctl_tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "tensorboard.pb-c.h"

struct pctl_tb {
    FILE *f;
    char path[4096];
};

uint32_t pctl_crc32c(const void *data, size_t n)
{
    static uint32_t table[256];
    static int ready;
    const unsigned char *p = data;
    uint32_t crc = 0xffffffffu;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    while (n--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

/* TFRecord's masking of a stored CRC (record_writer.cc: rotate right by
 * 15, add a constant), so a CRC of data that holds CRCs is not trivial. */
static uint32_t masked(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void le32(unsigned char *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

/* Writes one TFRecord holding the packed event. */
static int write_event(pctl_tb_t *tb, const Tensorboard__Event *ev)
{
    size_t n = tensorboard__event__get_packed_size(ev);
    unsigned char head[12], tail[4], *buf = malloc(n ? n : 1);
    if (!buf)
        return -1;
    tensorboard__event__pack(ev, buf);
    le32(head, (uint32_t)n);
    le32(head + 4, (uint32_t)((uint64_t)n >> 32));
    le32(head + 8, masked(pctl_crc32c(head, 8)));
    le32(tail, masked(pctl_crc32c(buf, n)));
    int ok = fwrite(head, 1, 12, tb->f) == 12 && fwrite(buf, 1, n, tb->f) == n &&
             fwrite(tail, 1, 4, tb->f) == 4;
    free(buf);
    return ok ? 0 : -1;
}

static int mkdir_one(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

pctl_tb_t *pctl_tb_open(const char *dir, const char *run, char *err, size_t errlen)
{
    pctl_tb_t *tb = calloc(1, sizeof(*tb));
    char host[256] = "localhost", rundir[2048];
    struct timeval now;
    if (!tb) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    gettimeofday(&now, NULL);
    gethostname(host, sizeof(host) - 1);
    if ((size_t)snprintf(rundir, sizeof(rundir), "%s/%s", dir, run) >= sizeof(rundir)) {
        snprintf(err, errlen, "the path %s/%s is too long", dir, run);
        free(tb);
        return NULL;
    }
    if (mkdir_one(dir) || mkdir_one(rundir)) {
        snprintf(err, errlen, "cannot create %s: %s", rundir, strerror(errno));
        free(tb);
        return NULL;
    }
    snprintf(tb->path, sizeof(tb->path), "%s/events.out.tfevents.%ld.%s", rundir,
             (long)now.tv_sec, host);
    tb->f = fopen(tb->path, "wb");
    if (!tb->f) {
        snprintf(err, errlen, "cannot write %s: %s", tb->path, strerror(errno));
        free(tb);
        return NULL;
    }
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = (double)now.tv_sec + now.tv_usec / 1e6;
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    if (write_event(tb, &ev)) {
        snprintf(err, errlen, "cannot write %s: %s", tb->path, strerror(errno));
        fclose(tb->f);
        free(tb);
        return NULL;
    }
    return tb;
}

int pctl_tb_scalar(pctl_tb_t *tb, const char *tag, int64_t step, double wall_time, float value)
{
    Tensorboard__SummaryValue v = TENSORBOARD__SUMMARY_VALUE__INIT;
    Tensorboard__SummaryValue *vs[1] = {&v};
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    v.tag = (char *)tag;
    v.value_case = TENSORBOARD__SUMMARY_VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = value;
    sum.n_value = 1;
    sum.value = vs;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return write_event(tb, &ev);
}

const char *pctl_tb_path(const pctl_tb_t *tb) { return tb->path; }

int pctl_tb_close(pctl_tb_t *tb)
{
    if (!tb)
        return 0;
    int rc = fclose(tb->f) == 0 ? 0 : -1;
    free(tb);
    return rc;
}
