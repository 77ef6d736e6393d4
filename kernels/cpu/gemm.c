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
 * 16-bit chain rounds its output.
 *
 * A GEMM stored in f16 or bf16 (hx_k_gemm_half) widens B and the bias once
 * (exactly) into f32 scratch, but A one row panel at a time into a
 * per-thread panel (GEMM_TILE_M rows, widened once for all the column tiles
 * a thread runs of it), computes each tile into a per-thread f32 tile and
 * rounds it into C after the epilogue while it is in cache: no f32 copy of
 * A or of C is written to memory and read back. Each tile is the same
 * single-threaded sgemm call on the same values (only the leading
 * dimensions of A and C differ), so the bits equal widening everything,
 * running hx_k_gemm_bias_act_f32 and rounding C (test_kernels gemm_half).
 * Chosen by measurement (bench_gemm_half, bench/results/hostk-cpu-*-s13):
 * Debian 12's OpenBLAS 0.3.21 is built without bf16 (no cblas_sbgemm), and
 * oneDNN is there as a runtime library only (libdnnl 2.6, no headers). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

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
    const float *A, *B; /* for hx_k_gemm_half: A in dt, B widened (ldb, sb) */
    float *C;           /* for hx_k_gemm_half: in dt */
    int64_t lda, ldb, ldc, sa, sb, sc;
    int64_t tiles_m, tiles_n;
    const float *bias; /* NULL: none (f32, widened for hx_k_gemm_half) */
    int act;           /* an hx_unary_op, or -1: none */
    hx_kdtype round;   /* the epilogue rounds through it after each stage (F32: not) */
    bool half;         /* hx_k_gemm_half: A and C stored in round */
    float *work;       /* half: per thread, work_per floats (an A panel, then a C tile) */
    int64_t work_per;
} gemm_args;

/* One tile's place: batch, first row and column, and size. */
typedef struct tile {
    int64_t b, i0, j0, m, n;
} tile;

/* Tile t: batch t / (tiles_m * tiles_n), then row tile, then column tile. */
static tile tile_at(const gemm_args *g, int64_t t)
{
    int64_t per = g->tiles_m * g->tiles_n, r = t % per;
    tile x = {t / per, r / g->tiles_n * GEMM_TILE_M, r % g->tiles_n * GEMM_TILE_N, 0, 0};
    x.m = g->M - x.i0 < GEMM_TILE_M ? g->M - x.i0 : GEMM_TILE_M;
    x.n = g->N - x.j0 < GEMM_TILE_N ? g->N - x.j0 : GEMM_TILE_N;
    return x;
}

/* The bias and activation on a computed m x n tile at C (ldc), columns
 * from j0 of the bias, each stage rounded through g->round. */
