/* hetex GPU kernels: CUDA kernels and cuBLAS calls, the counterpart of
 * kernels/cpu/hx_kernels.h.
 *
 * Pure functions on device pointers and sizes: kernels never see a graph.
 * Each takes an hx_gk_ctx (the stream to enqueue on, the cuBLAS handle bound
 * to it, a scratch buffer) and returns an hx_gk_status: 0 once the work is
 * enqueued, else a code whose text hx_gk_strerror gives (the CUDA or cuBLAS
 * error text). Nothing here aborts. Errors of the work itself (a fault in a
 * kernel) surface at the next synchronisation of the stream, as CUDA does.
 *
 * Storage dtypes are HX_K_F32, HX_K_F16 and HX_K_BF16; arithmetic and every
 * accumulation is f32 (the mean losses accumulate in f64). Shapes are
 * row-major, as on the CPU, and the formulas are the CPU kernels' (see each
 * function there); results agree with them to rounding.
 *
 * Determinism: no kernel adds floats with atomics. Every sum is a fixed
 * tree or a fixed sequential order chosen from the shapes alone, so the same
 * inputs give bitwise the same outputs run to run on one GPU model. The only
 * atomics are integer minima (the first bad id) and cuBLAS runs with its
 * atomics off and one workspace per handle.
 *
 * Kernels that need scratch memory say how much in a companion
 * *_scratch_bytes function; the caller passes at least that much in
 * ctx->scratch (used in stream order, so one buffer per stream suffices).
 *
 * Kernels that read ids or labels take `bad`: two device-visible u64 words
 * set to (UINT64_MAX, 0) by the caller before the launch. A bad id (outside
 * [0, rows)) leaves its output row zero, and after the kernel bad[0] holds
 * the smallest bad position and bad[1] the id found there (as i64 bits);
 * the caller reads them once the stream has passed the kernel.
 */
#ifndef HX_GPU_KERNELS_H
#define HX_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/cpu/hx_kernels.h"

/* 0: OK. Otherwise one of the families below with the library's own code
 * in the low 16 bits. */
typedef int hx_gk_status;
#define HX_GK_OK 0
#define HX_GK_CUDA_BASE 0x10000    /* + cudaError_t */
#define HX_GK_CUBLAS_BASE 0x20000  /* + cublasStatus_t */
#define HX_GK_BAD_ARG 0x30000      /* a dtype, size or rank the kernel does not take */
#define HX_GK_SCRATCH 0x30001      /* ctx->scratch smaller than *_scratch_bytes said */

/* Text for a status: the CUDA or cuBLAS error string, or ours. Static storage. */
const char *hx_gk_strerror(hx_gk_status st);
/* Whether st means the device ran out of memory. */
int hx_gk_is_oom(hx_gk_status st);
hx_gk_status hx_gk_cuda(cudaError_t e);     /* 0 for cudaSuccess */
hx_gk_status hx_gk_cublas(cublasStatus_t e); /* 0 for CUBLAS_STATUS_SUCCESS */

typedef struct hx_gk_ctx {
    cudaStream_t stream;
    cublasHandle_t blas; /* bound to `stream`, with its own workspace */
    void *scratch;       /* device memory, used in stream order */
    size_t scratch_bytes;
    int allow_tf32;      /* f32 GEMMs may use TF32 tensor cores */
} hx_gk_ctx;

/* ---- memory ----------------------------------------------------------------- */

hx_gk_status hx_gk_memcpy(const hx_gk_ctx *c, void *dst, const void *src, size_t n);
hx_gk_status hx_gk_memset0(const hx_gk_ctx *c, void *dst, size_t n);

/* ---- matmul (cuBLAS) ------------------------------------------------------------
 * C (M,N) = op(A) op(B) for `batch` matrices at element strides (stride 0
 * reuses one matrix), row-major with leading dimensions lda/ldb/ldc, as
 * hx_k_gemm_f32 (alpha 1, beta 0). A, B and C share the dtype dt; f16 and
 * bf16 run on tensor cores with f32 accumulation, f32 in full f32 unless
 * ctx->allow_tf32. */
hx_gk_status hx_gk_gemm(const hx_gk_ctx *c, hx_kdtype dt, int trans_a, int trans_b,
                        int64_t batch, int64_t M, int64_t N, int64_t K, const void *A,
                        int64_t lda, int64_t stride_a, const void *B, int64_t ldb,
                        int64_t stride_b, void *C, int64_t ldc, int64_t stride_c);

