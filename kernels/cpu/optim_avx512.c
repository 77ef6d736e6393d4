/* Optimizer kernels, AVX-512 path: 16 floats at a time. Run only where
 * hx_k_isa() says the CPU has AVX-512 F/BW/VL/DQ; the AVX512-BF16
 * conversion only where the plan says the CPU has it. f16 goes through
 * AVX512F's vcvtph2ps / vcvtps2ph, which round exactly as AVX512-FP16's
 * conversions would. */
/* As optim_avx2.c: this file's ISA, no contracted multiply-adds. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c"))), apply_to = function)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>
#include <stdint.h>

#include "optim_internal.h"

static inline __m512 load_bf16x16(const uint16_t *p)
{
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* Round to nearest even in integer arithmetic; a NaN keeps the top of its
 * payload and becomes quiet. */
static inline __m256i bf16_round(__m512 x)
{
    __m512i b = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

/* vcvtneps2bf16 rounds to nearest even and quiets NaNs the same way, but
 * flushes denormal inputs to zero: those lanes, rare, take the integer
 * rounding so that every path gives the same bits. */
static inline __m256i bf16x16(__m512 x, int native)
{
    if (!native) return bf16_round(x);
    __m256i r = (__m256i)_mm512_cvtneps_pbh(x);
    __mmask16 den = _mm512_fpclass_ps_mask(x, 0x20); /* denormal lanes */
    return den ? _mm256_mask_blend_epi16(den, r, bf16_round(x)) : r;
}

/* x / b for a per-call constant b in [2^-30, 2^30], rb = RN(1/b), without
 * the divider: q = x * rb, then twice q += (x - q*b) * rb with the residual
 * exact by FMA. After the first correction q is within an ulp of x/b, and
 * the second then rounds correctly (Markstein's theorem), so this is the
 * division's bits; checked against vdivps for all 2^32 numerators on 25
 * divisors and on 4e9 random pairs, and by test_optim. Numerators that are
 * 0, below 2^-60, above 2^60 or not finite take vdivps itself. Adam's
 * sqrt(v) / sqrt(1 - b2^t) and FTRL's two divisions by lr go this way:
 * at 16 lanes the divider, not memory, bounded FTRL (3 divisions and 2
 * square roots a vector). */
static inline __m512 div_by16(__m512 x, __m512 b, __m512 rb)
{
    __m512 q = _mm512_mul_ps(x, rb);
    q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, b, x), rb, q);
    q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, b, x), rb, q);
    __m512 ax = _mm512_abs_ps(x);
    __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ);
    __mmask16 ok = zero | (_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0x1p-60f), _CMP_GE_OQ) &
                           _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0x1p60f), _CMP_LE_OQ));
    q = _mm512_mask_mov_ps(q, zero, x);
    if (ok != 0xffff) q = _mm512_mask_div_ps(q, (__mmask16)~ok, x, b);
    return q;
}

static uint32_t max_abs(const void *g, hx_kdtype dt, int64_t n)
{
    const char *b = g;
    int sz = dt == HX_K_F32 ? 4 : 2, per = 64 / sz;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0;
    __m512i mask = sz == 4 ? _mm512_set1_epi32(0x7fffffff) : _mm512_set1_epi16(0x7fff);
    int64_t i = 0;
    for (; i + 2 * per <= n; i += 2 * per) {
        __m512i x0 = _mm512_and_si512(_mm512_loadu_si512(b + i * sz), mask);
        __m512i x1 = _mm512_and_si512(_mm512_loadu_si512(b + (i + per) * sz), mask);
        a0 = sz == 4 ? _mm512_max_epu32(a0, x0) : _mm512_max_epu16(a0, x0);
        a1 = sz == 4 ? _mm512_max_epu32(a1, x1) : _mm512_max_epu16(a1, x1);
    }
    a0 = sz == 4 ? _mm512_max_epu32(a0, a1) : _mm512_max_epu16(a0, a1);
    if (sz == 2) a0 = _mm512_max_epu32(_mm512_and_si512(a0, _mm512_set1_epi32(0xffff)), _mm512_srli_epi32(a0, 16));
    uint32_t m = (uint32_t)_mm512_reduce_max_epu32(a0);
    for (; i < n; i++) {
        uint32_t x = sz == 4 ? ((const uint32_t *)g)[i] & 0x7fffffff : ((const uint16_t *)g)[i] & 0x7fffu;
        m = x > m ? x : m;
    }
    return m;
}

#include "vec_avx512.h"

#define V_GT_OR0(a, b, x) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), x)
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_LOAD_BF16(p) load_bf16x16(p)
typedef __m256i H;
#define V_TO_F16(x) _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)
#define V_TO_BF16(x, native) bf16x16(x, native)
#define H_STORE(p, h) _mm256_storeu_si256((__m256i *)(p), h)
#define H_STREAM(p, h) _mm256_stream_si256((__m256i *)(p), h)
#define H_FENCE() _mm_sfence()
#define V_DIV_BY(x, b, rb) div_by16(x, b, rb)
#define PATH_NAME hx_optim_path_avx512

#include "optim_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
