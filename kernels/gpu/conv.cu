/* Convolutional kernels: im2col / col2im, the grouped conv GEMMs (cuBLAS),
 * the weight gradient, pooling, batch norm. Compiled here; not yet run on
 * a GPU. */
#include "kernels/gpu/gk_common.cuh"

#define LAUNCH_N(kernel, T, n, c) \
    kernel<T><<<hx_gk_blocks((n), HX_GK_THREADS), HX_GK_THREADS, 0, (c)->stream>>>

/* ---- im2col, col2im ----------------------------------------------------------------- */

// cols (N, C*kh*kw, OH*OW), one element per thread
template <typename T>
__global__ void im2col_kernel(T *cols, const T *x, hx_k_window w, int64_t n)
{
    int64_t P = w.OH * w.OW, kk = w.kh * w.kw;
    GRID_STRIDE(e, n) {
        int64_t p = e % P, r = e / P, tap = r % kk, nc = r / kk;
        int64_t ih = p / w.OW * w.sh - w.ph + tap / w.kw * w.dh;
        int64_t iw = p % w.OW * w.sw - w.pw + tap % w.kw * w.dw;
        float v = ih >= 0 && ih < w.H && iw >= 0 && iw < w.W ? ld(x + (nc * w.H + ih) * w.W + iw) : 0.0f;
        st(cols + e, v);
    }
}

// dx (N, C, H, W): each pixel sums the column entries that read it, taps in order
template <typename T>
__global__ void col2im_kernel(T *dx, const T *cols, hx_k_window w, int64_t n)
{
    int64_t P = w.OH * w.OW, kk = w.kh * w.kw;
    GRID_STRIDE(e, n) {
        int64_t iw = e % w.W, ih = e / w.W % w.H, nc = e / (w.W * w.H);
        float acc = 0.0f;
        for (int64_t i = 0; i < w.kh; i++) {
            int64_t th = ih + w.ph - i * w.dh;
            if (th < 0 || th % w.sh || th / w.sh >= w.OH) continue;
            for (int64_t j = 0; j < w.kw; j++) {
                int64_t tw = iw + w.pw - j * w.dw;
                if (tw < 0 || tw % w.sw || tw / w.sw >= w.OW) continue;
                acc += ld(cols + (nc * kk + i * w.kw + j) * P + th / w.sh * w.OW + tw / w.sw);
            }
        }
        st(dx + e, acc);
    }
}

hx_gk_status hx_gk_im2col(const hx_gk_ctx *c, hx_kdtype dt, void *cols, const void *x,
                          const hx_k_window *w)
{
    int64_t n = w->N * w->C * w->kh * w->kw * w->OH * w->OW;
    if (!n) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, LAUNCH_N(im2col_kernel, T, n, c)((T *)cols, (const T *)x, *w, n));
    return hx_gk_launched();
}

hx_gk_status hx_gk_col2im(const hx_gk_ctx *c, hx_kdtype dt, void *dx, const void *dcols,
                          const hx_k_window *w)
{
    int64_t n = w->N * w->C * w->H * w->W;
    if (!n) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, LAUNCH_N(col2im_kernel, T, n, c)((T *)dx, (const T *)dcols, *w, n));
    return hx_gk_launched();
}

/* ---- the conv GEMMs ---------------------------------------------------------------------- */

static size_t dsize(hx_kdtype dt) { return dt == HX_K_F32 ? 4 : 2; }

hx_gk_status hx_gk_conv_gemm(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *w,
                             const void *cols, const hx_k_conv_gemm *g)
{
    size_t es = dsize(dt);
    for (int64_t k = 0; k < g->G; k++) // y[n, k] = W_k cols[n, k], every n
        GK_TRY(hx_gk_gemm(c, dt, 0, 0, g->N, g->Cog, g->P, g->Kg,
                          (const char *)w + es * k * g->Cog * g->Kg, g->Kg, 0,
                          (const char *)cols + es * k * g->Kg * g->P, g->P, g->G * g->Kg * g->P,
                          (char *)y + es * k * g->Cog * g->P, g->P, g->G * g->Cog * g->P));
    return HX_GK_OK;
}

