/* Elementwise kernels: binary ops with broadcasting, unary ops and their
 * backward, scale, bias add. Every output element depends on its inputs
 * only, so results are bitwise the same at any thread count. */
#include <math.h>
#include <stdint.h>

#include "hx_kinternal.h"
#include "vmath.h"

/* ---- binary ------------------------------------------------------------- */

HX_INLINE float binop(hx_binary_op op, float x, float y)
{
    switch (op) {
    case HX_BINARY_ADD: return x + y;
    case HX_BINARY_SUB: return x - y;
    case HX_BINARY_MUL: return x * y;
    case HX_BINARY_DIV: return x / y;
    }
    return 0.0f;
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

/* Elements [lo, hi) of the row-major output of `shape` (nd >= 1 dims):
 * walks the index like an odometer, one innermost run at a time. */
static void binary_range(hx_binary_op op, float *out, const float *a, const int64_t *sa,
                         const float *b, const int64_t *sb, const int64_t *shape, int nd,
                         int64_t lo, int64_t hi)
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
        binary_row_op(op, out + i, a + ao, sa[last], b + bo, sb[last], len);
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

void hx_k_binary_f32(hx_binary_op op, float *out, const float *a, const int64_t *a_strides,
                     const float *b, const int64_t *b_strides, const int64_t *shape, int ndim,
                     int nthreads)
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
    if (!hx_k_go_parallel(total, nthreads)) {
        if (nd == 1) /* one run: contiguous, or one side a scalar */
            binary_row_op(op, out, a, sa[0], b, sb[0], total);
        else
            binary_range(op, out, a, sa, b, sb, sh, nd, 0, total);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(total, 16, &lo, &hi);
        binary_range(op, out, a, sa, b, sb, sh, nd, lo, hi);
    }
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
    if (!hx_k_go_parallel(n, nthreads)) {
        hx__unary_forward(op, y, x, n);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 16, &lo, &hi);
        hx__unary_forward(op, y + lo, x + lo, hi - lo);
    }
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
    if (!hx_k_go_parallel(n, nthreads)) {
        unary_backward(op, dx, dy, x, y, n);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 16, &lo, &hi);
        unary_backward(op, dx + lo, dy + lo, x ? x + lo : x, y ? y + lo : y, hi - lo);
    }
}

/* ---- scale, bias add ---------------------------------------------------- */

// y (n) = s * x (n)
static void scale_forward(float *y, const float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
}

void hx_k_scale_f32(float *y, const float *x, float s, int64_t n, int nthreads)
{
    if (!hx_k_go_parallel(n, nthreads)) {
        scale_forward(y, x, s, n);
        return;
    }
#pragma omp parallel num_threads(nthreads)
    {
        int64_t lo, hi;
        hx_k_thread_slice(n, 16, &lo, &hi);
        scale_forward(y + lo, x + lo, s, hi - lo);
    }
}

// y (rows, n) = x (rows, n) + b (n): a binary add with b broadcast over rows
void hx_k_bias_add_f32(float *y, const float *x, const float *b, int64_t rows, int64_t n,
                       int nthreads)
{
    const int64_t shape[2] = {rows, n};
    const int64_t x_strides[2] = {n, 1};
    const int64_t b_strides[2] = {0, 1};
    hx_k_binary_f32(HX_BINARY_ADD, y, x, x_strides, b, b_strides, shape, 2, nthreads);
}
