/* Row kernels along the last axis (softmax, log-softmax, layernorm), one
 * row each, written once in plain loops over HX_K_LANES partial sums and
 * included after vmath_body.h by each path's file (vmath_scalar.c,
 * vmath_avx2.c, vmath_avx512.c). With fp-contract off the loops take the
 * same roundings in the same order on every path, so the compiler may widen
 * them to the path's vectors (two AVX2 or one AVX-512 register per 16
 * partials) and the three paths still give the same bits (test_vmath checks
 * it). kernels/cpu/rows.c spreads the rows over threads.
 *
 *   ROWS_PATH    the hx_rows_path this file defines */
#include <math.h>

#include "rows_path.h"

// y (n) = exp(x - max) / sum(exp(x - max)), one row
static void rows_softmax_forward(float *y, const float *x, int64_t n)
{
    float maxv = hx_k_max_f32(x, n);
    float sum = vm_exp_shift_sum_n(y, x, maxv, n);
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

// dx (n) = y * (dy - sum(dy * y)), one row
static void rows_softmax_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    float dot = hx_k_dot_f32(dy, y, n);
    for (int64_t i = 0; i < n; i++) dx[i] = y[i] * (dy[i] - dot);
}

// y (n) = x - max - log(sum(exp(x - max))), one row
static void rows_log_softmax_forward(float *y, const float *x, int64_t n)
{
    float maxv = hx_k_max_f32(x, n);
    /* the blocked sum of hx__vmath_sum_exp, not into y: y may be x's buffer */
    float sum = 0.0f, e[HX_VMATH_BLOCK];
    for (int64_t i = 0; i < n; i += HX_VMATH_BLOCK)
        sum += vm_exp_shift_sum_n(e, x + i, maxv, n - i < HX_VMATH_BLOCK ? n - i : HX_VMATH_BLOCK);
    /* (x - max) first: folding max and log(sum) into one shift rounds to
     * max's ulp, which for large logits swamps small outputs. */
    float lse = logf(sum);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - maxv) - lse;
}

// dx (n) = dy - exp(y) * sum(dy), one row
static void rows_log_softmax_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    float sum = hx_k_sum_f32(dy, n);
    float e[HX_VMATH_BLOCK]; /* not dx: it may be dy's buffer */
    for (int64_t i = 0; i < n; i += HX_VMATH_BLOCK) {
        int64_t m = n - i < HX_VMATH_BLOCK ? n - i : HX_VMATH_BLOCK;
        vm_exp_n(e, y + i, m);
        for (int64_t j = 0; j < m; j++) dx[i + j] = dy[i + j] - e[j] * sum;
    }
}

// mean and rstd = 1 / sqrt(biased var + eps) of one row x (n), two passes
static void rows_layernorm_stats(const float *x, int64_t n, float eps, float *mean, float *rstd)
{
    float m = hx_k_sum_f32(x, n) / (float)n;
    float acc[HX_K_LANES] = {0};
    int64_t i = 0;
    for (; i + HX_K_LANES <= n; i += HX_K_LANES)
        for (int k = 0; k < HX_K_LANES; k++) acc[k] += (x[i + k] - m) * (x[i + k] - m);
    for (int k = 0; i + k < n; k++) acc[k] += (x[i + k] - m) * (x[i + k] - m);
    *mean = m;
    *rstd = 1.0f / sqrtf(hx_k_lanes_total(acc) / (float)n + eps);
}

// y (n) = (x - mean) * rstd * gamma + beta, one row
static void rows_layernorm_forward(float *y, const float *x, const float *gamma,
                                   const float *beta, float eps, int64_t n)
{
    float mean, rstd;
    rows_layernorm_stats(x, n, eps, &mean, &rstd);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
}

// dx (n) = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * gamma
static void rows_layernorm_backward_x(float *dx, const float *dy, const float *x,
                                      const float *gamma, float eps, int64_t n)
{
    float mean, rstd;
    rows_layernorm_stats(x, n, eps, &mean, &rstd);
    float acc[HX_K_LANES] = {0}, acc_xhat[HX_K_LANES] = {0};
    int64_t i = 0;
    for (; i + HX_K_LANES <= n; i += HX_K_LANES)
        for (int k = 0; k < HX_K_LANES; k++) {
            float dnorm = dy[i + k] * gamma[i + k];
            acc[k] += dnorm;
            acc_xhat[k] += dnorm * ((x[i + k] - mean) * rstd);
        }
    for (int k = 0; i + k < n; k++) {
        float dnorm = dy[i + k] * gamma[i + k];
        acc[k] += dnorm;
        acc_xhat[k] += dnorm * ((x[i + k] - mean) * rstd);
    }
    float dnorm_mean = hx_k_lanes_total(acc) / (float)n;
    float dnorm_norm_mean = hx_k_lanes_total(acc_xhat) / (float)n;
    for (int64_t j = 0; j < n; j++) {
        float xhat = (x[j] - mean) * rstd;
        dx[j] = (dy[j] * gamma[j] - dnorm_mean - xhat * dnorm_norm_mean) * rstd;
    }
}

// dgamma[lo:hi] += dy[lo:hi] * xhat[lo:hi] for one row
static void rows_layernorm_gamma_add(float *dgamma, const float *dy, const float *x, float mean,
                                     float rstd, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++) dgamma[i] += dy[i] * ((x[i] - mean) * rstd);
}

const hx_rows_path ROWS_PATH = {
    .softmax_forward = rows_softmax_forward,
    .softmax_backward = rows_softmax_backward,
    .log_softmax_forward = rows_log_softmax_forward,
    .log_softmax_backward = rows_log_softmax_backward,
    .layernorm_stats = rows_layernorm_stats,
    .layernorm_forward = rows_layernorm_forward,
    .layernorm_backward_x = rows_layernorm_backward_x,
    .layernorm_gamma_add = rows_layernorm_gamma_add,
};