hx_gk_status hx_gk_conv_gemm_backward_cols(const hx_gk_ctx *c, hx_kdtype dt, void *dcols,
                                           const void *dy, const void *w, const hx_k_conv_gemm *g)
{
    size_t es = dsize(dt);
    for (int64_t k = 0; k < g->G; k++) // dcols[n, k] = W_k^T dy[n, k], every n
        GK_TRY(hx_gk_gemm(c, dt, 1, 0, g->N, g->Kg, g->P, g->Cog,
                          (const char *)w + es * k * g->Cog * g->Kg, g->Kg, 0,
                          (const char *)dy + es * k * g->Cog * g->P, g->P, g->G * g->Cog * g->P,
                          (char *)dcols + es * k * g->Kg * g->P, g->P, g->G * g->Kg * g->P));
    return HX_GK_OK;
}

// dw[k, o, r] = sum over n, p of dy[n, k, o, p] cols[n, k, r, p]: one block per element
template <typename T>
__global__ void conv_wgrad_kernel(T *dw, const T *dy, const T *cols, hx_k_conv_gemm g)
{
    __shared__ float sh[32];
    int64_t e = blockIdx.x, r = e % g.Kg, o = e / g.Kg % g.Cog, k = e / (g.Kg * g.Cog);
    float acc = 0.0f;
    for (int64_t q = threadIdx.x; q < g.N * g.P; q += blockDim.x) {
        int64_t n = q / g.P, p = q % g.P;
        acc += ld(dy + ((n * g.G + k) * g.Cog + o) * g.P + p) *
               ld(cols + ((n * g.G + k) * g.Kg + r) * g.P + p);
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) st(dw + e, acc);
}

hx_gk_status hx_gk_conv_gemm_backward_w(const hx_gk_ctx *c, hx_kdtype dt, void *dw,
                                        const void *dy, const void *cols, const hx_k_conv_gemm *g)
{
    int64_t n = g->G * g->Cog * g->Kg;
    if (!n) return HX_GK_OK;
    if (n > HX_GK_MAX_GRID) return HX_GK_BAD_ARG;
    HX_GK_FLOAT_TYPES(dt, T, conv_wgrad_kernel<T><<<(unsigned)n, HX_GK_THREADS, 0, c->stream>>>(
                                 (T *)dw, (const T *)dy, (const T *)cols, *g));
    return hx_gk_launched();
}

/* ---- pooling -------------------------------------------------------------------------------- */

// the first maximum of window (oh, ow) of plane x, as an index into it (-1: none)
template <typename T>
__device__ int64_t window_argmax(const T *x, const hx_k_window &w, int64_t oh, int64_t ow)
{
    int64_t best = -1;
    float m = -INFINITY;
    for (int64_t i = 0; i < w.kh; i++) {
        int64_t ih = oh * w.sh - w.ph + i;
        if (ih < 0 || ih >= w.H) continue;
        for (int64_t j = 0; j < w.kw; j++) {
            int64_t iw = ow * w.sw - w.pw + j;
            if (iw < 0 || iw >= w.W) continue;
            float v = ld(x + ih * w.W + iw);
            if (best < 0 || v > m || (isnan(v) && !isnan(m))) best = ih * w.W + iw, m = v;
        }
    }
    return best;
}

template <typename T>
__global__ void pool_kernel(T *y, const T *x, hx_k_window w, int max, int64_t n)
{
    GRID_STRIDE(e, n) {
        int64_t ow = e % w.OW, oh = e / w.OW % w.OH, nc = e / (w.OW * w.OH);
        const T *plane = x + nc * w.H * w.W;
        if (max) {
            int64_t k = window_argmax(plane, w, oh, ow);
            st(y + e, k < 0 ? -INFINITY : ld(plane + k));
            continue;
        }
        float acc = 0.0f;
        for (int64_t i = 0; i < w.kh; i++) {
            int64_t ih = oh * w.sh - w.ph + i;
            if (ih < 0 || ih >= w.H) continue;
            for (int64_t j = 0; j < w.kw; j++) {
                int64_t iw = ow * w.sw - w.pw + j;
                if (iw >= 0 && iw < w.W) acc += ld(plane + ih * w.W + iw);
            }
        }
        st(y + e, acc * (1.0f / (float)(w.kh * w.kw)));
    }
}

