/* The CPU backend's kernel table: one launcher per op, turning a node's
 * shapes and attributes into a call of a kernels/cpu function. The
 * elementwise, softmax and layernorm launchers take f32, f16 and bf16 (the
 * kernels' *_half entry points widen 16-bit rows on the fly); the other
 * float ops' launchers read and write f32, and f16/bf16 nodes reach them
 * through the widening path (backend_cpu_widen.c). Data movement is
 * dtype-size aware. */
#include "backend/backend_cpu_conv.h"
#include "backend/backend_cpu_embedding.h"
#include "backend/backend_cpu_widen.h"
#include "backend/node_args.h"

#include <string.h>

_Static_assert((int)HX_K_F32 == (int)HX_DTYPE_F32 && (int)HX_K_F16 == (int)HX_DTYPE_F16 &&
                   (int)HX_K_BF16 == (int)HX_DTYPE_BF16 && (int)HX_K_I32 == (int)HX_DTYPE_I32 &&
                   (int)HX_K_I64 == (int)HX_DTYPE_I64,
               "kernel dtypes mirror hx_dtype");

#define LAUNCH(name) \
    static hx_status name(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
#define NT (ex->nthreads)
#define X(i) ((const float *)in[i])
#define SRC(i) (y->src[i])
/* launchers that take every float dtype: whether y is f32, else its 16-bit dtype */
#define F32 (y->dtype == HX_DTYPE_F32)
#define DT ((hx_kdtype)y->dtype)

static int64_t numel(const hx_tensor *t) { return hx_tensor_numel(t); }

/* ---- matmul ------------------------------------------------------------------ */

/* f32, or f16 / bf16 through hx_k_gemm_half (f32 products, no f32 copy of
 * x or of the product; bitwise widening and rounding, backend_cpu_fused.c) */
LAUNCH(matmul)
{
    hx__gemm_args g = hx__matmul_args(y);
    if (y->dtype == HX_DTYPE_F32) {
        hx_k_gemm_f32(g.ta, g.tb, g.batch, g.M, g.N, g.K, 1.0f, X(0), g.lda, g.a_stride, X(1),
                      g.ldb, g.b_stride, 0.0f, out, g.ldc, g.c_stride, NT);
        return HX_OK;
    }
    return hx__cpu_gemm_half(ex, y, &g, out, in[0], in[1], NULL, -1);
}

/* ---- elementwise --------------------------------------------------------------------- */

static hx_status binary(const hx_exec *ex, hx_binary_op op, const hx_tensor *y, void *out,
                        void *const *in)
{
    hx__binary_args b = hx__binary_of(y);
    if (F32)
        hx_k_binary_f32(op, out, X(0), b.a_strides, X(1), b.b_strides, y->shape, y->ndim, NT);
    else
        hx_k_binary_half(op, out, in[0], b.a_strides, in[1], b.b_strides, y->shape, y->ndim, DT,
                         NT);
    return HX_OK;
}

LAUNCH(add) { return binary(ex, HX_BINARY_ADD, y, out, in); }
LAUNCH(sub) { return binary(ex, HX_BINARY_SUB, y, out, in); }
LAUNCH(mul) { return binary(ex, HX_BINARY_MUL, y, out, in); }
LAUNCH(div) { return binary(ex, HX_BINARY_DIV, y, out, in); }

LAUNCH(scale)
{
    if (F32) hx_k_scale_f32(out, X(0), y->attr.f[0], numel(y), NT);
    else hx_k_scale_half(out, in[0], y->attr.f[0], DT, numel(y), NT);
    return HX_OK;
}

LAUNCH(bias_add)
{
    hx__rows_args r = hx__rows_of(y);
    if (F32) hx_k_bias_add_f32(out, X(0), X(1), r.rows, r.cols, NT);
    else hx_k_bias_add_half(out, in[0], in[1], DT, r.rows, r.cols, NT);
    return HX_OK;
}

#define UNARY(name, op)                                                      \
    LAUNCH(name)                                                             \
    {                                                                        \
        if (F32) hx_k_unary_f32(op, out, X(0), numel(y), NT);                \
        else hx_k_unary_half(op, out, in[0], DT, numel(y), NT);              \
        return HX_OK;                                                        \
    }
UNARY(relu, HX_UNARY_RELU)
UNARY(gelu, HX_UNARY_GELU)
UNARY(gelu_erf, HX_UNARY_GELU_ERF)
UNARY(sigmoid, HX_UNARY_SIGMOID)
UNARY(tanh_, HX_UNARY_TANH)
UNARY(exp_, HX_UNARY_EXP)
UNARY(log_, HX_UNARY_LOG)
UNARY(sqrt_, HX_UNARY_SQRT)

/* in: dy, then x (relu, gelus) or y (sigmoid, tanh) */
#define UNARY_BACKWARD(name, op, uses_x)                                              \
    LAUNCH(name)                                                                      \
    {                                                                                 \
        if (F32)                                                                      \
            hx_k_unary_backward_f32(op, out, X(0), uses_x ? X(1) : NULL,              \
                                    uses_x ? NULL : X(1), numel(y), NT);              \
        else                                                                          \
            hx_k_unary_backward_half(op, out, in[0], uses_x ? in[1] : NULL,           \
                                     uses_x ? NULL : in[1], DT, numel(y), NT);        \
        return HX_OK;                                                                 \
    }
UNARY_BACKWARD(relu_backward, HX_UNARY_RELU, 1)
UNARY_BACKWARD(gelu_backward, HX_UNARY_GELU, 1)
UNARY_BACKWARD(gelu_erf_backward, HX_UNARY_GELU_ERF, 1)
UNARY_BACKWARD(sigmoid_backward, HX_UNARY_SIGMOID, 0)
UNARY_BACKWARD(tanh_backward, HX_UNARY_TANH, 0)

/* ---- rows ------------------------------------------------------------------------------ */

#define ROWS(t) hx__rows_of(t).rows, hx__rows_of(t).cols

/* A 16-bit row kernel's result: -1 when its f32 row scratch could not be had. */
static hx_status rows_half(const hx_exec *ex, const hx_tensor *y, const hx_tensor *rows_of,
                           int rc)
{
    return rc ? hx__cpu_row_scratch_error(ex, y, hx__rows_of(rows_of).cols) : HX_OK;
}

LAUNCH(softmax)
{
    if (F32) hx_k_softmax_forward_f32(out, X(0), ROWS(y), NT);
    else return rows_half(ex, y, y, hx_k_softmax_forward_half(out, in[0], DT, ROWS(y), NT));
    return HX_OK;
}

LAUNCH(log_softmax)
{
    if (F32) hx_k_log_softmax_forward_f32(out, X(0), ROWS(y), NT);
    else return rows_half(ex, y, y, hx_k_log_softmax_forward_half(out, in[0], DT, ROWS(y), NT));
    return HX_OK;
}

LAUNCH(softmax_backward)
{
    if (F32) hx_k_softmax_backward_f32(out, X(0), X(1), ROWS(y), NT);
    else
        return rows_half(ex, y, y,
                         hx_k_softmax_backward_half(out, in[0], in[1], DT, ROWS(y), NT));
    return HX_OK;
}

LAUNCH(log_softmax_backward)
{
    if (F32) hx_k_log_softmax_backward_f32(out, X(0), X(1), ROWS(y), NT);
    else
        return rows_half(ex, y, y,
                         hx_k_log_softmax_backward_half(out, in[0], in[1], DT, ROWS(y), NT));
    return HX_OK;
}

LAUNCH(layernorm)
{
    float eps = y->attr.f[0];
    if (F32) hx_k_layernorm_forward_f32(out, X(0), X(1), X(2), eps, ROWS(y), NT);
    else
        return rows_half(ex, y, y,
                         hx_k_layernorm_forward_half(out, in[0], in[1], in[2], DT, eps, ROWS(y),
                                                     NT));
    return HX_OK;
}

/* in: dy, x, gamma */
LAUNCH(layernorm_backward_x)
{
    float eps = y->attr.f[0];
    if (F32) hx_k_layernorm_backward_x_f32(out, X(0), X(1), X(2), eps, ROWS(y), NT);
    else
        return rows_half(ex, y, y,
                         hx_k_layernorm_backward_x_half(out, in[0], in[1], in[2], DT, eps,
                                                        ROWS(y), NT));
    return HX_OK;
}

/* in: dy, x; y is gamma-shaped */
LAUNCH(layernorm_backward_gamma)
{
    const hx_tensor *x = SRC(1);
    float eps = y->attr.f[0];
    if (F32) hx_k_layernorm_backward_gamma_f32(out, X(0), X(1), eps, ROWS(x), NT);
    else
        return rows_half(ex, y, x,
                         hx_k_layernorm_backward_gamma_half(out, in[0], in[1], DT, eps, ROWS(x),
                                                            NT));
    return HX_OK;
}

/* ---- data movement ------------------------------------------------------------------------ */

LAUNCH(copy)
{
    if (out != in[0]) memcpy(out, in[0], hx_tensor_nbytes(y));
    return HX_OK;
}

static void copy_strided(const hx_exec *ex, hx__copy_args c, void *out, const void *in)
{
    hx_k_copy_strided((char *)out + c.out_offset, c.out_strides, (const char *)in + c.in_offset,
                      c.in_strides, c.shape, c.ndim, c.elem_size, NT);
}

LAUNCH(permute)
{
    copy_strided(ex, hx__permute_of(y), out, in[0]);
    return HX_OK;
}

LAUNCH(concat)
{
    for (int k = 0; k < y->n_src; k++) copy_strided(ex, hx__concat_part_of(y, k), out, in[k]);
    return HX_OK;
}

LAUNCH(slice)
{
    copy_strided(ex, hx__slice_of(y), out, in[0]);
    return HX_OK;
}

/* dx (x's shape) = 0 outside the slice, dy inside. */
LAUNCH(slice_backward)
{
    memset(out, 0, hx_tensor_nbytes(y));
    copy_strided(ex, hx__slice_backward_of(y), out, in[0]);
    return HX_OK;
}

LAUNCH(broadcast_to)
{
    copy_strided(ex, hx__broadcast_to_of(y), out, in[0]);
    return HX_OK;
}

static hx_status reduce(const hx_exec *ex, hx__reduce_args r, void *out, const float *x)
{
    hx_k_reduce_sum_f32(out, x, r.shape, r.ndim, r.reduce, NT);
    return HX_OK;
}

LAUNCH(reduce_sum) { return reduce(ex, hx__reduce_sum_of(y), out, X(0)); }
LAUNCH(sum_to) { return reduce(ex, hx__sum_to_of(y), out, X(0)); }

LAUNCH(cast)
{
    hx_k_cast(out, (hx_kdtype)y->dtype, in[0], (hx_kdtype)SRC(0)->dtype, numel(y), NT);
    return HX_OK;
}

/* ---- rows by id ------------------------------------------------------------------------------ */

static hx_status bad_id(const hx_tensor *y, const hx_tensor *ids, const void *idv, int64_t pos,
                        int64_t rows, const char *what)
{
    int64_t id = ids->dtype == HX_DTYPE_I64 ? ((const int64_t *)idv)[pos]
                                            : ((const int32_t *)idv)[pos];
    return hx__error(HX_ERR_INDEX,
                     "%s '%s': %s %lld at position %lld of '%s' is outside [0, %lld)",
                     hx__ops[y->op].name, y->name, what, (long long)id, (long long)pos,
                     ids->name, (long long)rows);
}

LAUNCH(gather)
{
    hx__gather_args g = hx__gather_of(y);
    int64_t bad;
    if (hx_k_gather_rows(out, in[0], g.rows, g.row_bytes, in[1], (hx_kdtype)g.ids->dtype, g.n_ids,
                         NT, &bad))
        return bad_id(y, g.ids, in[1], bad, g.rows, "id");
    return HX_OK;
}

LAUNCH(scatter_add)
{
    hx__scatter_args a = hx__scatter_add_of(y);
    int64_t bad;
    if (hx_k_scatter_add_rows_f32(out, a.rows, a.cols, X(0), in[1], (hx_kdtype)a.ids->dtype,
                                  a.n_ids, NT, &bad))
        return bad_id(y, a.ids, in[1], bad, a.rows, "id");
    return HX_OK;
}

/* ---- masks, dropout, losses ------------------------------------------------------------------ */

LAUNCH(causal_mask)
{
    hx__mask_args m = hx__causal_mask_of(y);
    if (F32) hx_k_causal_mask_f32(out, X(0), m.batch, m.T, y->attr.f[0], NT);
    else hx_k_causal_mask_half(out, in[0], DT, m.batch, m.T, y->attr.f[0], NT);
    return HX_OK;
}

LAUNCH(dropout)
{
    hx__dropout_args d = hx__dropout_of(ex, y);
    if (d.identity) {
        /* f32 buffers also for a 16-bit node (widened) */
        if (out != in[0]) memcpy(out, in[0], sizeof(float) * d.n);
        return HX_OK;
    }
    hx_k_dropout_f32(out, X(0), d.p, d.seed, d.stream, d.n, NT);
    return HX_OK;
}

LAUNCH(cross_entropy)
{
    hx__xent_args a = hx__cross_entropy_of(y);
    const void *labels = in[a.label_in];
    int64_t bad;
    if (hx_k_cross_entropy_forward_f32(out, X(0), labels, (hx_kdtype)a.labels->dtype, a.rows,
                                       a.classes, NT, &bad))
        return bad_id(y, a.labels, labels, bad, a.classes, "label");
    return HX_OK;
}

LAUNCH(cross_entropy_backward)
{
    hx__xent_args a = hx__cross_entropy_of(y);
    const void *labels = in[a.label_in];
    int64_t bad;
    if (hx_k_cross_entropy_backward_f32(out, X(0), X(1), labels, (hx_kdtype)a.labels->dtype, a.rows,
                                        a.classes, NT, &bad))
        return bad_id(y, a.labels, labels, bad, a.classes, "label");
    return HX_OK;
}

LAUNCH(bce_logits)
{
    hx_k_bce_logits_forward_f32(out, X(0), X(1), numel(SRC(0)), NT);
    return HX_OK;
}

/* in: dloss, x, t */
LAUNCH(bce_logits_backward)
{
    hx_k_bce_logits_backward_f32(out, X(0), X(1), X(2), numel(y), NT);
    return HX_OK;
}

/* ---- optimizer updates --------------------------------------------------------------------- */

/* Update nodes (node_args.h). The session's step count is the optimizer's
 * step (torch's state['step']); gradients were scanned for Inf/NaN before
 * any update ran, so the kernels need not scan again. Each returns its
 * kernel's status. */

LAUNCH(sgd_update)
{
    hx_sgd_hp hp = hx__sgd_hp_of(ex, y);
    hx_optim_io io = hx__update_io(ex, y, in, NT);
    int64_t step = ex->step;
    int st = hx_optim_sgd(in[0], hx__update_state(y, in, 0), numel(y), &step, &hp, &io);
    return hx__update_status(y, &io, st);
}

LAUNCH(adam_update)
{
    hx_adam_hp hp = hx__adam_hp_of(ex, y);
    hx_optim_io io = hx__update_io(ex, y, in, NT);
    int64_t step = ex->step;
    int st = hx_optim_adam(in[0], in[2], in[3], numel(y), &step, &hp, &io);
    return hx__update_status(y, &io, st);
}

LAUNCH(adagrad_update)
{
    hx_adagrad_hp hp = hx__adagrad_hp_of(ex, y);
    hx_optim_io io = hx__update_io(ex, y, in, NT);
    int64_t step = ex->step;
    int st = hx_optim_adagrad(in[0], in[2], numel(y), &step, &hp, &io);
    return hx__update_status(y, &io, st);
}

LAUNCH(ftrl_update)
{
    hx_ftrl_hp hp = hx__ftrl_hp_of(ex, y);
    hx_optim_io io = hx__update_io(ex, y, in, NT);
    int st = hx_optim_ftrl(in[0], in[2], in[3], numel(y), &hp, &io);
    return hx__update_status(y, &io, st);
}

static const hx_launch_fn cpu_kernels[HX_OP_COUNT] = {
    [HX_OP_MATMUL] = matmul, [HX_OP_ADD] = add, [HX_OP_SUB] = sub, [HX_OP_MUL] = mul,
    [HX_OP_DIV] = div, [HX_OP_SCALE] = scale, [HX_OP_BIAS_ADD] = bias_add,
    [HX_OP_RELU] = relu, [HX_OP_GELU] = gelu, [HX_OP_GELU_ERF] = gelu_erf,
    [HX_OP_SIGMOID] = sigmoid, [HX_OP_TANH] = tanh_,
    [HX_OP_EXP] = exp_, [HX_OP_LOG] = log_, [HX_OP_SQRT] = sqrt_,
    [HX_OP_SOFTMAX] = softmax, [HX_OP_LOG_SOFTMAX] = log_softmax, [HX_OP_LAYERNORM] = layernorm,
    [HX_OP_RESHAPE] = copy, [HX_OP_PERMUTE] = permute, [HX_OP_CONCAT] = concat,
    [HX_OP_SLICE] = slice, [HX_OP_REDUCE_SUM] = reduce_sum, [HX_OP_CAST] = cast,
    [HX_OP_GATHER] = gather, [HX_OP_CAUSAL_MASK] = causal_mask,
    [HX_OP_CROSS_ENTROPY] = cross_entropy, [HX_OP_BCE_LOGITS] = bce_logits,
    [HX_OP_DROPOUT] = dropout,
    [HX_OP_EMBEDDING_LOOKUP] = hx__cpu_embedding_lookup, [HX_OP_EMBEDDING_BAG] = hx__cpu_embedding_bag,
    [HX_OP_RELU_BACKWARD] = relu_backward, [HX_OP_GELU_BACKWARD] = gelu_backward,
    [HX_OP_GELU_ERF_BACKWARD] = gelu_erf_backward,
    [HX_OP_SIGMOID_BACKWARD] = sigmoid_backward, [HX_OP_TANH_BACKWARD] = tanh_backward,
    [HX_OP_SOFTMAX_BACKWARD] = softmax_backward,
    [HX_OP_LOG_SOFTMAX_BACKWARD] = log_softmax_backward,
    [HX_OP_LAYERNORM_BACKWARD_X] = layernorm_backward_x,
    [HX_OP_LAYERNORM_BACKWARD_GAMMA] = layernorm_backward_gamma,
    [HX_OP_SUM_TO] = sum_to, [HX_OP_BROADCAST_TO] = broadcast_to,
    [HX_OP_SLICE_BACKWARD] = slice_backward, [HX_OP_SCATTER_ADD] = scatter_add,
    [HX_OP_CROSS_ENTROPY_BACKWARD] = cross_entropy_backward,
    [HX_OP_BCE_LOGITS_BACKWARD] = bce_logits_backward,
    [HX_OP_IM2COL] = hx__cpu_im2col, [HX_OP_COL2IM] = hx__cpu_col2im,
    [HX_OP_CONV_GEMM] = hx__cpu_conv_gemm,
    [HX_OP_CONV_GEMM_BACKWARD_COLS] = hx__cpu_conv_gemm_backward_cols,
    [HX_OP_CONV_GEMM_BACKWARD_W] = hx__cpu_conv_gemm_backward_w,
    [HX_OP_MAX_POOL] = hx__cpu_max_pool, [HX_OP_MAX_POOL_BACKWARD] = hx__cpu_max_pool_backward,
    [HX_OP_AVG_POOL] = hx__cpu_avg_pool, [HX_OP_AVG_POOL_BACKWARD] = hx__cpu_avg_pool_backward,
    [HX_OP_BATCHNORM] = hx__cpu_batchnorm,
    [HX_OP_BATCHNORM_BACKWARD_X] = hx__cpu_batchnorm_backward_x,
    [HX_OP_BATCHNORM_BACKWARD_GAMMA] = hx__cpu_batchnorm_backward_gamma,
    [HX_OP_SGD_UPDATE] = sgd_update, [HX_OP_ADAM_UPDATE] = adam_update,
    [HX_OP_ADAGRAD_UPDATE] = adagrad_update, [HX_OP_FTRL_UPDATE] = ftrl_update,
    [HX_OP_EMBEDDING_UPDATE] = hx__cpu_embedding_update,
    [HX_OP_EMBEDDING_BAG_WEIGHTS_BACKWARD] = hx__cpu_embedding_bag_weights_backward,
};

/* Ops whose launcher above computes on f32 buffers (the others take every
 * float dtype, or are not float ops). */
static const bool computes_f32[HX_OP_COUNT] = {
    [HX_OP_REDUCE_SUM] = 1,
    [HX_OP_CROSS_ENTROPY] = 1, [HX_OP_BCE_LOGITS] = 1,
    [HX_OP_DROPOUT] = 1, [HX_OP_SUM_TO] = 1, [HX_OP_SCATTER_ADD] = 1,
    [HX_OP_CROSS_ENTROPY_BACKWARD] = 1, [HX_OP_BCE_LOGITS_BACKWARD] = 1,
    [HX_OP_IM2COL] = 1, [HX_OP_COL2IM] = 1, [HX_OP_CONV_GEMM] = 1,
    [HX_OP_CONV_GEMM_BACKWARD_COLS] = 1, [HX_OP_CONV_GEMM_BACKWARD_W] = 1, [HX_OP_MAX_POOL] = 1,
    [HX_OP_MAX_POOL_BACKWARD] = 1, [HX_OP_AVG_POOL] = 1, [HX_OP_AVG_POOL_BACKWARD] = 1,
    [HX_OP_BATCHNORM] = 1, [HX_OP_BATCHNORM_BACKWARD_X] = 1, [HX_OP_BATCHNORM_BACKWARD_GAMMA] = 1,
};

/* A float op's launch: the float inputs of a node share its dtype (the
 * graph's rule), so an f32 node runs its launcher as it is and a 16-bit one
 * is widened. */
static hx_status float_op(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    hx_launch_fn fn = cpu_kernels[y->op];
    return y->dtype == HX_DTYPE_F32 ? fn(ex, y, out, in) : hx__cpu_widen(fn, ex, y, out, in);
}

hx_launch_fn hx__cpu_kernel(hx_op op)
{
    if ((unsigned)op >= HX_OP_COUNT) return NULL;
    return computes_f32[op] ? float_op : cpu_kernels[op];
}
