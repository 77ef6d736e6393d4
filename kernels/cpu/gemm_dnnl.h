/* bf16 and f32 GEMM tiles through oneDNN's matmul primitive
 * (gemm_dnnl.c), for gemm.c's ONEDNN engine. Built where CMake found
 * oneDNN (HX_HAVE_DNNL); elsewhere hx__dnnl_bf16_usable() is false and
 * gemm.c runs every tile through OpenBLAS (bf16 widened as f16 is). */
#ifndef HX_GEMM_DNNL_H
#define HX_GEMM_DNNL_H

#include <stdbool.h>
#include <stdint.h>

#ifdef HX_HAVE_DNNL
/* Whether oneDNN runs bf16 matmuls natively on this CPU (its effective
 * ISA has AVX512-BF16; AMX where present), the CPUs its f32 matmul was
 * measured on too: decided once, thread-safe. */
bool hx__dnnl_bf16_usable(void);

/* C (m x n f32, row-major, ldc) = op(A) (m x K) op(B) (K x n), A and B
 * bf16 at leading dimensions lda and ldb (ta/tb: stored transposed), as
 * one single-threaded oneDNN matmul on the calling thread (whose OpenMP
 * nthreads must be 1): the same bits for the same tile shape, whatever
 * thread runs it. The primitive of each (dtype, ta, tb, m, n, K, lda, ldb,
 * ldc) is created once and cached (bounded; thread-safe); the calling
 * thread's stream, scratchpad and memory objects are kept for its later
 * calls and freed when it exits, or at process exit. Returns 0, or -1
 * when oneDNN cannot create or run it (out of memory); C is then not
 * fully written. Requires hx__dnnl_bf16_usable(). */
int hx__dnnl_gemm_bf16(int ta, int tb, int64_t m, int64_t n, int64_t K, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float *C, int64_t ldc);

/* hx__dnnl_gemm_bf16 with A and B in f32 (oneDNN's f32 matmul: its own
 * order of the sums, not sgemm's). */
int hx__dnnl_gemm_f32(int ta, int tb, int64_t m, int64_t n, int64_t K, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc);

/* The threads whose state hx__dnnl_gemm_bf16 / _f32 keep now. */
int hx__dnnl_thread_states(void);
#else
static inline bool hx__dnnl_bf16_usable(void) { return false; }
static inline int hx__dnnl_thread_states(void) { return 0; }
#endif

#endif
