/* Vector math and row kernels, AVX2 + FMA path: 8 floats at a time, the same roundings as
 * the scalar path. Run only where hx_k_isa() says the CPU has AVX2. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdint.h>

#include "hx_kinternal.h" /* before the vocabulary: hx_kernels.h has a field W */
#include "vec_avx2.h"

typedef __m256 M;

static inline V pow2_avx2(V n)
{
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}

/* vmaxps/vminps return the second operand when either is NaN; as written
 * here (a > b ? a : b) a NaN in a gives b */
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_MIN(a, b) _mm256_min_ps(a, b)
#define V_FLOOR(x) _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define V_RINT(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_POW2(n) pow2_avx2(n)
#define V_LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define V_GE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define V_EQ(a, b) _mm256_cmp_ps(a, b, _CMP_EQ_OQ)
#define V_ISNAN(x) _mm256_cmp_ps(x, x, _CMP_UNORD_Q)
#define V_SEL(m, a, b) _mm256_blendv_ps(b, a, m)
#define PATH hx__vmath_avx2

#include "vmath_body.h"

#define ROWS_PATH hx__rows_avx2
#include "rows_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
