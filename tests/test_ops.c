/* test_ops: every op in hetex.h, checked two ways.
 *
 * (a) forward: the op on random inputs (fed as graph inputs) against a
 *     scalar double reference written here;
 * (b) gradient: the op's inputs made parameters, loss = sum(y * R) with a
 *     random constant R (so the upstream gradient is random), and
 *     hx_tensor_grad of every parameter compared with a central finite
 *     difference of the loss computed on the host in double.
 *
 * One harness (check_op) does both for a case: a graph builder callback, a
 * double reference callback, and the list of leaves (which of them get a
 * gradient check). Also here: summed gradients of a tensor with several
 * consumers, the target a gradient node inherits, dropout, and bitwise
 * equality of forward outputs at 1 and 2 threads. */
#include "hetex.h"
#include "testutil.h"
#include "hetex_checks.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAXL 8
#define S(...) ((const int64_t[]){__VA_ARGS__})

static const double PI_D = 3.14159265358979323846;

static test_rng rng;

/* ---- leaves: host data for one input / parameter / constant -------------- */

typedef struct leaf {
    const char *name;
    hx_dtype dt;
    int ndim;
    int64_t shape[HX_MAX_DIMS];
    void *data;
    bool grad; /* a parameter whose gradient is checked (f32 only) */
} leaf;

static int64_t numel_of(int nd, const int64_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}
static int64_t lnumel(const leaf *l) { return numel_of(l->ndim, l->shape); }
static size_t esize(hx_dtype dt) { return dt == HX_DTYPE_I64 ? 8 : dt == HX_DTYPE_F16 || dt == HX_DTYPE_BF16 ? 2 : 4; }
static size_t lbytes(const leaf *l) { return (size_t)lnumel(l) * esize(l->dt); }
static double fv(const leaf *l, int64_t i)
{
    switch (l->dt) {
    case HX_DTYPE_I32: return ((const int32_t *)l->data)[i];
    case HX_DTYPE_I64: return (double)((const int64_t *)l->data)[i];
    default: return ((const float *)l->data)[i];
    }
}
static int64_t iv(const leaf *l, int64_t i)
{
    return l->dt == HX_DTYPE_I32 ? ((const int32_t *)l->data)[i] : ((const int64_t *)l->data)[i];
}

static leaf lshape(const char *name, hx_dtype dt, int nd, const int64_t *shape)
{
    leaf l;
    memset(&l, 0, sizeof l);
    l.name = name;
    l.dt = dt;
    l.ndim = nd;
    for (int i = 0; i < nd; i++) l.shape[i] = shape[i];
    l.data = calloc((size_t)lnumel(&l), esize(dt));
    return l;
}

/* f32 leaf, uniform in [lo, hi). */
static leaf lf(const char *name, int nd, const int64_t *shape, double lo, double hi, bool grad)
{
    leaf l = lshape(name, HX_DTYPE_F32, nd, shape);
    test_fill_uniform(&rng, (float *)l.data, lnumel(&l), lo, hi);
    l.grad = grad;
    return l;
}

/* f32 leaf, uniform in +-[gap, hi): away from zero. */
static leaf lfaway(const char *name, int nd, const int64_t *shape, double gap, double hi, bool grad)
{
    leaf l = lf(name, nd, shape, gap, hi, grad);
    float *d = (float *)l.data;
    for (int64_t i = 0; i < lnumel(&l); i++)
        if (test_rng_u64(&rng) & 1) d[i] = -d[i];
    return l;
}

/* Integer leaf (i32 or i64) with the given values. */
static leaf lint(const char *name, hx_dtype dt, int nd, const int64_t *shape, const int64_t *vals)
{
    leaf l = lshape(name, dt, nd, shape);
    for (int64_t i = 0; i < lnumel(&l); i++) {
        if (dt == HX_DTYPE_I32) ((int32_t *)l.data)[i] = (int32_t)vals[i];
        else ((int64_t *)l.data)[i] = vals[i];
    }
    return l;
}

/* Integer leaf with values uniform in [lo, hi]. */
static leaf lrandint(const char *name, hx_dtype dt, int nd, const int64_t *shape, int64_t lo, int64_t hi)
{
    leaf l = lshape(name, dt, nd, shape);
    for (int64_t i = 0; i < lnumel(&l); i++) {
        int64_t v = lo + (int64_t)(test_rng_u64(&rng) % (uint64_t)(hi - lo + 1));
        if (dt == HX_DTYPE_I32) ((int32_t *)l.data)[i] = (int32_t)v;
        else ((int64_t *)l.data)[i] = v;
    }
    return l;
}

static void leaves_free(leaf *x, int n)
{
    for (int i = 0; i < n; i++) free(x[i].data);
}

/* ---- comparisons ----------------------------------------------------------- */

static hx_session *make_session(hx_graph *g, int threads, uint64_t seed, const char *what)
{
    hx_session_config cfg = hx_session_config_default();
    cfg.n_threads = threads;
    cfg.seed = seed;
    return test_session_with(g, &cfg, what);
}

static int shape_is(const hx_tensor *t, int nd, const int64_t *sh, const char *what)
{
    int ok = hx_tensor_ndim(t) == nd;
    for (int i = 0; ok && i < nd; i++) ok = hx_tensor_dim(t, i) == sh[i];
    char a[128] = "", b[128] = "";
    size_t pa = 0, pb = 0;
    for (int i = 0; i < hx_tensor_ndim(t) && i < HX_MAX_DIMS && pa < 100; i++)
        pa += (size_t)snprintf(a + pa, sizeof a - pa, "%lld,", (long long)hx_tensor_dim(t, i));
    for (int i = 0; i < nd && pb < 100; i++)
        pb += (size_t)snprintf(b + pb, sizeof b - pb, "%lld,", (long long)sh[i]);
    CHECK(ok, "%s: output shape [%s] (ndim %d), want [%s] (ndim %d)", what, a,
          hx_tensor_ndim(t), b, nd);
    return ok;
}

/* ---- the harness ------------------------------------------------------------ */

typedef hx_tensor *(*build_fn)(hx_graph *g, hx_tensor *const *x, const void *ctx);
/* Sets the expected output shape; with out != NULL also the expected values. */
typedef void (*ref_fn)(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out);

typedef struct op_case {
    const char *what;
    build_fn build;
    ref_fn ref;
    const void *ctx;
    double rtol, atol; /* forward tolerance */
    double eps;        /* finite-difference step factor (0: 1e-2) */
    hx_dtype out_dt;   /* expected output dtype (0: f32) */
    int run_flags;     /* hx_session_run flags (HX_RUN_TRAIN: training-mode ops) */
} op_case;

/* (a) forward: every leaf is a graph input, fed at the run. */
static void check_forward(const op_case *c, const leaf *x, int n)
{
    char what[200];
    snprintf(what, sizeof what, "%s forward", c->what);
    hx_graph *g = hx_graph_create();
    CHECK(g != NULL, "%s: hx_graph_create", what);
    if (!g) return;
    hx_tensor *t[MAXL] = {0};
    hx_feed feeds[MAXL];
    for (int i = 0; i < n; i++) {
        t[i] = hx_graph_input(g, x[i].name, x[i].dt, x[i].ndim, x[i].shape);
        CHECK(t[i] != NULL, "%s: hx_graph_input %s: %s", what, x[i].name, hx_last_error());
        feeds[i] = (hx_feed){NULL, t[i], x[i].data, lbytes(&x[i])};
    }
    hx_tensor *y = c->build(g, t, c->ctx);
    CHECK(y != NULL, "%s: building the op failed: %s", what, hx_last_error());
    int nd = 0;
    int64_t sh[HX_MAX_DIMS] = {0};
    c->ref(x, c->ctx, &nd, sh, NULL);
    if (!y || !shape_is(y, nd, sh, what)) {
        hx_graph_free(g);
        return;
    }
    CHECK(hx_tensor_dtype(y) == c->out_dt, "%s: output dtype %s, want %s", what,
          hx_dtype_name(hx_tensor_dtype(y)), hx_dtype_name(c->out_dt));
    if (hx_tensor_dtype(y) != c->out_dt) {
        hx_graph_free(g);
        return;
    }
    int64_t ny = numel_of(nd, sh);
    size_t es = esize(c->out_dt);
    float *got = calloc((size_t)ny, sizeof *got);
    void *raw = calloc((size_t)ny, es);
    double *want = calloc((size_t)ny, sizeof *want);
    c->ref(x, c->ctx, &nd, sh, want);
    hx_session *s = make_session(g, 1, 1, what);
    if (s) {
        hx_fetch f = {NULL, y, raw, (size_t)ny * es};
        hx_status st = hx_session_run(s, feeds, n, &f, 1, c->run_flags);
        CHECK(st == HX_OK, "%s: run: %s: %s", what, hx_status_name(st), hx_last_error());
        leaf out = {"y", c->out_dt, 0, {0}, raw, false};
        if (st == HX_OK && c->out_dt != HX_DTYPE_F32) { /* integers: exact */
            int64_t bad = -1;
            for (int64_t i = 0; i < ny && bad < 0; i++)
                if (fv(&out, i) != want[i]) bad = i;
            CHECK(bad < 0, "%s: element %lld: got %.17g want %.17g", what, (long long)bad,
                  bad < 0 ? 0.0 : fv(&out, bad), bad < 0 ? 0.0 : want[bad]);
        } else if (st == HX_OK) {
            for (int64_t i = 0; i < ny; i++) got[i] = (float)fv(&out, i);
            test_close_f32(what, got, want, ny, c->rtol, c->atol);
        }
    }
    hx_session_free(s);
    hx_graph_free(g);
    free(got);
    free(raw);
    free(want);
}

static double dot_f32(const float *y, const float *r, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)y[i] * r[i];
    return s;
}

