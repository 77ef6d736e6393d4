/* Vector transcendentals (exp, tanh, sigmoid, GELU in its tanh and erf
 * forms and their derivatives; GELU with its derivative kept for the
 * backward), written once over a small vector vocabulary. Each path's file
 * (vmath_scalar.c, vmath_avx2.c, vmath_avx512.c) defines the vocabulary
 * (the float words from vec_<path>.h, shared with optim_*.c; the rest itself),
 * turns off fp-contract and includes this file once, so that every path
 * takes the same roundings and all three give the same bits for every input
 * (tests/test_vmath.c checks it). The maximum errors, measured against a
 * double reference by test_vmath over the whole f32 range, are stated in
 * vmath.h.
 *
 *   W, V                         lanes, vector of W floats
 *   V_LOAD(p) V_STORE(p, x)      f32, any alignment
 *   V_SET1(x) V_ADD V_SUB V_MUL V_DIV
 *   V_FMA(a, b, c)               a*b + c with one rounding
 *   V_MAX(a, b) V_MIN(a, b)      a > b ? a : b and a < b ? a : b: a NaN in
 *                                a gives b
 *   V_ABS(x) V_COPYSIGN(m, s)    |x|; |m| with the sign of s
 *   V_FLOOR(x) V_RINT(x)         to an integer, down / to nearest even
 *   V_POW2(n)                    2^n for integer-valued n in [-126, 127]
 *   M, V_LT(a, b) V_GE(a, b) V_EQ(a, b) V_ISNAN(x)
 *                                lane masks (false for NaN except V_ISNAN)
 *   V_SEL(m, a, b)               m ? a : b, per lane
 *   PATH                         the hx_vmath_path this file defines
 * and hx_kinternal.h (HX_INLINE, hx_k_sum_f32), included before them. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vmath.h"

/* A NaN input comes out as itself, quiet: which operand's NaN an operation
 * on two NaNs returns depends on the order the compiler gives its
 * operands, so every function ends with this rather than letting a NaN
 * flow through. */
HX_INLINE V vm_nan_in(V x, V y) { return V_SEL(V_ISNAN(x), V_ADD(x, x), y); }

/* dy * g with dy's NaN first, then x's (g is x's function). */
HX_INLINE V vm_times_grad(V dy, V x, V g)
{
    return vm_nan_in(dy, vm_nan_in(x, V_MUL(dy, g)));
}

/* e^x: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, the low part of ln2
 * through an FMA), e^r by its Taylor polynomial of degree 7 (truncation
 * below 2^-27 relative), 2^n applied as two factors so that results down in
 * the denormals are rounded once. x is clamped to [-104, 89] first (beyond
 * that the result is 0 or inf anyway, and n stays small); a NaN returns
 * quiet. */
HX_INLINE V vm_exp(V x)
{
    V xc = V_MIN(V_MAX(x, V_SET1(-104.0f)), V_SET1(89.0f));
    V n = V_RINT(V_MUL(xc, V_SET1(1.44269504088896341f)));
    V r = V_FMA(n, V_SET1(-0.693145751953125f), xc); /* ln2's high part, 16 bits */
    r = V_FMA(n, V_SET1(-1.42860682030941723e-6f), r);
    V p = V_SET1(1.0f / 5040.0f);
    p = V_FMA(p, r, V_SET1(1.0f / 720.0f));
    p = V_FMA(p, r, V_SET1(1.0f / 120.0f));
    p = V_FMA(p, r, V_SET1(1.0f / 24.0f));
    p = V_FMA(p, r, V_SET1(1.0f / 6.0f));
    p = V_FMA(p, r, V_SET1(0.5f));
    p = V_FMA(p, r, V_SET1(1.0f));
    p = V_FMA(p, r, V_SET1(1.0f));
    V n1 = V_FLOOR(V_MUL(n, V_SET1(0.5f)));
    V y = V_MUL(V_MUL(p, V_POW2(n1)), V_POW2(V_SUB(n, n1)));
    return vm_nan_in(x, y);
}

