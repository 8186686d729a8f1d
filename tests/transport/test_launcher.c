/* test_launcher.c: srun / mpirun variables into the standalone bootstrap's
 * (transport/px_launcher.h): Slurm host lists, the Slurm and Open MPI
 * translations, PX_* variables winning, a multi-node mpirun without
 * PX_MASTER_ADDR refused. Unit suite; one process, its own environment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_launcher.h"

#include "../px_check.h"

static void host(const char *list, const char *want)
{
    char buf[64] = "";
    px_status_t st = px_launcher_first_host(list, buf, sizeof(buf));
    if (!want)
        CHECK(st != PX_OK, "'%s' should be refused, got '%s'", list, buf);
    else
        CHECK(st == PX_OK && !strcmp(buf, want), "'%s' -> '%s' (status %d), want '%s'", list,
               buf, st, want);
}

static void clear(void)
{
    const char *vars[] = {"PX_RANK", "PX_WORLD_SIZE", "PX_MASTER_ADDR", "PX_MASTER_PORT",
                          "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_NODELIST",
                          "SLURM_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_NAMESPACE",
                          "OMPI_MCA_ess_base_jobid"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

static const char *get(const char *n)
{
    const char *v = getenv(n);
    return v ? v : "(unset)";
}

int main(void)
{
    const char *name;

    host("node[01-04,07],x", "node01");
    host("a,b", "a");
    host("gpu[7]", "gpu7");
    host("rack1-n[003-010]-ib,c", "rack1-n003-ib");
    host("single", "single");
    host("", NULL);
    host("n[]", NULL);
    host("n[1-2", NULL);
    host(",a", NULL);

    /* Slurm */
    clear();
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_JOB_NODELIST", "gpu[07-08]", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    CHECK(px_launcher_import(&name) == PX_OK && name && !strcmp(name, "slurm"), "slurm");
    CHECK(!strcmp(get("PX_RANK"), "3") && !strcmp(get("PX_WORLD_SIZE"), "8") &&
               !strcmp(get("PX_MASTER_ADDR"), "gpu07"),
           "slurm: PX_RANK %s PX_WORLD_SIZE %s PX_MASTER_ADDR %s", get("PX_RANK"),
           get("PX_WORLD_SIZE"), get("PX_MASTER_ADDR"));
    int port = atoi(get("PX_MASTER_PORT"));
    CHECK(port >= 20000 && port < 40000, "slurm port %s", get("PX_MASTER_PORT"));
    /* the same job gives every rank the same port */
    clear();
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_JOB_NODELIST", "gpu[07-08]", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    CHECK(px_launcher_import(NULL) == PX_OK && atoi(get("PX_MASTER_PORT")) == port,
           "rank 0's port %s, rank 3's %d", get("PX_MASTER_PORT"), port);

    /* PX_* variables win */
    clear();
    setenv("PX_WORLD_SIZE", "2", 1);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "4", 1);
    CHECK(px_launcher_import(&name) == PX_OK && !name && !getenv("PX_RANK"),
           "PX_WORLD_SIZE set: nothing imported");

    /* Open MPI on one node; PX_MASTER_PORT kept */
    clear();
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
    setenv("PX_MASTER_PORT", "29555", 1);
    CHECK(px_launcher_import(&name) == PX_OK && name && !strcmp(name, "openmpi"), "openmpi");
    CHECK(!strcmp(get("PX_RANK"), "1") && !strcmp(get("PX_WORLD_SIZE"), "4") &&
               !strcmp(get("PX_MASTER_ADDR"), "127.0.0.1") &&
               !strcmp(get("PX_MASTER_PORT"), "29555"),
           "openmpi: %s %s %s:%s", get("PX_RANK"), get("PX_WORLD_SIZE"), get("PX_MASTER_ADDR"),
           get("PX_MASTER_PORT"));

    /* Open MPI across nodes without PX_MASTER_ADDR: refused; with it: fine */
    clear();
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    CHECK(px_launcher_import(NULL) == PX_ERR_INVALID_ARGUMENT, "multi-node mpirun refused");
    setenv("PX_MASTER_ADDR", "10.0.0.1", 1);
    CHECK(px_launcher_import(NULL) == PX_OK && !strcmp(get("PX_MASTER_ADDR"), "10.0.0.1"),
           "multi-node mpirun with PX_MASTER_ADDR");

    /* a bad value is named, not guessed at */
    clear();
    setenv("SLURM_PROCID", "x", 1);
    setenv("SLURM_NTASKS", "4", 1);
    CHECK(px_launcher_import(NULL) == PX_ERR_INVALID_ARGUMENT, "SLURM_PROCID=x refused");
    clear();
    setenv("OMPI_COMM_WORLD_RANK", "4", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    CHECK(px_launcher_import(NULL) == PX_ERR_INVALID_ARGUMENT, "rank 4 of 4 refused");

    if (fails)
        return 1;
    printf("ok: launcher variables\n");
    return 0;
}
