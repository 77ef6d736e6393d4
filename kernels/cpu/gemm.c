/* Batched matmul through OpenBLAS (its OpenMP build) and oneDNN.
 *
 * Results do not depend on nthreads: the scheduler runs a kernel with its
 * lane's share of the session's threads, and the bits must equal an
 * all-CPU run's. OpenBLAS's own threading splits a matrix differently at
 * each thread count and gives other bits (1 vs 2 threads for 100x300x200,
 * 1 vs 3 for 384x512x448 on OpenBLAS 0.3.21), and so does a different cut
 * of the same matrix into calls where its small-matrix kernels apply (K 33,
 * N 65), so every matrix is cut into tiles whose bounds depend on the shape
 * only (gemm_tiling), each tile is one single-threaded OpenBLAS (or
 * oneDNN: below) call, and the threads share the tiles.
 *
 * Each call packs its tile's rows of op(A) and columns of op(B) again, so
 * the tiles are as large as parallel work allows: at most GEMM_TILE_MAX
 * square, cut evenly (a 768-column matrix as 2 x 384, not 512 + 256), and
 * halved until a GEMM has GEMM_TILES_MIN tiles, but never below the 128 x
 * 256 floats of the earlier fixed tiles. On the GPT example's shapes, one
 * thread, 128 x 256 tiles ran at 0.77-0.91 of one untiled sgemm call, 256 x
 * 256 and larger at 0.91-1.0 (session 14, Xeon with AVX-512, OpenBLAS
 * 0.3.21). The threads take tiles from a shared
 * counter, in order, so a thread that is slowed (another process on its
 * core) holds up at most its last tile, not a fixed share of the matrix.
 *
 * The fused form (hx_k_gemm_bias_act_f32) adds a bias row and applies an
 * activation to each tile right after its GEMM, on the same thread, while
 * the tile (at most 512 x 512 floats) is still in cache: the same GEMM
 * calls, then per element the same addition as hx_k_bias_add_f32 and the
 * same function as hx_k_unary_f32, so its bits equal that chain's. For a
 * chain stored in f16 or bf16 it rounds each row through that dtype after
 * the GEMM, after the bias and after the activation, as each op of the
 * 16-bit chain rounds its output (hx_k_gemm_half: the last of these is its
 * rounding into C).
 *
 * A GEMM stored in f16 or bf16 (hx_k_gemm_half) widens B and the bias once
 * (exactly) into f32 scratch, but A one row panel at a time into a
 * per-thread panel (a tile's rows, widened once for all the column tiles
 * a thread runs of it in a row), computes each tile into a per-thread f32
 * tile and rounds it into C after the epilogue while it is in cache: no f32
 * copy of A or of C is written to memory and read back. Each tile is the
 * same single-threaded sgemm call on the same values (only the leading
 * dimensions of A and C differ), so the bits equal widening everything,
 * running hx_k_gemm_bias_act_f32 and rounding C (test_kernels gemm_half).
 * That is f16's path, and bf16's where oneDNN is not there (Debian 12's
 * OpenBLAS 0.3.21 is built without bf16: no cblas_sbgemm).
 *
 * Where hetex was built with oneDNN and the CPU has AVX512-BF16 (and AMX),
 * a bf16 GEMM is computed natively (gemm_dnnl.c): each tile is one
 * single-threaded oneDNN matmul straight from A and B in bf16 into the
 * thread's f32 tile, then the same epilogue and rounding; nothing is
 * widened but the bias. The tiles are the same, so the bits are the same
 * at any thread count, but the products are summed in oneDNN's order, not
 * sgemm's: not bitwise the widened path.
 *
 * On the same ONEDNN engine the f32 tiles of the CPU's f32 rule are each
 * one single-threaded oneDNN f32 matmul (its "gemm:jit" sgemm,
 * gemm_dnnl.c), with the thread's oneDNN state kept as for bf16; the
 * others, and all of them where alpha is not 1 or beta not 0, one sgemm
 * call. The rule reads the tile's shape only (tile_dnnl), never a leading
 * dimension, so a tile read in place and the same tile read compact take
 * the same library; the tiles are the same, so the bits still do not
 * depend on the thread count, but they are oneDNN's, not sgemm's. Which
 * tiles pay differs by CPU, so the rule is the CPU's
 * (hx_k_gemm_get_f32_rule), each measured on every f32 GEMM of a GPT
 * training step (bench_gemm_f32):
 * - WHOLE_N (Intel; measured on a Sapphire Rapids guest, bench_gemm_half's
 *   f32_over_openblas, best of 20, 1 and 2 threads, load 3-5, session
 *   17): a tile with A not transposed and at least GEMM_DNNL_MIN columns,
 *   of a GEMM whose tiles span all of N (gemm_tiling cut no columns).
 *   Forward and dX with N <= 512 ran at 1.10-1.29x OpenBLAS's speed,
 *   attention q k^T 1.14-1.41x and p v with 64 columns 1.18-1.37x; but N
 *   cut into several column tiles (fc forward: N 1024, 1536) 0.80-1.01x,
 *   A transposed (x^T dy) 0.98-1.01x and p v with 32 columns 0.74-0.97x.
 * - LARGE (AMD; measured on a Zen 4 EPYC guest, session 18): any tile
 *   with at least GEMM_DNNL_MIN columns and K at least GEMM_DNNL_MIN,
 *   transposed or not, cut into column tiles or not. At 1 thread in
 *   thread CPU time (medians of 15, load 4-5 from other processes:
 *   bench/results/gemm-f32-rules-cpu-2026-12-08-s18-zen4.md): forward
 *   and dX 1.06-1.18x sgemm's speed, column-cut qkv and fc dX 1.16-1.17x
 *   (the fc forward with its GELU 0.94x), the weight gradients x^T dy
 *   1.08-1.21x, attention with K 64 or 128 1.04-1.31x, the head's 65
 *   columns 0.94-0.99x (kept: too small to matter); the default model's
 *   64 x 64 x 32 scores, which WHOLE_N sends to oneDNN, ran at 0.81x
 *   (K 32: sgemm here). A step's f32 GEMMs: WHOLE_N 1.03-1.06x, LARGE
 *   1.11-1.12x sgemm's speed (2 threads, wall, noisy: 1.03-1.07x and
 *   1.08-1.26x); `hetex gpt` 4x256 f32 at 1 thread 10% less CPU than
 *   OpenBLAS or WHOLE_N.
 * Either leaves out sgemm_beta's clearing of C on its tiles (1.5-3.6% of
 * an f32 step).
 * hx_k_gemm_set_engine (and HX_GEMM=openblas) picks OpenBLAS for every f32
 * tile and the widened path for bf16: A/B runs and tests. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "gemm_dnnl.h"
#include "hx_kinternal.h"

#define GEMM_TILE_MAX 512             /* a tile's rows and columns at most */
#define GEMM_TILE_AREA_MIN (128 * 256) /* no tile is halved below this for more tiles */
#define GEMM_TILES_MIN 8               /* tiles a GEMM is cut into where its size allows */
#define GEMM_PARALLEL_MIN_MNK (64 * 64 * 64) /* less work than this stays on one thread */
#define GEMM_DNNL_MIN 64 /* f32 tiles with fewer columns (or, LARGE, a shorter K) stay
                          * with sgemm (the top of the file) */

