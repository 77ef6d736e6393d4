/* Op builders: argument checks, shape and dtype inference, node creation.
 * Every check happens before anything is added, so a failed op leaves the
 * graph unchanged. Attribute use per op is noted at each builder. */
#include "graph/graph.h"

#include <math.h>
#include <string.h>

#define SHAPE(t, buf) hx__shape_str((t), (buf), sizeof(buf))

/* Float ops take f32, f16 or bf16 (stored as given, computed in f32). */
static bool need_float(const char *op, const hx_tensor *x, const char *role)
{
    if (hx__is_float(x->dtype)) return true;
    hx__error(HX_ERR_DTYPE, "%s: %s '%s' is %s; this op takes f32, f16 or bf16", op, role,
              x->name, hx_dtype_name(x->dtype));
    return false;
}

/* All float inputs of one op share a dtype, which is the output's. */
static bool same_dtype(const char *op, const hx_tensor *a, const char *ra, const hx_tensor *b,
                       const char *rb)
{
    if (a->dtype == b->dtype) return true;
    hx__error(HX_ERR_DTYPE,
              "%s: dtypes differ: %s '%s' is %s, %s '%s' is %s; an op's float inputs must "
              "have one dtype: hx_cast one of them", op, ra, a->name, hx_dtype_name(a->dtype),
              rb, b->name, hx_dtype_name(b->dtype));
    return false;
}

/* Both float, of one dtype. */
static bool need_float_pair(const char *op, const hx_tensor *a, const char *ra,
                            const hx_tensor *b, const char *rb)
{
    return need_float(op, a, ra) && need_float(op, b, rb) && same_dtype(op, a, ra, b, rb);
}

static bool need_ids(const char *op, const hx_tensor *x, const char *role)
{
    if (x->dtype == HX_DTYPE_I32 || x->dtype == HX_DTYPE_I64) return true;
    hx__error(HX_ERR_DTYPE, "%s: %s '%s' is %s; it must be i32 or i64", op, role, x->name,
              hx_dtype_name(x->dtype));
    return false;
}

static int norm_axis(int axis, int ndim) { return axis < 0 ? axis + ndim : axis; }

/* ---- matmul --------------------------------------------------------------- */

/* attr: i[0] trans_a, i[1] trans_b */
hx_tensor *hx_matmul(hx_graph *g, hx_tensor *a, hx_tensor *b, bool trans_a, bool trans_b)
{
    hx_tensor *src[2] = {a, b};
    char sa[HX_SHAPE_STR_LEN], sb[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "matmul", 2, src)) return NULL;
    if (!need_float_pair("matmul", a, "a", b, "b")) return NULL;
    if (a->ndim < 2 || b->ndim < 2) {
        hx__error(HX_ERR_SHAPE, "matmul: a '%s' %s and b '%s' %s must have at least 2 dims",
                  a->name, SHAPE(a, sa), b->name, SHAPE(b, sb));
        return NULL;
    }
    bool shared_b = b->ndim == 2 && a->ndim > 2;
    if (!shared_b && (a->ndim != b->ndim ||
                      memcmp(a->shape, b->shape, sizeof(int64_t) * (a->ndim - 2)))) {
        hx__error(HX_ERR_SHAPE,
                  "matmul: batch dims of a '%s' %s and b '%s' %s differ; they must be equal, "
                  "or b must be 2-D", a->name, SHAPE(a, sa), b->name, SHAPE(b, sb));
        return NULL;
    }
    if (shared_b && trans_a) {
        hx__error(HX_ERR_SHAPE,
                  "matmul: a '%s' %s is batched and b '%s' %s is shared, which needs "
                  "trans_a = false; hx_permute a first", a->name, SHAPE(a, sa), b->name,
                  SHAPE(b, sb));
        return NULL;
    }
    int64_t M = a->shape[a->ndim - (trans_a ? 1 : 2)], Ka = a->shape[a->ndim - (trans_a ? 2 : 1)];
    int64_t Kb = b->shape[b->ndim - (trans_b ? 1 : 2)], N = b->shape[b->ndim - (trans_b ? 2 : 1)];
    if (Ka != Kb) {
        hx__error(HX_ERR_SHAPE,
                  "matmul: inner dims differ: a '%s' %s%s gives K=%lld, b '%s' %s%s gives "
                  "K=%lld; check the shapes or the transpose flags", a->name, SHAPE(a, sa),
                  trans_a ? " (transposed)" : "", (long long)Ka, b->name, SHAPE(b, sb),
                  trans_b ? " (transposed)" : "", (long long)Kb);
        return NULL;
    }
    int64_t shape[HX_MAX_DIMS];
    memcpy(shape, a->shape, sizeof(int64_t) * a->ndim);
    shape[a->ndim - 2] = M;
    shape[a->ndim - 1] = N;
    hx_attrs at = {.i = {trans_a, trans_b}};
    return hx__node_new(g, HX_OP_MATMUL, 2, src, a->dtype, a->ndim, shape, &at);
}

