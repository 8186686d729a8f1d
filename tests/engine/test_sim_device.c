/* test_sim_device.c: the simulated device (kernels/px_kernels_sim.h) itself.
 *
 * Checks, in order:
 *   - "sim" without PX_SIM_DEVICE=1 is INVALID_ARGUMENT naming the device
 *     and the variable (in a child, before the variable is read and cached);
 *   - with it: the table is "sim"; its memory is device memory for
 *     px_kernels_is_device_ptr (host memory is not);
 *   - a host read of a device tensor kills a child with SIGSEGV, and the
 *     message names the device memory touched; a write likewise;
 *   - ops give the CPU table's results bit for bit (matmul, LayerNorm,
 *     GELU, residual, sumsq, AdamW on the same bytes);
 *   - allocations are zero-filled, also after a free and a reuse; mem_info
 *     counts the bytes in use;
 *   - staging copies (mem_copy_async) land only at copy_wait: the host
 *     buffer is unchanged before it, as a copy engine's may be;
 *   - copies to host without a wait (mem_copy_to_host_async) land only at
 *     synchronize, with the source's bytes as of their issue.
 * usage: test_sim_device */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "px_kernels.h"
#include "px_kernels_select.h"

#include "../px_check.h"

/* Runs fn in a child with stderr to a pipe: its wait status, its stderr in buf. */
static int in_child(void (*fn)(void *), void *arg, char *buf, size_t len)
{
    int fd[2];
    if (pipe(fd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < len && (k = read(fd[0], buf + got, len - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static void select_without_env(void *arg)
{
    (void)arg;
    const px_kernel_ops_t *ops = NULL;
    char err[256];
    px_status_t s = px_kernels_select("sim", &ops, err, sizeof err);
    fprintf(stderr, "%d %s\n", (int)s, err);
    _exit(s == PX_ERR_INVALID_ARGUMENT ? 0 : 1);
}

static void host_read(void *p)
{
    volatile float x = *(volatile float *)p;
    (void)x;
}

static void host_write(void *p)
{
    *(volatile float *)p = 1.0f;
}

static void fill(float *h, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        h[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 997.0f;
    }
}

/* a device tensor holding host[0, n) */
static float *upload(const px_kernel_ops_t *k, const float *host, size_t n)
{
    float *d = k->mem_alloc(n * sizeof(float));
    if (d)
        k->mem_copy_from_host(d, host, n * sizeof(float));
    return d;
}

static int same(const px_kernel_ops_t *k, const float *dev, const float *host, size_t n)
{
    float *h = malloc(n * sizeof(float));
    k->mem_copy_to_host(h, dev, n * sizeof(float));
    int eq = !memcmp(h, host, n * sizeof(float));
    free(h);
    return eq;
}

/* How a child that touched the closed arena ends: killed by SIGSEGV once
 * the backend's handler has printed and handed the signal on, or, in a
 * sanitizer build (whose SEGV handler was the one installed before ours),
 * exited non-zero by that handler's report. */
static int died_of_touch(int st)
{
    return (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
}

int main(void)
{
    char out[8192];
    unsetenv("PX_SIM_DEVICE");
    int st = in_child(select_without_env, NULL, out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "device 'sim'") &&
              strstr(out, "PX_SIM_DEVICE=1"),
          "sim without PX_SIM_DEVICE=1 not refused naming both: %s", out);

    setenv("PX_SIM_DEVICE", "1", 1);
    const px_kernel_ops_t *k = NULL, *cpu = px_kernels_cpu();
    char err[256];
    if (px_kernels_select("sim:0", &k, err, sizeof err) != PX_OK) {
        fprintf(stderr, "FAIL: sim:0: %s\n", err);
        return 1;
    }
    CHECK(!strcmp(k->name, "sim"), "table name %s", k->name);

    const int N = 24, C = 40, OC = 56;
    float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C),
          *b = malloc(sizeof(float) * OC), *y = calloc((size_t)N * OC, sizeof(float));
    fill(x, (size_t)N * C, 1);
    fill(w, (size_t)OC * C, 2);
    fill(b, OC, 3);
    float *dx = upload(k, x, (size_t)N * C), *dw = upload(k, w, (size_t)OC * C),
          *db = upload(k, b, OC), *dy = k->mem_alloc(sizeof(float) * N * OC);
    CHECK(dx && dw && db && dy, "allocation failed");
    CHECK(px_kernels_is_device_ptr(dx) && px_kernels_is_device_ptr(dy + 5),
          "arena pointers are not device memory");
    CHECK(!px_kernels_is_device_ptr(x), "a malloc pointer is device memory");

    /* host touches die, naming what they touched */
    st = in_child(host_read, dx, out, sizeof out);
    CHECK(died_of_touch(st) && strstr(out, "host code touched device memory"),
          "a host read of a device tensor did not fail as it should (status %d): %s", st, out);
    st = in_child(host_write, dy + 7, out, sizeof out);
    CHECK(died_of_touch(st) && strstr(out, "host code touched device memory"),
          "a host write survived (status %d): %s", st, out);

    /* ops: the CPU table's bits */
    k->matmul_forward(dy, dx, dw, db, N, C, OC);
    cpu->matmul_forward(y, x, w, b, N, C, OC);
    CHECK(same(k, dy, y, (size_t)N * OC), "matmul_forward differs from cpu");
    float *lo = malloc(sizeof(float) * N * C), *mean = malloc(sizeof(float) * N),
          *rstd = malloc(sizeof(float) * N);
    float *dlo = k->mem_alloc(sizeof(float) * N * C), *dmean = k->mem_alloc(sizeof(float) * N),
          *drstd = k->mem_alloc(sizeof(float) * N);
    k->layernorm_forward(dlo, dmean, drstd, dx, dw, db, N, C);
    cpu->layernorm_forward(lo, mean, rstd, x, w, b, N, C);
    CHECK(same(k, dlo, lo, (size_t)N * C) && same(k, drstd, rstd, N),
          "layernorm_forward differs from cpu");
    k->gelu_forward(dlo, dx, (size_t)N * C);
    cpu->gelu_forward(lo, x, (size_t)N * C);
    CHECK(same(k, dlo, lo, (size_t)N * C), "gelu_forward differs from cpu");
    k->residual_forward(dlo, dlo, dx, (size_t)N * C);
    cpu->residual_forward(lo, lo, x, (size_t)N * C);
    CHECK(same(k, dlo, lo, (size_t)N * C), "residual_forward differs from cpu");
    CHECK(k->sumsq(dlo, (size_t)N * C) == cpu->sumsq(lo, (size_t)N * C), "sumsq differs");
    float *m = calloc((size_t)N * C, sizeof(float)), *v = calloc((size_t)N * C, sizeof(float));
    float *dm = k->mem_alloc(sizeof(float) * N * C), *dv = k->mem_alloc(sizeof(float) * N * C);
    k->adamw_update(dlo, dx, dm, dv, (size_t)N * C, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.5f);
    cpu->adamw_update(lo, x, m, v, (size_t)N * C, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.5f);
    CHECK(same(k, dlo, lo, (size_t)N * C) && same(k, dv, v, (size_t)N * C),
          "adamw_update differs from cpu");

    /* zero-filled, after a free too; mem_info counts */
    uint64_t used0 = 0, total = 0, used1 = 0;
    CHECK(k->mem_info && k->mem_info(&used0, &total) == PX_OK && total > 0, "mem_info");
    k->mem_free(dm);
    k->mem_info(&used1, &total);
    CHECK(used1 + (uint64_t)N * C * sizeof(float) <= used0, "mem_info did not fall after a free: "
          "%llu -> %llu", (unsigned long long)used0, (unsigned long long)used1);
    float *again = k->mem_alloc(sizeof(float) * N * C), *zeros = calloc((size_t)N * C, 4);
    CHECK(again && same(k, again, zeros, (size_t)N * C), "a reused block is not zero-filled");

    /* staging copies land at copy_wait */
    float h[4] = {0, 0, 0, 0};
    CHECK(k->mem_copy_async && k->copy_wait, "no asynchronous copies");
    uint64_t t = k->mem_copy_async(h, dx, sizeof h, 1);
    CHECK(t > 0 && h[0] == 0.0f && h[3] == 0.0f, "the copy landed before copy_wait");
    k->copy_wait(t);
    CHECK(!memcmp(h, x, sizeof h), "the copy did not land at copy_wait");
    float h2[4] = {9, 8, 7, 6};
    t = k->mem_copy_async(again, h2, sizeof h2, 0);
    k->synchronize();
    CHECK(same(k, again, h2, 4), "synchronize did not finish a staging copy");

    /* copies to host without a wait land at synchronize, with the bytes of
     * the moment they were issued (stream order), not later writes' */
    float h3[4] = {0, 0, 0, 0}, h4[4] = {1, 2, 3, 4};
    CHECK(k->mem_copy_to_host_async, "no mem_copy_to_host_async");
    k->mem_copy_to_host_async(h3, again, sizeof h3);
    k->mem_copy_from_host(again, h4, sizeof h4); /* a later op overwrites the source */
    CHECK(h3[0] == 0.0f && h3[3] == 0.0f, "a copy to host landed before synchronize");
    k->synchronize();
    CHECK(!memcmp(h3, h2, sizeof h3), "after synchronize the copy to host holds %g %g %g %g, "
          "want the bytes at its issue, 9 8 7 6", h3[0], h3[1], h3[2], h3[3]);

    float *dev[] = {dx, dw, db, dy, dlo, dmean, drstd, dv, again};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        k->mem_free(dev[i]);
    free(x), free(w), free(b), free(y), free(lo), free(mean), free(rstd), free(m), free(v),
        free(zeros);
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
