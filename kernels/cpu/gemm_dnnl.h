/* bf16 GEMM tiles through oneDNN's matmul primitive (gemm_dnnl.c), for
 * hx_k_gemm_half (gemm.c). Built where CMake found oneDNN (HX_HAVE_DNNL);
 * elsewhere hx__dnnl_bf16_usable() is false and gemm.c widens bf16 for
 * OpenBLAS as it does f16. */
#ifndef HX_GEMM_DNNL_H
#define HX_GEMM_DNNL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One thread's oneDNN state across the tiles of one GEMM: its stream and
 * its scratchpad buffer (grown as tiles need). Zero-initialised before the
 * first tile, released by hx__dnnl_thread_end. */
typedef struct hx__dnnl_thread {
    void *stream;
    void *scratch;
    size_t scratch_size;
} hx__dnnl_thread;

#ifdef HX_HAVE_DNNL
/* Whether oneDNN runs bf16 matmuls natively on this CPU (its effective
 * ISA has AVX512-BF16; AMX where present): decided once, thread-safe. */
bool hx__dnnl_bf16_usable(void);

/* C (m x n f32, row-major, ldc) = op(A) (m x K) op(B) (K x n), A and B
 * bf16 at leading dimensions lda and ldb (ta/tb: stored transposed), as
 * one single-threaded oneDNN matmul on the calling thread (whose OpenMP
 * nthreads must be 1): the same bits for the same tile shape, whatever
 * thread runs it. The primitive of each (ta, tb, m, n, K, lda, ldb, ldc)
 * is created once and cached (bounded; thread-safe). Returns 0, or -1
 * when oneDNN cannot create or run it (out of memory); C is then not
 * fully written. Requires hx__dnnl_bf16_usable(). */
int hx__dnnl_gemm_bf16(hx__dnnl_thread *t, int ta, int tb, int64_t m, int64_t n, int64_t K,
                       const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C,
                       int64_t ldc);

/* Releases t's stream and scratchpad. */
void hx__dnnl_thread_end(hx__dnnl_thread *t);
#else
static inline bool hx__dnnl_bf16_usable(void) { return false; }
#endif

#endif
