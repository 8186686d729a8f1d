/* pctl_data.c: `pctl data prepare`, text to token files.
 *
 * Two tokenizers: by default every byte of the text is one token (vocab
 * 256); with --tokenizer FILE a Hugging Face byte-level BPE
 * (planner/tokenizer.h) encodes the text, on --threads threads over chunks
 * cut where the result equals one thread's (px_tokenizer_chunk_end), with
 * a progress bar on stderr when it is a terminal. Output uses the llm.c /
 * nanoGPT token-file layout (ARCHITECTURE.md §4 "Data format", data.h):
 *   header: 256 little-endian int32, [0] = 20240520 (magic), [1] = 1
 *           (version: uint16 tokens) or 2 (uint32 tokens, for a vocab past
 *           65,536 or --token-bytes 4), [2] = token count, [3] = the
 *           tokenizer's vocab size (0 for the byte tokenizer, whose files
 *           are as before), the rest 0;
 *   body:   token count little-endian uint16 or uint32.
 * With --val-fraction F the last floor(F * bytes) bytes (byte tokenizer) or
 * floor(F * tokens) tokens (--tokenizer) go to a validation file next to
 * OUT ("x.bin" -> "x_val.bin"). Files are written to a temporary name in
 * the same directory and renamed into place, so a failure never leaves a
 * truncated OUT. With --tokenizer the tokenizer file is copied beside OUT
 * ("x.bin" -> "x.tokenizer.json", px_tokenizer_sidecar_path), where `pctl
 * sample` of a job trained on OUT finds it; without, one left there by an
 * earlier run is removed. Runs locally; no daemon. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data.h"
#include "pctl.h"
#include "tokenizer.h"

#define TOKEN_MAGIC 20240520
#define TOKEN_VERSION 1
#define HEADER_INTS 256
#define CHUNK_BYTES (1 << 20)

char *pctl_val_path(const char *out)
{
    const char *base = strrchr(out, '/');
    const char *dot;
    char *p;
    size_t stem;

    base = base ? base + 1 : out;
    dot = strrchr(base, '.');
    if (!dot || dot == base)
        dot = out + strlen(out);
    stem = (size_t)(dot - out);
    p = malloc(strlen(out) + 5);
    if (!p)
        return NULL;
    memcpy(p, out, stem);
    memcpy(p + stem, "_val", 4);
    strcpy(p + stem + 4, dot);
    return p;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Makes a token file durable under its name: flushes, fsyncs and closes
 * `out` (always closed), then renames `tmp` (its temporary name) to `path`,
 * so a reader never sees a partial file. Returns 0, or -1 with the error
 * printed. */
