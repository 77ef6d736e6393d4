/* Host fusion's GEMM epilogue (kernels/cpu/gemm.c) on the GPT example's
 * linear shapes: the fused kernel (hx_k_gemm_bias_act_f32: the bias and
 * activation applied to each tile right after its GEMM) against the chain
 * it replaces (hx_k_gemm_f32, hx_k_bias_add_f32, hx_k_unary_f32, three
 * passes, bitwise the same result) and against the GEMM alone (the
 * ceiling: an epilogue can at best cost nothing). Timed interleaved, best
 * of REPS each, so that all three meet the same background load. One JSON
 * object per shape and activation: "fused_over_chain" is the chain's time
 * over the fused kernel's (> 1: fusion pays), "ratio_to_gemm" the GEMM's
 * time over the fused kernel's (1: the epilogue is free).
 *
 *   bench_fusion [THREADS] [REPS]   (defaults 2 and 30) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/hx_kernels.h"
#include "cpu_model.h"

typedef struct shape {
    const char *name;
    int64_t M, K, N;
    int act; /* an hx_unary_op, or -1 */
} shape;

/* B*T rows: the default config (2 x 128 wide, context 64, batch 32) and
 * 4 x 256, context 128, batch 16; fc is C -> 4C with gelu (inference's
 * fusion; in training gelu stays apart), proj 4C -> C and qkv C -> 3C with
 * the bias only. */
static const shape shapes[] = {
    {"default.fc+gelu", 2048, 128, 512, HX_UNARY_GELU},
    {"default.fc", 2048, 128, 512, -1},
    {"default.fc_proj", 2048, 512, 128, -1},
    {"default.qkv", 2048, 128, 384, -1},
    {"4x256.fc+gelu", 2048, 256, 1024, HX_UNARY_GELU},
    {"4x256.fc", 2048, 256, 1024, -1},
    {"4x256.fc_proj", 2048, 1024, 256, -1},
    {"4x256.qkv", 2048, 256, 768, -1},
};

static double now(void) { return omp_get_wtime(); }

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 30;
    if (nt < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_fusion [THREADS >= 1] [REPS >= 1]\n");
        return 2;
    }
    char cpu[128];
    bench_cpu_model(cpu, sizeof cpu);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        int64_t M = sh->M, K = sh->K, N = sh->N;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float *bias = malloc(sizeof(float) * N), *C1 = malloc(sizeof(float) * M * N);
        float *C2 = malloc(sizeof(float) * M * N);
        if (!A || !B || !bias || !C1 || !C2) {
            fprintf(stderr, "bench_fusion: out of memory\n");
            return 1;
        }
        for (int64_t i = 0; i < M * K; i++) A[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
        for (int64_t i = 0; i < K * N; i++) B[i] = (float)((i * 104729) % 2001 - 1000) / 8000.0f;
        for (int64_t i = 0; i < N; i++) bias[i] = (float)(i % 17) / 17.0f - 0.5f;
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            hx_k_gemm_f32(0, 0, 1, M, N, K, 1.0f, A, K, 0, B, N, 0, 0.0f, C1, N, 0, nt);
            double t1 = now();
            hx_k_bias_add_f32(C1, C1, bias, M, N, nt);
            if (sh->act >= 0) hx_k_unary_f32((hx_unary_op)sh->act, C1, C1, M * N, nt);
            double t2 = now();
            hx_k_gemm_bias_act_f32(0, 0, 1, M, N, K, A, K, 0, B, N, 0, bias, sh->act, HX_K_F32,
                                   C2, N, 0, nt);
            double t3 = now();
            if (t1 - t0 < best[0]) best[0] = t1 - t0;
            if (t2 - t0 < best[1]) best[1] = t2 - t0;
            if (t3 - t2 < best[2]) best[2] = t3 - t2;
        }
        int same = !memcmp(C1, C2, sizeof(float) * M * N);
        printf("{\"bench\":\"fusion\",\"case\":\"%s\",\"M\":%lld,\"K\":%lld,\"N\":%lld,"
               "\"threads\":%d,\"reps\":%d,\"gemm_ms\":%.4f,\"chain_ms\":%.4f,\"fused_ms\":%.4f,"
               "\"fused_over_chain\":%.3f,\"ratio_to_gemm\":%.3f,\"bitwise_equal\":%s,"
               "\"cpu\":\"%s\"}\n",
               sh->name, (long long)M, (long long)K, (long long)N, nt, reps, 1e3 * best[0],
               1e3 * best[1], 1e3 * best[2], best[1] / best[2], best[0] / best[2],
               same ? "true" : "false", cpu);
        fflush(stdout);
        free(A), free(B), free(bias), free(C1), free(C2);
        if (!same) return 1;
    }
    return 0;
}
