/* One JSON object a line (--metrics files, benchmark results) as its
 * fields: strings, numbers, true, false, null; nested arrays and objects
 * checked and skipped. */
#include "plot.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void blank(const char **c)
{
    while (isspace((unsigned char)**c)) (*c)++;
}

/* A string at *c (after its opening quote) into buf (escapes kept as
 * written; NULL: not kept); *c past its closing quote. */
static bool string(const char **c, char *buf, size_t n)
{
    size_t k = 0;
    for (; **c && **c != '"'; (*c)++) {
        if ((unsigned char)**c < 0x20) return false;
        if (**c == '\\' && !*++*c) return false;
        if (buf && k + 1 < n) buf[k++] = **c;
    }
    if (buf) buf[k] = 0;
    return **c == '"' && (++*c, true);
}

/* A JSON number at *c (not inf, nan, hex or a leading '+'). */
static bool number(const char **c, double *v)
{
    const char *s = *c;
    if (!(*s == '-' || isdigit((unsigned char)*s))) return false;
    if (*s == '-') s++;
    if (!isdigit((unsigned char)*s) || (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))) return false;
    char *end;
    errno = 0;
    *v = strtod(*c, &end);
    if (end == *c || errno == ERANGE) return false;
    *c = end;
    return true;
}

static bool word(const char **c, const char *w)
{
    size_t n = strlen(w);
    if (strncmp(*c, w, n)) return false;
    *c += n;
    return true;
}

/* Any value at *c, skipped (depth bounds nesting). */
static bool skip_value(const char **c, int depth)
{
    blank(c);
    double v;
    if (**c == '"') return ++*c, string(c, NULL, 0);
    if (**c == '[' || **c == '{') {
        char close = **c == '[' ? ']' : '}';
        bool object = close == '}';
        if (depth > 32) return false;
        (*c)++;
        blank(c);
        if (**c == close) return ++*c, true;
        for (;;) {
            if (object) {
                blank(c);
                if (*(*c)++ != '"' || !string(c, NULL, 0)) return false;
                blank(c);
                if (*(*c)++ != ':') return false;
            }
            if (!skip_value(c, depth + 1)) return false;
            blank(c);
            if (**c == close) return ++*c, true;
            if (*(*c)++ != ',') return false;
        }
    }
    return number(c, &v) || word(c, "true") || word(c, "false") || word(c, "null");
}

int plot_json_fields(const char *line, plot_field *out, int max)
{
    const char *c = line;
    int n = 0;
    blank(&c);
    if (*c++ != '{') return -1;
    blank(&c);
    if (*c == '}') {
        c++;
    } else {
        for (;;) {
            plot_field f = {0};
            blank(&c);
            if (*c++ != '"' || !string(&c, f.key, sizeof f.key)) return -1;
            blank(&c);
            if (*c++ != ':') return -1;
            blank(&c);
            if (*c == '"') {
                c++;
                if (!string(&c, f.text, sizeof f.text)) return -1;
            } else if (number(&c, &f.num)) {
                f.number = true;
            } else if (word(&c, "true")) {
                snprintf(f.text, sizeof f.text, "true");
            } else if (word(&c, "false")) {
                snprintf(f.text, sizeof f.text, "false");
            } else if (!skip_value(&c, 0)) {
                return -1;
            }
            if (n < max) out[n++] = f;
            blank(&c);
            if (*c == '}') {
                c++;
                break;
            }
            if (*c++ != ',') return -1;
        }
    }
    blank(&c);
    return *c ? -1 : n;
}

const plot_field *plot_json_find(const plot_field *f, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].key, key)) return &f[i];
    return NULL;
}
