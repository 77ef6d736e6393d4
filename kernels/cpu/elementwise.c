/* Elementwise kernels: binary ops with broadcasting, unary ops and their
 * backward, scale, bias add. Every output element depends on its inputs
 * only, so results are bitwise the same at any thread count.
 *
 * On 16-bit storage (f16, bf16; the *_half entry points) no f32 copy of a
 * tensor is made: each thread's slice goes through HX_K_HALF_BLOCK elements
 * at a time, widened exactly into stack buffers, computed by the same f32
 * function as the f32 kernel into another (not in place: the plain loops
 * are vectorised where output and input do not overlap) and rounded once
 * to the dtype. Since every
 * element takes the same operations wherever its block starts, the bits are
 * those of widening the whole tensors, running the f32 kernel and rounding
 * its output, at any thread count. */
#include <math.h>
#include <stdint.h>

#include "hx_kinternal.h"
#include "vmath.h"

/* Runs `call` (which reads lo and hi) on [0, n), split over nthreads
 * threads in slices cut at multiples of `align` elements when n is large
 * enough. */
#define EACH_SLICE(n, nthreads, align, call)                                       \
    do {                                                                          \
        if (!hx_k_go_parallel(n, nthreads)) {                                     \
            int64_t lo = 0, hi = (n);                                             \
            call;                                                                 \
        } else {                                                                  \
            _Pragma("omp parallel num_threads(nthreads)")                         \
            {                                                                     \
                int64_t lo, hi;                                                   \
                hx_k_thread_slice(n, align, &lo, &hi);                            \
                call;                                                             \
            }                                                                     \
        }                                                                         \
    } while (0)

/* A 16-bit slice's threads own whole cache lines too. */
#define HALF_ALIGN 32

/* ---- binary ------------------------------------------------------------- */

/* x op y; where both are NaN, x's (quiet), whichever operand order the
 * compiler gives the instruction in each loop below: every loop, and so
 * every 16-bit block, gives the same bits. */
HX_INLINE float binop(hx_binary_op op, float x, float y)
{
    float r = 0.0f;
    switch (op) {
    case HX_BINARY_ADD: r = x + y; break;
    case HX_BINARY_SUB: r = x - y; break;
    case HX_BINARY_MUL: r = x * y; break;
    case HX_BINARY_DIV: r = x / y; break;
    }
    return x != x ? x + x : r;
}

// out (n) = a (n, stride sa) op b (n, stride sb); sa, sb are 1 or 0 on the
// fast paths (both contiguous, one side a repeated scalar).
HX_INLINE void binary_row(hx_binary_op op, float *out, const float *a, int64_t sa,
                          const float *b, int64_t sb, int64_t n)
{
    if (sa == 1 && sb == 1) {
        for (int64_t i = 0; i < n; i++) out[i] = binop(op, a[i], b[i]);
    } else if (sa == 1 && sb == 0) {
        float bv = b[0];
        for (int64_t i = 0; i < n; i++) out[i] = binop(op, a[i], bv);
    } else if (sa == 0 && sb == 1) {
        float av = a[0];
        for (int64_t i = 0; i < n; i++) out[i] = binop(op, av, b[i]);
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = binop(op, a[i * sa], b[i * sb]);
    }
}

/* One copy of the row loops per op, so that the op is a constant in each. */
static void binary_row_op(hx_binary_op op, float *out, const float *a, int64_t sa,
                          const float *b, int64_t sb, int64_t n)
{
    switch (op) {
    case HX_BINARY_ADD: binary_row(HX_BINARY_ADD, out, a, sa, b, sb, n); break;
    case HX_BINARY_SUB: binary_row(HX_BINARY_SUB, out, a, sa, b, sb, n); break;
    case HX_BINARY_MUL: binary_row(HX_BINARY_MUL, out, a, sa, b, sb, n); break;
    case HX_BINARY_DIV: binary_row(HX_BINARY_DIV, out, a, sa, b, sb, n); break;
    }
}

