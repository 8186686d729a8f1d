/* px_kernels_sim.c: the simulated device (px_kernels_sim.h).
 *
 * The table starts as a copy of the CPU table; every op named in SIM_OPS
 * below is replaced by a wrapper that opens the arena (PROT_READ|WRITE),
 * calls the CPU op, and closes it (PROT_NONE) again. A new CPU op is
 * wrapped by adding one line to SIM_OPS (an op not listed still runs, but
 * unwrapped: on arena memory it crashes, which is how a forgotten line
 * shows). Memory ops are the arena's own: a first-fit allocator whose block
 * list lives in host memory (the arena itself is never read to manage it),
 * 256-byte aligned blocks as cudaMalloc gives.
 *
 * Invariants: the arena is PROT_NONE whenever `depth` is 0; ops nest (a
 * wrapped op may call another) and are serialised by one recursive mutex.
 * A SIGSEGV inside the arena prints what was touched and a backtrace, then
 * the default action kills the process. Any thread may call; the engine
 * calls from its main thread. */
#include "px_kernels_sim.h"

#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "px_log.h"

#define SIM_ALIGN 256

typedef struct sim_block {
    size_t off, size;
    int used;
} sim_block_t;

static struct {
    char *base;
    size_t bytes;     /* reserved */
    size_t hiwater;   /* page-rounded end of the highest block ever handed out */
    size_t in_use;    /* bytes allocated now */
    sim_block_t *blk; /* sorted by off, covering [0, bytes) */
    size_t nblk, cap;
    int depth;        /* nesting of open ops */
    pthread_mutex_t lock;
    struct sigaction old_segv;
    /* deferred staging copies (mem_copy_async) */
    struct sim_copy { void *dst; const void *src; size_t bytes; uint64_t ticket; } *q;
    size_t nq, qcap;
    uint64_t next_ticket, done_ticket;
    /* device->host copies without a wait (mem_copy_to_host_async): the
     * bytes as of the issue, in a host snapshot, delivered at synchronize */
    struct sim_d2h { void *dst; void *snap; size_t bytes; } *d2h;
    size_t nd2h, d2hcap;
    px_kernels_sim_counts_t counts;
} sim = {.lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP};

static px_kernel_ops_t sim_ops;
static const px_kernel_ops_t *cpu;

/* ---- the arena's protection ---- */

static void sim_open(void)
{
    pthread_mutex_lock(&sim.lock);
    if (sim.depth++ == 0 && sim.hiwater &&
        mprotect(sim.base, sim.hiwater, PROT_READ | PROT_WRITE)) {
        fprintf(stderr, "sim device: mprotect open: %s\n", strerror(errno));
        abort();
    }
}

static void sim_close(void)
{
    if (--sim.depth == 0 && sim.hiwater && mprotect(sim.base, sim.hiwater, PROT_NONE)) {
        fprintf(stderr, "sim device: mprotect close: %s\n", strerror(errno));
        abort();
    }
    pthread_mutex_unlock(&sim.lock);
}

int px_kernels_sim_is_device_ptr(const void *p)
{
    return sim.base && (const char *)p >= sim.base && (const char *)p < sim.base + sim.bytes;
}

/* SIGSEGV: a touch of the closed arena is the bug this backend exists to
 * find; say where (async-signal-safe writes only), then die of it. */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (px_kernels_sim_is_device_ptr(si->si_addr)) {
        char msg[256];
        size_t off = (size_t)((char *)si->si_addr - sim.base);
        int n = snprintf(msg, sizeof msg, "sim device: host code touched device memory at %p "
                         "(arena offset %zu) outside the op table; backtrace:\n", si->si_addr,
                         off);
        if (n > 0 && write(2, msg, (size_t)n) < 0)
            n = 0;
        void *frames[48];
        backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
    }
    /* not ours or reported: the previous disposition, then the fault again */
    sigaction(sig, &sim.old_segv, NULL);
}

