/* The 16-bit GEMM (kernels/cpu/gemm.c) on the GPT example's shapes, bf16:
 * hx_k_gemm_half on its oneDNN engine (tiles as oneDNN matmuls straight
 * from bf16, AMX / AVX512-BF16) against the same call on its OpenBLAS
 * engine (the path before: A panels and B widened to f32, sgemm tiles,
 * C rounded tile by tile) and against the f32 GEMM on f32 data
 * (hx_k_gemm_bias_act_f32, no conversion) on each engine: oneDNN's f32
 * matmul for the tiles of its rule (A not transposed), and OpenBLAS sgemm
 * tiles throughout. Timed interleaved, REPS rounds of the four in turn, so
 * that all meet the same background load; best and median of each. One
 * JSON object per shape:
 * "half_over_widened" the OpenBLAS engine's best time over the oneDNN
 * engine's (> 1: oneDNN pays), "ratio_to_f32" the f32 GEMM's best over
 * the oneDNN engine's (> 1: bf16 is faster than f32), "f32_over_openblas"
 * the f32 GEMM's best time on the OpenBLAS engine over that on the oneDNN
 * engine (> 1: the oneDNN engine's f32 pays; 1 where its rule sends no
 * tile to oneDNN, up to noise), "max_ulp" the
 * largest difference of the two engines' results in bf16 units in the
 * last place (they sum in different orders), "engine" the one that ran
 * (openblas twice where oneDNN is not available: then bitwise equal).
 * The ".heads" cases run attention's GEMMs as the GPT example does
 * (hx_k_gemm_heads: one call per batch item over its heads, q, k, v and
 * their gradients read and written in their (B,T,H,D) layout), so they
 * pay each call's fixed costs as a training step does.
 *
 *   bench_gemm_half [THREADS] [REPS]   (defaults 2 and 30) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/hx_kernels.h"
#include "cpu_model.h"

typedef struct shape {
    const char *name;
    int64_t batch;
    int ta, tb;
    int64_t M, K, N;
    int bias, act; /* act: an hx_unary_op, or -1 */
    int64_t outer; /* > 0: hx_k_gemm_heads over outer x batch (heads) matrices */
    int perm;      /* with outer: 1, 2, 4: A, B, C stored (B,T,H,D) (else compact) */
} shape;

/* B*T = 2048 rows. default: 2 x 128 wide (fc 128 -> 512, proj 512 -> 128,
 * qkv 128 -> 384), training: forward x w + b, backward dx = dy w^T (tb)
 * and dw = x^T dy (ta); wide: C 384 -> 1536 and back. Attention, per
 * batch and head: scores q k^T (tb), their product with v, dk = ds^T q
 * (ta); default 32 x 4 heads of context 64 and size 32, "4x256": 16 x 4
 * heads of context 128 and size 64; ".heads": the same per batch item,
 * scores q k^T from q and k in (B,T,H,D), p v into (B,T,H,D), dk =
 * ds^T q likewise. */
static const shape shapes[] = {
    {"default.fc", 1, 0, 0, 2048, 128, 512, 1, -1, 0, 0},
    {"default.fc+gelu", 1, 0, 0, 2048, 128, 512, 1, HX_UNARY_GELU, 0, 0},
    {"default.proj", 1, 0, 0, 2048, 512, 128, 1, -1, 0, 0},
    {"default.qkv", 1, 0, 0, 2048, 128, 384, 1, -1, 0, 0},
    {"default.fc.dx", 1, 0, 1, 2048, 512, 128, 0, -1, 0, 0},
    {"default.fc.dw", 1, 1, 0, 128, 2048, 512, 0, -1, 0, 0},
    {"default.att.qk", 128, 0, 1, 64, 32, 64, 0, -1, 0, 0},
    {"default.att.v", 128, 0, 0, 64, 64, 32, 0, -1, 0, 0},
    {"default.att.dk", 128, 1, 0, 64, 64, 32, 0, -1, 0, 0},
    {"wide.fc", 1, 0, 0, 2048, 384, 1536, 1, -1, 0, 0},
    {"wide.proj", 1, 0, 0, 2048, 1536, 384, 1, -1, 0, 0},
    {"wide.fc.dx", 1, 0, 1, 2048, 1536, 384, 0, -1, 0, 0},
    {"wide.fc.dw", 1, 1, 0, 384, 2048, 1536, 0, -1, 0, 0},
    {"4x256.fc", 1, 0, 0, 2048, 256, 1024, 1, HX_UNARY_GELU, 0, 0},
    {"4x256.fc.dx", 1, 0, 1, 2048, 1024, 256, 0, -1, 0, 0},
    {"4x256.fc.dw", 1, 1, 0, 256, 2048, 1024, 0, -1, 0, 0},
    {"4x256.att.qk", 64, 0, 1, 128, 64, 128, 0, -1, 0, 0},
    {"4x256.att.v", 64, 0, 0, 128, 128, 64, 0, -1, 0, 0},
    {"default.att.qk.heads", 4, 0, 1, 64, 32, 64, 0, -1, 32, 1 | 2},
    {"default.att.v.heads", 4, 0, 0, 64, 64, 32, 0, -1, 32, 2 | 4},
    {"default.att.dk.heads", 4, 1, 0, 64, 64, 32, 0, -1, 32, 2 | 4},
    {"4x256.att.qk.heads", 4, 0, 1, 128, 64, 128, 0, -1, 16, 1 | 2},
    {"4x256.att.v.heads", 4, 0, 0, 128, 128, 64, 0, -1, 16, 2 | 4},
    {"4x256.att.dk.heads", 4, 1, 0, 128, 128, 64, 0, -1, 16, 2 | 4},
};

