/* pctl_sample.c: `pctl sample JOB`: text generated from a job's weights
 * (Control.Sample; the daemon runs parallax-rank --sample on the node that
 * holds them, daemon/sample.c). Prints the prompt and the generated text;
 * --json the run's details too. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pctl.h"
#include "px_file.h"

#define M_SAMPLE "/parallax.v1.Control/Sample"
/* engine/sample.h PX_SAMPLE_MAX_TOKENS (the daemon and the rank check it too) */
#define SAMPLE_MAX_TOKENS 4096
/* the run's deadline on its node (a longer pctl --timeout raises it); the
 * call waits that long and a little more */
#define SAMPLE_RUN_MS 120000
#define SAMPLE_CALL_SLACK_MS 30000

/* Bytes as the terminal should see them (pctl_esc_write), or as they are
 * into a pipe or file. */
static int write_out(const uint8_t *p, size_t n)
{
    if (!n)
        return 0;
    return isatty(STDOUT_FILENO) ? pctl_esc_write(stdout, p, n)
                                 : (fwrite(p, 1, n, stdout) == n ? 0 : -1);
}

int pctl_cmd_sample(pctl_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},  {"prompt-file", required_argument, NULL, 'f'},
        {"tokens", required_argument, NULL, 'n'},  {"temperature", required_argument, NULL, 't'},
        {"top-k", required_argument, NULL, 'k'},   {"seed", required_argument, NULL, 's'},
        {"checkpoint", required_argument, NULL, 'c'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    Parallax__V1__SampleRequest req = PARALLAX__V1__SAMPLE_REQUEST__INIT;
    Parallax__V1__SampleResponse *resp = NULL;
    const char *prompt = NULL, *prompt_file = NULL;
    char *pbuf = NULL;
    size_t plen = 0;
    uint64_t tokens = 256, seed = 1337, ckpt = 0, topk = 0;
    double temp = 1.0;
    int opt, json = 0, rc = PCTL_EXIT_FAIL;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (opt) {
        case 'p': prompt = optarg; break;
        case 'f': prompt_file = optarg; break;
        case 'n':
            if (pctl_parse_u64("sample", "--tokens", optarg, 1, SAMPLE_MAX_TOKENS, &tokens))
                return PCTL_EXIT_USAGE;
            break;
        case 't':
            if (pctl_parse_float("sample", "--temperature", optarg, 0.0, 1e6, &temp))
                return PCTL_EXIT_USAGE;
            break;
        case 'k':
            if (pctl_parse_u64("sample", "--top-k", optarg, 1, INT32_MAX, &topk))
                return PCTL_EXIT_USAGE;
            break;
        case 's':
            if (pctl_parse_u64("sample", "--seed", optarg, 0, UINT64_MAX, &seed))
                return PCTL_EXIT_USAGE;
            break;
        case 'c':
            if (pctl_parse_u64("sample", "--checkpoint", optarg, 1, UINT32_MAX, &ckpt))
                return PCTL_EXIT_USAGE;
            break;
        case 'j': json = 1; break;
        case 'h': return pctl_help("sample");
        case ':': return pctl_usage_error("sample", "option %s needs a value", argv[optind - 1]);
        default: return pctl_usage_error("sample", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return pctl_usage_error("sample", "missing JOB");
    const char *ref = argv[optind++];
    if (optind < argc)
        return pctl_usage_error("sample", "unexpected argument '%s'", argv[optind]);
    if (prompt && prompt_file)
        return pctl_usage_error("sample", "--prompt and --prompt-file are exclusive");
    if (prompt_file && px_read_file(prompt_file, &pbuf, &plen)) {
        fprintf(stderr, "pctl: sample: cannot read --prompt-file %s: %s\n", pctl_esc(prompt_file),
                strerror(errno));
        return PCTL_EXIT_FAIL;
    }
    char idbuf[256];
    req.job_id = (char *)pctl_job_id(ctx, ref, idbuf, sizeof(idbuf));
    req.prompt.data = (uint8_t *)(prompt ? prompt : pbuf);
    req.prompt.len = prompt ? strlen(prompt) : plen;
    req.tokens = (uint32_t)tokens;
    req.temperature = (float)temp;
    req.top_k = (int32_t)topk;
    req.seed = seed;
    req.checkpoint_step = (uint32_t)ckpt;
    int saved = ctx->timeout_ms;
    if (ctx->timeout_ms < SAMPLE_RUN_MS + SAMPLE_CALL_SLACK_MS)
        ctx->timeout_ms = SAMPLE_RUN_MS + SAMPLE_CALL_SLACK_MS;
    req.timeout_ms = (uint32_t)(ctx->timeout_ms - SAMPLE_CALL_SLACK_MS);
    int failed = pctl_call(ctx, "sample", M_SAMPLE, &req.base,
                           &parallax__v1__sample_response__descriptor, (ProtobufCMessage **)&resp);
    ctx->timeout_ms = saved;
    if (failed)
        goto out;
    if (json) {
        json_t *o = pctl_json_message(&resp->base), *bytes = json_array();
        json_object_set_new(o, "job_id", json_string(req.job_id));
        /* the text as a string where it is UTF-8 (null elsewhere), and its bytes */
        json_object_set_new(o, "text", json_stringn((const char *)resp->text.data,
                                                    resp->text.len) ?: json_null());
        for (size_t i = 0; i < resp->text.len; i++)
            json_array_append_new(bytes, json_integer(resp->text.data[i]));
        json_object_set_new(o, "bytes", bytes);
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
    } else if (write_out(req.prompt.data, req.prompt.len) ||
               write_out(resp->text.data, resp->text.len) || printf("\n") < 0) {
        goto out;
    }
    rc = PCTL_EXIT_OK;
out:
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(pbuf);
    return rc;
}