/* ---- elementwise ------------------------------------------------------------------ */

/* out (contiguous, shape) = a op b read through element strides per output
 * dimension (0 on a broadcast dimension), as hx_k_binary_f32. */
hx_gk_status hx_gk_binary(const hx_gk_ctx *c, hx_kdtype dt, hx_binary_op op, void *out,
                          const void *a, const int64_t *a_strides, const void *b,
                          const int64_t *b_strides, const int64_t *shape, int ndim);
hx_gk_status hx_gk_unary(const hx_gk_ctx *c, hx_kdtype dt, hx_unary_op op, void *y,
                         const void *x, int64_t n);
/* As hx_k_unary_backward_f32: relu, gelu and log read x; the others y. */
hx_gk_status hx_gk_unary_backward(const hx_gk_ctx *c, hx_kdtype dt, hx_unary_op op, void *dx,
                                  const void *dy, const void *x, const void *y, int64_t n);
hx_gk_status hx_gk_scale(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x, float s,
                         int64_t n);
hx_gk_status hx_gk_bias_add(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                            const void *b, int64_t rows, int64_t n);
/* Between f32, f16 and bf16, round to nearest even. */
hx_gk_status hx_gk_cast(const hx_gk_ctx *c, void *y, hx_kdtype ydt, const void *x,
                        hx_kdtype xdt, int64_t n);
hx_gk_status hx_gk_causal_mask(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                               int64_t batch, int64_t T, float fill);
/* The CPU kernel's mask bit for bit: keep(i) is the same pure function of
 * (seed, stream, i) as in hx_k_dropout_f32. */
hx_gk_status hx_gk_dropout(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x, float p,
                           uint64_t seed, uint64_t stream, int64_t n);

/* ---- rows (last axis) --------------------------------------------------------------- */

hx_gk_status hx_gk_softmax(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                           int64_t rows, int64_t n);
hx_gk_status hx_gk_log_softmax(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                               int64_t rows, int64_t n);
hx_gk_status hx_gk_softmax_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dx, const void *dy,
                                    const void *y, int64_t rows, int64_t n);
hx_gk_status hx_gk_log_softmax_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                        const void *dy, const void *y, int64_t rows, int64_t n);
hx_gk_status hx_gk_layernorm(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                             const void *gamma, const void *beta, float eps, int64_t rows,
                             int64_t n);
hx_gk_status hx_gk_layernorm_backward_x(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                        const void *dy, const void *x, const void *gamma,
                                        float eps, int64_t rows, int64_t n);
size_t hx_gk_layernorm_backward_gamma_scratch_bytes(int64_t rows, int64_t n);
hx_gk_status hx_gk_layernorm_backward_gamma(const hx_gk_ctx *c, hx_kdtype dt, void *dgamma,
                                            const void *dy, const void *x, float eps,
                                            int64_t rows, int64_t n);

/* ---- reductions and data movement ------------------------------------------------------ */

/* As hx_k_reduce_sum_f32: out = sum of x over the dims with reduce[d] set. */
size_t hx_gk_reduce_sum_scratch_bytes(const int64_t *shape, int ndim, const uint8_t *reduce);
hx_gk_status hx_gk_reduce_sum(const hx_gk_ctx *c, hx_kdtype dt, void *out, const void *x,
                              const int64_t *shape, int ndim, const uint8_t *reduce);
/* As hx_k_copy_strided, for elements of 1, 2, 4 or 8 bytes. */
hx_gk_status hx_gk_copy_strided(const hx_gk_ctx *c, void *out, const int64_t *out_strides,
                                const void *x, const int64_t *x_strides, const int64_t *shape,
                                int ndim, size_t elem_size);

/* ---- rows by id --------------------------------------------------------------------------- */

/* out (n, row_bytes) = table[ids[i]]; ids i32 or i64; a bad id gives a zero row. */
hx_gk_status hx_gk_gather_rows(const hx_gk_ctx *c, void *out, const void *table, int64_t rows,
                               size_t row_bytes, const void *ids, hx_kdtype id_dt, int64_t n,
                               uint64_t *bad);
/* dtable (rows, dim) = 0, then dtable[ids[i]] += dy[i] in order of i, both
 * of dtype dt (f32, f16, bf16), summed in f32 and rounded once: the CPU
 * kernel's sums bit for bit (positions sorted by id with a stable radix
 * sort, each row summed sequentially). Bad ids are skipped. */