/* (b) gradient: leaves with grad become parameters, the others constants. */
static void check_grad(const op_case *c, const leaf *x, int n)
{
    char what[200];
    snprintf(what, sizeof what, "%s grad", c->what);
    hx_graph *g = hx_graph_create();
    if (!g) return;
    hx_tensor *t[MAXL] = {0}, *gr[MAXL] = {0};
    float *p[MAXL] = {0}, *an[MAXL] = {0};
    for (int i = 0; i < n; i++) {
        t[i] = x[i].grad ? hx_graph_param(g, x[i].name, HX_DTYPE_F32, x[i].ndim, x[i].shape,
                                          hx_init_zeros())
                         : hx_graph_constant(g, x[i].name, x[i].dt, x[i].ndim, x[i].shape,
                                             x[i].data);
        CHECK(t[i] != NULL, "%s: leaf %s: %s", what, x[i].name, hx_last_error());
    }
    hx_tensor *y = c->build(g, t, c->ctx);
    CHECK(y != NULL, "%s: building the op failed: %s", what, hx_last_error());
    if (!y) {
        hx_graph_free(g);
        return;
    }
    int ynd = hx_tensor_ndim(y);
    int64_t ysh[HX_MAX_DIMS] = {0};
    for (int d = 0; d < ynd; d++) ysh[d] = hx_tensor_dim(y, d);
    int64_t ny = numel_of(ynd, ysh);
    float *R = malloc((size_t)ny * sizeof *R), *yv = malloc((size_t)ny * sizeof *yv);
    test_fill_uniform(&rng, R, ny, -1, 1);
    hx_tensor *Rt = hx_graph_constant(g, "R__", HX_DTYPE_F32, ynd, ysh, R);
    hx_tensor *prod = hx_mul(g, y, Rt);
    hx_tensor *loss = ynd == 0 ? prod : hx_reduce_sum(g, prod, 0, NULL, false);
    CHECK(loss != NULL, "%s: loss: %s", what, hx_last_error());
    hx_status st = loss ? hx_graph_backward(g, loss) : HX_ERR_INTERNAL;
    CHECK(st == HX_OK, "%s: hx_graph_backward: %s: %s", what, hx_status_name(st), hx_last_error());
    hx_session *s = NULL;
    if (st != HX_OK) goto out;
    hx_fetch fetch[MAXL + 2];
    int nf = 0;
    float lossv = 0;
    fetch[nf++] = (hx_fetch){NULL, y, yv, (size_t)ny * sizeof *yv};
    fetch[nf++] = (hx_fetch){NULL, loss, &lossv, sizeof lossv};
    for (int i = 0; i < n; i++) {
        if (!x[i].grad) continue;
        gr[i] = hx_tensor_grad(t[i]);
        CHECK(gr[i] != NULL, "%s: no gradient for %s: %s", what, x[i].name, hx_last_error());
        if (!gr[i] || !shape_is(gr[i], x[i].ndim, x[i].shape, what)) {
            gr[i] = NULL;
            continue;
        }
        an[i] = calloc((size_t)lnumel(&x[i]), sizeof(float));
        fetch[nf++] = (hx_fetch){NULL, gr[i], an[i], lbytes(&x[i])};
    }
    s = make_session(g, 1, 1, what);
    if (!s) goto out;
    for (int i = 0; i < n; i++) {
        if (!x[i].grad) continue;
        p[i] = malloc(lbytes(&x[i]));
        memcpy(p[i], x[i].data, lbytes(&x[i]));
        st = hx_session_write(s, t[i], p[i], lbytes(&x[i]));
        CHECK(st == HX_OK, "%s: hx_session_write %s: %s", what, x[i].name, hx_last_error());
    }
    st = hx_session_run(s, NULL, 0, fetch, nf, c->run_flags);
    CHECK(st == HX_OK, "%s: run: %s: %s", what, hx_status_name(st), hx_last_error());
    if (st != HX_OK) goto out;
    double l0 = dot_f32(yv, R, ny), mag = 0;
    for (int64_t k = 0; k < ny; k++) mag += fabs((double)yv[k] * R[k]);
    CHECK(fabs(lossv - l0) <= 1e-5 * mag + 1e-6, "%s: loss %.9g, host sum(y*R) %.9g", what,
          lossv, l0);
    double fac = c->eps > 0 ? c->eps : 1e-2;
    for (int i = 0; i < n; i++) {
        if (!gr[i]) continue;
        int64_t m = lnumel(&x[i]);
        int nchk = m <= 48 ? (int)m : 20, bad = 0;
        char first[256] = "";
        for (int q = 0; q < nchk; q++) {
            int64_t k = m <= 48 ? q : (int64_t)(test_rng_u64(&rng) % (uint64_t)m);
            float orig = p[i][k];
            double h = fac * fmax(1.0, fabs(orig));
            double lv[2];
            float pv[2] = {(float)(orig + h), (float)(orig - h)};
            bool ok = true;
            for (int sgn = 0; sgn < 2; sgn++) {
                p[i][k] = pv[sgn];
                ok = ok && hx_session_write(s, t[i], p[i], lbytes(&x[i])) == HX_OK &&
                     hx_session_run(s, NULL, 0, fetch, 1, c->run_flags) == HX_OK;
                lv[sgn] = dot_f32(yv, R, ny);
            }
            p[i][k] = orig;
            ok = ok && hx_session_write(s, t[i], p[i], lbytes(&x[i])) == HX_OK;
            CHECK(ok, "%s: perturbed run failed: %s", what, hx_last_error());
            if (!ok) goto out;
            double fd = (lv[0] - lv[1]) / ((double)pv[0] - pv[1]), a = an[i][k];
            if (!(fabs(fd - a) <= 2e-2 * fmax(fabs(fd), fabs(a)) + 2e-3)) {
                if (!bad++)
                    snprintf(first, sizeof first, "element %lld: analytic %.7g, finite diff %.7g",
                             (long long)k, a, fd);
            }
        }
        CHECK(bad == 0, "%s: d loss / d %s: %d of %d elements off; first: %s", what, x[i].name,
              bad, nchk, first);
    }
out:
    hx_session_free(s);
    hx_graph_free(g);
    for (int i = 0; i < n; i++) {
        free(p[i]);
        free(an[i]);
    }
    free(R);
    free(yv);
}

/* Runs (a), then (b) if any leaf has grad, then frees the leaves. */
static void check_op(const op_case *c, leaf *x, int n)
{
    check_forward(c, x, n);
    for (int i = 0; i < n; i++)
        if (x[i].grad) {
            check_grad(c, x, n);
            break;
        }
    leaves_free(x, n);
}

#define CASE(what, b, r, ctx, rtol, atol) (&(op_case){(what), (b), (r), (ctx), (rtol), (atol), 0, HX_DTYPE_F32, 0})
/* Exact data movement of an integer tensor. */
#define ICASE(what, b, r, ctx, dt) (&(op_case){(what), (b), (r), (ctx), 0, 0, 0, (dt), 0})
#define LEAVES(...) ((leaf[]){__VA_ARGS__}), (int)(sizeof((leaf[]){__VA_ARGS__}) / sizeof(leaf))

static void same_shape(const leaf *a, int *nd, int64_t *sh)
{
    *nd = a->ndim;
    for (int i = 0; i < a->ndim; i++) sh[i] = a->shape[i];
}

/* ---- matmul ------------------------------------------------------------------- */

typedef struct mm_ctx { bool ta, tb; } mm_ctx;

static hx_tensor *b_matmul(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    const mm_ctx *c = ctx;
    return hx_matmul(g, x[0], x[1], c->ta, c->tb);
}

static void r_matmul(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const mm_ctx *c = ctx;
    const leaf *a = &x[0], *b = &x[1];
    int an = a->ndim, bn = b->ndim;
    int64_t M = c->ta ? a->shape[an - 1] : a->shape[an - 2];
    int64_t K = c->ta ? a->shape[an - 2] : a->shape[an - 1];
    int64_t N = c->tb ? b->shape[bn - 2] : b->shape[bn - 1];
    bool shared = bn == 2;
    int64_t batch = numel_of(an - 2, a->shape);
    *nd = an;
    for (int i = 0; i < an - 2; i++) sh[i] = a->shape[i];
    sh[an - 2] = M;
    sh[an - 1] = N;
    if (!out) return;
    for (int64_t bt = 0; bt < batch; bt++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = fv(a, bt * M * K + (c->ta ? k * M + i : i * K + k));
                    double bv = fv(b, (shared ? 0 : bt) * K * N + (c->tb ? j * K + k : k * N + j));
                    acc += av * bv;
                }
                out[(bt * M + i) * N + j] = acc;
            }
}

static void test_matmul(void)
{
    char w[128];
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            mm_ctx c = {ta, tb};
            const int64_t M = 5, K = 7, N = 4;
            snprintf(w, sizeof w, "matmul 2d [5x7]x[7x4] ta=%d tb=%d", ta, tb);
            check_op(CASE(w, b_matmul, r_matmul, &c, 1e-4, 1e-5),
                     LEAVES(lf("a", 2, ta ? S(K, M) : S(M, K), -1, 1, true),
                            lf("b", 2, tb ? S(N, K) : S(K, N), -1, 1, true)));
            snprintf(w, sizeof w, "matmul 2d [17x33]x[33x9] ta=%d tb=%d", ta, tb);
            check_op(CASE(w, b_matmul, r_matmul, &c, 1e-4, 1e-5),
                     LEAVES(lf("a", 2, ta ? S(33, 17) : S(17, 33), -1, 1, false),
                            lf("b", 2, tb ? S(9, 33) : S(33, 9), -1, 1, false)));
            snprintf(w, sizeof w, "matmul batched [3,4x6]x[3,6x5] ta=%d tb=%d", ta, tb);
            check_op(CASE(w, b_matmul, r_matmul, &c, 1e-4, 1e-5),
                     LEAVES(lf("a", 3, ta ? S(3, 6, 4) : S(3, 4, 6), -1, 1, true),
                            lf("b", 3, tb ? S(3, 5, 6) : S(3, 6, 5), -1, 1, true)));
            snprintf(w, sizeof w, "matmul batched [2,2,3x4]x[2,2,4x2] ta=%d tb=%d", ta, tb);
            check_op(CASE(w, b_matmul, r_matmul, &c, 1e-4, 1e-5),
                     LEAVES(lf("a", 4, ta ? S(2, 2, 4, 3) : S(2, 2, 3, 4), -1, 1, true),
                            lf("b", 4, tb ? S(2, 2, 2, 4) : S(2, 2, 4, 2), -1, 1, true)));
            if (!ta) {
                snprintf(w, sizeof w, "matmul shared b [3,4x6]x[6x5] tb=%d", tb);
                check_op(CASE(w, b_matmul, r_matmul, &c, 1e-4, 1e-5),
                         LEAVES(lf("a", 3, S(3, 4, 6), -1, 1, true),
                                lf("b", 2, tb ? S(5, 6) : S(6, 5), -1, 1, true)));
                snprintf(w, sizeof w, "matmul shared b [2,3,2x5]x[5x3] tb=%d", tb);
                check_op(CASE(w, b_matmul, r_matmul, &c, 1e-4, 1e-5),
                         LEAVES(lf("a", 4, S(2, 3, 2, 5), -1, 1, true),
                                lf("b", 2, tb ? S(3, 5) : S(5, 3), -1, 1, true)));
            }
        }
    mm_ctx c = {false, false};
    check_op(CASE("matmul [1x9]x[9x1]", b_matmul, r_matmul, &c, 1e-4, 1e-5),
             LEAVES(lf("a", 2, S(1, 9), -1, 1, true), lf("b", 2, S(9, 1), -1, 1, true)));
}

/* ---- elementwise binary with broadcasting ------------------------------------------ */

enum { B_ADD, B_SUB, B_MUL, B_DIV };
static const int BK[] = {B_ADD, B_SUB, B_MUL, B_DIV};

static hx_tensor *b_binary(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    switch (*(const int *)ctx) {
    case B_ADD: return hx_add(g, x[0], x[1]);
    case B_SUB: return hx_sub(g, x[0], x[1]);
    case B_MUL: return hx_mul(g, x[0], x[1]);
    default: return hx_div(g, x[0], x[1]);
    }
}

/* Flat index into `l` of output element o (numpy broadcasting). */
static int64_t bsrc(int64_t o, int nd, const int64_t *sh, const leaf *l)
{
    int64_t idx = 0, stride = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int64_t ci = o % sh[i];
        o /= sh[i];
        int li = i - (nd - l->ndim);
        if (li >= 0) {
            if (l->shape[li] != 1) idx += ci * stride;
            stride *= l->shape[li];
        }
    }
    return idx;
}

static void r_binary(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const leaf *a = &x[0], *b = &x[1];
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        sh[i] = da == 1 ? db : da;
    }
    *nd = n;
    if (!out) return;
    int k = *(const int *)ctx;
    for (int64_t o = 0; o < numel_of(n, sh); o++) {
        double u = fv(a, bsrc(o, n, sh, a)), v = fv(b, bsrc(o, n, sh, b));
        out[o] = k == B_ADD ? u + v : k == B_SUB ? u - v : k == B_MUL ? u * v : u / v;
    }
}

