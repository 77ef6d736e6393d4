/* Feature columns: training statistics (Welford moments, quantile samples,
 * vocabularies) and the transform of a batch into dense values, per-column
 * ids and the wide bag. */
#include "input/input.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define QUANTILE_SAMPLE ((int64_t)1 << 17)
#define KEY_EMPTY INT64_MIN /* raw ids are >= 0 or HX_ID_MISSING */

/* Open addressing raw id -> value (a count while fitting, an index after). */
typedef struct id_map {
    int64_t *keys, *vals;
    size_t cap, n;
} id_map;

typedef struct fcol {
    hx_feature_column c;
    char *name;
    double *bounds;
    int n_bounds;
    bool dense;
    int index;
    int64_t card, wide_offset;
    int64_t count;            /* Welford */
    double mean, m2, std;
    double *sample;           /* quantiles: a reservoir */
    int64_t seen;
    uint64_t rng;
    id_map map;               /* vocabulary */
    int64_t vocab_size;
} fcol;

typedef struct ecol {
    char *name;
    int *columns, n_columns, dim;
} ecol;

struct hx_features {
    hx_features_config cfg;
    fcol *cols;
    int n_cols;
    ecol *embs;
    int n_embs;
    int dense_dim, n_id, n_wide;
    int64_t wide_dim;
    bool fitted;
};

/* ---- the id map ------------------------------------------------------------------- */

static size_t slot_of(const id_map *m, int64_t key)
{
    return (size_t)hx__mix64((uint64_t)key) & (m->cap - 1);
}

static hx_status map_init(id_map *m, size_t cap)
{
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    if (!m->keys || !m->vals) return hx__error(HX_ERR_OUT_OF_MEMORY, "features: out of host memory for a vocabulary");
    for (size_t i = 0; i < cap; i++) m->keys[i] = KEY_EMPTY;
    m->cap = cap;
    m->n = 0;
    return HX_OK;
}

static void map_free(id_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static int64_t *map_find(const id_map *m, int64_t key)
{
    for (size_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return &m->vals[i];
        if (m->keys[i] == KEY_EMPTY) return NULL;
    }
}

/* The value slot of key, inserted with 0 if new. */
static hx_status map_upsert(id_map *m, int64_t key, int64_t **val)
{
    if (2 * (m->n + 1) > m->cap) {
        id_map bigger;
        hx_status st = map_init(&bigger, m->cap * 2);
        if (st) {
            map_free(&bigger);
            return st;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i] != KEY_EMPTY) {
                size_t j = slot_of(&bigger, m->keys[i]);
                while (bigger.keys[j] != KEY_EMPTY) j = (j + 1) & (bigger.cap - 1);
                bigger.keys[j] = m->keys[i];
                bigger.vals[j] = m->vals[i];
            }
        bigger.n = m->n;
        map_free(m);
        *m = bigger;
    }
    size_t i = slot_of(m, key);
    while (m->keys[i] != KEY_EMPTY && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == KEY_EMPTY) {
        m->keys[i] = key;
        m->vals[i] = 0;
        m->n++;
    }
    *val = &m->vals[i];
    return HX_OK;
}

/* ---- hashing ------------------------------------------------------------------------- */

static uint64_t hash_ids(const int64_t *ids, int k, uint64_t seed)
{
    unsigned char buf[24];
    for (int j = 0; j < k; j++)
        for (int b = 0; b < 8; b++) buf[8 * j + b] = (unsigned char)((uint64_t)ids[j] >> (8 * b));
    return XXH3_64bits_withSeed(buf, (size_t)(8 * k), seed);
}

static int64_t oov_id(const fcol *f, int64_t raw)
{
    return f->vocab_size + (int64_t)(hash_ids(&raw, 1, 0) % (uint64_t)f->c.oov_buckets);
}

/* ---- configuration ----------------------------------------------------------------- */

