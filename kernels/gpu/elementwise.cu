/* Elementwise kernels: binary with broadcasting, unary and their
 * backward, scale, bias, cast, causal mask, dropout. The op is a run-time
 * switch (uniform across the grid, so free next to the memory traffic):
 * fewer instantiations, shorter builds. */
#include "kernels/gpu/gk_common.cuh"

/* ---- binary ------------------------------------------------------------------ */

struct bin_geom {
    int ndim;
    int64_t shape[HX_K_MAX_DIMS], sa[HX_K_MAX_DIMS], sb[HX_K_MAX_DIMS];
};

__device__ __forceinline__ float binary_op(int op, float a, float b)
{
    switch (op) {
    case HX_BINARY_ADD: return a + b;
    case HX_BINARY_SUB: return a - b;
    case HX_BINARY_MUL: return a * b;
    default: return a / b;
    }
}

/* flat: a and b are contiguous in out's shape. */
template <typename T>
__global__ void binary_kernel(T *out, const T *a, const T *b, bin_geom g, int64_t n, int op,
                              int flat)
{
    GRID_STRIDE(i, n) {
        int64_t oa = i, ob = i;
        if (!flat) {
            int64_t r = i;
            oa = ob = 0;
            for (int d = g.ndim - 1; d >= 0; d--) {
                int64_t k = r % g.shape[d];
                r /= g.shape[d];
                oa += k * g.sa[d];
                ob += k * g.sb[d];
            }
        }
        st(out + i, binary_op(op, ld(a + oa), ld(b + ob)));
    }
}

hx_gk_status hx_gk_binary(const hx_gk_ctx *c, hx_kdtype dt, hx_binary_op op, void *out,
                          const void *a, const int64_t *a_strides, const void *b,
                          const int64_t *b_strides, const int64_t *shape, int ndim)
{
    if (ndim < 0 || ndim > HX_K_MAX_DIMS) return HX_GK_BAD_ARG;
    bin_geom g = {ndim, {0}, {0}, {0}};
    int64_t n = 1, contig = 1;
    int flat = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        g.shape[d] = shape[d];
        g.sa[d] = a_strides[d];
        g.sb[d] = b_strides[d];
        if (shape[d] != 1 && (a_strides[d] != contig || b_strides[d] != contig)) flat = 0;
        contig *= shape[d];
        n *= shape[d];
    }
    if (n == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        binary_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)out, (const T *)a, (const T *)b, g, n, (int)op, flat));
    return hx_gk_launched();
}

/* ---- unary ---------------------------------------------------------------------- */

#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrt(2 / pi), as the CPU kernel */

__device__ __forceinline__ float unary_op(int op, float x)
{
    switch (op) {
    case HX_UNARY_RELU: return x > 0.0f ? x : 0.0f;
    case HX_UNARY_GELU: {
        float cube = 0.044715f * x * x * x;
        return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
    }
    case HX_UNARY_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case HX_UNARY_TANH: return tanhf(x);
    case HX_UNARY_EXP: return expf(x);
    case HX_UNARY_LOG: return logf(x);
    default: return sqrtf(x);
    }
}

