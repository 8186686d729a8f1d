/* bench_cpu_steady.c: px-cpu-steady, how steady each CPU's speed is, before
 * trusting a benchmark run on a shared or virtual machine (a tool, not a
 * test).
 *
 * usage: px-cpu-steady [SECONDS]     (default 10)
 * One thread per CPU of the affinity mask, pinned to it, runs the same
 * fixed floating-point loop (64 independent multiply-adds per round, in
 * registers and L1, no memory traffic) and counts rounds per second. Prints
 * each second's rate per CPU relative to the best second seen on any CPU
 * (1.00 = the machine's best), then per CPU its min/median, and the share
 * of seconds in which the CPUs differed by more than 5 %.
 *
 * Why: a data-parallel step ends at the slowest rank's pace, so a rank's
 * "blocked" time is mostly the other ranks' speed difference; on a 2-vCPU
 * VM whose vCPUs each lose up to a third of their speed for seconds at a
 * time, independently, the blocked-time figures of bench_zero.py and the
 * ratios of bench_ddp.py move by tens of points between identical runs.
 * Run it before and after a benchmark; figures taken while it shows
 * differences above a few percent measure the host, not parallax. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CPUS 256
#define MAX_SECONDS 600

typedef struct {
    int cpu;
    int seconds;
    double rate[MAX_SECONDS]; /* rounds per second, second by second */
} worker_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *run(void *arg)
{
    worker_t *w = arg;
    cpu_set_t set;
    float acc[64];
    volatile float x = 1.0f;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
        fprintf(stderr, "px-cpu-steady: cannot pin a thread to CPU %d\n", w->cpu);
    memset(acc, 0, sizeof(acc));
    double t0 = now_s(), tl = t0;
    long rounds = 0;
    int s = 0;
    while (s < w->seconds) {
        float xv = x;
        for (int k = 0; k < 10000; k++)
            for (int j = 0; j < 64; j++)
                acc[j] = acc[j] * 0.999f + xv;
        rounds++;
        double t = now_s();
        if (t - tl >= 1.0) {
            w->rate[s++] = (double)rounds / (t - tl);
            rounds = 0;
            tl = t;
        }
    }
    x = acc[7]; /* keep the loop */
    return NULL;
}

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 10;
    cpu_set_t mask;
    static worker_t w[MAX_CPUS];
    pthread_t th[MAX_CPUS];
    int n = 0;

    if (seconds < 1 || seconds > MAX_SECONDS) {
        fprintf(stderr, "usage: px-cpu-steady [SECONDS 1..%d]\n", MAX_SECONDS);
        return 2;
    }
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
        perror("px-cpu-steady: sched_getaffinity");
        return 1;
    }
    for (int c = 0; c < CPU_SETSIZE && n < MAX_CPUS; c++)
        if (CPU_ISSET(c, &mask)) {
            w[n].cpu = c;
            w[n].seconds = seconds;
            n++;
        }
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, run, &w[i]) != 0) {
            fprintf(stderr, "px-cpu-steady: cannot start a thread\n");
            return 1;
        }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);

    double best = 0.0;
    for (int i = 0; i < n; i++)
        for (int s = 0; s < seconds; s++)
            if (w[i].rate[s] > best)
                best = w[i].rate[s];
    printf("second");
    for (int i = 0; i < n; i++)
        printf("  cpu%-3d", w[i].cpu);
    printf("   (rate / the best second of any CPU)\n");
    int uneven = 0;
    for (int s = 0; s < seconds; s++) {
        double lo = 1e300, hi = 0.0;
        printf("%6d", s + 1);
        for (int i = 0; i < n; i++) {
            double r = w[i].rate[s] / best;
            printf("  %6.2f", r);
            lo = r < lo ? r : lo;
            hi = r > hi ? r : hi;
        }
        uneven += hi > 0.0 && lo / hi < 0.95;
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        double v[MAX_SECONDS];
        memcpy(v, w[i].rate, sizeof(double) * (size_t)seconds);
        qsort(v, (size_t)seconds, sizeof(double), dcmp);
        printf("cpu%d: min %.2f median %.2f of the best\n", w[i].cpu, v[0] / best,
               v[seconds / 2] / best);
    }
    printf("seconds in which the CPUs differed by more than 5%%: %d of %d\n", uneven, seconds);
    return 0;
}