/* tanh: below |x| = 0.625 an odd polynomial x + x^3 P(x^2) (P fitted by
 * weighted least squares for relative error on [0, 0.625]); above it
 * (1 - e) / (1 + e) with e = e^(-2|x|), where the subtraction loses at most
 * a factor of 2.2. The sign is x's (tanh(-0) = -0). */
HX_INLINE V vm_tanh(V x)
{
    V a = V_ABS(x);
    V x2 = V_MUL(x, x);
    V p = V_SET1(-0.005731194745749235f);
    p = V_FMA(p, x2, V_SET1(0.020664723590016365f));
    p = V_FMA(p, x2, V_SET1(-0.053748443722724915f));
    p = V_FMA(p, x2, V_SET1(0.13331560790538788f));
    p = V_FMA(p, x2, V_SET1(-0.3333328664302826f));
    V small = V_FMA(V_MUL(a, x2), p, a);
    V e = vm_exp(V_MUL(a, V_SET1(-2.0f)));
    V large = V_DIV(V_SUB(V_SET1(1.0f), e), V_ADD(V_SET1(1.0f), e));
    return vm_nan_in(x, V_COPYSIGN(V_SEL(V_LT(a, V_SET1(0.625f)), small, large), x));
}

/* sigma(z) = 1 / (1 + e^-z) from e = e^(-|z|) <= 1, so that nothing
 * overflows: z >= 0: 1 / (1 + e), z < 0: e / (1 + e). With one_minus (not
 * NULL), also 1 - sigma(z) the same way, without the cancellation of 1 - s. */
HX_INLINE V vm_sigma(V z, V *one_minus)
{
    V e = vm_exp(V_MUL(V_ABS(z), V_SET1(-1.0f)));
    V d = V_ADD(V_SET1(1.0f), e);
    M pos = V_GE(z, V_SET1(0.0f));
    if (one_minus) *one_minus = V_DIV(V_SEL(pos, e, V_SET1(1.0f)), d);
    return V_DIV(V_SEL(pos, V_SET1(1.0f), e), d);
}

HX_INLINE V vm_sigmoid(V x) { return vm_nan_in(x, vm_sigma(x, NULL)); }

#define VM_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define VM_GELU_K 0.044715f

/* 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), the argument of GELU's sigmoid. */
HX_INLINE V vm_gelu_arg(V x, V x2)
{
    return V_MUL(V_MUL(V_SET1(2.0f * VM_GELU_C), x), V_FMA(V_SET1(VM_GELU_K), x2, V_SET1(1.0f)));
}

/* GELU, tanh form: 0.5 x (1 + tanh(u)) = x sigma(2u), which does not cancel
 * for negative x as 1 + tanh(u) does; from s = sigma(2u). sigma(2u) = 0
 * (x -> -inf) gives -0, not -inf * 0. */
HX_INLINE V vm_gelu_of(V x, V s)
{
    return vm_nan_in(x, V_SEL(V_EQ(s, V_SET1(0.0f)), V_SET1(-0.0f), V_MUL(x, s)));
}

/* d/dx x sigma(2u) = s + x s (1 - s) 2u'(x), u' = sqrt(2/pi) (1 + 3k x^2),
 * from x^2, s and sc = 1 - s. Where s (1 - s) is 0 the second term's limit
 * is 0 (x -> +-inf), not inf * 0. NaN only where x is NaN. */
HX_INLINE V vm_gelu_grad_of(V x, V x2, V s, V sc)
{
    V ss = V_MUL(s, sc);
    V du = V_MUL(V_SET1(2.0f * VM_GELU_C), V_FMA(V_SET1(3.0f * VM_GELU_K), x2, V_SET1(1.0f)));
    V g = V_FMA(V_MUL(x, du), ss, s);
    return vm_nan_in(x, V_SEL(V_EQ(ss, V_SET1(0.0f)), s, g));
}

