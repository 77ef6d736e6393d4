/* test_kernels: every CPU kernel in kernels/cpu/hx_kernels.h against a
 * scalar double reference written here, on random inputs of several shapes
 * (sizes that are not multiples of the vector width, and sizes above
 * HX_K_PARALLEL_MIN so that the threaded paths run), at 1 and 2 threads.
 *
 * - elementwise kernels, casts, dropout, scatter-add and the row kernels are
 *   also checked bitwise equal at 1 and 2 threads;
 * - backward kernels are checked against central finite differences of the
 *   double reference forward;
 * - casts are checked bitwise against a reference rounding (nearest value
 *   found by search among all values of the format, ties to even) on edge
 *   values and random bit patterns, and once per ISA path: the cast tests
 *   rerun in child processes started with HX_ISA=scalar|avx2|avx512 before
 *   this process fixes its own ISA. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cpu/hx_kernels.h"
#include "kernels/cpu/hx_kinternal.h"
#include "tests/util/testutil.h"

#define BIG 40000 /* above HX_K_PARALLEL_MIN */

static const int64_t SIZES[] = {1, 7, 17, 1023, BIG + 3};
#define NSIZES ((int)(sizeof(SIZES) / sizeof(SIZES[0])))

static float *falloc(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }
static double *dalloc(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(double)); }

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* Backward output vs finite differences: the largest difference within
 * 1e-3 of the largest gradient, or of `scale` where all gradients are
 * smaller than the scale of the op's gradients (test_max_rel_err). */
static void check_fd(const char *what, const float *got, const double *fd, int64_t n,
                     double scale)
{
    double err = test_max_rel_err(got, fd, n, scale);
    CHECK(err <= 1e-3, "%s: finite differences, relative error %.3g", what, err);
}

/* Central difference of f at x[i] (x restored afterwards). */
typedef double (*scalar_fn)(const double *x, int64_t n, const void *ctx);

static double fd_grad(scalar_fn f, double *x, int64_t n, int64_t i, const void *ctx)
{
    double xi = x[i], h = 1e-5 * fmax(1.0, fabs(xi));
    x[i] = xi + h;
    double fp = f(x, n, ctx);
    x[i] = xi - h;
    double fm = f(x, n, ctx);
    x[i] = xi;
    return (fp - fm) / (2.0 * h);
}

/* ====================================================================== */
/* binary                                                                  */

static double ref_binop(hx_binary_op op, double x, double y)
{
    switch (op) {
    case HX_BINARY_ADD: return x + y;
    case HX_BINARY_SUB: return x - y;
    case HX_BINARY_MUL: return x * y;
    case HX_BINARY_DIV: return x / y;
    }
    return 0.0;
}

/* Element strides of a contiguous tensor of `sub` broadcast to `shape`. */
static int64_t bcast_strides(const int64_t *shape, const int64_t *sub, int ndim, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = sub[d] == 1 && shape[d] != 1 ? 0 : s;
        s *= sub[d];
    }
    return s;
}

/* out = a op b for every op, at 1 and 2 threads: the float result of one
 * + - * / is the double result rounded once (53 >= 2 * 24 + 2 bits), so the
 * check is bitwise. */
static void check_binary(test_rng *r, const char *what, const int64_t *shape, int ndim,
                         const int64_t *as, int64_t alen, const int64_t *bs, int64_t blen)
{
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) total *= shape[d];
    float *a = falloc(alen), *b = falloc(blen), *out1 = falloc(total), *out2 = falloc(total);
    float *want = falloc(total);
    test_fill_uniform(r, a, alen, -2.0, 2.0);
    test_fill_uniform(r, b, blen, 0.5, 2.0);
    for (int op = HX_BINARY_ADD; op <= HX_BINARY_DIV; op++) {
        int64_t idx[HX_K_MAX_DIMS] = {0};
        for (int64_t i = 0; i < total; i++) {
            int64_t ao = 0, bo = 0;
            for (int d = 0; d < ndim; d++) {
                ao += idx[d] * as[d];
                bo += idx[d] * bs[d];
            }
            want[i] = (float)ref_binop((hx_binary_op)op, a[ao], b[bo]);
            for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
        }
        hx_k_binary_f32((hx_binary_op)op, out1, a, as, b, bs, shape, ndim, 1);
        hx_k_binary_f32((hx_binary_op)op, out2, a, as, b, bs, shape, ndim, 2);
        CHECK(same_bits(out1, want, (size_t)total * 4), "binary %s op %d: 1 thread vs reference",
              what, op);
        CHECK(same_bits(out2, want, (size_t)total * 4), "binary %s op %d: 2 threads vs reference",
              what, op);
    }
    free(a), free(b), free(out1), free(out2), free(want);
}

static void check_binary_bcast(test_rng *r, const char *what, const int64_t *shape, int ndim,
                               const int64_t *a_sub, const int64_t *b_sub)
{
    int64_t as[HX_K_MAX_DIMS], bs[HX_K_MAX_DIMS];
    int64_t alen = bcast_strides(shape, a_sub, ndim, as), blen = bcast_strides(shape, b_sub, ndim, bs);
    check_binary(r, what, shape, ndim, as, alen, bs, blen);
}

static void test_binary(test_rng *r)
{
    for (int k = 0; k < NSIZES; k++) {
        int64_t n = SIZES[k], one = 1;
        check_binary_bcast(r, "contiguous", &n, 1, &n, &n);
        check_binary_bcast(r, "scalar b", &n, 1, &n, &one);
        check_binary_bcast(r, "scalar a", &n, 1, &one, &n);
    }
    const int64_t rc[2] = {300, 137}, row[2] = {1, 137}, col[2] = {300, 1};
    check_binary_bcast(r, "row", rc, 2, rc, row);
    check_binary_bcast(r, "column", rc, 2, rc, col);
    check_binary_bcast(r, "row op column", rc, 2, row, col);
    const int64_t small[2] = {3, 7}, srow[2] = {1, 7}, scol[2] = {3, 1};
    check_binary_bcast(r, "small row", small, 2, small, srow);
    check_binary_bcast(r, "small column", small, 2, scol, small);
    const int64_t abc[3] = {5, 17, 9}, mid[3] = {5, 1, 9}, big[3] = {4, 100, 101}, bmid[3] = {4, 1, 101};
    check_binary_bcast(r, "middle axis", abc, 3, abc, mid);
    check_binary_bcast(r, "middle axis big", big, 3, big, bmid);
    const int64_t ones[4] = {1, 1, 1, 1}, with1[4] = {3, 1, 5, 1};
    check_binary_bcast(r, "all size 1", ones, 4, ones, ones);
    check_binary_bcast(r, "size-1 dims", with1, 4, with1, ones);
    check_binary_bcast(r, "rank 0", NULL, 0, NULL, NULL);
    /* a read transposed: a is (137, 300) contiguous, out is (300, 137). */
    const int64_t at[2] = {1, 300}, bc[2] = {137, 1};
    check_binary(r, "transposed a", rc, 2, at, 300 * 137, bc, 300 * 137);
    check_binary(r, "both transposed", rc, 2, at, 300 * 137, at, 300 * 137);
    const int64_t zero[2] = {0, 5};
    check_binary_bcast(r, "empty", zero, 2, zero, zero);
}

/* ====================================================================== */
/* unary                                                                   */

static double ref_unary(hx_unary_op op, double x)
{
    switch (op) {
    case HX_UNARY_RELU: return x > 0 ? x : 0;
    case HX_UNARY_GELU:
        return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.141592653589793) * (x + 0.044715 * x * x * x)));
    case HX_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case HX_UNARY_TANH: return tanh(x);
    case HX_UNARY_EXP: return exp(x);
    case HX_UNARY_LOG: return log(x);
    case HX_UNARY_SQRT: return sqrt(x);
    case HX_UNARY_GELU_ERF: return x * 0.5 * erfc(-x / sqrt(2.0));
    }
    return 0.0;
}

static double ref_unary_fn(const double *x, int64_t n, const void *ctx)
{
    return ref_unary(*(const hx_unary_op *)ctx, x[0]);
}

static void test_unary(test_rng *r)
{
    static const char *names[] = {"relu", "gelu", "sigmoid", "tanh", "exp", "log", "sqrt", "gelu_erf"};
    for (int op = HX_UNARY_RELU; op <= HX_UNARY_GELU_ERF; op++) {
        hx_unary_op uop = (hx_unary_op)op;
        double lo = op == HX_UNARY_LOG || op == HX_UNARY_SQRT ? 0.01 : op == HX_UNARY_EXP ? -10 : -5;
        double hi = op == HX_UNARY_LOG || op == HX_UNARY_SQRT ? 100 : op == HX_UNARY_EXP ? 10 : 5;
        for (int k = 0; k < NSIZES; k++) {
            int64_t n = SIZES[k];
            float *x = falloc(n), *y1 = falloc(n), *y2 = falloc(n), *dy = falloc(n);
            float *dx1 = falloc(n), *dx2 = falloc(n);
            double *want = dalloc(n), *dwant = dalloc(n);
            test_fill_uniform(r, x, n, lo, hi);
            test_fill_uniform(r, dy, n, -1, 1);
            if (op == HX_UNARY_RELU) /* keep finite differences off the kink */
                for (int64_t i = 0; i < n; i++)
                    if (fabsf(x[i]) < 0.01f) x[i] += 0.02f;
            for (int64_t i = 0; i < n; i++) {
                want[i] = ref_unary(uop, x[i]);
                double xd = x[i];
                dwant[i] = dy[i] * fd_grad(ref_unary_fn, &xd, 1, 0, &uop);
            }
            hx_k_unary_f32(uop, y1, x, n, 1);
            hx_k_unary_f32(uop, y2, x, n, 2);
            char what[64];
            snprintf(what, sizeof what, "unary %s n=%lld", names[op], (long long)n);
            test_close_f32(what, y1, want, n, 1e-5, 1e-6);
            CHECK(same_bits(y1, y2, (size_t)n * 4), "%s: 1 vs 2 threads", what);
            hx_k_unary_backward_f32(uop, dx1, dy, x, y1, n, 1);
            hx_k_unary_backward_f32(uop, dx2, dy, x, y1, n, 2);
            snprintf(what, sizeof what, "unary backward %s n=%lld", names[op], (long long)n);
            check_fd(what, dx1, dwant, n, 1e-2); /* dy is O(1) */
            CHECK(same_bits(dx1, dx2, (size_t)n * 4), "%s: 1 vs 2 threads", what);
            free(x), free(y1), free(y2), free(dy), free(dx1), free(dx2), free(want), free(dwant);
        }
    }
}

/* ====================================================================== */
/* scale, bias add (single float ops: bitwise against double rounded once) */

static void test_scale_bias(test_rng *r)
{
    for (int k = 0; k < NSIZES; k++) {
        int64_t n = SIZES[k];
        float *x = falloc(n), *y1 = falloc(n), *y2 = falloc(n), *want = falloc(n);
        test_fill_uniform(r, x, n, -3, 3);
        for (int64_t i = 0; i < n; i++) want[i] = (float)((double)-0.37f * (double)x[i]);
        hx_k_scale_f32(y1, x, -0.37f, n, 1);
        hx_k_scale_f32(y2, x, -0.37f, n, 2);
        CHECK(same_bits(y1, want, (size_t)n * 4), "scale n=%lld", (long long)n);
        CHECK(same_bits(y2, want, (size_t)n * 4), "scale n=%lld, 2 threads", (long long)n);
        free(x), free(y1), free(y2), free(want);
    }
    const int64_t shapes[][2] = {{1, 1}, {3, 7}, {17, 1}, {5, 1023}, {BIG / 16 + 1, 17}};
    for (int k = 0; k < 5; k++) {
        int64_t rows = shapes[k][0], n = shapes[k][1];
        float *x = falloc(rows * n), *b = falloc(n), *y1 = falloc(rows * n), *y2 = falloc(rows * n);
        float *want = falloc(rows * n);
        test_fill_uniform(r, x, rows * n, -3, 3);
        test_fill_uniform(r, b, n, -3, 3);
        for (int64_t i = 0; i < rows * n; i++) want[i] = (float)((double)x[i] + b[i % n]);
        hx_k_bias_add_f32(y1, x, b, rows, n, 1);
        hx_k_bias_add_f32(y2, x, b, rows, n, 2);
        CHECK(same_bits(y1, want, (size_t)(rows * n) * 4), "bias_add (%lld, %lld)", (long long)rows,
              (long long)n);
        CHECK(same_bits(y2, want, (size_t)(rows * n) * 4), "bias_add (%lld, %lld), 2 threads",
              (long long)rows, (long long)n);
        free(x), free(b), free(y1), free(y2), free(want);
    }
}