static void test_binary(void)
{
    static const char *names[] = {"add", "sub", "mul", "div"};
    static const struct {
        const char *what;
        int na;
        int64_t sa[4];
        int nb;
        int64_t sb[4];
    } cs[] = {
        {"same [3,4]", 2, {3, 4}, 2, {3, 4}},
        {"same [2,3,5]", 3, {2, 3, 5}, 3, {2, 3, 5}},
        {"scalar rhs [3,4]+[]", 2, {3, 4}, 0, {0}},
        {"scalar lhs []+[3,4]", 0, {0}, 2, {3, 4}},
        {"one [3,4]+[1]", 2, {3, 4}, 1, {1}},
        {"row [3,4]+[4]", 2, {3, 4}, 1, {4}},
        {"row [3,4]+[1,4]", 2, {3, 4}, 2, {1, 4}},
        {"col [5,1]+[5,3]", 2, {5, 1}, 2, {5, 3}},
        {"col [5,3]+[5,1]", 2, {5, 3}, 2, {5, 1}},
        {"middle [2,1,4]+[2,3,4]", 3, {2, 1, 4}, 3, {2, 3, 4}},
        {"middle [2,3,4]+[2,1,4]", 3, {2, 3, 4}, 3, {2, 1, 4}},
        {"rank [2,3,4]+[3,4]", 3, {2, 3, 4}, 2, {3, 4}},
        {"rank [3,1]+[2,2,1,4]", 2, {3, 1}, 4, {2, 2, 1, 4}},
        {"outer [3,1]+[1,4]", 2, {3, 1}, 2, {1, 4}},
    };
    char w[128];
    for (int k = 0; k < 4; k++)
        for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
            snprintf(w, sizeof w, "%s %s", names[k], cs[c].what);
            leaf b = k == B_DIV ? lfaway("b", cs[c].nb, cs[c].sb, 0.5, 2, true)
                                : lf("b", cs[c].nb, cs[c].sb, -2, 2, true);
            check_op(CASE(w, b_binary, r_binary, &BK[k], 1e-6, 1e-6),
                     LEAVES(lf("a", cs[c].na, cs[c].sa, -2, 2, true), b));
        }
}

/* ---- unary, scale, bias_add --------------------------------------------------------- */

enum { U_RELU, U_GELU, U_GELU_ERF, U_SIGMOID, U_TANH, U_EXP, U_LOG, U_SQRT, U_SCALE,
       U_DROPOUT_EVAL, U_N };
static const int UK[] = {U_RELU, U_GELU, U_GELU_ERF, U_SIGMOID, U_TANH, U_EXP, U_LOG, U_SQRT,
                         U_SCALE, U_DROPOUT_EVAL};
static const char *const unames[] = {"relu", "gelu", "gelu_erf", "sigmoid", "tanh", "exp", "log",
                                     "sqrt", "scale", "dropout (eval)"};

static hx_tensor *b_unary(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    switch (*(const int *)ctx) {
    case U_RELU: return hx_relu(g, x[0]);
    case U_GELU: return hx_gelu(g, x[0]);
    case U_GELU_ERF: return hx_gelu_erf(g, x[0]);
    case U_SIGMOID: return hx_sigmoid(g, x[0]);
    case U_TANH: return hx_tanh(g, x[0]);
    case U_EXP: return hx_exp(g, x[0]);
    case U_LOG: return hx_log(g, x[0]);
    case U_SQRT: return hx_sqrt(g, x[0]);
    case U_SCALE: return hx_scale(g, x[0], -1.75f);
    default: return hx_dropout(g, x[0], 0.3f, 7);
    }
}

static double uref(int k, double v)
{
    switch (k) {
    case U_RELU: return v > 0 ? v : 0;
    case U_GELU: return 0.5 * v * (1 + tanh(sqrt(2 / PI_D) * (v + 0.044715 * v * v * v)));
    case U_GELU_ERF: return 0.5 * v * erfc(-v / sqrt(2.0));
    case U_SIGMOID: return 1 / (1 + exp(-v));
    case U_TANH: return tanh(v);
    case U_EXP: return exp(v);
    case U_LOG: return log(v);
    case U_SQRT: return sqrt(v);
    case U_SCALE: return -1.75 * v;
    default: return v;
    }
}

static void r_unary(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    same_shape(&x[0], nd, sh);
    if (!out) return;
    for (int64_t i = 0; i < lnumel(&x[0]); i++) out[i] = uref(*(const int *)ctx, fv(&x[0], i));
}

static hx_tensor *b_bias(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    (void)ctx;
    return hx_bias_add(g, x[0], x[1]);
}

static void r_bias(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    (void)ctx;
    same_shape(&x[0], nd, sh);
    if (!out) return;
    int64_t N = x[1].shape[0];
    for (int64_t i = 0; i < lnumel(&x[0]); i++) out[i] = fv(&x[0], i) + fv(&x[1], i % N);
}

static void test_unary(void)
{
    char w[128];
    for (int k = 0; k < U_N; k++)
        for (int sh = 0; sh < 2; sh++) {
            int nd = sh ? 3 : 2;
            const int64_t *shape = sh ? S(2, 3, 4) : S(3, 5);
            snprintf(w, sizeof w, "%s %s", unames[k], sh ? "[2,3,4]" : "[3,5]");
            leaf x;
            switch (k) {
            case U_RELU: x = lfaway("x", nd, shape, 0.1, 2, true); break;
            case U_GELU:
            case U_GELU_ERF: x = lf("x", nd, shape, -3, 3, true); break;
            case U_SIGMOID: x = lf("x", nd, shape, -4, 4, true); break;
            case U_LOG:
            case U_SQRT: x = lf("x", nd, shape, 0.2, 4, true); break;
            default: x = lf("x", nd, shape, -2, 2, true); break;
            }
            check_op(CASE(w, b_unary, r_unary, &UK[k], 1e-5, 1e-6), LEAVES(x));
        }
    /* gelu and relu on a larger tensor (vectorised paths, tails) */
    check_op(CASE("gelu [1037]", b_unary, r_unary, &UK[U_GELU], 1e-5, 1e-6),
             LEAVES(lf("x", 1, S(1037), -6, 6, false)));
    check_op(CASE("gelu_erf [1037]", b_unary, r_unary, &UK[U_GELU_ERF], 1e-5, 1e-6),
             LEAVES(lf("x", 1, S(1037), -8, 8, false)));
    check_op(CASE("exp [1037]", b_unary, r_unary, &UK[U_EXP], 1e-5, 1e-6),
             LEAVES(lf("x", 1, S(1037), -20, 20, false)));
    check_op(CASE("sigmoid [1037]", b_unary, r_unary, &UK[U_SIGMOID], 1e-5, 1e-6),
             LEAVES(lf("x", 1, S(1037), -30, 30, false)));
    check_op(CASE("bias_add [4,5]+[5]", b_bias, r_bias, NULL, 1e-6, 1e-6),
             LEAVES(lf("x", 2, S(4, 5), -2, 2, true), lf("b", 1, S(5), -2, 2, true)));
    check_op(CASE("bias_add [2,3,6]+[6]", b_bias, r_bias, NULL, 1e-6, 1e-6),
             LEAVES(lf("x", 3, S(2, 3, 6), -2, 2, true), lf("b", 1, S(6), -2, 2, true)));
}

/* ---- softmax, log_softmax, layernorm --------------------------------------------------- */

static const int K0 = 0, K1 = 1;

static hx_tensor *b_softmax(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    return *(const int *)ctx ? hx_log_softmax(g, x[0]) : hx_softmax(g, x[0]);
}

/* Softmax over the last axis of x; masked elements (col > row of the last
 * two dims) excluded when `causal`. */
static void softmax_ref(const leaf *a, bool lg, bool causal, double *out)
{
    int64_t N = a->shape[a->ndim - 1], rows = lnumel(a) / N;
    for (int64_t r = 0; r < rows; r++) {
        int64_t lim = causal ? r % N + 1 : N;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < lim; j++) m = fmax(m, fv(a, r * N + j));
        for (int64_t j = 0; j < lim; j++) s += exp(fv(a, r * N + j) - m);
        for (int64_t j = 0; j < N; j++) {
            double v = fv(a, r * N + j) - m;
            out[r * N + j] = j >= lim ? (lg ? -INFINITY : 0) : lg ? v - log(s) : exp(v) / s;
        }
    }
}

static void r_softmax(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    same_shape(&x[0], nd, sh);
    if (out) softmax_ref(&x[0], *(const int *)ctx, false, out);
}

typedef struct ln_ctx { float eps; } ln_ctx;

static hx_tensor *b_layernorm(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    return hx_layernorm(g, x[0], x[1], x[2], ((const ln_ctx *)ctx)->eps);
}

static void r_layernorm(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    same_shape(&x[0], nd, sh);
    if (!out) return;
    double eps = ((const ln_ctx *)ctx)->eps;
    int64_t N = x[0].shape[x[0].ndim - 1], rows = lnumel(&x[0]) / N;
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < N; j++) m += fv(&x[0], r * N + j);
        m /= N;
        for (int64_t j = 0; j < N; j++) v += (fv(&x[0], r * N + j) - m) * (fv(&x[0], r * N + j) - m);
        v /= N;
        for (int64_t j = 0; j < N; j++)
            out[r * N + j] = (fv(&x[0], r * N + j) - m) / sqrt(v + eps) * fv(&x[1], j) + fv(&x[2], j);
    }
}

static void test_rows(void)
{
    char w[128];
    for (int lg = 0; lg < 2; lg++) {
        const char *nm = lg ? "log_softmax" : "softmax";
        snprintf(w, sizeof w, "%s [3,5]", nm);
        check_op(CASE(w, b_softmax, r_softmax, lg ? &K1 : &K0, 1e-5, 1e-6),
                 LEAVES(lf("x", 2, S(3, 5), -3, 3, true)));
        snprintf(w, sizeof w, "%s [2,3,7]", nm);
        check_op(CASE(w, b_softmax, r_softmax, lg ? &K1 : &K0, 1e-5, 1e-6),
                 LEAVES(lf("x", 3, S(2, 3, 7), -3, 3, true)));
        /* logits near 100: exp would overflow without the max shift; the
         * finite-difference step is 1e-2 absolute, not relative to |x| */
        snprintf(w, sizeof w, "%s [4,6] large logits (needs the max shift)", nm);
        op_case big = {w, b_softmax, r_softmax, lg ? &K1 : &K0, 1e-5, 1e-6, 1e-4, HX_DTYPE_F32, 0};
        check_op(&big, LEAVES(lf("x", 2, S(4, 6), 90, 100, true)));
        snprintf(w, sizeof w, "%s [3,1000]", nm);
        check_op(CASE(w, b_softmax, r_softmax, lg ? &K1 : &K0, 1e-5, 1e-7),
                 LEAVES(lf("x", 2, S(3, 1000), -5, 5, false)));
    }
    check_op(CASE("softmax [4,1]", b_softmax, r_softmax, &K0, 1e-6, 1e-7),
             LEAVES(lf("x", 2, S(4, 1), -3, 3, true)));
    check_op(CASE("log_softmax [4,1]", b_softmax, r_softmax, &K1, 1e-6, 1e-7),
             LEAVES(lf("x", 2, S(4, 1), -3, 3, true)));
    ln_ctx e = {1e-5f};
    check_op(CASE("layernorm [4,8]", b_layernorm, r_layernorm, &e, 1e-4, 1e-5),
             LEAVES(lf("x", 2, S(4, 8), -2, 2, true), lf("gamma", 1, S(8), 0.5, 1.5, true),
                    lf("beta", 1, S(8), -0.5, 0.5, true)));
    check_op(CASE("layernorm [2,3,16]", b_layernorm, r_layernorm, &e, 1e-4, 1e-5),
             LEAVES(lf("x", 3, S(2, 3, 16), -2, 2, true), lf("gamma", 1, S(16), 0.5, 1.5, true),
                    lf("beta", 1, S(16), -0.5, 0.5, true)));
    ln_ctx e2 = {0.1f};
    check_op(CASE("layernorm [3,5] eps=0.1 offset rows", b_layernorm, r_layernorm, &e2, 1e-4, 1e-5),
             LEAVES(lf("x", 2, S(3, 5), 3, 4, true), lf("gamma", 1, S(5), -1.5, 1.5, true),
                    lf("beta", 1, S(5), -0.5, 0.5, true)));
}

