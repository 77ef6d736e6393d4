/* test_vmath: the vector transcendentals of kernels/cpu/vmath.h against a
 * double reference, over a sweep of the whole f32 range (every 4099th bit
 * pattern: both signs, denormals, normals, +-inf, NaNs), random inputs where
 * the functions bend, and the edges (0, +-0, the overflow and underflow
 * thresholds, the branch points); every path the CPU has (scalar, AVX2,
 * AVX-512) gives the same bits as the scalar one for every input.
 *
 * Error in ulp: |y - ref| / ulp(ref), ulp of the f32 format at |ref| (2^-149
 * in the denormals). Bounds asserted:
 *   exp, tanh, sigmoid   vmath.h's figures, everywhere;
 *   gelu, gelu'          (both forms) vmath.h's figure at x >= 0; at x < 0, gelu(x) =
 *                        x sigma(2u(x)) with |2u| up to 88, and the f32
 *                        rounding of u alone (a few ulp of u) moves the
 *                        result by about |2u| times that, and gelu' has a
 *                        root at x = -0.75: there the error is bounded in
 *                        ulp times max(1, |d log f / d log x|), the
 *                        function's condition number (from the reference,
 *                        by a central difference).
 * The row kernels (kernels/cpu/rows_body.h: softmax, log-softmax, layernorm
 * and its backward) give the same bits on every path as on the scalar one,
 * at lengths around the vector widths, and match a double reference. GELU
 * with its derivative kept for the backward gives gelu's and
 * gelu_backward's bits. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/hx_kernels.h"
#include "kernels/cpu/rows_path.h"
#include "kernels/cpu/vmath.h"
#include "tests/util/testutil.h"

enum { F_EXP, F_TANH, F_SIGMOID, F_GELU, F_GELU_GRAD, F_GELU_ERF, F_GELU_ERF_GRAD, F_N };
static const char *const FNAMES[F_N] = {"exp", "tanh", "sigmoid", "gelu", "gelu'", "gelu_erf",
                                        "gelu_erf'"};
/* vmath.h's stated maximum errors, in ulp; for gelu and gelu' at x < 0, in
 * ulp times max(1, condition number) */
static const double BOUND[F_N] = {1.0, 2.0, 2.5, 3.0, 3.0, 2.0, 2.0};
static const double BOUND_NEG[F_N] = {0, 0, 0, 6.0, 10.0, 5.0, 7.0};

#define C_GELU 0.79788456080286535588 /* sqrt(2/pi) */

static double sigma_ref(double z) { return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z)); }

static double ref(int f, double x)
{
    switch (f) {
    case F_EXP: return exp(x);
    case F_TANH: return tanh(x);
    case F_SIGMOID: return sigma_ref(x);
    case F_GELU:
        if (isinf(x)) return x > 0 ? x : -0.0;
        return x * sigma_ref(2 * C_GELU * (x + 0.044715 * x * x * x));
    case F_GELU_GRAD: {
        if (isinf(x)) return x > 0 ? 1 : 0;
        double z = 2 * C_GELU * (x + 0.044715 * x * x * x);
        double s = sigma_ref(z), sc = sigma_ref(-z);
        return s + x * s * sc * 2 * C_GELU * (1 + 3 * 0.044715 * x * x);
    }
    case F_GELU_ERF: /* x Phi(x) */
        if (isinf(x)) return x > 0 ? x : -0.0;
        return x * 0.5 * erfc(-x / sqrt(2.0));
    case F_GELU_ERF_GRAD:
        if (isinf(x)) return x > 0 ? 1 : 0;
        return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) * 0.39894228040143267794; /* 1 / sqrt(2 pi) */
    }
    return NAN;
}

/* |d log f / d log x| at x, by a central difference of the reference. */
static double condition(int f, double x)
{
    double h = fabs(x) * 1e-7, y = ref(f, x);
    if (h == 0 || y == 0 || !isfinite(y)) return 0;
    return fabs((ref(f, x + h) - ref(f, x - h)) / (2 * h) * x / y);
}

