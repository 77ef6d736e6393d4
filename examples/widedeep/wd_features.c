/* Adult's feature columns (after TensorFlow's census wide & deep example),
 * Criteo's (its 13 integers log1p-standardised, its 26 categorical ids
 * hashed into --hash-buckets rows each), and the batches the graph feeds. */
#include "wd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const numeric_names[] = {"age", "fnlwgt", "education_num", "capital_gain",
                                            "capital_loss", "hours_per_week"};
static const bool numeric_log[] = {false, true, false, true, true, false};
static const char *const categorical_names[] = {"workclass", "education", "marital_status",
                                                "occupation", "relationship", "race", "sex",
                                                "native_country"};
enum { N_NUMERIC = 6, N_CATEGORICAL = 8 };
/* Feature column indices. */
enum { COL_VOCAB = N_NUMERIC, COL_AGE_BUCKETS = COL_VOCAB + N_CATEGORICAL, COL_CROSS,
       N_CROSSES = 3, N_COLUMNS = COL_CROSS + N_CROSSES };
static const double age_boundaries[] = {18, 25, 30, 35, 40, 45, 50, 55, 60, 65};

/* The features of columns cols (the first n_numeric numeric) fitted on
 * train, the id columns deep_cols (one per categorical column of the
 * batch) feeding one deep table. */
static hx_status fit(hx_reader *train, const hx_feature_column *cols, int n_cols, int n_numeric,
                     int *deep_cols, int n_deep, wd_features *out)
{
    hx_embedding_column emb = {"deep", deep_cols, n_deep, 1};
    hx_features_config fc = hx_features_config_default();
    fc.columns = cols;
    fc.n_columns = n_cols;
    fc.embeddings = &emb;
    fc.n_embeddings = 1;
    fc.n_numeric = n_numeric;
    fc.n_categorical = n_deep;

    out->n_deep = n_deep;
    out->deep_offsets = malloc(sizeof *out->deep_offsets * (size_t)n_deep);
    out->deep_columns = malloc(sizeof *out->deep_columns * (size_t)n_deep);
    if (!out->deep_offsets || !out->deep_columns) {
        wd_features_free(out);
        return HX_ERR_OUT_OF_MEMORY;
    }
    hx_status st = hx_features_create(&fc, &out->f);
    if (!st) st = hx_features_fit(out->f, train);
    if (!st) st = hx_features_shape_get(out->f, &out->shape);
    if (!st) st = hx_features_embedding(out->f, 0, &out->deep_rows, out->deep_offsets);
    for (int k = 0; k < n_deep && !st; k++) {
        hx_feature_info info;
        st = hx_features_info(out->f, deep_cols[k], &info);
        out->deep_columns[k] = info.index;
    }
    if (st) wd_features_free(out);
    return st;
}

static int vocab_col(const char *name)
{
    for (int k = 0; k < N_CATEGORICAL; k++)
        if (!strcmp(categorical_names[k], name)) return COL_VOCAB + k;
    return -1;
}

hx_status wd_features_fit(hx_reader *train, const hx_reader_config *rc, int64_t cross_buckets,
                          wd_features *out)
{
    memset(out, 0, sizeof *out);
    hx_feature_column cols[N_COLUMNS];
    for (int k = 0; k < N_NUMERIC; k++) {
        cols[k] = hx_feature_column_default(HX_FEATURE_NUMERIC, numeric_names[k],
                                            hx_reader_config_find(rc, numeric_names[k]));
        cols[k].log1p = numeric_log[k];
        cols[k].standardize = true;
    }
    for (int k = 0; k < N_CATEGORICAL; k++) {
        hx_feature_column *c = &cols[COL_VOCAB + k];
        *c = hx_feature_column_default(HX_FEATURE_VOCABULARY, categorical_names[k],
                                       hx_reader_config_find(rc, categorical_names[k]));
        c->wide = true;
    }
    hx_feature_column *ab = &cols[COL_AGE_BUCKETS];
    *ab = hx_feature_column_default(HX_FEATURE_BUCKETIZED, "age_buckets",
                                    hx_reader_config_find(rc, "age"));
    ab->boundaries = age_boundaries;
    ab->n_boundaries = (int)(sizeof age_boundaries / sizeof age_boundaries[0]);
    ab->wide = true;
    static const char *const cross_names[N_CROSSES] = {
        "education_x_occupation", "age_x_education_x_occupation", "country_x_occupation"};
    const int crosses[N_CROSSES][3] = {
        {vocab_col("education"), vocab_col("occupation"), -1},
        {COL_AGE_BUCKETS, vocab_col("education"), vocab_col("occupation")},
        {vocab_col("native_country"), vocab_col("occupation"), -1}};
    for (int k = 0; k < N_CROSSES; k++) {
        hx_feature_column *c = &cols[COL_CROSS + k];
        *c = hx_feature_column_default(HX_FEATURE_CROSSED, cross_names[k], -1);
        c->n_crossed = crosses[k][2] < 0 ? 2 : 3;
        memcpy(c->crossed, crosses[k], sizeof c->crossed);
        c->hash_buckets = cross_buckets;
        c->hash_seed = 0x5eed + (uint64_t)k;
        c->wide = true;
    }
    int deep_cols[N_CATEGORICAL];
    for (int k = 0; k < N_CATEGORICAL; k++) deep_cols[k] = COL_VOCAB + k;
    return fit(train, cols, N_COLUMNS, N_NUMERIC, deep_cols, N_CATEGORICAL, out);
}

