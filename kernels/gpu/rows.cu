/* Row kernels (last axis): softmax, log-softmax, layernorm and their
 * backward, and the losses. A row of at most 1024 is one warp's, held in
 * its registers (read once, written once); a longer row is one block's,
 * which reads it again per pass. Either way every row's sums are one fixed
 * tree (warp_sum / block_sum), the same bits every run; the mean losses
 * add per-row (or per-block) f64 partials in a second, single-block pass. */
#include "kernels/gpu/gk_common.cuh"

static int rows_ok(int64_t rows, int64_t n) { return rows >= 0 && n >= 0 && rows <= HX_GK_MAX_GRID; }

#define ROW_LAUNCH(kernel, T, rows, n, c) \
    kernel<T><<<(unsigned)(rows), hx_gk_row_threads(n), 0, (c)->stream>>>

/* ---- rows of at most WARP_ROW_MAX: a warp per row ------------------------------ */

#define WARP_ROW_MAX 1024
#define WARP_ROWS_PER_BLOCK 4

/* Sum and max over the warp by a butterfly: every lane adds the same two
 * partial sums at each step, so all lanes end with the same bits. */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The warp's row, or -1 past the last row (a whole warp leaves together). */
__device__ __forceinline__ int64_t warp_row(int64_t rows)
{
    int64_t r = (int64_t)blockIdx.x * WARP_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    return r < rows ? r : -1;
}

/* Launches kernel<T, V> with V values per lane (lane + 32 k, k < V: loads
 * coalesced), V the least power of two with 32 V >= n. */
#define WARP_LAUNCH(kernel, T, rows, n, c, ...)                                              \
    do {                                                                                     \
        unsigned blocks_ = (unsigned)(((rows) + WARP_ROWS_PER_BLOCK - 1) / WARP_ROWS_PER_BLOCK); \
        unsigned threads_ = 32 * WARP_ROWS_PER_BLOCK;                                        \
        if ((n) <= 32) kernel<T, 1><<<blocks_, threads_, 0, (c)->stream>>>(__VA_ARGS__);     \
        else if ((n) <= 64) kernel<T, 2><<<blocks_, threads_, 0, (c)->stream>>>(__VA_ARGS__); \
        else if ((n) <= 128) kernel<T, 4><<<blocks_, threads_, 0, (c)->stream>>>(__VA_ARGS__); \
        else if ((n) <= 256) kernel<T, 8><<<blocks_, threads_, 0, (c)->stream>>>(__VA_ARGS__); \
        else if ((n) <= 512) kernel<T, 16><<<blocks_, threads_, 0, (c)->stream>>>(__VA_ARGS__); \
        else kernel<T, 32><<<blocks_, threads_, 0, (c)->stream>>>(__VA_ARGS__);              \
    } while (0)

/* v[k] = row[lane + 32 k], fill past n */
template <typename T, int V>
__device__ __forceinline__ void warp_load(float (&v)[V], const T *row, int n, float fill)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < V; k++) {
        int j = lane + 32 * k;
        v[k] = j < n ? ld(row + j) : fill;
    }
}

/* ---- softmax, log-softmax ------------------------------------------------------- */

template <typename T>
__global__ void softmax_kernel(T *y, const T *x, int64_t n, int log_)
{
    __shared__ float sh[32];
    const T *xr = x + (int64_t)blockIdx.x * n;
    T *yr = y + (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, ld(xr + j));
    m = block_max(m, sh);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(ld(xr + j) - m);
    s = block_sum(s, sh);
    if (log_) {
        float lse = logf(s); /* (x - max) first, as the CPU kernel */
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) st(yr + j, (ld(xr + j) - m) - lse);
    } else {
        float inv = 1.0f / s;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) st(yr + j, expf(ld(xr + j) - m) * inv);
    }
}

/* softmax_kernel's arithmetic on a row held by one warp */
template <typename T, int V>
__global__ void softmax_warp_kernel(T *y, const T *x, int64_t rows, int n, int log_)
{
    int64_t r = warp_row(rows);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float v[V];
    warp_load(v, x + r * n, n, -INFINITY);
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < V; k++) m = fmaxf(m, v[k]);
    m = warp_max(m);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) s += lane + 32 * k < n ? expf(v[k] - m) : 0.0f;
    s = warp_sum(s);
    float lse = logf(s), inv = 1.0f / s;
    T *yr = y + r * n;
