/* test_embedding_optim: sparse optimizer steps on embedding tables against
 * double references of the published formulas (torch.optim.SparseAdam /
 * LazyAdam, torch.optim.Adagrad, TensorFlow FTRL-proximal, FBGEMM row-wise
 * Adagrad) over several steps of bags with heavily duplicated (Zipf) ids:
 * the params must be within 1e-6 (relative to the largest) of the
 * reference, and f32 params and state within the error bound derived
 * beside it (tests/util/optim_bound.h). The fused backward+update, the backward followed by the
 * sparse update, 1 and 2 threads, and eager and lazy tables must give
 * bitwise the same table; f16/bf16 tables follow the reference rounded to
 * their storage. Bad ids, a table without an optimizer, duplicate ids in a
 * sparse gradient and optimizer changes are checked too. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding/embedding.h"
#include "kernels/cpu/hx_kernels.h"
#include "tests/util/optim_bound.h"
#include "tests/util/optim_ref.h"
#include "tests/util/testutil.h"

#define STEPS 5

static hx_emb_table *make_table(int64_t rows, int64_t dim, hx_dtype dt, int lazy,
                                      const hx_emb_optim *o)
{
    hx_emb_table_config c = hx_emb_table_config_default(rows, dim);
    c.dtype = dt;
    c.lazy_init = lazy;
    c.init.kind = HX_EMB_INIT_UNIFORM;
    c.init.a = -0.1;
    c.init.b = 0.1;
    c.init.seed = 99;
    c.optim = *o;
    c.oob = HX_EMB_OOB_ZERO;
    c.nthreads = 2;
    hx_emb_table *t = NULL;
    hx_emb_err err;
    CHECK(hx_emb_local_create(&c, &t, &err) == HX_OK, "create: %s", err.msg);
    return t;
}

static void read_params(hx_emb_table *tt, float *out)
{
    hx_emb_local *t = hx_emb_as_local(tt);
    for (int64_t r = 0; r < tt->rows; r++) hx_emb_local_read_row(t, r, out + r * tt->dim);
}

/* Params and state, bytes as stored (every row read as f32). */
static int same_table(hx_emb_table *a, hx_emb_table *b)
{
    int64_t n = a->rows * a->dim;
    float *pa = malloc(sizeof(float) * (size_t)(n + 64)), *pb = malloc(sizeof(float) * (size_t)(n + 64));
    read_params(a, pa);
    read_params(b, pb);
    int same = memcmp(pa, pb, sizeof(float) * (size_t)n) == 0;
    hx_emb_local *la = hx_emb_as_local(a), *lb = hx_emb_as_local(b);
    int ns = hx_emb_optim_nstate(la->optim.kind);
    int rowwise = la->optim.kind == HX_EMB_OPTIM_ROW_ADAGRAD;
    for (int k = 0; k < ns && same; k++)
        for (int64_t r = 0; r < a->rows && same; r++) {
            int ready_a = !la->lazy || ((la->ready[r >> 6] >> (r & 63)) & 1);
            int ready_b = !lb->lazy || ((lb->ready[r >> 6] >> (r & 63)) & 1);
            if (!ready_a || !ready_b) continue; /* params compared above; state not yet written */
            if (rowwise) same = la->state[k][r] == lb->state[k][r];
            else same = memcmp(la->state[k] + r * la->gstride, lb->state[k] + r * lb->gstride,
                               sizeof(float) * (size_t)a->dim) == 0;
        }
    free(pa);
    free(pb);
    return same;
}

/* ---- the double reference ---------------------------------------------------------- */

typedef struct ref {
    hx_emb_optim o;
    int64_t rows, dim;
    double *p, *s0, *s1;
    ref_eb *ep, *e0, *e1; /* their error bounds (f32 tables) */
    hx_dtype dt; /* params rounded to this after each update */
} ref;

static double round_to(double x, hx_dtype dt)
{
    float f = (float)x;
    if (dt == HX_DTYPE_F32) return f;
    uint16_t h;
    hx_k_cast(&h, (hx_kdtype)dt, &f, HX_K_F32, 1, 1);
    hx_k_cast(&f, HX_K_F32, &h, (hx_kdtype)dt, 1, 1);
    return f;
}