/* C (M, N) = alpha * op(A) (M, K) op(B) (K, N) + beta * C, one tile on
 * the calling thread: through oneDNN where dnnl (tile_dnnl: the f32 rule
 * says so; alpha 1, beta 0), else, or where oneDNN cannot make or run it
 * (out of memory), one sgemm call */
static void gemm_forward(bool dnnl, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc)
{
    if (K == 0) { /* no products: C = beta * C (beta 0 does not read C) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
#ifdef HX_HAVE_DNNL
    if (dnnl && hx__dnnl_gemm_f32(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc) == 0)
        return;
#else
    (void)dnnl;
#endif
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
    int64_t tiles_m, tiles_n, tile_m, tile_n; /* gemm_tiling */
    const float *bias; /* NULL: none (f32, widened for hx_k_gemm_half) */
    int act;           /* an hx_unary_op, or -1: none */
    hx_kdtype round;   /* the epilogue rounds through it after each stage (F32: not) */
    bool half;         /* hx_k_gemm_half: A and C stored in round */
    bool native;       /* half, bf16 through oneDNN: B stored in round too (not widened) */
    bool dnnl;         /* the ONEDNN engine: f32 tiles of the f32 rule through oneDNN
                        * (tile_dnnl) */
    hx_k_gemm_f32_rule rule;
    float *work;       /* half: per thread, work_per floats ([an A panel,] a C tile) */
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
    tile x = {t / per, r / g->tiles_n * g->tile_m, r % g->tiles_n * g->tile_n, 0, 0};
    x.m = g->M - x.i0 < g->tile_m ? g->M - x.i0 : g->tile_m;
    x.n = g->N - x.j0 < g->tile_n ? g->N - x.j0 : g->tile_n;
    return x;
}

/* The bias and activation on a computed m x n tile at C (ldc), columns
 * from j0 of the bias, each stage rounded through g->round; stored: the
 * caller rounds the tile into g->round next (store_tile), which is the
 * last stage's rounding (a value rounded twice is the value rounded once),
 * so it is left to the caller. */
static void epilogue(const gemm_args *g, float *C, int64_t ldc, int64_t m, int64_t n, int64_t j0,
                     bool stored)
{
    for (int64_t i = 0; (g->bias || g->act >= 0) && i < m; i++) {
        float *row = C + i * ldc;
        hx__round_through(row, g->round, n);
        if (g->bias) {
            for (int64_t j = 0; j < n; j++) row[j] = row[j] + g->bias[j0 + j];
            if (g->act >= 0 || !stored) hx__round_through(row, g->round, n);
        }
        if (g->act >= 0) {
            hx__unary_forward((hx_unary_op)g->act, row, row, n);
            if (!stored) hx__round_through(row, g->round, n);
        }
    }
}

/* Whether an f32 tile of g with n columns goes to oneDNN: on the ONEDNN
 * engine, alpha 1 and beta 0, as the f32 rule says (the top of the file).
 * From the shape alone, never a leading dimension: a tile read in place
 * and the same tile read compact take the same engine. */
static bool tile_dnnl(const gemm_args *g, int64_t n)
{
    if (!g->dnnl || g->alpha != 1.0f || g->beta != 0.0f || n < GEMM_DNNL_MIN) return false;
    return g->rule == HX_K_GEMM_F32_LARGE ? g->K >= GEMM_DNNL_MIN
                                          : !g->ta && g->tiles_n == 1;
}

static void gemm_tile(const gemm_args *g, int64_t t)
{
    tile x = tile_at(g, t);
    const float *A = g->A + x.b * g->sa + (g->ta ? x.i0 : x.i0 * g->lda);
    const float *B = g->B + x.b * g->sb + (g->tb ? x.j0 * g->ldb : x.j0);
    float *C = g->C + x.b * g->sc + x.i0 * g->ldc + x.j0;
    gemm_forward(tile_dnnl(g, x.n), g->ta, g->tb, x.m, x.n, g->K, g->alpha, A, g->lda,
                 B, g->ldb, g->beta, C, g->ldc);
    epilogue(g, C, g->ldc, x.m, x.n, x.j0, false);
}

/* The epilogue on hx_k_gemm_half's computed f32 tile ct (x.m x x.n,
 * compact), rounded into C. */
static void store_tile(const gemm_args *g, const tile *x, float *ct)
{
    epilogue(g, ct, x->n, x->m, x->n, x->j0, true);
    uint16_t *C = (uint16_t *)(void *)g->C + x->b * g->sc + x->i0 * g->ldc + x->j0;
    for (int64_t i = 0; i < x->m; i++)
        hx_k_cast(C + i * g->ldc, g->round, ct + i * x->n, HX_K_F32, x->n, 1);
}

/* hx_k_gemm_half's tile on a thread whose scratch is w and whose widened A
 * panel is *panel (-1: none yet; batch * tiles_m + row tile). */
static void gemm_tile_half(const gemm_args *g, int64_t t, float *w, int64_t *panel)
{
    tile x = tile_at(g, t);
    hx_kdtype dt = g->round;
    int64_t K = g->K, key = x.b * g->tiles_m + x.i0 / g->tile_m;
    float *ap = w, *ct = w + g->tile_m * K;
    if (*panel != key) { /* op(A)'s rows i0 .. i0 + m: m rows of K, or K rows of m */
        const uint16_t *A = (const uint16_t *)(const void *)g->A + x.b * g->sa;
        for (int64_t r = 0; r < (g->ta ? K : x.m); r++)
            hx_k_cast(ap + r * (g->ta ? x.m : K), HX_K_F32,
                      g->ta ? A + r * g->lda + x.i0 : A + (x.i0 + r) * g->lda, dt,
                      g->ta ? x.m : K, 1);
        *panel = key;
    }
    const float *B = g->B + x.b * g->sb + (g->tb ? x.j0 * g->ldb : x.j0);
    gemm_forward(tile_dnnl(g, x.n), g->ta, g->tb, x.m, x.n, K, 1.0f, ap,
                 g->ta ? x.m : K, B, g->ldb, 0.0f, ct, x.n);
    store_tile(g, &x, ct);
}

#ifdef HX_HAVE_DNNL
/* hx_k_gemm_half's tile through oneDNN (bf16 A and B as stored) on a
 * thread whose C tile is w. */
static int gemm_tile_native(const gemm_args *g, int64_t t, float *w)
{
    tile x = tile_at(g, t);
    const uint16_t *A = (const uint16_t *)(const void *)g->A + x.b * g->sa +
                        (g->ta ? x.i0 : x.i0 * g->lda);
    const uint16_t *B = (const uint16_t *)(const void *)g->B + x.b * g->sb +
                        (g->tb ? x.j0 * g->ldb : x.j0);
    if (hx__dnnl_gemm_bf16(g->ta, g->tb, x.m, x.n, g->K, A, g->lda, B, g->ldb, w, x.n))
        return -1;
    store_tile(g, &x, w);
    return 0;
}
#endif

/* Tiles taken in turn from *next (shared by the threads; NULL: all of
 * them, on the calling thread), whose scratch (half) is w. Returns -1
 * where a native tile failed (the other tiles still run). */
static int gemm_tiles(const gemm_args *g, int64_t tiles, int64_t *next, float *w)
{
    int64_t panel = -1, serial = 0;
    int rc = 0;
    for (;;) {
        int64_t t = next ? __atomic_fetch_add(next, 1, __ATOMIC_RELAXED) : serial++;
        if (t >= tiles) break;
#ifdef HX_HAVE_DNNL
        if (g->native) {
            rc |= gemm_tile_native(g, t, w);
            continue;
        }
#endif
        if (g->half) gemm_tile_half(g, t, w, &panel);
        else gemm_tile(g, t);
    }
    return rc;
}

/* The size of `count` even tiles along a dimension of n, rounded up to 16
 * (a vector of AVX-512 floats). */
static int64_t tile_size(int64_t n, int64_t count)
{
    int64_t size = (n + count - 1) / count;
    return (size + 15) / 16 * 16;
}

/* g's tiles from its shape alone (see the top of the file): at most
 * GEMM_TILE_MAX square, the larger side halved while the batch has fewer
 * than GEMM_TILES_MIN tiles and the halves keep GEMM_TILE_AREA_MIN. */
static void gemm_tiling(gemm_args *g, int64_t batch)
{
    int64_t cm = (g->M + GEMM_TILE_MAX - 1) / GEMM_TILE_MAX;
    int64_t cn = (g->N + GEMM_TILE_MAX - 1) / GEMM_TILE_MAX;
    g->tile_m = tile_size(g->M, cm);
    g->tile_n = tile_size(g->N, cn);
    while (batch * cm * cn < GEMM_TILES_MIN && g->tile_m * g->tile_n / 2 >= GEMM_TILE_AREA_MIN) {
        if (g->tile_m >= g->tile_n) g->tile_m = tile_size(g->M, cm *= 2);
        else g->tile_n = tile_size(g->N, cn *= 2);
    }
    g->tiles_m = (g->M + g->tile_m - 1) / g->tile_m;
    g->tiles_n = (g->N + g->tile_n - 1) / g->tile_n;
}

/* Whether the tiles go to nthreads threads: more than one tile and enough work. */
static bool gemm_go_parallel(const gemm_args *g, int64_t batch, int nthreads)
{
    return nthreads > 1 && batch * g->tiles_m * g->tiles_n > 1 &&
           batch * g->M * g->N * (g->K ? g->K : 1) >= GEMM_PARALLEL_MIN_MNK;
}

/* Returns -1 where a native tile failed. */
static int gemm_run(gemm_args *g, int64_t batch, int nthreads)
{
    int64_t tiles = batch * g->tiles_m * g->tiles_n, next = 0;
    int rc = 0;
    /* OpenBLAS (OpenMP build) takes its thread count from the calling
     * thread's nthreads ICV when it is not in an active parallel region (a
     * region may get a team of one: OMP_THREAD_LIMIT, nesting), and oneDNN
     * (OpenMP build) its primitives' threads, so every thread that calls
     * them sets that to 1 first. */
    if (gemm_go_parallel(g, batch, nthreads)) {
#pragma omp parallel num_threads(nthreads)
        {
            omp_set_num_threads(1);
            int r = gemm_tiles(g, tiles, &next,
                               g->work ? g->work + omp_get_thread_num() * g->work_per : NULL);
            if (r) __atomic_store_n(&rc, r, __ATOMIC_RELAXED);
        }
        return rc;
    }
    omp_set_num_threads(1);
    return gemm_tiles(g, tiles, NULL, g->work);
}

/* The engine and the f32 rule of g's tiles, read once a call. */
static void gemm_engines(gemm_args *g)
{
    g->dnnl = hx_k_gemm_get_engine() == HX_K_GEMM_ONEDNN;
    g->rule = hx_k_gemm_get_f32_rule();
}

void hx_k_gemm_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, int64_t stride_a,
                   const float *B, int64_t ldb, int64_t stride_b, float beta, float *C,
                   int64_t ldc, int64_t stride_c, int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return;
    gemm_args g = {.ta = trans_a, .tb = trans_b, .M = M, .N = N, .K = K, .alpha = alpha,
                   .beta = beta, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc,
                   .sa = stride_a, .sb = stride_b, .sc = stride_c, .act = -1, .round = HX_K_F32};
    gemm_engines(&g);
    gemm_tiling(&g, batch);
    gemm_run(&g, batch, nthreads);
}