/* f (m) = x (m, element stride s, dt) widened; returns the stride to read f
 * with (0: x is one value repeated). */
static int64_t widen_strided(float *f, const void *x, int64_t s, hx_kdtype dt, int64_t m)
{
    if (s == 0 || s == 1) {
        hx__widen(f, x, dt, s ? m : 1);
        return s;
    }
    uint16_t h[HX_K_HALF_BLOCK];
    for (int64_t k = 0; k < m; k++) h[k] = ((const uint16_t *)x)[k * s];
    hx__widen(f, h, dt, m);
    return 1;
}

/* out (n) = a (n, stride sa) op b (n, stride sb), all of dt. */
static void binary_run(hx_binary_op op, hx_kdtype dt, void *out, const void *a, int64_t sa,
                       const void *b, int64_t sb, int64_t n)
{
    if (dt == HX_K_F32) {
        binary_row_op(op, out, a, sa, b, sb, n);
        return;
    }
    float fa[HX_K_HALF_BLOCK], fb[HX_K_HALF_BLOCK], fo[HX_K_HALF_BLOCK];
    for (int64_t i = 0; i < n; i += HX_K_HALF_BLOCK) {
        int64_t m = hx__half_block(n - i);
        int64_t ua = widen_strided(fa, hx__at(a, dt, i * sa), sa, dt, m);
        int64_t ub = widen_strided(fb, hx__at(b, dt, i * sb), sb, dt, m);
        binary_row_op(op, fo, fa, ua, fb, ub, m);
        hx__narrow(hx__at_mut(out, dt, i), dt, fo, m);
    }
}

/* Elements [lo, hi) of the row-major output of `shape` (nd >= 1 dims):
 * walks the index like an odometer, one innermost run at a time. */
