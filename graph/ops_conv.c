/* Convolutional ops: conv2d, pooling, batch normalisation; their builders
 * (checks, shapes) and backward rules.
 *
 * conv2d is two nodes: im2col, whose output (N, C*KH*KW, OH*OW) is an
 * ordinary transient tensor (the GEMM's workspace, in the memory plan, kept
 * for the weight gradient like any activation), and conv_gemm, one GEMM per
 * image and group. Attributes:
 *   window ops (im2col, col2im, max/avg pool and their backward):
 *     i[0..7] = kh, kw, stride h, stride w, pad h, pad w, dilation h, w;
 *   conv_gemm and its backward: i[0] = groups;
 *   batchnorm and its backward: f[0] = eps, f[1] = momentum; src: x, gamma,
 *     beta, running mean, running var (f32 state leaves of gamma). */
#include "graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SHAPE(t, buf) hx__shape_str((t), (buf), sizeof(buf))

enum { KH, KW, SH, SW, PH, PW, DH, DW };

static bool need_float(const char *op, const hx_tensor *x, const char *role)
{
    if (hx__is_float(x->dtype)) return true;
    hx__error(HX_ERR_DTYPE, "%s: %s '%s' is %s; this op takes f32, f16 or bf16", op, role,
              x->name, hx_dtype_name(x->dtype));
    return false;
}

static bool need_same_dtype(const char *op, const hx_tensor *x, const hx_tensor *t, const char *role)
{
    if (!need_float(op, t, role)) return false;
    if (t->dtype == x->dtype) return true;
    hx__error(HX_ERR_DTYPE,
              "%s: %s '%s' is %s and x '%s' is %s; an op's float inputs must have one dtype: "
              "hx_cast one of them", op, role, t->name, hx_dtype_name(t->dtype), x->name,
              hx_dtype_name(x->dtype));
    return false;
}

static bool need_nchw(const char *op, const hx_tensor *x)
{
    char sx[HX_SHAPE_STR_LEN];
    if (x->ndim == 4) return true;
    hx__error(HX_ERR_SHAPE, "%s: x '%s' %s must be 4-D (N, C, H, W)", op, x->name, SHAPE(x, sx));
    return false;
}

/* Output size of one spatial axis, or 0 (with the error set) when the
 * dilated kernel does not fit the padded input. */
static int64_t out_size(const char *op, const hx_tensor *x, int axis, int64_t k, int64_t s,
                        int64_t p, int64_t d)
{
    char sx[HX_SHAPE_STR_LEN];
    int64_t padded = x->shape[axis] + 2 * p;
    if (k - 1 > (padded - 1) / d) { /* d (k - 1) + 1 > padded, without overflow */
        hx__error(HX_ERR_SHAPE,
                  "%s: x '%s' %s: the %s kernel %lld (dilation %lld) is larger than the padded "
                  "input %lld; use a smaller kernel or more padding", op, x->name, SHAPE(x, sx),
                  axis == 2 ? "height" : "width", (long long)k, (long long)d, (long long)padded);
        return 0;
    }
    return (padded - d * (k - 1) - 1) / s + 1;
}

/* The window attributes and output size (OH, OW) for x; false with the error set. */
static bool window(const char *op, const hx_tensor *x, const int64_t k[2], const int s[2],
                   const int p[2], const int d[2], hx_attrs *at, int64_t out[2])
{
    for (int a = 0; a < 2; a++)
        if (s[a] < 1 || p[a] < 0 || d[a] < 1 || k[a] < 1) {
            hx__error(HX_ERR_INVALID_ARGUMENT,
                      "%s: kernel %lld, stride %d, padding %d, dilation %d on axis %s: kernels, "
                      "strides and dilations must be >= 1, paddings >= 0", op, (long long)k[a],
                      s[a], p[a], d[a], a ? "w" : "h");
            return false;
        }
    for (int a = 0; a < 2; a++) {
        at->i[KH + a] = k[a];
        at->i[SH + a] = s[a];
        at->i[PH + a] = p[a];
        at->i[DH + a] = d[a];
        if (!(out[a] = out_size(op, x, 2 + a, k[a], s[a], p[a], d[a]))) return false;
    }
    return true;
}