/* ====================================================================== */
/* rows: softmax, log-softmax, layernorm                                    */

static const int64_t ROW_SHAPES[][2] = {{1, 1}, {3, 7}, {5, 17}, {2, 1023}, {41, 1000}};
#define NROW_SHAPES 5

static void ref_softmax(double *y, const double *x, int64_t n)
{
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, x[i]);
    for (int64_t i = 0; i < n; i++) s += exp(x[i] - m);
    for (int64_t i = 0; i < n; i++) y[i] = exp(x[i] - m) / s;
}

/* sum(dy * softmax(x)) or sum(dy * log_softmax(x)) for one row; ctx: dy, flag */
typedef struct row_ctx {
    const float *dy;
    int log;
    const float *gamma, *beta;
    float eps;
} row_ctx;

static double ref_softmax_loss(const double *x, int64_t n, const void *vctx)
{
    const row_ctx *c = vctx;
    double *y = dalloc(n), L = 0;
    ref_softmax(y, x, n);
    for (int64_t i = 0; i < n; i++) L += c->dy[i] * (c->log ? log(y[i]) : y[i]);
    free(y);
    return L;
}

/* Finite differences of a row loss at a few columns of the first rows. */
static void fd_check_rows(const char *what, scalar_fn f, const float *x, const float *dx,
                          const float *dy, int64_t rows, int64_t n, row_ctx ctx, test_rng *r)
{
    double *xd = dalloc(n);
    int64_t nr = rows < 3 ? rows : 3, nc = n < 6 ? n : 6;
    float got[18];
    double want[18];
    int m = 0;
    for (int64_t i = 0; i < nr; i++) {
        for (int64_t j = 0; j < n; j++) xd[j] = x[i * n + j];
        ctx.dy = dy + i * n;
        for (int64_t c = 0; c < nc; c++) {
            int64_t j = c == 0 ? 0 : (int64_t)(test_rng_u64(r) % (uint64_t)n);
            got[m] = dx[i * n + j];
            want[m++] = fd_grad(f, xd, n, j, &ctx);
        }
    }
    check_fd(what, got, want, m, 1e-6);
    free(xd);
}

static void test_softmax(test_rng *r)
{
    for (int k = 0; k < NROW_SHAPES; k++) {
        int64_t rows = ROW_SHAPES[k][0], n = ROW_SHAPES[k][1], t = rows * n;
        float *x = falloc(t), *dy = falloc(t), *y1 = falloc(t), *y2 = falloc(t);
        float *dx1 = falloc(t), *dx2 = falloc(t);
        double *xd = dalloc(n), *want = dalloc(t), *dwant = dalloc(t);
        test_fill_uniform(r, x, t, -4, 4);
        test_fill_uniform(r, dy, t, -1, 1);
        for (int lg = 0; lg < 2; lg++) {
            for (int64_t i = 0; i < rows; i++) {
                for (int64_t j = 0; j < n; j++) xd[j] = x[i * n + j];
                ref_softmax(want + i * n, xd, n);
                double sdy = 0, sdyy = 0;
                for (int64_t j = 0; j < n; j++) {
                    sdy += dy[i * n + j];
                    sdyy += dy[i * n + j] * want[i * n + j];
                }
                for (int64_t j = 0; j < n; j++) {
                    double p = want[i * n + j], g = dy[i * n + j];
                    dwant[i * n + j] = lg ? g - p * sdy : p * (g - sdyy);
                    if (lg) want[i * n + j] = log(p);
                }
            }
            char what[80];
            snprintf(what, sizeof what, "%s (%lld, %lld)", lg ? "log_softmax" : "softmax",
                     (long long)rows, (long long)n);
            if (lg) {
                hx_k_log_softmax_forward_f32(y1, x, rows, n, 1);
                hx_k_log_softmax_forward_f32(y2, x, rows, n, 2);
            } else {
                hx_k_softmax_forward_f32(y1, x, rows, n, 1);
                hx_k_softmax_forward_f32(y2, x, rows, n, 2);
            }
            test_close_f32(what, y1, want, t, 1e-5, 1e-6);
            CHECK(same_bits(y1, y2, (size_t)t * 4), "%s: 1 vs 2 threads", what);
            if (lg) {
                hx_k_log_softmax_backward_f32(dx1, dy, y1, rows, n, 1);
                hx_k_log_softmax_backward_f32(dx2, dy, y1, rows, n, 2);
            } else {
                hx_k_softmax_backward_f32(dx1, dy, y1, rows, n, 1);
                hx_k_softmax_backward_f32(dx2, dy, y1, rows, n, 2);
            }
            snprintf(what, sizeof what, "%s backward (%lld, %lld)", lg ? "log_softmax" : "softmax",
                     (long long)rows, (long long)n);
            test_close_f32(what, dx1, dwant, t, 1e-4, 1e-6);
            CHECK(same_bits(dx1, dx2, (size_t)t * 4), "%s: 1 vs 2 threads", what);
            row_ctx ctx = {.log = lg};
            fd_check_rows(what, ref_softmax_loss, x, dx1, dy, rows, n, ctx, r);
        }
        free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(xd), free(want),
            free(dwant);
    }
}

// xhat (n) = (x - mean) / sqrt(var + eps), biased var
static void ref_layernorm_xhat(double *xhat, const double *x, double eps, int64_t n)
{
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    double rstd = 1.0 / sqrt(var / (double)n + eps);
    for (int64_t i = 0; i < n; i++) xhat[i] = (x[i] - mean) * rstd;
}

/* sum(dy * layernorm(x)) for one row, as a function of x */
static double ref_layernorm_loss(const double *x, int64_t n, const void *vctx)
{
    const row_ctx *c = vctx;
    double *xhat = dalloc(n), L = 0;
    ref_layernorm_xhat(xhat, x, c->eps, n);
    for (int64_t i = 0; i < n; i++) L += c->dy[i] * (xhat[i] * c->gamma[i] + c->beta[i]);
    free(xhat);
    return L;
}

/* sum over all rows of dy * layernorm(x), as a function of gamma */
typedef struct gamma_ctx {
    const float *x, *dy, *beta;
    int64_t rows;
    float eps;
} gamma_ctx;

static double ref_layernorm_gamma_loss(const double *gamma, int64_t n, const void *vctx)
{
    const gamma_ctx *c = vctx;
    double *xd = dalloc(n), *xhat = dalloc(n), L = 0;
    for (int64_t r = 0; r < c->rows; r++) {
        for (int64_t j = 0; j < n; j++) xd[j] = c->x[r * n + j];
        ref_layernorm_xhat(xhat, xd, c->eps, n);
        for (int64_t j = 0; j < n; j++) L += c->dy[r * n + j] * (xhat[j] * gamma[j] + c->beta[j]);
    }
    free(xd), free(xhat);
    return L;
}

static void test_layernorm(test_rng *r)
{
    const float eps = 1e-5f;
    for (int k = 0; k < NROW_SHAPES; k++) {
        int64_t rows = ROW_SHAPES[k][0], n = ROW_SHAPES[k][1], t = rows * n;
        float *x = falloc(t), *dy = falloc(t), *gamma = falloc(n), *beta = falloc(n);
        float *y1 = falloc(t), *y2 = falloc(t), *dx1 = falloc(t), *dx2 = falloc(t);
        float *dg1 = falloc(n), *dg2 = falloc(n);
        double *xd = dalloc(n), *want = dalloc(t), *dgwant = dalloc(n), *gd = dalloc(n);
        test_fill_uniform(r, x, t, -2, 3);
        test_fill_uniform(r, dy, t, -1, 1);
        test_fill_uniform(r, gamma, n, 0.5, 1.5);
        test_fill_uniform(r, beta, n, -0.5, 0.5);
        for (int64_t i = 0; i < rows; i++) {
            for (int64_t j = 0; j < n; j++) xd[j] = x[i * n + j];
            ref_layernorm_xhat(want + i * n, xd, eps, n);
            for (int64_t j = 0; j < n; j++) want[i * n + j] = want[i * n + j] * gamma[j] + beta[j];
        }
        char what[80];
        snprintf(what, sizeof what, "layernorm (%lld, %lld)", (long long)rows, (long long)n);
        hx_k_layernorm_forward_f32(y1, x, gamma, beta, eps, rows, n, 1);
        hx_k_layernorm_forward_f32(y2, x, gamma, beta, eps, rows, n, 2);
        test_close_f32(what, y1, want, t, 1e-4, 1e-5);
        CHECK(same_bits(y1, y2, (size_t)t * 4), "%s: 1 vs 2 threads", what);

        hx_k_layernorm_backward_x_f32(dx1, dy, x, gamma, eps, rows, n, 1);
        hx_k_layernorm_backward_x_f32(dx2, dy, x, gamma, eps, rows, n, 2);
        snprintf(what, sizeof what, "layernorm backward_x (%lld, %lld)", (long long)rows,
                 (long long)n);
        CHECK(same_bits(dx1, dx2, (size_t)t * 4), "%s: 1 vs 2 threads", what);
        row_ctx ctx = {.gamma = gamma, .beta = beta, .eps = eps};
        if (n > 1) fd_check_rows(what, ref_layernorm_loss, x, dx1, dy, rows, n, ctx, r);

        hx_k_layernorm_backward_gamma_f32(dg1, dy, x, eps, rows, n, 1);
        hx_k_layernorm_backward_gamma_f32(dg2, dy, x, eps, rows, n, 2);
        snprintf(what, sizeof what, "layernorm backward_gamma (%lld, %lld)", (long long)rows,
                 (long long)n);
        CHECK(same_bits(dg1, dg2, (size_t)n * 4), "%s: 1 vs 2 threads", what);
        gamma_ctx gctx = {x, dy, beta, rows, eps};
        for (int64_t j = 0; j < n; j++) gd[j] = gamma[j];
        int64_t m = n < 8 ? n : 8;
        for (int64_t j = 0; j < m; j++) dgwant[j] = fd_grad(ref_layernorm_gamma_loss, gd, n, j, &gctx);
        check_fd(what, dg1, dgwant, m, 1e-6);
        free(x), free(dy), free(gamma), free(beta), free(y1), free(y2), free(dx1), free(dx2);
        free(dg1), free(dg2), free(xd), free(want), free(dgwant), free(gd);
    }
}

/* The fused residual add + layernorm (hx_k_add_layernorm_f32): the sum and
 * the layernorm bitwise hx_k_binary_f32's add then
 * hx_k_layernorm_forward_f32, at 1 to 3 threads, on one row, a few, and
 * more than the parallel threshold; also with the sum written over x (the
 * kernel allows it). The layernorm's own double reference and finite
 * differences are test_layernorm's. */
static void test_add_layernorm(test_rng *r)
{
    static const int64_t shapes[][2] = {{1, 7}, {5, 40}, {2048, 128}, {33, 1}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int64_t rows = shapes[c][0], n = shapes[c][1], total = rows * n;
        float *x = falloc(total), *res = falloc(total), *gamma = falloc(n), *beta = falloc(n);
        float *s_want = falloc(total), *y_want = falloc(total), *s = falloc(total),
              *y = falloc(total);
        test_fill_uniform(r, x, total, -3, 3);
        test_fill_uniform(r, res, total, -3, 3);
        test_fill_uniform(r, gamma, n, 0.5, 1.5);
        test_fill_uniform(r, beta, n, -1, 1);
        int64_t shape[2] = {rows, n}, st[2] = {n, 1};
        hx_k_binary_f32(HX_BINARY_ADD, s_want, x, st, res, st, shape, 2, 1);
        hx_k_layernorm_forward_f32(y_want, s_want, gamma, beta, 1e-5f, rows, n, 1);
        for (int nt = 1; nt <= 4; nt++) {
            float *sum = s, *xin = x;
            if (nt == 4) { /* the sum over x: a copy of x, overwritten */
                memcpy(s, x, (size_t)total * sizeof *s);
                xin = s;
            }
            if (nt < 4) test_fill_uniform(r, s, total, -9, 9);
            test_fill_uniform(r, y, total, -9, 9);
            hx_k_add_layernorm_f32(sum, y, xin, res, gamma, beta, 1e-5f, rows, n,
                                   nt < 4 ? nt : 2);
            CHECK(same_bits(s, s_want, (size_t)total * 4) && same_bits(y, y_want, (size_t)total * 4),
                  "add_layernorm (%lld, %lld) %s %d threads: sum %s, layernorm %s", (long long)rows,
                  (long long)n, nt == 4 ? "sum over x," : "", nt < 4 ? nt : 2,
                  same_bits(s, s_want, (size_t)total * 4) ? "bitwise" : "differs",
                  same_bits(y, y_want, (size_t)total * 4) ? "bitwise" : "differs");
        }
        free(x), free(res), free(gamma), free(beta), free(s_want), free(y_want), free(s), free(y);
    }
}