size_t hx_gk_scatter_add_scratch_bytes(int64_t n, int64_t rows);
hx_gk_status hx_gk_scatter_add_rows(const hx_gk_ctx *c, hx_kdtype dt, void *dtable, int64_t rows,
                                    int64_t dim, const void *dy, const void *ids,
                                    hx_kdtype id_dt, int64_t n, uint64_t *bad);

/* ---- losses (mean over the batch; loss and dloss are f32) ------------------------------------ */

size_t hx_gk_cross_entropy_scratch_bytes(int64_t N);
hx_gk_status hx_gk_cross_entropy(const hx_gk_ctx *c, hx_kdtype dt, float *loss,
                                 const void *logits, const void *labels, hx_kdtype label_dt,
                                 int64_t N, int64_t C, uint64_t *bad);
hx_gk_status hx_gk_cross_entropy_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dlogits,
                                          const float *dloss, const void *logits,
                                          const void *labels, hx_kdtype label_dt, int64_t N,
                                          int64_t C, uint64_t *bad);
size_t hx_gk_bce_logits_scratch_bytes(int64_t n);
hx_gk_status hx_gk_bce_logits(const hx_gk_ctx *c, hx_kdtype dt, float *loss, const void *x,
                              const void *t, int64_t n);
hx_gk_status hx_gk_bce_logits_backward(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                       const float *dloss, const void *x, const void *t,
                                       int64_t n);

/* out (one device double) = the sum of x[i]^2 over the n values of x, in a
 * fixed order (the gradient scan before the updates: finite exactly when
 * every x[i] is; its root is the norm for clipping). Uses
 * hx_gk_sumsq_scratch_bytes() of the context's scratch. */
size_t hx_gk_sumsq_scratch_bytes(void);
hx_gk_status hx_gk_sumsq(const hx_gk_ctx *c, hx_kdtype dt, double *out, const void *x, int64_t n);

/* ---- convolutional networks (conv.cu) ---------------------------------------------------------
 * The CPU kernels' formulas (hx_kernels.h: hx_k_window, hx_k_conv_gemm,
 * hx_k_bn), storage dt, arithmetic f32 (batch norm's channel sums f64).
 * No atomics: col2im and the pools' backward gather per input pixel, the
 * weight gradient and batch norm sum in one block per output (fixed tree).
 * The running statistics are f32 whatever dt. The conv GEMMs are cuBLAS
 * (hx_gk_gemm) per group; the weight gradient is a direct reduction. */
hx_gk_status hx_gk_im2col(const hx_gk_ctx *c, hx_kdtype dt, void *cols, const void *x,
                          const hx_k_window *w);
hx_gk_status hx_gk_col2im(const hx_gk_ctx *c, hx_kdtype dt, void *dx, const void *dcols,
                          const hx_k_window *w);
hx_gk_status hx_gk_conv_gemm(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *w,
                             const void *cols, const hx_k_conv_gemm *g);
hx_gk_status hx_gk_conv_gemm_backward_cols(const hx_gk_ctx *c, hx_kdtype dt, void *dcols,
                                           const void *dy, const void *w, const hx_k_conv_gemm *g);
hx_gk_status hx_gk_conv_gemm_backward_w(const hx_gk_ctx *c, hx_kdtype dt, void *dw,
                                        const void *dy, const void *cols, const hx_k_conv_gemm *g);
/* max: 1 max pooling, 0 average pooling; the backward's x is read by max only */
hx_gk_status hx_gk_pool(const hx_gk_ctx *c, hx_kdtype dt, int max, void *y, const void *x,
                        const hx_k_window *w);
hx_gk_status hx_gk_pool_backward(const hx_gk_ctx *c, hx_kdtype dt, int max, void *dx,
                                 const void *dy, const void *x, const hx_k_window *w);
hx_gk_status hx_gk_batchnorm(const hx_gk_ctx *c, hx_kdtype dt, void *y, const void *x,
                             const void *gamma, const void *beta, float *running_mean,
                             float *running_var, const hx_k_bn *b);
hx_gk_status hx_gk_batchnorm_backward_x(const hx_gk_ctx *c, hx_kdtype dt, void *dx,
                                        const void *dy, const void *x, const void *gamma,
                                        const float *running_mean, const float *running_var,
                                        const hx_k_bn *b);