HX_INLINE V vm_gelu(V x) { return vm_gelu_of(x, vm_sigma(vm_gelu_arg(x, V_MUL(x, x)), NULL)); }

HX_INLINE V vm_gelu_grad(V x)
{
    V x2 = V_MUL(x, x);
    V sc;
    V s = vm_sigma(vm_gelu_arg(x, x2), &sc);
    return vm_gelu_grad_of(x, x2, s, sc);
}

/* GELU and, into *g, its derivative: one sigma for both, the same bits as
 * vm_gelu and vm_gelu_grad (sigma's value does not depend on whether
 * 1 - sigma is asked for too). */
HX_INLINE V vm_gelu_and_grad(V x, V *g)
{
    V x2 = V_MUL(x, x);
    V sc;
    V s = vm_sigma(vm_gelu_arg(x, x2), &sc);
    *g = vm_gelu_grad_of(x, x2, s, sc);
    return vm_gelu_of(x, s);
}

/* erfcx(a) = e^(a^2) erfc(a) for a in [0, 14.5] (past 10.2, e^(-a^2) is
 * below f32's range): a polynomial of degree 11 in t = 1 / (1 + a/2),
 * fitted for relative error by iteratively reweighted least squares on
 * Chebyshev points (3.2e-9 in exact arithmetic; in f32 about 4 ulp, mostly
 * the rounding of t). Smooth on the whole half-line, so one formula serves
 * both erf's body and its tails. */
HX_INLINE V vm_erfcx(V a)
{
    V t = V_DIV(V_SET1(1.0f), V_FMA(a, V_SET1(0.5f), V_SET1(1.0f)));
    V p = V_SET1(0.0336920843f);
    p = V_FMA(p, t, V_SET1(-0.177995354f));
    p = V_FMA(p, t, V_SET1(0.345133781f));
    p = V_FMA(p, t, V_SET1(-0.230653286f));
    p = V_FMA(p, t, V_SET1(-0.0839279741f));
    p = V_FMA(p, t, V_SET1(0.0796061829f));
    p = V_FMA(p, t, V_SET1(0.0330921076f));
    p = V_FMA(p, t, V_SET1(0.193002567f));
    p = V_FMA(p, t, V_SET1(0.243478939f));
    p = V_FMA(p, t, V_SET1(0.282502949f));
    p = V_FMA(p, t, V_SET1(0.282067209f));
    return V_FMA(p, t, V_SET1(7.92433127e-07f));
}

/* The parts of the normal CDF Phi(x) for erf-form GELU: with x clamped to
 * [-20, 20] (xc), e = e^(-hi/2) and k with Phi(-|x|) = erfc(|x|/sqrt 2) / 2
 * = k e. x^2 = hi + lo exactly (lo by an FMA): e^(-x^2/2) from the rounded
 * square would be off by |x|^2/2 times its rounding, 100 ulp at |x| = 14;
 * the factor e^(-lo/2) = 1 - lo/2 goes into k and *half_lo. e is last
 * in every product, so a result in the denormals is rounded once. */
HX_INLINE V vm_phi_parts(V x, V *xc, V *e, V *half_lo)
{
    *xc = V_MIN(V_MAX(x, V_SET1(-20.0f)), V_SET1(20.0f));
    V hi = V_MUL(*xc, *xc);
    V lo = V_FMA(*xc, *xc, V_MUL(hi, V_SET1(-1.0f)));
    *half_lo = V_FMA(lo, V_SET1(-0.5f), V_SET1(1.0f)); /* e^(-lo/2) */
    *e = vm_exp(V_MUL(hi, V_SET1(-0.5f)));
    V c = vm_erfcx(V_MUL(V_ABS(*xc), V_SET1(0.707106781f)));
    return V_MUL(V_MUL(c, V_SET1(0.5f)), *half_lo);
}

