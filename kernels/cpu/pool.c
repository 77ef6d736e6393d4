/* 2-D max and average pooling over NCHW planes, one plane per thread. */
#include <math.h>
#include <string.h>

#include "hx_kinternal.h"

// the first (row-major) maximum of window (oh, ow) of plane x (H, W), as an
// index into x; -1 if the window holds no pixel (never: ph <= kh / 2)
static int64_t window_argmax(const float *x, const hx_k_window *w, int64_t oh, int64_t ow)
{
    int64_t best = -1;
    float m = -INFINITY;
    for (int64_t i = 0; i < w->kh; i++) {
        int64_t ih = oh * w->sh - w->ph + i;
        if (ih < 0 || ih >= w->H) continue;
        for (int64_t j = 0; j < w->kw; j++) {
            int64_t iw = ow * w->sw - w->pw + j;
            if (iw < 0 || iw >= w->W) continue;
            float v = x[ih * w->W + iw];
            if (best < 0 || v > m || (isnan(v) && !isnan(m))) best = ih * w->W + iw, m = v;
        }
    }
    return best;
}

// y (OH, OW) = max of each window of plane x (H, W)
static void max_pool_plane(float *y, const float *x, const hx_k_window *w)
{
    for (int64_t oh = 0; oh < w->OH; oh++)
        for (int64_t ow = 0; ow < w->OW; ow++) {
            int64_t k = window_argmax(x, w, oh, ow);
            y[oh * w->OW + ow] = k < 0 ? -INFINITY : x[k];
        }
}

// dx (H, W) = each dy (OH, OW) added to its window's first maximum
static void max_pool_backward_plane(float *dx, const float *dy, const float *x, const hx_k_window *w)
{
    memset(dx, 0, sizeof(float) * (size_t)(w->H * w->W));
    for (int64_t oh = 0; oh < w->OH; oh++)
        for (int64_t ow = 0; ow < w->OW; ow++) {
            int64_t k = window_argmax(x, w, oh, ow);
            if (k >= 0) dx[k] += dy[oh * w->OW + ow];
        }
}

// y (OH, OW) = sum of each window of x (H, W) / (kh*kw), padding counted
static void avg_pool_plane(float *y, const float *x, const hx_k_window *w)
{
    float inv = 1.0f / (float)(w->kh * w->kw);
    for (int64_t oh = 0; oh < w->OH; oh++)
        for (int64_t ow = 0; ow < w->OW; ow++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < w->kh; i++) {
                int64_t ih = oh * w->sh - w->ph + i;
                if (ih < 0 || ih >= w->H) continue;
                for (int64_t j = 0; j < w->kw; j++) {
                    int64_t iw = ow * w->sw - w->pw + j;
                    if (iw >= 0 && iw < w->W) acc += x[ih * w->W + iw];
                }
            }
            y[oh * w->OW + ow] = acc * inv;
        }
}

// dx (H, W) = dy / (kh*kw) spread over each window
static void avg_pool_backward_plane(float *dx, const float *dy, const hx_k_window *w)
{
    float inv = 1.0f / (float)(w->kh * w->kw);
    memset(dx, 0, sizeof(float) * (size_t)(w->H * w->W));
    for (int64_t oh = 0; oh < w->OH; oh++)
        for (int64_t ow = 0; ow < w->OW; ow++) {
            float g = dy[oh * w->OW + ow] * inv;
            for (int64_t i = 0; i < w->kh; i++) {
                int64_t ih = oh * w->sh - w->ph + i;
                if (ih < 0 || ih >= w->H) continue;
                for (int64_t j = 0; j < w->kw; j++) {
                    int64_t iw = ow * w->sw - w->pw + j;
                    if (iw >= 0 && iw < w->W) dx[ih * w->W + iw] += g;
                }
            }
        }
}

#define PLANES(w) ((w)->N * (w)->C)
#define IN_PLANE(w) ((w)->H * (w)->W)
#define OUT_PLANE(w) ((w)->OH * (w)->OW)
#define PAR(w, nt) hx_k_go_parallel(PLANES(w) * IN_PLANE(w), nt)

void hx_k_max_pool_forward_f32(float *y, const float *x, const hx_k_window *w, int nthreads)
{
#pragma omp parallel for num_threads(nthreads) schedule(static) if (PAR(w, nthreads))
    for (int64_t p = 0; p < PLANES(w); p++) max_pool_plane(y + p * OUT_PLANE(w), x + p * IN_PLANE(w), w);
}

void hx_k_max_pool_backward_f32(float *dx, const float *dy, const float *x,
                                const hx_k_window *w, int nthreads)
{
#pragma omp parallel for num_threads(nthreads) schedule(static) if (PAR(w, nthreads))
    for (int64_t p = 0; p < PLANES(w); p++)
        max_pool_backward_plane(dx + p * IN_PLANE(w), dy + p * OUT_PLANE(w), x + p * IN_PLANE(w), w);
}

void hx_k_avg_pool_forward_f32(float *y, const float *x, const hx_k_window *w, int nthreads)
{
#pragma omp parallel for num_threads(nthreads) schedule(static) if (PAR(w, nthreads))
    for (int64_t p = 0; p < PLANES(w); p++) avg_pool_plane(y + p * OUT_PLANE(w), x + p * IN_PLANE(w), w);
}

void hx_k_avg_pool_backward_f32(float *dx, const float *dy, const hx_k_window *w, int nthreads)
{
#pragma omp parallel for num_threads(nthreads) schedule(static) if (PAR(w, nthreads))
    for (int64_t p = 0; p < PLANES(w); p++)
        avg_pool_backward_plane(dx + p * IN_PLANE(w), dy + p * OUT_PLANE(w), w);
}
