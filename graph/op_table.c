/* The op table: one row per op (name, default target, backward rule), and
 * the backward rules. A rule builds gradient nodes out of ordinary ops, so a
 * gradient runs wherever its ops run and needs no special executor support. */
#include "graph/graph.h"

#include <string.h>

/* ---- gradient-only node builders ------------------------------------------- */

static hx_tensor *grad_node(hx_graph *g, hx_op op, int n, hx_tensor *const *src,
                            const hx_tensor *like, const hx_attrs *at)
{
    return hx__node_new(g, op, n, src, like->dtype, like->ndim, like->shape, at);
}

/* Sums dy over the axes on which `like` was broadcast, to like's shape. */
static hx_tensor *sum_to(hx_graph *g, hx_tensor *dy, const hx_tensor *like)
{
    if (!dy || hx__same_shape(dy, like)) return dy;
    return grad_node(g, HX_OP_SUM_TO, 1, &dy, like, NULL);
}

/* Repeats x (right-aligned, dims of 1 broadcast) to like's shape. */
static hx_tensor *broadcast_to(hx_graph *g, hx_tensor *x, const hx_tensor *like)
{
    return grad_node(g, HX_OP_BROADCAST_TO, 1, &x, like, NULL);
}

static hx_tensor *pair_node(hx_graph *g, hx_op op, hx_tensor *a, hx_tensor *b,
                            const hx_tensor *like, const hx_attrs *at)
{
    if (!a || !b) return NULL;
    hx_tensor *src[2] = {a, b};
    return grad_node(g, op, 2, src, like, at);
}

/* ---- rules -----------------------------------------------------------------------
 * A gradient has its tensor's dtype: the float inputs of an op share the
 * output's dtype, so dy and every dx of a rule are of one dtype (f32, f16 or
 * bf16), and a cast's gradient is cast back to the cast's source dtype. */

#define RULE(name) \
    static hx_status name(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs, hx_tensor **dx)
#define SRC(i) (y->src[i])

/* Flattens (..., R, C) to (prod(...)*R, C). */
static hx_tensor *flatten_rows(hx_graph *g, hx_tensor *x)
{
    int64_t shape[2] = {hx_tensor_numel(x) / x->shape[x->ndim - 1], x->shape[x->ndim - 1]};
    return x->ndim == 2 ? x : hx_reshape(g, x, 2, shape);
}

RULE(matmul_backward)
{
    hx_tensor *a = SRC(0), *b = SRC(1);
    bool ta = y->attr.i[0], tb = y->attr.i[1];
    if (needs[0]) {
        if (!ta) dx[0] = tb ? hx_matmul(g, dy, b, false, false) : hx_matmul(g, dy, b, false, true);
        else     dx[0] = tb ? hx_matmul(g, b, dy, true, true) : hx_matmul(g, b, dy, false, true);
    }
    if (needs[1]) {
        if (b->ndim == 2 && a->ndim > 2) { /* b shared by every batch: sum over rows */
            hx_tensor *a2 = flatten_rows(g, a), *dy2 = a2 ? flatten_rows(g, dy) : NULL;
            dx[1] = !dy2 ? NULL : tb ? hx_matmul(g, dy2, a2, true, false)
                                     : hx_matmul(g, a2, dy2, true, false);
        } else if (!ta) {
            dx[1] = tb ? hx_matmul(g, dy, a, true, false) : hx_matmul(g, a, dy, true, false);
        } else {
            dx[1] = tb ? hx_matmul(g, dy, a, true, true) : hx_matmul(g, a, dy, false, false);
        }
    }
    return HX_OK;
}

RULE(add_backward)
{
    if (needs[0]) dx[0] = sum_to(g, dy, SRC(0));
    if (needs[1]) dx[1] = sum_to(g, dy, SRC(1));
    return HX_OK;
}

RULE(sub_backward)
{
    if (needs[0]) dx[0] = sum_to(g, dy, SRC(0));
    if (needs[1]) dx[1] = sum_to(g, hx_scale(g, dy, -1.0f), SRC(1));
    return HX_OK;
}

RULE(mul_backward)
{
    if (needs[0]) dx[0] = sum_to(g, hx_mul(g, dy, SRC(1)), SRC(0));
    if (needs[1]) dx[1] = sum_to(g, hx_mul(g, dy, SRC(0)), SRC(1));
    return HX_OK;
}

/* y = a / b: da = dy / b, db = -dy * y / b */
RULE(div_backward)
{
    if (needs[0]) dx[0] = sum_to(g, hx_div(g, dy, SRC(1)), SRC(0));
    if (needs[1]) dx[1] = sum_to(g, hx_scale(g, hx_div(g, hx_mul(g, dy, y), SRC(1)), -1.0f), SRC(1));
    return HX_OK;
}

