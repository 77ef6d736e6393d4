/* CPU launchers of the convolutional ops (graph/ops_conv.c): f32 buffers
 * (16-bit nodes are widened by backend_cpu_widen.c). */
#ifndef HX_BACKEND_CPU_CONV_H
#define HX_BACKEND_CPU_CONV_H

#include "backend/launch.h"

#define HX_CPU_CONV_LAUNCHER(name) \
    hx_status name(const hx_exec *ex, const hx_tensor *y, void *out, void *const *in)
HX_CPU_CONV_LAUNCHER(hx__cpu_im2col);
HX_CPU_CONV_LAUNCHER(hx__cpu_col2im);
HX_CPU_CONV_LAUNCHER(hx__cpu_conv_gemm);
HX_CPU_CONV_LAUNCHER(hx__cpu_conv_gemm_backward_cols);
HX_CPU_CONV_LAUNCHER(hx__cpu_conv_gemm_backward_w);
HX_CPU_CONV_LAUNCHER(hx__cpu_max_pool);
HX_CPU_CONV_LAUNCHER(hx__cpu_max_pool_backward);
HX_CPU_CONV_LAUNCHER(hx__cpu_avg_pool);
HX_CPU_CONV_LAUNCHER(hx__cpu_avg_pool_backward);
/* in: x, gamma, beta, running mean, running var (written in HX_RUN_TRAIN runs) */
HX_CPU_CONV_LAUNCHER(hx__cpu_batchnorm);
HX_CPU_CONV_LAUNCHER(hx__cpu_batchnorm_backward_x);
HX_CPU_CONV_LAUNCHER(hx__cpu_batchnorm_backward_gamma);

#endif