static ref ref_make(hx_emb_table *t, const hx_emb_optim *o, hx_dtype dt)
{
    ref R;
    R.o = *o;
    R.rows = t->rows;
    R.dim = t->dim;
    R.dt = dt;
    int64_t n = R.rows * R.dim;
    R.p = malloc(sizeof(double) * (size_t)n);
    R.s0 = malloc(sizeof(double) * (size_t)n);
    R.s1 = malloc(sizeof(double) * (size_t)n);
    R.ep = malloc(sizeof(ref_eb) * (size_t)n);
    R.e0 = malloc(sizeof(ref_eb) * (size_t)n);
    R.e1 = malloc(sizeof(ref_eb) * (size_t)n);
    float *f = malloc(sizeof(float) * (size_t)(n + 64));
    read_params(t, f);
    for (int64_t i = 0; i < n; i++) {
        R.p[i] = f[i];
        R.s0[i] = o->kind == HX_EMB_OPTIM_LAZY_ADAM ? 0.0 : o->initial_accumulator;
        R.s1[i] = 0.0;
        R.ep[i] = (ref_eb){R.p[i], 0};
        /* the table's accumulator starts at initial_accumulator rounded to f32 */
        R.e0[i] = (ref_eb){R.s0[i], fabs((double)(float)R.s0[i] - R.s0[i])};
        R.e1[i] = (ref_eb){0, 0};
    }
    free(f);
    return R;
}

static void ref_free(ref *R)
{
    free(R->p);
    free(R->s0);
    free(R->s1);
    free(R->ep);
    free(R->e0);
    free(R->e1);
}

/* The double reference (tests/util/optim_ref.h) of a table's optimizer. */
static ref_optim ref_of(const hx_emb_optim *o)
{
    static const ref_optim_kind kinds[] = {[HX_EMB_OPTIM_LAZY_ADAM] = REF_LAZY_ADAM,
                                           [HX_EMB_OPTIM_ADAGRAD] = REF_ADAGRAD,
                                           [HX_EMB_OPTIM_ROW_ADAGRAD] = REF_ROW_ADAGRAD,
                                           [HX_EMB_OPTIM_FTRL] = REF_FTRL};
    return (ref_optim){.kind = kinds[o->kind], .lr = o->lr, .weight_decay = o->weight_decay,
                       .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                       .lr_decay = o->lr_decay, .l1 = o->l1, .l2 = o->l2,
                       .l2_shrinkage = o->l2_shrinkage};
}

/* One step t on row id with summed gradient g (dim). */
static void ref_step(ref *R, int64_t id, const float *gf, int64_t t)
{
    ref_optim o = ref_of(&R->o);
    int64_t dim = R->dim;
    double *p = R->p + id * dim, *s0 = R->s0 + id * dim, *s1 = R->s1 + id * dim;
    double g[256] = {0};
    for (int64_t k = 0; k < dim; k++) g[k] = gf[k];
    ref_eb *ep = R->ep + id * dim, *e0 = R->e0 + id * dim, *e1 = R->e1 + id * dim;
    if (o.kind == REF_ROW_ADAGRAD) { /* one accumulator per row, kept in s0[0] */
        ref_row_adagrad_step(&o, t, g, dim, p, s0);
        ref_eb_row_adagrad_step(&o, t, gf, dim, ep, e0);
    } else {
        for (int64_t k = 0; k < dim; k++) {
            ref_optim_step(&o, t, g[k], &p[k], &s0[k], &s1[k]);
            ref_eb_step(&o, t, (ref_eb){g[k], 0}, &ep[k], &e0[k], &e1[k]);
        }
    }
    for (int64_t k = 0; k < dim; k++) p[k] = round_to(p[k], R->dt); /* (bounds: f32 tables only) */
}

/* ---- batches ---------------------------------------------------------------------------- */

typedef struct batch {
    int64_t *ids, *offsets;
    float *weights, *dout;
    int64_t n, nbags;
    hx_emb_mode mode;
} batch;