/* Phi(x) for |x| < 0.7: 1/2 + (a/2) erf(a)/a with a = x / sqrt 2, erf(a)/a
 * a polynomial of degree 5 in a^2 fitted on [0, 0.5] (relative error
 * 1.2e-11 in exact arithmetic), the sum rounded once by the FMA. Near 0 this
 * beats 1 - k e, whose erfcx carries t's rounding. */
HX_INLINE V vm_phi_small(V x)
{
    V a = V_MUL(x, V_SET1(0.707106781f));
    V a2 = V_MUL(a, a);
    V p = V_SET1(-0.000769290607f);
    p = V_FMA(p, a2, V_SET1(0.00520031201f));
    p = V_FMA(p, a2, V_SET1(-0.0268631205f));
    p = V_FMA(p, a2, V_SET1(0.112837739f));
    p = V_FMA(p, a2, V_SET1(-0.376126379f));
    p = V_FMA(p, a2, V_SET1(1.12837923f));
    return V_FMA(a, V_MUL(p, V_SET1(0.5f)), V_SET1(0.5f));
}

/* GELU, erf form: x Phi(x). |x| < 0.7: x Phi_small(x); beyond, x < 0:
 * (x k) e, no cancellation; x > 0: x (1 - k e) with k e < 1/4. */
HX_INLINE V vm_gelu_erf(V x)
{
    V xc, e, f;
    V k = vm_phi_parts(x, &xc, &e, &f);
    V neg = V_MUL(V_MUL(xc, k), e);
    V pos = V_MUL(x, V_FMA(V_MUL(k, V_SET1(-1.0f)), e, V_SET1(1.0f)));
    V y = V_SEL(V_LT(x, V_SET1(0.0f)), neg, pos);
    y = V_SEL(V_LT(V_ABS(x), V_SET1(0.7f)), V_MUL(x, vm_phi_small(x)), y);
    return vm_nan_in(x, y);
}

/* d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) / sqrt(2 pi):
 * |x| < 0.7: Phi_small(x) + x phi(x); beyond, x < 0: (k + x f / sqrt(2 pi)) e
 * (its root near -0.75 is where the condition number bounds the error);
 * x > 0: 1 + (x f / sqrt(2 pi) - k) e. */
HX_INLINE V vm_gelu_erf_grad(V x)
{
    V xc, e, f;
    V k = vm_phi_parts(x, &xc, &e, &f);
    V xphi = V_MUL(V_MUL(xc, V_SET1(0.398942280f)), f);
    V neg = V_MUL(V_ADD(k, xphi), e);
    V pos = V_FMA(V_SUB(xphi, k), e, V_SET1(1.0f));
    V g = V_SEL(V_LT(x, V_SET1(0.0f)), neg, pos);
    g = V_SEL(V_LT(V_ABS(x), V_SET1(0.7f)), V_FMA(xphi, e, vm_phi_small(x)), g);
    return vm_nan_in(x, g);
}

/* The loops: whole vectors, then the tail through a W-element staging copy,
 * so every element takes the same operations. */
#define VM_MAP1(name, fn)                                                                \
    static void name(float *y, const float *x, int64_t n)                                \
    {                                                                                    \
        int64_t i = 0;                                                                   \
        for (; i + W <= n; i += W) V_STORE(y + i, fn(V_LOAD(x + i)));                    \
        if (i < n) {                                                                     \
            float t[W] = {0};                                                            \
            memcpy(t, x + i, (size_t)(n - i) * sizeof(float));                           \
            V_STORE(t, fn(V_LOAD(t)));                                                   \
            memcpy(y + i, t, (size_t)(n - i) * sizeof(float));                           \
        }                                                                                \
    }

VM_MAP1(vm_exp_n, vm_exp)
VM_MAP1(vm_tanh_n, vm_tanh)
VM_MAP1(vm_sigmoid_n, vm_sigmoid)
VM_MAP1(vm_gelu_n, vm_gelu)
VM_MAP1(vm_gelu_erf_n, vm_gelu_erf)

