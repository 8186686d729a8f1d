/* pctl_data.c: `pctl data prepare`, the byte-level tokenizer.
 *
 * Every byte of the text is one token (vocab 256). Output uses the llm.c /
 * nanoGPT token-file layout (ARCHITECTURE.md §4 "Data format"):
 *   header: 256 little-endian int32, [0] = 20240520 (magic), [1] = 1
 *           (version), [2] = token count, the rest 0;
 *   body:   token count little-endian uint16.
 * With --val-fraction F the last floor(F * bytes) bytes go to a validation
 * file next to OUT ("x.bin" -> "x_val.bin"). Files are written to a
 * temporary name in the same directory and renamed into place, so a
 * failure never leaves a truncated OUT. Runs locally; no daemon. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pctl.h"

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
    if (fflush(out) != 0 || fsync(fileno(out)) != 0)
        goto err_write;
    if (fclose(out) != 0) {
        out = NULL;
        goto err_write;
    }
    out = NULL;
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "pctl: data prepare: cannot rename %s to %s: %s\n", tmp, path,
                strerror(errno));
        goto out;
    }
    ret = 0;
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

static int data_prepare(int argc, char **argv)
{
    static const struct option opts[] = {
        {"text", required_argument, NULL, 't'},
        {"out", required_argument, NULL, 'o'},
        {"val-fraction", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *text = NULL, *outp = NULL;
    double frac = 0;
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