/* 1500 bags of up to 12 ids (several shares of ids for the threads),
 * Zipf(1.05) over rows (hot ids repeat hundreds of times), a few out of
 * range; sum with weights, or mean. */
static batch batch_make(test_rng *r, int64_t rows, int64_t dim, int step)
{
    batch b;
    b.nbags = 1500;
    b.mode = step % 2 ? HX_EMB_MEAN : HX_EMB_SUM;
    b.offsets = malloc(sizeof(int64_t) * (size_t)(b.nbags + 1));
    int64_t n = 0;
    for (int64_t i = 0; i < b.nbags; i++) {
        b.offsets[i] = n;
        n += (int64_t)(test_rng_u64(r) % 13);
    }
    b.n = n;
    b.ids = malloc(sizeof(int64_t) * (size_t)(n + 1));
    b.weights = malloc(sizeof(float) * (size_t)(n + 1));
    double *cdf = malloc(sizeof(double) * (size_t)rows), acc = 0;
    for (int64_t i = 0; i < rows; i++) cdf[i] = (acc += pow((double)(i + 1), -1.05));
    for (int64_t j = 0; j < n; j++) {
        double u = test_rng_uniform(r, 0, acc);
        int64_t lo = 0, hi = rows - 1;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        b.ids[j] = (lo * 104729) % rows;
        if (j % 997 == 5) b.ids[j] = rows + j; /* out of range: dropped under OOB_ZERO */
        b.weights[j] = (float)test_rng_uniform(r, 0.5, 1.5);
    }
    free(cdf);
    b.dout = malloc(sizeof(float) * (size_t)(b.nbags * dim));
    test_fill_uniform(r, b.dout, b.nbags * dim, -1, 1);
    return b;
}

static void batch_free(batch *b)
{
    free(b->ids);
    free(b->offsets);
    free(b->weights);
    free(b->dout);
}

static hx_emb_query batch_query(const batch *b, int nthreads)
{
    hx_emb_query q = hx_emb_query_bags(b->ids, b->n, b->offsets, b->nbags, b->mode);
    q.weights = b->mode == HX_EMB_SUM ? b->weights : NULL;
    q.nthreads = nthreads;
    return q;
}

/* ---- the main check ------------------------------------------------------------------------ */

/* By optimizer kind (NONE, LazyAdam, Adagrad, row-wise Adagrad, FTRL), of
 * f32 tables after STEPS steps, for the params and each state array: the
 * worst error over its derived bound (must be <= 1), and in ulps
 * (ref_ulps), for the record in docs/numerics.md. */
static double ratio_seen[5][3], ulps_seen[5][3];

/* got (n) against the exact values and bounds b (elements b[i * bstride];
 * exact: the reference rounds f32 params to f32 after each step, as the
 * table stores them, where the bound follows the exact value): array a of
 * optimizer kind k. */
static void bound_check(const char *what, int k, int a, const float *got, const ref_eb *b,
                        int64_t bstride, int64_t n)
{
    double worst = 0;
    int64_t at = 0;
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) want[i] = b[i * bstride].x;
    for (int64_t i = 0; i < n; i++) {
        double r = ref_eb_ratio(got[i], want[i], b[i * bstride].e);
        if (r > worst) { /* a NaN's ratio is infinite */
            worst = r;
            at = i;
        }
    }
    CHECK(worst <= 1, "%s: array %d: %.9g at %lld, want %.17g: %.4f times its error bound %.3g", what,
          a, n ? (double)got[at] : 0.0, (long long)at, n ? want[at] : 0.0, worst,
          n ? b[at * bstride].e : 0.0);
    ratio_seen[k][a] = fmax(ratio_seen[k][a], worst);
    ulps_seen[k][a] = fmax(ulps_seen[k][a], ref_ulps(got, want, n, NULL));
    free(want);
}

static double tol_for(hx_dtype dt)
{
    return dt == HX_DTYPE_F32 ? 1e-6 : dt == HX_DTYPE_F16 ? 2e-3 : 1.6e-2;
}

