/* Strict flags: a number parses whole (no trailing text, no silent
 * truncation: "1e3" is not a batch size, "2x" not an epoch count) and fits
 * its range, and the error names the flag, the value and what is allowed. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A decimal whole number, optionally signed: the whole text, no spaces. */
static bool whole(const char *v, bool allow_sign, long double *out)
{
    const char *p = v;
    if (allow_sign && *p == '-') p++;
    if (!*p) return false;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9') return false;
    errno = 0;
    char *end;
    long double x = strtold(v, &end);
    if (errno || *end) return false;
    *out = x;
    return true;
}

/* A finite decimal number: digits, one optional point, an optional
 * exponent; no hex, inf or nan, no trailing text. */
static bool decimal(const char *v, double *out)
{
    const char *p = v;
    if (*p == '-' || *p == '+') p++;
    if (!((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9'))) return false;
    if (strpbrk(p, "xXnNiI")) return false; /* 0x.., nan, inf */
    errno = 0;
    char *end;
    double x = strtod(v, &end);
    if (errno == ERANGE || *end || !isfinite(x)) return false;
    *out = x;
    return true;
}

static void number(double x, char *buf, size_t n)
{
    if (x == floor(x) && fabs(x) < 1e15) snprintf(buf, n, "%.0f", x);
    else snprintf(buf, n, "%g", x);
}

/* A byte count's bound as a person reads it: 16M, 1G, else bytes. */
static void bytes_text(double x, char *buf, size_t n)
{
    static const char suffix[] = "GMK";
    for (int k = 0; k < 3; k++) {
        double unit = (double)(1ull << (10 * (3 - k)));
        if (x >= unit && fmod(x, unit) == 0) {
            snprintf(buf, n, "%.0f%c", x / unit, suffix[k]);
            return;
        }
    }
    snprintf(buf, n, "%.0f", x);
}

void cli_flag_range(const cli_flag *f, char *buf, size_t n)
{
    char lo[32], hi[32];
    switch (f->kind) {
    case CLI_SWITCH: snprintf(buf, n, "no value"); return;
    case CLI_STRING: snprintf(buf, n, "a non-empty value"); return;
    case CLI_U64: snprintf(buf, n, "a whole number from 0 to %llu", (unsigned long long)UINT64_MAX); return;
    case CLI_CHOICE: snprintf(buf, n, "one of %s", f->choices); return;
    case CLI_BYTES:
        bytes_text(f->lo, lo, sizeof lo);
        bytes_text(f->hi, hi, sizeof hi);
        snprintf(buf, n, "a byte count from %s to %s (a K, M or G suffix: binary units)", lo, hi);
        return;
    case CLI_DOUBLE:
        number(f->lo, lo, sizeof lo);
        number(f->hi, hi, sizeof hi);
        snprintf(buf, n, "a number %s %s and at most %s", f->lo_open ? "above" : "from", lo, hi);
        return;
    case CLI_INT:
    case CLI_INT64:
    case CLI_INTS:
        number(f->lo, lo, sizeof lo);
        number(f->hi, hi, sizeof hi);
        if (f->kind == CLI_INTS)
            snprintf(buf, n, "%d whole numbers joined by commas, each from %s to %s", f->count, lo, hi);
        else
            snprintf(buf, n, "a whole number from %s to %s", lo, hi);
        return;
    }
    snprintf(buf, n, "?");
}

static bool in_range(const cli_flag *f, long double x)
{
    return (f->lo_open ? x > f->lo : x >= f->lo) && x <= f->hi;
}

/* "16M" -> 16777216; digits with an optional fraction, then K, M or G. */
static bool byte_count(const char *v, long double *out)
{
    size_t len = strlen(v);
    if (!len || len > 40) return false;
    char num[48];
    memcpy(num, v, len + 1);
    long double unit = 1;
    char last = num[len - 1];
    if (last == 'K' || last == 'k') unit = 1024.0L;
    else if (last == 'M' || last == 'm') unit = 1048576.0L;
    else if (last == 'G' || last == 'g') unit = 1073741824.0L;
    if (unit != 1) num[--len] = 0;
    const char *dot = strchr(num, '.');
    for (const char *q = num; *q; q++)
        if ((*q < '0' || *q > '9') && q != dot) return false;
    if (!len || (dot && (dot == num || !dot[1]))) return false;
    long double x = strtold(num, NULL) * unit;
    if (x != floorl(x)) return false; /* "1.3K" is not a whole byte count */
    *out = x;
    return true;
}

/* Parses v for f into f->out; false with the reason in why. */
static bool take_value(const cli_flag *f, const char *v, const char **why)
{
    long double x;
    double d;
    *why = "out of range";
    switch (f->kind) {
    case CLI_SWITCH: return false;
    case CLI_STRING:
        if (!*v) { *why = "empty"; return false; }
        *(const char **)f->out = v;
        return true;
    case CLI_CHOICE: {
        int k = 0;
        size_t len = strlen(v);
        for (const char *c = f->choices; c; k++) {
            const char *bar = strchr(c, '|');
            size_t cl = bar ? (size_t)(bar - c) : strlen(c);
            if (cl == len && !strncmp(c, v, len)) {
                *(int *)f->out = k;
                return true;
            }
            c = bar ? bar + 1 : NULL;
        }
        *why = "not one of the choices";
        return false;
    }
    case CLI_U64: {
        if (!whole(v, false, &x)) { *why = "not a whole number"; return false; }
        errno = 0;
        char *end;
        unsigned long long u = strtoull(v, &end, 10);
        if (errno == ERANGE) return false;
        *(uint64_t *)f->out = u;
        return true;
    }
    case CLI_INT:
    case CLI_INT64:
        if (!whole(v, true, &x)) { *why = "not a whole number"; return false; }
        if (!in_range(f, x)) return false;
        if (f->kind == CLI_INT) *(int *)f->out = (int)x;
        else *(int64_t *)f->out = (int64_t)x;
        return true;
    case CLI_DOUBLE:
        if (!decimal(v, &d)) { *why = "not a number"; return false; }
        if (!in_range(f, d)) return false;
        *(double *)f->out = d;
        return true;
    case CLI_BYTES:
        if (!byte_count(v, &x)) { *why = "not a byte count"; return false; }
        if (!in_range(f, x)) return false;
        *(size_t *)f->out = (size_t)x;
        return true;
    case CLI_INTS: {
        int vals[16], k = 0;
        const char *p = v;
        while (k < f->count && k < 16) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            char part[32];
            if (!len || len >= sizeof part) { *why = "not whole numbers joined by commas"; return false; }
            memcpy(part, p, len);
            part[len] = 0;
            if (!whole(part, true, &x)) { *why = "not whole numbers joined by commas"; return false; }
            if (!in_range(f, x)) return false;
            vals[k++] = (int)x;
            if (!comma) break;
            p = comma + 1;
            if (k == f->count) { *why = "too many numbers"; return false; }
        }
        if (k != f->count) { *why = "too few numbers"; return false; }
        memcpy(f->out, vals, sizeof *vals * (size_t)k);
        return true;
    }
    }
    return false;
}

int cli_flag_error(const char *cmd, const char *fmt, ...)
{
    fprintf(stderr, "hetex %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_EXIT_USAGE;
}

static const cli_flag *find(const cli_command *c, const char *name, size_t len)
{
    for (int i = 0; i < c->n_flags; i++)
        if (strlen(c->flags[i].name) == len && !strncmp(c->flags[i].name, name, len))
            return &c->flags[i];
    return NULL;
}

int cli_parse(const cli_command *c, int argc, char **argv)
{
    bool have_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(c->usage, stdout);
            return CLI_HELP;
        }
        if (a[0] != '-' || !a[1]) {
            if (!c->positional)
                return cli_flag_error(c->name, "unexpected argument '%s' (options start with --; "
                                      "see hetex %s --help)", a, c->name);
            if (have_positional)
                return cli_flag_error(c->name, "a second %s '%s': give one (see hetex %s --help)",
                                      c->positional_name, a, c->name);
            *c->positional = a;
            have_positional = true;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_flag *f = find(c, a, len);
        if (!f)
            return cli_flag_error(c->name, "unknown option %.*s (see hetex %s --help)", (int)len, a,
                                  c->name);
        if (f->kind == CLI_SWITCH) {
            if (eq) return cli_flag_error(c->name, "%s takes no value (got '%s')", f->name, eq + 1);
            *(bool *)f->out = true;
            continue;
        }
        const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        char range[160];
        cli_flag_range(f, range, sizeof range);
        if (!v) return cli_flag_error(c->name, "%s needs a value: %s", f->name, range);
        const char *why;
        if (!take_value(f, v, &why))
            return cli_flag_error(c->name, "%s '%s': %s; allowed: %s", f->name, v, why, range);
    }
    if (c->positional && !have_positional)
        return cli_flag_error(c->name, "no %s given (usage: see hetex %s --help)",
                              c->positional_name, c->name);
    return CLI_OK;
}