static void run_path(const hx_vmath_path *p, int f, float *y, const float *x, int64_t n)
{
    switch (f) {
    case F_EXP: p->exp(y, x, n); break;
    case F_TANH: p->tanh(y, x, n); break;
    case F_SIGMOID: p->sigmoid(y, x, n); break;
    case F_GELU: p->gelu(y, x, n); break;
    case F_GELU_ERF: p->gelu_erf(y, x, n); break;
    case F_GELU_GRAD:
    case F_GELU_ERF_GRAD: {
        float *one = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) one[i] = 1.0f;
        (f == F_GELU_GRAD ? p->gelu_backward : p->gelu_erf_backward)(y, one, x, n);
        free(one);
        break;
    }
    }
}

/* Error of y against r in ulp of the f32 format at |r|; r beyond the f32
 * range must give inf of its sign; NaN must give NaN. */
static double ulp_err(float y, double r)
{
    if (isnan(r)) return isnan(y) ? 0 : INFINITY;
    if (isnan(y)) return INFINITY;
    if (fabs(r) > 3.4028234663852886e38) {
        /* rounds to inf unless within half an ulp of FLT_MAX */
        double lim = (double)3.4028235677973366e38 + ldexp(1, 103);
        if (fabs(r) >= lim) return (isinf(y) && (y > 0) == (r > 0)) ? 0 : INFINITY;
    }
    if (isinf(y)) return fabs(r) > 3.4028234e38 ? 0.5 : INFINITY;
    double a = fabs(r);
    int e;
    frexp(a < 0x1p-126 ? 0x1p-126 : a, &e);
    double ulp = ldexp(1, e - 24);
    return fabs((double)y - r) / ulp;
}

static const hx_vmath_path *const PATHS[] = {&hx__vmath_scalar, &hx__vmath_avx2, &hx__vmath_avx512};
static const char *const PATH_NAMES[] = {"scalar", "avx2", "avx512"};

/* The inputs: the sweep, the edges, and random values in [-20, 20]. */
static float *make_inputs(int64_t *count)
{
    const uint64_t stride = 4099;
    int64_t nsweep = (int64_t)((1ull << 32) / stride) + 1, nrand = 200000;
    static const float edges[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-38f, -1e-38f, 1e-20f, -1e-20f,
                                  0.625f, -0.625f, 0.62499994f, 88.72283f, 88.72284f, 89.0f,
                                  -87.33654f, -103.27893f, -103.97208f, -104.0f, -105.0f,
                                  88.0f, -88.0f, 1e30f, -1e30f, 3.4e38f, -3.4e38f, 9.0f, -9.0f,
                                  INFINITY, -INFINITY, NAN, -NAN};
    int64_t nedges = (int64_t)(sizeof(edges) / sizeof(edges[0]));
    *count = nsweep + nrand + nedges;
    float *x = malloc((size_t)*count * sizeof(float));
    int64_t k = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += stride) {
        uint32_t b = (uint32_t)u;
        memcpy(&x[k++], &b, 4);
    }
    test_rng r = test_rng_make(25);
    for (int64_t i = 0; i < nrand; i++) x[k++] = (float)test_rng_uniform(&r, -20.0, 20.0);
    for (int64_t i = 0; i < nedges; i++) x[k++] = edges[i];
    *count = k;
    return x;
}

static int path_available(int k)
{
    return (int)hx_k_isa() >= k; /* HX_ISA_SCALAR=0, AVX2=1, AVX512=2 */
}

