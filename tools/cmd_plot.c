/* hetex plot: a training run's --metrics file (JSON lines) drawn as a PNG
 * through gnuplot: every numeric series against the step, losses on the
 * left axis, accuracy and AUC on the right. */
#include "commands.h"
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_SERIES = 24 };

typedef struct series {
    char event[32], key[48];
    double *x, *y;
    int n, cap;
} series;

typedef struct plot {
    series s[MAX_SERIES];
    int n;
    long points;
} plot;

static const char usage[] =
    "usage: hetex plot METRICS [options]\n"
    "  METRICS                 a --metrics file of hetex gpt, widedeep, resnet or mlp\n"
    "  --output PNG            the picture (METRICS with .png in place of .jsonl)\n"
    "  --title TEXT            its title (the file's name)\n";

/* Series not drawn: the x axis, clocks and rates. */
static bool drawn(const char *key)
{
    size_t n = strlen(key);
    return strcmp(key, "step") && strcmp(key, "epoch") && strcmp(key, "time_s") &&
           strcmp(key, "seconds") && strcmp(key, "steps") && strcmp(key, "lr") &&
           !(n > 6 && !strcmp(key + n - 6, "_per_s"));
}

static bool right_axis(const char *key) { return strstr(key, "accuracy") || strstr(key, "auc"); }

static bool add(plot *p, const char *event, const char *key, double x, double y)
{
    series *s = NULL;
    for (int i = 0; i < p->n && !s; i++)
        if (!strcmp(p->s[i].event, event) && !strcmp(p->s[i].key, key)) s = &p->s[i];
    if (!s) {
        if (p->n == MAX_SERIES) return true; /* the first 24 are drawn */
        s = &p->s[p->n++];
        snprintf(s->event, sizeof s->event, "%.31s", event);
        snprintf(s->key, sizeof s->key, "%.47s", key);
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *x = realloc(s->x, sizeof *x * cap), *y = x ? realloc(s->y, sizeof *y * cap) : NULL;
        if (x) s->x = x;
        if (!y) return false;
        s->y = y;
        s->cap = cap;
    }
    s->x[s->n] = x, s->y[s->n++] = y;
    p->points++;
    return true;
}

/* A JSON string at *c (after its opening quote) into buf (escapes kept
 * as written: keys and events have none); *c past its closing quote. */
static bool string(const char **c, char *buf, size_t n)
{
    size_t k = 0;
    for (; **c && **c != '"'; (*c)++) {
        if (**c == '\\' && !*++*c) return false;
        if (k + 1 < n) buf[k++] = **c;
    }
    buf[k] = 0;
    return **c == '"' && (++*c, true);
}

/* One line {"event":"...","key":number|null|"text",...}: its numbers
 * into p. false: not such a line. */
static bool line(plot *p, const char *c)
{
    enum { MAX_KEYS = 64 };
    char event[32] = "", keys[MAX_KEYS][48];
    double values[MAX_KEYS], step = 0;
    int n = 0;
    bool has_step = false;
    while (isspace((unsigned char)*c)) c++;
    if (*c++ != '{') return false;
    for (bool first = true;; first = false) {
        while (isspace((unsigned char)*c)) c++;
        if (*c == '}') break;
        if (!first && *c++ != ',') return false;
        while (isspace((unsigned char)*c)) c++;
        char key[48], text[32];
        if (*c++ != '"' || !string(&c, key, sizeof key)) return false;
        while (isspace((unsigned char)*c)) c++;
        if (*c++ != ':') return false;
        while (isspace((unsigned char)*c)) c++;
        if (*c == '"') {
            c++;
            if (!string(&c, text, sizeof text)) return false;
            if (!strcmp(key, "event")) snprintf(event, sizeof event, "%s", text);
        } else if (!strncmp(c, "null", 4)) {
            c += 4;
        } else {
            char *end;
            errno = 0;
            double v = strtod(c, &end);
            if (end == c || errno == ERANGE) return false;
            c = end;
            if (!strcmp(key, "step")) step = v, has_step = true;
            else if (drawn(key) && n < MAX_KEYS) {
                snprintf(keys[n], sizeof keys[n], "%s", key);
                values[n++] = v;
            }
        }
    }
    while (isspace((unsigned char)*++c)) {}
    if (*c || !*event) return false;
    if (!strcmp(event, "summary")) return true; /* the last evaluation's numbers again */
    for (int i = 0; i < n && has_step; i++)
        if (!add(p, event, keys[i], step, values[i])) return false;
    return true;
}

