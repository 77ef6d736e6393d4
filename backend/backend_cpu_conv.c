/* CPU launchers of the convolutional ops. */
#include "backend/backend_cpu_conv.h"
#include "backend/node_args.h"

#define LAUNCH HX_CPU_CONV_LAUNCHER
#define NT (ex->nthreads)
#define X(i) ((const float *)in[i])

LAUNCH(hx__cpu_im2col)
{
    hx_k_window w = hx__window_of(y);
    hx_k_im2col_f32(out, X(0), &w, NT);
    return HX_OK;
}

/* in: dcols */
LAUNCH(hx__cpu_col2im)
{
    hx_k_window w = hx__window_of(y);
    hx_k_col2im_f32(out, X(0), &w, NT);
    return HX_OK;
}

/* in: cols, w */
LAUNCH(hx__cpu_conv_gemm)
{
    hx_k_conv_gemm c = hx__conv_gemm_of(y);
    hx_k_conv_gemm_forward_f32(out, X(1), X(0), &c, NT);
    return HX_OK;
}

/* in: dy, w */
LAUNCH(hx__cpu_conv_gemm_backward_cols)
{
    hx_k_conv_gemm c = hx__conv_gemm_of(y);
    hx_k_conv_gemm_backward_cols_f32(out, X(0), X(1), &c, NT);
    return HX_OK;
}

/* in: dy, cols */
LAUNCH(hx__cpu_conv_gemm_backward_w)
{
    hx_k_conv_gemm c = hx__conv_gemm_of(y);
    if (hx_k_conv_gemm_backward_w_f32(out, X(0), X(1), &c, NT))
        return hx__error(HX_ERR_OUT_OF_MEMORY,
                         "%s '%s': out of host memory for the partial weight gradients; free "
                         "host memory", hx__ops[y->op].name, y->name);
    return HX_OK;
}

LAUNCH(hx__cpu_max_pool)
{
    hx_k_window w = hx__window_of(y);
    hx_k_max_pool_forward_f32(out, X(0), &w, NT);
    return HX_OK;
}

/* in: dy, x */
LAUNCH(hx__cpu_max_pool_backward)
{
    hx_k_window w = hx__window_of(y);
    hx_k_max_pool_backward_f32(out, X(0), X(1), &w, NT);
    return HX_OK;
}

LAUNCH(hx__cpu_avg_pool)
{
    hx_k_window w = hx__window_of(y);
    hx_k_avg_pool_forward_f32(out, X(0), &w, NT);
    return HX_OK;
}

/* in: dy */
LAUNCH(hx__cpu_avg_pool_backward)
{
    hx_k_window w = hx__window_of(y);
    hx_k_avg_pool_backward_f32(out, X(0), &w, NT);
    return HX_OK;
}

LAUNCH(hx__cpu_batchnorm)
{
    hx_k_bn b = hx__batchnorm_of(ex, y);
    hx_k_batchnorm_forward_f32(out, X(0), X(1), X(2), in[3], in[4], &b, NT);
    return HX_OK;
}

/* in: dy, x, gamma, running mean, running var */
LAUNCH(hx__cpu_batchnorm_backward_x)
{
    hx_k_bn b = hx__batchnorm_of(ex, y);
    hx_k_batchnorm_backward_x_f32(out, X(0), X(1), X(2), X(3), X(4), &b, NT);
    return HX_OK;
}

/* in: dy, x, running mean, running var */
LAUNCH(hx__cpu_batchnorm_backward_gamma)
{
    hx_k_bn b = hx__batchnorm_of(ex, y);
    hx_k_batchnorm_backward_gamma_f32(out, X(0), X(1), X(2), X(3), &b, NT);
    return HX_OK;
}
