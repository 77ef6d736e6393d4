/* The float vector vocabulary of the path files (see vec_scalar.h), AVX2 +
 * FMA path: 8 floats. Included after the file's target pragma. */
#ifndef HX_VEC_AVX2_H
#define HX_VEC_AVX2_H

#include <immintrin.h>

static inline __m256 hx_vec_copysign8(__m256 mag, __m256 sgn)
{
    const __m256 s = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sgn));
}

#define W 8
typedef __m256 V;
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_DIV(a, b) _mm256_div_ps(a, b)
#define V_SQRT(x) _mm256_sqrt_ps(x)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_ABS(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)
#define V_COPYSIGN(m, s) hx_vec_copysign8(m, s)

#endif