static void binary_range(hx_binary_op op, hx_kdtype dt, void *out, const void *a,
                         const int64_t *sa, const void *b, const int64_t *sb,
                         const int64_t *shape, int nd, int64_t lo, int64_t hi)
{
    int64_t idx[HX_K_MAX_DIMS] = {0};
    int64_t ao = 0, bo = 0;
    for (int64_t d = nd - 1, rem = lo; d >= 0 && rem > 0; d--) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
        ao += idx[d] * sa[d];
        bo += idx[d] * sb[d];
    }
    int last = nd - 1;
    for (int64_t i = lo; i < hi;) {
        int64_t len = shape[last] - idx[last];
        if (len > hi - i) len = hi - i;
        binary_run(op, dt, hx__at_mut(out, dt, i), hx__at(a, dt, ao), sa[last], hx__at(b, dt, bo),
                   sb[last], len);
        i += len;
        idx[last] += len;
        ao += len * sa[last];
        bo += len * sb[last];
        for (int d = last; d > 0 && idx[d] == shape[d]; d--) {
            ao += sa[d - 1] - shape[d] * sa[d];
            bo += sb[d - 1] - shape[d] * sb[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

static void binary(hx_binary_op op, hx_kdtype dt, void *out, const void *a,
                   const int64_t *a_strides, const void *b, const int64_t *b_strides,
                   const int64_t *shape, int ndim, int nthreads)
{
    /* Drop size-1 dims and merge a dim into the one outside it when both
     * operands step through the pair as one run (stride_outer ==
     * stride_inner * size_inner): a contiguous add becomes one row, a row
     * broadcast becomes (rows, n) with b strides (0, 1). */
    int64_t sh[HX_K_MAX_DIMS], sa[HX_K_MAX_DIMS], sb[HX_K_MAX_DIMS];
    int nd = 0;
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        total *= shape[d];
        if (shape[d] == 1) continue;
        if (nd > 0 && sa[nd - 1] == a_strides[d] * shape[d] &&
            sb[nd - 1] == b_strides[d] * shape[d]) {
            sh[nd - 1] *= shape[d];
        } else {
            sh[nd] = shape[d];
            nd++;
        }
        sa[nd - 1] = a_strides[d];
        sb[nd - 1] = b_strides[d];
    }
    if (total == 0) return;
    if (nd == 0) {
        sh[0] = 1;
        sa[0] = sb[0] = 0;
        nd = 1;
    }
    EACH_SLICE(total, nthreads, dt == HX_K_F32 ? 16 : HALF_ALIGN,
               binary_range(op, dt, out, a, sa, b, sb, sh, nd, lo, hi));
}

void hx_k_binary_f32(hx_binary_op op, float *out, const float *a, const int64_t *a_strides,
                     const float *b, const int64_t *b_strides, const int64_t *shape, int ndim,
                     int nthreads)
{
    binary(op, HX_K_F32, out, a, a_strides, b, b_strides, shape, ndim, nthreads);
}

void hx_k_binary_half(hx_binary_op op, void *out, const void *a, const int64_t *a_strides,
                      const void *b, const int64_t *b_strides, const int64_t *shape, int ndim,
                      hx_kdtype dt, int nthreads)
{
    binary(op, dt, out, a, a_strides, b, b_strides, shape, ndim, nthreads);
}

/* ---- unary forward ------------------------------------------------------ */

// y (n) = f(x (n)), one function per op
static void relu_forward(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* gelu (tanh and erf forms), sigmoid, tanh and exp: kernels/cpu/vmath.h,
 * which states their error bounds */
static void gelu_forward(float *y, const float *x, int64_t n) { hx__vmath()->gelu(y, x, n); }

static void gelu_erf_forward(float *y, const float *x, int64_t n)
{
    hx__vmath()->gelu_erf(y, x, n);
}

static void sigmoid_forward(float *y, const float *x, int64_t n) { hx__vmath()->sigmoid(y, x, n); }

static void tanh_forward(float *y, const float *x, int64_t n) { hx__vmath()->tanh(y, x, n); }

static void exp_forward(float *y, const float *x, int64_t n) { hx__vmath()->exp(y, x, n); }

static void log_forward(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]);
}

static void sqrt_forward(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]);
}

void hx__unary_forward(hx_unary_op op, float *y, const float *x, int64_t n)
{
    switch (op) {
    case HX_UNARY_RELU: relu_forward(y, x, n); break;
    case HX_UNARY_GELU: gelu_forward(y, x, n); break;
    case HX_UNARY_SIGMOID: sigmoid_forward(y, x, n); break;
    case HX_UNARY_TANH: tanh_forward(y, x, n); break;
    case HX_UNARY_EXP: exp_forward(y, x, n); break;
    case HX_UNARY_LOG: log_forward(y, x, n); break;
    case HX_UNARY_SQRT: sqrt_forward(y, x, n); break;
    case HX_UNARY_GELU_ERF: gelu_erf_forward(y, x, n); break;
    }
}

void hx_k_unary_f32(hx_unary_op op, float *y, const float *x, int64_t n, int nthreads)
{
    EACH_SLICE(n, nthreads, 16, hx__unary_forward(op, y + lo, x + lo, hi - lo));
}

static void unary_half(hx_unary_op op, void *y, const void *x, hx_kdtype dt, int64_t lo,
                       int64_t hi)
{
    float f[HX_K_HALF_BLOCK], o[HX_K_HALF_BLOCK];
    for (int64_t i = lo; i < hi; i += HX_K_HALF_BLOCK) {
        int64_t m = hx__half_block(hi - i);
        hx__widen(f, hx__at(x, dt, i), dt, m);
        hx__unary_forward(op, o, f, m);
        hx__narrow(hx__at_mut(y, dt, i), dt, o, m);
    }
}