static bool read_metrics(const char *path, plot *p)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "hetex plot: cannot read '%s': %s\n", path, strerror(errno));
        return false;
    }
    char *buf = NULL;
    size_t cap = 0;
    long no = 0;
    bool ok = true;
    while (ok && getline(&buf, &cap, f) > 0) {
        no++;
        if (!line(p, buf)) {
            fprintf(stderr, "hetex plot: '%s' line %ld is not a metrics line (a JSON object "
                    "with an \"event\", as --metrics writes)\n", path, no);
            ok = false;
        }
    }
    free(buf);
    fclose(f);
    if (ok && !p->points)
        fprintf(stderr, "hetex plot: '%s' holds no numbers to draw (%ld lines)\n", path, no);
    return ok && p->points;
}

/* gnuplot's script with the data inline; false when gnuplot failed. */
static bool draw(const plot *p, const char *png, const char *title)
{
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) return false;
    bool right = false;
    for (int i = 0; i < p->n; i++) right |= right_axis(p->s[i].key);
    fprintf(g, "set terminal png size 900,520\nset output '%s'\nset title '%s' noenhanced\n"
               "set xlabel 'step'\nset ylabel 'loss'\nset key outside bottom center horizontal "
               "noenhanced\nset grid\n", png, title);
    if (right) fprintf(g, "set ytics nomirror\nset y2tics\nset y2label 'accuracy, AUC'\n");
    for (int i = 0; i < p->n; i++) {
        fprintf(g, "$s%d << EOD\n", i);
        for (int k = 0; k < p->s[i].n; k++) fprintf(g, "%.17g %.17g\n", p->s[i].x[k], p->s[i].y[k]);
        fprintf(g, "EOD\n");
    }
    fprintf(g, "plot ");
    for (int i = 0; i < p->n; i++) {
        const series *s = &p->s[i];
        bool every_step = !strcmp(s->event, "step");
        fprintf(g, "%s$s%d using 1:2 axes x1y%d with %s title '%s (%s)'", i ? ", " : "", i,
                right_axis(s->key) ? 2 : 1, every_step ? "lines lw 1" : "linespoints lw 2 pt 7",
                s->key, every_step ? "every step" : s->event);
    }
    fprintf(g, "\n");
    int rc = pclose(g);
    if (rc) {
        fprintf(stderr, "hetex plot: gnuplot failed (%s); '%s' is not written\n",
                rc == 127 << 8 ? "not installed: apt-get install gnuplot-nox" : "its message is above",
                png);
        return false;
    }
    return true;
}

int hx_cmd_plot(int argc, char **argv)
{
    const char *metrics = NULL, *output = NULL, *title = NULL;
    const cli_flag flags[] = {
        CLI_FLAG_TEXT("--output", &output),
        CLI_FLAG_TEXT("--title", &title),
    };
    const cli_command c = {.name = "plot", .usage = usage, .flags = flags,
                           .n_flags = CLI_COUNT(flags), .positional = &metrics,
                           .positional_name = "METRICS"};
    int rc = cli_parse(&c, argc, argv);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    char png[4096];
    size_t len = strlen(metrics);
    if (!output) {
        bool jsonl = len > 6 && !strcmp(metrics + len - 6, ".jsonl");
        snprintf(png, sizeof png, "%.*s.png", (int)(jsonl ? len - 6 : len), metrics);
        output = png;
    }
    const char *name = strrchr(metrics, '/');
    title = title ? title : name ? name + 1 : metrics;
    if (strpbrk(output, "'\n") || strpbrk(title, "'\n"))
        return cli_flag_error("plot", "%s: a quote or a newline cannot be passed to gnuplot",
                              strpbrk(output, "'\n") ? "--output" : "--title");
    if (!cli_check_output("plot", "--output", output, CLI_PATH_FILE)) return CLI_EXIT_USAGE;
    plot p = {0};
    bool ok = read_metrics(metrics, &p) && draw(&p, output, title);
    if (ok) {
        FILE *f = fopen(output, "rb");
        unsigned char head[4] = {0};
        ok = f && fread(head, 1, 4, f) == 4 && !memcmp(head, "\x89PNG", 4);
        if (f) fclose(f);
        if (!ok) fprintf(stderr, "hetex plot: gnuplot wrote no PNG to '%s'\n", output);
    }
    if (ok) printf("hetex plot: '%s': %d series, %ld points from '%s'\n", output, p.n, p.points, metrics);
    for (int i = 0; i < p.n; i++) {
        free(p.s[i].x);
        free(p.s[i].y);
    }
    return ok ? 0 : 1;
}
