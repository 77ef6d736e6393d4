/* test_embedding: lookups, bags and their backward against scalar double
 * references written here: every mode (rows, sum, mean, max), per-sample
 * weights, a padding id, empty bags, include_last_offset, i32 and i64 ids,
 * heavy duplicates, both dedup methods, f32/f16/bf16 storage, lazy rows,
 * and ids near 2^63. Outputs and sparse gradients are also checked bitwise
 * equal at 1 and 2 threads; bad ids under both out-of-range policies and
 * bad offsets/argmax are checked to fail cleanly. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"
#include "kernels/cpu/hx_kernels.h"
#include "tests/util/testutil.h"

static hx_emb_table *make_table(int64_t rows, int64_t dim, hx_dtype dt, int lazy,
                                      hx_emb_oob oob, uint64_t seed)
{
    hx_emb_table_config c = hx_emb_table_config_default(rows, dim);
    c.dtype = dt;
    c.lazy_init = lazy;
    c.oob = oob;
    c.init.kind = HX_EMB_INIT_NORMAL;
    c.init.a = 0.0;
    c.init.b = 1.0;
    c.init.seed = seed;
    c.nthreads = 2;
    hx_emb_table *t = NULL;
    hx_emb_err err;
    hx_status st = hx_emb_local_create(&c, &t, &err);
    CHECK(st == HX_OK, "create %lld x %lld: %s", (long long)rows, (long long)dim, err.msg);
    return t;
}

/* The table as doubles (rows x dim), read through the internal row reader. */
static double *table_values(hx_emb_table *tt)
{
    hx_emb_local *t = hx_emb_as_local(tt);
    int64_t rows = tt->rows, dim = tt->dim;
    double *v = malloc(sizeof(double) * (size_t)(rows * dim));
    float *r = malloc(sizeof(float) * (size_t)t->gstride);
    for (int64_t i = 0; i < rows; i++) {
        hx_emb_local_read_row(t, i, r);
        for (int64_t k = 0; k < dim; k++) v[i * dim + k] = r[k];
    }
    free(r);
    return v;
}

/* ---- reference forward and backward ---------------------------------------------- */

typedef struct ref_case {
    hx_emb_mode mode;
    int64_t n, nbags, rows, dim;
    const int64_t *ids;     /* as i64 */
    const int64_t *bounds;  /* nbags + 1 */
    const float *weights;
    int has_padding;
    int64_t padding_id;
} ref_case;

static int is_pad(const ref_case *c, int64_t id) { return c->has_padding && id == c->padding_id; }

static void ref_forward(const ref_case *c, const double *tab, double *out, int64_t *argmax)
{
    int64_t dim = c->dim;
    for (int64_t b = 0; b < c->nbags; b++) {
        int64_t s = c->mode == HX_EMB_ROWS ? b : c->bounds[b];
        int64_t e = c->mode == HX_EMB_ROWS ? b + 1 : c->bounds[b + 1];
        double *o = out + b * dim;
        int64_t cnt = 0;
        for (int64_t k = 0; k < dim; k++) {
            o[k] = 0.0;
            argmax[b * dim + k] = -1;
        }
        for (int64_t j = s; j < e; j++) {
            int64_t id = c->ids[j];
            if (is_pad(c, id)) continue;
            int in = id >= 0 && id < c->rows;
            for (int64_t k = 0; k < dim; k++) {
                double x = in ? tab[id * dim + k] : 0.0;
                if (c->mode == HX_EMB_MAX) {
                    if (cnt == 0 || x > o[k]) {
                        o[k] = x;
                        argmax[b * dim + k] = j;
                    }
                } else {
                    o[k] += (c->weights ? c->weights[j] : 1.0) * x;
                }
            }
            cnt++;
        }
        if (c->mode == HX_EMB_MEAN && cnt > 0)
            for (int64_t k = 0; k < dim; k++) o[k] /= (double)cnt;
    }
}

