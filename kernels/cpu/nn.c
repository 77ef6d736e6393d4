/* Causal mask, dropout, and the losses (cross-entropy over classes, binary
 * cross-entropy with logits). */
#include <math.h>
#include <stdint.h>

#include "hx_kinternal.h"
#include "vmath.h"

/* ---- causal mask ---------------------------------------------------------- */

// y (T) = row r of a (T, T) matrix: x where col <= r, fill above the diagonal
static void causal_mask_row(float *y, const float *x, int64_t T, int64_t r, float fill)
{
    for (int64_t c = 0; c < T; c++) y[c] = c <= r ? x[c] : fill;
}

void hx_k_causal_mask_f32(float *y, const float *x, int64_t batch, int64_t T, float fill,
                          int nthreads)
{
    int64_t rows = batch * T;
    if (!hx_k_go_parallel(rows * T, nthreads)) {
        for (int64_t br = 0; br < rows; br++) causal_mask_row(y + br * T, x + br * T, T, br % T, fill);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t br = 0; br < rows; br++) causal_mask_row(y + br * T, x + br * T, T, br % T, fill);
}

/* causal_mask_row on 16-bit values: x kept where col <= r (a NaN made
 * quiet, as widening it does), fill above the diagonal; nan_above: |x| above
 * it is a NaN (the dtype's inf), quiet: the quiet bit. */
static void causal_mask_row_half(uint16_t *y, const uint16_t *x, int64_t T, int64_t r,
                                 uint16_t fill, uint16_t nan_above, uint16_t quiet)
{
    for (int64_t c = 0; c < T; c++) {
        uint16_t v = x[c];
        y[c] = c > r ? fill : (v & 0x7FFF) > nan_above ? (uint16_t)(v | quiet) : v;
    }
}

void hx_k_causal_mask_half(void *y, const void *x, hx_kdtype dt, int64_t batch, int64_t T,
                           float fill, int nthreads)
{
    uint16_t f, *yh = y, inf = dt == HX_K_BF16 ? 0x7F80 : 0x7C00;
    uint16_t quiet = dt == HX_K_BF16 ? 0x0040 : 0x0200;
    const uint16_t *xh = x;
    hx_k_cast(&f, dt, &fill, HX_K_F32, 1, 1);
    int64_t rows = batch * T;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (hx_k_go_parallel(rows * T, nthreads))
    for (int64_t br = 0; br < rows; br++)
        causal_mask_row_half(yh + br * T, xh + br * T, T, br % T, f, inf, quiet);
}

/* ---- dropout ---------------------------------------------------------------- */

/* splitmix64's output mixer. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

// y[lo:hi] = keep(i) ? x[i] / (1 - p) : 0. keep(i): the top 24 bits of the
// i-th output of a splitmix64 stream keyed by (seed, stream), read as
// u in [0, 1), are >= p, i.e. u * 2^24 >= p * 2^24 = thr (exact in float)
static void dropout_forward(float *y, const float *x, float p, float thr, uint64_t key,
                            int64_t lo, int64_t hi)
{
    float keep_prob = 1.0f - p;
    for (int64_t i = lo; i < hi; i++) {
        int32_t u = (int32_t)(mix64(key + (uint64_t)i * GOLDEN_GAMMA) >> 40);
        y[i] = (float)u >= thr ? x[i] / keep_prob : 0.0f;
    }
}

void hx_k_dropout_f32(float *y, const float *x, float p, uint64_t seed, uint64_t stream,
                      int64_t n, int nthreads)
{
    uint64_t key = mix64(seed ^ mix64(stream + GOLDEN_GAMMA));
    float thr = p * 16777216.0f;
    if (!hx_k_go_parallel(n, nthreads)) {
        dropout_forward(y, x, p, thr, key, 0, n);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 16, &lo, &hi);
        dropout_forward(y, x, p, thr, key, lo, hi);
    }
}

/* ---- losses --------------------------------------------------------------------- */

/* A mean loss is the sum of LOSS_SPLIT partial sums (double) over pieces
 * whose bounds depend on the size only, added in order: the same bits at
 * any thread count. */
#define LOSS_SPLIT 64

// loss of one row x (C): logsumexp(x) - x[label]
static double cross_entropy_row(const float *x, int64_t C, int64_t label)
{
    float maxv = hx_k_max_f32(x, C);
    float sum = hx__vmath_sum_exp(x, maxv, C);
    return (double)maxv + log((double)sum) - (double)x[label];
}

