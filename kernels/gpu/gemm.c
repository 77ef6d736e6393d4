/* Matmul through cuBLAS. Row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T: cuBLAS gets B first, the dims swapped, and each
 * operand's transpose flag as is. */
#include <limits.h>

#include "kernels/gpu/hx_gpu_kernels.h"

static cudaDataType_t blas_type(hx_kdtype dt)
{
    return dt == HX_K_F16 ? CUDA_R_16F : dt == HX_K_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

hx_gk_status hx_gk_gemm(const hx_gk_ctx *c, hx_kdtype dt, int trans_a, int trans_b,
                        int64_t batch, int64_t M, int64_t N, int64_t K, const void *A,
                        int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                        int64_t stride_b, void *C, int64_t ldc, int64_t stride_c)
{
    if ((dt != HX_K_F32 && dt != HX_K_F16 && dt != HX_K_BF16) || !fits_int(batch) ||
        !fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(lda) || !fits_int(ldb) ||
        !fits_int(ldc) || stride_a < 0 || stride_b < 0 || stride_c < 0)
        return HX_GK_BAD_ARG;
    if (!batch || !M || !N) return HX_GK_OK;
    if (!K) return hx_gk_memset0(c, C, (size_t)(batch * M * N) * hx_k_dtype_size(dt));
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t ty = blas_type(dt);
    cublasComputeType_t compute =
        dt == HX_K_F32 && c->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    return hx_gk_cublas(cublasGemmStridedBatchedEx(
        c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
        (int)N, (int)M, (int)K, &one, B, ty, (int)ldb, stride_b, A, ty, (int)lda, stride_a, &zero,
        C, ty, (int)ldc, stride_c, (int)batch, compute, CUBLAS_GEMM_DEFAULT));
}
