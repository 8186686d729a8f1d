/* pctl_plot.h: loss curves drawn in the terminal with Unicode Braille
 * characters (`pctl metrics JOB... --plot`).
 *
 * Each character cell holds 2 x 4 Braille dots, so a chart of W x H cells
 * has 2W x 4H dots. x (the step) is mapped linearly from the smallest to
 * the largest step of all series onto dot columns 0 .. 2W-1, y (the loss,
 * or its log10 with `log`) from the largest value (dot row 0, the top) to
 * the smallest (dot row 4H-1); consecutive points of a series are joined
 * by straight dot lines (Bresenham). Validation series, sparse points, are
 * drawn as a marker character per point instead. Axes: y labels on the
 * left (the top, middle and bottom values), a step axis below with the
 * first and last step. With `color`, series get ANSI colours (a cell shared
 * by two series shows the last drawn). Pure code; any thread. */
#ifndef PCTL_PLOT_H
#define PCTL_PLOT_H

#include <stddef.h>
#include <stdio.h>

/* One curve: n points (x[i] ascending steps, y[i] > 0 losses; borrowed). */
typedef struct pctl_series {
    const char *label;   /* legend text ("JOB train") */
    const double *x, *y;
    size_t n;
    int markers;         /* 1: points as markers (validation), 0: a line */
} pctl_series_t;

typedef struct pctl_plot_opts {
    int width;           /* total columns, labels included (>= 20) */
    int height;          /* chart rows (>= 3) */
    int log;             /* log10 y axis */
    int color;           /* ANSI colours */
} pctl_plot_opts_t;

/* Draws the series into `out`. Returns 0, or -1 (nothing drawn, a
 * message on stderr) with no point to draw or sizes out of range. */
int pctl_plot(FILE *out, const pctl_series_t *series, size_t nseries,
              const pctl_plot_opts_t *opts);

/* The terminal's width in columns for a plot on `out` (TIOCGWINSZ, else
 * $COLUMNS, else 80). */
int pctl_plot_term_width(FILE *out);

#endif
