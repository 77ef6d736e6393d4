/* Optimizer kernels, scalar path: one element at a time, for CPUs without
 * AVX2 and as the reference the vector paths must match bit for bit. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "optim_internal.h"

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Round to nearest even; overflow gives Inf; a NaN keeps the top of its
 * payload and becomes quiet, as vcvtps2ph does. */
static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f), a = x & 0x7fffffff;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    if (a > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* >= 65520 rounds to Inf */
    if (a >= 0x38800000) {                                 /* normal f16 */
        uint32_t r = a - 0x38000000;
        return (uint16_t)(sign | ((r + 0xfff + ((r >> 13) & 1)) >> 13));
    }
    /* subnormal f16 or zero: units of 2^-24 */
    uint32_t e = a >> 23, sig = e ? (a & 0x7fffff) | 0x800000 : a & 0x7fffff;
    uint32_t shift = 126 - (e ? e : 1);
    if (shift > 24) return sign;
    uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

/* Round to nearest even; a NaN keeps the top of its payload and becomes
 * quiet, as vcvtneps2bf16 does. */
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static uint32_t max_abs(const void *g, hx_kdtype dt, int64_t n)
{
    uint32_t m = 0;
    if (dt == HX_K_F32) {
        const uint32_t *x = g;
        for (int64_t i = 0; i < n; i++) m = (x[i] & 0x7fffffff) > m ? x[i] & 0x7fffffff : m;
    } else {
        const uint16_t *x = g;
        for (int64_t i = 0; i < n; i++) m = (x[i] & 0x7fffu) > m ? x[i] & 0x7fffu : m;
    }
    return m;
}

#include "vec_scalar.h"

#define V_GT_OR0(a, b, x) ((a) > (b) ? (x) : 0.0f)
#define V_LOAD_F16(p) hx_optim_f16_to_f32(*(p))
#define V_LOAD_BF16(p) f32_from_bits((uint32_t)*(p) << 16)
typedef uint16_t H;
#define V_TO_F16(x) f32_to_f16(x)
#define V_TO_BF16(x, native) f32_to_bf16(x)
#define H_STORE(p, h) (*(p) = (h))
#define H_STREAM(p, h) (*(p) = (h))
#define H_FENCE() ((void)0)
#define V_DIV_BY(x, b, rb) ((x) / (b))
#define PATH_NAME hx_optim_path_scalar

#include "optim_body.h"