/* hx_k_add_layernorm_half in bf16 and f16: the sum and the output bitwise
 * the 16-bit chain run op by op as the CPU backend runs it (inputs widened
 * with hx_k_cast, hx_k_binary_f32's add rounded to the dtype, the rounded
 * sum widened, hx_k_layernorm_forward_f32, rounded), at 1 to 3 threads and
 * with the sum written over x, on the shapes of test_add_layernorm (large
 * values too, where rounding the sum before the layernorm matters). */
static void test_add_layernorm_half(test_rng *r)
{
    static const int64_t shapes[][2] = {{1, 7}, {5, 40}, {2048, 128}, {33, 1}};
    for (int h = 0; h < 2; h++) {
        hx_kdtype dt = h ? HX_K_F16 : HX_K_BF16;
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
            int64_t rows = shapes[c][0], n = shapes[c][1], total = rows * n;
            float *xf = falloc(total), *rf = falloc(total), *gf = falloc(n), *bf = falloc(n);
            float *sf = falloc(total), *yf = falloc(total);
            uint16_t *x = malloc((size_t)total * 2), *res = malloc((size_t)total * 2);
            uint16_t *gamma = malloc((size_t)n * 2), *beta = malloc((size_t)n * 2);
            uint16_t *s_want = malloc((size_t)total * 2), *y_want = malloc((size_t)total * 2);
            uint16_t *s = malloc((size_t)total * 2), *y = malloc((size_t)total * 2);
            test_fill_uniform(r, xf, total, -300, 300);
            test_fill_uniform(r, rf, total, -3, 3);
            test_fill_uniform(r, gf, n, 0.5, 1.5);
            test_fill_uniform(r, bf, n, -1, 1);
            hx_k_cast(x, dt, xf, HX_K_F32, total, 1);
            hx_k_cast(res, dt, rf, HX_K_F32, total, 1);
            hx_k_cast(gamma, dt, gf, HX_K_F32, n, 1);
            hx_k_cast(beta, dt, bf, HX_K_F32, n, 1);
            /* the chain: widen, add, round; widen, layernorm, round */
            hx_k_cast(xf, HX_K_F32, x, dt, total, 1);
            hx_k_cast(rf, HX_K_F32, res, dt, total, 1);
            hx_k_cast(gf, HX_K_F32, gamma, dt, n, 1);
            hx_k_cast(bf, HX_K_F32, beta, dt, n, 1);
            int64_t shape[2] = {rows, n}, st[2] = {n, 1};
            hx_k_binary_f32(HX_BINARY_ADD, sf, xf, st, rf, st, shape, 2, 1);
            hx_k_cast(s_want, dt, sf, HX_K_F32, total, 1);
            hx_k_cast(sf, HX_K_F32, s_want, dt, total, 1);
            hx_k_layernorm_forward_f32(yf, sf, gf, bf, 1e-5f, rows, n, 1);
            hx_k_cast(y_want, dt, yf, HX_K_F32, total, 1);
            for (int nt = 1; nt <= 4; nt++) {
                uint16_t *sum = s, *xin = x;
                if (nt == 4) { /* the sum over x: a copy of x, overwritten */
                    memcpy(s, x, (size_t)total * 2);
                    xin = s;
                } else
                    memset(s, 0x5a, (size_t)total * 2);
                memset(y, 0xa5, (size_t)total * 2);
                int rc = hx_k_add_layernorm_half(sum, y, xin, res, gamma, beta, dt, 1e-5f, rows,
                                                 n, nt < 4 ? nt : 2);
                int ss = same_bits(s, s_want, (size_t)total * 2),
                     sy = same_bits(y, y_want, (size_t)total * 2);
                CHECK(rc == 0 && ss && sy,
                      "add_layernorm_half %s (%lld, %lld) %s %d threads: rc %d, sum %s, "
                      "layernorm %s", dt == HX_K_F16 ? "f16" : "bf16", (long long)rows,
                      (long long)n, nt == 4 ? "sum over x," : "", nt < 4 ? nt : 2, rc,
                      ss ? "bitwise" : "differs", sy ? "bitwise" : "differs");
            }
            free(xf), free(rf), free(gf), free(bf), free(sf), free(yf), free(x), free(res);
            free(gamma), free(beta), free(s_want), free(y_want), free(s), free(y);
        }
    }
}

/* ====================================================================== */
/* reduce_sum, copy_strided                                                 */

static void check_reduce(test_rng *r, const int64_t *shape, int ndim, const uint8_t *reduce)
{
    int64_t total = 1, out_total = 1;
    for (int d = 0; d < ndim; d++) {
        total *= shape[d];
        if (!reduce[d]) out_total *= shape[d];
    }
    float *x = falloc(total), *o1 = falloc(out_total), *o2 = falloc(out_total);
    double *want = dalloc(out_total), *abssum = dalloc(out_total);
    test_fill_uniform(r, x, total, -1, 1);
    for (int64_t o = 0; o < out_total; o++) want[o] = abssum[o] = 0;
    int64_t idx[HX_K_MAX_DIMS] = {0};
    for (int64_t i = 0; i < total; i++) {
        int64_t o = 0;
        for (int d = 0; d < ndim; d++)
            if (!reduce[d]) o = o * shape[d] + idx[d];
        want[o] += x[i];
        abssum[o] += fabs(x[i]);
        for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
    hx_k_reduce_sum_f32(o1, x, shape, ndim, reduce, 1);
    hx_k_reduce_sum_f32(o2, x, shape, ndim, reduce, 2);
    char what[96] = "reduce_sum shape", *p = what + strlen(what);
    for (int d = 0; d < ndim; d++)
        p += snprintf(p, (size_t)(what + sizeof what - p), " %lld%s", (long long)shape[d],
                      reduce[d] ? "r" : "");
    int64_t bad = -1;
    for (int64_t o = 0; o < out_total && bad < 0; o++)
        if (!(fabs(o1[o] - want[o]) <= 1e-6 * abssum[o] + 1e-7)) bad = o;
    CHECK(bad < 0, "%s: out %lld got %.9g want %.9g", what, (long long)bad,
          bad < 0 ? 0.0 : (double)o1[bad], bad < 0 ? 0.0 : want[bad]);
    CHECK(same_bits(o1, o2, (size_t)out_total * 4), "%s: 1 vs 2 threads", what);
    free(x), free(o1), free(o2), free(want), free(abssum);
}

static void test_reduce(test_rng *r)
{
    for (int k = 0; k < NSIZES; k++) {
        const uint8_t all = 1;
        check_reduce(r, &SIZES[k], 1, &all);
    }
    const int64_t big1[1] = {300007};
    const uint8_t all1[1] = {1};
    check_reduce(r, big1, 1, all1);
    const int64_t s2[2] = {3, 17}, b2[2] = {300, 201};
    const uint8_t m2[3][2] = {{1, 0}, {0, 1}, {1, 1}};
    for (int k = 0; k < 3; k++) {
        check_reduce(r, s2, 2, m2[k]);
        check_reduce(r, b2, 2, m2[k]);
    }
    const int64_t s3[3] = {4, 5, 6}, b3[3] = {20, 40, 57};
    const uint8_t m3[5][3] = {{0, 1, 0}, {1, 0, 1}, {0, 0, 0}, {1, 1, 0}, {0, 1, 1}};
    for (int k = 0; k < 5; k++) {
        check_reduce(r, s3, 3, m3[k]);
        check_reduce(r, b3, 3, m3[k]);
    }
    const int64_t s4[4] = {2, 1, 3, 1};
    const uint8_t m4[3][4] = {{0, 1, 1, 0}, {1, 1, 0, 1}, {1, 0, 1, 0}};
    for (int k = 0; k < 3; k++) check_reduce(r, s4, 4, m4[k]);
    const int64_t s5[5] = {3, 4, 2, 5, 7};
    const uint8_t m5[5] = {1, 0, 1, 0, 1};
    check_reduce(r, s5, 5, m5);
    /* a reduced dim of size 0 sums nothing; a kept one leaves nothing */
    const int64_t z[2] = {4, 0};
    const uint8_t zr[2] = {0, 1};
    float out[4] = {1, 1, 1, 1};
    hx_k_reduce_sum_f32(out, NULL, z, 2, zr, 1);
    CHECK(out[0] == 0 && out[3] == 0, "reduce over an empty dim gives zeros");
}

/* Copies with every element size; the reference walks the index directly. */
static void check_copy(test_rng *r, const char *what, const int64_t *shape, int ndim,
                       const int64_t *os, int64_t olen, const int64_t *xs, int64_t xlen)
{
    static const size_t sizes[] = {1, 2, 3, 4, 8, 16};
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) total *= shape[d];
    for (int s = 0; s < 6; s++) {
        size_t es = sizes[s];
        unsigned char *x = malloc((size_t)xlen * es), *o1 = malloc((size_t)olen * es);
        unsigned char *o2 = malloc((size_t)olen * es), *want = malloc((size_t)olen * es);
        for (int64_t i = 0; i < xlen * (int64_t)es; i++) x[i] = (unsigned char)test_rng_u64(r);
        for (int64_t i = 0; i < olen * (int64_t)es; i++) o1[i] = o2[i] = want[i] = 0xAB;
        int64_t idx[HX_K_MAX_DIMS] = {0};
        for (int64_t i = 0; i < total; i++) {
            int64_t oo = 0, xo = 0;
            for (int d = 0; d < ndim; d++) {
                oo += idx[d] * os[d];
                xo += idx[d] * xs[d];
            }
            memcpy(want + oo * (int64_t)es, x + xo * (int64_t)es, es);
            for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
        }
        hx_k_copy_strided(o1, os, x, xs, shape, ndim, es, 1);
        hx_k_copy_strided(o2, os, x, xs, shape, ndim, es, 2);
        CHECK(same_bits(o1, want, (size_t)olen * es), "copy %s elem %zu", what, es);
        CHECK(same_bits(o2, want, (size_t)olen * es), "copy %s elem %zu, 2 threads", what, es);
        free(x), free(o1), free(o2), free(want);
    }
}

static void test_copy(test_rng *r)
{
    for (int k = 0; k < NSIZES; k++) {
        int64_t n = SIZES[k], one = 1;
        check_copy(r, "contiguous", &n, 1, &one, n, &one, n);
    }
    /* transpose (300, 137) -> (137, 300) */
    const int64_t ts[2] = {137, 300}, tos[2] = {300, 1}, txs[2] = {1, 137};
    check_copy(r, "transpose", ts, 2, tos, 300 * 137, txs, 300 * 137);
    /* permute (a, b, c) -> (c, a, b) */
    const int64_t ps[3] = {9, 5, 7}, pos[3] = {35, 7, 1}, pxs[3] = {1, 63, 9};
    check_copy(r, "permute", ps, 3, pos, 315, pxs, 315);
    /* broadcast a row to (200, 211) */
    const int64_t bs[2] = {200, 211}, bos[2] = {211, 1}, bxs[2] = {0, 1};
    check_copy(r, "broadcast", bs, 2, bos, 200 * 211, bxs, 211);
    /* slice columns 3..13 of a (17, 20) tensor */
    const int64_t ss[2] = {17, 10}, sos[2] = {10, 1}, sxs[2] = {20, 1};
    check_copy(r, "slice", ss, 2, sos, 170, sxs, 340);
    /* concat: write (6, 5) into columns of a (6, 12) output */
    const int64_t cs[2] = {6, 5}, cos_[2] = {12, 1}, cxs[2] = {5, 1};
    check_copy(r, "concat", cs, 2, cos_, 72, cxs, 30);
    const int64_t one4[4] = {1, 1, 1, 1}, z4[4] = {0, 0, 0, 0};
    check_copy(r, "single element", one4, 4, z4, 1, z4, 1);
}