#pragma unroll
    for (int k = 0; k < V; k++) {
        int j = lane + 32 * k;
        if (j < n) st(yr + j, log_ ? (v[k] - m) - lse : expf(v[k] - m) * inv);
    }
}

static hx_gk_status softmax_any(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                                int64_t rows, int64_t n, int log_)
{
    if (!rows_ok(rows, n)) return HX_GK_BAD_ARG;
    if (!rows || !n) return HX_GK_OK;
    if (n <= WARP_ROW_MAX) {
        HX_GK_FLOAT_TYPES(dt, T, WARP_LAUNCH(softmax_warp_kernel, T, rows, n, c, (T *)y,
                                             (const T *)x, rows, (int)n, log_));
    } else {
        HX_GK_FLOAT_TYPES(dt, T, ROW_LAUNCH(softmax_kernel, T, rows, n, c)((T *)y, (const T *)x,
                                                                           n, log_));
    }
    return hx_gk_launched();
}

hx_gk_status hx_gk_softmax(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                           int64_t rows, int64_t n)
{
    return softmax_any(c, dt, y, x, rows, n, 0);
}

hx_gk_status hx_gk_log_softmax(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                               int64_t rows, int64_t n)
{
    return softmax_any(c, dt, y, x, rows, n, 1);
}

/* softmax: dx = y * (dy - sum(dy * y)); log-softmax: dx = dy - exp(y) * sum(dy) */
template <typename T>
__global__ void softmax_backward_kernel(T *dx, const T *dy, const T *y, int64_t n, int log_)
{
    __shared__ float sh[32];
    int64_t off = (int64_t)blockIdx.x * n;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        s += log_ ? ld(dy + off + j) : ld(dy + off + j) * ld(y + off + j);
    s = block_sum(s, sh);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float g = ld(dy + off + j), v = ld(y + off + j);
        st(dx + off + j, log_ ? g - expf(v) * s : v * (g - s));
    }
}

/* softmax_backward_kernel's arithmetic on a row held by one warp */
template <typename T, int V>
__global__ void softmax_backward_warp_kernel(T *dx, const T *dy, const T *y, int64_t rows, int n,
                                             int log_)
{
    int64_t r = warp_row(rows);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float g[V], v[V];
    warp_load(g, dy + r * n, n, 0.0f);
    warp_load(v, y + r * n, n, 0.0f);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) s += log_ ? g[k] : g[k] * v[k];
    s = warp_sum(s);
    T *dxr = dx + r * n;
#pragma unroll
    for (int k = 0; k < V; k++) {
        int j = lane + 32 * k;
        if (j < n) st(dxr + j, log_ ? g[k] - expf(v[k]) * s : v[k] * (g[k] - s));
    }
}

static hx_gk_status softmax_backward_any(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                         const void *dy, const void *y, int64_t rows, int64_t n,
                                         int log_)
{
    if (!rows_ok(rows, n)) return HX_GK_BAD_ARG;
    if (!rows || !n) return HX_GK_OK;
    if (n <= WARP_ROW_MAX) {
        HX_GK_FLOAT_TYPES(dt, T, WARP_LAUNCH(softmax_backward_warp_kernel, T, rows, n, c, (T *)dx,
                                             (const T *)dy, (const T *)y, rows, (int)n, log_));
    } else {
        HX_GK_FLOAT_TYPES(dt, T, ROW_LAUNCH(softmax_backward_kernel, T, rows, n, c)(
                                     (T *)dx, (const T *)dy, (const T *)y, n, log_));
    }
    return hx_gk_launched();
}

hx_gk_status hx_gk_softmax_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dx, const void *dy,
                                    const void *y, int64_t rows, int64_t n)
{
    return softmax_backward_any(c, dt, dx, dy, y, rows, n, 0);
}

hx_gk_status hx_gk_log_softmax_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                        const void *dy, const void *y, int64_t rows, int64_t n)
{
    return softmax_backward_any(c, dt, dx, dy, y, rows, n, 1);
}