/* ---- reshape, permute, concat, slice ------------------------------------------------------ */

typedef struct rs_ctx { int nd; int64_t shape[HX_MAX_DIMS]; } rs_ctx;

static hx_tensor *b_reshape(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    const rs_ctx *c = ctx;
    return hx_reshape(g, x[0], c->nd, c->shape);
}

static void r_reshape(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const rs_ctx *c = ctx;
    int64_t known = 1;
    int neg = -1;
    for (int i = 0; i < c->nd; i++) {
        sh[i] = c->shape[i];
        if (sh[i] < 0) neg = i;
        else known *= sh[i];
    }
    if (neg >= 0) sh[neg] = lnumel(&x[0]) / known;
    *nd = c->nd;
    if (!out) return;
    for (int64_t i = 0; i < lnumel(&x[0]); i++) out[i] = fv(&x[0], i);
}

typedef struct pm_ctx { int perm[HX_MAX_DIMS]; } pm_ctx;

static hx_tensor *b_permute(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    return hx_permute(g, x[0], ((const pm_ctx *)ctx)->perm);
}

static void r_permute(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const pm_ctx *c = ctx;
    const leaf *a = &x[0];
    int n = a->ndim;
    for (int i = 0; i < n; i++) sh[i] = a->shape[c->perm[i]];
    *nd = n;
    if (!out) return;
    for (int64_t o = 0; o < lnumel(a); o++) {
        int64_t oc[HX_MAX_DIMS], ic[HX_MAX_DIMS], r = o;
        for (int i = n - 1; i >= 0; i--) {
            oc[i] = r % sh[i];
            r /= sh[i];
        }
        for (int i = 0; i < n; i++) ic[c->perm[i]] = oc[i];
        int64_t src = 0;
        for (int i = 0; i < n; i++) src = src * a->shape[i] + ic[i];
        out[o] = fv(a, src);
    }
}

typedef struct cc_ctx { int n, axis; } cc_ctx;

static hx_tensor *b_concat(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    const cc_ctx *c = ctx;
    return hx_concat(g, c->n, x, c->axis);
}

static void r_concat(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const cc_ctx *c = ctx;
    same_shape(&x[0], nd, sh);
    for (int i = 1; i < c->n; i++) sh[c->axis] += x[i].shape[c->axis];
    if (!out) return;
    int64_t outer = numel_of(c->axis, sh), inner = numel_of(*nd - c->axis - 1, sh + c->axis + 1);
    int64_t o = 0;
    for (int64_t r = 0; r < outer; r++)
        for (int i = 0; i < c->n; i++) {
            int64_t blk = x[i].shape[c->axis] * inner;
            for (int64_t k = 0; k < blk; k++) out[o++] = fv(&x[i], r * blk + k);
        }
}

typedef struct sl_ctx { int axis; int64_t start, end; } sl_ctx;

static hx_tensor *b_slice(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    const sl_ctx *c = ctx;
    return hx_slice(g, x[0], c->axis, c->start, c->end);
}

static void r_slice(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const sl_ctx *c = ctx;
    const leaf *a = &x[0];
    int ax = c->axis < 0 ? c->axis + a->ndim : c->axis;
    same_shape(a, nd, sh);
    sh[ax] = c->end - c->start;
    if (!out) return;
    int64_t outer = numel_of(ax, a->shape), inner = numel_of(a->ndim - ax - 1, a->shape + ax + 1);
    int64_t o = 0;
    for (int64_t r = 0; r < outer; r++)
        for (int64_t k = c->start; k < c->end; k++)
            for (int64_t j = 0; j < inner; j++) out[o++] = fv(a, (r * a->shape[ax] + k) * inner + j);
}

static void test_data_movement(void)
{
    rs_ctx r1 = {2, {4, -1}}, r2 = {3, {-1, 2, 3}}, r3 = {3, {2, 3, 4}};
    check_op(CASE("reshape [2,3,4] -> [4,-1]", b_reshape, r_reshape, &r1, 0, 0),
             LEAVES(lf("x", 3, S(2, 3, 4), -2, 2, true)));
    check_op(CASE("reshape [6,4] -> [-1,2,3]", b_reshape, r_reshape, &r2, 0, 0),
             LEAVES(lf("x", 2, S(6, 4), -2, 2, true)));
    check_op(CASE("reshape [24] -> [2,3,4]", b_reshape, r_reshape, &r3, 0, 0),
             LEAVES(lf("x", 1, S(24), -2, 2, true)));

    pm_ctx p1 = {{2, 0, 1}}, p2 = {{3, 1, 0, 2}}, p3 = {{1, 0}};
    check_op(CASE("permute [2,3,4] (2,0,1)", b_permute, r_permute, &p1, 0, 0),
             LEAVES(lf("x", 3, S(2, 3, 4), -2, 2, true)));
    check_op(CASE("permute [2,3,4,5] (3,1,0,2)", b_permute, r_permute, &p2, 0, 0),
             LEAVES(lf("x", 4, S(2, 3, 4, 5), -2, 2, true)));
    check_op(CASE("permute [3,5] (1,0)", b_permute, r_permute, &p3, 0, 0),
             LEAVES(lf("x", 2, S(3, 5), -2, 2, true)));

    cc_ctx c0 = {3, 0}, c1 = {3, 1}, c2 = {3, 2};
    check_op(CASE("concat axis 0 [2,3]+[1,3]+[4,3]", b_concat, r_concat, &c0, 0, 0),
             LEAVES(lf("x0", 2, S(2, 3), -2, 2, true), lf("x1", 2, S(1, 3), -2, 2, true),
                    lf("x2", 2, S(4, 3), -2, 2, true)));
    check_op(CASE("concat axis 1 [2,1,4]+[2,3,4]+[2,2,4]", b_concat, r_concat, &c1, 0, 0),
             LEAVES(lf("x0", 3, S(2, 1, 4), -2, 2, true), lf("x1", 3, S(2, 3, 4), -2, 2, true),
                    lf("x2", 3, S(2, 2, 4), -2, 2, true)));
    check_op(CASE("concat axis 2 [2,3,1]+[2,3,2]+[2,3,3]", b_concat, r_concat, &c2, 0, 0),
             LEAVES(lf("x0", 3, S(2, 3, 1), -2, 2, true), lf("x1", 3, S(2, 3, 2), -2, 2, true),
                    lf("x2", 3, S(2, 3, 3), -2, 2, true)));

    /* "Any dtype": the same ops on integer tensors, exactly */
    check_op(ICASE("reshape i64 [2,3,4] -> [4,-1]", b_reshape, r_reshape, &r1, HX_DTYPE_I64),
             LEAVES(lrandint("x", HX_DTYPE_I64, 3, S(2, 3, 4), -5000000000LL, 5000000000LL)));
    check_op(ICASE("permute i32 [2,3,4,5] (3,1,0,2)", b_permute, r_permute, &p2, HX_DTYPE_I32),
             LEAVES(lrandint("x", HX_DTYPE_I32, 4, S(2, 3, 4, 5), -1000000, 1000000)));
    check_op(ICASE("concat i32 axis 1", b_concat, r_concat, &c1, HX_DTYPE_I32),
             LEAVES(lrandint("x0", HX_DTYPE_I32, 3, S(2, 1, 4), -9, 9),
                    lrandint("x1", HX_DTYPE_I32, 3, S(2, 3, 4), -9, 9),
                    lrandint("x2", HX_DTYPE_I32, 3, S(2, 2, 4), -9, 9)));

    sl_ctx s1 = {-1, 1, 4}, s2 = {-2, 2, 5}, s3 = {0, 0, 2};
    check_op(CASE("slice [4,6] axis -1 [1,4)", b_slice, r_slice, &s1, 0, 0),
             LEAVES(lf("x", 2, S(4, 6), -2, 2, true)));
    check_op(CASE("slice [3,5,4] axis -2 [2,5)", b_slice, r_slice, &s2, 0, 0),
             LEAVES(lf("x", 3, S(3, 5, 4), -2, 2, true)));
    check_op(CASE("slice [5,3] axis 0 [0,2)", b_slice, r_slice, &s3, 0, 0),
             LEAVES(lf("x", 2, S(5, 3), -2, 2, true)));
    check_op(ICASE("slice i64 [3,5,4] axis -2 [2,5)", b_slice, r_slice, &s2, HX_DTYPE_I64),
             LEAVES(lrandint("x", HX_DTYPE_I64, 3, S(3, 5, 4), -99, 99)));
}

/* ---- reductions ---------------------------------------------------------------------------- */

typedef struct rd_ctx { bool mean; int naxes; int axes[HX_MAX_DIMS]; bool keep; } rd_ctx;

static hx_tensor *b_reduce(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    const rd_ctx *c = ctx;
    return c->mean ? hx_reduce_mean(g, x[0], c->naxes, c->axes, c->keep)
                   : hx_reduce_sum(g, x[0], c->naxes, c->axes, c->keep);
}

static void r_reduce(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const rd_ctx *c = ctx;
    const leaf *a = &x[0];
    bool red[HX_MAX_DIMS] = {0};
    for (int i = 0; i < a->ndim; i++) red[i] = c->naxes == 0;
    for (int i = 0; i < c->naxes; i++) red[c->axes[i] < 0 ? c->axes[i] + a->ndim : c->axes[i]] = true;
    int n = 0;
    int64_t cnt = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (red[i]) {
            cnt *= a->shape[i];
            if (c->keep) sh[n++] = 1;
        } else {
            sh[n++] = a->shape[i];
        }
    }
    *nd = n;
    if (!out) return;
    int64_t on = numel_of(n, sh);
    for (int64_t o = 0; o < on; o++) out[o] = 0;
    for (int64_t e = 0; e < lnumel(a); e++) {
        int64_t ci[HX_MAX_DIMS], r = e, o = 0;
        for (int i = a->ndim - 1; i >= 0; i--) {
            ci[i] = r % a->shape[i];
            r /= a->shape[i];
        }
        for (int i = 0; i < a->ndim; i++)
            if (!red[i]) o = o * a->shape[i] + ci[i];
        out[o] += fv(a, e);
    }
    if (c->mean)
        for (int64_t o = 0; o < on; o++) out[o] /= (double)cnt;
}