/* ====================================================================== */
/* cast                                                                     */

/* Values of 16-bit float formats, decoded independently of the kernels. */
static long double f16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    long double v = e == 0 ? ldexpl(m, -24) : ldexpl(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

static long double bf16_value(uint16_t h)
{
    int e = (h >> 7) & 255, m = h & 127;
    long double v = e == 0 ? ldexpl(m, -133) : ldexpl(128 + m, e - 134);
    return h & 0x8000 ? -v : v;
}

typedef long double (*value_fn)(uint16_t);

/* Nearest value of the format to v (finite, not NaN), ties to the even bit
 * pattern; beyond the largest finite value plus half its ulp: inf. */
static uint16_t ref_round16(long double v, value_fn val, uint16_t maxb, uint16_t infb)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    long double a = fabsl(v);
    if (isinf(a)) return sign | infb;
    long double over = val(maxb) + (val(maxb) - val(maxb - 1)) / 2;
    if (a >= over) return sign | infb;
    if (a >= val(maxb)) return sign | maxb;
    uint16_t lo = 0, hi = maxb; /* val(lo) <= a < val(hi) */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (val(mid) <= a) lo = mid;
        else hi = mid;
    }
    long double half = (val(lo) + val(hi)) / 2;
    uint16_t q = a < half ? lo : a > half ? hi : (lo & 1 ? hi : lo);
    return sign | q;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A source element decoded for the reference: a value, or a NaN with a sign. */
typedef struct refval {
    long double v;
    int nan, neg;
} refval;

static refval ref_decode(const void *x, hx_kdtype dt, int64_t i)
{
    refval r = {0, 0, 0};
    uint16_t h;
    switch (dt) {
    case HX_K_F32: {
        float f = ((const float *)x)[i];
        r.nan = isnan(f), r.neg = signbit(f) != 0, r.v = f;
        break;
    }
    case HX_K_F16:
        h = ((const uint16_t *)x)[i];
        r.neg = h >> 15;
        if ((h & 0x7C00) == 0x7C00) {
            r.nan = (h & 0x3FF) != 0;
            r.v = r.neg ? -INFINITY : INFINITY;
        } else r.v = f16_value(h);
        break;
    case HX_K_BF16:
        h = ((const uint16_t *)x)[i];
        r.neg = h >> 15;
        if ((h & 0x7F80) == 0x7F80) {
            r.nan = (h & 0x7F) != 0;
            r.v = r.neg ? -INFINITY : INFINITY;
        } else r.v = bf16_value(h);
        break;
    case HX_K_I32: r.v = ((const int32_t *)x)[i]; break;
    case HX_K_I64: r.v = ((const int64_t *)x)[i]; break;
    }
    return r;
}

static int64_t ref_to_int(refval r, long double lo, long double hi)
{
    if (r.nan) return 0;
    if (r.v >= hi + 1) return (int64_t)hi;
    if (r.v <= lo - 1) return (int64_t)lo;
    return (int64_t)truncl(r.v);
}

/* Checks element i of y (ydt) against the reference conversion of r. */
static int ref_check(const void *y, hx_kdtype ydt, int64_t i, refval r)
{
    switch (ydt) {
    case HX_K_F32: {
        uint32_t u = fbits(((const float *)y)[i]);
        if (r.nan) return (u & 0x7FC00000) == 0x7FC00000 && (u >> 31) == (uint32_t)r.neg;
        return u == fbits((float)r.v);
    }
    case HX_K_F16: {
        uint16_t h = ((const uint16_t *)y)[i];
        if (r.nan) return (h & 0x7E00) == 0x7E00 && (h >> 15) == r.neg;
        return h == ref_round16(r.v, f16_value, 0x7BFF, 0x7C00);
    }
    case HX_K_BF16: {
        uint16_t h = ((const uint16_t *)y)[i];
        if (r.nan) return (h & 0x7FC0) == 0x7FC0 && (h >> 15) == r.neg;
        return h == ref_round16(r.v, bf16_value, 0x7F7F, 0x7F80);
    }
    case HX_K_I32: return ((const int32_t *)y)[i] == ref_to_int(r, INT32_MIN, INT32_MAX);
    case HX_K_I64: {
        /* INT64_MAX + 1 is exact in long double, so the saturation bound is too. */
        return ((const int64_t *)y)[i] == ref_to_int(r, -0x1p63L, 0x1p63L - 1);
    }
    }
    return 0;
}

static const char *DT_NAMES[] = {"f32", "f16", "bf16", "i32", "i64"};

/* Source data of each type: edge values first, then random patterns. */
static void *cast_source(test_rng *r, hx_kdtype dt, int64_t n)
{
    void *x = malloc((size_t)n * hx_k_dtype_size(dt));
    int64_t k = 0;
    if (dt == HX_K_F32) {
        float *f = x;
        static const uint32_t edge[] = {
            0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
            0xFF800001, 0x7FBFFFFF, 0x7F802000, 0x7FFFE000, 0x00000001, 0x80000001, 0x007FFFFF,
            0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x477FE000, 0x477FEFFF, 0x477FF000, 0xC77FF000,
            0x47800000, 0x38800000, 0x387FFFFF, 0x387FE000, 0x33000000, 0x33000001, 0x32FFFFFF,
            0x33800000, 0x33C00000, 0x34000000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,
            0x3F801000, 0x3F803000, 0x3F801001, 0x7F7F8000, 0x7F7F7FFF, 0x00008000, 0x00018000,
            0x3F800000, 0xBF800000, 0x4F000000, 0xCF000000, 0x5F000000, 0xDF000000, 0x4EFFFFFF,
            0x5EFFFFFF, 0x4F800000};
        for (; k < (int64_t)(sizeof edge / sizeof edge[0]); k++) f[k] = bitsf(edge[k]);
        /* midpoints between neighbouring f16 values (exact in f32) and one ulp around them */
        for (uint32_t h = 1; h < 0x7BFF && k + 3 <= n / 2; h += 97) {
            float mid = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2);
            f[k++] = mid;
            f[k++] = nextafterf(mid, 0.0f);
            f[k++] = -nextafterf(mid, INFINITY);
        }
        for (uint32_t h = 1; h < 0x7F7F && k + 3 <= n / 2; h += 61) {
            float mid = (float)((bf16_value((uint16_t)h) + bf16_value((uint16_t)(h + 1))) / 2);
            f[k++] = mid;
            f[k++] = nextafterf(mid, 0.0f);
            f[k++] = -nextafterf(mid, INFINITY);
        }
        for (; k < n; k++) f[k] = k % 2 ? bitsf((uint32_t)test_rng_u64(r))
                                          : (float)(test_rng_normal(r) * 1000.0);
    } else if (dt == HX_K_F16 || dt == HX_K_BF16) {
        uint16_t *h = x;
        for (; k < n; k++) h[k] = (uint16_t)k; /* every pattern, then again */
    } else {
        static const int64_t edge[] = {0, 1, -1, 255, 257, 259, -257, 65504, 65519, 65520, 65535,
                                       -65520, 16777217, 16777219, 33554435, INT32_MAX, INT32_MIN,
                                       INT32_MAX - 64, 2147483584, 0x7FFFFF7FFFFFFFFF,
                                       INT64_MAX, INT64_MIN, -0x0080800000000000};
        int ne = (int)(sizeof edge / sizeof edge[0]);
        for (; k < ne; k++) {
            if (dt == HX_K_I32) ((int32_t *)x)[k] = (int32_t)(edge[k] > INT32_MAX   ? INT32_MAX
                                                              : edge[k] < INT32_MIN ? INT32_MIN
                                                                                    : edge[k]);
            else ((int64_t *)x)[k] = edge[k];
        }
        for (; k < n; k++) {
            uint64_t u = test_rng_u64(r), m = u >> (u & 63);
            int64_t v = (int64_t)(u & 64 ? 0 - m : m);
            if (dt == HX_K_I32) ((int32_t *)x)[k] = (int32_t)(uint32_t)v;
            else ((int64_t *)x)[k] = v;
        }
    }
    return x;
}

static void test_casts(test_rng *r)
{
    const int64_t n = 70001; /* above HX_K_PARALLEL_MIN; 16-bit sources cover all patterns */
    for (int xdt = HX_K_F32; xdt <= HX_K_I64; xdt++) {
        void *x = cast_source(r, (hx_kdtype)xdt, n);
        for (int ydt = HX_K_F32; ydt <= HX_K_I64; ydt++) {
            size_t ys = hx_k_dtype_size((hx_kdtype)ydt);
            void *y1 = malloc((size_t)n * ys), *y2 = malloc((size_t)n * ys);
            hx_k_cast(y1, (hx_kdtype)ydt, x, (hx_kdtype)xdt, n, 1);
            hx_k_cast(y2, (hx_kdtype)ydt, x, (hx_kdtype)xdt, n, 2);
            int64_t bad = -1;
            if (xdt == ydt) bad = same_bits(y1, x, (size_t)n * ys) ? -1 : 0; /* a copy */
            for (int64_t i = 0; i < n && bad < 0 && xdt != ydt; i++)
                if (!ref_check(y1, (hx_kdtype)ydt, i, ref_decode(x, (hx_kdtype)xdt, i))) bad = i;
            CHECK(bad < 0, "cast %s -> %s (isa %s): element %lld wrong", DT_NAMES[xdt],
                  DT_NAMES[ydt], hx_k_isa_name(hx_k_isa()), (long long)bad);
            CHECK(same_bits(y1, y2, (size_t)n * ys), "cast %s -> %s: 1 vs 2 threads",
                  DT_NAMES[xdt], DT_NAMES[ydt]);
            /* a short cast (tails only) gives the same bits as the long one */
            hx_k_cast(y2, (hx_kdtype)ydt, x, (hx_kdtype)xdt, 7, 1);
            CHECK(same_bits(y1, y2, 7 * ys), "cast %s -> %s: n=7", DT_NAMES[xdt], DT_NAMES[ydt]);
            free(y1), free(y2);
        }
        free(x);
    }
    /* hx__round_through (the fused GEMM's epilogue): bitwise the cast to
     * f16 / bf16 and back, tails included */
    float *x = cast_source(r, HX_K_F32, n), *back = falloc(n), *got = falloc(n);
    uint16_t *half = malloc((size_t)n * sizeof *half);
    for (int d = 0; d < 2; d++) {
        hx_kdtype dt = d ? HX_K_BF16 : HX_K_F16;
        hx_k_cast(half, dt, x, HX_K_F32, n, 1);
        hx_k_cast(back, HX_K_F32, half, dt, n, 1);
        memcpy(got, x, (size_t)n * sizeof *got);
        hx__round_through(got, dt, n);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (memcmp(&got[i], &back[i], sizeof *got)) bad = i;
        CHECK(bad < 0, "round_through %s (isa %s): element %lld (0x%08x) gives 0x%08x, the "
              "casts 0x%08x", DT_NAMES[dt], hx_k_isa_name(hx_k_isa()), (long long)bad,
              bad < 0 ? 0 : fbits(x[bad]), bad < 0 ? 0 : fbits(got[bad]),
              bad < 0 ? 0 : fbits(back[bad]));
    }
    free(x), free(back), free(got), free(half);
    /* the documented NaN payloads */
    float nan_in[2] = {bitsf(0x7F800001), bitsf(0xFFA12345)};
    uint16_t h[2];
    hx_k_cast(h, HX_K_F16, nan_in, HX_K_F32, 2, 1);
    CHECK(h[0] == 0x7E00 && h[1] == 0xFF09, "f32 -> f16 NaN: %04x %04x", h[0], h[1]);
    hx_k_cast(h, HX_K_BF16, nan_in, HX_K_F32, 2, 1);
    CHECK(h[0] == 0x7FC0 && h[1] == 0xFFE1, "f32 -> bf16 NaN: %04x %04x", h[0], h[1]);
}

/* The gradient scan's sum of squares: a double reference over the values
 * as stored (f32, f16, bf16), several blocks, the same bits at 1 and 2
 * threads, and Inf/NaN anywhere makes it non-finite. */