/* ---- wrapped compute ops: one line per op of px_kernel_ops_t ----
 * V(name, (params), (args)) for void ops, R(type, name, (params), (args)). */
#define SIM_OPS(V, R)                                                                          \
    V(encoder_forward, (float *o, const int32_t *i, const float *w, const float *p, int B,      \
                        int T, int C), (o, i, w, p, B, T, C))                                   \
    V(encoder_backward, (float *dw, float *dp, const float *d, const int32_t *i, int B, int T,  \
                         int C), (dw, dp, d, i, B, T, C))                                       \
    V(layernorm_forward, (float *o, float *m, float *r, const float *i, const float *w,         \
                          const float *b, int N, int C), (o, m, r, i, w, b, N, C))              \
    V(layernorm_backward, (float *di, float *dw, float *db, const float *d, const float *i,     \
                           const float *w, const float *m, const float *r, int N, int C),       \
      (di, dw, db, d, i, w, m, r, N, C))                                                        \
    V(matmul_forward, (float *o, const float *i, const float *w, const float *b, int N, int C,  \
                       int OC), (o, i, w, b, N, C, OC))                                         \
    V(matmul_backward, (float *di, float *dw, float *db, const float *d, const float *i,        \
                        const float *w, int N, int C, int OC), (di, dw, db, d, i, w, N, C, OC)) \
    V(matmul_bf16_forward, (float *o, const float *i, const float *w, const float *b, int N,    \
                            int C, int OC), (o, i, w, b, N, C, OC))                             \
    V(matmul_bf16_backward, (float *di, float *dw, float *db, const float *d, const float *i,   \
                             const float *w, int N, int C, int OC),                             \
      (di, dw, db, d, i, w, N, C, OC))                                                          \
    V(attention_forward, (float *o, float *a, const float *i, int B, int T, int C, int NH),     \
      (o, a, i, B, T, C, NH))                                                                   \
    V(attention_backward, (float *di, float *s, const float *d, const float *i, const float *a, \
                           int B, int T, int C, int NH), (di, s, d, i, a, B, T, C, NH))         \
    V(attention_block_forward, (float *o, float *l, const float *q, const float *kv,           \
                                const px_attn_block_t *g, float *s), (o, l, q, kv, g, s))       \
    V(attention_block_backward, (float *dq, float *dkv, const float *d, const float *q,        \
                                 const float *kv, const float *l, const float *de,              \
                                 const px_attn_block_t *g, float *s),                           \
      (dq, dkv, d, q, kv, l, de, g, s))                                                         \
    V(attention_block_delta, (float *de, const float *o, const float *d,                       \
                              const px_attn_block_t *g), (de, o, d, g))                         \
    V(attention_bf16_forward, (float *o, float *a, const float *i, int B, int T, int C,        \
                               int NH), (o, a, i, B, T, C, NH))                                 \
    V(attention_bf16_backward, (float *di, float *s, const float *d, const float *i,           \
                                const float *a, int B, int T, int C, int NH),                   \
      (di, s, d, i, a, B, T, C, NH))                                                            \
    V(attention_block_bf16_forward, (float *o, float *l, const float *q, const float *kv,      \
                                     const px_attn_block_t *g, float *s), (o, l, q, kv, g, s))  \
    V(attention_block_bf16_backward, (float *dq, float *dkv, const float *d, const float *q,   \
                                      const float *kv, const float *l, const float *de,         \
                                      const px_attn_block_t *g, float *s),                      \
      (dq, dkv, d, q, kv, l, de, g, s))                                                         \
    V(matmul_bf16in_forward, (float *o, const uint16_t *i, const float *w, const float *b,     \
                              int N, int C, int OC), (o, i, w, b, N, C, OC))                    \
    V(matmul_bf16in_backward, (float *di, float *dw, float *db, const float *d,                \
                               const uint16_t *i, const float *w, int N, int C, int OC),        \
      (di, dw, db, d, i, w, N, C, OC))                                                          \
    V(bf16_from_f32, (uint16_t *d, const float *s, size_t n), (d, s, n))                        \
    V(bf16_to_f32, (float *d, const uint16_t *s, size_t n), (d, s, n))                          \
    V(gelu_forward, (float *o, const float *i, size_t N), (o, i, N))                            \
    V(gelu_backward, (float *di, const float *i, const float *d, size_t N), (di, i, d, N))      \
    V(residual_forward, (float *o, const float *a, const float *b, size_t N), (o, a, b, N))    \
    V(residual_backward, (float *da, float *db, const float *d, size_t N), (da, db, d, N))     \
    V(crossentropy_forward, (float *l, float *p, const float *lg, const int32_t *t, int N,      \
                             int V, int Vp), (l, p, lg, t, N, V, Vp))                           \
    V(crossentropy_backward, (float *dl, const float *p, const int32_t *t, float d, int N,      \
                              int V, int Vp), (dl, p, t, d, N, V, Vp))                          \
    V(adamw_update, (float *p, const float *g, float *m, float *v, size_t n, float lr,          \
                     float b1, float b2, float eps, float wd, int t, float gs),                 \
      (p, g, m, v, n, lr, b1, b2, eps, wd, t, gs))                                              \
    R(double, sumsq, (const float *x, size_t n), (x, n))                                        \
    V(scale, (float *x, float s, size_t n), (x, s, n))                                          \
    V(encoder_vp_forward, (float *o, const int32_t *i, const float *w, const float *p, int B,   \
                           int T, int C, int v0, int Vl), (o, i, w, p, B, T, C, v0, Vl))        \
    V(encoder_vp_backward, (float *dw, float *dp, const float *d, const int32_t *i, int B,      \
                            int T, int C, int v0, int Vl), (dw, dp, d, i, B, T, C, v0, Vl))     \
    V(crossentropy_vp_max, (float *m, const float *lg, int N, int Vl, int v0, int V),           \
      (m, lg, N, Vl, v0, V))                                                                    \
    V(crossentropy_vp_exp, (double *s, float *p, const float *lg, const float *m,               \
                            const int32_t *t, int N, int Vl, int v0, int V),                    \
      (s, p, lg, m, t, N, Vl, v0, V))                                                           \
    V(crossentropy_vp_finish, (float *l, float *p, const double *s, const float *m, int N,      \
                               int Vl, int v0, int V), (l, p, s, m, N, Vl, v0, V))              \
    V(crossentropy_vp_backward, (float *dl, const float *p, const int32_t *t, float d, int N,   \
                                 int Vl, int v0, int V), (dl, p, t, d, N, Vl, v0, V))           \
    V(bias_forward, (float *o, const float *b, int N, int OC), (o, b, N, OC))                   \
    V(moe_router_forward, (float *p, int32_t *i, float *w, const float *lg, int N, int E,       \
                           int K), (p, i, w, lg, N, E, K))                                      \
    V(moe_router_backward, (float *dl, const float *p, const int32_t *i, const float *w,        \
                            const float *dw, const float *da, int N, int E, int K),             \
      (dl, p, i, w, dw, da, N, E, K))                                                           \
    V(moe_dispatch, (float *d, const float *s, const int32_t *r, int n, int C),                 \
      (d, s, r, n, C))                                                                          \
    V(moe_combine, (float *o, const float *y, const int32_t *r, const float *w,                 \
                    const int32_t *wi, int n, int C), (o, y, r, w, wi, n, C))                   \
    V(moe_combine_backward, (float *dy, float *dw, const float *d, const float *y,              \
                             const int32_t *r, const float *w, const int32_t *wi, int n,        \
                             int C), (dy, dw, d, y, r, w, wi, n, C))