enum { CRITEO_NUMERIC = 13, CRITEO_CATEGORICAL = 26 };

hx_status wd_features_fit_criteo(hx_reader *train, const hx_reader_config *rc, int64_t hash_buckets,
                                 wd_features *out)
{
    memset(out, 0, sizeof *out);
    hx_feature_column cols[CRITEO_NUMERIC + CRITEO_CATEGORICAL];
    char names[CRITEO_NUMERIC + CRITEO_CATEGORICAL][8];
    int deep_cols[CRITEO_CATEGORICAL];
    for (int k = 0; k < CRITEO_NUMERIC + CRITEO_CATEGORICAL; k++) {
        bool num = k < CRITEO_NUMERIC;
        snprintf(names[k], sizeof names[k], "%c%d", num ? 'I' : 'C', num ? k + 1 : k - CRITEO_NUMERIC + 1);
        cols[k] = hx_feature_column_default(num ? HX_FEATURE_NUMERIC : HX_FEATURE_HASHED, names[k],
                                            hx_reader_config_find(rc, names[k]));
        if (num) {
            cols[k].log1p = true;
            cols[k].standardize = true;
            continue;
        }
        cols[k].hash_buckets = hash_buckets;
        cols[k].hash_seed = 0xc417e0 + (uint64_t)k;
        cols[k].wide = true;
        deep_cols[k - CRITEO_NUMERIC] = k;
    }
    return fit(train, cols, CRITEO_NUMERIC + CRITEO_CATEGORICAL, CRITEO_NUMERIC, deep_cols,
               CRITEO_CATEGORICAL, out);
}

void wd_features_free(wd_features *wf)
{
    hx_features_free(wf->f);
    free(wf->deep_offsets);
    free(wf->deep_columns);
    memset(wf, 0, sizeof *wf);
}

hx_status wd_feed_alloc(const wd_features *wf, int64_t batch, wd_feed *out)
{
    memset(out, 0, sizeof *out);
    const hx_features_shape *sh = &wf->shape;
    out->dense = malloc(sizeof *out->dense * batch * (sh->dense_dim ? sh->dense_dim : 1));
    out->deep_ids = malloc(sizeof *out->deep_ids * batch * wf->n_deep);
    out->wide_ids = malloc(sizeof *out->wide_ids * batch * (sh->n_wide ? sh->n_wide : 1));
    out->wide_offsets = malloc(sizeof *out->wide_offsets * batch);
    out->labels = malloc(sizeof *out->labels * batch);
    hx_status st = out->dense && out->deep_ids && out->wide_ids && out->wide_offsets &&
                           out->labels
                       ? hx_feature_batch_alloc(wf->f, batch, &out->fb)
                       : HX_ERR_OUT_OF_MEMORY;
    if (st) wd_feed_free(out);
    return st;
}

void wd_feed_free(wd_feed *fd)
{
    free(fd->dense);
    free(fd->deep_ids);
    free(fd->wide_ids);
    free(fd->wide_offsets);
    free(fd->labels);
    hx_feature_batch_free(&fd->fb);
    memset(fd, 0, sizeof *fd);
}

hx_status wd_feed_fill(const wd_features *wf, const hx_batch *b, int64_t batch, wd_feed *fd)
{
    hx_status st = hx_features_transform(wf->f, b, &fd->fb);
    if (st) return st;
    const hx_feature_batch *fb = &fd->fb;
    int64_t n = fb->n, d = wf->shape.dense_dim, w = wf->shape.n_wide;
    fd->n = n;
    for (int64_t r = 0; r < batch; r++) {
        int64_t src = r < n ? r : 0; /* padding repeats row 0 */
        memcpy(fd->dense + r * d, fb->dense + src * d, sizeof *fd->dense * d);
        for (int k = 0; k < wf->n_deep; k++)
            fd->deep_ids[r * wf->n_deep + k] =
                fb->ids[(int64_t)wf->deep_columns[k] * n + src] + wf->deep_offsets[k];
        memcpy(fd->wide_ids + r * w, fb->wide_ids + fb->wide_offsets[src],
               sizeof *fd->wide_ids * w);
        fd->wide_offsets[r] = r * w;
        fd->labels[r] = fb->labels[src];
    }
    return HX_OK;
}
