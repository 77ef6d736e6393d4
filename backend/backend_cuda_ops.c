/* The cuda backend's kernel table: one launcher per op, turning a node's
 * shapes and attributes into a call of a kernels/gpu function on the stream
 * of the launch in progress (backend_cuda_internal.h). The counterpart of
 * backend_cpu.c, op for op. */
#ifdef HX_HAVE_CUDA
#include "backend/backend_cuda_internal.h"
#include "backend/node_shapes.h"
#include "kernels/cpu/hx_kernels.h"

#define LAUNCH(name) \
    static hx_status name(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
#define C (hx__cuda_ctx())
#define SRC(i) (y->src[i])
#define DT(t) ((hx_kdtype)(t)->dtype)
#define RUN(call) return ran(y, (call))
#define ROWS(t) (hx_tensor_numel(t) / hx__last_dim(t)), hx__last_dim(t)

static hx_status ran(const hx_tensor *y, hx_gk_status st) { return st ? hx__cuda_fail(y, st) : HX_OK; }
static int64_t numel(const hx_tensor *t) { return hx_tensor_numel(t); }

/* ---- matmul ------------------------------------------------------------------ */

LAUNCH(matmul)
{
    hx__gemm_shape g = hx__matmul_shape(y);
    RUN(hx_gk_gemm(C, DT(y), g.ta, g.tb, g.batch, g.M, g.N, g.K, in[0], g.lda, g.M * g.K, in[1],
                   g.ldb, g.b_stride, out, g.N, g.M * g.N));
}

/* ---- elementwise ---------------------------------------------------------------- */

static hx_status binary(hx_binary_op op, const hx_tensor *y, void *out, void *const *in)
{
    int64_t sa[HX_MAX_DIMS], sb[HX_MAX_DIMS];
    hx__broadcast_strides(SRC(0), y, sa);
    hx__broadcast_strides(SRC(1), y, sb);
    RUN(hx_gk_binary(C, DT(y), op, out, in[0], sa, in[1], sb, y->shape, y->ndim));
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

LAUNCH(permute)
{
    const hx_tensor *x = SRC(0);
    int64_t xs[HX_MAX_DIMS], perm_xs[HX_MAX_DIMS], ys[HX_MAX_DIMS];
    hx__strides_of(x, xs);
    hx__strides_of(y, ys);
    for (int d = 0; d < y->ndim; d++) perm_xs[d] = xs[y->attr.i[d]];
    RUN(hx_gk_copy_strided(C, out, ys, in[0], perm_xs, y->shape, y->ndim, hx_dtype_size(y->dtype)));
}

LAUNCH(concat)
{
    int ax = (int)y->attr.i[0];
    size_t es = hx_dtype_size(y->dtype);
    int64_t ys[HX_MAX_DIMS], xs[HX_MAX_DIMS], off = 0;
    hx__strides_of(y, ys);
    for (int k = 0; k < y->n_src; k++) {
        const hx_tensor *x = SRC(k);
        hx__strides_of(x, xs);
        hx_gk_status st = hx_gk_copy_strided(C, (char *)out + off * ys[ax] * es, ys, in[k], xs,
                                             x->shape, x->ndim, es);
        if (st) return hx__cuda_fail(y, st);
        off += x->shape[ax];
    }
    return HX_OK;
}

/* attr: i[0] axis, i[1] start */
LAUNCH(slice)
{
    int64_t xs[HX_MAX_DIMS], ys[HX_MAX_DIMS];
    const char *base = hx__slice_view(y, in[0], xs, ys);
    RUN(hx_gk_copy_strided(C, out, ys, base, xs, y->shape, y->ndim, hx_dtype_size(y->dtype)));
}

/* dx (x's shape) = 0 outside the slice, dy inside. */
LAUNCH(slice_backward)
{
    const hx_tensor *dy = SRC(0);
    size_t es = hx_dtype_size(y->dtype);
    int64_t ys[HX_MAX_DIMS], dys[HX_MAX_DIMS];
    hx__strides_of(y, ys);
    hx__strides_of(dy, dys);
    hx_gk_status st = hx_gk_memset0(C, out, hx_tensor_nbytes(y));
    if (st) return hx__cuda_fail(y, st);
    char *base = (char *)out + y->attr.i[1] * ys[y->attr.i[0]] * es;
    RUN(hx_gk_copy_strided(C, base, ys, in[0], dys, dy->shape, dy->ndim, es));
}

LAUNCH(broadcast_to)
{
    int64_t xs[HX_MAX_DIMS], ys[HX_MAX_DIMS];
    hx__broadcast_strides(SRC(0), y, xs);
    hx__strides_of(y, ys);
    RUN(hx_gk_copy_strided(C, out, ys, in[0], xs, y->shape, y->ndim, hx_dtype_size(y->dtype)));
}

static hx_status reduce(const hx_tensor *y, void *out, const void *x, const hx_tensor *xt,
                        const uint8_t *red)
{
    hx_status st = hx__cuda_scratch(y, hx_gk_reduce_sum_scratch_bytes(xt->shape, xt->ndim, red));
    if (st) return st;
    RUN(hx_gk_reduce_sum(C, DT(y), out, x, xt->shape, xt->ndim, red));
}

/* attr: i[0] mask of reduced axes */
LAUNCH(reduce_sum)
{
    const hx_tensor *x = SRC(0);
    uint8_t red[HX_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) red[d] = y->attr.i[0] >> d & 1;
    return reduce(y, out, in[0], x, red);
}

/* Sums dy over the axes where y (right-aligned) has 1 or no dim. */
LAUNCH(sum_to)
{
    const hx_tensor *dy = SRC(0);
    uint8_t red[HX_MAX_DIMS];
    int lead = dy->ndim - y->ndim;
    for (int d = 0; d < dy->ndim; d++)
        red[d] = d < lead || (y->shape[d - lead] == 1 && dy->shape[d] != 1);
    return reduce(y, out, in[0], dy, red);
}

LAUNCH(cast) { RUN(hx_gk_cast(C, out, DT(y), in[0], DT(SRC(0)), numel(y))); }

/* ---- rows by id ---------------------------------------------------------------------- */

LAUNCH(gather)
{
    const hx_tensor *table = SRC(0), *ids = SRC(1);
    uint64_t *bad;
    hx_status st = hx__cuda_index_check(y, ids, table->shape[0], "id", &bad);
    if (st) return st;
    RUN(hx_gk_gather_rows(C, out, in[0], table->shape[0], hx_tensor_nbytes(table) / table->shape[0],
                          in[1], DT(ids), numel(ids), bad));
}

/* in: dy, ids; y is the table's shape */
LAUNCH(scatter_add)
{
    const hx_tensor *ids = SRC(1);
    uint64_t *bad;
    hx_status st = hx__cuda_scratch(y, hx_gk_scatter_add_scratch_bytes(numel(ids), y->shape[0]));
    if (!st) st = hx__cuda_index_check(y, ids, y->shape[0], "id", &bad);
    if (st) return st;
    RUN(hx_gk_scatter_add_rows(C, out, y->shape[0], y->shape[1], in[0], in[1], DT(ids),
                               numel(ids), bad));
}

/* ---- masks, dropout, losses ------------------------------------------------------------ */

LAUNCH(causal_mask)
{
    int64_t T = hx__last_dim(y);
    RUN(hx_gk_causal_mask(C, DT(y), out, in[0], numel(y) / (T * T), T, y->attr.f[0]));
}

/* The mask changes every training step (the CPU launcher's seed schedule)
 * and is shared by forward and backward. */
LAUNCH(dropout)
{
    if (!ex->train || y->attr.f[0] == 0) return copy(ex, y, out, in);
    uint64_t seed = y->attr.seed ^ ((uint64_t)ex->step * 0x9E3779B97F4A7C15ull);
    RUN(hx_gk_dropout(C, DT(y), out, in[0], y->attr.f[0], seed, y->attr.stream, numel(y)));
}

LAUNCH(cross_entropy)
{
    const hx_tensor *logits = SRC(0), *labels = SRC(1);
    int64_t N = logits->shape[0], Cl = logits->shape[1];
    uint64_t *bad;
    hx_status st = hx__cuda_scratch(y, hx_gk_cross_entropy_scratch_bytes(N));
    if (!st) st = hx__cuda_index_check(y, labels, Cl, "label", &bad);
    if (st) return st;
    RUN(hx_gk_cross_entropy(C, DT(logits), out, in[0], in[1], DT(labels), N, Cl, bad));
}

/* in: dloss, logits, labels */
LAUNCH(cross_entropy_backward)
{
    const hx_tensor *labels = SRC(2);
    uint64_t *bad;
    hx_status st = hx__cuda_index_check(y, labels, y->shape[1], "label", &bad);
    if (st) return st;
    RUN(hx_gk_cross_entropy_backward(C, DT(y), out, in[0], in[1], in[2], DT(labels), y->shape[0],
                                     y->shape[1], bad));
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
 * Update nodes: in = param, grad, state...; y->optimizer is the node's
 * hx_optimizer_config; the step taken is the session's step + 1. The plan
 * (f32 scalars) is built by the CPU optimizer code, so both agree bitwise. */

static hx_status update(const hx_tensor *y, hx_optim_plan pl, void *const *in, float *s1, float *s2)
{
    void *half = y->attr.i[0] ? in[y->attr.i[0]] : NULL;
    RUN(hx_gk_optim_update(C, &pl, in[0], s1, s2, in[1], half, numel(y)));
}

LAUNCH(sgd_update)
{
    const hx_optimizer_config *c = y->optimizer;
    hx_sgd_hp hp = {hx__update_lr(ex, c), c->momentum, c->dampening, c->weight_decay, c->nesterov};
    hx_optim_io io = hx__update_io(ex, y, in, 1);
    float *buf = hx__update_state(y, in, 0);
    if (hp.momentum != 0 && !buf) return HX_OK; /* as hx_optim_sgd: nothing to update with */
    return update(y, hx_optim_plan_sgd(&hp, ex->step + 1, &io), in, buf, NULL);
}

LAUNCH(adam_update)
{
    const hx_optimizer_config *c = y->optimizer;
    hx_adam_hp hp = {hx__update_lr(ex, c), c->beta1, c->beta2, c->eps, c->weight_decay,
                     c->kind == HX_OPTIMIZER_ADAMW};
    hx_optim_io io = hx__update_io(ex, y, in, 1);
    return update(y, hx_optim_plan_adam(&hp, ex->step + 1, &io), in, in[2], in[3]);
}

LAUNCH(adagrad_update)
{
    const hx_optimizer_config *c = y->optimizer;
    hx_adagrad_hp hp = {hx__update_lr(ex, c), c->lr_decay, c->eps, c->weight_decay};
    hx_optim_io io = hx__update_io(ex, y, in, 1);
    return update(y, hx_optim_plan_adagrad(&hp, ex->step + 1, &io), in, in[2], NULL);
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
    [HX_OP_GELU] = {gelu, FLOAT}, [HX_OP_SIGMOID] = {sigmoid, FLOAT},
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
    [HX_OP_SIGMOID_BACKWARD] = {sigmoid_backward, FLOAT},
    [HX_OP_TANH_BACKWARD] = {tanh_backward, FLOAT},
    [HX_OP_SOFTMAX_BACKWARD] = {softmax_backward, FLOAT},
    [HX_OP_LOG_SOFTMAX_BACKWARD] = {log_softmax_backward, FLOAT},
    [HX_OP_LAYERNORM_BACKWARD_X] = {layernorm_backward_x, FLOAT},
    [HX_OP_LAYERNORM_BACKWARD_GAMMA] = {layernorm_backward_gamma, FLOAT},
    [HX_OP_SUM_TO] = {sum_to, FLOAT}, [HX_OP_BROADCAST_TO] = {broadcast_to, ANY},
    [HX_OP_SLICE_BACKWARD] = {slice_backward, ANY}, [HX_OP_SCATTER_ADD] = {scatter_add, F32_ONLY},
    /* the loss kernels keep loss and dloss in f32: a 16-bit loss (the graph
     * gives a loss its logits' dtype, and dloss the loss's) has none here */
    [HX_OP_CROSS_ENTROPY_BACKWARD] = {cross_entropy_backward, F32_ONLY},
    [HX_OP_BCE_LOGITS_BACKWARD] = {bce_logits_backward, F32_ONLY},
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
    if ((unsigned)op >= HX_OP_COUNT || hx__ops[op].host_only) return NULL;
    const cuda_op *k = &cuda_ops[op];
    return k->fn && takes(k->dtypes, dt) ? k->fn : NULL;
}
#endif
