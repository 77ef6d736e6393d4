/* Statuses (CUDA and cuBLAS errors as text), plain copies, and the bad-id
 * note shared by the kernels that read ids. */
#include "kernels/gpu/gk_common.cuh"

hx_gk_status hx_gk_cuda(cudaError_t e) { return e == cudaSuccess ? HX_GK_OK : HX_GK_CUDA_BASE + (int)e; }

hx_gk_status hx_gk_cublas(cublasStatus_t e)
{
    return e == CUBLAS_STATUS_SUCCESS ? HX_GK_OK : HX_GK_CUBLAS_BASE + (int)e;
}

const char *hx_gk_strerror(hx_gk_status st)
{
    if (st == HX_GK_OK) return "no error";
    if (st == HX_GK_BAD_ARG) return "a dtype, size or rank the GPU kernel does not take";
    if (st == HX_GK_SCRATCH) return "the GPU kernel's scratch buffer is too small";
    if (st >= HX_GK_CUBLAS_BASE && st < HX_GK_CUBLAS_BASE + 0x10000)
        return cublasGetStatusString((cublasStatus_t)(st - HX_GK_CUBLAS_BASE));
    if (st >= HX_GK_CUDA_BASE && st < HX_GK_CUDA_BASE + 0x10000)
        return cudaGetErrorString((cudaError_t)(st - HX_GK_CUDA_BASE));
    return "unknown GPU kernel status";
}

int hx_gk_is_oom(hx_gk_status st)
{
    return st == HX_GK_CUDA_BASE + (int)cudaErrorMemoryAllocation ||
           st == HX_GK_CUBLAS_BASE + (int)CUBLAS_STATUS_ALLOC_FAILED;
}

hx_gk_status hx_gk_memcpy(const hx_gk_ctx *c, void *dst, const void *src, size_t n)
{
    if (!n || dst == src) return HX_GK_OK;
    return hx_gk_cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream));
}

hx_gk_status hx_gk_memset0(const hx_gk_ctx *c, void *dst, size_t n)
{
    return n ? hx_gk_cuda(cudaMemsetAsync(dst, 0, n, c->stream)) : HX_GK_OK;
}

static __global__ void fill_bad_id(uint64_t *bad, const void *ids, int i64)
{
    if (bad[0] != UINT64_MAX) bad[1] = (uint64_t)id_at(ids, i64, (int64_t)bad[0]);
}

hx_gk_status hx_gk_fill_bad_id(const hx_gk_ctx *c, uint64_t *bad, const void *ids, int i64)
{
    fill_bad_id<<<1, 1, 0, c->stream>>>(bad, ids, i64);
    return hx_gk_launched();
}
