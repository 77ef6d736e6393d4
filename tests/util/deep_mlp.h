/* The deep MLP the offload tests and bench_offload train: `layers` layers
 * of relu(h W + b) (W width x width) on the DEVICE target, mse loss
 * against y, Adam (lr 1e-3) on every parameter. Parameters are the ones
 * offload moves; activations stay small, so the ratio parameters / device
 * peak grows with the depth. */
#ifndef HX_TEST_DEEP_MLP_H
#define HX_TEST_DEEP_MLP_H

#include "hetex.h"

typedef struct deep_mlp {
    hx_graph *g;
    hx_tensor *x, *y, *loss; /* x, y: (batch, width) inputs */
    hx_tensor **w, **b;      /* per layer */
    int layers;
    size_t param_bytes;
} deep_mlp;

/* HX_OK, or the failing call's status with hx_last_error() set; *m is then
 * freed. */
hx_status deep_mlp_build(int batch, int width, int layers, deep_mlp *m);
void deep_mlp_free(deep_mlp *m);

/* Checks (tests/util/testutil.h) that sessions a and b of m hold the same
 * bytes in every parameter; a failure names `what` and the parameter. */
void deep_mlp_check_same_params(hx_session *a, hx_session *b, const deep_mlp *m,
                                const char *what);

#endif
