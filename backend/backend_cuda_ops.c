/* The cuda backend's kernel table: one launcher per op, turning a node's
 * shapes and attributes into a call of a kernels/gpu function on the stream
 * of the launch in progress (backend_cuda_internal.h). The counterpart of
 * backend_cpu.c, op for op. */
#ifdef HX_HAVE_CUDA
#include "backend/backend_cuda_internal.h"
#include "backend/node_args.h"

#define LAUNCH(name) \
    static hx_status name(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
#define C (hx__cuda_ctx())
#define SRC(i) (y->src[i])
#define DT(t) ((hx_kdtype)(t)->dtype)
#define RUN(call) return ran(y, (call))
#define ROWS(t) hx__rows_of(t).rows, hx__rows_of(t).cols

static hx_status ran(const hx_tensor *y, hx_gk_status st) { return st ? hx__cuda_fail(y, st) : HX_OK; }
static int64_t numel(const hx_tensor *t) { return hx_tensor_numel(t); }

/* ---- matmul ------------------------------------------------------------------ */

LAUNCH(matmul)
{
    hx__gemm_args g = hx__matmul_args(y);
    RUN(hx_gk_gemm(C, DT(y), g.ta, g.tb, g.batch, g.M, g.N, g.K, in[0], g.lda, g.a_stride, in[1],
                   g.ldb, g.b_stride, out, g.ldc, g.c_stride));
}

/* ---- elementwise ---------------------------------------------------------------- */

static hx_status binary(hx_binary_op op, const hx_tensor *y, void *out, void *const *in)
{
    hx__binary_args b = hx__binary_of(y);
    RUN(hx_gk_binary(C, DT(y), op, out, in[0], b.a_strides, in[1], b.b_strides, y->shape,
                     y->ndim));
}

LAUNCH(add) { return binary(HX_BINARY_ADD, y, out, in); }
LAUNCH(sub) { return binary(HX_BINARY_SUB, y, out, in); }
LAUNCH(mul) { return binary(HX_BINARY_MUL, y, out, in); }
LAUNCH(div_) { return binary(HX_BINARY_DIV, y, out, in); }
LAUNCH(scale) { RUN(hx_gk_scale(C, DT(y), out, in[0], y->attr.f[0], numel(y))); }
LAUNCH(bias_add) { RUN(hx_gk_bias_add(C, DT(y), out, in[0], in[1], ROWS(y))); }

#define UNARY(name, op) \
    LAUNCH(name) { RUN(hx_gk_unary(C, DT(y), op, out, in[0], numel(y))); }
UNARY(relu, HX_UNARY_RELU)
UNARY(gelu, HX_UNARY_GELU)
UNARY(gelu_erf, HX_UNARY_GELU_ERF)
UNARY(sigmoid, HX_UNARY_SIGMOID)
UNARY(tanh_, HX_UNARY_TANH)
UNARY(exp_, HX_UNARY_EXP)
UNARY(log_, HX_UNARY_LOG)
UNARY(sqrt_, HX_UNARY_SQRT)

/* in: dy, then x (relu, gelu) or y (sigmoid, tanh) */
#define UNARY_BACKWARD(name, op, uses_x)                                                  \
    LAUNCH(name)                                                                          \
    {                                                                                     \
        RUN(hx_gk_unary_backward(C, DT(y), op, out, in[0], uses_x ? in[1] : NULL,         \
                                 uses_x ? NULL : in[1], numel(y)));                       \
    }
UNARY_BACKWARD(relu_backward, HX_UNARY_RELU, 1)
UNARY_BACKWARD(gelu_backward, HX_UNARY_GELU, 1)
UNARY_BACKWARD(gelu_erf_backward, HX_UNARY_GELU_ERF, 1)
UNARY_BACKWARD(sigmoid_backward, HX_UNARY_SIGMOID, 0)
UNARY_BACKWARD(tanh_backward, HX_UNARY_TANH, 0)

/* ---- rows ------------------------------------------------------------------------ */

LAUNCH(softmax) { RUN(hx_gk_softmax(C, DT(y), out, in[0], ROWS(y))); }
LAUNCH(log_softmax) { RUN(hx_gk_log_softmax(C, DT(y), out, in[0], ROWS(y))); }
LAUNCH(softmax_backward) { RUN(hx_gk_softmax_backward(C, DT(y), out, in[0], in[1], ROWS(y))); }
LAUNCH(log_softmax_backward)
{
    RUN(hx_gk_log_softmax_backward(C, DT(y), out, in[0], in[1], ROWS(y)));
}
LAUNCH(layernorm)
{
    RUN(hx_gk_layernorm(C, DT(y), out, in[0], in[1], in[2], y->attr.f[0], ROWS(y)));
}
/* in: dy, x, gamma */
LAUNCH(layernorm_backward_x)
{
    RUN(hx_gk_layernorm_backward_x(C, DT(y), out, in[0], in[1], in[2], y->attr.f[0], ROWS(y)));
}
/* in: dy, x; y is gamma-shaped */
LAUNCH(layernorm_backward_gamma)
{
    const hx_tensor *x = SRC(1);
    hx_status st = hx__cuda_scratch(y, hx_gk_layernorm_backward_gamma_scratch_bytes(ROWS(x)));
    if (st) return st;
    RUN(hx_gk_layernorm_backward_gamma(C, DT(y), out, in[0], in[1], y->attr.f[0], ROWS(x)));
}

/* ---- data movement ------------------------------------------------------------------ */

LAUNCH(copy) { RUN(hx_gk_memcpy(C, out, in[0], hx_tensor_nbytes(y))); }

static hx_gk_status copy_strided(hx__copy_args c, void *out, const void *in)
{
    return hx_gk_copy_strided(C, (char *)out + c.out_offset, c.out_strides,
                              (const char *)in + c.in_offset, c.in_strides, c.shape, c.ndim,
                              c.elem_size);
}

LAUNCH(permute) { RUN(copy_strided(hx__permute_of(y), out, in[0])); }

LAUNCH(concat)
{
    for (int k = 0; k < y->n_src; k++) {
        hx_gk_status st = copy_strided(hx__concat_part_of(y, k), out, in[k]);
        if (st) return hx__cuda_fail(y, st);
    }
    return HX_OK;
}

LAUNCH(slice) { RUN(copy_strided(hx__slice_of(y), out, in[0])); }

/* dx (x's shape) = 0 outside the slice, dy inside. */
LAUNCH(slice_backward)
{
    hx_gk_status st = hx_gk_memset0(C, out, hx_tensor_nbytes(y));
    if (st) return hx__cuda_fail(y, st);
    RUN(copy_strided(hx__slice_backward_of(y), out, in[0]));
}

LAUNCH(broadcast_to) { RUN(copy_strided(hx__broadcast_to_of(y), out, in[0])); }

static hx_status reduce(const hx_tensor *y, hx__reduce_args r, void *out, const void *x)
{
    hx_status st = hx__cuda_scratch(y, hx_gk_reduce_sum_scratch_bytes(r.shape, r.ndim, r.reduce));
    if (st) return st;
    RUN(hx_gk_reduce_sum(C, DT(y), out, x, r.shape, r.ndim, r.reduce));
}

LAUNCH(reduce_sum) { return reduce(y, hx__reduce_sum_of(y), out, in[0]); }
LAUNCH(sum_to) { return reduce(y, hx__sum_to_of(y), out, in[0]); }

LAUNCH(cast) { RUN(hx_gk_cast(C, out, DT(y), in[0], DT(SRC(0)), numel(y))); }

/* ---- rows by id ---------------------------------------------------------------------- */

LAUNCH(gather)
{
    hx__gather_args g = hx__gather_of(y);
    uint64_t *bad;
    hx_status st = hx__cuda_index_check(y, g.ids, g.rows, "id", &bad);
    if (st) return st;
    RUN(hx_gk_gather_rows(C, out, in[0], g.rows, g.row_bytes, in[1], DT(g.ids), g.n_ids, bad));
}

LAUNCH(scatter_add)
{
    hx__scatter_args a = hx__scatter_add_of(y);
    uint64_t *bad;
    hx_status st = hx__cuda_scratch(y, hx_gk_scatter_add_scratch_bytes(a.n_ids, a.rows));
    if (!st) st = hx__cuda_index_check(y, a.ids, a.rows, "id", &bad);
    if (st) return st;
    RUN(hx_gk_scatter_add_rows(C, DT(y), out, a.rows, a.cols, in[0], in[1], DT(a.ids), a.n_ids, bad));
}

/* ---- masks, dropout, losses ------------------------------------------------------------ */

LAUNCH(causal_mask)
{
    hx__mask_args m = hx__causal_mask_of(y);
    RUN(hx_gk_causal_mask(C, DT(y), out, in[0], m.batch, m.T, y->attr.f[0]));
}

LAUNCH(dropout)
{
    hx__dropout_args d = hx__dropout_of(ex, y);
    if (d.identity) return copy(ex, y, out, in);
    RUN(hx_gk_dropout(C, DT(y), out, in[0], d.p, d.seed, d.stream, d.n));
}

LAUNCH(cross_entropy)
{
    hx__xent_args a = hx__cross_entropy_of(y);
    uint64_t *bad;
    hx_status st = hx__cuda_scratch(y, hx_gk_cross_entropy_scratch_bytes(a.rows));
    if (!st) st = hx__cuda_index_check(y, a.labels, a.classes, "label", &bad);
    if (st) return st;
    RUN(hx_gk_cross_entropy(C, DT(SRC(0)), out, in[0], in[a.label_in], DT(a.labels), a.rows,
                            a.classes, bad));
}

LAUNCH(cross_entropy_backward)
{
    hx__xent_args a = hx__cross_entropy_of(y);
    uint64_t *bad;
    hx_status st = hx__cuda_index_check(y, a.labels, a.classes, "label", &bad);
    if (st) return st;
    RUN(hx_gk_cross_entropy_backward(C, DT(y), out, in[0], in[1], in[a.label_in], DT(a.labels),
                                     a.rows, a.classes, bad));
}

LAUNCH(bce_logits)
{
    int64_t n = numel(SRC(0));
    hx_status st = hx__cuda_scratch(y, hx_gk_bce_logits_scratch_bytes(n));
    if (st) return st;
    RUN(hx_gk_bce_logits(C, DT(SRC(0)), out, in[0], in[1], n));
}

/* in: dloss, x, t */
LAUNCH(bce_logits_backward)
{
    RUN(hx_gk_bce_logits_backward(C, DT(y), out, in[0], in[1], in[2], numel(y)));
}

/* ---- optimizer updates and the gradient scan ----------------------------------------------
 * Update nodes (node_args.h): the step taken is the session's step + 1. The
 * plan (f32 scalars) is built by the CPU optimizer code, so both agree
 * bitwise. */

static hx_status update(const hx_tensor *y, hx_optim_plan pl, void *const *in, float *s1, float *s2)
{
    void *half = y->attr.i[0] ? in[y->attr.i[0]] : NULL;
    RUN(hx_gk_optim_update(C, &pl, in[0], s1, s2, in[1], half, numel(y)));
}

LAUNCH(sgd_update)
{
    hx_sgd_hp hp = hx__sgd_hp_of(ex, y);
    hx_optim_io io = hx__update_io(ex, y, in, 1);
    float *buf = hx__update_state(y, in, 0);
    if (hp.momentum != 0 && !buf) /* as hx_optim_sgd */
        return hx__update_status(y, &io, HX_OPTIM_BAD_ARG);
    return update(y, hx_optim_plan_sgd(&hp, ex->step + 1, &io), in, buf, NULL);
}

LAUNCH(adam_update)
{
    hx_adam_hp hp = hx__adam_hp_of(ex, y);
    hx_optim_io io = hx__update_io(ex, y, in, 1);
    return update(y, hx_optim_plan_adam(&hp, ex->step + 1, &io), in, in[2], in[3]);
}

LAUNCH(adagrad_update)
{
    hx_adagrad_hp hp = hx__adagrad_hp_of(ex, y);
    hx_optim_io io = hx__update_io(ex, y, in, 1);
    return update(y, hx_optim_plan_adagrad(&hp, ex->step + 1, &io), in, in[2], NULL);
}

/* ---- convolutional ops (node_args_conv.c) ----------------------------------------------------- */

LAUNCH(im2col) { hx_k_window w = hx__window_of(y); RUN(hx_gk_im2col(C, DT(y), out, in[0], &w)); }
/* in: dcols */
LAUNCH(col2im) { hx_k_window w = hx__window_of(y); RUN(hx_gk_col2im(C, DT(y), out, in[0], &w)); }
/* in: cols, w */
LAUNCH(conv_gemm)
{
    hx_k_conv_gemm g = hx__conv_gemm_of(y);
    RUN(hx_gk_conv_gemm(C, DT(y), out, in[1], in[0], &g));
}
/* in: dy, w */
LAUNCH(conv_gemm_backward_cols)
{
    hx_k_conv_gemm g = hx__conv_gemm_of(y);
    RUN(hx_gk_conv_gemm_backward_cols(C, DT(y), out, in[0], in[1], &g));
}
/* in: dy, cols */
LAUNCH(conv_gemm_backward_w)
{
    hx_k_conv_gemm g = hx__conv_gemm_of(y);
    RUN(hx_gk_conv_gemm_backward_w(C, DT(y), out, in[0], in[1], &g));
}
LAUNCH(max_pool) { hx_k_window w = hx__window_of(y); RUN(hx_gk_pool(C, DT(y), 1, out, in[0], &w)); }
LAUNCH(avg_pool) { hx_k_window w = hx__window_of(y); RUN(hx_gk_pool(C, DT(y), 0, out, in[0], &w)); }
/* in: dy, x */
LAUNCH(max_pool_backward)
{
    hx_k_window w = hx__window_of(y);
    RUN(hx_gk_pool_backward(C, DT(y), 1, out, in[0], in[1], &w));
}
/* in: dy */
LAUNCH(avg_pool_backward)
{
    hx_k_window w = hx__window_of(y);
    RUN(hx_gk_pool_backward(C, DT(y), 0, out, in[0], NULL, &w));
}
/* in: x, gamma, beta, running mean, running var (f32, written in training runs) */
LAUNCH(batchnorm)
{
    hx_k_bn b = hx__batchnorm_of(ex, y);
    RUN(hx_gk_batchnorm(C, DT(y), out, in[0], in[1], in[2], in[3], in[4], &b));
}
/* in: dy, x, gamma, running mean, running var */
LAUNCH(batchnorm_backward_x)
{
    hx_k_bn b = hx__batchnorm_of(ex, y);
    RUN(hx_gk_batchnorm_backward_x(C, DT(y), out, in[0], in[1], in[2], in[3], in[4], &b));
}
/* in: dy, x, running mean, running var */
LAUNCH(batchnorm_backward_gamma)
{
    hx_k_bn b = hx__batchnorm_of(ex, y);
    RUN(hx_gk_batchnorm_backward_gamma(C, DT(y), out, in[0], in[1], in[2], in[3], &b));
}

/* HX_KERNEL_SUMSQ: y is the gradient, in[0] its value, out a double. */
static hx_status sumsq(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    hx_status st = hx__cuda_scratch(y, hx_gk_sumsq_scratch_bytes());
    if (st) return st;
    RUN(hx_gk_sumsq(C, DT(y), out, in[0], numel(y)));
}

/* ---- the table -------------------------------------------------------------------------------- */

enum { ANY = 0, FLOAT = 1, F32_ONLY = 2 }; /* the output dtypes an op's kernel takes */

typedef struct cuda_op { hx_launch_fn fn; int dtypes; } cuda_op;

static const cuda_op cuda_ops[HX_OP_COUNT] = {
    [HX_OP_MATMUL] = {matmul, FLOAT}, [HX_OP_ADD] = {add, FLOAT}, [HX_OP_SUB] = {sub, FLOAT},
    [HX_OP_MUL] = {mul, FLOAT}, [HX_OP_DIV] = {div_, FLOAT}, [HX_OP_SCALE] = {scale, FLOAT},
    [HX_OP_BIAS_ADD] = {bias_add, FLOAT}, [HX_OP_RELU] = {relu, FLOAT},
    [HX_OP_GELU] = {gelu, FLOAT}, [HX_OP_GELU_ERF] = {gelu_erf, FLOAT}, [HX_OP_SIGMOID] = {sigmoid, FLOAT},
    [HX_OP_TANH] = {tanh_, FLOAT}, [HX_OP_EXP] = {exp_, FLOAT}, [HX_OP_LOG] = {log_, FLOAT},
    [HX_OP_SQRT] = {sqrt_, FLOAT}, [HX_OP_SOFTMAX] = {softmax, FLOAT},
    [HX_OP_LOG_SOFTMAX] = {log_softmax, FLOAT}, [HX_OP_LAYERNORM] = {layernorm, FLOAT},
    [HX_OP_RESHAPE] = {copy, ANY}, [HX_OP_PERMUTE] = {permute, ANY},
    [HX_OP_CONCAT] = {concat, ANY}, [HX_OP_SLICE] = {slice, ANY},
    [HX_OP_REDUCE_SUM] = {reduce_sum, FLOAT}, [HX_OP_CAST] = {cast, FLOAT},
    [HX_OP_GATHER] = {gather, FLOAT}, [HX_OP_CAUSAL_MASK] = {causal_mask, FLOAT},
    [HX_OP_CROSS_ENTROPY] = {cross_entropy, F32_ONLY}, [HX_OP_BCE_LOGITS] = {bce_logits, F32_ONLY},
    [HX_OP_DROPOUT] = {dropout, FLOAT},
    [HX_OP_RELU_BACKWARD] = {relu_backward, FLOAT}, [HX_OP_GELU_BACKWARD] = {gelu_backward, FLOAT},
    [HX_OP_GELU_ERF_BACKWARD] = {gelu_erf_backward, FLOAT},
    [HX_OP_SIGMOID_BACKWARD] = {sigmoid_backward, FLOAT},
    [HX_OP_TANH_BACKWARD] = {tanh_backward, FLOAT},
    [HX_OP_SOFTMAX_BACKWARD] = {softmax_backward, FLOAT},
    [HX_OP_LOG_SOFTMAX_BACKWARD] = {log_softmax_backward, FLOAT},
    [HX_OP_LAYERNORM_BACKWARD_X] = {layernorm_backward_x, FLOAT},
    [HX_OP_LAYERNORM_BACKWARD_GAMMA] = {layernorm_backward_gamma, FLOAT},
    [HX_OP_SUM_TO] = {sum_to, FLOAT}, [HX_OP_BROADCAST_TO] = {broadcast_to, ANY},
    [HX_OP_SLICE_BACKWARD] = {slice_backward, ANY}, [HX_OP_SCATTER_ADD] = {scatter_add, FLOAT},
    /* the loss kernels keep loss and dloss in f32: a 16-bit loss (the graph
     * gives a loss its logits' dtype, and dloss the loss's) has none here */
    [HX_OP_CROSS_ENTROPY_BACKWARD] = {cross_entropy_backward, F32_ONLY},
    [HX_OP_BCE_LOGITS_BACKWARD] = {bce_logits_backward, F32_ONLY},
    [HX_OP_IM2COL] = {im2col, FLOAT}, [HX_OP_COL2IM] = {col2im, FLOAT},
    [HX_OP_CONV_GEMM] = {conv_gemm, FLOAT},
    [HX_OP_CONV_GEMM_BACKWARD_COLS] = {conv_gemm_backward_cols, FLOAT},
    [HX_OP_CONV_GEMM_BACKWARD_W] = {conv_gemm_backward_w, FLOAT},
    [HX_OP_MAX_POOL] = {max_pool, FLOAT}, [HX_OP_AVG_POOL] = {avg_pool, FLOAT},
    [HX_OP_MAX_POOL_BACKWARD] = {max_pool_backward, FLOAT},
    [HX_OP_AVG_POOL_BACKWARD] = {avg_pool_backward, FLOAT},
    [HX_OP_BATCHNORM] = {batchnorm, FLOAT},
    [HX_OP_BATCHNORM_BACKWARD_X] = {batchnorm_backward_x, FLOAT},
    [HX_OP_BATCHNORM_BACKWARD_GAMMA] = {batchnorm_backward_gamma, FLOAT},
    [HX_OP_SGD_UPDATE] = {sgd_update, F32_ONLY}, [HX_OP_ADAM_UPDATE] = {adam_update, F32_ONLY},
    [HX_OP_ADAGRAD_UPDATE] = {adagrad_update, F32_ONLY},
};

static bool takes(int dtypes, hx_dtype dt)
{
    if (dtypes == F32_ONLY) return dt == HX_DTYPE_F32;
    if (dtypes == FLOAT) return dt == HX_DTYPE_F32 || dt == HX_DTYPE_F16 || dt == HX_DTYPE_BF16;
    return hx_dtype_size(dt) != 0;
}

hx_launch_fn hx__cuda_kernel(hx_op op, hx_dtype dt)
{
    if (op == HX_KERNEL_SUMSQ) return takes(FLOAT, dt) ? sumsq : NULL;
#ifdef HX_HAVE_CUDNN
    if (op > HX_OP_COUNT) return hx__cudnn_kernel(op, dt);
#endif
    if ((unsigned)op >= HX_OP_COUNT || hx__ops[op].host_only) return NULL;
    const cuda_op *k = &cuda_ops[op];
    return k->fn && takes(k->dtypes, dt) ? k->fn : NULL;
}
#endif
