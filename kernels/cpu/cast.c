/* Conversions between f32, f16, bf16, i32 and i64.
 *
 * f32 -> f16 and f32 -> bf16 round to nearest even, keep NaN a quiet NaN
 * (payload truncated, quiet bit set), keep denormals, and overflow to inf.
 * The F16C / AVX-512 paths give the same bits as the scalar ones for every
 * input (checked over all 2^32 floats on a CPU with AVX-512). The AVX-512
 * BF16 instruction (vcvtne2ps2bf16) flushes denormal inputs to zero, so
 * where the CPU has it, each 32 floats with a denormal among them are
 * rounded with the integer ops of the other vector paths instead; the
 * instruction's NaN (payload truncated, quiet bit set) and rounding are
 * those of the scalar path.
 * Widening f16 / bf16 to f32 is exact; a NaN comes out quiet.
 * Every vector path clears the upper register halves (vzeroupper) before
 * its scalar tail: GCC 12 leaves them dirty when the tail is a tail call,
 * and dirty upper state made later SSE code (libm's expf) ~40x slower.
 * Floats to integers truncate toward zero and saturate; NaN becomes 0. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "hx_kinternal.h"

/* ---- scalar conversions ---------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    u &= 0x7FFFFFFF;
    if (u > 0x7F800000) return sign | 0x7E00 | (uint16_t)((u >> 13) & 0x3FF); /* NaN */
    if (u >= 0x477FF000) return sign | 0x7C00; /* >= 65520 rounds to inf */
    if (u >= 0x38800000) {                      /* normal f16: rebias, round 13 bits */
        uint32_t r = u + 0xFFF + ((u >> 13) & 1);
        return sign | (uint16_t)((r - 0x38000000) >> 13);
    }
    uint32_t e = u >> 23;
    if (e < 102) return sign; /* below 2^-25: rounds to zero */
    /* f16 denormal: the 24-bit significand times 2^(e - 126), rounded. */
    uint32_t m = (u & 0x7FFFFF) | 0x800000, shift = 126 - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | (uint16_t)q;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 31) return bits_f32(sign | 0x7F800000 | (m ? 0x400000 : 0) | (m << 13));
    if (e != 0) return bits_f32(sign | ((e + 112) << 23) | (m << 13));
    if (m == 0) return bits_f32(sign);
    /* f16 denormal m * 2^-24: normalise the significand. */
    int k = __builtin_clz(m) - 21; /* shifts that bring bit 10 up */
    return bits_f32(sign | ((uint32_t)(113 - k) << 23) | ((m << k) & 0x3FF) << 13);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7FFFFFFF) > 0x7F800000) u |= 0x400000; /* quiet NaN, as F16C does for f16 */
    return bits_f32(u);
}

/* Exact rounding of an integer to bf16 (through f32 it would round twice). */
static uint16_t int_to_bf16(int64_t v)
{
    uint16_t sign = v < 0 ? 0x8000 : 0;
    uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (mag == 0) return 0;
    int p = 63 - __builtin_clzll(mag); /* mag in [2^p, 2^(p+1)) */
    uint64_t q = mag << (p < 7 ? 7 - p : 0);
    if (p > 7) {
        int s = p - 7;
        uint64_t rem = mag & ((1ull << s) - 1), half = 1ull << (s - 1);
        q = mag >> s;
        if (rem > half || (rem == half && (q & 1))) q++;
    }
    /* q in [0x80, 0x100]; q = 0x100 carries into the exponent. */
    return sign | (uint16_t)(((uint32_t)(p + 126) << 7) + (uint32_t)q);
}

static int32_t f32_to_i32(float f)
{
    if (f != f) return 0;
    if (f >= 2147483648.0f) return INT32_MAX;
    if (f < -2147483648.0f) return INT32_MIN;
    return (int32_t)f;
}

static int64_t f32_to_i64(float f)
{
    if (f != f) return 0;
    if (f >= 9223372036854775808.0f) return INT64_MAX;
    if (f < -9223372036854775808.0f) return INT64_MIN;
    return (int64_t)f;
}

/* ---- to f32 (exact for every source type but i32/i64 beyond 2^24) ---------- */

typedef void (*to_f32_fn)(float *y, const void *x, int64_t n);
typedef void (*from_f32_fn)(void *y, const float *x, int64_t n);

