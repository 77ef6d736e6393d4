/* What `hetex plot` draws with: one line of JSON as its fields, a picture's
 * series, and gnuplot drawing them as a PNG (tools/plot_json.c,
 * tools/plot_draw.c). A --metrics file (tools/cmd_plot.c) and a benchmark's
 * results (tools/plot_bench.c) both go through these. */
#ifndef HX_TOOLS_PLOT_H
#define HX_TOOLS_PLOT_H

#include <stdbool.h>

/* ---- one JSON object a line ------------------------------------------------------ */

enum { PLOT_MAX_FIELDS = 96 };
typedef struct plot_field {
    char key[48];
    bool number;   /* a JSON number: num */
    double num;
    char text[96]; /* a string's text, "true"/"false"; "" for null, arrays and objects */
} plot_field;
/* The fields of the JSON object on `line` (then only white space), the
 * first PLOT_MAX_FIELDS kept. Strings, numbers, true, false and null are
 * read; arrays and objects are checked and skipped. The count, or -1 when
 * the line is not one JSON object (inf and nan are not JSON numbers). */
int plot_json_fields(const char *line, plot_field *out, int max);
/* The field named key, or NULL. */
const plot_field *plot_json_find(const plot_field *f, int n, const char *key);

/* ---- a picture ---------------------------------------------------------------------- */

enum { PLOT_MAX_SERIES = 24, PLOT_MAX_LABELS = 64 };
typedef struct plot_series {
    char title[96];
    bool right;      /* on the right axis */
    bool thin;       /* lines without points (many points) */
    double *x, *y;   /* LINES: x; BARS: the label's index */
    int n, cap;
} plot_series;

typedef enum plot_kind { PLOT_LINES, PLOT_BARS } plot_kind;
typedef struct plot {
    plot_kind kind;
    const char *xlabel, *ylabel, *y2label;
    double ref;      /* != 0: a line across at this y (a ratio's ceiling, 1) */
    bool value_ticks; /* LINES: x ticks at the x values when they are a few whole numbers */
    plot_series s[PLOT_MAX_SERIES];
    int n;
    char labels[PLOT_MAX_LABELS][64]; /* BARS: the groups, in order of first use */
    int n_labels;
    long points;
} plot;

/* The series titled `title` (made, when there is room: NULL once
 * PLOT_MAX_SERIES are). */
plot_series *plot_series_get(plot *p, const char *title);
/* Adds (x, y) to s; false when out of memory. */
bool plot_add(plot *p, plot_series *s, double x, double y);
/* BARS: the index of group `label` (added; -1 past PLOT_MAX_LABELS). */
int plot_label(plot *p, const char *label);
/* Draws p into png through gnuplot; false after printing why ("hetex plot:
 * ..."): gnuplot missing or failing, or no PNG written. */
bool plot_draw(const plot *p, const char *png, const char *title);
void plot_free(plot *p);

/* `hetex plot --bench RESULTS`: tools/plot_bench.c. */
int plot_bench(const char *results, const char *out_dir);

#endif
