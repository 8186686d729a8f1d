/* test_tb.c: the TensorBoard event writer (tboard/px_tb.h) without
 * TensorBoard: a run opened again learns the largest step its files hold,
 * also when one of them was cut short mid-record (a rank killed while
 * writing), and the directory and its parents are made, a path under a
 * file refused naming it. The files themselves are read by TensorBoard in
 * pctl_metrics_tensorboard and integration-tensorboard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "px_check.h"
#include "px_tb.h"

int main(void)
{
    char tmpl[] = "/tmp/px-tb-XXXXXX", run[256], err[4600], path[4400], bad[4500];
    char *dir = mkdtemp(tmpl);
    if (!dir)
        return 1;
    snprintf(run, sizeof(run), "%s/a/b/run", dir);

    /* CRC-32C's check value ("123456789", RFC 3720 B.4) */
    CHECK(px_crc32c("123456789", 9) == 0xe3069283u, "crc32c %08x", px_crc32c("123456789", 9));

    px_tb_t *tb = px_tb_open(run, err, sizeof(err));
    CHECK(tb != NULL, "open %s: %s", run, err);
    if (!tb)
        return 1;
    CHECK(px_tb_last_step(tb) == -1, "a new run holds step %lld",
          (long long)px_tb_last_step(tb));
    for (int s = 1; s <= 5; s++)
        CHECK(px_tb_scalar(tb, "train/loss", s, 1e9 + s, 5.0f - s) == 0 && px_tb_flush(tb) == 0,
              "step %d", s);
    snprintf(path, sizeof(path), "%s", px_tb_path(tb));
    CHECK(px_tb_close(tb) == 0, "close");

    /* a record cut short at the end: the steps before it count */
    FILE *f = fopen(path, "ab");
    CHECK(f && fwrite("\x40\0\0\0\0\0\0\0\1\2", 1, 10, f) == 10 && fclose(f) == 0, "append");
    tb = px_tb_open(run, err, sizeof(err));
    CHECK(tb && px_tb_last_step(tb) == 5, "reopened: last step %lld (want 5): %s",
          tb ? (long long)px_tb_last_step(tb) : -2LL, err);
    CHECK(tb && strcmp(px_tb_path(tb), path), "a new file beside %s", path);
    if (tb) {
        CHECK(px_tb_scalar(tb, "train/loss", 9, 1e9 + 9, 1.0f) == 0, "step 9");
        px_tb_close(tb);
    }
    tb = px_tb_open(run, err, sizeof(err));
    CHECK(tb && px_tb_last_step(tb) == 9, "both files: last step %lld (want 9)",
          tb ? (long long)px_tb_last_step(tb) : -2LL);
    px_tb_close(tb);

    /* a run under a file */
    snprintf(bad, sizeof(bad), "%s/run", path);
    tb = px_tb_open(bad, err, sizeof(err));
    CHECK(!tb && strstr(err, bad) && strstr(err, "Not a directory"), "under a file: %s", err);
    px_tb_close(tb);

    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return fails ? 1 : 0;
}