/* ---- elementwise ------------------------------------------------------------ */

/* A binary node with numpy broadcasting. */
static hx_tensor *binary(hx_graph *g, hx_op op, hx_tensor *a, hx_tensor *b)
{
    const char *name = hx__ops[op].name;
    hx_tensor *src[2] = {a, b};
    char sa[HX_SHAPE_STR_LEN], sb[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, name, 2, src)) return NULL;
    if (!need_float_pair(name, a, "a", b, "b")) return NULL;
    int nd;
    int64_t shape[HX_MAX_DIMS];
    if (!hx__broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) {
        hx__error(HX_ERR_SHAPE,
                  "%s: shapes a '%s' %s and b '%s' %s do not broadcast (right-aligned dims "
                  "must be equal or 1)", name, a->name, SHAPE(a, sa), b->name, SHAPE(b, sb));
        return NULL;
    }
    return hx__node_new(g, op, 2, src, a->dtype, nd, shape, NULL);
}

hx_tensor *hx_add(hx_graph *g, hx_tensor *a, hx_tensor *b) { return binary(g, HX_OP_ADD, a, b); }
hx_tensor *hx_sub(hx_graph *g, hx_tensor *a, hx_tensor *b) { return binary(g, HX_OP_SUB, a, b); }
hx_tensor *hx_mul(hx_graph *g, hx_tensor *a, hx_tensor *b) { return binary(g, HX_OP_MUL, a, b); }
hx_tensor *hx_div(hx_graph *g, hx_tensor *a, hx_tensor *b) { return binary(g, HX_OP_DIV, a, b); }

static hx_tensor *unary(hx_graph *g, hx_op op, hx_tensor *x, const hx_attrs *at)
{
    const char *name = hx__ops[op].name;
    if (hx__check_srcs(g, name, 1, &x) || !need_float(name, x, "x")) return NULL;
    return hx__node_new(g, op, 1, &x, x->dtype, x->ndim, x->shape, at);
}

/* attr: f[0] s */
hx_tensor *hx_scale(hx_graph *g, hx_tensor *x, float s)
{
    if (!isfinite(s)) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "scale: factor %g is not finite", (double)s);
        return NULL;
    }
    hx_attrs at = {.f = {s}};
    return unary(g, HX_OP_SCALE, x, &at);
}

hx_tensor *hx_relu(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_RELU, x, NULL); }
hx_tensor *hx_gelu(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_GELU, x, NULL); }
hx_tensor *hx_gelu_erf(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_GELU_ERF, x, NULL); }
hx_tensor *hx_sigmoid(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_SIGMOID, x, NULL); }
hx_tensor *hx_tanh(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_TANH, x, NULL); }
hx_tensor *hx_exp(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_EXP, x, NULL); }
hx_tensor *hx_log(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_LOG, x, NULL); }
hx_tensor *hx_sqrt(hx_graph *g, hx_tensor *x) { return unary(g, HX_OP_SQRT, x, NULL); }

static bool need_rows(const char *op, const hx_tensor *x)
{
    if (x->ndim >= 1) return true;
    hx__error(HX_ERR_SHAPE, "%s: x '%s' is a scalar; it works over the last axis", op, x->name);
    return false;
}

