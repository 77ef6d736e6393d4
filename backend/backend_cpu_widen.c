/* f16/bf16 nodes on f32 CPU kernels: storage half, arithmetic f32. The
 * float ops whose kernels in kernels/cpu compute on f32 buffers only (the
 * GEMMs, elementwise, softmax and layernorm kernels take 16-bit storage
 * themselves: hx__cpu_gemm_half, the *_half kernels); for a node stored
 * in a 16-bit float this widens its float inputs exactly, runs the kernel,
 * and rounds its output once. Conversions are elementwise, so results stay
 * the same at any thread count. Scratch is taken per launch (launches run
 * concurrently on several lanes, and a freed buffer is the malloc's to
 * reuse). */
#include "backend/backend.h"
#include "backend/backend_cpu_widen.h"
#include "kernels/cpu/hx_kernels.h"

#include <stdlib.h>

#define ALIGN 64

static bool is_half(hx_dtype dt) { return dt == HX_DTYPE_F16 || dt == HX_DTYPE_BF16; }

static size_t f32_bytes(const hx_tensor *t)
{
    return ((size_t)hx_tensor_numel(t) * sizeof(float) + ALIGN - 1) / ALIGN * ALIGN;
}

hx_status hx__cpu_widen(hx_launch_fn f32_kernel, const hx_exec *ex, const hx_tensor *y,
                        void *out, void *const *in)
{
    const hx_tensor *const *src = (const hx_tensor *const *)y->src;
    int nt = ex->nthreads, n = y->n_src;
    size_t bytes = is_half(y->dtype) ? f32_bytes(y) : 0;
    for (int k = 0; k < n; k++)
        if (is_half(src[k]->dtype)) bytes += f32_bytes(src[k]);
    if (!bytes) return f32_kernel(ex, y, out, in);

    char *scratch = aligned_alloc(ALIGN, bytes);
    if (!scratch)
        return hx__error(HX_ERR_OUT_OF_MEMORY,
                         "%s '%s' (%s): out of host memory for %zu bytes of f32 scratch (a "
                         "16-bit float op computes in f32); free host memory or use fewer "
                         "threads", hx__ops[y->op].name, y->name, hx_dtype_name(y->dtype), bytes);
    void *win[n > 0 ? n : 1];
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        const hx_tensor *x = src[k];
        win[k] = in[k];
        if (!is_half(x->dtype)) continue;
        win[k] = scratch + off;
        hx_k_cast(win[k], HX_K_F32, in[k], (hx_kdtype)x->dtype, hx_tensor_numel(x), nt);
        off += f32_bytes(x);
    }
    void *wout = is_half(y->dtype) ? scratch + off : out;
    hx_status st = f32_kernel(ex, y, wout, win);
    if (!st && wout != out)
        hx_k_cast(out, (hx_kdtype)y->dtype, wout, HX_K_F32, hx_tensor_numel(y), nt);
    free(scratch);
    return st;
}

hx_status hx__cpu_row_scratch_error(const hx_exec *ex, const hx_tensor *y, int64_t cols)
{
    return hx__error(HX_ERR_OUT_OF_MEMORY,
                     "%s '%s' (%s): out of host memory for its f32 row scratch (%d threads, "
                     "%lld columns); free host memory or use fewer threads",
                     hx__ops[y->op].name, y->name, hx_dtype_name(y->dtype), ex->nthreads,
                     (long long)cols);
}

void hx__host_round(void *dst, hx_dtype dt, const float *src, int64_t n, int nthreads)
{
    hx_k_cast(dst, (hx_kdtype)dt, src, HX_K_F32, n, nthreads);
}

hx_status hx__cpu_gemm_half(const hx_exec *ex, const hx_tensor *y, const hx__gemm_args *g,
                            void *out, const void *x, const void *w, const void *b, int act)
{
    if (hx_k_gemm_half(g->ta, g->tb, g->batch, g->M, g->N, g->K, x, g->lda, g->a_stride, w,
                       g->ldb, g->b_stride, b, act, (hx_kdtype)y->dtype, out, g->ldc,
                       g->c_stride, ex->nthreads))
        return hx__cpu_gemm_scratch_error(ex, y, g);
    return HX_OK;
}

hx_status hx__cpu_gemm_scratch_error(const hx_exec *ex, const hx_tensor *y,
                                     const hx__gemm_args *g)
{
    return hx__error(HX_ERR_OUT_OF_MEMORY,
                     "%s '%s' (%s): out of host memory for a 16-bit GEMM's f32 scratch or its oneDNN "
                     "primitive (%lld x %lld x %lld, %d threads); free host memory or use fewer "
                     "threads",
                     hx__ops[y->op].name, y->name, hx_dtype_name(y->dtype), (long long)g->M,
                     (long long)g->K, (long long)g->N, ex->nthreads);
}