RULE(scale_backward)
{
    dx[0] = hx_scale(g, dy, y->attr.f[0]);
    return HX_OK;
}

RULE(bias_add_backward)
{
    if (needs[0]) dx[0] = dy;
    if (needs[1]) dx[1] = sum_to(g, dy, SRC(1));
    return HX_OK;
}

/* relu and the gelus differentiate through x; sigmoid and tanh through y. */
RULE(relu_backward) { dx[0] = pair_node(g, HX_OP_RELU_BACKWARD, dy, SRC(0), SRC(0), NULL); return HX_OK; }
/* gelu_backward(dy, x, y): the kernels read dy and x; a host session may
 * have y keep gelu's derivative and read dy and y instead (lower.c) */
RULE(gelu_backward)
{
    hx_tensor *src[3] = {dy, SRC(0), y};
    dx[0] = grad_node(g, HX_OP_GELU_BACKWARD, 3, src, SRC(0), NULL);
    return HX_OK;
}
RULE(gelu_erf_backward) { dx[0] = pair_node(g, HX_OP_GELU_ERF_BACKWARD, dy, SRC(0), SRC(0), NULL); return HX_OK; }
RULE(sigmoid_backward) { dx[0] = pair_node(g, HX_OP_SIGMOID_BACKWARD, dy, y, SRC(0), NULL); return HX_OK; }
RULE(tanh_backward) { dx[0] = pair_node(g, HX_OP_TANH_BACKWARD, dy, y, SRC(0), NULL); return HX_OK; }
RULE(exp_backward) { dx[0] = hx_mul(g, dy, y); return HX_OK; }
RULE(log_backward) { dx[0] = hx_div(g, dy, SRC(0)); return HX_OK; }
RULE(sqrt_backward) { dx[0] = hx_scale(g, hx_div(g, dy, y), 0.5f); return HX_OK; }
RULE(softmax_backward) { dx[0] = pair_node(g, HX_OP_SOFTMAX_BACKWARD, dy, y, y, NULL); return HX_OK; }
RULE(log_softmax_backward) { dx[0] = pair_node(g, HX_OP_LOG_SOFTMAX_BACKWARD, dy, y, y, NULL); return HX_OK; }

RULE(layernorm_backward)
{
    hx_tensor *x = SRC(0), *gamma = SRC(1);
    if (needs[0]) {
        hx_tensor *src[3] = {dy, x, gamma};
        dx[0] = grad_node(g, HX_OP_LAYERNORM_BACKWARD_X, 3, src, x, &y->attr);
    }
    if (needs[1]) dx[1] = pair_node(g, HX_OP_LAYERNORM_BACKWARD_GAMMA, dy, x, gamma, &y->attr);
    if (needs[2]) dx[2] = sum_to(g, dy, SRC(2));
    return HX_OK;
}

RULE(reshape_backward)
{
    dx[0] = hx_reshape(g, dy, SRC(0)->ndim, SRC(0)->shape);
    return HX_OK;
}

RULE(permute_backward)
{
    int inverse[HX_MAX_DIMS];
    for (int i = 0; i < y->ndim; i++) inverse[y->attr.i[i]] = i;
    dx[0] = hx_permute(g, dy, inverse);
    return HX_OK;
}

RULE(concat_backward)
{
    int ax = (int)y->attr.i[0];
    int64_t off = 0;
    for (int k = 0; k < y->n_src; k++) {
        int64_t len = SRC(k)->shape[ax];
        if (needs[k]) dx[k] = hx_slice(g, dy, ax, off, off + len);
        off += len;
    }
    return HX_OK;
}

RULE(slice_backward)
{
    dx[0] = grad_node(g, HX_OP_SLICE_BACKWARD, 1, &dy, SRC(0), &y->attr);
    return HX_OK;
}

/* The reduced dims come back as 1s (keepdims layout), then broadcast. */
RULE(reduce_sum_backward)
{
    const hx_tensor *x = SRC(0);
    int64_t keep[HX_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) keep[d] = (y->attr.i[0] >> d & 1) ? 1 : x->shape[d];
    hx_tensor *k = hx_reshape(g, dy, x->ndim, keep);
    dx[0] = k ? broadcast_to(g, k, x) : NULL;
    return HX_OK;
}

RULE(cast_backward)
{
    dx[0] = hx_cast(g, dy, SRC(0)->dtype);
    return HX_OK;
}

/* The table's gradient has the table's dtype (scatter_add sums in f32). */
RULE(gather_backward)
{
    dx[0] = pair_node(g, HX_OP_SCATTER_ADD, dy, SRC(1), SRC(0), NULL);
    return HX_OK;
}