static void f32_from_f32(float *y, const void *xv, int64_t n) { memcpy(y, xv, (size_t)n * 4); }

static void f32_from_f16(float *y, const void *xv, int64_t n)
{
    const uint16_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = f16_to_f32(x[i]);
}

__attribute__((target("avx2,f16c"))) static void f32_from_f16_avx2(float *y, const void *xv,
                                                                    int64_t n)
{
    const uint16_t *x = xv;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    _mm256_zeroupper();
    f32_from_f16(y + i, x + i, n - i);
}

__attribute__((target("avx512f"))) static void f32_from_f16_avx512(float *y, const void *xv,
                                                                   int64_t n)
{
    const uint16_t *x = xv;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
    _mm256_zeroupper();
    f32_from_f16(y + i, x + i, n - i);
}

static void f32_from_bf16(float *y, const void *xv, int64_t n)
{
    const uint16_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = bf16_to_f32(x[i]);
}

/* bf16_to_f32, 8 lanes: u << 16, NaN lanes made quiet. */
__attribute__((target("avx2"))) static void f32_from_bf16_avx2(float *y, const void *xv, int64_t n)
{
    const uint16_t *x = xv;
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i quiet = _mm256_set1_epi32(0x400000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16);
        __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        u = _mm256_or_si256(u, _mm256_and_si256(is_nan, quiet));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(u));
    }
    _mm256_zeroupper();
    f32_from_bf16(y + i, x + i, n - i);
}

/* 32 at a time: a NaN among them (|h| > 0x7F80, tested on the 16-bit values:
 * one compare for 32 lanes) sends the 32 through the 16-lane loop that makes
 * NaN lanes quiet; else each 16 is u << 16 alone (the zero extension is a
 * shuffle, on the same port as the 32-bit NaN compare it saves). */
__attribute__((target("avx512f,avx512bw"))) static void f32_from_bf16_avx512(float *y, const void *xv,
                                                                             int64_t n)
{
    const uint16_t *x = xv;
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i quiet = _mm512_set1_epi32(0x400000), inf16 = _mm512_set1_epi16(0x7F80);
    const __m512i abs16 = _mm512_set1_epi16(0x7FFF);
    int64_t i = 0;
    while (i + 16 <= n) {
        if (i + 32 <= n) {
            __m512i h = _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i)), abs16);
            if (!_mm512_cmpgt_epi16_mask(h, inf16)) {
                __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
                __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
                _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)));
                _mm512_storeu_ps(y + i + 16, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
                i += 32;
                continue;
            }
        }
        __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i))), 16);
        __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
        u = _mm512_mask_or_epi32(u, is_nan, u, quiet);
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(u));
        i += 16;
    }
    _mm256_zeroupper();
    f32_from_bf16(y + i, x + i, n - i);
}

static void f32_from_i32(float *y, const void *xv, int64_t n)
{
    const int32_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
}

static void f32_from_i64(float *y, const void *xv, int64_t n)
{
    const int64_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
}

/* ---- from f32 ----------------------------------------------------------------- */

static void f32_to_f32_n(void *yv, const float *x, int64_t n) { memcpy(yv, x, (size_t)n * 4); }

static void f16_from_f32(void *yv, const float *x, int64_t n)
{
    uint16_t *y = yv;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_f16(x[i]);
}

__attribute__((target("avx2,f16c"))) static void f16_from_f32_avx2(void *yv, const float *x,
                                                                    int64_t n)
{
    uint16_t *y = yv;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_zeroupper();
    f16_from_f32(y + i, x + i, n - i);
}

__attribute__((target("avx512f"))) static void f16_from_f32_avx512(void *yv, const float *x,
                                                                   int64_t n)
{
    uint16_t *y = yv;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_zeroupper();
    f16_from_f32(y + i, x + i, n - i);
}

static void bf16_from_f32(void *yv, const float *x, int64_t n)
{
    uint16_t *y = yv;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_bf16(x[i]);
}

/* The integer rounding of f32_to_bf16, 8 lanes: round = (u + 0x7FFF + lsb) >> 16,
 * NaN lanes take (u >> 16) | 0x40. */
__attribute__((target("avx2"))) static void bf16_from_f32_avx2(void *yv, const float *x,
                                                               int64_t n)
{
    uint16_t *y = yv;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF);
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
        __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
        __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        r = _mm256_blendv_epi8(r, nan, is_nan);
        __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(y + i), packed);
    }
    _mm256_zeroupper();
    bf16_from_f32(y + i, x + i, n - i);
}

