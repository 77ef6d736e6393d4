/* Batched matmul through OpenBLAS (its OpenMP build).
 *
 * Results do not depend on nthreads: the scheduler runs a kernel with its
 * lane's share of the session's threads, and the bits must equal an
 * all-CPU run's. OpenBLAS's own threading splits a matrix differently at
 * each thread count and gives other bits (1 vs 2 threads for 100x300x200,
 * 1 vs 3 for 384x512x448 on OpenBLAS 0.3.21), so every matrix is cut into
 * tiles whose bounds depend on the shape only, each tile is one
 * single-threaded OpenBLAS call, and the threads share the tiles.
 *
 * The fused form (hx_k_gemm_bias_act_f32) adds a bias row and applies an
 * activation to each tile right after its GEMM, on the same thread, while
 * the tile (at most 128 x 256 floats) is still in cache: the same GEMM
 * calls, then per element the same addition as hx_k_bias_add_f32 and the
 * same function as hx_k_unary_f32, so its bits equal that chain's. For a
 * chain stored in f16 or bf16 it rounds each row through that dtype after
 * the GEMM, after the bias and after the activation, as each op of the
 * 16-bit chain rounds its output. */
#include <stdint.h>

#include <cblas.h>

#include "hx_kinternal.h"

#define GEMM_TILE_M 128
#define GEMM_TILE_N 256
#define GEMM_PARALLEL_MIN_MNK (64 * 64 * 64) /* less work than this stays on one thread */

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

typedef struct gemm_args {
    int ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t lda, ldb, ldc, sa, sb, sc;
    int64_t tiles_m, tiles_n;
    const float *bias; /* NULL: none */
    int act;           /* an hx_unary_op, or -1: none */
    hx_kdtype round;   /* the epilogue rounds through it after each stage (F32: not) */
} gemm_args;

/* Tile t: batch t / (tiles_m * tiles_n), then row tile, then column tile. */
static void gemm_tile(const gemm_args *g, int64_t t)
{
    int64_t per = g->tiles_m * g->tiles_n, b = t / per, r = t % per;
    int64_t i0 = r / g->tiles_n * GEMM_TILE_M, j0 = r % g->tiles_n * GEMM_TILE_N;
    int64_t m = g->M - i0 < GEMM_TILE_M ? g->M - i0 : GEMM_TILE_M;
    int64_t n = g->N - j0 < GEMM_TILE_N ? g->N - j0 : GEMM_TILE_N;
    const float *A = g->A + b * g->sa + (g->ta ? i0 : i0 * g->lda);
    const float *B = g->B + b * g->sb + (g->tb ? j0 * g->ldb : j0);
    float *C = g->C + b * g->sc + i0 * g->ldc + j0;
    gemm_forward(g->ta, g->tb, m, n, g->K, g->alpha, A, g->lda, B, g->ldb, g->beta, C, g->ldc);
    for (int64_t i = 0; (g->bias || g->act >= 0) && i < m; i++) {
        float *row = C + i * g->ldc;
        hx__round_through(row, g->round, n);
        if (g->bias) {
            for (int64_t j = 0; j < n; j++) row[j] = row[j] + g->bias[j0 + j];
            hx__round_through(row, g->round, n);
        }
        if (g->act >= 0) {
            hx__unary_forward((hx_unary_op)g->act, row, row, n);
            hx__round_through(row, g->round, n);
        }
    }
}

static void gemm_run(gemm_args *g, int64_t batch, int nthreads)
{
    int64_t tiles = batch * g->tiles_m * g->tiles_n;
    /* OpenBLAS (OpenMP build) takes its thread count from the calling
     * thread's nthreads ICV when it is not in an active parallel region (a
     * region may get a team of one: OMP_THREAD_LIMIT, nesting), so every
     * thread that calls it sets that to 1 first. */
    if (nthreads > 1 && tiles > 1 && batch * g->M * g->N * (g->K ? g->K : 1) >= GEMM_PARALLEL_MIN_MNK) {
#pragma omp parallel num_threads(nthreads)
        {
            omp_set_num_threads(1);
#pragma omp for schedule(static)
            for (int64_t t = 0; t < tiles; t++) gemm_tile(g, t);
        }
        return;
    }
    omp_set_num_threads(1);
    for (int64_t t = 0; t < tiles; t++) gemm_tile(g, t);
}

void hx_k_gemm_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, int64_t stride_a,
                   const float *B, int64_t ldb, int64_t stride_b, float beta, float *C,
                   int64_t ldc, int64_t stride_c, int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return;
    gemm_args g = {trans_a, trans_b, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc,
                   stride_a, stride_b, stride_c, (M + GEMM_TILE_M - 1) / GEMM_TILE_M,
                   (N + GEMM_TILE_N - 1) / GEMM_TILE_N, NULL, -1, HX_K_F32};
    gemm_run(&g, batch, nthreads);
}

void hx_k_gemm_bias_act_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N,
                            int64_t K, const float *A, int64_t lda, int64_t stride_a,
                            const float *B, int64_t ldb, int64_t stride_b, const float *bias,
                            int act, hx_kdtype round, float *C, int64_t ldc, int64_t stride_c,
                            int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return;
    gemm_args g = {trans_a, trans_b, M, N, K, 1.0f, 0.0f, A, B, C, lda, ldb, ldc,
                   stride_a, stride_b, stride_c, (M + GEMM_TILE_M - 1) / GEMM_TILE_M,
                   (N + GEMM_TILE_N - 1) / GEMM_TILE_N, bias, act, round};
    gemm_run(&g, batch, nthreads);
}
