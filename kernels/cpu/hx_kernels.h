/* hetex CPU kernels: plain functions on pointers and sizes.
 *
 * Kernels never see a graph. Shapes are row-major; every kernel takes its
 * thread count as an argument (nthreads >= 1) and never relies on OpenMP
 * defaults. Kernels that can meet bad data (ids, labels) return 0 on success
 * and -1 on failure, writing the offending position to *bad_pos.
 * Tiny inputs run on the calling thread: spreading a 16-element op over
 * threads costs more than the op.
 */
#ifndef HX_KERNELS_H
#define HX_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define HX_K_MAX_DIMS 8

/* Below this many elements an elementwise kernel stays on one thread. */
#define HX_K_PARALLEL_MIN 32768

/* Same numbering as hx_dtype in include/hetex.h (checked where both meet). */
typedef enum hx_kdtype { HX_K_F32 = 0, HX_K_F16, HX_K_BF16, HX_K_I32, HX_K_I64 } hx_kdtype;

size_t hx_k_dtype_size(hx_kdtype dt);

/* ---- elementwise ------------------------------------------------------- */

typedef enum hx_binary_op { HX_BINARY_ADD, HX_BINARY_SUB, HX_BINARY_MUL, HX_BINARY_DIV } hx_binary_op;

/* out (contiguous, `shape`) = a op b, with a and b read through element
 * strides per output dimension (stride 0 on a broadcast dimension). */
void hx_k_binary_f32(hx_binary_op op, float *out, const float *a, const int64_t *a_strides,
                     const float *b, const int64_t *b_strides, const int64_t *shape, int ndim,
                     int nthreads);

typedef enum hx_unary_op {
    HX_UNARY_RELU, HX_UNARY_GELU, HX_UNARY_SIGMOID, HX_UNARY_TANH,
    HX_UNARY_EXP, HX_UNARY_LOG, HX_UNARY_SQRT, HX_UNARY_GELU_ERF
} hx_unary_op;

/* y[i] = f(x[i]). GELU is the tanh approximation (GPT-2), GELU_ERF the
 * exact x Phi(x) (BERT, PyTorch's default). */
void hx_k_unary_f32(hx_unary_op op, float *y, const float *x, int64_t n, int nthreads);

/* dx[i] = dy[i] * f'(.) where relu and both gelus read x, sigmoid and tanh read
 * y = f(x); exp, log and sqrt are differentiated by the graph with
 * elementwise ops and have no backward kernel. */
void hx_k_unary_backward_f32(hx_unary_op op, float *dx, const float *dy, const float *x,
                             const float *y, int64_t n, int nthreads);

/* y = s * x */
void hx_k_scale_f32(float *y, const float *x, float s, int64_t n, int nthreads);

/* y (rows, n) = x (rows, n) + b (n) */
void hx_k_bias_add_f32(float *y, const float *x, const float *b, int64_t rows, int64_t n,
                       int nthreads);

/* GELU (tanh form) that keeps its derivative for the backward: y =
 * gelu(x) and d (n, f32 whatever dt is) = gelu'(x), from one sigmoid: y is
 * the bits of hx_k_unary_f32 (dt f32) or of its 16-bit chain
 * (hx_k_unary_half), d those that hx_k_unary_backward_f32 multiplies dy by.
 * x and y hold dt (f32, f16 or bf16). */
void hx_k_gelu_save(void *y, float *d, const void *x, hx_kdtype dt, int64_t n, int nthreads);
/* dx = dy * d, d from hx_k_gelu_save of x: bitwise hx_k_unary_backward_f32
 * (HX_UNARY_GELU) of dy and x (dt f32), or hx_k_unary_backward_half of them
 * (f16, bf16); dx and dy hold dt. */
void hx_k_gelu_backward_saved(void *dx, const void *dy, const float *d, hx_kdtype dt, int64_t n,
                              int nthreads);

/* The kernels above on 16-bit storage: every pointer holds dt (HX_K_F16 or
 * HX_K_BF16), arithmetic is f32, each output rounded once (nearest even):
 * bitwise hx_k_cast of the inputs to f32, the f32 kernel, hx_k_cast of its
 * output to dt, at any thread count, with no f32 copy of a tensor (blocks of
 * 512 elements widened on the stack). They do not fail. */