/* ---- layernorm ------------------------------------------------------------------------ */

/* mean and rstd = 1 / sqrt(biased var + eps) of one row, two passes as on the CPU. */
template <typename T>
__device__ __forceinline__ void row_stats(const T *xr, int64_t n, float eps, float *sh,
                                          float *mean, float *rstd)
{
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += ld(xr + j);
    float m = block_sum(s, sh) / (float)n;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float d = ld(xr + j) - m;
        q += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(block_sum(q, sh) / (float)n + eps);
}

template <typename T>
__global__ void layernorm_kernel(T *y, const T *x, const T *gamma, const T *beta, float eps,
                                 int64_t n)
{
    __shared__ float sh[32];
    int64_t off = (int64_t)blockIdx.x * n;
    float mean, rstd;
    row_stats(x + off, n, eps, sh, &mean, &rstd);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        st(y + off + j, (ld(x + off + j) - mean) * rstd * ld(gamma + j) + ld(beta + j));
}

/* mean and rstd of a row held by one warp, two passes as row_stats */
template <int V>
__device__ __forceinline__ void warp_stats(const float (&v)[V], int n, float eps, float *mean,
                                           float *rstd)
{
    int lane = threadIdx.x & 31;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) s += v[k]; /* 0 past n */
    float m = warp_sum(s) / (float)n;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        float d = lane + 32 * k < n ? v[k] - m : 0.0f;
        q += d * d;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(warp_sum(q) / (float)n + eps);
}

template <typename T, int V>
__global__ void layernorm_warp_kernel(T *y, const T *x, const T *gamma, const T *beta, float eps,
                                      int64_t rows, int n)
{
    int64_t r = warp_row(rows);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float v[V], mean, rstd;
    warp_load(v, x + r * n, n, 0.0f);
    warp_stats(v, n, eps, &mean, &rstd);
    T *yr = y + r * n;
#pragma unroll
    for (int k = 0; k < V; k++) {
        int j = lane + 32 * k;
        if (j < n) st(yr + j, (v[k] - mean) * rstd * ld(gamma + j) + ld(beta + j));
    }
}

hx_gk_status hx_gk_layernorm(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                             const void *gamma, const void *beta, float eps, int64_t rows,
                             int64_t n)
{
    if (!rows_ok(rows, n)) return HX_GK_BAD_ARG;
    if (!rows || !n) return HX_GK_OK;
    if (n <= WARP_ROW_MAX) {
        HX_GK_FLOAT_TYPES(dt, T, WARP_LAUNCH(layernorm_warp_kernel, T, rows, n, c, (T *)y,
                                             (const T *)x, (const T *)gamma, (const T *)beta,
                                             eps, rows, (int)n));
    } else {
        HX_GK_FLOAT_TYPES(dt, T, ROW_LAUNCH(layernorm_kernel, T, rows, n, c)(
                                     (T *)y, (const T *)x, (const T *)gamma, (const T *)beta,
                                     eps, n));
    }
    return hx_gk_launched();
}

/* dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * gamma */
template <typename T>
__global__ void layernorm_backward_x_kernel(T *dx, const T *dy, const T *x, const T *gamma,
                                            float eps, int64_t n)
{
    __shared__ float sh[32];
    int64_t off = (int64_t)blockIdx.x * n;
    float mean, rstd;
    row_stats(x + off, n, eps, sh, &mean, &rstd);
    float a = 0.0f, ax = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float dnorm = ld(dy + off + j) * ld(gamma + j);
        a += dnorm;
        ax += dnorm * ((ld(x + off + j) - mean) * rstd);
    }
    float dnorm_mean = block_sum(a, sh) / (float)n;
    float dnorm_xhat_mean = block_sum(ax, sh) / (float)n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float xhat = (ld(x + off + j) - mean) * rstd;
        st(dx + off + j,
           (ld(dy + off + j) * ld(gamma + j) - dnorm_mean - xhat * dnorm_xhat_mean) * rstd);
    }
}

