/* The block parser: complete lines of delimited text -> rows, malformed
 * lines -> errors. Pure: the reader's parser threads run it on their own
 * blocks. */
#include "input/input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static bool is_space(char c) { return c == ' ' || c == '\t'; }

static bool is_missing(const hx__schema *s, const char *f, size_t n)
{
    return n == 0 || (s->missing_token && n == s->missing_len && memcmp(f, s->missing_token, n) == 0);
}

static hx_status add_error(hx__parsed *p, int64_t line, hx_malformed_reason why, int column,
                           int n_fields, const char *f, size_t n)
{
    if (p->n_errors == p->cap_errors) {
        int64_t c = p->cap_errors ? 2 * p->cap_errors : 16;
        hx__line_error *e = realloc(p->errors, sizeof *e * (size_t)c);
        if (!e) return hx__error(HX_ERR_OUT_OF_MEMORY, "data input: out of host memory for errors");
        p->errors = e;
        p->cap_errors = c;
    }
    hx__line_error *e = &p->errors[p->n_errors++];
    e->line = line;
    e->rows_before = p->rows.n;
    e->reason = why;
    e->column = column;
    e->n_fields = n_fields;
    size_t k = n < sizeof e->field - 1 ? n : sizeof e->field - 1;
    if (f) memcpy(e->field, f, k);
    e->field[f ? k : 0] = 0;
    return HX_OK;
}

/* One field's value into row `r`; false (with *why) when it does not parse. */
static bool put_field(const hx__schema *s, hx__rows *rows, int64_t r, int col, const char *f,
                      size_t n, hx_malformed_reason *why)
{
    const hx_column_spec *c = &s->columns[col];
    int k = s->slot[col];
    double v;
    switch (c->kind) {
    case HX_COLUMN_NUMERIC: {
        size_t at = (size_t)r * (size_t)rows->nn + (size_t)k;
        if (is_missing(s, f, n)) {
            rows->numeric[at] = c->missing_value;
            rows->missing[at] = 1;
            return true;
        }
        if (!hx__parse_f64(f, n, &v) || v > 3.4028234663852886e38 || v < -3.4028234663852886e38) {
            *why = HX_MALFORMED_NUMBER;
            return false;
        }
        rows->numeric[at] = (float)v;
        rows->missing[at] = 0;
        return true;
    }
    case HX_COLUMN_CATEGORICAL: {
        int64_t *id = &rows->cat[(size_t)r * (size_t)rows->nc + (size_t)k];
        if (is_missing(s, f, n)) {
            *id = HX_ID_MISSING;
            return true;
        }
        if (c->parse == HX_CATEGORY_HEX) {
            if (!hx__parse_hex(f, n, id)) {
                *why = HX_MALFORMED_NUMBER;
                return false;
            }
            return true;
        }
        *id = (int64_t)(XXH3_64bits_withSeed(f, n, s->cfg.hash_seed) & (uint64_t)INT64_MAX);
        return true;
    }
    case HX_COLUMN_LABEL:
        *why = HX_MALFORMED_LABEL;
        if (s->suffix_len && n >= s->suffix_len &&
            memcmp(f + n - s->suffix_len, s->label_suffix, s->suffix_len) == 0)
            n -= s->suffix_len;
        if (is_missing(s, f, n)) return false;
        if (s->cfg.n_labels) {
            for (int i = 0; i < s->cfg.n_labels; i++)
                if (strlen(s->labels[i].text) == n && memcmp(s->labels[i].text, f, n) == 0) {
                    rows->labels[r] = s->labels[i].value;
                    return true;
                }
            return false;
        }
        if (!hx__parse_f64(f, n, &v)) return false;
        rows->labels[r] = (float)v;
        return true;
    default:
        return true;
    }
}

/* Bad quoting in field `col`; past the schema's columns the line has too
 * many fields, which is what it reports. */
static hx_status quote_error(hx__parsed *out, int64_t line, int col, int n_cols, const char *fs,
                             const char *e)
{
    if (col >= n_cols) return add_error(out, line, HX_MALFORMED_COLUMNS, -1, col + 1, NULL, 0);
    return add_error(out, line, HX_MALFORMED_QUOTE, col, col + 1, fs, (size_t)(e - fs));
}

