/* --metrics: training metrics as JSON lines, one object a line, flushed as
 * written (a crash loses at most the line being written); --tensorboard:
 * the same numbers as scalars in a TensorBoard event file. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

static bool on(const cli_metrics *m) { return (m->f || m->tb) && !m->failed; }

bool cli_metrics_open(cli_metrics *m, const char *cmd, const char *path,
                      const char *tensorboard_dir, bool append)
{
    *m = (cli_metrics){.cmd = cmd, .path = path, .t0 = cli_now()};
    if (path && !(m->f = fopen(path, append ? "a" : "w"))) {
        fprintf(stderr, "hetex %s: --metrics '%s': cannot write: %s\n", cmd, path, strerror(errno));
        return false;
    }
    if (tensorboard_dir &&
        !(m->tb = cli_tb_open(cmd, tensorboard_dir, m->tb_path, sizeof m->tb_path))) {
        if (m->f) fclose(m->f);
        m->f = NULL;
        return false;
    }
    return true;
}

static void put(cli_metrics *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(cli_metrics *m, const char *fmt, ...)
{
    if (m->len >= sizeof m->line) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(m->line + m->len, sizeof m->line - m->len, fmt, ap);
    va_end(ap);
    m->len = k < 0 ? sizeof m->line : m->len + (size_t)k;
}

void cli_metrics_begin(cli_metrics *m, const char *event)
{
    if (!on(m)) return;
    m->len = 0;
    m->n_values = 0;
    m->step = 0;
    snprintf(m->event, sizeof m->event, "%s", event);
    put(m, "{\"event\":\"%s\",\"time_s\":%.3f", event, cli_now() - m->t0);
}

/* A scalar for the event file (steps and epochs are its x axis). */
static void scalar(cli_metrics *m, const char *key, double value)
{
    if (!m->tb || !isfinite(value) || m->n_values == CLI_METRICS_MAX_NUMBERS ||
        !strcmp(key, "step") || !strcmp(key, "epoch"))
        return;
    snprintf(m->keys[m->n_values], sizeof m->keys[0], "%s/%s", m->event, key);
    m->values[m->n_values++] = value;
}

void cli_metrics_int(cli_metrics *m, const char *key, int64_t value)
{
    if (!on(m)) return;
    put(m, ",\"%s\":%lld", key, (long long)value);
    if (!strcmp(key, "step")) m->step = value;
    scalar(m, key, (double)value);
}

void cli_metrics_num(cli_metrics *m, const char *key, double value)
{
    if (!on(m)) return;
    if (isfinite(value)) put(m, ",\"%s\":%.17g", key, value);
    else put(m, ",\"%s\":null", key);
    scalar(m, key, value);
}

void cli_metrics_text(cli_metrics *m, const char *key, const char *value, size_t len)
{
    if (!on(m)) return;
    put(m, ",\"%s\":\"", key);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c == '"' || c == '\\') put(m, "\\%c", c);
        else if (c == '\n') put(m, "\\n");
        else if (c < 0x20 || c >= 0x7f) put(m, "\\u%04x", c); /* bytes as code points */
        else put(m, "%c", c);
    }
    put(m, "\"");
}

static bool fail(cli_metrics *m, const char *flag, const char *path, const char *what, int err)
{
    if (!m->failed)
        fprintf(stderr, "hetex %s: %s '%s': %s failed: %s\n", m->cmd, flag, path, what,
                strerror(err));
    m->failed = true;
    return false;
}

bool cli_metrics_end(cli_metrics *m)
{
    if (!m->f && !m->tb) return true;
    if (m->failed) return false;
    if (m->f) {
        if (m->len + 2 > sizeof m->line)
            return fail(m, "--metrics", m->path, "a line over 16 KiB: writing", EOVERFLOW);
        m->line[m->len++] = '}';
        m->line[m->len++] = '\n';
        errno = 0;
        if (fwrite(m->line, 1, m->len, m->f) != m->len || fflush(m->f))
            return fail(m, "--metrics", m->path, "writing", errno ? errno : EIO);
    }
    errno = 0;
    if (m->tb && m->n_values && !cli_tb_write(m->tb, m->step, m->keys, m->values, m->n_values))
        return fail(m, "--tensorboard", m->tb_path, "writing", errno ? errno : EIO);
    return true;
}

bool cli_metrics_close(cli_metrics *m)
{
    bool ok = !m->failed;
    errno = 0;
    if (m->f && fclose(m->f)) ok = fail(m, "--metrics", m->path, "closing", errno ? errno : EIO);
    errno = 0;
    if (m->tb && fclose(m->tb))
        ok = fail(m, "--tensorboard", m->tb_path, "closing", errno ? errno : EIO);
    m->f = m->tb = NULL;
    return ok;
}