hx_feature_column hx_feature_column_default(hx_feature_kind kind, const char *name, int source)
{
    hx_feature_column c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.kind = kind;
    c.source = source;
    c.standardize = kind == HX_FEATURE_NUMERIC;
    c.n_quantiles = 10;
    c.min_count = 1;
    c.oov_buckets = 1;
    c.hash_buckets = 1000;
    return c;
}

hx_features_config hx_features_config_default(void)
{
    hx_features_config c;
    memset(&c, 0, sizeof c);
    return c;
}

static bool needs_fit(const hx_feature_column *c)
{
    return (c->kind == HX_FEATURE_NUMERIC && c->standardize) ||
           (c->kind == HX_FEATURE_BUCKETIZED && c->n_boundaries == 0) || c->kind == HX_FEATURE_VOCABULARY;
}

static hx_status check_column(const hx_features_config *cfg, int i)
{
    const hx_feature_column *c = &cfg->columns[i];
    const char *w = "hx_features_create";
    const char *nm = c->name ? c->name : "unnamed";
    if ((unsigned)c->kind > HX_FEATURE_CROSSED)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s) has an unknown kind %d", w, i, nm, c->kind);
    if (c->kind == HX_FEATURE_NUMERIC || c->kind == HX_FEATURE_BUCKETIZED) {
        if (c->source < 0 || c->source >= cfg->n_numeric)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s) reads numeric column %d; the "
                             "batches have %d", w, i, nm, c->source, cfg->n_numeric);
    } else if (c->kind != HX_FEATURE_CROSSED) {
        if (c->source < 0 || c->source >= cfg->n_categorical)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s) reads categorical column %d; the "
                             "batches have %d", w, i, nm, c->source, cfg->n_categorical);
    }
    if (c->kind == HX_FEATURE_BUCKETIZED) {
        if (c->n_boundaries < 0 || (c->n_boundaries > 0 && !c->boundaries))
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s): n_boundaries %d without boundaries",
                             w, i, nm, c->n_boundaries);
        for (int k = 0; k < c->n_boundaries; k++)
            if (!isfinite(c->boundaries[k]) || (k && !(c->boundaries[k] > c->boundaries[k - 1])))
                return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s): boundaries must be finite and "
                                 "strictly ascending (boundary %d is %g)", w, i, nm, k, c->boundaries[k]);
        if (c->n_boundaries == 0 && (c->n_quantiles < 1 || c->n_quantiles > 65536))
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s): give boundaries or n_quantiles in "
                             "1..65536 (got %d)", w, i, nm, c->n_quantiles);
    }
    if (c->kind == HX_FEATURE_VOCABULARY && (c->oov_buckets < 1 || c->min_count < 0))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s): oov_buckets %lld must be >= 1 and "
                         "min_count %lld >= 0", w, i, nm, (long long)c->oov_buckets, (long long)c->min_count);
    if ((c->kind == HX_FEATURE_HASHED || c->kind == HX_FEATURE_CROSSED) && c->hash_buckets < 1)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s): hash_buckets %lld must be >= 1", w, i,
                         nm, (long long)c->hash_buckets);
    if (c->kind == HX_FEATURE_CROSSED) {
        if (c->n_crossed < 2 || c->n_crossed > 3)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s) crosses %d columns; 2 or 3", w, i,
                             nm, c->n_crossed);
        for (int k = 0; k < c->n_crossed; k++) {
            int s = c->crossed[k];
            if (s < 0 || s >= i || cfg->columns[s].kind == HX_FEATURE_NUMERIC)
                return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: column %d (%s) crosses column %d, which is not "
                                 "an id-valued column listed before it", w, i, nm, s);
        }
    }
    return HX_OK;
}

void hx_features_free(hx_features *f)
{
    if (!f) return;
    for (int i = 0; i < f->n_cols; i++) {
        free(f->cols[i].name);
        free(f->cols[i].bounds);
        free(f->cols[i].sample);
        map_free(&f->cols[i].map);
    }
    for (int e = 0; e < f->n_embs; e++) {
        free(f->embs[e].name);
        free(f->embs[e].columns);
    }
    free(f->cols);
    free(f->embs);
    free(f);
}

