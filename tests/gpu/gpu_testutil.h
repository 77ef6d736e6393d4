/* Helpers for the tests in tests/gpu: the skip where no CUDA device exists,
 * a kernel context of the test's own, and f32 <-> storage dtype transfers
 * through the CPU cast kernel (so both sides see the same rounded inputs). */
#ifndef HX_GPU_TESTUTIL_H
#define HX_GPU_TESTUTIL_H

#include "kernels/gpu/hx_gpu_kernels.h"
#include "backend/backend_cuda.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* test_options.setup's answer: TEST_SKIPPED, with the reason, when this
 * machine has no usable CUDA device. */
static inline int gt_require_device(void)
{
    const char *why = NULL;
    if (hx__cuda_device_count(&why) == 0) {
        printf("no CUDA device: skipped (%s)\n", why);
        return TEST_SKIPPED;
    }
    return 0;
}

#define GT_CUDA(call)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorString(e_));                                             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static inline hx_gk_ctx gt_ctx(size_t scratch_bytes)
{
    hx_gk_ctx c = {0};
    GT_CUDA(cudaStreamCreate(&c.stream));
    if (cublasCreate(&c.blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(c.blas, c.stream)) {
        fprintf(stderr, "cublasCreate failed\n");
        exit(1);
    }
    GT_CUDA(cudaMalloc(&c.scratch, scratch_bytes));
    c.scratch_bytes = scratch_bytes;
    return c;
}

static inline void gt_ctx_free(hx_gk_ctx *c)
{
    cudaStreamSynchronize(c->stream);
    cublasDestroy(c->blas);
    cudaFree(c->scratch);
    cudaStreamDestroy(c->stream);
}

/* Device buffer of n elements of dt, filled with 0xFF bytes (NaN in every
 * float dtype), so an element a kernel does not write shows. */
static inline void *gt_poisoned(hx_kdtype dt, int64_t n)
{
    void *p;
    size_t bytes = (size_t)(n ? n : 1) * hx_k_dtype_size(dt);
    GT_CUDA(cudaMalloc(&p, bytes));
    GT_CUDA(cudaMemset(p, 0xFF, bytes));
    return p;
}

/* Rounds x (n, f32) to dt in place (what the device will hold), and
 * returns a device copy in dt. */
static inline void *gt_upload(hx_kdtype dt, float *x, int64_t n)
{
    size_t es = hx_k_dtype_size(dt);
    void *h = malloc((size_t)(n ? n : 1) * es), *d;
    hx_k_cast(h, dt, x, HX_K_F32, n, 1);
    hx_k_cast(x, HX_K_F32, h, dt, n, 1);
    GT_CUDA(cudaMalloc(&d, (size_t)(n ? n : 1) * es));
    GT_CUDA(cudaMemcpy(d, h, (size_t)n * es, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static inline void *gt_upload_raw(const void *x, size_t bytes)
{
    void *d;
    GT_CUDA(cudaMalloc(&d, bytes ? bytes : 1));
    GT_CUDA(cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Waits for the stream, then returns the n values of dt at d as f32 (malloc'd). */
static inline float *gt_download(const hx_gk_ctx *c, hx_kdtype dt, const void *d, int64_t n)
{
    size_t es = hx_k_dtype_size(dt);
    void *h = malloc((size_t)(n ? n : 1) * es);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    GT_CUDA(cudaStreamSynchronize(c->stream));
    GT_CUDA(cudaMemcpy(h, d, (size_t)n * es, cudaMemcpyDeviceToHost));
    hx_k_cast(f, HX_K_F32, h, dt, n, 1);
    free(h);
    return f;
}

static inline double gt_rtol(hx_kdtype dt) { return dt == HX_K_F32 ? 1e-5 : 1e-2; }
static inline double gt_atol(hx_kdtype dt) { return dt == HX_K_F32 ? 1e-6 : 1e-2; }

/* got (f32 from the device) against want (f32 CPU reference) at dt's tolerance. */
static inline int gt_close(const char *what, hx_kdtype dt, const float *got, const float *want,
                           int64_t n)
{
    double *w = malloc((size_t)(n ? n : 1) * sizeof *w);
    for (int64_t i = 0; i < n; i++) w[i] = want[i];
    char name[160];
    snprintf(name, sizeof name, "%s (%s)", what, dt == HX_K_F32 ? "f32" : dt == HX_K_F16 ? "f16" : "bf16");
    int ok = test_close_f32(name, got, w, n, gt_rtol(dt), gt_atol(dt));
    free(w);
    return ok; /* test_close_f32 counted it */
}

static inline float *gt_random(test_rng *r, int64_t n, double lo, double hi)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    test_fill_uniform(r, x, n, lo, hi);
    return x;
}

#endif