void hx_k_gemm_bias_act_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N,
                            int64_t K, const float *A, int64_t lda, int64_t stride_a,
                            const float *B, int64_t ldb, int64_t stride_b, const float *bias,
                            int act, hx_kdtype round, float *C, int64_t ldc, int64_t stride_c,
                            int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return;
    gemm_args g = {.ta = trans_a, .tb = trans_b, .M = M, .N = N, .K = K, .alpha = 1.0f,
                   .beta = 0.0f, .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc,
                   .sa = stride_a, .sb = stride_b, .sc = stride_c, .bias = bias, .act = act,
                   .round = round};
    gemm_engines(&g);
    gemm_tiling(&g, batch);
    gemm_run(&g, batch, nthreads);
}

/* -1 until the first call: ONEDNN where it is usable and HX_GEMM is not
 * "openblas"; then as hx_k_gemm_set_engine sets it. */
static atomic_int engine_now = -1;

/* The engine available here: ONEDNN where oneDNN runs bf16 natively. */
static hx_k_gemm_engine engine_available(hx_k_gemm_engine want)
{
    return want == HX_K_GEMM_ONEDNN && hx__dnnl_bf16_usable() ? HX_K_GEMM_ONEDNN
                                                                : HX_K_GEMM_OPENBLAS;
}