static void test_reduce(void)
{
    static const struct { int naxes; int axes[3]; const char *what; } ax[] = {
        {1, {1}, "axis 1"}, {2, {0, 2}, "axes 0,2"}, {0, {0}, "all axes"}};
    char w[128];
    for (int mean = 0; mean < 2; mean++)
        for (int a = 0; a < 3; a++)
            for (int keep = 0; keep < 2; keep++) {
                rd_ctx c = {mean, ax[a].naxes, {ax[a].axes[0], ax[a].axes[1]}, keep};
                snprintf(w, sizeof w, "%s [3,4,5] %s keepdims=%d", mean ? "reduce_mean" : "reduce_sum",
                         ax[a].what, keep);
                check_op(CASE(w, b_reduce, r_reduce, &c, 1e-5, 1e-5),
                         LEAVES(lf("x", 3, S(3, 4, 5), -2, 2, true)));
            }
    rd_ctx c1 = {false, 1, {0}, false}, c2 = {true, 1, {1}, true};
    check_op(CASE("reduce_sum [6,7] axis 0", b_reduce, r_reduce, &c1, 1e-5, 1e-5),
             LEAVES(lf("x", 2, S(6, 7), -2, 2, true)));
    check_op(CASE("reduce_mean [6,7] axis 1 keepdims", b_reduce, r_reduce, &c2, 1e-5, 1e-5),
             LEAVES(lf("x", 2, S(6, 7), -2, 2, true)));
    rd_ctx c3 = {false, 1, {1}, false};
    check_op(CASE("reduce_sum [64,300] axis 1", b_reduce, r_reduce, &c3, 1e-5, 1e-4),
             LEAVES(lf("x", 2, S(64, 300), 0.5, 2, false)));
}

/* ---- cast ----------------------------------------------------------------------------------- */

/* v rounded to nearest even with `mant` fraction bits, exponent >= emin
 * (subnormals below), +-inf beyond maxv. */
static double round_fmt(double v, int mant, int emin, double maxv)
{
    if (v == 0 || !isfinite(v)) return v;
    int e;
    frexp(v, &e);
    int E = e - 1 < emin ? emin : e - 1;
    double q = ldexp(1.0, E - mant);
    double r = nearbyint(v / q) * q;
    return fabs(r) > maxv ? copysign(INFINITY, v) : r;
}

static hx_tensor *b_cast(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    hx_dtype dt = *(const hx_dtype *)ctx;
    hx_tensor *h = hx_cast(g, x[0], dt);
    if (h) {
        CHECK(hx_tensor_dtype(h) == dt, "cast: dtype %s", hx_dtype_name(hx_tensor_dtype(h)));
        CHECK(hx_tensor_nbytes(h) == (size_t)hx_tensor_numel(h) * 2, "cast: nbytes %zu",
              hx_tensor_nbytes(h));
    }
    return hx_cast(g, h, HX_DTYPE_F32);
}

static void r_cast(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    same_shape(&x[0], nd, sh);
    if (!out) return;
    bool f16 = *(const hx_dtype *)ctx == HX_DTYPE_F16;
    for (int64_t i = 0; i < lnumel(&x[0]); i++)
        out[i] = f16 ? round_fmt(fv(&x[0], i), 10, -14, 65504.0)
                     : round_fmt(fv(&x[0], i), 7, -126, ldexp(255.0 / 128.0, 127));
}

/* f32 -> f16 -> bf16 -> f32 */
static hx_tensor *b_cast_chain(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    (void)ctx;
    return hx_cast(g, hx_cast(g, hx_cast(g, x[0], HX_DTYPE_F16), HX_DTYPE_BF16), HX_DTYPE_F32);
}

static void r_cast_chain(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    (void)ctx;
    same_shape(&x[0], nd, sh);
    if (!out) return;
    for (int64_t i = 0; i < lnumel(&x[0]); i++)
        out[i] = round_fmt(round_fmt(fv(&x[0], i), 10, -14, 65504.0), 7, -126, ldexp(255.0 / 128.0, 127));
}

static void test_cast(void)
{
    check_op(CASE("cast f32->f16->bf16->f32", b_cast_chain, r_cast_chain, NULL, 0, 0),
             LEAVES(lf("x", 2, S(7, 9), -3000, 3000, false)));
    static const hx_dtype F16 = HX_DTYPE_F16, BF16 = HX_DTYPE_BF16;
    /* f16: ties, subnormals, overflow, plus a log-uniform spread */
    const float f16_special[] = {
        1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -(1.0f + 0x1p-11f), 0x1p-25f, 3 * 0x1p-25f,
        0x1p-24f, 5 * 0x1p-26f, 6.1e-5f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 1e6f, 0.1f,
        -0.3333333f, 2049.0f, 2051.0f, 0.0f};
    const float bf16_special[] = {
        1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 0x1p-130f, 1e-40f, 0x1p-133f,
        3 * 0x1p-134f, 3e38f, 0x1.fep127f, 0x1.ffp127f, 3.4028234e38f, -3.4028234e38f, 0.1f,
        -0.3333333f, 257.0f, 259.0f, 0.0f};
    for (int which = 0; which < 2; which++) {
        const float *sp = which ? bf16_special : f16_special;
        int nsp = which ? (int)(sizeof bf16_special / sizeof(float)) : (int)(sizeof f16_special / sizeof(float));
        int64_t n = 300;
        leaf x = lshape("x", HX_DTYPE_F32, 1, &n);
        float *d = x.data;
        for (int64_t i = 0; i < n; i++) {
            if (i < nsp) {
                d[i] = sp[i];
            } else {
                double e = which ? test_rng_uniform(&rng, -135, 128) : test_rng_uniform(&rng, -27, 17);
                d[i] = (float)(ldexp(1.0, 0) * exp2(e) * ((test_rng_u64(&rng) & 1) ? 1 : -1));
            }
        }
        check_op(CASE(which ? "cast f32->bf16->f32" : "cast f32->f16->f32", b_cast, r_cast,
                      which ? &BF16 : &F16, 0, 0),
                 LEAVES(x));
        /* gradient of the round trip on ordinary values; cast is linear up to
         * rounding, so a large step keeps the rounding out of the difference */
        op_case c = {which ? "cast round trip bf16 [3,7]" : "cast round trip f16 [3,7]", b_cast,
                     r_cast, which ? &BF16 : &F16, 0, 0, 1.0, HX_DTYPE_F32, 0};
        check_op(&c, LEAVES(lf("x", 2, S(3, 7), -2, 2, true)));
    }
}

/* ---- gather, causal mask ---------------------------------------------------------------- */

static hx_tensor *b_gather(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    (void)ctx;
    return hx_gather(g, x[0], x[1]);
}

static void r_gather(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    (void)ctx;
    int64_t D = x[0].shape[1];
    same_shape(&x[1], nd, sh);
    sh[(*nd)++] = D;
    if (!out) return;
    for (int64_t i = 0; i < lnumel(&x[1]); i++)
        for (int64_t j = 0; j < D; j++) out[i * D + j] = fv(&x[0], iv(&x[1], i) * D + j);
}

static hx_tensor *b_causal(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    hx_tensor *m = hx_causal_mask(g, x[0]);
    return *(const int *)ctx ? hx_softmax(g, m) : m;
}

static void r_causal(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    same_shape(&x[0], nd, sh);
    if (!out) return;
    if (*(const int *)ctx) {
        softmax_ref(&x[0], false, true, out);
        return;
    }
    int64_t T = x[0].shape[x[0].ndim - 1];
    for (int64_t i = 0; i < lnumel(&x[0]); i++)
        out[i] = i % T > (i / T) % T ? -INFINITY : fv(&x[0], i);
}

/* gather from a half-precision table: cast(gather(cast(table, dt), ids), f32) */
static hx_tensor *b_gather_half(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    hx_dtype dt = *(const hx_dtype *)ctx;
    hx_tensor *r = hx_gather(g, hx_cast(g, x[0], dt), x[1]);
    CHECK(r && hx_tensor_dtype(r) == dt, "gather from a %s table gives %s", hx_dtype_name(dt),
          r ? hx_dtype_name(hx_tensor_dtype(r)) : hx_last_error());
    return hx_cast(g, r, HX_DTYPE_F32);
}

static void r_gather_half(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    r_gather(x, NULL, nd, sh, out);
    if (!out) return;
    bool f16 = *(const hx_dtype *)ctx == HX_DTYPE_F16;
    for (int64_t i = 0; i < numel_of(*nd, sh); i++)
        out[i] = f16 ? round_fmt(out[i], 10, -14, 65504.0) : round_fmt(out[i], 7, -126, ldexp(255.0 / 128.0, 127));
}

static void test_gather_mask(void)
{
    static const hx_dtype F16 = HX_DTYPE_F16, BF16 = HX_DTYPE_BF16;
    check_op(CASE("gather f16 table [9,6] ids i32 [4]", b_gather_half, r_gather_half, &F16, 0, 0),
             LEAVES(lf("table", 2, S(9, 6), -5, 5, false),
                    lint("ids", HX_DTYPE_I32, 1, S(4), S(8, 0, 8, 3))));
    check_op(CASE("gather bf16 table [9,6] ids i64 [2,2]", b_gather_half, r_gather_half, &BF16, 0, 0),
             LEAVES(lf("table", 2, S(9, 6), -5, 5, false),
                    lint("ids", HX_DTYPE_I64, 2, S(2, 2), S(1, 7, 7, 2))));
    check_op(CASE("gather table [7,5] ids i32 [6] (duplicates)", b_gather, r_gather, NULL, 0, 0),
             LEAVES(lf("table", 2, S(7, 5), -2, 2, true),
                    lint("ids", HX_DTYPE_I32, 1, S(6), S(1, 3, 1, 6, 0, 3))));
    check_op(CASE("gather table [7,4] ids i64 [2,3] (duplicates)", b_gather, r_gather, NULL, 0, 0),
             LEAVES(lf("table", 2, S(7, 4), -2, 2, true),
                    lint("ids", HX_DTYPE_I64, 2, S(2, 3), S(4, 4, 2, 0, 4, 6))));
    check_op(CASE("gather table [50,8] ids i32 [3,4] (forward)", b_gather, r_gather, NULL, 0, 0),
             LEAVES(lf("table", 2, S(50, 8), -2, 2, false),
                    lint("ids", HX_DTYPE_I32, 2, S(3, 4), S(49, 0, 17, 17, 3, 49, 22, 8, 0, 1, 2, 17))));

    check_op(CASE("causal_mask [2,4,4]", b_causal, r_causal, &K0, 0, 0),
             LEAVES(lf("x", 3, S(2, 4, 4), -2, 2, false)));
    check_op(CASE("causal_mask [5,5]", b_causal, r_causal, &K0, 0, 0),
             LEAVES(lf("x", 2, S(5, 5), -2, 2, false)));
    check_op(CASE("softmax(causal_mask) [2,4,4]", b_causal, r_causal, &K1, 1e-5, 1e-6),
             LEAVES(lf("x", 3, S(2, 4, 4), -2, 2, true)));
    check_op(CASE("softmax(causal_mask) [2,2,3,3]", b_causal, r_causal, &K1, 1e-5, 1e-6),
             LEAVES(lf("x", 4, S(2, 2, 3, 3), -2, 2, true)));
}

/* ---- losses -------------------------------------------------------------------------------- */

static hx_tensor *b_ce(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    (void)ctx;
    return hx_cross_entropy(g, x[0], x[1]);
}

static void r_ce(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    (void)ctx;
    (void)sh;
    *nd = 0;
    if (!out) return;
    int64_t N = x[0].shape[0], C = x[0].shape[1];
    double tot = 0;
    for (int64_t i = 0; i < N; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < C; j++) m = fmax(m, fv(&x[0], i * C + j));
        for (int64_t j = 0; j < C; j++) s += exp(fv(&x[0], i * C + j) - m);
        tot += m + log(s) - fv(&x[0], i * C + iv(&x[1], i));
    }
    out[0] = tot / N;
}

