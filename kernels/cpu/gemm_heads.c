/* Batched GEMM over two strides (b, then h): attention's matrices read or
 * written in place of a head-swap permute, (B,T,H,D) seen as B x H
 * matrices of T x D whose rows are H*D apart, heads D apart and batches
 * T*H*D apart: no single batch stride steps through them. Each b is one
 * hx_k_gemm_f32 / hx_k_gemm_half call over its H matrices (which gemm.c
 * cuts into tiles from the shapes alone, so its bits do not depend on the
 * thread count); with at least two b per thread the threads take whole
 * calls from a shared counter, one thread a call, which is one parallel
 * region a GEMM instead of one per b. */
#include <stdbool.h>
#include <stdint.h>

#include "hx_kinternal.h"

#define HEADS_PARALLEL_MIN_MNK (64 * 64 * 64) /* less work than this stays on one thread */

typedef struct heads_args {
    int ta, tb;
    int64_t batch, M, N, K, lda, sa, oa, ldb, sb, ob, ldc, sc, oc;
    const char *A, *B;
    char *C;
    hx_kdtype dt;
    size_t es;
} heads_args;

/* GEMM b of g on nthreads threads; 0, or -1 (hx_k_gemm_half: out of memory for
 * its scratch or a oneDNN primitive) */
static int heads_one(const heads_args *g, int64_t b, int nthreads)
{
    const void *A = g->A + (size_t)(b * g->oa) * g->es, *B = g->B + (size_t)(b * g->ob) * g->es;
    void *C = g->C + (size_t)(b * g->oc) * g->es;
    if (g->dt == HX_K_F32) {
        hx_k_gemm_f32(g->ta, g->tb, g->batch, g->M, g->N, g->K, 1.0f, A, g->lda, g->sa, B,
                      g->ldb, g->sb, 0.0f, C, g->ldc, g->sc, nthreads);
        return 0;
    }
    return hx_k_gemm_half(g->ta, g->tb, g->batch, g->M, g->N, g->K, A, g->lda, g->sa, B, g->ldb,
                          g->sb, NULL, -1, g->dt, C, g->ldc, g->sc, nthreads);
}

int hx_k_gemm_heads(int trans_a, int trans_b, int64_t outer, int64_t batch, int64_t M, int64_t N,
                    int64_t K, const void *A, int64_t lda, int64_t stride_a, int64_t outer_a,
                    const void *B, int64_t ldb, int64_t stride_b, int64_t outer_b, hx_kdtype dt,
                    void *C, int64_t ldc, int64_t stride_c, int64_t outer_c, int nthreads)
{
    heads_args g = {trans_a, trans_b, batch, M, N, K, lda, stride_a, outer_a, ldb, stride_b,
                    outer_b, ldc, stride_c, outer_c, A, B, C, dt,
                    dt == HX_K_F32 ? sizeof(float) : sizeof(uint16_t)};
    bool by_b = nthreads > 1 && outer >= 2 * nthreads &&
                outer * batch * M * N * (K ? K : 1) >= HEADS_PARALLEL_MIN_MNK;
    int failed = 0;
    if (!by_b) {
        for (int64_t b = 0; b < outer && !failed; b++) failed = heads_one(&g, b, nthreads);
        return failed;
    }
    int64_t next = 0;
#pragma omp parallel num_threads(nthreads) reduction(| : failed)
    for (;;) {
        int64_t b = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
        if (b >= outer) break;
        failed |= heads_one(&g, b, 1);
    }
    return failed ? -1 : 0;
}