// dx pixel (ih, iw) = the dy of every window that holds it (max: whose first maximum it is)
template <typename T>
__global__ void pool_backward_kernel(T *dx, const T *dy, const T *x, hx_k_window w, int max,
                                     int64_t n)
{
    GRID_STRIDE(e, n) {
        int64_t iw = e % w.W, ih = e / w.W % w.H, nc = e / (w.W * w.H);
        int64_t oh0 = ih + w.ph - w.kh + 1, ow0 = iw + w.pw - w.kw + 1;
        oh0 = oh0 <= 0 ? 0 : (oh0 + w.sh - 1) / w.sh;
        ow0 = ow0 <= 0 ? 0 : (ow0 + w.sw - 1) / w.sw;
        float acc = 0.0f;
        for (int64_t oh = oh0; oh < w.OH && oh * w.sh - w.ph <= ih; oh++)
            for (int64_t ow = ow0; ow < w.OW && ow * w.sw - w.pw <= iw; ow++) {
                float g = ld(dy + (nc * w.OH + oh) * w.OW + ow);
                if (!max) acc += g * (1.0f / (float)(w.kh * w.kw));
                else if (window_argmax(x + nc * w.H * w.W, w, oh, ow) == ih * w.W + iw) acc += g;
            }
        st(dx + e, acc);
    }
}

hx_gk_status hx_gk_pool(const hx_gk_ctx *c, hx_kdtype dt, int max, void *y, const void *x,
                        const hx_k_window *w)
{
    int64_t n = w->N * w->C * w->OH * w->OW;
    if (!n) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, LAUNCH_N(pool_kernel, T, n, c)((T *)y, (const T *)x, *w, max, n));
    return hx_gk_launched();
}

hx_gk_status hx_gk_pool_backward(const hx_gk_ctx *c, hx_kdtype dt, int max, void *dx,
                                 const void *dy, const void *x, const hx_k_window *w)
{
    int64_t n = w->N * w->C * w->H * w->W;
    if (!n) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, LAUNCH_N(pool_backward_kernel, T, n, c)(
                                 (T *)dx, (const T *)dy, (const T *)x, *w, max, n));
    return hx_gk_launched();
}

/* ---- batch norm: one block per channel ------------------------------------------------------ */

#define BN_AT(b, q, ch) (((q) / (b).S * (b).C + (ch)) * (b).S + (q) % (b).S)

// the channel's mean and 1/sqrt(var + eps): the batch's (train) or the running ones
template <typename T>
__device__ void bn_norm(const T *x, const float *rmean, const float *rvar, const hx_k_bn &b,
                        int64_t ch, double *sh, float *mean, float *rstd, double *var_out)
{
    double m = rmean[ch], v = rvar[ch];
    if (b.train) {
        int64_t M = b.N * b.S;
        double s = 0;
        for (int64_t q = threadIdx.x; q < M; q += blockDim.x) s += ld(x + BN_AT(b, q, ch));
        m = block_sum(s, sh) / (double)M;
        double s2 = 0;
        for (int64_t q = threadIdx.x; q < M; q += blockDim.x) {
            double d = ld(x + BN_AT(b, q, ch)) - m;
            s2 += d * d;
        }
        v = block_sum(s2, sh) / (double)M;
    }
    *mean = (float)m;
    *rstd = (float)(1.0 / sqrt(v + b.eps));
    *var_out = v;
}

