/* validate.c: SubmitJob's checks of a JobSpec (see daemon.h).
 *
 * Every rejection names the offending value, so pctl can print it as is.
 * The data file is read here (header only plus its size): llm.c layout,
 * a 256 x int32 header (magic 20240520, version 1, token count) then
 * uint16 tokens. Pure function of its inputs and the file; any thread. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon.h"

#define PX_DATA_MAGIC 20240520
#define PX_DATA_VERSION 1

static px_status_t fail(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static px_status_t fail(char *errbuf, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
    return PX_ERR_INVALID_ARGUMENT;
}

/* Reads the header of an llm.c token file; *tokens_p = token count. */
static px_status_t check_data(const char *path, uint64_t *tokens_p, char *errbuf, size_t errlen)
{
    int32_t header[256];
    struct stat stt;
    FILE *f;
    size_t got;
    uint64_t need;

    if (!path || !*path)
        return fail(errbuf, errlen, "data file: no path given (--data)");
    if (path[0] != '/')
        return fail(errbuf, errlen, "data file %s: path must be absolute", path);
    f = fopen(path, "rb");
    if (!f)
        return fail(errbuf, errlen, "data file %s: %s", path, strerror(errno));
    if (fstat(fileno(f), &stt) != 0 || !S_ISREG(stt.st_mode)) {
        fclose(f);
        return fail(errbuf, errlen, "data file %s: not a regular file", path);
    }
    got = fread(header, sizeof(int32_t), 256, f);
    fclose(f);
    if (got != 256)
        return fail(errbuf, errlen, "data file %s: too short for the 1024-byte header (%lld bytes)",
                    path, (long long)stt.st_size);
    if (header[0] != PX_DATA_MAGIC)
        return fail(errbuf, errlen, "data file %s: bad magic %d (expected %d, llm.c layout)",
                    path, header[0], PX_DATA_MAGIC);
    if (header[1] != PX_DATA_VERSION)
        return fail(errbuf, errlen, "data file %s: unsupported version %d (expected %d)", path,
                    header[1], PX_DATA_VERSION);
    if (header[2] <= 0)
        return fail(errbuf, errlen, "data file %s: token count %d in the header", path,
                    header[2]);
    need = 1024 + (uint64_t)header[2] * 2;
    if ((uint64_t)stt.st_size < need)
        return fail(errbuf, errlen,
                    "data file %s: header says %d tokens (%llu bytes) but the file has %lld bytes",
                    path, header[2], (unsigned long long)need, (long long)stt.st_size);
    *tokens_p = (uint64_t)header[2];
    return PX_OK;
}

static px_status_t range(const char *name, uint64_t v, uint64_t lo, uint64_t hi, char *errbuf,
                         size_t errlen)
{
    if (v < lo || v > hi)
        return fail(errbuf, errlen, "%s=%llu is out of range (%llu..%llu)", name,
                    (unsigned long long)v, (unsigned long long)lo, (unsigned long long)hi);
    return PX_OK;
}

px_status_t px_validate_spec(const Parallax__V1__JobSpec *spec, int cluster_devices,
                             char *errbuf, size_t errlen)
{
    const Parallax__V1__ModelSpec *m = spec->model;
    uint32_t vocab;
    uint64_t tokens = 0;
    px_status_t status;

    if (!m)
        return fail(errbuf, errlen, "model: missing (layers, heads, dim, seq)");
    vocab = m->vocab ? m->vocab : 256;
    if ((status = range("layers", m->layers, 1, 1024, errbuf, errlen)) ||
        (status = range("heads", m->heads, 1, 1024, errbuf, errlen)) ||
        (status = range("dim", m->dim, 1, 65536, errbuf, errlen)) ||
        (status = range("seq", m->seq, 1, 1u << 20, errbuf, errlen)) ||
        (status = range("vocab", vocab, 2, 65536, errbuf, errlen)) ||
        (status = range("dp", spec->dp, 1, 65536, errbuf, errlen)) ||
        (status = range("batch", spec->batch, 1, 1u << 20, errbuf, errlen)) ||
        (status = range("steps", spec->steps, 1, 1000000000, errbuf, errlen)))
        return status;
    if (spec->name && strlen(spec->name) > 200)
        return fail(errbuf, errlen, "name: %zu characters (at most 200)", strlen(spec->name));
    if (spec->max_restarts > 100)
        return fail(errbuf, errlen, "max_restarts=%u is out of range (0..100)",
                    spec->max_restarts);
    if (spec->max_restarts && (!spec->checkpoint_dir || !*spec->checkpoint_dir))
        return fail(errbuf, errlen, "max_restarts=%u needs checkpoint_dir (a restart resumes "
                    "from its newest checkpoint)", spec->max_restarts);
    if (m->dim % m->heads)
        return fail(errbuf, errlen, "dim=%u is not divisible by heads=%u", m->dim, m->heads);
    if (spec->batch % spec->dp)
        return fail(errbuf, errlen, "batch=%u is not divisible by dp=%u", spec->batch, spec->dp);
    if (!isfinite(spec->lr) || spec->lr <= 0.0f || spec->lr > 10.0f)
        return fail(errbuf, errlen, "lr=%g must be in (0, 10]", (double)spec->lr);
    if (!isfinite(spec->weight_decay) || spec->weight_decay < 0.0f || spec->weight_decay > 10.0f)
        return fail(errbuf, errlen, "weight_decay=%g must be in [0, 10]",
                    (double)spec->weight_decay);
    if (!isfinite(spec->min_lr_ratio) || spec->min_lr_ratio < 0.0f || spec->min_lr_ratio > 1.0f)
        return fail(errbuf, errlen, "min_lr_ratio=%g must be in [0, 1]",
                    (double)spec->min_lr_ratio);
    if (spec->warmup_steps > spec->steps)
        return fail(errbuf, errlen, "warmup_steps=%u exceeds steps=%u", spec->warmup_steps,
                    spec->steps);
    if ((int64_t)spec->dp > cluster_devices)
        return fail(errbuf, errlen, "dp=%u but the cluster has %d devices", spec->dp,
                    cluster_devices);
    if ((status = check_data(spec->data_path, &tokens, errbuf, errlen)))
        return status;
    if ((uint64_t)m->seq + 1 > tokens)
        return fail(errbuf, errlen, "seq=%u: seq+1=%u tokens exceed the %llu tokens in %s",
                    m->seq, m->seq + 1, (unsigned long long)tokens, spec->data_path);
    return PX_OK;
}