void hx_k_binary_half(hx_binary_op op, void *out, const void *a, const int64_t *a_strides,
                      const void *b, const int64_t *b_strides, const int64_t *shape, int ndim,
                      hx_kdtype dt, int nthreads);
void hx_k_unary_half(hx_unary_op op, void *y, const void *x, hx_kdtype dt, int64_t n,
                     int nthreads);
void hx_k_unary_backward_half(hx_unary_op op, void *dx, const void *dy, const void *x,
                              const void *y, hx_kdtype dt, int64_t n, int nthreads);
void hx_k_scale_half(void *y, const void *x, float s, hx_kdtype dt, int64_t n, int nthreads);
void hx_k_bias_add_half(void *y, const void *x, const void *b, hx_kdtype dt, int64_t rows,
                        int64_t n, int nthreads);

/* ---- rows: softmax, log-softmax, layernorm (last axis) ------------------ */

void hx_k_softmax_forward_f32(float *y, const float *x, int64_t rows, int64_t n, int nthreads);
/* dx = y * (dy - sum(dy * y)) */
void hx_k_softmax_backward_f32(float *dx, const float *dy, const float *y, int64_t rows,
                               int64_t n, int nthreads);
void hx_k_log_softmax_forward_f32(float *y, const float *x, int64_t rows, int64_t n,
                                  int nthreads);
/* dx = dy - exp(y) * sum(dy) */
void hx_k_log_softmax_backward_f32(float *dx, const float *dy, const float *y, int64_t rows,
                                   int64_t n, int nthreads);

/* y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps), biased var. */
void hx_k_layernorm_forward_f32(float *y, const float *x, const float *gamma,
                                const float *beta, float eps, int64_t rows, int64_t n,
                                int nthreads);
/* s = x + res, then y = layernorm(s) as above, row by row in one pass over
 * threads (each row's sum written, then normalised while in cache):
 * bitwise hx_k_binary_f32's add then hx_k_layernorm_forward_f32, at any
 * thread count. s may be x or res; y must not overlap s, x or res. */
void hx_k_add_layernorm_f32(float *s, float *y, const float *x, const float *res,
                            const float *gamma, const float *beta, float eps, int64_t rows,
                            int64_t n, int nthreads);
/* The same for a chain stored in dt (HX_K_F16 or HX_K_BF16; every pointer
 * holds dt): s = x + res summed in f32 and rounded to dt, then y = the
 * layernorm of that rounded sum in f32, rounded to dt: bitwise the 16-bit
 * chain whose add and layernorm each widen their inputs and round their
 * output, at any thread count. s may be x or res; y must not overlap s, x
 * or res. Returns 0, or -1 when its f32 row scratch ((2 + 2 nthreads) n
 * floats) cannot be allocated (nothing written then). */
int hx_k_add_layernorm_half(void *s, void *y, const void *x, const void *res, const void *gamma,
                            const void *beta, hx_kdtype dt, float eps, int64_t rows, int64_t n,
                            int nthreads);
/* dx for the layernorm above (mean and rstd recomputed from x). */
void hx_k_layernorm_backward_x_f32(float *dx, const float *dy, const float *x,
                                   const float *gamma, float eps, int64_t rows, int64_t n,
                                   int nthreads);
/* dgamma (n) = sum over rows of dy * xhat. Deterministic for a thread count. */
void hx_k_layernorm_backward_gamma_f32(float *dgamma, const float *dy, const float *x,
                                       float eps, int64_t rows, int64_t n, int nthreads);

/* The row kernels above on 16-bit storage: every pointer (gamma, beta and
 * dgamma too) holds dt (HX_K_F16 or HX_K_BF16); each row's inputs are
 * widened exactly into per-thread f32 row buffers, the f32 row kernel runs
 * on them and its output is rounded once (dgamma: summed in f32, rounded at
 * the end): bitwise hx_k_cast of the inputs, the f32 kernel, hx_k_cast of
 * its output, at any thread count. Each returns 0, or -1 when its f32 row
 * scratch (a few rows per thread; the backward of gamma also 2 floats per
 * row) cannot be allocated (nothing written then). */
int hx_k_softmax_forward_half(void *y, const void *x, hx_kdtype dt, int64_t rows, int64_t n,
                              int nthreads);
int hx_k_softmax_backward_half(void *dx, const void *dy, const void *y, hx_kdtype dt,
                               int64_t rows, int64_t n, int nthreads);