template <typename T, int V>
__global__ void layernorm_backward_x_warp_kernel(T *dx, const T *dy, const T *x, const T *gamma,
                                                 float eps, int64_t rows, int n)
{
    int64_t r = warp_row(rows);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float v[V], dnorm[V], mean, rstd;
    warp_load(v, x + r * n, n, 0.0f);
    warp_stats(v, n, eps, &mean, &rstd);
    const T *dyr = dy + r * n;
    float a = 0.0f, ax = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        int j = lane + 32 * k;
        dnorm[k] = j < n ? ld(dyr + j) * ld(gamma + j) : 0.0f;
        a += dnorm[k];
        ax += j < n ? dnorm[k] * ((v[k] - mean) * rstd) : 0.0f;
    }
    float dnorm_mean = warp_sum(a) / (float)n;
    float dnorm_xhat_mean = warp_sum(ax) / (float)n;
    T *dxr = dx + r * n;
#pragma unroll
    for (int k = 0; k < V; k++) {
        int j = lane + 32 * k;
        if (j < n) {
            float xhat = (v[k] - mean) * rstd;
            st(dxr + j, (dnorm[k] - dnorm_mean - xhat * dnorm_xhat_mean) * rstd);
        }
    }
}

hx_gk_status hx_gk_layernorm_backward_x(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                        const void *dy, const void *x, const void *gamma,
                                        float eps, int64_t rows, int64_t n)
{
    if (!rows_ok(rows, n)) return HX_GK_BAD_ARG;
    if (!rows || !n) return HX_GK_OK;
    if (n <= WARP_ROW_MAX) {
        HX_GK_FLOAT_TYPES(dt, T, WARP_LAUNCH(layernorm_backward_x_warp_kernel, T, rows, n, c,
                                             (T *)dx, (const T *)dy, (const T *)x,
                                             (const T *)gamma, eps, rows, (int)n));
    } else {
        HX_GK_FLOAT_TYPES(dt, T, ROW_LAUNCH(layernorm_backward_x_kernel, T, rows, n, c)(
                                     (T *)dx, (const T *)dy, (const T *)x, (const T *)gamma, eps,
                                     n));
    }
    return hx_gk_launched();
}

/* dgamma: row stats first (a block per row), then each column summed over
 * row chunks (a thread per column walks its chunk's rows in order), then
 * the chunks' partials added in chunk order. */
#define LN_CHUNK_ROWS 128
#define LN_MAX_CHUNKS 128

static int64_t ln_chunks(int64_t rows)
{
    int64_t k = (rows + LN_CHUNK_ROWS - 1) / LN_CHUNK_ROWS;
    return k < 1 ? 1 : k > LN_MAX_CHUNKS ? LN_MAX_CHUNKS : k;
}

size_t hx_gk_layernorm_backward_gamma_scratch_bytes(int64_t rows, int64_t n)
{
    return (size_t)(rows * 2 + ln_chunks(rows) * n) * sizeof(float);
}

template <typename T>
__global__ void ln_stats_kernel(float *stats, const T *x, float eps, int64_t n)
{
    __shared__ float sh[32];
    float mean, rstd;
    row_stats(x + (int64_t)blockIdx.x * n, n, eps, sh, &mean, &rstd);
    if (threadIdx.x == 0) {
        stats[2 * blockIdx.x] = mean;
        stats[2 * blockIdx.x + 1] = rstd;
    }
}

template <typename T>
__global__ void ln_gamma_partial_kernel(float *part, const float *stats, const T *dy, const T *x,
                                        int64_t rows, int64_t n, int64_t chunk)
{
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    int64_t lo = blockIdx.y * chunk, hi = lo + chunk < rows ? lo + chunk : rows;
    float acc = 0.0f;
    for (int64_t r = lo; r < hi; r++)
        acc += ld(dy + r * n + j) * ((ld(x + r * n + j) - stats[2 * r]) * stats[2 * r + 1]);
    part[blockIdx.y * n + j] = acc;
}

template <typename T>
__global__ void sum_partials_kernel(T *out, const float *part, int64_t n, int64_t k)
{
    GRID_STRIDE(j, n) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; p++) acc += part[p * n + j];
        st(out + j, acc);
    }
}