static void run_optimizer(const char *name, const hx_emb_optim *o, int64_t rows, int64_t dim,
                          hx_dtype dt)
{
    /* A: fused, 1 thread. B: fused, 2 threads. C: backward + sparse update, 2
     * threads, hash dedup. D: lazy rows, fused, 2 threads. */
    hx_emb_table *A = make_table(rows, dim, dt, 0, o), *B = make_table(rows, dim, dt, 0, o);
    hx_emb_table *C = make_table(rows, dim, dt, 0, o), *D = make_table(rows, dim, dt, 1, o);
    if (!A || !B || !C || !D) return;
    ref R = ref_make(A, o, dt);
    test_rng r = test_rng_make(1234);
    hx_emb_workspace *ws = hx_emb_workspace_create();
    hx_emb_sparse_grad g, gref;
    memset(&g, 0, sizeof g);
    memset(&gref, 0, sizeof gref);
    char what[128];
    for (int step = 1; step <= STEPS; step++) {
        batch b = batch_make(&r, rows, dim, step);
        hx_emb_grad_input gi = {b.dout, NULL, dim, HX_EMB_DEDUP_SORT};
        hx_emb_err err;
        hx_emb_query q1 = batch_query(&b, 1), q2 = batch_query(&b, 2);
        CHECK(hx_emb_table_backward_update(A, &q1, &gi, step, NULL, &err) == HX_OK, "%s: fused: %s", name, err.msg);
        CHECK(hx_emb_table_backward_update(B, &q2, &gi, step, ws, &err) == HX_OK, "%s: fused 2: %s", name, err.msg);
        CHECK(hx_emb_table_backward_update(D, &q2, &gi, step, ws, &err) == HX_OK, "%s: lazy: %s", name, err.msg);
        hx_emb_grad_input gih = gi;
        gih.dedup = HX_EMB_DEDUP_HASH;
        CHECK(hx_emb_backward(&q2, &gih, ws, &g, &err) == HX_OK, "%s: backward: %s", name, err.msg);
        CHECK(hx_emb_table_apply(C, &g, step, 2, &err) == HX_OK, "%s: apply: %s", name, err.msg);
        /* The reference takes the same f32 row sums (checked against double
         * sums in test_embedding), minus the out-of-range ids. */
        CHECK(hx_emb_backward(&q1, &gi, NULL, &gref, &err) == HX_OK, "%s: backward 1: %s", name, err.msg);
        for (int64_t u = 0; u < gref.n; u++)
            if (gref.ids[u] >= 0 && gref.ids[u] < rows) ref_step(&R, gref.ids[u], gref.rows + u * gref.stride, step);
        batch_free(&b);
    }
    float *pa = malloc(sizeof(float) * (size_t)(rows * dim + 64));
    read_params(A, pa);
    double e = test_max_rel_err(pa, R.p, rows * dim, 1e-3);
    snprintf(what, sizeof what, "%s %s dim %lld", name, hx_dtype_name(dt), (long long)dim);
    CHECK(e <= tol_for(dt), "%s: params off the reference by %.3g (relative to the largest)", what, e);
    if (dt == HX_DTYPE_F32) {
        bound_check(what, o->kind, 0, pa, R.ep, 1, rows * dim);
        hx_emb_local *la = hx_emb_as_local(A);
        int ns = hx_emb_optim_nstate(o->kind);
        for (int k = 0; k < ns; k++) {
            int64_t n = o->kind == HX_EMB_OPTIM_ROW_ADAGRAD ? rows : rows * dim;
            float *s = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) {
                int64_t r = o->kind == HX_EMB_OPTIM_ROW_ADAGRAD ? i : i / dim;
                int64_t c = o->kind == HX_EMB_OPTIM_ROW_ADAGRAD ? 0 : i % dim;
                s[i] = o->kind == HX_EMB_OPTIM_ROW_ADAGRAD ? la->state[k][r] : la->state[k][r * la->gstride + c];
            }
            bound_check(what, o->kind, k + 1, s, k ? R.e1 : R.e0,
                        o->kind == HX_EMB_OPTIM_ROW_ADAGRAD ? dim : 1, n);
            free(s);
        }
    }
    if (dt == HX_DTYPE_F32 && o->kind != HX_EMB_OPTIM_ROW_ADAGRAD) {
        /* The state too. */
        hx_emb_local *la = hx_emb_as_local(A);
        int ns = hx_emb_optim_nstate(o->kind);
        for (int k = 0; k < ns; k++) {
            float *s = malloc(sizeof(float) * (size_t)(rows * dim));
            for (int64_t i = 0; i < rows; i++)
                memcpy(s + i * dim, la->state[k] + i * la->gstride, sizeof(float) * (size_t)dim);
            double es = test_max_rel_err(s, k ? R.s1 : R.s0, rows * dim, 1e-3);
            CHECK(es <= 1e-6, "%s: state %d off the reference by %.3g", what, k, es);
            free(s);
        }
    }
    CHECK(same_table(A, B), "%s: 1 and 2 threads give different tables", what);
    CHECK(same_table(A, C), "%s: fused and backward+update give different tables", what);
    CHECK(same_table(A, D), "%s: eager and lazy tables differ", what);
    hx_emb_local_stats s;
    hx_emb_err err;
    hx_emb_local_stats_get(D, &s, &err);
    CHECK(s.rows_ready > 0 && s.rows_ready < rows, "%s: lazy rows written: %lld of %lld", what,
          (long long)s.rows_ready, (long long)rows);
    free(pa);
    ref_free(&R);
    hx_emb_sparse_grad_free(&g);
    hx_emb_sparse_grad_free(&gref);
    hx_emb_workspace_free(ws);
    hx_emb_table_free(A);
    hx_emb_table_free(B);
    hx_emb_table_free(C);
    hx_emb_table_free(D);
}