static hx_tensor *b_bce(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    return *(const int *)ctx ? hx_mse(g, x[0], x[1]) : hx_bce_with_logits(g, x[0], x[1]);
}

static void r_bce(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    (void)sh;
    *nd = 0;
    if (!out) return;
    int64_t n = lnumel(&x[0]);
    double tot = 0;
    for (int64_t i = 0; i < n; i++) {
        double z = fv(&x[0], i), t = fv(&x[1], i);
        tot += *(const int *)ctx ? (z - t) * (z - t) : fmax(z, 0) - z * t + log1p(exp(-fabs(z)));
    }
    out[0] = tot / n;
}

static void test_losses(void)
{
    check_op(CASE("cross_entropy [5,7] i32 labels", b_ce, r_ce, NULL, 1e-5, 1e-6),
             LEAVES(lf("logits", 2, S(5, 7), -3, 3, true),
                    lint("labels", HX_DTYPE_I32, 1, S(5), S(0, 6, 3, 3, 1))));
    check_op(CASE("cross_entropy [3,4] i64 labels", b_ce, r_ce, NULL, 1e-5, 1e-6),
             LEAVES(lf("logits", 2, S(3, 4), -3, 3, true),
                    lint("labels", HX_DTYPE_I64, 1, S(3), S(2, 0, 3))));
    op_case big = {"cross_entropy [2,3] large logits", b_ce, r_ce, NULL, 1e-5, 1e-6, 1e-4, HX_DTYPE_F32, 0};
    check_op(&big, LEAVES(lf("logits", 2, S(2, 3), 95, 100, true),
                    lint("labels", HX_DTYPE_I32, 1, S(2), S(1, 2))));
    check_op(CASE("bce_with_logits [4,6]", b_bce, r_bce, &K0, 1e-5, 1e-6),
             LEAVES(lf("logits", 2, S(4, 6), -3, 3, true), lf("targets", 2, S(4, 6), 0, 1, true)));
    check_op(CASE("bce_with_logits [10]", b_bce, r_bce, &K0, 1e-5, 1e-6),
             LEAVES(lf("logits", 1, S(10), -8, 8, true), lf("targets", 1, S(10), 0, 1, true)));
    check_op(CASE("mse [4,6]", b_bce, r_bce, &K1, 1e-5, 1e-6),
             LEAVES(lf("pred", 2, S(4, 6), -2, 2, true), lf("target", 2, S(4, 6), -2, 2, true)));
    check_op(CASE("mse [10]", b_bce, r_bce, &K1, 1e-5, 1e-6),
             LEAVES(lf("pred", 1, S(10), -2, 2, true), lf("target", 1, S(10), -2, 2, true)));
}

/* ---- a tensor with several consumers --------------------------------------------------- */

static hx_tensor *b_multi(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    if (*(const int *)ctx) return hx_mul(g, x[0], x[0]);
    return hx_add(g, hx_mul(g, x[0], x[0]), x[0]);
}

static void r_multi(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    same_shape(&x[0], nd, sh);
    if (!out) return;
    for (int64_t i = 0; i < lnumel(&x[0]); i++) {
        double v = fv(&x[0], i);
        out[i] = *(const int *)ctx ? v * v : v * v + v;
    }
}

/* y = gelu(x @ w1 + b1) @ w2, then log_softmax: a chain through several ops. */
static hx_tensor *b_mlp(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    (void)ctx;
    hx_tensor *h = hx_gelu(g, hx_bias_add(g, hx_matmul(g, x[0], x[1], false, false), x[2]));
    return hx_log_softmax(g, hx_matmul(g, h, x[3], false, false));
}

static void r_mlp(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    (void)ctx;
    int64_t B = x[0].shape[0], I = x[0].shape[1], H = x[1].shape[1], O = x[3].shape[1];
    *nd = 2;
    sh[0] = B;
    sh[1] = O;
    if (!out) return;
    double *h = malloc((size_t)(B * H) * sizeof *h);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) {
            double acc = fv(&x[2], j);
            for (int64_t k = 0; k < I; k++) acc += fv(&x[0], b * I + k) * fv(&x[1], k * H + j);
            h[b * H + j] = uref(U_GELU, acc);
        }
    for (int64_t b = 0; b < B; b++) {
        double m = -INFINITY, s = 0;
        for (int64_t o = 0; o < O; o++) {
            double acc = 0;
            for (int64_t k = 0; k < H; k++) acc += h[b * H + k] * fv(&x[3], k * O + o);
            out[b * O + o] = acc;
            m = fmax(m, acc);
        }
        for (int64_t o = 0; o < O; o++) s += exp(out[b * O + o] - m);
        for (int64_t o = 0; o < O; o++) out[b * O + o] -= m + log(s);
    }
    free(h);
}

/* One causal self-attention block with a residual and layernorm:
 *   q,k,v = x@wq, x@wk, x@wv (2-D weights shared over the batch)
 *   y = layernorm(softmax(causal_mask(q k^T * s)) v + x, gamma, beta)
 * x has four consumers; every weight gets a gradient check. */
static const float ATT_SCALE = 0.40824829f; /* 1/sqrt(6) */

static hx_tensor *b_attention(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    (void)ctx;
    hx_tensor *q = hx_matmul(g, x[0], x[1], false, false);
    hx_tensor *k = hx_matmul(g, x[0], x[2], false, false);
    hx_tensor *v = hx_matmul(g, x[0], x[3], false, false);
    hx_tensor *sc = hx_scale(g, hx_matmul(g, q, k, false, true), ATT_SCALE);
    hx_tensor *o = hx_matmul(g, hx_softmax(g, hx_causal_mask(g, sc)), v, false, false);
    return hx_layernorm(g, hx_add(g, o, x[0]), x[4], x[5], 1e-5f);
}

static void r_attention(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    (void)ctx;
    same_shape(&x[0], nd, sh);
    if (!out) return;
    int64_t B = x[0].shape[0], T = x[0].shape[1], D = x[0].shape[2];
    double *q = malloc((size_t)(B * T * D) * 3 * sizeof *q), *k = q + B * T * D, *v = k + B * T * D;
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t j = 0; j < D; j++) {
            double aq = 0, ak = 0, av = 0;
            for (int64_t i = 0; i < D; i++) {
                double xv = fv(&x[0], r * D + i);
                aq += xv * fv(&x[1], i * D + j);
                ak += xv * fv(&x[2], i * D + j);
                av += xv * fv(&x[3], i * D + j);
            }
            q[r * D + j] = aq;
            k[r * D + j] = ak;
            v[r * D + j] = av;
        }
    double *row = malloc((size_t)T * sizeof *row), *h = malloc((size_t)D * sizeof *h);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            double m = -INFINITY, sum = 0;
            for (int64_t u = 0; u <= t; u++) {
                double a = 0;
                for (int64_t j = 0; j < D; j++) a += q[(b * T + t) * D + j] * k[(b * T + u) * D + j];
                row[u] = a * ATT_SCALE;
                m = fmax(m, row[u]);
            }
            for (int64_t u = 0; u <= t; u++) sum += (row[u] = exp(row[u] - m));
            double mean = 0, var = 0;
            for (int64_t j = 0; j < D; j++) {
                double a = 0;
                for (int64_t u = 0; u <= t; u++) a += row[u] / sum * v[(b * T + u) * D + j];
                h[j] = a + fv(&x[0], (b * T + t) * D + j);
                mean += h[j];
            }
            mean /= D;
            for (int64_t j = 0; j < D; j++) var += (h[j] - mean) * (h[j] - mean);
            var /= D;
            for (int64_t j = 0; j < D; j++)
                out[(b * T + t) * D + j] = (h[j] - mean) / sqrt(var + 1e-5f) * fv(&x[4], j) + fv(&x[5], j);
        }
    free(q);
    free(row);
    free(h);
}

static void test_composite(void)
{
    check_op(CASE("attention block [2,4,6]", b_attention, r_attention, NULL, 1e-4, 1e-5),
             LEAVES(lf("x", 3, S(2, 4, 6), -1, 1, true), lf("wq", 2, S(6, 6), -1, 1, true),
                    lf("wk", 2, S(6, 6), -1, 1, true), lf("wv", 2, S(6, 6), -1, 1, true),
                    lf("gamma", 1, S(6), 0.5, 1.5, true), lf("beta", 1, S(6), -0.5, 0.5, true)));
    check_op(CASE("x*x + x (x used by two ops, one of them twice)", b_multi, r_multi, &K0, 1e-6, 1e-6),
             LEAVES(lf("x", 2, S(3, 4), -2, 2, true)));
    check_op(CASE("x*x (same tensor as both inputs)", b_multi, r_multi, &K1, 1e-6, 1e-6),
             LEAVES(lf("x", 1, S(7), -2, 2, true)));
    check_op(CASE("mlp log_softmax(gelu(x@w1+b1)@w2)", b_mlp, r_mlp, NULL, 1e-4, 1e-5),
             LEAVES(lf("x", 2, S(4, 6), -1, 1, true), lf("w1", 2, S(6, 5), -1, 1, true),
                    lf("b1", 1, S(5), -0.5, 0.5, true), lf("w2", 2, S(5, 3), -1, 1, true)));
}

/* ---- convolutional networks ------------------------------------------------------------------ */

typedef struct conv_ctx {
    hx_conv2d_params p;
} conv_ctx;

static hx_tensor *b_conv2d(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    return hx_conv2d(g, x[0], x[1], &((const conv_ctx *)ctx)->p);
}

static int64_t win_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* y[n, o, oh, ow] = sum over the group's channels and taps of x * w, zeros outside. */
static void r_conv2d(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const hx_conv2d_params *p = &((const conv_ctx *)ctx)->p;
    const leaf *a = &x[0], *w = &x[1];
    int64_t N = a->shape[0], C = a->shape[1], H = a->shape[2], W = a->shape[3];
    int64_t O = w->shape[0], Cg = w->shape[1], KH = w->shape[2], KW = w->shape[3];
    int64_t G = p->groups ? p->groups : 1, Og = O / G;
    int64_t sh_ = p->stride[0] ? p->stride[0] : 1, sw = p->stride[1] ? p->stride[1] : 1;
    int64_t dh = p->dilation[0] ? p->dilation[0] : 1, dw = p->dilation[1] ? p->dilation[1] : 1;
    int64_t OH = win_out(H, KH, sh_, p->padding[0], dh), OW = win_out(W, KW, sw, p->padding[1], dw);
    *nd = 4;
    sh[0] = N, sh[1] = O, sh[2] = OH, sh[3] = OW;
    if (!out) return;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = 0;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t i = 0; i < KH; i++)
                            for (int64_t j = 0; j < KW; j++) {
                                int64_t ih = oh * sh_ - p->padding[0] + i * dh;
                                int64_t iw = ow * sw - p->padding[1] + j * dw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int64_t ci = o / Og * Cg + c;
                                acc += fv(a, ((n * C + ci) * H + ih) * W + iw) *
                                       fv(w, ((o * Cg + c) * KH + i) * KW + j);
                            }
                    out[((n * O + o) * OH + oh) * OW + ow] = acc;
                }
    (void)C;
}