/* Parses line [p, e) (no '\n'); a good row is committed to out->rows. */
static hx_status parse_line(const hx__schema *s, char *p, char *e, int64_t line, hx__parsed *out)
{
    if (e > p && e[-1] == '\r') e--;
    if ((size_t)(e - p) > s->cfg.max_line_bytes)
        return add_error(out, line, HX_MALFORMED_TOO_LONG, -1, 0, NULL, 0);
    char *q = p;
    if (s->cfg.trim_spaces)
        while (q < e && is_space(*q)) q++;
    if (q == e) return HX_OK; /* blank */
    hx__rows *rows = &out->rows;
    if (rows->n == rows->cap) {
        hx_status st = hx__rows_reserve(rows, rows->n + 1);
        if (st) return st;
    }
    int64_t r = rows->n;
    rows->labels[r] = 0;
    const char delim = s->cfg.delimiter;
    const bool trim = s->cfg.trim_spaces;
    int n_cols = s->cfg.n_columns, col = 0, bad_col = -1;
    hx_malformed_reason bad_why = HX_MALFORMED_NUMBER;
    const char *bad_field = NULL;
    size_t bad_len = 0;
    char *f = p;
    for (;;) {
        char *fs = f, *fe, *next;
        if (trim)
            while (fs < e && is_space(*fs)) fs++;
        if (s->cfg.quotes && fs < e && *fs == '"') {
            /* Unescape in place: the field's text becomes [fs, fe). */
            char *w = fs, *rd = fs + 1;
            for (;;) {
                if (rd == e) return quote_error(out, line, col, n_cols, fs, e);
                if (*rd == '"') {
                    if (rd + 1 < e && rd[1] == '"') {
                        *w++ = '"';
                        rd += 2;
                        continue;
                    }
                    rd++;
                    break;
                }
                *w++ = *rd++;
            }
            fe = w;
            if (trim)
                while (rd < e && is_space(*rd)) rd++;
            if (rd < e && *rd != delim)
                return quote_error(out, line, col, n_cols, fs, e);
            next = rd;
        } else {
            char *d = fs < e ? memchr(fs, delim, (size_t)(e - fs)) : NULL;
            next = d ? d : e;
            fe = next;
            if (trim)
                while (fe > fs && is_space(fe[-1])) fe--;
        }
        hx_malformed_reason why;
        if (col < n_cols && bad_col < 0 && !put_field(s, rows, r, col, fs, (size_t)(fe - fs), &why)) {
            /* Keep splitting: a wrong column count is the error to report. */
            bad_col = col;
            bad_why = why;
            bad_field = fs;
            bad_len = (size_t)(fe - fs);
        }
        col++;
        if (next == e) break;
        f = next + 1;
    }
    if (col != n_cols) return add_error(out, line, HX_MALFORMED_COLUMNS, -1, col, NULL, 0);
    if (bad_col >= 0) return add_error(out, line, bad_why, bad_col, col, bad_field, bad_len);
    rows->n++;
    return HX_OK;
}

hx_status hx__parse_block(const hx__schema *s, char *data, size_t len, hx__parsed *out)
{
    out->rows.n = 0;
    out->n_lines = 0;
    out->n_errors = 0;
    char *p = data, *end = data + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        hx_status st = parse_line(s, p, e, ++out->n_lines, out);
        if (st) return st;
        p = nl ? nl + 1 : end;
    }
    return HX_OK;
}

void hx__parsed_free(hx__parsed *p)
{
    hx__rows_free(&p->rows);
    free(p->errors);
    p->errors = NULL;
    p->n_errors = p->cap_errors = 0;
}

void hx__line_error_format(const hx__schema *s, const hx__line_error *e, int64_t line, char *buf,
                           size_t n)
{
    char where[96] = "";
    if (e->column >= 0 && e->column < s->cfg.n_columns) {
        const char *name = s->columns[e->column].name;
        snprintf(where, sizeof where, ", column %d (%s)", e->column + 1, name ? name : "unnamed");
    }
    /* Show the field with non-printable bytes escaped. */
    char shown[4 * sizeof e->field];
    size_t k = 0;
    for (const unsigned char *c = (const unsigned char *)e->field; *c && k + 5 < sizeof shown; c++) {
        if (*c >= 32 && *c < 127) shown[k++] = (char)*c;
        else k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02x", *c);
    }
    shown[k] = 0;
    switch (e->reason) {
    case HX_MALFORMED_COLUMNS:
        snprintf(buf, n, "line %lld: %d fields, the schema has %d columns", (long long)line,
                 e->n_fields, s->cfg.n_columns);
        break;
    case HX_MALFORMED_TOO_LONG:
        snprintf(buf, n, "line %lld: longer than max_line_bytes (%zu)", (long long)line,
                 s->cfg.max_line_bytes);
        break;
    case HX_MALFORMED_NUMBER:
        snprintf(buf, n, "line %lld%s: '%s' is not a %s", (long long)line, where, shown,
                 s->columns[e->column].kind == HX_COLUMN_CATEGORICAL ? "hexadecimal id"
                                                                   : "finite decimal number");
        break;
    case HX_MALFORMED_LABEL:
        snprintf(buf, n, "line %lld%s: label '%s' is %s", (long long)line, where, shown,
                 s->cfg.n_labels ? "missing or not in the label map" : "missing or not a number");
        break;
    default:
        snprintf(buf, n, "line %lld%s: an unterminated quote or text after a closing quote: '%s'",
                 (long long)line, where, shown);
        break;
    }
}