/* ---- edges --------------------------------------------------------------------------------- */

static void edges(void)
{
    int64_t rows = 50, dim = 4;
    hx_emb_optim adam = hx_emb_optim_default(HX_EMB_OPTIM_LAZY_ADAM);
    hx_emb_table_config c = hx_emb_table_config_default(rows, dim);
    hx_emb_table *t = NULL, *u = NULL;
    hx_emb_err err;
    CHECK(hx_emb_local_create(&c, &t, &err) == HX_OK, "create: %s", err.msg);
    if (!t) return;
    hx_emb_sparse_grad g;
    memset(&g, 0, sizeof g);
    hx_emb_sparse_grad_reserve(&g, 3, dim, &err);
    memset(g.rows, 0, sizeof(float) * (size_t)(3 * g.stride));
    for (int i = 0; i < 3; i++) {
        g.ids[i] = i * 7;
        for (int k = 0; k < dim; k++) g.rows[i * g.stride + k] = 0.5f - (float)k;
    }
    CHECK(hx_emb_table_apply(t, &g, 1, 1, &err) == HX_ERR_STATE && strstr(err.msg, "no optimizer"),
          "update without an optimizer: %s", err.msg);
    CHECK(hx_emb_local_set_optim(t, &adam, 1, &err) == HX_OK, "set_optim: %s", err.msg);
    CHECK(hx_emb_table_apply(t, &g, 0, 1, &err) == HX_ERR_INVALID_ARGUMENT, "step 0");
    /* A bad id under OOB_ERROR: nothing written. */
    hx_emb_local *l = hx_emb_as_local(t);
    size_t pbytes = (size_t)(rows * l->stride) * sizeof(float);
    float *before = malloc(pbytes);
    memcpy(before, l->param, pbytes);
    g.ids[2] = rows;
    CHECK(hx_emb_table_apply(t, &g, 1, 1, &err) == HX_ERR_INDEX && strstr(err.msg, "id 50") &&
              strstr(err.msg, "position 2"),
          "bad id in an update: %s", err.msg);
    g.ids[2] = -4;
    CHECK(hx_emb_table_apply(t, &g, 1, 1, &err) == HX_ERR_INDEX && strstr(err.msg, "id -4"), "negative id: %s",
          err.msg);
    CHECK(memcmp(before, l->param, pbytes) == 0, "a refused update changed the table");
    /* The same grad with a zero-policy table: the bad row is dropped. */
    c.oob = HX_EMB_OOB_ZERO;
    c.optim = adam;
    CHECK(hx_emb_local_create(&c, &u, &err) == HX_OK, "create: %s", err.msg);
    if (u) {
        hx_emb_local *lu = hx_emb_as_local(u);
        memcpy(before, lu->param, pbytes);
        CHECK(hx_emb_table_apply(u, &g, 1, 1, &err) == HX_OK, "zero policy update: %s", err.msg);
        CHECK(lu->param != NULL && ((float *)lu->param)[7 * lu->stride] != before[7 * lu->stride] &&
                  memcmp((float *)lu->param + 8 * lu->stride, before + 8 * lu->stride,
                         sizeof(float) * (size_t)((rows - 8) * lu->stride)) == 0,
              "zero policy: valid rows updated, others untouched");
    }
    /* Duplicate ids in a sparse gradient are applied in order, as two steps would. */
    hx_emb_table *d1 = NULL, *d2 = NULL;
    c.oob = HX_EMB_OOB_ERROR;
    for (int h = 0; h < 2; h++) {
        c.dtype = h ? HX_DTYPE_BF16 : HX_DTYPE_F32;
        CHECK(hx_emb_local_create(&c, &d1, &err) == HX_OK && hx_emb_local_create(&c, &d2, &err) == HX_OK,
              "create: %s", err.msg);
        hx_emb_sparse_grad dup, one;
        memset(&dup, 0, sizeof dup);
        memset(&one, 0, sizeof one);
        hx_emb_sparse_grad_reserve(&dup, 2, dim, &err);
        hx_emb_sparse_grad_reserve(&one, 1, dim, &err);
        memset(dup.rows, 0, sizeof(float) * (size_t)(2 * dup.stride));
        memset(one.rows, 0, sizeof(float) * (size_t)one.stride);
        dup.ids[0] = dup.ids[1] = one.ids[0] = 3;
        for (int k = 0; k < dim; k++) dup.rows[k] = dup.rows[dup.stride + k] = one.rows[k] = 0.25f * (float)(k + 1);
        CHECK(hx_emb_table_apply(d1, &dup, 1, 1, &err) == HX_OK, "dup apply: %s", err.msg);
        CHECK(hx_emb_table_apply(d2, &one, 1, 1, &err) == HX_OK && hx_emb_table_apply(d2, &one, 1, 1, &err) == HX_OK,
              "one apply: %s", err.msg);
        CHECK(same_table(d1, d2), "duplicate ids applied in order (%s)", h ? "bf16" : "f32");
        hx_emb_sparse_grad_free(&dup);
        hx_emb_sparse_grad_free(&one);
        hx_emb_table_free(d1);
        hx_emb_table_free(d2);
    }
    /* Changing the learning rate keeps the state; changing the kind replaces it. */
    hx_emb_optim fast = adam;
    fast.lr = 0.5;
    float m0 = l->state[0][0];
    CHECK(hx_emb_local_set_optim(t, &fast, 1, &err) == HX_OK && l->optim.lr == 0.5 && l->state[0][0] == m0,
          "lr change keeps the state");
    hx_emb_optim ftrl = hx_emb_optim_default(HX_EMB_OPTIM_FTRL);
    CHECK(hx_emb_local_set_optim(t, &ftrl, 1, &err) == HX_OK && l->state[0][0] == 0.1f && l->state[1][0] == 0.0f,
          "kind change resets the state");
    ftrl.lr_power = -0.7;
    CHECK(hx_emb_local_set_optim(t, &ftrl, 1, &err) == HX_ERR_UNSUPPORTED, "FTRL lr_power -0.7");
    hx_emb_optim badb = adam;
    badb.beta1 = 1.0;
    CHECK(hx_emb_local_set_optim(t, &badb, 1, &err) == HX_ERR_INVALID_ARGUMENT, "beta1 = 1");
    /* Gradient rows of another dim. */
    hx_emb_sparse_grad g5;
    memset(&g5, 0, sizeof g5);
    hx_emb_sparse_grad_reserve(&g5, 1, dim + 1, &err);
    g5.ids[0] = 0;
    memset(g5.rows, 0, sizeof(float) * (size_t)g5.stride);
    CHECK(hx_emb_table_apply(t, &g5, 1, 1, &err) == HX_ERR_SHAPE, "gradient of another dim");
    hx_emb_sparse_grad_free(&g5);
    free(before);
    hx_emb_sparse_grad_free(&g);
    hx_emb_table_free(t);
    hx_emb_table_free(u);
}