/* One operand's place: storage rows x cols a matrix, `batch` matrices per
 * outer item; (B,T,H,D) where permuted (heads D apart, rows H * D). */
typedef struct layout {
    int64_t ld, stride, outer;
} layout;

static layout layout_of(int64_t rows, int64_t cols, int64_t batch, int permuted)
{
    return permuted ? (layout){batch * cols, cols, rows * batch * cols}
                    : (layout){cols, rows * cols, batch * rows * cols};
}

/* sh's GEMM in dt (A, B, C in it; bias and act for plain shapes), on the
 * half engine set, or in f32; nonzero: out of memory. */
static int run(const shape *sh, hx_kdtype dt, const void *A, const void *B, const void *bias,
               void *C, int nt)
{
    int64_t M = sh->M, K = sh->K, N = sh->N;
    layout a = layout_of(sh->ta ? K : M, sh->ta ? M : K, sh->batch, sh->perm & 1);
    layout b = layout_of(sh->tb ? N : K, sh->tb ? K : N, sh->batch, sh->perm & 2);
    layout c = layout_of(M, N, sh->batch, sh->perm & 4);
    if (sh->outer)
        return hx_k_gemm_heads(sh->ta, sh->tb, sh->outer, sh->batch, M, N, K, A, a.ld, a.stride,
                               a.outer, B, b.ld, b.stride, b.outer, dt, C, c.ld, c.stride,
                               c.outer, nt);
    if (dt == HX_K_F32) {
        hx_k_gemm_bias_act_f32(sh->ta, sh->tb, sh->batch, M, N, K, A, a.ld, a.stride, B, b.ld,
                               b.stride, bias, sh->act, HX_K_F32, C, c.ld, c.stride, nt);
        return 0;
    }
    return hx_k_gemm_half(sh->ta, sh->tb, sh->batch, M, N, K, A, a.ld, a.stride, B, b.ld,
                          b.stride, bias, sh->act, dt, C, c.ld, c.stride, nt);
}

static double now(void) { return omp_get_wtime(); }

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The largest difference of x and y (n bf16 values) in units in the last
 * place of the larger of the two. */
