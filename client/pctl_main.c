/* pctl_main.c: entry point of pctl, the parallax command-line client.
 *
 * `pctl [--server ADDR] [--timeout MS] <command> [args]`. The server
 * defaults to $PX_SERVER, else the local daemon's unix socket
 * ($PX_RUNTIME_DIR/control.sock, /run/parallax by default) when it exists,
 * else 127.0.0.1:7070; "unix:/path" works too.
 * This file holds the command table, the help texts, number parsing, and the
 * one place RPC failures are printed ("pctl: <command>: <STATUS>: <message>").
 * Single-threaded; every RPC is a blocking px_rpc call with a deadline. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>

#include "jobcfg.h"
#include "pctl.h"
#include "px_env.h"

#define PCTL_DEFAULT_SERVER "127.0.0.1:7070"
#define PCTL_STR_(x) #x
#define PCTL_STR(x) PCTL_STR_(x) /* a number macro as a string literal */
#define PCTL_DEFAULT_TIMEOUT_MS 5000

static const pctl_command_t commands[] = {
    {"submit", "submit a training job (Control.SubmitJob)",
     "usage: pctl submit --data FILE [--name S] [--layers N] [--heads N] [--dim N] [--seq N]\n"
     "                   [--vocab N] [--dp N] [--tp N] [--pp N] [--cp N] [--ep N]\n"
     "                   [--sequence-parallel] [--micro-batches M]\n"
     "                   [--schedule gpipe|1f1b|zb1|interleaved] [--virtual-stages V]\n"
     "                   [--stage-layers 2,2,1,1]\n"
     "                   [--experts E [--top-k 1|2] [--capacity-factor F | --dropless]\n"
     "                    [--moe-every N] [--aux-loss-coef C]]\n"
     "                   [--precision fp32|bf16] [--devices cpu|cuda|sim|KIND:I[,J..]]\n"
     "                   [--batch N] [--steps N] [--lr F] [--seed N] [--warmup N]\n"
     "                   [--weight-decay F] [--min-lr-ratio F] [--zero 0-3] [--grad-accum N]\n"
     "                   [--layout auto [--cluster FILE|PRESET]]\n"
     "                   [--clip F] [--bucket-mb F]\n"
     "                   [--checkpoint-every N --checkpoint-dir DIR] [--resume DIR]\n"
     "                   [--export-safetensors FILE] [--init-from PATH] [--export-hf DIR]\n"
     "                   [--tensorboard DIR] [--max-restarts N] [--follow] [--json]\n"
     "                   [--val-data FILE | --no-val] [--eval-every N] [--eval-batches K]\n"
     "                   [--dry-run]\n"
     "\n"
     "Submits a GPT training job and prints its id.\n"
     "  --data FILE        token file (llm.c layout, see `pctl data prepare`); sent as an\n"
     "                     absolute path, so it must exist where the ranks run\n"
     "  --name S           job name, unique among the cluster's active jobs: letters, digits,\n"
     "                     '.', '_', '-', at most 64 (default: the job id)\n"
     "  --layers N         transformer blocks (default 4)\n"
     "  --heads N          attention heads (default 4)\n"
     "  --dim N            model width (default 128)\n"
     "  --seq N            sequence length in tokens (default 128)\n"
     "  --vocab N          token ids (default " PCTL_STR(PX_DEFAULT_VOCAB) ", bytes, or the vocab a data\n"
     "                     file of `pctl data prepare --tokenizer` records); every token\n"
     "                     of the data file must be below it\n"
     "  --dp N             data-parallel degree (default 1)\n"
     "  --tp N --pp N --cp N --ep N  tensor, pipeline, context and expert parallel\n"
     "                     degrees (default 1); the job runs dp x tp x pp x cp ranks,\n"
     "                     each tensor group on one node (`pctl status` shows the layout)\n"
     "  --sequence-parallel  split the activations between the tensor-parallel matrices\n"
     "                     along the sequence (Megatron-LM); seq divisible by tp\n"
     "  --micro-batches M  pipeline (pp > 1): micro-batches per step (per grad-accum\n"
     "                     part); --schedule gpipe|1f1b|zb1|interleaved (default 1f1b)\n"
     "  --virtual-stages V interleaved 1F1B: model chunks per stage (>= 2; layers\n"
     "                     divisible by pp x V, M a multiple of pp)\n"
     "  --stage-layers L,L,..  layers of each pipeline stage, first to last (pp values\n"
     "                     summing to --layers; default: as even as possible)\n"
     "  --experts E        mixture of experts: every N-th block (--moe-every N, default\n"
     "                     1) has E MLP experts, each token routed to --top-k (1|2, default\n"
     "                     2) of them; E/ep experts per rank of the --ep group; expert\n"
     "                     capacity ceil(tokens x k / E x F), --capacity-factor F\n"
     "                     (default 1.25), overflow dropped unless --dropless; Switch's\n"
     "                     load-balancing loss x --aux-loss-coef (default 0.01)\n"
     "  --precision P      fp32 (default) or bf16: bf16 GEMM and attention operands\n"
     "                     with fp32 accumulation, fp32 weights, optimizer and the rest\n"
     "                     (on CPU about 3x slower than fp32)\n"
     "  --devices D        run only on these devices of each node: a kind (cpu, cuda,\n"
     "                     sim) or KIND:I[,J...] (sim:0,1), comma-separated (default:\n"
     "                     any free device; `pctl nodes` lists them)\n"
     "  --batch N          GLOBAL batch in sequences, divisible by dp x grad-accum\n"
     "                     (default 16)\n"
     "  --steps N          optimizer steps (default 300)\n"
     "  --lr F             peak learning rate (default 2e-3)\n"
     "  --seed N           initialisation and data seed (default 1337)\n"
     "  --warmup N         linear warmup steps (default 0: the daemon uses steps/20)\n"
     "  --weight-decay F   AdamW decoupled weight decay (default 0.1)\n"
     "  --min-lr-ratio F   cosine floor as a fraction of lr (default 0.1)\n"
     "  --zero Z           ZeRO stage: 0 replicate, 1 shard optimizer state, 2 also\n"
     "                     gradients, 3 also parameters (FSDP) (default 0)\n"
     "  --grad-accum N     micro-batches per step; batch divisible by dp x N (default 1)\n"
     "  --clip F           clip the global gradient norm at F; 0 = off (default 1.0);\n"
     "                     also --grad-clip, as parallax-rank calls it\n"
     "  --bucket-mb F      data-parallel gradient bucket in MiB, each all-reduced while\n"
     "                     backward goes on (as DDP's bucket_cap_mb); 0 = DDP's 25 MiB\n"
     "                     spread evenly over the fewest buckets (default 0)\n"
     "  --checkpoint-every N  write DIR/step_<N>/ every N steps and at the end (each\n"
     "                     rank its shard); --checkpoint-dir DIR says where\n"
     "  --resume DIR       start from checkpoint DIR (a step_<N>/ directory), also with\n"
     "                     another dp or ZeRO stage (the shards are re-cut)\n"
     "  --export-safetensors FILE  write the final weights as one safetensors file\n"
     "  --init-from PATH   start from Hugging Face GPT-2 weights: a directory with\n"
     "                     config.json and model.safetensors (transformers'\n"
     "                     save_pretrained), or the .safetensors file; its n_layer,\n"
     "                     n_head, n_embd, n_positions and vocab_size must be --layers,\n"
     "                     --heads, --dim, --seq and --vocab; with --experts each\n"
     "                     expert starts as its layer's MLP\n"
     "  --export-hf DIR    write the final weights as a Hugging Face GPT-2 (config.json\n"
     "                     + model.safetensors, for GPT2LMHeadModel.from_pretrained)\n"
     "  --tensorboard DIR  rank 0 writes TensorBoard event files into DIR/<job id>/\n"
     "                     while the job trains (train/loss, val/loss, train/lr,\n"
     "                     train/grad_norm, train/tokens_per_second, train/mfu where\n"
     "                     the device's peak is known); without it the\n"
     "                     daemon's tensorboard-dir (default STATE/tensorboard)\n"
     "  --max-restarts N   when the job fails (a rank or a node died), submit it again\n"
     "                     from the newest complete checkpoint in --checkpoint-dir, up\n"
     "                     to N times (0..100, default 0)\n"
     "  --val-data FILE    validation token file (default: the FILE_val.bin beside\n"
     "                     --data that `pctl data prepare --val-fraction` writes, when it\n"
     "                     exists); --no-val: none\n"
     "  --eval-every N     validation loss every N steps and after the last (default\n"
     "                     steps/10; 0: after the last only)\n"
     "  --eval-batches K   fixed validation batches of --batch sequences (default 4)\n"
     "  --layout auto      choose the layout: the fastest that `pctl plan --search`\n"
     "                     finds on the free devices the daemon reports (--devices\n"
     "                     filters them), fitting their memory; the layout flags given\n"
     "                     (dp, tp, pp, cp, ep, zero, sequence parallelism, grad-accum,\n"
     "                     micro-batches, schedule, virtual stages) are replaced, and\n"
     "                     the choice is printed on stderr\n"
     "  --cluster C        with --layout auto: the device and link rates (an INI file\n"
     "                     or preset, as pctl plan --cluster; its node counts are the\n"
     "                     daemon's); default the cpu preset, h100-sxm for cuda devices\n"
     "  --dry-run          check the job with the daemon's validator here and submit\n"
     "                     nothing: \"valid\" (exit 0) or the rule it breaks (exit 2);\n"
     "                     placement and memory are checked when it is submitted\n"
     "  --follow           watch the job until it ends; exit 0 only if it completed\n"
     "  --json             print {\"job_id\": ...} (with --follow: the final job)\n",
     pctl_cmd_submit},
    {"list", "list jobs",
     "usage: pctl list [--json] [--strict]\n"
     "\n"
     "Lists all jobs: id, name, state, step/steps, loss, tokens/s, age.\n"
     "The daemon asks every node for the jobs it coordinates; a node that did not\n"
     "answer (or is DOWN) is named on stderr (\"partial listing: node B ...\") and its\n"
     "jobs are missing from the table or JSON array.\n"
     "  --json     print the jobs as a JSON array\n"
     "  --strict   exit 1 when the listing is partial (default: 0)\n",
     pctl_cmd_list},
    {"status", "show one job",
     "usage: pctl status JOB [--json]\n"
     "\n"
     "JOB: a job's id, or the --name it was submitted with.\n"
     "Shows a job: state, reason, progress, loss, rates, spec, its layout and its ranks:\n"
     "per rank its coordinates (dp, tp, pp, cp, ep), node and device; the rank marked *\n"
     "reports the job's step figures (the last pipeline stage's first tensor rank).\n",
     pctl_cmd_status},
    {"watch", "follow a job until it ends",
     "usage: pctl watch JOB [--json]\n"
     "\n"
     "JOB: a job's id, or the --name it was submitted with.\n"
     "Follows a job (Control.WatchJob) with a progress line until it ends; falls back\n"
     "to polling if the stream breaks. Exit 0 only if the job completed.\n",
     pctl_cmd_watch},
    {"metrics", "per-step metrics of a job",
     "usage: pctl metrics JOB [JOB...] [--json | --csv | --tensorboard DIR |\n"
     "                    --plot [--log] [--width N]\n"
     "                    [--height N]] [--from-json FILE]\n"
     "\n"
     "JOB: a job's id, or the --name it was submitted with.\n"
     "Prints step, loss, validation loss, grad norm, lr and tokens/s of every recorded\n"
     "step (the validation loss after the steps that were followed by one).\n"
     "  --csv         the same as comma-separated values, one row per job and step\n"
     "  --plot        the training loss (a line) and validation loss (markers) over the\n"
     "                steps in the terminal, every JOB overlaid; --log: log-scale loss;\n"
     "                --width (default: the terminal's) and --height (16) in characters\n"
     "  --json        an array of steps; several jobs: an object of arrays by job id\n"
     "  --from-json FILE  read what --json printed instead of asking the daemon\n"
     "  --tensorboard DIR  write TensorBoard event files, one run per job (DIR/JOB/):\n"
     "                train/loss, train/grad_norm, train/lr, train/tokens_per_second,\n"
     "                val/loss, train/mfu (steps with an MFU); then `tensorboard --logdir DIR`\n",
     pctl_cmd_metrics},
    {"logs", "output of a job's rank",
     "usage: pctl logs JOB [--rank R] [--tail N]\n"
     "\n"
     "JOB: a job's id, or the --name it was submitted with.\n"
     "Prints the captured stdout/stderr of rank R (default 0); --tail N: the last N lines.\n",
     pctl_cmd_logs},
    {"sample", "text generated from a trained job's weights",
     "usage: pctl sample JOB [--prompt TEXT | --prompt-file FILE] [--tokens N]\n"
     "                   [--temperature T] [--top-k K] [--seed S] [--checkpoint STEP]\n"
     "                   [--json]\n"
     "\n"
     "JOB: a job's id, or the --name it was submitted with.\n"
     "Generates N tokens (default 256, at most 4096) after the prompt from the job's\n"
     "final weights (a COMPLETED job's: its --export-safetensors file, else the export\n"
     "its daemon keeps in state-dir/jobs/JOB/weights.safetensors on rank 0's node), or\n"
     "from its checkpoint step_STEP (--checkpoint, any state), on a free device of\n"
     "that node, and prints the prompt and the text: bytes for vocab 256, else coded\n"
     "by the tokenizer beside the job's --data (pctl data prepare --tokenizer copies it\n"
     "there: book.bin -> book.tokenizer.json), whose vocab must be the job's.\n"
     "The context is the prompt and the text so far, cropped to the job's --seq.\n"
     "  --temperature T  0: greedy (the most likely token); else the softmax of the\n"
     "                   logits / T (default 1.0)\n"
     "  --top-k K        draw from the K most likely tokens only (default: all)\n"
     "  --seed S         the draws' seed (default 1337): the same seed, the same text\n"
     "  --json           the text, its bytes, the node, device, weights and seconds\n"
     "The run has 120 s (pctl --timeout MS above 150000: MS - 30 s).\n",
     pctl_cmd_sample},
    {"cancel", "cancel a job",
     "usage: pctl cancel JOB [--json]\n"
     "\n"
     "JOB: a job's id, or the --name it was submitted with.\n"
     "Cancels a job: its ranks are stopped and it ends CANCELLED.\n",
     pctl_cmd_cancel},
    {"nodes", "list the cluster's nodes",
     "usage: pctl nodes [--json]\n"
     "\n"
     "Lists nodes: name, control and peer addresses, alive, state, devices free/total,\n"
     "the OpenBLAS core its ranks run (BLAS; --json: blas_core, blas_core_source).\n"
     "STATE: UP; DRAINING (`pctl node drain`, jobs still run there); DRAINED\n"
     "(draining, nothing runs there); STOPPING; DOWN (not heard from).\n",
     pctl_cmd_nodes},
    {"node", "drain, resume or stop a node",
     "usage: pctl node drain|resume|stop NODE [--json]\n"
     "\n"
     "NODE: a node's name as `pctl nodes` lists it; any daemon of the cluster relays\n"
     "the request to it.\n"
     "  drain    no new ranks are placed on NODE (by any daemon); the jobs running\n"
     "           there go on to their end. `pctl nodes` shows it DRAINING, then\n"
     "           DRAINED once none runs there. The node keeps the state across\n"
     "           restarts of its daemon.\n"
     "  resume   jobs are placed on NODE again.\n"
     "  stop     NODE's daemon stops as on SIGTERM: its ranks first (their jobs end\n"
     "           as when a rank is killed), then it exits 0.\n"
     "Prints the node's state after the change (--json: as `pctl nodes --json`).\n",
     pctl_cmd_node},
    {"mem", "memory per rank of a job, by category, next to the plan",
     "usage: pctl mem JOB [--json]\n"
     "\n"
     "JOB: a job's id, or the --name it was submitted with.\n"
     "One row per rank, with its dp and tp coordinates in the job's layout (a tensor\n"
     "rank holds its shard of the split tensors): bytes of parameters, gradients,\n"
     "optimizer state, activations, communication buffers and workspace, current\n"
     "and peak, as the rank's memory accounting last reported them, and the plan's\n"
     "prediction (`pctl plan`) of the peak of parameters + gradients + optimizer\n"
     "held at once.\n",
     pctl_cmd_mem},
    {"plan", "memory per rank by ZeRO and pipeline stage, and the parallel layout (local, no "
     "daemon)",
     PCTL_PLAN_USAGE, /* the whole help: pctl_plan_help, from the job flags' table */
     pctl_cmd_plan},
    {"data", "prepare token files (local, no daemon)",
     "usage: pctl data prepare --text IN.txt --out OUT.bin [--val-fraction F]\n"
     "                         [--tokenizer tokenizer.json [--threads N] [--token-bytes 2|4]]\n"
     "\n"
     "Tokenizes text byte by byte (vocab " PCTL_STR(PX_DEFAULT_VOCAB) ") into the llm.c token layout: a 256 x int32\n"
     "header (magic 20240520, version 1, token count) then uint16 tokens.\n"
     "  --val-fraction F   put the last fraction F (0 <= F < 1) of the text (of the\n"
     "                     tokens with --tokenizer) into a validation file next to\n"
     "                     OUT, named with \"_val\" before the extension (OUT_val.bin)\n"
     "  --tokenizer FILE   encode with a Hugging Face tokenizers file instead: a\n"
     "                     byte-level BPE (GPT-2, Llama 3 style; UTF-8 text); prints\n"
     "                     the vocab to submit with (--vocab), which header[3] records;\n"
     "                     copies FILE beside OUT (OUT.tokenizer.json, the extension\n"
     "                     replaced), where pctl sample finds it\n"
     "  --threads N        encoding threads (default: the online cores); the ids do\n"
     "                     not depend on N\n"
     "  --token-bytes B    2: uint16 tokens (version 1; the default while the vocab\n"
     "                     fits), 4: uint32 tokens (version 2; the default past 65,536)\n",
     pctl_cmd_data},
    {"bench", "benchmark a collective on the cluster's ranks (nccl-tests table)",
     "usage: pctl bench [--op OP] [--ranks N] [--min-bytes N] [--max-bytes N] [--dtype T]\n"
     "                  [--redop OP] [--iters N] [--warmup N] [--step-factor 2|4] [--check]\n"
     "                  [--name S] [--json]\n"
     "\n"
     "Runs a benchmark job (kind \"bench\") on N ranks placed like a training job and\n"
     "prints, per size, nccl-tests' columns: size (B), count (elements), type, redop,\n"
     "time (us per collective), algbw and busbw (GB/s; busbw = algbw x bus factor:\n"
     "all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast,\n"
     "reduce 1) and #wrong. Exit 0 only if the job completed and nothing was wrong.\n"
     "  --op OP            all_reduce (default), all_gather, reduce_scatter, all_to_all,\n"
     "                     broadcast, reduce\n"
     "  --ranks N          world size (default 2)\n"
     "  --min-bytes N      first size (default 4K; K/M/G suffixes)\n"
     "  --max-bytes N      last size (default 64M)\n"
     "  --step-factor F    sizes grow x2 (default) or x4\n"
     "  --dtype T          float (default), double, half, bfloat16, int32, int64, uint8\n"
     "  --redop OP         sum (default), prod, min, max, avg\n"
     "  --iters N          timed iterations per size (default 200 below 1 MiB, 20 above)\n"
     "  --warmup N         untimed iterations per size (default 5)\n"
     "  --check            count elements that differ from the exact result\n"
     "  --json             print the job and its rows as one JSON object at the end\n",
     pctl_cmd_bench},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static const pctl_command_t *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

static void print_main_help(FILE *out)
{
    fprintf(out,
            "usage: pctl [--server ADDR] [--timeout MS] <command> [args]\n"
            "\n"
            "parallax command-line client.\n"
            "  --server ADDR   parallaxd Control address, host:port or unix:/path\n"
            "                  (default $PX_SERVER, else the local daemon's socket\n"
            "                  $PX_RUNTIME_DIR/control.sock (PX_RUNTIME_DIR default\n"
            "                  /run/parallax) when it exists, else " PCTL_DEFAULT_SERVER ")\n"
            "  --timeout MS    deadline of each request (default %d)\n"
            "  --token-file F  cluster token file, for a daemon reached over the network\n"
            "                  (default $PX_TOKEN_FILE)\n"
            "  --help          this text; `pctl <command> --help` for a command\n"
            "\n"
            "commands:\n",
            PCTL_DEFAULT_TIMEOUT_MS);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

int pctl_help(const char *cmd)
{
    const pctl_command_t *c = find_command(cmd);
    if (!c) {
        print_main_help(stdout);
        return PCTL_EXIT_OK;
    }
    if (c->run == pctl_cmd_plan) /* generated from the job flags' table */
        return pctl_plan_help();
    fputs(c->usage, stdout);
    return PCTL_EXIT_OK;
}

int pctl_usage_error(const char *cmd, const char *fmt, ...)
{
    const pctl_command_t *c = cmd ? find_command(cmd) : NULL;
    char msg[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap); /* it quotes the user's arguments: escaped */
    va_end(ap);
    fprintf(stderr, "pctl: %s%s%s\n", cmd ? cmd : "", cmd ? ": " : "", pctl_esc(msg));
    if (c) {
        /* The first line of the help is the usage line. */
        const char *nl = strchr(c->usage, '\n');
        fprintf(stderr, "%.*s\n", (int)(nl ? nl - c->usage : (long)strlen(c->usage)), c->usage);
    } else {
        fprintf(stderr, "usage: pctl [--server ADDR] [--timeout MS] <command> [args]"
                        " (pctl --help lists the commands)\n");
    }
    return PCTL_EXIT_USAGE;
}

int pctl_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t min, uint64_t max,
                   uint64_t *out_p)
{
    char *end;
    unsigned long long v;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        goto bad;
    v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        goto bad;
    *out_p = v;
    return 0;
bad:
    pctl_usage_error(cmd, "invalid value '%s' for %s (expected an integer in [%llu, %llu])",
                     s ? s : "", flag, (unsigned long long)min, (unsigned long long)max);
    return -1;
}

int pctl_parse_float(const char *cmd, const char *flag, const char *s, double min, double max,
                     double *out_p)
{
    char *end;
    double v;
    errno = 0;
    if (!s || !*s)
        goto bad;
    v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max)
        goto bad;
    *out_p = v;
    return 0;
bad:
    pctl_usage_error(cmd, "invalid value '%s' for %s (expected a number in [%g, %g])",
                     s ? s : "", flag, min, max);
    return -1;
}