static void epilogue(const gemm_args *g, float *C, int64_t ldc, int64_t m, int64_t n, int64_t j0)
{
    for (int64_t i = 0; (g->bias || g->act >= 0) && i < m; i++) {
        float *row = C + i * ldc;
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

static void gemm_tile(const gemm_args *g, int64_t t)
{
    tile x = tile_at(g, t);
    const float *A = g->A + x.b * g->sa + (g->ta ? x.i0 : x.i0 * g->lda);
    const float *B = g->B + x.b * g->sb + (g->tb ? x.j0 * g->ldb : x.j0);
    float *C = g->C + x.b * g->sc + x.i0 * g->ldc + x.j0;
    gemm_forward(g->ta, g->tb, x.m, x.n, g->K, g->alpha, A, g->lda, B, g->ldb, g->beta, C, g->ldc);
    epilogue(g, C, g->ldc, x.m, x.n, x.j0);
}

/* hx_k_gemm_half's tile on a thread whose scratch is w and whose widened A
 * panel is *panel (-1: none yet; batch * tiles_m + row tile). */
static void gemm_tile_half(const gemm_args *g, int64_t t, float *w, int64_t *panel)
{
    tile x = tile_at(g, t);
    hx_kdtype dt = g->round;
    int64_t K = g->K, key = x.b * g->tiles_m + x.i0 / GEMM_TILE_M;
    float *ap = w, *ct = w + GEMM_TILE_M * K;
    if (*panel != key) { /* op(A)'s rows i0 .. i0 + m: m rows of K, or K rows of m */
        const uint16_t *A = (const uint16_t *)(const void *)g->A + x.b * g->sa;
        for (int64_t r = 0; r < (g->ta ? K : x.m); r++)
            hx_k_cast(ap + r * (g->ta ? x.m : K), HX_K_F32,
                      g->ta ? A + r * g->lda + x.i0 : A + (x.i0 + r) * g->lda, dt,
                      g->ta ? x.m : K, 1);
        *panel = key;
    }
    const float *B = g->B + x.b * g->sb + (g->tb ? x.j0 * g->ldb : x.j0);
    gemm_forward(g->ta, g->tb, x.m, x.n, K, 1.0f, ap, g->ta ? x.m : K, B, g->ldb, 0.0f, ct, x.n);
    epilogue(g, ct, x.n, x.m, x.n, x.j0);
    uint16_t *C = (uint16_t *)(void *)g->C + x.b * g->sc + x.i0 * g->ldc + x.j0;
    for (int64_t i = 0; i < x.m; i++) hx_k_cast(C + i * g->ldc, dt, ct + i * x.n, HX_K_F32, x.n, 1);
}

/* Tiles [lo, hi) on the calling thread, whose scratch (half) is w. */
static void gemm_tiles(const gemm_args *g, int64_t lo, int64_t hi, float *w)
{
    int64_t panel = -1;
    for (int64_t t = lo; t < hi; t++) {
        if (g->half) gemm_tile_half(g, t, w, &panel);
        else gemm_tile(g, t);
    }
}

/* Whether the tiles go to nthreads threads: more than one tile and enough work. */
static bool gemm_go_parallel(const gemm_args *g, int64_t batch, int nthreads)
{
    return nthreads > 1 && batch * g->tiles_m * g->tiles_n > 1 &&
           batch * g->M * g->N * (g->K ? g->K : 1) >= GEMM_PARALLEL_MIN_MNK;
}

static void gemm_run(gemm_args *g, int64_t batch, int nthreads)
{
    int64_t tiles = batch * g->tiles_m * g->tiles_n;
    /* OpenBLAS (OpenMP build) takes its thread count from the calling
     * thread's nthreads ICV when it is not in an active parallel region (a
     * region may get a team of one: OMP_THREAD_LIMIT, nesting), so every
     * thread that calls it sets that to 1 first. Each thread runs one
     * contiguous range of tiles (a static schedule), so a thread's tiles
     * of one row panel are consecutive. */
    if (gemm_go_parallel(g, batch, nthreads)) {
#pragma omp parallel num_threads(nthreads)
        {
            omp_set_num_threads(1);
            int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
            gemm_tiles(g, tiles * id / nt, tiles * (id + 1) / nt,
                       g->work ? g->work + id * g->work_per : NULL);
        }
        return;
    }
    omp_set_num_threads(1);
    gemm_tiles(g, 0, tiles, g->work);
}

void hx_k_gemm_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, int64_t stride_a,
                   const float *B, int64_t ldb, int64_t stride_b, float beta, float *C,
                   int64_t ldc, int64_t stride_c, int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return;
    gemm_args g = {trans_a, trans_b, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc,
                   stride_a, stride_b, stride_c, (M + GEMM_TILE_M - 1) / GEMM_TILE_M,
                   (N + GEMM_TILE_N - 1) / GEMM_TILE_N, NULL, -1, HX_K_F32, false, NULL, 0};
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
                   (N + GEMM_TILE_N - 1) / GEMM_TILE_N, bias, act, round, false, NULL, 0};
    gemm_run(&g, batch, nthreads);
}

int hx_k_gemm_half(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   const void *A, int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                   int64_t stride_b, const void *bias, int act, hx_kdtype dt, void *C,
                   int64_t ldc, int64_t stride_c, int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    gemm_args g = {trans_a, trans_b, M, N, K, 1.0f, 0.0f, A, NULL, C, lda, 0, ldc,
                   stride_a, 0, stride_c, (M + GEMM_TILE_M - 1) / GEMM_TILE_M,
                   (N + GEMM_TILE_N - 1) / GEMM_TILE_N, NULL, act, dt, true, NULL, 0};
    /* scratch: B (each distinct matrix, compact), the bias, then per thread
     * an A panel (at most GEMM_TILE_M x K) and a C tile */
    int64_t rows_b = trans_b ? N : K, cols_b = trans_b ? K : N, nb = stride_b ? batch : 1;
    int nt = gemm_go_parallel(&g, batch, nthreads) ? nthreads : 1;
    g.work_per = GEMM_TILE_M * K + GEMM_TILE_M * GEMM_TILE_N;
    int64_t shared = nb * rows_b * cols_b + (bias ? N : 0);
    float *w = malloc((size_t)(shared + nt * g.work_per) * sizeof(float));
    if (!w) return -1;
    const uint16_t *b16 = B;
    for (int64_t k = 0; k < nb; k++) {
        float *bk = w + k * rows_b * cols_b;
        if (ldb == cols_b) { /* compact: one cast over the threads */
            hx_k_cast(bk, HX_K_F32, b16 + k * stride_b, dt, rows_b * cols_b, nthreads);
            continue;
        }
        for (int64_t r = 0; r < rows_b; r++)
            hx_k_cast(bk + r * cols_b, HX_K_F32, b16 + k * stride_b + r * ldb, dt, cols_b, 1);
    }
    if (bias) hx_k_cast(w + nb * rows_b * cols_b, HX_K_F32, bias, dt, N, 1);
    g.B = w;
    g.ldb = cols_b;
    g.sb = stride_b ? rows_b * cols_b : 0;
    g.bias = bias ? w + nb * rows_b * cols_b : NULL;
    g.work = w + shared;
    gemm_run(&g, batch, nthreads);
    free(w);
    return 0;
}
