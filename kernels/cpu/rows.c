/* Row kernels along the last axis: softmax, log-softmax, layernorm. Every
 * row is computed by one thread in a fixed order (sums via the lane partials
 * of hx_kinternal.h), so results do not depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "hx_kinternal.h"
#include "vmath.h"

/* Rows go to threads when the whole op is large and there are rows to share. */
static int rows_go_parallel(int64_t rows, int64_t n, int nthreads)
{
    return rows > 1 && hx_k_go_parallel(rows * n, nthreads);
}

/* ---- softmax ------------------------------------------------------------ */

// y (n) = exp(x - max) / sum(exp(x - max)), one row
static void softmax_forward(float *y, const float *x, int64_t n)
{
    float maxv = hx_k_max_f32(x, n);
    float sum = hx__vmath()->exp_shift_sum(y, x, maxv, n);
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

// dx (n) = y * (dy - sum(dy * y)), one row
static void softmax_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    float dot = hx_k_dot_f32(dy, y, n);
    for (int64_t i = 0; i < n; i++) dx[i] = y[i] * (dy[i] - dot);
}

void hx_k_softmax_forward_f32(float *y, const float *x, int64_t rows, int64_t n, int nthreads)
{
    if (!rows_go_parallel(rows, n, nthreads)) {
        for (int64_t r = 0; r < rows; r++) softmax_forward(y + r * n, x + r * n, n);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; r++) softmax_forward(y + r * n, x + r * n, n);
}

void hx_k_softmax_backward_f32(float *dx, const float *dy, const float *y, int64_t rows,
                               int64_t n, int nthreads)
{
    if (!rows_go_parallel(rows, n, nthreads)) {
        for (int64_t r = 0; r < rows; r++) softmax_backward(dx + r * n, dy + r * n, y + r * n, n);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; r++) softmax_backward(dx + r * n, dy + r * n, y + r * n, n);
}

/* ---- log-softmax -------------------------------------------------------- */

// y (n) = x - max - log(sum(exp(x - max))), one row
static void log_softmax_forward(float *y, const float *x, int64_t n)
{
    float maxv = hx_k_max_f32(x, n);
    float sum = hx__vmath_sum_exp(x, maxv, n); /* not into y: it may be x's buffer */
    /* (x - max) first: folding max and log(sum) into one shift rounds to
     * max's ulp, which for large logits swamps small outputs. */
    float lse = logf(sum);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - maxv) - lse;
}

// dx (n) = dy - exp(y) * sum(dy), one row
static void log_softmax_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    float sum = hx_k_sum_f32(dy, n);
    float e[HX_VMATH_BLOCK]; /* not dx: it may be dy's buffer */
    for (int64_t i = 0; i < n; i += HX_VMATH_BLOCK) {
        int64_t m = n - i < HX_VMATH_BLOCK ? n - i : HX_VMATH_BLOCK;
        hx__vmath()->exp(e, y + i, m);
        for (int64_t j = 0; j < m; j++) dx[i + j] = dy[i + j] - e[j] * sum;
    }
}

void hx_k_log_softmax_forward_f32(float *y, const float *x, int64_t rows, int64_t n,
                                  int nthreads)
{
    if (!rows_go_parallel(rows, n, nthreads)) {
        for (int64_t r = 0; r < rows; r++) log_softmax_forward(y + r * n, x + r * n, n);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; r++) log_softmax_forward(y + r * n, x + r * n, n);
}

void hx_k_log_softmax_backward_f32(float *dx, const float *dy, const float *y, int64_t rows,
                                   int64_t n, int nthreads)
{
    if (!rows_go_parallel(rows, n, nthreads)) {
        for (int64_t r = 0; r < rows; r++)
            log_softmax_backward(dx + r * n, dy + r * n, y + r * n, n);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; r++) log_softmax_backward(dx + r * n, dy + r * n, y + r * n, n);
}

/* ---- layernorm ---------------------------------------------------------- */

// mean and rstd = 1 / sqrt(biased var + eps) of one row x (n), two passes
static void layernorm_stats(const float *x, int64_t n, float eps, float *mean, float *rstd)
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
static void layernorm_forward(float *y, const float *x, const float *gamma, const float *beta,
                              float eps, int64_t n)
{
    float mean, rstd;
    layernorm_stats(x, n, eps, &mean, &rstd);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
}

// dx (n) = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * gamma
static void layernorm_backward_x(float *dx, const float *dy, const float *x, const float *gamma,
                                 float eps, int64_t n)
{
    float mean, rstd;
    layernorm_stats(x, n, eps, &mean, &rstd);
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

void hx_k_layernorm_forward_f32(float *y, const float *x, const float *gamma,
                                const float *beta, float eps, int64_t rows, int64_t n,
                                int nthreads)
{
    if (!rows_go_parallel(rows, n, nthreads)) {
        for (int64_t r = 0; r < rows; r++)
            layernorm_forward(y + r * n, x + r * n, gamma, beta, eps, n);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; r++) layernorm_forward(y + r * n, x + r * n, gamma, beta, eps, n);
}

void hx_k_layernorm_backward_x_f32(float *dx, const float *dy, const float *x,
                                   const float *gamma, float eps, int64_t rows, int64_t n,
                                   int nthreads)
{
    if (!rows_go_parallel(rows, n, nthreads)) {
        for (int64_t r = 0; r < rows; r++)
            layernorm_backward_x(dx + r * n, dy + r * n, x + r * n, gamma, eps, n);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        layernorm_backward_x(dx + r * n, dy + r * n, x + r * n, gamma, eps, n);
}

// dgamma[lo:hi] += dy[r, lo:hi] * xhat[r, lo:hi] for one row r
static void layernorm_backward_gamma_row(float *dgamma, const float *dy, const float *x,
                                         float mean, float rstd, int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++) dgamma[i] += dy[i] * ((x[i] - mean) * rstd);
}

/* Every dgamma[i] sums its rows in row order on one thread: the serial path
 * walks rows outermost, the parallel one gives each thread a slice of
 * columns (row stats computed first into a buffer), and both add the same
 * terms in the same order, so the result does not depend on the thread
 * count. The serial path also serves rows too narrow to share (under two
 * 16-column slices) and a failed buffer allocation. */
void hx_k_layernorm_backward_gamma_f32(float *dgamma, const float *dy, const float *x,
                                       float eps, int64_t rows, int64_t n, int nthreads)
{
    float *stats = rows_go_parallel(rows, n, nthreads) && n >= 32
                       ? malloc((size_t)rows * 2 * sizeof(float))
                       : NULL;
    for (int64_t i = 0; i < n; i++) dgamma[i] = 0.0f;
    if (!stats) {
        for (int64_t r = 0; r < rows; r++) {
            float mean, rstd;
            layernorm_stats(x + r * n, n, eps, &mean, &rstd);
            layernorm_backward_gamma_row(dgamma, dy + r * n, x + r * n, mean, rstd, 0, n);
        }
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            layernorm_stats(x + r * n, n, eps, &stats[2 * r], &stats[2 * r + 1]);
        int64_t lo, hi;
        hx_k_thread_slice(n, 16, &lo, &hi);
        for (int64_t r = 0; r < rows; r++)
            layernorm_backward_gamma_row(dgamma, dy + r * n, x + r * n, stats[2 * r],
                                         stats[2 * r + 1], lo, hi);
    }
    free(stats);
}