hx_tensor *hx_softmax(hx_graph *g, hx_tensor *x)
{
    if (x && !need_rows("softmax", x)) return NULL;
    return unary(g, HX_OP_SOFTMAX, x, NULL);
}

hx_tensor *hx_log_softmax(hx_graph *g, hx_tensor *x)
{
    if (x && !need_rows("log_softmax", x)) return NULL;
    return unary(g, HX_OP_LOG_SOFTMAX, x, NULL);
}

/* x (..., N) with a vector (N) of the same dtype. */
static bool check_vector(const char *op, const hx_tensor *x, const hx_tensor *v, const char *role)
{
    char sx[HX_SHAPE_STR_LEN], sv[HX_SHAPE_STR_LEN];
    if (!need_float_pair(op, x, "x", v, role)) return false;
    if (x->ndim < 1 || v->ndim != 1 || v->shape[0] != x->shape[x->ndim - 1]) {
        hx__error(HX_ERR_SHAPE, "%s: %s '%s' %s must be 1-D with the last dim of x '%s' %s",
                  op, role, v->name, SHAPE(v, sv), x->name, SHAPE(x, sx));
        return false;
    }
    return true;
}

hx_tensor *hx_bias_add(hx_graph *g, hx_tensor *x, hx_tensor *b)
{
    hx_tensor *src[2] = {x, b};
    if (hx__check_srcs(g, "bias_add", 2, src)) return NULL;
    if (!check_vector("bias_add", x, b, "bias")) return NULL;
    return hx__node_new(g, HX_OP_BIAS_ADD, 2, src, x->dtype, x->ndim, x->shape, NULL);
}

/* attr: f[0] eps */
hx_tensor *hx_layernorm(hx_graph *g, hx_tensor *x, hx_tensor *gamma, hx_tensor *beta, float eps)
{
    hx_tensor *src[3] = {x, gamma, beta};
    if (hx__check_srcs(g, "layernorm", 3, src)) return NULL;
    if (!check_vector("layernorm", x, gamma, "gamma") || !check_vector("layernorm", x, beta, "beta"))
        return NULL;
    if (!(eps > 0) || !isfinite(eps)) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "layernorm: eps %g must be positive and finite",
                  (double)eps);
        return NULL;
    }
    hx_attrs at = {.f = {eps}};
    return hx__node_new(g, HX_OP_LAYERNORM, 3, src, x->dtype, x->ndim, x->shape, &at);
}

/* ---- data movement ------------------------------------------------------------- */

hx_tensor *hx_reshape(hx_graph *g, hx_tensor *x, int ndim, const int64_t *shape)
{
    char sx[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "reshape", 1, &x)) return NULL;
    if (ndim < 0 || ndim > HX_MAX_DIMS || (ndim && !shape)) {
        hx__error(HX_ERR_SHAPE, "reshape '%s': ndim %d outside 0..%d or shape NULL", x->name,
                  ndim, HX_MAX_DIMS);
        return NULL;
    }
    int64_t out[HX_MAX_DIMS], known = 1, numel = hx_tensor_numel(x);
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1 && infer < 0) infer = i;
        else if (shape[i] <= 0) {
            hx__error(HX_ERR_SHAPE,
                      "reshape '%s': dim %d is %lld; dims must be positive, with at most one -1",
                      x->name, i, (long long)shape[i]);
            return NULL;
        }
    }
    if (infer >= 0) out[infer] = 1; /* known: the product of the other dims, checked */
    bool fits = hx__numel_checked(ndim, out, &known);
    if (infer >= 0) out[infer] = fits && numel % known == 0 ? numel / known : -1;
    if (!fits || (infer >= 0 ? out[infer] <= 0 : known != numel)) {
        hx_tensor want = {.ndim = ndim};
        memcpy(want.shape, shape, sizeof(int64_t) * ndim);
        char sw[HX_SHAPE_STR_LEN];
        hx__error(HX_ERR_SHAPE,
                  "reshape '%s': %s has %lld elements, which the requested shape %s cannot "
                  "hold", x->name, SHAPE(x, sx), (long long)numel, SHAPE(&want, sw));
        return NULL;
    }
    return hx__node_new(g, HX_OP_RESHAPE, 1, &x, x->dtype, ndim, out, NULL);
}

