/* The f32 GEMM's rules (kernels/cpu/gemm.c) on every f32 GEMM of one GPT
 * training step: hx_k_gemm_f32 / hx_k_gemm_bias_act_f32 / hx_k_gemm_heads
 * as the GPT example calls them (shapes, transposes, bias and GELU,
 * attention read and written in (B,T,H,D)), cut into gemm.c's tiles, on
 * the OpenBLAS engine (every tile sgemm) and on the oneDNN engine under
 * each f32 rule (whole_n: oneDNN's f32 matmul for tiles with A not
 * transposed of GEMMs whose tiles span N; large: every tile with N and K
 * from 64; the others sgemm). Timed interleaved, REPS rounds of the three
 * in turn, so that all meet the same background load. One JSON object per
 * shape: the median of each in wall time and, at 1 thread, in the
 * thread's CPU time (all the work is on the calling thread then: what
 * other processes take of the core is not counted, so the figure holds on
 * a busy machine); "whole_n_speedup" and "large_speedup" the OpenBLAS
 * median over that rule's (> 1: oneDNN pays; 1 up to noise where the rule
 * sends no tile to oneDNN), likewise "..._cpu_speedup"; "per_step" how
 * many times a training step runs it. Then one per config: the step's
 * GEMM time under each (the medians times per_step, summed) and the
 * speedups. "rule" is the one this CPU gets by default.
 *
 *   bench_gemm_f32 [THREADS] [REPS] [CONFIG]   (defaults 2, 20, both:
 *                                              default or 4x256) */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/hx_kernels.h"
#include "cpu_model.h"

/* One GEMM of the step: C (M x N) = op(A) op(B) (+ bias, act), batch
 * matrices; with heads, attention's hx_k_gemm_heads over (B,T,H,D):
 * heads 1 (scores from q, k), 2 (p v into the output) or 3 (dk = ds^T q). */
typedef struct gemm_case {
    const char *name;
    int ta, tb;
    int64_t M, N, K;
    int bias, act; /* act: an hx_unary_op, or -1 */
    int heads;
    int per_step;
} gemm_case;

typedef struct config {
    const char *name;
    int64_t L, C, T, B, H, V;
} config;

/* the GPT example's two gpt-peer configs (bench/gpt_peer.sh); V: the
 * tiny Shakespeare characters */
static const config configs[] = {{"default", 2, 128, 64, 32, 4, 65},
                                 {"4x256", 4, 256, 128, 16, 4, 65}};

/* cfg's f32 GEMMs of one training step (forward, backward; what `hetex
 * gpt --dtype f32 --accelerator none` calls, recorded at its kernels):
 * per layer qkv, attention, proj, fc (+ GELU), fc2, their dX (x w^T) and
 * dW (x^T dy); attention's scores, p v and their gradients; the head. */
static int step_cases(const config *c, gemm_case *g)
{
    int64_t R = c->B * c->T, C = c->C, T = c->T, D = c->C / c->H, V = c->V;
    int L = (int)c->L, n = 0;
    g[n++] = (gemm_case){"qkv", 0, 0, R, 3 * C, C, 1, -1, 0, L};
    g[n++] = (gemm_case){"proj", 0, 0, R, C, C, 1, -1, 0, L};
    g[n++] = (gemm_case){"fc+gelu", 0, 0, R, 4 * C, C, 1, HX_UNARY_GELU, 0, L};
    g[n++] = (gemm_case){"fc2", 0, 0, R, C, 4 * C, 1, -1, 0, L};
    g[n++] = (gemm_case){"head", 0, 1, R, V, C, 0, -1, 0, 1};
    g[n++] = (gemm_case){"qkv.dx", 0, 1, R, C, 3 * C, 0, -1, 0, L};
    g[n++] = (gemm_case){"proj.dx", 0, 1, R, C, C, 0, -1, 0, L};
    g[n++] = (gemm_case){"fc.dx", 0, 1, R, C, 4 * C, 0, -1, 0, L};
    g[n++] = (gemm_case){"fc2.dx", 0, 1, R, 4 * C, C, 0, -1, 0, L};
    g[n++] = (gemm_case){"head.dx", 0, 0, R, C, V, 0, -1, 0, 1};
    g[n++] = (gemm_case){"qkv.dw", 1, 0, C, 3 * C, R, 0, -1, 0, L};
    g[n++] = (gemm_case){"proj.dw", 1, 0, C, C, R, 0, -1, 0, L};
    g[n++] = (gemm_case){"fc.dw", 1, 0, C, 4 * C, R, 0, -1, 0, L};
    g[n++] = (gemm_case){"fc2.dw", 1, 0, 4 * C, C, R, 0, -1, 0, L};
    g[n++] = (gemm_case){"head.dw", 1, 0, V, C, R, 0, -1, 0, 1};
    /* scores q k^T, and backward dp = dy v^T */
    g[n++] = (gemm_case){"att.qk", 0, 1, T, T, D, 0, -1, 1, 2 * L};
    /* p v, and backward dq = ds k */
    g[n++] = (gemm_case){"att.v", 0, 0, T, D, T, 0, -1, 2, 2 * L};
    /* dk = ds^T q, dv = p^T dy */
    g[n++] = (gemm_case){"att.dk", 1, 0, T, D, T, 0, -1, 3, 2 * L};
    return n;
}

