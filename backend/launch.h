/* What a kernel launcher is given and how it is called: the run it is part
 * of (hx_exec) and the launcher type. Included by backend.h; what a
 * launcher decodes from its node is node_args.h's. */
#ifndef HX_BACKEND_LAUNCH_H
#define HX_BACKEND_LAUNCH_H

#include "graph/graph.h"

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
/* The CPU backend's kernel for lowered op HX_LOWERED_OP(kind) of a host
 * fusion on dtype dt (graph.h; NULL: none). */
hx_launch_fn hx__cpu_fused_kernel(hx_op op, hx_dtype dt);

#endif
