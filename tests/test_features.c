/* Feature columns against scalar references: standardisation (Welford vs a
 * two-pass mean/std in double), log1p, given and quantile buckets,
 * vocabularies with a minimum count and OOV buckets, XXH3 hash buckets and
 * crosses with their seeds, the wide bag, embedding descriptors; Adult end
 * to end; the error paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "hetex.h"
#include "testutil.h"

enum { NN = 3, NC = 3 };

typedef struct synth {
    int64_t n;
    float *labels, *num;
    uint8_t *miss;
    int64_t *cat;
} synth;

/* numeric 0: normal(3, 2); 1: heavy tailed, some negative; 2: few distinct
 * values; categorical 0: skewed over 0..49 and missing; 1: any 63-bit id;
 * 2: 0..6. */
static synth make_synth(int64_t n, uint64_t seed)
{
    synth s = {n, malloc(sizeof(float) * n), malloc(sizeof(float) * n * NN), calloc(n * NN, 1),
               malloc(sizeof(int64_t) * n * NC)};
    test_rng r = test_rng_make(seed);
    for (int64_t i = 0; i < n; i++) {
        s.labels[i] = (float)(test_rng_u64(&r) & 1);
        s.num[i * NN + 0] = (float)(3 + 2 * test_rng_normal(&r));
        s.num[i * NN + 1] = (float)(exp(3 * test_rng_normal(&r)) - 2);
        s.num[i * NN + 2] = (float)(test_rng_u64(&r) % 5);
        double u = test_rng_uniform(&r, 0, 1);
        s.cat[i * NC + 0] = u < 0.05 ? -1 : (int64_t)(50 * u * u * u);
        s.cat[i * NC + 1] = (int64_t)(test_rng_u64(&r) >> 1);
        s.cat[i * NC + 2] = (int64_t)(test_rng_u64(&r) % 7);
    }
    return s;
}

static hx_batch slice(const synth *s, int64_t at, int64_t n)
{
    hx_batch b = {n, NN, NC, s->labels + at, s->num + at * NN, s->miss + at * NN, s->cat + at * NC};
    return b;
}

static void free_synth(synth *s)
{
    free(s->labels);
    free(s->num);
    free(s->miss);
    free(s->cat);
}

static uint64_t xxh_ids(const int64_t *ids, int k, uint64_t seed)
{
    unsigned char buf[24];
    for (int j = 0; j < k; j++)
        for (int b = 0; b < 8; b++) buf[8 * j + b] = (unsigned char)((uint64_t)ids[j] >> (8 * b));
    return XXH3_64bits_withSeed(buf, (size_t)(8 * k), seed);
}

static double slog1p(double x) { return x < 0 ? -log1p(-x) : log1p(x); }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Column order (indices used below). */
enum { F_NUM0, F_NUM1_LOG, F_NUM2_RAW, F_BUCKET_GIVEN, F_BUCKET_Q, F_VOCAB, F_HASH, F_CROSS2, F_CROSS3, F_COUNT };