static void accuracy_and_paths(void)
{
    int64_t n;
    float *x = make_inputs(&n);
    float *y = malloc((size_t)n * sizeof(float)), *yv = malloc((size_t)n * sizeof(float));
    for (int f = 0; f < F_N; f++) {
        run_path(&hx__vmath_scalar, f, y, x, n);
        double worst = 0, worst_tail = 0;
        float at = 0, at_tail = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            double r = ref(f, (double)x[i]);
            double e = ulp_err(y[i], r);
            int tail = BOUND_NEG[f] > 0 && x[i] < 0.0f;
            double c = tail ? condition(f, (double)x[i]) : 0;
            double lim = tail ? BOUND_NEG[f] : BOUND[f];
            if (tail) e /= c > 1 ? c : 1;
            if (e > lim && bad++ < 5)
                CHECK(0, "%s(%a) = %a, reference %a: %.2f ulp > %.2f", FNAMES[f], (double)x[i],
                      (double)y[i], r, e, lim);
            if (tail ? e > worst_tail : e > worst) {
                if (tail) worst_tail = e, at_tail = x[i];
                else worst = e, at = x[i];
            }
        }
        CHECK(bad == 0, "%s: %lld inputs over the bound", FNAMES[f], (long long)bad);
        printf("%-8s max %.2f ulp (at %a) over %lld inputs", FNAMES[f], worst, (double)at,
               (long long)n);
        if (BOUND_NEG[f] > 0)
            printf("; x < 0: max %.2f ulp / max(1, condition) (at %a)", worst_tail,
                   (double)at_tail);
        printf("\n");
        for (int k = 1; k < 3; k++) {
            if (!path_available(k)) {
                printf("%s: no %s on this CPU\n", FNAMES[f], PATH_NAMES[k]);
                continue;
            }
            run_path(PATHS[k], f, yv, x, n);
            int64_t diff = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (memcmp(&y[i], &yv[i], 4) != 0 && diff++ == 0) first = i;
            CHECK(diff == 0, "%s: %s differs from scalar on %lld inputs (first %a: %a vs %a)",
                  FNAMES[f], PATH_NAMES[k], (long long)diff, first >= 0 ? (double)x[first] : 0.0,
                  first >= 0 ? (double)yv[first] : 0.0, first >= 0 ? (double)y[first] : 0.0);
        }
    }
    free(x);
    free(y);
    free(yv);
}

/* GELU keeping its derivative (gelu_save, times_saved): on every path and
 * every input of the sweep, y is gelu's bits and dy times the saved
 * derivative is gelu_backward's, with dy random (a NaN, an inf and a zero
 * among them: NaN in either input, which one comes out). */
static void gelu_saved(void)
{
    int64_t n;
    float *x = make_inputs(&n);
    size_t bytes = (size_t)n * sizeof(float);
    float *dy = malloc(bytes), *y0 = malloc(bytes), *dx0 = malloc(bytes), *y = malloc(bytes),
          *g = malloc(bytes), *dx = malloc(bytes);
    test_rng r = test_rng_make(29);
    for (int64_t i = 0; i < n; i++) dy[i] = (float)test_rng_uniform(&r, -2.0, 2.0);
    dy[0] = NAN, dy[1] = -INFINITY, dy[2] = 0.0f, dy[n - 1] = NAN; /* x[n - 1] is -NaN */
    for (int k = 0; k < 3; k++) {
        if (!path_available(k)) continue;
        const hx_vmath_path *p = PATHS[k];
        p->gelu(y0, x, n);
        p->gelu_backward(dx0, dy, x, n);
        /* odd lengths: the tails go through the staging copy */
        for (int64_t m = n; m > n - 3; m--) {
            p->gelu_save(y, g, x, m);
            p->times_saved(dx, dy, g, m);
            CHECK(!memcmp(y, y0, (size_t)m * 4) && !memcmp(dx, dx0, (size_t)m * 4),
                  "%s, %lld elements: gelu_save / times_saved differ from gelu / gelu_backward",
                  PATH_NAMES[k], (long long)m);
        }
    }
    free(x), free(dy), free(y0), free(dx0), free(y), free(g), free(dx);
}