/* --token-file / $PX_TOKEN_FILE: the cluster token sent with every call as
 * "x-parallax-token" (parallaxd wants it on Control calls that do not come
 * over its unix socket or loopback; see daemon/auth.c). */
static const char *token_file;

/* Reads the token (first line, trimmed) into a malloc'd string. NULL with a
 * message on stderr when the file cannot be read or is empty. */
static char *read_token(const char *path)
{
    char *t = px_rpc_read_file(path, 4096), *start, *end;
    if (!t) {
        fprintf(stderr, "pctl: --token-file %s: %s\n", path,
                errno == EFBIG ? "larger than 4096 bytes" : strerror(errno));
        return NULL;
    }
    start = t + strspn(t, " \t\r\n");
    end = start + strcspn(start, "\r\n");
    while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end == start) {
        fprintf(stderr, "pctl: --token-file %s: empty\n", path);
        free(t);
        return NULL;
    }
    memmove(t, start, (size_t)(end - start));
    t[end - start] = '\0';
    return t;
}

px_rpc_channel_t *pctl_channel(pctl_ctx_t *ctx)
{
    char *token;
    if (ctx->channel)
        return ctx->channel;
    if (px_rpc_channel_create(ctx->server, &ctx->channel) != PX_OK) {
        ctx->channel = NULL;
        return NULL;
    }
    if (token_file && *token_file) {
        token = read_token(token_file);
        if (!token || px_rpc_channel_set_metadata(ctx->channel, "x-parallax-token", token) !=
                          PX_OK) {
            if (token)
                fprintf(stderr, "pctl: --token-file %s: the token must be printable text\n",
                        token_file);
            free(token);
            px_rpc_channel_destroy(ctx->channel);
            ctx->channel = NULL;
            exit(PCTL_EXIT_USAGE);
        }
        free(token);
    }
    return ctx->channel;
}