static int or_one(int v) { return v ? v : 1; }

/* ---- conv2d ------------------------------------------------------------------ */

hx_tensor *hx_conv2d(hx_graph *g, hx_tensor *x, hx_tensor *w, const hx_conv2d_params *p)
{
    hx_tensor *src[2] = {x, w};
    char sx[HX_SHAPE_STR_LEN], sw[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "conv2d", 2, src)) return NULL;
    if (!need_float("conv2d", x, "x") || !need_same_dtype("conv2d", x, w, "w")) return NULL;
    hx_conv2d_params q = p ? *p : (hx_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 1};
    int64_t G = q.groups ? q.groups : 1;
    if (q.groups < 0 || q.stride[0] < 0 || q.stride[1] < 0 || q.dilation[0] < 0 ||
        q.dilation[1] < 0) {
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "conv2d: groups %d, stride (%d, %d), dilation (%d, %d) must not be negative",
                  q.groups, q.stride[0], q.stride[1], q.dilation[0], q.dilation[1]);
        return NULL;
    }
    if (!need_nchw("conv2d", x)) return NULL;
    int64_t C = x->shape[1];
    if (w->ndim != 4 || C % G || w->shape[0] % G || w->shape[1] != C / G) {
        hx__error(HX_ERR_SHAPE,
                  "conv2d: w '%s' %s must be (C_out, C / groups, KH, KW) for x '%s' %s and "
                  "groups %lld, with C and C_out multiples of groups", w->name, SHAPE(w, sw),
                  x->name, SHAPE(x, sx), (long long)G);
        return NULL;
    }
    int s[2] = {or_one(q.stride[0]), or_one(q.stride[1])};
    int d[2] = {or_one(q.dilation[0]), or_one(q.dilation[1])};
    int64_t out[2];
    hx_attrs wat = {0};
    if (!window("conv2d", x, &w->shape[2], s, q.padding, d, &wat, out)) return NULL;

    /* OH OW is a dim of the columns: padding up to INT_MAX can take it past
     * int64 before a shape check could see it (C KH KW is bounded by w's size). */
    if (out[0] > HX_MAX_ELEMENTS / out[1]) {
        hx__error(HX_ERR_SHAPE,
                  "conv2d: x '%s' %s with padding (%d, %d): the output's %lld x %lld pixels pass "
                  "HX_MAX_ELEMENTS (2^56); use less padding or a smaller input", x->name,
                  SHAPE(x, sx), q.padding[0], q.padding[1], (long long)out[0], (long long)out[1]);
        return NULL;
    }
    int n0 = g->n;
    int64_t cols_shape[3] = {x->shape[0], C * w->shape[2] * w->shape[3], out[0] * out[1]};
    hx_tensor *cols = hx__node_new(g, HX_OP_IM2COL, 1, &x, x->dtype, 3, cols_shape, &wat);
    if (!cols) return NULL;
    hx_tensor *gsrc[2] = {cols, w};
    int64_t y_shape[4] = {x->shape[0], w->shape[0], out[0], out[1]};
    hx_attrs gat = {.i = {G}};
    hx_tensor *y = hx__node_new(g, HX_OP_CONV_GEMM, 2, gsrc, x->dtype, 4, y_shape, &gat);
    if (!y) hx__graph_truncate(g, n0);
    return y;
}

/* d cols = col2im-ready columns; the image gradient scatters them back. */
hx_status hx__im2col_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                              hx_tensor **dx)
{
    hx_tensor *x = y->src[0];
    if (needs[0]) dx[0] = hx__node_new(g, HX_OP_COL2IM, 1, &dy, x->dtype, x->ndim, x->shape, &y->attr);
    return HX_OK;
}