/* Dense gradient (rows x dim) and which rows got one. */
static void ref_backward(const ref_case *c, const float *dout, const int64_t *argmax, double *grad,
                         uint8_t *touched)
{
    int64_t dim = c->dim;
    memset(grad, 0, sizeof(double) * (size_t)(c->rows * dim));
    memset(touched, 0, (size_t)c->rows);
    for (int64_t b = 0; b < c->nbags; b++) {
        int64_t s = c->mode == HX_EMB_ROWS ? b : c->bounds[b];
        int64_t e = c->mode == HX_EMB_ROWS ? b + 1 : c->bounds[b + 1];
        int64_t cnt = 0;
        for (int64_t j = s; j < e; j++) cnt += !is_pad(c, c->ids[j]);
        for (int64_t j = s; j < e; j++) {
            int64_t id = c->ids[j];
            if (is_pad(c, id)) continue;
            for (int64_t k = 0; k < dim; k++) {
                double d = dout[b * dim + k], g;
                if (c->mode == HX_EMB_MAX) {
                    if (argmax[b * dim + k] != j) continue;
                    g = d;
                } else if (c->mode == HX_EMB_MEAN) {
                    g = d / (double)cnt;
                } else {
                    g = (c->weights ? c->weights[j] : 1.0) * d;
                }
                grad[id * dim + k] += g;
                touched[id] = 1;
            }
        }
    }
}

/* ---- random cases ---------------------------------------------------------------------- */

/* Zipf(s) over [0, v) by inverse CDF. */
typedef struct zipf {
    double *cdf;
    int64_t v;
} zipf;

static zipf zipf_make(int64_t v, double s)
{
    zipf z = {malloc(sizeof(double) * (size_t)v), v};
    double acc = 0;
    for (int64_t i = 0; i < v; i++) z.cdf[i] = (acc += 1.0 / pow((double)(i + 1), s));
    for (int64_t i = 0; i < v; i++) z.cdf[i] /= acc;
    return z;
}

