/* Vector transcendentals for the CPU kernels: one algorithm (vmath_body.h)
 * compiled for the scalar, AVX2 and AVX-512 paths, which give the same bits
 * for every input, at any thread count.
 *
 * Maximum errors against a double reference, measured by test_vmath over
 * every f32 input of a dense sweep of the whole range (denormals, +-inf and
 * NaN included; NaN in gives NaN out):
 *   exp       1 ulp (0.89 measured)
 *   tanh      2 ulp (1.50)
 *   sigmoid   2.5 ulp (2.33)
 *   gelu      3 ulp at x >= 0 (2.39); at x < 0, 6 ulp times the condition
 *             number max(1, |x f'(x) / f(x)|) (4.9): there the argument
 *             2u = 2 sqrt(2/pi) (x + 0.044715 x^3) reaches -88, and its own
 *             f32 rounding moves e^2u by |2u| times that
 *   gelu'     3 ulp at x >= 0 (2.26); at x < 0, 10 ulp times the condition
 *             number (8.5), which also covers its root at x = -0.75
 *   gelu_erf  x Phi(x): 2 ulp at x >= 0 (1.58); at x < 0, 5 ulp times the
 *             condition number (3.80)
 *   gelu_erf' 2 ulp at x >= 0 (1.53); at x < 0, 7 ulp times the condition
 *             number (5.18; its root is near x = -0.75 too)
 * (ulp of the f32 format at the exact result; 2^-149 in the denormals).
 * test_vmath asserts these bounds and prints the measured figures. The old
 * scalar GELU, 0.5 x (1 + tanhf(u)), lost all relative accuracy for
 * x < -5 (1 + tanh(u) cancels to 0); this one keeps it. */
#ifndef HX_VMATH_H
#define HX_VMATH_H

#include <stdint.h>

typedef struct hx_vmath_path {
    void (*exp)(float *y, const float *x, int64_t n);
    void (*tanh)(float *y, const float *x, int64_t n);
    void (*sigmoid)(float *y, const float *x, int64_t n);
    void (*gelu)(float *y, const float *x, int64_t n); /* tanh form */
    void (*gelu_backward)(float *dx, const float *dy, const float *x, int64_t n);
    void (*gelu_erf)(float *y, const float *x, int64_t n); /* x Phi(x) */
    void (*gelu_erf_backward)(float *dx, const float *dy, const float *x, int64_t n);
    /* y = gelu(x) and g = gelu'(x) (tanh form), each the bits of gelu and
     * of the derivative gelu_backward multiplies by, one sigmoid for both */
    void (*gelu_save)(float *y, float *g, const float *x, int64_t n);
    /* dx = dy * g, g from gelu_save: gelu_backward's bits for the same x */
    void (*times_saved)(float *dx, const float *dy, const float *g, int64_t n);
    /* y = e^(x - shift); returns sum(y) in hx_k_sum_f32's order */
    float (*exp_shift_sum)(float *y, const float *x, float shift, int64_t n);
} hx_vmath_path;

extern const hx_vmath_path hx__vmath_scalar, hx__vmath_avx2, hx__vmath_avx512;

/* The path for hx_k_isa() (HX_ISA lowers it). */
const hx_vmath_path *hx__vmath(void);

/* Exponentials of a row go through a stack buffer this many at a time
 * where the output may not hold them (it may be the input's buffer). */
#define HX_VMATH_BLOCK 512

/* sum of e^(x (n) - shift), HX_VMATH_BLOCK elements at a time (each
 * block's sum in exp_shift_sum's order, the blocks' sums added in order);
 * stores nothing. */
float hx__vmath_sum_exp(const float *x, float shift, int64_t n);

#endif