__attribute__((target("avx512f"))) static void bf16_from_f32_avx512(void *yv, const float *x,
                                                                    int64_t n)
{
    uint16_t *y = yv;
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
        __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet);
        __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
        r = _mm512_mask_blend_epi32(is_nan, r, nan);
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtepi32_epi16(r));
    }
    _mm256_zeroupper();
    bf16_from_f32(y + i, x + i, n - i);
}

/* 32 floats per vcvtne2ps2bf16; a block with a denormal (fpclass 0x20) takes
 * the integer rounding. */
__attribute__((target("avx512f,avx512dq,avx512bf16"))) static void
bf16_from_f32_avx512bf16(void *yv, const float *x, int64_t n)
{
    uint16_t *y = yv;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
        if (_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20))
            bf16_from_f32_avx512(y + i, x + i, 32);
        else
            _mm512_storeu_si512((void *)(y + i), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    bf16_from_f32_avx512(y + i, x + i, n - i);
}

static void i32_from_f32(void *yv, const float *x, int64_t n)
{
    int32_t *y = yv;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_i32(x[i]);
}

static void i64_from_f32(void *yv, const float *x, int64_t n)
{
    int64_t *y = yv;
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_i64(x[i]);
}

/* ---- integer to integer and integer to bf16 ------------------------------------- */

static void i64_from_i32(void *yv, const void *xv, int64_t n)
{
    int64_t *y = yv;
    const int32_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
}

static void i32_from_i64(void *yv, const void *xv, int64_t n)
{
    int32_t *y = yv;
    const int64_t *x = xv;
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > INT32_MAX ? INT32_MAX : x[i] < INT32_MIN ? INT32_MIN : (int32_t)x[i];
}

static void bf16_from_i32(void *yv, const void *xv, int64_t n)
{
    uint16_t *y = yv;
    const int32_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = int_to_bf16(x[i]);
}

static void bf16_from_i64(void *yv, const void *xv, int64_t n)
{
    uint16_t *y = yv;
    const int64_t *x = xv;
    for (int64_t i = 0; i < n; i++) y[i] = int_to_bf16(x[i]);
}

/* ---- dispatch ------------------------------------------------------------------- */

static to_f32_fn pick_to_f32(hx_kdtype xdt, hx_isa isa)
{
    switch (xdt) {
    case HX_K_F32: return f32_from_f32;
    case HX_K_F16:
        return isa == HX_ISA_AVX512 ? f32_from_f16_avx512
               : isa == HX_ISA_AVX2 ? f32_from_f16_avx2
                                    : f32_from_f16;
    case HX_K_BF16:
        return isa == HX_ISA_AVX512 ? f32_from_bf16_avx512
               : isa == HX_ISA_AVX2 ? f32_from_bf16_avx2
                                    : f32_from_bf16;
    case HX_K_I32: return f32_from_i32;
    case HX_K_I64: return f32_from_i64;
    }
    return f32_from_f32;
}

/* AVX512-BF16, asked only on the AVX-512 path (which __builtin_cpu_init
 * has readied: hx_k_isa ran it). */
static int has_avx512bf16(void) { return __builtin_cpu_supports("avx512bf16"); }

static from_f32_fn pick_from_f32(hx_kdtype ydt, hx_isa isa)
{
    switch (ydt) {
    case HX_K_F32: return f32_to_f32_n;
    case HX_K_F16:
        return isa == HX_ISA_AVX512 ? f16_from_f32_avx512
               : isa == HX_ISA_AVX2 ? f16_from_f32_avx2
                                    : f16_from_f32;
    case HX_K_BF16:
        return isa == HX_ISA_AVX512 ? (has_avx512bf16() ? bf16_from_f32_avx512bf16
                                                        : bf16_from_f32_avx512)
               : isa == HX_ISA_AVX2 ? bf16_from_f32_avx2
                                    : bf16_from_f32;
    case HX_K_I32: return i32_from_f32;
    case HX_K_I64: return i64_from_f32;
    }
    return f32_to_f32_n;
}

#define CAST_CHUNK 512 /* floats staged on the stack between two conversions */