/* g on the engine set, at nt threads: heads as the GPT example's
 * attention (per batch item one call over its H heads, (B,T,H,D) rows
 * H*D apart; scores and probabilities compact); returns nonzero on
 * failure. */
static int run(const config *c, const gemm_case *g, const float *A, const float *Bm,
               const float *bias, float *Cm, int nt)
{
    int64_t M = g->M, N = g->N, K = g->K, H = c->H, T = c->T, D = c->C / c->H, HD = H * D;
    switch (g->heads) {
    case 1: /* q, k in (B,T,H,D); scores (B,H,T,T) */
        return hx_k_gemm_heads(0, 1, c->B, H, M, N, K, A, HD, D, T * HD, Bm, HD, D, T * HD,
                               HX_K_F32, Cm, N, M * N, H * M * N, nt);
    case 2: /* p (B,H,T,T), v in (B,T,H,D); out in (B,T,H,D) */
        return hx_k_gemm_heads(0, 0, c->B, H, M, N, K, A, K, M * K, H * M * K, Bm, HD, D, T * HD,
                               HX_K_F32, Cm, HD, D, T * HD, nt);
    case 3: /* ds (B,H,T,T) transposed, q in (B,T,H,D); dk in (B,T,H,D) */
        return hx_k_gemm_heads(1, 0, c->B, H, M, N, K, A, M, K * M, H * K * M, Bm, HD, D, T * HD,
                               HX_K_F32, Cm, HD, D, T * HD, nt);
    default:
        break;
    }
    if (g->bias || g->act >= 0)
        hx_k_gemm_bias_act_f32(g->ta, g->tb, 1, M, N, K, A, g->ta ? M : K, 0, Bm, g->tb ? K : N,
                               0, g->bias ? bias : NULL, g->act, HX_K_F32, Cm, N, 0, nt);
    else
        hx_k_gemm_f32(g->ta, g->tb, 1, M, N, K, 1.0f, A, g->ta ? M : K, 0, Bm, g->tb ? K : N, 0,
                      0.0f, Cm, N, 0, nt);
    return 0;
}

static double thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The best and median of n times at t (sorted in place). */
static void best_median(double *t, int n, double *best, double *med)
{
    qsort(t, (size_t)n, sizeof(double), cmp);
    *best = t[0], *med = t[n / 2];
}


/* The elements of an operand of g: heads cases cover the whole batch. */
static int64_t elems(const config *c, const gemm_case *g, int64_t rows, int64_t cols)
{
    return (g->heads ? c->B * c->H : 1) * rows * cols;
}

/* "NAME_ms":x,"NAME_whole_n_ms":y,"NAME_large_ms":z,"whole_n_NAMEspeedup":..,
 * "large_NAMEspeedup":.., for the medians med[3] (openblas, whole_n, large). */
static void print_times(const char *sfx, const double med[3])
{
    printf("\"openblas%s_ms\":%.4f,\"whole_n%s_ms\":%.4f,\"large%s_ms\":%.4f,"
           "\"whole_n%s_speedup\":%.3f,\"large%s_speedup\":%.3f,",
           sfx, 1e3 * med[0], sfx, 1e3 * med[1], sfx, 1e3 * med[2], sfx, med[0] / med[1], sfx,
           med[0] / med[2]);
}