/* Cardinalities known once fitted; wide offsets follow from them. */
static void finish_layout(hx_features *f)
{
    f->wide_dim = 0;
    for (int i = 0; i < f->n_cols; i++) {
        fcol *c = &f->cols[i];
        switch (c->c.kind) {
        case HX_FEATURE_BUCKETIZED: c->card = c->n_bounds + 1; break;
        case HX_FEATURE_VOCABULARY: c->card = c->vocab_size + c->c.oov_buckets; break;
        case HX_FEATURE_HASHED:
        case HX_FEATURE_CROSSED: c->card = c->c.hash_buckets; break;
        default: c->card = 0; break;
        }
        if (!c->dense && c->c.wide) {
            c->wide_offset = f->wide_dim;
            f->wide_dim += c->card;
        }
    }
    f->fitted = true;
}

hx_status hx_features_create(const hx_features_config *cfg, hx_features **out)
{
    const char *w = "hx_features_create";
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: out is NULL", w);
    *out = NULL;
    if (!cfg) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: config is NULL", w);
    if (cfg->n_columns < 1 || !cfg->columns)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: no feature columns", w);
    if (cfg->n_numeric < 0 || cfg->n_categorical < 0 || cfg->n_embeddings < 0 ||
        (cfg->n_embeddings > 0 && !cfg->embeddings))
        return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: negative counts or n_embeddings without embeddings", w);
    for (int i = 0; i < cfg->n_columns; i++) {
        hx_status st = check_column(cfg, i);
        if (st) return st;
    }
    for (int e = 0; e < cfg->n_embeddings; e++) {
        const hx_embedding_column *ec = &cfg->embeddings[e];
        if (ec->n_columns < 1 || !ec->columns || ec->dim < 1)
            return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: embedding %d (%s) needs columns and a dim >= 1", w, e,
                             ec->name ? ec->name : "unnamed");
        for (int k = 0; k < ec->n_columns; k++) {
            int s = ec->columns[k];
            if (s < 0 || s >= cfg->n_columns || cfg->columns[s].kind == HX_FEATURE_NUMERIC)
                return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: embedding %d (%s) is fed by column %d, which is "
                                 "not an id-valued feature column", w, e, ec->name ? ec->name : "unnamed", s);
        }
    }
    hx_features *f = calloc(1, sizeof *f);
    if (!f) return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", w);
    f->cfg = *cfg;
    f->cols = calloc((size_t)cfg->n_columns, sizeof *f->cols);
    f->embs = calloc((size_t)(cfg->n_embeddings ? cfg->n_embeddings : 1), sizeof *f->embs);
    bool oom = !f->cols || !f->embs, any_fit = false;
    if (!oom) {
        f->n_cols = cfg->n_columns;
        f->n_embs = cfg->n_embeddings;
    }
    for (int i = 0; !oom && i < f->n_cols; i++) {
        fcol *c = &f->cols[i];
        c->c = cfg->columns[i];
        c->name = c->c.name ? strdup(c->c.name) : NULL;
        oom |= c->c.name && !c->name;
        c->c.name = c->name;
        c->dense = c->c.kind == HX_FEATURE_NUMERIC;
        c->index = c->dense ? f->dense_dim++ : f->n_id++;
        f->n_wide += !c->dense && c->c.wide;
        c->std = 1;
        any_fit |= needs_fit(&c->c);
        if (c->c.kind == HX_FEATURE_BUCKETIZED && c->c.n_boundaries) {
            c->n_bounds = c->c.n_boundaries;
            c->bounds = malloc(sizeof(double) * (size_t)c->n_bounds);
            oom |= !c->bounds;
            if (c->bounds) memcpy(c->bounds, c->c.boundaries, sizeof(double) * (size_t)c->n_bounds);
        } else if (c->c.kind == HX_FEATURE_BUCKETIZED) {
            c->sample = malloc(sizeof(double) * (size_t)QUANTILE_SAMPLE);
            c->rng = hx__mix64(0x3c6ef372fe94f82bull + (uint64_t)i);
            oom |= !c->sample;
        }
        c->c.boundaries = c->bounds;
        if (c->c.kind == HX_FEATURE_VOCABULARY) oom |= map_init(&c->map, 64) != HX_OK;
    }
    for (int e = 0; !oom && e < f->n_embs; e++) {
        const hx_embedding_column *ec = &cfg->embeddings[e];
        f->embs[e].name = ec->name ? strdup(ec->name) : NULL;
        f->embs[e].columns = malloc(sizeof(int) * (size_t)ec->n_columns);
        oom |= (ec->name && !f->embs[e].name) || !f->embs[e].columns;
        if (f->embs[e].columns) memcpy(f->embs[e].columns, ec->columns, sizeof(int) * (size_t)ec->n_columns);
        f->embs[e].n_columns = ec->n_columns;
        f->embs[e].dim = ec->dim;
    }
    if (oom) {
        hx_features_free(f);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "%s: out of host memory", w);
    }
    f->cfg.columns = NULL;
    f->cfg.embeddings = NULL;
    if (!any_fit) finish_layout(f);
    *out = f;
    return HX_OK;
}

