/* Progress of long work: a bar redrawn in place on a terminal, a line per
 * interval in a log or pipe, nothing with --quiet. */
#include "cli/cli.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_duration(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e7) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.1fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

void cli_progress_start(cli_progress *p, FILE *out, bool quiet, double interval,
                        const char *label, const char *unit, double total)
{
    *p = (cli_progress){.out = out, .tty = isatty(fileno(out)), .quiet = quiet,
                        .interval = interval > 0 ? interval : 10, .label = label, .unit = unit,
                        .total = total, .t0 = cli_now()};
    p->last = p->tty ? p->t0 - 1 : p->t0; /* a bar from the first update; lines after an interval */
}

/* "epoch 3 [#####.....]  45%  12000/32561 examples  3.2s, ETA 4.1s  3700 examples/s  loss 0.4123" */
static void line(const cli_progress *p, double done, double loss, double t, char *buf, size_t n)
{
    double elapsed = t - p->t0, rate = elapsed > 0 ? done / elapsed : 0;
    char el[16], eta[16];
    cli_duration(elapsed, el, sizeof el);
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "%s", p->label);
    if (p->total > 0) {
        double frac = fmin(done / p->total, 1);
        cli_duration(rate > 0 ? (p->total - done) / rate : -1, eta, sizeof eta);
        if (p->tty) {
            enum { WIDTH = 24 };
            char bar[WIDTH + 1];
            int fill = (int)(frac * WIDTH);
            memset(bar, '#', (size_t)fill);
            memset(bar + fill, '.', (size_t)(WIDTH - fill));
            bar[WIDTH] = 0;
            k += (size_t)snprintf(buf + k, n - k, " [%s]", bar);
        }
        k += (size_t)snprintf(buf + k, n - k, " %3.0f%%  %.0f/%.0f %s  %s, ETA %s", 100 * frac,
                              done, p->total, p->unit, el, eta);
    } else {
        k += (size_t)snprintf(buf + k, n - k, "  %.0f %s  %s", done, p->unit, el);
    }
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "  %.0f %s/s", rate, p->unit);
    if (k < n && !isnan(loss)) snprintf(buf + k, n - k, "  loss %.4f", loss);
}

void cli_progress_update(cli_progress *p, double done, double loss)
{
    if (p->quiet) return;
    double t = cli_now();
    if (t - p->last < (p->tty ? 0.1 : p->interval)) return;
    p->last = t;
    char buf[256];
    line(p, done, loss, t, buf, sizeof buf);
    if (p->tty) {
        fprintf(p->out, "\r%-100s", buf);
        p->drawn = true;
    } else {
        fprintf(p->out, "progress: %s\n", buf);
    }
    fflush(p->out);
}

void cli_progress_end(cli_progress *p)
{
    if (p->drawn) fprintf(p->out, "\r%100s\r", "");
    p->drawn = false;
    fflush(p->out);
}
