/* The float vector vocabulary of the path files (see vec_scalar.h),
 * AVX-512 path: 16 floats. Included after the file's target pragma. */
#ifndef HX_VEC_AVX512_H
#define HX_VEC_AVX512_H

#include <immintrin.h>

static inline __m512 hx_vec_copysign16(__m512 mag, __m512 sgn)
{
    const __m512i s = _mm512_set1_epi32((int)0x80000000u);
    __m512i r = _mm512_or_si512(_mm512_andnot_si512(s, _mm512_castps_si512(mag)),
                                _mm512_and_si512(s, _mm512_castps_si512(sgn)));
    return _mm512_castsi512_ps(r);
}

#define W 16
typedef __m512 V;
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_DIV(a, b) _mm512_div_ps(a, b)
#define V_SQRT(x) _mm512_sqrt_ps(x)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_ABS(x) _mm512_abs_ps(x)
#define V_COPYSIGN(m, s) hx_vec_copysign16(m, s)

#endif
