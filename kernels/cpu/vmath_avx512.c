/* Vector math, AVX-512 path: 16 floats at a time, the same roundings as
 * the scalar path. Run only where hx_k_isa() says the CPU has AVX-512
 * F/BW/VL/DQ. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx2,fma"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC target("avx512f,avx512dq,avx2,fma")
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>
#include <stdint.h>

#define W 16
typedef __m512 V;
typedef __mmask16 M;

static inline V pow2_avx512(V n)
{
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

static inline V copysign_avx512(V m, V s)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(sign, _mm512_castps_si512(m)),
                                               _mm512_and_si512(sign, _mm512_castps_si512(s))));
}

#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_DIV(a, b) _mm512_div_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_MAX(a, b) _mm512_max_ps(a, b) /* a NaN in a gives b, as vmaxps does */
#define V_MIN(a, b) _mm512_min_ps(a, b)
#define V_ABS(x) _mm512_abs_ps(x)
#define V_COPYSIGN(m, s) copysign_avx512(m, s)
#define V_FLOOR(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define V_RINT(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_POW2(n) pow2_avx512(n)
#define V_LT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define V_GE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define V_EQ(a, b) _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ)
#define V_ISNAN(x) _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q)
#define V_SEL(m, a, b) _mm512_mask_blend_ps(m, b, a)
#define PATH hx__vmath_avx512

#include "vmath_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