static void test_conv2d(void)
{
    static const struct {
        const char *what;
        int64_t x[4], w[4];
        hx_conv2d_params p;
    } cases[] = {
        {"3x3 pad 1", {2, 3, 7, 6}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
        {"groups 2, stride (2,3), pad (1,0), dilation (1,2)", {2, 4, 9, 11}, {6, 2, 3, 2},
         {{2, 3}, {1, 0}, {1, 2}, 2}},
        {"depthwise 3x3", {1, 5, 6, 7}, {5, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 5}},
        {"stride 3 > kernel 2", {2, 2, 9, 10}, {3, 2, 2, 2}, {{3, 3}, {0, 0}, {1, 1}, 1}},
        {"dilation 2 pad 2, 1x1 default params", {1, 3, 8, 5}, {2, 3, 3, 3}, {{0, 0}, {2, 2}, {2, 2}, 0}},
        {"1x1 stride 2", {3, 4, 5, 5}, {6, 4, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}},
    };
    char w[200];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        conv_ctx c = {cases[k].p};
        snprintf(w, sizeof w, "conv2d %s", cases[k].what);
        check_op(CASE(w, b_conv2d, r_conv2d, &c, 1e-4, 1e-5),
                 LEAVES(lf("x", 4, cases[k].x, -1, 1, true), lf("w", 4, cases[k].w, -1, 1, true)));
    }
}

typedef struct pool_ctx {
    bool max, global;
    int k[2], s[2], p[2];
} pool_ctx;

static hx_tensor *b_pool(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    const pool_ctx *c = ctx;
    if (c->global) return hx_global_avg_pool2d(g, x[0]);
    return (c->max ? hx_max_pool2d : hx_avg_pool2d)(g, x[0], c->k[0], c->k[1], c->s[0], c->s[1],
                                                    c->p[0], c->p[1]);
}

static void r_pool(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const pool_ctx *c = ctx;
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t kh = c->global ? H : c->k[0], kw = c->global ? W : c->k[1];
    int64_t sh_ = c->global ? 1 : c->s[0] ? c->s[0] : kh, sw = c->global ? 1 : c->s[1] ? c->s[1] : kw;
    int64_t ph = c->global ? 0 : c->p[0], pw = c->global ? 0 : c->p[1];
    int64_t OH = win_out(H, kh, sh_, ph, 1), OW = win_out(W, kw, sw, pw, 1);
    *nd = c->global ? 2 : 4;
    sh[0] = N, sh[1] = C, sh[2] = OH, sh[3] = OW;
    if (!out) return;
    for (int64_t nc = 0; nc < N * C; nc++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                double acc = c->max ? -INFINITY : 0;
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t ih = oh * sh_ - ph + i, iw = ow * sw - pw + j;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        double v = fv(x, (nc * H + ih) * W + iw);
                        acc = c->max ? fmax(acc, v) : acc + v;
                    }
                out[(nc * OH + oh) * OW + ow] = c->max ? acc : acc / (double)(kh * kw);
            }
}

static void test_pooling(void)
{
    static const struct {
        const char *what;
        int64_t x[4];
        pool_ctx c;
    } cases[] = {
        {"max 2x2", {2, 3, 6, 7}, {true, false, {2, 2}, {0, 0}, {0, 0}}},
        {"max 3x3 stride 2 pad 1", {2, 2, 7, 8}, {true, false, {3, 3}, {2, 2}, {1, 1}}},
        {"max 2x3 stride (3,1)", {1, 3, 8, 6}, {true, false, {2, 3}, {3, 1}, {0, 1}}},
        {"avg 2x2", {2, 3, 6, 7}, {false, false, {2, 2}, {0, 0}, {0, 0}}},
        {"avg 3x3 stride 2 pad 1", {2, 2, 7, 8}, {false, false, {3, 3}, {2, 2}, {1, 1}}},
        {"avg 2x2 stride 3 (> kernel)", {1, 2, 9, 10}, {false, false, {2, 2}, {3, 3}, {0, 0}}},
        {"global avg", {3, 4, 5, 6}, {false, true, {0, 0}, {0, 0}, {0, 0}}},
    };
    char w[200];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(w, sizeof w, "pool %s", cases[k].what);
        /* max: a small step, so that a perturbed element does not overtake its window's max */
        op_case oc = {w, b_pool, r_pool, &cases[k].c, 1e-5, 1e-6, cases[k].c.max ? 1e-4 : 0,
                      HX_DTYPE_F32, 0};
        check_op(&oc, LEAVES(lf("x", 4, cases[k].x, -1, 1, true)));
    }
}

typedef struct bn_ctx {
    bool train;
    float momentum, eps;
} bn_ctx;

static hx_tensor *b_batchnorm(hx_graph *g, hx_tensor *const *x, const void *ctx)
{
    const bn_ctx *c = ctx;
    return hx_batchnorm(g, x[0], x[1], x[2], c->momentum, c->eps);
}

/* train: the batch's mean and biased variance per channel; else the
 * running statistics a fresh session starts with (0 and 1). */
static void r_batchnorm(const leaf *x, const void *ctx, int *nd, int64_t *sh, double *out)
{
    const bn_ctx *c = ctx;
    const leaf *a = &x[0];
    int64_t N = a->shape[0], C = a->shape[1], S = a->ndim == 4 ? a->shape[2] * a->shape[3] : 1;
    same_shape(a, nd, sh);
    if (!out) return;
    for (int64_t ch = 0; ch < C; ch++) {
        double mean = 0, var = 1;
        if (c->train) {
            double s = 0, q = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t k = 0; k < S; k++) s += fv(a, (n * C + ch) * S + k);
            mean = s / (double)(N * S);
            for (int64_t n = 0; n < N; n++)
                for (int64_t k = 0; k < S; k++) {
                    double d = fv(a, (n * C + ch) * S + k) - mean;
                    q += d * d;
                }
            var = q / (double)(N * S);
        }
        double rstd = 1 / sqrt(var + c->eps);
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < S; k++) {
                int64_t i = (n * C + ch) * S + k;
                out[i] = (fv(a, i) - mean) * rstd * fv(&x[1], ch) + fv(&x[2], ch);
            }
    }
}

static void test_batchnorm(void)
{
    static const bn_ctx train = {true, 0.1f, 1e-5f}, eval = {false, 0.1f, 1e-3f};
    static const int64_t shapes[3][4] = {{4, 3, 5, 6}, {3, 5, 1, 1}, {7, 4, 0, 0}};
    char w[200];
    for (int k = 0; k < 3; k++)
        for (int m = 0; m < 2; m++) {
            const bn_ctx *c = m ? &eval : &train;
            int nd = shapes[k][2] ? 4 : 2;
            int64_t C = shapes[k][1];
            snprintf(w, sizeof w, "batchnorm %s [%lld,%lld%s]", m ? "inference" : "train",
                     (long long)shapes[k][0], (long long)C, nd == 4 ? ",H,W" : "");
            op_case oc = {w, b_batchnorm, r_batchnorm, c, 1e-4, 1e-5, 0, HX_DTYPE_F32,
                          m ? 0 : HX_RUN_TRAIN};
            check_op(&oc, LEAVES(lf("x", nd, shapes[k], -2, 2, true), lf("gamma", 1, &C, 0.5, 1.5, true),
                                 lf("beta", 1, &C, -0.5, 0.5, true)));
        }
}

/* ---- the target a gradient node inherits ------------------------------------------------- */

static void test_grad_target(void)
{
    hx_graph *g = hx_graph_create();
    int64_t n = 12;
    hx_tensor *x = hx_graph_param(g, "x", HX_DTYPE_F32, 1, &n, hx_init_zeros());
    hx_tensor *a = hx_graph_param(g, "a", HX_DTYPE_F32, 2, S(3, 4), hx_init_zeros());
    hx_tensor *b = hx_graph_param(g, "b", HX_DTYPE_F32, 2, S(4, 3), hx_init_zeros());
    hx_tensor *y = hx_relu(g, x);
    hx_status st = hx_tensor_set_target(y, HX_TARGET_CPU);
    CHECK(st == HX_OK, "set_target(relu, CPU): %s", hx_last_error());
    CHECK(hx_tensor_target(y) == HX_TARGET_CPU, "relu target %d", hx_tensor_target(y));
    hx_tensor *m = hx_matmul(g, a, b, false, false);
    CHECK(hx_tensor_set_target(m, HX_TARGET_CPU) == HX_OK, "set_target(matmul): %s", hx_last_error());
    float R[12], xv[12], gx[12];
    test_fill_uniform(&rng, R, 12, -1, 1);
    for (int i = 0; i < 12; i++) xv[i] = (float)((i % 2 ? 1 : -1) * (0.5 + i));
    hx_tensor *Rt = hx_graph_constant(g, "R", HX_DTYPE_F32, 1, &n, R);
    hx_tensor *loss = hx_add(g, hx_reduce_sum(g, hx_mul(g, y, Rt), 0, NULL, false),
                             hx_reduce_sum(g, m, 0, NULL, false));
    st = hx_graph_backward(g, loss);
    CHECK(st == HX_OK, "backward: %s", hx_last_error());
    hx_tensor *gxt = hx_tensor_grad(x), *gyt = hx_tensor_grad(y);
    hx_tensor *gat = hx_tensor_grad(a), *gbt = hx_tensor_grad(b);
    CHECK(gxt && hx_tensor_target(gxt) == HX_TARGET_CPU,
          "grad of x (made by relu's backward, relu on CPU) has target %s",
          gxt ? hx_target_name(hx_tensor_target(gxt)) : "(no grad)");
    CHECK(gyt && hx_tensor_target(gyt) == HX_TARGET_DEFAULT,
          "grad of relu's output (made by mul's backward, mul DEFAULT) has target %s",
          gyt ? hx_target_name(hx_tensor_target(gyt)) : "(no grad)");
    CHECK(gat && hx_tensor_target(gat) == HX_TARGET_CPU, "grad of matmul's a has target %s",
          gat ? hx_target_name(hx_tensor_target(gat)) : "(no grad)");
    CHECK(gbt && hx_tensor_target(gbt) == HX_TARGET_CPU, "grad of matmul's b has target %s",
          gbt ? hx_target_name(hx_tensor_target(gbt)) : "(no grad)");
    /* and the graph still runs with those targets: d sum(relu(x)*R) / dx = R * (x > 0) */
    hx_session *s = gxt ? make_session(g, 1, 1, "grad target") : NULL;
    if (s) {
        CHECK(hx_session_write(s, x, xv, sizeof xv) == HX_OK, "write: %s", hx_last_error());
        hx_fetch f = {NULL, gxt, gx, sizeof gx};
        st = hx_session_run(s, NULL, 0, &f, 1, 0);
        CHECK(st == HX_OK, "run: %s", hx_last_error());
        double want[12];
        for (int i = 0; i < 12; i++) want[i] = xv[i] > 0 ? R[i] : 0;
        if (st == HX_OK) test_close_f32("relu grad (CPU target)", gx, want, 12, 0, 0);
    }
    hx_session_free(s);
    hx_graph_free(g);
}

/* ---- dropout ---------------------------------------------------------------------------- */