/* ---- fitting --------------------------------------------------------------------------- */

static double numeric_value(const fcol *c, const hx_batch *b, int64_t r)
{
    double x = b->numeric[(size_t)r * (size_t)b->n_numeric + (size_t)c->c.source];
    if (c->c.log1p) x = x < 0 ? -log1p(-x) : log1p(x);
    return x;
}

static hx_status check_batch(const hx_features *f, const hx_batch *b, const char *w)
{
    if (!f || !b) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: %s is NULL", w, f ? "batch" : "features");
    if (b->n < 0 || b->n_numeric != f->cfg.n_numeric || b->n_categorical != f->cfg.n_categorical)
        return hx__error(HX_ERR_SHAPE, "%s: the batch has %d numeric and %d categorical columns; the features "
                         "were made for %d and %d", w, b->n_numeric, b->n_categorical, f->cfg.n_numeric,
                         f->cfg.n_categorical);
    return HX_OK;
}

hx_status hx_features_fit_batch(hx_features *f, const hx_batch *b)
{
    const char *w = "hx_features_fit_batch";
    hx_status st = check_batch(f, b, w);
    if (st) return st;
    if (f->fitted)
        return hx__error(HX_ERR_STATE, "%s: the features are fitted already (fit_finish ran, or nothing "
                         "needs statistics)", w);
    for (int i = 0; i < f->n_cols; i++) {
        fcol *c = &f->cols[i];
        if (!needs_fit(&c->c)) continue;
        for (int64_t r = 0; r < b->n; r++) {
            if (c->c.kind == HX_FEATURE_NUMERIC) {
                double x = numeric_value(c, b, r), d = x - c->mean;
                c->count++;
                c->mean += d / (double)c->count;
                c->m2 += d * (x - c->mean);
            } else if (c->c.kind == HX_FEATURE_BUCKETIZED) {
                double x = numeric_value(c, b, r);
                if (c->seen < QUANTILE_SAMPLE) {
                    c->sample[c->seen] = x;
                } else {
                    c->rng += 0x9E3779B97F4A7C15ull;
                    uint64_t j = hx__mix64(c->rng) % (uint64_t)(c->seen + 1);
                    if (j < (uint64_t)QUANTILE_SAMPLE) c->sample[j] = x;
                }
                c->seen++;
            } else {
                int64_t *cnt;
                st = map_upsert(&c->map, b->categorical[(size_t)r * (size_t)b->n_categorical + (size_t)c->c.source], &cnt);
                if (st) return st;
                ++*cnt;
            }
        }
    }
    return HX_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct kv { int64_t key, count; } kv;
static int cmp_vocab(const void *a, const void *b)
{
    const kv *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->key > y->key) - (x->key < y->key);
}