static int64_t zipf_draw(const zipf *z, test_rng *r)
{
    double u = test_rng_uniform(r, 0, 1);
    int64_t lo = 0, hi = z->v - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (z->cdf[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

typedef struct gen {
    int64_t *ids, *bounds, *offsets;
    int32_t *ids32, *offsets32;
    float *weights;
    int64_t n, nbags, n_offsets;
} gen;

/* nbags bags of 0..maxlen ids (some empty; one bag: maxlen ids), ids
 * Zipf(1.05) over rows, scrambled; a fraction pad_frac of them `padding`. */
static gen gen_make(test_rng *r, int64_t nbags, int maxlen, int64_t rows, int include_last,
                    int64_t padding, double pad_frac)
{
    gen g;
    memset(&g, 0, sizeof g);
    g.nbags = nbags;
    g.bounds = malloc(sizeof(int64_t) * (size_t)(nbags + 1));
    g.bounds[0] = 0;
    for (int64_t b = 0; b < nbags; b++) {
        int64_t len = (int64_t)(test_rng_u64(r) % (uint64_t)(maxlen + 1));
        if (test_rng_u64(r) % 8 == 0) len = 0;
        if (nbags == 1) len = maxlen;
        g.bounds[b + 1] = g.bounds[b] + len;
    }
    g.n = g.bounds[nbags];
    zipf z = zipf_make(rows, 1.05);
    g.ids = malloc(sizeof(int64_t) * (size_t)(g.n + 1));
    g.ids32 = malloc(sizeof(int32_t) * (size_t)(g.n + 1));
    g.weights = malloc(sizeof(float) * (size_t)(g.n + 1));
    for (int64_t j = 0; j < g.n; j++) {
        int64_t id = (zipf_draw(&z, r) * 7919) % rows;
        if (test_rng_uniform(r, 0, 1) < pad_frac) id = padding;
        g.ids[j] = id;
        g.ids32[j] = (int32_t)id;
        g.weights[j] = (float)test_rng_uniform(r, -2, 2);
    }
    free(z.cdf);
    g.n_offsets = include_last ? nbags + 1 : nbags;
    g.offsets = malloc(sizeof(int64_t) * (size_t)(g.n_offsets + 1));
    g.offsets32 = malloc(sizeof(int32_t) * (size_t)(g.n_offsets + 1));
    for (int64_t b = 0; b < g.n_offsets; b++) {
        g.offsets[b] = g.bounds[b];
        g.offsets32[b] = (int32_t)g.bounds[b];
    }
    return g;
}

static void gen_free(gen *g)
{
    free(g->ids);
    free(g->ids32);
    free(g->bounds);
    free(g->offsets);
    free(g->offsets32);
    free(g->weights);
}

/* ---- the main sweep: forward and backward vs the references -------------------------------------- */

/* Ids unique and equal to the touched set; rows equal to the dense reference. */
static void check_sparse(const char *what, const hx_emb_sparse_grad *g, const double *grad,
                         const uint8_t *touched, int64_t rows, int64_t dim, double tol)
{
    uint8_t *seen = calloc((size_t)rows, 1);
    int64_t want = 0, bad_ids = 0;
    for (int64_t r = 0; r < rows; r++) want += touched[r];
    double *w = malloc(sizeof(double) * (size_t)(dim > 0 ? dim : 1));
    double worst = 0;
    for (int64_t u = 0; u < g->n; u++) {
        int64_t id = g->ids[u];
        if (id < 0 || id >= rows || seen[id] || !touched[id]) {
            bad_ids++;
            continue;
        }
        seen[id] = 1;
        for (int64_t k = 0; k < dim; k++) w[k] = grad[id * dim + k];
        double e = test_max_rel_err(g->rows + u * g->stride, w, dim, 1.0);
        if (e > worst) worst = e;
        for (int64_t k = dim; k < g->stride; k++)
            if (g->rows[u * g->stride + k] != 0.0f) bad_ids++;
    }
    CHECK(g->n == want && bad_ids == 0, "%s: %lld unique ids, want %lld; %lld bad", what, (long long)g->n,
          (long long)want, (long long)bad_ids);
    CHECK(worst <= tol, "%s: gradient rows off by %.3g", what, worst);
    free(seen);
    free(w);
}

static int same_grad(const hx_emb_sparse_grad *a, const hx_emb_sparse_grad *b)
{
    return a->n == b->n && a->stride == b->stride &&
           memcmp(a->ids, b->ids, sizeof(int64_t) * (size_t)a->n) == 0 &&
           memcmp(a->rows, b->rows, sizeof(float) * (size_t)(a->n * a->stride)) == 0;
}

static void sweep(hx_emb_table *t, const double *tab, const char *tname)
{
    int64_t rows = t->rows, dim = t->dim;
    test_rng r = test_rng_make(11);
    const hx_emb_mode modes[4] = {HX_EMB_ROWS, HX_EMB_SUM, HX_EMB_MEAN, HX_EMB_MAX};
    hx_emb_workspace *ws = hx_emb_workspace_create();
    for (int mi = 0; mi < 4; mi++)
        for (int variant = 0; variant < 4; variant++) {
            hx_emb_mode mode = modes[mi];
            int i32 = variant & 1, padded = (variant >> 1) & 1;
            int include_last = mode != HX_EMB_ROWS && (variant == 1 || variant == 2);
            int weighted = mode == HX_EMB_SUM && variant >= 2;
            int64_t pad_id = padded ? (int64_t)(test_rng_u64(&r) % (uint64_t)rows) : 0;
            /* 1600 bags of up to 12 ids, or 9000 rows: above the parallel
             * thresholds, and several shares of ids for the backward. */
            gen g = gen_make(&r, mode == HX_EMB_ROWS ? 1 : 1600, mode == HX_EMB_ROWS ? 9000 : 12, rows,
                             include_last, pad_id, padded ? 0.1 : 0.0);
            hx_emb_query q = hx_emb_query_bags(g.ids, g.n, g.offsets, g.n_offsets, mode);
            if (i32) {
                q.ids = g.ids32;
                q.offsets = g.offsets32;
                q.id_dtype = HX_DTYPE_I32;
            }
            q.include_last_offset = include_last;
            q.weights = weighted ? g.weights : NULL;
            q.has_padding = padded;
            q.padding_id = pad_id;
            ref_case c = {mode, g.n, mode == HX_EMB_ROWS ? g.n : g.nbags, rows, dim, g.ids, g.bounds,
                          q.weights, padded, pad_id};
            int64_t nout = c.nbags;
            char what[160];
            snprintf(what, sizeof what, "%s %s%s%s%s%s", tname,
                     mode == HX_EMB_ROWS ? "rows" : mode == HX_EMB_SUM ? "sum" : mode == HX_EMB_MEAN ? "mean" : "max",
                     i32 ? " i32" : " i64", padded ? " padding" : "", include_last ? " include_last" : "",
                     weighted ? " weights" : "");
            CHECK(hx_emb_query_out_rows(&q) == nout, "%s: out rows", what);
            double *want = malloc(sizeof(double) * (size_t)(nout * dim));
            int64_t *want_am = malloc(sizeof(int64_t) * (size_t)(nout * dim));
            ref_forward(&c, tab, want, want_am);
            float *out[2];
            int64_t *am[2];
            for (int th = 0; th < 2; th++) {
                out[th] = malloc(sizeof(float) * (size_t)(nout * dim));
                am[th] = malloc(sizeof(int64_t) * (size_t)(nout * dim));
                q.nthreads = th + 1;
                hx_emb_err err;
                hx_status st = hx_emb_table_lookup(t, &q, out[th], mode == HX_EMB_MAX ? am[th] : NULL, &err);
                CHECK(st == HX_OK, "%s: lookup: %s", what, err.msg);
            }
            CHECK(test_close_f32(what, out[0], want, nout * dim, 1e-5, 1e-5), "%s: forward", what);
            CHECK(memcmp(out[0], out[1], sizeof(float) * (size_t)(nout * dim)) == 0,
                  "%s: forward differs at 1 and 2 threads", what);
            if (mode == HX_EMB_MAX) {
                CHECK(memcmp(am[0], want_am, sizeof(int64_t) * (size_t)(nout * dim)) == 0 &&
                          memcmp(am[1], want_am, sizeof(int64_t) * (size_t)(nout * dim)) == 0,
                      "%s: argmax", what);
            }
            /* Backward: dout random; both dedup methods, both thread counts. */
            float *dout = malloc(sizeof(float) * (size_t)(nout * dim + 1));
            test_fill_uniform(&r, dout, nout * dim, -1, 1);
            double *grad = malloc(sizeof(double) * (size_t)(rows * dim));
            uint8_t *touched = malloc((size_t)rows);
            ref_backward(&c, dout, want_am, grad, touched);
            hx_emb_sparse_grad sg[2][2];
            memset(sg, 0, sizeof sg);
            for (int dm = 0; dm < 2; dm++)
                for (int th = 0; th < 2; th++) {
                    hx_emb_grad_input gi = {dout, am[0], dim, dm ? HX_EMB_DEDUP_HASH : HX_EMB_DEDUP_SORT};
                    q.nthreads = th + 1;
                    hx_emb_err err;
                    hx_status st = hx_emb_backward(&q, &gi, th ? ws : NULL, &sg[dm][th], &err);
                    CHECK(st == HX_OK, "%s: backward: %s", what, err.msg);
                    char w2[200];
                    snprintf(w2, sizeof w2, "%s backward %s %d thread(s)", what, dm ? "hash" : "sort", th + 1);
                    check_sparse(w2, &sg[dm][th], grad, touched, rows, dim, 1e-5);
                }
            CHECK(same_grad(&sg[0][0], &sg[0][1]) && same_grad(&sg[1][0], &sg[1][1]),
                  "%s: sparse gradient differs at 1 and 2 threads", what);
            for (int64_t u = 1; u < sg[0][0].n; u++)
                CHECK(sg[0][0].ids[u - 1] < sg[0][0].ids[u], "%s: sort dedup ids not ascending", what);
            for (int dm = 0; dm < 2; dm++)
                for (int th = 0; th < 2; th++) hx_emb_sparse_grad_free(&sg[dm][th]);
            for (int th = 0; th < 2; th++) {
                free(out[th]);
                free(am[th]);
            }
            free(want);
            free(want_am);
            free(dout);
            free(grad);
            free(touched);
            gen_free(&g);
        }
    hx_emb_workspace_free(ws);
}

/* ---- storage types and lazy rows ------------------------------------------------------------- */

static void storage_and_lazy(void)
{
    int64_t rows = 3000, dim = 19;
    hx_emb_table *e = make_table(rows, dim, HX_DTYPE_F32, 0, HX_EMB_OOB_ERROR, 5);
    hx_emb_table *l = make_table(rows, dim, HX_DTYPE_F32, 1, HX_EMB_OOB_ERROR, 5);
    hx_emb_table *h = make_table(rows, dim, HX_DTYPE_F16, 0, HX_EMB_OOB_ERROR, 5);
    hx_emb_table *b = make_table(rows, dim, HX_DTYPE_BF16, 1, HX_EMB_OOB_ERROR, 5);
    if (!e || !l || !h || !b) return;
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)rows);
    for (int64_t i = 0; i < rows; i++) ids[i] = (i * 17) % rows;
    float *oe = malloc(sizeof(float) * (size_t)(rows * dim)), *ol = malloc(sizeof(float) * (size_t)(rows * dim));
    float *oh = malloc(sizeof(float) * (size_t)(rows * dim)), *ob = malloc(sizeof(float) * (size_t)(rows * dim));
    hx_emb_query q = hx_emb_query_rows(ids, rows);
    q.nthreads = 2;
    hx_emb_err err;
    CHECK(hx_emb_table_lookup(e, &q, oe, NULL, &err) == HX_OK, "eager lookup: %s", err.msg);
    CHECK(hx_emb_table_lookup(l, &q, ol, NULL, &err) == HX_OK, "lazy lookup: %s", err.msg);
    CHECK(hx_emb_table_lookup(h, &q, oh, NULL, &err) == HX_OK, "f16 lookup: %s", err.msg);
    CHECK(hx_emb_table_lookup(b, &q, ob, NULL, &err) == HX_OK, "bf16 lookup: %s", err.msg);
    CHECK(memcmp(oe, ol, sizeof(float) * (size_t)(rows * dim)) == 0, "lazy rows read as the eager initial values");
    /* f16/bf16 rows are the f32 initial values rounded to nearest even. */
    uint16_t *tmp = malloc(sizeof(uint16_t) * (size_t)(rows * dim));
    float *back = malloc(sizeof(float) * (size_t)(rows * dim));
    hx_k_cast(tmp, HX_K_F16, oe, HX_K_F32, rows * dim, 1);
    hx_k_cast(back, HX_K_F32, tmp, HX_K_F16, rows * dim, 1);
    CHECK(memcmp(back, oh, sizeof(float) * (size_t)(rows * dim)) == 0, "f16 storage holds the rounded initial values");
    hx_k_cast(tmp, HX_K_BF16, oe, HX_K_F32, rows * dim, 1);
    hx_k_cast(back, HX_K_F32, tmp, HX_K_BF16, rows * dim, 1);
    CHECK(memcmp(back, ob, sizeof(float) * (size_t)(rows * dim)) == 0, "bf16 storage holds the rounded initial values");
    /* The initial values look like N(0, 1). */
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < rows * dim; i++) {
        s += oe[i];
        s2 += (double)oe[i] * oe[i];
    }
    double mean = s / (double)(rows * dim), var = s2 / (double)(rows * dim) - mean * mean;
    CHECK(fabs(mean) < 0.02 && fabs(var - 1) < 0.03, "normal init: mean %.4f var %.4f", mean, var);
    /* Lazy tables: rows are not written by lookups. */
    hx_emb_local_stats stt;
    CHECK(hx_emb_local_stats_get(l, &stt, &err) == HX_OK && stt.rows_ready == 0, "lazy rows ready after lookups: %lld",
          (long long)stt.rows_ready);
    /* Each 64-byte aligned. */
    hx_emb_local *lh = hx_emb_as_local(h);
    CHECK(((uintptr_t)lh->param & 63) == 0 && (lh->stride * (int64_t)lh->esize) % 64 == 0, "rows 64-byte aligned");
    /* The sweep on f16 and lazy bf16 storage. */
    double *tab = table_values(h);
    sweep(h, tab, "f16");
    free(tab);
    tab = table_values(b);
    sweep(b, tab, "bf16 lazy");
    free(tab);
    free(ids);
    free(oe);
    free(ol);
    free(oh);
    free(ob);
    free(tmp);
    free(back);
    hx_emb_table_free(e);
    hx_emb_table_free(l);
    hx_emb_table_free(h);
    hx_emb_table_free(b);
}