RULE(causal_mask_backward)
{
    hx_attrs at = {.f = {0.0f}};
    dx[0] = grad_node(g, HX_OP_CAUSAL_MASK, 1, &dy, y, &at);
    return HX_OK;
}

RULE(cross_entropy_backward)
{
    hx_tensor *src[3] = {dy, SRC(0), SRC(1)};
    dx[0] = grad_node(g, HX_OP_CROSS_ENTROPY_BACKWARD, 3, src, SRC(0), NULL);
    return HX_OK;
}

/* loss = mean(max(x,0) - x t + log(1+exp(-|x|))): dt = -x dy / n */
RULE(bce_logits_backward)
{
    hx_tensor *x = SRC(0), *t = SRC(1);
    if (needs[0]) {
        hx_tensor *src[3] = {dy, x, t};
        dx[0] = grad_node(g, HX_OP_BCE_LOGITS_BACKWARD, 3, src, x, NULL);
    }
    if (needs[1]) dx[1] = hx_scale(g, hx_mul(g, x, dy), (float)(-1.0 / (double)hx_tensor_numel(x)));
    return HX_OK;
}

/* The same (seed, stream) gives the same mask: dropout of dy is the gradient. */
RULE(dropout_backward)
{
    dx[0] = grad_node(g, HX_OP_DROPOUT, 1, &dy, dy, &y->attr);
    return HX_OK;
}

/* The table's rows get their gradient through the table's update node
 * (hx_graph_apply_optimizer), not as a tensor; ids and offsets are
 * integers. Per-sample weights: d loss / d w_j = row(ids[j]) . dy[bag(j)]. */
RULE(embedding_bag_backward)
{
    if (!needs[2]) return HX_OK;
    hx_tensor *src[3] = {dy, SRC(0), SRC(1)};
    dx[2] = grad_node(g, HX_OP_EMBEDDING_BAG_WEIGHTS_BACKWARD, 3, src, SRC(2), &y->attr);
    if (dx[2]) {
        dx[2]->table = y->table;
        dx[2]->target = HX_TARGET_DEFAULT; /* next to the table */
    }
    return HX_OK;
}

/* ---- the table ------------------------------------------------------------------------ */

#define CPU HX_TARGET_CPU
#define DEV HX_TARGET_DEVICE
#define HOST_ONLY true