void hx_k_unary_half(hx_unary_op op, void *y, const void *x, hx_kdtype dt, int64_t n,
                     int nthreads)
{
    EACH_SLICE(n, nthreads, HALF_ALIGN, unary_half(op, y, x, dt, lo, hi));
}

/* ---- unary backward ----------------------------------------------------- */

// dx (n) = dy (n) * f'(.), reading x (relu, gelus, log) or y = f(x) (sigmoid,
// tanh, exp, sqrt)
static void relu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

static void gelu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    hx__vmath()->gelu_backward(dx, dy, x, n);
}

static void gelu_erf_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    hx__vmath()->gelu_erf_backward(dx, dy, x, n);
}

static void sigmoid_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

static void tanh_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

static void exp_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i];
}

static void log_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] / x[i];
}

static void sqrt_backward(float *dx, const float *dy, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dx[i] = 0.5f * dy[i] / y[i];
}

static void unary_backward(hx_unary_op op, float *dx, const float *dy, const float *x,
                           const float *y, int64_t n)
{
    switch (op) {
    case HX_UNARY_RELU: relu_backward(dx, dy, x, n); break;
    case HX_UNARY_GELU: gelu_backward(dx, dy, x, n); break;
    case HX_UNARY_SIGMOID: sigmoid_backward(dx, dy, y, n); break;
    case HX_UNARY_TANH: tanh_backward(dx, dy, y, n); break;
    case HX_UNARY_EXP: exp_backward(dx, dy, y, n); break;
    case HX_UNARY_LOG: log_backward(dx, dy, x, n); break;
    case HX_UNARY_SQRT: sqrt_backward(dx, dy, y, n); break;
    case HX_UNARY_GELU_ERF: gelu_erf_backward(dx, dy, x, n); break;
    }
}

/* x or y may be NULL where the op does not read it; a slice offset is only
 * applied to a pointer that is there. */
void hx_k_unary_backward_f32(hx_unary_op op, float *dx, const float *dy, const float *x,
                             const float *y, int64_t n, int nthreads)
{
    EACH_SLICE(n, nthreads, 16,
               unary_backward(op, dx + lo, dy + lo, x ? x + lo : x, y ? y + lo : y, hi - lo));
}

static void unary_backward_half(hx_unary_op op, void *dx, const void *dy, const void *x,
                                const void *y, hx_kdtype dt, int64_t lo, int64_t hi)
{
    float d[HX_K_HALF_BLOCK], v[HX_K_HALF_BLOCK], o[HX_K_HALF_BLOCK];
    const void *xy = x ? x : y;
    for (int64_t i = lo; i < hi; i += HX_K_HALF_BLOCK) {
        int64_t m = hx__half_block(hi - i);
        hx__widen(d, hx__at(dy, dt, i), dt, m);
        hx__widen(v, hx__at(xy, dt, i), dt, m);
        unary_backward(op, o, d, x ? v : NULL, x ? NULL : v, m);
        hx__narrow(hx__at_mut(dx, dt, i), dt, o, m);
    }
}

void hx_k_unary_backward_half(hx_unary_op op, void *dx, const void *dy, const void *x,
                              const void *y, hx_kdtype dt, int64_t n, int nthreads)
{
    EACH_SLICE(n, nthreads, HALF_ALIGN, unary_backward_half(op, dx, dy, x, y, dt, lo, hi));
}

/* ---- GELU with its derivative kept for the backward ---------------------- */

static void gelu_save_half(void *y, float *d, const void *x, hx_kdtype dt, int64_t lo,
                           int64_t hi)
{
    const hx_vmath_path *p = hx__vmath();
    float f[HX_K_HALF_BLOCK], o[HX_K_HALF_BLOCK];
    for (int64_t i = lo; i < hi; i += HX_K_HALF_BLOCK) {
        int64_t m = hx__half_block(hi - i);
        hx__widen(f, hx__at(x, dt, i), dt, m);
        p->gelu_save(o, d + i, f, m);
        hx__narrow(hx__at_mut(y, dt, i), dt, o, m);
    }
}

