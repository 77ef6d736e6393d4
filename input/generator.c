/* A seeded generator of Criteo-schema rows (see hetex.h): every row is a
 * pure function of (seed, row index), so batches do not depend on the batch
 * size or the thread count, and a TSV file written from it reads back to
 * the same rows. */
#include "input/input.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hx_generator {
    hx_generator_config cfg;
    int64_t *vocab;     /* per categorical column */
    hx__zipf *zipf;     /* per categorical column */
    double *mu, *sigma, *w; /* per numeric column: log1p(x) ~ N(mu, sigma); weight */
    int64_t next_row;
    hx__rows rows;
    float *logits;
    bool any;
    hx_batch out;
};

hx_generator_config hx_generator_config_default(void)
{
    hx_generator_config c;
    memset(&c, 0, sizeof c);
    c.n_rows = (int64_t)1 << 20;
    c.batch_size = 4096;
    c.n_numeric = 13;
    c.n_categorical = 26;
    c.vocab_size = (int64_t)1 << 20;
    c.zipf_exponent = 1.05;
    c.bias = -1.0;
    c.weight_scale = 0.5;
    c.n_threads = 1;
    return c;
}

void hx_generator_free(hx_generator *g)
{
    if (!g) return;
    free(g->vocab);
    free(g->zipf);
    free(g->mu);
    free(g->sigma);
    free(g->w);
    free(g->logits);
    hx__rows_free(&g->rows);
    free(g);
}

static hx_status check(const hx_generator_config *c, const char *w)
{
    if (!c) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: config is NULL", w);
    if (c->n_rows < 0 || c->batch_size < 1)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: n_rows %lld must be >= 0 and batch_size %lld >= 1",
                         w, (long long)c->n_rows, (long long)c->batch_size);
    if (c->first_row < 0 || c->first_row > INT64_MAX - c->n_rows)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: first_row %lld must be >= 0 and first_row + n_rows "
                         "(%lld) at most 2^63 - 1", w, (long long)c->first_row, (long long)c->n_rows);
    if (c->n_numeric < 0 || c->n_categorical < 0 || c->n_numeric > 4096 || c->n_categorical > 4096)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: n_numeric %d and n_categorical %d must be in 0..4096",
                         w, c->n_numeric, c->n_categorical);
    for (int k = 0; k < c->n_categorical; k++) {
        int64_t v = c->vocab_sizes ? c->vocab_sizes[k] : c->vocab_size;
        if (v < 1 || v > ((int64_t)1 << 32))
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: the vocabulary of categorical column %d is %lld; "
                             "it must be in 1 .. 2^32 (ids are written as 8 hex digits)",
                             w, k, (long long)v);
    }
    if (!(c->zipf_exponent >= 0 && c->zipf_exponent <= 100))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: zipf_exponent %g must be in 0..100", w,
                         c->zipf_exponent);
    if (!(c->missing_rate >= 0 && c->missing_rate <= 1))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: missing_rate %g must be in [0, 1]", w, c->missing_rate);
    if (!isfinite(c->bias) || !(c->weight_scale >= 0) || !isfinite(c->weight_scale))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: bias and weight_scale must be finite, weight_scale >= 0", w);
    if (c->n_threads < 1 || c->n_threads > 256)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: n_threads %d must be in 1..256", w, c->n_threads);
    return HX_OK;
}

hx_status hx_generator_create(const hx_generator_config *cfg, hx_generator **out)
{
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_generator_create: out is NULL");
    *out = NULL;
    hx_status st = check(cfg, "hx_generator_create");
    if (st) return st;
    hx_generator *g = calloc(1, sizeof *g);
    if (!g) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_generator_create: out of host memory");
    g->cfg = *cfg;
    g->cfg.vocab_sizes = NULL;
    size_t nn = (size_t)cfg->n_numeric, nc = (size_t)cfg->n_categorical;
    g->vocab = malloc(sizeof *g->vocab * (nc ? nc : 1));
    g->zipf = malloc(sizeof *g->zipf * (nc ? nc : 1));
    g->mu = malloc(sizeof(double) * (nn ? nn : 1));
    g->sigma = malloc(sizeof(double) * (nn ? nn : 1));
    g->w = malloc(sizeof(double) * (nn ? nn : 1));
    g->logits = malloc(sizeof(float) * (size_t)cfg->batch_size);
    hx__rows_init(&g->rows, cfg->n_numeric, cfg->n_categorical);
    if (!g->vocab || !g->zipf || !g->mu || !g->sigma || !g->w || !g->logits ||
        hx__rows_reserve(&g->rows, cfg->batch_size)) {
        hx_generator_free(g);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_generator_create: out of host memory for a batch of "
                         "%lld rows", (long long)cfg->batch_size);
    }
    for (size_t k = 0; k < nc; k++) {
        g->vocab[k] = cfg->vocab_sizes ? cfg->vocab_sizes[k] : cfg->vocab_size;
        hx__zipf_init(&g->zipf[k], cfg->zipf_exponent, g->vocab[k]);
    }
    uint64_t st0 = hx__mix64(cfg->seed ^ 0x6a09e667f3bcc908ull);
    for (size_t j = 0; j < nn; j++) {
        g->mu[j] = 0.5 + 3.5 * hx__uniform(&st0);
        g->sigma[j] = 0.5 + hx__uniform(&st0);
        g->w[j] = cfg->weight_scale * hx__normal(&st0);
    }
    *out = g;
    return HX_OK;
}

