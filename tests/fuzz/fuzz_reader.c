/* libFuzzer target: the delimited-text reader and the feature columns on
 * any file. The first two bytes pick the configuration: the schema (UCI
 * Adult, Criteo, or a small one of each column kind), quotes, trimming,
 * the malformed-row policy, a header line, shuffling, the parser threads,
 * and small batches, blocks and line limits, so block edges and overlong
 * lines come often. Feature columns of every kind are fitted on the file
 * (a full pass and a rewind) and transform every batch of a second pass.
 * Seeds: lines of data/adult, a Criteo-schema TSV from hx_generator, and
 * rows of the small schema (seeds.c). */
#include "fuzz_common.h"

#include <stdlib.h>

static const hx_column_spec small_schema[] = {
    {"label", HX_COLUMN_LABEL, 0, HX_CATEGORY_HASH},
    {"n0", HX_COLUMN_NUMERIC, -1, HX_CATEGORY_HASH},
    {"c0", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HASH},
    {"skip", HX_COLUMN_IGNORE, 0, HX_CATEGORY_HASH},
    {"n1", HX_COLUMN_NUMERIC, 0, HX_CATEGORY_HASH},
    {"c1", HX_COLUMN_CATEGORICAL, 0, HX_CATEGORY_HEX},
};
static const hx_label_map yes_no[] = {{"no", 0}, {"yes", 1}};

static hx_reader_config config(uint8_t a, uint8_t b)
{
    hx_reader_config rc;
    switch (a % 3) {
    case 0: rc = hx_reader_config_adult(a & 4); break;
    case 1: rc = hx_reader_config_criteo(); break;
    default:
        rc = hx_reader_config_default();
        rc.columns = small_schema;
        rc.n_columns = 6;
        rc.delimiter = a & 4 ? '\t' : ',';
        rc.missing_token = "NA";
        rc.labels = a & 8 ? yes_no : NULL;
        rc.n_labels = a & 8 ? 2 : 0;
        rc.label_suffix = ".";
        break;
    }
    rc.quotes = a & 16;
    rc.trim_spaces = a & 32;
    rc.on_malformed = a & 64 ? HX_MALFORMED_ERROR : HX_MALFORMED_SKIP;
    rc.skip_lines = a >> 7;
    rc.batch_size = 1 + (b & 7);
    rc.n_threads = 1 + (b >> 3 & 1);
    rc.max_blocks = 2 * rc.n_threads + 2;
    rc.block_bytes = (size_t)64 << (b >> 4 & 3);
    rc.max_line_bytes = (size_t)32 << (b >> 6);
    rc.shuffle_rows = b & 4 ? 5 : 0;
    rc.shuffle_seed = b;
    return rc;
}

/* Columns of every kind over the schema's numeric and categorical columns. */
static hx_features *features_for(const hx_reader_config *rc)
{
    int nn = 0, nc = 0;
    for (int i = 0; i < rc->n_columns; i++) {
        nn += rc->columns[i].kind == HX_COLUMN_NUMERIC;
        nc += rc->columns[i].kind == HX_COLUMN_CATEGORICAL;
    }
    static const double bounds[] = {-1, 0, 0.5, 10};
    hx_feature_column cols[6] = {
        hx_feature_column_default(HX_FEATURE_NUMERIC, "num", 0),
        hx_feature_column_default(HX_FEATURE_BUCKETIZED, "quantiles", nn - 1),
        hx_feature_column_default(HX_FEATURE_BUCKETIZED, "bounds", 0),
        hx_feature_column_default(HX_FEATURE_VOCABULARY, "vocab", 0),
        hx_feature_column_default(HX_FEATURE_HASHED, "hashed", nc - 1),
        hx_feature_column_default(HX_FEATURE_CROSSED, "crossed", 0),
    };
    cols[0].log1p = cols[0].standardize = true;
    cols[1].n_quantiles = 4;
    cols[2].boundaries = bounds;
    cols[2].n_boundaries = 4;
    cols[3].min_count = 2;
    cols[3].wide = true;
    cols[4].hash_buckets = 97;
    cols[5].crossed[0] = 3;
    cols[5].crossed[1] = 4;
    cols[5].n_crossed = 2;
    cols[5].hash_buckets = 101;
    cols[5].wide = true;
    int ecols[2] = {3, 4};
    hx_embedding_column emb = {"deep", ecols, 2, 8};
    hx_features_config fc = hx_features_config_default();
    fc.columns = cols;
    fc.n_columns = 6;
    fc.embeddings = &emb;
    fc.n_embeddings = 1;
    fc.n_numeric = nn;
    fc.n_categorical = nc;
    hx_features *f = NULL;
    if (hx_features_create(&fc, &f)) abort(); /* the columns fit every schema here */
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    hx_reader_config rc = config(data[0], data[1]);
    hx_reader *r = NULL;
    if (hx_reader_open(fuzz_file("rows", data + 2, size - 2), &rc, &r)) return 0;
    hx_features *f = features_for(&rc);
    hx_feature_batch fb;
    const hx_batch *b;
    if (!hx_features_fit(f, r) && !hx_feature_batch_alloc(f, rc.batch_size, &fb)) {
        while (!hx_reader_next(r, &b) && b) hx_features_transform(f, b, &fb);
        hx_feature_batch_free(&fb);
    }
    hx_reader_stats st;
    hx_reader_stats_get(r, &st);
    hx_features_free(f);
    hx_reader_close(r);
    return 0;
}