static void test_sumsq(test_rng *r)
{
    static const char *names[] = {"f32", "f16", "bf16"};
    static const int64_t sizes[] = {0, 1, 17, 4096, 65536, 65537, 300001};
    for (int d = 0; d < 3; d++) {
        hx_kdtype dt = d == 0 ? HX_K_F32 : d == 1 ? HX_K_F16 : HX_K_BF16;
        for (int k = 0; k < 7; k++) {
            int64_t n = sizes[k];
            float *x = malloc(sizeof *x * (n + 1)), *back = malloc(sizeof *back * (n + 1));
            uint16_t *h = malloc(sizeof *h * (n + 1));
            test_fill_uniform(r, x, n, -3, 3);
            const void *v = x;
            if (dt != HX_K_F32) {
                hx_k_cast(h, dt, x, HX_K_F32, n, 1);
                hx_k_cast(back, HX_K_F32, h, dt, n, 1);
                v = h;
            } else {
                memcpy(back, x, sizeof *x * n);
            }
            double want = 0;
            for (int64_t i = 0; i < n; i++) want += (double)back[i] * back[i];
            double one = hx_k_sumsq(v, dt, n, 1), two = hx_k_sumsq(v, dt, n, 2);
            CHECK(fabs(one - want) <= 1e-12 * want, "sumsq %s n %lld: %.17g, reference %.17g",
                  names[d], (long long)n, one, want);
            CHECK(one == two, "sumsq %s n %lld: 1 thread %.17g, 2 threads %.17g",
                  names[d], (long long)n, one, two);
            if (n) {
                int64_t at = n * 3 / 4;
                float bad = k % 2 ? INFINITY : NAN;
                if (dt == HX_K_F32) x[at] = bad;
                else hx_k_cast(h + at, dt, &bad, HX_K_F32, 1, 1);
                CHECK(!isfinite(hx_k_sumsq(v, dt, n, 2)), "sumsq %s n %lld missed a %f",
                      names[d], (long long)n, bad);
            }
            free(x), free(back), free(h);
        }
    }
}

/* Reruns the cast tests in a child with HX_ISA set; must run before this
 * process (or OpenMP) starts anything. */
static void test_casts_per_isa(void)
{
    static const char *isas[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("HX_ISA", isas[k], 1);
            test_rng r = test_rng_make(77);
            CHECK(hx_k_isa() <= (hx_isa)k, "HX_ISA=%s gave %s", isas[k], hx_k_isa_name(hx_k_isa()));
            test_casts(&r);
            printf("cast checks under HX_ISA=%s (running %s): %d failed\n", isas[k],
                   hx_k_isa_name(hx_k_isa()), hx_test_failures);
            fflush(NULL);
            _exit(hx_test_failures ? 1 : 0);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0,
              "cast tests under HX_ISA=%s", isas[k]);
    }
}

/* ====================================================================== */
/* gemm                                                                      */

static void check_gemm(test_rng *r, int ta, int tb, int64_t batch, int64_t M, int64_t N,
                       int64_t K, int reuse_b, float alpha, float beta, int nthreads)
{
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    int64_t sa = (ta ? K : M) * lda, sb = reuse_b ? 0 : (tb ? N : K) * ldb, sc = M * ldc;
    int64_t na = batch * sa + 1, nb = (reuse_b ? 1 : batch) * (tb ? N : K) * ldb + 1, nc = batch * sc;
    float *A = falloc(na), *B = falloc(nb), *C = falloc(nc);
    double *want = dalloc(nc), *bound = dalloc(nc);
    test_fill_uniform(r, A, na, -1, 1);
    test_fill_uniform(r, B, nb, -1, 1);
    test_fill_uniform(r, C, nc, -1, 1);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, sabs = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = A[b * sa + (ta ? k * lda + i : i * lda + k)];
                    double bv = B[b * sb + (tb ? j * ldb + k : k * ldb + j)];
                    s += av * bv;
                    sabs += fabs(av * bv);
                }
                int64_t c = b * sc + i * ldc + j;
                want[c] = alpha * s + (beta == 0 ? 0 : beta * C[c]);
                bound[c] = 1e-5 * (fabs(alpha) * sabs + fabs(beta * C[c])) + 1e-7;
            }
    for (int64_t b = 0; b < batch; b++) /* padding keeps its values */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = N; j < ldc; j++) want[b * sc + i * ldc + j] = C[b * sc + i * ldc + j];
    hx_k_gemm_f32(ta, tb, batch, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, nthreads);
    int64_t bad = -1;
    for (int64_t c = 0; c < nc && bad < 0; c++)
        if (!(fabs(C[c] - want[c]) <= (c % ldc < N ? bound[c] : 0))) bad = c;
    CHECK(bad < 0, "gemm ta=%d tb=%d batch=%lld M=%lld N=%lld K=%lld threads %d: C[%lld] wrong",
          ta, tb, (long long)batch, (long long)M, (long long)N, (long long)K, nthreads,
          (long long)bad);
    free(A), free(B), free(C), free(want), free(bound);
}

/* hx_k_gemm_f32 on the engine set (test_gemm runs each): within the
 * bound of the double reference, transposed or not, alpha and beta of
 * either path, batched, K 0. */
static void test_gemm_on(test_rng *r)
{
    for (int nt = 1; nt <= 2; nt++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_gemm(r, ta, tb, 1, 1, 1, 1, 0, 1.0f, 0.0f, nt);
                check_gemm(r, ta, tb, 3, 7, 17, 5, 1, 0.5f, 1.0f, nt);
                check_gemm(r, ta, tb, 2, 33, 19, 70, 0, -1.0f, 0.25f, nt);
            }
    check_gemm(r, 0, 1, 8, 64, 64, 64, 0, 1.0f, 0.0f, 2); /* one matrix per thread */
    check_gemm(r, 1, 0, 1, 150, 130, 140, 0, 1.0f, 1.0f, 2);
    check_gemm(r, 0, 0, 2, 4, 5, 0, 0, 1.0f, 0.5f, 1); /* K = 0: C = beta * C */
    for (int ta = 0; ta < 2; ta++) /* several tiles, long K, alpha 1, beta 0 */
        check_gemm(r, ta, 1, 1, 200, 530, 300, 0, 1.0f, 0.0f, 3);
}

/* The f32 GEMM (64 x N x K, 1 thread) f32_tile_thread's arg asks for on
 * a new thread: A transposed or not, N, K; out: the threads holding
 * oneDNN state while it ran. */
typedef struct f32_tile_run {
    int ta;
    int64_t N, K;
    int states;
} f32_tile_run;

static void *f32_tile_thread(void *arg)
{
    f32_tile_run *run = arg;
    int64_t N = run->N, K = run->K;
    float *a = falloc(64 * K), *b = falloc(K * N), *c = falloc(64 * N);
    for (int64_t i = 0; i < K * N; i++) b[i] = (float)(i % 64) / 64.0f;
    for (int64_t i = 0; i < 64 * K; i++) a[i] = (float)(i % 32) / 32.0f;
    hx_k_gemm_f32(run->ta, 0, 1, 64, N, K, 1.0f, a, run->ta ? 64 : K, 0, b, N, 0, 0.0f, c, N,
                  0, 1);
    run->states = hx_k_gemm_thread_states();
    free(a), free(b), free(c);
    return NULL;
}

/* Which f32 GEMMs oneDNN runs, under each f32 rule: a tile that goes to
 * oneDNN leaves its thread holding oneDNN state, one that goes to sgemm
 * does not. whole_n: A not transposed, N from 64, N not cut into several
 * column tiles (1040: 3); large: N and K from 64, transposed or not, cut
 * or not. On OPENBLAS none. */
static void check_gemm_f32_route(void)
{
    static const struct { int ta; int64_t N, K; int whole_n, large; } cases[] = {
        {0, 64, 32, 1, 0}, {0, 64, 64, 1, 1}, {1, 64, 64, 0, 1}, {0, 1040, 64, 0, 1},
        {0, 32, 64, 0, 0}, {1, 64, 32, 0, 0}};
    hx_k_gemm_f32_rule rule = hx_k_gemm_get_f32_rule();
    for (int e = HX_K_GEMM_OPENBLAS; e <= HX_K_GEMM_ONEDNN; e++) {
        if ((int)hx_k_gemm_set_engine((hx_k_gemm_engine)e) != e) continue;
        for (int ru = HX_K_GEMM_F32_WHOLE_N; ru <= HX_K_GEMM_F32_LARGE; ru++) {
            hx_k_gemm_set_f32_rule((hx_k_gemm_f32_rule)ru);
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                int before = hx_k_gemm_thread_states();
                f32_tile_run run = {cases[k].ta, cases[k].N, cases[k].K, -1};
                pthread_t th;
                CHECK(pthread_create(&th, NULL, f32_tile_thread, &run) == 0 &&
                          pthread_join(th, NULL) == 0,
                      "gemm f32 route: the thread did not run");
                int dnnl = e == HX_K_GEMM_ONEDNN &&
                           (ru == HX_K_GEMM_F32_LARGE ? cases[k].large : cases[k].whole_n);
                CHECK(run.states == before + dnnl,
                      "gemm f32 route %s %s ta=%d N=%lld K=%lld: %d threads hold oneDNN state "
                      "during the GEMM, %d before (oneDNN %s)",
                      hx_k_gemm_engine_name((hx_k_gemm_engine)e),
                      hx_k_gemm_f32_rule_name((hx_k_gemm_f32_rule)ru), cases[k].ta,
                      (long long)cases[k].N, (long long)cases[k].K, run.states, before,
                      dnnl ? "should run it" : "should not");
            }
        }
    }
    hx_k_gemm_set_f32_rule(rule);
}

/* fn on each engine this build and CPU have, the oneDNN engine under each
 * f32 rule; then the engine and rule as they were. */
static void on_each_gemm_engine(void (*fn)(test_rng *), test_rng *r)
{
    hx_k_gemm_engine engine = hx_k_gemm_get_engine();
    hx_k_gemm_f32_rule rule = hx_k_gemm_get_f32_rule();
    if (hx_k_gemm_set_engine(HX_K_GEMM_OPENBLAS) == HX_K_GEMM_OPENBLAS) fn(r);
    for (int ru = HX_K_GEMM_F32_WHOLE_N;
         hx_k_gemm_set_engine(HX_K_GEMM_ONEDNN) == HX_K_GEMM_ONEDNN && ru <= HX_K_GEMM_F32_LARGE;
         ru++) {
        hx_k_gemm_set_f32_rule((hx_k_gemm_f32_rule)ru);
        fn(r);
    }
    hx_k_gemm_set_f32_rule(rule);
    hx_k_gemm_set_engine(engine);
}

/* hx_k_gemm_f32 on each engine and rule, and which tiles go to oneDNN. */
static void test_gemm(test_rng *r)
{
    hx_k_gemm_engine engine = hx_k_gemm_get_engine();
    on_each_gemm_engine(test_gemm_on, r);
    check_gemm_f32_route();
    hx_k_gemm_set_engine(engine);
}

/* x (n) rounded to dt and back through hx_k_cast (dt F32: unchanged). */
static void round_through(float *x, hx_kdtype dt, int64_t n)
{
    if (dt == HX_K_F32) return;
    uint16_t *h = malloc((size_t)n * sizeof *h);
    hx_k_cast(h, dt, x, HX_K_F32, n, 1);
    hx_k_cast(x, HX_K_F32, h, dt, n, 1);
    free(h);
}

/* The fused GEMM (hx_k_gemm_bias_act_f32): bitwise hx_k_gemm_f32, then
 * hx_k_bias_add_f32, then hx_k_unary_f32, at 1 to 3 threads, on shapes of
 * one tile and of several (128 x 256 tiles: M 300, N 530), transposed or
 * not, batched with a shared B; without activation and with a bias also
 * within the GEMM's bound of the double reference sum + bias. With round
 * f16 or bf16, the chain rounds through that dtype after each of its
 * three ops (what the ops stored in 16 bits do). */
