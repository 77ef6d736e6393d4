/* hetex data input, internal: row tables, field parsing, the block parser
 * the reader's threads run, and small helpers the generator and the
 * feature columns share. The public API is hetex.h's data section. */
#ifndef HX_INPUT_H
#define HX_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "hetex.h"
#include "core/core.h"

/* ---- row tables -------------------------------------------------------------
 * Rows as a struct of arrays; the storage behind every hx_batch. */
typedef struct hx__rows {
    int64_t n, cap;
    int nn, nc; /* numeric and categorical columns */
    float *labels, *numeric;
    uint8_t *missing;
    int64_t *cat;
} hx__rows;

void hx__rows_init(hx__rows *r, int nn, int nc);
/* Grows to hold at least cap rows (keeps the rows already there). */
hx_status hx__rows_reserve(hx__rows *r, int64_t cap);
void hx__rows_free(hx__rows *r);
size_t hx__rows_bytes(const hx__rows *r);
/* Copies count rows src[si..] over dst[di..] (both must have room). */
void hx__rows_copy(hx__rows *dst, int64_t di, const hx__rows *src, int64_t si, int64_t count);
hx_batch hx__rows_batch(const hx__rows *r);

/* ---- fields ------------------------------------------------------------------ */

/* A decimal number (sign, digits, '.', exponent) filling exactly s[0..n);
 * false for anything else, for "inf"/"nan" and for results that overflow. */
bool hx__parse_f64(const char *s, size_t n, double *out);
/* 1..16 hexadecimal digits, the top bit of the value cleared. */
bool hx__parse_hex(const char *s, size_t n, int64_t *out);

uint64_t hx__mix64(uint64_t x); /* splitmix64's finaliser */
/* A uniform double in [0, 1) and a standard normal from a splitmix64 state. */
double hx__uniform(uint64_t *state);
double hx__normal(uint64_t *state);

/* ---- the schema and the block parser ------------------------------------------ */

typedef struct hx__schema {
    hx_reader_config cfg;   /* the user's, with the pointers below */
    hx_column_spec *columns;
    char **names;
    hx_label_map *labels;
    char **label_texts;
    char *missing_token, *label_suffix;
    size_t missing_len, suffix_len;
    int *slot;              /* per column: index among its kind's columns, or -1 */
    int n_numeric, n_categorical, label_column; /* label_column -1: none */
} hx__schema;

/* Checks cfg and deep-copies it. */
hx_status hx__schema_init(hx__schema *s, const hx_reader_config *cfg);
void hx__schema_free(hx__schema *s);

/* One malformed line of a block: its 1-based line within the block, the
 * block's good rows before it, why,
 * the column (0-based, -1 if none) and the start of the offending field. */
typedef struct hx__line_error {
    int64_t line;
    int64_t rows_before; /* good rows of the block before this line */
    hx_malformed_reason reason;
    int column, n_fields;
    char field[40];
} hx__line_error;

typedef struct hx__parsed {
    hx__rows rows;
    int64_t n_lines;
    hx__line_error *errors;
    int64_t n_errors, cap_errors;
} hx__parsed;

/* Parses the complete lines data[0..len) (the last may lack its '\n') into
 * out (rows appended after clearing it). Modifies data (quoted fields are
 * unescaped in place). Fails only when out of memory. */
hx_status hx__parse_block(const hx__schema *s, char *data, size_t len, hx__parsed *out);
void hx__parsed_free(hx__parsed *p);
/* "line 12: column 3 (age): '4x' is not a number" into buf. */
void hx__line_error_format(const hx__schema *s, const hx__line_error *e, int64_t line, char *buf,
                           size_t n);

/* ---- Zipf ------------------------------------------------------------------------
 * Ranks 1..n with P(k) ~ k^-exponent (exponent >= 0), by rejection-inversion
 * (Hoermann and Derflinger, 1996): O(1) per draw, no table. */
typedef struct hx__zipf {
    double exponent, n;
    double h_x1, h_n, s;
} hx__zipf;
void hx__zipf_init(hx__zipf *z, double exponent, int64_t n);
int64_t hx__zipf_draw(const hx__zipf *z, uint64_t *state);

#endif
