/* A node's shapes and attributes decoded into the arguments its kernel
 * takes, one function per op family, each returning a plain struct. The
 * cpu launchers (backend_cpu.c) and the cuda ones (backend_cuda_ops.c) both
 * call these, so they differ only in the kernels they call. Byte offsets
 * and strides are in elements unless named _bytes or _offset. */
#ifndef HX_NODE_ARGS_H
#define HX_NODE_ARGS_H

#include "backend/launch.h"
#include "kernels/cpu/hx_kernels.h"

/* matmul: (batch of) M x K times K x N, the leading dims and batch strides
 * of a, b and the output; b_stride 0 when a 2-D b is shared by every
 * batch, which is then one GEMM over all rows of a. */
typedef struct hx__gemm_args {
    bool ta, tb;
    int64_t batch, M, N, K, lda, a_stride, ldb, b_stride, ldc, c_stride;
} hx__gemm_args;
hx__gemm_args hx__matmul_args(const hx_tensor *y);
/* A matmul through head-swap permutes (graph.h's HX_LOWER_MATMUL_PERMUTED,
 * y the matmul, and _OUT, y the permute of one): `outer` (B) GEMMs of g,
 * each a batch of H matrices (a_stride, b_stride, c_stride: from one head
 * to the next), the b-th starting b * a_outer, b_outer, c_outer elements
 * into a, b and the output. An operand that is a head-swap permute is
 * read in its source (rows H times its row apart), and so is the output
 * of _OUT written; g's shapes and transposes are the matmul's. */
typedef struct hx__gemm_bh_args {
    hx__gemm_args g;
    int64_t outer, a_outer, b_outer, c_outer;
} hx__gemm_bh_args;
hx__gemm_bh_args hx__matmul_permuted_args(const hx_tensor *y);

/* add, sub, mul, div: the strides that read src[0] and src[1]
 * (right-aligned) as if broadcast to y's shape. */
typedef struct hx__binary_args {
    int64_t a_strides[HX_MAX_DIMS], b_strides[HX_MAX_DIMS];
} hx__binary_args;
hx__binary_args hx__binary_of(const hx_tensor *y);

/* t as rows of its last dim (softmax and log_softmax and their backward,
 * layernorm, bias_add). */
typedef struct hx__rows_args {
    int64_t rows, cols;
} hx__rows_args;
hx__rows_args hx__rows_of(const hx_tensor *t);

/* A strided copy of `shape` elements of elem_size bytes: from the input at
 * in_offset bytes with in_strides, to the output at out_offset bytes with
 * out_strides. */
typedef struct hx__copy_args {
    size_t in_offset, out_offset, elem_size;
    int64_t in_strides[HX_MAX_DIMS], out_strides[HX_MAX_DIMS];
    const int64_t *shape;
    int ndim;
} hx__copy_args;
hx__copy_args hx__permute_of(const hx_tensor *y);
/* concat: the copy of its k-th input (in[k]) into its place in y. */
hx__copy_args hx__concat_part_of(const hx_tensor *y, int k);
/* slice (attr: i[0] axis, i[1] start) of its source. */
hx__copy_args hx__slice_of(const hx_tensor *y);
/* slice_backward: dy into its place in dx (y); the rest of y is zero, which
 * the launcher writes first. */
hx__copy_args hx__slice_backward_of(const hx_tensor *y);
hx__copy_args hx__broadcast_to_of(const hx_tensor *y);

/* reduce_sum (attr: i[0] mask of reduced axes) and sum_to (dy summed over
 * the axes where y, right-aligned, has 1 or no dim): the input's shape and
 * which of its axes are summed. */
typedef struct hx__reduce_args {
    const int64_t *shape;
    int ndim;
    uint8_t reduce[HX_MAX_DIMS];
} hx__reduce_args;
hx__reduce_args hx__reduce_sum_of(const hx_tensor *y);
hx__reduce_args hx__sum_to_of(const hx_tensor *y);

/* gather: rows of the table (src[0]) picked by ids (src[1]). */
typedef struct hx__gather_args {
    int64_t rows, n_ids;
    size_t row_bytes;
    const hx_tensor *ids;
} hx__gather_args;
hx__gather_args hx__gather_of(const hx_tensor *y);

