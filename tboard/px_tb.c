/* px_tb.c: TensorBoard scalar event files (px_tb.h). */
#include "px_tb.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "tensorboard.pb-c.h"

struct px_tb {
    FILE *f;
    int64_t last_step; /* of the files found at open; -1: none */
    char path[4096];
};

uint32_t px_crc32c(const void *data, size_t n)
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
static int write_event(px_tb_t *tb, const Tensorboard__Event *ev)
{
    size_t n = tensorboard__event__get_packed_size(ev);
    unsigned char head[12], tail[4], *buf = malloc(n ? n : 1);
    if (!buf)
        return -1;
    tensorboard__event__pack(ev, buf);
    le32(head, (uint32_t)n);
    le32(head + 4, (uint32_t)((uint64_t)n >> 32));
    le32(head + 8, masked(px_crc32c(head, 8)));
    le32(tail, masked(px_crc32c(buf, n)));
    int ok = fwrite(head, 1, 12, tb->f) == 12 && fwrite(buf, 1, n, tb->f) == n &&
             fwrite(tail, 1, 4, tb->f) == 4;
    free(buf);
    return ok ? 0 : -1;
}

/* mkdir -p: each prefix of path ending before a '/', then path. */
int px_tb_mkdirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf)) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return -1;
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st))
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static uint32_t rd32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The largest step of a summary event in the TFRecord file `path` (-1:
 * none), read up to the first record that is cut short or fails its CRC. */
static int64_t file_last_step(const char *path)
{
    int64_t last = -1;
    FILE *f = fopen(path, "rb");
    unsigned char head[12], tail[4];
    if (!f)
        return -1;
    while (fread(head, 1, 12, f) == 12) {
        uint64_t n = rd32(head) | (uint64_t)rd32(head + 4) << 32;
        if (rd32(head + 8) != masked(px_crc32c(head, 8)) || n > (64u << 20))
            break;
        unsigned char *buf = malloc(n ? n : 1);
        if (!buf)
            break;
        if (fread(buf, 1, n, f) != n || fread(tail, 1, 4, f) != 4 ||
            rd32(tail) != masked(px_crc32c(buf, n))) {
            free(buf);
            break;
        }
        Tensorboard__Event *ev = tensorboard__event__unpack(NULL, n, buf);
        free(buf);
        if (!ev)
            break;
        if (ev->what_case == TENSORBOARD__EVENT__WHAT_SUMMARY && ev->step > last)
            last = ev->step;
        tensorboard__event__free_unpacked(ev, NULL);
    }
    fclose(f);
    return last;
}

/* The largest summary step of the event files in rundir (-1: none). */
static int64_t run_last_step(const char *rundir)
{
    int64_t last = -1;
    DIR *d = opendir(rundir);
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d))) {
        char path[4400];
        if (!strstr(e->d_name, "tfevents"))
            continue;
        snprintf(path, sizeof(path), "%s/%s", rundir, e->d_name);
        int64_t s = file_last_step(path);
        if (s > last)
            last = s;
    }
    closedir(d);
    return last;
}

px_tb_t *px_tb_open(const char *rundir, char *err, size_t errlen)
{
    px_tb_t *tb = calloc(1, sizeof(*tb));
    char host[256] = "localhost";
    struct timeval now;
    if (!tb) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    gettimeofday(&now, NULL);
    gethostname(host, sizeof(host) - 1);
    if (px_tb_mkdirs(rundir)) {
        snprintf(err, errlen, "cannot create %s: %s", rundir, strerror(errno));
        free(tb);
        return NULL;
    }
    tb->last_step = run_last_step(rundir);
    /* a file of its own: another open of the run in the same second by
     * the same process gets the next suffix ("x": never one that exists) */
    for (int k = 0; k < 1000 && !tb->f; k++) {
        if ((size_t)snprintf(tb->path, sizeof(tb->path), "%s/events.out.tfevents.%ld.%s.%d.%d",
                             rundir, (long)now.tv_sec, host, (int)getpid(),
                             k) >= sizeof(tb->path)) {
            snprintf(err, errlen, "the path %s/events.out.tfevents.* is too long", rundir);
            free(tb);
            return NULL;
        }
        tb->f = fopen(tb->path, "wbx");
        if (!tb->f && errno != EEXIST)
            break;
    }
    if (!tb->f) {
        snprintf(err, errlen, "cannot write %s: %s", tb->path, strerror(errno));
        free(tb);
        return NULL;
    }
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = (double)now.tv_sec + now.tv_usec / 1e6;
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    if (write_event(tb, &ev) || fflush(tb->f)) {
        snprintf(err, errlen, "cannot write %s: %s", tb->path, strerror(errno));
        fclose(tb->f);
        free(tb);
        return NULL;
    }
    return tb;
}

int64_t px_tb_last_step(const px_tb_t *tb) { return tb->last_step; }

int px_tb_flush(px_tb_t *tb) { return fflush(tb->f) ? -1 : 0; }

int px_tb_scalar(px_tb_t *tb, const char *tag, int64_t step, double wall_time, float value)
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

const char *px_tb_path(const px_tb_t *tb) { return tb->path; }

int px_tb_close(px_tb_t *tb)
{
    if (!tb)
        return 0;
    int rc = fclose(tb->f) == 0 ? 0 : -1;
    free(tb);
    return rc;
}