hx_gk_status hx_gk_batchnorm_backward_gamma(const hx_gk_ctx *c, hx_kdtype dt, void *dgamma,
                                            const void *dy, const void *x,
                                            const float *running_mean, const float *running_var,
                                            const hx_k_bn *b);

/* ---- optimizer updates ------------------------------------------------------------------------ */

/* One dense update of n f32 params in place, with the plan's kind, scalars,
 * gradient dtype and optional half copy (pl->half_dt F16/BF16 writes `half`).
 * The formulas of kernels/cpu/optim.h, one IEEE rounding per operation and
 * no contraction, so the results are the CPU kernels' bit for bit. s1, s2:
 * the kind's state (Adam m, v; Adagrad sum; SGD momentum buffer or NULL;
 * FTRL accum, linear). */
hx_gk_status hx_gk_optim_update(const hx_gk_ctx *c, const hx_optim_plan *pl, float *param,
                                float *s1, float *s2, const void *grad, void *half, int64_t n);

/* ---- a device cache of embedding rows (emb_cache.cu) -------------------------------------------
 * The host table's kernels (embedding/: lookup and bags, the summed
 * gradient of each touched row, the sparse optimizer steps) over the rows
 * of a cache held on the device, bit for bit: each output element is
 * computed by one thread in the host's order, one IEEE rounding per
 * operation. The cache: `param`, C slot rows of pstride elements of dt
 * (f32, f16, bf16; a row's first dim are its values) and f32 state rows
 * of sstride floats (row-wise Adagrad: one float per slot). Slot ids are
 * i64 device arrays; in a query -1 is the padding id (skipped, with
 * has_padding) and any other negative id a zero row (an id outside the
 * table, read as zeros). Slots are not checked against C: the caller's
 * map made them. Modes as embedding.h's hx_emb_mode: */
#define HX_GK_EMB_ROWS 0
#define HX_GK_EMB_SUM 1
#define HX_GK_EMB_MEAN 2
#define HX_GK_EMB_MAX 3
/* ROWS: out (n, dim) = the slot rows of slots (f32). SUM, MEAN, MAX:
 * out (nbags, dim), bag b over positions [bounds[b], bounds[b + 1])
 * (bounds: nbags + 1 values), as embedding.h's queries: sums in order of
 * position (weights: SUM only, w * row), MEAN times RN(1 / count), MAX the
 * first largest with argmax (nbags, dim) its position (-1 for an empty
 * bag; argmax may be NULL). */
hx_gk_status hx_gk_emb_bag(const hx_gk_ctx *c, hx_kdtype dt, const void *param, int64_t pstride,
                           int64_t dim, const int64_t *slots, int64_t n, int mode,
                           const int64_t *bounds, int64_t nbags, const float *weights,
                           int has_padding, float *out, int64_t *argmax);
/* G (U, dim) = the summed gradient of each of U touched rows: row u sums,
 * over its positions pos[start[u] .. start[u + 1]) in that order,
 * scale[j] * dout[bag_of[j]] (MAX: dout[bag_of[j]][k] where
 * argmax[bag_of[j]][k] == j), as hx_emb_group_sum. */
hx_gk_status hx_gk_emb_grad_sum(const hx_gk_ctx *c, int mode, const float *dout,
                                const int64_t *argmax, int64_t dim, const int64_t *start,
                                int64_t U, const uint32_t *pos, const int64_t *bag_of,
                                const float *scale, float *G);
/* One step of LazyAdam, Adagrad or FTRL (pl: hx_optim_plan_*_rows) on the
 * U distinct slots `slots` with gradients G (U, dim): params read as f32,
 * updated as the row kernels of kernels/cpu/optim.h do and rounded to dt;
 * state s0 (and s1: LazyAdam v, FTRL linear) in place. */
hx_gk_status hx_gk_emb_rows_update(const hx_gk_ctx *c, const hx_optim_plan *pl, hx_kdtype dt,
                                   void *param, int64_t pstride, float *s0, float *s1,
                                   int64_t sstride, const int64_t *slots, int64_t U,
                                   const float *G, int64_t dim);
/* Row-wise Adagrad (embedding.h's formula; clr, eps, wd from
 * hx_emb_step_plan_of) on U distinct slots, one accumulator per slot in acc. */
hx_gk_status hx_gk_emb_rows_row_adagrad(const hx_gk_ctx *c, float clr, float eps, float wd,
                                        hx_kdtype dt, void *param, int64_t pstride, float *acc,
                                        const int64_t *slots, int64_t U, const float *G,
                                        int64_t dim);

