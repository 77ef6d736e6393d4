/* Row kernels along the last axis: softmax, log-softmax, layernorm, over
 * rows and threads. One row's work is kernels/cpu/rows_body.h, compiled for
 * every ISA path (hx__rows()); every row is computed by one thread in a
 * fixed order (sums via the lane partials of hx_kinternal.h), so results do
 * not depend on the thread count or the path.
 *
 * On 16-bit storage (the *_half entry points) a row's inputs are widened
 * exactly into the thread's f32 row buffers, the f32 row kernel runs on
 * them, and its output is rounded once: bitwise the chain that
 * widens whole tensors, runs the f32 kernel and rounds its output, without
 * the whole-tensor f32 copies. */
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

/* ---- 16-bit rows ----
 * Rows go k at a time (k n about HALF_GROUP elements: short rows share one
 * widening and one rounding call), each group of k contiguous rows widened
 * into the thread's f32 buffers of k n floats, the f32 row kernel run on
 * each of its rows (into another buffer: the row loops are vectorised where
 * output and inputs do not overlap), the group's output rounded. A row's
 * bits do not depend on its group. */
#define HALF_GROUP 1024

typedef struct half_rows {
    hx_kdtype dt;
    int64_t rows, n, k, groups; /* k rows a group */
    int nt;                     /* EACH_ROW's team over the groups */
    int shared, per;            /* row-length buffers shared (gamma, beta), group buffers a thread */
    float *w;
} half_rows;

/* The scratch of a 16-bit row kernel: `shared` buffers of n (gamma, beta)
 * then `per` of k n for each thread of EACH_ROW's team over the groups (one
 * when it runs serially: then omp_get_thread_num() may be a caller's
 * team's), and one float more so that no size is 0. Returns -1 when out of
 * memory. */
static int half_rows_init(half_rows *h, hx_kdtype dt, int64_t rows, int64_t n, int nthreads,
                          int shared, int per)
{
    h->dt = dt;
    h->rows = rows;
    h->n = n;
    h->k = n >= HALF_GROUP ? 1 : HALF_GROUP / n;
    h->groups = (rows + h->k - 1) / h->k;
    h->nt = rows_go_parallel(h->groups, h->k * n, nthreads) ? nthreads : 1;
    h->shared = shared;
    h->per = per;
    h->w = malloc(((size_t)shared * (size_t)n + (size_t)(per * h->nt) * (size_t)(h->k * n) + 1) *
                  sizeof(float));
    return h->w ? 0 : -1;
}

/* The calling thread's first group buffer. */
static float *group_buf(const half_rows *h)
{
    int64_t t = h->nt > 1 ? omp_get_thread_num() : 0;
    return h->w + h->shared * h->n + h->per * t * h->k * h->n;
}

/* Rows [*r0, *r1) of group q; returns their element count. */
static int64_t group_span(const half_rows *h, int64_t q, int64_t *r0)
{
    *r0 = q * h->k;
    int64_t r1 = *r0 + h->k < h->rows ? *r0 + h->k : h->rows;
    return (r1 - *r0) * h->n;
}

/* Runs the statement for each group r (EACH_ROW's index), over threads as
 * EACH_ROW runs rows. */
#define EACH_GROUP(h, nthreads, ...) EACH_ROW(nthreads, (h)->groups, (h)->k * (h)->n, __VA_ARGS__)

/* Element r0 n of a 16-bit (rows, n) array. */
#define AT(p, h, r0) hx__at(p, (h)->dt, (r0) * (h)->n)
#define AT_MUT(p, h, r0) hx__at_mut(p, (h)->dt, (r0) * (h)->n)

typedef void (*row1_fn)(float *y, const float *x, int64_t n);
typedef void (*row2_fn)(float *dx, const float *dy, const float *y, int64_t n);

/* Group q of a row kernel of one input: x widened into f, fn of each row
 * into o, rounded into y. */
static void group1(const half_rows *h, row1_fn fn, void *y, const void *x, int64_t q)
{
    int64_t r0, m = group_span(h, q, &r0), kn = h->k * h->n;
    float *f = group_buf(h), *o = f + kn;
    hx__widen(f, AT(x, h, r0), h->dt, m);
    for (int64_t j = 0; j < m; j += h->n) fn(o + j, f + j, h->n);
    hx__narrow(AT_MUT(y, h, r0), h->dt, o, m);
}

static int rows1_half(row1_fn fn, void *y, const void *x, hx_kdtype dt, int64_t rows, int64_t n,
                      int nthreads)
{
    half_rows h;
    if (half_rows_init(&h, dt, rows, n, nthreads, 0, 2)) return -1;
    EACH_GROUP(&h, nthreads, group1(&h, fn, y, x, r));
    free(h.w);
    return 0;
}

