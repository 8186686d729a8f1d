/* replay.c: a main() for the fuzz targets in builds without libFuzzer
 * (gcc): runs LLVMFuzzerTestOneInput once on each file named on the command
 * line, or on each file of each directory named, so the committed corpus is
 * a regression test in the unit suite. Prints "N inputs" and exits 0. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long len;

    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(len > 0 ? (size_t)len : 1);
    if (!buf || (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len)) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int n = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: cannot stat %s\n", argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *dir = opendir(argv[i]);
            struct dirent *e;
            char path[4096];
            while (dir && (e = readdir(dir))) {
                if (e->d_name[0] == '.')
                    continue;
                snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
                if (run_file(path) == 0)
                    n++;
            }
            if (dir)
                closedir(dir);
        } else if (run_file(argv[i]) == 0) {
            n++;
        }
    }
    printf("%d inputs\n", n);
    return n > 0 ? 0 : 1;
}
