/* Private to the optimizer kernels: what the API layer (optim_api.c) hands
 * to a path (optim_scalar.c, optim_avx2.c, optim_avx512.c). */
#ifndef HX_OPTIM_INTERNAL_H
#define HX_OPTIM_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "optim.h"

/* Prefetching, measured with bench_optim on a 2-core Sapphire-Rapids-class
 * VM at 64M params: dense loops prefetch each stream this many elements
 * ahead (the hardware prefetcher alone left Adam at about 0.88 of the
 * plain-loop ceiling, this at about 1.0; 128 to 1024 measured alike); row
 * updates prefetch the rows of the entries this far ahead into L2
 * (prefetcht1: LazyAdam at 0.75 of the dense ceiling, prefetcht0: 0.59;
 * 16 to 64 entries ahead measured alike). On a 2-core AMD EPYC (Zen 4) VM
 * the same choice holds: bench_optim's row loop at 64M params with
 * prefetcht0, prefetchnta or prefetchw instead ran at 0.58-0.65 of its
 * prefetcht1 rate (LazyAdam with prefetcht0: 0.65), and 16 to 64 entries
 * ahead measured alike (8: up to 6% slower; under load, interleaved). */
#define HX_OPTIM_PF_DIST 512
#define HX_OPTIM_ROW_AHEAD 32
#define HX_OPTIM_ROW_HINT 2

/* The half copy is written with streaming stores from this many elements
 * on (it goes to DRAM anyway, and the stores skip reading its lines first:
 * about 5% on the 64M-param mixed-precision step; no difference at 4M). */
#define HX_OPTIM_STREAM_MIN ((int64_t)1 << 20)

/* The arrays of an update, each at the first element to update: param,
 * state (Adam m, v; Adagrad sum; SGD buf; FTRL accum, linear; NULL where
 * unused), gradient, half copy (NULL for none). */
typedef struct hx_optim_arrays {
    float *p, *s1, *s2;
    const void *g;
    void *h;
} hx_optim_arrays;

typedef struct hx_optim_path {
    /* Updates n consecutive elements. */
    void (*update)(const hx_optim_plan *pl, hx_optim_arrays a, int64_t n);
    /* Updates the rows named by ids (n) whose owner (hx_optim_row_owner)
     * among nparts is `part`, each entry i from the f32 gradient row
     * a.g + i*dim, in order of i. a.p, a.s1, a.s2 are the tables. */
    void (*update_rows)(const hx_optim_plan *pl, hx_optim_arrays a, const int64_t *ids,
                        int64_t n, int64_t dim, int part, int nparts);
    /* The largest |x| over n values of g, as x's bits with the sign
     * cleared (f16 and bf16 in their own 16-bit encoding): NaN patterns
     * sort above Inf, Inf above every finite value (the scan's measure). */
    uint32_t (*max_abs)(const void *g, hx_kdtype dt, int64_t n);
    /* q = x / b over n values, as the kernels divide by a per-call
     * constant (the tests hold it to the division's bits). */
    void (*div_const)(float *q, const float *x, int64_t n, float b);
} hx_optim_path;

extern const hx_optim_path hx_optim_path_scalar;
extern const hx_optim_path hx_optim_path_avx2;
extern const hx_optim_path hx_optim_path_avx512;

/* f16 bits to f32, exactly; a NaN keeps its payload and becomes quiet, as
 * vcvtph2ps does. */
static inline float hx_optim_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) u = sign | 0x7f800000 | (m << 13) | (m ? 0x400000 : 0);
    else if (e == 0) {
        float f = (float)m * 0x1p-24f;
        memcpy(&u, &f, 4);
        u |= sign;
    } else u = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Which of nparts threads updates a row: a multiplicative hash, so that
 * rows spread evenly whatever the ids' pattern, and every occurrence of an
 * id lands on the same thread. */
static inline int hx_optim_row_owner(int64_t id, int nparts)
{
    uint64_t h = ((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 32;
    return (int)((h * (uint64_t)nparts) >> 32);
}

#endif