int hx_k_log_softmax_forward_half(void *y, const void *x, hx_kdtype dt, int64_t rows,
                                  int64_t n, int nthreads);
int hx_k_log_softmax_backward_half(void *dx, const void *dy, const void *y, hx_kdtype dt,
                                   int64_t rows, int64_t n, int nthreads);
int hx_k_layernorm_forward_half(void *y, const void *x, const void *gamma, const void *beta,
                                hx_kdtype dt, float eps, int64_t rows, int64_t n, int nthreads);
int hx_k_layernorm_backward_x_half(void *dx, const void *dy, const void *x, const void *gamma,
                                   hx_kdtype dt, float eps, int64_t rows, int64_t n,
                                   int nthreads);
int hx_k_layernorm_backward_gamma_half(void *dgamma, const void *dy, const void *x, hx_kdtype dt,
                                       float eps, int64_t rows, int64_t n, int nthreads);

/* ---- reductions and data movement ---------------------------------------- */

/* out = sum of x over the dimensions where reduce[d] != 0; out holds the
 * shape of x with those dimensions removed (row-major). Accumulates in fp32
 * in a fixed order, so the result does not depend on nthreads. */
void hx_k_reduce_sum_f32(float *out, const float *x, const int64_t *shape, int ndim,
                         const uint8_t *reduce, int nthreads);

/* Copies `shape` elements of elem_size bytes: element (i0..i{ndim-1}) goes
 * from x + sum(i_k * x_strides[k]) to out + sum(i_k * out_strides[k])
 * (strides in elements). Serves permute, broadcast, slice and concat. */
void hx_k_copy_strided(void *out, const int64_t *out_strides, const void *x,
                       const int64_t *x_strides, const int64_t *shape, int ndim,
                       size_t elem_size, int nthreads);

/* Converts n elements between any two of f32, f16, bf16, i32, i64.
 * f32 -> f16/bf16 rounds to nearest even and keeps NaN a NaN; uses F16C /
 * AVX-512 where the CPU has them (chosen at run time). */
void hx_k_cast(void *y, hx_kdtype ydt, const void *x, hx_kdtype xdt, int64_t n, int nthreads);

/* Sum of x[i]^2 in double over n elements of f32, f16 or bf16: finite
 * exactly when every x[i] is, and the same bits at any thread count. */
double hx_k_sumsq(const void *x, hx_kdtype dt, int64_t n, int nthreads);

/* ---- matmul (OpenBLAS, oneDNN) -------------------------------------------- */

/* C (M,N) = alpha * op(A) op(B) + beta * C for `batch` matrices at the given
 * element strides (stride 0 reuses one matrix for every batch). op(A) is
 * (M,K), op(B) is (K,N); lda/ldb/ldc are row-major leading dimensions.
 * The same bits at any thread count. On the ONEDNN engine
 * (hx_k_gemm_get_engine) the tiles of the f32 rule (hx_k_gemm_get_f32_rule:
 * alpha 1, beta 0, at least 64 columns, ...) are summed by oneDNN's f32
 * matmul, in its order (within the same bound of the exact sum, not
 * sgemm's bits); other tiles, and all on the OPENBLAS engine, by
 * OpenBLAS's sgemm. Which library runs a tile follows from its shape (and
 * the CPU's rule), never from its leading dimensions. */
void hx_k_gemm_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, int64_t stride_a,
                   const float *B, int64_t ldb, int64_t stride_b, float beta, float *C,
                   int64_t ldc, int64_t stride_c, int nthreads);

/* The GEMM above (alpha 1, beta 0), then C += bias (N) on every row (NULL:
 * none), then C = act(C) (an hx_unary_op; -1: none), applied to each tile
 * of C on the thread that computed it, right after its GEMM: bitwise
 * hx_k_gemm_f32, then hx_k_bias_add_f32, then hx_k_unary_f32, at any
 * thread count. round HX_K_F16 or HX_K_BF16: C is rounded to that dtype
 * (and back) after the GEMM, after the bias and after the activation, so
 * that C holds bitwise what the same three ops stored in that dtype give
 * (each rounds its output once); HX_K_F32: no rounding. */
void hx_k_gemm_bias_act_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N,
                            int64_t K, const float *A, int64_t lda, int64_t stride_a,
                            const float *B, int64_t ldb, int64_t stride_b, const float *bias,
                            int act, hx_kdtype round, float *C, int64_t ldc, int64_t stride_c,
                            int nthreads);

