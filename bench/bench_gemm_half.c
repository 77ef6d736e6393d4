/* The 16-bit GEMM (kernels/cpu/gemm.c) on the GPT example's shapes, bf16:
 * hx_k_gemm_half (B and the bias widened whole, A per row panel, C rounded
 * tile by tile) against the path it replaced (A, B and the bias widened
 * whole into f32 scratch with hx_k_cast, hx_k_gemm_bias_act_f32 rounding
 * through bf16, C rounded with hx_k_cast: the same bits) and against the
 * same GEMM on f32 data with no conversion at all (the ceiling: widening
 * and rounding can at best cost nothing). Timed interleaved, REPS rounds
 * of the three in turn, so that all meet the same background load; best
 * and median of each. One JSON object per shape: "half_over_widened" is
 * the widened path's best time over hx_k_gemm_half's (> 1: the panel path
 * pays), "ratio_to_f32" the f32 GEMM's best over hx_k_gemm_half's (1: the
 * 16-bit storage is free), "bitwise_equal" the two 16-bit results.
 *
 *   bench_gemm_half [THREADS] [REPS]   (defaults 2 and 30) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/hx_kernels.h"
#include "cpu_model.h"

typedef struct shape {
    const char *name;
    int ta, tb;
    int64_t M, K, N;
    int bias, act; /* act: an hx_unary_op, or -1 */
} shape;

/* B*T = 2048 rows. default: 2 x 128 wide (fc 128 -> 512, proj 512 -> 128,
 * qkv 128 -> 384), training: forward x w + b, backward dx = dy w^T (tb)
 * and dw = x^T dy (ta); wide: C 384 -> 1536 and back. */
static const shape shapes[] = {
    {"default.fc", 0, 0, 2048, 128, 512, 1, -1},
    {"default.fc+gelu", 0, 0, 2048, 128, 512, 1, HX_UNARY_GELU},
    {"default.proj", 0, 0, 2048, 512, 128, 1, -1},
    {"default.qkv", 0, 0, 2048, 128, 384, 1, -1},
    {"default.fc.dx", 0, 1, 2048, 512, 128, 0, -1},
    {"default.fc.dw", 1, 0, 128, 2048, 512, 0, -1},
    {"wide.fc", 0, 0, 2048, 384, 1536, 1, -1},
    {"wide.proj", 0, 0, 2048, 1536, 384, 1, -1},
    {"wide.fc.dx", 0, 1, 2048, 1536, 384, 0, -1},
    {"wide.fc.dw", 1, 0, 384, 2048, 1536, 0, -1},
};

static double now(void) { return omp_get_wtime(); }

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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
    double *t = malloc(sizeof(double) * 3 * (size_t)reps);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        int64_t M = sh->M, K = sh->K, N = sh->N, na = M * K, nb = K * N, nc = M * N;
        int64_t lda = sh->ta ? M : K, ldb = sh->tb ? K : N;
        float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb);
        float *bias = malloc(sizeof(float) * N), *C = malloc(sizeof(float) * nc);
        float *wa = malloc(sizeof(float) * na), *wb = malloc(sizeof(float) * nb);
        float *wbias = malloc(sizeof(float) * N), *wc = malloc(sizeof(float) * nc);
        uint16_t *a16 = malloc(2 * na), *b16 = malloc(2 * nb), *bias16 = malloc(2 * N);
        uint16_t *c1 = malloc(2 * nc), *c2 = malloc(2 * nc);
        if (!t || !A || !B || !bias || !C || !wa || !wb || !wbias || !wc || !a16 || !b16 ||
            !bias16 || !c1 || !c2) {
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
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            hx_k_cast(wa, HX_K_F32, a16, HX_K_BF16, na, nt);
            hx_k_cast(wb, HX_K_F32, b16, HX_K_BF16, nb, nt);
            if (sh->bias) hx_k_cast(wbias, HX_K_F32, bias16, HX_K_BF16, N, nt);
            hx_k_gemm_bias_act_f32(sh->ta, sh->tb, 1, M, N, K, wa, lda, 0, wb, ldb, 0,
                                   sh->bias ? wbias : NULL, sh->act, HX_K_BF16, wc, N, 0, nt);
            hx_k_cast(c1, HX_K_BF16, wc, HX_K_F32, nc, nt);
            double t1 = now();
            if (hx_k_gemm_half(sh->ta, sh->tb, 1, M, N, K, a16, lda, 0, b16, ldb, 0,
                               sh->bias ? bias16 : NULL, sh->act, HX_K_BF16, c2, N, 0, nt)) {
                fprintf(stderr, "bench_gemm_half: out of memory\n");
                return 1;
            }
            double t2 = now();
            hx_k_gemm_bias_act_f32(sh->ta, sh->tb, 1, M, N, K, A, lda, 0, B, ldb, 0, fb, sh->act,
                                   HX_K_F32, C, N, 0, nt);
            double t3 = now();
            t[r] = t1 - t0, t[reps + r] = t2 - t1, t[2 * reps + r] = t3 - t2;
        }
        double best[3], med[3];
        for (int k = 0; k < 3; k++) {
            qsort(t + k * reps, (size_t)reps, sizeof(double), cmp);
            best[k] = t[k * reps], med[k] = t[k * reps + reps / 2];
        }
        int same = !memcmp(c1, c2, 2 * (size_t)nc);
        printf("{\"bench\":\"gemm_half\",\"case\":\"%s\",\"dtype\":\"bf16\",\"ta\":%d,\"tb\":%d,"
               "\"M\":%lld,\"K\":%lld,\"N\":%lld,\"bias\":%d,\"act\":%d,\"threads\":%d,"
               "\"reps\":%d,\"widened_ms\":%.4f,\"half_ms\":%.4f,\"f32_ms\":%.4f,"
               "\"widened_median_ms\":%.4f,\"half_median_ms\":%.4f,\"f32_median_ms\":%.4f,"
               "\"half_over_widened\":%.3f,\"ratio_to_f32\":%.3f,\"bitwise_equal\":%s,"
               "\"cpu\":\"%s\"}\n",
               sh->name, sh->ta, sh->tb, (long long)M, (long long)K, (long long)N, sh->bias,
               sh->act, nt, reps, 1e3 * best[0], 1e3 * best[1], 1e3 * best[2], 1e3 * med[0],
               1e3 * med[1], 1e3 * med[2], best[0] / best[1], best[2] / best[1],
               same ? "true" : "false", cpu);
        fflush(stdout);
        free(A), free(B), free(bias), free(C), free(wa), free(wb), free(wbias), free(wc);
        free(a16), free(b16), free(bias16), free(c1), free(c2);
        if (!same) return 1;
    }
    free(t);
    return 0;
}