/* scatter_add: in = dy, ids; y (rows x cols) is the table's shape. */
typedef struct hx__scatter_args {
    int64_t rows, cols, n_ids;
    const hx_tensor *ids;
} hx__scatter_args;
hx__scatter_args hx__scatter_add_of(const hx_tensor *y);

/* cross_entropy (in: logits, labels) and its backward (in: dloss, logits,
 * labels): rows of logits over classes, the labels and their input index. */
typedef struct hx__xent_args {
    int64_t rows, classes;
    const hx_tensor *labels;
    int label_in;
} hx__xent_args;
hx__xent_args hx__cross_entropy_of(const hx_tensor *y);

/* causal_mask: batch matrices of T x T. */
typedef struct hx__mask_args {
    int64_t batch, T;
} hx__mask_args;
hx__mask_args hx__causal_mask_of(const hx_tensor *y);

/* dropout: identity (the value passes unchanged: inference, or p = 0), or
 * the mask of this training step (its seed changes every step; forward and
 * backward share it). */
typedef struct hx__dropout_args {
    bool identity;
    float p;
    uint64_t seed, stream;
    int64_t n;
} hx__dropout_args;
hx__dropout_args hx__dropout_of(const hx_exec *ex, const hx_tensor *y);

/* ---- convolutional ops (node_args_conv.c) ------------------------------------
 * The window of a window op (im2col, col2im, pools and their backward) over
 * its image: src[0] for the forward ops, the output for the backward ones. */
hx_k_window hx__window_of(const hx_tensor *y);
/* conv_gemm and its backward: the GEMM shapes, from the columns tensor and
 * the weight's. */
hx_k_conv_gemm hx__conv_gemm_of(const hx_tensor *y);
/* A lowered convolution node (graph.h's lowering, kinds HX_LOWER_CONV2D*):
 * the window over x (its im2col's attributes), output channels and groups. */
typedef struct hx__conv_args {
    hx_k_window win;
    int64_t C_out, groups;
} hx__conv_args;
hx__conv_args hx__conv_lowered_of(const hx_tensor *y, hx_lower_kind kind);
/* batchnorm and its backward: x's (N, C, S) and the run's mode. */
hx_k_bn hx__batchnorm_of(const hx_exec *ex, const hx_tensor *y);

/* ---- optimizer updates ------------------------------------------------------
 * Update nodes: in = param, grad, its optimizer state, then (when
 * attr.i[0] names its index: graph/autodiff.c fuse_half_copy) the half
 * copy of the param the update writes; y->optimizer is the node's config,
 * its learning rate scaled by the run's lr_scale. */
hx_sgd_hp hx__sgd_hp_of(const hx_exec *ex, const hx_tensor *y);
hx_adam_hp hx__adam_hp_of(const hx_exec *ex, const hx_tensor *y);
hx_adagrad_hp hx__adagrad_hp_of(const hx_exec *ex, const hx_tensor *y);
hx_ftrl_hp hx__ftrl_hp_of(const hx_exec *ex, const hx_tensor *y);
/* How the optimizer kernels read and write the update's buffers in this
 * run: the gradient (f32, f16 or bf16) with the run's unscale and clip
 * factors, and the half copy if any. */
hx_optim_io hx__update_io(const hx_exec *ex, const hx_tensor *u, void *const *in, int nthreads);
/* The k-th optimizer state buffer of update node u, NULL past its state. */
void *hx__update_state(const hx_tensor *u, void *const *in, int k);
/* An optimizer kernel's status (kernels/cpu/optim.h) for update node u run
 * with io: HX_OK for HX_OPTIM_OK, else HX_ERR_INTERNAL naming the node, its
 * parameter and gradient. The launchers never ask a kernel to scan the
 * gradient (the session scanned every gradient before the updates), so
 * the one failure left is a kernel refusing its arguments, which nothing
 * but a bug of ours can cause: the kernel has then written nothing. */
hx_status hx__update_status(const hx_tensor *u, const hx_optim_io *io, int status);

#endif
