/* test_cpubind.c: --cpu-bind's pure parts (issue 13): the CPU choice of
 * rank/cpubind.h for every mode over allowed sets, local indices and counts;
 * the CPU list format; the job option's names, default, flag and the one
 * validator's message naming a bad value (jobcfg.h). Unit suite. */
#include <stdio.h>
#include <string.h>

#include "cpubind.h"
#include "jobcfg.h"
#include "jobflags.h"

static int failures;

#define EXPECT(cond, ...)                                              \
    do {                                                               \
        if (!(cond)) {                                                 \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                \
            printf(__VA_ARGS__);                                       \
            printf("\n");                                              \
            failures++;                                                \
        }                                                              \
    } while (0)

static void test_choose(void)
{
    const int two[] = {0, 1}, set[] = {2, 3, 6, 7}; /* a cpuset: CPUs 2-3,6-7 */
    const char *why;

    /* none: never */
    EXPECT(px_cpubind_choose(PX_CPU_BIND_NONE, two, 2, 0, 2, &why) == -1 && why,
           "none binds");
    /* auto: rank i of the machine's ranks to the i-th allowed CPU when they fit */
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, two, 2, 0, 2, &why) == 0, "auto 0/2");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, two, 2, 1, 2, &why) == 1, "auto 1/2");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, set, 4, 0, 3, &why) == 2, "auto cpuset 0");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, set, 4, 2, 3, &why) == 6, "auto cpuset 2");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, set, 4, 3, 4, &why) == 7, "auto cpuset 3");
    /* auto: more ranks than CPUs, or a lone rank: not bound, with a reason */
    why = NULL;
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, two, 2, 1, 4, &why) == -1 && why &&
           strstr(why, "more"), "auto 4 ranks on 2 CPUs: %s", why ? why : "(no reason)");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, two, 2, 3, 4, &why) == -1, "auto 3/4");
    why = NULL;
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, two, 2, 0, 1, &why) == -1 && why &&
           strstr(why, "only rank"), "auto lone rank");
    /* a daemon slot (device cpu:K) past the allowed CPUs: not bound */
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, two, 2, 2, 2, &why) == -1, "auto slot 2 of 2 CPUs");
    /* cores: always, in turn when there are more ranks than CPUs */
    EXPECT(px_cpubind_choose(PX_CPU_BIND_CORES, two, 2, 0, 1, &why) == 0, "cores lone rank");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_CORES, two, 2, 3, 4, &why) == 1, "cores 3/4 on 2");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_CORES, set, 4, 5, 8, &why) == 3, "cores 5/8 cpuset");
    /* nonsense: not bound */
    EXPECT(px_cpubind_choose(PX_CPU_BIND_CORES, two, 0, 0, 1, &why) == -1, "no CPUs");
    EXPECT(px_cpubind_choose(PX_CPU_BIND_AUTO, two, 2, -1, 2, &why) == -1, "index -1");
    EXPECT(px_cpubind_choose(7, two, 2, 0, 2, &why) == -1, "mode 7");
}

static void test_format(void)
{
    const int a[] = {0, 1, 2, 3, 6, 8, 9};
    char buf[64], small[8];

    px_cpubind_format(a, 7, buf, sizeof(buf));
    EXPECT(!strcmp(buf, "0-3,6,8-9"), "format '%s'", buf);
    px_cpubind_format(a, 1, buf, sizeof(buf));
    EXPECT(!strcmp(buf, "0"), "format one '%s'", buf);
    px_cpubind_format(a, 0, buf, sizeof(buf));
    EXPECT(!strcmp(buf, ""), "format none '%s'", buf);
    px_cpubind_format(a, 7, small, sizeof(small));
    EXPECT(strlen(small) < sizeof(small) && strstr(small, "..."), "format short '%s'", small);
}

/* a config the validator accepts, but for what the test changes */
static void valid_cfg(px_job_config_t *cfg)
{
    px_job_config_defaults(cfg);
    cfg->layers = 2;
    cfg->heads = 2;
    cfg->dim = 32;
    cfg->seq = 16;
    cfg->batch = 4;
    cfg->steps = 2;
    cfg->data_path = "/nonexistent/tokens.bin"; /* not opened without CHECK_DATA */
}

static int bad_name(void *arg, const char *flag, const char *s)
{
    snprintf((char *)arg, 128, "%s=%s", flag, s);
    return -1;
}

static void test_config(void)
{
    px_job_config_t cfg;
    char err[256], seen[128] = "";
    px_status_t st;
    const px_job_flag_t *flag = NULL;
    const px_job_flag_parsers_t parsers = {NULL, NULL, NULL, bad_name, seen};

    EXPECT(px_job_config_cpu_bind_parse(NULL) == PX_CPU_BIND_AUTO, "NULL");
    EXPECT(px_job_config_cpu_bind_parse("") == PX_CPU_BIND_AUTO, "empty");
    EXPECT(px_job_config_cpu_bind_parse("auto") == PX_CPU_BIND_AUTO, "auto");
    EXPECT(px_job_config_cpu_bind_parse("none") == PX_CPU_BIND_NONE, "none");
    EXPECT(px_job_config_cpu_bind_parse("cores") == PX_CPU_BIND_CORES, "cores");
    EXPECT(px_job_config_cpu_bind_parse("sockets") == -1, "sockets");
    EXPECT(!strcmp(px_job_config_cpu_bind_name(PX_CPU_BIND_CORES), "cores"), "name");

    valid_cfg(&cfg);
    EXPECT(cfg.cpu_bind == PX_CPU_BIND_AUTO, "default %d", cfg.cpu_bind);
    st = px_job_config_check(&cfg, 0, err, sizeof(err));
    EXPECT(st == PX_OK, "valid config rejected: %s", err);

    /* the flag table has it, for pctl and the rank */
    for (size_t i = 0; i < px_job_flags_n; i++)
        if (!strcmp(px_job_flags[i].name, "cpu-bind"))
            flag = &px_job_flags[i];
    EXPECT(flag && flag->where == PX_JOB_FLAG_BOTH, "no --cpu-bind for both tools");
    if (flag) {
        EXPECT(px_job_flag_apply(flag, PX_JOB_FLAG_RANK, "cores", &cfg, &parsers) == 0 &&
               cfg.cpu_bind == PX_CPU_BIND_CORES, "apply cores");
        EXPECT(px_job_flag_apply(flag, PX_JOB_FLAG_RANK, "sockets", &cfg, &parsers) != 0 &&
               strstr(seen, "sockets"), "apply sockets: '%s'", seen);
    }

    /* the one validator names the bad value as sent (a JobSpec's string) */
    valid_cfg(&cfg);
    cfg.cpu_bind = -1;
    cfg.cpu_bind_name = "sockets";
    st = px_job_config_check(&cfg, 0, err, sizeof(err));
    EXPECT(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "cpu_bind='sockets'"),
           "bad name: %d '%s'", st, err);
    valid_cfg(&cfg);
    cfg.cpu_bind = 9;
    st = px_job_config_check(&cfg, 0, err, sizeof(err));
    EXPECT(st == PX_ERR_INVALID_ARGUMENT && strstr(err, "cpu_bind=9"), "bad number: '%s'", err);
}

int main(void)
{
    test_choose();
    test_format();
    test_config();
    printf(failures ? "FAIL (%d)\n" : "PASS\n", failures);
    return failures ? 1 : 0;
}