/* ---- bad ids and bad queries ------------------------------------------------------------------- */

static void bad_ids(void)
{
    int64_t rows = 100, dim = 8;
    hx_emb_table *te = make_table(rows, dim, HX_DTYPE_F32, 0, HX_EMB_OOB_ERROR, 1);
    hx_emb_table *tz = make_table(rows, dim, HX_DTYPE_F32, 0, HX_EMB_OOB_ZERO, 1);
    if (!te || !tz) return;
    const int64_t near = INT64_MAX - 3;
    int64_t ids[6] = {5, 99, -1, 100, near, 7};
    int32_t ids32[6] = {5, 99, -1, 100, INT32_MAX, 7};
    float out[6 * 8];
    for (int i = 0; i < 6 * 8; i++) out[i] = 42.0f;
    hx_emb_query q = hx_emb_query_rows(ids, 6);
    hx_emb_err err;
    hx_status st = hx_emb_table_lookup(te, &q, out, NULL, &err);
    CHECK(st == HX_ERR_INDEX && strstr(err.msg, "id -1") && strstr(err.msg, "position 2"),
          "negative id: %d %s", (int)st, err.msg);
    CHECK(out[0] == 42.0f, "a failed lookup wrote its output");
    int64_t big[2] = {3, near};
    q = hx_emb_query_rows(big, 2);
    st = hx_emb_table_lookup(te, &q, out, NULL, &err);
    CHECK(st == HX_ERR_INDEX && strstr(err.msg, "9223372036854775804") && strstr(err.msg, "position 1"),
          "id near 2^63: %s", err.msg);
    q = hx_emb_query_rows(NULL, 6);
    q.ids = ids32;
    q.id_dtype = HX_DTYPE_I32;
    st = hx_emb_table_lookup(te, &q, out, NULL, &err);
    CHECK(st == HX_ERR_INDEX && strstr(err.msg, "id -1"), "i32 negative id: %s", err.msg);
    /* Zero policy: zero rows, counted. */
    q = hx_emb_query_rows(ids, 6);
    st = hx_emb_table_lookup(tz, &q, out, NULL, &err);
    CHECK(st == HX_OK, "zero policy lookup: %s", err.msg);
    int zeros = 1;
    for (int i = 2; i < 5; i++)
        for (int k = 0; k < dim; k++) zeros &= out[i * dim + k] == 0.0f;
    CHECK(zeros && out[0] != 0.0f, "zero policy gives zero rows");
    hx_emb_local_stats s;
    hx_emb_local_stats_get(tz, &s, &err);
    CHECK(s.oob_ids == 3, "zero policy counts %lld", (long long)s.oob_ids);
    /* A mean bag counts a zero row; padding it does not. */
    int64_t bids[4] = {1, 100, 2, 50}, offs[1] = {0};
    float bo[8];
    hx_emb_query qb = hx_emb_query_bags(bids, 4, offs, 1, HX_EMB_MEAN);
    qb.has_padding = 1;
    qb.padding_id = 50;
    st = hx_emb_table_lookup(tz, &qb, bo, NULL, &err);
    double *tab = table_values(tz);
    CHECK(st == HX_OK && fabs(bo[0] - (tab[1 * dim] + tab[2 * dim]) / 3.0) < 1e-6, "mean with a zero row: %g",
          (double)bo[0]);
    free(tab);
    /* Bad offsets, weights, dtypes. */
    int64_t off_bad[3] = {1, 2, 3}, off_dec[3] = {0, 3, 2}, off_last[3] = {0, 2, 3};
    qb = hx_emb_query_bags(bids, 4, off_bad, 3, HX_EMB_SUM);
    CHECK(hx_emb_table_lookup(te, &qb, out, NULL, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "offsets[0]"),
          "offsets[0] != 0: %s", err.msg);
    qb.offsets = off_dec;
    CHECK(hx_emb_table_lookup(te, &qb, out, NULL, &err) == HX_ERR_INVALID_ARGUMENT, "decreasing offsets");
    qb.offsets = off_last;
    qb.include_last_offset = 1;
    CHECK(hx_emb_table_lookup(te, &qb, out, NULL, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "last offset"),
          "include_last_offset not ending at n: %s", err.msg);
    float w[4] = {1, 1, 1, 1};
    qb = hx_emb_query_bags(bids, 4, offs, 1, HX_EMB_MEAN);
    qb.weights = w;
    CHECK(hx_emb_table_lookup(te, &qb, out, NULL, &err) == HX_ERR_INVALID_ARGUMENT, "weights with mean");
    qb = hx_emb_query_rows(bids, 4);
    qb.id_dtype = HX_DTYPE_F32;
    CHECK(hx_emb_table_lookup(te, &qb, out, NULL, &err) == HX_ERR_DTYPE, "f32 ids");
    /* Bags with no ids, and an empty lookup. */
    int64_t offs0[3] = {0, 0, 0};
    float eo[3 * 8];
    for (int i = 0; i < 24; i++) eo[i] = 1.0f;
    int64_t eam[3 * 8];
    qb = hx_emb_query_bags(bids, 0, offs0, 3, HX_EMB_MAX);
    CHECK(hx_emb_table_lookup(te, &qb, eo, eam, &err) == HX_OK && eo[0] == 0.0f && eo[23] == 0.0f && eam[5] == -1,
          "empty bags give zeros and argmax -1");
    qb = hx_emb_query_rows(bids, 0);
    CHECK(hx_emb_table_lookup(te, &qb, NULL, NULL, &err) == HX_OK, "empty lookup");
    /* A max backward with an argmax that is not a position of its bag. */
    int64_t b2[4] = {1, 2, 3, 4}, of2[2] = {0, 2};
    hx_emb_query qm = hx_emb_query_bags(b2, 4, of2, 2, HX_EMB_MAX);
    float dout2[16] = {0};
    int64_t am2[16];
    for (int k = 0; k < 16; k++) am2[k] = k < 8 ? 0 : 2;
    am2[3] = 3;
    hx_emb_grad_input gi = {dout2, am2, 8, HX_EMB_DEDUP_AUTO};
    hx_emb_sparse_grad sg;
    memset(&sg, 0, sizeof sg);
    CHECK(hx_emb_backward(&qm, &gi, NULL, &sg, &err) == HX_ERR_INVALID_ARGUMENT && strstr(err.msg, "argmax[0][3]"),
          "bad argmax: %s", err.msg);
    hx_emb_sparse_grad_free(&sg);
    hx_emb_table_free(te);
    hx_emb_table_free(tz);
}

