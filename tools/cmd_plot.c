/* hetex plot: a training run's --metrics file (JSON lines) drawn as a PNG
 * through gnuplot (tools/plot_draw.c): every numeric series against the
 * step, losses on the left axis, accuracy and AUC on the right. With
 * --bench, a benchmark's results file instead (tools/plot_bench.c). */
#include "commands.h"
#include "plot.h"
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: hetex plot METRICS [options]\n"
    "       hetex plot --bench RESULTS [--output-dir DIR]\n"
    "  METRICS                 a --metrics file of hetex gpt, widedeep, resnet or mlp\n"
    "  --output PNG            the picture (METRICS with .png in place of .jsonl)\n"
    "  --title TEXT            its title (the file's name)\n"
    "  --bench                 METRICS is a benchmark's results (bench/results/NAME.json[l]):\n"
    "                          draw what tools/plot_bench.c's table defines for it, as\n"
    "                          DIR/NAME[-PART].png (./build.sh plot draws them all)\n"
    "  --output-dir DIR        where those go (RESULTS' folder's plots/)\n";

/* Series not drawn: the x axis, clocks, counts and rates. */
static bool drawn(const char *key)
{
    size_t n = strlen(key);
    return strcmp(key, "step") && strcmp(key, "epoch") && strcmp(key, "time_s") &&
           strcmp(key, "seconds") && strcmp(key, "steps") && strcmp(key, "lr") &&
           strcmp(key, "rows") && !(n > 6 && !strcmp(key + n - 6, "_per_s"));
}

static bool right_axis(const char *key) { return strstr(key, "accuracy") || strstr(key, "auc"); }

/* One line {"event":"...","step":N,"key":number|null|"text",...}: its
 * numbers into p, one series per event and key. false: not such a line
 * (or out of memory). */
static bool line(plot *p, const char *text)
{
    plot_field f[PLOT_MAX_FIELDS];
    int n = plot_json_fields(text, f, PLOT_MAX_FIELDS);
    const plot_field *event = n < 0 ? NULL : plot_json_find(f, n, "event");
    if (!event || event->number || !*event->text) return false;
    const plot_field *step = plot_json_find(f, n, "step");
    if (!strcmp(event->text, "summary") || !step || !step->number)
        return true; /* the last evaluation's numbers again; or nothing at a step */
    bool every_step = !strcmp(event->text, "step");
    for (int i = 0; i < n; i++) {
        if (!f[i].number || !drawn(f[i].key)) continue;
        char title[96];
        snprintf(title, sizeof title, "%.47s (%.31s)", f[i].key, every_step ? "every step" : event->text);
        plot_series *s = plot_series_get(p, title);
        if (!s) continue; /* the first PLOT_MAX_SERIES are drawn */
        s->right = right_axis(f[i].key);
        s->thin = every_step;
        if (!plot_add(p, s, step->num, f[i].num)) return false;
    }
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

int hx_cmd_plot(int argc, char **argv)
{
    const char *metrics = NULL, *output = NULL, *title = NULL, *out_dir = NULL;
    bool bench = false;
    const cli_flag flags[] = {
        CLI_FLAG_TEXT("--output", &output),
        CLI_FLAG_TEXT("--title", &title),
        CLI_FLAG_SWITCH("--bench", &bench),
        CLI_FLAG_TEXT("--output-dir", &out_dir),
    };
    const cli_command c = {.name = "plot", .usage = usage, .flags = flags,
                           .n_flags = CLI_COUNT(flags), .positional = &metrics,
                           .positional_name = "METRICS"};
    int rc = cli_parse(&c, argc, argv);
    if (rc) return rc == CLI_HELP ? 0 : rc;
    if (!bench && out_dir) return cli_flag_error("plot", "--output-dir goes with --bench");
    if (bench && (output || title))
        return cli_flag_error("plot", "--bench names and titles its pictures itself: give "
                              "--output-dir, not %s", output ? "--output" : "--title");
    if (bench) return plot_bench(metrics, out_dir);
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
    plot p = {.kind = PLOT_LINES, .xlabel = "step", .ylabel = "loss", .y2label = "accuracy, AUC"};
    bool ok = read_metrics(metrics, &p) && plot_draw(&p, output, title);
    if (ok) printf("hetex plot: '%s': %d series, %ld points from '%s'\n", output, p.n, p.points, metrics);
    plot_free(&p);
    return ok ? 0 : 1;
}