// sum of the row losses of rows [lo, hi) of logits (N, C)
static double cross_entropy_forward(const float *logits, const void *labels, hx_kdtype label_dt,
                                    int64_t C, int64_t lo, int64_t hi)
{
    double sum = 0.0;
    for (int64_t i = lo; i < hi; i++)
        sum += cross_entropy_row(logits + i * C, C, hx_k_id_at(labels, label_dt, i));
    return sum;
}

int hx_k_cross_entropy_forward_f32(float *loss, const float *logits, const void *labels,
                                   hx_kdtype label_dt, int64_t N, int64_t C, int nthreads,
                                   int64_t *bad_pos)
{
    if (hx_k_check_ids(labels, label_dt, N, C, bad_pos)) return -1;
    double part[LOSS_SPLIT];
    if (!hx_k_go_parallel(N * C, nthreads)) {
        for (int k = 0; k < LOSS_SPLIT; k++)
            part[k] = cross_entropy_forward(logits, labels, label_dt, C, N * k / LOSS_SPLIT,
                                            N * (k + 1) / LOSS_SPLIT);
    } else {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int k = 0; k < LOSS_SPLIT; k++)
            part[k] = cross_entropy_forward(logits, labels, label_dt, C, N * k / LOSS_SPLIT,
                                            N * (k + 1) / LOSS_SPLIT);
    }
    double sum = 0.0;
    for (int k = 0; k < LOSS_SPLIT; k++) sum += part[k];
    loss[0] = N > 0 ? (float)(sum / (double)N) : 0.0f;
    return 0;
}

// dx (C) = scale * (softmax(x) - onehot(label)), one row
static void cross_entropy_backward(float *dx, const float *x, int64_t C, int64_t label,
                                   float scale)
{
    float maxv = hx_k_max_f32(x, C);
    float sum = hx__vmath()->exp_shift_sum(dx, x, maxv, C);
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < C; j++) dx[j] = scale * (dx[j] * inv - (j == label ? 1.0f : 0.0f));
}

int hx_k_cross_entropy_backward_f32(float *dlogits, const float *dloss, const float *logits,
                                    const void *labels, hx_kdtype label_dt, int64_t N, int64_t C,
                                    int nthreads, int64_t *bad_pos)
{
    if (hx_k_check_ids(labels, label_dt, N, C, bad_pos)) return -1;
    float scale = dloss[0] / (float)N;
    if (N <= 1 || !hx_k_go_parallel(N * C, nthreads)) {
        for (int64_t i = 0; i < N; i++)
            cross_entropy_backward(dlogits + i * C, logits + i * C, C,
                                   hx_k_id_at(labels, label_dt, i), scale);
        return 0;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < N; i++)
        cross_entropy_backward(dlogits + i * C, logits + i * C, C, hx_k_id_at(labels, label_dt, i),
                               scale);
    return 0;
}

// sum over [lo, hi) of max(x, 0) - x * t + log(1 + exp(-|x|))
static double bce_logits_forward(const float *x, const float *t, int64_t lo, int64_t hi)
{
    double sum = 0.0;
    for (int64_t i = lo; i < hi; i++)
        sum += (double)(fmaxf(x[i], 0.0f) - x[i] * t[i] + log1pf(expf(-fabsf(x[i]))));
    return sum;
}

void hx_k_bce_logits_forward_f32(float *loss, const float *x, const float *t, int64_t n,
                                 int nthreads)
{
    double part[LOSS_SPLIT];
    if (!hx_k_go_parallel(n, nthreads)) {
        for (int k = 0; k < LOSS_SPLIT; k++)
            part[k] = bce_logits_forward(x, t, n * k / LOSS_SPLIT, n * (k + 1) / LOSS_SPLIT);
    } else {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int k = 0; k < LOSS_SPLIT; k++)
            part[k] = bce_logits_forward(x, t, n * k / LOSS_SPLIT, n * (k + 1) / LOSS_SPLIT);
    }
    double sum = 0.0;
    for (int k = 0; k < LOSS_SPLIT; k++) sum += part[k];
    loss[0] = n > 0 ? (float)(sum / (double)n) : 0.0f;
}

// dx (n) = scale * (sigmoid(x) - t)
static void bce_logits_backward(float *dx, const float *x, const float *t, float scale, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dx[i] = scale * (1.0f / (1.0f + expf(-x[i])) - t[i]);
}

void hx_k_bce_logits_backward_f32(float *dx, const float *dloss, const float *x, const float *t,
                                  int64_t n, int nthreads)
{
    float scale = dloss[0] / (float)n;
    if (!hx_k_go_parallel(n, nthreads)) {
        bce_logits_backward(dx, x, t, scale, n);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 16, &lo, &hi);
        bce_logits_backward(dx + lo, x + lo, t + lo, scale, hi - lo);
    }
}