/* hx_k_gemm_bias_act_f32 with A, B, bias and C stored in dt (HX_K_F16 or
 * HX_K_BF16; strides and leading dimensions in elements): the products
 * summed in f32, C rounded to dt after the GEMM, the bias and the
 * activation (bias NULL and act -1: a plain matmul, C rounded once), the
 * same bits at any thread count. The epilogue is bitwise that of a C
 * computed without it, widened, then hx_k_bias_add_f32 and hx_k_unary_f32
 * each rounded through dt. Two paths: widened (f16 always, bf16 on the
 * OPENBLAS engine, hx_k_gemm_get_engine): bitwise widening A, B and the
 * bias exactly, running hx_k_gemm_bias_act_f32 (on the same engine) with
 * round dt and rounding C; it widens B and the bias whole but A one row
 * panel per thread and rounds C tile by tile (no f32 copy of A or C).
 * Native (bf16 on the ONEDNN engine, K > 0): the tiles are
 * oneDNN matmuls on A and B as stored (AMX / AVX512-BF16), summed in its
 * order, so not bitwise the widened path; only the bias is widened; its
 * dot-product instructions count denormal inputs as zero and flush
 * denormal sums to zero (the widened path keeps both).
 * C must not overlap A, B or the bias. Returns 0, or -1 when the f32
 * scratch (widened: B, the bias and per thread up to 512 (K + 512)
 * floats; native: the bias and per thread a 512 x 512 tile) cannot be
 * allocated (C not written then) or oneDNN cannot create or run a
 * primitive (out of memory; C partly written then). */
int hx_k_gemm_half(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                   const void *A, int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                   int64_t stride_b, const void *bias, int act, hx_kdtype dt, void *C,
                   int64_t ldc, int64_t stride_c, int nthreads);

/* The library that computes hx_k_gemm_half's bf16 products and the f32
 * GEMMs of oneDNN's rule (hx_k_gemm_f32): ONEDNN where hetex was built
 * with oneDNN (libdnnl-dev found by CMake) and oneDNN runs bf16 natively on
 * this CPU (AVX512-BF16 or AMX), unless the environment has
 * HX_GEMM=openblas; else OPENBLAS (every f32 product through sgemm, bf16
 * widened to f32). Read once. */
typedef enum hx_k_gemm_engine { HX_K_GEMM_OPENBLAS = 0, HX_K_GEMM_ONEDNN = 1 } hx_k_gemm_engine;
hx_k_gemm_engine hx_k_gemm_get_engine(void);
/* Sets the engine of later GEMMs (tests and benchmarks compare both in one
 * process); ONEDNN where it is not available gives OPENBLAS. Returns the
 * engine now in effect. Not while a GEMM runs. */
hx_k_gemm_engine hx_k_gemm_set_engine(hx_k_gemm_engine engine);
/* "onednn" or "openblas" */
const char *hx_k_gemm_engine_name(hx_k_gemm_engine engine);
/* Which f32 tiles the ONEDNN engine computes with oneDNN's f32 matmul
 * (each a oneDNN order of the sums, not sgemm's; gemm.c's top comment has
 * the measurements): WHOLE_N, a tile with A not transposed and at least
 * 64 columns of a GEMM whose tiles span all of N (N up to 512); LARGE, any
 * tile with at least 64 columns and K at least 64. Alpha 1 and beta 0 in
 * both; the others through sgemm. The default: LARGE on AMD CPUs
 * (measured on Zen 4), WHOLE_N on the others (measured on Intel Sapphire
 * Rapids). Read once; the setter is for tests and benchmarks (not while a
 * GEMM runs). */
typedef enum hx_k_gemm_f32_rule {
    HX_K_GEMM_F32_WHOLE_N = 0,
    HX_K_GEMM_F32_LARGE = 1
} hx_k_gemm_f32_rule;
hx_k_gemm_f32_rule hx_k_gemm_get_f32_rule(void);
void hx_k_gemm_set_f32_rule(hx_k_gemm_f32_rule rule);
/* "whole_n" or "large" */
const char *hx_k_gemm_f32_rule_name(hx_k_gemm_f32_rule rule);

/* The threads now holding ONEDNN state: each thread that ran a oneDNN tile
 * keeps its stream, scratchpad and memory objects for its later GEMMs
 * until it exits (then they are freed; those of threads still alive at
 * process exit, then). 0 without oneDNN. Thread-safe. */