/* attr: i[k] = perm[k] */
hx_tensor *hx_permute(hx_graph *g, hx_tensor *x, const int *perm)
{
    if (hx__check_srcs(g, "permute", 1, &x)) return NULL;
    if (!perm && x->ndim) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "permute '%s': perm is NULL", x->name);
        return NULL;
    }
    hx_attrs at = {0};
    int64_t shape[HX_MAX_DIMS];
    unsigned seen = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= x->ndim || (seen >> perm[i] & 1)) {
            hx__error(HX_ERR_SHAPE,
                      "permute '%s': perm[%d] = %d is out of range or repeated; perm must be a "
                      "permutation of 0..%d", x->name, i, perm[i], x->ndim - 1);
            return NULL;
        }
        seen |= 1u << perm[i];
        at.i[i] = perm[i];
        shape[i] = x->shape[perm[i]];
    }
    return hx__node_new(g, HX_OP_PERMUTE, 1, &x, x->dtype, x->ndim, shape, &at);
}

/* attr: i[0] axis */
hx_tensor *hx_concat(hx_graph *g, int n, hx_tensor *const *xs, int axis)
{
    char s0[HX_SHAPE_STR_LEN], si[HX_SHAPE_STR_LEN];
    if (n < 1 || !xs) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "concat: needs at least one input (n = %d)", n);
        return NULL;
    }
    if (hx__check_srcs(g, "concat", n, xs)) return NULL;
    const hx_tensor *x0 = xs[0];
    int ax = norm_axis(axis, x0->ndim);
    if (ax < 0 || ax >= x0->ndim) {
        hx__error(HX_ERR_SHAPE, "concat: axis %d is out of range for %d-D inputs", axis, x0->ndim);
        return NULL;
    }
    int64_t shape[HX_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof(int64_t) * x0->ndim);
    shape[ax] = 0;
    for (int k = 0; k < n; k++) {
        const hx_tensor *x = xs[k];
        bool ok = x->dtype == x0->dtype && x->ndim == x0->ndim;
        for (int d = 0; ok && d < x->ndim; d++) ok = d == ax || x->shape[d] == x0->shape[d];
        if (!ok) {
            hx__error(HX_ERR_SHAPE,
                      "concat: input %d '%s' %s %s does not match input 0 '%s' %s %s outside "
                      "axis %d", k, x->name, SHAPE(x, si), hx_dtype_name(x->dtype), x0->name,
                      SHAPE(x0, s0), hx_dtype_name(x0->dtype), ax);
            return NULL;
        }
        shape[ax] += x->shape[ax];
    }
    hx_attrs at = {.i = {ax}};
    return hx__node_new(g, HX_OP_CONCAT, n, xs, x0->dtype, x0->ndim, shape, &at);
}

/* attr: i[0] axis, i[1] start, i[2] end */
hx_tensor *hx_slice(hx_graph *g, hx_tensor *x, int axis, int64_t start, int64_t end)
{
    char sx[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "slice", 1, &x)) return NULL;
    int ax = norm_axis(axis, x->ndim);
    if (ax < 0 || ax >= x->ndim || start < 0 || end > x->shape[ax] || start >= end) {
        hx__error(HX_ERR_SHAPE,
                  "slice '%s' %s: axis %d, range [%lld, %lld) is not a non-empty range inside "
                  "the axis", x->name, SHAPE(x, sx), axis, (long long)start, (long long)end);
        return NULL;
    }
    int64_t shape[HX_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[ax] = end - start;
    hx_attrs at = {.i = {ax, start, end}};
    return hx__node_new(g, HX_OP_SLICE, 1, &x, x->dtype, x->ndim, shape, &at);
}

/* ---- reductions ---------------------------------------------------------------------- */