static hx_status finish_vocab(fcol *c)
{
    kv *all = malloc(sizeof *all * (c->map.n ? c->map.n : 1));
    if (!all) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_features_fit_finish: out of host memory");
    size_t n = 0;
    int64_t min = c->c.min_count > 1 ? c->c.min_count : 1;
    for (size_t i = 0; i < c->map.cap; i++)
        if (c->map.keys[i] != KEY_EMPTY && c->map.vals[i] >= min) all[n++] = (kv){c->map.keys[i], c->map.vals[i]};
    qsort(all, n, sizeof *all, cmp_vocab);
    id_map m;
    size_t cap = 64;
    while (cap < 2 * (n + 1)) cap *= 2;
    hx_status st = map_init(&m, cap);
    if (st) {
        map_free(&m);
        free(all);
        return st;
    }
    for (size_t k = 0; k < n; k++) {
        int64_t *v;
        map_upsert(&m, all[k].key, &v); /* no growth: cap > 2n */
        *v = (int64_t)k;
    }
    free(all);
    map_free(&c->map);
    c->map = m;
    c->vocab_size = (int64_t)n;
    return HX_OK;
}

hx_status hx_features_fit_finish(hx_features *f)
{
    if (!f) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_features_fit_finish: features is NULL");
    if (f->fitted) return hx__error(HX_ERR_STATE, "hx_features_fit_finish: the features are fitted already");
    for (int i = 0; i < f->n_cols; i++) {
        fcol *c = &f->cols[i];
        if (!needs_fit(&c->c)) continue;
        if (c->c.kind == HX_FEATURE_NUMERIC) {
            c->std = c->count ? sqrt(c->m2 / (double)c->count) : 1.0;
            if (!(c->std > 0) || !isfinite(c->std)) c->std = 1.0;
        } else if (c->c.kind == HX_FEATURE_BUCKETIZED) {
            int64_t m = c->seen < QUANTILE_SAMPLE ? c->seen : QUANTILE_SAMPLE;
            qsort(c->sample, (size_t)m, sizeof(double), cmp_double);
            int q = c->c.n_quantiles;
            double *bounds = malloc(sizeof(double) * (size_t)(q > 1 ? q - 1 : 1));
            if (!bounds) return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_features_fit_finish: out of host memory");
            int nb = 0;
            for (int k = 1; m > 0 && k < q; k++) {
                double v = c->sample[(int64_t)((double)k * (double)m / q)];
                if (nb == 0 || v > bounds[nb - 1]) bounds[nb++] = v;
            }
            free(c->bounds);
            c->bounds = bounds;
            c->n_bounds = nb;
            c->c.boundaries = bounds;
            free(c->sample);
            c->sample = NULL;
        } else {
            hx_status st = finish_vocab(c);
            if (st) return st;
        }
    }
    finish_layout(f);
    return HX_OK;
}

hx_status hx_features_fit(hx_features *f, hx_reader *r)
{
    if (!f || !r)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_features_fit: %s is NULL", f ? "reader" : "features");
    if (f->fitted) return hx__error(HX_ERR_STATE, "hx_features_fit: the features are fitted already");
    const hx_batch *b;
    hx_status st;
    while ((st = hx_reader_next(r, &b)) == HX_OK && b)
        if ((st = hx_features_fit_batch(f, b)) != HX_OK) return st;
    if (st) return st;
    if ((st = hx_features_fit_finish(f)) != HX_OK) return st;
    return hx_reader_rewind(r);
}

/* ---- queries ------------------------------------------------------------------------------ */

static hx_status check_fitted(const hx_features *f, const char *w)
{
    if (!f) return hx__error(HX_ERR_INVALID_ARGUMENT, "%s: features is NULL", w);
    if (!f->fitted)
        return hx__error(HX_ERR_STATE, "%s: the features need training statistics first "
                         "(hx_features_fit, or fit_batch + fit_finish)", w);
    return HX_OK;
}