int hx_k_gemm_thread_states(void);

/* `outer` GEMMs over two strides (gemm_heads.c): GEMM b is hx_k_gemm_f32
 * (alpha 1, beta 0; dt HX_K_F32) or hx_k_gemm_half (no bias, no activation;
 * dt HX_K_F16 or HX_K_BF16) of `batch` matrices at A + b * outer_a, B + b *
 * outer_b and C + b * outer_c elements (strides and leading dimensions in
 * elements, as theirs), so bitwise those calls at any thread count; the
 * threads take whole calls where there are at least two a thread. For
 * attention's heads: (B,T,H,D) read as B x H matrices of T x D (lda H*D,
 * stride_a D, outer_a T*H*D). Returns 0, or -1 when a 16-bit call's f32
 * scratch cannot be allocated (that call's C not written). */
int hx_k_gemm_heads(int trans_a, int trans_b, int64_t outer, int64_t batch, int64_t M, int64_t N,
                    int64_t K, const void *A, int64_t lda, int64_t stride_a, int64_t outer_a,
                    const void *B, int64_t ldb, int64_t stride_b, int64_t outer_b, hx_kdtype dt,
                    void *C, int64_t ldc, int64_t stride_c, int64_t outer_c, int nthreads);

/* ---- convolutional networks (conv.c, pool.c, batchnorm.c) ----------------- */

/* A 2-D window over NCHW images: x (N, C, H, W) -> (N, C, OH, OW) windows of
 * (kh, kw) taps at strides (sh, sw), zero padding (ph, pw), dilations (dh, dw). */
typedef struct hx_k_window {
    int64_t N, C, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} hx_k_window;

/* cols (N, C*kh*kw, OH*OW): row (c*kh + i)*kw + j holds the input pixel
 * under tap (i, j) of channel c for each output position, 0 in the padding. */
void hx_k_im2col_f32(float *cols, const float *x, const hx_k_window *w, int nthreads);
/* dx (N, C, H, W) = every column entry of dcols added back to its pixel
 * (the adjoint of im2col), in a fixed order. */
void hx_k_col2im_f32(float *dx, const float *dcols, const hx_k_window *w, int nthreads);

/* A grouped convolution as GEMMs over im2col columns: per image n and
 * group g, y[n, g] (Cog, P) = W_g (Cog, Kg) cols[n, g] (Kg, P), with
 * W (G*Cog, Kg) and cols (N, G*Kg, P). */
typedef struct hx_k_conv_gemm {
    int64_t N, G, Cog, Kg, P;
} hx_k_conv_gemm;
void hx_k_conv_gemm_forward_f32(float *y, const float *w, const float *cols,
                                const hx_k_conv_gemm *c, int nthreads);
/* dcols[n, g] = W_g^T dy[n, g] */
void hx_k_conv_gemm_backward_cols_f32(float *dcols, const float *dy, const float *w,
                                      const hx_k_conv_gemm *c, int nthreads);
/* dW_g = sum over n of dy[n, g] cols[n, g]^T, summed in an order fixed by
 * the shape; returns -1 (nothing written) when its scratch cannot be had. */
int hx_k_conv_gemm_backward_w_f32(float *dw, const float *dy, const float *cols,
                                  const hx_k_conv_gemm *c, int nthreads);

/* Max pooling skips padding (a window has at least one pixel: ph <= kh/2);
 * its gradient goes to the first maximum of each window. Average pooling
 * divides by kh*kw, padding included. Window dilations are 1. */
void hx_k_max_pool_forward_f32(float *y, const float *x, const hx_k_window *w, int nthreads);
void hx_k_max_pool_backward_f32(float *dx, const float *dy, const float *x,
                                const hx_k_window *w, int nthreads);
void hx_k_avg_pool_forward_f32(float *y, const float *x, const hx_k_window *w, int nthreads);
void hx_k_avg_pool_backward_f32(float *dx, const float *dy, const hx_k_window *w, int nthreads);

/* Batch norm over x (N, C, S) per channel c. train: the batch's mean and
 * biased variance normalise, and the running statistics move toward them
 * by momentum (the variance unbiased); else the running ones normalise.
 * Per-channel sums in double, one channel per thread: the same bits at any
 * thread count. */
