/* Direct 2-D convolutions in double over f32 values (NCHW, groups, stride,
 * padding, dilation: hx_k_window), the tests' reference for convolutions
 * that do not go through im2col: the lowered ones (graph/lower.c), on emu
 * (tests/test_lower.c) and through cuDNN (tests/gpu/test_gpu_cudnn.c). */
#ifndef HX_CONV_REF_H
#define HX_CONV_REF_H

#include "kernels/cpu/hx_kernels.h"

typedef enum conv_ref_dir {
    CONV_REF_FORWARD,         /* a = x (N, C, H, W), b = w -> y (N, C_out, OH, OW) */
    CONV_REF_BACKWARD_DATA,   /* a = dy, b = w -> dx (N, C, H, W) */
    CONV_REF_BACKWARD_FILTER  /* a = dy, b = x -> dw (C_out, C / groups, kh, kw) */
} conv_ref_dir;

/* The direction's result into out (zeroed first), and when mag is not
 * NULL the sum of the absolute values of each element's products (what
 * bounds its rounding error). */
void conv_ref(conv_ref_dir dir, const hx_k_window *w, int64_t C_out, int64_t groups,
              const float *a, const float *b, double *out, double *mag);
/* Elements of the direction's result. */
int64_t conv_ref_numel(conv_ref_dir dir, const hx_k_window *w, int64_t C_out, int64_t groups);

#endif