/* The same for a backward of dy and y: dx = fn(dy, y). */
static void group2(const half_rows *h, row2_fn fn, void *dx, const void *dy, const void *y,
                   int64_t q)
{
    int64_t r0, m = group_span(h, q, &r0), kn = h->k * h->n;
    float *fdy = group_buf(h), *fy = fdy + kn, *o = fy + kn;
    hx__widen(fdy, AT(dy, h, r0), h->dt, m);
    hx__widen(fy, AT(y, h, r0), h->dt, m);
    for (int64_t j = 0; j < m; j += h->n) fn(o + j, fdy + j, fy + j, h->n);
    hx__narrow(AT_MUT(dx, h, r0), h->dt, o, m);
}

static int rows2_half(row2_fn fn, void *dx, const void *dy, const void *y, hx_kdtype dt,
                      int64_t rows, int64_t n, int nthreads)
{
    half_rows h;
    if (half_rows_init(&h, dt, rows, n, nthreads, 0, 3)) return -1;
    EACH_GROUP(&h, nthreads, group2(&h, fn, dx, dy, y, r));
    free(h.w);
    return 0;
}

int hx_k_softmax_forward_half(void *y, const void *x, hx_kdtype dt, int64_t rows, int64_t n,
                              int nthreads)
{
    return rows1_half(hx__rows()->softmax_forward, y, x, dt, rows, n, nthreads);
}

int hx_k_softmax_backward_half(void *dx, const void *dy, const void *y, hx_kdtype dt,
                               int64_t rows, int64_t n, int nthreads)
{
    return rows2_half(hx__rows()->softmax_backward, dx, dy, y, dt, rows, n, nthreads);
}

int hx_k_log_softmax_forward_half(void *y, const void *x, hx_kdtype dt, int64_t rows,
                                  int64_t n, int nthreads)
{
    return rows1_half(hx__rows()->log_softmax_forward, y, x, dt, rows, n, nthreads);
}

int hx_k_log_softmax_backward_half(void *dx, const void *dy, const void *y, hx_kdtype dt,
                                   int64_t rows, int64_t n, int nthreads)
{
    return rows2_half(hx__rows()->log_softmax_backward, dx, dy, y, dt, rows, n, nthreads);
}

/* Group q of hx_k_layernorm_forward_half; gamma, beta widened in h->w. */
static void layernorm_group(const hx_rows_path *p, const half_rows *h, void *y, const void *x,
                            float eps, int64_t q)
{
    int64_t r0, m = group_span(h, q, &r0), n = h->n;
    float *f = group_buf(h), *o = f + h->k * n;
    hx__widen(f, AT(x, h, r0), h->dt, m);
    for (int64_t j = 0; j < m; j += n) p->layernorm_forward(o + j, f + j, h->w, h->w + n, eps, n);
    hx__narrow(AT_MUT(y, h, r0), h->dt, o, m);
}

int hx_k_layernorm_forward_half(void *y, const void *x, const void *gamma, const void *beta,
                                hx_kdtype dt, float eps, int64_t rows, int64_t n, int nthreads)
{
    const hx_rows_path *p = hx__rows();
    half_rows h;
    if (half_rows_init(&h, dt, rows, n, nthreads, 2, 2)) return -1;
    hx__widen(h.w, gamma, dt, n);
    hx__widen(h.w + n, beta, dt, n);
    EACH_GROUP(&h, nthreads, layernorm_group(p, &h, y, x, eps, r));
    free(h.w);
    return 0;
}

/* Group q of hx_k_add_layernorm_half: the chain's add (widened, summed in
 * f32, rounded to dt into s), then its layernorm on the rounded sum
 * widened again, rounded into y. */
static void add_layernorm_group(const hx_rows_path *p, const half_rows *h, void *s, void *y,
                                const void *x, const void *res, float eps, int64_t q)
{
    int64_t r0, m = group_span(h, q, &r0), n = h->n;
    float *a = group_buf(h), *b = a + h->k * n;
    hx__widen(a, AT(x, h, r0), h->dt, m);
    hx__widen(b, AT(res, h, r0), h->dt, m);
    for (int64_t j = 0; j < m; j++) a[j] = a[j] + b[j];
    hx__narrow(AT_MUT(s, h, r0), h->dt, a, m);
    hx__round_through(a, h->dt, m);
    for (int64_t j = 0; j < m; j += n) p->layernorm_forward(b + j, a + j, h->w, h->w + n, eps, n);
    hx__narrow(AT_MUT(y, h, r0), h->dt, b, m);
}