hx_k_gemm_engine hx_k_gemm_get_engine(void)
{
    int e = atomic_load_explicit(&engine_now, memory_order_acquire);
    if (e < 0) {
        const char *env = getenv("HX_GEMM");
        e = (int)engine_available(env && strcmp(env, "openblas") == 0 ? HX_K_GEMM_OPENBLAS
                                                                      : HX_K_GEMM_ONEDNN);
        atomic_store_explicit(&engine_now, e, memory_order_release);
    }
    return (hx_k_gemm_engine)e;
}

hx_k_gemm_engine hx_k_gemm_set_engine(hx_k_gemm_engine engine)
{
    hx_k_gemm_engine e = engine_available(engine);
    atomic_store_explicit(&engine_now, (int)e, memory_order_release);
    return e;
}

const char *hx_k_gemm_engine_name(hx_k_gemm_engine engine)
{
    return engine == HX_K_GEMM_ONEDNN ? "onednn" : "openblas";
}

/* -1 until the first call: LARGE on AMD CPUs, else WHOLE_N (the top of
 * the file); then as hx_k_gemm_set_f32_rule sets it. */
static atomic_int rule_now = -1;

hx_k_gemm_f32_rule hx_k_gemm_get_f32_rule(void)
{
    int r = atomic_load_explicit(&rule_now, memory_order_acquire);
    if (r < 0) {
        __builtin_cpu_init();
        r = __builtin_cpu_is("amd") ? HX_K_GEMM_F32_LARGE : HX_K_GEMM_F32_WHOLE_N;
        atomic_store_explicit(&rule_now, r, memory_order_release);
    }
    return (hx_k_gemm_f32_rule)r;
}

