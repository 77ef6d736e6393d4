/* A picture's series drawn as a PNG through gnuplot (its script and data
 * written to its stdin): lines against a numeric x, or bars in groups. */
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

plot_series *plot_series_get(plot *p, const char *title)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].title, title)) return &p->s[i];
    if (p->n == PLOT_MAX_SERIES) return NULL;
    plot_series *s = &p->s[p->n++];
    snprintf(s->title, sizeof s->title, "%s", title);
    return s;
}

bool plot_add(plot *p, plot_series *s, double x, double y)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, sizeof *nx * (size_t)cap);
        if (nx) s->x = nx;
        double *ny = nx ? realloc(s->y, sizeof *ny * (size_t)cap) : NULL;
        if (!ny) return false;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x, s->y[s->n++] = y;
    p->points++;
    return true;
}

int plot_label(plot *p, const char *label)
{
    for (int i = 0; i < p->n_labels; i++)
        if (!strcmp(p->labels[i], label)) return i;
    if (p->n_labels == PLOT_MAX_LABELS) return -1;
    snprintf(p->labels[p->n_labels], sizeof p->labels[0], "%s", label);
    return p->n_labels++;
}

void plot_free(plot *p)
{
    for (int i = 0; i < p->n; i++) {
        free(p->s[i].x);
        free(p->s[i].y);
    }
}

/* Text inside gnuplot's single quotes, which end only at a quote ('' is
 * one). */
static void quoted(FILE *g, const char *text)
{
    fputc('\'', g);
    for (const char *c = text; *c; c++) {
        if (*c == '\n') continue;
        if (*c == '\'') fputc('\'', g);
        fputc(*c, g);
    }
    fputc('\'', g);
}

static int by_x(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Ticks at the x values when they are a few whole numbers (ranks, stages). */
static void whole_ticks(FILE *g, const plot *p)
{
    double seen[16];
    int n = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->s[i].n; k++) {
            double x = p->s[i].x[k];
            if (x != floor(x) || fabs(x) > 1e9) return;
            bool known = false;
            for (int j = 0; j < n; j++) known |= seen[j] == x;
            if (known) continue;
            if (n == 16) return;
            seen[n++] = x;
        }
    fprintf(g, "set xtics (");
    for (int j = 0; j < n; j++) fprintf(g, "%s%.0f", j ? ", " : "", seen[j]);
    fprintf(g, ")\n");
}

static void lines(FILE *g, const plot *p)
{
    for (int i = 0; i < p->n; i++) {
        const plot_series *s = &p->s[i];
        double *xy = malloc(sizeof *xy * 2 * (size_t)(s->n ? s->n : 1));
        for (int k = 0; xy && k < s->n; k++) xy[2 * k] = s->x[k], xy[2 * k + 1] = s->y[k];
        if (xy && p->kind == PLOT_LINES) qsort(xy, (size_t)s->n, 2 * sizeof *xy, by_x);
        fprintf(g, "$s%d << EOD\n", i);
        for (int k = 0; k < s->n; k++)
            fprintf(g, "%.17g %.17g\n", xy ? xy[2 * k] : s->x[k], xy ? xy[2 * k + 1] : s->y[k]);
        fprintf(g, "EOD\n");
        free(xy);
    }
    fprintf(g, "plot ");
    for (int i = 0; i < p->n; i++) {
        const plot_series *s = &p->s[i];
        fprintf(g, "%s$s%d using 1:2 axes x1y%d with %s title ", i ? ", " : "", i, s->right ? 2 : 1,
                s->thin ? "lines lw 1" : "linespoints lw 2 pt 7");
        quoted(g, s->title);
    }
    fprintf(g, "\n");
}

/* One row per group: its label, then each series' bar (NaN: none). */
static void bars(FILE *g, const plot *p)
{
    fprintf(g, "set style data histograms\nset style histogram clustered gap 1\n"
               "set style fill solid 0.85 border -1\nset boxwidth 0.9\nset datafile missing 'NaN'\n"
               "set xtics rotate by -35 left noenhanced font ',9'\nset bmargin 9\n$d << EOD\n");
    for (int l = 0; l < p->n_labels; l++) {
        fputc('"', g);
        for (const char *c = p->labels[l]; *c; c++) fputc(*c == '"' ? '\'' : *c, g);
        fputc('"', g);
        for (int i = 0; i < p->n; i++) {
            double y = NAN;
            for (int k = 0; k < p->s[i].n; k++)
                if (p->s[i].x[k] == l) y = p->s[i].y[k];
            fprintf(g, " %.17g", y);
        }
        fputc('\n', g);
    }
    fprintf(g, "EOD\nplot ");
    for (int i = 0; i < p->n; i++) {
        fprintf(g, "%s$d using %d%s title ", i ? ", " : "", i + 2, i ? "" : ":xtic(1)");
        quoted(g, p->s[i].title);
    }
    fprintf(g, "\n");
}

bool plot_draw(const plot *p, const char *png, const char *title)
{
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) return false;
    bool right = false;
    for (int i = 0; i < p->n; i++) right |= p->s[i].right;
    fprintf(g, "set terminal png size %d,560\nset output ", p->kind == PLOT_BARS ? 1000 : 900);
    quoted(g, png);
    fprintf(g, "\nset title ");
    quoted(g, title);
    fprintf(g, " noenhanced font ',10'\nset key outside bottom center horizontal noenhanced\nset grid\n"
               "set xlabel ");
    quoted(g, p->xlabel ? p->xlabel : "");
    fprintf(g, " noenhanced\nset ylabel ");
    quoted(g, p->ylabel ? p->ylabel : "");
    fprintf(g, " noenhanced\n");
    if (right) {
        fprintf(g, "set ytics nomirror\nset y2tics\nset y2label ");
        quoted(g, p->y2label ? p->y2label : "");
        fprintf(g, " noenhanced\n");
    }
    if (p->ref) fprintf(g, "set arrow from graph 0, first %.17g to graph 1, first %.17g nohead "
                           "lw 2 lc rgb 'gray30' front\n", p->ref, p->ref);
    if (p->kind == PLOT_BARS) {
        fprintf(g, "set yrange [0:*]\n");
        bars(g, p);
    } else {
        if (p->value_ticks) whole_ticks(g, p);
        lines(g, p);
    }
    int rc = pclose(g);
    if (rc) {
        fprintf(stderr, "hetex plot: gnuplot failed (%s); '%s' is not written\n",
                rc == 127 << 8 ? "not installed: apt-get install gnuplot-nox" : "its message is above",
                png);
        return false;
    }
    FILE *f = fopen(png, "rb");
    unsigned char head[8] = {0};
    bool ok = f && fread(head, 1, 8, f) == 8 && !memcmp(head, "\x89PNG\r\n\x1a\n", 8);
    if (f) fclose(f);
    if (!ok) fprintf(stderr, "hetex plot: gnuplot wrote no PNG to '%s'\n", png);
    return ok;
}