hx_status hx_features_info(const hx_features *f, int column, hx_feature_info *out)
{
    hx_status st = check_fitted(f, "hx_features_info");
    if (st) return st;
    if (!out || column < 0 || column >= f->n_cols)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_features_info: column %d of %d (or out NULL)", column,
                         f->n_cols);
    const fcol *c = &f->cols[column];
    memset(out, 0, sizeof *out);
    out->dense = c->dense;
    out->index = c->index;
    out->cardinality = c->card;
    out->wide_offset = c->c.wide && !c->dense ? c->wide_offset : -1;
    out->mean = c->c.standardize ? c->mean : 0;
    out->std = c->c.standardize ? c->std : 1;
    out->vocab_size = c->vocab_size;
    out->boundaries = c->bounds;
    out->n_boundaries = c->n_bounds;
    return HX_OK;
}

hx_status hx_features_lookup(const hx_features *f, int column, int64_t raw_id, int64_t *out)
{
    hx_status st = check_fitted(f, "hx_features_lookup");
    if (st) return st;
    if (!out || column < 0 || column >= f->n_cols || f->cols[column].c.kind != HX_FEATURE_VOCABULARY)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_features_lookup: column %d is not a vocabulary column "
                         "(or out is NULL)", column);
    const fcol *c = &f->cols[column];
    const int64_t *v = map_find(&c->map, raw_id);
    *out = v ? *v : oov_id(c, raw_id);
    return HX_OK;
}

hx_status hx_features_shape_get(const hx_features *f, hx_features_shape *out)
{
    hx_status st = check_fitted(f, "hx_features_shape_get");
    if (st) return st;
    if (!out) return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_features_shape_get: out is NULL");
    out->dense_dim = f->dense_dim;
    out->n_id_columns = f->n_id;
    out->n_wide = f->n_wide;
    out->wide_dim = f->wide_dim;
    return HX_OK;
}

hx_status hx_features_embedding(const hx_features *f, int e, int64_t *rows, int64_t *offsets)
{
    hx_status st = check_fitted(f, "hx_features_embedding");
    if (st) return st;
    if (!rows || e < 0 || e >= f->n_embs)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_features_embedding: embedding %d of %d (or rows NULL)",
                         e, f->n_embs);
    int64_t total = 0;
    for (int k = 0; k < f->embs[e].n_columns; k++) {
        if (offsets) offsets[k] = total;
        total += f->cols[f->embs[e].columns[k]].card;
    }
    *rows = total;
    return HX_OK;
}

/* ---- transform ------------------------------------------------------------------------------ */

hx_status hx_feature_batch_alloc(const hx_features *f, int64_t capacity, hx_feature_batch *out)
{
    hx_status st = check_fitted(f, "hx_feature_batch_alloc");
    if (st) return st;
    if (!out || capacity < 1)
        return hx__error(HX_ERR_INVALID_ARGUMENT, "hx_feature_batch_alloc: capacity %lld must be >= 1 (or out "
                         "is NULL)", (long long)capacity);
    memset(out, 0, sizeof *out);
    size_t n = (size_t)capacity;
    out->labels = malloc(n * sizeof(float));
    out->dense = malloc(n * (size_t)(f->dense_dim ? f->dense_dim : 1) * sizeof(float));
    out->ids = malloc(n * (size_t)(f->n_id ? f->n_id : 1) * sizeof(int64_t));
    out->wide_ids = malloc(n * (size_t)(f->n_wide ? f->n_wide : 1) * sizeof(int64_t));
    out->wide_offsets = malloc((n + 1) * sizeof(int64_t));
    if (!out->labels || !out->dense || !out->ids || !out->wide_ids || !out->wide_offsets) {
        hx_feature_batch_free(out);
        return hx__error(HX_ERR_OUT_OF_MEMORY, "hx_feature_batch_alloc: out of host memory for %lld rows",
                         (long long)capacity);
    }
    out->capacity = capacity;
    return HX_OK;
}