int hx_k_add_layernorm_half(void *s, void *y, const void *x, const void *res, const void *gamma,
                            const void *beta, hx_kdtype dt, float eps, int64_t rows, int64_t n,
                            int nthreads)
{
    const hx_rows_path *p = hx__rows();
    half_rows h;
    if (half_rows_init(&h, dt, rows, n, nthreads, 2, 2)) return -1;
    hx__widen(h.w, gamma, dt, n);
    hx__widen(h.w + n, beta, dt, n);
    EACH_GROUP(&h, nthreads, add_layernorm_group(p, &h, s, y, x, res, eps, r));
    free(h.w);
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

/* Group q of hx_k_layernorm_backward_x_half; gamma widened in h->w. */
static void layernorm_backward_x_group(const hx_rows_path *p, const half_rows *h, void *dx,
                                       const void *dy, const void *x, float eps, int64_t q)
{
    int64_t r0, m = group_span(h, q, &r0), n = h->n, kn = h->k * n;
    float *fdy = group_buf(h), *fx = fdy + kn, *o = fx + kn;
    hx__widen(fdy, AT(dy, h, r0), h->dt, m);
    hx__widen(fx, AT(x, h, r0), h->dt, m);
    for (int64_t j = 0; j < m; j += n)
        p->layernorm_backward_x(o + j, fdy + j, fx + j, h->w, eps, n);
    hx__narrow(AT_MUT(dx, h, r0), h->dt, o, m);
}

int hx_k_layernorm_backward_x_half(void *dx, const void *dy, const void *x, const void *gamma,
                                   hx_kdtype dt, float eps, int64_t rows, int64_t n,
                                   int nthreads)
{
    const hx_rows_path *p = hx__rows();
    half_rows h;
    if (half_rows_init(&h, dt, rows, n, nthreads, 1, 3)) return -1;
    hx__widen(h.w, gamma, dt, n);
    EACH_GROUP(&h, nthreads, layernorm_backward_x_group(p, &h, dx, dy, x, eps, r));
    free(h.w);
    return 0;
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

/* The same sums on 16-bit dy and x, dgamma accumulated in f32 and rounded
 * once at the end: stats and column slices as above, each row (or row
 * slice) widened into the thread's buffers first. */
int hx_k_layernorm_backward_gamma_half(void *dgamma, const void *dy, const void *x, hx_kdtype dt,
                                       float eps, int64_t rows, int64_t n, int nthreads)
{
    const hx_rows_path *p = hx__rows();
    int par = rows_go_parallel(rows, n, nthreads) && n >= 32, nt = par ? nthreads : 1;
    /* dgamma in f32, two row buffers per thread, then the row stats */
    float *w = malloc(((size_t)(1 + 2 * nt) * (size_t)n + 2 * (size_t)rows + 1) * sizeof(float));
    if (!w) return -1;
    float *dg = w, *stats = w + (1 + 2 * (int64_t)nt) * n;
    for (int64_t i = 0; i < n; i++) dg[i] = 0.0f;
    if (!par) {
        float *a = w + n, *b = w + 2 * n;
        for (int64_t r = 0; r < rows; r++) {
            float mean, rstd;
            hx__widen(a, hx__at(x, dt, r * n), dt, n);
            hx__widen(b, hx__at(dy, dt, r * n), dt, n);
            p->layernorm_stats(a, n, eps, &mean, &rstd);
            p->layernorm_gamma_add(dg, b, a, mean, rstd, 0, n);
        }
    } else {
#pragma omp parallel num_threads(nthreads)
        {
            float *a = w + (1 + 2 * (int64_t)omp_get_thread_num()) * n, *b = a + n;
#pragma omp for schedule(static)
            for (int64_t r = 0; r < rows; r++) {
                hx__widen(a, hx__at(x, dt, r * n), dt, n);
                p->layernorm_stats(a, n, eps, &stats[2 * r], &stats[2 * r + 1]);
            }
            int64_t lo, hi;
            hx_k_thread_slice(n, 16, &lo, &hi);
            for (int64_t r = 0; r < rows && lo < hi; r++) {
                hx__widen(a, hx__at(x, dt, r * n + lo), dt, hi - lo);
                hx__widen(b, hx__at(dy, dt, r * n + lo), dt, hi - lo);
                p->layernorm_gamma_add(dg + lo, b, a, stats[2 * r], stats[2 * r + 1], 0, hi - lo);
            }
        }
    }
    hx__narrow(dgamma, dt, dg, n);
    free(w);
    return 0;
}