/* y[n, g] = W_g cols[n, g]: d cols[n, g] = W_g^T dy[n, g], dW_g = sum_n dy[n, g] cols[n, g]^T. */
hx_status hx__conv_gemm_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                                 hx_tensor **dx)
{
    hx_tensor *cols = y->src[0], *w = y->src[1];
    if (needs[0]) {
        hx_tensor *src[2] = {dy, w};
        dx[0] = hx__node_new(g, HX_OP_CONV_GEMM_BACKWARD_COLS, 2, src, cols->dtype, cols->ndim,
                             cols->shape, &y->attr);
    }
    if (needs[1]) {
        hx_tensor *src[2] = {dy, cols};
        dx[1] = hx__node_new(g, HX_OP_CONV_GEMM_BACKWARD_W, 2, src, w->dtype, w->ndim, w->shape,
                             &y->attr);
    }
    return HX_OK;
}

/* ---- pooling ------------------------------------------------------------------- */

static hx_tensor *pool(hx_graph *g, hx_op op, hx_tensor *x, int kh, int kw, int sh, int sw,
                       int ph, int pw)
{
    const char *name = hx__ops[op].name;
    if (hx__check_srcs(g, name, 1, &x) || !need_float(name, x, "x") || !need_nchw(name, x))
        return NULL;
    if (kh < 1 || kw < 1 || sh < 0 || sw < 0 || ph < 0 || pw < 0 || 2 * ph > kh || 2 * pw > kw) {
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "%s '%s': kernel (%d, %d), stride (%d, %d), padding (%d, %d): kernels must be "
                  ">= 1, strides >= 0 (0: the kernel), paddings in [0, kernel / 2]", name,
                  x->name, kh, kw, sh, sw, ph, pw);
        return NULL;
    }
    int64_t k[2] = {kh, kw}, out[2];
    int s[2] = {sh ? sh : kh, sw ? sw : kw}, p[2] = {ph, pw}, d[2] = {1, 1};
    hx_attrs at = {0};
    if (!window(name, x, k, s, p, d, &at, out)) return NULL;
    int64_t shape[4] = {x->shape[0], x->shape[1], out[0], out[1]};
    return hx__node_new(g, op, 1, &x, x->dtype, 4, shape, &at);
}

hx_tensor *hx_max_pool2d(hx_graph *g, hx_tensor *x, int kh, int kw, int sh, int sw, int ph, int pw)
{
    return pool(g, HX_OP_MAX_POOL, x, kh, kw, sh, sw, ph, pw);
}

hx_tensor *hx_avg_pool2d(hx_graph *g, hx_tensor *x, int kh, int kw, int sh, int sw, int ph, int pw)
{
    return pool(g, HX_OP_AVG_POOL, x, kh, kw, sh, sw, ph, pw);
}

hx_tensor *hx_global_avg_pool2d(hx_graph *g, hx_tensor *x)
{
    if (hx__check_srcs(g, "global_avg_pool2d", 1, &x) || !need_nchw("global_avg_pool2d", x))
        return NULL;
    static const int spatial[2] = {2, 3};
    return hx_reduce_mean(g, x, 2, spatial, false);
}

/* max: in dy, x (the argmax is found again); avg: in dy. */
hx_status hx__pool_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                            hx_tensor **dx)
{
    hx_tensor *x = y->src[0];
    if (!needs[0]) return HX_OK;
    if (y->op == HX_OP_MAX_POOL) {
        hx_tensor *src[2] = {dy, x};
        dx[0] = hx__node_new(g, HX_OP_MAX_POOL_BACKWARD, 2, src, x->dtype, 4, x->shape, &y->attr);
    } else {
        dx[0] = hx__node_new(g, HX_OP_AVG_POOL_BACKWARD, 1, &dy, x->dtype, 4, x->shape, &y->attr);
    }
    return HX_OK;
}