/* A failure that means no daemon answered at all (connection refused, no
 * socket file, name not resolved), as opposed to an UNAVAILABLE status a
 * daemon sent ("not enough free devices"). */
static int is_unreachable(grpc_status_code code, const char *message)
{
    static const char *const hints[] = {
        "failed to connect", "Failed to connect", "Connection refused",
        "No such file",      "DNS resolution failed", "Socket closed",
    };
    if (code != GRPC_STATUS_UNAVAILABLE)
        return 0;
    if (!message || !*message)
        return 1;
    for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
        if (strstr(message, hints[i]))
            return 1;
    return 0;
}

void pctl_print_rpc_error(pctl_ctx_t *ctx, const char *cmd, grpc_status_code code,
                          const char *message)
{
    /* a daemon that answered (our channel to it is up) reached us: its
     * UNAVAILABLE about another node ("job J's coordinator, node B, did
     * not answer ... Connection refused") is its answer, not ours */
    int connected = ctx->channel && px_rpc_channel_is_connected(ctx->channel);
    if ((is_unreachable(code, message) && !connected) ||
        (code == GRPC_STATUS_DEADLINE_EXCEEDED && ctx->channel && !connected)) {
        fprintf(stderr, "pctl: %s: cannot reach parallaxd at %s (%s: %s)\n", cmd,
                pctl_esc(ctx->server), pctl_code_name(code), pctl_esc(message));
        return;
    }
    fprintf(stderr, "pctl: %s: %s: %s%s\n", cmd, pctl_code_name(code), pctl_esc(message),
            code == GRPC_STATUS_DEADLINE_EXCEEDED ? " (parallaxd did not answer in time)" : "");
}