/* attr: i[0] bit mask of reduced input axes. keepdims only changes the
 * output shape: the memory layout is the same. */
static hx_tensor *reduce(hx_graph *g, const char *op, hx_tensor *x, int naxes, const int *axes,
                         bool keepdims, int64_t *count)
{
    if (hx__check_srcs(g, op, 1, &x) || !need_float(op, x, "x")) return NULL;
    if (naxes < 0 || (naxes && !axes)) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "%s '%s': naxes %d with axes %p", op, x->name,
                  naxes, (const void *)axes);
        return NULL;
    }
    int64_t mask = naxes ? 0 : (1 << x->ndim) - 1;
    for (int k = 0; k < naxes; k++) {
        int ax = norm_axis(axes[k], x->ndim);
        if (ax < 0 || ax >= x->ndim || (mask >> ax & 1)) {
            hx__error(HX_ERR_SHAPE, "%s '%s': axis %d is out of range for %d dims or repeated",
                      op, x->name, axes[k], x->ndim);
            return NULL;
        }
        mask |= 1 << ax;
    }
    int64_t shape[HX_MAX_DIMS];
    int nd = 0;
    *count = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (mask >> d & 1) {
            *count *= x->shape[d];
            if (keepdims) shape[nd++] = 1;
        } else {
            shape[nd++] = x->shape[d];
        }
    }
    hx_attrs at = {.i = {mask}};
    return hx__node_new(g, HX_OP_REDUCE_SUM, 1, &x, x->dtype, nd, shape, &at);
}

hx_tensor *hx_reduce_sum(hx_graph *g, hx_tensor *x, int naxes, const int *axes, bool keepdims)
{
    int64_t count;
    return reduce(g, "reduce_sum", x, naxes, axes, keepdims, &count);
}

hx_tensor *hx_reduce_mean(hx_graph *g, hx_tensor *x, int naxes, const int *axes, bool keepdims)
{
    int64_t count;
    int n0 = g ? g->n : 0;
    hx_tensor *sum = reduce(g, "reduce_mean", x, naxes, axes, keepdims, &count);
    hx_tensor *mean = sum ? hx_scale(g, sum, (float)(1.0 / (double)count)) : NULL;
    if (sum && !mean) hx__graph_truncate(g, n0);
    return mean;
}

/* ---- cast, gather, masks ----------------------------------------------------------------- */

hx_tensor *hx_cast(hx_graph *g, hx_tensor *x, hx_dtype dt)
{
    if (hx__check_srcs(g, "cast", 1, &x)) return NULL;
    if (!hx__is_float(dt) || !hx__is_float(x->dtype)) {
        hx__error(HX_ERR_DTYPE, "cast '%s': from %s to %s; cast converts between f32, f16 and bf16",
                  x->name, hx_dtype_name(x->dtype), hx_dtype_name(dt));
        return NULL;
    }
    return hx__node_new(g, HX_OP_CAST, 1, &x, dt, x->ndim, x->shape, NULL);
}

hx_tensor *hx_gather(hx_graph *g, hx_tensor *table, hx_tensor *ids)
{
    hx_tensor *src[2] = {table, ids};
    char st[HX_SHAPE_STR_LEN], si[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "gather", 2, src) || !need_ids("gather", ids, "ids")) return NULL;
    if (!hx__is_float(table->dtype) || table->ndim != 2 || ids->ndim + 1 > HX_MAX_DIMS) {
        hx__error(HX_ERR_SHAPE,
                  "gather: table '%s' %s %s must be a 2-D float (rows, dim) and ids '%s' %s "
                  "have at most %d dims", table->name, SHAPE(table, st),
                  hx_dtype_name(table->dtype), ids->name, SHAPE(ids, si), HX_MAX_DIMS - 1);
        return NULL;
    }
    int64_t shape[HX_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof(int64_t) * ids->ndim);
    shape[ids->ndim] = table->shape[1];
    return hx__node_new(g, HX_OP_GATHER, 2, src, table->dtype, ids->ndim + 1, shape, NULL);
}