/* The optimizers' settings, one case each. */
static hx_emb_optim lazy_adam_of(double weight_decay)
{
    hx_emb_optim o = hx_emb_optim_default(HX_EMB_OPTIM_LAZY_ADAM);
    o.lr = 0.01;
    o.weight_decay = weight_decay;
    return o;
}

static hx_emb_optim adagrad_of(hx_emb_optim_kind kind, double weight_decay)
{
    hx_emb_optim o = hx_emb_optim_default(HX_EMB_OPTIM_ADAGRAD);
    o.lr = 0.05;
    o.lr_decay = 0.01;
    o.initial_accumulator = 0.1;
    o.kind = kind;
    o.weight_decay = weight_decay;
    return o;
}

static hx_emb_optim ftrl_of(double l1, double l2_shrinkage)
{
    hx_emb_optim o = hx_emb_optim_default(HX_EMB_OPTIM_FTRL);
    o.lr = 0.05;
    o.l1 = l1;
    o.l2 = 0.01;
    o.l2_shrinkage = l2_shrinkage;
    return o;
}

/* Dims 19 and 64 in f32. */
static void both_dims(const char *name, hx_emb_optim o)
{
    run_optimizer(name, &o, 3000, 19, HX_DTYPE_F32);
    run_optimizer(name, &o, 2000, 64, HX_DTYPE_F32);
}