hx_gk_status hx_gk_layernorm_backward_gamma(const hx_gk_ctx *c, hx_kdtype dt, void *dgamma,
                                            const void *dy, const void *x, float eps,
                                            int64_t rows, int64_t n)
{
    if (!rows_ok(rows, n)) return HX_GK_BAD_ARG;
    if (!n) return HX_GK_OK;
    if (!rows) return hx_gk_memset0(c, dgamma, (size_t)n * hx_k_dtype_size(dt));
    if (c->scratch_bytes < hx_gk_layernorm_backward_gamma_scratch_bytes(rows, n)) return HX_GK_SCRATCH;
    float *stats = (float *)c->scratch, *part = stats + 2 * rows;
    int64_t k = ln_chunks(rows), chunk = (rows + k - 1) / k;
    k = (rows + chunk - 1) / chunk;
    dim3 grid((unsigned)((n + 255) / 256), (unsigned)k);
    HX_GK_FLOAT_TYPES(dt, T,
        ROW_LAUNCH(ln_stats_kernel, T, rows, n, c)(stats, (const T *)x, eps, n);
        GK_TRY(hx_gk_launched());
        ln_gamma_partial_kernel<T><<<grid, 256, 0, c->stream>>>(part, stats, (const T *)dy,
                                                               (const T *)x, rows, n, chunk);
        GK_TRY(hx_gk_launched());
        sum_partials_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)dgamma, part, n, k));
    return hx_gk_launched();
}

/* ---- losses ---------------------------------------------------------------------------- */

/* out[0] = (float)(sum of part[0..k) / count), summed by one block in a fixed tree. */
__global__ void mean_f64_kernel(float *out, const double *part, int64_t k, int64_t count)
{
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) s += part[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = count > 0 ? (float)(s / (double)count) : 0.0f;
}

size_t hx_gk_cross_entropy_scratch_bytes(int64_t N) { return (size_t)N * sizeof(double); }

/* Row loss logsumexp(x) - x[label], in f64 from the f32 max and sum as on the CPU. */
template <typename T>
__global__ void cross_entropy_rows_kernel(double *row_loss, const T *logits, const void *labels,
                                          int i64, int64_t C, uint64_t *bad)
{
    __shared__ float sh[32];
    int64_t i = blockIdx.x;
    const T *xr = logits + i * C;
    int64_t label = id_at(labels, i64, i);
    if (label < 0 || label >= C) {
        if (threadIdx.x == 0) {
            note_bad(bad, i);
            row_loss[i] = 0.0;
        }
        return;
    }
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) m = fmaxf(m, ld(xr + j));
    m = block_max(m, sh);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += expf(ld(xr + j) - m);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) row_loss[i] = (double)m + log((double)s) - (double)ld(xr + label);
}

static int labels_ok(hx_kdtype dt) { return dt == HX_K_I32 || dt == HX_K_I64; }

hx_gk_status hx_gk_cross_entropy(const hx_gk_ctx *c, hx_kdtype dt, float *loss,
                                 const void *logits, const void *labels, hx_kdtype label_dt,
                                 int64_t N, int64_t C, uint64_t *bad)
{
    if (!rows_ok(N, C) || !labels_ok(label_dt) || C < 1) return HX_GK_BAD_ARG;
    if (c->scratch_bytes < hx_gk_cross_entropy_scratch_bytes(N)) return HX_GK_SCRATCH;
    double *row_loss = (double *)c->scratch;
    int i64 = label_dt == HX_K_I64;
    if (N > 0) {
        HX_GK_FLOAT_TYPES(dt, T, ROW_LAUNCH(cross_entropy_rows_kernel, T, N, C, c)(
                                     row_loss, (const T *)logits, labels, i64, C, bad));
        GK_TRY(hx_gk_launched());
        GK_TRY(hx_gk_fill_bad_id(c, bad, labels, i64));
    }
    mean_f64_kernel<<<1, 256, 0, c->stream>>>(loss, row_loss, N, N);
    return hx_gk_launched();
}

