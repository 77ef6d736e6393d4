/* Row kernels along the last axis: softmax, log-softmax, layernorm, over
 * rows and threads. One row's work is kernels/cpu/rows_body.h, compiled for
 * every ISA path (hx__rows()); every row is computed by one thread in a
 * fixed order (sums via the lane partials of hx_kinternal.h), so results do
 * not depend on the thread count or the path. */
#include <stdint.h>
#include <stdlib.h>

#include "hx_kinternal.h"
#include "rows_path.h"

/* Rows go to threads when the whole op is large and there are rows to share. */
static int rows_go_parallel(int64_t rows, int64_t n, int nthreads)
{
    return rows > 1 && hx_k_go_parallel(rows * n, nthreads);
}

/* Runs the statement for r in [0, rows), spread over nthreads threads when
 * the op is large enough. */
#define EACH_ROW(nthreads, rows, n, ...)                                              \
    do {                                                                              \
        if (!rows_go_parallel(rows, n, nthreads)) {                                   \
            for (int64_t r = 0; r < (rows); r++) __VA_ARGS__;                         \
        } else {                                                                      \
            _Pragma("omp parallel for num_threads(nthreads) schedule(static)")        \
            for (int64_t r = 0; r < (rows); r++) __VA_ARGS__;                         \
        }                                                                             \
    } while (0)

void hx_k_softmax_forward_f32(float *y, const float *x, int64_t rows, int64_t n, int nthreads)
{
    const hx_rows_path *p = hx__rows();
    EACH_ROW(nthreads, rows, n, p->softmax_forward(y + r * n, x + r * n, n));
}

void hx_k_softmax_backward_f32(float *dx, const float *dy, const float *y, int64_t rows,
                               int64_t n, int nthreads)
{
    const hx_rows_path *p = hx__rows();
    EACH_ROW(nthreads, rows, n, p->softmax_backward(dx + r * n, dy + r * n, y + r * n, n));
}

void hx_k_log_softmax_forward_f32(float *y, const float *x, int64_t rows, int64_t n,
                                  int nthreads)
{
    const hx_rows_path *p = hx__rows();
    EACH_ROW(nthreads, rows, n, p->log_softmax_forward(y + r * n, x + r * n, n));
}

void hx_k_log_softmax_backward_f32(float *dx, const float *dy, const float *y, int64_t rows,
                                   int64_t n, int nthreads)
{
    const hx_rows_path *p = hx__rows();
    EACH_ROW(nthreads, rows, n, p->log_softmax_backward(dx + r * n, dy + r * n, y + r * n, n));
}

void hx_k_layernorm_forward_f32(float *y, const float *x, const float *gamma,
                                const float *beta, float eps, int64_t rows, int64_t n,
                                int nthreads)
{
    const hx_rows_path *p = hx__rows();
    EACH_ROW(nthreads, rows, n, p->layernorm_forward(y + r * n, x + r * n, gamma, beta, eps, n));
}

/* One row of hx_k_add_layernorm_f32. */
static void add_layernorm_row(const hx_rows_path *p, float *s, float *y, const float *x,
                              const float *res, const float *gamma, const float *beta, float eps,
                              int64_t n)
{
    for (int64_t j = 0; j < n; j++) s[j] = x[j] + res[j];
    p->layernorm_forward(y, s, gamma, beta, eps, n);
}

void hx_k_add_layernorm_f32(float *s, float *y, const float *x, const float *res,
                            const float *gamma, const float *beta, float eps, int64_t rows,
                            int64_t n, int nthreads)
{
    const hx_rows_path *p = hx__rows();
    EACH_ROW(nthreads, rows, n,
             add_layernorm_row(p, s + r * n, y + r * n, x + r * n, res + r * n, gamma, beta,
                               eps, n));
}

/* One row of hx_k_add_layernorm_half: the chain's add (widened, summed in
 * f32, rounded to dt into s), then its layernorm on the rounded sum widened
 * again, rounded into y. w holds 2n floats. */
static void add_layernorm_half_row(const hx_rows_path *p, void *s, void *y, const void *x,
                                   const void *res, hx_kdtype dt, const float *gamma,
                                   const float *beta, float eps, int64_t n, float *w)
{
    float *a = w, *b = w + n;
    hx_k_cast(a, HX_K_F32, x, dt, n, 1);
    hx_k_cast(b, HX_K_F32, res, dt, n, 1);
    for (int64_t j = 0; j < n; j++) a[j] = a[j] + b[j];
    hx_k_cast(s, dt, a, HX_K_F32, n, 1);
    hx__round_through(a, dt, n);
    p->layernorm_forward(b, a, gamma, beta, eps, n);
    hx_k_cast(y, dt, b, HX_K_F32, n, 1);
}

int hx_k_add_layernorm_half(void *s, void *y, const void *x, const void *res, const void *gamma,
                            const void *beta, hx_kdtype dt, float eps, int64_t rows, int64_t n,
                            int nthreads)
{
    const hx_rows_path *p = hx__rows();
    /* a row's scratch: 2n floats per thread of EACH_ROW's team (one when it
     * runs serially: then omp_get_thread_num() may be a caller's team's) */
    int nt = rows_go_parallel(rows, n, nthreads) ? nthreads : 1;
    float *w = malloc((size_t)(2 + 2 * nt) * (size_t)n * sizeof(float));
    if (!w) return -1;
    hx_k_cast(w, HX_K_F32, gamma, dt, n, 1);
    hx_k_cast(w + n, HX_K_F32, beta, dt, n, 1);
    size_t es = hx_k_dtype_size(dt);
    EACH_ROW(nthreads, rows, n,
             add_layernorm_half_row(p, (char *)s + r * n * es, (char *)y + r * n * es,
                                    (const char *)x + r * n * es, (const char *)res + r * n * es,
                                    dt, w, w + n, eps, n,
                                    w + (2 + 2 * (int64_t)(nt > 1 ? omp_get_thread_num() : 0)) * n));
    free(w);
    return 0;
}

void hx_k_layernorm_backward_x_f32(float *dx, const float *dy, const float *x,
                                   const float *gamma, float eps, int64_t rows, int64_t n,
                                   int nthreads)
{
    const hx_rows_path *p = hx__rows();
    EACH_ROW(nthreads, rows, n,
             p->layernorm_backward_x(dx + r * n, dy + r * n, x + r * n, gamma, eps, n));
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
    const hx_rows_path *p = hx__rows();
    float *stats = rows_go_parallel(rows, n, nthreads) && n >= 32
                       ? malloc((size_t)rows * 2 * sizeof(float))
                       : NULL;
    for (int64_t i = 0; i < n; i++) dgamma[i] = 0.0f;
    if (!stats) {
        for (int64_t r = 0; r < rows; r++) {
            float mean, rstd;
            p->layernorm_stats(x + r * n, n, eps, &mean, &rstd);
            p->layernorm_gamma_add(dgamma, dy + r * n, x + r * n, mean, rstd, 0, n);
        }
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            p->layernorm_stats(x + r * n, n, eps, &stats[2 * r], &stats[2 * r + 1]);
        int64_t lo, hi;
        hx_k_thread_slice(n, 16, &lo, &hi);
        for (int64_t r = 0; r < rows; r++)
            p->layernorm_gamma_add(dgamma, dy + r * n, x + r * n, stats[2 * r], stats[2 * r + 1],
                                   lo, hi);
    }
    free(stats);
}
