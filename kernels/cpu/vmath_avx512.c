/* Vector math and row kernels, AVX-512 path: 16 floats at a time, the same roundings as
 * the scalar path. Run only where hx_k_isa() says the CPU has AVX-512
 * F/BW/VL/DQ. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx2,fma"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC target("avx512f,avx512dq,avx2,fma")
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdint.h>

#include "hx_kinternal.h" /* before the vocabulary: hx_kernels.h has a field W */
#include "vec_avx512.h"

typedef __mmask16 M;

static inline V pow2_avx512(V n)
{
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

#define V_MAX(a, b) _mm512_max_ps(a, b) /* a NaN in a gives b, as vmaxps does */
#define V_MIN(a, b) _mm512_min_ps(a, b)
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

#define ROWS_PATH hx__rows_avx512
#include "rows_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