#define SIM_WRAP_VOID(name, params, args)                                                      \
    static void sim_##name params                                                              \
    {                                                                                          \
        sim_open();                                                                            \
        cpu->name args;                                                                        \
        sim_close();                                                                           \
    }
#define SIM_WRAP_RET(type, name, params, args)                                                 \
    static type sim_##name params                                                              \
    {                                                                                          \
        sim_open();                                                                            \
        type r_ = cpu->name args;                                                              \
        sim_close();                                                                           \
        return r_;                                                                             \
    }
SIM_OPS(SIM_WRAP_VOID, SIM_WRAP_RET)

/* ---- the arena's allocator ---- */

/* index of the block starting at `off`, or nblk */
static size_t find_block(size_t off)
{
    size_t lo = 0, hi = sim.nblk;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sim.blk[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sim.nblk && sim.blk[lo].off == off ? lo : sim.nblk;
}

static int grow_blocks(void)
{
    if (sim.nblk < sim.cap)
        return 1;
    size_t cap = sim.cap ? 2 * sim.cap : 64;
    sim_block_t *b = realloc(sim.blk, cap * sizeof(*b));
    if (!b)
        return 0;
    sim.blk = b;
    sim.cap = cap;
    return 1;
}

static void *sim_mem_alloc(size_t bytes)
{
    size_t need = (bytes + SIM_ALIGN - 1) & ~(size_t)(SIM_ALIGN - 1);
    void *p = NULL;
    if (!need)
        return NULL;
    sim_open();
    for (size_t i = 0; i < sim.nblk; i++) {
        sim_block_t *b = &sim.blk[i];
        if (b->used || b->size < need)
            continue;
        if (b->size > need) { /* split: the rest stays free after it */
            if (!grow_blocks())
                break;
            b = &sim.blk[i];
            memmove(&sim.blk[i + 2], &sim.blk[i + 1], (sim.nblk - i - 1) * sizeof(*b));
            sim.blk[i + 1] = (sim_block_t){b->off + need, b->size - need, 0};
            sim.nblk++;
            b->size = need;
        }
        b->used = 1;
        sim.in_use += need;
        size_t end = (b->off + need + 4095) & ~(size_t)4095;
        if (end > sim.hiwater) { /* newly reachable pages: open them as well */
            if (mprotect(sim.base + sim.hiwater, end - sim.hiwater, PROT_READ | PROT_WRITE)) {
                fprintf(stderr, "sim device: mprotect: %s\n", strerror(errno));
                abort();
            }
            sim.hiwater = end;
        }
        p = sim.base + b->off;
        memset(p, 0, need); /* cudaMalloc + memset, as the CUDA table does */
        break;
    }
    sim_close();
    if (!p)
        px_error("sim device: out of arena memory for %zu bytes (%zu of %zu in use; "
                 "PX_SIM_DEVICE_MB)", bytes, sim.in_use, sim.bytes);
    return p;
}

static void sim_mem_free(void *ptr)
{
    if (!ptr)
        return;
    pthread_mutex_lock(&sim.lock);
    size_t i = px_kernels_sim_is_device_ptr(ptr) ? find_block((size_t)((char *)ptr - sim.base))
                                                 : sim.nblk;
    if (i == sim.nblk || !sim.blk[i].used) {
        fprintf(stderr, "sim device: mem_free(%p): not a live device allocation\n", ptr);
        abort(); /* cudaFree of such a pointer fails; a bug either way */
    }
    sim.blk[i].used = 0;
    sim.in_use -= sim.blk[i].size;
    if (i + 1 < sim.nblk && !sim.blk[i + 1].used) { /* merge with the next */
        sim.blk[i].size += sim.blk[i + 1].size;
        memmove(&sim.blk[i + 1], &sim.blk[i + 2], (sim.nblk - i - 2) * sizeof(sim_block_t));
        sim.nblk--;
    }
    if (i > 0 && !sim.blk[i - 1].used) { /* and with the previous */
        sim.blk[i - 1].size += sim.blk[i].size;
        memmove(&sim.blk[i], &sim.blk[i + 1], (sim.nblk - i - 1) * sizeof(sim_block_t));
        sim.nblk--;
    }
    pthread_mutex_unlock(&sim.lock);
}

static void sim_mem_set(void *dst, int byte, size_t bytes)
{
    sim_open();
    memset(dst, byte, bytes);
    sim_close();
}

static void sim_mem_copy(void *dst, const void *src, size_t bytes)
{
    sim_open();
    memcpy(dst, src, bytes);
    sim_close();
}

/* ---- deferred staging copies: run at copy_wait / synchronize ---- */

/* runs every queued copy with a ticket <= upto, in issue order */
static void run_copies(uint64_t upto)
{
    sim_open();
    size_t k = 0;
    while (k < sim.nq && sim.q[k].ticket <= upto) {
        memcpy(sim.q[k].dst, sim.q[k].src, sim.q[k].bytes);
        sim.done_ticket = sim.q[k].ticket;
        k++;
    }
    if (k < sim.nq) /* (the queue is NULL until the first copy: no memmove of NULL) */
        memmove(sim.q, sim.q + k, (sim.nq - k) * sizeof(*sim.q));
    sim.nq -= k;
    sim_close();
}

static uint64_t sim_mem_copy_async(void *dst, const void *src, size_t bytes, int to_host)
{
    (void)to_host;
    uint64_t t = 0;
    pthread_mutex_lock(&sim.lock);
    if (sim.nq == sim.qcap) {
        size_t cap = sim.qcap ? 2 * sim.qcap : 16;
        struct sim_copy *q = realloc(sim.q, cap * sizeof(*q));
        if (q) {
            sim.q = q;
            sim.qcap = cap;
        }
    }
    if (sim.nq < sim.qcap) { /* else 0: the caller copies synchronously */
        t = ++sim.next_ticket;
        sim.q[sim.nq++] = (struct sim_copy){dst, src, bytes, t};
    }
    pthread_mutex_unlock(&sim.lock);
    return t;
}

static void sim_copy_wait(uint64_t ticket)
{
    run_copies(ticket);
}

/* delivers every mem_copy_to_host_async issued so far, in issue order */
static void run_d2h(void)
{
    pthread_mutex_lock(&sim.lock);
    for (size_t i = 0; i < sim.nd2h; i++) {
        memcpy(sim.d2h[i].dst, sim.d2h[i].snap, sim.d2h[i].bytes);
        free(sim.d2h[i].snap);
    }
    sim.nd2h = 0;
    pthread_mutex_unlock(&sim.lock);
}

static void sim_synchronize(void)
{
    pthread_mutex_lock(&sim.lock);
    sim.counts.synchronize++;
    pthread_mutex_unlock(&sim.lock);
    run_copies(UINT64_MAX);
    run_d2h();
}

/* Device -> host without a wait: src is read now (stream order: the ops
 * issued before it have run, later ones have not), into a host snapshot
 * that synchronize delivers to host_dst; until then host_dst keeps its old
 * bytes, as CUDA's pinned staging leaves it. Out of host memory for the
 * snapshot: a synchronous copy (a wait, counted as mem_copy_to_host). */
static void sim_mem_copy_to_host_async(void *host_dst, const void *src, size_t bytes)
{
    void *snap = malloc(bytes ? bytes : 1);
    pthread_mutex_lock(&sim.lock);
    if (snap && sim.nd2h == sim.d2hcap) {
        size_t cap = sim.d2hcap ? 2 * sim.d2hcap : 16;
        struct sim_d2h *q = realloc(sim.d2h, cap * sizeof(*q));
        if (q) {
            sim.d2h = q;
            sim.d2hcap = cap;
        }
    }
    if (!snap || sim.nd2h == sim.d2hcap) {
        pthread_mutex_unlock(&sim.lock);
        free(snap);
        px_error("sim device: no host memory to defer a %zu-byte copy to host: copied "
                 "synchronously", bytes);
        sim_ops.mem_copy_to_host(host_dst, src, bytes);
        return;
    }
    sim_open();
    memcpy(snap, src, bytes);
    sim_close();
    sim.d2h[sim.nd2h++] = (struct sim_d2h){host_dst, snap, bytes};
    sim.counts.to_host_async++;
    pthread_mutex_unlock(&sim.lock);
}

/* to / from the host: synchronous (the CUDA table synchronises its compute
 * stream); queued staging copies are not flushed, as CUDA's copy stream is
 * not waited for there either */
static void sim_mem_copy_to_host(void *host_dst, const void *src, size_t bytes)
{
    sim_open();
    sim.counts.to_host++;
    memcpy(host_dst, src, bytes);
    sim_close();
}

static void sim_mem_copy_from_host(void *dst, const void *host_src, size_t bytes)
{
    sim_open();
    sim.counts.from_host++;
    memcpy(dst, host_src, bytes);
    sim_close();
}

void px_kernels_sim_counts(px_kernels_sim_counts_t *counts_p)
{
    pthread_mutex_lock(&sim.lock);
    *counts_p = sim.counts;
    pthread_mutex_unlock(&sim.lock);
}

/* used: the bytes allocated now; total: the arena */
static px_status_t sim_mem_info(uint64_t *used_p, uint64_t *total_p)
{
    pthread_mutex_lock(&sim.lock);
    *used_p = sim.in_use;
    *total_p = sim.bytes;
    pthread_mutex_unlock(&sim.lock);
    return PX_OK;
}

/* ---- the table ---- */

int px_kernels_sim_enabled(void)
{
    static int cached = -1;
    if (cached < 0) {
        const char *e = getenv("PX_SIM_DEVICE");
        cached = e && !strcmp(e, "1");
    }
    return cached;
}

px_status_t px_kernels_sim_open(const px_kernel_ops_t **ops_p)
{
    pthread_mutex_lock(&sim.lock);
    if (!sim.base) {
        size_t mb = 4096;
        const char *e = getenv("PX_SIM_DEVICE_MB");
        if (e && atol(e) > 0)
            mb = (size_t)atol(e);
        void *base = mmap(NULL, mb << 20, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED || !grow_blocks()) {
            pthread_mutex_unlock(&sim.lock);
            px_error("sim device: cannot reserve a %zu MiB arena: %s", mb, strerror(errno));
            return PX_ERR_NO_MEMORY;
        }
        sim.bytes = mb << 20;
        sim.blk[0] = (sim_block_t){0, sim.bytes, 0};
        sim.nblk = 1;
        cpu = px_kernels_cpu();
        sim_ops = *cpu; /* ops not listed in SIM_OPS run unwrapped */
        sim_ops.name = "sim";
#define SIM_SET_VOID(name, params, args) sim_ops.name = sim_##name;
#define SIM_SET_RET(type, name, params, args) sim_ops.name = sim_##name;
        SIM_OPS(SIM_SET_VOID, SIM_SET_RET)
#undef SIM_SET_VOID
#undef SIM_SET_RET
        sim_ops.mem_alloc = sim_mem_alloc;
        sim_ops.mem_free = sim_mem_free;
        sim_ops.mem_set = sim_mem_set;
        sim_ops.mem_copy = sim_mem_copy;
        sim_ops.mem_copy_to_host = sim_mem_copy_to_host;
        sim_ops.mem_copy_from_host = sim_mem_copy_from_host;
        sim_ops.mem_copy_to_host_async = sim_mem_copy_to_host_async;
        sim_ops.synchronize = sim_synchronize;
        sim_ops.mem_info = sim_mem_info;
        sim_ops.mem_copy_async = sim_mem_copy_async;
        sim_ops.copy_wait = sim_copy_wait;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &sim.old_segv);
        sim.base = base; /* last: is_device says 1 only for a usable arena */
    }
    pthread_mutex_unlock(&sim.lock);
    *ops_p = &sim_ops;
    return PX_OK;
}