/* ---- batch normalisation --------------------------------------------------------- */

hx_tensor *hx_batchnorm(hx_graph *g, hx_tensor *x, hx_tensor *gamma, hx_tensor *beta,
                        float momentum, float eps)
{
    hx_tensor *src[3] = {x, gamma, beta};
    char sx[HX_SHAPE_STR_LEN], sgm[HX_SHAPE_STR_LEN], sb[HX_SHAPE_STR_LEN];
    if (hx__check_srcs(g, "batchnorm", 3, src)) return NULL;
    if (!need_float("batchnorm", x, "x") || !need_same_dtype("batchnorm", x, gamma, "gamma") ||
        !need_same_dtype("batchnorm", x, beta, "beta"))
        return NULL;
    if ((x->ndim != 2 && x->ndim != 4) || gamma->ndim != 1 || beta->ndim != 1 ||
        gamma->shape[0] != x->shape[1] || beta->shape[0] != x->shape[1]) {
        hx__error(HX_ERR_SHAPE,
                  "batchnorm: x '%s' %s must be (N, C, H, W) or (N, C), gamma '%s' %s and beta "
                  "'%s' %s (C)", x->name, SHAPE(x, sx), gamma->name, SHAPE(gamma, sgm),
                  beta->name, SHAPE(beta, sb));
        return NULL;
    }
    if (!(eps > 0) || !isfinite(eps) || !(momentum >= 0 && momentum <= 1)) {
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "batchnorm: eps %g must be positive and finite, momentum %g in [0, 1]",
                  (double)eps, (double)momentum);
        return NULL;
    }
    int n0 = g->n;
    hx_tensor *mean = hx__state_new(g, gamma, "running_mean", hx_init_zeros());
    hx_tensor *var = mean ? hx__state_new(g, gamma, "running_var", hx_init_constant(1.0)) : NULL;
    if (!var) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", hx_last_error());
        hx__graph_truncate(g, n0);
        hx__error(HX_ERR_INVALID_ARGUMENT,
                  "batchnorm: no running statistics for gamma '%s' (%s); each gamma serves one "
                  "batchnorm", gamma->name, msg);
        return NULL;
    }
    hx_tensor *bsrc[5] = {x, gamma, beta, mean, var};
    hx_attrs at = {.f = {eps, momentum}};
    hx_tensor *y = hx__node_new(g, HX_OP_BATCHNORM, 5, bsrc, x->dtype, x->ndim, x->shape, &at);
    if (!y) hx__graph_truncate(g, n0);
    return y;
}

/* dx: in dy, x, gamma, running mean, running var; dgamma: in dy, x, running
 * mean, running var; dbeta: dy summed over every axis but C. The kernels
 * differentiate the batch-statistics function in HX_RUN_TRAIN runs and the
 * running-statistics one otherwise, as the forward. */
hx_status hx__batchnorm_backward(hx_graph *g, hx_tensor *y, hx_tensor *dy, const bool *needs,
                                 hx_tensor **dx)
{
    hx_tensor *x = y->src[0], *gamma = y->src[1], *mean = y->src[3], *var = y->src[4];
    if (needs[0]) {
        hx_tensor *src[5] = {dy, x, gamma, mean, var};
        dx[0] = hx__node_new(g, HX_OP_BATCHNORM_BACKWARD_X, 5, src, x->dtype, x->ndim, x->shape,
                             &y->attr);
    }
    if (needs[1]) {
        hx_tensor *src[4] = {dy, x, mean, var};
        dx[1] = hx__node_new(g, HX_OP_BATCHNORM_BACKWARD_GAMMA, 4, src, gamma->dtype, 1,
                             gamma->shape, &y->attr);
    }
    if (needs[2]) {
        static const int all_but_c[3] = {0, 2, 3};
        dx[2] = hx_reduce_sum(g, dy, x->ndim == 4 ? 3 : 1, all_but_c, false);
    }
    return HX_OK;
}