static void test_columns(void)
{
    const int64_t N = 3000;
    synth s = make_synth(N, 42);
    static const double given[3] = {0.0, 2.5, 4.0};
    hx_feature_column cols[F_COUNT];
    cols[F_NUM0] = hx_feature_column_default(HX_FEATURE_NUMERIC, "n0", 0);
    cols[F_NUM1_LOG] = hx_feature_column_default(HX_FEATURE_NUMERIC, "n1", 1);
    cols[F_NUM1_LOG].log1p = true;
    cols[F_NUM2_RAW] = hx_feature_column_default(HX_FEATURE_NUMERIC, "n2", 2);
    cols[F_NUM2_RAW].standardize = false;
    cols[F_BUCKET_GIVEN] = hx_feature_column_default(HX_FEATURE_BUCKETIZED, "b0", 0);
    cols[F_BUCKET_GIVEN].boundaries = given;
    cols[F_BUCKET_GIVEN].n_boundaries = 3;
    cols[F_BUCKET_GIVEN].wide = true;
    cols[F_BUCKET_Q] = hx_feature_column_default(HX_FEATURE_BUCKETIZED, "q1", 1);
    cols[F_BUCKET_Q].n_quantiles = 8;
    cols[F_VOCAB] = hx_feature_column_default(HX_FEATURE_VOCABULARY, "v0", 0);
    cols[F_VOCAB].min_count = 20;
    cols[F_VOCAB].oov_buckets = 3;
    cols[F_VOCAB].wide = true;
    cols[F_HASH] = hx_feature_column_default(HX_FEATURE_HASHED, "h1", 1);
    cols[F_HASH].hash_buckets = 97;
    cols[F_HASH].hash_seed = 1234;
    cols[F_CROSS2] = hx_feature_column_default(HX_FEATURE_CROSSED, "v0_x_b0", 0);
    cols[F_CROSS2].crossed[0] = F_VOCAB;
    cols[F_CROSS2].crossed[1] = F_BUCKET_GIVEN;
    cols[F_CROSS2].n_crossed = 2;
    cols[F_CROSS2].hash_buckets = 1009;
    cols[F_CROSS2].hash_seed = 7;
    cols[F_CROSS2].wide = true;
    cols[F_CROSS3] = hx_feature_column_default(HX_FEATURE_CROSSED, "x3", 0);
    cols[F_CROSS3].crossed[0] = F_HASH;
    cols[F_CROSS3].crossed[1] = F_BUCKET_Q;
    cols[F_CROSS3].crossed[2] = F_VOCAB;
    cols[F_CROSS3].n_crossed = 3;
    cols[F_CROSS3].hash_buckets = 50;
    int emb_cols[2] = {F_VOCAB, F_HASH};
    hx_embedding_column emb = {"deep", emb_cols, 2, 8};
    hx_features_config fc = hx_features_config_default();
    fc.columns = cols;
    fc.n_columns = F_COUNT;
    fc.embeddings = &emb;
    fc.n_embeddings = 1;
    fc.n_numeric = NN;
    fc.n_categorical = NC;
    hx_features *f;
    CHECK(hx_features_create(&fc, &f) == HX_OK, "%s", hx_last_error());
    hx_feature_batch fb;
    CHECK(hx_feature_batch_alloc(f, N, &fb) == HX_ERR_STATE, "alloc before fit: %s", hx_last_error());
    /* fit in uneven batches */
    int64_t cuts[4] = {0, 1, 1700, N};
    for (int k = 0; k < 3; k++) {
        hx_batch b = slice(&s, cuts[k], cuts[k + 1] - cuts[k]);
        CHECK(hx_features_fit_batch(f, &b) == HX_OK, "%s", hx_last_error());
    }
    CHECK(hx_features_fit_finish(f) == HX_OK, "%s", hx_last_error());
    hx_batch all = slice(&s, 0, N);
    CHECK(hx_features_fit_batch(f, &all) == HX_ERR_STATE, "fit after finish");

    /* references */
    double mean[2] = {0}, var[2] = {0};
    for (int64_t i = 0; i < N; i++) mean[0] += s.num[i * NN], mean[1] += slog1p(s.num[i * NN + 1]);
    mean[0] /= N, mean[1] /= N;
    for (int64_t i = 0; i < N; i++) {
        double d0 = s.num[i * NN] - mean[0], d1 = slog1p(s.num[i * NN + 1]) - mean[1];
        var[0] += d0 * d0, var[1] += d1 * d1;
    }
    double sd[2] = {sqrt(var[0] / N), sqrt(var[1] / N)};
    hx_feature_info info;
    for (int k = 0; k < 2; k++) {
        hx_features_info(f, k, &info);
        CHECK(fabs(info.mean - mean[k]) < 1e-12 * (1 + fabs(mean[k])) && fabs(info.std - sd[k]) < 1e-12 * sd[k],
              "column %d: mean %.17g/%.17g std %.17g/%.17g", k, info.mean, mean[k], info.std, sd[k]);
        CHECK(info.dense && info.index == k && info.wide_offset == -1, "column %d layout", k);
    }
    /* quantile boundaries: sorted[floor(k m / 8)], duplicates dropped */
    double *sorted = malloc(sizeof(double) * N);
    for (int64_t i = 0; i < N; i++) sorted[i] = s.num[i * NN + 1];
    qsort(sorted, N, sizeof(double), cmp_d);
    double qb[8];
    int nq = 0;
    for (int k = 1; k < 8; k++) {
        double v = sorted[(int64_t)((double)k * N / 8)];
        if (!nq || v > qb[nq - 1]) qb[nq++] = v;
    }
    hx_features_info(f, F_BUCKET_Q, &info);
    int same = info.n_boundaries == nq && info.cardinality == nq + 1;
    for (int k = 0; same && k < nq; k++) same &= info.boundaries[k] == qb[k];
    CHECK(same, "quantile boundaries (%d of %d)", info.n_boundaries, nq);
    hx_features_info(f, F_BUCKET_GIVEN, &info);
    CHECK(info.cardinality == 4 && info.n_boundaries == 3, "given buckets");
    /* vocabulary: count >= 20, by count desc then id asc */
    int64_t count[51] = {0}; /* slot 50: missing */
    for (int64_t i = 0; i < N; i++) count[s.cat[i * NC] < 0 ? 50 : s.cat[i * NC]]++;
    int64_t vocab_index[51], V = 0;
    for (int pass = 0; pass < 51; pass++) vocab_index[pass] = -1;
    for (;;) { /* selection by (count desc, key asc) */
        int best = -1;
        for (int k = 0; k < 51; k++) {
            if (vocab_index[k] >= 0 || count[k] < 20) continue;
            int64_t key = k == 50 ? -1 : k, bkey = best == 50 ? -1 : best;
            if (best < 0 || count[k] > count[best] || (count[k] == count[best] && key < bkey)) best = k;
        }
        if (best < 0) break;
        vocab_index[best] = V++;
    }
    hx_features_info(f, F_VOCAB, &info);
    CHECK(info.vocab_size == V && info.cardinality == V + 3 && V > 5 && V < 50, "vocab %lld want %lld",
          (long long)info.vocab_size, (long long)V);
    int64_t wide_off_vocab = info.wide_offset;
    hx_features_info(f, F_CROSS2, &info);
    int64_t wide_off_cross = info.wide_offset;
    CHECK(wide_off_vocab == 4 && wide_off_cross == 4 + V + 3, "wide offsets %lld %lld", (long long)wide_off_vocab,
          (long long)wide_off_cross);
    hx_features_shape shape;
    hx_features_shape_get(f, &shape);
    CHECK(shape.dense_dim == 3 && shape.n_id_columns == 6 && shape.n_wide == 3 &&
              shape.wide_dim == 4 + V + 3 + 1009, "shape %d %d %d %lld", shape.dense_dim, shape.n_id_columns,
          shape.n_wide, (long long)shape.wide_dim);
    int64_t rows, offs[2];
    CHECK(hx_features_embedding(f, 0, &rows, offs) == HX_OK && rows == V + 3 + 97 && offs[0] == 0 &&
              offs[1] == V + 3, "embedding rows %lld", (long long)rows);

    /* transform a batch of fresh rows (unseen values go to OOV) */
    synth t = make_synth(500, 43);
    t.cat[0] = 1000; /* never seen */
    hx_batch tb = slice(&t, 0, 500);
    CHECK(hx_feature_batch_alloc(f, 400, &fb) == HX_OK, "%s", hx_last_error());
    CHECK(hx_features_transform(f, &tb, &fb) == HX_ERR_SHAPE, "capacity too small");
    hx_feature_batch_free(&fb);
    CHECK(hx_feature_batch_alloc(f, 500, &fb) == HX_OK, "%s", hx_last_error());
    CHECK(hx_features_transform(f, &tb, &fb) == HX_OK, "%s", hx_last_error());
    double *want = malloc(sizeof(double) * 500 * 3);
    int ids_ok = 1, wide_ok = 1;
    for (int64_t i = 0; i < 500; i++) {
        const float *x = t.num + i * NN;
        want[i * 3 + 0] = (x[0] - mean[0]) / sd[0];
        want[i * 3 + 1] = (slog1p(x[1]) - mean[1]) / sd[1];
        want[i * 3 + 2] = x[2];
        int64_t bg = (x[0] >= 0) + (x[0] >= 2.5) + (x[0] >= 4.0), bq = 0;
        for (int k = 0; k < nq; k++) bq += x[1] >= qb[k];
        int64_t raw = t.cat[i * NC], slot = raw < 0 ? 50 : raw < 50 ? raw : -1;
        int64_t v = slot >= 0 && vocab_index[slot] >= 0 ? vocab_index[slot]
                                                         : V + (int64_t)(xxh_ids(&raw, 1, 0) % 3);
        int64_t h = (int64_t)(xxh_ids(&t.cat[i * NC + 1], 1, 1234) % 97);
        int64_t k2[2] = {v, bg}, k3[3] = {h, bq, v};
        int64_t c2 = (int64_t)(xxh_ids(k2, 2, 7) % 1009), c3 = (int64_t)(xxh_ids(k3, 3, 0) % 50);
        int64_t want_ids[6] = {bg, bq, v, h, c2, c3};
        for (int c = 0; c < 6; c++) ids_ok &= fb.ids[c * 500 + i] == want_ids[c];
        int64_t lookup;
        hx_features_lookup(f, F_VOCAB, raw, &lookup);
        ids_ok &= lookup == v;
        wide_ok &= fb.wide_ids[i * 3 + 0] == bg && fb.wide_ids[i * 3 + 1] == v + 4 &&
                   fb.wide_ids[i * 3 + 2] == c2 + wide_off_cross && fb.wide_offsets[i] == 3 * i;
    }
    CHECK(ids_ok, "ids against the reference (buckets, vocabulary with OOV, XXH3 hashes and crosses)");
    CHECK(wide_ok && fb.wide_offsets[500] == 1500, "the wide bag");
    CHECK(fb.ids[2 * 500] >= V, "an unseen value is out of vocabulary");
    test_close_f32("dense", fb.dense, want, 500 * 3, 1e-6, 1e-6);
    CHECK(memcmp(fb.labels, t.labels, 500 * sizeof(float)) == 0 && fb.n == 500, "labels");
    free(want);
    free(sorted);
    hx_feature_batch_free(&fb);
    hx_feature_batch_free(&fb); /* twice is fine */
    hx_features_free(f);
    free_synth(&s);
    free_synth(&t);
}