static void check_gemm_fused(test_rng *r, int ta, int tb, int64_t batch, int64_t M, int64_t N,
                             int64_t K, int act, int with_bias, hx_kdtype round)
{
    int64_t lda = ta ? M : K, ldb = tb ? K : N, sa = M * K, sb = 0, nc = batch * M * N;
    float *A = falloc(batch * sa), *B = falloc(K * N), *bias = falloc(N);
    float *chain = falloc(nc), *got = falloc(nc);
    test_fill_uniform(r, A, batch * sa, -1, 1);
    test_fill_uniform(r, B, K * N, -1, 1);
    test_fill_uniform(r, bias, N, -2, 2);
    hx_k_gemm_f32(ta, tb, batch, M, N, K, 1.0f, A, lda, sa, B, ldb, sb, 0.0f, chain, N, M * N, 1);
    round_through(chain, round, nc);
    if (with_bias) hx_k_bias_add_f32(chain, chain, bias, batch * M, N, 1);
    if (with_bias) round_through(chain, round, nc);
    if (act >= 0) hx_k_unary_f32((hx_unary_op)act, chain, chain, nc, 1);
    if (act >= 0) round_through(chain, round, nc);
    for (int nt = 1; nt <= 3; nt++) {
        test_fill_uniform(r, got, nc, -9, 9); /* every element written */
        hx_k_gemm_bias_act_f32(ta, tb, batch, M, N, K, A, lda, sa, B, ldb, sb,
                               with_bias ? bias : NULL, act, round, got, N, M * N, nt);
        int64_t bad = -1;
        for (int64_t c = 0; c < nc && bad < 0; c++)
            if (memcmp(&got[c], &chain[c], sizeof(float))) bad = c;
        CHECK(bad < 0, "gemm_bias_act ta=%d tb=%d batch=%lld M=%lld N=%lld K=%lld act %d bias "
              "%d round %d threads %d: element %lld is %.9g, the chain's %.9g", ta, tb,
              (long long)batch, (long long)M, (long long)N, (long long)K, act, with_bias,
              (int)round, nt, (long long)bad, bad < 0 ? 0.0 : got[bad],
              bad < 0 ? 0.0 : chain[bad]);
    }
    for (int64_t c = 0; act < 0 && round == HX_K_F32 && c < nc; c++) { /* the double reference */
        int64_t b = c / (M * N), i = c / N % M, j = c % N;
        double sum = with_bias ? bias[j] : 0, sabs = fabs(sum);
        for (int64_t k = 0; k < K; k++) {
            double p = (double)A[b * sa + (ta ? k * lda + i : i * lda + k)] *
                       B[tb ? j * ldb + k : k * ldb + j];
            sum += p, sabs += fabs(p);
        }
        if (!(fabs(got[c] - sum) <= 1e-5 * sabs + 1e-7)) {
            CHECK(0, "gemm_bias M=%lld N=%lld K=%lld: element %lld is %.9g, want %.9g",
                  (long long)M, (long long)N, (long long)K, (long long)c, got[c], sum);
            break;
        }
    }
    free(A), free(B), free(bias), free(chain), free(got);
}

/* The fused GEMM's cases on the engine set (test_gemm_fused runs each). */
static void test_gemm_fused_on(test_rng *r)
{
    static const int acts[] = {-1, HX_UNARY_RELU, HX_UNARY_GELU, HX_UNARY_GELU_ERF};
    for (int a = 0; a < 4; a++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_gemm_fused(r, ta, tb, 1, 7, 17, 5, acts[a], 1, HX_K_F32);
                check_gemm_fused(r, ta, tb, 2, 300, 530, 33, acts[a], 1, HX_K_F32);
            }
    check_gemm_fused(r, 0, 0, 3, 40, 96, 64, HX_UNARY_GELU, 0, HX_K_F32); /* no bias */
    check_gemm_fused(r, 0, 1, 1, 129, 257, 0, HX_UNARY_GELU_ERF, 1, HX_K_F32); /* K 0 */
    /* tiles cut evenly (1040 rows as 3 x 352, 770 columns as 4 x 208, the
     * last of each shorter), taken by the threads in any order; K 33 and
     * N 65 are where OpenBLAS's small-matrix kernels give other bits for
     * another cut of the same matrix, so a cut that followed the thread
     * count would show here */
    check_gemm_fused(r, 0, 1, 1, 1040, 770, 24, -1, 1, HX_K_F32);
    check_gemm_fused(r, 0, 0, 1, 300, 530, 33, -1, 1, HX_K_F32);
    check_gemm_fused(r, 0, 0, 1, 1040, 530, 33, -1, 1, HX_K_F32);
    check_gemm_fused(r, 0, 1, 5, 160, 65, 33, -1, 0, HX_K_F32);
    /* a 16-bit chain: each stage rounded (one tile and several) */
    for (int a = 0; a < 4; a++)
        for (int h = 0; h < 2; h++) {
            hx_kdtype dt = h ? HX_K_BF16 : HX_K_F16;
            check_gemm_fused(r, 0, 0, 1, 7, 17, 5, acts[a], 1, dt);
            check_gemm_fused(r, 1, 0, 2, 300, 530, 33, acts[a], 1, dt);
        }
}

static void test_gemm_fused(test_rng *r) { on_each_gemm_engine(test_gemm_fused_on, r); }

/* hx_k_gemm_half into got (nc elements at ldc/sc, padding as in keep, the
 * rows first filled with a pattern: every element must be written). */
static int gemm_half_into(uint16_t *got, const uint16_t *keep, int ta, int tb, int64_t batch,
                          int64_t M, int64_t N, int64_t K, const uint16_t *a16, int64_t lda,
                          int64_t sa, const uint16_t *b16, int64_t ldb, int64_t sb,
                          const uint16_t *bias16, int act, hx_kdtype dt, int64_t ldc, int64_t sc,
                          int nt)
{
    memcpy(got, keep, (size_t)(batch * sc) * 2); /* the padding must stay as it is */
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < M; i++) memset(got + b * sc + i * ldc, 0x5a, (size_t)N * 2);
    return hx_k_gemm_half(ta, tb, batch, M, N, K, a16, lda, sa, b16, ldb, sb, bias16, act, dt,
                          got, ldc, sc, nt);
}

/* The unfused 16-bit chain on a plain product c16 (in place): each row
 * widened, hx_k_bias_add_f32 and hx_k_unary_f32, each rounded through dt. */
static void half_chain(uint16_t *c16, const float *bias, int act, hx_kdtype dt, int64_t rows,
                       int64_t N, int64_t ldc)
{
    float *row = falloc(N);
    for (int64_t i = 0; i < rows; i++) {
        hx_k_cast(row, HX_K_F32, c16 + i * ldc, dt, N, 1);
        if (bias) hx_k_bias_add_f32(row, row, bias, 1, N, 1);
        if (bias) round_through(row, dt, N);
        if (act >= 0) hx_k_unary_f32((hx_unary_op)act, row, row, N, 1);
        if (act >= 0) round_through(row, dt, N);
        hx_k_cast(c16 + i * ldc, dt, row, HX_K_F32, N, 1);
    }
    free(row);
}

/* hx_k_gemm_half on each engine this build and CPU have. OPENBLAS (and
 * ONEDNN where it widens: f16, K 0): bitwise what it replaces (A, B and the
 * bias widened with hx_k_cast, hx_k_gemm_bias_act_f32 on the same engine
 * rounding through dt, C rounded) at 1 to 3 threads (thread ranges that start inside a row
 * panel too). ONEDNN on bf16: bitwise the same at 1 to 3 threads, and with
 * a bias or activation bitwise its own plain product run through the
 * unfused chain (half_chain). Both: leading dimensions wider than the
 * matrices (pad, which must stay as it is), B shared by the batch (stride
 * 0) or one per batch, K 0; the plain product against a double reference
 * of the widened values within the dtype's rounding. */
static void check_gemm_half(test_rng *r, int ta, int tb, int64_t batch, int64_t M, int64_t N,
                            int64_t K, int act, int with_bias, hx_kdtype dt, int b_each,
                            int64_t pad)
{
    int64_t arows = ta ? K : M, acols = (ta ? M : K), brows = tb ? N : K, bcols = tb ? K : N;
    int64_t lda = acols + pad, ldb = bcols + pad, ldc = N + pad, sa = arows * lda;
    int64_t sb = b_each ? brows * ldb : 0, sc = M * ldc, nb = b_each ? batch : 1;
    int64_t na = batch * sa, nbt = nb * brows * ldb, nc = batch * sc;
    float *A = falloc(na), *B = falloc(nbt), *bias = falloc(N), *C = falloc(nc);
    uint16_t *a16 = malloc((size_t)(na > 0 ? na : 1) * 2), *b16 = malloc((size_t)(nbt > 0 ? nbt : 1) * 2);
    uint16_t *bias16 = malloc((size_t)N * 2), *want = malloc((size_t)nc * 2),
             *got = malloc((size_t)nc * 2), *first = malloc((size_t)nc * 2);
    test_fill_uniform(r, A, na, -1, 1);
    test_fill_uniform(r, B, nbt, -1, 1);
    test_fill_uniform(r, bias, N, -2, 2);
    hx_k_cast(a16, dt, A, HX_K_F32, na, 1);
    hx_k_cast(b16, dt, B, HX_K_F32, nbt, 1);
    hx_k_cast(bias16, dt, bias, HX_K_F32, N, 1);
    hx_k_cast(A, HX_K_F32, a16, dt, na, 1); /* the widened values */
    hx_k_cast(B, HX_K_F32, b16, dt, nbt, 1);
    hx_k_cast(bias, HX_K_F32, bias16, dt, N, 1);
    test_fill_uniform(r, C, nc, -9, 9);
    const uint16_t *bias_in = with_bias ? bias16 : NULL;
    float *gf = falloc(nc);
    for (int e = HX_K_GEMM_OPENBLAS; e <= HX_K_GEMM_ONEDNN; e++) {
        if ((int)hx_k_gemm_set_engine((hx_k_gemm_engine)e) != e) continue;
        /* the widened path's reference on the same engine (its f32 tiles) */
        hx_k_gemm_bias_act_f32(ta, tb, batch, M, N, K, A, lda, sa, B, ldb, sb,
                               with_bias ? bias : NULL, act, dt, C, ldc, sc, 1);
        hx_k_cast(want, dt, C, HX_K_F32, nc, 1);
        int native = e == HX_K_GEMM_ONEDNN && dt == HX_K_BF16 && K > 0;
        char what[192];
        snprintf(what, sizeof what, "gemm_half %s %s ta=%d tb=%d batch=%lld M=%lld N=%lld "
                 "K=%lld act %d bias %d B %s pad %lld", hx_k_gemm_engine_name((hx_k_gemm_engine)e),
                 dt == HX_K_BF16 ? "bf16" : "f16", ta, tb, (long long)batch, (long long)M,
                 (long long)N, (long long)K, act, with_bias, b_each ? "each" : "shared",
                 (long long)pad);
        const char *ref = "the widened path's";
        if (native) { /* its own result at 1 thread, or its plain product through the chain */
            int plain = act < 0 && !with_bias;
            int rc = gemm_half_into(first, want, ta, tb, batch, M, N, K, a16, lda, sa, b16, ldb,
                                    sb, plain ? bias_in : NULL, plain ? act : -1, dt, ldc, sc, 1);
            CHECK(rc == 0, "%s: rc %d", what, rc);
            for (int64_t b = 0; !plain && b < batch; b++)
                half_chain(first + b * sc, with_bias ? bias : NULL, act, dt, M, N, ldc);
            ref = plain ? "1 thread's" : "the unfused chain's";
        }
        const uint16_t *expect = native ? first : want;
        for (int nt = 1; nt <= 3; nt++) {
            int rc = gemm_half_into(got, want, ta, tb, batch, M, N, K, a16, lda, sa, b16, ldb, sb,
                                    bias_in, act, dt, ldc, sc, nt);
            int64_t bad = -1;
            for (int64_t c = 0; c < nc && bad < 0; c++)
                if (got[c] != expect[c]) bad = c;
            CHECK(rc == 0 && bad < 0, "%s, %d threads: rc %d, element %lld is 0x%04x, %s 0x%04x",
                  what, nt, rc, (long long)bad, bad < 0 ? 0 : got[bad], ref,
                  bad < 0 ? 0 : expect[bad]);
        }
        hx_k_cast(gf, HX_K_F32, got, dt, nc, 1);
        double u = dt == HX_K_BF16 ? 0x1p-8 : 0x1p-11; /* the dtype's rounding, relative */
        for (int64_t c = 0; act < 0 && !with_bias && c < nc; c++) { /* the double reference */
            int64_t b = c / sc, i = c % sc / ldc, j = c % ldc;
            if (j >= N) continue;
            double sum = 0, sabs = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)A[b * sa + (ta ? k * lda + i : i * lda + k)] *
                           B[(b_each ? b * sb : 0) + (tb ? j * ldb + k : k * ldb + j)];
                sum += p, sabs += fabs(p);
            }
            if (!(fabs(gf[c] - sum) <= u * fabs(sum) + 1e-5 * sabs + 1e-7)) {
                CHECK(0, "%s: element %lld is %.9g, the double reference %.9g", what,
                      (long long)c, gf[c], sum);
                break;
            }
        }
    }
    free(A), free(B), free(bias), free(C), free(a16), free(b16), free(bias16), free(want);
    free(got), free(first), free(gf);
}

