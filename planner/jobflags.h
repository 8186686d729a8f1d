/* jobflags.h: the job flags of pctl submit and parallax-rank, one table.
 *
 * Both tools take the same job flags (--layers, --dp, --lr, --schedule, ...)
 * and write them into a px_job_config_t (jobcfg.h). The table below says,
 * once per flag, its name, the field it writes, its kind and its bounds; each
 * tool registers the table's entries with getopt_long
 * (px_job_flags_options) and turns a flag into a field with
 * px_job_flag_apply, handing it its own number parsers, so that each keeps
 * its own error messages and exit codes. A new job flag is one line of the
 * table (jobflags.c). Pure code, any thread; the table is constant. */
#ifndef PX_JOBFLAGS_H
#define PX_JOBFLAGS_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "jobcfg.h"

/* What a flag's value is and how it is stored. */
typedef enum {
    PX_JOB_FLAG_INT,       /* int field; an integer >= lo */
    PX_JOB_FLAG_FLOAT,     /* float field; pctl also checks [fmin, fmax] (parallax-rank
                              leaves ranges to px_job_config_check) */
    PX_JOB_FLAG_U64,       /* uint64_t field (the seed) */
    PX_JOB_FLAG_STR,       /* const char * field, borrowed from argv */
    PX_JOB_FLAG_PATH,      /* the same, a directory or file the job writes or reads
                              (pctl sends it absolute) */
    PX_JOB_FLAG_SET,       /* no value: the int field is set to lo */
    PX_JOB_FLAG_SCHEDULE,  /* a pipeline schedule name (pipesched.h) */
    PX_JOB_FLAG_PRECISION, /* a precision name (px_job_config_precision_parse) */
} px_job_flag_kind_t;

/* Which tool takes a flag. */
enum { PX_JOB_FLAG_PCTL = 1, PX_JOB_FLAG_RANK = 2, PX_JOB_FLAG_BOTH = 3 };

/* One job flag. */
typedef struct {
    const char *name;       /* long option without "--" */
    const char *pctl_alias; /* pctl's other name for it (NULL: none); pctl's messages use it */
    px_job_flag_kind_t kind;
    size_t offset;          /* offsetof(px_job_config_t, field) */
    int lo;                 /* INT: smallest value; SET: the value stored */
    double fmin, fmax;      /* FLOAT: pctl's accepted range */
    unsigned where;         /* PX_JOB_FLAG_PCTL / _RANK / _BOTH */
    const char *arg;        /* the value's name in help texts ("N", "FILE"); NULL: none */
    const char *help;       /* one sentence for help texts, with the default */
} px_job_flag_t;

/* The table, px_job_flags_n entries. */
extern const px_job_flag_t px_job_flags[];
extern const size_t px_job_flags_n;

/* Appends to opts (capacity cap entries) a getopt_long entry for every flag
 * of tool `where` (and pctl's aliases when where is PX_JOB_FLAG_PCTL), with
 * val = base + the flag's index in px_job_flags. Returns the number written;
 * the caller terminates the array. Entries past cap are dropped (size opts
 * for 2 x px_job_flags_n). */
size_t px_job_flags_options(unsigned where, int base, struct option *opts, size_t cap);

/* The flag getopt_long returned as `val` (base as above), or NULL when val
 * is not one of them. */
const px_job_flag_t *px_job_flag_of(int val, int base);

/* Writes the help of every flag of tool `where` to `out`, one entry per
 * flag ("  --name ARG" then its help wrapped at 79 columns), in the table's
 * order: the part of a tool's --help that the table owns. */
void px_job_flags_help(unsigned where, FILE *out);

/* A tool's value parsers: each returns 0 and writes *out, or prints the
 * tool's own message naming `flag` ("--lr") and `s`, and returns non-zero;
 * bad_name is called for a schedule or precision name that does not parse. */
typedef struct {
    int (*parse_int)(void *arg, const char *flag, const char *s, int lo, int *out);
    int (*parse_float)(void *arg, const char *flag, const char *s, double fmin, double fmax,
                       float *out);
    int (*parse_u64)(void *arg, const char *flag, const char *s, uint64_t *out);
    int (*bad_name)(void *arg, const char *flag, const char *s);
    void *arg;
} px_job_flag_parsers_t;

/* Writes flag f's value `s` (NULL for a SET flag) into cfg through the
 * parsers of tool `where` (whose messages name the flag as that tool calls
 * it). Returns 0, or the parser's non-zero result (cfg then unchanged in
 * that field, except schedule / precision, which hold -1). */
int px_job_flag_apply(const px_job_flag_t *f, unsigned where, const char *s,
                      px_job_config_t *cfg, const px_job_flag_parsers_t *p);

/* The job's configuration as every rank of one world must hold it: one line
 * "--NAME=VALUE\n" per job flag of the table, in table order (floats as
 * "%.9g (%a)", exact; schedule and precision by name), leaving out the
 * flags that name files (PATH flags, --data, --val-data: where they lie may
 * differ between nodes). Ranks compare it at world start (px_world.h) so
 * that a flag given differently is named with both values. Writes at most
 * `len` bytes into buf (NUL-terminated); returns the text's length, or -1
 * if it does not fit (4 KiB always does). */
int px_job_config_canon(const px_job_config_t *cfg, char *buf, size_t len);

#endif
