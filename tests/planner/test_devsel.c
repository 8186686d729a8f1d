/* test_devsel.c: the job's device selection (planner/devsel.h): what
 * parses, what each selection matches, and that every rejection names the
 * value and the bad item. */
#include <stdio.h>
#include <string.h>

#include "devsel.h"

#include "../px_check.h"

/* `spec` parses and matches exactly the names of `yes` (space-separated)
 * among cpu:0 cpu:1 cuda:0 cuda:1 sim:0 sim:1 sim:2 */
static void ok(const char *spec, const char *yes)
{
    static const char *all[] = {"cpu:0", "cpu:1", "cuda:0", "cuda:1", "sim:0", "sim:1", "sim:2"};
    char err[256] = "";
    px_devsel_t sel;
    CHECK(px_devsel_parse(spec, &sel, err, sizeof(err)) == PX_OK, "'%s' refused: %s", spec, err);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        char pad[64];
        snprintf(pad, sizeof(pad), " %s ", yes);
        char want[16];
        snprintf(want, sizeof(want), " %s ", all[i]);
        int expect = strstr(pad, want) != NULL;
        CHECK(px_devsel_match(&sel, all[i]) == expect, "'%s' matches %s: %d, want %d", spec, all[i],
              !expect, expect);
    }
}

/* `spec` is refused with a message holding every needle */
static void bad(const char *spec, const char *n1, const char *n2)
{
    char err[256] = "";
    px_devsel_t sel;
    sel.n = 77;
    CHECK(px_devsel_parse(spec, &sel, err, sizeof(err)) == PX_ERR_INVALID_ARGUMENT,
          "'%s' accepted", spec);
    CHECK(sel.n == 77, "'%s': output written on failure", spec);
    CHECK(strstr(err, n1) && (!n2 || strstr(err, n2)), "'%s': message '%s' lacks '%s'/'%s'", spec,
          err, n1, n2 ? n2 : "");
    printf("refused %-14s %s\n", spec, err);
}

int main(void)
{
    ok("", "cpu:0 cpu:1 cuda:0 cuda:1 sim:0 sim:1 sim:2");
    ok(NULL, "cpu:0 cpu:1 cuda:0 cuda:1 sim:0 sim:1 sim:2");
    ok("cpu", "cpu:0 cpu:1");
    ok("sim", "sim:0 sim:1 sim:2");
    ok("sim:0,1", "sim:0 sim:1");
    ok("sim:2", "sim:2");
    ok("cuda:1,sim:0", "cuda:1 sim:0");
    ok("sim:0,2,cpu", "sim:0 sim:2 cpu:0 cpu:1");
    ok("cuda, cpu:1", "cuda:0 cuda:1 cpu:1");
    bad("gpu:0", "devices='gpu:0'", "'gpu:0' is not a device");
    bad("gpu", "'gpu' is not a device", NULL);
    bad("sim:x", "devices='sim:x'", "index");
    bad("sim:-1", "'sim:-1'", "index");
    bad("sim:4096", "'sim:4096'", "0..4095");
    bad("sim:0,0", "'0' given twice", NULL);
    bad("sim,sim:1", "sim given whole and by index", NULL);
    bad("cpu,3", "'3' is not a device", NULL);
    bad(",", "no device named", NULL);
    bad("sim:1:2", "'sim:1:2'", "index");
    {
        char err[256] = "";
        px_devsel_t sel;
        CHECK(px_devsel_parse("sim:0", &sel, err, sizeof(err)) == PX_OK, "%s", err);
        CHECK(!px_devsel_match(&sel, "sim") && !px_devsel_match(&sel, "sim:00x") &&
                  !px_devsel_match(&sel, NULL) && !px_devsel_match(&sel, "simx:0"),
              "malformed device names matched");
    }
    { /* --gpu-share's slots cuda:K/S: selected by their GPU cuda:K or the kind */
        char err[256] = "";
        px_devsel_t sel;
        CHECK(px_devsel_parse("cuda:1,sim:0", &sel, err, sizeof(err)) == PX_OK, "%s", err);
        CHECK(px_devsel_match(&sel, "cuda:1/0") && px_devsel_match(&sel, "cuda:1/3") &&
                  px_devsel_match(&sel, "sim:0/1"),
              "slots of a selected GPU not matched");
        CHECK(!px_devsel_match(&sel, "cuda:0/1") && !px_devsel_match(&sel, "cuda:10/1") &&
                  !px_devsel_match(&sel, "sim:1/0") && !px_devsel_match(&sel, "cuda:/1") &&
                  !px_devsel_match(&sel, "cuda:1x/0"),
              "slots of other GPUs (or malformed) matched");
        CHECK(px_devsel_parse("cuda", &sel, err, sizeof(err)) == PX_OK, "%s", err);
        CHECK(px_devsel_match(&sel, "cuda:7/2") && !px_devsel_match(&sel, "sim:0/0"),
              "kind selection of slots");
    }
    printf("%s\n", fails ? "FAILED" : "PASS");
    return fails ? 1 : 0;
}
