/* Convolution as GEMM over im2col columns (Caffe's method): im2col lays
 * each tap of the window out as a row, so that a convolution is one
 * OpenBLAS GEMM per image and group; col2im is its adjoint. Every output
 * element is written by one thread in an order fixed by the shape, so the
 * bits do not depend on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "hx_kinternal.h"

/* The output columns [*lo, *hi) of a row whose tap reads input column
 * ow * s + off, off = j * d - p, inside [0, W): the rest read padding. */
static void valid_cols(int64_t OW, int64_t W, int64_t s, int64_t off, int64_t *lo, int64_t *hi)
{
    *lo = off >= 0 ? 0 : (-off + s - 1) / s;
    *hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / s + 1;
    if (*hi > OW) *hi = OW;
    if (*lo > *hi) *lo = *hi;
}

// cols (kh*kw, OH*OW) of one channel plane x (H, W)
static void im2col_channel(float *cols, const float *x, const hx_k_window *w)
{
    int64_t P = w->OH * w->OW;
    for (int64_t i = 0; i < w->kh; i++)
        for (int64_t j = 0; j < w->kw; j++) {
            float *row = cols + (i * w->kw + j) * P;
            int64_t off = j * w->dw - w->pw, lo, hi;
            valid_cols(w->OW, w->W, w->sw, off, &lo, &hi);
            for (int64_t oh = 0; oh < w->OH; oh++) {
                int64_t ih = oh * w->sh - w->ph + i * w->dh;
                float *out = row + oh * w->OW;
                if (ih < 0 || ih >= w->H) {
                    memset(out, 0, sizeof(float) * (size_t)w->OW);
                    continue;
                }
                const float *in = x + ih * w->W;
                for (int64_t ow = 0; ow < lo; ow++) out[ow] = 0.0f;
                if (w->sw == 1) memcpy(out + lo, in + lo + off, sizeof(float) * (size_t)(hi - lo));
                else
                    for (int64_t ow = lo; ow < hi; ow++) out[ow] = in[ow * w->sw + off];
                for (int64_t ow = hi; ow < w->OW; ow++) out[ow] = 0.0f;
            }
        }
}

// dx (H, W) of one channel plane = its columns (kh*kw, OH*OW) added back
static void col2im_channel(float *dx, const float *cols, const hx_k_window *w)
{
    int64_t P = w->OH * w->OW;
    memset(dx, 0, sizeof(float) * (size_t)(w->H * w->W));
    for (int64_t i = 0; i < w->kh; i++)
        for (int64_t j = 0; j < w->kw; j++) {
            const float *row = cols + (i * w->kw + j) * P;
            int64_t off = j * w->dw - w->pw, lo, hi;
            valid_cols(w->OW, w->W, w->sw, off, &lo, &hi);
            for (int64_t oh = 0; oh < w->OH; oh++) {
                int64_t ih = oh * w->sh - w->ph + i * w->dh;
                if (ih < 0 || ih >= w->H) continue;
                float *out = dx + ih * w->W;
                const float *in = row + oh * w->OW;
                for (int64_t ow = lo; ow < hi; ow++) out[ow * w->sw + off] += in[ow];
            }
        }
}

void hx_k_im2col_f32(float *cols, const float *x, const hx_k_window *w, int nthreads)
{
    int64_t planes = w->N * w->C, rows = w->kh * w->kw * w->OH * w->OW, plane = w->H * w->W;
    int par = hx_k_go_parallel(planes * rows, nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (par)
    for (int64_t p = 0; p < planes; p++) im2col_channel(cols + p * rows, x + p * plane, w);
}

void hx_k_col2im_f32(float *dx, const float *dcols, const hx_k_window *w, int nthreads)
{
    int64_t planes = w->N * w->C, rows = w->kh * w->kw * w->OH * w->OW, plane = w->H * w->W;
    int par = hx_k_go_parallel(planes * rows, nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (par)
    for (int64_t p = 0; p < planes; p++) col2im_channel(dx + p * plane, dcols + p * rows, w);
}

void hx_k_conv_gemm_forward_f32(float *y, const float *w, const float *cols,
                                const hx_k_conv_gemm *c, int nthreads)
{
    int64_t Kg = c->Kg, P = c->P, Cog = c->Cog;
    for (int64_t g = 0; g < c->G; g++) // y[n, g] = W_g cols[n, g], every n
        hx_k_gemm_f32(0, 0, c->N, Cog, P, Kg, 1.0f, w + g * Cog * Kg, Kg, 0, cols + g * Kg * P,
                      P, c->G * Kg * P, 0.0f, y + g * Cog * P, P, c->G * Cog * P, nthreads);
}

void hx_k_conv_gemm_backward_cols_f32(float *dcols, const float *dy, const float *w,
                                      const hx_k_conv_gemm *c, int nthreads)
{
    int64_t Kg = c->Kg, P = c->P, Cog = c->Cog;
    for (int64_t g = 0; g < c->G; g++) // dcols[n, g] = W_g^T dy[n, g], every n
        hx_k_gemm_f32(1, 0, c->N, Kg, P, Cog, 1.0f, w + g * Cog * Kg, Kg, 0, dy + g * Cog * P, P,
                      c->G * Cog * P, 0.0f, dcols + g * Kg * P, P, c->G * Kg * P, nthreads);
}

/* The batch is summed in WGRAD_CHUNKS pieces (fewer for a smaller batch),
 * each a partial dW over its images in order, then the partials in order:
 * the pieces depend on N only, and run in parallel. */
#define WGRAD_CHUNKS 8

// dw_g (Cog, Kg) = sum over images [n0, n1) of dy[n, g] cols[n, g]^T
static void wgrad_chunk(float *dw_g, const float *dy, const float *cols, const hx_k_conv_gemm *c,
                        int64_t g, int64_t n0, int64_t n1)
{
    int64_t Kg = c->Kg, P = c->P, Cog = c->Cog;
    for (int64_t n = n0; n < n1; n++)
        hx_k_gemm_f32(0, 1, 1, Cog, Kg, P, 1.0f, dy + (n * c->G + g) * Cog * P, P, 0,
                      cols + (n * c->G + g) * Kg * P, P, 0, n > n0 ? 1.0f : 0.0f, dw_g, Kg, 0, 1);
}

int hx_k_conv_gemm_backward_w_f32(float *dw, const float *dy, const float *cols,
                                  const hx_k_conv_gemm *c, int nthreads)
{
    int64_t chunks = c->N < WGRAD_CHUNKS ? c->N : WGRAD_CHUNKS, wsize = c->G * c->Cog * c->Kg;
    float *part = chunks > 1 ? malloc(sizeof(float) * (size_t)(chunks * wsize)) : dw;
    if (!part) return -1;
    int64_t jobs = chunks * c->G;
    int par = nthreads > 1 && jobs > 1 &&
              c->N * c->G * c->Cog * c->Kg * c->P >= (int64_t)HX_K_PARALLEL_MIN;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (par)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t s = job / c->G, g = job % c->G;
        wgrad_chunk(part + s * wsize + g * c->Cog * c->Kg, dy, cols, c, g, c->N * s / chunks,
                    c->N * (s + 1) / chunks);
    }
    if (part == dw) return 0;
    for (int64_t i = 0; i < wsize; i++) {
        float acc = part[i];
        for (int64_t s = 1; s < chunks; s++) acc += part[s * wsize + i];
        dw[i] = acc;
    }
    free(part);
    return 0;
}
