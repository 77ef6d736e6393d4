/* The row kernels of kernels/cpu/rows_body.h, one row each, for one ISA
 * path: all paths give the same bits (test_vmath), so hx__rows() may pick
 * any. kernels/cpu/rows.c runs them over rows and threads. */
#ifndef HX_ROWS_PATH_H
#define HX_ROWS_PATH_H

#include <stdint.h>

typedef struct hx_rows_path {
    void (*softmax_forward)(float *y, const float *x, int64_t n);
    void (*softmax_backward)(float *dx, const float *dy, const float *y, int64_t n);
    void (*log_softmax_forward)(float *y, const float *x, int64_t n); /* y may be x */
    void (*log_softmax_backward)(float *dx, const float *dy, const float *y, int64_t n);
    void (*layernorm_stats)(const float *x, int64_t n, float eps, float *mean, float *rstd);
    void (*layernorm_forward)(float *y, const float *x, const float *gamma, const float *beta,
                              float eps, int64_t n);
    void (*layernorm_backward_x)(float *dx, const float *dy, const float *x, const float *gamma,
                                 float eps, int64_t n);
    /* dgamma[lo:hi] += dy[lo:hi] * (x[lo:hi] - mean) * rstd */
    void (*layernorm_gamma_add)(float *dgamma, const float *dy, const float *x, float mean,
                                float rstd, int64_t lo, int64_t hi);
} hx_rows_path;

extern const hx_rows_path hx__rows_scalar, hx__rows_avx2, hx__rows_avx512;

/* The path for hx_k_isa() (HX_ISA lowers it). */
const hx_rows_path *hx__rows(void);

#endif
