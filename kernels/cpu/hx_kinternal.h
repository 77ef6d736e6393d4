/* Private helpers shared by the CPU kernel files: when to go parallel, which
 * slice of a range a thread owns, order-fixed row reductions, id checks. */
#ifndef HX_KINTERNAL_H
#define HX_KINTERNAL_H

#include <math.h>
#include <stdint.h>

#include <omp.h>

#include "hx_kernels.h"

/* For helpers that take an op or size as an argument and must be compiled
 * once per constant value. */
#define HX_INLINE static inline __attribute__((always_inline))

/* True when n elements are worth a parallel region of nthreads threads. */
static inline int hx_k_go_parallel(int64_t n, int nthreads)
{
    return nthreads > 1 && n >= HX_K_PARALLEL_MIN;
}

/* [*lo, *hi): the slice of [0, n) owned by the calling thread of the current
 * parallel region, cut at multiples of `align` elements so that threads do
 * not share cache lines. */
static inline void hx_k_thread_slice(int64_t n, int64_t align, int64_t *lo, int64_t *hi)
{
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t blocks = (n + align - 1) / align;
    int64_t b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

/* Reductions below keep 16 independent partial sums and add them in a
 * fixed tree, so the order of the additions does not depend on the
 * alignment of the data or on how the compiler vectorises the loop (it may
 * not reassociate float adds, and does not need to: the lanes are
 * independent). */
#define HX_K_LANES 16

static inline float hx_k_lanes_total(float *acc)
{
    for (int w = HX_K_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) acc[k] += acc[k + w];
    return acc[0];
}

// max of x (n), NaNs passed over; exact, so any order gives the same
// result: HX_K_LANES running maxima, which both compilers vectorise (clang
// did not vectorise an omp simd max reduction of this select)
static inline float hx_k_max_f32(const float *x, int64_t n)
{
    float acc[HX_K_LANES];
    for (int k = 0; k < HX_K_LANES; k++) acc[k] = -INFINITY;
    int64_t i = 0;
    for (; i + HX_K_LANES <= n; i += HX_K_LANES)
        for (int k = 0; k < HX_K_LANES; k++) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    for (int k = 0; i + k < n; k++) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    for (int w = HX_K_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) acc[k] = acc[k + w] > acc[k] ? acc[k + w] : acc[k];
    return acc[0];
}

// sum of x (n)
static inline float hx_k_sum_f32(const float *x, int64_t n)
{
    float acc[HX_K_LANES] = {0};
    int64_t i = 0;
    for (; i + HX_K_LANES <= n; i += HX_K_LANES)
        for (int k = 0; k < HX_K_LANES; k++) acc[k] += x[i + k];
    for (int k = 0; i + k < n; k++) acc[k] += x[i + k];
    return hx_k_lanes_total(acc);
}

// sum of a (n) * b (n)
static inline float hx_k_dot_f32(const float *a, const float *b, int64_t n)
{
    float acc[HX_K_LANES] = {0};
    int64_t i = 0;
    for (; i + HX_K_LANES <= n; i += HX_K_LANES)
        for (int k = 0; k < HX_K_LANES; k++) acc[k] += a[i + k] * b[i + k];
    for (int k = 0; i + k < n; k++) acc[k] += a[i + k] * b[i + k];
    return hx_k_lanes_total(acc);
}

/* ---- ids and labels ---- */

static inline int64_t hx_k_id_at(const void *ids, hx_kdtype id_dt, int64_t i)
{
    return id_dt == HX_K_I32 ? ((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

/* 0 when every id is in [0, limit); else -1 with the first bad position in
 * *bad_pos. An id type other than i32 / i64 is bad at position 0. */
static inline int hx_k_check_ids(const void *ids, hx_kdtype id_dt, int64_t n, int64_t limit,
                                 int64_t *bad_pos)
{
    if (id_dt != HX_K_I32 && id_dt != HX_K_I64) {
        *bad_pos = 0;
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t id = hx_k_id_at(ids, id_dt, i);
        if (id < 0 || id >= limit) {
            *bad_pos = i;
            return -1;
        }
    }
    return 0;
}

/* y (n) = f(x (n)) for unary op `op` on the calling thread (y may be x):
 * what hx_k_unary_f32 runs on each thread's slice, and the fused GEMM's
 * epilogue (gemm.c) on each tile row. */
void hx__unary_forward(hx_unary_op op, float *y, const float *x, int64_t n);

/* x (n) = x rounded to dt (HX_K_F16 or HX_K_BF16) and widened back, on the
 * calling thread, with hx_k_cast's rounding (nearest even); HX_K_F32 leaves
 * x as it is. The fused GEMM's epilogue rounds a 16-bit chain's stages so. */
void hx__round_through(float *x, hx_kdtype dt, int64_t n);

/* ---- 16-bit storage ---- */

/* Elements a 16-bit (f16, bf16) elementwise kernel widens at a time into
 * f32 stack buffers (2 KiB each: they stay in L1 between the widening, the
 * f32 function and the rounding). */
#define HX_K_HALF_BLOCK 512

/* The length of the block a loop over HX_K_HALF_BLOCK blocks is at, with
 * `left` elements left. */
static inline int64_t hx__half_block(int64_t left)
{
    return left < HX_K_HALF_BLOCK ? left : HX_K_HALF_BLOCK;
}

/* Element i of a dt array, as bytes. */
static inline const char *hx__at(const void *p, hx_kdtype dt, int64_t i)
{
    return (const char *)p + i * (int64_t)hx_k_dtype_size(dt);
}
static inline char *hx__at_mut(void *p, hx_kdtype dt, int64_t i)
{
    return (char *)p + i * (int64_t)hx_k_dtype_size(dt);
}

/* f (n) = h (n, dt) widened exactly, on the calling thread (hx_k_cast's
 * conversion, called without its dispatch: the blocks are small). dt is a
 * float type. */
void hx__widen(float *f, const void *h, hx_kdtype dt, int64_t n);

/* h (n, dt) = f (n) rounded with hx_k_cast's rounding, on the calling thread,
 * likewise without its dispatch. dt is a float type. */
void hx__narrow(void *h, hx_kdtype dt, const float *f, int64_t n);

#endif