// dx (n) = dy (n) * f'(x (n)), f' = grad
#define VM_MAP_GRAD(name, grad)                                                          \
    static void name(float *dx, const float *dy, const float *x, int64_t n)              \
    {                                                                                    \
        int64_t i = 0;                                                                   \
        for (; i + W <= n; i += W) {                                                     \
            V xv = V_LOAD(x + i), dyv = V_LOAD(dy + i);                                  \
            V_STORE(dx + i, vm_times_grad(dyv, xv, grad(xv)));                           \
        }                                                                                \
        if (i < n) {                                                                     \
            float tx[W] = {0}, tdy[W] = {0};                                             \
            memcpy(tx, x + i, (size_t)(n - i) * sizeof(float));                          \
            memcpy(tdy, dy + i, (size_t)(n - i) * sizeof(float));                        \
            V xv = V_LOAD(tx), dyv = V_LOAD(tdy);                                        \
            V_STORE(tx, vm_times_grad(dyv, xv, grad(xv)));                               \
            memcpy(dx + i, tx, (size_t)(n - i) * sizeof(float));                         \
        }                                                                                \
    }

VM_MAP_GRAD(vm_gelu_backward_n, vm_gelu_grad)
VM_MAP_GRAD(vm_gelu_erf_backward_n, vm_gelu_erf_grad)

/* y (n) = gelu(x), g (n) = gelu'(x) */
static void vm_gelu_save_n(float *y, float *g, const float *x, int64_t n)
{
    int64_t i = 0;
    V gv;
    for (; i + W <= n; i += W) {
        V_STORE(y + i, vm_gelu_and_grad(V_LOAD(x + i), &gv));
        V_STORE(g + i, gv);
    }
    if (i < n) {
        float t[W] = {0}, tg[W];
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        V_STORE(t, vm_gelu_and_grad(V_LOAD(t), &gv));
        V_STORE(tg, gv);
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
        memcpy(g + i, tg, (size_t)(n - i) * sizeof(float));
    }
}

/* dx (n) = dy (n) * g (n), g = f'(x) saved by the forward: vm_times_grad's
 * bits, since g is NaN exactly where x is, and then x's NaN made quiet. */
static void vm_times_saved_n(float *dx, const float *dy, const float *g, int64_t n)
{
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        V gv = V_LOAD(g + i), dyv = V_LOAD(dy + i);
        V_STORE(dx + i, vm_times_grad(dyv, gv, gv));
    }
    if (i < n) {
        float tg[W] = {0}, tdy[W] = {0};
        memcpy(tg, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(tdy, dy + i, (size_t)(n - i) * sizeof(float));
        V gv = V_LOAD(tg), dyv = V_LOAD(tdy);
        V_STORE(tg, vm_times_grad(dyv, gv, gv));
        memcpy(dx + i, tg, (size_t)(n - i) * sizeof(float));
    }
}

/* y (n) = e^(x (n) - shift), returning the sum of y in the order of
 * hx_k_sum_f32 (16 partial sums, fixed tree) so softmax needs one pass. */
static float vm_exp_shift_sum_n(float *y, const float *x, float shift, int64_t n)
{
    V sh = V_SET1(shift);
    int64_t i = 0;
    for (; i + W <= n; i += W) V_STORE(y + i, vm_exp(V_SUB(V_LOAD(x + i), sh)));
    if (i < n) {
        float t[W] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        V_STORE(t, vm_exp(V_SUB(V_LOAD(t), sh)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
    return hx_k_sum_f32(y, n);
}

const hx_vmath_path PATH = {
    .exp = vm_exp_n,
    .tanh = vm_tanh_n,
    .sigmoid = vm_sigmoid_n,
    .gelu = vm_gelu_n,
    .gelu_backward = vm_gelu_backward_n,
    .gelu_erf = vm_gelu_erf_n,
    .gelu_erf_backward = vm_gelu_erf_backward_n,
    .gelu_save = vm_gelu_save_n,
    .times_saved = vm_times_saved_n,
    .exp_shift_sum = vm_exp_shift_sum_n,
};
