/* bf16 GEMM tiles through oneDNN's matmul primitive (gemm_dnnl.c), for
 * hx_k_gemm_half (gemm.c). Built where CMake found oneDNN (HX_HAVE_DNNL);
 * elsewhere hx__dnnl_bf16_usable() is false and gemm.c widens bf16 for
 * OpenBLAS as it does f16. */
#ifndef HX_GEMM_DNNL_H
#define HX_GEMM_DNNL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef HX_HAVE_DNNL
/* Whether oneDNN runs bf16 matmuls natively on this CPU (its effective
 * ISA has AVX512-BF16; AMX where present): decided once, thread-safe. */
bool hx__dnnl_bf16_usable(void);

/* C (m x n f32, row-major, ldc) = op(A) (m x K) op(B) (K x n), A and B
 * bf16 at leading dimensions lda and ldb (ta/tb: stored transposed), as
 * one single-threaded oneDNN matmul on the calling thread (whose OpenMP
 * nthreads must be 1): the same bits for the same tile shape, whatever
 * thread runs it. The primitive of each (ta, tb, m, n, K, lda, ldb, ldc)
 * is created once and cached (bounded; thread-safe); the calling thread's
 * stream, scratchpad and memory objects are kept for its later calls and
 * freed when it exits, or at process exit. Returns 0, or -1
 * when oneDNN cannot create or run it (out of memory); C is then not
 * fully written. Requires hx__dnnl_bf16_usable(). */
int hx__dnnl_gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t K, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float *C, int64_t ldc);

/* The threads whose state hx__dnnl_gemm_bf16 keeps now. */
int hx__dnnl_thread_states(void);
#else
static inline bool hx__dnnl_bf16_usable(void) { return false; }
static inline int hx__dnnl_thread_states(void) { return 0; }
#endif

#endif