/* dy * f'(.) from x (relu, gelu, log) or y (the others). */
__device__ __forceinline__ float unary_grad(int op, float dy, float x, float y)
{
    switch (op) {
    case HX_UNARY_RELU: return x > 0.0f ? dy : 0.0f;
    case HX_UNARY_GELU: {
        float cube = 0.044715f * x * x * x;
        float t = tanhf(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - t * t;
        float local = 0.5f * (1.0f + t) +
                      0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        return dy * local;
    }
    case HX_UNARY_SIGMOID: return dy * y * (1.0f - y);
    case HX_UNARY_TANH: return dy * (1.0f - y * y);
    case HX_UNARY_EXP: return dy * y;
    case HX_UNARY_LOG: return dy / x;
    default: return 0.5f * dy / y;
    }
}

template <typename T>
__global__ void unary_kernel(T *y, const T *x, int64_t n, int op)
{
    GRID_STRIDE(i, n) st(y + i, unary_op(op, ld(x + i)));
}

template <typename T>
__global__ void unary_backward_kernel(T *dx, const T *dy, const T *x, const T *y, int64_t n,
                                      int op)
{
    GRID_STRIDE(i, n) {
        float xv = x ? ld(x + i) : 0.0f, yv = y ? ld(y + i) : 0.0f;
        st(dx + i, unary_grad(op, ld(dy + i), xv, yv));
    }
}

static int reads_x(hx_unary_op op)
{
    return op == HX_UNARY_RELU || op == HX_UNARY_GELU || op == HX_UNARY_LOG;
}

hx_gk_status hx_gk_unary(const hx_gk_ctx *c, hx_kdtype dt, hx_unary_op op, void *y,
                         const void *x, int64_t n)
{
    if ((unsigned)op > HX_UNARY_SQRT || n < 0) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        unary_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)y, (const T *)x, n, (int)op));
    return hx_gk_launched();
}

hx_gk_status hx_gk_unary_backward(const hx_gk_ctx *c, hx_kdtype dt, hx_unary_op op, void *dx,
                                  const void *dy, const void *x, const void *y, int64_t n)
{
    if ((unsigned)op > HX_UNARY_SQRT || n < 0 || (reads_x(op) ? !x : !y)) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        unary_backward_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0,
                                   c->stream>>>((T *)dx, (const T *)dy,
                                                reads_x(op) ? (const T *)x : NULL,
                                                reads_x(op) ? NULL : (const T *)y, n, (int)op));
    return hx_gk_launched();
}

/* ---- scale, bias ---------------------------------------------------------------------- */

template <typename T>
__global__ void scale_kernel(T *y, const T *x, float s, int64_t n)
{
    GRID_STRIDE(i, n) st(y + i, s * ld(x + i));
}

hx_gk_status hx_gk_scale(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x, float s,
                         int64_t n)
{
    if (n < 0) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        scale_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)y, (const T *)x, s, n));
    return hx_gk_launched();
}

template <typename T>
__global__ void bias_add_kernel(T *y, const T *x, const T *b, int64_t total, int64_t n)
{
    GRID_STRIDE(i, total) st(y + i, ld(x + i) + ld(b + i % n));
}

hx_gk_status hx_gk_bias_add(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                            const void *b, int64_t rows, int64_t n)
{
    if (rows < 0 || n < 0) return HX_GK_BAD_ARG;
    int64_t total = rows * n;
    if (total == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        bias_add_kernel<T><<<hx_gk_blocks(total, HX_GK_THREADS), HX_GK_THREADS, 0,
                             c->stream>>>((T *)y, (const T *)x, (const T *)b, total, n));
    return hx_gk_launched();
}

/* ---- cast ------------------------------------------------------------------------------ */

/* Every float dtype widens exactly to f32, so one rounding (the store) is
 * the only one: f16 <-> bf16 rounds once, as on the CPU. */
template <typename Y, typename X>
__global__ void cast_kernel(Y *y, const X *x, int64_t n)
{
    GRID_STRIDE(i, n) st(y + i, ld(x + i));
}

template <typename Y>
static hx_gk_status cast_from(const hx_gk_ctx *c, Y *y, const void *x, hx_kdtype xdt, int64_t n)
{
    HX_GK_FLOAT_TYPES(xdt, X,
        cast_kernel<Y, X><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            y, (const X *)x, n));
    return hx_gk_launched();
}

