/* The mixed-precision Adam step's ceiling loops (optim_ceiling.h), shared
 * by bench_optim and bench_zero. */
#include "optim_ceiling.h"

#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kernels/cpu/optim_internal.h"

/* p, m, v += g * z (g 16-bit, as bf16); h = top half of p */
CEIL_FN void shape_mp(float *restrict p, float *restrict m, float *restrict v,
                             const uint16_t *restrict g, uint16_t *restrict h, float z,
                             int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)g[i] << 16;
        float x;
        memcpy(&x, &u, 4);
        x *= z;
        p[i] += x;
        m[i] += x;
        v[i] += x;
        uint32_t b;
        memcpy(&b, &p[i], 4);
        h[i] = (uint16_t)(b >> 16);
    }
}

/* 64 elements of shape_mp, the half copy into hb. */
static inline __attribute__((always_inline)) void shape_mp_block(float *restrict p,
                                                                 float *restrict m,
                                                                 float *restrict v,
                                                                 const uint16_t *restrict g,
                                                                 uint16_t *restrict hb, float z)
{
    for (int k = 0; k < 64; k++) {
        uint32_t u = (uint32_t)g[k] << 16;
        float x;
        memcpy(&x, &u, 4);
        x *= z;
        p[k] += x;
        m[k] += x;
        v[k] += x;
        uint32_t b;
        memcpy(&b, &p[k], 4);
        hb[k] = (uint16_t)(b >> 16);
    }
}

/* Prefetches the lines of block i + HX_OPTIM_PF_DIST of shape_mp's arrays. */
static inline __attribute__((always_inline)) void shape_mp_prefetch(float *p, float *m, float *v,
                                                                    const uint16_t *g,
                                                                    int64_t i, int64_t n)
{
    if (i + HX_OPTIM_PF_DIST + 64 > n) return;
    for (int k = 0; k < 64; k += 16) {
        __builtin_prefetch(p + i + HX_OPTIM_PF_DIST + k, 1, 3);
        __builtin_prefetch(m + i + HX_OPTIM_PF_DIST + k, 1, 3);
        __builtin_prefetch(v + i + HX_OPTIM_PF_DIST + k, 1, 3);
    }
    __builtin_prefetch(g + i + HX_OPTIM_PF_DIST, 0, 3);
    __builtin_prefetch(g + i + HX_OPTIM_PF_DIST + 32, 0, 3);
}

/* shape_mp with the kernels' software prefetch. */
CEIL_FN void shape_mp_pf(float *restrict p, float *restrict m, float *restrict v,
                                const uint16_t *restrict g, uint16_t *restrict h, float z,
                                int64_t n)
{
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        shape_mp_prefetch(p, m, v, g, i, n);
        shape_mp_block(p + i, m + i, v + i, g + i, h + i, z);
    }
    if (i < n) shape_mp(p + i, m + i, v + i, g + i, h + i, z, n - i);
}

/* shape_mp_pf with the half copy written by non-temporal stores, as the
 * mixed-precision kernels write it when it is aligned and long: h is only
 * written, so none of its lines need be read in first. Slices start at
 * multiples of 64 elements: aligned. */
CEIL_FN void shape_mp_nt(float *restrict p, float *restrict m, float *restrict v,
                                const uint16_t *restrict g, uint16_t *restrict h, float z,
                                int64_t n)
{
    int64_t i = 0;
#ifdef __SSE2__
    for (; i + 64 <= n; i += 64) {
        uint16_t hb[64] __attribute__((aligned(16)));
        shape_mp_prefetch(p, m, v, g, i, n);
        shape_mp_block(p + i, m + i, v + i, g + i, hb, z);
        for (int k = 0; k < 64; k += 8)
            _mm_stream_si128((__m128i *)(h + i + k), _mm_load_si128((const __m128i *)(hb + k)));
    }
    _mm_sfence();
#endif
    if (i < n) shape_mp(p + i, m + i, v + i, g + i, h + i, z, n - i);
}