template <typename T>
__global__ void bn_forward_kernel(T *y, const T *x, const T *gamma, const T *beta, float *rmean,
                                  float *rvar, hx_k_bn b)
{
    __shared__ double sh[32];
    int64_t ch = blockIdx.x, M = b.N * b.S;
    float mean, rstd;
    double var;
    bn_norm(x, rmean, rvar, b, ch, sh, &mean, &rstd, &var);
    float scale = rstd * ld(gamma + ch), shift = ld(beta + ch);
    for (int64_t q = threadIdx.x; q < M; q += blockDim.x)
        st(y + BN_AT(b, q, ch), (ld(x + BN_AT(b, q, ch)) - mean) * scale + shift);
    if (b.train && threadIdx.x == 0) {
        double unbiased = M > 1 ? var * (double)M / (double)(M - 1) : var;
        rmean[ch] = (float)((1.0 - b.momentum) * rmean[ch] + b.momentum * (double)mean);
        rvar[ch] = (float)((1.0 - b.momentum) * rvar[ch] + b.momentum * unbiased);
    }
}

// gamma != NULL: dx; else dgamma (out has one element per channel)
template <typename T>
__global__ void bn_backward_kernel(T *out, const T *dy, const T *x, const T *gamma,
                                   const float *rmean, const float *rvar, hx_k_bn b)
{
    __shared__ double sh[32];
    int64_t ch = blockIdx.x, M = b.N * b.S;
    float mean, rstd;
    double var, sdy = 0, sdyx = 0;
    bn_norm(x, rmean, rvar, b, ch, sh, &mean, &rstd, &var);
    if (b.train || !gamma) {
        for (int64_t q = threadIdx.x; q < M; q += blockDim.x) {
            int64_t k = BN_AT(b, q, ch);
            sdy += ld(dy + k);
            sdyx += (double)ld(dy + k) * ((ld(x + k) - mean) * rstd);
        }
        sdy = block_sum(sdy, sh);
        sdyx = block_sum(sdyx, sh);
    }
    if (!gamma) {
        if (threadIdx.x == 0) st(out + ch, (float)sdyx);
        return;
    }
    float a = (float)(sdy / (double)M), bx = (float)(sdyx / (double)M), scale = ld(gamma + ch) * rstd;
    for (int64_t q = threadIdx.x; q < M; q += blockDim.x) {
        int64_t k = BN_AT(b, q, ch);
        float g = ld(dy + k);
        st(out + k, b.train ? scale * (g - a - (ld(x + k) - mean) * rstd * bx) : scale * g);
    }
}

hx_gk_status hx_gk_batchnorm(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                             const void *gamma, const void *beta, float *running_mean,
                             float *running_var, const hx_k_bn *b)
{
    if (b->C > HX_GK_MAX_GRID) return HX_GK_BAD_ARG;
    if (b->C == 0 || b->N == 0 || b->S == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, bn_forward_kernel<T><<<(unsigned)b->C, HX_GK_THREADS, 0, c->stream>>>(
                                 (T *)y, (const T *)x, (const T *)gamma, (const T *)beta,
                                 running_mean, running_var, *b));
    return hx_gk_launched();
}

hx_gk_status hx_gk_batchnorm_backward_x(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                        const void *dy, const void *x, const void *gamma,
                                        const float *running_mean, const float *running_var,
                                        const hx_k_bn *b)
{
    if (b->C > HX_GK_MAX_GRID || !gamma) return HX_GK_BAD_ARG;
    if (b->C == 0 || b->N == 0 || b->S == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, bn_backward_kernel<T><<<(unsigned)b->C, HX_GK_THREADS, 0, c->stream>>>(
                                 (T *)dx, (const T *)dy, (const T *)x, (const T *)gamma,
                                 running_mean, running_var, *b));
    return hx_gk_launched();
}

hx_gk_status hx_gk_batchnorm_backward_gamma(const hx_gk_ctx *c, hx_kdtype dt, void *dgamma,
                                            const void *dy, const void *x,
                                            const float *running_mean, const float *running_var,
                                            const hx_k_bn *b)
{
    if (b->C > HX_GK_MAX_GRID) return HX_GK_BAD_ARG;
    if (b->C == 0 || b->N == 0 || b->S == 0) return HX_GK_OK;
    HX_GK_FLOAT_TYPES(dt, T, bn_backward_kernel<T><<<(unsigned)b->C, HX_GK_THREADS, 0, c->stream>>>(
                                 (T *)dgamma, (const T *)dy, (const T *)x, (const T *)NULL,
                                 running_mean, running_var, *b));
    return hx_gk_launched();
}