hx_gk_status hx_gk_cast(const hx_gk_ctx *c, void *y, hx_kdtype ydt, const void *x,
                        hx_kdtype xdt, int64_t n)
{
    if (n < 0) return HX_GK_BAD_ARG;
    if (ydt == xdt && (ydt == HX_K_F32 || ydt == HX_K_F16 || ydt == HX_K_BF16))
        return hx_gk_memcpy(c, y, x, (size_t)n * hx_k_dtype_size(ydt));
    if (n == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(ydt, Y, return cast_from<Y>(c, (Y *)y, x, xdt, n));
    return HX_GK_BAD_ARG;
}

/* ---- causal mask, dropout ------------------------------------------------------------------- */

template <typename T>
__global__ void causal_mask_kernel(T *y, const T *x, int64_t total, int64_t T_, float fill)
{
    GRID_STRIDE(i, total) {
        int64_t col = i % T_, row = (i / T_) % T_;
        st(y + i, col <= row ? ld(x + i) : fill);
    }
}

hx_gk_status hx_gk_causal_mask(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                               int64_t batch, int64_t T, float fill)
{
    if (batch < 0 || T < 0) return HX_GK_BAD_ARG;
    int64_t total = batch * T * T;
    if (total == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, Ty,
        causal_mask_kernel<Ty><<<hx_gk_blocks(total, HX_GK_THREADS), HX_GK_THREADS, 0,
                                 c->stream>>>((Ty *)y, (const Ty *)x, total, T, fill));
    return hx_gk_launched();
}

/* splitmix64's mixer and the key schedule of kernels/cpu/nn.c: the masks
 * must agree bit for bit (tests/gpu compares them). */
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

template <typename T>
__global__ void dropout_kernel(T *y, const T *x, float p, float thr, uint64_t key, int64_t n)
{
    float keep_prob = 1.0f - p;
    GRID_STRIDE(i, n) {
        int32_t u = (int32_t)(mix64(key + (uint64_t)i * GOLDEN_GAMMA) >> 40);
        st(y + i, (float)u >= thr ? __fdiv_rn(ld(x + i), keep_prob) : 0.0f);
    }
}

hx_gk_status hx_gk_dropout(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x, float p,
                           uint64_t seed, uint64_t stream, int64_t n)
{
    if (n < 0 || !(p >= 0.0f && p < 1.0f)) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    uint64_t key = mix64(seed ^ mix64(stream + GOLDEN_GAMMA));
    HX_GK_FLOAT_TYPES(dt, T,
        dropout_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)y, (const T *)x, p, p * 16777216.0f, key, n));
    return hx_gk_launched();
}

/* ---- sum of squares (the gradient scan) ------------------------------------------------
 * Thread t of SUMSQ_BLOCKS x SUMSQ_THREADS sums x[t], x[t + stride], ... in
 * double; each block adds its threads in a fixed tree into part[block], and
 * one thread adds the parts in order: the same bits on every run. */
enum { SUMSQ_BLOCKS = 256, SUMSQ_THREADS = 256 };

size_t hx_gk_sumsq_scratch_bytes(void) { return SUMSQ_BLOCKS * sizeof(double); }

template <typename T>
__global__ void sumsq_blocks_kernel(double *part, const T *x, int64_t n)
{
    __shared__ double acc[SUMSQ_THREADS];
    double a = 0;
    for (int64_t i = (int64_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n;
         i += (int64_t)SUMSQ_BLOCKS * SUMSQ_THREADS) {
        double v = ld(x + i);
        a += v * v;
    }
    acc[threadIdx.x] = a;
    __syncthreads();
    for (int w = SUMSQ_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) acc[threadIdx.x] += acc[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = acc[0];
}

__global__ void sumsq_total_kernel(double *out, const double *part)
{
    double t = 0;
    for (int b = 0; b < SUMSQ_BLOCKS; b++) t += part[b];
    *out = t;
}

hx_gk_status hx_gk_sumsq(const hx_gk_ctx *c, hx_kdtype dt, double *out, const void *x, int64_t n)
{
    if (n < 0) return HX_GK_BAD_ARG;
    if (c->scratch_bytes < hx_gk_sumsq_scratch_bytes()) return HX_GK_SCRATCH;
    double *part = (double *)c->scratch;
    HX_GK_FLOAT_TYPES(dt, T,
        sumsq_blocks_kernel<T><<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, c->stream>>>(part, (const T *)x, n));
    GK_TRY(hx_gk_launched());
    sumsq_total_kernel<<<1, 1, 0, c->stream>>>(out, part);
    return hx_gk_launched();
}
