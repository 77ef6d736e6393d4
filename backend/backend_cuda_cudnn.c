/* The cuda backend's lowered convolutions (graph.h's lowering): a conv2d's
 * im2col + conv_gemm, its col2im of the column gradient and its weight
 * gradient, each as one cuDNN call on the launch's stream, with the
 * stream's cuDNN handle (made on first use) and its scratch as the
 * workspace, at most the bytes of the columns the lowering left out. A
 * machine whose loader finds no cuDNN 9 has none of these kernels. */
#if defined(HX_HAVE_CUDA) && defined(HX_HAVE_CUDNN)
#include "backend/backend_cuda_internal.h"
#include "backend/node_args.h"

static hx_status failed(const hx_tensor *y, hx_lower_kind kind, const char *call, hx_gk_status st,
                        size_t limit)
{
    if (st == HX_GK_BAD_ARG)
        return hx__error(HX_ERR_UNSUPPORTED,
                         "cuda backend: %s of %s '%s' (%s): %s: no deterministic algorithm with "
                         "at most %zu bytes of workspace, or a dim past INT_MAX or a tensor past "
                         "2^31 elements (cuDNN's descriptors take int); run the convolution on "
                         "the CPU (hx_tensor_set_target) or with a smaller batch",
                         hx__lower_name(kind), hx__ops[y->op].name, y->name,
                         hx_dtype_name(y->dtype), call, limit);
    return hx__error(hx_gk_cudnn_is_oom(st) ? HX_ERR_DEVICE_OOM : HX_ERR_INTERNAL,
                     "cuda backend: %s of %s '%s' (%s): %s: %s", hx__lower_name(kind),
                     hx__ops[y->op].name, y->name, hx_dtype_name(y->dtype), call,
                     hx_gk_cudnn_strerror(st));
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
    if (gs) return failed(y, kind, "choosing the algorithm", gs, limit);
    if (ws && (st = hx__cuda_scratch(y, ws))) return st;
    gs = hx_gk_conv_cudnn(h, hx__cuda_ctx(), dt, dir, &p, algo, ws, out, in[0], in[1]);
    return gs ? failed(y, kind, "running it", gs, limit) : HX_OK;
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