/* More rows than the quantile sample: boundaries are near the quantiles. */
static void test_quantile_sample(void)
{
    const int64_t N = 300000;
    float *num = malloc(sizeof(float) * N);
    uint8_t *miss = calloc(N, 1);
    float *lab = calloc(N, sizeof(float));
    test_rng r = test_rng_make(9);
    for (int64_t i = 0; i < N; i++) num[i] = (float)test_rng_uniform(&r, 0, 1);
    hx_feature_column c = hx_feature_column_default(HX_FEATURE_BUCKETIZED, "u", 0);
    c.n_quantiles = 4;
    hx_features_config fc = hx_features_config_default();
    fc.columns = &c;
    fc.n_columns = 1;
    fc.n_numeric = 1;
    hx_features *f;
    CHECK(hx_features_create(&fc, &f) == HX_OK, "%s", hx_last_error());
    hx_batch b = {N, 1, 0, lab, num, miss, NULL};
    CHECK(hx_features_fit_batch(f, &b) == HX_OK, "%s", hx_last_error());
    CHECK(hx_features_fit_finish(f) == HX_OK, "%s", hx_last_error());
    hx_feature_info info;
    hx_features_info(f, 0, &info);
    CHECK(info.n_boundaries == 3, "3 boundaries");
    for (int k = 0; k < info.n_boundaries; k++)
        CHECK(fabs(info.boundaries[k] - (k + 1) / 4.0) < 0.01, "boundary %d = %g", k, info.boundaries[k]);
    hx_features_free(f);
    free(num);
    free(miss);
    free(lab);
}