/* The engine and rule of variant k: OpenBLAS, oneDNN whole_n, oneDNN large. */
static void set_variant(int k)
{
    hx_k_gemm_set_engine(k ? HX_K_GEMM_ONEDNN : HX_K_GEMM_OPENBLAS);
    hx_k_gemm_set_f32_rule(k == 2 ? HX_K_GEMM_F32_LARGE : HX_K_GEMM_F32_WHOLE_N);
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 20;
    const char *only = argc > 3 ? argv[3] : NULL;
    if (nt < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_gemm_f32 [THREADS >= 1] [REPS >= 1] [default|4x256]\n");
        return 2;
    }
    char cpu[128];
    bench_cpu_model(cpu, sizeof cpu);
    hx_k_gemm_engine engine = hx_k_gemm_get_engine();
    hx_k_gemm_f32_rule rule = hx_k_gemm_get_f32_rule();
    if (hx_k_gemm_set_engine(HX_K_GEMM_ONEDNN) != HX_K_GEMM_ONEDNN) {
        fprintf(stderr, "bench_gemm_f32: skipped: no oneDNN engine here (built without "
                        "libdnnl-dev, or the CPU has no AVX512-BF16)\n");
        return 0;
    }
    /* per variant: wall times, then thread CPU times */
    double *t = malloc(sizeof(double) * 6 * (size_t)reps);
    if (!t) return 1;
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        const config *c = &configs[ci];
        if (only && strcmp(only, c->name) != 0) continue;
        gemm_case cases[32];
        int ncase = step_cases(c, cases);
        double step[6] = {0};
        for (int s = 0; s < ncase; s++) {
            const gemm_case *g = &cases[s];
            int64_t na = elems(c, g, g->M, g->K), nb = elems(c, g, g->K, g->N);
            int64_t nc = elems(c, g, g->M, g->N);
            float *A = malloc(sizeof(float) * na), *Bm = malloc(sizeof(float) * nb);
            float *bias = malloc(sizeof(float) * g->N), *Cm = malloc(sizeof(float) * nc);
            if (!A || !Bm || !bias || !Cm) {
                fprintf(stderr, "bench_gemm_f32: out of memory\n");
                return 1;
            }
            for (int64_t i = 0; i < na; i++) A[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
            for (int64_t i = 0; i < nb; i++) Bm[i] = (float)((i * 104729) % 2001 - 1000) / 8000.0f;
            for (int64_t i = 0; i < g->N; i++) bias[i] = (float)(i % 17) / 17.0f - 0.5f;
            for (int r = -1; r < reps; r++) /* round -1: warm-up (oneDNN's primitives made) */
                for (int k = 0; k < 3; k++) {
                    set_variant(k);
                    double c0 = thread_seconds(), t0 = omp_get_wtime();
                    int rc = run(c, g, A, Bm, bias, Cm, nt);
                    double t1 = omp_get_wtime(), c1 = thread_seconds();
                    if (rc) {
                        fprintf(stderr, "bench_gemm_f32: a GEMM failed (out of memory)\n");
                        return 1;
                    }
                    if (r >= 0) t[k * reps + r] = t1 - t0, t[(3 + k) * reps + r] = c1 - c0;
                }
            double best[6], med[6];
            for (int k = 0; k < 6; k++) {
                best_median(t + k * reps, reps, &best[k], &med[k]);
                step[k] += g->per_step * med[k];
            }
            double flop = 2.0 * (double)(g->heads ? c->B * c->H : 1) * g->M * g->N * g->K;
            printf("{\"bench\":\"gemm_f32\",\"config\":\"%s\",\"case\":\"%s\",\"ta\":%d,"
                   "\"tb\":%d,\"batch\":%lld,\"M\":%lld,\"N\":%lld,\"K\":%lld,\"bias\":%d,"
                   "\"act\":%d,\"per_step\":%d,\"threads\":%d,\"reps\":%d,\"openblas_gflops\":%.1f,",
                   c->name, g->name, g->ta, g->tb, (long long)(g->heads ? c->B * c->H : 1),
                   (long long)g->M, (long long)g->N, (long long)g->K, g->bias, g->act,
                   g->per_step, nt, reps, flop / med[0] / 1e9);
            print_times("", med);
            if (nt == 1) print_times("_cpu", med + 3);
            printf("\"rule\":\"%s\",\"engine\":\"%s\",\"cpu\":\"%s\"}\n",
                   hx_k_gemm_f32_rule_name(rule), hx_k_gemm_engine_name(engine), cpu);
            fflush(stdout);
            free(A), free(Bm), free(bias), free(Cm);
        }
        printf("{\"bench\":\"gemm_f32\",\"config\":\"%s\",\"case\":\"step\",\"threads\":%d,"
               "\"reps\":%d,", c->name, nt, reps);
        print_times("", step);
        if (nt == 1) print_times("_cpu", step + 3);
        printf("\"rule\":\"%s\",\"engine\":\"%s\",\"cpu\":\"%s\"}\n",
               hx_k_gemm_f32_rule_name(rule), hx_k_gemm_engine_name(engine), cpu);
    }
    hx_k_gemm_set_engine(engine);
    hx_k_gemm_set_f32_rule(rule);
    free(t);
    return 0;
}