void hx_k_gelu_save(void *y, float *d, const void *x, hx_kdtype dt, int64_t n, int nthreads)
{
    const hx_vmath_path *p = hx__vmath();
    if (dt == HX_K_F32)
        EACH_SLICE(n, nthreads, 16,
                   p->gelu_save((float *)y + lo, d + lo, (const float *)x + lo, hi - lo));
    else
        EACH_SLICE(n, nthreads, HALF_ALIGN, gelu_save_half(y, d, x, dt, lo, hi));
}

static void gelu_backward_saved_half(void *dx, const void *dy, const float *d, hx_kdtype dt,
                                     int64_t lo, int64_t hi)
{
    const hx_vmath_path *p = hx__vmath();
    float f[HX_K_HALF_BLOCK], o[HX_K_HALF_BLOCK];
    for (int64_t i = lo; i < hi; i += HX_K_HALF_BLOCK) {
        int64_t m = hx__half_block(hi - i);
        hx__widen(f, hx__at(dy, dt, i), dt, m);
        p->times_saved(o, f, d + i, m);
        hx__narrow(hx__at_mut(dx, dt, i), dt, o, m);
    }
}

void hx_k_gelu_backward_saved(void *dx, const void *dy, const float *d, hx_kdtype dt, int64_t n,
                              int nthreads)
{
    const hx_vmath_path *p = hx__vmath();
    if (dt == HX_K_F32)
        EACH_SLICE(n, nthreads, 16,
                   p->times_saved((float *)dx + lo, (const float *)dy + lo, d + lo, hi - lo));
    else
        EACH_SLICE(n, nthreads, HALF_ALIGN, gelu_backward_saved_half(dx, dy, d, dt, lo, hi));
}

/* ---- scale, bias add ---------------------------------------------------- */

// y (n) = s * x (n)
static void scale_forward(float *y, const float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
}

void hx_k_scale_f32(float *y, const float *x, float s, int64_t n, int nthreads)
{
    EACH_SLICE(n, nthreads, 16, scale_forward(y + lo, x + lo, s, hi - lo));
}

static void scale_half(void *y, const void *x, float s, hx_kdtype dt, int64_t lo, int64_t hi)
{
    float f[HX_K_HALF_BLOCK], o[HX_K_HALF_BLOCK];
    for (int64_t i = lo; i < hi; i += HX_K_HALF_BLOCK) {
        int64_t m = hx__half_block(hi - i);
        hx__widen(f, hx__at(x, dt, i), dt, m);
        scale_forward(o, f, s, m);
        hx__narrow(hx__at_mut(y, dt, i), dt, o, m);
    }
}

void hx_k_scale_half(void *y, const void *x, float s, hx_kdtype dt, int64_t n, int nthreads)
{
    EACH_SLICE(n, nthreads, HALF_ALIGN, scale_half(y, x, s, dt, lo, hi));
}

// y (rows, n) = x (rows, n) + b (n): a binary add with b broadcast over rows
static void bias_add(void *y, const void *x, const void *b, hx_kdtype dt, int64_t rows,
                     int64_t n, int nthreads)
{
    const int64_t shape[2] = {rows, n};
    const int64_t x_strides[2] = {n, 1};
    const int64_t b_strides[2] = {0, 1};
    binary(HX_BINARY_ADD, dt, y, x, x_strides, b, b_strides, shape, 2, nthreads);
}

void hx_k_bias_add_f32(float *y, const float *x, const float *b, int64_t rows, int64_t n,
                       int nthreads)
{
    bias_add(y, x, b, HX_K_F32, rows, n, nthreads);
}

void hx_k_bias_add_half(void *y, const void *x, const void *b, hx_kdtype dt, int64_t rows,
                        int64_t n, int nthreads)
{
    bias_add(y, x, b, dt, rows, n, nthreads);
}