void hx_k_gemm_set_f32_rule(hx_k_gemm_f32_rule rule)
{
    atomic_store_explicit(&rule_now, (int)rule, memory_order_release);
}

const char *hx_k_gemm_f32_rule_name(hx_k_gemm_f32_rule rule)
{
    return rule == HX_K_GEMM_F32_LARGE ? "large" : "whole_n";
}

int hx_k_gemm_thread_states(void) { return hx__dnnl_thread_states(); }

int hx_k_gemm_half(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   const void *A, int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                   int64_t stride_b, const void *bias, int act, hx_kdtype dt, void *C,
                   int64_t ldc, int64_t stride_c, int nthreads)
{
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    gemm_args g = {.ta = trans_a, .tb = trans_b, .M = M, .N = N, .K = K, .alpha = 1.0f,
                   .beta = 0.0f, .A = A, .C = C, .lda = lda, .ldc = ldc, .sa = stride_a,
                   .sc = stride_c, .act = act, .round = dt, .half = true};
    gemm_engines(&g);
    g.native = g.dnnl && dt == HX_K_BF16 && K > 0;
    gemm_tiling(&g, batch);
    int nt = gemm_go_parallel(&g, batch, nthreads) ? nthreads : 1;
    if (g.native) { /* scratch: the bias, then per thread a C tile */
        g.work_per = g.tile_m * g.tile_n;
        float *w = malloc((size_t)((bias ? N : 0) + nt * g.work_per) * sizeof(float));
        if (!w) return -1;
        if (bias) hx_k_cast(w, HX_K_F32, bias, dt, N, 1);
        g.B = B, g.ldb = ldb, g.sb = stride_b;
        g.bias = bias ? w : NULL;
        g.work = w + (bias ? N : 0);
        int rc = gemm_run(&g, batch, nthreads);
        free(w);
        return rc;
    }
    /* scratch: B (each distinct matrix, compact), the bias, then per thread
     * an A panel (a tile's rows of op(A): tile_m x K) and a C tile */
    int64_t rows_b = trans_b ? N : K, cols_b = trans_b ? K : N, nb = stride_b ? batch : 1;
    g.work_per = g.tile_m * K + g.tile_m * g.tile_n;
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
    gemm_run(&g, batch, nthreads); /* not native: cannot fail */
    free(w);
    return 0;
}
