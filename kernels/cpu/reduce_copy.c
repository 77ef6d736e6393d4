/* reduce_sum over any set of dimensions, and the strided copy behind
 * permute, broadcast, slice and concat. */
#include <stdint.h>
#include <string.h>

#include "hx_kinternal.h"

/* An odometer over some dimensions of x: `off` is the element offset of the
 * current index, step() moves to the next index in row-major order. */
typedef struct walk {
    int nd;
    int64_t size[HX_K_MAX_DIMS], stride[HX_K_MAX_DIMS], idx[HX_K_MAX_DIMS];
    int64_t off;
} walk;

static void walk_step(walk *w)
{
    for (int d = w->nd - 1; d >= 0; d--) {
        w->off += w->stride[d];
        if (++w->idx[d] < w->size[d]) return;
        w->off -= w->size[d] * w->stride[d];
        w->idx[d] = 0;
    }
}

/* Element offset of the i-th index (row-major) of the walk's dimensions. */
static int64_t walk_offset(const walk *w, int64_t i)
{
    int64_t off = 0;
    for (int d = w->nd - 1; d >= 0; d--) {
        off += (i % w->size[d]) * w->stride[d];
        i /= w->size[d];
    }
    return off;
}

/* ---- reduce_sum ----------------------------------------------------------- */

/* The dims of x after dropping size-1 dims and merging neighbours that are
 * both kept or both reduced (x is contiguous, so such a pair is one run). */
typedef struct reduce_plan {
    walk kept;    /* kept dims, out order; the innermost one last */
    walk reduced; /* reduced dims, in the order of x */
    int inner_reduced; /* the innermost dim of x is a reduced one */
} reduce_plan;

#define REDUCE_COL_BLOCK 512  /* columns per task when the innermost dim is kept */
#define REDUCE_SPLIT 64       /* fixed number of pieces of a large full reduction */

// out[c0:c1] of out row o = sum over the reduced index (row-major order) of
// x[o's offset + reduced offset + c0:c1]; the innermost dim is kept, size K
static void reduce_sum_cols(float *out, const float *x, const reduce_plan *p, int64_t o,
                            int64_t c0, int64_t c1)
{
    walk outer = p->kept;
    outer.nd--; /* the kept dims outside the innermost one */
    walk r = p->reduced;
    int64_t base = walk_offset(&outer, o);
    int64_t count = 1;
    for (int d = 0; d < r.nd; d++) count *= r.size[d];
    for (int64_t c = c0; c < c1; c++) out[c] = 0.0f;
    for (int64_t k = 0; k < count; k++) {
        const float *xr = x + base + r.off;
        for (int64_t c = c0; c < c1; c++) out[c] += xr[c];
        walk_step(&r);
    }
}

// out[o] = sum over the reduced dims outside the innermost one (row-major
// order) of the sum of the contiguous innermost run of length R
static float reduce_sum_runs(const float *x, const reduce_plan *p, int64_t o)
{
    walk r = p->reduced;
    int64_t R = r.size[r.nd - 1];
    r.nd--;
    int64_t base = walk_offset(&p->kept, o);
    int64_t count = 1;
    for (int d = 0; d < r.nd; d++) count *= r.size[d];
    float sum = 0.0f;
    for (int64_t k = 0; k < count; k++) {
        sum += hx_k_sum_f32(x + base + r.off, R);
        walk_step(&r);
    }
    return sum;
}

// sum of x (n), n large: REDUCE_SPLIT pieces whose bounds depend on n only,
// summed in parallel, then added in order
static float reduce_sum_split(const float *x, int64_t n, int nthreads)
{
    float part[REDUCE_SPLIT];
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
    for (int k = 0; k < REDUCE_SPLIT; k++) {
        int64_t lo = n * k / REDUCE_SPLIT, hi = n * (k + 1) / REDUCE_SPLIT;
        part[k] = hx_k_sum_f32(x + lo, hi - lo);
    }
    float sum = 0.0f;
    for (int k = 0; k < REDUCE_SPLIT; k++) sum += part[k];
    return sum;
}

