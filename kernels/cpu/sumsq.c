/* Sum of squares of a gradient, in double: the gradient scan's one pass.
 *
 * It serves two checks at once: the sum is finite exactly when every
 * element is (a finite f32 squared is below 2^256, and no f32 tensor has
 * 2^700 elements), and its square root is the gradient's L2 norm for
 * clipping. The elements are summed in blocks of HX_SUMSQ_BLOCK, each block
 * in 16 lanes added in a fixed tree, and the blocks in order, so the result
 * does not depend on the thread count. */
#include <stdlib.h>

#include "hx_kinternal.h"

enum { HX_SUMSQ_BLOCK = 1 << 16, CONVERT = 1024 };

static double lanes_total(double *acc)
{
    for (int w = HX_K_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) acc[k] += acc[k + w];
    return acc[0];
}

// sum of x[i]^2 over x (n), n <= HX_SUMSQ_BLOCK
static double block_sumsq(const void *x, hx_kdtype dt, int64_t n)
{
    double acc[HX_K_LANES] = {0};
    float buf[CONVERT];
    for (int64_t at = 0; at < n; at += CONVERT) {
        int64_t m = n - at < CONVERT ? n - at : CONVERT;
        const float *v = buf;
        if (dt == HX_K_F32) v = (const float *)x + at;
        else hx_k_cast(buf, HX_K_F32, (const char *)x + at * 2, dt, m, 1);
        int64_t i = 0;
        for (; i + HX_K_LANES <= m; i += HX_K_LANES)
            for (int k = 0; k < HX_K_LANES; k++) acc[k] += (double)v[i + k] * v[i + k];
        for (int k = 0; i + k < m; k++) acc[k] += (double)v[i + k] * v[i + k];
    }
    return lanes_total(acc);
}

// block b of x (n)
static double block_at(const void *x, hx_kdtype dt, int64_t n, int64_t b)
{
    int64_t lo = b * HX_SUMSQ_BLOCK, m = n - lo < HX_SUMSQ_BLOCK ? n - lo : HX_SUMSQ_BLOCK;
    return block_sumsq((const char *)x + lo * (dt == HX_K_F32 ? 4 : 2), dt, m);
}

double hx_k_sumsq(const void *x, hx_kdtype dt, int64_t n, int nthreads)
{
    int64_t nb = (n + HX_SUMSQ_BLOCK - 1) / HX_SUMSQ_BLOCK;
    double total = 0, *part = nb > 1 && nthreads > 1 ? malloc(sizeof *part * nb) : NULL;
    if (!part) { /* one thread (or no memory for the partial sums): the same order */
        for (int64_t b = 0; b < nb; b++) total += block_at(x, dt, n, b);
        return total;
    }
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t b = 0; b < nb; b++) part[b] = block_at(x, dt, n, b);
    for (int64_t b = 0; b < nb; b++) total += part[b];
    free(part);
    return total;
}