/* Softmax's helper: e^(x - shift) elementwise as exp, and the sum in
 * hx_k_sum_f32's order, at lengths around the vector widths. */
static void exp_shift_sum(void)
{
    const hx_vmath_path *p = hx__vmath();
    test_rng r = test_rng_make(7);
    static const int64_t lens[] = {1, 7, 15, 16, 17, 33, 100, 1027};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        int64_t n = lens[l];
        float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *e = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) x[i] = (float)test_rng_uniform(&r, -30.0, 5.0);
        float shift = 2.5f;
        float sum = p->exp_shift_sum(y, x, shift, n);
        for (int64_t i = 0; i < n; i++) e[i] = x[i] - shift;
        p->exp(e, e, n);
        CHECK(memcmp(e, y, (size_t)n * 4) == 0, "n=%lld: exp_shift_sum's values differ from exp",
              (long long)n);
        float acc[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (int k = 0; k < 16; k++) acc[k] += e[i + k];
        for (int k = 0; i + k < n; k++) acc[k] += e[i + k];
        for (int w = 8; w > 0; w /= 2)
            for (int k = 0; k < w; k++) acc[k] += acc[k + w];
        CHECK(memcmp(&acc[0], &sum, 4) == 0, "n=%lld: sum %a, expected %a", (long long)n,
              (double)sum, (double)acc[0]);
        free(x);
        free(y);
        free(e);
    }
}

static const hx_rows_path *const ROW_PATHS[] = {&hx__rows_scalar, &hx__rows_avx2, &hx__rows_avx512};

enum { R_SOFTMAX, R_SOFTMAX_BWD, R_LOG_SOFTMAX, R_LOG_SOFTMAX_BWD, R_LN, R_LN_BWD_X, R_LN_GAMMA, R_N };
static const char *const RNAMES[R_N] = {"softmax",   "softmax_backward",     "log_softmax",
                                        "log_softmax_backward", "layernorm", "layernorm_backward_x",
                                        "layernorm_gamma_add"};

/* One row kernel of path p: y (n) from x, dy, gamma, beta (n each). */
static void run_row(const hx_rows_path *p, int f, float *y, const float *x, const float *dy,
                    const float *gamma, const float *beta, int64_t n)
{
    const float eps = 1e-5f;
    switch (f) {
    case R_SOFTMAX: p->softmax_forward(y, x, n); break;
    case R_SOFTMAX_BWD: p->softmax_backward(y, dy, x, n); break;
    case R_LOG_SOFTMAX: p->log_softmax_forward(y, x, n); break;
    case R_LOG_SOFTMAX_BWD: p->log_softmax_backward(y, dy, x, n); break;
    case R_LN: p->layernorm_forward(y, x, gamma, beta, eps, n); break;
    case R_LN_BWD_X: p->layernorm_backward_x(y, dy, x, gamma, eps, n); break;
    case R_LN_GAMMA: {
        float mean, rstd;
        p->layernorm_stats(x, n, eps, &mean, &rstd);
        memcpy(y, beta, (size_t)n * sizeof(float)); /* adds onto what is there */
        p->layernorm_gamma_add(y, dy, x, mean, rstd, 0, n);
        break;
    }
    }
}

/* The same in double: softmax's backward and log-softmax's take y as the
 * forward's output, as the kernels do. */