const hx_op_info hx__ops[HX_OP_COUNT] = {
    [HX_OP_INPUT] = {"input", CPU, NULL, false},
    [HX_OP_PARAM] = {"param", CPU, NULL, false},
    [HX_OP_CONSTANT] = {"constant", CPU, NULL, false},
    [HX_OP_STATE] = {"state", CPU, NULL, false},
    [HX_OP_MATMUL] = {"matmul", DEV, matmul_backward, false},
    [HX_OP_ADD] = {"add", DEV, add_backward, false},
    [HX_OP_SUB] = {"sub", DEV, sub_backward, false},
    [HX_OP_MUL] = {"mul", DEV, mul_backward, false},
    [HX_OP_DIV] = {"div", DEV, div_backward, false},
    [HX_OP_SCALE] = {"scale", DEV, scale_backward, false},
    [HX_OP_BIAS_ADD] = {"bias_add", DEV, bias_add_backward, false},
    [HX_OP_RELU] = {"relu", DEV, relu_backward, false},
    [HX_OP_GELU] = {"gelu", DEV, gelu_backward, false},
    [HX_OP_GELU_ERF] = {"gelu_erf", DEV, gelu_erf_backward, false},
    [HX_OP_SIGMOID] = {"sigmoid", DEV, sigmoid_backward, false},
    [HX_OP_TANH] = {"tanh", DEV, tanh_backward, false},
    [HX_OP_EXP] = {"exp", DEV, exp_backward, false},
    [HX_OP_LOG] = {"log", DEV, log_backward, false},
    [HX_OP_SQRT] = {"sqrt", DEV, sqrt_backward, false},
    [HX_OP_SOFTMAX] = {"softmax", DEV, softmax_backward, false},
    [HX_OP_LOG_SOFTMAX] = {"log_softmax", DEV, log_softmax_backward, false},
    [HX_OP_LAYERNORM] = {"layernorm", DEV, layernorm_backward, false},
    [HX_OP_RESHAPE] = {"reshape", DEV, reshape_backward, false},
    [HX_OP_PERMUTE] = {"permute", DEV, permute_backward, false},
    [HX_OP_CONCAT] = {"concat", DEV, concat_backward, false},
    [HX_OP_SLICE] = {"slice", DEV, slice_backward, false},
    [HX_OP_REDUCE_SUM] = {"reduce_sum", DEV, reduce_sum_backward, false},
    [HX_OP_CAST] = {"cast", DEV, cast_backward, false},
    [HX_OP_GATHER] = {"gather", CPU, gather_backward, false},
    [HX_OP_CAUSAL_MASK] = {"causal_mask", DEV, causal_mask_backward, false},
    [HX_OP_CROSS_ENTROPY] = {"cross_entropy", DEV, cross_entropy_backward, false},
    [HX_OP_BCE_LOGITS] = {"bce_with_logits", DEV, bce_logits_backward, false},
    [HX_OP_DROPOUT] = {"dropout", DEV, dropout_backward, false},
    [HX_OP_RELU_BACKWARD] = {"relu_backward", DEV, NULL, false},
    [HX_OP_GELU_BACKWARD] = {"gelu_backward", DEV, NULL, false},
    [HX_OP_GELU_ERF_BACKWARD] = {"gelu_erf_backward", DEV, NULL, false},
    [HX_OP_SIGMOID_BACKWARD] = {"sigmoid_backward", DEV, NULL, false},
    [HX_OP_TANH_BACKWARD] = {"tanh_backward", DEV, NULL, false},
    [HX_OP_SOFTMAX_BACKWARD] = {"softmax_backward", DEV, NULL, false},
    [HX_OP_LOG_SOFTMAX_BACKWARD] = {"log_softmax_backward", DEV, NULL, false},
    [HX_OP_LAYERNORM_BACKWARD_X] = {"layernorm_backward_x", DEV, NULL, false},
    [HX_OP_LAYERNORM_BACKWARD_GAMMA] = {"layernorm_backward_gamma", DEV, NULL, false},
    [HX_OP_SUM_TO] = {"sum_to", DEV, NULL, false},
    [HX_OP_BROADCAST_TO] = {"broadcast_to", DEV, NULL, false},
    [HX_OP_SLICE_BACKWARD] = {"slice_backward", DEV, NULL, false},
    [HX_OP_SCATTER_ADD] = {"scatter_add", CPU, NULL, false},
    [HX_OP_CROSS_ENTROPY_BACKWARD] = {"cross_entropy_backward", DEV, NULL, false},
    [HX_OP_BCE_LOGITS_BACKWARD] = {"bce_with_logits_backward", DEV, NULL, false},
    [HX_OP_IM2COL] = {"im2col", DEV, hx__im2col_backward, false},
    [HX_OP_CONV_GEMM] = {"conv_gemm", DEV, hx__conv_gemm_backward, false},
    [HX_OP_MAX_POOL] = {"max_pool", DEV, hx__pool_backward, false},
    [HX_OP_AVG_POOL] = {"avg_pool", DEV, hx__pool_backward, false},
    [HX_OP_BATCHNORM] = {"batchnorm", DEV, hx__batchnorm_backward, false},
    [HX_OP_COL2IM] = {"col2im", DEV, NULL, false},
    [HX_OP_CONV_GEMM_BACKWARD_W] = {"conv_gemm_backward_w", DEV, NULL, false},
    [HX_OP_CONV_GEMM_BACKWARD_COLS] = {"conv_gemm_backward_cols", DEV, NULL, false},
    [HX_OP_MAX_POOL_BACKWARD] = {"max_pool_backward", DEV, NULL, false},
    [HX_OP_AVG_POOL_BACKWARD] = {"avg_pool_backward", DEV, NULL, false},
    [HX_OP_BATCHNORM_BACKWARD_X] = {"batchnorm_backward_x", DEV, NULL, false},
    [HX_OP_BATCHNORM_BACKWARD_GAMMA] = {"batchnorm_backward_gamma", DEV, NULL, false},
    [HX_OP_SGD_UPDATE] = {"sgd_update", CPU, NULL, false},
    [HX_OP_ADAM_UPDATE] = {"adam_update", CPU, NULL, false},
    [HX_OP_ADAGRAD_UPDATE] = {"adagrad_update", CPU, NULL, false},
    /* FTRL is the wide part's optimizer: it stays next to the tables it updates. */
    [HX_OP_FTRL_UPDATE] = {"ftrl_update", CPU, NULL, HOST_ONLY},
    [HX_OP_EMBEDDING_LOOKUP] = {"embedding_lookup", CPU, NULL, HOST_ONLY},
    [HX_OP_EMBEDDING_BAG] = {"embedding_bag", CPU, embedding_bag_backward, HOST_ONLY},
    [HX_OP_EMBEDDING_UPDATE] = {"embedding_update", CPU, NULL, HOST_ONLY},
    [HX_OP_EMBEDDING_BAG_WEIGHTS_BACKWARD] = {"embedding_bag_weights_backward", CPU, NULL, HOST_ONLY},
};