/* Denormals on the ONEDNN engine: a denormal bf16 input counts as zero
 * and a denormal sum is flushed to zero (the AMX / AVX512-BF16 dot
 * products), where the widened path keeps both (hx_k_gemm_half's doc). */
static void check_gemm_half_denormals(void)
{
    static const struct { uint16_t a, b; float widened; } cases[] = {
        {0x0001, 0x7180, 0x1p-33f},                 /* 2^-133 (denormal) x 2^100 */
        {(127 - 70) << 7, (127 - 60) << 7, 0x1p-130f}, /* 2^-70 x 2^-60: a denormal sum */
    };
    for (int e = HX_K_GEMM_OPENBLAS; e <= HX_K_GEMM_ONEDNN; e++) {
        if ((int)hx_k_gemm_set_engine((hx_k_gemm_engine)e) != e) continue;
        for (int c = 0; c < 2; c++) {
            uint16_t a[32] = {cases[c].a}, b[32] = {cases[c].b}, y = 0x5a5a;
            float got, want = e == HX_K_GEMM_ONEDNN ? 0.0f : cases[c].widened;
            int rc = hx_k_gemm_half(0, 0, 1, 1, 1, 32, a, 32, 0, b, 1, 0, NULL, -1, HX_K_BF16, &y,
                                    1, 0, 1);
            hx_k_cast(&got, HX_K_F32, &y, HX_K_BF16, 1, 1);
            CHECK(rc == 0 && got == want, "gemm_half %s denormal case %d: %g, want %g",
                  hx_k_gemm_engine_name((hx_k_gemm_engine)e), c, got, want);
        }
    }
}

/* A thread's bf16 tile on the ONEDNN engine, the GEMM's rc in *arg. */
static void *gemm_half_thread(void *arg)
{
    uint16_t a[64 * 32], b[32 * 64], c[64 * 64];
    for (int i = 0; i < 64 * 32; i++) a[i] = b[i] = (uint16_t)(0x3f80 + i % 64);
    *(int *)arg = hx_k_gemm_half(0, 0, 1, 64, 64, 32, a, 32, 0, b, 64, 0, NULL, -1, HX_K_BF16, c,
                                 64, 0, 1);
    return NULL;
}

/* The ONEDNN engine's per-thread state: kept by a thread that ran a tile
 * and freed when it exits, so threads that come and go leave nothing
 * behind. */
static void check_gemm_half_thread_states(void)
{
    if (hx_k_gemm_set_engine(HX_K_GEMM_ONEDNN) != HX_K_GEMM_ONEDNN) return;
    int before = hx_k_gemm_thread_states();
    for (int i = 0; i < 3; i++) {
        pthread_t th;
        int rc = -1;
        CHECK(pthread_create(&th, NULL, gemm_half_thread, &rc) == 0 && pthread_join(th, NULL) == 0,
              "gemm_half thread states: thread %d did not run", i);
        CHECK(rc == 0, "gemm_half thread states: thread %d's GEMM rc %d", i, rc);
        CHECK(hx_k_gemm_thread_states() == before,
              "gemm_half thread states: %d after thread %d exited, %d before it ran",
              hx_k_gemm_thread_states(), i, before);
    }
    int rc = -1;
    gemm_half_thread(&rc);
    CHECK(rc == 0 && hx_k_gemm_thread_states() >= 1,
          "gemm_half thread states: rc %d, %d after a tile on this thread", rc,
          hx_k_gemm_thread_states());
}

static void test_gemm_half(test_rng *r)
{
    static const int acts[] = {-1, HX_UNARY_RELU, HX_UNARY_GELU, HX_UNARY_GELU_ERF};
    hx_k_gemm_engine engine = hx_k_gemm_get_engine();
    for (int h = 0; h < 2; h++) {
        hx_kdtype dt = h ? HX_K_BF16 : HX_K_F16;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_gemm_half(r, ta, tb, 1, 7, 17, 5, -1, 0, dt, 0, 0);
                check_gemm_half(r, ta, tb, 2, 300, 530, 33, -1, 0, dt, 1, 0);
                check_gemm_half(r, ta, tb, 1, 300, 530, 33, -1, 0, dt, 0, 3);
            }
        for (int a = 0; a < 4; a++) {
            check_gemm_half(r, 0, 0, 1, 7, 17, 5, acts[a], 1, dt, 0, 0);
            check_gemm_half(r, 1, 0, 2, 300, 530, 33, acts[a], 1, dt, 0, 0);
        }
        check_gemm_half(r, 0, 1, 3, 40, 96, 64, HX_UNARY_GELU, 0, dt, 1, 2); /* no bias */
        check_gemm_half(r, 0, 0, 1, 129, 257, 0, HX_UNARY_GELU_ERF, 1, dt, 0, 0); /* K 0 */
        check_gemm_half(r, 0, 0, 1, 2048, 512, 128, HX_UNARY_GELU, 1, dt, 0, 0); /* GPT fc */
        check_gemm_half(r, 1, 0, 1, 128, 96, 700, -1, 0, dt, 0, 3); /* a dW: long K */
    }
    /* more tile shapes than oneDNN's primitive cache holds: the rest made per tile */
    for (int64_t m = 1; m <= 300; m++) check_gemm_half(r, m % 2, 0, 1, m, 3, 2, -1, 0, HX_K_BF16, 0, 0);
    check_gemm_half_denormals();
    check_gemm_half_thread_states();
    hx_k_gemm_set_engine(engine);
}

/* ====================================================================== */
/* gather, scatter-add                                                      */

static void *make_ids(test_rng *r, hx_kdtype dt, int64_t n, int64_t rows)
{
    void *ids = malloc((size_t)n * hx_k_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)(test_rng_u64(r) % (uint64_t)rows);
        if (dt == HX_K_I32) ((int32_t *)ids)[i] = (int32_t)v;
        else ((int64_t *)ids)[i] = v;
    }
    return ids;
}

static void set_id(void *ids, hx_kdtype dt, int64_t i, int64_t v)
{
    if (dt == HX_K_I32) ((int32_t *)ids)[i] = (int32_t)v;
    else ((int64_t *)ids)[i] = v;
}

static int64_t get_id(const void *ids, hx_kdtype dt, int64_t i)
{
    return dt == HX_K_I32 ? ((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

static void test_gather_scatter(test_rng *r)
{
    const int64_t cases[][3] = {{1, 1, 1}, {7, 3, 5}, {17, 50, 3}, {1023, 20, 16}, {6000, 900, 16}};
    for (int dt = HX_K_I32; dt <= HX_K_I64; dt++) {
        hx_kdtype idt = (hx_kdtype)dt;
        for (int c = 0; c < 5; c++) {
            int64_t n = cases[c][0], rows = cases[c][1], dim = cases[c][2];
            void *ids = make_ids(r, idt, n, rows);
            float *table = falloc(rows * dim), *out1 = falloc(n * dim), *out2 = falloc(n * dim);
            float *dy = falloc(n * dim), *dt1 = falloc(rows * dim), *dt2 = falloc(rows * dim);
            float *want = falloc(rows * dim);
            test_fill_uniform(r, table, rows * dim, -1, 1);
            test_fill_uniform(r, dy, n * dim, -1, 1);
            int64_t bad = -7;
            int rc1 = hx_k_gather_rows(out1, table, rows, (size_t)dim * 4, ids, idt, n, 1, &bad);
            int rc2 = hx_k_gather_rows(out2, table, rows, (size_t)dim * 4, ids, idt, n, 2, &bad);
            int ok = rc1 == 0 && rc2 == 0 && bad == -7;
            for (int64_t i = 0; i < n && ok; i++)
                ok = same_bits(out1 + i * dim, table + get_id(ids, idt, i) * dim, (size_t)dim * 4) &&
                     same_bits(out2 + i * dim, out1 + i * dim, (size_t)dim * 4);
            CHECK(ok, "gather %s n=%lld rows=%lld", DT_NAMES[dt], (long long)n, (long long)rows);

            /* the scatter reference adds in order of i in float: the same
             * additions in the same order, so bitwise */
            for (int64_t k = 0; k < rows * dim; k++) want[k] = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < dim; j++) want[get_id(ids, idt, i) * dim + j] += dy[i * dim + j];
            rc1 = hx_k_scatter_add_rows_f32(dt1, rows, dim, dy, ids, idt, n, 1, &bad);
            rc2 = hx_k_scatter_add_rows_f32(dt2, rows, dim, dy, ids, idt, n, 2, &bad);
            CHECK(rc1 == 0 && rc2 == 0 && same_bits(dt1, want, (size_t)(rows * dim) * 4) &&
                      same_bits(dt2, want, (size_t)(rows * dim) * 4),
                  "scatter_add %s n=%lld rows=%lld", DT_NAMES[dt], (long long)n, (long long)rows);

            /* bad ids: the first bad position, nothing else */
            if (n >= 7) {
                set_id(ids, idt, 5, rows);
                set_id(ids, idt, 6, -1);
                bad = -7;
                rc1 = hx_k_gather_rows(out1, table, rows, (size_t)dim * 4, ids, idt, n, 2, &bad);
                CHECK(rc1 == -1 && bad == 5, "gather bad id: rc %d bad_pos %lld", rc1, (long long)bad);
                bad = -7;
                rc1 = hx_k_scatter_add_rows_f32(dt1, rows, dim, dy, ids, idt, n, 2, &bad);
                CHECK(rc1 == -1 && bad == 5, "scatter bad id: rc %d bad_pos %lld", rc1,
                      (long long)bad);
                set_id(ids, idt, 5, 0);
                rc1 = hx_k_gather_rows(out1, table, rows, (size_t)dim * 4, ids, idt, n, 1, &bad);
                CHECK(rc1 == -1 && bad == 6, "gather negative id: rc %d bad_pos %lld", rc1,
                      (long long)bad);
            }
            free(ids), free(table), free(out1), free(out2), free(dy), free(dt1), free(dt2), free(want);
        }
    }
    int64_t bad = -7, id = 0;
    float row = 0;
    CHECK(hx_k_gather_rows(&row, &row, 1, 4, &id, HX_K_F32, 1, 1, &bad) == -1 && bad == 0,
          "gather with f32 ids is refused");
}

/* ====================================================================== */
/* causal mask, dropout                                                     */

static void test_mask_dropout(test_rng *r)
{
    const int64_t mcases[][2] = {{1, 1}, {2, 7}, {3, 17}, {3, 120}};
    for (int c = 0; c < 4; c++) {
        int64_t B = mcases[c][0], T = mcases[c][1], t = B * T * T;
        float *x = falloc(t), *y1 = falloc(t), *y2 = falloc(t), *want = falloc(t);
        test_fill_uniform(r, x, t, -1, 1);
        for (int64_t i = 0; i < t; i++) want[i] = i % T <= i / T % T ? x[i] : -INFINITY;
        hx_k_causal_mask_f32(y1, x, B, T, -INFINITY, 1);
        hx_k_causal_mask_f32(y2, x, B, T, -INFINITY, 2);
        CHECK(same_bits(y1, want, (size_t)t * 4) && same_bits(y2, want, (size_t)t * 4),
              "causal mask B=%lld T=%lld", (long long)B, (long long)T);
        /* 16-bit: every bit pattern (NaNs included) bitwise widen, mask, round */
        uint16_t *h = malloc((size_t)t * 2), *g1 = malloc((size_t)t * 2), *g2 = malloc((size_t)t * 2);
        uint16_t *hw = malloc((size_t)t * 2);
        for (int d = 0; d < 2; d++) {
            hx_kdtype dt = d ? HX_K_BF16 : HX_K_F16;
            for (int64_t i = 0; i < t; i++) h[i] = (uint16_t)(test_rng_u64(r) >> 48);
            hx_k_cast(x, HX_K_F32, h, dt, t, 1);
            hx_k_causal_mask_f32(want, x, B, T, -INFINITY, 1);
            hx_k_cast(hw, dt, want, HX_K_F32, t, 1);
            hx_k_causal_mask_half(g1, h, dt, B, T, -INFINITY, 1);
            hx_k_causal_mask_half(g2, h, dt, B, T, -INFINITY, 2);
            CHECK(same_bits(g1, hw, (size_t)t * 2) && same_bits(g2, hw, (size_t)t * 2),
                  "causal mask %s B=%lld T=%lld: not bitwise widen, mask, round",
                  DT_NAMES[dt], (long long)B, (long long)T);
        }
        free(x), free(y1), free(y2), free(want), free(h), free(g1), free(g2), free(hw);
    }

    const int64_t n = 100003;
    float *x = falloc(n), *y1 = falloc(n), *y2 = falloc(n), *y3 = falloc(n);
    test_fill_uniform(r, x, n, 0.5, 1.5);
    const float p = 0.3f;
    hx_k_dropout_f32(y1, x, p, 1234, 5, n, 1);
    hx_k_dropout_f32(y2, x, p, 1234, 5, n, 2);
    CHECK(same_bits(y1, y2, (size_t)n * 4), "dropout: 1 vs 2 threads");
    int64_t kept = 0, wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        if (y1[i] != 0) {
            kept++;
            wrong += y1[i] != (float)((double)x[i] / (double)(1.0f - p));
        }
    }
    double frac = (double)kept / (double)n;
    CHECK(fabs(frac - 0.7) < 0.01, "dropout keeps %.4f, want 0.7", frac);
    CHECK(wrong == 0, "dropout: %lld kept values are not x / (1 - p)", (long long)wrong);
    hx_k_dropout_f32(y3, x, p, 1234, 5, 17, 1);
    CHECK(same_bits(y1, y3, 17 * 4), "dropout mask is a function of the position");
    hx_k_dropout_f32(y3, x, p, 1234, 6, n, 2);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) differ += (y1[i] == 0) != (y3[i] == 0);
    CHECK(differ > n / 5, "another stream gives another mask (%lld differ)", (long long)differ);
    hx_k_dropout_f32(y3, x, 0.0f, 9, 9, n, 2);
    CHECK(same_bits(y3, x, (size_t)n * 4), "dropout p=0 is the identity");
    hx_k_dropout_f32(y3, x, 1.0f, 9, 9, n, 2);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += y3[i] != 0;
    CHECK(nonzero == 0, "dropout p=1 drops everything (%lld left)", (long long)nonzero);
    free(x), free(y1), free(y2), free(y3);
}