/* ---- keys near 2^63 through the backward -------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void wide_keys(void)
{
    /* Raw keys (a dynamic table's, say) spanning all of i64, many repeated. */
    test_rng r = test_rng_make(3);
    int64_t n = 5000, dim = 5;
    const int64_t base[8] = {INT64_MAX, INT64_MAX - 1, INT64_MIN, INT64_MIN + 1, 0, -1, 1, (int64_t)1 << 62};
    int64_t *keys = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t j = 0; j < n; j++) {
        uint64_t x = test_rng_u64(&r);
        keys[j] = x % 3 == 0 ? base[x % 8] : (int64_t)(x % 50) * 0x0123456789ABCDLL;
    }
    float *dout = malloc(sizeof(float) * (size_t)(n * dim));
    test_fill_uniform(&r, dout, n * dim, -1, 1);
    /* Reference: the distinct keys and their sums. */
    int64_t *sorted = malloc(sizeof(int64_t) * (size_t)n);
    memcpy(sorted, keys, sizeof(int64_t) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(int64_t), cmp_i64);
    int64_t U = 0;
    for (int64_t j = 0; j < n; j++)
        if (j == 0 || sorted[j] != sorted[j - 1]) sorted[U++] = sorted[j];
    hx_emb_query q = hx_emb_query_rows(keys, n);
    for (int dm = 0; dm < 3; dm++)
        for (int th = 1; th <= 2; th++) {
            hx_emb_sparse_grad g;
            memset(&g, 0, sizeof g);
            hx_emb_grad_input gi = {dout, NULL, dim, dm == 0 ? HX_EMB_DEDUP_SORT : dm == 1 ? HX_EMB_DEDUP_HASH : HX_EMB_DEDUP_AUTO};
            q.nthreads = th;
            hx_emb_err err;
            CHECK(hx_emb_backward(&q, &gi, NULL, &g, &err) == HX_OK, "wide keys backward: %s", err.msg);
            CHECK(g.n == U, "wide keys: %lld unique, want %lld", (long long)g.n, (long long)U);
            int ok = 1;
            for (int64_t u = 0; u < g.n && ok; u++) {
                int64_t *at = bsearch(&g.ids[u], sorted, (size_t)U, sizeof(int64_t), cmp_i64);
                if (!at) {
                    ok = 0;
                    break;
                }
                for (int64_t k = 0; k < dim; k++) {
                    double s = 0;
                    for (int64_t j = 0; j < n; j++)
                        if (keys[j] == g.ids[u]) s += dout[j * dim + k];
                    if (fabs(s - g.rows[u * g.stride + k]) > 1e-4) ok = 0;
                }
            }
            CHECK(ok, "wide keys: sums (method %d, %d threads)", dm, th);
            if (dm == 0)
                for (int64_t u = 1; u < g.n; u++) CHECK(g.ids[u - 1] < g.ids[u], "wide keys sorted");
            hx_emb_sparse_grad_free(&g);
        }
    free(keys);
    free(dout);
    free(sorted);
}

