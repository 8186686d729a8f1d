/* pctl_plot.c: Braille loss charts (pctl_plot.h). The canvas is a grid of
 * cells, each a Braille dot mask and the index of the series that drew into
 * it last; markers replace a cell's glyph. Without colour, Braille lines all
 * look alike, so with two or more line series each writes its letter (a,
 * b, ...; the legend says whose) into some of its cells. Output is UTF-8.
 * Pure code. */
#include "pctl_plot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define LABEL_W 9 /* "%8.4g " then the axis column */

/* The Braille bit of dot (dx 0..1, dy 0..3) in a cell (Unicode's dot
 * numbering: 1 2 3 7 down the left column, 4 5 6 8 down the right). */
static const unsigned char dot_bit[2][4] = {{0x01, 0x02, 0x04, 0x40}, {0x08, 0x10, 0x20, 0x80}};

static const char *const markers[] = {"◆", "●", "▲", "■", "✚", "★"};
static const char *const colors[] = {"\033[34m", "\033[31m", "\033[32m", "\033[35m",
                                     "\033[36m", "\033[33m"};
#define NSTYLE 6

typedef struct canvas {
    int w, h;              /* cells */
    unsigned char *dots;   /* [w*h] Braille masks */
    signed char *owner;    /* [w*h] series that drew last, -1 none */
    signed char *marker;   /* [w*h] marker series, -1 none */
    signed char *tag;      /* [w*h] line series whose letter the cell shows, -1 none */
} canvas_t;

#define TAG_EVERY 10 /* a line's letter every TAG_EVERY columns, lines staggered by 3 */

/* The letter of each line series (a, b, ...), in `letter_p[nseries]`
 * (0 for marker series); returns the number of line series. */
static int line_letters(const pctl_series_t *series, size_t nseries, char *letter_p)
{
    int n = 0;
    for (size_t s = 0; s < nseries; s++)
        letter_p[s] = series[s].markers ? 0 : (char)('a' + n++ % 26);
    return n;
}

static void put_dot(canvas_t *c, int px, int py, int s)
{
    if (px < 0 || py < 0 || px >= 2 * c->w || py >= 4 * c->h)
        return;
    int i = (py / 4) * c->w + px / 2;
    c->dots[i] |= dot_bit[px % 2][py % 4];
    c->owner[i] = (signed char)s;
}

static void line(canvas_t *c, int x0, int y0, int x1, int y1, int s)
{
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (;;) { /* Bresenham, all octants */
        put_dot(c, x0, y0, s);
        if (x0 == x1 && y0 == y1)
            return;
        int e2 = 2 * err;
        if (e2 >= dy) {
            err += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            err += dx;
            y0 += sy;
        }
    }
}

static void utf8_braille(FILE *out, unsigned char mask)
{
    unsigned cp = 0x2800u + mask; /* U+2800..U+28FF: three UTF-8 bytes */
    fputc(0xE0 | (cp >> 12), out);
    fputc(0x80 | ((cp >> 6) & 0x3F), out);
    fputc(0x80 | (cp & 0x3F), out);
}

int pctl_plot_term_width(FILE *out)
{
    struct winsize ws;
    const char *e = getenv("COLUMNS");
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    if (e && atoi(e) >= 20)
        return atoi(e);
    return 80;
}

static double yval(double y, int log)
{
    return log ? log10(y) : y;
}