void hx_k_reduce_sum_f32(float *out, const float *x, const int64_t *shape, int ndim,
                         const uint8_t *reduce, int nthreads)
{
    int64_t sh[HX_K_MAX_DIMS];
    uint8_t red[HX_K_MAX_DIMS];
    int nd = 0;
    int64_t out_total = 1, red_total = 1;
    for (int d = 0; d < ndim; d++) {
        if (reduce[d]) red_total *= shape[d];
        else out_total *= shape[d];
        if (shape[d] == 1) continue;
        if (nd > 0 && red[nd - 1] == (reduce[d] != 0)) {
            sh[nd - 1] *= shape[d];
        } else {
            sh[nd] = shape[d];
            red[nd] = reduce[d] != 0;
            nd++;
        }
    }
    if (out_total == 0) return;
    if (red_total == 0 || nd == 0) {
        for (int64_t o = 0; o < out_total; o++) out[o] = red_total ? x[o] : 0.0f;
        return;
    }
    int64_t xs[HX_K_MAX_DIMS];
    xs[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) xs[d] = xs[d + 1] * sh[d + 1];
    reduce_plan p = {.inner_reduced = red[nd - 1]};
    for (int d = 0; d < nd; d++) {
        walk *w = red[d] ? &p.reduced : &p.kept;
        w->size[w->nd] = sh[d];
        w->stride[w->nd] = xs[d];
        w->nd++;
    }
    int par = hx_k_go_parallel(out_total * red_total, nthreads);

    if (p.inner_reduced) {
        if (nd == 1 && red_total >= HX_K_PARALLEL_MIN) {
            out[0] = reduce_sum_split(x, red_total, nthreads);
            return;
        }
        if (!par) {
            for (int64_t o = 0; o < out_total; o++) out[o] = reduce_sum_runs(x, &p, o);
            return;
        }
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t o = 0; o < out_total; o++) out[o] = reduce_sum_runs(x, &p, o);
        return;
    }

    int64_t K = p.kept.size[p.kept.nd - 1];
    int64_t nblk = (K + REDUCE_COL_BLOCK - 1) / REDUCE_COL_BLOCK;
    int64_t tasks = out_total / K * nblk;
    if (!par) {
        for (int64_t o = 0; o < out_total / K; o++) reduce_sum_cols(out + o * K, x, &p, o, 0, K);
        return;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t o = t / nblk, c0 = t % nblk * REDUCE_COL_BLOCK;
        int64_t c1 = c0 + REDUCE_COL_BLOCK < K ? c0 + REDUCE_COL_BLOCK : K;
        reduce_sum_cols(out + o * K, x, &p, o, c0, c1);
    }
}

/* ---- copy_strided --------------------------------------------------------- */

// out (n, stride os) = x (n, stride xs), elements of es bytes, strides in elements
HX_INLINE void copy_run(char *out, int64_t os, const char *x, int64_t xs, int64_t n, size_t es)
{
    if (os == 1 && xs == 1) {
        memcpy(out, x, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(out + i * os * (int64_t)es, x + i * xs * (int64_t)es, es);
}

/* Elements [lo, hi) of the row-major index space of `shape` (nd >= 1),
 * one innermost run at a time. */
HX_INLINE void copy_range(char *out, const int64_t *os, const char *x, const int64_t *xs,
                          const int64_t *shape, int nd, size_t es, int64_t lo, int64_t hi)
{
    int64_t idx[HX_K_MAX_DIMS] = {0};
    int64_t oo = 0, xo = 0;
    for (int64_t d = nd - 1, rem = lo; d >= 0 && rem > 0; d--) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
        oo += idx[d] * os[d];
        xo += idx[d] * xs[d];
    }
    int last = nd - 1;
    for (int64_t i = lo; i < hi;) {
        int64_t len = shape[last] - idx[last];
        if (len > hi - i) len = hi - i;
        copy_run(out + oo * (int64_t)es, os[last], x + xo * (int64_t)es, xs[last], len, es);
        i += len;
        idx[last] += len;
        oo += len * os[last];
        xo += len * xs[last];
        for (int d = last; d > 0 && idx[d] == shape[d]; d--) {
            oo += os[d - 1] - shape[d] * os[d];
            xo += xs[d - 1] - shape[d] * xs[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* One copy of the walk per common element size, so that the per-element
 * memcpy is a single load and store. */
static void copy_range_sized(char *out, const int64_t *os, const char *x, const int64_t *xs,
                             const int64_t *shape, int nd, size_t es, int64_t lo, int64_t hi)
{
    switch (es) {
    case 1: copy_range(out, os, x, xs, shape, nd, 1, lo, hi); break;
    case 2: copy_range(out, os, x, xs, shape, nd, 2, lo, hi); break;
    case 4: copy_range(out, os, x, xs, shape, nd, 4, lo, hi); break;
    case 8: copy_range(out, os, x, xs, shape, nd, 8, lo, hi); break;
    default: copy_range(out, os, x, xs, shape, nd, es, lo, hi); break;
    }
}

void hx_k_copy_strided(void *out, const int64_t *out_strides, const void *x,
                       const int64_t *x_strides, const int64_t *shape, int ndim,
                       size_t elem_size, int nthreads)
{
    /* Drop size-1 dims; merge a dim into the one outside it when both sides
     * step through the pair as one run. */
    int64_t sh[HX_K_MAX_DIMS], os[HX_K_MAX_DIMS], xs[HX_K_MAX_DIMS];
    int nd = 0;
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        total *= shape[d];
        if (shape[d] == 1) continue;
        if (nd > 0 && os[nd - 1] == out_strides[d] * shape[d] &&
            xs[nd - 1] == x_strides[d] * shape[d]) {
            sh[nd - 1] *= shape[d];
        } else {
            sh[nd] = shape[d];
            nd++;
        }
        os[nd - 1] = out_strides[d];
        xs[nd - 1] = x_strides[d];
    }
    if (total == 0) return;
    if (nd == 0) {
        sh[0] = 1;
        os[0] = xs[0] = 0;
        nd = 1;
    }
    if (!hx_k_go_parallel(total, nthreads)) {
        copy_range_sized(out, os, x, xs, sh, nd, elem_size, 0, total);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(total, 16, &lo, &hi);
        copy_range_sized(out, os, x, xs, sh, nd, elem_size, lo, hi);
    }
}