/* The plan cuts a large batch into several shares, in ascending id ranges
 * (SORT) and ascending within each share's groups; all shares together hold
 * every position that gets a gradient exactly once. */
static void shares(void)
{
    int64_t n = 40000, rows = 100000;
    test_rng r = test_rng_make(21);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t j = 0; j < n; j++) ids[j] = (int64_t)(test_rng_u64(&r) % (uint64_t)rows);
    float *dout = calloc((size_t)n * 4, sizeof(float));
    hx_emb_query q = hx_emb_query_rows(ids, n);
    q.nthreads = 2;
    for (int dm = 0; dm < 2; dm++) {
        hx_emb_grad_input gi = {dout, NULL, 4, dm ? HX_EMB_DEDUP_HASH : HX_EMB_DEDUP_SORT};
        hx_emb_workspace *ws = hx_emb_workspace_create();
        hx_emb_gplan p;
        hx_emb_err err;
        CHECK(hx_emb_group_plan(&q, &gi, rows, ws, &p, &err) == HX_OK, "plan: %s", err.msg);
        CHECK(p.nshares >= 8 && p.m == n, "%d shares for %lld positions", p.nshares, (long long)p.m);
        uint8_t *seen = calloc((size_t)n, 1);
        int64_t last = -1, total = 0;
        int ok = 1;
        for (int si = 0; si < p.nshares; si++) {
            hx_emb_groups g;
            hx_emb_group_share(&p, si, &g);
            for (int64_t u = 0; u < g.U; u++) {
                if (!dm) ok &= g.uniq[u] > last;
                if (!dm) last = g.uniq[u];
                for (int64_t k = g.start[u]; k < g.start[u + 1]; k++) {
                    uint32_t j = g.pos[k];
                    ok &= ids[j] == g.uniq[u] && !seen[j] && (k == g.start[u] || j > g.pos[k - 1]);
                    seen[j] = 1;
                    total++;
                }
            }
        }
        CHECK(ok && total == n, "shares (%s) hold every position once, by id, ascending", dm ? "hash" : "sort");
        free(seen);
        hx_emb_workspace_free(ws);
    }
    free(ids);
    free(dout);
}

/* The lookup sweep over a fresh f32 table of rows x dim. */
static void sweep_f32(int64_t rows, int64_t dim, uint64_t seed, const char *what)
{
    hx_emb_table *t = make_table(rows, dim, HX_DTYPE_F32, 0, HX_EMB_OOB_ERROR, seed);
    if (!t) return;
    double *tab = table_values(t);
    sweep(t, tab, what);
    free(tab);
    hx_emb_table_free(t);
}

static void sweep_dim19(void) { sweep_f32(5000, 19, 7, "f32 dim 19"); }
static void sweep_dim64(void) { sweep_f32(4000, 64, 8, "f32 dim 64"); }

static const test_case cases[] = {
    {"sweep_dim19", sweep_dim19},
    {"sweep_dim64", sweep_dim64},
    {"storage_and_lazy", storage_and_lazy},
    {"bad_ids", bad_ids},
    {"wide_keys", wide_keys},
    {"shares", shares},
};

int main(int argc, char **argv)
{
    return test_main(argc, argv, "embedding", cases, TEST_COUNT(cases));
}