int pctl_plot(FILE *out, const pctl_series_t *series, size_t nseries,
              const pctl_plot_opts_t *o)
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    canvas_t c;

    if (o->width < LABEL_W + 11 || o->height < 3) {
        fprintf(stderr, "pctl: plot: %d x %d characters is too small (at least %d x 3)\n",
                o->width, o->height, LABEL_W + 11);
        return -1;
    }
    for (size_t s = 0; s < nseries; s++)
        for (size_t i = 0; i < series[s].n; i++) {
            double y = series[s].y[i];
            if (!isfinite(y) || (o->log && !(y > 0)))
                continue;
            xmin = fmin(xmin, series[s].x[i]);
            xmax = fmax(xmax, series[s].x[i]);
            ymin = fmin(ymin, yval(y, o->log));
            ymax = fmax(ymax, yval(y, o->log));
        }
    if (!(xmin <= xmax)) {
        fprintf(stderr, "pctl: plot: no points to draw\n");
        return -1;
    }
    c.w = o->width - LABEL_W - 2; /* labels, axis, one column of slack (no wrap) */
    c.h = o->height;
    c.dots = calloc((size_t)c.w * c.h, 1);
    c.owner = malloc((size_t)c.w * c.h);
    c.marker = malloc((size_t)c.w * c.h);
    c.tag = malloc((size_t)c.w * c.h);
    char *letter = malloc(nseries ? nseries : 1);
    if (!c.dots || !c.owner || !c.marker || !c.tag || !letter) {
        free(c.dots);
        free(c.owner);
        free(c.marker);
        free(c.tag);
        free(letter);
        fprintf(stderr, "pctl: plot: out of memory\n");
        return -1;
    }
    memset(c.owner, -1, (size_t)c.w * c.h);
    memset(c.marker, -1, (size_t)c.w * c.h);
    memset(c.tag, -1, (size_t)c.w * c.h);
    const int tags = !o->color && line_letters(series, nseries, letter) > 1;
    const double xs = xmax > xmin ? (2.0 * c.w - 1) / (xmax - xmin) : 0.0;
    const double ys = ymax > ymin ? (4.0 * c.h - 1) / (ymax - ymin) : 0.0;
    for (size_t s = 0; s < nseries; s++) {
        int have = 0, px0 = 0, py0 = 0;
        for (size_t i = 0; i < series[s].n; i++) {
            double y = series[s].y[i];
            if (!isfinite(y) || (o->log && !(y > 0)))
                continue;
            int px = (int)lround((series[s].x[i] - xmin) * xs);
            int py = (int)lround((ymax - yval(y, o->log)) * ys);
            if (series[s].markers) {
                c.marker[(py / 4) * c.w + px / 2] = (signed char)s;
                continue;
            }
            if (have)
                line(&c, px0, py0, px, py, (int)s);
            else
                put_dot(&c, px, py, (int)s);
            px0 = px, py0 = py, have = 1;
        }
    }
    /* each line's letter in the topmost cell it owns, on its own columns
     * (never the first or last, where the ends of the lines are) */
    for (int x = 1; tags && x < c.w - 1; x++)
        for (size_t s = 0; s < nseries; s++) {
            if (!letter[s] || x % TAG_EVERY != (3 * (letter[s] - 'a') + 3) % TAG_EVERY)
                continue;
            for (int r = 0; r < c.h; r++) {
                int i = r * c.w + x;
                if (c.owner[i] == (signed char)s && c.marker[i] < 0) {
                    c.tag[i] = (signed char)s;
                    break;
                }
            }
        }
    /* legend, wrapped at the width */
    int col = 0;
    for (size_t s = 0; s < nseries; s++) {
        int len = (int)strlen(series[s].label) + 5;
        if (col && col + len > o->width - 1) {
            fputc('\n', out);
            col = 0;
        }
        char line_glyph[8];
        snprintf(line_glyph, sizeof(line_glyph), tags ? "⣀%c" : "⣀⣀", letter[s]);
        fprintf(out, "%s%s%s %s%s", col ? "  " : "", o->color ? colors[s % NSTYLE] : "",
                series[s].markers ? markers[s % NSTYLE] : line_glyph, series[s].label,
                o->color ? "\033[0m" : "");
        col += len;
    }
    fprintf(out, "%s\n", o->log ? "  (log scale)" : "");
    for (int r = 0; r < c.h; r++) {
        /* labels at the top, middle and bottom rows: the value of the
         * cell row's centre dot row */
        double v = ymax - ((r * 4.0 + 1.5) / (4.0 * c.h - 1)) * (ymax - ymin);
        if (r == 0)
            v = ymax;
        else if (r == c.h - 1)
            v = ymin;
        if (r == 0 || r == c.h - 1 || r == c.h / 2)
            fprintf(out, "%8.4g ┤", o->log ? pow(10.0, v) : v);
        else
            fprintf(out, "%8s │", "");
        for (int x = 0; x < c.w; x++) {
            int i = r * c.w + x, s = c.marker[i] >= 0 ? c.marker[i] : c.owner[i];
            if (o->color && s >= 0)
                fputs(colors[s % NSTYLE], out);
            if (c.marker[i] >= 0)
                fputs(markers[c.marker[i] % NSTYLE], out);
            else if (c.tag[i] >= 0)
                fputc(letter[c.tag[i]], out);
            else
                utf8_braille(out, c.dots[i]);
            if (o->color && s >= 0)
                fputs("\033[0m", out);
        }
        fputc('\n', out);
    }
    fprintf(out, "%8s └", "");
    for (int x = 0; x < c.w; x++)
        fputs(x == 0 || x == c.w - 1 ? "┬" : "─", out);
    fputc('\n', out);
    char first[32], last[32];
    int nl = snprintf(first, sizeof(first), "%.0f", xmin);
    int nr = snprintf(last, sizeof(last), "%.0f", xmax);
    int gap = c.w - nl - nr; /* the last step ends under the last column */
    fprintf(out, "%8s  %s%*s%s\n", "step", first, gap > 1 ? gap : 1, "", last);
    free(c.dots);
    free(c.owner);
    free(c.marker);
    free(c.tag);
    free(letter);
    return 0;
}