/* dlogits = dloss[0] / N * (softmax(logits) - onehot(label)) */
template <typename T>
__global__ void cross_entropy_backward_kernel(T *dx, const float *dloss, const T *logits,
                                              const void *labels, int i64, int64_t N, int64_t C,
                                              uint64_t *bad)
{
    __shared__ float sh[32];
    int64_t i = blockIdx.x;
    const T *xr = logits + i * C;
    T *dr = dx + i * C;
    int64_t label = id_at(labels, i64, i);
    if (label < 0 || label >= C) {
        if (threadIdx.x == 0) note_bad(bad, i);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) st(dr + j, 0.0f);
        return;
    }
    float scale = dloss[0] / (float)N;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) m = fmaxf(m, ld(xr + j));
    m = block_max(m, sh);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += expf(ld(xr + j) - m);
    float inv = 1.0f / block_sum(s, sh);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
        st(dr + j, scale * (expf(ld(xr + j) - m) * inv - (j == label ? 1.0f : 0.0f)));
}

hx_gk_status hx_gk_cross_entropy_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dlogits,
                                          const float *dloss, const void *logits,
                                          const void *labels, hx_kdtype label_dt, int64_t N,
                                          int64_t C, uint64_t *bad)
{
    if (!rows_ok(N, C) || !labels_ok(label_dt)) return HX_GK_BAD_ARG;
    if (!N || !C) return HX_GK_OK;
    int i64 = label_dt == HX_K_I64;
    HX_GK_FLOAT_TYPES(dt, T, ROW_LAUNCH(cross_entropy_backward_kernel, T, N, C, c)(
                                 (T *)dlogits, dloss, (const T *)logits, labels, i64, N, C, bad));
    GK_TRY(hx_gk_launched());
    return hx_gk_fill_bad_id(c, bad, labels, i64);
}

/* BCE: each of a size-determined number of blocks sums its grid-stride
 * share in f64, then one block adds the block sums. */
#define BCE_MAX_BLOCKS 1024

static unsigned bce_blocks(int64_t n)
{
    int64_t b = (n + HX_GK_THREADS * 8 - 1) / (HX_GK_THREADS * 8);
    return (unsigned)(b < 1 ? 1 : b > BCE_MAX_BLOCKS ? BCE_MAX_BLOCKS : b);
}

size_t hx_gk_bce_logits_scratch_bytes(int64_t n) { return bce_blocks(n) * sizeof(double); }

template <typename T>
__global__ void bce_partial_kernel(double *part, const T *x, const T *t, int64_t n)
{
    __shared__ double sh[32];
    double s = 0.0;
    GRID_STRIDE(i, n) {
        float xv = ld(x + i), tv = ld(t + i);
        s += (double)(fmaxf(xv, 0.0f) - xv * tv + log1pf(expf(-fabsf(xv))));
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

hx_gk_status hx_gk_bce_logits(const hx_gk_ctx *c, hx_kdtype dt, float *loss, const void *x,
                              const void *t, int64_t n)
{
    if (n < 0) return HX_GK_BAD_ARG;
    if (c->scratch_bytes < hx_gk_bce_logits_scratch_bytes(n)) return HX_GK_SCRATCH;
    double *part = (double *)c->scratch;
    unsigned blocks = bce_blocks(n);
    HX_GK_FLOAT_TYPES(dt, T, bce_partial_kernel<T><<<blocks, HX_GK_THREADS, 0, c->stream>>>(
                                 part, (const T *)x, (const T *)t, n));
    GK_TRY(hx_gk_launched());
    mean_f64_kernel<<<1, 256, 0, c->stream>>>(loss, part, blocks, n);
    return hx_gk_launched();
}

/* dx = dloss[0] / n * (sigmoid(x) - t) */
template <typename T>
__global__ void bce_backward_kernel(T *dx, const float *dloss, const T *x, const T *t, int64_t n)
{
    float scale = dloss[0] / (float)n;
    GRID_STRIDE(i, n) st(dx + i, scale * (1.0f / (1.0f + expf(-ld(x + i))) - ld(t + i)));
}

hx_gk_status hx_gk_bce_logits_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                       const float *dloss, const void *x, const void *t,
                                       int64_t n)
{
    if (n < 0) return HX_GK_BAD_ARG;
    if (!n) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T,
        bce_backward_kernel<T><<<hx_gk_blocks(n, HX_GK_THREADS), HX_GK_THREADS, 0, c->stream>>>(
            (T *)dx, dloss, (const T *)x, (const T *)t, n));
    return hx_gk_launched();
}