/* attr: f[0] fill value above the diagonal */
hx_tensor *hx_causal_mask(hx_graph *g, hx_tensor *x)
{
    char sx[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "causal_mask", 1, &x) || !need_float("causal_mask", x, "x")) return NULL;
    if (x->ndim < 2 || x->shape[x->ndim - 1] != x->shape[x->ndim - 2]) {
        hx__error(HX_ERR_SHAPE, "causal_mask: x '%s' %s must end in two equal dims (..., T, T)",
                  x->name, SHAPE(x, sx));
        return NULL;
    }
    hx_attrs at = {.f = {-INFINITY}};
    return hx__node_new(g, HX_OP_CAUSAL_MASK, 1, &x, x->dtype, x->ndim, x->shape, &at);
}

/* attr: f[0] p, seed, stream (the mask's identity, shared with its backward) */
hx_tensor *hx_dropout(hx_graph *g, hx_tensor *x, float p, uint64_t seed)
{
    if (!(p >= 0 && p < 1)) {
        hx__error(HX_ERR_INVALID_ARGUMENT, "dropout: p = %g must be in [0, 1)", (double)p);
        return NULL;
    }
    hx_attrs at = {.f = {p}, .seed = seed, .stream = g ? (uint64_t)g->next_stream : 0};
    hx_tensor *y = unary(g, HX_OP_DROPOUT, x, &at);
    if (y) g->next_stream++;
    return y;
}

/* ---- losses ---------------------------------------------------------------------------------- */

static const int64_t scalar_shape[1] = {1};

hx_tensor *hx_cross_entropy(hx_graph *g, hx_tensor *logits, hx_tensor *labels)
{
    hx_tensor *src[2] = {logits, labels};
    char sl[HX_SHAPE_STR_LEN], sy[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "cross_entropy", 2, src)) return NULL;
    if (!need_float("cross_entropy", logits, "logits") ||
        !need_ids("cross_entropy", labels, "labels"))
        return NULL;
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0]) {
        hx__error(HX_ERR_SHAPE,
                  "cross_entropy: logits '%s' %s must be (N, C) and labels '%s' %s (N); "
                  "hx_reshape batched logits to 2-D first", logits->name, SHAPE(logits, sl),
                  labels->name, SHAPE(labels, sy));
        return NULL;
    }
    return hx__node_new(g, HX_OP_CROSS_ENTROPY, 2, src, logits->dtype, 0, scalar_shape, NULL);
}

static bool same_shape_pair(const char *op, const hx_tensor *a, const hx_tensor *b)
{
    char sa[HX_SHAPE_STR_LEN], sb[HX_SHAPE_STR_LEN];
    if (!need_float_pair(op, a, "input", b, "target")) return false;
    if (hx__same_shape(a, b)) return true;
    hx__error(HX_ERR_SHAPE, "%s: '%s' %s and '%s' %s must have the same shape", op, a->name,
              SHAPE(a, sa), b->name, SHAPE(b, sb));
    return false;
}

hx_tensor *hx_bce_with_logits(hx_graph *g, hx_tensor *logits, hx_tensor *targets)
{
    hx_tensor *src[2] = {logits, targets};
    if (hx__check_srcs(g, "bce_with_logits", 2, src) ||
        !same_shape_pair("bce_with_logits", logits, targets))
        return NULL;
    return hx__node_new(g, HX_OP_BCE_LOGITS, 2, src, logits->dtype, 0, scalar_shape, NULL);
}

/* mean((pred - target)^2), built from elementwise ops. */
hx_tensor *hx_mse(hx_graph *g, hx_tensor *pred, hx_tensor *target)
{
    hx_tensor *src[2] = {pred, target};
    if (hx__check_srcs(g, "mse", 2, src) || !same_shape_pair("mse", pred, target)) return NULL;
    int n0 = g->n;
    hx_tensor *d = hx_sub(g, pred, target);
    hx_tensor *loss = hx_reduce_mean(g, hx_mul(g, d, d), 0, NULL, false);
    if (!loss) hx__graph_truncate(g, n0);
    return loss;
}