void hx_feature_batch_free(hx_feature_batch *fb)
{
    if (!fb) return;
    free(fb->labels);
    free(fb->dense);
    free(fb->ids);
    free(fb->wide_ids);
    free(fb->wide_offsets);
    memset(fb, 0, sizeof *fb);
}

static int64_t bucket_of(const fcol *c, double x)
{
    int lo = 0, hi = c->n_bounds; /* the number of boundaries <= x */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (c->bounds[mid] <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

hx_status hx_features_transform(const hx_features *f, const hx_batch *b, hx_feature_batch *fb)
{
    const char *w = "hx_features_transform";
    hx_status st = check_fitted(f, w);
    if (st) return st;
    if ((st = check_batch(f, b, w)) != HX_OK) return st;
    if (!fb || !fb->labels || b->n > fb->capacity)
        return hx__error(HX_ERR_SHAPE, "%s: the batch has %lld rows; the feature batch holds %lld "
                         "(hx_feature_batch_alloc with a larger capacity)", w, (long long)b->n,
                         fb ? (long long)fb->capacity : 0LL);
    const int64_t n = b->n;
    fb->n = n;
    memcpy(fb->labels, b->labels, (size_t)n * sizeof(float));
    for (int i = 0; i < f->n_cols; i++) {
        const fcol *c = &f->cols[i];
        int64_t *ids = c->dense ? NULL : fb->ids + (size_t)c->index * (size_t)n;
        const size_t nc = (size_t)b->n_categorical;
        const int64_t *raw = c->c.kind == HX_FEATURE_VOCABULARY || c->c.kind == HX_FEATURE_HASHED
                                 ? b->categorical + c->c.source : NULL;
        switch (c->c.kind) {
        case HX_FEATURE_NUMERIC:
            for (int64_t r = 0; r < n; r++) {
                double x = numeric_value(c, b, r);
                if (c->c.standardize) x = (x - c->mean) / c->std;
                fb->dense[(size_t)r * (size_t)f->dense_dim + (size_t)c->index] = (float)x;
            }
            break;
        case HX_FEATURE_BUCKETIZED:
            for (int64_t r = 0; r < n; r++) ids[r] = bucket_of(c, numeric_value(c, b, r));
            break;
        case HX_FEATURE_VOCABULARY:
            for (int64_t r = 0; r < n; r++) {
                const int64_t *v = map_find(&c->map, raw[(size_t)r * nc]);
                ids[r] = v ? *v : oov_id(c, raw[(size_t)r * nc]);
            }
            break;
        case HX_FEATURE_HASHED:
            for (int64_t r = 0; r < n; r++)
                ids[r] = (int64_t)(hash_ids(&raw[(size_t)r * nc], 1, c->c.hash_seed) % (uint64_t)c->c.hash_buckets);
            break;
        case HX_FEATURE_CROSSED:
            for (int64_t r = 0; r < n; r++) {
                int64_t key[3];
                for (int k = 0; k < c->c.n_crossed; k++)
                    key[k] = fb->ids[(size_t)f->cols[c->c.crossed[k]].index * (size_t)n + (size_t)r];
                ids[r] = (int64_t)(hash_ids(key, c->c.n_crossed, c->c.hash_seed) % (uint64_t)c->c.hash_buckets);
            }
            break;
        }
    }
    int k = 0;
    for (int i = 0; i < f->n_cols; i++) {
        const fcol *c = &f->cols[i];
        if (c->dense || !c->c.wide) continue;
        const int64_t *ids = fb->ids + (size_t)c->index * (size_t)n;
        for (int64_t r = 0; r < n; r++) fb->wide_ids[(size_t)r * (size_t)f->n_wide + (size_t)k] = ids[r] + c->wide_offset;
        k++;
    }
    for (int64_t r = 0; r <= n; r++) fb->wide_offsets[r] = r * f->n_wide;
    return HX_OK;
}