int pctl_call(pctl_ctx_t *ctx, const char *cmd, const char *method,
              const ProtobufCMessage *request, const ProtobufCMessageDescriptor *resp_desc,
              ProtobufCMessage **resp_p)
{
    px_rpc_channel_t *ch = pctl_channel(ctx);
    px_rpc_result_t res = {GRPC_STATUS_OK, NULL};
    px_status_t status;

    if (!ch) {
        fprintf(stderr, "pctl: %s: bad server address '%s'\n", cmd, ctx->server);
        return -1;
    }
    status = px_rpc_call_unary(ch, method, request, resp_desc, ctx->timeout_ms, resp_p, &res);
    if (status != PX_OK) {
        pctl_print_rpc_error(ctx, cmd, res.code, res.message);
        free(res.message);
        return -1;
    }
    free(res.message);
    return 0;
}

/* The server with neither --server nor PX_SERVER (as docker and systemctl
 * find their daemons): the local parallaxd's control socket in the
 * standard runtime directory when a socket is there, else TCP on
 * loopback. `buf` holds the unix target. */
static const char *local_server(char *buf, size_t len)
{
    struct stat st;
    const char *dir = px_env_str("PX_RUNTIME_DIR");
    int n = snprintf(buf, len, "unix:%s/control.sock", *dir ? dir : "/run/parallax");
    if (n > 0 && (size_t)n < len && stat(buf + 5, &st) == 0 && S_ISSOCK(st.st_mode))
        return buf;
    return PCTL_DEFAULT_SERVER;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"timeout", required_argument, NULL, 't'},
        {"token-file", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    pctl_ctx_t ctx = {NULL, PCTL_DEFAULT_TIMEOUT_MS, NULL};
    const pctl_command_t *c;
    const char *env = getenv("PX_SERVER");
    uint64_t v;
    int opt, rc;

    char local[PATH_MAX + 16];
    ctx.server = (env && *env) ? env : local_server(local, sizeof(local));
    token_file = getenv("PX_TOKEN_FILE");
    /* "+": stop at the command name; its own options follow it. */
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (opt) {
        case 's':
            if (!*optarg)
                return pctl_usage_error(NULL, "empty value for --server");
            ctx.server = optarg;
            break;
        case 't':
            if (pctl_parse_u64(NULL, "--timeout", optarg, 1, 3600 * 1000, &v))
                return PCTL_EXIT_USAGE;
            ctx.timeout_ms = (int)v;
            break;
        case 'T':
            token_file = optarg;
            break;
        case 'h':
            print_main_help(stdout);
            return PCTL_EXIT_OK;
        case ':':
            return pctl_usage_error(NULL, "option %s needs a value", argv[optind - 1]);
        default:
            return pctl_usage_error(NULL, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return pctl_usage_error(NULL, "no command given");
    c = find_command(argv[optind]);
    if (!c) {
        if (!strcmp(argv[optind], "help"))
            return pctl_help(optind + 1 < argc ? argv[optind + 1] : "");
        return pctl_usage_error(NULL, "unknown command '%s'", argv[optind]);
    }
    argc -= optind;
    argv += optind;
    optind = 0; /* re-initialise getopt for the command's own options */
    rc = c->run(&ctx, argc, argv);
    px_rpc_channel_destroy(ctx.channel);
    return rc;
}