static void test_adult_features(void)
{
    char path[1024];
    const char *src = getenv("HX_TEST_SRC");
    snprintf(path, sizeof path, "%s/data/adult/adult.data", src ? src : ".");
    hx_reader_config rc = hx_reader_config_adult(false);
    rc.batch_size = 512;
    rc.n_threads = 2;
    hx_reader *r;
    CHECK(hx_reader_open(path, &rc, &r) == HX_OK, "%s", hx_last_error());
    if (!r) return;
    const char *cats[8] = {"workclass", "education", "marital_status", "occupation", "relationship", "race",
                           "sex", "native_country"};
    int64_t want_vocab[8] = {9, 16, 7, 15, 6, 5, 2, 42}; /* README values, + "?" where missing */
    hx_feature_column cols[16];
    int n = 0;
    cols[n++] = hx_feature_column_default(HX_FEATURE_NUMERIC, "age", hx_reader_config_find(&rc, "age"));
    cols[n++] = hx_feature_column_default(HX_FEATURE_BUCKETIZED, "age_buckets", hx_reader_config_find(&rc, "age"));
    for (int k = 0; k < 8; k++) {
        cols[n] = hx_feature_column_default(HX_FEATURE_VOCABULARY, cats[k], hx_reader_config_find(&rc, cats[k]));
        cols[n++].wide = true;
    }
    cols[n] = hx_feature_column_default(HX_FEATURE_CROSSED, "education_x_occupation", 0);
    cols[n].crossed[0] = 3;
    cols[n].crossed[1] = 5;
    cols[n].n_crossed = 2;
    cols[n++].wide = true;
    hx_features_config fc = hx_features_config_default();
    fc.columns = cols;
    fc.n_columns = n;
    fc.n_numeric = 6;
    fc.n_categorical = 8;
    hx_features *f;
    CHECK(hx_features_create(&fc, &f) == HX_OK, "%s", hx_last_error());
    CHECK(hx_features_fit(f, r) == HX_OK, "%s", hx_last_error());
    for (int k = 0; k < 8; k++) {
        hx_feature_info info;
        hx_features_info(f, 2 + k, &info);
        CHECK(info.vocab_size == want_vocab[k], "%s: %lld values", cats[k], (long long)info.vocab_size);
    }
    hx_feature_info age;
    hx_features_info(f, 0, &age);
    CHECK(fabs(age.mean - 38.58164675532078) < 1e-9, "mean age %.15g", age.mean);
    /* the reader was rewound: transform the epoch */
    hx_feature_batch fb;
    CHECK(hx_feature_batch_alloc(f, 512, &fb) == HX_OK, "%s", hx_last_error());
    const hx_batch *b;
    int64_t rows = 0;
    double dense_sum = 0;
    while (hx_reader_next(r, &b) == HX_OK && b) {
        CHECK(hx_features_transform(f, b, &fb) == HX_OK, "%s", hx_last_error());
        for (int64_t i = 0; i < fb.n; i++) dense_sum += fb.dense[i];
        rows += fb.n;
    }
    CHECK(rows == 32561 && fabs(dense_sum) < 1e-2, "standardised age sums to %g over %lld rows", dense_sum,
          (long long)rows);
    hx_feature_batch_free(&fb);
    hx_features_free(f);
    hx_reader_close(r);
}