typedef struct hx_k_bn {
    int64_t N, C, S;
    float eps, momentum;
    int train;
} hx_k_bn;
void hx_k_batchnorm_forward_f32(float *y, const float *x, const float *gamma, const float *beta,
                                float *running_mean, float *running_var, const hx_k_bn *b,
                                int nthreads);
/* dx of the forward above (batch statistics recomputed from x when train) */
void hx_k_batchnorm_backward_x_f32(float *dx, const float *dy, const float *x,
                                   const float *gamma, const float *running_mean,
                                   const float *running_var, const hx_k_bn *b, int nthreads);
/* dgamma (C) = sum of dy * xhat over N and S */
void hx_k_batchnorm_backward_gamma_f32(float *dgamma, const float *dy, const float *x,
                                       const float *running_mean, const float *running_var,
                                       const hx_k_bn *b, int nthreads);

/* ---- rows by id ---------------------------------------------------------- */

/* out (n, row_bytes) = table[ids[i]] ; ids are i32 or i64. */
int hx_k_gather_rows(void *out, const void *table, int64_t rows, size_t row_bytes,
                     const void *ids, hx_kdtype id_dt, int64_t n, int nthreads, int64_t *bad_pos);
/* dtable (rows, dim) = 0, then dtable[ids[i]] += dy[i] for every i, in order of i
 * per row (deterministic, thread-count independent). */
int hx_k_scatter_add_rows_f32(float *dtable, int64_t rows, int64_t dim, const float *dy,
                              const void *ids, hx_kdtype id_dt, int64_t n, int nthreads,
                              int64_t *bad_pos);

/* ---- masks, dropout --------------------------------------------------------- */

/* x, y: (B, T, T). y = x where col <= row, `fill` above the diagonal. */
void hx_k_causal_mask_f32(float *y, const float *x, int64_t batch, int64_t T, float fill,
                          int nthreads);
/* The causal mask on x and y stored in dt (HX_K_F16 or HX_K_BF16), with no
 * conversion: bitwise widening x, hx_k_causal_mask_f32 and rounding y (a
 * NaN kept comes out quiet, fill is rounded to dt). */
void hx_k_causal_mask_half(void *y, const void *x, hx_kdtype dt, int64_t batch, int64_t T,
                           float fill, int nthreads);

/* y[i] = keep(i) ? x[i] / (1 - p) : 0, where keep(i) is a pure function of
 * (seed, stream, i): the same mask at any thread count, and the backward pass
 * reproduces it by calling this with the same seed and stream. */
void hx_k_dropout_f32(float *y, const float *x, float p, uint64_t seed, uint64_t stream,
                      int64_t n, int nthreads);

/* ---- losses (mean over the batch) -------------------------------------------- */

/* loss[0] = mean_i( logsumexp(logits[i,:]) - logits[i, labels[i]] ), logits (N, C). */
int hx_k_cross_entropy_forward_f32(float *loss, const float *logits, const void *labels,
                                   hx_kdtype label_dt, int64_t N, int64_t C, int nthreads,
                                   int64_t *bad_pos);
/* dlogits = dloss[0] / N * (softmax(logits) - onehot(labels)) */
int hx_k_cross_entropy_backward_f32(float *dlogits, const float *dloss, const float *logits,
                                    const void *labels, hx_kdtype label_dt, int64_t N, int64_t C,
                                    int nthreads, int64_t *bad_pos);
/* loss[0] = mean( max(x,0) - x*t + log(1 + exp(-|x|)) ) */
void hx_k_bce_logits_forward_f32(float *loss, const float *x, const float *t, int64_t n,
                                 int nthreads);
/* dx = dloss[0] / n * (sigmoid(x) - t) */
void hx_k_bce_logits_backward_f32(float *dx, const float *dloss, const float *x, const float *t,
                                  int64_t n, int nthreads);

/* ---- CPU features ------------------------------------------------------------ */

typedef enum hx_isa { HX_ISA_SCALAR = 0, HX_ISA_AVX2 = 1, HX_ISA_AVX512 = 2 } hx_isa;
/* Best ISA this CPU runs (CPUID), lowered by HX_ISA=scalar|avx2|avx512. */
hx_isa hx_k_isa(void);
const char *hx_k_isa_name(hx_isa isa);

/* The optimizer kernels (dense, rows, and the plan of an update). */
#include "optim.h"

#endif
