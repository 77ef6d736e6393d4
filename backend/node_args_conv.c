/* The convolutional ops' node arguments (node_args.h); attributes as
 * graph/ops_conv.c sets them. */
#include "backend/node_args.h"

/* The image a window op reads (forward) or writes (backward). */
static const hx_tensor *image_of(const hx_tensor *y)
{
    return y->op == HX_OP_IM2COL || y->op == HX_OP_MAX_POOL || y->op == HX_OP_AVG_POOL ? y->src[0] : y;
}

hx_k_window hx__window_of(const hx_tensor *y)
{
    const hx_tensor *x = image_of(y);
    const int64_t *a = y->attr.i; /* kh, kw, sh, sw, ph, pw, dh, dw */
    hx_k_window w = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], 0, 0,
                     a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]};
    w.OH = (w.H + 2 * w.ph - w.dh * (w.kh - 1) - 1) / w.sh + 1;
    w.OW = (w.W + 2 * w.pw - w.dw * (w.kw - 1) - 1) / w.sw + 1;
    return w;
}

hx_k_conv_gemm hx__conv_gemm_of(const hx_tensor *y)
{
    /* conv_gemm: cols, w -> y; backward_cols: dy, w -> cols; backward_w: dy, cols -> w */
    const hx_tensor *cols = y->op == HX_OP_CONV_GEMM ? y->src[0]
                          : y->op == HX_OP_CONV_GEMM_BACKWARD_COLS ? y : y->src[1];
    const hx_tensor *w = y->op == HX_OP_CONV_GEMM_BACKWARD_W ? y : y->src[1];
    int64_t G = y->attr.i[0];
    return (hx_k_conv_gemm){cols->shape[0], G, w->shape[0] / G, cols->shape[1] / G, cols->shape[2]};
}

/* forward: conv_gemm(im2col, w), y (N, C_out, ..); backward data:
 * col2im(conv_gemm_backward_cols(dy, w)); backward filter:
 * conv_gemm_backward_w(dy, im2col), y (C_out, ..). */
hx__conv_args hx__conv_lowered_of(const hx_tensor *y, hx_lower_kind kind)
{
    if (kind == HX_LOWER_CONV2D_BACKWARD_DATA) {
        const hx_tensor *dcols = y->src[0];
        return (hx__conv_args){hx__window_of(y), dcols->src[1]->shape[0], dcols->attr.i[0]};
    }
    const hx_tensor *cols = y->src[kind == HX_LOWER_CONV2D ? 0 : 1];
    return (hx__conv_args){hx__window_of(cols), y->shape[kind == HX_LOWER_CONV2D ? 1 : 0],
                           y->attr.i[0]};
}

hx_k_bn hx__batchnorm_of(const hx_exec *ex, const hx_tensor *y)
{
    const hx_tensor *x = y->op == HX_OP_BATCHNORM ? y->src[0] : y->src[1];
    int64_t S = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
    return (hx_k_bn){x->shape[0], x->shape[1], S, y->attr.f[0], y->attr.f[1], ex->train};
}