// y (n, ydt) = x (n, xdt), one thread's slice
static void cast_slice(void *y, hx_kdtype ydt, const void *x, hx_kdtype xdt, int64_t n,
                       hx_isa isa)
{
    size_t ys = hx_k_dtype_size(ydt), xs = hx_k_dtype_size(xdt);
    int x_int = xdt == HX_K_I32 || xdt == HX_K_I64;
    if (xdt == ydt) {
        memcpy(y, x, (size_t)n * xs);
    } else if (xdt == HX_K_I32 && ydt == HX_K_I64) {
        i64_from_i32(y, x, n);
    } else if (xdt == HX_K_I64 && ydt == HX_K_I32) {
        i32_from_i64(y, x, n);
    } else if (x_int && ydt == HX_K_BF16) {
        (xdt == HX_K_I32 ? bf16_from_i32 : bf16_from_i64)(y, x, n);
    } else if (xdt == HX_K_F32) {
        pick_from_f32(ydt, isa)(y, x, n);
    } else if (ydt == HX_K_F32) {
        pick_to_f32(xdt, isa)(y, x, n);
    } else {
        /* Through f32, which holds every f16 and bf16 exactly; an integer
         * only reaches f16 this way, and any integer that f32 cannot hold
         * exactly (|v| > 2^24) is inf in f16 either way. */
        to_f32_fn dec = pick_to_f32(xdt, isa);
        from_f32_fn enc = pick_from_f32(ydt, isa);
        float buf[CAST_CHUNK];
        for (int64_t i = 0; i < n; i += CAST_CHUNK) {
            int64_t m = n - i < CAST_CHUNK ? n - i : CAST_CHUNK;
            dec(buf, (const char *)x + i * (int64_t)xs, m);
            enc((char *)y + i * (int64_t)ys, buf, m);
        }
    }
}

void hx_k_cast(void *y, hx_kdtype ydt, const void *x, hx_kdtype xdt, int64_t n, int nthreads)
{
    if (n <= 0) return;
    hx_isa isa = hx_k_isa();
    if (!hx_k_go_parallel(n, nthreads)) {
        cast_slice(y, ydt, x, xdt, n, isa);
        return;
    }
    size_t ys = hx_k_dtype_size(ydt), xs = hx_k_dtype_size(xdt);
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 32, &lo, &hi);
        cast_slice((char *)y + lo * (int64_t)ys, ydt, (const char *)x + lo * (int64_t)xs, xdt,
                   hi - lo, isa);
    }
}

/* bf16_from_f32 then f32_from_bf16 on x in place, in registers (one pass,
 * not two through a buffer): the integer rounding of the vector paths
 * (nearest even; a NaN's payload truncated, its quiet bit set), the low 16
 * bits cleared. Returns the elements done (a multiple of 16). */
__attribute__((target("avx512f"))) static int64_t round_bf16_avx512(float *x, int64_t n)
{
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i quiet = _mm512_set1_epi32(0x400000), high = _mm512_set1_epi32((int)0xFFFF0000u);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, lsb));
        __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
        r = _mm512_and_si512(_mm512_mask_blend_epi32(is_nan, r, _mm512_or_si512(u, quiet)), high);
        _mm512_storeu_ps(x + i, _mm512_castsi512_ps(r));
    }
    _mm256_zeroupper();
    return i;
}

void hx__round_through(float *x, hx_kdtype dt, int64_t n)
{
    if (dt != HX_K_F16 && dt != HX_K_BF16) return;
    hx_isa isa = hx_k_isa();
    if (dt == HX_K_BF16 && isa == HX_ISA_AVX512) {
        int64_t done = round_bf16_avx512(x, n);
        x += done, n -= done;
    }
    uint16_t half[CAST_CHUNK];
    for (int64_t i = 0; i < n; i += CAST_CHUNK) {
        int64_t m = n - i < CAST_CHUNK ? n - i : CAST_CHUNK;
        cast_slice(half, dt, x + i, HX_K_F32, m, isa);
        cast_slice(x + i, HX_K_F32, half, dt, m, isa);
    }
}

void hx__widen(float *f, const void *h, hx_kdtype dt, int64_t n)
{
    if (n > 0) pick_to_f32(dt, hx_k_isa())(f, h, n);
}

void hx__narrow(void *h, hx_kdtype dt, const float *f, int64_t n)
{
    if (n > 0) pick_from_f32(dt, hx_k_isa())(h, f, n);
}