static void test_dropout(void)
{
    const float p = 0.3f;
    int64_t sh[2] = {200, 250}, n = 50000; /* above HX_K_PARALLEL_MIN: 2 threads split it */
    hx_graph *g = hx_graph_create();
    hx_tensor *x = hx_graph_param(g, "x", HX_DTYPE_F32, 2, sh, hx_init_zeros());
    hx_tensor *y = hx_dropout(g, x, p, 42);
    hx_tensor *y2 = hx_dropout(g, x, p, 43);
    hx_tensor *y0 = hx_dropout(g, x, 0.0f, 42);
    float *xv = malloc(n * sizeof *xv), *R = malloc(n * sizeof *R);
    float *yv = malloc(n * sizeof *yv), *yv2 = malloc(n * sizeof *yv2), *y0v = malloc(n * sizeof *y0v);
    float *gx = malloc(n * sizeof *gx), *first = malloc(n * sizeof *first);
    test_fill_uniform(&rng, xv, n, 0.5, 2);
    test_fill_uniform(&rng, R, n, -1, 1);
    hx_tensor *Rt = hx_graph_constant(g, "R", HX_DTYPE_F32, 2, sh, R);
    hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, y, Rt), 0, NULL, false);
    CHECK(y && y2 && y0 && loss, "dropout graph: %s", hx_last_error());
    CHECK(hx_graph_backward(g, loss) == HX_OK, "dropout backward: %s", hx_last_error());
    hx_tensor *gxt = hx_tensor_grad(x);
    CHECK(gxt != NULL, "dropout: no grad for x: %s", hx_last_error());
    if (!gxt) goto out;
    for (int sess = 0; sess < 2; sess++) {
        hx_session *s = make_session(g, sess ? 2 : 1, 99, "dropout");
        if (!s) break;
        CHECK(hx_session_write(s, x, xv, n * sizeof *xv) == HX_OK, "write: %s", hx_last_error());
        hx_fetch f[4] = {{NULL, y, yv, n * sizeof *yv}, {NULL, gxt, gx, n * sizeof *gx},
                         {NULL, y2, yv2, n * sizeof *yv2}, {NULL, y0, y0v, n * sizeof *y0v}};
        /* not a training run: identity, and the gradient is R */
        hx_status st = hx_session_run(s, NULL, 0, f, 4, 0);
        CHECK(st == HX_OK, "dropout eval run: %s", hx_last_error());
        CHECK(memcmp(yv, xv, n * sizeof *yv) == 0, "dropout without HX_RUN_TRAIN is not the identity");
        CHECK(memcmp(gx, R, n * sizeof *gx) == 0, "dropout grad without HX_RUN_TRAIN is not dy");
        CHECK(hx_session_step(s) == 0, "step after an eval run: %lld", (long long)hx_session_step(s));
        /* training run */
        st = hx_session_run(s, NULL, 0, f, 4, HX_RUN_TRAIN);
        CHECK(st == HX_OK, "dropout train run: %s", hx_last_error());
        CHECK(hx_session_step(s) == 1, "step after a train run: %lld", (long long)hx_session_step(s));
        int64_t kept = 0, bad = -1, badg = -1, diff2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double scaled = xv[i] / (1.0 - p);
            bool k = yv[i] != 0;
            kept += k;
            if (k ? fabs(yv[i] - scaled) > 1e-6 * scaled : yv[i] != 0) bad = bad < 0 ? i : bad;
            double wg = k ? R[i] / (1.0 - p) : 0;
            if (fabs(gx[i] - wg) > 1e-6 * fabs(wg) + 1e-7) badg = badg < 0 ? i : badg;
            diff2 += (yv2[i] != 0) != k;
        }
        CHECK(bad < 0, "dropout: y[%lld] = %.9g, x = %.9g (want 0 or x/(1-p))", (long long)bad,
              bad < 0 ? 0.0 : yv[bad], bad < 0 ? 0.0 : xv[bad]);
        CHECK(badg < 0, "dropout grad: dx[%lld] = %.9g with y = %.9g, dy = %.9g", (long long)badg,
              badg < 0 ? 0.0 : gx[badg], badg < 0 ? 0.0 : yv[badg], badg < 0 ? 0.0 : R[badg]);
        double frac = (double)kept / n;
        CHECK(fabs(frac - (1 - p)) < 0.02, "dropout kept fraction %.4f, want about %.2f", frac, 1 - p);
        CHECK(diff2 > n / 10, "dropout with seeds 42 and 43 differ in only %lld of %lld elements",
              (long long)diff2, (long long)n);
        CHECK(memcmp(y0v, xv, n * sizeof *y0v) == 0, "dropout p=0 in training is not the identity");
        if (sess == 0) {
            memcpy(first, yv, n * sizeof *yv);
            /* a second training step draws a new mask */
            st = hx_session_run(s, NULL, 0, f, 1, HX_RUN_TRAIN);
            CHECK(st == HX_OK, "dropout second train run: %s", hx_last_error());
            CHECK(memcmp(first, yv, n * sizeof *yv) != 0, "dropout: step 1 has the mask of step 0");
        } else {
            CHECK(memcmp(first, yv, n * sizeof *yv) == 0,
                  "dropout: two sessions with the same seed (1 and 2 threads) give different masks");
        }
        hx_session_free(s);
    }
out:
    hx_graph_free(g);
    free(xv);
    free(R);
    free(yv);
    free(yv2);
    free(y0v);
    free(gx);
    free(first);
}

/* ---- thread count: forward outputs bitwise equal at 1 and 2 threads ---------------------- */

static void test_threads(void)
{
    hx_graph *g = hx_graph_create();
    hx_tensor *a = hx_graph_input(g, "a", HX_DTYPE_F32, 2, S(96, 128));
    hx_tensor *b = hx_graph_input(g, "b", HX_DTYPE_F32, 2, S(128, 80));
    hx_tensor *v = hx_graph_input(g, "v", HX_DTYPE_F32, 1, S(80));
    hx_tensor *big = hx_graph_input(g, "big", HX_DTYPE_F32, 2, S(256, 300));
    hx_tensor *gamma = hx_graph_input(g, "gamma", HX_DTYPE_F32, 1, S(300));
    hx_tensor *mm = hx_matmul(g, a, b, false, false);
    hx_tensor *outs[] = {
        mm,
        hx_softmax(g, big),
        hx_layernorm(g, big, gamma, gamma, 1e-5f),
        hx_reduce_sum(g, big, 1, (const int[]){0}, false),
        hx_reduce_mean(g, big, 0, NULL, false),
        hx_gelu(g, big),
        hx_exp(g, big),
        hx_add(g, mm, v),
        hx_log_softmax(g, mm),
        hx_cast(g, hx_cast(g, big, HX_DTYPE_BF16), HX_DTYPE_F32),
        hx_mul(g, big, gamma),
        hx_permute(g, big, (const int[]){1, 0}),
        hx_sigmoid(g, big),
    };
    enum { NO = sizeof outs / sizeof outs[0] };
    float *res[2][NO] = {{0}};
    float *ad = malloc(96 * 128 * 4), *bd = malloc(128 * 80 * 4), *vd = malloc(80 * 4);
    float *bigd = malloc(256 * 300 * 4), *gd = malloc(300 * 4);
    test_fill_uniform(&rng, ad, 96 * 128, -1, 1);
    test_fill_uniform(&rng, bd, 128 * 80, -1, 1);
    test_fill_uniform(&rng, vd, 80, -1, 1);
    test_fill_uniform(&rng, bigd, 256 * 300, -3, 3);
    test_fill_uniform(&rng, gd, 300, 0.5, 1.5);
    hx_feed feeds[5] = {{"a", NULL, ad, 96 * 128 * 4}, {"b", NULL, bd, 128 * 80 * 4},
                        {"v", NULL, vd, 80 * 4}, {"big", NULL, bigd, 256 * 300 * 4},
                        {"gamma", NULL, gd, 300 * 4}};
    bool ok = true;
    for (int i = 0; i < NO; i++) {
        CHECK(outs[i] != NULL, "threads graph op %d: %s", i, hx_last_error());
        ok = ok && outs[i];
    }
    for (int t = 0; ok && t < 2; t++) {
        hx_session *s = make_session(g, t + 1, 1, "threads");
        if (!s) {
            ok = false;
            break;
        }
        hx_fetch f[NO];
        for (int i = 0; i < NO; i++) {
            res[t][i] = calloc((size_t)hx_tensor_numel(outs[i]), 4);
            f[i] = (hx_fetch){NULL, outs[i], res[t][i], hx_tensor_nbytes(outs[i])};
        }
        hx_status st = hx_session_run(s, feeds, 5, f, NO, 0);
        CHECK(st == HX_OK, "threads run (%d threads): %s", t + 1, hx_last_error());
        ok = ok && st == HX_OK;
        hx_session_free(s);
    }
    for (int i = 0; ok && i < NO; i++)
        CHECK(memcmp(res[0][i], res[1][i], hx_tensor_nbytes(outs[i])) == 0,
              "%s: output differs between 1 and 2 threads", hx_tensor_op_name(outs[i]));
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NO; i++) free(res[t][i]);
    free(ad);
    free(bd);
    free(vd);
    free(bigd);
    free(gd);
    hx_graph_free(g);
}

/* A half tensor read twice: its two gradients are summed (widened to f32
 * and rounded back); the f16 round trip of values that f16 holds exactly
 * gives the parameter exactly those values as gradient. */
static void test_half_grad_accumulation(void)
{
    for (int which = 0; which < 2; which++) {
        hx_dtype half = which ? HX_DTYPE_BF16 : HX_DTYPE_F16;
        hx_graph *g = hx_graph_create();
        int64_t ws[2] = {4, 8};
        float k[32];
        for (int i = 0; i < 32; i++) k[i] = (float)((int)(test_rng_u64(&rng) % 64) - 32) / 8;
        hx_tensor *w = hx_graph_param(g, "w", HX_DTYPE_F32, 2, ws, hx_init_normal(0, 1));
        hx_tensor *kt = hx_graph_constant(g, "k", HX_DTYPE_F32, 2, ws, k);
        hx_tensor *h = hx_cast(g, w, half);
        hx_tensor *parts[2] = {hx_slice(g, h, 1, 0, 4), hx_slice(g, h, 1, 4, 8)};
        hx_tensor *c = hx_cast(g, hx_concat(g, 2, parts, 1), HX_DTYPE_F32);
        hx_tensor *loss = hx_reduce_sum(g, hx_mul(g, c, kt), 0, NULL, false);
        CHECK(loss && hx_graph_backward(g, loss) == HX_OK, "%s read twice: backward: %s",
              hx_dtype_name(half), hx_last_error());
        hx_tensor *gw = hx_tensor_grad(w);
        hx_session *s = NULL;
        hx_session_config cfg = hx_session_config_default();
        cfg.accelerator = HX_ACCELERATOR_NONE;
        float got[32];
        hx_fetch f = {NULL, gw, got, sizeof got};
        if (gw && !hx_session_create(g, &cfg, &s) && !hx_session_run(s, NULL, 0, &f, 1, 0)) {
            int bad = 0;
            for (int i = 0; i < 32; i++) bad += got[i] != k[i];
            CHECK(!bad, "%s read twice: %d of 32 gradient elements differ", hx_dtype_name(half),
                  bad);
        } else {
            CHECK(false, "%s read twice: %s", hx_dtype_name(half), hx_last_error());
        }
        hx_session_free(s);
        hx_graph_free(g);
    }
}

static const test_case cases[] = {
    {"matmul", test_matmul},
    {"binary", test_binary},
    {"unary", test_unary},
    {"rows", test_rows},
    {"data_movement", test_data_movement},
    {"reduce", test_reduce},
    {"cast", test_cast},
    {"half_grad_accumulation", test_half_grad_accumulation},
    {"gather_mask", test_gather_mask},
    {"losses", test_losses},
    {"composite", test_composite},
    {"conv2d", test_conv2d},
    {"pooling", test_pooling},
    {"batchnorm", test_batchnorm},
    {"grad_target", test_grad_target},
    {"dropout", test_dropout},
    {"threads", test_threads},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(20240611);
    return test_main(argc, argv, "ops", cases, TEST_COUNT(cases));
}
