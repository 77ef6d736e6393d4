/* Batched matmul through OpenBLAS (its OpenMP build). */
#include <stdint.h>

#include <cblas.h>

#include "hx_kinternal.h"

/* Batches of small matrices with distinct outputs run one matrix per thread
 * (OpenBLAS sees that it is inside a parallel region and stays on one
 * thread); otherwise matrices run one after another, each spread over the
 * threads by OpenBLAS. */
#define GEMM_SMALL_MNK (128 * 128 * 128)
#define GEMM_BATCH_MIN_MNK (1 << 20)

// C (M, N) = alpha * op(A) (M, K) op(B) (K, N) + beta * C, one matrix
static void gemm_forward(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc)
{
    if (K == 0) { /* no products: C = beta * C (beta 0 does not read C) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N, (blasint)K, alpha, A,
                (blasint)lda, B, (blasint)ldb, beta, C, (blasint)ldc);
}

void hx_k_gemm_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, int64_t stride_a,
                   const float *B, int64_t ldb, int64_t stride_b, float beta, float *C,
                   int64_t ldc, int64_t stride_c, int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return;
    int64_t mnk = M * N * K;
    if (nthreads > 1 && batch >= nthreads && stride_c != 0 && mnk <= GEMM_SMALL_MNK &&
        batch * mnk >= GEMM_BATCH_MIN_MNK) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t b = 0; b < batch; b++)
            gemm_forward(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b,
                         ldb, beta, C + b * stride_c, ldc);
        return;
    }
    /* OpenBLAS (OpenMP build) reads the calling thread's nthreads ICV. */
    omp_set_num_threads(nthreads);
    for (int64_t b = 0; b < batch; b++)
        gemm_forward(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb,
                     beta, C + b * stride_c, ldc);
}
