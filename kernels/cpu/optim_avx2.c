/* Optimizer kernels, AVX2 + FMA + F16C path: 8 floats at a time. Run only
 * where hx_k_isa() says the CPU has them. */
/* The ISA of this file only, and no fused multiply-adds the source does
 * not write (the scalar path is the bit-exact reference): GCC's pragmas, or
 * clang's attribute region (closed at the end of the file). */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC target("avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>
#include <stdint.h>

#include "optim_internal.h"

static inline __m256 load_bf16x8(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Round to nearest even in integer arithmetic; a NaN keeps the top of its
 * payload and becomes quiet. */
static inline __m128i bf16x8(__m256 x)
{
    __m256i b = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, q, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static uint32_t max_abs(const void *g, hx_kdtype dt, int64_t n)
{
    const char *b = g;
    int sz = dt == HX_K_F32 ? 4 : 2, per = 32 / sz;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    __m256i mask = sz == 4 ? _mm256_set1_epi32(0x7fffffff) : _mm256_set1_epi16(0x7fff);
    int64_t i = 0;
    for (; i + 2 * per <= n; i += 2 * per) {
        __m256i x0 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(b + i * sz)), mask);
        __m256i x1 = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(b + (i + per) * sz)), mask);
        a0 = sz == 4 ? _mm256_max_epu32(a0, x0) : _mm256_max_epu16(a0, x0);
        a1 = sz == 4 ? _mm256_max_epu32(a1, x1) : _mm256_max_epu16(a1, x1);
    }
    a0 = sz == 4 ? _mm256_max_epu32(a0, a1) : _mm256_max_epu16(a0, a1);
    uint32_t lanes[8], m = 0;
    if (sz == 2) a0 = _mm256_max_epu32(_mm256_and_si256(a0, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(a0, 16));
    _mm256_storeu_si256((__m256i *)lanes, a0);
    for (int k = 0; k < 8; k++) m = lanes[k] > m ? lanes[k] : m;
    for (; i < n; i++) {
        uint32_t x = sz == 4 ? ((const uint32_t *)g)[i] & 0x7fffffff : ((const uint16_t *)g)[i] & 0x7fffu;
        m = x > m ? x : m;
    }
    return m;
}

#include "vec_avx2.h"

#define V_GT_OR0(a, b, x) _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ), x)
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_LOAD_BF16(p) load_bf16x8(p)
typedef __m128i H;
#define V_TO_F16(x) _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)
#define V_TO_BF16(x, native) bf16x8(x)
#define H_STORE(p, h) _mm_storeu_si128((__m128i *)(p), h)
#define H_STREAM(p, h) _mm_stream_si128((__m128i *)(p), h)
#define H_FENCE() _mm_sfence()
#define V_DIV_BY(x, b, rb) _mm256_div_ps(x, b) /* measured: the divider is faster here */
#define PATH_NAME hx_optim_path_avx2

#include "optim_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