static int token_file_commit(FILE *out, const char *tmp, const char *path)
{
    int failed = fflush(out) != 0 || fsync(fileno(out)) != 0;
    if (fclose(out) != 0 || failed) {
        fprintf(stderr, "pctl: data prepare: writing %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "pctl: data prepare: cannot rename %s to %s: %s\n", tmp, path,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* Copies `count` bytes of `in` as tokens into a new token file at `path`.
 * Returns 0, or -1 with the error printed. */
static int write_tokens(FILE *in, const char *in_path, uint64_t count, const char *path)
{
    uint8_t header[HEADER_INTS * 4];
    uint8_t *buf = NULL;
    uint8_t *tok = NULL;
    char *tmp = NULL;
    FILE *out = NULL;
    uint64_t left = count;
    int ret = -1;

    if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
        tmp = NULL;
        goto out;
    }
    buf = malloc(CHUNK_BYTES);
    tok = malloc(2 * (size_t)CHUNK_BYTES);
    if (!buf || !tok) {
        fprintf(stderr, "pctl: data prepare: out of memory\n");
        goto out;
    }
    out = fopen(tmp, "wb");
    if (!out) {
        fprintf(stderr, "pctl: data prepare: cannot create %s: %s\n", path, strerror(errno));
        goto out;
    }
    memset(header, 0, sizeof(header));
    put_le32(header + 0, TOKEN_MAGIC);
    put_le32(header + 4, TOKEN_VERSION);
    put_le32(header + 8, (uint32_t)count);
    if (fwrite(header, 1, sizeof(header), out) != sizeof(header))
        goto err_write;
    while (left > 0) {
        size_t want = left < CHUNK_BYTES ? (size_t)left : CHUNK_BYTES;
        size_t got = fread(buf, 1, want, in);
        if (got != want) {
            fprintf(stderr, "pctl: data prepare: %s: short read (%s)\n", in_path,
                    ferror(in) ? strerror(errno) : "file changed while reading");
            goto out;
        }
        for (size_t i = 0; i < got; i++) {
            tok[2 * i] = buf[i];   /* uint16 little-endian: low byte = the byte */
            tok[2 * i + 1] = 0;
        }
        if (fwrite(tok, 2, got, out) != got)
            goto err_write;
        left -= got;
    }
    ret = token_file_commit(out, tmp, path);
    out = NULL;
    goto out;

err_write:
    fprintf(stderr, "pctl: data prepare: writing %s: %s\n", path, strerror(errno));
out:
    if (out)
        fclose(out);
    if (ret != 0 && tmp)
        unlink(tmp);
    free(tmp);
    free(buf);
    free(tok);
    return ret;
}

/* ---- --tokenizer: BPE over threads ---- */

typedef struct {
    size_t start, end; /* bytes of the text */
    px_token_ids_t ids;
    px_status_t status;
    char err[512];
} chunk_t;

typedef struct {
    const px_tokenizer_t *tok;
    const char *text;
    chunk_t *chunks;
    size_t nchunks;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* signalled as each chunk ends */
    size_t next;         /* the next chunk to take */
    size_t done;         /* chunks ended */
    size_t done_bytes;
    int failed;          /* a chunk failed: the others stop taking work */
} encode_job_t;

static void *encode_worker(void *arg)
{
    encode_job_t *job = arg;
    for (;;) {
        chunk_t *c;
        pthread_mutex_lock(&job->mu);
        if (job->next == job->nchunks || job->failed) {
            pthread_mutex_unlock(&job->mu);
            return NULL;
        }
        c = &job->chunks[job->next++];
        pthread_mutex_unlock(&job->mu);
        c->status = px_tokenizer_encode(job->tok, job->text + c->start, c->end - c->start,
                                        &c->ids, c->err, sizeof(c->err));
        pthread_mutex_lock(&job->mu);
        job->done++;
        job->done_bytes += c->end - c->start;
        job->failed |= c->status != PX_OK;
        pthread_cond_signal(&job->cv);
        pthread_mutex_unlock(&job->mu);
    }
}

/* "[#####.....]  45%  12.3 / 27.1 MB" on stderr, redrawn in place */
static void draw_progress(size_t done, size_t total)
{
    char bar[41];
    int filled = total ? (int)(40.0 * (double)done / (double)total) : 40;
    for (int i = 0; i < 40; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[40] = '\0';
    fprintf(stderr, "\rtokenizing [%s] %3d%%  %.1f / %.1f MB", bar,
            total ? (int)(100.0 * (double)done / (double)total) : 100, done / 1e6, total / 1e6);
    fflush(stderr);
}

/* Encodes text[0, len) on `threads` threads into one id array (*all_p,
 * caller frees). Returns 0, or -1 with the error printed. */
static int encode_text(const px_tokenizer_t *tok, const char *text, size_t len, int threads,
                       const char *in_path, uint32_t **all_p, size_t *n_p)
{
    encode_job_t job = {.tok = tok, .text = text};
    pthread_t tids[256];
    int started = 0, ret = -1, tty = isatty(STDERR_FILENO);
    size_t want = len / ((size_t)threads * 8), cap = 16, total = 0, at = 0;
    uint32_t *all = NULL;

    /* chunks of 256 KiB .. 16 MiB: eight per thread balances the load */
    want = want < (256u << 10) ? (256u << 10) : want > (16u << 20) ? (16u << 20) : want;
    job.chunks = calloc(cap, sizeof(*job.chunks));
    if (!job.chunks)
        goto err_oom;
    for (size_t start = 0; start < len;) {
        size_t end = px_tokenizer_chunk_end(tok, text, len, start, want);
        if (job.nchunks == cap) {
            chunk_t *c = realloc(job.chunks, 2 * cap * sizeof(*c));
            if (!c)
                goto err_oom;
            memset(c + cap, 0, cap * sizeof(*c));
            job.chunks = c;
            cap *= 2;
        }
        job.chunks[job.nchunks].start = start;
        job.chunks[job.nchunks++].end = end;
        start = end;
    }
    if (job.nchunks == 1 && threads > 1 && len > 2 * want)
        fprintf(stderr, "pctl: data prepare: note: one thread: %s has no line end where the "
                "tokenizer's pieces are known not to cross (GPT-2's and Llama 3's regexes, no "
                "prefix space, no added token holding a newline)\n", in_path);
    pthread_mutex_init(&job.mu, NULL);
    pthread_cond_init(&job.cv, NULL);
    if ((size_t)threads > job.nchunks)
        threads = (int)job.nchunks;
    for (; started < threads; started++)
        if (pthread_create(&tids[started], NULL, encode_worker, &job) != 0)
            break;
    if (!started) {
        fprintf(stderr, "pctl: data prepare: cannot start a tokenizer thread\n");
        goto out_destroy;
    }
    pthread_mutex_lock(&job.mu);
    while (job.done < job.nchunks && !(job.failed && job.done == job.next)) {
        /* woken by each chunk's end; the deadline only redraws the bar */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 1;
        pthread_cond_timedwait(&job.cv, &job.mu, &dl);
        if (tty)
            draw_progress(job.done_bytes, len);
    }
    pthread_mutex_unlock(&job.mu);
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    if (tty)
        fputc('\n', stderr);
    for (size_t i = 0; i < job.nchunks; i++) {
        if (job.chunks[i].status != PX_OK) {
            fprintf(stderr, "pctl: data prepare: --text %s (the part from byte %zu): %s\n",
                    in_path, job.chunks[i].start, job.chunks[i].err);
            goto out_destroy;
        }
        total += job.chunks[i].ids.len;
    }
    all = malloc((total ? total : 1) * sizeof(*all));
    if (!all) {
        fprintf(stderr, "pctl: data prepare: out of memory (%zu tokens)\n", total);
        goto out_destroy;
    }
    for (size_t i = 0; i < job.nchunks; i++) {
        memcpy(all + at, job.chunks[i].ids.ids, job.chunks[i].ids.len * sizeof(*all));
        at += job.chunks[i].ids.len;
    }
    *all_p = all;
    *n_p = total;
    ret = 0;
out_destroy:
    pthread_cond_destroy(&job.cv);
    pthread_mutex_destroy(&job.mu);
    for (size_t i = 0; i < job.nchunks; i++)
        px_token_ids_free(&job.chunks[i].ids);
    free(job.chunks);
    return ret;
err_oom:
    fprintf(stderr, "pctl: data prepare: out of memory\n");
    free(job.chunks);
    return -1;
}

/* Writes n ids as a token file of `width` bytes per token (2: version 1, 4:
 * version 2) with the tokenizer's vocab in header[3]. Returns 0, or -1 with
 * the error printed. */
static int write_ids(const uint32_t *ids, size_t n, int width, uint32_t vocab, const char *path)
{
    uint8_t header[HEADER_INTS * 4];
    uint8_t *buf = NULL;
    char *tmp = NULL;
    FILE *out = NULL;
    int ret = -1;
    const size_t per = 1 << 18;

    if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
        tmp = NULL;
        goto out;
    }
    buf = malloc(per * 4);
    if (!buf) {
        fprintf(stderr, "pctl: data prepare: out of memory\n");
        goto out;
    }
    out = fopen(tmp, "wb");
    if (!out) {
        fprintf(stderr, "pctl: data prepare: cannot create %s: %s\n", path, strerror(errno));
        goto out;
    }
    memset(header, 0, sizeof(header));
    put_le32(header + 0, TOKEN_MAGIC);
    put_le32(header + 4, width == 2 ? PX_DATA_VERSION : PX_DATA_VERSION_U32);
    put_le32(header + 8, (uint32_t)n);
    put_le32(header + 12, vocab);
    if (fwrite(header, 1, sizeof(header), out) != sizeof(header))
        goto err_write;
    for (size_t at = 0; at < n; at += per) {
        size_t k = n - at < per ? n - at : per;
        for (size_t i = 0; i < k; i++) {
            uint32_t v = ids[at + i];
            buf[width * i] = (uint8_t)v;
            buf[width * i + 1] = (uint8_t)(v >> 8);
            if (width == 4) {
                buf[width * i + 2] = (uint8_t)(v >> 16);
                buf[width * i + 3] = (uint8_t)(v >> 24);
            }
        }
        if (fwrite(buf, (size_t)width, k, out) != k)
            goto err_write;
    }
    ret = token_file_commit(out, tmp, path);
    out = NULL;
    goto out;

err_write:
    fprintf(stderr, "pctl: data prepare: writing %s: %s\n", path, strerror(errno));
out:
    if (out)
        fclose(out);
    if (ret != 0 && tmp)
        unlink(tmp);
    free(tmp);
    free(buf);
    return ret;
}

/* Copies the tokenizer file to the place beside OUT where sampling looks
 * for it (px_tokenizer_sidecar_path), under a temporary name then
 * token_file_commit. 0, or -1 with the error printed. */
static int copy_tokenizer(const char *tok_path, const char *outp)
{
    char side[4200], tmp[4300], buf[1 << 16];
    FILE *in = NULL, *out = NULL;
    size_t got;
    int ret = -1;
    if (px_tokenizer_sidecar_path(outp, side, sizeof(side))) {
        fprintf(stderr, "pctl: data prepare: --out %s: path too long\n", outp);
        return -1;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", side, (int)getpid());
    if (!(in = fopen(tok_path, "rb")) || !(out = fopen(tmp, "wb"))) {
        fprintf(stderr, "pctl: data prepare: cannot copy %s to %s: %s\n", tok_path, side,
                strerror(errno));
        goto out;
    }
    while ((got = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, got, out) != got)
            break;
    if (ferror(in) || ferror(out)) {
        fprintf(stderr, "pctl: data prepare: copying %s to %s: %s\n", tok_path, side,
                strerror(errno));
        goto out;
    }
    ret = token_file_commit(out, tmp, side);
    out = NULL;
    if (ret == 0)
        printf("copied the tokenizer to %s (pctl sample decodes with it)\n", side);
out:
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    if (ret)
        unlink(tmp);
    return ret;
}

/* --tokenizer: the whole text encoded, then split by tokens into OUT and
 * (frac > 0) its validation file; the tokenizer copied beside OUT */
static int prepare_bpe(const char *tok_path, const char *text, const char *outp, double frac,
                       int threads, int token_bytes)
{
    px_tokenizer_t *tok = NULL;
    char err[1024];
    int fd = -1, rc = PCTL_EXIT_FAIL;
    void *map = MAP_FAILED;
    struct stat st;
    uint32_t *ids = NULL, vocab;
    size_t n = 0, n_val, n_train;
    char *vpath = NULL;
    int width;

    if (px_tokenizer_load(tok_path, err, sizeof(err), &tok) != PX_OK) {
        fprintf(stderr, "pctl: data prepare: %s\n", err);
        return PCTL_EXIT_FAIL;
    }
    vocab = px_tokenizer_vocab_size(tok);
    width = token_bytes ? token_bytes : vocab <= 65536 ? 2 : 4;
    if (width == 2 && vocab > 65536) {
        fprintf(stderr, "pctl: data prepare: --token-bytes 2 cannot hold the ids of %s (vocab "
                "%u > 65536); use --token-bytes 4\n", tok_path, vocab);
        goto out;
    }
    fd = open(text, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "pctl: data prepare: cannot open --text %s: %s\n", text, strerror(errno));
        goto out;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "pctl: data prepare: --text %s is not a regular file\n", text);
        goto out;
    }
    if (st.st_size == 0) {
        fprintf(stderr, "pctl: data prepare: --text %s is empty (no tokens)\n", text);
        goto out;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "pctl: data prepare: --text %s: mmap: %s\n", text, strerror(errno));
        goto out;
    }
    if (encode_text(tok, map, (size_t)st.st_size, threads, text, &ids, &n) != 0)
        goto out;
    n_val = (size_t)((double)n * frac);
    n_train = n - n_val;
    if (n_train == 0) {
        fprintf(stderr, "pctl: data prepare: --text %s gave no tokens\n", text);
        goto out;
    }
    if (n_train > INT32_MAX || n_val > INT32_MAX) {
        fprintf(stderr, "pctl: data prepare: %s gives %zu tokens; a token file holds at most %d\n",
                text, n_train > n_val ? n_train : n_val, INT32_MAX);
        goto out;
    }
    if (frac > 0 && n_val == 0) {
        fprintf(stderr, "pctl: data prepare: --val-fraction %g of %zu tokens leaves no "
                "validation tokens\n", frac, n);
        goto out;
    }
    if (frac > 0 && !(vpath = pctl_val_path(outp)))
        goto out;
    if (write_ids(ids, n_train, width, vocab, outp) != 0)
        goto out;
    printf("wrote %zu tokens (%d bytes each) to %s\n", n_train, width, outp);
    if (vpath) {
        if (write_ids(ids + n_train, n_val, width, vocab, vpath) != 0)
            goto out;
        printf("wrote %zu validation tokens (last %.4g of the tokens) to %s\n", n_val, frac,
               vpath);
    }
    if (copy_tokenizer(tok_path, outp) != 0)
        goto out;
    printf("vocab %u (from %s): submit with --vocab %u\n", vocab, tok_path, vocab);
    rc = PCTL_EXIT_OK;
out:
    free(vpath);
    free(ids);
    if (map != MAP_FAILED)
        munmap(map, (size_t)st.st_size);
    if (fd >= 0)
        close(fd);
    px_tokenizer_destroy(tok);
    return rc;
}

