/* What a kernel launcher is given and how it is called: the run it is part
 * of (hx_exec), the launcher type, and the helpers every backend's update
 * launchers share. Included by backend.h; the launcher files include it
 * through there. */
#ifndef HX_BACKEND_LAUNCH_H
#define HX_BACKEND_LAUNCH_H

#include "graph/graph.h"
#include "kernels/cpu/hx_kernels.h"

/* What a launcher may know about the run it is part of. */
typedef struct hx_exec {
    int nthreads;       /* kernel threads of the lane running it (plan_units.c shares out n_threads) */
    int64_t step;       /* training steps done before this run */
    bool train;
    float grad_unscale; /* 1 / loss scale, for update nodes */
    float grad_clip;    /* the clip coefficient of this step's gradients (1: none) */
    double lr_scale;    /* multiplies every update's learning rate */
} hx_exec;

/* Runs one node: out and in[] are the node's output and inputs, resolved
 * when the plan was bound. Returns HX_OK or an error with the message set. */
typedef hx_status (*hx_launch_fn)(const hx_exec *ex, const hx_tensor *node, void *out,
                                  void *const *in);

/* The CPU backend's kernel for an op (NULL: the op has no CPU kernel). */
hx_launch_fn hx__cpu_kernel(hx_op op);

/* An update node's learning rate in this run. */
static inline double hx__update_lr(const hx_exec *ex, const hx_optimizer_config *c)
{
    return c->lr * ex->lr_scale;
}

/* Update nodes: in = param, grad, its optimizer state, then (when
 * attr.i[0] names its index: graph/autodiff.c fuse_half_copy) the half
 * copy of the param the update writes. The gradient may be f32, f16 or
 * bf16. How the optimizer kernels read and write them in this run: */
static inline hx_optim_io hx__update_io(const hx_exec *ex, const hx_tensor *u, void *const *in,
                                        int nthreads)
{
    hx_optim_io io = hx_optim_io_f32(in[1], nthreads);
    io.grad_dtype = (hx_kdtype)u->src[1]->dtype;
    io.grad_unscale = ex->grad_unscale;
    io.grad_clip = ex->grad_clip;
    int half = (int)u->attr.i[0];
    if (half) {
        io.param_half = in[half];
        io.param_half_dtype = (hx_kdtype)u->src[half]->dtype;
    }
    return io;
}

/* The k-th optimizer state buffer of update node u, NULL past its state. */
static inline void *hx__update_state(const hx_tensor *u, void *const *in, int k)
{
    int n_state = u->n_src - 2 - (u->attr.i[0] != 0);
    return k < n_state ? in[2 + k] : NULL;
}

#endif