/* The planted weight of id `id` of categorical column k. */
static double category_weight(const hx_generator *g, int k, int64_t id)
{
    uint64_t s = hx__mix64(g->cfg.seed ^ 0xbb67ae8584caa73bull) ^ hx__mix64(((uint64_t)k << 40) ^ (uint64_t)id);
    return g->cfg.weight_scale * hx__normal(&s);
}

static void make_row(const hx_generator *g, int64_t i, hx__rows *rows, int64_t r, float *logit)
{
    const hx_generator_config *c = &g->cfg;
    uint64_t st = hx__mix64(c->seed ^ hx__mix64((uint64_t)i * 0x9E3779B97F4A7C15ull + 1));
    double z = c->bias;
    float *num = rows->numeric + (size_t)r * (size_t)rows->nn;
    uint8_t *miss = rows->missing + (size_t)r * (size_t)rows->nn;
    int64_t *cat = rows->cat + (size_t)r * (size_t)rows->nc;
    for (int j = 0; j < c->n_numeric; j++) {
        if (c->missing_rate > 0 && hx__uniform(&st) < c->missing_rate) {
            num[j] = 0;
            miss[j] = 1;
            continue;
        }
        double x = floor(expm1(g->mu[j] + g->sigma[j] * hx__normal(&st)));
        x = x < 0 ? 0 : x > 1e7 ? 1e7 : x;
        num[j] = (float)x;
        miss[j] = 0;
        z += g->w[j] * (log1p(x) - g->mu[j]) / g->sigma[j];
    }
    for (int k = 0; k < c->n_categorical; k++) {
        if (c->missing_rate > 0 && hx__uniform(&st) < c->missing_rate) {
            cat[k] = HX_ID_MISSING;
            continue;
        }
        cat[k] = hx__zipf_draw(&g->zipf[k], &st) - 1;
        z += category_weight(g, k, cat[k]);
    }
    double p = 1.0 / (1.0 + exp(-z));
    rows->labels[r] = hx__uniform(&st) < p ? 1.0f : 0.0f;
    *logit = (float)z;
}

hx_status hx_generator_next(hx_generator *g, const hx_batch **out)
{
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_generator_next: out is NULL");
    *out = NULL;
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_generator_next: generator is NULL");
    int64_t n = g->cfg.n_rows - g->next_row;
    if (n > g->cfg.batch_size) n = g->cfg.batch_size;
    if (n <= 0) return HX_OK;
    int64_t first = g->next_row;
#pragma omp parallel for num_threads(g->cfg.n_threads) schedule(static) if (n >= 256)
    for (int64_t r = 0; r < n; r++) make_row(g, g->cfg.first_row + first + r, &g->rows, r, &g->logits[r]);
    g->rows.n = n;
    g->next_row += n;
    g->any = true;
    g->out = hx__rows_batch(&g->rows);
    *out = &g->out;
    return HX_OK;
}

const float *hx_generator_logits(const hx_generator *g) { return g && g->any ? g->logits : NULL; }

hx_status hx_generator_rewind(hx_generator *g)
{
    if (!g) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_generator_rewind: generator is NULL");
    g->next_row = 0;
    return HX_OK;
}

/* line holds line_cap >= 24 * (1 + columns) bytes: every field fits in 24. */
static int write_batch(FILE *f, const hx_batch *b, char *line, size_t line_cap)
{
    for (int64_t r = 0; r < b->n; r++) {
        size_t k = (size_t)snprintf(line, line_cap, "%d", (int)b->labels[r]);
        for (int j = 0; j < b->n_numeric; j++) {
            size_t at = (size_t)r * (size_t)b->n_numeric + (size_t)j;
            line[k++] = '\t';
            if (!b->numeric_missing[at])
                k += (size_t)snprintf(line + k, line_cap - k, "%lld", (long long)b->numeric[at]);
        }
        for (int j = 0; j < b->n_categorical; j++) {
            int64_t id = b->categorical[(size_t)r * (size_t)b->n_categorical + (size_t)j];
            line[k++] = '\t';
            if (id != HX_ID_MISSING)
                k += (size_t)snprintf(line + k, line_cap - k, "%08llx", (unsigned long long)id);
        }
        line[k++] = '\n';
        if (fwrite(line, 1, k, f) != k) return -1;
    }
    return 0;
}

hx_status hx_generator_write_tsv(const hx_generator_config *cfg, const char *path)
{
    if (!path) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_generator_write_tsv: path is NULL");
    hx_generator *g;
    hx_status st = hx_generator_create(cfg, &g);
    if (st) return st;
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    size_t line_cap = 24 * (1 + (size_t)cfg->n_numeric + (size_t)cfg->n_categorical);
    char *line = malloc(line_cap);
    if (!tmp || !line) {
        free(tmp);
        free(line);
        hx_generator_free(g);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_generator_write_tsv: out of host memory");
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = hx__error(HX_ERR_IO, "hx_generator_write_tsv: cannot create %s: %s", tmp, strerror(errno));
    } else {
        const hx_batch *b;
        int bad = 0;
        while (!bad && hx_generator_next(g, &b) == HX_OK && b) bad = write_batch(f, b, line, line_cap);
        bad |= fclose(f) != 0;
        if (bad || rename(tmp, path) != 0) {
            st = hx__error(HX_ERR_IO, "hx_generator_write_tsv: writing %s failed: %s", path,
                           bad ? "a write or close failed (disk full?)" : strerror(errno));
            remove(tmp);
        }
    }
    free(tmp);
    free(line);
    hx_generator_free(g);
    return st;
}
