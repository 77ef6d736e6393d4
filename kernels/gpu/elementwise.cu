/* Elementwise kernels: binary with broadcasting, unary and their
 * backward, scale, bias, cast, causal mask, dropout. The op is a run-time
 * switch (uniform across the grid, so free next to the memory traffic):
 * fewer instantiations, shorter builds. Contiguous operands go through
 * hx_gk_map (gk_common.cuh), which moves them in 16-byte packets. */
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

struct binary_f {
    int op;
    __device__ float operator()(int64_t, float a, float b) const { return binary_op(op, a, b); }
};

/* a and b at any strides in out's shape (broadcasting) */
template <typename T>
__global__ void binary_strided_kernel(T *out, const T *a, const T *b, bin_geom g, int64_t n,
                                      int op)
{
    GRID_STRIDE(i, n) {
        int64_t r = i, oa = 0, ob = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t k = r % g.shape[d];
            r /= g.shape[d];
            oa += k * g.sa[d];
            ob += k * g.sb[d];
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
        if (flat) return hx_gk_map(c, (T *)out, (const T *)a, (const T *)b, n, binary_f{(int)op});
        binary_strided_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)out, (const T *)a, (const T *)b, g, n, (int)op));
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
    case HX_UNARY_GELU_ERF: return x * normcdff(x);
    default: return sqrtf(x);
    }
}

/* dy * f'(.) from x (relu, gelus, log) or y (the others). */
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
    case HX_UNARY_GELU_ERF: /* Phi(x) + x phi(x) */
        return dy * (normcdff(x) + x * expf(-0.5f * x * x) * 0.398942280f);
    default: return 0.5f * dy / y;
    }
}

struct unary_f {
    int op;
    __device__ float operator()(int64_t, float x, float) const { return unary_op(op, x); }
};

/* v is x (uses_x) or y */
struct unary_grad_f {
    int op, uses_x;
    __device__ float operator()(int64_t, float dy, float v) const
    {
        return unary_grad(op, dy, uses_x ? v : 0.0f, uses_x ? 0.0f : v);
    }
};

static int reads_x(hx_unary_op op)
{
    return op == HX_UNARY_RELU || op == HX_UNARY_GELU || op == HX_UNARY_GELU_ERF ||
           op == HX_UNARY_LOG;
}

hx_gk_status hx_gk_unary(const hx_gk_ctx *c, hx_kdtype dt, hx_unary_op op, void *y,
                         const void *x, int64_t n)
{
    if ((unsigned)op > HX_UNARY_GELU_ERF || n < 0) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, return hx_gk_map(c, (T *)y, (const T *)x, (const T *)NULL, n,
                                              unary_f{(int)op}));
    return HX_GK_BAD_ARG;
}

hx_gk_status hx_gk_unary_backward(const hx_gk_ctx *c, hx_kdtype dt, hx_unary_op op, void *dx,
                                  const void *dy, const void *x, const void *y, int64_t n)
{
    if ((unsigned)op > HX_UNARY_GELU_ERF || n < 0 || (reads_x(op) ? !x : !y)) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    int uses_x = reads_x(op);
    HX_GK_FLOAT_TYPES(dt, T, return hx_gk_map(c, (T *)dx, (const T *)dy,
                                              (const T *)(uses_x ? x : y), n,
                                              unary_grad_f{(int)op, uses_x}));
    return HX_GK_BAD_ARG;
}

/* ---- scale, bias ---------------------------------------------------------------------- */

struct scale_f {
    float s;
    __device__ float operator()(int64_t, float x, float) const { return s * x; }
};

hx_gk_status hx_gk_scale(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x, float s,
                         int64_t n)
{
    if (n < 0) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        return hx_gk_map(c, (T *)y, (const T *)x, (const T *)NULL, n, scale_f{s}));
    return HX_GK_BAD_ARG;
}

template <typename T>
struct bias_f {
    const T *b;
    int64_t n;
    __device__ float operator()(int64_t i, float x, float) const { return x + ld(b + i % n); }
};

hx_gk_status hx_gk_bias_add(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                            const void *b, int64_t rows, int64_t n)
{
    if (rows < 0 || n < 0) return HX_GK_BAD_ARG;
    int64_t total = rows * n;
    if (total == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, return hx_gk_map(c, (T *)y, (const T *)x, (const T *)NULL, total,
                                              bias_f<T>{(const T *)b, n}));
    return HX_GK_BAD_ARG;
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

struct causal_mask_f {
    int64_t T;
    float fill;
    __device__ float operator()(int64_t i, float x, float) const
    {
        int64_t col = i % T, row = (i / T) % T;
        return col <= row ? x : fill;
    }
};

hx_gk_status hx_gk_causal_mask(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                               int64_t batch, int64_t T, float fill)
{
    if (batch < 0 || T < 0) return HX_GK_BAD_ARG;
    int64_t total = batch * T * T;
    if (total == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, Ty, return hx_gk_map(c, (Ty *)y, (const Ty *)x, (const Ty *)NULL, total,
                                               causal_mask_f{T, fill}));
    return HX_GK_BAD_ARG;
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

struct dropout_f {
    float keep_prob, thr;
    uint64_t key;
    __device__ float operator()(int64_t i, float x, float) const
    {
        int32_t u = (int32_t)(mix64(key + (uint64_t)i * GOLDEN_GAMMA) >> 40);
        return (float)u >= thr ? __fdiv_rn(x, keep_prob) : 0.0f;
    }
};

hx_gk_status hx_gk_dropout(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x, float p,
                           uint64_t seed, uint64_t stream, int64_t n)
{
    if (n < 0 || !(p >= 0.0f && p < 1.0f)) return HX_GK_BAD_ARG;
    if (n == 0) return HX_GK_OK;
    uint64_t key = mix64(seed ^ mix64(stream + GOLDEN_GAMMA));
    HX_GK_FLOAT_TYPES(dt, T, return hx_gk_map(c, (T *)y, (const T *)x, (const T *)NULL, n,
                                              dropout_f{1.0f - p, p * 16777216.0f, key}));
    return HX_GK_BAD_ARG;
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