static void ref_row(int f, double *y, const float *x, const float *dy, const float *gamma,
                    const float *beta, int64_t n)
{
    const double eps = 1e-5;
    double mean = 0, var = 0, s = 0, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mean += x[i], mx = x[i] > mx ? x[i] : mx;
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    double rstd = 1 / sqrt(var / (double)n + eps);
    switch (f) {
    case R_SOFTMAX:
    case R_LOG_SOFTMAX:
        for (int64_t i = 0; i < n; i++) s += exp(x[i] - mx);
        for (int64_t i = 0; i < n; i++)
            y[i] = f == R_SOFTMAX ? exp(x[i] - mx) / s : x[i] - mx - log(s);
        break;
    case R_SOFTMAX_BWD:
        for (int64_t i = 0; i < n; i++) s += (double)dy[i] * x[i];
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * (dy[i] - s);
        break;
    case R_LOG_SOFTMAX_BWD:
        for (int64_t i = 0; i < n; i++) s += dy[i];
        for (int64_t i = 0; i < n; i++) y[i] = dy[i] - exp(x[i]) * s;
        break;
    case R_LN:
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
        break;
    case R_LN_BWD_X: {
        double a = 0, b = 0;
        for (int64_t i = 0; i < n; i++) {
            a += (double)dy[i] * gamma[i];
            b += (double)dy[i] * gamma[i] * (x[i] - mean) * rstd;
        }
        for (int64_t i = 0; i < n; i++)
            y[i] = (dy[i] * (double)gamma[i] - a / n - (x[i] - mean) * rstd * b / n) * rstd;
        break;
    }
    case R_LN_GAMMA:
        for (int64_t i = 0; i < n; i++) y[i] = beta[i] + dy[i] * (x[i] - mean) * rstd;
        break;
    }
}

static void row_kernels(void)
{
    static const int64_t lens[] = {1, 3, 8, 15, 16, 17, 31, 33, 100, 384, 513, 1027, 4099};
    test_rng r = test_rng_make(41);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        int64_t n = lens[l];
        size_t bytes = (size_t)n * sizeof(float);
        float *x = malloc(bytes), *dy = malloc(bytes), *gamma = malloc(bytes), *beta = malloc(bytes);
        float *y0 = malloc(bytes), *yk = malloc(bytes);
        double *yr = malloc((size_t)n * sizeof(double));
        for (int f = 0; f < R_N; f++) {
            for (int64_t i = 0; i < n; i++) {
                x[i] = (float)test_rng_uniform(&r, -4.0, 6.0);
                dy[i] = (float)test_rng_uniform(&r, -1.0, 1.0);
                gamma[i] = (float)test_rng_uniform(&r, 0.5, 1.5);
                beta[i] = (float)test_rng_uniform(&r, -0.5, 0.5);
            }
            if (f == R_SOFTMAX_BWD || f == R_LOG_SOFTMAX_BWD) /* x plays the forward's y */
                run_row(&hx__rows_scalar, f == R_SOFTMAX_BWD ? R_SOFTMAX : R_LOG_SOFTMAX, x, x,
                        NULL, NULL, NULL, n);
            run_row(&hx__rows_scalar, f, y0, x, dy, gamma, beta, n);
            ref_row(f, yr, x, dy, gamma, beta, n);
            double scale = 0, worst = 0;
            for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(yr[i]));
            for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(y0[i] - yr[i]));
            /* relative to the row's largest value: sums of n terms round
             * about sqrt(n) times f32's epsilon */
            CHECK(worst <= 1e-5 * (scale > 1 ? scale : 1), "%s n=%lld: off the double reference by %g",
                  RNAMES[f], (long long)n, worst);
            for (int k = 1; k < 3; k++) {
                if (!path_available(k)) continue;
                run_row(ROW_PATHS[k], f, yk, x, dy, gamma, beta, n);
                CHECK(memcmp(y0, yk, bytes) == 0, "%s n=%lld: the %s path differs from scalar",
                      RNAMES[f], (long long)n, PATH_NAMES[k]);
            }
        }
        free(x);
        free(dy);
        free(gamma);
        free(beta);
        free(y0);
        free(yk);
        free(yr);
    }
}

int main(int argc, char **argv)
{
    static const test_case cases[] = {
        {"accuracy_and_paths", accuracy_and_paths},
        {"exp_shift_sum", exp_shift_sum},
        {"gelu_saved", gelu_saved},
        {"row_kernels", row_kernels},
    };
    return test_main(argc, argv, "test_vmath", cases, TEST_COUNT(cases));
}