static double max_ulp(const uint16_t *x, const uint16_t *y, int64_t n)
{
    float *fx = malloc(sizeof(float) * n), *fy = malloc(sizeof(float) * n);
    double worst = 0;
    if (!fx || !fy) return -1;
    hx_k_cast(fx, HX_K_F32, x, HX_K_BF16, n, 1);
    hx_k_cast(fy, HX_K_F32, y, HX_K_BF16, n, 1);
    for (int64_t i = 0; i < n; i++) {
        double big = fabs(fx[i]) > fabs(fy[i]) ? fabs(fx[i]) : fabs(fy[i]);
        double ulp = big > 0 ? ldexp(1.0, ilogb(big) - 7) : 0x1p-133;
        double d = fabs((double)fx[i] - fy[i]) / ulp;
        if (d > worst) worst = d;
    }
    free(fx), free(fy);
    return worst;
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 30;
    if (nt < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_gemm_half [THREADS >= 1] [REPS >= 1]\n");
        return 2;
    }
    char cpu[128];
    bench_cpu_model(cpu, sizeof cpu);
    hx_k_gemm_engine native = hx_k_gemm_set_engine(HX_K_GEMM_ONEDNN);
    double *t = malloc(sizeof(double) * 4 * (size_t)reps);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        int64_t bt = sh->batch * (sh->outer ? sh->outer : 1), M = sh->M, K = sh->K, N = sh->N;
        int64_t na = bt * M * K, nb = bt * K * N, nc = bt * M * N;
        float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb);
        float *bias = malloc(sizeof(float) * N), *C = malloc(sizeof(float) * nc);
        uint16_t *a16 = malloc(2 * na), *b16 = malloc(2 * nb), *bias16 = malloc(2 * N);
        uint16_t *c1 = malloc(2 * nc), *c2 = malloc(2 * nc);
        if (!t || !A || !B || !bias || !C || !a16 || !b16 || !bias16 || !c1 || !c2) {
            fprintf(stderr, "bench_gemm_half: out of memory\n");
            return 1;
        }
        for (int64_t i = 0; i < na; i++) A[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
        for (int64_t i = 0; i < nb; i++) B[i] = (float)((i * 104729) % 2001 - 1000) / 8000.0f;
        for (int64_t i = 0; i < N; i++) bias[i] = (float)(i % 17) / 17.0f - 0.5f;
        hx_k_cast(a16, HX_K_BF16, A, HX_K_F32, na, 1);
        hx_k_cast(b16, HX_K_BF16, B, HX_K_F32, nb, 1);
        hx_k_cast(bias16, HX_K_BF16, bias, HX_K_F32, N, 1);
        const float *fb = sh->bias ? bias : NULL;
        const uint16_t *hb = sh->bias ? bias16 : NULL;
        for (int r = 0; r < reps; r++) {
            int rc = 0;
            double t0 = now();
            hx_k_gemm_set_engine(HX_K_GEMM_OPENBLAS);
            rc |= run(sh, HX_K_BF16, a16, b16, hb, c1, nt);
            double t1 = now();
            hx_k_gemm_set_engine(native);
            rc |= run(sh, HX_K_BF16, a16, b16, hb, c2, nt);
            double t2 = now();
            rc |= run(sh, HX_K_F32, A, B, fb, C, nt);
            double t3 = now();
            hx_k_gemm_set_engine(HX_K_GEMM_OPENBLAS);
            rc |= run(sh, HX_K_F32, A, B, fb, C, nt);
            hx_k_gemm_set_engine(native);
            double t4 = now();
            if (rc) {
                fprintf(stderr, "bench_gemm_half: out of memory\n");
                return 1;
            }
            t[r] = t1 - t0, t[reps + r] = t2 - t1, t[2 * reps + r] = t3 - t2;
            t[3 * reps + r] = t4 - t3;
        }
        double best[4], med[4];
        for (int k = 0; k < 4; k++) {
            qsort(t + k * reps, (size_t)reps, sizeof(double), cmp);
            best[k] = t[k * reps], med[k] = t[k * reps + reps / 2];
        }
        double flop = 2.0 * (double)bt * M * N * K;
        printf("{\"bench\":\"gemm_half\",\"case\":\"%s\",\"dtype\":\"bf16\",\"engine\":\"%s\","
               "\"outer\":%lld,\"batch\":%lld,\"ta\":%d,\"tb\":%d,\"M\":%lld,\"K\":%lld,\"N\":%lld,\"bias\":%d,"
               "\"act\":%d,\"threads\":%d,\"reps\":%d,\"widened_ms\":%.4f,\"half_ms\":%.4f,"
               "\"f32_ms\":%.4f,\"f32_openblas_ms\":%.4f,\"widened_median_ms\":%.4f,"
               "\"half_median_ms\":%.4f,\"f32_median_ms\":%.4f,\"f32_openblas_median_ms\":%.4f,"
               "\"half_gflops\":%.1f,\"f32_gflops\":%.1f,\"half_over_widened\":%.3f,"
               "\"ratio_to_f32\":%.3f,\"f32_over_openblas\":%.3f,\"max_ulp\":%.1f,"
               "\"cpu\":\"%s\"}\n",
               sh->name, hx_k_gemm_engine_name(native), (long long)sh->outer, (long long)sh->batch, sh->ta, sh->tb,
               (long long)M, (long long)K, (long long)N, sh->bias, sh->act, nt, reps,
               1e3 * best[0], 1e3 * best[1], 1e3 * best[2], 1e3 * best[3], 1e3 * med[0],
               1e3 * med[1], 1e3 * med[2], 1e3 * med[3], flop / best[1] / 1e9,
               flop / best[2] / 1e9, best[0] / best[1], best[2] / best[1], best[3] / best[2],
               max_ulp(c1, c2, nc), cpu);
        fflush(stdout);
        free(A), free(B), free(bias), free(C), free(a16), free(b16), free(bias16), free(c1);
        free(c2);
    }
    free(t);
    return 0;
}