static void lazy_adam(void) { both_dims("LazyAdam", lazy_adam_of(0.0)); }
static void lazy_adam_wd(void) { both_dims("LazyAdam wd", lazy_adam_of(0.01)); }
static void adagrad(void) { both_dims("Adagrad", adagrad_of(HX_EMB_OPTIM_ADAGRAD, 0.0)); }
static void row_adagrad(void)
{
    both_dims("row-wise Adagrad", adagrad_of(HX_EMB_OPTIM_ROW_ADAGRAD, 0.001));
}
static void ftrl(void) { both_dims("FTRL", ftrl_of(0.001, 0.0)); }
static void ftrl_shrinkage(void) { both_dims("FTRL shrinkage", ftrl_of(0.0, 0.01)); }

static void half_tables(void)
{
    hx_emb_optim adam = lazy_adam_of(0.0), ftrl = ftrl_of(0.001, 0.0),
                 rada = adagrad_of(HX_EMB_OPTIM_ROW_ADAGRAD, 0.001);
    run_optimizer("LazyAdam", &adam, 2000, 24, HX_DTYPE_F16);
    run_optimizer("LazyAdam", &adam, 2000, 24, HX_DTYPE_BF16);
    run_optimizer("FTRL", &ftrl, 2000, 24, HX_DTYPE_BF16);
    run_optimizer("row-wise Adagrad", &rada, 2000, 24, HX_DTYPE_F16);
}

static void report_errors(void)
{
    for (int k = 1; k < 5; k++)
        fprintf(stderr, "test_embedding_optim: %s: worst error %.3f/%.3f/%.3f of its bound, %.1f/%.1f/%.1f "
                "ulps\n", hx_emb_optim_name((hx_emb_optim_kind)k), ratio_seen[k][0], ratio_seen[k][1],
                ratio_seen[k][2], ulps_seen[k][0], ulps_seen[k][1], ulps_seen[k][2]);
}

static const test_case cases[] = {
    {"lazy_adam", lazy_adam},
    {"lazy_adam_wd", lazy_adam_wd},
    {"adagrad", adagrad},
    {"row_adagrad", row_adagrad},
    {"ftrl", ftrl},
    {"ftrl_shrinkage", ftrl_shrinkage},
    {"half_tables", half_tables},
    {"edges", edges},
};

int main(int argc, char **argv)
{
    test_options o = {.teardown = report_errors};
    return test_main_with(argc, argv, "embedding_optim", cases, TEST_COUNT(cases), &o);
}