/* ====================================================================== */
/* losses                                                                    */

static double ref_ce_row(const double *x, int64_t C, int64_t label)
{
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; j++) m = fmax(m, x[j]);
    for (int64_t j = 0; j < C; j++) s += exp(x[j] - m);
    return m + log(s) - x[label];
}

typedef struct ce_ctx {
    int64_t label;
    double scale;
} ce_ctx;

static double ref_ce_loss(const double *x, int64_t n, const void *vctx)
{
    const ce_ctx *c = vctx;
    return c->scale * ref_ce_row(x, n, c->label);
}

static double ref_bce(double x, double t) { return fmax(x, 0) - x * t + log1p(exp(-fabs(x))); }

static double ref_bce_fn(const double *x, int64_t n, const void *ctx)
{
    return ref_bce(x[0], *(const double *)ctx);
}

static void test_losses(test_rng *r)
{
    const int64_t cases[][2] = {{1, 1}, {3, 7}, {5, 17}, {2, 1023}, {41, 1000}};
    for (int dt = HX_K_I32; dt <= HX_K_I64; dt++) {
        hx_kdtype ldt = (hx_kdtype)dt;
        for (int c = 0; c < 5; c++) {
            int64_t N = cases[c][0], C = cases[c][1], t = N * C;
            float *x = falloc(t), *dx1 = falloc(t), *dx2 = falloc(t), loss1, loss2;
            double *xd = dalloc(C), want = 0;
            void *labels = make_ids(r, ldt, N, C);
            test_fill_uniform(r, x, t, -5, 5);
            for (int64_t i = 0; i < N; i++) {
                for (int64_t j = 0; j < C; j++) xd[j] = x[i * C + j];
                want += ref_ce_row(xd, C, get_id(labels, ldt, i));
            }
            want /= (double)N;
            int64_t bad = -7;
            int rc1 = hx_k_cross_entropy_forward_f32(&loss1, x, labels, ldt, N, C, 1, &bad);
            int rc2 = hx_k_cross_entropy_forward_f32(&loss2, x, labels, ldt, N, C, 2, &bad);
            char what[80];
            snprintf(what, sizeof what, "cross_entropy %s (%lld, %lld)", DT_NAMES[dt], (long long)N,
                     (long long)C);
            CHECK(rc1 == 0 && rc2 == 0, "%s: rc %d %d", what, rc1, rc2);
            test_close_f32(what, &loss1, &want, 1, 1e-5, 1e-6);
            CHECK(same_bits(&loss1, &loss2, 4), "%s: 1 vs 2 threads", what);

            const float dloss = 1.7f;
            rc1 = hx_k_cross_entropy_backward_f32(dx1, &dloss, x, labels, ldt, N, C, 1, &bad);
            rc2 = hx_k_cross_entropy_backward_f32(dx2, &dloss, x, labels, ldt, N, C, 2, &bad);
            snprintf(what, sizeof what, "cross_entropy backward %s (%lld, %lld)", DT_NAMES[dt],
                     (long long)N, (long long)C);
            CHECK(rc1 == 0 && rc2 == 0 && same_bits(dx1, dx2, (size_t)t * 4), "%s: 1 vs 2 threads",
                  what);
            int64_t nr = N < 3 ? N : 3, nc = C < 6 ? C : 6;
            float got[18];
            double fd[18];
            int m = 0;
            for (int64_t i = 0; i < nr; i++) {
                for (int64_t j = 0; j < C; j++) xd[j] = x[i * C + j];
                ce_ctx ctx = {get_id(labels, ldt, i), (double)dloss / (double)N};
                for (int64_t k = 0; k < nc; k++) {
                    int64_t j = k == 0 ? ctx.label : (int64_t)(test_rng_u64(r) % (uint64_t)C);
                    got[m] = dx1[i * C + j];
                    fd[m++] = fd_grad(ref_ce_loss, xd, C, j, &ctx);
                }
            }
            check_fd(what, got, fd, m, 1e-2 * dloss / (double)N);

            if (N >= 2) { /* bad labels: the first bad position */
                set_id(labels, ldt, N - 1, C);
                bad = -7;
                rc1 = hx_k_cross_entropy_forward_f32(&loss1, x, labels, ldt, N, C, 2, &bad);
                CHECK(rc1 == -1 && bad == N - 1, "%s: label C: rc %d bad_pos %lld", what, rc1,
                      (long long)bad);
                set_id(labels, ldt, 1, -3);
                bad = -7;
                rc1 = hx_k_cross_entropy_backward_f32(dx1, &dloss, x, labels, ldt, N, C, 2, &bad);
                CHECK(rc1 == -1 && bad == 1, "%s: label -3: rc %d bad_pos %lld", what, rc1,
                      (long long)bad);
            }
            free(x), free(dx1), free(dx2), free(xd), free(labels);
        }
    }

    for (int k = 0; k < NSIZES; k++) {
        int64_t n = SIZES[k];
        float *x = falloc(n), *t = falloc(n), *dx1 = falloc(n), *dx2 = falloc(n), loss1, loss2;
        double want = 0, *fd = dalloc(n);
        test_fill_uniform(r, x, n, -30, 30);
        test_fill_uniform(r, t, n, 0, 1);
        const float dloss = 0.6f;
        for (int64_t i = 0; i < n; i++) {
            want += ref_bce(x[i], t[i]);
            double xi = x[i], ti = t[i];
            fd[i] = (double)dloss / (double)n * fd_grad(ref_bce_fn, &xi, 1, 0, &ti);
        }
        want /= (double)n;
        char what[64];
        snprintf(what, sizeof what, "bce_logits n=%lld", (long long)n);
        hx_k_bce_logits_forward_f32(&loss1, x, t, n, 1);
        hx_k_bce_logits_forward_f32(&loss2, x, t, n, 2);
        test_close_f32(what, &loss1, &want, 1, 1e-5, 1e-6);
        CHECK(same_bits(&loss1, &loss2, 4), "%s: 1 vs 2 threads", what);
        hx_k_bce_logits_backward_f32(dx1, &dloss, x, t, n, 1);
        hx_k_bce_logits_backward_f32(dx2, &dloss, x, t, n, 2);
        snprintf(what, sizeof what, "bce_logits backward n=%lld", (long long)n);
        check_fd(what, dx1, fd, n, 1e-2 * dloss / (double)n);
        CHECK(same_bits(dx1, dx2, (size_t)n * 4), "%s: 1 vs 2 threads", what);
        free(x), free(t), free(dx1), free(dx2), free(fd);
    }
}

/* ====================================================================== */

static void test_isa_and_sizes(void)
{
    hx_isa isa = hx_k_isa();
    CHECK(isa >= HX_ISA_SCALAR && isa <= HX_ISA_AVX512, "isa %d", (int)isa);
    CHECK(hx_k_isa() == isa, "isa is cached");
    CHECK(strcmp(hx_k_isa_name(HX_ISA_AVX2), "avx2") == 0, "isa name");
    CHECK(hx_k_dtype_size(HX_K_F32) == 4 && hx_k_dtype_size(HX_K_F16) == 2 &&
              hx_k_dtype_size(HX_K_BF16) == 2 && hx_k_dtype_size(HX_K_I32) == 4 &&
              hx_k_dtype_size(HX_K_I64) == 8,
          "dtype sizes");
    printf("kernels: isa %s\n", hx_k_isa_name(isa));
}

/* One random source through all the cases, in table order. */
static test_rng rng;

static void binary_case(void) { test_binary(&rng); }
static void unary_case(void) { test_unary(&rng); }
static void scale_bias_case(void) { test_scale_bias(&rng); }
static void softmax_case(void) { test_softmax(&rng); }
static void layernorm_case(void) { test_layernorm(&rng); }
static void add_layernorm_case(void) { test_add_layernorm(&rng); }
static void add_layernorm_half_case(void) { test_add_layernorm_half(&rng); }
static void reduce_case(void) { test_reduce(&rng); }
static void copy_case(void) { test_copy(&rng); }
static void casts_case(void) { test_casts(&rng); }
static void sumsq_case(void) { test_sumsq(&rng); }
static void gemm_case(void) { test_gemm(&rng); }
static void gemm_fused_case(void) { test_gemm_fused(&rng); }
static void gemm_half_case(void) { test_gemm_half(&rng); }
static void gather_scatter_case(void) { test_gather_scatter(&rng); }
static void mask_dropout_case(void) { test_mask_dropout(&rng); }
static void losses_case(void) { test_losses(&rng); }

static const test_case cases[] = {
    {"casts_per_isa", test_casts_per_isa}, /* first: forks before this process fixes its ISA */
    {"isa_and_sizes", test_isa_and_sizes},
    {"binary", binary_case},
    {"unary", unary_case},
    {"scale_bias", scale_bias_case},
    {"softmax", softmax_case},
    {"layernorm", layernorm_case},
    {"add_layernorm", add_layernorm_case},
    {"add_layernorm_half", add_layernorm_half_case},
    {"reduce", reduce_case},
    {"copy", copy_case},
    {"casts", casts_case},
    {"sumsq", sumsq_case},
    {"gemm", gemm_case},
    {"gemm_fused", gemm_fused_case},
    {"gemm_half", gemm_half_case},
    {"gather_scatter", gather_scatter_case},
    {"mask_dropout", mask_dropout_case},
    {"losses", losses_case},
};

int main(int argc, char **argv)
{
    rng = test_rng_make(2024);
    return test_main(argc, argv, "kernels", cases, TEST_COUNT(cases));
}