static void test_errors(void)
{
    hx_features *f = (hx_features *)1;
    hx_features_config fc = hx_features_config_default();
    CHECK(hx_features_create(&fc, &f) == HX_ERR_INVALID_ARGUMENT && f == NULL, "no columns");
    CHECK(hx_features_create(NULL, &f) == HX_ERR_INVALID_ARGUMENT, "NULL config");
    hx_feature_column c[3];
    c[0] = hx_feature_column_default(HX_FEATURE_NUMERIC, "x", 5);
    fc.columns = c;
    fc.n_columns = 1;
    fc.n_numeric = 2;
    fc.n_categorical = 1;
    CHECK(hx_features_create(&fc, &f) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "numeric column 5"),
          "bad source: %s", hx_last_error());
    c[0] = hx_feature_column_default(HX_FEATURE_HASHED, "h", 0);
    c[0].hash_buckets = 0;
    CHECK(hx_features_create(&fc, &f) == HX_ERR_INVALID_ARGUMENT, "0 buckets");
    c[0] = hx_feature_column_default(HX_FEATURE_BUCKETIZED, "b", 0);
    double desc[2] = {2, 1};
    c[0].boundaries = desc;
    c[0].n_boundaries = 2;
    CHECK(hx_features_create(&fc, &f) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "ascending"),
          "descending boundaries: %s", hx_last_error());
    c[0] = hx_feature_column_default(HX_FEATURE_HASHED, "h", 0);
    c[1] = hx_feature_column_default(HX_FEATURE_NUMERIC, "n", 0);
    c[2] = hx_feature_column_default(HX_FEATURE_CROSSED, "x", 0);
    c[2].crossed[0] = 0;
    c[2].crossed[1] = 1;
    c[2].n_crossed = 2;
    fc.n_columns = 3;
    CHECK(hx_features_create(&fc, &f) == HX_ERR_INVALID_ARGUMENT && strstr(hx_last_error(), "crosses column 1"),
          "crossing a numeric column: %s", hx_last_error());
    c[2].crossed[1] = 2;
    CHECK(hx_features_create(&fc, &f) == HX_ERR_INVALID_ARGUMENT, "crossing itself");
    c[2].crossed[1] = 0;
    int bad_emb[1] = {1};
    hx_embedding_column e = {"e", bad_emb, 1, 4};
    fc.embeddings = &e;
    fc.n_embeddings = 1;
    CHECK(hx_features_create(&fc, &f) == HX_ERR_INVALID_ARGUMENT, "an embedding of a numeric column");
    bad_emb[0] = 2;
    CHECK(hx_features_create(&fc, &f) == HX_OK, "%s", hx_last_error());
    /* standardisation needs a fit */
    hx_feature_batch fb;
    float lab[2] = {0, 1}, num[4] = {1, 2, 3, 4};
    uint8_t miss[4] = {0};
    int64_t cat[2] = {5, 6};
    hx_batch b = {2, 2, 1, lab, num, miss, cat};
    CHECK(hx_features_transform(f, &b, &fb) == HX_ERR_STATE && strstr(hx_last_error(), "fit"), "before fit: %s",
          hx_last_error());
    hx_batch wrong = {2, 1, 1, lab, num, miss, cat};
    CHECK(hx_features_fit_batch(f, &wrong) == HX_ERR_SHAPE, "batch shape");
    CHECK(hx_features_fit_batch(f, &b) == HX_OK && hx_features_fit_finish(f) == HX_OK, "%s", hx_last_error());
    CHECK(hx_features_fit_finish(f) == HX_ERR_STATE, "finish twice");
    CHECK(hx_features_lookup(f, 0, 5, &(int64_t){0}) == HX_ERR_INVALID_ARGUMENT, "lookup on a hashed column");
    CHECK(hx_features_info(f, 3, &(hx_feature_info){0}) == HX_ERR_INVALID_ARGUMENT, "info of column 3");
    hx_features_free(f);
    /* nothing to fit: ready at once */
    fc.n_columns = 1;
    fc.n_embeddings = 0;
    CHECK(hx_features_create(&fc, &f) == HX_OK && hx_feature_batch_alloc(f, 2, &fb) == HX_OK, "%s", hx_last_error());
    CHECK(hx_features_transform(f, &b, &fb) == HX_OK && hx_features_fit_batch(f, &b) == HX_ERR_STATE, "no fit needed");
    hx_feature_batch_free(&fb);
    hx_features_free(f);
    hx_features_free(NULL);
}

static const test_case cases[] = {
    {"columns", test_columns},
    {"quantile_sample", test_quantile_sample},
    {"adult_features", test_adult_features},
    {"errors", test_errors},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "features", cases, TEST_COUNT(cases));
}