static int data_prepare(int argc, char **argv)
{
    static const struct option opts[] = {
        {"text", required_argument, NULL, 't'},
        {"out", required_argument, NULL, 'o'},
        {"val-fraction", required_argument, NULL, 'v'},
        {"tokenizer", required_argument, NULL, 'k'},
        {"threads", required_argument, NULL, 'j'},
        {"token-bytes", required_argument, NULL, 'b'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *text = NULL, *outp = NULL, *tok_path = NULL;
    double frac = 0;
    uint64_t threads = 0, token_bytes = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    char *vpath = NULL;
    FILE *in = NULL;
    struct stat st;
    uint64_t n, n_val, n_train;
    int opt, rc = PCTL_EXIT_FAIL;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 't': text = optarg; break;
        case 'o': outp = optarg; break;
        case 'v':
            if (pctl_parse_float("data", "--val-fraction", optarg, 0.0, 0.999999, &frac))
                return PCTL_EXIT_USAGE;
            break;
        case 'k': tok_path = optarg; break;
        case 'j':
            if (pctl_parse_u64("data", "--threads", optarg, 1, 256, &threads))
                return PCTL_EXIT_USAGE;
            break;
        case 'b':
            if (pctl_parse_u64("data", "--token-bytes", optarg, 2, 4, &token_bytes))
                return PCTL_EXIT_USAGE;
            if (token_bytes == 3)
                return pctl_usage_error("data", "invalid value '3' for --token-bytes (2 or 4)");
            break;
        case 'h': return pctl_help("data");
        case ':': return pctl_usage_error("data", "option %s needs a value", argv[optind - 1]);
        default: return pctl_usage_error("data", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return pctl_usage_error("data", "unexpected argument '%s'", argv[optind]);
    if (!text)
        return pctl_usage_error("data", "missing --text IN.txt");
    if (!outp)
        return pctl_usage_error("data", "missing --out OUT.bin");
    if (!tok_path && (threads || token_bytes))
        return pctl_usage_error("data", "%s needs --tokenizer FILE (the byte tokenizer writes "
                                "uint16 tokens on one thread)",
                                threads ? "--threads" : "--token-bytes");
    if (tok_path)
        return prepare_bpe(tok_path, text, outp, frac,
                           threads ? (int)threads : ncpu < 1 ? 1 : ncpu > 256 ? 256 : (int)ncpu,
                           (int)token_bytes);

    in = fopen(text, "rb");
    if (!in) {
        fprintf(stderr, "pctl: data prepare: cannot open --text %s: %s\n", text, strerror(errno));
        return PCTL_EXIT_FAIL;
    }
    if (fstat(fileno(in), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "pctl: data prepare: --text %s is not a regular file\n", text);
        goto out;
    }
    n = (uint64_t)st.st_size;
    if (n == 0) {
        fprintf(stderr, "pctl: data prepare: --text %s is empty (no tokens)\n", text);
        goto out;
    }
    n_val = (uint64_t)((double)n * frac);
    n_train = n - n_val;
    if (n_train > INT32_MAX) {
        fprintf(stderr,
                "pctl: data prepare: %s has %llu bytes; a token file holds at most %d tokens\n",
                text, (unsigned long long)n_train, INT32_MAX);
        goto out;
    }
    if (frac > 0 && n_val == 0) {
        fprintf(stderr,
                "pctl: data prepare: --val-fraction %g of %llu bytes leaves no validation tokens\n",
                frac, (unsigned long long)n);
        goto out;
    }
    if (frac > 0) {
        vpath = pctl_val_path(outp);
        if (!vpath)
            goto out;
    }
    if (write_tokens(in, text, n_train, outp) != 0)
        goto out;
    printf("wrote %llu tokens to %s\n", (unsigned long long)n_train, outp);
    if (vpath) {
        if (write_tokens(in, text, n_val, vpath) != 0)
            goto out;
        printf("wrote %llu validation tokens (last %.4g of the text) to %s\n",
               (unsigned long long)n_val, frac, vpath);
    }
    /* a tokenizer an earlier --tokenizer run left beside OUT no longer
     * describes it: sampling would code the bytes with it */
    char side[4200];
    if (!px_tokenizer_sidecar_path(outp, side, sizeof(side)) && unlink(side) == 0)
        printf("removed %s (OUT is byte-level now)\n", side);
    rc = PCTL_EXIT_OK;
out:
    free(vpath);
    fclose(in);
    return rc;
}

int pctl_cmd_data(pctl_ctx_t *ctx, int argc, char **argv)
{
    if (argc < 2)
        return pctl_usage_error("data", "missing subcommand (prepare)");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return pctl_help("data");
    if (strcmp(argv[1], "prepare"))
        return pctl_usage_error("data", "unknown subcommand '%s'", argv[1]);
    return data_prepare(argc - 1, argv + 1);
}
