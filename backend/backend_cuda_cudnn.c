/* The cuda backend's lowered convolutions (graph.h's lowering): a conv2d's
 * im2col + conv_gemm, its col2im of the column gradient and its weight
 * gradient, each as one cuDNN call on the launch's stream, with the
 * stream's cuDNN handle (made on first use) and its scratch as the
 * workspace, at most the bytes of the columns the lowering left out. Where
 * cuDNN has no deterministic algorithm within those bytes (or a shape
 * passes its int descriptors), the node runs as built, hetex's im2col and
 * cuBLAS steps with the columns in that same workspace. A machine whose
 * loader finds no cuDNN 9 has none of these kernels. */
#if defined(HX_HAVE_CUDA) && defined(HX_HAVE_CUDNN)
#include "backend/backend_cuda_internal.h"
#include "backend/node_args.h"

static hx_status failed(const hx_tensor *y, hx_lower_kind kind, const char *call, hx_gk_status st)
{
    return hx__error(hx_gk_cudnn_is_oom(st) ? HX_ERR_DEVICE_OOM : HX_ERR_INTERNAL,
                     "cuda backend: %s of %s '%s' (%s): %s: %s", hx__lower_name(kind),
                     hx__ops[y->op].name, y->name, hx_dtype_name(y->dtype), call,
                     hx_gk_cudnn_strerror(st));
}

/* The node as built: im2col + conv_gemm, conv_gemm_backward_cols + col2im,
 * im2col + conv_gemm_backward_w, the columns in the workspace. */
static hx_status as_built(hx_lower_kind kind, const hx_tensor *y, const hx__conv_args *a,
                          size_t cols_bytes, void *out, void *const *in)
{
    hx_status st = hx__cuda_scratch(y, cols_bytes);
    if (st) return st;
    const hx_gk_ctx *c = hx__cuda_ctx();
    hx_kdtype dt = (hx_kdtype)y->dtype;
    const hx_k_window *w = &a->win;
    hx_k_conv_gemm g = {w->N, a->groups, a->C_out / a->groups,
                        w->C * w->kh * w->kw / a->groups, w->OH * w->OW};
    hx_gk_status gs;
    if (kind == HX_LOWER_CONV2D) {
        gs = hx_gk_im2col(c, dt, c->scratch, in[0], w);
        if (!gs) gs = hx_gk_conv_gemm(c, dt, out, in[1], c->scratch, &g);
    } else if (kind == HX_LOWER_CONV2D_BACKWARD_DATA) {
        gs = hx_gk_conv_gemm_backward_cols(c, dt, c->scratch, in[0], in[1], &g);
        if (!gs) gs = hx_gk_col2im(c, dt, out, c->scratch, w);
    } else {
        gs = hx_gk_im2col(c, dt, c->scratch, in[1], w);
        if (!gs) gs = hx_gk_conv_gemm_backward_w(c, dt, out, in[0], c->scratch, &g);
    }
    return gs ? hx__cuda_fail(y, gs) : HX_OK;
}

/* in: forward x, w; backward data dy, w; backward filter dy, x. */
static hx_status conv(hx_lower_kind kind, hx_gk_conv_dir dir, const hx_tensor *y, void *out,
                      void *const *in)
{
    void *h;
    hx_status st = hx__cuda_dnn(y, &h);
    if (st) return st;
    hx__conv_args a = hx__conv_lowered_of(y, kind);
    hx_gk_conv p = {a.win, a.C_out, a.groups};
    hx_kdtype dt = (hx_kdtype)y->dtype;
    size_t limit = hx__lowered_workspace(y, kind), ws = 0;
    int algo;
    hx_gk_status gs = hx_gk_conv_cudnn_algo(h, hx__cuda_ctx(), dt, dir, &p, limit, &algo, &ws);
    if (gs == HX_GK_BAD_ARG) return as_built(kind, y, &a, limit, out, in);
    if (gs) return failed(y, kind, "choosing the algorithm", gs);
    if (ws && (st = hx__cuda_scratch(y, ws))) return st;
    gs = hx_gk_conv_cudnn(h, hx__cuda_ctx(), dt, dir, &p, algo, ws, out, in[0], in[1]);
    return gs ? failed(y, kind, "running it", gs) : HX_OK;
}

static hx_status forward(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    return conv(HX_LOWER_CONV2D, HX_GK_CONV_FORWARD, y, out, in);
}

static hx_status backward_data(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    return conv(HX_LOWER_CONV2D_BACKWARD_DATA, HX_GK_CONV_BACKWARD_DATA, y, out, in);
}

static hx_status backward_filter(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
{
    return conv(HX_LOWER_CONV2D_BACKWARD_FILTER, HX_GK_CONV_BACKWARD_FILTER, y, out, in);
}

hx_launch_fn hx__cudnn_kernel(hx_op op, hx_dtype dt)
{
    if (dt != HX_DTYPE_F32 && dt != HX_DTYPE_F16 && dt != HX_DTYPE_BF16) return NULL;
    if (!hx_gk_cudnn_load(NULL)) return NULL; /* not on this machine: the convolutions as built */
    if (op == HX_LOWERED_OP(HX_LOWER_CONV2D)) return forward;
    if (op == HX_LOWERED_OP(HX_LOWER_CONV2D_BACKWARD_DATA)) return backward_data;
    if (op == HX_LOWERED_OP(HX_LOWER_CONV2D_BACKWARD_FILTER)) return backward_filter;
    return NULL;
}
#endif