/* ---- convolutions through cuDNN (conv_cudnn.c) ----------------------------------------------
 * hetex's cuDNN convolutions (conv_cudnn.c), built when cuDNN is found
 * (HX_HAVE_CUDNN; cmake/hetex_cuda.cmake): forward, backward data and
 * backward filter of a 2-D NCHW convolution with groups, stride, padding
 * and dilation, storage f32/f16/bf16 with f32 compute (cuDNN's compute
 * type float), on the stream of an hx_gk_ctx.
 *
 * Determinism: the algorithm is cuDNN's heuristic choice
 * (cudnnGet*Algorithm_v7, no timing), the first one it ranks that is
 * CUDNN_DETERMINISTIC and fits the workspace limit, so the choice depends
 * only on the shapes, dtype, GPU and cuDNN version, and a run gives the
 * same bits as the last one (cudnnFind times the candidates and may pick
 * another on a noisy run). f32 uses FMA math unless the context allows
 * TF32; f16/bf16 use tensor cores with f32 accumulation.
 *
 * The library is opened on first use (dlopen of libcudnn.so.9 on the
 * loader's path): hetex neither links it nor needs it to start.
 *
 * Statuses: hx_gk_status, with cuDNN's own in the family HX_GK_CUDNN_BASE;
 * hx_gk_cudnn_strerror gives the text (cudnnGetErrorString). */
#ifdef HX_HAVE_CUDNN
#define HX_GK_CUDNN_BASE 0x40000 /* + cudnnStatus_t */

typedef enum hx_gk_conv_dir {
    HX_GK_CONV_FORWARD,         /* y = conv(x, w): a = x, b = w */
    HX_GK_CONV_BACKWARD_DATA,   /* dx = conv^T(dy, w): a = dy, b = w */
    HX_GK_CONV_BACKWARD_FILTER  /* dw = sum_n dy (x) x: a = dy, b = x */
} hx_gk_conv_dir;

/* The convolution: the input's window (hx_k_window: N, C, H, W, OH, OW,
 * kernel, stride, padding, dilation), the output channels and groups. */
typedef struct hx_gk_conv {
    hx_k_window win;
    int64_t C_out, groups;
} hx_gk_conv;

/* Opens cuDNN once (any thread; later calls answer at once): 1 when it is
 * usable, with *why (NULL: not wanted) the library's path; 0 when not,
 * with *why the loader's reason. Every function below but the strerror
 * needs it usable (they fail with HX_GK_BAD_ARG otherwise). */
int hx_gk_cudnn_load(const char **why);
/* A cuDNN handle bound to stream s (its caller's: one per stream). */
hx_gk_status hx_gk_cudnn_create(cudaStream_t s, void **handle);
void hx_gk_cudnn_destroy(void *handle);
/* The cuDNN library's version as loaded (cudnnGetVersion: 91900 = 9.19.0;
 * 0: not loaded). */
size_t hx_gk_cudnn_version(void);
/* CUDNN_VERSION of the headers hetex was built with. */
size_t hx_gk_cudnn_built_version(void);
/* Text of a status of this header's functions (any hx_gk_status). */
const char *hx_gk_cudnn_strerror(hx_gk_status st);
/* Whether st means the device ran out of memory (CUDA's, cuBLAS's or cuDNN's). */
int hx_gk_cudnn_is_oom(hx_gk_status st);

/* The algorithm for this convolution and direction (see Determinism) with
 * workspace at most ws_limit bytes, into *algo, and its workspace into
 * *ws_bytes. HX_GK_BAD_ARG: a dim past INT_MAX or a tensor past 2^31
 * elements (cuDNN's descriptors take int), or no deterministic algorithm
 * fits the limit. */
hx_gk_status hx_gk_conv_cudnn_algo(void *handle, const hx_gk_ctx *c, hx_kdtype dt,
                                   hx_gk_conv_dir dir, const hx_gk_conv *p, size_t ws_limit,
                                   int *algo, size_t *ws_bytes);
/* Runs it: out = the direction's result (overwritten), with ws_bytes of
 * workspace at ctx->scratch. */
hx_gk_status hx_gk_conv_cudnn(void *handle, const hx_gk_ctx *c, hx_kdtype dt, hx_gk_conv_dir dir,
                              const hx_gk_conv *p, int algo, size_t ws_bytes, void *out,
                              const void *a, const void *b);
#endif

#ifdef __cplusplus
}
#endif
#endif
